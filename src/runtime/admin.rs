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
    let request = list_offsets_request(partitions, |_| -1, timestamp, isolation_level);
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

/// A group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    /// The group id.
    pub group_id: String,
    /// `consumer` for Kafka consumers.
    pub protocol_type: String,
    /// Kafka's state name.
    pub state: String,
}

/// A member of a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// Its member id.
    pub member_id: String,
    /// Its `client.id`.
    pub client_id: String,
    /// Its address.
    pub client_host: String,
    /// The partitions assigned to it (decoded from the consumer protocol's assignment).
    pub partitions: Vec<TopicPartition>,
}

/// A described group with its committed offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// Kafka's state name.
    pub state: String,
    /// The chosen assignor.
    pub protocol: String,
    /// Its members.
    pub members: Vec<GroupMember>,
    /// Committed offsets.
    pub offsets: BTreeMap<TopicPartition, i64>,
}

fn kafka_error(code: i16, what: &str) -> Result<(), ClientError> {
    match ErrorCode::from_code(code) {
        ErrorCode::None => Ok(()),
        error => Err(ClientError::Kafka {
            error,
            message: what.to_owned(),
        }),
    }
}

/// FindCoordinator (v3) for a group: the coordinator's `host:port`.
pub async fn find_group_coordinator(
    connection: &mut ClientConnection,
    group_id: &str,
    timeout: Duration,
) -> Result<String, ClientError> {
    use kafka_protocol::messages::FindCoordinatorRequest;
    let request =
        FindCoordinatorRequest::default().with_key(StrBytes::from_string(group_id.to_owned()));
    let call = connection.call_at_version(3, RequestKind::FindCoordinator(request));
    let ResponseKind::FindCoordinator(response) = tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| ClientError::Timeout(timeout))??
    else {
        return Err(ClientError::Protocol(
            "FindCoordinator answered with another API".into(),
        ));
    };
    kafka_error(response.error_code, &format!("FindCoordinator {group_id}"))?;
    Ok(format!("{}:{}", response.host, response.port))
}

/// ListGroups (v4) of one broker: the groups it coordinates.
pub async fn list_groups(
    connection: &mut ClientConnection,
    timeout: Duration,
) -> Result<Vec<ListedGroup>, ClientError> {
    use kafka_protocol::messages::ListGroupsRequest;
    let call = connection.call_at_version(4, RequestKind::ListGroups(ListGroupsRequest::default()));
    let ResponseKind::ListGroups(response) = tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| ClientError::Timeout(timeout))??
    else {
        return Err(ClientError::Protocol(
            "ListGroups answered with another API".into(),
        ));
    };
    kafka_error(response.error_code, "ListGroups")?;
    Ok(response
        .groups
        .into_iter()
        .map(|group| ListedGroup {
            group_id: group.group_id.to_string(),
            protocol_type: group.protocol_type.to_string(),
            state: group.group_state.to_string(),
        })
        .collect())
}

/// DescribeGroups (v5) and OffsetFetch (v7, every partition) of a group, asked of its
/// coordinator.
pub async fn describe_group(
    coordinator: &mut ClientConnection,
    group_id: &str,
    timeout: Duration,
) -> Result<GroupDescription, ClientError> {
    use kafka_protocol::messages::{DescribeGroupsRequest, GroupId, OffsetFetchRequest};
    let group = GroupId(StrBytes::from_string(group_id.to_owned()));
    let describe = DescribeGroupsRequest::default().with_groups(vec![group.clone()]);
    let call = coordinator.call_at_version(5, RequestKind::DescribeGroups(describe));
    let ResponseKind::DescribeGroups(described) = tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| ClientError::Timeout(timeout))??
    else {
        return Err(ClientError::Protocol(
            "DescribeGroups answered with another API".into(),
        ));
    };
    let described = described
        .groups
        .into_iter()
        .next()
        .ok_or_else(|| ClientError::Protocol("DescribeGroups answered no group".into()))?;
    kafka_error(described.error_code, &format!("DescribeGroups {group_id}"))?;
    let fetch = OffsetFetchRequest::default()
        .with_group_id(group)
        .with_topics(None);
    let call = coordinator.call_at_version(7, RequestKind::OffsetFetch(fetch));
    let ResponseKind::OffsetFetch(fetched) = tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| ClientError::Timeout(timeout))??
    else {
        return Err(ClientError::Protocol(
            "OffsetFetch answered with another API".into(),
        ));
    };
    kafka_error(fetched.error_code, &format!("OffsetFetch {group_id}"))?;
    let offsets = fetched
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|partition| {
                (
                    TopicPartition::new(topic.name.as_str(), partition.partition_index),
                    partition.committed_offset,
                )
            })
        })
        .collect();
    let members = described
        .members
        .into_iter()
        .map(|member| GroupMember {
            member_id: member.member_id.to_string(),
            client_id: member.client_id.to_string(),
            client_host: member.client_host.to_string(),
            partitions: consumer_assignment(&member.member_assignment).unwrap_or_default(),
        })
        .collect();
    Ok(GroupDescription {
        state: described.group_state.to_string(),
        protocol: described.protocol_data.to_string(),
        members,
        offsets,
    })
}

pub use crate::client::group::decode_assignment as consumer_assignment;
