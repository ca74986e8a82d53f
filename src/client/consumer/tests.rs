//! The consumer core alone: inputs in, outputs out, no runtime.

use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{
    FetchRequest, ListOffsetsRequest, MetadataResponse, OffsetForLeaderEpochRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::fetcher::tests::batch_at;
use super::*;
use crate::config::Configurable;

/// A core whose metadata already says broker 0 (`b:9092`), the only one, leads every partition
/// of `t`.
fn core(pairs: &[(&str, &str)]) -> ConsumerCore {
    let mut config = ConsumerConfig::default();
    config.apply(pairs.iter().copied()).expect("valid");
    let mut core = ConsumerCore::new(config);
    core.metadata.want("t");
    core.metadata.request();
    core.metadata.on_response(Millis(0), &one_broker());
    core
}

/// Broker 0 alone, leading the three partitions of `t`.
fn one_broker() -> MetadataResponse {
    let mut answer = led_by(&[0, 0, 0]);
    answer.brokers.truncate(1);
    answer
}

/// Topic `t` led as `leaders` says, by brokers 0 (`b:9092`) and 1 (`c:9092`).
fn led_by(leaders: &[i32]) -> MetadataResponse {
    crate::client::metadata::answer_led_by("t", leaders)
}

/// Broker 0's connection is up.
fn connected() -> ConsumerInput {
    ConsumerInput::Connected {
        node: 0,
        address: "b:9092".into(),
    }
}

/// Broker 0 answers.
fn answer(response: ResponseKind) -> ConsumerInput {
    ConsumerInput::Response { node: 0, response }
}

fn step(core: &mut ConsumerCore, now: u64, input: ConsumerInput) -> Vec<ConsumerOutput> {
    let mut out = Vec::new();
    core.handle(Millis(now), input, &mut out);
    core.check_invariants();
    out
}

fn partition(index: i32) -> TopicPartition {
    TopicPartition::new("t", index)
}

/// A core with `positions` assigned and seeked, polling until `deadline`, connected at 0.
fn polling(pairs: &[(&str, &str)], positions: &[(i32, i64)], deadline: u64) -> ConsumerCore {
    let mut core = core(pairs);
    let out = start_polling(&mut core, positions, deadline);
    assert!(matches!(out.as_slice(), [ConsumerOutput::Connect { .. }]));
    core
}

/// Assigns and seeks `positions`, then polls until `deadline`: what the poll asked for.
fn start_polling(
    core: &mut ConsumerCore,
    positions: &[(i32, i64)],
    deadline: u64,
) -> Vec<ConsumerOutput> {
    let assigned: Vec<TopicPartition> = positions.iter().map(|(p, _)| partition(*p)).collect();
    step(
        core,
        0,
        ConsumerInput::Assign {
            partitions: assigned,
        },
    );
    for (index, offset) in positions {
        let (partition, offset) = (partition(*index), *offset);
        assert!(step(
            core,
            0,
            ConsumerInput::Seek {
                partition,
                offset,
                leader_epoch: None,
            }
        )
        .is_empty());
    }
    step(
        core,
        0,
        ConsumerInput::Poll {
            deadline: Millis(deadline),
        },
    )
}

fn fetch_response(partitions: Vec<(i32, ErrorCode, Vec<u8>)>) -> ResponseKind {
    let partitions = partitions
        .into_iter()
        .map(|(index, error, records)| {
            PartitionData::default()
                .with_partition_index(index)
                .with_error_code(error.code())
                .with_records(Some(records.into()))
        })
        .collect();
    ResponseKind::Fetch(FetchResponse::default().with_responses(vec![
        FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(partitions),
    ]))
}

fn list_offsets_response(partitions: &[(i32, ErrorCode, i64)]) -> ResponseKind {
    let partitions = partitions
        .iter()
        .map(|(index, error, offset)| {
            ListOffsetsPartitionResponse::default()
                .with_partition_index(*index)
                .with_error_code(error.code())
                .with_offset(*offset)
        })
        .collect();
    ResponseKind::ListOffsets(ListOffsetsResponse::default().with_topics(vec![
        ListOffsetsTopicResponse::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(partitions),
    ]))
}

/// The one fetch in `out`, with its timeout.
fn fetch(out: &[ConsumerOutput]) -> (&FetchRequest, u64) {
    let fetches: Vec<(&FetchRequest, u64)> = out
        .iter()
        .filter_map(|output| match output {
            ConsumerOutput::Request {
                body: RequestKind::Fetch(request),
                timeout_ms,
                ..
            } => Some((request, *timeout_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(fetches.len(), 1, "one fetch in {out:?}");
    fetches[0]
}

/// `(partition, fetch offset)` of a fetch.
fn fetched_from(request: &FetchRequest) -> Vec<(i32, i64)> {
    request
        .topics
        .iter()
        .flat_map(|topic| topic.partitions.iter())
        .map(|partition| (partition.partition, partition.fetch_offset))
        .collect()
}

fn list_offsets(out: &[ConsumerOutput]) -> Option<&ListOffsetsRequest> {
    out.iter().find_map(|output| match output {
        ConsumerOutput::Request {
            body: RequestKind::ListOffsets(request),
            ..
        } => Some(request),
        _ => None,
    })
}

fn polled(out: Vec<ConsumerOutput>) -> Option<Result<Polled, ConsumerError>> {
    out.into_iter().find_map(|output| match output {
        ConsumerOutput::Polled(result) => Some(result),
        _ => None,
    })
}

fn offsets(polled: &Polled, index: i32) -> Vec<i64> {
    polled
        .records
        .iter()
        .filter(|record| record.topic_partition == partition(index))
        .map(|record| record.offset)
        .collect()
}

fn corrupt_batch_at(offset: i64, values: &[&str]) -> Vec<u8> {
    let mut batch = batch_at(offset, values);
    let last = batch.len() - 1;
    batch[last] ^= 1;
    batch
}

#[test]
fn a_corrupt_batch_in_one_partition_does_not_lose_or_skip_the_records_of_another_partition() {
    let mut core = polling(&[], &[(0, 0), (1, 0)], 1000);
    let out = step(&mut core, 0, connected());
    assert_eq!(fetched_from(fetch(&out).0), vec![(0, 0), (1, 0)]);
    let good = batch_at(0, &["a", "b", "c"]);
    let mut bad = batch_at(0, &["x", "y"]);
    bad.extend(corrupt_batch_at(2, &["z", "w"]));
    bad.extend(batch_at(4, &["v"]));
    let response = fetch_response(vec![(0, ErrorCode::None, good), (1, ErrorCode::None, bad)]);
    let out = step(&mut core, 10, answer(response));
    let polled = polled(out).expect("records end the poll").expect("ok");
    assert_eq!(
        offsets(&polled, 0),
        vec![0, 1, 2],
        "the healthy partition delivers"
    );
    assert_eq!(
        offsets(&polled, 1),
        vec![0, 1],
        "records before the bad batch arrive"
    );
    assert_eq!(core.position(&partition(0)), Some(3));
    assert_eq!(
        core.position(&partition(1)),
        Some(2),
        "kept at the bad batch"
    );
    assert_eq!(polled.errors.len(), 1);
    let error = &polled.errors[0];
    assert_eq!(error.partition, partition(1));
    assert_eq!(error.error, ErrorCode::CorruptMessage);
    assert_eq!(error.position, 2);
    assert_eq!(error.batch_last_offset, Some(3));
    // The next poll fetches the healthy partition at once and the bad one after the pause.
    let out = step(
        &mut core,
        10,
        ConsumerInput::Poll {
            deadline: Millis(1000),
        },
    );
    assert_eq!(fetched_from(fetch(&out).0), vec![(0, 3)]);
    assert_eq!(
        core.next_deadline(),
        Some(Millis(110)),
        "the bad partition's pause ends"
    );
}

#[test]
fn a_corrupt_batch_is_fetched_again_from_its_first_offset_after_the_retry_pause() {
    let mut core = polling(&[("retry.backoff.ms", "100")], &[(0, 0)], 1000);
    step(&mut core, 0, connected());
    let mut bytes = batch_at(0, &["a"]);
    bytes.extend(corrupt_batch_at(1, &["b"]));
    let response = fetch_response(vec![(0, ErrorCode::None, bytes)]);
    let out = step(&mut core, 10, answer(response));
    let polled = polled(out).expect("done").expect("ok");
    assert_eq!(offsets(&polled, 0), vec![0]);
    let out = step(
        &mut core,
        10,
        ConsumerInput::Poll {
            deadline: Millis(1000),
        },
    );
    assert!(out.is_empty(), "paused: nothing to fetch yet");
    assert_eq!(core.next_deadline(), Some(Millis(110)));
    let out = step(&mut core, 110, ConsumerInput::Tick);
    assert_eq!(
        fetched_from(fetch(&out).0),
        vec![(0, 1)],
        "refetched at the bad batch"
    );
}

#[test]
fn offset_out_of_range_records_a_reset_with_its_reason_then_asks_list_offsets() {
    let mut core = polling(&[("auto.offset.reset", "earliest")], &[(0, 100)], 1000);
    step(&mut core, 0, connected());
    let response = fetch_response(vec![(0, ErrorCode::OffsetOutOfRange, Vec::new())]);
    let out = step(&mut core, 5, answer(response));
    let request = list_offsets(&out).expect("a reset asks ListOffsets");
    let asked = &request.topics[0].partitions[0];
    assert_eq!(
        (asked.partition_index, asked.timestamp),
        (0, -2),
        "earliest"
    );
    assert_eq!(core.position(&partition(0)), None);
    assert!(polled(out).is_none(), "a reset alone does not end the poll");
    let response = list_offsets_response(&[(0, ErrorCode::None, 40)]);
    let out = step(&mut core, 6, answer(response));
    assert_eq!(fetched_from(fetch(&out).0), vec![(0, 40)]);
    let polled = polled(step(&mut core, 1000, ConsumerInput::Tick))
        .expect("the deadline ends the poll")
        .expect("ok");
    assert_eq!(
        polled.resets,
        vec![PositionReset {
            partition: partition(0),
            offset: 40,
            reason: ResetReason::OffsetOutOfRange { position: 100 },
        }]
    );
    assert!(polled.records.is_empty());
}

#[test]
fn a_new_assignment_is_reset_to_the_log_end_before_any_fetch() {
    let mut core = core(&[]);
    let partitions = vec![partition(0)];
    step(&mut core, 0, ConsumerInput::Assign { partitions });
    let deadline = Millis(1000);
    assert!(matches!(
        step(&mut core, 0, ConsumerInput::Poll { deadline }).as_slice(),
        [ConsumerOutput::Connect { .. }]
    ));
    let out = step(&mut core, 1, connected());
    let request = list_offsets(&out).expect("reset first");
    assert_eq!(request.topics[0].partitions[0].timestamp, -1, "latest");
    let response = list_offsets_response(&[(0, ErrorCode::None, 7)]);
    let out = step(&mut core, 2, answer(response));
    assert_eq!(fetched_from(fetch(&out).0), vec![(0, 7)]);
    let response = fetch_response(vec![(0, ErrorCode::None, batch_at(7, &["seven"]))]);
    let polled = polled(step(&mut core, 3, answer(response)))
        .expect("done")
        .expect("ok");
    assert_eq!(offsets(&polled, 0), vec![7]);
    assert_eq!(polled.resets[0].reason, ResetReason::NoPosition);
    assert_eq!(polled.resets[0].offset, 7);
}

#[test]
fn auto_offset_reset_none_fails_a_poll_on_a_partition_without_a_position() {
    let mut core = core(&[("auto.offset.reset", "none")]);
    let partitions = vec![partition(0)];
    step(&mut core, 0, ConsumerInput::Assign { partitions });
    let deadline = Millis(1000);
    let out = step(&mut core, 0, ConsumerInput::Poll { deadline });
    assert!(matches!(
        out.as_slice(),
        [ConsumerOutput::Polled(Err(
            ConsumerError::NoOffsetForPartition(_)
        ))]
    ));
    assert_eq!(core.next_deadline(), None, "nothing more to do");
}

#[test]
fn offset_out_of_range_without_a_reset_policy_is_a_partition_error_at_the_kept_position() {
    let mut core = polling(&[("auto.offset.reset", "none")], &[(0, 100)], 1000);
    step(&mut core, 0, connected());
    let response = fetch_response(vec![(0, ErrorCode::OffsetOutOfRange, Vec::new())]);
    let polled = polled(step(&mut core, 5, answer(response)))
        .expect("an error ends the poll")
        .expect("ok");
    assert_eq!(polled.errors[0].error, ErrorCode::OffsetOutOfRange);
    assert_eq!(polled.errors[0].position, 100);
    assert_eq!(core.position(&partition(0)), Some(100));
}

#[test]
fn a_broker_partition_error_is_reported_and_the_partition_retried_after_the_backoff() {
    let mut core = polling(&[("retry.backoff.ms", "50")], &[(0, 3), (1, 4)], 1000);
    step(&mut core, 0, connected());
    let response = fetch_response(vec![
        (0, ErrorCode::NotLeaderOrFollower, Vec::new()),
        (1, ErrorCode::None, batch_at(4, &["four"])),
    ]);
    let polled = polled(step(&mut core, 10, answer(response)))
        .expect("done")
        .expect("ok");
    assert_eq!(offsets(&polled, 1), vec![4]);
    assert_eq!(polled.errors[0].error, ErrorCode::NotLeaderOrFollower);
    assert_eq!(polled.errors[0].batch_last_offset, None);
    assert_eq!(core.position(&partition(0)), Some(3));
    let deadline = Millis(1000);
    let out = step(&mut core, 10, ConsumerInput::Poll { deadline });
    assert_eq!(
        fetched_from(fetch(&out).0),
        vec![(1, 5)],
        "partition 0 waits"
    );
    // NOT_LEADER_OR_FOLLOWER asked for fresh metadata, which went before this fetch.
    step(&mut core, 20, answer(ResponseKind::Metadata(one_broker())));
    let out = step(&mut core, 30, answer(fetch_response(vec![])));
    assert_eq!(fetched_from(fetch(&out).0), vec![(1, 5)], "paused until 60");
    assert_eq!(core.next_deadline(), Some(Millis(60)));
    assert!(
        step(&mut core, 60, ConsumerInput::Tick).is_empty(),
        "a fetch is in flight"
    );
    let out = step(&mut core, 70, answer(fetch_response(vec![])));
    assert_eq!(fetched_from(fetch(&out).0), vec![(0, 3), (1, 5)]);
}

#[test]
fn a_top_level_fetch_error_pauses_fetching_for_the_backoff() {
    let mut core = polling(&[("retry.backoff.ms", "100")], &[(0, 0)], 1000);
    step(&mut core, 0, connected());
    let response = ResponseKind::Fetch(
        FetchResponse::default().with_error_code(ErrorCode::UnknownServerError.code()),
    );
    let out = step(&mut core, 10, answer(response));
    assert!(out.is_empty(), "a retry, not an error of the poll: {out:?}");
    assert_eq!(core.next_deadline(), Some(Millis(110)));
    let out = step(&mut core, 110, ConsumerInput::Tick);
    assert_eq!(fetched_from(fetch(&out).0), vec![(0, 0)]);
}

#[test]
fn a_request_timeout_disconnects_and_retries_after_the_reconnect_backoff() {
    let pairs = [("request.timeout.ms", "1000"), ("fetch.max.wait.ms", "500")];
    let mut core = polling(&pairs, &[(0, 0)], 10_000);
    let out = step(&mut core, 0, connected());
    assert_eq!(
        fetch(&out).1,
        1500,
        "request.timeout.ms plus the fetch's max wait"
    );
    assert_eq!(core.next_deadline(), Some(Millis(1500)));
    let out = step(&mut core, 1500, ConsumerInput::Tick);
    assert!(matches!(
        out.as_slice(),
        [ConsumerOutput::Disconnect { .. }]
    ));
    assert_eq!(
        core.next_deadline(),
        Some(Millis(1550)),
        "reconnect backoff"
    );
    let out = step(&mut core, 1550, ConsumerInput::Tick);
    assert!(matches!(out.as_slice(), [ConsumerOutput::Connect { .. }]));
    let out = step(&mut core, 1551, connected());
    assert_eq!(
        fetched_from(fetch(&out).0),
        vec![(0, 0)],
        "the same position again"
    );
}

#[test]
fn failed_connects_back_off_exponentially_up_to_the_maximum() {
    let mut core = polling(&[], &[(0, 0)], 100_000);
    let mut now = 0;
    for expected_delay in [50, 100, 200, 400, 800, 1000, 1000] {
        let reason = "refused".to_owned();
        assert!(step(
            &mut core,
            now,
            ConsumerInput::ConnectFailed { node: 0, reason }
        )
        .is_empty());
        assert_eq!(core.next_deadline(), Some(Millis(now + expected_delay)));
        now += expected_delay;
        let out = step(&mut core, now, ConsumerInput::Tick);
        assert!(matches!(out.as_slice(), [ConsumerOutput::Connect { .. }]));
    }
    step(&mut core, now, connected());
    let reason = "reset".to_owned();
    step(
        &mut core,
        now,
        ConsumerInput::Disconnected { node: 0, reason },
    );
    assert_eq!(
        core.next_deadline(),
        Some(Millis(now + 50)),
        "a connection resets it"
    );
}

#[test]
fn fetch_max_wait_is_bounded_by_the_poll_deadline() {
    let mut core = polling(&[("fetch.max.wait.ms", "500")], &[(0, 0)], 200);
    let out = step(&mut core, 50, connected());
    let (request, timeout_ms) = fetch(&out);
    assert_eq!(request.max_wait_ms, 150, "what is left of the poll");
    assert_eq!(timeout_ms, 30_000 + 150);
    let out = step(&mut core, 200, answer(fetch_response(vec![])));
    let polled = polled(out)
        .expect("the deadline ends the poll")
        .expect("ok");
    assert!(polled.is_empty());
    let deadline = Millis(10_000);
    let out = step(&mut core, 200, ConsumerInput::Poll { deadline });
    assert_eq!(fetch(&out).0.max_wait_ms, 500, "fetch.max.wait.ms");
}

#[test]
fn a_fetch_in_flight_when_the_poll_ends_is_delivered_to_the_next_poll() {
    let mut core = polling(&[], &[(0, 0)], 100);
    step(&mut core, 0, connected());
    let polled_empty = polled(step(&mut core, 100, ConsumerInput::Tick)).expect("deadline");
    assert!(polled_empty.expect("ok").is_empty());
    let deadline = Millis(1000);
    let out = step(&mut core, 100, ConsumerInput::Poll { deadline });
    assert!(out.is_empty(), "the old fetch is still in flight");
    let response = fetch_response(vec![(0, ErrorCode::None, batch_at(0, &["zero"]))]);
    let polled = polled(step(&mut core, 120, answer(response)))
        .expect("done")
        .expect("ok");
    assert_eq!(offsets(&polled, 0), vec![0]);
}

#[test]
fn a_response_for_a_partition_seeked_meanwhile_is_ignored() {
    let mut core = polling(&[], &[(0, 0)], 100);
    step(&mut core, 0, connected());
    step(&mut core, 100, ConsumerInput::Tick);
    let (partition, offset) = (partition(0), 50);
    step(
        &mut core,
        100,
        ConsumerInput::Seek {
            partition,
            offset,
            leader_epoch: None,
        },
    );
    let deadline = Millis(1000);
    step(&mut core, 100, ConsumerInput::Poll { deadline });
    let response = fetch_response(vec![(0, ErrorCode::None, batch_at(0, &["zero"]))]);
    let out = step(&mut core, 120, answer(response));
    assert_eq!(fetched_from(fetch(&out).0), vec![(0, 50)]);
    assert!(polled(out).is_none(), "stale records are dropped");
}

#[test]
fn list_offsets_answers_the_application_and_fails_when_the_connection_breaks() {
    let mut core = core(&[]);
    let partitions = vec![partition(0), partition(1)];
    let call = ConsumerInput::ListOffsets {
        partitions: partitions.clone(),
        timestamp: -1,
    };
    assert!(matches!(
        step(&mut core, 0, call).as_slice(),
        [ConsumerOutput::Connect { .. }]
    ));
    let out = step(&mut core, 0, connected());
    assert!(list_offsets(&out).is_some());
    let response = list_offsets_response(&[(0, ErrorCode::None, 5), (1, ErrorCode::None, 9)]);
    let out = step(&mut core, 1, answer(response));
    assert!(matches!(
        out.as_slice(),
        [ConsumerOutput::ListedOffsets(Ok(offsets))]
            if offsets == &vec![(partition(0), 5), (partition(1), 9)]
    ));
    let call = ConsumerInput::ListOffsets {
        partitions,
        timestamp: -1,
    };
    assert!(list_offsets(&step(&mut core, 2, call)).is_some());
    let reason = "reset".to_owned();
    let out = step(
        &mut core,
        3,
        ConsumerInput::Disconnected { node: 0, reason },
    );
    assert!(matches!(
        out.as_slice(),
        [ConsumerOutput::ListedOffsets(Err(
            ListOffsetsError::ConnectionFailed { .. }
        ))]
    ));
}

#[test]
fn a_partition_that_delivered_goes_to_the_end_of_the_next_fetch() {
    let mut core = polling(&[], &[(0, 0), (1, 0), (2, 0)], 1000);
    let out = step(&mut core, 0, connected());
    assert_eq!(fetched_from(fetch(&out).0), vec![(0, 0), (1, 0), (2, 0)]);
    let response = fetch_response(vec![(0, ErrorCode::None, batch_at(0, &["zero"]))]);
    step(&mut core, 10, answer(response));
    let out = step(
        &mut core,
        10,
        ConsumerInput::Poll {
            deadline: Millis(1000),
        },
    );
    assert_eq!(
        fetched_from(fetch(&out).0),
        vec![(1, 0), (2, 0), (0, 1)],
        "partition 0 delivered, so it waits behind the others (Kafka's movePartitionToEnd)"
    );
}

/// `(node, partitions)` of every fetch in `out`.
fn fetches_by_node(out: &[ConsumerOutput]) -> Vec<(NodeId, Vec<i32>)> {
    out.iter()
        .filter_map(|output| match output {
            ConsumerOutput::Request {
                node,
                body: RequestKind::Fetch(request),
                ..
            } => Some((
                *node,
                fetched_from(request).into_iter().map(|(p, _)| p).collect(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn a_fresh_consumer_asks_the_bootstrap_server_for_leaders_then_fetches_from_each() {
    let mut core = ConsumerCore::new(ConsumerConfig::default());
    let out = start_polling(&mut core, &[(0, 0), (1, 0), (2, 0)], 1000);
    assert!(
        matches!(
            out.as_slice(),
            [ConsumerOutput::Connect {
                node: BOOTSTRAP,
                address: None
            }]
        ),
        "no leader known: a bootstrap server: {out:?}"
    );
    let up = ConsumerInput::Connected {
        node: BOOTSTRAP,
        address: "c:9092".into(),
    };
    let out = step(&mut core, 1, up);
    assert!(matches!(
        out.as_slice(),
        [ConsumerOutput::Request {
            node: BOOTSTRAP,
            body: RequestKind::Metadata(_),
            ..
        }]
    ));
    let metadata = ResponseKind::Metadata(led_by(&[0, 1, 1]));
    let out = step(
        &mut core,
        2,
        ConsumerInput::Response {
            node: BOOTSTRAP,
            response: metadata,
        },
    );
    assert!(
        matches!(out.first(), Some(ConsumerOutput::Identified { node: 1 })),
        "c:9092 is broker 1: {out:?}"
    );
    assert!(
        out.iter().any(|output| matches!(
            output,
            ConsumerOutput::Connect { node: 0, address: Some(address) } if address == "b:9092"
        )),
        "broker 0 leads partition 0: {out:?}"
    );
    assert_eq!(fetches_by_node(&out), vec![(1, vec![1, 2])]);
    let out = step(&mut core, 3, connected());
    assert_eq!(fetches_by_node(&out), vec![(0, vec![0])]);
    // Each leader answers on its own connection; a record from broker 1 completes the poll.
    let response = fetch_response(vec![(1, ErrorCode::None, batch_at(0, &["x"]))]);
    let out = step(&mut core, 4, ConsumerInput::Response { node: 1, response });
    let polled = polled(out).expect("done").expect("ok");
    assert_eq!(offsets(&polled, 1), vec![0]);
}

#[test]
fn a_list_offsets_call_over_two_leaders_answers_once_both_did() {
    let mut core = core(&[]);
    core.metadata.request();
    core.metadata.on_response(Millis(0), &led_by(&[0, 1]));
    let call = ConsumerInput::ListOffsets {
        partitions: vec![partition(0), partition(1)],
        timestamp: -1,
    };
    let out = step(&mut core, 0, call);
    assert_eq!(out.len(), 2, "a connection to each leader: {out:?}");
    step(&mut core, 1, connected());
    let out = step(
        &mut core,
        1,
        ConsumerInput::Connected {
            node: 1,
            address: "c:9092".into(),
        },
    );
    let asked = list_offsets(&out).expect("broker 1's part");
    assert_eq!(asked.topics[0].partitions[0].partition_index, 1);
    let part = list_offsets_response(&[(0, ErrorCode::None, 5)]);
    assert!(
        step(&mut core, 2, answer(part)).is_empty(),
        "broker 1 has not answered"
    );
    let part = list_offsets_response(&[(1, ErrorCode::None, 9)]);
    let out = step(
        &mut core,
        3,
        ConsumerInput::Response {
            node: 1,
            response: part,
        },
    );
    assert!(matches!(
        out.as_slice(),
        [ConsumerOutput::ListedOffsets(Ok(offsets))]
            if offsets == &vec![(partition(0), 5), (partition(1), 9)]
    ));
}

/// Broker 0 alone, leading the partitions of `t` in leader epoch `epoch`.
fn one_broker_in_epoch(epoch: i32) -> MetadataResponse {
    let mut answer = one_broker();
    for topic in &mut answer.topics {
        for partition in &mut topic.partitions {
            partition.leader_epoch = epoch;
        }
    }
    answer
}

fn validation(out: &[ConsumerOutput]) -> Option<&OffsetForLeaderEpochRequest> {
    out.iter().find_map(|output| match output {
        ConsumerOutput::Request {
            body: RequestKind::OffsetForLeaderEpoch(request),
            ..
        } => Some(request),
        _ => None,
    })
}

fn epoch_end_response(index: i32, epoch: i32, end_offset: i64) -> ResponseKind {
    use kafka_protocol::messages::offset_for_leader_epoch_response::{
        EpochEndOffset, OffsetForLeaderTopicResult,
    };
    ResponseKind::OffsetForLeaderEpoch(OffsetForLeaderEpochResponse::default().with_topics(vec![
        OffsetForLeaderTopicResult::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![EpochEndOffset::default()
                .with_partition(index)
                .with_leader_epoch(epoch)
                .with_end_offset(end_offset)]),
    ]))
}

/// Reads offsets 5 and 6 (leader epoch 0), then the metadata names leader epoch 1: what the
/// next poll sends.
fn read_then_leader_changes(detection: &str) -> (ConsumerCore, Vec<ConsumerOutput>) {
    let mut core = core(&[
        ("auto.offset.reset", "earliest"),
        ("seedlog.truncation.detection", detection),
    ]);
    core.metadata.request();
    core.metadata
        .on_response(Millis(0), &one_broker_in_epoch(0));
    start_polling(&mut core, &[(0, 5)], 1000);
    let out = step(&mut core, 1, connected());
    let fenced = fetch(&out).0.topics[0].partitions[0].current_leader_epoch;
    assert_eq!(fenced, if detection == "none" { -1 } else { 0 });
    let response = fetch_response(vec![(0, ErrorCode::None, batch_at(5, &["a", "b"]))]);
    let polled = polled(step(&mut core, 2, answer(response)))
        .expect("records end the poll")
        .expect("ok");
    assert_eq!(offsets(&polled, 0), vec![5, 6]);
    core.metadata.request();
    core.metadata
        .on_response(Millis(3), &one_broker_in_epoch(1));
    let out = step(
        &mut core,
        3,
        ConsumerInput::Poll {
            deadline: Millis(2000),
        },
    );
    (core, out)
}

#[test]
fn after_a_leader_change_a_position_past_the_new_leaders_log_moves_back_where_it_diverges() {
    let (mut core, out) = read_then_leader_changes("kip-320");
    let request = validation(&out).expect("the position is validated before any fetch");
    let asked = &request.topics[0].partitions[0];
    assert_eq!(
        (
            asked.partition,
            asked.leader_epoch,
            asked.current_leader_epoch
        ),
        (0, 0, 1),
        "where does epoch 0 end, asked of the leader of epoch 1"
    );
    assert_eq!(request.replica_id, kafka_protocol::messages::BrokerId(-1));
    let out = step(&mut core, 4, answer(epoch_end_response(0, 0, 6)));
    assert_eq!(
        fetched_from(fetch(&out).0),
        vec![(0, 6)],
        "offset 6 was truncated: read it again"
    );
    let response = fetch_response(vec![(0, ErrorCode::None, batch_at(6, &["c"]))]);
    let polled = polled(step(&mut core, 5, answer(response)))
        .expect("records end the poll")
        .expect("ok");
    assert_eq!(offsets(&polled, 0), vec![6]);
    assert_eq!(
        polled.resets,
        vec![PositionReset {
            partition: partition(0),
            offset: 6,
            reason: ResetReason::LogTruncation { position: 7 },
        }]
    );
}

#[test]
fn a_position_the_new_leader_still_holds_is_fetched_from_unchanged() {
    let (mut core, out) = read_then_leader_changes("kip-320");
    assert!(validation(&out).is_some());
    let out = step(&mut core, 4, answer(epoch_end_response(0, 0, 9)));
    assert_eq!(fetched_from(fetch(&out).0), vec![(0, 7)]);
}

#[test]
fn a_consumer_before_kip_320_keeps_its_position_across_a_leader_change() {
    let (_, out) = read_then_leader_changes("none");
    assert!(validation(&out).is_none());
    let (request, _) = fetch(&out);
    assert_eq!(fetched_from(request), vec![(0, 7)]);
    assert_eq!(request.topics[0].partitions[0].current_leader_epoch, -1);
}

#[test]
fn max_poll_records_holds_the_rest_for_the_next_polls_and_does_not_refetch_meanwhile() {
    let mut core = polling(&[("max.poll.records", "2")], &[(0, 0), (1, 10)], 1000);
    let out = step(&mut core, 0, connected());
    assert_eq!(fetched_from(fetch(&out).0), vec![(0, 0), (1, 10)]);
    let response = fetch_response(vec![
        (0, ErrorCode::None, batch_at(0, &["a", "b", "c"])),
        (1, ErrorCode::None, Vec::new()),
    ]);
    let first = polled(step(&mut core, 5, answer(response)))
        .expect("the poll completes")
        .expect("records");
    assert_eq!(offsets(&first, 0), [0, 1]);
    // the application has seen 0 and 1: position 2, though the fetcher has read up to 3
    assert_eq!(core.position(&partition(0)), Some(2));
    assert_eq!(core.position(&partition(1)), Some(10));
    // the next poll answers from the buffer at once; partition 1 alone is fetched meanwhile
    let out = step(
        &mut core,
        6,
        ConsumerInput::Poll {
            deadline: Millis(1000),
        },
    );
    assert!(
        !out.iter()
            .any(|o| matches!(o, ConsumerOutput::Request { .. })),
        "no request while a poll is answered from the buffer: {out:?}"
    );
    let second = polled(out)
        .expect("answered from the buffer")
        .expect("records");
    assert_eq!(offsets(&second, 0), [2]);
    assert_eq!(core.position(&partition(0)), Some(3));
    // with the buffer drained, the next poll fetches partition 0 again, from offset 3
    let out = step(
        &mut core,
        7,
        ConsumerInput::Poll {
            deadline: Millis(1000),
        },
    );
    let (request, _) = fetch(&out);
    assert!(fetched_from(request).contains(&(0, 3)), "{request:?}");
    assert!(polled(out).is_none());
}

#[test]
fn max_poll_records_must_be_at_least_one() {
    let mut config = ConsumerConfig::default();
    assert_eq!(config.max_poll_records, 500, "Kafka's default");
    assert!(config.set("max.poll.records", "0").is_err());
}

#[test]
fn a_reset_answered_by_a_former_leader_asks_for_fresh_metadata() {
    // Found by groups/coordinator-failover-mid-rebalance.toml (seed 0): a member assigned a
    // partition whose leader had moved retried its ListOffsets at the old leader for ever.
    let mut core = core(&[]);
    let partitions = vec![partition(0)];
    step(&mut core, 0, ConsumerInput::Assign { partitions });
    let deadline = Millis(5000);
    step(&mut core, 0, ConsumerInput::Poll { deadline });
    let out = step(&mut core, 1, connected());
    assert!(list_offsets(&out).is_some(), "reset first");
    assert!(!core.metadata.update_requested());
    let response = list_offsets_response(&[(0, ErrorCode::NotLeaderOrFollower, -1)]);
    let out = step(&mut core, 2, answer(response));
    assert!(
        out.iter().any(|o| matches!(
            o,
            ConsumerOutput::Request {
                body: RequestKind::Metadata(_),
                ..
            }
        )),
        "NOT_LEADER_OR_FOLLOWER on a reset asks for metadata: {out:?}"
    );
}
