//! The partitions this broker holds a replica of (Kafka's `ReplicaManager`): lookup, the next
//! time-based flush among them, their invariants against the metadata image, appending a
//! produced batch as leader ([`append`]: Kafka's checks, then the append), reading a fetch
//! ([`fetch`]), and the requests that only read them (ListOffsets, OffsetsForLeaderEpoch).
//! Appends, reads and flush completions go through the [`Partition`]s it holds, which decide
//! `acks` and `min.insync.replicas`. It also owns what follows an append or a read: the
//! partition flushes and their completions ([`flush`]), the produce, fetch and DeleteRecords
//! purgatories ([`purgatory`], [`parked`]), leadership changes, the leader's view of its followers and the
//! follower fetchers ([`replication`]).
//!
//! What it needs from the rest of the broker (the configuration, the metadata cache, the
//! flushes in flight, peer-request ids, and in a cluster the controller for ISR changes) the
//! router lends it per call as a [`Link`].

pub(in crate::broker) mod append;
pub(in crate::broker) mod fetch;
mod fetcher;
mod flush;
mod list_offsets;
mod offsets_for_leader_epoch;
mod parked;
pub mod partition;
pub(in crate::broker) mod purgatory;
pub(in crate::broker) mod replication;

use std::collections::BTreeMap;

use crate::config::BrokerConfig;
use crate::node_io::{Output, PeerRequestIds};
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{BrokerId, Millis, TopicPartition};

use self::fetcher::ReplicaFetchers;
use self::partition::Partition;
use self::purgatory::Purgatory;
use super::flushes::Flushes;
use super::group::GroupWrite;
use super::metadata_cache::MetadataCache;
use super::metrics::PartitionMetrics;

/// The broker's replicas, by partition, and the work parked on them.
#[derive(Debug)]
pub struct ReplicaManager<S: Storage> {
    partitions: BTreeMap<TopicPartition, Partition<S>>,
    /// The follower side of replication: one fetch session per leader.
    fetchers: ReplicaFetchers,
    /// Produces, fetches and DeleteRecords waiting on these partitions.
    pub(in crate::broker) purgatory: Purgatory,
    /// The group coordinator's own writes that finished during this input, with the append's
    /// error: the router hands them back to the coordinator at the input's end.
    finished_group_writes: Vec<(GroupWrite, ErrorCode)>,
}

impl<S: Storage> Default for ReplicaManager<S> {
    fn default() -> Self {
        ReplicaManager {
            partitions: BTreeMap::new(),
            fetchers: ReplicaFetchers::default(),
            purgatory: Purgatory::default(),
            finished_group_writes: Vec::new(),
        }
    }
}

/// What the replica manager borrows from the rest of the broker for one call. Kafka's
/// `ReplicaManager` is built holding the same things (the config, the metadata cache, the
/// `AlterPartitionManager`); here the router lends them, so that each stays owned by one
/// component.
pub(in crate::broker) struct Link<'a, S: Storage> {
    pub(in crate::broker) config: &'a BrokerConfig,
    pub(in crate::broker) metadata: &'a MetadataCache<S>,
    pub(in crate::broker) flushes: &'a mut Flushes,
    pub(in crate::broker) peer_ids: &'a mut PeerRequestIds,
    /// The controller, in a cluster: ISR changes are proposed to it. `None`: the broker is its
    /// own controller and changes an ISR itself.
    pub(in crate::broker) controller: Option<&'a mut dyn AlterPartition<S>>,
}

impl<S: Storage> Link<'_, S> {
    /// Proposes an ISR for `partition`, led here, to the controller; nothing when the broker is
    /// its own controller.
    fn propose_isr(
        &mut self,
        now: Millis,
        partition: &mut Partition<S>,
        proposal: (&TopicPartition, Vec<BrokerId>),
        out: &mut Vec<Output<S::File>>,
    ) {
        if let Some(controller) = self.controller.as_deref_mut() {
            let node = BrokerId(self.config.node_id);
            controller.propose_isr(
                now,
                self.peer_ids,
                self.metadata,
                node,
                partition,
                proposal,
                out,
            );
        }
    }
}

/// The way to the controller for a leader's ISR changes (Kafka's `AlterPartitionManager`).
pub(in crate::broker) trait AlterPartition<S: Storage> {
    /// Proposes `new_isr` for `partition` (led here), unless a proposal for it is pending.
    #[allow(clippy::too_many_arguments)]
    fn propose_isr(
        &mut self,
        now: Millis,
        peer_ids: &mut PeerRequestIds,
        metadata: &MetadataCache<S>,
        node: BrokerId,
        partition: &mut Partition<S>,
        proposal: (&TopicPartition, Vec<BrokerId>),
        out: &mut Vec<Output<S::File>>,
    );
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

    /// The group coordinator's writes that finished since the last call, with their errors.
    pub(in crate::broker) fn take_finished_group_writes(&mut self) -> Vec<(GroupWrite, ErrorCode)> {
        std::mem::take(&mut self.finished_group_writes)
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
        assert!(
            self.finished_group_writes.is_empty(),
            "the coordinator's finished writes are handled within the input"
        );
        for delayed in &self.purgatory.produces {
            for slot in &delayed.waiting {
                assert!(
                    self.partitions.contains_key(&slot.topic_partition),
                    "a delayed produce waits on a known partition"
                );
            }
        }
    }
}
