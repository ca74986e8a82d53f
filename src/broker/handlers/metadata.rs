//! Metadata: brokers, cluster id, controller, and per-topic partition leadership. Unknown topics
//! are auto-created when both the request and `auto.create.topics.enable` allow it; until their
//! record is durable they answer LEADER_NOT_AVAILABLE, as Kafka does.

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId as WireBrokerId, MetadataRequest, MetadataResponse, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::metadata::{validate_topic_name, MetadataRecord, TopicMetadata};
use crate::broker::{Broker, Output};
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

impl<S: Storage> Broker<S> {
    pub(in crate::broker) fn on_metadata_request(
        &mut self,
        now: Millis,
        api_version: i16,
        request: &MetadataRequest,
        out: &mut Vec<Output<S::File>>,
    ) -> ResponseKind {
        let advertised = self.config.advertised();
        let node = WireBrokerId(self.config.node_id);
        let broker = MetadataResponseBroker::default()
            .with_node_id(node)
            .with_host(StrBytes::from_string(advertised.host))
            .with_port(i32::from(advertised.port));
        let mut response = MetadataResponse::default().with_brokers(vec![broker]);
        if api_version >= 1 {
            response.controller_id = node;
        }
        if api_version >= 2 {
            response.cluster_id = Some(StrBytes::from_string(self.cluster_id.clone()));
        }
        let all_topics = match &request.topics {
            None => true,
            Some(topics) => api_version == 0 && topics.is_empty(),
        };
        if all_topics {
            let topics: Vec<TopicMetadata> = self.controller.image.topics().cloned().collect();
            response.topics = topics
                .iter()
                .map(|topic| self.topic_metadata(api_version, topic))
                .collect();
            return ResponseKind::Metadata(response);
        }
        let allow_auto_create = (api_version < 4 || request.allow_auto_topic_creation)
            && self.config.auto_create_topics_enable;
        for requested in request.topics.iter().flatten() {
            let entry = match &requested.name {
                Some(name) => self.topic_by_name(now, api_version, name, allow_auto_create, out),
                None => match self
                    .controller
                    .image
                    .topic_by_id(requested.topic_id)
                    .cloned()
                {
                    Some(topic) => self.topic_metadata(api_version, &topic),
                    None => MetadataResponseTopic::default()
                        .with_name(None)
                        .with_topic_id(requested.topic_id)
                        .with_error_code(ErrorCode::UnknownTopicId.code()),
                },
            };
            response.topics.push(entry);
        }
        ResponseKind::Metadata(response)
    }

    fn topic_by_name(
        &mut self,
        now: Millis,
        api_version: i16,
        name: &TopicName,
        allow_auto_create: bool,
        out: &mut Vec<Output<S::File>>,
    ) -> MetadataResponseTopic {
        let error_entry = |error: ErrorCode| {
            MetadataResponseTopic::default()
                .with_name(Some(name.clone()))
                .with_error_code(error.code())
        };
        if let Some(topic) = self.controller.image.topic(name).cloned() {
            return self.topic_metadata(api_version, &topic);
        }
        if self.controller.pending.contains(name.as_str()) {
            return error_entry(ErrorCode::LeaderNotAvailable);
        }
        if validate_topic_name(name).is_err() {
            return error_entry(ErrorCode::InvalidTopicException);
        }
        if !allow_auto_create {
            return error_entry(ErrorCode::UnknownTopicOrPartition);
        }
        let record = MetadataRecord::Topic {
            name: name.to_string(),
            topic_id: self.new_topic_id().to_string(),
            partitions: self.config.num_partitions,
            replication_factor: self.config.default_replication_factor,
            configs: std::collections::BTreeMap::new(),
        };
        match self.append_metadata(now, &[record], out) {
            Ok(_) => {
                self.controller.pending.insert(name.to_string());
                error_entry(ErrorCode::LeaderNotAvailable)
            }
            Err(error) => {
                tracing::error!(topic = %name.as_str(), %error, "auto-creation failed");
                error_entry(ErrorCode::KafkaStorageError)
            }
        }
    }

    fn topic_metadata(&self, api_version: i16, topic: &TopicMetadata) -> MetadataResponseTopic {
        let partitions = (0..topic.partitions)
            .map(|index| {
                let mut entry = MetadataResponsePartition::default().with_partition_index(index);
                let Some(partition) = self
                    .replicas
                    .get(&TopicPartition::new(topic.name.clone(), index))
                else {
                    return entry
                        .with_leader_id(WireBrokerId(-1))
                        .with_error_code(ErrorCode::LeaderNotAvailable.code());
                };
                entry.leader_id = WireBrokerId(partition.leader.0);
                if api_version >= 7 {
                    entry.leader_epoch = partition.leader_epoch.0;
                }
                entry.replica_nodes = partition
                    .replicas
                    .iter()
                    .map(|id| WireBrokerId(id.0))
                    .collect();
                entry.isr_nodes = partition.isr.iter().map(|id| WireBrokerId(id.0)).collect();
                if partition.offline().is_some() {
                    entry.error_code = ErrorCode::KafkaStorageError.code();
                }
                entry
            })
            .collect();
        let mut entry = MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(topic.name.clone()))))
            .with_partitions(partitions);
        if api_version >= 10 {
            entry.topic_id = topic.topic_id;
        }
        entry
    }
}
