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
    /// `default.api.timeout.ms` (default 60000): how long a blocking call without a timeout of
    /// its own (a synchronous commit) retries what failed retriably.
    pub default_api_timeout_ms: u64,
    /// `metadata.max.age.ms` (default 300000): metadata older than this is asked for again.
    pub metadata_max_age_ms: u64,
    /// `seedlog.truncation.detection`: `kip-320` (default, Kafka's consumer since 2.3) fences
    /// fetches with the leader epoch and, after a leader change, validates the position with
    /// OffsetsForLeaderEpoch, moving it back where the new leader's log diverges; `none`
    /// behaves as consumers before KIP-320, which may skip records written over a truncated
    /// range (the simulator's faulty variant).
    pub truncation_detection: bool,
    /// `group.id`: the consumer group (none: assigned partitions only).
    pub group_id: Option<String>,
    /// `group.instance.id`: a static member's id.
    pub group_instance_id: Option<String>,
    /// `session.timeout.ms` (default 45000).
    pub session_timeout_ms: i32,
    /// `heartbeat.interval.ms` (default 3000).
    pub heartbeat_interval_ms: u64,
    /// `max.poll.interval.ms` (default 300000): the member's rebalance timeout.
    pub max_poll_interval_ms: i32,
    /// `auto.commit.interval.ms` (default 5000).
    pub auto_commit_interval_ms: u64,
    /// `max.poll.records` (default 500): the most records one poll returns; the rest wait for
    /// the next poll, and their partitions are not fetched meanwhile.
    pub max_poll_records: usize,
    /// `partition.assignment.strategy`: the assignors offered in JoinGroup, most preferred first
    /// (default `range,cooperative-sticky`, Kafka's: the group picks range, and the eager
    /// protocol holds while any offered assignor is eager).
    pub partition_assignment_strategy: Vec<Assignor>,
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
            default_api_timeout_ms: 60_000,
            metadata_max_age_ms: 300_000,
            truncation_detection: true,
            group_id: None,
            group_instance_id: None,
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 3_000,
            max_poll_interval_ms: 300_000,
            auto_commit_interval_ms: 5_000,
            max_poll_records: 500,
            partition_assignment_strategy: vec![Assignor::Range, Assignor::CooperativeSticky],
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
            "max.poll.records" => self.max_poll_records = parse_at_least(key, value, 1)?,
            "fetch.max.wait.ms" => self.fetch_max_wait_ms = parse_at_least(key, value, 0)?,
            "max.partition.fetch.bytes" => {
                self.max_partition_fetch_bytes = parse_at_least(key, value, 0)?
            }
            "request.timeout.ms" => self.request_timeout_ms = parse_at_least(key, value, 0)?,
            "retry.backoff.ms" => self.retry_backoff_ms = parse_at_least(key, value, 0)?,
            "default.api.timeout.ms" => {
                self.default_api_timeout_ms = parse_at_least(key, value, 0)?
            }
            "metadata.max.age.ms" => self.metadata_max_age_ms = parse_at_least(key, value, 0)?,
            "seedlog.truncation.detection" => {
                self.truncation_detection = match value.trim() {
                    "kip-320" => true,
                    "none" => false,
                    _ => return Err(ConfigError::invalid(key, value, "expected kip-320 or none")),
                };
            }
            _ => return self.set_group(key, value),
        }
        Ok(())
    }

    /// Kafka: `enable.auto.commit=true` set explicitly without a `group.id` is invalid; the
    /// heartbeat must come well within the session.
    fn validate(&mut self) -> Result<(), ConfigError> {
        if self.group_id.is_some() {
            if self.heartbeat_interval_ms >= self.session_timeout_ms as u64 {
                return Err(ConfigError::Conflict(format!(
                    "heartbeat.interval.ms={} must be lower than session.timeout.ms={}",
                    self.heartbeat_interval_ms, self.session_timeout_ms
                )));
            }
            return Ok(());
        }
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

impl ConsumerConfig {
    /// The group member's keys.
    fn set_group(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            "group.id" => self.group_id = Some(value.to_owned()).filter(|id| !id.is_empty()),
            "group.instance.id" => {
                self.group_instance_id = Some(value.to_owned()).filter(|id| !id.is_empty())
            }
            "session.timeout.ms" => self.session_timeout_ms = parse_at_least(key, value, 1)?,
            "heartbeat.interval.ms" => self.heartbeat_interval_ms = parse_at_least(key, value, 1)?,
            "max.poll.interval.ms" => self.max_poll_interval_ms = parse_at_least(key, value, 1)?,
            "auto.commit.interval.ms" => {
                self.auto_commit_interval_ms = parse_at_least(key, value, 0)?
            }
            "partition.assignment.strategy" => {
                let mut assignors = Vec::new();
                for entry in value.split(',').filter(|entry| !entry.trim().is_empty()) {
                    let assignor = Assignor::parse(entry).ok_or_else(|| {
                        ConfigError::not_implemented(
                            key,
                            &format!(
                                "{}: the seedlog consumer offers range, roundrobin and cooperative-sticky",
                                entry.trim()
                            ),
                        )
                    })?;
                    if !assignors.contains(&assignor) {
                        assignors.push(assignor);
                    }
                }
                if assignors.is_empty() {
                    return Err(ConfigError::invalid(key, value, "names no assignor"));
                }
                self.partition_assignment_strategy = assignors;
            }
            _ => return Err(ConfigError::unknown(key)),
        }
        Ok(())
    }
}

/// The assignors the seedlog consumer offers (`partition.assignment.strategy`), each under the
/// protocol name Kafka's assignor announces in JoinGroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    /// Kafka's `RangeAssignor`: consecutive ranges of each topic's partitions.
    Range,
    /// Kafka's `RoundRobinAssignor`: every subscribed partition dealt out in turn.
    RoundRobin,
    /// Kafka's `CooperativeStickyAssignor` (KIP-429): balanced, keeps each member's partitions
    /// where it can, and never hands a partition to a new owner in the rebalance that takes it
    /// from the old one (the old owner revokes it and rejoins; the next rebalance moves it).
    CooperativeSticky,
}

impl Assignor {
    /// The protocol name in JoinGroup (Kafka's `name()` of the assignor).
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
            Assignor::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// Whether the assignor follows the cooperative rebalance protocol: members keep their
    /// partitions through a rebalance and give up only those it moves.
    pub fn is_cooperative(self) -> bool {
        self == Assignor::CooperativeSticky
    }

    /// The assignor a config entry names: Kafka's protocol name or its class name.
    pub fn parse(entry: &str) -> Option<Assignor> {
        match entry.trim() {
            "range" | "org.apache.kafka.clients.consumer.RangeAssignor" => Some(Assignor::Range),
            "roundrobin" | "org.apache.kafka.clients.consumer.RoundRobinAssignor" => {
                Some(Assignor::RoundRobin)
            }
            "cooperative-sticky"
            | "org.apache.kafka.clients.consumer.CooperativeStickyAssignor" => {
                Some(Assignor::CooperativeSticky)
            }
            _ => None,
        }
    }

    /// The assignor a JoinGroup answer chose, by its protocol name.
    pub fn by_name(name: &str) -> Option<Assignor> {
        [
            Assignor::Range,
            Assignor::RoundRobin,
            Assignor::CooperativeSticky,
        ]
        .into_iter()
        .find(|assignor| assignor.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_commit_needs_a_group_and_range_roundrobin_and_cooperative_sticky_are_the_assignors() {
        let mut config = ConsumerConfig::default();
        config
            .apply([("group.id", "g1"), ("enable.auto.commit", "true")])
            .expect("valid with a group");
        assert!(config.enable_auto_commit);
        let mut config = ConsumerConfig::default();
        assert_eq!(
            config.partition_assignment_strategy,
            [Assignor::Range, Assignor::CooperativeSticky],
            "Kafka's default"
        );
        assert!(matches!(
            config.set("partition.assignment.strategy", "range,sticky"),
            Err(ConfigError::NotImplemented { .. })
        ));
        config
            .set(
                "partition.assignment.strategy",
                "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
            )
            .expect("offered");
        assert_eq!(
            config.partition_assignment_strategy,
            [Assignor::CooperativeSticky]
        );
        config
            .set(
                "partition.assignment.strategy",
                "org.apache.kafka.clients.consumer.RoundRobinAssignor, range",
            )
            .expect("both are offered");
        assert_eq!(
            config.partition_assignment_strategy,
            [Assignor::RoundRobin, Assignor::Range]
        );
        assert!(config.set("partition.assignment.strategy", " ").is_err());
        let mut config = ConsumerConfig::default();
        assert!(config
            .apply([("group.id", "g"), ("heartbeat.interval.ms", "50000")])
            .is_err());
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
