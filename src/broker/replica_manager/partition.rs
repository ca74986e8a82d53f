//! A partition replica (Kafka's `Partition`): the local log plus the replication state that
//! decides what is committed: leader, leader epoch, ISR and high watermark.
//!
//! On the leader, every follower's fetch offset is its log end offset (LEO); the high watermark
//! is the smallest LEO over the ISR; a follower that has not caught up with the leader's log end
//! for `replica.lag.time.max.ms` leaves the ISR, and one that reaches the high watermark (and
//! the start of the current leader epoch) joins it again. A follower appends what it fetched
//! with the leader's offsets and takes the leader's high watermark, bounded by its own log end.
//! With the leader alone in the ISR the high watermark follows the log end offset, with one
//! exception that is Kafka's flush ordering: when the flush policy requires an
//! fsync before an append is acknowledged (`flush.messages`), Kafka fsyncs inside the append and
//! raises the high watermark only after it (`UnifiedLog.append`, then
//! `Partition.appendRecordsToLeader`). Here the fsync is asynchronous, so such an append leaves a
//! *durability barrier*: the high watermark stops at the batch until a flush covering it
//! completes. A consumer therefore never reads a record that a power loss could take back when
//! `flush.messages=1`. After a failed fsync the partition is offline (`KAFKA_STORAGE_ERROR`) and
//! nothing moves again until a restart.

use std::collections::{BTreeMap, VecDeque};

pub use crate::config::Acks;
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{BrokerId, LeaderEpoch, Millis, TopicPartition};

use crate::log::{AppendInfo, FlushMark, LogError, PartitionLog, RecoveryReport};

use crate::node_io::{BrokerEvent, Output};
use crate::protocol::record_batch::RecordBatchHeader;

/// Where a parked append stands on its partition (Kafka's
/// `Partition.checkEnoughReplicasReachOffset`, with seedlog's flush policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendProgress {
    /// Still waiting: for its fsync, or for the high watermark to pass it.
    Waiting,
    /// Done: it can be answered as appended.
    Done,
    /// It failed with this error.
    Failed(ErrorCode),
}

/// One partition's replica state on this broker.
#[derive(Debug)]
#[allow(
    clippy::struct_field_names,
    reason = "Kafka's names: `topic_partition`, `partition_epoch`"
)]
pub struct Partition<S: Storage> {
    /// Which partition.
    topic_partition: TopicPartition,
    /// The local log.
    log: PartitionLog<S>,
    /// Current leader.
    leader: BrokerId,
    /// Current leader epoch, stamped into every batch appended as leader.
    leader_epoch: LeaderEpoch,
    /// Assigned replicas.
    replicas: Vec<BrokerId>,
    /// In-sync replicas.
    isr: Vec<BrokerId>,
    /// The partition epoch of the controller's state this replica follows.
    partition_epoch: i32,
    /// On the leader: an ISR change sent to the controller, not yet answered.
    pending_isr: Option<Vec<BrokerId>>,
    /// This broker.
    local: BrokerId,
    /// On the leader: what it knows of every other replica. Empty on a follower.
    followers: BTreeMap<BrokerId, FollowerState>,
    /// On the leader: its log end offset when it became leader of the current epoch. A
    /// follower joins the ISR only once it has reached it (Kafka's `leaderEpochStartOffsetOpt`).
    leader_epoch_start_offset: i64,
    /// On a follower: the leader's high watermark from the last fetch response.
    leader_high_watermark: i64,
    high_watermark: i64,
    /// `[base, end)` of appends that must be durable before they are visible, oldest first.
    durability_barriers: VecDeque<(i64, i64)>,
    /// Why the partition is offline (a storage failure or corruption), if it is.
    offline: Option<String>,
    /// On the leader, under KIP-966's strict min ISR: the ISR size below which the high
    /// watermark does not move (`min.insync.replicas`; 0: no such rule, before Kafka 3.7).
    min_isr_to_advance: usize,
}

/// What a leader knows of one follower (Kafka's `Replica` state), from its fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    /// The offset of its last fetch: everything below is on the follower. `-1` until it fetches.
    pub log_end_offset: i64,
    /// The last time it had caught up with the leader's log end (`None`: never, as leader).
    pub last_caught_up: Option<Millis>,
    /// The leader's log end offset at the follower's previous fetch.
    last_fetch_leader_log_end_offset: i64,
    /// The time of the follower's previous fetch.
    last_fetch: Option<Millis>,
}

impl FollowerState {
    fn new(last_caught_up: Option<Millis>) -> Self {
        FollowerState {
            log_end_offset: -1,
            last_caught_up,
            last_fetch_leader_log_end_offset: -1,
            last_fetch: None,
        }
    }

    /// Kafka's `Replica.updateFetchState`: a fetch at or past the leader's log end catches the
    /// follower up now; one at or past the leader's log end of the previous fetch caught it up
    /// at that fetch.
    fn on_fetch(&mut self, now: Millis, fetch_offset: i64, leader_log_end_offset: i64) {
        if fetch_offset >= leader_log_end_offset {
            self.last_caught_up = self.last_caught_up.max(Some(now));
        } else if fetch_offset >= self.last_fetch_leader_log_end_offset {
            self.last_caught_up = self.last_caught_up.max(self.last_fetch);
        }
        self.log_end_offset = fetch_offset;
        self.last_fetch_leader_log_end_offset = leader_log_end_offset;
        self.last_fetch = Some(now);
    }
}

/// What a follower's fetch changed on the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FollowerFetch {
    /// The follower may join the ISR.
    pub may_join: bool,
}

impl<S: Storage> Partition<S> {
    /// Which partition.
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.topic_partition
    }

    /// The local log.
    pub fn log(&self) -> &PartitionLog<S> {
        &self.log
    }

    /// The local log, to append to, flush, truncate or clean.
    pub fn log_mut(&mut self) -> &mut PartitionLog<S> {
        &mut self.log
    }

    /// The broker holding this replica.
    pub fn local(&self) -> BrokerId {
        self.local
    }

    /// The current leader.
    pub fn leader(&self) -> BrokerId {
        self.leader
    }

    /// The current leader epoch, stamped into every batch appended as leader.
    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.leader_epoch
    }

    /// The assigned replicas.
    pub fn replicas(&self) -> &[BrokerId] {
        &self.replicas
    }

    /// The in-sync replicas.
    pub fn isr(&self) -> &[BrokerId] {
        &self.isr
    }

    /// The partition epoch of the controller's state this replica follows.
    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    /// Follows the controller's partition epoch `epoch` (an ISR change it accepted, or a new
    /// state).
    pub fn set_partition_epoch(&mut self, epoch: i32) {
        self.partition_epoch = epoch;
    }

    /// A partition led by `leader` with itself as the only replica. Its log is durable up to
    /// its end (the broker syncs what recovery found before serving).
    pub fn new_local_leader(
        topic_partition: TopicPartition,
        log: PartitionLog<S>,
        leader: BrokerId,
    ) -> Self {
        let high_watermark = log.recovery_point();
        let partition = Partition {
            topic_partition,
            log,
            leader,
            leader_epoch: LeaderEpoch(0),
            replicas: vec![leader],
            isr: vec![leader],
            partition_epoch: 0,
            pending_isr: None,
            local: leader,
            followers: BTreeMap::new(),
            leader_epoch_start_offset: 0,
            leader_high_watermark: high_watermark,
            high_watermark,
            durability_barriers: VecDeque::new(),
            offline: None,
            min_isr_to_advance: 0,
        };
        partition.check_invariants();
        partition
    }

    /// KIP-966's strict min ISR (Kafka 3.7's `Partition.isUnderMinIsr` in
    /// `maybeIncrementLeaderHW`): as leader, the high watermark moves only while the committed
    /// ISR holds at least `min_insync_replicas` members (bounded by the replicas). A replica
    /// that leaves an ISR below the minimum therefore holds everything committed, which is
    /// what makes it an eligible leader replica. 0 turns the rule off.
    pub fn set_min_isr_to_advance(&mut self, min_insync_replicas: usize) {
        self.min_isr_to_advance = min_insync_replicas;
    }

    /// A replica opened in a cluster starts its high watermark where the high-watermark
    /// checkpoint left it, bounded by its log (and, under `flush.messages=1`, by what is
    /// durable), as Kafka's replicas do on restart. Under `flush.messages=1` the recovered tail
    /// past the recovery point (a process crash leaves it in the page cache, possibly never
    /// synced) is a durability barrier: the high watermark passes it only once the flush the
    /// caller starts has covered it.
    pub fn restore_high_watermark(&mut self, checkpointed: i64) {
        let (durable, end) = (self.log.recovery_point(), self.log.log_end_offset());
        let bound = if self.log.config().flush_messages == 1 {
            if durable < end {
                self.durability_barriers.push_back((durable, end));
            }
            durable
        } else {
            end
        };
        let high_watermark = checkpointed.min(bound).max(self.log.log_start_offset());
        self.high_watermark = high_watermark;
        self.leader_high_watermark = high_watermark;
        self.check_invariants();
    }

    /// Offsets below the high watermark are committed and visible to consumers.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// On a leader whose high watermark has not yet reached the start of its leader epoch: that
    /// start offset. A new leader starts from its own, possibly older, high watermark, which
    /// may lie below what the previous leader already exposed; until it catches up its high
    /// watermark says nothing a consumer may trust as the end of the log (KIP-207; Kafka's
    /// `leaderEpochStartOffsetOpt` compared with the high watermark in
    /// `Partition.fetchOffsetForTimestamp`).
    pub fn lagging_epoch_start(&self) -> Option<i64> {
        (self.is_leader() && self.leader_epoch_start_offset > self.high_watermark)
            .then_some(self.leader_epoch_start_offset)
    }

    /// Why the partition is offline, if it is.
    pub fn offline(&self) -> Option<&str> {
        self.offline.as_deref()
    }

    /// Takes the partition offline for good (until a restart): nothing is appended,
    /// acknowledged or made visible any more.
    pub fn go_offline(&mut self, reason: String) {
        assert!(!reason.is_empty(), "an offline partition says why");
        tracing::error!(partition = %self.topic_partition, %reason, "partition offline");
        self.offline.get_or_insert(reason);
    }

    /// A follower's append failed: a failed disk takes the partition offline (a broker in a
    /// cluster then halts, as Kafka does when its log directory fails); a batch out of place is
    /// left for the next fetch to retry.
    pub fn follower_append_failed<F>(&mut self, error: &LogError, out: &mut Vec<Output<F>>) {
        tracing::error!(partition = %self.topic_partition, %error, "replicated append failed");
        if matches!(error, LogError::Io(_)) {
            self.go_offline_with_event(format!("replicated append failed: {error}"), out);
        }
    }

    /// [`go_offline`](Self::go_offline), and the `offline` event that tells the simulator's
    /// history (and, in a cluster, `Broker::maybe_halt`).
    pub fn go_offline_with_event<F>(&mut self, reason: String, out: &mut Vec<Output<F>>) {
        self.go_offline(reason.clone());
        out.push(Output::Event(BrokerEvent::Offline {
            partition: self.topic_partition.clone(),
            reason,
        }));
    }

    /// Appends a validated batch as leader. An append that requires an fsync first becomes a
    /// durability barrier for the high watermark.
    pub fn append_as_leader(
        &mut self,
        batch: &mut [u8],
        header: &RecordBatchHeader,
    ) -> Result<AppendInfo, LogError> {
        assert!(self.offline.is_none(), "no appends to an offline partition");
        let info = self.log.append(batch, header, self.leader_epoch.0)?;
        if info.flush_required {
            self.durability_barriers
                .push_back((info.base_offset, info.last_offset + 1));
        }
        Ok(info)
    }

    /// A flush of this partition completed successfully. Ignored once offline: an fsync that
    /// succeeds after an earlier one failed proves nothing about the pages the failure dropped.
    pub fn on_flush_completed(&mut self, mark: FlushMark) {
        if self.offline.is_none() {
            self.log.flush_completed(mark);
        }
    }

    /// Moves the high watermark forward as far as it can. On the leader: to the smallest log end
    /// offset in the ISR, held back by the oldest append still waiting for its fsync. On a
    /// follower: to the leader's high watermark as last fetched, bounded the same way by its own
    /// log. Returns whether it moved. It never moves backwards.
    pub fn maybe_advance_high_watermark(&mut self) -> bool {
        if self.offline.is_some() {
            return false;
        }
        if self.is_leader() && self.isr.len() < self.min_isr_to_advance.min(self.replicas.len()) {
            // Under the minimum ISR (KIP-966): what is appended now is not committed.
            return false;
        }
        let durable = self.log.recovery_point();
        while self
            .durability_barriers
            .front()
            .is_some_and(|(_, end)| *end <= durable)
        {
            self.durability_barriers.pop_front();
        }
        let visible = self
            .durability_barriers
            .front()
            .map_or(self.log.log_end_offset(), |(base, _)| *base);
        let candidate = if self.is_leader() {
            self.maximal_isr()
                .iter()
                .filter_map(|member| self.followers.get(member))
                .map(|follower| follower.log_end_offset)
                .fold(visible, i64::min)
        } else {
            visible.min(self.leader_high_watermark)
        };
        assert!(
            candidate >= self.high_watermark || self.isr.len() > 1 || !self.is_leader(),
            "high watermark would go backwards"
        );
        let advanced = candidate > self.high_watermark;
        if advanced {
            self.high_watermark = candidate;
        }
        advanced
    }

    /// Whether this broker leads the partition.
    pub fn is_leader(&self) -> bool {
        self.leader == self.local
    }

    /// On the leader: what it knows of each follower.
    pub fn followers(&self) -> &BTreeMap<BrokerId, FollowerState> {
        &self.followers
    }

    /// Becomes leader of `leader_epoch` with these replicas and ISR (Kafka's `makeLeader`).
    /// Followers in the ISR count as caught up now; their log end offsets are unknown until
    /// they fetch, so the high watermark waits for their first fetch.
    pub fn become_leader(
        &mut self,
        now: Millis,
        leader_epoch: LeaderEpoch,
        replicas: Vec<BrokerId>,
        isr: Vec<BrokerId>,
    ) {
        self.leader = self.local;
        self.leader_epoch = leader_epoch;
        self.followers = replicas
            .iter()
            .filter(|replica| **replica != self.local)
            .map(|replica| {
                let caught_up = isr.contains(replica).then_some(now);
                (*replica, FollowerState::new(caught_up))
            })
            .collect();
        self.replicas = replicas;
        self.isr = isr;
        // A proposal of the previous epoch died with it (Kafka's `makeLeader` starts from the
        // committed state): its answer, if any, is for an epoch no longer ours.
        self.pending_isr = None;
        self.leader_epoch_start_offset = self.log.log_end_offset();
    }

    /// Follows `leader` in `leader_epoch` (Kafka's `makeFollower`). The high watermark stays
    /// until the new leader's first fetch response.
    pub fn become_follower(
        &mut self,
        leader: BrokerId,
        leader_epoch: LeaderEpoch,
        replicas: Vec<BrokerId>,
        isr: Vec<BrokerId>,
    ) {
        assert_ne!(leader, self.local, "a follower follows another broker");
        self.leader = leader;
        self.leader_epoch = leader_epoch;
        self.followers.clear();
        self.replicas = replicas;
        self.isr = isr;
        self.pending_isr = None;
        self.leader_high_watermark = self.high_watermark;
    }

    /// On the leader: a follower fetched from `fetch_offset` while the leader's log ended at
    /// `leader_log_end_offset`. Records its log end offset and catch-up time, and says whether
    /// it may join the ISR: it has reached the high watermark and the start of the leader epoch
    /// (Kafka's `maybeExpandIsr`). `None` if `replica` is not a follower of this partition.
    pub fn on_follower_fetch(
        &mut self,
        now: Millis,
        replica: BrokerId,
        fetch_offset: i64,
        leader_log_end_offset: i64,
    ) -> Option<FollowerFetch> {
        let high_watermark = self.high_watermark;
        let epoch_start = self.leader_epoch_start_offset;
        let follower = self.followers.get_mut(&replica)?;
        follower.on_fetch(now, fetch_offset, leader_log_end_offset);
        let may_join = !self.maximal_isr().contains(&replica)
            && self.pending_isr.is_none()
            && fetch_offset >= high_watermark
            && fetch_offset >= epoch_start;
        Some(FollowerFetch { may_join })
    }

    /// On the leader: the ISR members that have not caught up with the leader's log end for
    /// longer than `lag_time_max_ms` (Kafka's `getOutOfSyncReplicas`). None while an ISR change
    /// is pending.
    pub fn lagging_followers(&self, now: Millis, lag_time_max_ms: u64) -> Vec<BrokerId> {
        if !self.is_leader() || self.offline.is_some() || self.pending_isr.is_some() {
            return Vec::new();
        }
        self.isr
            .iter()
            .copied()
            .filter(|member| {
                self.followers.get(member).is_some_and(|follower| {
                    follower
                        .last_caught_up
                        .is_none_or(|caught_up| now.0 > caught_up.0 + lag_time_max_ms)
                })
            })
            .collect()
    }

    /// Sets the ISR (a change the leader made, or the controller committed).
    pub fn set_isr(&mut self, mut isr: Vec<BrokerId>) {
        isr.sort_unstable();
        isr.dedup();
        if isr != self.isr {
            tracing::info!(partition = %self.topic_partition, from = ?self.isr, to = ?isr, "ISR changed");
        }
        self.isr = isr;
        self.pending_isr = None;
    }

    /// On the leader: an ISR change sent to the controller and not answered yet. Until it is,
    /// the high watermark counts the *maximal* ISR (the current one plus any member being
    /// added), so it never passes what a member of either ISR lacks (Kafka's KIP-497).
    pub fn set_pending_isr(&mut self, pending: Option<Vec<BrokerId>>) {
        self.pending_isr = pending;
    }

    /// The ISR change waiting for the controller, if any.
    pub fn pending_isr(&self) -> Option<&[BrokerId]> {
        self.pending_isr.as_deref()
    }

    /// The current ISR plus the members a pending change adds.
    fn maximal_isr(&self) -> Vec<BrokerId> {
        let mut isr = self.isr.clone();
        for member in self.pending_isr.iter().flatten() {
            if !isr.contains(member) {
                isr.push(*member);
            }
        }
        isr
    }

    /// On the leader: the first time an ISR follower may have lagged too long.
    pub fn next_isr_deadline(&self, lag_time_max_ms: u64) -> Option<Millis> {
        if !self.is_leader() || self.offline.is_some() || self.pending_isr.is_some() {
            return None;
        }
        self.isr
            .iter()
            .filter_map(|member| self.followers.get(member))
            .map(|follower| {
                follower
                    .last_caught_up
                    .map_or(Millis(0), |caught_up| caught_up.plus(lag_time_max_ms + 1))
            })
            .min()
    }

    /// On a follower: appends a batch fetched from the leader, keeping its offsets and epoch.
    /// An append that requires an fsync first holds the high watermark back, as on a leader.
    pub fn append_as_follower(
        &mut self,
        batch: &[u8],
        header: &RecordBatchHeader,
    ) -> Result<AppendInfo, LogError> {
        assert!(self.offline.is_none(), "no appends to an offline partition");
        assert!(!self.is_leader(), "a leader appends as leader");
        let info = self.log.append_as_follower(batch, header)?;
        if info.flush_required {
            self.durability_barriers
                .push_back((info.base_offset, info.last_offset + 1));
        }
        Ok(info)
    }

    /// On a follower: drops everything from `offset` on (what the leader does not have).
    /// Returns what to sync for the cut to be durable, if anything was cut.
    pub fn truncate_to(
        &mut self,
        offset: i64,
    ) -> Result<Option<crate::log::StartedFlush<S::File>>, LogError> {
        assert!(!self.is_leader(), "only followers truncate");
        let cut = self.log.truncate_to(offset)?;
        let end = self.log.log_end_offset();
        self.durability_barriers.retain(|(base, _)| *base < end);
        if let Some((_, barrier_end)) = self.durability_barriers.back_mut() {
            *barrier_end = (*barrier_end).min(end);
        }
        self.high_watermark = self.high_watermark.min(end);
        self.leader_high_watermark = self.leader_high_watermark.min(end);
        Ok(cut)
    }

    /// On a follower: the leader's high watermark from a fetch response.
    pub fn on_leader_high_watermark(&mut self, leader_high_watermark: i64) {
        self.leader_high_watermark = self.leader_high_watermark.max(leader_high_watermark);
    }

    /// Whether an append ending at `end_offset` (exclusive) had to be flushed before its
    /// acknowledgement (it crossed `flush.messages`) and the flush has not completed yet.
    pub fn awaits_flush(&self, end_offset: i64) -> bool {
        self.durability_barriers
            .iter()
            .any(|(base, end)| *base < end_offset && end_offset <= *end)
    }

    /// Kafka's `appendRecordsToLeader` check: an acks=all produce needs an ISR of at least
    /// `min_insync_replicas` (`Err`: NOT_ENOUGH_REPLICAS's message).
    pub fn check_enough_replicas(
        &self,
        acks: Acks,
        min_insync_replicas: usize,
    ) -> Result<(), String> {
        if acks == Acks::All && self.isr.len() < min_insync_replicas {
            return Err(format!(
                "The size of the current ISR {} is insufficient to satisfy the min.isr requirement of {min_insync_replicas}",
                self.isr.len()
            ));
        }
        Ok(())
    }

    /// Whether an append with `acks` waits for followers (acks=all with followers).
    pub fn awaits_followers(&self, acks: Acks) -> bool {
        acks == Acks::All && !self.followers.is_empty()
    }

    /// Where an append ending at `end_offset` stands: it fails if the partition went offline
    /// (KAFKA_STORAGE_ERROR) or is no longer led here (NOT_LEADER_OR_FOLLOWER); it waits for
    /// its fsync when `durable`, and, when `replicated` (acks=all, with the
    /// `min.insync.replicas` it was appended under), for the high watermark to pass it; then
    /// an ISR that shrank below that minimum fails it (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
    pub fn append_progress(
        &self,
        end_offset: i64,
        durable: bool,
        replicated: Option<usize>,
    ) -> AppendProgress {
        if self.offline.is_some() {
            return AppendProgress::Failed(ErrorCode::KafkaStorageError);
        }
        if !self.is_leader() {
            return AppendProgress::Failed(ErrorCode::NotLeaderOrFollower);
        }
        if durable && !self.is_durable(end_offset) {
            return AppendProgress::Waiting;
        }
        match replicated {
            Some(_) if self.high_watermark() < end_offset => AppendProgress::Waiting,
            Some(min_insync) if self.isr.len() < min_insync => {
                AppendProgress::Failed(ErrorCode::NotEnoughReplicasAfterAppend)
            }
            _ => AppendProgress::Done,
        }
    }

    /// What this partition looks like after recovery, for the history: where its log starts,
    /// that anything once past its end may be gone (the broker cannot know what a crash took),
    /// and whether it is offline.
    pub fn recovered_events(&self, recovery: &RecoveryReport) -> Vec<BrokerEvent> {
        let name = &self.topic_partition;
        let mut events = vec![
            BrokerEvent::LogStartOffset {
                partition: name.clone(),
                offset: self.log.log_start_offset(),
            },
            BrokerEvent::Truncated {
                partition: name.clone(),
                from_offset: self.log.log_end_offset(),
                reason: format!(
                    "recovery on start-up ({} bytes truncated, {} segments deleted)",
                    recovery.truncated_bytes, recovery.deleted_segments
                ),
            },
        ];
        if let Some(reason) = self.offline() {
            events.push(BrokerEvent::Offline {
                partition: name.clone(),
                reason: reason.to_owned(),
            });
        }
        events
    }

    /// Whether this broker leads the partition with fewer in-sync replicas than replicas
    /// (Kafka's `Partition.isUnderReplicated`: counted by the leader only, so a cluster counts
    /// each partition once).
    pub fn is_under_replicated(&self) -> bool {
        self.is_leader() && self.isr.len() < self.replicas.len()
    }

    /// Whether an append ending at `end_offset` (exclusive) is durable on this replica.
    pub fn is_durable(&self, end_offset: i64) -> bool {
        self.log.recovery_point() >= end_offset
    }

    /// KIP-320 fencing of a request that names the leader epoch it expects (`-1`: none):
    /// an older epoch is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH.
    pub fn check_leader_epoch(&self, current_leader_epoch: i32) -> Result<(), ErrorCode> {
        let epoch = self.leader_epoch.0;
        match current_leader_epoch {
            requested if requested < 0 || requested == epoch => Ok(()),
            requested if requested < epoch => Err(ErrorCode::FencedLeaderEpoch),
            _ => Err(ErrorCode::UnknownLeaderEpoch),
        }
    }

    /// Cross-field invariants; a violation is a bug.
    pub fn check_invariants(&self) {
        self.log.check_invariants();
        let name = &self.topic_partition;
        assert!(
            self.log.log_start_offset() <= self.high_watermark,
            "{name}: log start above HW"
        );
        assert!(
            self.high_watermark <= self.log.log_end_offset(),
            "{name}: HW above log end"
        );
        if self.log.config().flush_messages == 1 {
            // Kafka's flush ordering: nothing is visible before it is durable.
            assert!(
                self.high_watermark <= self.log.recovery_point(),
                "{name}: HW {} above the recovery point {} with flush.messages=1",
                self.high_watermark,
                self.log.recovery_point()
            );
        }
        if let Some((base, end)) = self.durability_barriers.front() {
            assert!(base < end, "{name}: an empty barrier");
            assert!(
                self.high_watermark <= *base || self.offline.is_some(),
                "{name}: HW passed an append that is not durable"
            );
        }
        assert!(
            self.leader.0 < 0 || self.isr.contains(&self.leader),
            "{name}: leader not in ISR"
        );
        assert!(
            self.replicas.contains(&self.local),
            "{name}: not a replica here"
        );
        if self.is_leader() {
            for follower in self.followers.keys() {
                assert!(
                    *follower != self.local && self.replicas.contains(follower),
                    "{name}: follower {follower:?} not another replica"
                );
            }
        } else {
            assert!(
                self.followers.is_empty(),
                "{name}: a follower tracks followers"
            );
        }
        assert!(
            !self.isr.is_empty() || self.leader.0 < 0,
            "{name}: an empty ISR with a leader (only KIP-966's leaderless partition has none)"
        );
        for member in &self.isr {
            assert!(
                self.replicas.contains(member),
                "{name}: ISR member {member:?} not a replica"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::LogConfig;
    use crate::protocol::record_batch::{build_batch, validate_batch};
    use crate::storage::memory::MemoryStorage;

    const LOCAL: BrokerId = BrokerId(1);

    /// A leader of `t-0` alone in its ISR, whose log asks for an fsync after every append.
    fn leader(storage: &MemoryStorage) -> Partition<MemoryStorage> {
        let config = LogConfig {
            segment_bytes: 1 << 20,
            index_interval_bytes: 100,
            flush_messages: 1,
            flush_ms: None,
            segment_ms: i64::MAX,
            compacted: false,
        };
        let (log, _) =
            PartitionLog::open(storage.clone(), "t-0", config, 0, Millis(0)).expect("open");
        Partition::new_local_leader(TopicPartition::new("t", 0), log, LOCAL)
    }

    /// Appends one record and completes its fsync; the append's end offset.
    fn append_durably(storage: &MemoryStorage, partition: &mut Partition<MemoryStorage>) -> i64 {
        let mut batch = build_batch(&[(None, Some(b"v".as_slice()))], 1).to_vec();
        let header = validate_batch(&batch).expect("valid");
        let info = partition
            .append_as_leader(&mut batch, &header)
            .expect("append");
        let (sync, mark) = partition
            .log_mut()
            .start_flush(Millis(0))
            .expect("unflushed");
        sync.complete_now(storage).expect("sync");
        partition.on_flush_completed(mark);
        info.last_offset + 1
    }

    #[test]
    fn acks_on_the_wire_are_minus_one_zero_and_one() {
        assert_eq!(Acks::from_wire(-1), Some(Acks::All));
        assert_eq!(Acks::from_wire(0), Some(Acks::None));
        assert_eq!(Acks::from_wire(1), Some(Acks::Leader));
        for invalid in [-2, 2, 3, i16::MAX] {
            assert_eq!(Acks::from_wire(invalid), None, "{invalid}");
        }
    }

    #[test]
    fn acks_all_needs_min_insync_replicas_in_the_isr_and_other_acks_do_not() {
        let partition = leader(&MemoryStorage::new());
        let refused = partition
            .check_enough_replicas(Acks::All, 2)
            .expect_err("an ISR of one is short of two");
        assert!(
            refused.contains("ISR 1") && refused.contains("requirement of 2"),
            "{refused}"
        );
        assert_eq!(partition.check_enough_replicas(Acks::All, 1), Ok(()));
        assert_eq!(partition.check_enough_replicas(Acks::Leader, 2), Ok(()));
        assert_eq!(partition.check_enough_replicas(Acks::None, 2), Ok(()));
        assert!(!partition.awaits_followers(Acks::All), "no followers");
    }

    #[test]
    fn an_append_waits_for_its_fsync_then_for_the_high_watermark_under_acks_all() {
        let storage = MemoryStorage::new();
        let mut partition = leader(&storage);
        partition.become_leader(
            Millis(0),
            LeaderEpoch(1),
            vec![LOCAL, BrokerId(2)],
            vec![LOCAL, BrokerId(2)],
        );
        assert!(partition.awaits_followers(Acks::All));
        assert!(!partition.awaits_followers(Acks::Leader));
        let mut batch = build_batch(&[(None, Some(b"v".as_slice()))], 1).to_vec();
        let header = validate_batch(&batch).expect("valid");
        let end = partition
            .append_as_leader(&mut batch, &header)
            .expect("append")
            .last_offset
            + 1;
        assert_eq!(
            partition.append_progress(end, true, None),
            AppendProgress::Waiting,
            "fsync"
        );
        let (sync, mark) = partition
            .log_mut()
            .start_flush(Millis(0))
            .expect("unflushed");
        sync.complete_now(&storage).expect("sync");
        partition.on_flush_completed(mark);
        assert_eq!(
            partition.append_progress(end, true, None),
            AppendProgress::Done,
            "acks=1"
        );
        assert_eq!(
            partition.append_progress(end, true, Some(2)),
            AppendProgress::Waiting,
            "the follower lacks it: the high watermark is below"
        );
    }

    #[test]
    fn an_acks_all_append_fails_when_the_isr_shrank_below_min_insync_replicas() {
        let storage = MemoryStorage::new();
        let mut partition = leader(&storage);
        let end = append_durably(&storage, &mut partition);
        partition.maybe_advance_high_watermark();
        assert!(partition.high_watermark() >= end);
        assert_eq!(
            partition.append_progress(end, true, Some(1)),
            AppendProgress::Done
        );
        assert_eq!(
            partition.append_progress(end, true, Some(2)),
            AppendProgress::Failed(ErrorCode::NotEnoughReplicasAfterAppend)
        );
    }

    #[test]
    fn an_append_fails_on_a_partition_gone_offline_or_no_longer_led_here() {
        let storage = MemoryStorage::new();
        let mut partition = leader(&storage);
        let end = append_durably(&storage, &mut partition);
        partition.become_follower(
            BrokerId(2),
            LeaderEpoch(1),
            vec![LOCAL, BrokerId(2)],
            vec![BrokerId(2)],
        );
        assert_eq!(
            partition.append_progress(end, false, None),
            AppendProgress::Failed(ErrorCode::NotLeaderOrFollower)
        );
        partition.go_offline("disk".into());
        assert_eq!(
            partition.append_progress(end, false, None),
            AppendProgress::Failed(ErrorCode::KafkaStorageError)
        );
    }

    /// Kafka's `Replica.updateFetchState`: a follower that reaches the leader's log end is
    /// caught up now; one that reaches the log end the leader had at its previous fetch was
    /// caught up at that previous fetch; one that falls further behind keeps its old time.
    #[test]
    fn a_follower_is_caught_up_when_it_reaches_the_log_end_of_this_or_the_previous_fetch() {
        let mut follower = FollowerState::new(None);
        follower.on_fetch(Millis(10), 5, 5);
        assert_eq!(follower.last_caught_up, Some(Millis(10)));
        follower.on_fetch(Millis(20), 5, 8);
        assert_eq!(
            follower.last_caught_up,
            Some(Millis(10)),
            "behind the log end"
        );
        follower.on_fetch(Millis(30), 8, 12);
        assert_eq!(
            follower.last_caught_up,
            Some(Millis(20)),
            "reached the log end of the previous fetch"
        );
        follower.on_fetch(Millis(40), 9, 15);
        assert_eq!(
            follower.last_caught_up,
            Some(Millis(20)),
            "fell behind again"
        );
        assert_eq!(follower.log_end_offset, 9);
    }
}
