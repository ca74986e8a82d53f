//! A broker whose only log directory fails halts, as Kafka's does (issue 47): the data
//! directory is a small tmpfs that fills up under a running broker; the broker exits non-zero
//! saying why ("Shutdown broker because all log dirs in ... have failed"), and once space is
//! freed a restart recovers the log, keeps every acknowledged record, and serves again.
//!
//! Mounting needs root (or `sudo -n`); elsewhere the test says so and passes, unless
//! `SEEDLOG_REQUIRE_MOUNT=1` (`.ci/run` sets it where it can mount).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use seedlog::client::producer::ProducerRecord;
use seedlog::config::{Configurable, ProducerConfig};
use seedlog::runtime::producer::Producer;

use super::broker_process::{temp_dir, BrokerProcess};
use super::real_tcp::{consume_all, create};

/// A tmpfs mounted at a directory, unmounted when dropped.
struct Tmpfs {
    at: PathBuf,
    sudo: bool,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`mount -o size=...`) at `at`, as root or with `sudo -n`.
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).expect("mount point");
        for sudo in [false, true] {
            let options = format!("size={size}");
            if run(sudo, &["mount", "-t", "tmpfs", "-o", &options, "tmpfs"], at) {
                return Some(Tmpfs {
                    at: at.to_owned(),
                    sudo,
                });
            }
        }
        None
    }

    /// Frees space: the same tmpfs, larger (its files stay).
    fn grow(&self, size: &str) {
        let options = format!("remount,size={size}");
        assert!(
            run(self.sudo, &["mount", "-o", &options], &self.at),
            "remount"
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        run(self.sudo, &["umount", "-l"], &self.at);
    }
}

fn run(sudo: bool, command: &[&str], at: &Path) -> bool {
    let mut process = if sudo {
        let mut process = Command::new("sudo");
        process.arg("-n").args(command);
        process
    } else {
        let mut process = Command::new(command[0]);
        process.args(&command[1..]);
        process
    };
    process
        .arg(at)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Sends `count` records of 16 KiB with acks=all and no retries; returns the values
/// acknowledged (the rest failed, or never got an answer because the broker went away).
async fn produce_until_it_fails(address: &str, count: usize) -> Vec<String> {
    let mut config = ProducerConfig::default();
    config
        .apply([
            ("bootstrap.servers", address),
            ("acks", "all"),
            ("enable.idempotence", "false"),
            ("retries", "0"),
            ("max.in.flight.requests.per.connection", "1"),
            ("request.timeout.ms", "3000"),
            ("delivery.timeout.ms", "5000"),
        ])
        .expect("config");
    let producer = Producer::start(config).expect("producer");
    let padding = "x".repeat(16 * 1024);
    let mut deliveries = Vec::new();
    for index in 0..count {
        let value = format!("full-{index}-{padding}");
        let record = ProducerRecord {
            topic: "t".to_owned(),
            partition: Some(0),
            key: None,
            value: Some(Bytes::from(value.clone())),
            timestamp_ms: 0,
        };
        deliveries.push((value, producer.send(record).await));
    }
    let mut acknowledged = Vec::new();
    for (value, delivery) in deliveries {
        if delivery.wait().await.is_ok() {
            acknowledged.push(value);
        }
    }
    acknowledged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_directory_halts_the_broker_and_a_restart_recovers() {
    let dir = temp_dir("full");
    let Some(tmpfs) = Tmpfs::mount(&dir.join("data"), "1m") else {
        assert!(
            std::env::var("SEEDLOG_REQUIRE_MOUNT").is_err(),
            "SEEDLOG_REQUIRE_MOUNT is set but a tmpfs cannot be mounted here"
        );
        eprintln!("skipped: mounting a tmpfs needs root or sudo -n");
        return;
    };
    let mut broker = BrokerProcess::start(&dir, &["log.flush.interval.messages=1"], &[]);
    create(&broker.address, "t", 1, &[]).await;
    let acknowledged = produce_until_it_fails(&broker.address, 200).await;
    assert!(
        !acknowledged.is_empty() && acknowledged.len() < 200,
        "some records fit, the disk filled before the rest: {} acknowledged",
        acknowledged.len()
    );
    let status = broker
        .wait_exit(Duration::from_secs(10))
        .expect("the broker exits when its only log directory fails");
    assert!(!status.success(), "a non-zero exit: {status}");
    let log = broker.log_text();
    assert!(
        log.contains("Shutdown broker because all log dirs in"),
        "the broker says why: {log}"
    );
    tmpfs.grow("64m");
    broker.restart();
    let read = consume_all(&broker.address, "t", 1, acknowledged.len()).await;
    let values: Vec<&str> = read[&0].iter().map(|(_, value)| value.as_str()).collect();
    for value in &acknowledged {
        assert!(
            values.contains(&value.as_str()),
            "an acknowledged record survived"
        );
    }
    let after = produce_until_it_fails(&broker.address, 3).await;
    assert_eq!(after.len(), 3, "the restarted broker serves again");
    drop(broker);
    drop(tmpfs);
}
