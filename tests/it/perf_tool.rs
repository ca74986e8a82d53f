//! `seedlog perf produce` and `seedlog perf consume` against the real broker: they run, and
//! print the lines kafka-producer-perf-test and kafka-consumer-perf-test print, so the bench's
//! parsers read them.

use std::process::Command;

use super::broker_process::{temp_dir, BrokerProcess};
use super::real_tcp::create;

fn perf(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_seedlog"))
        .arg("perf")
        .args(args)
        .output()
        .expect("run seedlog perf");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "seedlog perf {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perf_produce_and_consume_print_kafkas_summary_lines() {
    let dir = temp_dir("perf-tool");
    let broker = BrokerProcess::start(&dir, &[], &[]);
    create(&broker.address, "perf", 2, &[]).await;
    let produced = perf(&[
        "produce",
        "--bootstrap-server",
        &broker.address,
        "--topic",
        "perf",
        "--num-records",
        "5000",
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--producer-props",
        "acks=all",
        "linger.ms=1",
    ]);
    let summary = produced.lines().last().expect("a summary line");
    assert!(
        summary.starts_with("5000 records sent, ")
            && summary.contains(" records/sec (")
            && summary.contains(" MB/sec), ")
            && summary.contains(" ms avg latency, ")
            && summary.ends_with(" ms 99.9th."),
        "{summary}"
    );
    let consumed = perf(&[
        "consume",
        "--bootstrap-server",
        &broker.address,
        "--topic",
        "perf",
        "--messages",
        "5000",
    ]);
    let lines: Vec<&str> = consumed.lines().collect();
    assert!(
        lines[0].starts_with("start.time, end.time, data.consumed.in.MB"),
        "{consumed}"
    );
    let fields: Vec<&str> = lines[1].split(", ").collect();
    assert_eq!(fields.len(), 10, "{consumed}");
    assert_eq!(fields[4], "5000", "data.consumed.in.nMsg: {consumed}");
    broker.stop();
}
