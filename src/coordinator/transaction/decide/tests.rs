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

/// A producer at epoch 0 with `orders-0` in an open transaction, under `version`.
fn open_transaction(version: TransactionVersion) -> (TransactionMetadata, (i64, i16)) {
    let mut metadata = TransactionMetadata::new("app-1", 7, TIMEOUT, 0, version);
    let request = InitRequest {
        timeout_ms: TIMEOUT,
        expected: None,
    };
    let InitDecision::Write(transit) = init_producer_id(&mut metadata, request, version, 1, || 99)
    else {
        panic!("a write");
    };
    metadata.complete(transit.clone()).expect("durable");
    let producer = (transit.producer_id, transit.producer_epoch);
    let AddDecision::Write(added) =
        add_partitions(&mut metadata, producer, &orders(&[0]), version, 2)
    else {
        panic!("a write");
    };
    metadata.complete(added).expect("durable");
    (metadata, producer)
}

fn end(
    metadata: &mut TransactionMetadata,
    producer: (i64, i16),
    result: TxnResult,
    version: TransactionVersion,
) -> EndDecision {
    end_txn(metadata, producer, result, version, 30, || 99)
}

/// Ends the open transaction with `result` and writes its markers; returns the epoch the
/// producer goes on with.
fn finish(
    metadata: &mut TransactionMetadata,
    producer: (i64, i16),
    result: TxnResult,
    version: TransactionVersion,
) -> i16 {
    let EndDecision::Write(prepared) = end(metadata, producer, result, version) else {
        panic!("EndTxn writes its decision");
    };
    metadata.complete(prepared).expect("durable");
    let complete = metadata.prepare_complete(31).expect("markers written");
    metadata.complete(complete).expect("durable");
    metadata.current().producer_epoch
}

#[test]
fn end_txn_commits_an_open_transaction_and_a_retry_is_answered_none() {
    for version in [V1, TransactionVersion::V2] {
        let (mut metadata, producer) = open_transaction(version);
        let epoch = finish(&mut metadata, producer, TxnResult::Commit, version);
        assert_eq!(metadata.state(), CompleteCommit);
        let retry = end(&mut metadata, producer, TxnResult::Commit, version);
        let expected = match version {
            V1 => EndDecision::Answer(ErrorCode::None, None),
            TransactionVersion::V2 => EndDecision::Answer(ErrorCode::None, Some((7, epoch))),
        };
        assert_eq!(retry, expected, "{version:?}");
        assert_eq!(
            end(&mut metadata, producer, TxnResult::Abort, version),
            EndDecision::Answer(ErrorCode::InvalidTxnState, None),
            "{version:?}: an abort after the commit"
        );
    }
}

#[test]
fn end_txn_checks_the_producer_and_the_state() {
    let (mut metadata, producer) = open_transaction(V1);
    assert_eq!(
        end(&mut metadata, (8, 0), TxnResult::Commit, V1),
        EndDecision::Answer(ErrorCode::InvalidProducerIdMapping, None)
    );
    assert_eq!(
        end(&mut metadata, (7, 1), TxnResult::Commit, V1),
        EndDecision::Answer(ErrorCode::ProducerFenced, None)
    );
    let EndDecision::Write(prepared) = end(&mut metadata, producer, TxnResult::Commit, V1) else {
        panic!("a write");
    };
    assert_eq!(
        end(&mut metadata, producer, TxnResult::Commit, V1),
        EndDecision::Answer(ErrorCode::ConcurrentTransactions, None),
        "while its record is written"
    );
    metadata.complete(prepared).expect("durable");
    assert_eq!(
        end(&mut metadata, producer, TxnResult::Commit, V1),
        EndDecision::Answer(ErrorCode::ConcurrentTransactions, None),
        "while its markers are written"
    );
    assert_eq!(
        end(&mut metadata, producer, TxnResult::Abort, V1),
        EndDecision::Answer(ErrorCode::InvalidTxnState, None)
    );
}

/// The classic protocol's flaw (the Jepsen Bufstream report; KIP-890): transaction 1's
/// EndTxn(commit) is delayed, retried and answered; the producer opens transaction 2 at the
/// same epoch; the delayed request then arrives and commits transaction 2 before its producer
/// asked. Under V2 transaction 1 ended with an epoch bump, and the late request is fenced.
#[test]
fn a_late_end_txn_commits_the_next_transaction_under_v1_but_is_fenced_under_v2() {
    for version in [V1, TransactionVersion::V2] {
        let (mut metadata, producer) = open_transaction(version);
        let epoch = finish(&mut metadata, producer, TxnResult::Commit, version);
        // Transaction 2, at the epoch the producer goes on with.
        let next = (7, epoch);
        let AddDecision::Write(added) =
            add_partitions(&mut metadata, next, &orders(&[1]), version, 40)
        else {
            panic!("a write");
        };
        metadata.complete(added).expect("durable");
        // Transaction 1's delayed EndTxn(commit) arrives.
        let late = end(&mut metadata, producer, TxnResult::Commit, version);
        match version {
            V1 => {
                let EndDecision::Write(prepared) = late else {
                    panic!("V1 takes it: {late:?}");
                };
                assert_eq!(prepared.state, PrepareCommit);
                assert_eq!(
                    prepared.partitions,
                    orders(&[0, 1]).split_off(&TopicPartition::new("orders", 1))
                );
            }
            TransactionVersion::V2 => {
                assert_eq!(late, EndDecision::Answer(ErrorCode::ProducerFenced, None));
                assert_eq!(metadata.state(), Ongoing, "transaction 2 stays open");
            }
        }
    }
}

#[test]
fn v2_lets_a_producer_abort_when_no_transaction_is_open() {
    let (mut metadata, producer) = open_transaction(TransactionVersion::V2);
    let epoch = finish(
        &mut metadata,
        producer,
        TxnResult::Commit,
        TransactionVersion::V2,
    );
    let EndDecision::Write(abort) = end(
        &mut metadata,
        (7, epoch),
        TxnResult::Abort,
        TransactionVersion::V2,
    ) else {
        panic!("an abort after a completed transaction is written under V2");
    };
    assert_eq!(
        (abort.state, abort.producer_epoch),
        (PrepareAbort, epoch + 1)
    );
    assert!(abort.partitions.is_empty());
    let (mut v1, producer) = open_transaction(V1);
    finish(&mut v1, producer, TxnResult::Commit, V1);
    assert_eq!(
        end(&mut v1, producer, TxnResult::Abort, V1),
        EndDecision::Answer(ErrorCode::InvalidTxnState, None),
        "V1 has no such abort"
    );
}

#[test]
fn v2_ends_on_a_new_producer_id_when_the_epochs_run_out() {
    let (mut metadata, _) = open_transaction(TransactionVersion::V2);
    let exhausted = i16::MAX - 1;
    metadata.set_producer_epoch(exhausted);
    let EndDecision::Write(prepared) = end(
        &mut metadata,
        (7, exhausted),
        TxnResult::Commit,
        TransactionVersion::V2,
    ) else {
        panic!("a write");
    };
    assert_eq!(prepared.next_producer_id, 99);
    metadata.complete(prepared).expect("durable");
    let complete = metadata.prepare_complete(31).expect("markers written");
    metadata.complete(complete).expect("durable");
    assert_eq!(
        (
            metadata.current().producer_id,
            metadata.current().producer_epoch
        ),
        (99, 0)
    );
    assert_eq!(
        end(
            &mut metadata,
            (7, exhausted),
            TxnResult::Commit,
            TransactionVersion::V2
        ),
        EndDecision::Answer(ErrorCode::None, Some((99, 0))),
        "a retry with the old id and epoch hears where to go on"
    );
}

#[test]
fn a_timed_out_transaction_is_aborted_at_a_fenced_epoch() {
    for version in [V1, TransactionVersion::V2] {
        let (mut metadata, producer) = open_transaction(version);
        let abort = abort_timed_out(&mut metadata, version, 70_000).expect("an open transaction");
        assert_eq!(abort.state, PrepareAbort);
        assert!(
            abort.producer_epoch > producer.1,
            "{version:?}: the stale producer is fenced"
        );
        assert_eq!(
            abort_timed_out(&mut metadata, version, 70_001),
            None,
            "nothing more while the abort is written"
        );
        metadata.complete(abort).expect("durable");
        assert_eq!(
            end(&mut metadata, producer, TxnResult::Commit, version),
            EndDecision::Answer(ErrorCode::ProducerFenced, None),
            "{version:?}: the stale producer's commit"
        );
    }
    let mut idle = fresh();
    initialise(&mut idle, None);
    assert_eq!(
        abort_timed_out(&mut idle, V1, 70_000),
        None,
        "no transaction open"
    );
}
