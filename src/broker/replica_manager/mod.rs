//! The partitions this broker holds a replica of (Kafka's `ReplicaManager`): lookup, the next
//! time-based flush among them, their invariants against the metadata image, appending a
//! produced batch as leader ([`append`]: Kafka's checks, then the append), reading a fetch
//! ([`fetch`]), and the requests that only read them (ListOffsets, OffsetsForLeaderEpoch).
//! Appends, reads and flush completions go through the [`Partition`]s it holds, which decide
//! `acks` and `min.insync.replicas`. What follows an append or a read (its flush, a parked
//! answer, the purgatory, the follower fetchers) is still the router's (`broker/handlers/`,
//! `purgatory.rs`, `flush.rs`, `replication.rs`): moving it here is issue 42's next step.

pub(in crate::broker) mod append;
pub(in crate::broker) mod fetch;
mod list_offsets;
mod offsets_for_leader_epoch;
pub mod partition;

use std::collections::BTreeMap;

use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

use self::partition::Partition;
use super::metrics::PartitionMetrics;

/// The broker's replicas, by partition.
#[derive(Debug)]
pub struct ReplicaManager<S: Storage> {
    partitions: BTreeMap<TopicPartition, Partition<S>>,
}

impl<S: Storage> Default for ReplicaManager<S> {
    fn default() -> Self {
        ReplicaManager {
            partitions: BTreeMap::new(),
        }
    }
}

impl<S: Storage> ReplicaManager<S> {
    /// The replica of `topic_partition`, if this broker holds one.
    pub fn get(&self, topic_partition: &TopicPartition) -> Option<&Partition<S>> {
        self.partitions.get(topic_partition)
    }

    /// The same, to change it.
    pub fn get_mut(&mut self, topic_partition: &TopicPartition) -> Option<&mut Partition<S>> {
        self.partitions.get_mut(topic_partition)
    }

    /// Whether this broker holds a replica of `topic_partition`.
    pub fn contains(&self, topic_partition: &TopicPartition) -> bool {
        self.partitions.contains_key(topic_partition)
    }

    /// Adds a replica (a created or recovered partition).
    pub fn insert(&mut self, replica: Partition<S>) {
        let previous = self
            .partitions
            .insert(replica.topic_partition().clone(), replica);
        assert!(previous.is_none(), "a partition is opened once");
    }

    /// Every replica, in partition order.
    pub fn iter(&self) -> impl Iterator<Item = (&TopicPartition, &Partition<S>)> {
        self.partitions.iter()
    }

    /// Every replica, to change them.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&TopicPartition, &mut Partition<S>)> {
        self.partitions.iter_mut()
    }

    /// How many replicas this broker holds.
    pub fn len(&self) -> usize {
        self.partitions.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// Every replica's state for the metrics endpoint, in partition order.
    pub fn partition_metrics(&self) -> Vec<PartitionMetrics> {
        self.partitions
            .iter()
            .map(|(topic_partition, partition)| PartitionMetrics {
                topic: topic_partition.topic.to_string(),
                partition: topic_partition.partition,
                size_bytes: partition.log().size_bytes(),
                segments: partition.log().segment_count(),
                log_start_offset: partition.log().log_start_offset(),
                log_end_offset: partition.log().log_end_offset(),
                high_watermark: partition.high_watermark(),
                offline: partition.offline().is_some(),
                under_replicated: partition.is_under_replicated(),
            })
            .collect()
    }

    /// The earliest `flush.ms` deadline among the logs.
    pub fn next_flush_deadline(&self) -> Option<Millis> {
        self.partitions
            .values()
            .filter_map(|partition| partition.log().next_flush_deadline())
            .min()
    }

    /// Each replica's own invariants, and that it belongs to a topic of the image
    /// (`partition_count`: a served topic's partition count).
    pub fn check_invariants(&self, partition_count: impl Fn(&str) -> Option<i32>) {
        for (topic_partition, partition) in &self.partitions {
            assert_eq!(
                topic_partition,
                partition.topic_partition(),
                "partition keyed by itself"
            );
            partition.check_invariants();
            let partitions = partition_count(&topic_partition.topic)
                .expect("a partition belongs to a known topic");
            assert!(
                topic_partition.partition < partitions,
                "partition index within the topic"
            );
        }
    }
}
