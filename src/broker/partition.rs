//! A partition replica (Kafka's `Partition`): the local log plus the replication state that
//! decides what is committed: leader, leader epoch, ISR and high watermark.
//!
//! With one broker the ISR is the leader alone and the high watermark follows the log end
//! offset, with one exception that is Kafka's flush ordering: when the flush policy requires an
//! fsync before an append is acknowledged (`flush.messages`), Kafka fsyncs inside the append and
//! raises the high watermark only after it (`UnifiedLog.append`, then
//! `Partition.appendRecordsToLeader`). Here the fsync is asynchronous, so such an append leaves a
//! *durability barrier*: the high watermark stops at the batch until a flush covering it
//! completes. A consumer therefore never reads a record that a power loss could take back when
//! `flush.messages=1`. After a failed fsync the partition is offline (`KAFKA_STORAGE_ERROR`) and
//! nothing moves again until a restart.

use std::collections::VecDeque;

use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{BrokerId, LeaderEpoch, TopicPartition};

use crate::log::{AppendInfo, FlushMark, LogError, PartitionLog};
use crate::protocol::record_batch::RecordBatchHeader;

/// One partition's replica state on this broker.
#[derive(Debug)]
pub struct Partition<S: Storage> {
    /// Which partition.
    pub topic_partition: TopicPartition,
    /// The local log.
    pub log: PartitionLog<S>,
    /// Current leader.
    pub leader: BrokerId,
    /// Current leader epoch, stamped into every batch appended as leader.
    pub leader_epoch: LeaderEpoch,
    /// Assigned replicas.
    pub replicas: Vec<BrokerId>,
    /// In-sync replicas.
    pub isr: Vec<BrokerId>,
    high_watermark: i64,
    /// `[base, end)` of appends that must be durable before they are visible, oldest first.
    durability_barriers: VecDeque<(i64, i64)>,
    /// Why the partition is offline (a storage failure or corruption), if it is.
    offline: Option<String>,
}

impl<S: Storage> Partition<S> {
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
            high_watermark,
            durability_barriers: VecDeque::new(),
            offline: None,
        };
        partition.check_invariants();
        partition
    }

    /// Offsets below the high watermark are committed and visible to consumers.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
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

    /// Moves the high watermark to the smallest log end offset in the ISR (here, the leader's
    /// own), held back by the oldest append still waiting for its fsync. Returns whether it
    /// moved. It never moves backwards on a leader.
    pub fn maybe_advance_high_watermark(&mut self) -> bool {
        if self.offline.is_some() {
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
        let candidate = self
            .durability_barriers
            .front()
            .map_or(self.log.log_end_offset(), |(base, _)| *base);
        assert!(
            candidate >= self.high_watermark,
            "high watermark would go backwards"
        );
        let advanced = candidate > self.high_watermark;
        self.high_watermark = candidate;
        advanced
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
        assert!(self.isr.contains(&self.leader), "{name}: leader not in ISR");
        assert!(!self.isr.is_empty(), "{name}: empty ISR");
        for member in &self.isr {
            assert!(
                self.replicas.contains(member),
                "{name}: ISR member {member:?} not a replica"
            );
        }
    }
}
