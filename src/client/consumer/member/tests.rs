//! One test per transition of the member's state machine: each starts from a state reached
//! through the core's own inputs, feeds one answer or one instant, and checks what the core
//! decided and where it ended.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::metadata_response::{
    MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{
    FindCoordinatorResponse, JoinGroupResponse, MetadataResponse, OffsetCommitResponse,
    OffsetFetchResponse, RequestKind, SyncGroupResponse, TopicName,
};

use super::*;
use crate::client::group::{decode_full_subscription, encode_assignment, encode_subscription};

const HEARTBEAT: Duration = Duration::from_secs(3);
const BACKOFF: Duration = Duration::from_millis(100);
const REQUEST: Duration = Duration::from_secs(30);
const API: Duration = Duration::from_mins(1);

fn config(assignors: Vec<Assignor>) -> ConsumerConfig {
    ConsumerConfig {
        bootstrap_servers: vec!["a:9092".into(), "b:9092".into()],
        group_id: Some("g".into()),
        heartbeat_interval_ms: HEARTBEAT.as_millis() as u64,
        retry_backoff_ms: BACKOFF.as_millis() as u64,
        request_timeout_ms: REQUEST.as_millis() as u64,
        default_api_timeout_ms: API.as_millis() as u64,
        max_poll_interval_ms: 300_000,
        partition_assignment_strategy: assignors,
        ..ConsumerConfig::default()
    }
}

fn eager() -> MemberCore {
    MemberCore::new(&config(vec![Assignor::Range]), vec!["t".into()])
}

fn cooperative() -> MemberCore {
    MemberCore::new(&config(vec![Assignor::CooperativeSticky]), vec!["t".into()])
}

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new("t", partition)
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn join_answer(error: ErrorCode, member: &str, leader: &str, generation: i32) -> JoinGroupResponse {
    JoinGroupResponse::default()
        .with_error_code(error.code())
        .with_member_id(StrBytes::from_string(member.into()))
        .with_leader(StrBytes::from_string(leader.into()))
        .with_generation_id(generation)
        .with_protocol_name(Some(StrBytes::from_static_str("range")))
}

fn sync_answer(error: ErrorCode, assignment: &[TopicPartition]) -> SyncGroupResponse {
    SyncGroupResponse::default()
        .with_error_code(error.code())
        .with_assignment(encode_assignment(assignment))
}

/// A member that joined generation `generation` at `now` as `m1`, assigned `assignment`.
fn joined(
    mut core: MemberCore,
    now: Duration,
    generation: i32,
    assignment: &[TopicPartition],
) -> MemberCore {
    core.start_join();
    assert!(core.join_attempt());
    let _ = core.join_request();
    let answer = core.on_join_answer(&join_answer(ErrorCode::None, "m1", "m2", generation));
    assert_eq!(
        answer,
        JoinAnswer::Joined {
            generation,
            leader: false
        }
    );
    let synced = core.on_sync_answer(now, generation, &sync_answer(ErrorCode::None, assignment));
    assert!(matches!(synced, SyncAnswer::Synced { .. }), "{synced:?}");
    let added = core.take_assigned(assignment);
    assert_eq!(added, assignment);
    core
}

#[test]
fn a_new_member_has_no_generation_and_must_join() {
    let core = eager();
    assert_eq!(core.generation(), -1);
    assert!(core.needs_rejoin());
    assert!(!core.in_generation());
    assert!(core.member_id().is_empty());
    assert!(core.held().is_empty());
}

#[test]
fn the_coordinator_is_asked_of_each_bootstrap_server_in_turn() {
    let mut core = eager();
    assert_eq!(core.next_bootstrap(), "a:9092");
    assert_eq!(core.next_bootstrap(), "b:9092");
    assert_eq!(core.next_bootstrap(), "a:9092");
    assert_eq!(core.find_coordinator_request().key.as_str(), "g");
    let found = FindCoordinatorResponse::default()
        .with_host(StrBytes::from_static_str("broker-2"))
        .with_port(9093);
    assert_eq!(
        MemberCore::on_find_coordinator(&found),
        Ok("broker-2:9093".into())
    );
    let refused = found.with_error_code(ErrorCode::CoordinatorNotAvailable.code());
    assert_eq!(
        MemberCore::on_find_coordinator(&refused),
        Err(ErrorCode::CoordinatorNotAvailable)
    );
}

#[test]
fn a_join_group_call_may_wait_the_rebalance_timeout_beyond_the_request_timeout() {
    let mut core = eager();
    let join = RequestKind::JoinGroup(core.join_request());
    assert_eq!(core.call_timeout(&join), REQUEST + ms(300_000));
    let heartbeat = RequestKind::Heartbeat(kafka_protocol::messages::HeartbeatRequest::default());
    assert_eq!(core.call_timeout(&heartbeat), REQUEST);
}

#[test]
fn a_join_has_ten_attempts_and_stops_heartbeats() {
    let mut core = joined(eager(), ms(0), 1, &[tp(0)]);
    assert!(core.in_generation());
    core.start_join();
    assert!(!core.in_generation(), "no heartbeats while joining");
    for _ in 0..JOIN_ATTEMPTS {
        assert!(core.join_attempt());
    }
    assert!(!core.join_attempt(), "the attempts are spent");
}

#[test]
fn a_failed_join_attempt_retries_without_an_answer_and_gives_up_on_a_refusal() {
    let core = eager();
    assert_eq!(
        core.join_failed(Failure::NoAnswer),
        JoinNext::RetryAfter(BACKOFF)
    );
    assert_eq!(
        core.join_failed(Failure::Refused(ErrorCode::CoordinatorNotAvailable)),
        JoinNext::GiveUp
    );
}

#[test]
fn member_id_required_gives_the_id_and_joins_again_at_once() {
    let mut core = eager();
    let answer = core.on_join_answer(&join_answer(ErrorCode::MemberIdRequired, "m1", "", -1));
    assert_eq!(
        answer,
        JoinAnswer::Retry {
            backoff: None,
            rediscover: false
        }
    );
    assert_eq!(core.member_id(), "m1");
    assert_eq!(core.join_request().member_id.as_str(), "m1");
}

#[test]
fn a_join_refused_by_a_moved_coordinator_rediscovers_it_after_a_backoff() {
    let mut core = eager();
    let answer = core.on_join_answer(&join_answer(ErrorCode::NotCoordinator, "", "", -1));
    assert_eq!(
        answer,
        JoinAnswer::Retry {
            backoff: Some(BACKOFF),
            rediscover: true
        }
    );
    let answer = core.on_join_answer(&join_answer(
        ErrorCode::CoordinatorLoadInProgress,
        "",
        "",
        -1,
    ));
    assert_eq!(
        answer,
        JoinAnswer::Retry {
            backoff: Some(BACKOFF),
            rediscover: false
        }
    );
}

#[test]
fn an_unknown_member_id_on_join_forgets_the_id_and_what_was_owned() {
    let mut core = joined(cooperative(), ms(0), 1, &[tp(0)]);
    let answer = core.on_join_answer(&join_answer(ErrorCode::UnknownMemberId, "", "", -1));
    assert_eq!(
        answer,
        JoinAnswer::Retry {
            backoff: Some(BACKOFF),
            rediscover: false
        }
    );
    assert!(core.member_id().is_empty());
    assert!(!core.in_generation());
    let subscription =
        decode_full_subscription(&core.join_request().protocols[0].metadata).expect("present");
    assert!(subscription.owned.is_empty(), "a new member owns nothing");
}

#[test]
fn a_fatal_join_error_ends_the_join() {
    let mut core = eager();
    let answer = core.on_join_answer(&join_answer(
        ErrorCode::InconsistentGroupProtocol,
        "",
        "",
        -1,
    ));
    assert_eq!(
        answer,
        JoinAnswer::Fatal(ErrorCode::InconsistentGroupProtocol)
    );
}

#[test]
fn a_join_answer_makes_the_member_the_leader_when_it_names_it() {
    let mut core = eager();
    let answer = core.on_join_answer(&join_answer(ErrorCode::None, "m1", "m1", 4));
    assert_eq!(
        answer,
        JoinAnswer::Joined {
            generation: 4,
            leader: true
        }
    );
    assert_eq!(core.member_id(), "m1");
    assert_eq!(core.sync_request(4, Vec::new()).generation_id, 4);
}

#[test]
fn an_eager_member_offers_nothing_owned_and_a_cooperative_one_its_assignment() {
    let mut core = joined(eager(), ms(0), 1, &[tp(0), tp(1)]);
    let request = core.join_request();
    let subscription = decode_full_subscription(&request.protocols[0].metadata).expect("present");
    assert_eq!(subscription.topics, ["t"]);
    assert!(subscription.owned.is_empty());
    assert_eq!(request.protocols[0].name.as_str(), "range");

    let mut core = joined(cooperative(), ms(0), 1, &[tp(0), tp(1)]);
    let subscription =
        decode_full_subscription(&core.join_request().protocols[0].metadata).expect("present");
    assert_eq!(subscription.owned, [tp(0), tp(1)]);
}

#[test]
fn the_leader_deals_with_the_chosen_assignor_over_the_described_partition_counts() {
    let core = eager();
    let member = |id: &str, topics: &[&str]| {
        let topics: Vec<String> = topics.iter().map(ToString::to_string).collect();
        JoinGroupResponseMember::default()
            .with_member_id(StrBytes::from_string(id.into()))
            .with_metadata(encode_subscription(&topics, &[]))
    };
    let answer = join_answer(ErrorCode::None, "m1", "m1", 1)
        .with_members(vec![member("m1", &["t", "u"]), member("m2", &["t"])]);
    let plan = core.assign_plan(&answer).expect("present");
    assert_eq!(plan.topics(), ["t", "u"]);
    let topic = |name: &str, partitions: i32, error: ErrorCode| {
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(name.into()))))
            .with_error_code(error.code())
            .with_partitions(
                (0..partitions)
                    .map(|index| MetadataResponsePartition::default().with_partition_index(index))
                    .collect(),
            )
    };
    let described = MetadataResponse::default().with_topics(vec![
        topic("t", 4, ErrorCode::None),
        topic("u", 2, ErrorCode::UnknownTopicOrPartition),
    ]);
    let dealt: BTreeMap<String, Vec<TopicPartition>> = MemberCore::assignments(&plan, &described)
        .into_iter()
        .map(|assignment| {
            let partitions = decode_assignment(&assignment.assignment).expect("present");
            (assignment.member_id.to_string(), partitions)
        })
        .collect();
    // Range over t's four partitions; u is described with an error, so it has none.
    assert_eq!(dealt["m1"], [tp(0), tp(1)]);
    assert_eq!(dealt["m2"], [tp(2), tp(3)]);
}

#[test]
fn the_leader_refuses_an_assignor_it_did_not_offer() {
    let core = eager();
    let answer = join_answer(ErrorCode::None, "m1", "m1", 1)
        .with_protocol_name(Some(StrBytes::from_static_str("roundrobin")));
    let refused = core.assign_plan(&answer).expect_err("refused");
    assert!(refused.contains("roundrobin"), "{refused}");
}

#[test]
fn a_sync_gives_the_generation_and_schedules_the_first_heartbeat() {
    let mut core = eager();
    core.start_join();
    let _ = core.on_join_answer(&join_answer(ErrorCode::None, "m1", "m2", 7));
    let answer = core.on_sync_answer(ms(500), 7, &sync_answer(ErrorCode::None, &[tp(1)]));
    assert_eq!(
        answer,
        SyncAnswer::Synced {
            generation: 7,
            assignment: vec![tp(1)]
        }
    );
    assert_eq!(core.generation(), 7);
    assert!(core.in_generation());
    assert!(!core.needs_rejoin());
    assert_eq!(core.until_heartbeat(ms(500)), HEARTBEAT);
}

#[test]
fn a_cooperative_sync_that_moves_an_owned_partition_away_rejoins_at_once() {
    let mut core = joined(cooperative(), ms(0), 1, &[tp(0), tp(1)]);
    core.start_join();
    let _ = core.on_join_answer(&join_answer(ErrorCode::None, "m1", "m2", 2));
    let answer = core.on_sync_answer(ms(10), 2, &sync_answer(ErrorCode::None, &[tp(0)]));
    assert!(matches!(answer, SyncAnswer::Synced { generation: 2, .. }));
    assert!(
        core.needs_rejoin(),
        "tp(1) must be released through another rebalance"
    );
    assert_eq!(core.moved_away(&[tp(0)]), [tp(1)]);
    core.release(&[tp(1)]);
    assert_eq!(core.held(), [tp(0)]);
    assert!(core.take_assigned(&[tp(0)]).is_empty(), "nothing new");
    // The next sync that moves nothing settles the member.
    let _ = core.on_sync_answer(ms(20), 3, &sync_answer(ErrorCode::None, &[tp(0)]));
    assert!(!core.needs_rejoin());
}

#[test]
fn a_sync_refused_by_a_rebalance_keeps_the_generation_live() {
    let mut core = joined(cooperative(), ms(0), 1, &[tp(0)]);
    let answer = core.on_sync_answer(ms(10), 2, &sync_answer(ErrorCode::RebalanceInProgress, &[]));
    assert_eq!(answer, SyncAnswer::Retry { rediscover: false });
    assert!(core.needs_rejoin());
    assert!(core.in_generation(), "heartbeats go on until the rejoin");
    assert_eq!(core.generation(), 1);
}

#[test]
fn a_sync_refused_for_an_illegal_generation_ends_it_and_what_was_owned() {
    let mut core = joined(cooperative(), ms(0), 1, &[tp(0)]);
    let answer = core.on_sync_answer(ms(10), 2, &sync_answer(ErrorCode::IllegalGeneration, &[]));
    assert_eq!(answer, SyncAnswer::Retry { rediscover: false });
    assert!(!core.in_generation());
    let subscription =
        decode_full_subscription(&core.join_request().protocols[0].metadata).expect("present");
    assert!(subscription.owned.is_empty());
}

#[test]
fn a_sync_refused_by_a_moved_coordinator_rediscovers_it_and_a_fatal_one_ends_the_join() {
    let mut core = eager();
    let answer = core.on_sync_answer(ms(0), 1, &sync_answer(ErrorCode::NotCoordinator, &[]));
    assert_eq!(answer, SyncAnswer::Retry { rediscover: true });
    let answer = core.on_sync_answer(ms(0), 1, &sync_answer(ErrorCode::InvalidGroupId, &[]));
    assert_eq!(answer, SyncAnswer::Fatal(ErrorCode::InvalidGroupId));
}

#[test]
fn an_assignment_that_does_not_decode_is_refused_and_changes_nothing() {
    let mut core = eager();
    let garbage = SyncGroupResponse::default().with_assignment(bytes::Bytes::from_static(&[0, 9]));
    assert_eq!(
        core.on_sync_answer(ms(0), 1, &garbage),
        SyncAnswer::Undecodable
    );
    assert_eq!(core.generation(), -1);
    assert!(core.needs_rejoin());
}

#[test]
fn before_a_join_a_lost_generation_loses_what_was_held() {
    let mut core = joined(eager(), ms(0), 1, &[tp(0)]);
    assert_eq!(core.react(ErrorCode::IllegalGeneration), Reaction::Proceed);
    assert_eq!(core.join_prepare(), Some(Revocation::Lost(vec![tp(0)])));
    assert!(core.held().is_empty());
}

#[test]
fn before_a_join_an_eager_member_revokes_everything_and_holds_it_through_the_callback() {
    let mut core = joined(eager(), ms(0), 1, &[tp(0), tp(1)]);
    assert_eq!(
        core.react(ErrorCode::RebalanceInProgress),
        Reaction::Proceed
    );
    assert_eq!(
        core.join_prepare(),
        Some(Revocation::Revoked(vec![tp(0), tp(1)]))
    );
    assert_eq!(
        core.held(),
        [tp(0), tp(1)],
        "held while the listener commits"
    );
    core.release(&[tp(0), tp(1)]);
    assert!(core.held().is_empty());
}

#[test]
fn before_a_join_a_cooperative_member_keeps_what_it_holds() {
    let mut core = joined(cooperative(), ms(0), 1, &[tp(0)]);
    core.react(ErrorCode::RebalanceInProgress);
    assert_eq!(core.join_prepare(), None);
    assert_eq!(core.held(), [tp(0)]);
    assert_eq!(
        eager().join_prepare(),
        None,
        "nothing held, nothing to give up"
    );
}

#[test]
fn a_heartbeat_is_due_one_interval_after_the_last_and_only_in_a_generation() {
    let mut core = eager();
    assert_eq!(core.heartbeat(ms(10_000)), None, "no generation yet");
    let mut core = joined(core, ms(1_000), 3, &[tp(0)]);
    assert_eq!(core.heartbeat(ms(3_999)), None);
    assert_eq!(core.until_heartbeat(ms(3_999)), ms(1));
    let beat = core.heartbeat(ms(4_000)).expect("due");
    assert_eq!((beat.generation_id, beat.member_id.as_str()), (3, "m1"));
    assert_eq!(core.until_heartbeat(ms(4_000)), HEARTBEAT);
    assert_eq!(core.heartbeat(ms(4_001)), None);
    // Late: the next one is an interval after this one, not after when it was due.
    assert!(core.heartbeat(ms(9_000)).is_some());
    assert_eq!(core.until_heartbeat(ms(9_000)), HEARTBEAT);
}

#[test]
fn a_heartbeat_refused_by_a_rebalance_asks_a_rejoin_and_keeps_beating() {
    let mut core = joined(eager(), ms(0), 1, &[tp(0)]);
    assert_eq!(
        core.react(ErrorCode::RebalanceInProgress),
        Reaction::Proceed
    );
    assert!(core.needs_rejoin());
    assert!(core.heartbeat(HEARTBEAT).is_some());
}

#[test]
fn a_heartbeat_refused_for_an_unknown_member_forgets_it_and_stops_beating() {
    let mut core = joined(eager(), ms(0), 1, &[tp(0)]);
    assert_eq!(core.react(ErrorCode::UnknownMemberId), Reaction::Proceed);
    assert!(core.member_id().is_empty());
    assert!(core.needs_rejoin());
    assert_eq!(core.heartbeat(HEARTBEAT), None);
    assert_eq!(core.react(ErrorCode::NotCoordinator), Reaction::Rediscover);
    assert_eq!(
        core.react(ErrorCode::CoordinatorLoadInProgress),
        Reaction::Proceed
    );
    assert_eq!(core.react(ErrorCode::InvalidGroupId), Reaction::Fatal);
}

#[test]
fn a_commit_names_the_generation_the_member_and_each_partitions_epoch() {
    let mut core = joined(eager(), ms(0), 5, &[tp(0), tp(1)]);
    core.note_offset_epoch(&tp(1), 2);
    let request = core.commit_request(&BTreeMap::from([(tp(0), 10), (tp(1), 20)]));
    assert_eq!(request.generation_id_or_member_epoch, 5);
    assert_eq!(request.member_id.as_str(), "m1");
    let partitions = &request.topics[0].partitions;
    let named: Vec<(i32, i64, i32)> = partitions
        .iter()
        .map(|p| {
            (
                p.partition_index,
                p.committed_offset,
                p.committed_leader_epoch,
            )
        })
        .collect();
    assert_eq!(named, [(0, 10, -1), (1, 20, 2)]);
}

#[test]
fn a_commit_is_retried_when_the_coordinator_moved_or_could_not_answer() {
    for error in [
        ErrorCode::NotCoordinator,
        ErrorCode::CoordinatorNotAvailable,
        ErrorCode::CoordinatorLoadInProgress,
        ErrorCode::RequestTimedOut,
        ErrorCode::NetworkException,
    ] {
        assert!(commit_retriable(Failure::Refused(error)), "{error:?}");
    }
    assert!(commit_retriable(Failure::NoAnswer));
}

#[test]
fn a_fenced_commit_fails_at_once() {
    for error in [
        ErrorCode::IllegalGeneration,
        ErrorCode::UnknownMemberId,
        ErrorCode::RebalanceInProgress,
        ErrorCode::OffsetMetadataTooLarge,
    ] {
        assert!(!commit_retriable(Failure::Refused(error)), "{error:?}");
    }
}

#[test]
fn a_synchronous_commit_retries_every_backoff_until_the_api_timeout() {
    let core = eager();
    let deadline = core.commit_deadline(ms(1_000));
    assert_eq!(deadline, ms(1_000) + API);
    assert_eq!(
        core.retry_commit(Failure::NoAnswer, ms(2_000), deadline),
        Some(BACKOFF)
    );
    // Another attempt must start before the deadline.
    let last = deadline.saturating_sub(BACKOFF);
    assert_eq!(
        core.retry_commit(Failure::NoAnswer, last.saturating_sub(ms(1)), deadline),
        Some(BACKOFF)
    );
    assert_eq!(core.retry_commit(Failure::NoAnswer, last, deadline), None);
    let fenced = Failure::Refused(ErrorCode::IllegalGeneration);
    assert_eq!(core.retry_commit(fenced, ms(2_000), deadline), None);
}

#[test]
fn a_refused_commit_is_acted_upon() {
    let mut core = joined(eager(), ms(0), 1, &[tp(0)]);
    let answer = |error: ErrorCode| {
        OffsetCommitResponse::default().with_topics(vec![OffsetCommitResponseTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![
                OffsetCommitResponsePartition::default(),
                OffsetCommitResponsePartition::default()
                    .with_partition_index(1)
                    .with_error_code(error.code()),
            ])])
    };
    assert_eq!(core.on_commit_answer(&answer(ErrorCode::None)), Ok(()));
    assert_eq!(
        core.on_commit_answer(&answer(ErrorCode::NotCoordinator)),
        Err((ErrorCode::NotCoordinator, Reaction::Rediscover))
    );
    assert!(!core.needs_rejoin());
    assert_eq!(
        core.on_commit_answer(&answer(ErrorCode::IllegalGeneration)),
        Err((ErrorCode::IllegalGeneration, Reaction::Proceed))
    );
    assert!(core.needs_rejoin(), "a fenced commit asks for a rejoin");
}

#[test]
fn asynchronous_commits_settle_in_order_and_each_is_due_within_the_request_timeout() {
    let mut core = joined(eager(), ms(0), 2, &[tp(0)]);
    assert_eq!(core.oldest_commit_deadline(), None);
    core.commit_sent(ms(100), BTreeMap::from([(tp(0), 1)]));
    core.commit_sent(ms(200), BTreeMap::from([(tp(0), 2)]));
    assert_eq!(core.commits_in_flight(), 2);
    assert_eq!(core.oldest_commit_deadline(), Some(ms(100) + REQUEST));
    assert!(!core.commit_overdue(ms(99) + REQUEST));
    assert!(core.commit_overdue(ms(100) + REQUEST));
    let first = core.settle_commit().expect("present");
    assert_eq!((first.offsets[&tp(0)], first.generation), (1, 2));
    assert_eq!(core.oldest_commit_deadline(), Some(ms(200) + REQUEST));
    let lost = core.commits_lost();
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].offsets[&tp(0)], 2);
    assert_eq!(core.commits_in_flight(), 0);
    let unsent = core.commit_unsent(BTreeMap::from([(tp(0), 3)]));
    assert_eq!(unsent.generation, 2);
    assert_eq!(
        core.commits_in_flight(),
        0,
        "an unsent commit is not in flight"
    );
}

#[test]
fn an_offset_fetch_answers_the_committed_offsets_with_their_epochs() {
    let mut core = eager();
    let request = core.offset_fetch_request(&[tp(0), tp(1), TopicPartition::new("u", 0)]);
    let topics: Vec<(&str, Vec<i32>)> = request
        .topics
        .as_ref()
        .expect("present")
        .iter()
        .map(|topic| (topic.name.as_str(), topic.partition_indexes.clone()))
        .collect();
    assert_eq!(topics, [("t", vec![0, 1]), ("u", vec![0])]);
    let partition = |index: i32, offset: i64, epoch: i32| {
        OffsetFetchResponsePartition::default()
            .with_partition_index(index)
            .with_committed_offset(offset)
            .with_committed_leader_epoch(epoch)
    };
    let fetched =
        OffsetFetchResponse::default().with_topics(vec![OffsetFetchResponseTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![
                partition(0, 42, 3),
                partition(1, -1, -1),
                partition(2, 7, -1),
            ])]);
    let offsets = core.on_offset_fetch(&fetched).expect("present");
    assert_eq!(
        offsets,
        BTreeMap::from([(tp(0), (42, Some(3))), (tp(2), (7, None))]),
        "no commit (-1) is absent; an epoch of -1 is none"
    );
    let refused = OffsetFetchResponse::default().with_error_code(ErrorCode::NotCoordinator.code());
    assert_eq!(
        core.on_offset_fetch(&refused),
        Err((ErrorCode::NotCoordinator, Reaction::Rediscover))
    );
}

#[test]
fn leaving_revokes_what_is_held_in_a_live_generation_and_loses_it_otherwise() {
    let mut core = joined(eager(), ms(0), 1, &[tp(0)]);
    assert_eq!(
        core.leave_revocation(),
        Some(Revocation::Revoked(vec![tp(0)]))
    );
    assert!(core.held().is_empty());
    assert_eq!(core.leave_revocation(), None);
    assert_eq!(
        core.leave_request().expect("present").member_id.as_str(),
        "m1"
    );
    core.left();
    assert!(core.member_id().is_empty());
    assert!(core.needs_rejoin());
    assert!(!core.in_generation());
    assert_eq!(core.leave_request(), None, "no id, nothing to leave");

    let mut core = joined(eager(), ms(0), 1, &[tp(0)]);
    core.react(ErrorCode::UnknownMemberId);
    assert_eq!(core.leave_revocation(), Some(Revocation::Lost(vec![tp(0)])));
}
