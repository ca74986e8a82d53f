//! Topic configs, with defaults taken from the broker's `log.*` configs as Kafka does.

use std::collections::BTreeMap;

use super::{
    parse_at_least, parse_bool, parse_ratio, BrokerConfig, ConfigError, Configurable, Ratio,
};
use crate::config::broker::SEGMENT_BYTES_MIN;
use crate::protocol::compression::Codec;

/// Topic configuration (Kafka's `LogConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    /// `flush.messages`: fsync after this many messages; the produce that crosses the threshold
    /// is acknowledged only after the fsync completes.
    pub flush_messages: i64,
    /// `flush.ms`: fsync unflushed data at least this often (None: never by time).
    pub flush_ms: Option<i64>,
    /// `segment.bytes`: roll to a new segment past this size.
    pub segment_bytes: i32,
    /// `segment.ms`: roll when a batch's newest timestamp is this much past the active
    /// segment's first batch.
    pub segment_ms: i64,
    /// `index.interval.bytes`: bytes between two offset-index entries.
    pub index_interval_bytes: i32,
    /// `max.message.bytes`: largest record batch accepted.
    pub max_message_bytes: i32,
    /// `min.insync.replicas`: with acks=all, fewer in-sync replicas means NOT_ENOUGH_REPLICAS.
    pub min_insync_replicas: i32,
    /// `unclean.leader.election.enable`.
    pub unclean_leader_election_enable: bool,
    /// `retention.ms`: segments whose newest record is older than this are deleted (-1: never).
    pub retention_ms: i64,
    /// `retention.bytes`: the oldest segments are deleted while the log is larger (-1: no limit).
    pub retention_bytes: i64,
    /// `cleanup.policy`: `delete` (retention by time and size), `compact` (the log cleaner
    /// keeps the latest record of each key), or both.
    pub cleanup_policy: CleanupPolicy,
    /// `min.cleanable.dirty.ratio` (default `log.cleaner.min.cleanable.ratio`, 0.5): the share of
    /// the cleanable log not yet cleaned past which the cleaner compacts it.
    pub min_cleanable_dirty_ratio: Ratio,
    /// `min.compaction.lag.ms` (default `log.cleaner.min.compaction.lag.ms`, 0): a record stays
    /// uncompacted at least this long.
    pub min_compaction_lag_ms: i64,
    /// `delete.retention.ms` (default `log.cleaner.delete.retention.ms`, one day): how long a
    /// tombstone stays after the clean that first kept it (Kafka's delete horizon).
    pub delete_retention_ms: i64,
    /// `compression.type`: `None` keeps the producer's codec (Kafka's `producer`, the default);
    /// a codec (`uncompressed` is [`Codec::None`]) recompresses batches that arrive with another.
    pub compression_type: Option<Codec>,
    /// The overrides as given (persisted with the topic and echoed by CreateTopics).
    pub overrides: BTreeMap<String, String>,
}

/// `cleanup.policy`, Kafka's list of `delete` and `compact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// `delete`: retention by `retention.ms` and `retention.bytes`.
    pub delete: bool,
    /// `compact`: the log cleaner compacts the log.
    pub compact: bool,
}

impl CleanupPolicy {
    /// Kafka's default, `delete`.
    pub const DELETE: CleanupPolicy = CleanupPolicy {
        delete: true,
        compact: false,
    };

    /// The value in Kafka's notation (`delete`, `compact`, `compact,delete`).
    pub fn name(self) -> &'static str {
        match (self.compact, self.delete) {
            (true, true) => "compact,delete",
            (true, false) => "compact",
            _ => "delete",
        }
    }

    /// Parses Kafka's list; every item must be `compact` or `delete`.
    pub fn parse(key: &str, value: &str) -> Result<CleanupPolicy, ConfigError> {
        let mut policy = CleanupPolicy {
            delete: false,
            compact: false,
        };
        for item in value.split(',').map(str::trim) {
            match item.to_ascii_lowercase().as_str() {
                "delete" => policy.delete = true,
                "compact" => policy.compact = true,
                _ => {
                    return Err(ConfigError::invalid(
                        key,
                        value,
                        "String must be one of: compact, delete",
                    ))
                }
            }
        }
        Ok(policy)
    }
}

/// The type of a described config (Kafka's `ConfigDef.Type`, as far as topics use them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    /// `BOOLEAN`.
    Boolean,
    /// `INT`.
    Int,
    /// `LONG`.
    Long,
    /// `DOUBLE`.
    Double,
    /// `LIST`.
    List,
    /// `STRING`.
    String,
}

/// One effective topic config, as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedConfig {
    /// Kafka's name.
    pub name: &'static str,
    /// The effective value, in Kafka's notation.
    pub value: String,
    /// Whether the topic overrides the broker's default.
    pub overridden: bool,
    /// Its type.
    pub config_type: ConfigType,
}

impl TopicConfig {
    /// Every config seedlog applies to a topic with its effective value, sorted by name.
    /// `flush.ms` unset is Kafka's `Long.MAX_VALUE`.
    pub fn described(&self) -> Vec<DescribedConfig> {
        let compression = match self.compression_type {
            None => "producer",
            Some(Codec::None) => "uncompressed",
            Some(codec) => codec.name(),
        };
        let entries: [(&'static str, String, ConfigType); 11] = [
            (
                "compression.type",
                compression.to_owned(),
                ConfigType::String,
            ),
            (
                "flush.messages",
                self.flush_messages.to_string(),
                ConfigType::Long,
            ),
            (
                "flush.ms",
                self.flush_ms.unwrap_or(i64::MAX).to_string(),
                ConfigType::Long,
            ),
            (
                "index.interval.bytes",
                self.index_interval_bytes.to_string(),
                ConfigType::Int,
            ),
            (
                "max.message.bytes",
                self.max_message_bytes.to_string(),
                ConfigType::Int,
            ),
            (
                "min.insync.replicas",
                self.min_insync_replicas.to_string(),
                ConfigType::Int,
            ),
            (
                "retention.bytes",
                self.retention_bytes.to_string(),
                ConfigType::Long,
            ),
            (
                "retention.ms",
                self.retention_ms.to_string(),
                ConfigType::Long,
            ),
            (
                "segment.bytes",
                self.segment_bytes.to_string(),
                ConfigType::Int,
            ),
            ("segment.ms", self.segment_ms.to_string(), ConfigType::Long),
            (
                "unclean.leader.election.enable",
                self.unclean_leader_election_enable.to_string(),
                ConfigType::Boolean,
            ),
        ];
        let mut described: Vec<DescribedConfig> = entries
            .into_iter()
            .chain(self.compaction_entries())
            .map(|(name, value, config_type)| DescribedConfig {
                name,
                value,
                overridden: self.overrides.contains_key(name),
                config_type,
            })
            .collect();
        described.sort_by_key(|config| config.name);
        described
    }

    /// The log cleaner's topic configs, described.
    fn compaction_entries(&self) -> [(&'static str, String, ConfigType); 4] {
        [
            (
                "cleanup.policy",
                self.cleanup_policy.name().to_owned(),
                ConfigType::List,
            ),
            (
                "delete.retention.ms",
                self.delete_retention_ms.to_string(),
                ConfigType::Long,
            ),
            (
                "min.cleanable.dirty.ratio",
                self.min_cleanable_dirty_ratio.to_string(),
                ConfigType::Double,
            ),
            (
                "min.compaction.lag.ms",
                self.min_compaction_lag_ms.to_string(),
                ConfigType::Long,
            ),
        ]
    }

    /// The broker-wide defaults.
    pub fn defaults(broker: &BrokerConfig) -> TopicConfig {
        TopicConfig {
            flush_messages: broker.log_flush_interval_messages,
            flush_ms: broker.log_flush_interval_ms,
            segment_bytes: broker.log_segment_bytes,
            segment_ms: broker.roll_ms(),
            index_interval_bytes: broker.log_index_interval_bytes,
            max_message_bytes: broker.message_max_bytes,
            min_insync_replicas: broker.min_insync_replicas,
            unclean_leader_election_enable: broker.unclean_leader_election_enable,
            retention_ms: broker.retention_ms(),
            retention_bytes: broker.log_retention_bytes,
            cleanup_policy: CleanupPolicy::DELETE,
            min_cleanable_dirty_ratio: broker.cleaner.min_cleanable_ratio,
            min_compaction_lag_ms: broker.cleaner.min_compaction_lag_ms,
            delete_retention_ms: broker.cleaner.delete_retention_ms,
            // Kafka's broker-wide `compression.type` (default `producer`) is not a seedlog
            // broker config yet.
            compression_type: None,
            overrides: BTreeMap::new(),
        }
    }

    /// Defaults plus `overrides`, validated.
    pub fn with_overrides(
        broker: &BrokerConfig,
        overrides: &BTreeMap<String, String>,
    ) -> Result<TopicConfig, ConfigError> {
        let mut config = TopicConfig::defaults(broker);
        config.apply(
            overrides
                .iter()
                .map(|(key, value)| (key.as_str(), value.as_str())),
        )?;
        Ok(config)
    }
}

impl Configurable for TopicConfig {
    fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            "flush.messages" => self.flush_messages = parse_at_least(key, value, 1)?,
            "flush.ms" => self.flush_ms = Some(parse_at_least(key, value, 0)?),
            "segment.bytes" => self.segment_bytes = parse_at_least(key, value, SEGMENT_BYTES_MIN)?,
            "index.interval.bytes" => self.index_interval_bytes = parse_at_least(key, value, 0)?,
            "max.message.bytes" => self.max_message_bytes = parse_at_least(key, value, 0)?,
            "min.insync.replicas" => self.min_insync_replicas = parse_at_least(key, value, 1)?,
            "unclean.leader.election.enable" => {
                self.unclean_leader_election_enable = parse_bool(key, value)?
            }
            "cleanup.policy" => self.cleanup_policy = CleanupPolicy::parse(key, value)?,
            "min.cleanable.dirty.ratio" => {
                self.min_cleanable_dirty_ratio = parse_ratio(key, value)?
            }
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = parse_at_least(key, value, 0)?,
            "delete.retention.ms" => self.delete_retention_ms = parse_at_least(key, value, 0)?,
            "retention.ms" => self.retention_ms = parse_at_least(key, value, -1)?,
            "retention.bytes" => self.retention_bytes = parse_at_least(key, value, -1)?,
            "segment.ms" => self.segment_ms = parse_at_least(key, value, 1)?,
            "segment.jitter.ms" => {
                if parse_at_least::<i64>(key, value, 0)? != 0 {
                    return Err(ConfigError::not_implemented(
                        key,
                        "seedlog rolls without jitter",
                    ));
                }
            }
            "compression.type" => {
                self.compression_type = match value.trim().to_ascii_lowercase().as_str() {
                    "producer" => None,
                    "uncompressed" => Some(Codec::None),
                    name => Some(
                        Codec::from_name(name)
                            .filter(|codec| *codec != Codec::None)
                            .ok_or_else(|| {
                                ConfigError::invalid(
                            key,
                            value,
                            "expected one of uncompressed, zstd, lz4, snappy, gzip, producer",
                        )
                            })?,
                    ),
                };
            }
            "segment.index.bytes"
            | "message.timestamp.type"
            | "file.delete.delay.ms"
            | "preallocate"
            | "message.downconversion.enable" => {
                return Err(ConfigError::not_implemented(key, ""));
            }
            _ => return Err(ConfigError::unknown(key)),
        }
        self.overrides
            .insert(key.to_owned(), value.trim().to_owned());
        Ok(())
    }

    fn validate(&mut self) -> Result<(), ConfigError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_broker_defaults_and_are_remembered() {
        let broker = BrokerConfig {
            log_flush_interval_messages: 7,
            ..BrokerConfig::default()
        };
        let overrides = BTreeMap::from([("segment.bytes".to_owned(), "1024".to_owned())]);
        let config = TopicConfig::with_overrides(&broker, &overrides).expect("valid");
        assert_eq!(config.flush_messages, 7);
        assert_eq!(config.segment_bytes, 1024);
        assert_eq!(config.overrides, overrides);
    }

    #[test]
    fn unknown_and_unimplemented_keys_are_refused_with_distinct_messages() {
        let mut config = TopicConfig::defaults(&BrokerConfig::default());
        assert_eq!(
            config
                .set("flush.mesages", "1")
                .expect_err("typo")
                .to_string(),
            "unknown config 'flush.mesages'"
        );
        assert_eq!(
            config
                .set("segment.index.bytes", "1")
                .expect_err("later")
                .to_string(),
            "'segment.index.bytes' is a Kafka config that seedlog does not implement yet"
        );
        assert!(config.set("min.insync.replicas", "0").is_err());
        assert!(config.set("segment.ms", "0").is_err());
        config.set("segment.ms", "60000").expect("segment.ms");
        assert_eq!(config.segment_ms, 60_000);
    }

    #[test]
    fn cleanup_policy_takes_kafkas_list_and_the_cleaner_keys_default_from_the_broker() {
        let mut broker = BrokerConfig::default();
        broker
            .apply([
                ("log.cleaner.min.cleanable.ratio", "0.25"),
                ("log.cleaner.delete.retention.ms", "1000"),
                ("log.cleaner.min.compaction.lag.ms", "5"),
                ("log.cleaner.backoff.ms", "200"),
                ("log.cleaner.enable", "false"),
            ])
            .expect("valid");
        assert!(!broker.cleaner.enable);
        assert_eq!(broker.cleaner.backoff_ms, 200);
        let mut config = TopicConfig::defaults(&broker);
        assert_eq!(config.cleanup_policy, CleanupPolicy::DELETE);
        assert_eq!(config.min_cleanable_dirty_ratio, Ratio(0.25));
        assert_eq!(
            (config.delete_retention_ms, config.min_compaction_lag_ms),
            (1000, 5)
        );
        config.set("cleanup.policy", "compact").expect("compact");
        assert_eq!(config.cleanup_policy.name(), "compact");
        config
            .set("cleanup.policy", "delete, compact")
            .expect("both");
        assert_eq!(config.cleanup_policy.name(), "compact,delete");
        assert_eq!(
            config
                .set("cleanup.policy", "compact,shred")
                .expect_err("unknown policy")
                .to_string(),
            "invalid value 'compact,shred' for 'cleanup.policy': String must be one of: compact, delete"
        );
        assert_eq!(
            config
                .set("min.cleanable.dirty.ratio", "1.5")
                .expect_err("above 1")
                .to_string(),
            "invalid value '1.5' for 'min.cleanable.dirty.ratio': value must be no more than 1"
        );
        assert!(config.set("min.cleanable.dirty.ratio", "-0.1").is_err());
        assert!(config.set("delete.retention.ms", "-1").is_err());
        assert!(config.set("min.compaction.lag.ms", "-1").is_err());
        config
            .set("min.cleanable.dirty.ratio", "0.1")
            .expect("valid");
        assert_eq!(config.min_cleanable_dirty_ratio, Ratio(0.1));
        assert!(BrokerConfig::default()
            .apply([("log.cleaner.min.cleanable.ratio", "2")])
            .is_err());
    }

    #[test]
    fn segment_ms_defaults_from_log_roll_ms_then_log_roll_hours() {
        let mut broker = BrokerConfig::default();
        assert_eq!(TopicConfig::defaults(&broker).segment_ms, 168 * 3_600_000);
        broker.apply([("log.roll.hours", "2")]).expect("valid");
        assert_eq!(TopicConfig::defaults(&broker).segment_ms, 2 * 3_600_000);
        broker.apply([("log.roll.ms", "1500")]).expect("valid");
        assert_eq!(TopicConfig::defaults(&broker).segment_ms, 1500);
    }
}
