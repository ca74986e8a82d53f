//! Retention on the real broker: expired segments are deleted from the disk, the log start moves
//! and survives `kill -9`, and a consumer below it gets OFFSET_OUT_OF_RANGE and resets.

use std::time::Duration;

use seedlog::client::consumer::ResetReason;
use seedlog::types::TopicPartition;

use super::broker_process::{temp_dir, BrokerProcess};
use super::real_tcp::{create, earliest_consumer, produce, produce_stamped};

fn segment_files(broker: &BrokerProcess, partition: &str) -> usize {
    std::fs::read_dir(broker.data.join(partition))
        .expect("partition directory")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".log"))
        .count()
}

async fn log_start(address: &str, partition: &TopicPartition) -> i64 {
    let mut consumer = earliest_consumer(address);
    let starts = consumer
        .list_offsets(std::slice::from_ref(partition), -2)
        .await
        .expect("ListOffsets earliest");
    starts[0].1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_expired_segments_and_a_consumer_below_the_start_resets() {
    let dir = temp_dir("retention");
    let mut broker = BrokerProcess::start(&dir, &["log.retention.check.interval.ms=100"], &[]);
    let configs = [
        ("flush.messages", "1"),
        ("segment.bytes", "1024"),
        // Long enough that the record stamped now below outlives the test, while every record
        // stamped 0 (1970) is long expired.
        ("retention.ms", "600000"),
    ];
    create(&broker.address, "aging", 1, &configs).await;
    // The helper stamps every record with timestamp 0: each closed segment is long expired.
    produce(&broker.address, "aging", 1, "all", "old", 200).await;
    let partition = TopicPartition::new("aging", 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut start = 0;
    while start == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        start = log_start(&broker.address, &partition).await;
    }
    assert_eq!(
        start, 200,
        "every record expired: the whole log went, as in Kafka"
    );
    assert_eq!(
        segment_files(&broker, "aging-0"),
        1,
        "only an empty active segment is left"
    );
    let checkpoint = std::fs::read_to_string(broker.data.join("log-start-offset-checkpoint"))
        .expect("the new start is checkpointed");
    assert!(
        checkpoint.contains(&format!("aging 0 {start}")),
        "{checkpoint}"
    );

    // A consumer positioned below the start is told OFFSET_OUT_OF_RANGE and resets to it.
    let mut reader = earliest_consumer(&broker.address);
    reader.assign(std::slice::from_ref(&partition));
    reader.seek(&partition, 0);
    let mut reset = None;
    while reset.is_none() && tokio::time::Instant::now() < deadline {
        let polled = reader.poll(Duration::from_millis(500)).await.expect("poll");
        assert!(polled.records.is_empty(), "nothing is left to read");
        reset = polled.resets.first().cloned();
    }
    let reset = reset.expect("a reset");
    assert_eq!(reset.offset, start);
    assert!(
        matches!(reset.reason, ResetReason::OffsetOutOfRange { position: 0 }),
        "{reset:?}"
    );
    // The next write lands at the log start, and the reader gets it there. It is stamped now:
    // stamped 0 like the others, it would expire at once, and a retention check (every 100 ms)
    // that rolled it away before the reader's fetch (or before the restart below) would move
    // the start past it.
    let now_ms = seedlog::runtime::clock::wall_clock_ms();
    produce_stamped(&broker.address, "aging", 1, "all", "new", 1, now_ms).await;
    let mut first = None;
    while first.is_none() && tokio::time::Instant::now() < deadline {
        let polled = reader.poll(Duration::from_millis(500)).await.expect("poll");
        first = polled.records.first().map(|record| record.offset);
    }
    assert_eq!(first, Some(start), "reading resumes at the log start");

    // The start survives kill -9: the deleted segments do not come back.
    broker.kill9();
    broker.restart();
    assert_eq!(log_start(&broker.address, &partition).await, start);
    let log = broker.stop();
    assert!(log.contains("retention deleted segments"), "{log}");
}
