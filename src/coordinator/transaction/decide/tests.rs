//! The coordinator's decisions for InitProducerId and AddPartitionsToTxn, each followed by the
//! write's completion as the runtime will do it.

use super::*;
use crate::coordinator::transaction::metadata::NO_PRODUCER_EPOCH;
use TransactionVersion::V1;

const TIMEOUT: i32 = 60_000;

fn fresh() -> TransactionMetadata {
    TransactionMetadata::new("app-1", 7, TIMEOUT, 0, V1)
}

fn init(metadata: &mut TransactionMetadata, expected: Option<(i64, i16)>) -> InitDecision {
    let request = InitRequest {
        timeout_ms: TIMEOUT,
        expected,
    };
    init_producer_id(metadata, request, V1, 10, || 99)
}

/// Runs InitProducerId to its durable end; returns the producer id and epoch answered.
fn initialise(metadata: &mut TransactionMetadata, expected: Option<(i64, i16)>) -> (i64, i16) {
    let InitDecision::Write(transit) = init(metadata, expected) else {
        panic!("InitProducerId writes a record");
    };
    metadata.complete(transit.clone()).expect("durable");
    (transit.producer_id, transit.producer_epoch)
}

fn orders(indexes: &[i32]) -> BTreeSet<TopicPartition> {
    indexes
        .iter()
        .map(|index| TopicPartition::new("orders", *index))
        .collect()
}

fn add(metadata: &mut TransactionMetadata, who: (i64, i16), indexes: &[i32]) -> AddDecision {
    add_partitions(metadata, who, &orders(indexes), V1, 20)
}

#[test]
fn a_new_id_starts_at_epoch_zero_and_each_init_bumps_it() {
    let mut metadata = fresh();
    assert_eq!(initialise(&mut metadata, None), (7, 0));
    assert_eq!(initialise(&mut metadata, None), (7, 1));
    assert_eq!(metadata.current().last_producer_epoch, NO_PRODUCER_EPOCH);
}

#[test]
fn a_pending_write_answers_concurrent_transactions() {
    let mut metadata = fresh();
    let InitDecision::Write(_) = init(&mut metadata, None) else {
        panic!("a write");
    };
    assert_eq!(
        init(&mut metadata, None),
        InitDecision::Refuse(ErrorCode::ConcurrentTransactions)
    );
}

#[test]
fn an_unknown_producer_id_is_fenced() {
    let mut metadata = fresh();
    initialise(&mut metadata, None);
    assert_eq!(
        init(&mut metadata, Some((12, 0))),
        InitDecision::Refuse(ErrorCode::ProducerFenced)
    );
    assert_eq!(metadata.pending(), None, "nothing is written for it");
}

#[test]
fn a_producer_recovering_with_its_epoch_gets_the_next_one() {
    let mut metadata = fresh();
    initialise(&mut metadata, None);
    assert_eq!(initialise(&mut metadata, Some((7, 0))), (7, 1));
}

#[test]
fn init_during_an_open_transaction_fences_it_and_asks_to_retry() {
    let mut metadata = fresh();
    let zombie = initialise(&mut metadata, None);
    let AddDecision::Write(added) = add(&mut metadata, zombie, &[0]) else {
        panic!("the partitions are written");
    };
    metadata.complete(added).expect("durable");
    let InitDecision::FenceAndAbort(abort) = init(&mut metadata, None) else {
        panic!("an open transaction is fenced");
    };
    assert_eq!((abort.state, abort.producer_epoch), (PrepareAbort, 1));
    metadata.complete(abort).expect("durable");
    // The zombie, at epoch 0, can no longer add to a transaction.
    assert_eq!(
        add(&mut metadata, zombie, &[1]),
        AddDecision::Answer(ErrorCode::ProducerFenced)
    );
    // Until the markers are written, the new producer is asked to wait.
    assert_eq!(
        init(&mut metadata, None),
        InitDecision::Refuse(ErrorCode::ConcurrentTransactions)
    );
    let complete = metadata.prepare_complete(30).expect("markers written");
    metadata.complete(complete).expect("durable");
    assert_eq!(
        initialise(&mut metadata, None),
        (7, 2),
        "then it gets a new epoch"
    );
}

#[test]
fn exhausted_epochs_move_to_a_new_producer_id() {
    let mut exhausted = TransactionMetadata::new("app-2", 7, TIMEOUT, 0, V1);
    initialise(&mut exhausted, None);
    // Walk the epoch to the edge through recoveries (each bump by the same producer).
    let mut epoch = 0;
    while !epoch_exhausted(epoch) {
        let (_, next) = initialise(&mut exhausted, Some((7, epoch)));
        epoch = next;
    }
    assert_eq!(initialise(&mut exhausted, Some((7, epoch))), (99, 0));
    assert_eq!(exhausted.current().previous_producer_id, 7);
    // The answer was lost: the producer retries with the old id and its exhausted epoch.
    assert_eq!(
        init(&mut exhausted, Some((7, epoch))),
        InitDecision::Write(Transit {
            producer_epoch: 0,
            last_producer_epoch: epoch,
            previous_producer_id: 99,
            ..exhausted.current().clone()
        }),
        "a retry of a rotation is answered the rotated id"
    );
}

#[test]
fn add_partitions_checks_the_producer_then_writes_once() {
    let mut metadata = fresh();
    let producer = initialise(&mut metadata, None);
    assert_eq!(
        add(&mut metadata, (8, 0), &[0]),
        AddDecision::Answer(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        add(&mut metadata, (7, 3), &[0]),
        AddDecision::Answer(ErrorCode::ProducerFenced)
    );
    let AddDecision::Write(added) = add(&mut metadata, producer, &[0, 1]) else {
        panic!("a write");
    };
    assert_eq!(
        add(&mut metadata, producer, &[2]),
        AddDecision::Answer(ErrorCode::ConcurrentTransactions),
        "while the first add is being written"
    );
    metadata.complete(added).expect("durable");
    assert_eq!(
        add(&mut metadata, producer, &[1]),
        AddDecision::Answer(ErrorCode::None),
        "already in the transaction: nothing to write"
    );
    let AddDecision::Write(more) = add(&mut metadata, producer, &[2]) else {
        panic!("a new partition is written");
    };
    assert_eq!(more.partitions, orders(&[0, 1, 2]));
}

#[test]
fn add_partitions_waits_while_a_transaction_completes() {
    let mut metadata = fresh();
    let producer = initialise(&mut metadata, None);
    let AddDecision::Write(added) = add(&mut metadata, producer, &[0]) else {
        panic!("a write");
    };
    metadata.complete(added).expect("durable");
    let commit = metadata
        .prepare_abort_or_commit(PrepareCommit, V1, -1, 25, false)
        .expect("EndTxn");
    metadata.complete(commit).expect("durable");
    assert_eq!(
        add(&mut metadata, producer, &[1]),
        AddDecision::Answer(ErrorCode::ConcurrentTransactions)
    );
}
