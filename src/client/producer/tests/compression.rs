//! `compression.type`: every batch the producer sends carries its records compressed with the
//! configured codec, and decodes to the records sent.

use super::*;
use crate::protocol::record_batch::{decode_records, validate_batch};

#[test]
fn batches_go_out_compressed_with_the_configured_codec() {
    for (name, id) in [("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)] {
        let mut core = core(&[
            ("compression.type", name),
            ("linger.ms", "5"),
            ("batch.size", "16384"),
        ]);
        send(&mut core, 0, 1);
        step(&mut core, 0, up(0));
        send(&mut core, 1, 2);
        let outputs = step(&mut core, 5, ProducerInput::Tick);
        let records: Vec<&Bytes> = outputs
            .iter()
            .filter_map(|output| match output {
                ProducerOutput::Request { request, .. } => Some(request),
                _ => None,
            })
            .flat_map(|request| &request.topic_data)
            .flat_map(|topic| &topic.partition_data)
            .map(|data| data.records.as_ref().expect("records"))
            .collect();
        assert_eq!(records.len(), 1, "{name}: one batch of two records");
        let header = validate_batch(records[0]).expect("valid");
        assert_eq!(header.compression(), id, "{name}");
        let values: Vec<Bytes> = decode_records(records[0])
            .expect("decodes")
            .into_iter()
            .map(|record| record.value.expect("a value"))
            .collect();
        assert_eq!(values, [Bytes::from("v1"), Bytes::from("v2")], "{name}");
    }
}

#[test]
fn an_unknown_codec_is_a_config_error() {
    let mut config = ProducerConfig::default();
    let error = config
        .apply([("compression.type", "brotli")])
        .expect_err("brotli is no Kafka codec");
    assert!(error.to_string().contains("compression.type"), "{error}");
}
