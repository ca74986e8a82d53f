//! A bad config stops the broker with a message that says what and where.

use std::process::Command;

use super::broker_process::temp_dir;

fn broker_with(config: &str) -> (bool, String) {
    let dir = temp_dir("config");
    let path = dir.join("bad.properties");
    std::fs::write(&path, config).expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_seedlog"))
        .args(["broker", "--config"])
        .arg(&path)
        .output()
        .expect("run");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn an_unknown_key_is_rejected_with_its_line() {
    let (ok, stderr) = broker_with(
        "node.id=0\nlisteners=PLAINTEXT://127.0.0.1:1\nlog.dir=/tmp/x\nflush.mesages=1\n",
    );
    assert!(!ok);
    assert!(
        stderr.contains("line 4: unknown config 'flush.mesages'"),
        "{stderr}"
    );
}

#[test]
fn a_bad_value_is_rejected_with_kafkas_rule() {
    let (ok, stderr) = broker_with("log.segment.bytes=10\n");
    assert!(!ok);
    assert!(
        stderr.contains(
            "line 1: invalid value '10' for 'log.segment.bytes': value must be at least 14"
        ),
        "{stderr}"
    );
    let (ok, stderr) = broker_with("listeners=SSL://:9093\n");
    assert!(!ok);
    assert!(
        stderr.contains("listener 'SSL' uses security protocol SSL; seedlog speaks PLAINTEXT only"),
        "{stderr}"
    );
    let (ok, stderr) = broker_with("listeners=localhost:9093\n");
    assert!(!ok);
    assert!(
        stderr.contains(
            "line 1: invalid value 'localhost:9093' for 'listeners': 'localhost:9093': expected NAME://host:port"
        ),
        "{stderr}"
    );
}

#[test]
fn a_port_in_use_is_reported_once_and_the_process_exits() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("address").port();
    let dir = temp_dir("port-in-use");
    let (ok, stderr) = broker_with(&format!(
        "node.id=0\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}\n",
        dir.join("data").display()
    ));
    assert!(!ok);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert_eq!(
        errors[0].matches("Address already in use").count(),
        1,
        "the OS error once, not again as the error's source: {stderr}"
    );
    assert!(
        !stderr.contains("listening"),
        "nothing claims to listen: {stderr}"
    );
}
