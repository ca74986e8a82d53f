//! Topic creation, decided once for both metadata paths: a cluster's controller and a broker
//! that is its own controller run the same checks and write the same records (Kafka's
//! `ReplicationControlManager.createTopics`).
//!
//! [`create_topics`] reads a CreateTopics request: duplicated names, the name rule, defaults
//! for `-1`, a manual replica assignment or counts (not both), the partition range, the
//! replication factor and the configs. What needs the cluster (whether the name is taken, which
//! brokers are active, a fresh id, where replicas go) it asks a [`TopicCreator`], which builds
//! the records with [`topic_records`]. A `validate_only` request is answered as if created and
//! writes nothing.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::config::{BrokerConfig, TopicConfig};
use crate::protocol::ErrorCode;
use crate::types::{BrokerId, LeaderEpoch, PartitionEpoch};

use super::records::Record;

/// Why a request was refused: Kafka's error code and message.
pub type Refusal = (ErrorCode, String);

/// The consumer groups' offsets topic.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Internal topics the brokers create themselves (through the controller in a cluster).
pub const INTERNAL_TOPICS: [&str; 1] = [OFFSETS_TOPIC];

/// Most partitions one topic may have. Each partition is a directory and open files, so a request
/// asking for `i32::MAX` would exhaust the broker: it is refused instead.
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

/// Which names a creation accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    /// A client's request: names starting with `__` are reserved.
    Client,
    /// A broker creating an internal topic (or a controller taking a request a broker
    /// forwarded: brokers refuse clients' reserved names before forwarding).
    Internal,
}

/// Where a topic's replicas go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replicas {
    /// This many replicas per partition, placed by the creator.
    Factor(i16),
    /// A manual assignment: each partition's replicas, in preference order.
    Manual(Vec<Vec<BrokerId>>),
}

/// One topic to create, checked as far as the request alone allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    /// Its name.
    pub name: String,
    /// Its partition count.
    pub partitions: i32,
    /// Where its replicas go.
    pub replicas: Replicas,
    /// Its config overrides.
    pub configs: BTreeMap<String, String>,
}

/// What creates topics: a controller over the cluster's image, or a broker over its own.
pub trait TopicCreator {
    /// Whether a topic of this name exists or is being created.
    fn is_taken(&self, name: &str) -> bool;
    /// The brokers replicas may go to: registered and unfenced, by id.
    fn active_brokers(&self) -> Vec<BrokerId>;
    /// A fresh topic id, not the nil id and not taken.
    fn new_topic_id(&mut self) -> Uuid;
    /// Where the first partition's first replica goes among `active` brokers (the others
    /// follow round-robin).
    fn first_replica(&mut self, active: usize) -> usize;
}

/// The records that create `topic` with id `topic_id` (the topic, then each partition led by
/// its first replica with every replica in sync), or why the cluster cannot hold it.
pub fn topic_records(
    creator: &mut impl TopicCreator,
    topic: &NewTopic,
) -> Result<(Uuid, Vec<Record>), Refusal> {
    if creator.is_taken(&topic.name) {
        return Err((
            ErrorCode::TopicAlreadyExists,
            format!("Topic '{}' already exists.", topic.name),
        ));
    }
    let active = creator.active_brokers();
    // Each partition's replicas; the topic id is drawn before a placement's first replica.
    let (topic_id, assignment) = match &topic.replicas {
        Replicas::Manual(assignment) => {
            check_manual_assignment(assignment, &active)?;
            (creator.new_topic_id(), assignment.clone())
        }
        Replicas::Factor(factor) => {
            let wanted = usize::try_from(*factor).unwrap_or(0);
            if wanted < 1 || wanted > active.len() {
                return Err((
                    ErrorCode::InvalidReplicationFactor,
                    format!(
                        "Unable to replicate the partition {factor} time(s): The target replication factor of {factor} cannot be reached because only {} broker(s) are registered.",
                        active.len()
                    ),
                ));
            }
            let topic_id = creator.new_topic_id();
            let start = creator.first_replica(active.len());
            let assignment = (0..topic.partitions)
                .map(|partition| {
                    let first = start + partition as usize;
                    (0..wanted)
                        .map(|index| active[(first + index) % active.len()])
                        .collect()
                })
                .collect();
            (topic_id, assignment)
        }
    };
    let mut records = vec![Record::Topic {
        name: topic.name.clone(),
        topic_id,
        configs: topic.configs.clone(),
    }];
    for (partition, replicas) in (0..topic.partitions).zip(assignment) {
        records.push(Record::Partition {
            topic_id,
            partition,
            isr: replicas.clone(),
            leader: replicas[0],
            replicas,
            leader_epoch: LeaderEpoch(0),
            partition_epoch: PartitionEpoch(0),
            elr: Vec::new(),
            last_known_elr: Vec::new(),
        });
    }
    Ok((topic_id, records))
}

/// Kafka's `validateManualPartitionAssignment`: each partition's replicas are distinct active
/// brokers, and every partition has as many as the first.
fn check_manual_assignment(
    assignment: &[Vec<BrokerId>],
    active: &[BrokerId],
) -> Result<(), Refusal> {
    let refuse = |message: String| Err((ErrorCode::InvalidReplicaAssignment, message));
    let Some(first) = assignment.first() else {
        return refuse("The manual partition assignment is empty.".to_owned());
    };
    for replicas in assignment {
        if replicas.is_empty() {
            return refuse(
                "The manual partition assignment includes an empty replica list.".into(),
            );
        }
        if replicas.len() != first.len() {
            return refuse(format!(
                "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {} replica(s).",
                replicas.len(),
                first.len()
            ));
        }
        for (index, broker) in replicas.iter().enumerate() {
            if replicas[..index].contains(broker) {
                return refuse(format!(
                    "The manual partition assignment includes the broker {} more than once.",
                    broker.0
                ));
            }
            if !active.contains(broker) {
                return refuse(format!(
                    "The manual partition assignment includes broker {}, but no such broker is registered.",
                    broker.0
                ));
            }
        }
    }
    Ok(())
}

/// A CreateTopics request decided: the answer for each topic, and the records of the topics it
/// creates (none for `validate_only`).
#[derive(Debug)]
pub struct Decided {
    /// The answer, in the request's order.
    pub response: CreateTopicsResponse,
    /// The records to append, topic by topic.
    pub records: Vec<Record>,
    /// The names of the topics the records create.
    pub created: Vec<String>,
}

/// Decides a CreateTopics request (any version): see the module's doc.
pub fn create_topics(
    api_version: i16,
    body: &CreateTopicsRequest,
    names: Names,
    defaults: &BrokerConfig,
    creator: &mut impl TopicCreator,
) -> Decided {
    let mut decided = Decided {
        response: CreateTopicsResponse::default(),
        records: Vec::new(),
        created: Vec::new(),
    };
    let mut seen = std::collections::BTreeSet::new();
    let duplicated: std::collections::BTreeSet<&str> = body
        .topics
        .iter()
        .map(|topic| topic.name.as_str())
        .filter(|name| !seen.insert(*name))
        .collect();
    for topic in &body.topics {
        let outcome = if duplicated.contains(topic.name.as_str()) {
            let message = format!(
                "Create topics request contains multiple entries for the topic {}",
                topic.name.as_str()
            );
            Err((ErrorCode::InvalidRequest, message))
        } else {
            new_topic(topic, names, defaults).and_then(|new_topic| {
                let (topic_id, records) = topic_records(creator, &new_topic)?;
                Ok((new_topic, topic_id, records))
            })
        };
        let mut result = CreatableTopicResult::default()
            .with_name(topic.name.clone())
            .with_error_message(None);
        match outcome {
            Ok((new_topic, topic_id, records)) => {
                if api_version >= 5 {
                    result.num_partitions = new_topic.partitions;
                    result.replication_factor = match &new_topic.replicas {
                        Replicas::Factor(factor) => *factor,
                        Replicas::Manual(assignment) => assignment[0].len() as i16,
                    };
                }
                if api_version >= 7 {
                    result.topic_id = topic_id;
                }
                if !body.validate_only {
                    decided.records.extend(records);
                    decided.created.push(new_topic.name);
                }
            }
            Err((error, message)) => {
                result.error_code = error.code();
                if api_version >= 1 {
                    result.error_message = Some(StrBytes::from_string(message));
                }
            }
        }
        decided.response.topics.push(result);
    }
    decided
}

/// What one topic of a request asks for, or why it is refused without looking at the cluster.
fn new_topic(
    topic: &CreatableTopic,
    names: Names,
    defaults: &BrokerConfig,
) -> Result<NewTopic, Refusal> {
    let name = topic.name.to_string();
    let valid = match names {
        Names::Client => validate_topic_name(&name),
        Names::Internal => validate_created_topic_name(&name),
    };
    valid.map_err(|message| (ErrorCode::InvalidTopicException, message))?;
    let (partitions, replicas) = requested_replicas(topic, defaults)?;
    if partitions < 1 {
        return Err((
            ErrorCode::InvalidPartitions,
            "Number of partitions was set to an invalid non-positive value.".into(),
        ));
    }
    if partitions > PARTITIONS_PER_TOPIC_MAX {
        let message = format!("Number of partitions {partitions} is above seedlog's limit of {PARTITIONS_PER_TOPIC_MAX} per topic.");
        return Err((ErrorCode::InvalidPartitions, message));
    }
    let configs: BTreeMap<String, String> = topic
        .configs
        .iter()
        .filter_map(|config| {
            config
                .value
                .as_ref()
                .map(|value| (config.name.to_string(), value.to_string()))
        })
        .collect();
    TopicConfig::with_overrides(defaults, &configs)
        .map_err(|error| (ErrorCode::InvalidConfig, error.to_string()))?;
    Ok(NewTopic {
        name,
        partitions,
        replicas,
        configs,
    })
}

/// The partition count and replicas a topic asks for: counts (`-1`: the broker's defaults) or
/// a manual assignment, not both.
fn requested_replicas(
    topic: &CreatableTopic,
    defaults: &BrokerConfig,
) -> Result<(i32, Replicas), Refusal> {
    if topic.assignments.is_empty() {
        let partitions = match topic.num_partitions {
            -1 => defaults.num_partitions,
            count => count,
        };
        let factor = match topic.replication_factor {
            -1 => defaults.default_replication_factor,
            factor => factor,
        };
        if factor < 1 {
            return Err((
                ErrorCode::InvalidReplicationFactor,
                "Replication factor must be larger than 0.".into(),
            ));
        }
        return Ok((partitions, Replicas::Factor(factor)));
    }
    if topic.num_partitions != -1 || topic.replication_factor != -1 {
        let message = "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.";
        return Err((ErrorCode::InvalidRequest, message.into()));
    }
    let mut assignment = Vec::with_capacity(topic.assignments.len());
    for (index, partition) in topic.assignments.iter().enumerate() {
        if partition.partition_index != index as i32 {
            let message = "Partitions should be a consecutive 0-based integer sequence";
            return Err((ErrorCode::InvalidReplicaAssignment, message.into()));
        }
        assignment.push(
            partition
                .broker_ids
                .iter()
                .map(|id| BrokerId(id.0))
                .collect(),
        );
    }
    Ok((topic.assignments.len() as i32, Replicas::Manual(assignment)))
}

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
mod tests;
