//! The metadata image: topics, their ids, partition counts and configs.
//!
//! It is a pure state machine applied from metadata records. On a single broker the records
//! live in a local log, `__cluster_metadata-0`, as RecordBatches whose record values are JSON.
//! A cluster's brokers apply the controller quorum's binary records (`crate::metadata`) and keep
//! this image in step with them; issue 42 leaves one record format.
//! A topic exists only once its record is durable, so a crash can never leave acknowledged data
//! in a topic that recovery does not know.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::{BrokerConfig, ConfigError, TopicConfig};

/// Directory of the local metadata log.
pub const METADATA_LOG_DIRECTORY: &str = "__cluster_metadata-0";

/// Where a combined node's controller keeps its files (`process.roles=broker,controller`): a
/// directory of `log.dirs` of its own, since the broker and the controller each keep a
/// `__cluster_metadata-0` log. The broker never takes it for a stray partition.
pub const COMBINED_CONTROLLER_DIRECTORY: &str = "__controller";

/// One metadata record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum MetadataRecord {
    /// A topic was created.
    Topic {
        /// Topic name.
        name: String,
        /// Topic id (UUID text).
        topic_id: String,
        /// Number of partitions.
        partitions: i32,
        /// Replication factor.
        replication_factor: i16,
        /// Config overrides.
        configs: BTreeMap<String, String>,
    },
}

impl MetadataRecord {
    /// JSON bytes for the record value.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("metadata records always serialize")
    }

    /// Parses a record value.
    pub fn from_bytes(bytes: &[u8]) -> Result<MetadataRecord, String> {
        serde_json::from_slice(bytes).map_err(|error| error.to_string())
    }
}

/// A topic as the broker knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    /// Name.
    pub name: String,
    /// Id (Fetch v13+ addresses topics by id).
    pub topic_id: Uuid,
    /// Partition count.
    pub partitions: i32,
    /// Replication factor.
    pub replication_factor: i16,
    /// Effective config.
    pub config: TopicConfig,
}

/// All topics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataImage {
    topics: BTreeMap<String, TopicMetadata>,
    names_by_id: BTreeMap<Uuid, String>,
}

impl MetadataImage {
    /// Applies one record.
    pub fn apply(&mut self, record: &MetadataRecord, broker: &BrokerConfig) -> Result<(), String> {
        match record {
            MetadataRecord::Topic {
                name,
                topic_id,
                partitions,
                replication_factor,
                configs,
            } => {
                let topic_id =
                    Uuid::parse_str(topic_id).map_err(|error| format!("topic id: {error}"))?;
                let config = TopicConfig::with_overrides(broker, configs)
                    .map_err(|error: ConfigError| error.to_string())?;
                if self.topics.contains_key(name) || self.names_by_id.contains_key(&topic_id) {
                    return Err(format!("topic {name} ({topic_id}) created twice"));
                }
                self.names_by_id.insert(topic_id, name.clone());
                self.topics.insert(
                    name.clone(),
                    TopicMetadata {
                        name: name.clone(),
                        topic_id,
                        partitions: *partitions,
                        replication_factor: *replication_factor,
                        config,
                    },
                );
                Ok(())
            }
        }
    }

    /// A topic by name.
    pub fn topic(&self, name: &str) -> Option<&TopicMetadata> {
        self.topics.get(name)
    }

    /// A topic by id.
    pub fn topic_by_id(&self, topic_id: Uuid) -> Option<&TopicMetadata> {
        self.names_by_id
            .get(&topic_id)
            .and_then(|name| self.topics.get(name))
    }

    /// Every topic, by name.
    pub fn topics(&self) -> impl Iterator<Item = &TopicMetadata> {
        self.topics.values()
    }
}

/// Internal topics the brokers create themselves (through the controller in a cluster).
pub const INTERNAL_TOPICS: [&str; 1] = [crate::broker::group::OFFSETS_TOPIC];

/// [`validate_topic_name`], except that a broker's own creation of an internal topic is legal.
pub fn validate_created_topic_name(name: &str) -> Result<(), String> {
    if INTERNAL_TOPICS.contains(&name) {
        return Ok(());
    }
    validate_topic_name(name)
}

/// Kafka's topic name rule: 1–249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`; names
/// starting with `__` are reserved for internal topics.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    const MAX_NAME_LENGTH: usize = 249;
    if name.is_empty() {
        return Err("Topic name is illegal, it can't be empty".to_owned());
    }
    if name == "." || name == ".." {
        return Err("Topic name cannot be \".\" or \"..\"".to_owned());
    }
    if name.len() > MAX_NAME_LENGTH {
        return Err(format!(
            "Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    if name.starts_with("__") {
        return Err(format!(
            "Topic name \"{name}\" is reserved for internal topics"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_apply_once() {
        let record = MetadataRecord::Topic {
            name: "orders".into(),
            topic_id: Uuid::from_u128(7).to_string(),
            partitions: 3,
            replication_factor: 1,
            configs: BTreeMap::from([("flush.messages".into(), "1".into())]),
        };
        let decoded = MetadataRecord::from_bytes(&record.to_bytes()).expect("round trip");
        assert_eq!(decoded, record);
        let broker = BrokerConfig::default();
        let mut image = MetadataImage::default();
        image.apply(&record, &broker).expect("first apply");
        assert_eq!(
            image.topic("orders").expect("exists").config.flush_messages,
            1
        );
        assert_eq!(
            image
                .topic_by_id(Uuid::from_u128(7))
                .expect("by id")
                .partitions,
            3
        );
        assert!(
            image.apply(&record, &broker).is_err(),
            "a topic cannot be created twice"
        );
    }

    #[test]
    fn topic_names_follow_kafkas_rules() {
        assert!(validate_topic_name("orders.v2_x-1").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a/b").is_err());
        assert!(validate_topic_name(&"x".repeat(250)).is_err());
        assert!(validate_topic_name("__consumer_offsets").is_err());
    }
}
