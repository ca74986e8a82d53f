//! Kafka's `SubscriptionState`: the assigned partitions and, for each, either its position (the
//! next offset to fetch) or a pending reset and why, plus a retry pause after an error.
//!
//! Positions only move forward on their own (a fetch advances a position past what it
//! delivered); only the application (`seek`), a reset (`auto.offset.reset`) or a detected log
//! truncation (KIP-320) moves one anywhere else. Nothing here knows about requests or time
//! beyond the pause deadlines.
//!
//! KIP-320: a position remembers the leader epoch of the batch it was reached through (Kafka's
//! `FetchPosition.offsetEpoch`) and the leader epoch it was last known valid under. When the
//! metadata shows a newer leader epoch, a position with an epoch awaits validation: the new
//! leader says where that epoch ends in its log (OffsetsForLeaderEpoch), and a position past
//! that end is truncated back to it before anything more is fetched.

use std::collections::BTreeMap;

use crate::types::{Millis, TopicPartition};

/// Why a partition's position was set by `auto.offset.reset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    /// The partition had no position (newly assigned, never seeked).
    NoPosition,
    /// The broker answered OFFSET_OUT_OF_RANGE for a fetch at `position`.
    OffsetOutOfRange {
        /// The position the broker refused.
        position: i64,
    },
    /// KIP-320: the leader's log diverges below the position, which moved back to where the
    /// epoch of the last record read ends on the leader.
    LogTruncation {
        /// The position before the truncation.
        position: i64,
    },
}

/// Where a partition's next fetch starts (Kafka's `FetchState`: FETCHING or AWAIT_RESET).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FetchPosition {
    /// Fetch from this offset.
    Known(i64),
    /// The leader changed: ask it whether its log still holds what led to this offset.
    AwaitingValidation(i64),
    /// Ask ListOffsets for a position first (`auto.offset.reset`).
    AwaitingReset(ResetReason),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PartitionState {
    position: FetchPosition,
    /// The leader epoch of the batch the position was reached through, if known.
    offset_epoch: Option<i32>,
    /// The leader epoch the position was last known valid under.
    leader_epoch: Option<i32>,
    /// Not fetched or reset before this (a retry pause after a partition error).
    paused_until: Option<Millis>,
}

impl PartitionState {
    fn on_leader_epoch(&mut self, leader_epoch: i32, validate: bool) {
        let FetchPosition::Known(position) = self.position else {
            return;
        };
        if leader_epoch < 0 {
            return;
        }
        match self.leader_epoch {
            Some(known) if leader_epoch <= known => {}
            Some(_) if validate && self.offset_epoch.is_some() => {
                self.position = FetchPosition::AwaitingValidation(position);
                self.leader_epoch = Some(leader_epoch);
            }
            _ => self.leader_epoch = Some(leader_epoch),
        }
    }
}

/// Assigned partitions, their positions, pending resets and retry pauses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriptionState {
    partitions: BTreeMap<TopicPartition, PartitionState>,
    /// The order partitions go into a fetch: assignment order, and a partition that just
    /// delivered records moves to the end (Kafka's `movePartitionToEnd`), so that under tight
    /// byte limits no partition starves behind one that always has data.
    order: Vec<TopicPartition>,
}

impl SubscriptionState {
    /// Replaces the assignment; kept partitions keep their state, new ones await a reset.
    pub fn assign(&mut self, partitions: &[TopicPartition]) {
        let mut assigned = BTreeMap::new();
        for partition in partitions {
            let state = self
                .partitions
                .get(partition)
                .cloned()
                .unwrap_or(PartitionState {
                    position: FetchPosition::AwaitingReset(ResetReason::NoPosition),
                    offset_epoch: None,
                    leader_epoch: None,
                    paused_until: None,
                });
            assigned.insert(partition.clone(), state);
        }
        self.partitions = assigned;
        let mut order = Vec::with_capacity(self.partitions.len());
        for partition in partitions {
            if !order.contains(partition) {
                order.push(partition.clone());
            }
        }
        self.order = order;
    }

    /// Moves `partition` to the end of the fetch order (it just delivered records).
    pub fn move_to_end(&mut self, partition: &TopicPartition) {
        if let Some(at) = self.order.iter().position(|p| p == partition) {
            let moved = self.order.remove(at);
            self.order.push(moved);
        }
    }

    /// Sets the next offset to read and lifts any retry pause (the application chose, or a
    /// reset did). The position has no epoch: nothing validates it.
    pub fn seek(&mut self, partition: &TopicPartition, offset: i64) {
        self.seek_with_epoch(partition, offset, None);
    }

    /// Sets the next offset to read, reached through a batch of leader epoch `epoch`.
    pub fn seek_with_epoch(&mut self, partition: &TopicPartition, offset: i64, epoch: Option<i32>) {
        assert!(offset >= 0, "positions are non-negative");
        let state = self
            .partitions
            .get_mut(partition)
            .expect("seek on an assigned partition");
        state.position = FetchPosition::Known(offset);
        state.offset_epoch = epoch.filter(|epoch| *epoch >= 0);
        state.paused_until = None;
    }

    /// Moves a position forward past what a fetch delivered; `epoch` is the leader epoch of
    /// the last batch taken, if any was.
    pub fn advance(&mut self, partition: &TopicPartition, offset: i64, epoch: Option<i32>) {
        let state = self
            .partitions
            .get_mut(partition)
            .expect("advance on an assigned partition");
        let FetchPosition::Known(position) = state.position else {
            panic!("advance of {partition} without a position");
        };
        assert!(offset >= position, "a fetch never moves a position back");
        state.position = FetchPosition::Known(offset);
        if let Some(epoch) = epoch.filter(|epoch| *epoch >= 0) {
            state.offset_epoch = Some(epoch);
        }
    }

    /// The metadata names a leader epoch (`epoch_of`) for each assigned partition it knows. A
    /// position first seen under it adopts it; a newer epoch sends a position with an epoch to
    /// validation when `validate` (KIP-320), else it is adopted unchecked (clients before
    /// KIP-320).
    pub fn on_leader_epochs(
        &mut self,
        epoch_of: impl Fn(&TopicPartition) -> Option<i32>,
        validate: bool,
    ) {
        for (partition, state) in &mut self.partitions {
            if let Some(epoch) = epoch_of(partition) {
                state.on_leader_epoch(epoch, validate);
            }
        }
    }

    /// The leader confirmed a position awaiting validation: fetch from it again.
    pub fn complete_validation(&mut self, partition: &TopicPartition) {
        let state = self
            .partitions
            .get_mut(partition)
            .expect("validation of an assigned partition");
        let FetchPosition::AwaitingValidation(position) = state.position else {
            panic!("{partition} was not awaiting validation");
        };
        state.position = FetchPosition::Known(position);
    }

    /// Partitions awaiting validation and not paused: `(partition, position, offset epoch)`.
    pub fn validatable(&self) -> Vec<(TopicPartition, i64, i32)> {
        self.partitions
            .iter()
            .filter(|(_, state)| state.paused_until.is_none())
            .filter_map(
                |(partition, state)| match (state.position, state.offset_epoch) {
                    (FetchPosition::AwaitingValidation(position), Some(epoch)) => {
                        Some((partition.clone(), position, epoch))
                    }
                    _ => None,
                },
            )
            .collect()
    }

    /// The position awaiting validation, if `partition` awaits one.
    pub fn awaiting_validation(&self, partition: &TopicPartition) -> Option<i64> {
        match self.partitions.get(partition)?.position {
            FetchPosition::AwaitingValidation(position) => Some(position),
            _ => None,
        }
    }

    /// Forgets the position of `partition`: the next request for it is a reset.
    pub fn request_reset(&mut self, partition: &TopicPartition, reason: ResetReason) {
        let state = self
            .partitions
            .get_mut(partition)
            .expect("reset of an assigned partition");
        state.position = FetchPosition::AwaitingReset(reason);
    }

    /// Pauses `partition` until `until` (no fetch or reset before).
    pub fn pause(&mut self, partition: &TopicPartition, until: Millis) {
        let state = self
            .partitions
            .get_mut(partition)
            .expect("pause of an assigned partition");
        state.paused_until = Some(until);
    }

    /// Lifts every pause that ends at or before `now`.
    pub fn expire_pauses(&mut self, now: Millis) {
        for state in self.partitions.values_mut() {
            if state.paused_until.is_some_and(|until| until <= now) {
                state.paused_until = None;
            }
        }
    }

    /// The earliest end of a pause.
    pub fn next_unpause(&self) -> Option<Millis> {
        self.partitions
            .values()
            .filter_map(|state| state.paused_until)
            .min()
    }

    /// The leader epoch of the batch the position was reached through, if known.
    pub fn offset_epoch(&self, partition: &TopicPartition) -> Option<i32> {
        self.partitions.get(partition)?.offset_epoch
    }

    /// The next offset to read, if known (awaiting validation or not).
    pub fn position(&self, partition: &TopicPartition) -> Option<i64> {
        match self.partitions.get(partition)?.position {
            FetchPosition::Known(position) | FetchPosition::AwaitingValidation(position) => {
                Some(position)
            }
            FetchPosition::AwaitingReset(_) => None,
        }
    }

    /// The offset the next fetch starts from: known and not awaiting validation.
    pub fn fetch_position(&self, partition: &TopicPartition) -> Option<i64> {
        match self.partitions.get(partition)?.position {
            FetchPosition::Known(position) => Some(position),
            FetchPosition::AwaitingReset(_) | FetchPosition::AwaitingValidation(_) => None,
        }
    }

    /// Why `partition` awaits a reset, if it does.
    pub fn reset_reason(&self, partition: &TopicPartition) -> Option<ResetReason> {
        match self.partitions.get(partition)?.position {
            FetchPosition::Known(_) | FetchPosition::AwaitingValidation(_) => None,
            FetchPosition::AwaitingReset(reason) => Some(reason),
        }
    }

    /// Whether `partition` is assigned.
    pub fn is_assigned(&self, partition: &TopicPartition) -> bool {
        self.partitions.contains_key(partition)
    }

    /// Whether nothing is assigned.
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// Partitions awaiting a reset, paused or not.
    pub fn awaiting_reset(&self) -> impl Iterator<Item = &TopicPartition> {
        self.partitions
            .iter()
            .filter(|(_, state)| matches!(state.position, FetchPosition::AwaitingReset(_)))
            .map(|(partition, _)| partition)
    }

    /// Partitions awaiting a reset and not paused.
    pub fn resettable(&self) -> Vec<TopicPartition> {
        self.partitions
            .iter()
            .filter(|(_, state)| {
                state.paused_until.is_none()
                    && matches!(state.position, FetchPosition::AwaitingReset(_))
            })
            .map(|(partition, _)| partition.clone())
            .collect()
    }

    /// Partitions with a position and not paused, with their positions, in fetch order.
    pub fn fetchable(&self) -> Vec<(TopicPartition, i64)> {
        self.order
            .iter()
            .filter_map(|partition| {
                let state = &self.partitions[partition];
                match (state.paused_until, state.position) {
                    (None, FetchPosition::Known(position)) => Some((partition.clone(), position)),
                    _ => None,
                }
            })
            .collect()
    }

    /// Positions are non-negative, and so is a refused position kept for a reset's reason.
    pub fn check_invariants(&self) {
        assert_eq!(
            self.order.len(),
            self.partitions.len(),
            "every assigned partition has one place in the fetch order"
        );
        for (partition, state) in &self.partitions {
            match state.position {
                FetchPosition::Known(position) => {
                    assert!(position >= 0, "{partition}: negative position {position}");
                }
                FetchPosition::AwaitingValidation(position) => {
                    assert!(position >= 0, "{partition}: negative position {position}");
                    assert!(
                        state.offset_epoch.is_some(),
                        "{partition}: only a position with an epoch is validated"
                    );
                }
                FetchPosition::AwaitingReset(
                    ResetReason::OffsetOutOfRange { position }
                    | ResetReason::LogTruncation { position },
                ) => {
                    assert!(position >= 0, "{partition}: negative refused position");
                }
                FetchPosition::AwaitingReset(ResetReason::NoPosition) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_partition_keeps_its_position_and_a_new_one_awaits_a_reset() {
        let (kept, added) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        let mut state = SubscriptionState::default();
        state.assign(std::slice::from_ref(&kept));
        assert_eq!(state.reset_reason(&kept), Some(ResetReason::NoPosition));
        state.seek(&kept, 7);
        state.assign(&[kept.clone(), added.clone()]);
        assert_eq!(state.position(&kept), Some(7));
        assert_eq!(state.reset_reason(&added), Some(ResetReason::NoPosition));
        assert_eq!(state.fetchable(), vec![(kept.clone(), 7)]);
        assert_eq!(state.resettable(), vec![added]);
        state.check_invariants();
    }

    #[test]
    fn a_paused_partition_is_neither_fetched_nor_reset_until_the_pause_ends() {
        let partition = TopicPartition::new("t", 0);
        let mut state = SubscriptionState::default();
        state.assign(std::slice::from_ref(&partition));
        state.pause(&partition, Millis(100));
        assert!(state.resettable().is_empty());
        assert_eq!(state.next_unpause(), Some(Millis(100)));
        state.expire_pauses(Millis(99));
        assert!(state.resettable().is_empty());
        state.expire_pauses(Millis(100));
        assert_eq!(state.resettable(), vec![partition.clone()]);
        assert_eq!(state.next_unpause(), None);
        state.seek(&partition, 3);
        state.pause(&partition, Millis(200));
        assert!(state.fetchable().is_empty());
        state.seek(&partition, 4);
        assert_eq!(state.fetchable(), vec![(partition, 4)]);
    }
}
