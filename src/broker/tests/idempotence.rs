//! Idempotent producers: InitProducerId hands out ids never reused, and the producer state
//! answers a retried batch with its first write, refuses gaps and fenced epochs.

use kafka_protocol::messages::InitProducerIdRequest;

use super::*;

/// A one-record batch of producer `producer_id` at `epoch`, first sequence `sequence`.
fn idempotent(text: &str, producer_id: i64, epoch: i16, sequence: i32) -> Bytes {
    crate::protocol::record_batch::stamp_producer(&value(text), producer_id, epoch, sequence)
}

fn init_producer_id(harness: &mut Harness, transactional_id: Option<&str>) -> Vec<Output<File>> {
    let body = InitProducerIdRequest::default()
        .with_transactional_id(
            transactional_id.map(|id| StrBytes::from_string(id.to_owned()).into()),
        )
        .with_transaction_timeout_ms(60_000);
    harness.request(4, RequestKind::InitProducerId(body))
}

fn producer_id(outputs: Vec<Output<File>>) -> (i16, i64, i16) {
    let ResponseKind::InitProducerId(response) = single_message(outputs) else {
        panic!("not an InitProducerId response")
    };
    (
        response.error_code,
        response.producer_id.0,
        response.producer_epoch,
    )
}

/// Every record value of partition 0 of `topic`, from offset 0.
fn stored(harness: &mut Harness, topic: &str) -> Vec<String> {
    let outputs = harness.fetch(topic, 0, 0, 0);
    fetched_values(outputs)
}

#[test]
fn producer_ids_wait_for_a_durable_block_and_are_never_reused_after_a_crash() {
    let storage = MemoryStorage::new();
    let mut harness = Harness::on(storage.clone());
    let outputs = init_producer_id(&mut harness, None);
    assert!(
        matches!(outputs.as_slice(), [Output::Flush { .. }]),
        "no id before its block is durable: {outputs:?}"
    );
    assert_eq!(producer_id(harness.flush_all(outputs, true)), (0, 0, 0));
    assert_eq!(producer_id(init_producer_id(&mut harness, None)), (0, 1, 0));
    // A power loss: the restart continues past the durable block, whatever was handed out.
    storage.crash(CrashLevel::PowerLoss, &mut |_| 0);
    let mut harness = Harness::on(storage);
    let outputs = init_producer_id(&mut harness, None);
    let (error, id, epoch) = producer_id(harness.flush_all(outputs, true));
    assert_eq!((error, epoch), (0, 0));
    assert_eq!(
        id,
        producer_ids::BLOCK_SIZE,
        "ids 0..1000 were reserved before the crash"
    );
}

#[test]
fn a_failed_reservation_answers_a_retriable_error_and_the_next_request_tries_again() {
    let mut harness = Harness::new();
    let outputs = init_producer_id(&mut harness, None);
    let (error, id, _) = producer_id(harness.flush_all(outputs, false));
    assert_eq!(
        (error, id),
        (ErrorCode::CoordinatorLoadInProgress.code(), -1)
    );
    let outputs = init_producer_id(&mut harness, None);
    assert_eq!(producer_id(harness.flush_all(outputs, true)), (0, 0, 0));
}

#[test]
fn a_broker_in_a_cluster_hands_out_ids_under_its_node_id() {
    let config = BrokerConfig {
        node_id: 3,
        ..BrokerConfig::default()
    };
    let mut harness = Harness::with_config(MemoryStorage::new(), config);
    let outputs = init_producer_id(&mut harness, None);
    let (_, id, _) = producer_id(harness.flush_all(outputs, true));
    assert_eq!(id, 3 << 32);
}

#[test]
fn a_transactional_id_is_refused() {
    let mut harness = Harness::new();
    let (error, id, _) = producer_id(init_producer_id(&mut harness, Some("tx")));
    assert_eq!((error, id), (ErrorCode::InvalidRequest.code(), -1));
}

#[test]
fn a_retried_batch_answers_its_first_offset_and_is_not_stored_twice() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[]);
    harness.produce_values("t", 0, 0..2);
    assert_eq!(
        produced_offset(harness.produce("t", 0, 1, idempotent("a", 5, 0, 0))),
        (0, 2)
    );
    assert_eq!(
        produced_offset(harness.produce("t", 0, 1, idempotent("b", 5, 0, 1))),
        (0, 3)
    );
    assert_eq!(
        produced_offset(harness.produce("t", 0, 1, idempotent("a", 5, 0, 0))),
        (0, 2),
        "the retry of sequence 0 is answered with its first offset"
    );
    assert_eq!(stored(&mut harness, "t"), ["value-0", "value-1", "a", "b"]);
    let appended = harness
        .events
        .iter()
        .filter(|event| matches!(event, BrokerEvent::Appended { .. }))
        .count();
    assert_eq!(appended, 4, "a duplicate is no append");
}

#[test]
fn a_gap_in_the_sequence_and_an_older_epoch_are_refused_and_nothing_is_stored() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[]);
    assert_eq!(
        produced_offset(harness.produce("t", 0, 1, idempotent("a", 5, 1, 0))),
        (0, 0)
    );
    let (error, _) = produced_offset(harness.produce("t", 0, 1, idempotent("c", 5, 1, 2)));
    assert_eq!(error, ErrorCode::OutOfOrderSequenceNumber.code());
    let (error, _) = produced_offset(harness.produce("t", 0, 1, idempotent("old", 5, 0, 1)));
    assert_eq!(error, ErrorCode::InvalidProducerEpoch.code());
    let (error, _) = produced_offset(harness.produce("t", 0, 1, idempotent("new", 5, 2, 3)));
    assert_eq!(
        error,
        ErrorCode::OutOfOrderSequenceNumber.code(),
        "a new epoch starts at sequence 0"
    );
    assert_eq!(stored(&mut harness, "t"), ["a"]);
}

/// KAFKA-19880 (`seedlog.idempotence.generation=kafka-19880`, the default): a batch of a
/// producer the log knows nothing of must start at sequence 0, or it gets UNKNOWN_PRODUCER_ID
/// and nothing is stored. Kafka 2.5 to 4.4 (`kip-360`) take any first sequence.
#[test]
fn an_unknown_producer_must_start_at_sequence_zero_unless_the_kip_360_generation_runs() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[]);
    let (error, _) = produced_offset(harness.produce("t", 0, 1, idempotent("b", 5, 0, 6)));
    assert_eq!(error, ErrorCode::UnknownProducerId.code());
    assert!(stored(&mut harness, "t").is_empty());
    assert_eq!(
        produced_offset(harness.produce("t", 0, 1, idempotent("a", 5, 0, 0))),
        (0, 0)
    );
    assert_eq!(
        produced_offset(harness.produce("t", 0, 1, idempotent("b", 5, 0, 1))),
        (0, 1)
    );

    let mut config = BrokerConfig::default();
    crate::config::Configurable::apply(
        &mut config,
        [("seedlog.idempotence.generation", "kip-360")],
    )
    .expect("a valid config");
    let mut harness = Harness::with_config(MemoryStorage::new(), config);
    harness.create_topic("t", 1, &[]);
    assert_eq!(
        produced_offset(harness.produce("t", 0, 1, idempotent("b", 5, 0, 6))),
        (0, 0),
        "Kafka 4.4 takes any first sequence"
    );
}

#[test]
fn the_producer_state_is_rebuilt_from_the_log_after_a_restart() {
    let storage = MemoryStorage::new();
    let mut harness = Harness::on(storage.clone());
    harness.create_topic("t", 1, &[("flush.messages", "1")]);
    for sequence in 0..3 {
        let outputs = harness.produce("t", 0, 1, idempotent("x", 9, 0, sequence));
        harness.flush_all(outputs, true);
    }
    storage.crash(CrashLevel::PowerLoss, &mut |_| 0);
    let mut harness = Harness::on(storage);
    let outputs = harness.produce("t", 0, 1, idempotent("x", 9, 0, 2));
    assert_eq!(
        produced_offset(harness.flush_all(outputs, true)),
        (0, 2),
        "the retry across the restart is still recognised"
    );
    let (error, _) = produced_offset(harness.produce("t", 0, 1, idempotent("y", 9, 0, 5)));
    assert_eq!(error, ErrorCode::OutOfOrderSequenceNumber.code());
}

#[test]
fn a_retry_of_a_batch_whose_fsync_is_in_flight_waits_for_it() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[("flush.messages", "1")]);
    let first = harness.produce("t", 0, 1, idempotent("a", 5, 0, 0));
    assert!(matches!(first.as_slice(), [Output::Flush { .. }]));
    let retry = harness.produce("t", 0, 1, idempotent("a", 5, 0, 0));
    assert!(
        retry.is_empty(),
        "the retry is not answered before the first write is durable: {retry:?}"
    );
    let answers = harness.flush_all(first, true);
    assert_eq!(
        answers.len(),
        2,
        "both answers after the fsync: {answers:?}"
    );
}
