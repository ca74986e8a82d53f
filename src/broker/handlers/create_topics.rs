//! CreateTopics: validates each topic as Kafka does, appends one metadata record per new
//! topic, and answers once those records are durable (the topics exist from then on).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::metadata::{validate_topic_name, MetadataRecord};
use crate::broker::purgatory::DelayedCreateTopics;
use crate::broker::{Broker, Output, ReplyTo, ResponseBody};
use crate::config::TopicConfig;
use crate::protocol::codec::Request;
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::Millis;

/// A validated topic: its record, partition count and replication factor.
struct NewTopic {
    record: MetadataRecord,
    partitions: i32,
    replication_factor: i16,
    topic_id: uuid::Uuid,
}

/// A rejected topic: Kafka error code and message.
type Rejection = (ErrorCode, String);

/// Most partitions one topic may have. Each partition is a directory and open files, so a request
/// asking for `i32::MAX` would exhaust the broker: it is refused instead.
pub(crate) const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

fn result_for(
    api_version: i16,
    topic: &CreatableTopic,
    outcome: &Result<NewTopic, Rejection>,
) -> CreatableTopicResult {
    let mut result = CreatableTopicResult::default()
        .with_name(topic.name.clone())
        .with_error_message(None);
    match outcome {
        Ok(new_topic) => {
            if api_version >= 5 {
                result.num_partitions = new_topic.partitions;
                result.replication_factor = new_topic.replication_factor;
            }
            if api_version >= 7 {
                result.topic_id = new_topic.topic_id;
            }
        }
        Err((error, message)) => {
            result.error_code = error.code();
            if api_version >= 1 {
                result.error_message = Some(StrBytes::from_string(message.clone()));
            }
        }
    }
    result
}

/// Whether a client's CreateTopics names a topic reserved for internal use (`__` prefix).
pub(crate) fn names_reserved_topic(body: &CreateTopicsRequest) -> bool {
    body.topics
        .iter()
        .any(|topic| topic.name.as_str().starts_with("__"))
}

/// A client's CreateTopics that names a reserved topic, answered by the broker instead of
/// being forwarded (the controller takes reserved names from brokers only): each reserved
/// topic INVALID_TOPIC_EXCEPTION, the others INVALID_REQUEST.
pub(crate) fn reserved_topics_refused(
    api_version: i16,
    body: &CreateTopicsRequest,
) -> ResponseKind {
    let mut response = CreateTopicsResponse::default();
    for topic in &body.topics {
        let outcome = match validate_topic_name(topic.name.as_str()) {
            Err(message) => Err((ErrorCode::InvalidTopicException, message)),
            Ok(()) => Err((
                ErrorCode::InvalidRequest,
                "not created: the request also names a reserved topic".to_owned(),
            )),
        };
        response
            .topics
            .push(result_for(api_version, topic, &outcome));
    }
    ResponseKind::CreateTopics(response)
}

/// Topic names that appear more than once in one request (Kafka rejects all of them).
fn duplicated_names(body: &CreateTopicsRequest) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    body.topics
        .iter()
        .map(|topic| topic.name.to_string())
        .filter(|name| !seen.insert(name.clone()))
        .collect()
}

impl<S: Storage> Broker<S> {
    pub(in crate::broker) fn on_create_topics_request(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        request: &Request,
        out: &mut Vec<Output<S::File>>,
    ) {
        let RequestKind::CreateTopics(body) = &request.body else {
            unreachable!("routed by api key")
        };
        let duplicated = duplicated_names(body);
        let mut response = CreateTopicsResponse::default();
        let mut records = Vec::new();
        for topic in &body.topics {
            let outcome = if duplicated.contains(topic.name.as_str()) {
                let message = format!(
                    "Create topics request contains multiple entries for the topic {}",
                    topic.name.as_str()
                );
                Err((ErrorCode::InvalidRequest, message))
            } else {
                self.validate_new_topic(topic)
            };
            response
                .topics
                .push(result_for(request.api_version, topic, &outcome));
            if let (Ok(new_topic), false) = (outcome, body.validate_only) {
                self.controller.pending.insert(topic.name.to_string());
                records.push(new_topic.record);
            }
        }
        if records.is_empty() {
            out.push(reply_to.respond(ResponseBody::message(ResponseKind::CreateTopics(response))));
            return;
        }
        match self.append_metadata(now, &records, out) {
            Ok(flush_id) => self.purgatory.creations.push(DelayedCreateTopics {
                reply_to,
                response,
                flush_id,
            }),
            Err(error) => {
                tracing::error!(%error, "cannot append topic records");
                for MetadataRecord::Topic { name, .. } in &records {
                    self.controller.pending.remove(name);
                }
                for result in response
                    .topics
                    .iter_mut()
                    .filter(|result| result.error_code == 0)
                {
                    result.error_code = ErrorCode::KafkaStorageError.code();
                }
                out.push(
                    reply_to.respond(ResponseBody::message(ResponseKind::CreateTopics(response))),
                );
            }
        }
    }

    /// Partition count and replication factor, from explicit values, defaults, or a manual
    /// replica assignment (which must name this broker only).
    fn partitions_and_replication(&self, topic: &CreatableTopic) -> Result<(i32, i16), Rejection> {
        if topic.assignments.is_empty() {
            let partitions = if topic.num_partitions == -1 {
                self.config.num_partitions
            } else {
                topic.num_partitions
            };
            let factor = if topic.replication_factor == -1 {
                self.config.default_replication_factor
            } else {
                topic.replication_factor
            };
            return Ok((partitions, factor));
        }
        if topic.num_partitions != -1 || topic.replication_factor != -1 {
            let message = "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.";
            return Err((ErrorCode::InvalidRequest, message.into()));
        }
        for assignment in &topic.assignments {
            if assignment
                .broker_ids
                .iter()
                .map(|id| id.0)
                .collect::<Vec<_>>()
                != vec![self.config.node_id]
            {
                let message = format!(
                    "Unknown broker in replica assignment {:?}",
                    assignment.broker_ids
                );
                return Err((ErrorCode::InvalidReplicaAssignment, message));
            }
        }
        Ok((topic.assignments.len() as i32, 1))
    }

    fn validate_new_topic(&mut self, topic: &CreatableTopic) -> Result<NewTopic, Rejection> {
        let name = topic.name.to_string();
        validate_topic_name(&name)
            .map_err(|message| (ErrorCode::InvalidTopicException, message))?;
        if self.controller.topic_taken(&name) {
            return Err((
                ErrorCode::TopicAlreadyExists,
                format!("Topic '{name}' already exists."),
            ));
        }
        let (partitions, replication_factor) = self.partitions_and_replication(topic)?;
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
        if replication_factor < 1 {
            return Err((
                ErrorCode::InvalidReplicationFactor,
                "Replication factor must be larger than 0.".into(),
            ));
        }
        if replication_factor > 1 {
            let message = format!(
                "Unable to replicate the partition {replication_factor} time(s): The target replication factor of {replication_factor} cannot be reached because only 1 broker(s) are registered."
            );
            return Err((ErrorCode::InvalidReplicationFactor, message));
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
        TopicConfig::with_overrides(&self.config, &configs)
            .map_err(|error| (ErrorCode::InvalidConfig, error.to_string()))?;
        let topic_id = self.new_topic_id();
        let record = MetadataRecord::Topic {
            name,
            topic_id: topic_id.to_string(),
            partitions,
            replication_factor,
            configs,
        };
        Ok(NewTopic {
            record,
            partitions,
            replication_factor,
            topic_id,
        })
    }
}
