//! Admin calls over a [`ClientConnection`]: create topics, read metadata, list offsets.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{
    CreateTopicsRequest, MetadataRequest, MetadataResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::consumer::{list_offsets_outcomes, list_offsets_request};
use crate::protocol::ErrorCode;
use crate::runtime::client::{ClientConnection, ClientError};
use crate::types::TopicPartition;

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    /// Name.
    pub name: String,
    /// Partitions.
    pub partitions: i32,
    /// Replication factor.
    pub replication_factor: i16,
    /// Config overrides (Kafka names).
    pub configs: BTreeMap<String, String>,
}

fn name(text: &str) -> TopicName {
    TopicName(StrBytes::from_string(text.to_owned()))
}

/// Creates topics; returns each topic's outcome (Kafka error and message on failure).
pub async fn create_topics(
    connection: &mut ClientConnection,
    topics: &[NewTopic],
    timeout: Duration,
) -> Result<Vec<(String, Result<(), ClientError>)>, ClientError> {
    let creatable = topics
        .iter()
        .map(|topic| {
            let configs = topic
                .configs
                .iter()
                .map(|(key, value)| {
                    CreatableTopicConfig::default()
                        .with_name(StrBytes::from_string(key.clone()))
                        .with_value(Some(StrBytes::from_string(value.clone())))
                })
                .collect();
            CreatableTopic::default()
                .with_name(name(&topic.name))
                .with_num_partitions(topic.partitions)
                .with_replication_factor(topic.replication_factor)
                .with_configs(configs)
        })
        .collect();
    let request = CreateTopicsRequest::default()
        .with_topics(creatable)
        .with_timeout_ms(timeout.as_millis() as i32);
    let ResponseKind::CreateTopics(response) = connection
        .call_within(timeout, RequestKind::CreateTopics(request))
        .await?
    else {
        return Err(ClientError::Protocol(
            "CreateTopics answered with another API".into(),
        ));
    };
    Ok(response
        .topics
        .into_iter()
        .map(|result| {
            let outcome = match ErrorCode::from_code(result.error_code) {
                ErrorCode::None => Ok(()),
                error => Err(ClientError::Kafka {
                    error,
                    message: result
                        .error_message
                        .map(|text| text.to_string())
                        .unwrap_or_default(),
                }),
            };
            (result.name.to_string(), outcome)
        })
        .collect())
}

/// Metadata for `topics` (all topics when `None`), never auto-creating.
pub async fn metadata(
    connection: &mut ClientConnection,
    topics: Option<&[String]>,
    timeout: Duration,
) -> Result<MetadataResponse, ClientError> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    let topics = topics.map(|names| {
        names
            .iter()
            .map(|topic| MetadataRequestTopic::default().with_name(Some(name(topic))))
            .collect()
    });
    let request = MetadataRequest::default()
        .with_topics(topics)
        .with_allow_auto_topic_creation(false);
    match connection
        .call_within(timeout, RequestKind::Metadata(request))
        .await?
    {
        ResponseKind::Metadata(response) => Ok(response),
        _ => Err(ClientError::Protocol(
            "Metadata answered with another API".into(),
        )),
    }
}

/// Number of partitions of `topic`.
pub async fn partition_count(
    connection: &mut ClientConnection,
    topic: &str,
    timeout: Duration,
) -> Result<i32, ClientError> {
    let response = metadata(connection, Some(&[topic.to_owned()]), timeout).await?;
    let entry = response
        .topics
        .iter()
        .find(|entry| {
            entry
                .name
                .as_ref()
                .is_some_and(|found| found.as_str() == topic)
        })
        .ok_or_else(|| ClientError::Protocol(format!("no metadata for {topic}")))?;
    match ErrorCode::from_code(entry.error_code) {
        ErrorCode::None => Ok(entry.partitions.len() as i32),
        error => Err(ClientError::Kafka {
            error,
            message: format!("metadata for {topic}"),
        }),
    }
}

/// `ListOffsets` for each partition at `timestamp` (-1 latest, -2 earliest).
pub async fn list_offsets(
    connection: &mut ClientConnection,
    partitions: &[TopicPartition],
    timestamp: i64,
    isolation_level: i8,
    timeout: Duration,
) -> Result<BTreeMap<TopicPartition, Result<i64, ErrorCode>>, ClientError> {
    let request = list_offsets_request(partitions, timestamp, isolation_level);
    let ResponseKind::ListOffsets(response) = connection
        .call_within(timeout, RequestKind::ListOffsets(request))
        .await?
    else {
        return Err(ClientError::Protocol(
            "ListOffsets answered with another API".into(),
        ));
    };
    Ok(list_offsets_outcomes(&response))
}
