//! The real broker refuses a produced batch whose records do not parse, with Kafka's error
//! codes, and stores nothing of it: a valid batch sent afterwards lands at offset 0.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use seedlog::protocol::record_batch::build_batch;
use seedlog::protocol::ErrorCode;
use seedlog::runtime::admin::list_offsets;
use seedlog::runtime::client::ClientConnection;
use seedlog::types::TopicPartition;

use super::broker_process::{temp_dir, BrokerProcess};
use super::real_tcp::{consume_all, create, produce_batch};

const TOPIC: &str = "checked";
const TIMEOUT: Duration = Duration::from_secs(10);

/// A batch of two records whose header claims `records_count` records (`lastOffsetDelta`
/// included) and carries `attributes`, with its CRC recomputed so that only the record-level
/// validation can reject it.
fn resealed(records_count: i32, attributes: i16) -> Bytes {
    let mut batch = build_batch(&[(None, Some(b"a")), (None, Some(b"b"))], 1).to_vec();
    batch[21..23].copy_from_slice(&attributes.to_be_bytes());
    batch[23..27].copy_from_slice(&(records_count - 1).to_be_bytes());
    batch[57..61].copy_from_slice(&records_count.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(batch)
}

async fn log_end_offset(connection: &mut ClientConnection) -> i64 {
    let partition = TopicPartition::new(TOPIC, 0);
    let offsets = list_offsets(connection, std::slice::from_ref(&partition), -1, 0, TIMEOUT)
        .await
        .expect("list offsets");
    offsets[&partition].expect("latest offset")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_whose_records_do_not_parse_are_refused_with_kafkas_codes_and_store_nothing() {
    let dir = temp_dir("produce-validation");
    let broker = BrokerProcess::start(&dir, &[], &[]);
    create(&broker.address, TOPIC, 1, &[]).await;
    let mut connection = ClientConnection::connect(&broker.address, "it")
        .await
        .expect("connect");
    let version = connection.version(ApiKey::Produce).expect("Produce");
    assert!(
        version >= 8,
        "record_errors need Produce v8+, negotiated v{version}"
    );
    for acks in [1, -1] {
        let lying = produce_batch(&mut connection, TOPIC, acks, resealed(3, 0)).await;
        assert_eq!(
            lying.error_code,
            ErrorCode::InvalidRecord.code(),
            "acks={acks}: {lying:?}"
        );
        assert_eq!(lying.base_offset, -1);
        assert_eq!(lying.record_errors.len(), 1, "acks={acks}: {lying:?}");
        assert_eq!(
            lying.record_errors[0].batch_index, 2,
            "the first missing record"
        );
        let message = lying.error_message.as_deref().unwrap_or_default();
        assert!(message.contains("recordsCount is 3"), "{message}");

        let codec_7 = produce_batch(&mut connection, TOPIC, acks, resealed(2, 7)).await;
        assert_eq!(
            codec_7.error_code,
            ErrorCode::UnknownServerError.code(),
            "acks={acks}: Kafka's CompressionType.forId throws IllegalArgumentException"
        );
        assert!(codec_7.record_errors.is_empty(), "a batch-level error");
        assert_eq!(
            log_end_offset(&mut connection).await,
            0,
            "acks={acks}: nothing stored"
        );
    }
    let valid = produce_batch(&mut connection, TOPIC, -1, resealed(2, 0)).await;
    assert_eq!((valid.error_code, valid.base_offset), (0, 0), "{valid:?}");
    assert_eq!(log_end_offset(&mut connection).await, 2);
    let read = consume_all(&broker.address, TOPIC, 1, 2).await;
    assert_eq!(
        read[&0],
        [(0, "a".to_owned()), (1, "b".to_owned())],
        "only the valid batch was stored"
    );
    broker.stop();
}
