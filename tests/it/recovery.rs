//! A restart after `kill -9` recovers the log: every acknowledged record is there, a torn tail is
//! truncated, and new records continue at the right offsets.

use std::io::Write;

use super::broker_process::{temp_dir, BrokerProcess};
use super::real_tcp::{consume_all, create, produce};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_then_restart_keeps_every_acknowledged_record() {
    let dir = temp_dir("kill9");
    let mut broker = BrokerProcess::start(&dir, &[], &[]);
    create(&broker.address, "durable", 2, &[("flush.messages", "1")]).await;
    let first = produce(&broker.address, "durable", 2, "all", "before", 200).await;
    broker.kill9();
    broker.restart();
    let second = produce(&broker.address, "durable", 2, "all", "after", 100).await;
    let read = consume_all(&broker.address, "durable", 2, 300).await;
    let values: Vec<&str> = read
        .values()
        .flatten()
        .map(|(_, value)| value.as_str())
        .collect();
    assert_eq!(values.len(), 300, "nothing lost, nothing duplicated");
    for value in first.keys().chain(second.keys()) {
        assert!(values.contains(&value.as_str()), "{value} survived");
    }
    assert!(broker.stop().contains("log recovered"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_is_truncated_on_restart_and_offsets_continue() {
    let dir = temp_dir("torn");
    let mut broker = BrokerProcess::start(&dir, &[], &[]);
    create(&broker.address, "t", 1, &[]).await;
    produce(&broker.address, "t", 1, "all", "ok", 10).await;
    broker.kill9();
    let segment = broker.data.join("t-0").join("00000000000000000000.log");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .expect("segment");
    file.write_all(&[
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x01, 0x00, 0xde, 0xad,
    ])
    .expect("tear");
    drop(file);
    broker.restart();
    let offsets = produce(&broker.address, "t", 1, "all", "next", 1).await;
    assert_eq!(
        offsets["next-0"], 10,
        "the torn bytes were cut and the next offset is 10"
    );
    let read = consume_all(&broker.address, "t", 1, 11).await;
    assert_eq!(read[&0].len(), 11);
    let log = broker.stop();
    assert!(
        log.contains("truncated_bytes=14"),
        "recovery reports the cut: {log}"
    );
}
