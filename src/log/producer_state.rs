//! The producer state of a partition log (Kafka's `ProducerStateManager`): for each idempotent
//! producer id, its epoch and the metadata of its last five batches, so a retried batch is
//! recognised and answered with the offsets it was first written at, a gap in the sequence is
//! refused with OUT_OF_ORDER_SEQUENCE_NUMBER, and an older epoch with INVALID_PRODUCER_EPOCH.
//!
//! The checks are Kafka's (`ProducerAppendInfo.checkProducerEpoch` and `checkSequence`,
//! `ProducerStateEntry.findDuplicateBatch`), applied to a leader's appends; a follower's appends
//! and the header walk that rebuilds the state only update it.
//!
//! The log builds the state when a replica first needs it (after a start or a truncation) from
//! the newest trusted **snapshot file** ([`snapshot`], Kafka's `{offset}.snapshot`, written when
//! a segment rolls and at a clean shutdown) plus a walk over the batch headers at and past the
//! snapshot's offset; with no snapshot it walks every header. Unlike Kafka's files, which hold
//! one entry per producer (its last batch), seedlog's hold one entry per retained batch, so the
//! whole five-batch window survives a restart; Kafka's reader keeps the last entry per producer
//! and still reads them. Retention keeps the newest snapshot at or below the log start, so a
//! producer whose batches all went with retention is still known after a restart, as in Kafka;
//! `producer.id.expiration.ms` is not built, so such a producer is never forgotten.

pub mod snapshot;

use std::collections::{BTreeMap, VecDeque};

pub use crate::protocol::record_batch::increment_sequence;
use crate::protocol::record_batch::RecordBatchHeader;

/// Kafka's `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`: how many batches per producer a retry
/// is recognised among (hence `max.in.flight.requests.per.connection` ≤ 5 with idempotence).
pub const BATCHES_RETAINED: usize = 5;

/// One retained batch of a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    /// The sequence of its first record.
    pub first_sequence: i32,
    /// The sequence of its last record.
    pub last_sequence: i32,
    /// Its first offset in the log.
    pub first_offset: i64,
    /// Its last offset in the log.
    pub last_offset: i64,
    /// Its largest timestamp (Kafka's `BatchMetadata.timestamp`): kept for the snapshot entry,
    /// where Kafka's `producer.id.expiration.ms` reads it.
    pub timestamp: i64,
}

/// What the log knows of one producer id.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProducerEntry {
    epoch: i16,
    /// Oldest first.
    batches: VecDeque<BatchMetadata>,
}

/// Why a leader refuses an idempotent batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SequenceError {
    /// The batch's epoch is older than the producer's current one (INVALID_PRODUCER_EPOCH).
    FencedEpoch {
        /// The batch's epoch.
        epoch: i16,
        /// The epoch the log holds.
        current: i16,
    },
    /// The log knows nothing of the producer and the batch does not start at sequence 0
    /// (UNKNOWN_PRODUCER_ID, under `seedlog.idempotence.generation=kafka-19880`).
    UnknownProducer {
        /// The batch's first sequence.
        first_sequence: i32,
    },
    /// The batch does not follow the producer's last sequence (OUT_OF_ORDER_SEQUENCE_NUMBER).
    OutOfOrder {
        /// The batch's first sequence.
        first_sequence: i32,
        /// The sequence that would have followed, if the log knows one.
        expected: Option<i32>,
    },
}

impl std::fmt::Display for SequenceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SequenceError::FencedEpoch { epoch, current } => write!(
                f,
                "Epoch of producer is {epoch}, which is smaller than the last seen epoch {current}"
            ),
            SequenceError::UnknownProducer { first_sequence } => write!(
                f,
                "Found no record of the producer on the broker; a first batch starts at sequence 0, not {first_sequence}"
            ),
            SequenceError::OutOfOrder {
                first_sequence,
                expected: Some(expected),
            } => write!(
                f,
                "Out of order sequence number: {first_sequence} (incoming seq. number), {expected} (expected seq. number)"
            ),
            SequenceError::OutOfOrder {
                first_sequence,
                expected: None,
            } => write!(
                f,
                "Invalid sequence number {first_sequence} for a new epoch of the producer: a new epoch starts at 0"
            ),
        }
    }
}

/// The producer state of one partition log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStates {
    producers: BTreeMap<i64, ProducerEntry>,
}

impl ProducerStates {
    /// The offsets a batch of `header` was already written at, if it is a retry of one of the
    /// producer's retained batches (same epoch and sequence range): Kafka answers such a retry
    /// with the first write's offsets and appends nothing.
    pub fn find_duplicate(&self, header: &RecordBatchHeader) -> Option<BatchMetadata> {
        let entry = self.producers.get(&header.producer_id)?;
        if entry.epoch != header.producer_epoch {
            return None;
        }
        let last_sequence = increment_sequence(header.base_sequence, header.last_offset_delta);
        entry.batches.iter().copied().find(|batch| {
            batch.first_sequence == header.base_sequence && batch.last_sequence == last_sequence
        })
    }

    /// Kafka's checks of a leader's idempotent batch that is not a duplicate: the epoch must
    /// not be older than the producer's; a new epoch starts at sequence 0; within an epoch the
    /// batch must follow the last sequence. A producer the log knows nothing of may start
    /// anywhere unless `unknown_starts_at_zero` (KAFKA-19880's rule: a later batch could
    /// otherwise be written ahead of an earlier one that was refused, which then can never be).
    pub fn check(
        &self,
        header: &RecordBatchHeader,
        unknown_starts_at_zero: bool,
    ) -> Result<(), SequenceError> {
        let Some(entry) = self.producers.get(&header.producer_id) else {
            if unknown_starts_at_zero && header.base_sequence != 0 {
                return Err(SequenceError::UnknownProducer {
                    first_sequence: header.base_sequence,
                });
            }
            return Ok(());
        };
        if header.producer_epoch < entry.epoch {
            return Err(SequenceError::FencedEpoch {
                epoch: header.producer_epoch,
                current: entry.epoch,
            });
        }
        if header.producer_epoch != entry.epoch {
            return if header.base_sequence == 0 {
                Ok(())
            } else {
                Err(SequenceError::OutOfOrder {
                    first_sequence: header.base_sequence,
                    expected: None,
                })
            };
        }
        let Some(last) = entry.batches.back() else {
            return Ok(());
        };
        let expected = increment_sequence(last.last_sequence, 1);
        if header.base_sequence == expected {
            Ok(())
        } else {
            Err(SequenceError::OutOfOrder {
                first_sequence: header.base_sequence,
                expected: Some(expected),
            })
        }
    }

    /// A batch with its final offsets was appended (by a leader, a follower, or found by the
    /// header walk). Batches of no producer (`producer_id` -1) change nothing.
    pub fn update(&mut self, header: &RecordBatchHeader) {
        if header.producer_id < 0 || header.is_control() {
            return;
        }
        let batch = BatchMetadata {
            first_sequence: header.base_sequence,
            last_sequence: increment_sequence(header.base_sequence, header.last_offset_delta),
            first_offset: header.base_offset,
            last_offset: header.last_offset(),
            timestamp: header.max_timestamp,
        };
        let entry = self
            .producers
            .entry(header.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: header.producer_epoch,
                batches: VecDeque::new(),
            });
        if header.producer_epoch != entry.epoch {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == BATCHES_RETAINED {
            entry.batches.pop_front();
        }
        entry.batches.push_back(batch);
    }
}

/// The header of an idempotent batch of `count` records, for the tests of this module and
/// of [`snapshot`].
#[cfg(test)]
fn test_batch(
    producer_id: i64,
    epoch: i16,
    sequence: i32,
    base_offset: i64,
    count: i32,
    timestamp: i64,
) -> RecordBatchHeader {
    RecordBatchHeader {
        base_offset,
        batch_length: 0,
        partition_leader_epoch: 0,
        magic: 2,
        crc: 0,
        attributes: 0,
        last_offset_delta: count - 1,
        base_timestamp: timestamp,
        max_timestamp: timestamp,
        producer_id,
        producer_epoch: epoch,
        base_sequence: sequence,
        records_count: count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(
        producer_id: i64,
        epoch: i16,
        sequence: i32,
        base_offset: i64,
        count: i32,
    ) -> RecordBatchHeader {
        test_batch(producer_id, epoch, sequence, base_offset, count, 0)
    }

    #[test]
    fn a_retried_batch_is_found_with_its_first_offsets() {
        let mut states = ProducerStates::default();
        states.update(&batch(7, 0, 0, 100, 3));
        states.update(&batch(7, 0, 3, 103, 2));
        let retry = batch(7, 0, 0, 0, 3);
        let found = states.find_duplicate(&retry).expect("a duplicate");
        assert_eq!((found.first_offset, found.last_offset), (100, 102));
        assert_eq!(states.find_duplicate(&batch(7, 0, 5, 0, 1)), None);
        assert_eq!(
            states.find_duplicate(&batch(7, 1, 0, 0, 3)),
            None,
            "another epoch"
        );
        assert_eq!(
            states.find_duplicate(&batch(8, 0, 0, 0, 3)),
            None,
            "another producer"
        );
    }

    #[test]
    fn a_batch_is_a_duplicate_only_if_both_ends_of_its_sequence_match() {
        let mut states = ProducerStates::default();
        states.update(&batch(7, 0, 0, 100, 3));
        assert_eq!(
            states.find_duplicate(&batch(7, 0, 0, 0, 2)),
            None,
            "same first, other last"
        );
        assert_eq!(
            states.find_duplicate(&batch(7, 0, 1, 0, 2)),
            None,
            "other first, same last"
        );
    }

    #[test]
    fn only_the_last_five_batches_are_recognised() {
        let mut states = ProducerStates::default();
        for sequence in 0..6 {
            states.update(&batch(1, 0, sequence, i64::from(sequence), 1));
        }
        assert_eq!(states.find_duplicate(&batch(1, 0, 0, 0, 1)), None);
        assert!(states.find_duplicate(&batch(1, 0, 1, 0, 1)).is_some());
        // The forgotten batch is then out of order, as in Kafka.
        assert!(matches!(
            states.check(&batch(1, 0, 0, 0, 1), true),
            Err(SequenceError::OutOfOrder {
                expected: Some(6),
                ..
            })
        ));
    }

    #[test]
    fn a_gap_is_out_of_order_and_the_next_sequence_is_in_order() {
        let mut states = ProducerStates::default();
        states.update(&batch(1, 0, 0, 0, 3));
        assert_eq!(states.check(&batch(1, 0, 3, 0, 1), true), Ok(()));
        assert_eq!(
            states.check(&batch(1, 0, 4, 0, 1), true),
            Err(SequenceError::OutOfOrder {
                first_sequence: 4,
                expected: Some(3)
            })
        );
    }

    #[test]
    fn an_older_epoch_is_fenced_and_a_new_one_starts_at_zero() {
        let mut states = ProducerStates::default();
        states.update(&batch(1, 3, 0, 0, 1));
        assert!(matches!(
            states.check(&batch(1, 2, 1, 0, 1), true),
            Err(SequenceError::FencedEpoch {
                epoch: 2,
                current: 3
            })
        ));
        assert_eq!(states.check(&batch(1, 4, 0, 0, 1), true), Ok(()));
        assert!(matches!(
            states.check(&batch(1, 4, 9, 0, 1), true),
            Err(SequenceError::OutOfOrder { expected: None, .. })
        ));
        states.update(&batch(1, 4, 0, 1, 1));
        assert_eq!(
            states.find_duplicate(&batch(1, 3, 0, 0, 1)),
            None,
            "the old epoch's batches went"
        );
    }

    /// Kafka 2.5 to 4.4 (`kip-360`): a producer the log knows nothing of may start anywhere.
    /// KAFKA-19880 (`kafka-19880`, the default): only at sequence 0, else UNKNOWN_PRODUCER_ID.
    #[test]
    fn an_unknown_producer_starts_at_zero_unless_the_old_rule_lets_it_start_anywhere() {
        let states = ProducerStates::default();
        assert_eq!(states.check(&batch(5, 0, 42, 0, 1), false), Ok(()));
        assert_eq!(
            states.check(&batch(5, 0, 42, 0, 1), true),
            Err(SequenceError::UnknownProducer { first_sequence: 42 })
        );
        assert_eq!(states.check(&batch(5, 0, 0, 0, 1), true), Ok(()));
    }

    #[test]
    fn sequences_wrap_after_the_largest_int() {
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        let mut states = ProducerStates::default();
        states.update(&batch(1, 0, i32::MAX - 1, 0, 2));
        assert_eq!(states.check(&batch(1, 0, 0, 0, 1), true), Ok(()));
        assert!(states
            .find_duplicate(&batch(1, 0, i32::MAX - 1, 0, 2))
            .is_some());
    }

    #[test]
    fn batches_of_no_producer_change_nothing() {
        let mut states = ProducerStates::default();
        states.update(&batch(-1, -1, -1, 0, 1));
        assert_eq!(states, ProducerStates::default());
    }
}
