//! The transitions of one `transactional.id`, each prepared then completed as the coordinator
//! does once its record is durable.

use super::*;
use crate::coordinator::transaction::state::TransactionState::{
    CompleteAbort, CompleteCommit, Dead, Empty, Ongoing, PrepareAbort, PrepareCommit,
    PrepareEpochFence,
};
use TransactionVersion::{V1, V2};

fn partition(index: i32) -> TopicPartition {
    TopicPartition::new("orders", index)
}

fn partitions(indexes: &[i32]) -> BTreeSet<TopicPartition> {
    indexes.iter().map(|index| partition(*index)).collect()
}

/// A `transactional.id` after its first InitProducerId: producer id 7, epoch 0, Empty.
fn initialised(version: TransactionVersion) -> TransactionMetadata {
    let mut metadata = TransactionMetadata::new("app-1", 7, 60_000, 0, version);
    let transit = metadata
        .prepare_increment_epoch(60_000, None, 1)
        .expect("a new id bumps to epoch 0");
    metadata.complete(transit).expect("durable");
    metadata
}

/// Prepares with `prepare` and completes what it returns.
fn apply(
    metadata: &mut TransactionMetadata,
    prepare: impl FnOnce(&mut TransactionMetadata) -> Result<Transit, TransitionError>,
) -> Transit {
    let transit = prepare(metadata).expect("prepared");
    metadata.complete(transit.clone()).expect("completed");
    transit
}

/// Runs a whole transaction on `partitions`, ending in `end` (PrepareCommit or PrepareAbort).
fn run_transaction(
    metadata: &mut TransactionMetadata,
    version: TransactionVersion,
    end: TransactionState,
    now: i64,
) {
    apply(metadata, |m| {
        m.prepare_add_partitions(&partitions(&[0, 1]), now, version)
    });
    apply(metadata, |m| {
        m.prepare_abort_or_commit(end, version, NO_PRODUCER_ID, now + 1, false)
    });
    apply(metadata, |m| m.prepare_complete(now + 2));
}

#[test]
fn the_first_init_gives_epoch_zero_and_no_last_epoch() {
    let metadata = initialised(V1);
    let current = metadata.current();
    assert_eq!(metadata.state(), Empty);
    assert_eq!((current.producer_id, current.producer_epoch), (7, 0));
    assert_eq!(current.last_producer_epoch, NO_PRODUCER_EPOCH);
    assert_eq!(metadata.pending(), None);
}

#[test]
fn a_v1_transaction_commits_with_one_epoch_throughout() {
    let mut metadata = initialised(V1);
    let added = apply(&mut metadata, |m| {
        m.prepare_add_partitions(&partitions(&[0]), 10, V1)
    });
    assert_eq!((added.state, added.start_ms), (Ongoing, 10));
    let more = apply(&mut metadata, |m| {
        m.prepare_add_partitions(&partitions(&[1]), 20, V1)
    });
    assert_eq!(more.partitions, partitions(&[0, 1]));
    assert_eq!(
        more.start_ms, 10,
        "the transaction began with its first partition"
    );
    let prepared = apply(&mut metadata, |m| {
        m.prepare_abort_or_commit(PrepareCommit, V1, NO_PRODUCER_ID, 30, false)
    });
    assert_eq!(prepared.producer_epoch, 0, "V1 keeps the epoch");
    metadata.remove_partition(&partition(0));
    metadata.remove_partition(&partition(1));
    let complete = apply(&mut metadata, |m| m.prepare_complete(40));
    assert_eq!(
        (complete.state, complete.producer_epoch),
        (CompleteCommit, 0)
    );
    assert!(complete.partitions.is_empty());
}

#[test]
fn v2_bumps_the_epoch_when_a_transaction_ends() {
    let mut metadata = initialised(V2);
    run_transaction(&mut metadata, V2, PrepareCommit, 10);
    let current = metadata.current();
    assert_eq!(metadata.state(), CompleteCommit);
    assert_eq!(
        (current.producer_epoch, current.last_producer_epoch),
        (1, 0)
    );
    run_transaction(&mut metadata, V2, PrepareAbort, 20);
    let current = metadata.current();
    assert_eq!(metadata.state(), CompleteAbort);
    assert_eq!(
        (current.producer_epoch, current.last_producer_epoch),
        (2, 1)
    );
}

#[test]
fn v2_moves_to_the_next_producer_id_at_epoch_zero_when_the_epochs_run_out() {
    let mut metadata = initialised(V2);
    metadata.current.producer_epoch = i16::MAX - 1;
    apply(&mut metadata, |m| {
        m.prepare_add_partitions(&partitions(&[0]), 10, V2)
    });
    let prepared = apply(&mut metadata, |m| {
        m.prepare_abort_or_commit(PrepareCommit, V2, 8, 11, false)
    });
    assert_eq!(
        (prepared.producer_epoch, prepared.next_producer_id),
        (i16::MAX, 8)
    );
    let complete = apply(&mut metadata, |m| m.prepare_complete(12));
    assert_eq!((complete.producer_id, complete.producer_epoch), (8, 0));
    assert_eq!(complete.previous_producer_id, 7);
    assert_eq!(complete.next_producer_id, NO_PRODUCER_ID);
}

#[test]
fn v2_lets_a_client_abort_a_transaction_that_never_began() {
    let mut metadata = initialised(V2);
    let prepared = apply(&mut metadata, |m| {
        m.prepare_abort_or_commit(PrepareAbort, V2, NO_PRODUCER_ID, 50, true)
    });
    assert_eq!(prepared.start_ms, 50, "it begins when it is aborted");
    apply(&mut metadata, |m| m.prepare_complete(51));
    assert_eq!(metadata.state(), CompleteAbort);
}

#[test]
fn a_commit_needs_an_open_transaction() {
    let mut metadata = initialised(V1);
    let refused = metadata.prepare_abort_or_commit(PrepareCommit, V1, NO_PRODUCER_ID, 5, false);
    assert_eq!(
        refused,
        Err(TransitionError::InvalidTransition {
            from: Empty,
            to: PrepareCommit
        })
    );
    assert_eq!(
        refused.expect_err("refused").error_code(),
        ErrorCode::InvalidTxnState
    );
    assert_eq!(
        metadata.pending(),
        None,
        "a refused transition leaves nothing pending"
    );
}

#[test]
fn nothing_else_is_prepared_while_a_write_is_pending() {
    let mut metadata = initialised(V1);
    let transit = metadata
        .prepare_add_partitions(&partitions(&[0]), 10, V1)
        .expect("prepared");
    let second = metadata.prepare_add_partitions(&partitions(&[1]), 11, V1);
    assert_eq!(second, Err(TransitionError::Pending { pending: Ongoing }));
    assert_eq!(
        second.expect_err("refused").error_code(),
        ErrorCode::ConcurrentTransactions
    );
    assert_eq!(
        metadata.state(),
        Empty,
        "nothing applies before the write is durable"
    );
    metadata.complete(transit).expect("durable");
    assert_eq!(metadata.state(), Ongoing);
}

#[test]
fn a_failed_write_changes_nothing() {
    let mut metadata = initialised(V1);
    let before = metadata.clone();
    metadata
        .prepare_add_partitions(&partitions(&[0]), 10, V1)
        .expect("prepared");
    metadata.abandon();
    assert_eq!(metadata, before);
}

#[test]
fn init_with_the_current_epoch_bumps_it_and_a_retry_keeps_it() {
    let mut metadata = initialised(V1);
    let bumped = apply(&mut metadata, |m| {
        m.prepare_increment_epoch(60_000, Some(0), 5)
    });
    assert_eq!((bumped.producer_epoch, bumped.last_producer_epoch), (1, 0));
    // The answer was lost; the producer asks again with the epoch it had.
    let retried = apply(&mut metadata, |m| {
        m.prepare_increment_epoch(60_000, Some(0), 6)
    });
    assert_eq!(
        (retried.producer_epoch, retried.last_producer_epoch),
        (1, 0)
    );
}

#[test]
fn init_with_an_older_epoch_is_fenced() {
    let mut metadata = initialised(V1);
    apply(&mut metadata, |m| {
        m.prepare_increment_epoch(60_000, Some(0), 5)
    });
    apply(&mut metadata, |m| {
        m.prepare_increment_epoch(60_000, Some(1), 6)
    });
    // Epoch 2 now, last 1: a producer still at epoch 0 is a zombie.
    let refused = metadata.prepare_increment_epoch(60_000, Some(0), 7);
    assert_eq!(
        refused,
        Err(TransitionError::Fenced {
            expected: 0,
            current: 2,
            last: 1
        })
    );
    assert_eq!(
        refused.expect_err("refused").error_code(),
        ErrorCode::ProducerFenced
    );
}

#[test]
fn a_new_session_forgets_the_last_epoch() {
    let mut metadata = initialised(V1);
    apply(&mut metadata, |m| {
        m.prepare_increment_epoch(60_000, Some(0), 5)
    });
    let fresh = apply(&mut metadata, |m| {
        m.prepare_increment_epoch(30_000, None, 6)
    });
    assert_eq!(
        (fresh.producer_epoch, fresh.last_producer_epoch),
        (2, NO_PRODUCER_EPOCH)
    );
    assert_eq!(fresh.timeout_ms, 30_000);
}

#[test]
fn exhausted_epochs_refuse_a_bump_and_rotate_the_producer_id() {
    let mut metadata = initialised(V1);
    metadata.current.producer_epoch = i16::MAX - 1;
    assert_eq!(
        metadata.prepare_increment_epoch(60_000, None, 5),
        Err(TransitionError::EpochExhausted)
    );
    let rotated = apply(&mut metadata, |m| {
        m.prepare_producer_id_rotation(9, 60_000, 6, true)
    });
    assert_eq!((rotated.producer_id, rotated.producer_epoch), (9, 0));
    assert_eq!(rotated.last_producer_epoch, i16::MAX - 1);
    assert_eq!(rotated.previous_producer_id, 7);
}

#[test]
fn a_fence_bumps_the_epoch_then_aborts_at_it() {
    let mut metadata = initialised(V1);
    apply(&mut metadata, |m| {
        m.prepare_add_partitions(&partitions(&[0]), 10, V1)
    });
    let fence = metadata
        .prepare_fence_epoch()
        .expect("an open transaction is fenced");
    assert_eq!((fence.state, fence.producer_epoch), (PrepareEpochFence, 1));
    let abort = apply(&mut metadata, |m| m.prepare_fence_abort(&fence, V1, 11));
    assert_eq!((abort.state, abort.producer_epoch), (PrepareAbort, 1));
    assert_eq!(abort.last_producer_epoch, NO_PRODUCER_EPOCH);
    assert_eq!(
        abort.partitions,
        partitions(&[0]),
        "the open transaction is aborted"
    );
    apply(&mut metadata, |m| m.prepare_complete(12));
    assert_eq!(metadata.state(), CompleteAbort);
    // The zombie, still at epoch 0, asks to go on: fenced.
    assert_eq!(
        metadata
            .prepare_increment_epoch(60_000, Some(0), 13)
            .expect_err("refused")
            .error_code(),
        ErrorCode::ProducerFenced
    );
}

#[test]
fn a_fence_is_never_completed_by_itself() {
    let mut metadata = initialised(V1);
    apply(&mut metadata, |m| {
        m.prepare_add_partitions(&partitions(&[0]), 10, V1)
    });
    let fence = metadata.prepare_fence_epoch().expect("prepared");
    assert_eq!(
        metadata.complete(fence),
        Err(TransitionError::UnexpectedCompletion {
            reason: "a fence or a removal is not completed"
        })
    );
}

#[test]
fn a_failed_fence_does_not_bump_the_epoch_twice() {
    let mut metadata = initialised(V1);
    apply(&mut metadata, |m| {
        m.prepare_add_partitions(&partitions(&[0]), 10, V1)
    });
    let first = metadata.prepare_fence_epoch().expect("prepared");
    metadata
        .prepare_fence_abort(&first, V1, 11)
        .expect("the abort is prepared");
    metadata.abandon(); // its write failed: epoch 1 may or may not be on disk
    assert_eq!(metadata.state(), Ongoing);
    let second = metadata.prepare_fence_epoch().expect("prepared again");
    assert_eq!(first.producer_epoch, 1);
    assert_eq!(
        second.producer_epoch, 1,
        "epoch 1 is not bumped past a second time"
    );
    let abort = apply(&mut metadata, |m| m.prepare_fence_abort(&second, V1, 12));
    assert_eq!(abort.producer_epoch, 1);
    apply(&mut metadata, |m| m.prepare_complete(13));
    // Once something is durable again, a later fence bumps as usual.
    apply(&mut metadata, |m| {
        m.prepare_add_partitions(&partitions(&[1]), 14, V1)
    });
    let third = metadata.prepare_fence_epoch().expect("prepared");
    assert_eq!(third.producer_epoch, 2);
}

#[test]
fn a_completion_must_match_what_was_prepared() {
    let mut metadata = initialised(V1);
    let mut transit = metadata
        .prepare_add_partitions(&partitions(&[0]), 10, V1)
        .expect("prepared");
    transit.producer_epoch = 5;
    assert!(matches!(
        metadata.complete(transit),
        Err(TransitionError::UnexpectedCompletion { .. })
    ));
    let nothing_pending = TransactionMetadata::new("app-2", 3, 1_000, 0, V1);
    let stray = nothing_pending.current().clone();
    let mut nothing_pending = nothing_pending;
    assert_eq!(
        nothing_pending.complete(stray),
        Err(TransitionError::UnexpectedCompletion {
            reason: "no transition is pending"
        })
    );
}

#[test]
fn an_id_with_an_open_transaction_may_not_expire() {
    let mut metadata = initialised(V1);
    apply(&mut metadata, |m| {
        m.prepare_add_partitions(&partitions(&[0]), 10, V1)
    });
    assert_eq!(
        metadata.prepare_dead(),
        Err(TransitionError::InvalidTransition {
            from: Ongoing,
            to: Dead
        })
    );
    let mut idle = initialised(V1);
    let dead = idle.prepare_dead().expect("an idle id expires");
    assert_eq!(dead.state, Dead);
}
