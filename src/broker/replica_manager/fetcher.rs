//! The follower fetchers' state (Kafka's `ReplicaFetcherManager` and each
//! `AbstractFetcherThread`'s partition states): per leader, the partitions fetched from it, the
//! fetch in flight, backoffs, appends waiting for their fsync, and partitions that must find
//! where their log agrees with the leader's first. What they send and do with the answers is in
//! [`replication`](super::replication).

use std::collections::{BTreeMap, BTreeSet};

use crate::node_io::PeerRequestId;
use crate::types::{BrokerId, Millis, TopicPartition};

/// The follower side: what each leader is being fetched for.
#[derive(Debug, Default)]
pub(in crate::broker) struct ReplicaFetchers {
    pub(super) by_leader: BTreeMap<BrokerId, Fetcher>,
}

/// One leader's fetch session.
#[derive(Debug, Default)]
pub(super) struct Fetcher {
    /// The partitions this broker follows on that leader.
    pub(super) partitions: BTreeSet<TopicPartition>,
    /// The fetch on its way, if any: only its answer is taken.
    pub(super) in_flight: Option<PeerRequestId>,
    /// After a failed fetch, no new one before this.
    pub(super) backoff_until: Option<Millis>,
    /// Partitions whose part of the last fetch failed, left out of fetches until then; the
    /// others go on (Kafka's `AbstractFetcherThread.delayPartitions`).
    pub(super) delayed: BTreeMap<TopicPartition, Millis>,
    /// Appends that must be durable before the next fetch reports them: partition and end.
    pub(super) awaiting_flush: Vec<(TopicPartition, i64)>,
    /// `kip-101` and `kip-279`: partitions that must find where their log agrees with the
    /// leader's (OffsetsForLeaderEpoch) before they fetch, with the epoch to ask for next
    /// (`None`: the epoch of the last batch).
    pub(super) truncating: BTreeMap<TopicPartition, Option<i32>>,
}

impl ReplicaFetchers {
    /// Stops fetching `topic_partition` (its leadership changed).
    pub(super) fn remove_partition(&mut self, topic_partition: &TopicPartition) {
        self.by_leader.retain(|_, fetcher| {
            fetcher.partitions.remove(topic_partition);
            fetcher
                .awaiting_flush
                .retain(|(partition, _)| partition != topic_partition);
            fetcher.truncating.remove(topic_partition);
            fetcher.delayed.remove(topic_partition);
            !fetcher.partitions.is_empty()
        });
    }

    /// The earliest end of a backoff or of a partition's delay.
    pub(super) fn next_deadline(&self) -> Option<Millis> {
        self.by_leader
            .values()
            .flat_map(|fetcher| {
                fetcher
                    .backoff_until
                    .into_iter()
                    .chain(fetcher.delayed.values().copied())
            })
            .min()
    }
}
