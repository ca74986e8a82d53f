//! One `transactional.id` at its coordinator (Kafka's `TransactionMetadata`): the producer id
//! and epochs it hands out, the partitions of the open transaction, and its
//! [`TransactionState`].
//!
//! Every change is two steps. `prepare_*` checks the change against the state table and the
//! epochs, marks the target state pending and returns a [`Transit`]: the record to append to
//! `__transaction_state`. Only once that record is durable does [`TransactionMetadata::complete`]
//! apply it; if the write fails, [`TransactionMetadata::abandon`] drops the pending state. While
//! a transition is pending no other may be prepared (the coordinator answers
//! CONCURRENT_TRANSACTIONS meanwhile), so an answer never reports a state the log could lose.
//!
//! Transaction version 2 (KIP-890 part 2) bumps the producer epoch when a transaction ends: a
//! late EndTxn or produce of the ended transaction then carries an old epoch and is fenced,
//! which closes the classic protocol's window for aborted reads, lost writes and torn
//! transactions. When the bump would exhaust the epochs, the transaction ends on a new producer
//! id instead (`next_producer_id`), at epoch 0.

use std::collections::BTreeSet;

use crate::protocol::ErrorCode;
use crate::types::TopicPartition;

use super::state::TransactionState::{
    self, CompleteAbort, CompleteCommit, Dead, Empty, Ongoing, PrepareAbort, PrepareCommit,
    PrepareEpochFence,
};

/// A producer id not assigned (Kafka's `RecordBatch.NO_PRODUCER_ID`).
pub const NO_PRODUCER_ID: i64 = -1;
/// A producer epoch not assigned (Kafka's `RecordBatch.NO_PRODUCER_EPOCH`).
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// The transaction protocol a client speaks (`transaction.version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TransactionVersion {
    /// The classic protocol: one epoch for every transaction of a producer session.
    V1,
    /// KIP-890 part 2: the epoch is bumped at the end of every transaction.
    V2,
}

impl TransactionVersion {
    /// Whether the epoch is bumped at the end of every transaction.
    pub fn bumps_epoch_per_transaction(self) -> bool {
        self == TransactionVersion::V2
    }
}

/// Whether `epoch` leaves no room for another bump (Kafka keeps `i16::MAX` for fencing).
pub fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// Why a transition could not be prepared or completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransitionError {
    /// Another transition is pending: its write has not completed.
    Pending {
        /// The state it goes to.
        pending: TransactionState,
    },
    /// The state table does not allow `to` after `from`.
    InvalidTransition {
        /// The current state.
        from: TransactionState,
        /// The state asked for.
        to: TransactionState,
    },
    /// InitProducerId named an epoch that is neither the current nor the last one: a newer
    /// producer has taken over.
    Fenced {
        /// The epoch the producer expected.
        expected: i16,
        /// The current epoch.
        current: i16,
        /// The previous epoch.
        last: i16,
    },
    /// The producer id has no epoch left to bump to.
    EpochExhausted,
    /// A producer id or epoch below zero.
    IllegalIds {
        /// The producer id asked for.
        producer_id: i64,
        /// The epoch asked for.
        producer_epoch: i16,
    },
    /// A completed write does not match the transition prepared (or none was): a bug.
    UnexpectedCompletion {
        /// What was wrong with it.
        reason: &'static str,
    },
}

impl TransitionError {
    /// The error a client hears (Kafka's: an unexpected state is the coordinator's bug,
    /// UNKNOWN_SERVER_ERROR).
    pub fn error_code(&self) -> ErrorCode {
        match self {
            TransitionError::Pending { .. } => ErrorCode::ConcurrentTransactions,
            TransitionError::InvalidTransition { .. } => ErrorCode::InvalidTxnState,
            TransitionError::Fenced { .. } => ErrorCode::ProducerFenced,
            TransitionError::EpochExhausted
            | TransitionError::IllegalIds { .. }
            | TransitionError::UnexpectedCompletion { .. } => ErrorCode::UnknownServerError,
        }
    }
}

/// A transition prepared: the whole metadata as it will be once the record is durable (Kafka's
/// `TxnTransitMetadata`, the value of a `__transaction_state` record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transit {
    /// The producer id.
    pub producer_id: i64,
    /// The producer id before this transition.
    pub previous_producer_id: i64,
    /// The producer id the transaction moves to when it completes (V2, epochs exhausted), or
    /// [`NO_PRODUCER_ID`].
    pub next_producer_id: i64,
    /// The producer epoch.
    pub producer_epoch: i16,
    /// The epoch before the last bump, or [`NO_PRODUCER_EPOCH`].
    pub last_producer_epoch: i16,
    /// `transaction.timeout.ms`.
    pub timeout_ms: i32,
    /// The state.
    pub state: TransactionState,
    /// The partitions of the transaction.
    pub partitions: BTreeSet<TopicPartition>,
    /// When the transaction began (its first partition), or -1.
    pub start_ms: i64,
    /// When the metadata last changed.
    pub last_update_ms: i64,
    /// The client's protocol.
    pub client_version: TransactionVersion,
}

/// One `transactional.id`'s state at its coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionMetadata {
    transactional_id: String,
    current: Transit,
    /// The state being written, if a transition is pending.
    pending: Option<TransactionState>,
    /// The pending write is a fence's abort (`prepare_fence_abort`).
    fencing: bool,
    /// A fence's abort failed to write: the epoch it bumped may or may not be on disk, so the
    /// next fence does not bump it again (an epoch the log may hold is never handed out).
    failed_epoch_fence: bool,
}

impl TransactionMetadata {
    /// A new `transactional.id` with `producer_id` and no epoch yet: the first InitProducerId
    /// bumps it to 0 (`prepare_increment_epoch`).
    pub fn new(
        transactional_id: &str,
        producer_id: i64,
        timeout_ms: i32,
        now_ms: i64,
        client_version: TransactionVersion,
    ) -> TransactionMetadata {
        TransactionMetadata {
            transactional_id: transactional_id.to_owned(),
            current: Transit {
                producer_id,
                previous_producer_id: NO_PRODUCER_ID,
                next_producer_id: NO_PRODUCER_ID,
                producer_epoch: NO_PRODUCER_EPOCH,
                last_producer_epoch: NO_PRODUCER_EPOCH,
                timeout_ms,
                state: Empty,
                partitions: BTreeSet::new(),
                start_ms: -1,
                last_update_ms: now_ms,
                client_version,
            },
            pending: None,
            fencing: false,
            failed_epoch_fence: false,
        }
    }

    /// A `transactional.id` as its last record in `__transaction_state` left it, when a new
    /// coordinator loads the partition: nothing pending, and no last epoch (the record has
    /// none, as in Kafka).
    pub fn loaded(transactional_id: &str, current: Transit) -> TransactionMetadata {
        TransactionMetadata {
            transactional_id: transactional_id.to_owned(),
            current,
            pending: None,
            fencing: false,
            failed_epoch_fence: false,
        }
    }

    /// The `transactional.id`.
    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    /// The metadata as durable now.
    pub fn current(&self) -> &Transit {
        &self.current
    }

    /// The state.
    pub fn state(&self) -> TransactionState {
        self.current.state
    }

    /// The state being written, if any.
    pub fn pending(&self) -> Option<TransactionState> {
        self.pending
    }

    /// Sets the producer epoch, to test what happens near its end.
    #[cfg(test)]
    pub(crate) fn set_producer_epoch(&mut self, epoch: i16) {
        self.current.producer_epoch = epoch;
    }

    /// InitProducerId with `expected_epoch` (KIP-360: a producer recovering from an error names
    /// the epoch it had) and a new `timeout_ms`: to Empty with the epoch bumped. A retry of a
    /// call that succeeded (the expected epoch is the last one) keeps the epochs; an expected
    /// epoch that is neither is fenced.
    pub fn prepare_increment_epoch(
        &mut self,
        timeout_ms: i32,
        expected_epoch: Option<i16>,
        now_ms: i64,
    ) -> Result<Transit, TransitionError> {
        let epoch = self.current.producer_epoch;
        if epoch_exhausted(epoch) {
            return Err(TransitionError::EpochExhausted);
        }
        let (producer_epoch, last_producer_epoch) = match expected_epoch {
            // A new session: the last epoch is forgotten, so no older session can claim it.
            None => (epoch + 1, NO_PRODUCER_EPOCH),
            // The same session going on after an error (or a new producer id's first epoch).
            Some(expected) if epoch == NO_PRODUCER_EPOCH || expected == epoch => (epoch + 1, epoch),
            // A retry of a bump that succeeded: the epochs stand.
            Some(expected) if expected == self.current.last_producer_epoch => {
                (epoch, self.current.last_producer_epoch)
            }
            Some(expected) => {
                return Err(TransitionError::Fenced {
                    expected,
                    current: epoch,
                    last: self.current.last_producer_epoch,
                })
            }
        };
        self.prepare(Transit {
            producer_epoch,
            last_producer_epoch,
            timeout_ms,
            state: Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now_ms,
            ..self.current.clone()
        })
    }

    /// InitProducerId when the epochs are exhausted (or the producer id is unknown to the
    /// partitions): a new producer id at epoch 0, to Empty. `record_last_epoch` keeps the old
    /// epoch as the last one, so that a retry by the same producer is recognised.
    pub fn prepare_producer_id_rotation(
        &mut self,
        producer_id: i64,
        timeout_ms: i32,
        now_ms: i64,
        record_last_epoch: bool,
    ) -> Result<Transit, TransitionError> {
        if self.current.state.has_pending_transaction() {
            return Err(TransitionError::InvalidTransition {
                from: self.current.state,
                to: Empty,
            });
        }
        let last_producer_epoch = if record_last_epoch {
            self.current.producer_epoch
        } else {
            NO_PRODUCER_EPOCH
        };
        self.prepare(Transit {
            producer_id,
            producer_epoch: 0,
            last_producer_epoch,
            timeout_ms,
            state: Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now_ms,
            ..self.current.clone()
        })
    }

    /// AddPartitionsToTxn (or AddOffsetsToTxn's offsets partition): to Ongoing with `added`;
    /// the transaction begins now unless it was already open.
    pub fn prepare_add_partitions(
        &mut self,
        added: &BTreeSet<TopicPartition>,
        now_ms: i64,
        client_version: TransactionVersion,
    ) -> Result<Transit, TransitionError> {
        let start_ms = match self.current.state {
            Empty | CompleteCommit | CompleteAbort => now_ms,
            _ => self.current.start_ms,
        };
        let partitions = self.current.partitions.union(added).cloned().collect();
        self.prepare(Transit {
            state: Ongoing,
            partitions,
            start_ms,
            last_update_ms: now_ms,
            client_version,
            ..self.current.clone()
        })
    }

    /// EndTxn (or a timeout's abort): to PrepareCommit or PrepareAbort. Under V2 the epoch is
    /// bumped here, and `next_producer_id` is where the transaction moves when the bump exhausts
    /// the epochs; `no_partition_added`: a V2 abort of a transaction that never began, which
    /// starts now.
    pub fn prepare_abort_or_commit(
        &mut self,
        target: TransactionState,
        client_version: TransactionVersion,
        next_producer_id: i64,
        now_ms: i64,
        no_partition_added: bool,
    ) -> Result<Transit, TransitionError> {
        assert!(
            matches!(target, PrepareCommit | PrepareAbort),
            "EndTxn prepares a commit or an abort"
        );
        let epoch = self.current.producer_epoch;
        let (producer_epoch, last_producer_epoch) = if client_version.bumps_epoch_per_transaction()
        {
            // An abort at i16::MAX is let through without a bump, so that a broken producer can
            // still recover.
            let bumped = if epoch == i16::MAX && target == PrepareAbort {
                epoch
            } else {
                epoch + 1
            };
            (bumped, epoch)
        } else {
            (epoch, self.current.last_producer_epoch)
        };
        let start_ms = if no_partition_added {
            now_ms
        } else {
            self.current.start_ms
        };
        self.prepare(Transit {
            producer_epoch,
            last_producer_epoch,
            next_producer_id,
            state: target,
            start_ms,
            last_update_ms: now_ms,
            client_version,
            ..self.current.clone()
        })
    }

    /// Every marker written: to CompleteCommit or CompleteAbort, with no partitions. A V2
    /// transaction that exhausted its epochs moves to its next producer id, at epoch 0.
    pub fn prepare_complete(&mut self, now_ms: i64) -> Result<Transit, TransitionError> {
        // The state change before this one was durable: a fence that failed earlier is settled.
        self.failed_epoch_fence = false;
        let state = if self.current.state == PrepareCommit {
            CompleteCommit
        } else {
            CompleteAbort
        };
        let moves = self.current.client_version.bumps_epoch_per_transaction()
            && self.current.next_producer_id != NO_PRODUCER_ID;
        let (producer_id, producer_epoch) = if moves {
            (self.current.next_producer_id, 0)
        } else {
            (self.current.producer_id, self.current.producer_epoch)
        };
        self.prepare(Transit {
            producer_id,
            producer_epoch,
            next_producer_id: NO_PRODUCER_ID,
            state,
            partitions: BTreeSet::new(),
            last_update_ms: now_ms,
            ..self.current.clone()
        })
    }

    /// A newer producer takes over while a transaction is open: to PrepareEpochFence with the
    /// epoch bumped (not again after a fence whose write failed, nor past `i16::MAX`). Nothing
    /// of this is written: [`prepare_fence_abort`](Self::prepare_fence_abort) goes on to abort
    /// the open transaction at the bumped epoch, and that abort is the record.
    pub fn prepare_fence_epoch(&mut self) -> Result<Transit, TransitionError> {
        let epoch = self.current.producer_epoch;
        let producer_epoch = if self.failed_epoch_fence || epoch == i16::MAX {
            epoch
        } else {
            epoch + 1
        };
        self.prepare(Transit {
            producer_epoch,
            state: PrepareEpochFence,
            ..self.current.clone()
        })
    }

    /// The abort that follows a fence (`fence`, from [`prepare_fence_epoch`](Self::prepare_fence_epoch)):
    /// the bumped epoch becomes the metadata's now, with no last epoch, so that no older
    /// producer can claim it, and the open transaction goes to PrepareAbort. The bumped epoch is
    /// never returned to a client before this abort is durable (the new producer hears
    /// CONCURRENT_TRANSACTIONS and retries).
    pub fn prepare_fence_abort(
        &mut self,
        fence: &Transit,
        client_version: TransactionVersion,
        now_ms: i64,
    ) -> Result<Transit, TransitionError> {
        assert_eq!(
            self.pending,
            Some(PrepareEpochFence),
            "an abort by fence follows the fence"
        );
        self.pending = None;
        self.current.producer_epoch = fence.producer_epoch;
        self.current.last_producer_epoch = NO_PRODUCER_EPOCH;
        let abort = self.prepare_abort_or_commit(
            PrepareAbort,
            client_version,
            NO_PRODUCER_ID,
            now_ms,
            false,
        );
        self.fencing = abort.is_ok();
        abort
    }

    /// The `transactional.id` expires: to Dead (removed, never completed).
    pub fn prepare_dead(&mut self) -> Result<Transit, TransitionError> {
        self.prepare(Transit {
            state: Dead,
            partitions: BTreeSet::new(),
            ..self.current.clone()
        })
    }

    /// The pending transition's write failed: nothing changes, and another may be prepared. A
    /// fence's bumped epoch may still have reached the log, so the next fence keeps it.
    pub fn abandon(&mut self) {
        if self.fencing {
            self.failed_epoch_fence = true;
        }
        self.fencing = false;
        self.pending = None;
    }

    /// A marker for `partition` is written: it leaves the completing transaction.
    pub fn remove_partition(&mut self, partition: &TopicPartition) {
        assert!(
            matches!(self.current.state, PrepareCommit | PrepareAbort),
            "markers are written only for a transaction being completed"
        );
        self.current.partitions.remove(partition);
    }

    /// Checks a transition and marks its state pending.
    fn prepare(&mut self, transit: Transit) -> Result<Transit, TransitionError> {
        if let Some(pending) = self.pending {
            return Err(TransitionError::Pending { pending });
        }
        if transit.producer_id < 0 || (transit.state != Dead && transit.producer_epoch < 0) {
            return Err(TransitionError::IllegalIds {
                producer_id: transit.producer_id,
                producer_epoch: transit.producer_epoch,
            });
        }
        if !transit.state.may_follow(self.current.state) {
            return Err(TransitionError::InvalidTransition {
                from: self.current.state,
                to: transit.state,
            });
        }
        self.pending = Some(transit.state);
        Ok(Transit {
            previous_producer_id: self.current.producer_id,
            ..transit
        })
    }

    /// The pending transition's record is durable: it takes effect, once checked against what
    /// was prepared (the state pending, the epochs, the partitions and the start time).
    pub fn complete(&mut self, transit: Transit) -> Result<(), TransitionError> {
        let unexpected = |reason| Err(TransitionError::UnexpectedCompletion { reason });
        let Some(to) = self.pending else {
            return unexpected("no transition is pending");
        };
        if to != transit.state {
            return unexpected("the record is for another state than the one pending");
        }
        let current = &self.current;
        match to {
            Empty => {
                if (transit.producer_epoch != current.producer_epoch
                    && !self.valid_epoch_bump(&transit))
                    || !transit.partitions.is_empty()
                    || transit.start_ms != -1
                {
                    return unexpected("InitProducerId's record");
                }
            }
            Ongoing => {
                if !self.valid_epoch(&transit)
                    || !transit.partitions.is_superset(&current.partitions)
                    || transit.timeout_ms != current.timeout_ms
                {
                    return unexpected("AddPartitions' record");
                }
            }
            PrepareCommit | PrepareAbort => {
                let empty_abort = to == PrepareAbort
                    && transit.client_version.bumps_epoch_per_transaction()
                    && matches!(current.state, Empty | CompleteCommit | CompleteAbort);
                if !self.valid_epoch(&transit)
                    || transit.partitions != current.partitions
                    || transit.timeout_ms != current.timeout_ms
                    || !(transit.start_ms == current.start_ms || empty_abort)
                {
                    return unexpected("EndTxn's record");
                }
            }
            CompleteCommit | CompleteAbort => {
                if !self.valid_epoch(&transit)
                    || transit.timeout_ms != current.timeout_ms
                    || transit.start_ms == -1
                {
                    return unexpected("the markers' completion record");
                }
            }
            // A fence goes on to PrepareAbort before anything completes, and an expired id is
            // removed, never written as Dead.
            PrepareEpochFence | Dead => return unexpected("a fence or a removal is not completed"),
        }
        self.current = transit;
        self.pending = None;
        self.fencing = false;
        Ok(())
    }

    /// Whether `transit`'s producer id and epoch fit the transition (Kafka's
    /// `validProducerEpoch`): V2 bumps the epoch at EndTxn, and may move to a new producer id at
    /// epoch 0 on completion.
    fn valid_epoch(&self, transit: &Transit) -> bool {
        let current = &self.current;
        let v2 = transit.client_version.bumps_epoch_per_transaction();
        if v2
            && matches!(transit.state, CompleteCommit | CompleteAbort)
            && transit.producer_epoch == 0
        {
            return transit.last_producer_epoch == current.last_producer_epoch
                && transit.previous_producer_id == current.producer_id;
        }
        if v2 && matches!(transit.state, PrepareCommit | PrepareAbort) {
            return transit.last_producer_epoch == current.producer_epoch
                && transit.producer_id == current.producer_id;
        }
        transit.producer_epoch == current.producer_epoch
            && transit.producer_id == current.producer_id
    }

    /// Whether `transit` bumps the epoch by one, or starts a new producer id at 0.
    fn valid_epoch_bump(&self, transit: &Transit) -> bool {
        transit.producer_epoch == self.current.producer_epoch.wrapping_add(1)
            || (transit.producer_epoch == 0 && transit.producer_id != self.current.producer_id)
    }
}

#[cfg(test)]
mod tests;
