//! Fetch responses carry record bytes with sendfile(2) straight from the segment file.
//! Shown with strace; without strace the test says so and passes, unless
//! `SEEDLOG_REQUIRE_STRACE=1` (CI sets it).

use super::broker_process::{temp_dir, BrokerProcess};
use super::real_tcp::{consume_all, create, produce};

fn strace_available() -> bool {
    std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|output| output.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_sends_record_bytes_with_sendfile() {
    if !strace_available() {
        assert!(
            std::env::var("SEEDLOG_REQUIRE_STRACE").is_err(),
            "strace is required here but missing"
        );
        eprintln!("SKIP fetch_sends_record_bytes_with_sendfile: strace is not installed");
        return;
    }
    let dir = temp_dir("sendfile");
    let trace = dir.join("strace.out");
    let trace_arg = trace.display().to_string();
    let broker = BrokerProcess::start(
        &dir,
        &[],
        &["strace", "-f", "-e", "trace=sendfile", "-o", &trace_arg],
    );
    create(&broker.address, "zero-copy", 1, &[]).await;
    produce(&broker.address, "zero-copy", 1, "all", "bytes", 50).await;
    assert_eq!(
        consume_all(&broker.address, "zero-copy", 1, 50).await[&0].len(),
        50
    );
    broker.stop();
    let text = std::fs::read_to_string(&trace).expect("strace output");
    let sent: u64 = text
        .lines()
        .filter(|line| line.contains("sendfile(") && !line.contains("= -1"))
        .filter_map(|line| line.rsplit("= ").next()?.trim().parse::<u64>().ok())
        .sum();
    let logged = segment_bytes(&dir.join("data").join("zero-copy-0"));
    assert!(
        logged > 0 && sent >= logged,
        "sendfile carried the whole log ({sent} bytes sent, {logged} in segment files):\n{text}"
    );
}

/// Bytes in the segment files (`*.log`) of one partition directory.
fn segment_bytes(partition: &std::path::Path) -> u64 {
    std::fs::read_dir(partition)
        .expect("a partition directory")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "log"))
        .map(|path| std::fs::metadata(&path).expect("metadata").len())
        .sum()
}
