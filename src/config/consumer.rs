//! Consumer configs, Kafka names and defaults.

use super::{parse_at_least, parse_bool, ConfigError, Configurable};

/// `auto.offset.reset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoOffsetReset {
    /// Start at the log start offset.
    Earliest,
    /// Start at the log end offset (Kafka's default).
    Latest,
    /// Fail when there is no position.
    None,
}

/// `isolation.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLevel {
    /// Read up to the high watermark (default).
    ReadUncommitted,
    /// Read up to the last stable offset.
    ReadCommitted,
}

impl IsolationLevel {
    /// Wire value of Fetch/ListOffsets `isolation_level`.
    pub fn wire_value(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// Consumer configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// `bootstrap.servers`.
    pub bootstrap_servers: Vec<String>,
    /// `client.id`.
    pub client_id: String,
    /// `auto.offset.reset` (default `latest`).
    pub auto_offset_reset: AutoOffsetReset,
    /// `isolation.level` (default `read_uncommitted`).
    pub isolation_level: IsolationLevel,
    /// `enable.auto.commit` (default true; needs `group.id`).
    pub enable_auto_commit: bool,
    /// Whether `enable.auto.commit` was set explicitly.
    pub enable_auto_commit_explicit: bool,
    /// `fetch.min.bytes` (default 1).
    pub fetch_min_bytes: i32,
    /// `fetch.max.bytes` (default 52428800).
    pub fetch_max_bytes: i32,
    /// `fetch.max.wait.ms` (default 500).
    pub fetch_max_wait_ms: i32,
    /// `max.partition.fetch.bytes` (default 1048576).
    pub max_partition_fetch_bytes: i32,
    /// `request.timeout.ms` (default 30000).
    pub request_timeout_ms: u64,
    /// `retry.backoff.ms` (default 100).
    pub retry_backoff_ms: u64,
    /// `metadata.max.age.ms` (default 300000): metadata older than this is asked for again.
    pub metadata_max_age_ms: u64,
    /// `seedlog.truncation.detection`: `kip-320` (default, Kafka's consumer since 2.3) fences
    /// fetches with the leader epoch and, after a leader change, validates the position with
    /// OffsetsForLeaderEpoch, moving it back where the new leader's log diverges; `none`
    /// behaves as consumers before KIP-320, which may skip records written over a truncated
    /// range (the simulator's faulty variant).
    pub truncation_detection: bool,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            bootstrap_servers: Vec::new(),
            client_id: "seedlog-consumer".to_owned(),
            auto_offset_reset: AutoOffsetReset::Latest,
            isolation_level: IsolationLevel::ReadUncommitted,
            enable_auto_commit: true,
            enable_auto_commit_explicit: false,
            fetch_min_bytes: 1,
            fetch_max_bytes: 52_428_800,
            fetch_max_wait_ms: 500,
            max_partition_fetch_bytes: 1_048_576,
            request_timeout_ms: 30_000,
            retry_backoff_ms: 100,
            metadata_max_age_ms: 300_000,
            truncation_detection: true,
        }
    }
}

impl Configurable for ConsumerConfig {
    fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            "bootstrap.servers" => self.bootstrap_servers = super::parse_servers(value),
            "client.id" => self.client_id = value.to_owned(),
            "auto.offset.reset" => {
                self.auto_offset_reset = match value.trim() {
                    "earliest" => AutoOffsetReset::Earliest,
                    "latest" => AutoOffsetReset::Latest,
                    "none" => AutoOffsetReset::None,
                    _ => {
                        return Err(ConfigError::invalid(
                            key,
                            value,
                            "expected earliest, latest or none",
                        ))
                    }
                };
            }
            "isolation.level" => {
                self.isolation_level = match value.trim() {
                    "read_uncommitted" => IsolationLevel::ReadUncommitted,
                    "read_committed" => IsolationLevel::ReadCommitted,
                    _ => {
                        return Err(ConfigError::invalid(
                            key,
                            value,
                            "expected read_uncommitted or read_committed",
                        ))
                    }
                };
            }
            "enable.auto.commit" => {
                self.enable_auto_commit = parse_bool(key, value)?;
                self.enable_auto_commit_explicit = true;
            }
            "fetch.min.bytes" => self.fetch_min_bytes = parse_at_least(key, value, 0)?,
            "fetch.max.bytes" => self.fetch_max_bytes = parse_at_least(key, value, 0)?,
            "fetch.max.wait.ms" => self.fetch_max_wait_ms = parse_at_least(key, value, 0)?,
            "max.partition.fetch.bytes" => {
                self.max_partition_fetch_bytes = parse_at_least(key, value, 0)?
            }
            "request.timeout.ms" => self.request_timeout_ms = parse_at_least(key, value, 0)?,
            "retry.backoff.ms" => self.retry_backoff_ms = parse_at_least(key, value, 0)?,
            "metadata.max.age.ms" => self.metadata_max_age_ms = parse_at_least(key, value, 0)?,
            "seedlog.truncation.detection" => {
                self.truncation_detection = match value.trim() {
                    "kip-320" => true,
                    "none" => false,
                    _ => return Err(ConfigError::invalid(key, value, "expected kip-320 or none")),
                };
            }
            "group.id"
            | "group.instance.id"
            | "auto.commit.interval.ms"
            | "session.timeout.ms"
            | "heartbeat.interval.ms"
            | "max.poll.interval.ms"
            | "partition.assignment.strategy" => {
                return Err(ConfigError::not_implemented(
                    key,
                    "consumer groups come with a later issue; assign partitions instead",
                ));
            }
            _ => return Err(ConfigError::unknown(key)),
        }
        Ok(())
    }

    /// Kafka: `enable.auto.commit=true` set explicitly without a `group.id` is invalid.
    fn validate(&mut self) -> Result<(), ConfigError> {
        if self.enable_auto_commit && self.enable_auto_commit_explicit {
            return Err(ConfigError::Conflict(
                "enable.auto.commit cannot be set to true when default group id (null) is used."
                    .to_owned(),
            ));
        }
        self.enable_auto_commit = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_refused_until_implemented_and_auto_commit_needs_a_group() {
        let mut config = ConsumerConfig::default();
        assert!(matches!(
            config.set("group.id", "g1"),
            Err(ConfigError::NotImplemented { .. })
        ));
        let mut config = ConsumerConfig::default();
        assert!(config.apply([("enable.auto.commit", "true")]).is_err());
        let mut config = ConsumerConfig::default();
        config
            .apply([
                ("auto.offset.reset", "earliest"),
                ("enable.auto.commit", "false"),
            ])
            .expect("valid");
        assert_eq!(config.auto_offset_reset, AutoOffsetReset::Earliest);
        assert!(config.set("auto.offset.reset", "smallest").is_err());
    }
}
