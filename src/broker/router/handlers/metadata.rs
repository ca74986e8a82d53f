//! Metadata: brokers, cluster id, controller, and per-topic partition leadership. Unknown topics
//! are auto-created when both the request and `auto.create.topics.enable` allow it; until their
//! record is durable they answer LEADER_NOT_AVAILABLE, as Kafka does.

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId as WireBrokerId, CreateTopicsRequest, MetadataRequest, MetadataResponse, ResponseKind,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::metadata_cache::TopicMetadata;
use crate::broker::{Broker, Output};
use crate::metadata::topics::{validate_topic_name, Names};
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
        let brokers = match &self.cluster {
            // In a cluster: every unfenced broker the metadata log names.
            Some(_) => self
                .metadata
                .image()
                .brokers()
                .filter(|registration| !registration.fenced)
                .map(|registration| {
                    MetadataResponseBroker::default()
                        .with_node_id(WireBrokerId(registration.id.0))
                        .with_host(StrBytes::from_string(registration.host.clone()))
                        .with_port(registration.port)
                })
                .collect(),
            None => vec![broker],
        };
        let mut response = MetadataResponse::default().with_brokers(brokers);
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
            let topics: Vec<TopicMetadata> = self.metadata.topics();
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
                None => match self.metadata.topic_by_id(requested.topic_id) {
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
        if let Some(topic) = self.metadata.topic(name) {
            return self.topic_metadata(api_version, &topic);
        }
        if self.metadata.creating.contains(name.as_str()) {
            return error_entry(ErrorCode::LeaderNotAvailable);
        }
        if validate_topic_name(name).is_err() {
            return error_entry(ErrorCode::InvalidTopicException);
        }
        if !allow_auto_create {
            return error_entry(ErrorCode::UnknownTopicOrPartition);
        }
        let topic = CreatableTopic::default()
            .with_name(name.clone())
            .with_num_partitions(-1)
            .with_replication_factor(-1);
        let body = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(30_000);
        let created = self.create_topics(now, None, 7, body, Names::Client, out);
        let Some(response) = created else {
            // Forwarded to the controller: the topic exists once the metadata log says so.
            self.metadata.creating.insert(name.to_string());
            return error_entry(ErrorCode::LeaderNotAvailable);
        };
        match response.topics.first().map(|result| result.error_code) {
            Some(0) => error_entry(ErrorCode::LeaderNotAvailable),
            Some(code) => {
                tracing::error!(topic = %name.as_str(), ?response, "auto-creation failed");
                error_entry(ErrorCode::from_code(code))
            }
            None => unreachable!("one topic asked, one answered"),
        }
    }

    fn topic_metadata(&self, api_version: i16, topic: &TopicMetadata) -> MetadataResponseTopic {
        let partitions = (0..topic.partitions)
            .map(|index| {
                let mut entry = MetadataResponsePartition::default().with_partition_index(index);
                // In a cluster the controller's view is the answer: this broker may not hold the
                // partition at all.
                let registration = self
                    .cluster
                    .as_ref()
                    .and_then(|_| self.metadata.image().topic(&topic.name))
                    .and_then(|topic| topic.partitions.get(&index));
                if let Some(registration) = registration {
                    entry.leader_id = WireBrokerId(registration.leader.0);
                    if api_version >= 7 {
                        entry.leader_epoch = registration.leader_epoch.0;
                    }
                    let wire = |ids: &[crate::types::BrokerId]| {
                        ids.iter().map(|id| WireBrokerId(id.0)).collect()
                    };
                    entry.replica_nodes = wire(&registration.replicas);
                    entry.isr_nodes = wire(&registration.isr);
                    if Self::is_no_leader(registration.leader) {
                        entry.error_code = ErrorCode::LeaderNotAvailable.code();
                    }
                    return entry;
                }
                let Some(partition) = self
                    .replicas
                    .get(&TopicPartition::new(topic.name.as_str(), index))
                else {
                    return entry
                        .with_leader_id(WireBrokerId(-1))
                        .with_error_code(ErrorCode::LeaderNotAvailable.code());
                };
                entry.leader_id = WireBrokerId(partition.leader().0);
                if api_version >= 7 {
                    entry.leader_epoch = partition.leader_epoch().0;
                }
                entry.replica_nodes = partition
                    .replicas()
                    .iter()
                    .map(|id| WireBrokerId(id.0))
                    .collect();
                entry.isr_nodes = partition
                    .isr()
                    .iter()
                    .map(|id| WireBrokerId(id.0))
                    .collect();
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
