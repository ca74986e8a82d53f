//! What the coordinator does with a request for one `transactional.id` (Kafka's
//! `TransactionCoordinator.handle*`), as pure decisions over its [`TransactionMetadata`]: an
//! answer now, or a transition whose record must be written (and made durable) before the
//! answer. Nothing here writes or waits; the coordinator's runtime does, and completes or
//! abandons the transition with the write's outcome.

use std::collections::BTreeSet;

use crate::protocol::ErrorCode;
use crate::types::TopicPartition;

use super::metadata::{epoch_exhausted, TransactionMetadata, TransactionVersion, Transit};
use super::state::TransactionState::{
    self, CompleteAbort, CompleteCommit, Dead, Empty, Ongoing, PrepareAbort, PrepareCommit,
    PrepareEpochFence,
};

/// What InitProducerId with a `transactional.id` leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitDecision {
    /// Write this record; once durable, answer its producer id and epoch.
    Write(Transit),
    /// A transaction was open: write this abort (at a fenced epoch) and, once durable, answer
    /// CONCURRENT_TRANSACTIONS so that the producer retries and gets a bumped epoch.
    FenceAndAbort(Transit),
    /// Answer this error; nothing is written.
    Refuse(ErrorCode),
}

/// What an InitProducerId asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitRequest {
    /// `transaction.timeout.ms`.
    pub timeout_ms: i32,
    /// KIP-360: the producer id and epoch the producer had, when it recovers from an error.
    pub expected: Option<(i64, i16)>,
}

/// InitProducerId for `metadata` (Kafka's `prepareInitProducerIdTransit`): refused while a
/// write is pending or a transaction is being completed, fenced when the producer id or epoch
/// it names is not this id's, a fence when a transaction is open, else a new epoch (or a new
/// producer id, `new_producer_id`, when the epochs are exhausted).
pub fn init_producer_id(
    metadata: &mut TransactionMetadata,
    request: InitRequest,
    client_version: TransactionVersion,
    now_ms: i64,
    new_producer_id: impl FnOnce() -> i64,
) -> InitDecision {
    let current = metadata.current().clone();
    let known_producer = |(producer_id, epoch): (i64, i16)| {
        // A new id (no epoch yet): a producer recovering from UNKNOWN_PRODUCER_ID takes it.
        current.producer_epoch == super::metadata::NO_PRODUCER_EPOCH
            || producer_id == current.producer_id
            // A retry of a rotation whose answer was lost.
            || (producer_id == current.previous_producer_id && epoch_exhausted(epoch))
    };
    if metadata.pending().is_some() {
        return InitDecision::Refuse(ErrorCode::ConcurrentTransactions);
    }
    if !request.expected.is_none_or(known_producer) {
        return InitDecision::Refuse(ErrorCode::ProducerFenced);
    }
    let prepared = match metadata.state() {
        PrepareAbort | PrepareCommit => {
            return InitDecision::Refuse(ErrorCode::ConcurrentTransactions)
        }
        Empty | CompleteAbort | CompleteCommit => {
            let expected_epoch = request.expected.map(|(_, epoch)| epoch);
            if epoch_exhausted(current.producer_epoch)
                && expected_epoch.is_none_or(|epoch| epoch == current.producer_epoch)
            {
                metadata.prepare_producer_id_rotation(
                    new_producer_id(),
                    request.timeout_ms,
                    now_ms,
                    request.expected.is_some(),
                )
            } else {
                metadata.prepare_increment_epoch(request.timeout_ms, expected_epoch, now_ms)
            }
        }
        Ongoing => {
            let fence = match metadata.prepare_fence_epoch() {
                Ok(fence) => fence,
                Err(error) => return InitDecision::Refuse(error.error_code()),
            };
            return match metadata.prepare_fence_abort(&fence, client_version, now_ms) {
                Ok(abort) => InitDecision::FenceAndAbort(abort),
                Err(error) => {
                    metadata.abandon();
                    InitDecision::Refuse(error.error_code())
                }
            };
        }
        Dead | PrepareEpochFence => {
            panic!(
                "transactional id {} found in state {}: it is never left there",
                metadata.transactional_id(),
                metadata.state()
            )
        }
    };
    match prepared {
        Ok(transit) => InitDecision::Write(transit),
        Err(error) => InitDecision::Refuse(error.error_code()),
    }
}

/// What AddPartitionsToTxn (or AddOffsetsToTxn's offsets partition) leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddDecision {
    /// Write this record; once durable, answer NONE for every partition.
    Write(Transit),
    /// Answer this for every partition (NONE: they are in the transaction already); nothing is
    /// written.
    Answer(ErrorCode),
}

/// AddPartitionsToTxn for `metadata` by `producer_id` at `producer_epoch` (Kafka's
/// `handleAddPartitionsToTransaction`): refused for another producer id or an old epoch, while a
/// write is pending or a transaction is being completed; nothing to write when the partitions
/// are in the open transaction already.
pub fn add_partitions(
    metadata: &mut TransactionMetadata,
    (producer_id, producer_epoch): (i64, i16),
    partitions: &BTreeSet<TopicPartition>,
    client_version: TransactionVersion,
    now_ms: i64,
) -> AddDecision {
    let current = metadata.current();
    if current.producer_id != producer_id {
        return AddDecision::Answer(ErrorCode::InvalidProducerIdMapping);
    }
    if current.producer_epoch != producer_epoch {
        return AddDecision::Answer(ErrorCode::ProducerFenced);
    }
    if metadata.pending().is_some() || matches!(metadata.state(), PrepareCommit | PrepareAbort) {
        return AddDecision::Answer(ErrorCode::ConcurrentTransactions);
    }
    if metadata.state() == Ongoing && partitions.is_subset(&current.partitions) {
        return AddDecision::Answer(ErrorCode::None);
    }
    match metadata.prepare_add_partitions(partitions, now_ms, client_version) {
        Ok(transit) => AddDecision::Write(transit),
        Err(error) => AddDecision::Answer(error.error_code()),
    }
}

/// Commit or abort, as EndTxn asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnResult {
    /// Commit the transaction.
    Commit,
    /// Abort it.
    Abort,
}

impl TxnResult {
    /// The prepare state this result leads to.
    fn prepare_state(self) -> TransactionState {
        match self {
            TxnResult::Commit => PrepareCommit,
            TxnResult::Abort => PrepareAbort,
        }
    }
}

/// What EndTxn leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndDecision {
    /// Write this record (PrepareCommit or PrepareAbort); once durable, answer NONE and write
    /// the markers.
    Write(Transit),
    /// Answer this error, with (under V2, for NONE) the producer id and epoch to go on with;
    /// nothing is written.
    Answer(ErrorCode, Option<(i64, i16)>),
}

/// EndTxn from a client, `producer` at its epoch (Kafka's `endTransaction`). Under V1 the epoch
/// must be the current one, and a retry of a completed transaction is answered NONE; so is, in
/// the classic protocol's flaw, a late EndTxn of a finished transaction that arrives once the
/// next one is open at the same epoch: it ends that one. Under V2 every transaction ends with
/// an epoch bump, so only a retry (the epoch just before the current one) is recognised, and a
/// late request from an older transaction is fenced.
pub fn end_txn(
    metadata: &mut TransactionMetadata,
    (producer_id, producer_epoch): (i64, i16),
    result: TxnResult,
    client_version: TransactionVersion,
    now_ms: i64,
    new_producer_id: impl FnOnce() -> i64,
) -> EndDecision {
    let refuse = |error| EndDecision::Answer(error, None);
    let current = metadata.current().clone();
    let state = metadata.state();
    let v2 = client_version.bumps_epoch_per_transaction();
    // V2: a retry of an EndTxn whose epoch bump (or move to a new producer id) is durable.
    let retry_on_bump = v2 && i32::from(current.producer_epoch) == i32::from(producer_epoch) + 1;
    let retry_on_overflow = v2
        && current.previous_producer_id == producer_id
        && producer_epoch == i16::MAX - 1
        && current.producer_epoch == 0;
    let retry = retry_on_bump || retry_on_overflow;
    let valid_epoch = if v2 {
        match state {
            PrepareCommit | PrepareAbort => retry_on_bump,
            CompleteCommit | CompleteAbort => retry || producer_epoch == current.producer_epoch,
            Ongoing | Empty | Dead | PrepareEpochFence => producer_epoch == current.producer_epoch,
        }
    } else {
        producer_epoch == current.producer_epoch
    };
    if current.producer_id != producer_id && !retry_on_overflow {
        return refuse(ErrorCode::InvalidProducerIdMapping);
    }
    if !valid_epoch {
        return refuse(ErrorCode::ProducerFenced);
    }
    if metadata.pending().is_some() {
        return refuse(ErrorCode::ConcurrentTransactions);
    }
    let done = || {
        let answer = v2.then_some((current.producer_id, current.producer_epoch));
        EndDecision::Answer(ErrorCode::None, answer)
    };
    let complete = |target: TransactionState, no_partition_added: bool| {
        let next_producer_id = if v2 && epoch_exhausted(current.producer_epoch) {
            new_producer_id()
        } else {
            super::metadata::NO_PRODUCER_ID
        };
        match metadata.prepare_abort_or_commit(
            target,
            client_version,
            next_producer_id,
            now_ms,
            no_partition_added,
        ) {
            Ok(transit) => EndDecision::Write(transit),
            Err(error) => EndDecision::Answer(error.error_code(), None),
        }
    };
    let invalid = refuse(ErrorCode::InvalidTxnState);
    match (state, result) {
        (Ongoing, _) => complete(result.prepare_state(), false),
        (CompleteCommit, TxnResult::Commit) | (CompleteAbort, TxnResult::Abort) if !v2 || retry => {
            done()
        }
        // V2: a client unsure whether its transaction began may abort when none is open.
        (Empty, TxnResult::Abort) if v2 => complete(PrepareAbort, true),
        (CompleteCommit | CompleteAbort, TxnResult::Abort) if v2 && !retry => {
            complete(PrepareAbort, true)
        }
        (PrepareCommit, TxnResult::Commit) | (PrepareAbort, TxnResult::Abort) => {
            refuse(ErrorCode::ConcurrentTransactions)
        }
        (Empty | CompleteCommit | CompleteAbort | PrepareCommit | PrepareAbort, _) => invalid,
        (Dead | PrepareEpochFence, _) => panic!(
            "transactional id {} found in state {state}: it is never left there",
            metadata.transactional_id()
        ),
    }
}

/// The coordinator aborts `metadata`'s open transaction because `transaction.timeout.ms` passed
/// (Kafka's `abortTimedOutTransactions`): the producer's epoch is fenced and the transaction is
/// aborted at it, so that a late produce or EndTxn of the stale producer is refused. `None`
/// when a write is pending (the next check tries again) or no transaction is open.
pub fn abort_timed_out(
    metadata: &mut TransactionMetadata,
    client_version: TransactionVersion,
    now_ms: i64,
) -> Option<Transit> {
    if metadata.pending().is_some() || metadata.state() != Ongoing {
        return None;
    }
    let fence = metadata.prepare_fence_epoch().ok()?;
    let abort = metadata.prepare_fence_abort(&fence, client_version, now_ms);
    if abort.is_err() {
        metadata.abandon();
    }
    abort.ok()
}

#[cfg(test)]
mod tests;
