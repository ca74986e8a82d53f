//! Starts the real `seedlog broker` binary on a free loopback port with its own data directory.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A broker process, killed when dropped.
pub(crate) struct BrokerProcess {
    child: Child,
    /// `127.0.0.1:port`.
    pub(crate) address: String,
    /// The data directory (`log.dirs`).
    pub(crate) data: PathBuf,
    config: PathBuf,
    log: PathBuf,
}

/// A fresh, empty directory under the system temp dir, unique per call.
pub(crate) fn temp_dir(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let unique = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir =
        std::env::temp_dir().join(format!("seedlog-it-{name}-{}-{unique}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

impl BrokerProcess {
    /// Writes a config into `dir` and starts the broker, optionally under a wrapper command
    /// (e.g. strace). Waits until it accepts connections.
    pub(crate) fn start(dir: &Path, extra: &[&str], wrapper: &[&str]) -> BrokerProcess {
        let port = free_port();
        let data = dir.join("data");
        let config = dir.join("server.properties");
        let mut text = format!(
            "node.id=0\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}\n",
            data.display()
        );
        for line in extra {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(&config, text).expect("write config");
        let log = dir.join("broker.log");
        let child = spawn(&config, &log, wrapper);
        let broker = BrokerProcess {
            child,
            address: format!("127.0.0.1:{port}"),
            data,
            config,
            log,
        };
        broker.wait_ready();
        broker
    }

    fn wait_ready(&self) {
        for _ in 0..200 {
            if std::net::TcpStream::connect(&self.address).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("broker did not start; log:\n{}", self.log_text());
    }

    /// What the broker wrote to stderr.
    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, like `kill -9`.
    pub(crate) fn kill9(&mut self) {
        self.kill_group();
    }

    /// SIGKILL to the broker's whole process group, so a wrapper's tracee (strace detaches, it
    /// does not kill, when it is killed itself) never outlives the test.
    fn kill_group(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts again with the same config and data (after [`kill9`](Self::kill9) or
    /// [`terminate`](Self::terminate)).
    pub(crate) fn restart(&mut self) {
        self.child = spawn(&self.config, &self.log, &[]);
        self.wait_ready();
    }

    /// Stops with `kill -9` and returns the log (tests that do not test the shutdown).
    pub(crate) fn stop(mut self) -> String {
        self.kill_group();
        self.log_text()
    }

    /// Sends SIGTERM and waits (at most 30 s) for the process to exit; returns its status.
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill")
            .args(["-TERM", &pid])
            .stderr(Stdio::null())
            .status();
        for _ in 0..600 {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no exit 30 s after SIGTERM; log:\n{}", self.log_text());
    }

    /// Waits (at most `timeout`) for the process to exit by itself; its status if it did.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let step = Duration::from_millis(20);
        for _ in 0..=timeout.as_millis() / step.as_millis() {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return Some(status);
            }
            std::thread::sleep(step);
        }
        None
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory, in KiB, from `/proc/<pid>/status`.
    pub(crate) fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    /// Virtual memory (what allocations reserved, touched or not), in KiB.
    pub(crate) fn virtual_kib(&self) -> u64 {
        self.status_kib("VmSize:")
    }

    fn status_kib(&self, key: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the broker is running");
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("a VmRSS line")
    }
}

fn spawn(config: &Path, log: &Path, wrapper: &[&str]) -> Child {
    let binary = env!("CARGO_BIN_EXE_seedlog");
    let mut command = match wrapper.split_first() {
        Some((program, arguments)) => {
            let mut command = Command::new(program);
            command.args(arguments).arg(binary);
            command
        }
        None => Command::new(binary),
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    command
        .args(["broker", "--config"])
        .arg(config)
        .env("SEEDLOG_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("spawn seedlog broker")
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill_group();
    }
}
