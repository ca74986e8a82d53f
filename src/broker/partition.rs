//! A partition replica (Kafka's `Partition`): the local log plus the replication state that
//! decides what is committed: leader, leader epoch, ISR and high watermark.
//!
//! With one broker the ISR is the leader alone and the high watermark follows the log end
//! offset; replication (a later issue) widens `maybe_advance_high_watermark` to the minimum
//! log end offset over the ISR without changing its callers.

use crate::protocol::ErrorCode;
use crate::runtime::storage::Storage;
use crate::types::{BrokerId, LeaderEpoch, TopicPartition};

use super::log::PartitionLog;

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
    /// Why the partition is offline (a storage failure), if it is.
    pub offline: Option<String>,
}

impl<S: Storage> Partition<S> {
    /// A partition led by `leader` with itself as the only replica.
    pub fn new_local_leader(
        topic_partition: TopicPartition,
        log: PartitionLog<S>,
        leader: BrokerId,
    ) -> Self {
        let high_watermark = log.log_end_offset();
        let partition = Partition {
            topic_partition,
            log,
            leader,
            leader_epoch: LeaderEpoch(0),
            replicas: vec![leader],
            isr: vec![leader],
            high_watermark,
            offline: None,
        };
        partition.check_invariants();
        partition
    }

    /// Offsets below the high watermark are committed and visible to consumers.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// Moves the high watermark to the smallest log end offset in the ISR (here, the leader's
    /// own). Returns whether it moved. It never moves backwards on a leader.
    pub fn maybe_advance_high_watermark(&mut self) -> bool {
        let candidate = self.log.log_end_offset();
        assert!(
            candidate >= self.high_watermark,
            "high watermark would go backwards"
        );
        let advanced = candidate > self.high_watermark;
        self.high_watermark = candidate;
        advanced
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
        assert!(
            self.log.log_start_offset() <= self.high_watermark,
            "{}: log start above HW",
            self.topic_partition
        );
        assert!(
            self.high_watermark <= self.log.log_end_offset(),
            "{}: HW above log end",
            self.topic_partition
        );
        assert!(
            self.isr.contains(&self.leader),
            "{}: leader not in ISR",
            self.topic_partition
        );
        assert!(!self.isr.is_empty(), "{}: empty ISR", self.topic_partition);
        for member in &self.isr {
            assert!(
                self.replicas.contains(member),
                "{}: ISR member {member:?} not a replica",
                self.topic_partition
            );
        }
    }
}
