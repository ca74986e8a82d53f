//! Compressed batches: validated by their records, stored as sent, or recompressed when the
//! topic's `compression.type` names another codec; consumers decode them either way.

use super::*;
use crate::protocol::compression::Codec;
use crate::protocol::record_batch::{validate_batch, BatchBuilder};

fn batch(codec: Codec, values: &[&str]) -> Bytes {
    let mut builder = BatchBuilder::default();
    for value in values {
        builder.push(1, None, Some(value.as_bytes()));
    }
    builder.finish_compressed(codec)
}

/// The codec of the first batch stored in partition 0 of `topic`.
fn stored_codec(harness: &Harness, topic: &str) -> i16 {
    let partition = harness
        .broker
        .partition(&TopicPartition::new(topic, 0))
        .expect("a partition");
    let crate::log::LogRead::Records {
        file,
        position,
        len,
    } = partition
        .log()
        .read(0, i64::MAX, 1 << 20)
        .expect("readable")
    else {
        panic!("no data")
    };
    let mut bytes = vec![0; len as usize];
    file.read_exact_at(&mut bytes, position).expect("read");
    validate_batch(&bytes).expect("a batch").compression()
}

#[test]
fn compressed_batches_are_stored_as_sent_and_read_back() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[]);
    for (index, codec) in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd]
        .into_iter()
        .enumerate()
    {
        let outputs = harness.produce("t", 0, 1, batch(codec, &["a", "b"]));
        assert_eq!(produced_offset(outputs), (0, 2 * index as i64), "{codec:?}");
    }
    assert_eq!(
        stored_codec(&harness, "t"),
        Codec::Gzip.id(),
        "the producer's codec is kept"
    );
    assert_eq!(
        fetched_values(harness.fetch("t", 0, 0, 0)),
        ["a", "b", "a", "b", "a", "b", "a", "b"]
    );
}

#[test]
fn a_topic_codec_recompresses_what_arrives_with_another() {
    let mut harness = Harness::new();
    harness.create_topic("z", 1, &[("compression.type", "zstd")]);
    let outputs = harness.produce("z", 0, 1, batch(Codec::None, &["x", "y", "z"]));
    assert_eq!(produced_offset(outputs), (0, 0));
    assert_eq!(stored_codec(&harness, "z"), Codec::Zstd.id());
    assert_eq!(fetched_values(harness.fetch("z", 0, 0, 0)), ["x", "y", "z"]);
    harness.create_topic("u", 1, &[("compression.type", "uncompressed")]);
    harness.produce("u", 0, 1, batch(Codec::Lz4, &["q"]));
    assert_eq!(stored_codec(&harness, "u"), Codec::None.id());
    assert_eq!(fetched_values(harness.fetch("u", 0, 0, 0)), ["q"]);
}

#[test]
fn an_unknown_topic_codec_is_refused() {
    let mut harness = Harness::new();
    let ResponseKind::CreateTopics(response) =
        harness.create_topic("bad", 1, &[("compression.type", "brotli")])
    else {
        panic!("not a CreateTopics response")
    };
    assert_eq!(
        response.topics[0].error_code,
        ErrorCode::InvalidConfig.code()
    );
}
