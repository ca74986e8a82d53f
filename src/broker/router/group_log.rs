//! The router's side of the group coordinator: [`OffsetsLog`] over this broker's replicas, its
//! produce path and its metadata, and how the coordinator is run with the broker as its host.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rand_chacha::rand_core::RngCore;

use crate::broker::group::{GroupCoordinator, GroupWrite, OffsetsLog, OFFSETS_TOPIC};
use crate::broker::{Broker, Output};
use crate::metadata::topics::Names;
use crate::protocol::record_batch::Record;
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

impl<S: Storage> Broker<S> {
    /// Runs `work` on the group coordinator with this broker as its [`OffsetsLog`]. The
    /// coordinator is taken out for the call (the host never reaches it: asserted).
    pub(in crate::broker) fn with_groups<R>(
        &mut self,
        work: impl FnOnce(&mut GroupCoordinator, &mut Self) -> R,
    ) -> R {
        let mut groups = std::mem::take(&mut self.groups);
        let result = work(&mut groups, self);
        assert!(
            self.groups.is_vacant(),
            "the group coordinator's host reached into the coordinator"
        );
        self.groups = groups;
        result
    }
}

impl<S: Storage> OffsetsLog for Broker<S> {
    type File = S::File;

    fn wall_clock(&self, now: Millis) -> i64 {
        Broker::wall_clock(self, now)
    }

    fn random_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    fn offsets_leader_epoch(&self, partition: i32) -> Option<i32> {
        let replica = self
            .replicas
            .get(&TopicPartition::new(OFFSETS_TOPIC, partition))?;
        (replica.is_leader() && replica.offline().is_none()).then_some(replica.leader_epoch().0)
    }

    fn read_offsets(&self, partition: i32) -> Result<Vec<Record>, ErrorCode> {
        let topic_partition = TopicPartition::new(OFFSETS_TOPIC, partition);
        let replica = self
            .replicas
            .get(&topic_partition)
            .ok_or(ErrorCode::NotCoordinator)?;
        crate::broker::read_log_records(replica.log(), replica.log().log_start_offset()).map_err(
            |error| {
                tracing::error!(partition = %topic_partition, %error, "cannot load groups");
                ErrorCode::CoordinatorNotAvailable
            },
        )
    }

    fn append_offsets(
        &mut self,
        now: Millis,
        partition: i32,
        batch: Bytes,
        timeout_ms: i32,
        write: GroupWrite,
        out: &mut Vec<Output<S::File>>,
    ) {
        let topic_partition = TopicPartition::new(OFFSETS_TOPIC, partition);
        self.append_internal(now, &topic_partition, batch, timeout_ms, write, out);
    }

    fn partition_count(&self, topic: &str) -> Option<i32> {
        self.metadata.partition_count(topic)
    }

    fn offsets_topic_exists(&self) -> bool {
        self.metadata.served(OFFSETS_TOPIC).is_some()
    }

    /// Through the controller in a cluster (again at most once a second: it may lack brokers
    /// for the replication factor), else in this broker's own metadata log, with one replica.
    fn create_offsets_topic(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        let groups = &self.config.groups;
        let mut configs = BTreeMap::new();
        configs.insert(
            "segment.bytes".to_owned(),
            groups.offsets_topic_segment_bytes.to_string(),
        );
        // Kafka's `GroupCoordinator.offsetsTopicConfigs`: compacted, so the latest commit
        // and group record of each key stay and the rest goes.
        configs.insert("cleanup.policy".to_owned(), "compact".to_owned());
        let partitions = groups.offsets_topic_num_partitions;
        let factor = match &mut self.cluster {
            Some(membership) => {
                if membership
                    .offsets_topic_asked
                    .is_some_and(|asked| now < asked.plus(1_000))
                {
                    return;
                }
                membership.offsets_topic_asked = Some(now);
                groups.offsets_topic_replication_factor
            }
            None if self.metadata.creating.contains(OFFSETS_TOPIC) => return,
            None => 1,
        };
        let topic = CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(OFFSETS_TOPIC)))
            .with_num_partitions(partitions)
            .with_replication_factor(factor)
            .with_configs(
                configs
                    .into_iter()
                    .map(|(name, value)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(name))
                            .with_value(Some(StrBytes::from_string(value)))
                    })
                    .collect(),
            );
        let body = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(30_000);
        let created = self.create_topics(now, None, 7, body, Names::Internal, out);
        if let Some(refused) = created
            .iter()
            .flat_map(|response| &response.topics)
            .find(|result| result.error_code != 0)
        {
            tracing::error!(?refused, "cannot create {OFFSETS_TOPIC}");
        }
    }

    fn offsets_leader_address(&self, partition: i32) -> Result<(i32, String, i32), ErrorCode> {
        if self.cluster.is_some() {
            let image = self.metadata.image();
            let leader = image
                .topic(OFFSETS_TOPIC)
                .and_then(|topic| topic.partitions.get(&partition))
                .map(|registration| registration.leader)
                .filter(|leader| !Self::is_no_leader(*leader))
                .ok_or(ErrorCode::CoordinatorNotAvailable)?;
            let broker = image
                .broker(leader)
                .filter(|broker| !broker.fenced)
                .ok_or(ErrorCode::CoordinatorNotAvailable)?;
            return Ok((leader.0, broker.host.clone(), broker.port));
        }
        self.offsets_leader_epoch(partition)
            .ok_or(ErrorCode::CoordinatorNotAvailable)?;
        let advertised = self.config.advertised();
        Ok((
            self.config.node_id,
            advertised.host,
            i32::from(advertised.port),
        ))
    }
}
