//! The idempotent producer's bookkeeping (the part of Kafka's `TransactionManager` a producer
//! without a transactional id uses): its producer id and epoch from InitProducerId, and per
//! partition the sequence of the next batch's first record.
//!
//! A batch is stamped (id, epoch, first sequence) when it is first drained and keeps its stamp
//! across retries, so the broker recognises a retry and answers it with the first write's
//! offsets. When the stamps can no longer follow each other on the broker (a batch of the
//! current producer failed for good, or the broker refused a sequence no earlier batch
//! explains), the producer *resets*: it waits until no Produce request is in flight, bumps its
//! epoch, and stamps every batch still queued afresh from sequence 0. That is Kafka's idempotent
//! epoch bump (KIP-360, `TransactionManager.bumpIdempotentProducerEpoch`): the producer keeps its
//! id and raises the epoch itself, with no request; the broker takes a new epoch starting at
//! sequence 0 and fences every batch of an older epoch that arrives late. Only when the epoch is
//! at its largest value does the producer ask InitProducerId for a new id.

use std::collections::BTreeMap;

use crate::protocol::record_batch::increment_sequence;
use crate::types::{Millis, TopicPartition};

/// A batch's idempotence stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    pub(super) producer_id: i64,
    pub(super) epoch: i16,
    pub(super) sequence: i32,
}

/// The producer id and the sequences.
#[derive(Debug, Default)]
pub(super) struct Idempotence {
    /// The producer id and epoch; `None` until InitProducerId answers (and during a reset).
    producer: Option<(i64, i16)>,
    /// During a reset, the id and bumped epoch to stamp with once nothing of the old epoch is in
    /// flight; `None` (at the largest epoch) asks InitProducerId for a new id instead.
    bumped: Option<(i64, i16)>,
    /// An InitProducerId request is in flight.
    pub(super) requested: bool,
    /// No InitProducerId before this (after a failed one: `retry.backoff.ms`).
    pub(super) retry_at: Millis,
    /// Per partition, the first sequence of the next batch stamped.
    next_sequence: BTreeMap<TopicPartition, i32>,
}

impl Idempotence {
    /// Whether batches may be stamped and sent.
    pub(super) fn ready(&self) -> bool {
        self.producer.is_some()
    }

    /// Whether an InitProducerId request should go out now.
    pub(super) fn wants_producer_id(&self, now: Millis) -> bool {
        self.producer_id_due().is_some_and(|due| now >= due)
    }

    /// When an InitProducerId request is due: `None` while the id is known, one is in flight,
    /// or a reset waits to bump the epoch (the bump, not a request, ends that wait).
    pub(super) fn producer_id_due(&self) -> Option<Millis> {
        (self.producer.is_none() && self.bumped.is_none() && !self.requested)
            .then_some(self.retry_at)
    }

    /// Ends a reset by the epoch bump, if one waits: called once no Produce request is in
    /// flight. Returns the new id and epoch.
    pub(super) fn finish_bump(&mut self) -> Option<(i64, i16)> {
        let bumped = self.bumped.take()?;
        tracing::debug!(
            producer_id = bumped.0,
            epoch = bumped.1,
            "idempotent producer bumped its epoch"
        );
        self.producer = Some(bumped);
        self.next_sequence.clear();
        Some(bumped)
    }

    /// InitProducerId answered with an id and epoch.
    pub(super) fn on_producer_id(&mut self, producer_id: i64, epoch: i16) {
        self.requested = false;
        self.producer = Some((producer_id, epoch));
        self.next_sequence.clear();
    }

    /// InitProducerId failed: ask again after `backoff_ms`.
    pub(super) fn on_failure(&mut self, now: Millis, backoff_ms: u64) {
        self.requested = false;
        self.retry_at = now.plus(backoff_ms);
    }

    /// Whether `stamp` is of the current producer id and epoch.
    pub(super) fn is_current(&self, stamp: Option<Stamp>) -> bool {
        stamp.is_some_and(|stamp| self.producer == Some((stamp.producer_id, stamp.epoch)))
    }

    /// The stamp of the next batch of `partition`, holding `count` records.
    pub(super) fn stamp(&mut self, partition: &TopicPartition, count: i32) -> Stamp {
        let (producer_id, epoch) = self.producer.expect("stamps only once the id is known");
        let next = self.next_sequence.entry(partition.clone()).or_insert(0);
        let sequence = *next;
        *next = increment_sequence(sequence, count);
        Stamp {
            producer_id,
            epoch,
            sequence,
        }
    }

    /// Starts a reset: no stamp is current any more; the bumped epoch (or, at the largest
    /// epoch, a new id) comes once nothing is in flight.
    pub(super) fn reset(&mut self) {
        if let Some((producer_id, epoch)) = self.producer.take() {
            self.bumped = epoch.checked_add(1).map(|epoch| (producer_id, epoch));
            if self.bumped.is_none() {
                tracing::debug!(
                    "idempotent producer resets at the largest epoch: a new producer id follows"
                );
            }
        }
        self.next_sequence.clear();
    }
}
