//! Replication between brokers: leadership changes, the leader's view of its followers (their
//! fetches move the high watermark and the ISR), and the follower side, the replica fetcher
//! (Kafka's `ReplicaFetcherThread`): one fetch session per leader, long-polling the leader with
//! `replica_id` set, appending what comes back with the leader's offsets.
//!
//! A follower with a flush policy that requires an fsync before an acknowledgement does not send
//! its next fetch (which reports its new log end offset to the leader) until that fsync
//! completes: in Kafka the follower's append flushes inside `appendAsFollower`, so a leader never
//! counts a follower's unsynced bytes toward acks=all under `flush.messages=1`.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::offset_for_leader_epoch_request::OffsetForLeaderPartition;
use kafka_protocol::messages::{
    FetchRequest, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, RequestKind,
    ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use std::ops::Range;

use crate::broker::metadata_cache::MetadataCache;
use crate::config::broker::ReplicationGeneration;
use crate::config::BrokerConfig;
use crate::metadata::records::NO_LEADER;
use crate::protocol::record_batch::{validate_batch, BatchError, RecordBatchHeader};
use crate::protocol::requests::offset_for_leader_epoch_request;
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{BrokerId, LeaderEpoch, Millis, TopicPartition};

use super::{Link, ReplicaManager};
use crate::broker::flushes::{FlushTarget, Flushes};
use crate::node_io::{BrokerEvent, Output, PeerRequestId, PeerRole};

/// The Fetch version followers send: topics by name, `current_leader_epoch` (KIP-320) and the
/// diverging epoch in the response.
pub const REPLICA_FETCH_VERSION: i16 = 12;

/// The OffsetsForLeaderEpoch version a `kip-101` or `kip-279` follower sends (v3: with its
/// replica id).
const LEADER_EPOCHS_VERSION: i16 = 3;

/// A partition's new leadership, as the controller decides it (Kafka's `LeaderAndIsr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    /// The leader.
    pub leader: BrokerId,
    /// Its epoch.
    pub leader_epoch: LeaderEpoch,
    /// Every replica, leader included.
    pub replicas: Vec<BrokerId>,
    /// The in-sync replicas, leader included.
    pub isr: Vec<BrokerId>,
    /// The partition epoch of this state.
    pub partition_epoch: i32,
}

impl<S: Storage> ReplicaManager<S> {
    /// Makes this broker the leader or a follower of a partition it holds (Kafka's
    /// `ReplicaManager.becomeLeaderOrFollower`). The controller's metadata drives it; an epoch
    /// older than the partition's is ignored. Parked produces of a partition that stops being
    /// led here answer NOT_LEADER_OR_FOLLOWER.
    pub(in crate::broker) fn become_leader_or_follower(
        &mut self,
        now: Millis,
        topic_partition: &TopicPartition,
        state: PartitionState,
        link: &mut Link<'_, S>,
        out: &mut Vec<Output<S::File>>,
    ) {
        let local = BrokerId(link.config.node_id);
        let Some(partition) = self.partitions.get_mut(topic_partition) else {
            tracing::warn!(partition = %topic_partition, "leadership for a partition not held here");
            return;
        };
        if state.leader_epoch < partition.leader_epoch() {
            tracing::info!(partition = %topic_partition, epoch = state.leader_epoch.0, current = partition.leader_epoch().0, "stale leadership ignored");
            return;
        }
        assert!(
            state.replicas.contains(&local)
                && (state.isr.contains(&state.leader) || state.leader == NO_LEADER),
            "a partition state for a replica here, with its leader in the ISR"
        );
        let same_epoch =
            state.leader_epoch == partition.leader_epoch() && state.leader == partition.leader();
        if same_epoch && state.replicas == partition.replicas() {
            if state.partition_epoch <= partition.partition_epoch() {
                // Nothing newer (Kafka's `makeLeader` skips it too): in particular an
                // AlterPartition in flight stays pending, so the high watermark keeps counting
                // the member it adds (KIP-497's maximal ISR).
                return;
            }
            // Only the ISR moved (an AlterPartition or a fenced member): roles stay.
            partition.set_partition_epoch(state.partition_epoch);
            partition.set_isr(state.isr);
            self.after_isr_change(now, topic_partition, link.metadata, out);
            return;
        }
        self.fetchers.remove_partition(topic_partition);
        partition.set_partition_epoch(state.partition_epoch);
        let generation = link.config.replication.generation;
        if let Err(error) = partition.log_mut().load_leader_epochs() {
            partition.go_offline_with_event(format!("leader epochs unreadable: {error}"), out);
            return;
        }
        if state.leader == local {
            tracing::info!(partition = %topic_partition, epoch = state.leader_epoch.0, isr = ?state.isr, "became leader");
            let strict_min_isr = (generation == ReplicationGeneration::Kip966)
                .then(|| link.metadata.config(&topic_partition.topic))
                .flatten()
                .map_or(0, |config| config.min_insync_replicas as usize);
            partition.set_min_isr_to_advance(strict_min_isr);
            partition.become_leader(now, state.leader_epoch, state.replicas, state.isr);
            out.push(Output::Event(BrokerEvent::Leader {
                partition: topic_partition.clone(),
                leader_epoch: state.leader_epoch.0,
            }));
            if let Err(error) = partition.log_mut().start_leader_epoch(state.leader_epoch.0) {
                tracing::error!(partition = %topic_partition, %error, "leader epoch not recorded");
            }
        } else {
            tracing::info!(partition = %topic_partition, epoch = state.leader_epoch.0, leader = state.leader.0, "became follower");
            let leader = state.leader;
            let high_watermark = partition.high_watermark();
            partition.become_follower(leader, state.leader_epoch, state.replicas, state.isr);
            if generation == ReplicationGeneration::HwTruncation {
                // Before leader epochs (KIP-101), a new follower drops everything past its high
                // watermark: what the new leader lacks goes, and what it has is fetched again.
                let reason = "became follower: truncate to the high watermark";
                self.truncate_follower(topic_partition, high_watermark, reason, link.flushes, out);
            }
            if leader != NO_LEADER {
                let fetcher = self.fetchers.by_leader.entry(leader).or_default();
                fetcher.partitions.insert(topic_partition.clone());
                fetcher.delayed.remove(topic_partition);
                if matches!(
                    generation,
                    ReplicationGeneration::Kip101 | ReplicationGeneration::Kip279
                ) {
                    // KIP-101: find where the logs agree before fetching anything.
                    fetcher.truncating.insert(topic_partition.clone(), None);
                }
            }
        }
        self.after_isr_change(now, topic_partition, link.metadata, out);
        self.send_replica_fetches(now, link, out);
    }

    /// KIP-320/595: the leader says where our last epoch ends on its log; truncate to that or
    /// to where the same epoch ends here, whichever is lower, and fetch again.
    fn truncate_diverging(
        &mut self,
        topic_partition: &TopicPartition,
        (epoch, leader_end): (i32, i64),
        flushes: &mut Flushes,
        out: &mut Vec<Output<S::File>>,
    ) {
        let Some(partition) = self.partitions.get(topic_partition) else {
            return;
        };
        let end = partition.log().log_end_offset();
        let own = partition
            .log()
            .leader_epochs()
            .map_or(crate::log::leader_epochs::UNDEFINED, |epochs| {
                epochs.end_offset_for(epoch, end)
            });
        let offset = match own {
            _ if leader_end < 0 => partition.high_watermark(),
            (own_epoch, own_end) if own_epoch == epoch => leader_end.min(own_end),
            _ => leader_end,
        };
        let reason = format!("the leader's epoch {epoch} ends at offset {leader_end}");
        self.truncate_follower(topic_partition, offset.min(end), &reason, flushes, out);
    }

    /// On a follower: cuts the log at `offset`, records the truncation, and starts the fsync
    /// that makes the cut durable.
    fn truncate_follower(
        &mut self,
        topic_partition: &TopicPartition,
        offset: i64,
        reason: &str,
        flushes: &mut Flushes,
        out: &mut Vec<Output<S::File>>,
    ) {
        let Some(partition) = self.partitions.get_mut(topic_partition) else {
            return;
        };
        let high_watermark = partition.high_watermark();
        match partition.truncate_to(offset) {
            Ok(None) => {}
            Ok(Some((sync, mark))) => {
                let from_offset = partition.log().log_end_offset();
                tracing::info!(partition = %topic_partition, from_offset, %reason, "truncated");
                out.push(Output::Event(BrokerEvent::Truncated {
                    partition: topic_partition.clone(),
                    from_offset,
                    reason: reason.to_owned(),
                }));
                if partition.high_watermark() != high_watermark {
                    out.push(Output::Event(BrokerEvent::HighWatermark {
                        partition: topic_partition.clone(),
                        offset: partition.high_watermark(),
                    }));
                }
                let target = FlushTarget::Partition {
                    topic_partition: topic_partition.clone(),
                    mark,
                };
                flushes.start(target, sync, out);
            }
            Err(error) => {
                partition.go_offline_with_event(format!("truncation failed: {error}"), out);
            }
        }
    }

    /// A partition's ISR or role changed: its high watermark may move, which answers parked
    /// produces and fetches.
    pub(in crate::broker) fn after_isr_change(
        &mut self,
        now: Millis,
        topic_partition: &TopicPartition,
        metadata: &MetadataCache<S>,
        out: &mut Vec<Output<S::File>>,
    ) {
        if let Some(partition) = self.partitions.get(topic_partition) {
            out.push(Output::Event(BrokerEvent::PartitionState {
                partition: topic_partition.clone(),
                leader: partition.leader(),
                leader_epoch: partition.leader_epoch().0,
                replicas: partition.replicas().to_vec(),
                isr: partition.isr().to_vec(),
            }));
        }
        if self.advance_high_watermark(topic_partition, out) {
            let advanced = BTreeSet::from([topic_partition.clone()]);
            self.complete_delayed_fetches(now, &advanced, metadata, out);
        }
        self.complete_delayed_produces(topic_partition, out);
    }

    /// Changes a led partition's ISR: by itself when the broker is its own controller, through
    /// the controller (AlterPartition) in a cluster.
    fn change_isr(
        &mut self,
        now: Millis,
        topic_partition: &TopicPartition,
        new_isr: Vec<BrokerId>,
        link: &mut Link<'_, S>,
        out: &mut Vec<Output<S::File>>,
    ) {
        let Some(partition) = self.partitions.get_mut(topic_partition) else {
            return;
        };
        if link.controller.is_some() {
            link.propose_isr(now, partition, (topic_partition, new_isr), out);
            return;
        }
        partition.set_isr(new_isr);
        self.after_isr_change(now, topic_partition, link.metadata, out);
    }

    /// The controller answered an AlterPartition: adopt the committed ISR, or drop the
    /// proposal (the metadata log will say what holds).
    pub(in crate::broker) fn on_alter_partition_answer(
        &mut self,
        now: Millis,
        partitions: &[TopicPartition],
        response: &kafka_protocol::messages::AlterPartitionResponse,
        metadata: &MetadataCache<S>,
        out: &mut Vec<Output<S::File>>,
    ) {
        let answers = response
            .topics
            .iter()
            .flat_map(|topic| topic.partitions.iter());
        for (topic_partition, answer) in partitions.iter().zip(answers) {
            let Some(partition) = self.partitions.get_mut(topic_partition) else {
                continue;
            };
            partition.set_pending_isr(None);
            let error = ErrorCode::from_code(answer.error_code);
            if error != ErrorCode::None {
                tracing::info!(partition = %topic_partition, ?error, "AlterPartition refused");
                continue;
            }
            if partition.leader_epoch() != LeaderEpoch(answer.leader_epoch)
                || answer.partition_epoch <= partition.partition_epoch()
            {
                continue;
            }
            partition.set_isr(answer.isr.iter().map(|id| BrokerId(id.0)).collect());
            partition.set_partition_epoch(answer.partition_epoch);
            self.after_isr_change(now, topic_partition, metadata, out);
        }
    }

    /// Sends again, through the controller, the ISR proposals of `partitions` that are still
    /// pending; a proposal the metadata has meanwhile settled (no longer pending) is dropped.
    pub(in crate::broker) fn retry_isr_proposals(
        &mut self,
        now: Millis,
        partitions: BTreeSet<TopicPartition>,
        link: &mut Link<'_, S>,
        out: &mut Vec<Output<S::File>>,
    ) {
        for topic_partition in partitions {
            let Some(partition) = self.partitions.get_mut(&topic_partition) else {
                continue;
            };
            let Some(proposed) = partition.pending_isr().map(<[BrokerId]>::to_vec) else {
                continue;
            };
            partition.set_pending_isr(None);
            if !partition.is_leader() {
                continue;
            }
            link.propose_isr(now, partition, (&topic_partition, proposed), out);
        }
    }

    /// After a follower's fetch was read: records each partition's fetch offset as that
    /// follower's log end offset, lets it join the ISR, and moves the high watermarks (which
    /// answers parked acks=all produces).
    pub(in crate::broker) fn on_follower_fetched(
        &mut self,
        now: Millis,
        replica: BrokerId,
        fetched: &[(TopicPartition, i64)],
        link: &mut Link<'_, S>,
        out: &mut Vec<Output<S::File>>,
    ) {
        let mut advanced = BTreeSet::new();
        for (topic_partition, fetch_offset) in fetched {
            let Some(partition) = self.partitions.get_mut(topic_partition) else {
                continue;
            };
            if !partition.is_leader() || partition.offline().is_some() {
                continue;
            }
            let leader_end = partition.log().log_end_offset();
            let Some(fetch) = partition.on_follower_fetch(now, replica, *fetch_offset, leader_end)
            else {
                continue;
            };
            // KIP-841: a fenced broker is not eligible for the ISR; proposing it would only be
            // refused (INELIGIBLE_REPLICA) at every fetch until the controller unfences it.
            let eligible = link.controller.is_none() || link.metadata.image().is_active(replica);
            if fetch.may_join && eligible {
                let mut isr = partition.isr().to_vec();
                isr.push(replica);
                self.change_isr(now, topic_partition, isr, link, out);
            }
            if self.advance_high_watermark(topic_partition, out) {
                advanced.insert(topic_partition.clone());
            }
            self.complete_delayed_produces(topic_partition, out);
        }
        if !advanced.is_empty() {
            self.complete_delayed_fetches(now, &advanced, link.metadata, out);
        }
    }

    /// On a tick: leaders drop lagging followers from their ISR (which may move the high
    /// watermark), parked produces past their timeout answer, and fetchers whose backoff ended
    /// fetch again.
    pub(in crate::broker) fn on_replication_tick(
        &mut self,
        now: Millis,
        link: &mut Link<'_, S>,
        out: &mut Vec<Output<S::File>>,
    ) {
        let lag = link.config.replication.lag_time_max_ms as u64;
        let due: Vec<TopicPartition> = self
            .partitions
            .iter()
            .filter(|(_, partition)| {
                partition
                    .next_isr_deadline(lag)
                    .is_some_and(|deadline| deadline <= now)
            })
            .map(|(topic_partition, _)| topic_partition.clone())
            .collect();
        for topic_partition in due {
            let Some(partition) = self.partitions.get(&topic_partition) else {
                continue;
            };
            let lagging = partition.lagging_followers(now, lag);
            if lagging.is_empty() {
                continue;
            }
            let isr = partition
                .isr()
                .iter()
                .copied()
                .filter(|member| !lagging.contains(member))
                .collect();
            self.change_isr(now, &topic_partition, isr, link, out);
        }
        self.time_out_delayed_produces(now, out);
        self.send_replica_fetches(now, link, out);
    }

    /// The earliest ISR check, fetch backoff or produce timeout.
    pub(in crate::broker) fn next_replication_deadline(
        &self,
        config: &BrokerConfig,
    ) -> Option<Millis> {
        let lag = config.replication.lag_time_max_ms as u64;
        let isr = self
            .partitions
            .values()
            .filter_map(|partition| partition.next_isr_deadline(lag))
            .min();
        [isr, self.fetchers.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Sends a fetch to every leader whose session is idle: nothing in flight, no backoff, and
    /// every append it must report durable.
    pub(in crate::broker) fn send_replica_fetches(
        &mut self,
        now: Millis,
        link: &mut Link<'_, S>,
        out: &mut Vec<Output<S::File>>,
    ) {
        if self.fetchers.by_leader.is_empty() {
            return;
        }
        let leaders: Vec<BrokerId> = self.fetchers.by_leader.keys().copied().collect();
        for leader in leaders {
            let replicas = &self.partitions;
            let fetcher = self
                .fetchers
                .by_leader
                .get_mut(&leader)
                .expect("listed above");
            fetcher.delayed.retain(|_, until| now < *until);
            fetcher.awaiting_flush.retain(|(topic_partition, end)| {
                replicas.get(topic_partition).is_some_and(|partition| {
                    partition.offline().is_none() && !partition.is_durable(*end)
                })
            });
            if fetcher.in_flight.is_some()
                || fetcher.backoff_until.is_some_and(|until| now < until)
                || !fetcher.awaiting_flush.is_empty()
            {
                continue;
            }
            fetcher.backoff_until = None;
            let node = BrokerId(link.config.node_id);
            let (api_version, body) = if let Some(body) = self.leader_epochs_request(leader, node) {
                (
                    LEADER_EPOCHS_VERSION,
                    RequestKind::OffsetForLeaderEpoch(body),
                )
            } else if let Some(body) = self.replica_fetch_request(leader, link.config) {
                (REPLICA_FETCH_VERSION, RequestKind::Fetch(body))
            } else {
                continue;
            };
            let id = link.peer_ids.next_id();
            self.fetchers
                .by_leader
                .get_mut(&leader)
                .expect("listed above")
                .in_flight = Some(id);
            out.push(Output::PeerRequest {
                peer: leader,
                role: PeerRole::Broker,
                id,
                api_version,
                body: Box::new(body),
                timeout_ms: link.config.replication.socket_timeout_ms as u64,
            });
        }
    }

    /// The fetch a follower sends `leader` for every partition it follows there that is online.
    fn replica_fetch_request(
        &self,
        leader: BrokerId,
        config: &BrokerConfig,
    ) -> Option<FetchRequest> {
        let settings = &config.replication;
        let fetcher = self.fetchers.by_leader.get(&leader)?;
        let mut topics: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
        for topic_partition in &fetcher.partitions {
            let Some(partition) = self.partitions.get(topic_partition) else {
                continue;
            };
            if partition.offline().is_some() || fetcher.delayed.contains_key(topic_partition) {
                continue;
            }
            let last_fetched_epoch = match settings.generation {
                ReplicationGeneration::HwTruncation
                | ReplicationGeneration::Kip101
                | ReplicationGeneration::Kip279 => -1,
                ReplicationGeneration::Kip320 | ReplicationGeneration::Kip966 => partition
                    .log()
                    .leader_epochs()
                    .and_then(crate::log::leader_epochs::LeaderEpochCache::latest_epoch)
                    .unwrap_or(-1),
            };
            topics.entry(&topic_partition.topic).or_default().push(
                FetchPartition::default()
                    .with_partition(topic_partition.partition)
                    .with_current_leader_epoch(partition.leader_epoch().0)
                    .with_last_fetched_epoch(last_fetched_epoch)
                    .with_fetch_offset(partition.log().log_end_offset())
                    .with_log_start_offset(partition.log().log_start_offset())
                    .with_partition_max_bytes(settings.fetch_max_bytes),
            );
        }
        if topics.is_empty() {
            return None;
        }
        let topics = topics
            .into_iter()
            .map(|(topic, partitions)| {
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partitions(partitions)
            })
            .collect();
        Some(
            FetchRequest::default()
                .with_replica_id(kafka_protocol::messages::BrokerId(config.node_id))
                .with_max_wait_ms(settings.fetch_wait_max_ms)
                .with_min_bytes(settings.fetch_min_bytes)
                .with_max_bytes(settings.fetch_response_max_bytes)
                .with_isolation_level(0)
                .with_topics(topics),
        )
    }

    /// A leader answered a follower fetch (or the request failed): append what came back, take
    /// the leader's high watermark, and fetch again.
    pub(in crate::broker) fn on_peer_response(
        &mut self,
        now: Millis,
        peer: BrokerId,
        id: PeerRequestId,
        result: Result<Box<ResponseKind>, String>,
        link: &mut Link<'_, S>,
        out: &mut Vec<Output<S::File>>,
    ) {
        let Some(fetcher) = self.fetchers.by_leader.get_mut(&peer) else {
            return;
        };
        if fetcher.in_flight != Some(id) {
            return;
        }
        fetcher.in_flight = None;
        let backoff = now.plus(link.config.replication.fetch_backoff_ms as u64);
        let response = match result.map(|response| *response) {
            Ok(ResponseKind::OffsetForLeaderEpoch(response)) => {
                let generation = link.config.replication.generation;
                if !self.on_leader_epochs(peer, response, generation, link.flushes, out) {
                    if let Some(fetcher) = self.fetchers.by_leader.get_mut(&peer) {
                        fetcher.backoff_until = Some(backoff);
                    }
                }
                self.send_replica_fetches(now, link, out);
                return;
            }
            Ok(ResponseKind::Fetch(response)) if response.error_code == 0 => response,
            Ok(ResponseKind::Fetch(response)) => {
                tracing::warn!(
                    leader = peer.0,
                    error = response.error_code,
                    "replica fetch failed"
                );
                fetcher.backoff_until = Some(backoff);
                return;
            }
            Ok(other) => {
                tracing::error!(leader = peer.0, response = ?other, "a replica fetch answered by another API");
                fetcher.backoff_until = Some(backoff);
                return;
            }
            Err(error) => {
                tracing::warn!(leader = peer.0, %error, "replica fetch failed");
                fetcher.backoff_until = Some(backoff);
                return;
            }
        };
        for topic in response.responses {
            for data in topic.partitions {
                let topic_partition =
                    TopicPartition::new(topic.topic.as_str(), data.partition_index);
                if !self.on_replicated_partition(now, peer, &topic_partition, data, link, out) {
                    if let Some(fetcher) = self.fetchers.by_leader.get_mut(&peer) {
                        fetcher.delayed.insert(topic_partition, backoff);
                    }
                }
            }
        }
        self.send_replica_fetches(now, link, out);
    }

    /// One partition of a follower fetch response. Returns false if the partition should back
    /// off.
    fn on_replicated_partition(
        &mut self,
        now: Millis,
        leader: BrokerId,
        topic_partition: &TopicPartition,
        data: PartitionData,
        link: &mut Link<'_, S>,
        out: &mut Vec<Output<S::File>>,
    ) -> bool {
        let Some(partition) = self.partitions.get_mut(topic_partition) else {
            return true;
        };
        if partition.is_leader() || partition.leader() != leader || partition.offline().is_some() {
            return true;
        }
        let error = ErrorCode::from_code(data.error_code);
        if error == ErrorCode::OffsetOutOfRange
            && data.high_watermark >= 0
            && partition.log().log_end_offset() > data.high_watermark
        {
            // The follower holds more than the leader: drop what lies past the leader's high
            // watermark (what the leader has of it comes back with the next fetch).
            let offset = data.high_watermark;
            self.truncate_follower(
                topic_partition,
                offset,
                "the leader's log ends below ours",
                link.flushes,
                out,
            );
            return true;
        }
        if error != ErrorCode::None {
            tracing::warn!(partition = %topic_partition, leader = leader.0, ?error, "replica fetch of a partition failed");
            return false;
        }
        if data.diverging_epoch.end_offset >= 0 || data.diverging_epoch.epoch >= 0 {
            let diverging = (data.diverging_epoch.epoch, data.diverging_epoch.end_offset);
            self.truncate_diverging(topic_partition, diverging, link.flushes, out);
            return true;
        }
        let records = data.records.unwrap_or_default();
        let batches = match whole_batches(&records) {
            Ok(batches) => batches,
            Err(error) => {
                tracing::error!(partition = %topic_partition, %error, "a replicated batch is corrupt");
                return false;
            }
        };
        let mut flush_end = None;
        let mut rolled = None;
        for (header, range) in batches {
            if header.last_offset() < partition.log().log_end_offset() {
                continue;
            }
            match partition.append_as_follower(&records[range], &header) {
                Ok(info) => {
                    out.push(BrokerEvent::appended(topic_partition, &header).into());
                    if info.flush_required {
                        flush_end = Some(info.last_offset + 1);
                    }
                    rolled = info.rolled.or(rolled);
                }
                Err(error) => {
                    partition.follower_append_failed(&error, out);
                    return false;
                }
            }
        }
        partition.on_leader_high_watermark(data.high_watermark);
        self.after_follower_append(
            now,
            (leader, topic_partition),
            (flush_end, rolled),
            link,
            out,
        );
        true
    }

    /// After a follower appended what its leader sent: the flush the appends require (the
    /// next fetch waits for it), or the roll's, and the high watermark the leader reported.
    fn after_follower_append(
        &mut self,
        now: Millis,
        (leader, topic_partition): (BrokerId, &TopicPartition),
        (flush_end, rolled): (Option<i64>, Option<i64>),
        link: &mut Link<'_, S>,
        out: &mut Vec<Output<S::File>>,
    ) {
        if let Some(end) = flush_end {
            self.flush_partition(now, topic_partition, link.flushes, out);
            if let Some(fetcher) = self.fetchers.by_leader.get_mut(&leader) {
                fetcher.awaiting_flush.push((topic_partition.clone(), end));
            }
        } else if let Some(new_segment) = rolled {
            self.flush_rolled(topic_partition, new_segment, link.flushes, out);
        }
        if self.advance_high_watermark(topic_partition, out) {
            let advanced = BTreeSet::from([topic_partition.clone()]);
            self.complete_delayed_fetches(now, &advanced, link.metadata, out);
        }
    }
}

/// The whole batches of a records blob, validated; a leader may end a response inside a
/// batch, and that part is left for the next fetch.
fn whole_batches(records: &[u8]) -> Result<Vec<(RecordBatchHeader, Range<usize>)>, BatchError> {
    let mut batches = Vec::new();
    let mut position = 0;
    while position < records.len() {
        let header = match validate_batch(&records[position..]) {
            Ok(header) => header,
            Err(BatchError::Truncated { .. }) => break,
            Err(error) => return Err(error),
        };
        let end = position + header.size_bytes();
        batches.push((header, position..end));
        position = end;
    }
    Ok(batches)
}

/// Where a `kip-101` or `kip-279` follower truncates after the leader's OffsetsForLeaderEpoch
/// answer `(leader_epoch, leader_end)`, and the epoch to ask about next (`None`: done, fetch;
/// only `kip-279` asks again).
fn epoch_truncation(
    generation: ReplicationGeneration,
    epochs: Option<&crate::log::leader_epochs::LeaderEpochCache>,
    (log_end, high_watermark): (i64, i64),
    (leader_epoch, leader_end): (i32, i64),
) -> (i64, Option<i32>) {
    if leader_end < 0 {
        // The leader knows nothing that old: keep what is committed (Kafka truncates to the
        // high watermark here).
        return (high_watermark.min(log_end), None);
    }
    if generation == ReplicationGeneration::Kip101 || leader_epoch < 0 {
        // KIP-101 as first shipped: the answer's offset, whatever epoch it is for.
        return (leader_end.min(log_end), None);
    }
    // KIP-279 (Kafka's `getOffsetTruncationState`).
    let (own_epoch, own_end) = epochs.map_or(crate::log::leader_epochs::UNDEFINED, |epochs| {
        epochs.end_offset_for(leader_epoch, log_end)
    });
    if own_end < 0 {
        (leader_end.min(log_end), None)
    } else if own_epoch != leader_epoch {
        // The leader's answer is for an epoch this log does not have: cut back to where the
        // older epoch ends here, and ask about that one.
        (own_end.min(log_end), Some(own_epoch))
    } else {
        (leader_end.min(own_end).min(log_end), None)
    }
}

impl<S: Storage> ReplicaManager<S> {
    /// The OffsetsForLeaderEpoch a `kip-101`/`kip-279` follower sends `leader` for the
    /// partitions that must truncate before they fetch. A partition without any epoch (an empty
    /// log) has nothing to truncate and fetches at once.
    fn leader_epochs_request(
        &mut self,
        leader: BrokerId,
        node: BrokerId,
    ) -> Option<OffsetForLeaderEpochRequest> {
        let node_id = node.0;
        let fetcher = self.fetchers.by_leader.get_mut(&leader)?;
        let replicas = &self.partitions;
        let mut topics: BTreeMap<String, Vec<OffsetForLeaderPartition>> = BTreeMap::new();
        fetcher.truncating.retain(|topic_partition, asked| {
            let Some(partition) = replicas.get(topic_partition) else {
                return false;
            };
            if partition.offline().is_some() {
                return true;
            }
            let latest = partition
                .log()
                .leader_epochs()
                .and_then(crate::log::leader_epochs::LeaderEpochCache::latest_epoch);
            let Some(epoch) = asked.or(latest) else {
                return false;
            };
            topics
                .entry(topic_partition.topic.to_string())
                .or_default()
                .push(
                    OffsetForLeaderPartition::default()
                        .with_partition(topic_partition.partition)
                        .with_current_leader_epoch(partition.leader_epoch().0)
                        .with_leader_epoch(epoch),
                );
            true
        });
        if topics.is_empty() {
            return None;
        }
        Some(offset_for_leader_epoch_request(node_id, topics))
    }

    /// The leader's OffsetsForLeaderEpoch answer: truncate each partition where the
    /// generation says, and let it fetch once done. Returns false if the next request should
    /// back off (a partition's answer was an error).
    fn on_leader_epochs(
        &mut self,
        leader: BrokerId,
        response: OffsetForLeaderEpochResponse,
        generation: ReplicationGeneration,
        flushes: &mut Flushes,
        out: &mut Vec<Output<S::File>>,
    ) -> bool {
        let mut ok = true;
        for topic in response.topics {
            for data in topic.partitions {
                let topic_partition = TopicPartition::new(topic.topic.as_str(), data.partition);
                let waiting = self
                    .fetchers
                    .by_leader
                    .get(&leader)
                    .is_some_and(|fetcher| fetcher.truncating.contains_key(&topic_partition));
                let Some(partition) = self.partitions.get(&topic_partition) else {
                    continue;
                };
                if !waiting || partition.is_leader() || partition.leader() != leader {
                    continue;
                }
                let error = ErrorCode::from_code(data.error_code);
                if error != ErrorCode::None {
                    tracing::warn!(partition = %topic_partition, leader = leader.0, ?error, "leader epoch lookup failed");
                    ok = false;
                    continue;
                }
                let log_end = partition.log().log_end_offset();
                let (offset, ask_next) = epoch_truncation(
                    generation,
                    partition.log().leader_epochs(),
                    (log_end, partition.high_watermark()),
                    (data.leader_epoch, data.end_offset),
                );
                let reason = format!(
                    "the leader says epoch {} ends at offset {}",
                    data.leader_epoch, data.end_offset
                );
                self.truncate_follower(&topic_partition, offset, &reason, flushes, out);
                if let Some(fetcher) = self.fetchers.by_leader.get_mut(&leader) {
                    match ask_next {
                        None => fetcher.truncating.remove(&topic_partition),
                        Some(epoch) => fetcher.truncating.insert(topic_partition, Some(epoch)),
                    };
                }
            }
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::leader_epochs::LeaderEpochCache;

    /// KIP-279's case: the follower led epoch 3 briefly and wrote offset 1 in it, which the
    /// leader (epochs 1, 2 and now 4) never saw; the leader's offset 1 is from epoch 2.
    fn follower_with_an_epoch_the_leader_lacks() -> LeaderEpochCache {
        let mut epochs = LeaderEpochCache::default();
        epochs.assign(1, 0);
        epochs.assign(3, 1);
        epochs
    }

    #[test]
    fn kip_101_keeps_a_batch_of_an_epoch_the_leader_never_had() {
        let epochs = follower_with_an_epoch_the_leader_lacks();
        // Asked about epoch 3, the leader answers with epoch 2, ending at offset 2.
        let answer = epoch_truncation(ReplicationGeneration::Kip101, Some(&epochs), (2, 0), (2, 2));
        assert_eq!(
            answer,
            (2, None),
            "offset 1 (epoch 3) stays: the logs diverge"
        );
    }

    #[test]
    fn kip_279_walks_back_until_the_epochs_agree() {
        let mut epochs = follower_with_an_epoch_the_leader_lacks();
        let first = epoch_truncation(ReplicationGeneration::Kip279, Some(&epochs), (2, 0), (2, 2));
        assert_eq!(
            first,
            (1, Some(1)),
            "cut to where epoch 1 ends here, ask again about epoch 1"
        );
        epochs.truncate_from_end(1);
        // Asked about epoch 1, the leader answers that it ends at offset 1.
        let second = epoch_truncation(ReplicationGeneration::Kip279, Some(&epochs), (1, 0), (1, 1));
        assert_eq!(second, (1, None));
    }

    #[test]
    fn an_answer_for_the_same_epoch_cuts_at_the_lower_end_in_every_generation() {
        let mut epochs = LeaderEpochCache::default();
        epochs.assign(1, 0);
        epochs.assign(2, 5);
        for generation in [ReplicationGeneration::Kip101, ReplicationGeneration::Kip279] {
            assert_eq!(
                epoch_truncation(generation, Some(&epochs), (9, 3), (2, 7)),
                (7, None)
            );
            assert_eq!(
                epoch_truncation(generation, Some(&epochs), (9, 3), (-1, -1)),
                (3, None),
                "nothing that old on the leader: the high watermark"
            );
        }
    }
}
