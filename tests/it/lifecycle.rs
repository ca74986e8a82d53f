//! Stopping and starting the real broker: SIGTERM stops cleanly (a marker, a start that skips
//! recovery), `kill -9` is recovered from the recovery point.

use seedlog::broker::CLEAN_SHUTDOWN_FILE;

use super::broker_process::{temp_dir, BrokerProcess};
use super::real_tcp::{consume_all, create, produce};

/// The fields of the last `log recovered` line, as `key=value` text.
fn last_recovery_line(log: &str) -> String {
    log.lines()
        .rev()
        .find(|line| line.contains("log recovered"))
        .expect("a log recovered line")
        .to_owned()
}

/// `rounds` producers of `per_round` records each, one after the other (many small batches, so
/// small segments roll); returns how many records were acknowledged.
async fn produce_in_rounds(
    address: &str,
    topic: &str,
    partitions: i32,
    rounds: usize,
    per_round: usize,
) -> usize {
    let mut sent = 0;
    for round in 0..rounds {
        let prefix = format!("r{round}");
        sent += produce(address, topic, partitions, "all", &prefix, per_round)
            .await
            .len();
    }
    sent
}

fn field(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_leaves_a_clean_marker_and_the_next_start_skips_recovery() {
    let dir = temp_dir("sigterm");
    // Small segments, no flush policy: only rolls flush; the active segments' records sit in the
    // page cache until the shutdown.
    let mut broker = BrokerProcess::start(&dir, &["log.segment.bytes=1024"], &[]);
    create(&broker.address, "kept", 2, &[]).await;
    let sent = produce_in_rounds(&broker.address, "kept", 2, 20, 20).await;
    let status = broker.terminate();
    assert!(status.success(), "exit status {status}");
    let log = broker.log_text();
    assert!(log.contains("stopped clean_shutdown_marker=true"), "{log}");
    assert!(
        broker.data.join(CLEAN_SHUTDOWN_FILE).exists(),
        "marker written"
    );

    broker.restart();
    assert!(
        !broker.data.join(CLEAN_SHUTDOWN_FILE).exists(),
        "the marker is removed before serving"
    );
    let line = last_recovery_line(&broker.log_text());
    assert_eq!(field(&line, "clean_shutdown"), "true", "{line}");
    assert_eq!(field(&line, "batches"), "0", "nothing recovered: {line}");
    assert_eq!(field(&line, "truncated_bytes"), "0", "{line}");
    let segments: usize = field(&line, "unscanned_segments").parse().expect("count");
    assert!(segments > 6, "several segments, all trusted: {line}");
    let read = consume_all(&broker.address, "kept", 2, sent).await;
    let count: usize = read.values().map(Vec::len).sum();
    assert_eq!(count, sent, "every record is back");

    // A second stop with nothing new to flush is clean too.
    assert!(broker.terminate().success());
    broker.restart();
    let line = last_recovery_line(&broker.log_text());
    assert_eq!(field(&line, "clean_shutdown"), "true", "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_recovers_only_what_lies_past_the_recovery_point() {
    let dir = temp_dir("recovery-point");
    let mut broker = BrokerProcess::start(
        &dir,
        &[
            "log.segment.bytes=1024",
            "log.flush.interval.messages=1",
            "log.flush.offset.checkpoint.interval.ms=100",
        ],
        &[],
    );
    create(&broker.address, "t", 1, &[]).await;
    let sent = produce_in_rounds(&broker.address, "t", 1, 30, 10).await;
    // Let the recovery-point checkpoint catch up with the flushed log.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    broker.kill9();
    assert!(
        !broker.data.join(CLEAN_SHUTDOWN_FILE).exists(),
        "no marker after kill -9"
    );
    broker.restart();
    let line = last_recovery_line(&broker.log_text());
    assert_eq!(field(&line, "clean_shutdown"), "false", "{line}");
    let unscanned: usize = field(&line, "unscanned_segments").parse().expect("count");
    let batches: usize = field(&line, "batches").parse().expect("count");
    assert!(
        unscanned >= 4,
        "segments below the recovery point are not read: {line}"
    );
    assert!(
        batches < 30 / 3,
        "only the active segment is scanned: {line}"
    );
    let read = consume_all(&broker.address, "t", 1, sent).await;
    assert_eq!(read.values().map(Vec::len).sum::<usize>(), sent);
}
