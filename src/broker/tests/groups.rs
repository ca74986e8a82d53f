//! The group coordinator: FindCoordinator creates `__consumer_offsets`; JoinGroup and SyncGroup
//! form generations; commits are fenced by generation and member, and come back after a crash.

use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    FindCoordinatorRequest, GroupId, HeartbeatRequest, JoinGroupRequest, OffsetCommitRequest,
    OffsetFetchRequest, SyncGroupRequest,
};

use super::*;
use crate::config::Configurable;

const GROUP: &str = "g";

fn group_config() -> BrokerConfig {
    let mut config = BrokerConfig::default();
    config
        .apply([
            ("offsets.topic.num.partitions", "2"),
            ("group.initial.rebalance.delay.ms", "0"),
        ])
        .expect("valid");
    config
}

fn group_id() -> GroupId {
    GroupId(StrBytes::from_static_str(GROUP))
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

impl Harness {
    /// A request answered once every fsync it asks for completes.
    fn ask(&mut self, api_version: i16, body: RequestKind) -> ResponseKind {
        let outputs = self.request(api_version, body);
        single_message(self.flush_all(outputs, true))
    }

    /// FindCoordinator until `__consumer_offsets` exists: the coordinator's node id.
    fn find_coordinator(&mut self) -> i32 {
        for _ in 0..2 {
            let body = FindCoordinatorRequest::default().with_key(text(GROUP));
            let ResponseKind::FindCoordinator(response) =
                self.ask(2, RequestKind::FindCoordinator(body))
            else {
                panic!("not a FindCoordinator response")
            };
            if response.error_code == 0 {
                return response.node_id.0;
            }
            assert_eq!(
                response.error_code,
                ErrorCode::CoordinatorNotAvailable.code(),
                "the first lookup creates the offsets topic"
            );
        }
        panic!("no coordinator after the offsets topic was created")
    }

    /// JoinGroup v5 (so a new member first hears MEMBER_ID_REQUIRED): error, member id,
    /// generation, leader and the members the answer lists. `None` when the answer is parked.
    fn join(&mut self, member_id: &str) -> Option<(i16, String, i32, String, usize)> {
        let protocol = JoinGroupRequestProtocol::default()
            .with_name(text("range"))
            .with_metadata(Bytes::from_static(b"subscription"));
        let body = JoinGroupRequest::default()
            .with_group_id(group_id())
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(text(member_id))
            .with_protocol_type(text("consumer"))
            .with_protocols(vec![protocol]);
        let outputs = self.request(5, RequestKind::JoinGroup(body));
        let outputs = self.flush_all(outputs, true);
        if outputs.is_empty() {
            return None;
        }
        Some(join_answer(single_message(outputs)))
    }

    fn sync_group(&mut self, member_id: &str, generation: i32, leader: bool) -> (i16, Bytes) {
        let assignments = if leader {
            vec![SyncGroupRequestAssignment::default()
                .with_member_id(text(member_id))
                .with_assignment(Bytes::from_static(b"t-0"))]
        } else {
            Vec::new()
        };
        let body = SyncGroupRequest::default()
            .with_group_id(group_id())
            .with_generation_id(generation)
            .with_member_id(text(member_id))
            .with_assignments(assignments);
        let ResponseKind::SyncGroup(response) = self.ask(3, RequestKind::SyncGroup(body)) else {
            panic!("not a SyncGroup response")
        };
        (response.error_code, response.assignment)
    }

    fn heartbeat(&mut self, member_id: &str, generation: i32) -> i16 {
        let body = HeartbeatRequest::default()
            .with_group_id(group_id())
            .with_generation_id(generation)
            .with_member_id(text(member_id));
        let ResponseKind::Heartbeat(response) = self.ask(3, RequestKind::Heartbeat(body)) else {
            panic!("not a Heartbeat response")
        };
        response.error_code
    }

    fn commit(&mut self, member_id: &str, generation: i32, offset: i64) -> i16 {
        self.commit_to("t", member_id, generation, offset)
    }

    /// An OffsetCommit of `offset` for partition 0 of `topic`; its error code.
    fn commit_to(&mut self, topic: &str, member_id: &str, generation: i32, offset: i64) -> i16 {
        let partition = OffsetCommitRequestPartition::default()
            .with_partition_index(0)
            .with_committed_offset(offset);
        let body = OffsetCommitRequest::default()
            .with_group_id(group_id())
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(text(member_id))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![partition])]);
        let ResponseKind::OffsetCommit(response) = self.ask(7, RequestKind::OffsetCommit(body))
        else {
            panic!("not an OffsetCommit response")
        };
        response.topics[0].partitions[0].error_code
    }

    fn committed(&mut self) -> i64 {
        self.committed_of("t")
    }

    /// The committed offset of partition 0 of `topic` (-1: none).
    fn committed_of(&mut self, topic: &str) -> i64 {
        let body = OffsetFetchRequest::default()
            .with_group_id(group_id())
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(topic_name(topic))
                .with_partition_indexes(vec![0])]));
        let ResponseKind::OffsetFetch(response) = self.ask(5, RequestKind::OffsetFetch(body))
        else {
            panic!("not an OffsetFetch response")
        };
        assert_eq!(response.error_code, 0);
        response.topics[0].partitions[0].committed_offset
    }

    /// A member through MEMBER_ID_REQUIRED into a generation of its own: (id, generation).
    fn lone_member(&mut self) -> (String, i32) {
        let (error, member_id, ..) = self.join("").expect("answered at once");
        assert_eq!(error, ErrorCode::MemberIdRequired.code());
        let (error, joined, generation, leader, members) = self
            .join(&member_id)
            .expect("the only member completes the join");
        assert_eq!(
            (error, &joined, &leader, members),
            (0, &member_id, &member_id, 1)
        );
        assert_eq!(
            self.sync_group(&member_id, generation, true),
            (0, Bytes::from_static(b"t-0"))
        );
        (member_id, generation)
    }
}

fn join_answer(response: ResponseKind) -> (i16, String, i32, String, usize) {
    let ResponseKind::JoinGroup(response) = response else {
        panic!("not a JoinGroup response")
    };
    (
        response.error_code,
        response.member_id.to_string(),
        response.generation_id,
        response.leader.to_string(),
        response.members.len(),
    )
}

#[test]
fn a_group_forms_commits_and_finds_its_offsets_and_generation_again_after_a_crash() {
    let storage = MemoryStorage::new();
    let mut harness = Harness::with_config(storage.clone(), group_config());
    harness.create_topic("t", 1, &[]);
    assert_eq!(harness.find_coordinator(), 0);
    let (member_id, generation) = harness.lone_member();
    assert_eq!(generation, 1);
    assert_eq!(harness.commit(&member_id, generation, 5), 0);
    assert_eq!(harness.committed(), 5);

    storage.crash(CrashLevel::Process, &mut |_| 0);
    let mut harness = Harness::with_config(storage, group_config());
    assert_eq!(
        harness.committed(),
        5,
        "the commit is in __consumer_offsets"
    );
    assert_eq!(
        harness.heartbeat(&member_id, generation),
        0,
        "the stored generation is Stable again with its member"
    );
    assert_eq!(harness.commit(&member_id, generation, 9), 0);
    assert_eq!(harness.committed(), 9);
}

#[test]
fn a_commit_from_a_fenced_generation_or_an_unknown_member_is_refused() {
    let mut harness = Harness::with_config(MemoryStorage::new(), group_config());
    harness.create_topic("t", 1, &[]);
    harness.find_coordinator();
    let (first, generation) = harness.lone_member();
    // A second member arrives: the first hears of the rebalance and rejoins.
    let (_, second, ..) = harness.join("").expect("answered");
    assert!(
        harness.join(&second).is_none(),
        "parked until the first rejoins"
    );
    assert_eq!(
        harness.heartbeat(&first, generation),
        ErrorCode::RebalanceInProgress.code()
    );
    assert_eq!(
        harness.commit(&first, generation, 3),
        0,
        "the old generation may still commit while it rejoins"
    );
    let outputs = harness.request(
        5,
        RequestKind::JoinGroup(
            JoinGroupRequest::default()
                .with_group_id(group_id())
                .with_session_timeout_ms(10_000)
                .with_rebalance_timeout_ms(30_000)
                .with_member_id(text(&first))
                .with_protocol_type(text("consumer"))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(text("range"))
                    .with_metadata(Bytes::from_static(b"subscription"))]),
        ),
    );
    assert_eq!(
        outputs.len(),
        2,
        "both parked joins are answered: {outputs:?}"
    );
    let next = generation + 1;
    assert_eq!(
        harness.commit(&first, next, 4),
        ErrorCode::RebalanceInProgress.code(),
        "no commit while the assignment is decided"
    );
    assert_eq!(harness.sync_group(&first, next, first < second).0, 0);
    assert_eq!(harness.sync_group(&second, next, second < first).0, 0);
    assert_eq!(
        harness.commit(&first, generation, 5),
        ErrorCode::IllegalGeneration.code(),
        "a zombie's commit"
    );
    assert_eq!(
        harness.commit("stranger", next, 5),
        ErrorCode::UnknownMemberId.code()
    );
    assert_eq!(harness.committed(), 3);
    assert_eq!(harness.commit(&second, next, 6), 0);
    assert_eq!(harness.committed(), 6);
}

#[test]
fn a_member_that_stops_heartbeating_is_removed_and_its_generation_fenced() {
    let mut harness = Harness::with_config(MemoryStorage::new(), group_config());
    harness.create_topic("t", 1, &[]);
    harness.find_coordinator();
    let (member_id, generation) = harness.lone_member();
    harness.now = harness.now.plus(9_000);
    assert_eq!(harness.heartbeat(&member_id, generation), 0);
    harness.now = harness.now.plus(10_001);
    let deadline = harness.broker.next_deadline().expect("a session deadline");
    assert!(deadline <= harness.now);
    let outputs = harness.input(Input::Tick);
    harness.flush_all(outputs, true);
    assert_eq!(
        harness.heartbeat(&member_id, generation),
        ErrorCode::UnknownMemberId.code()
    );
    assert_eq!(
        harness.commit(&member_id, generation, 1),
        ErrorCode::UnknownMemberId.code()
    );
    assert_eq!(
        harness.commit("", -1, 2),
        0,
        "an empty group takes a simple consumer's commit"
    );
}

fn delete_group(harness: &mut Harness) -> i16 {
    use kafka_protocol::messages::DeleteGroupsRequest;
    let body = DeleteGroupsRequest::default().with_groups_names(vec![group_id()]);
    let ResponseKind::DeleteGroups(response) = harness.ask(2, RequestKind::DeleteGroups(body))
    else {
        panic!("not a DeleteGroups response")
    };
    response.results[0].error_code
}

fn leave(harness: &mut Harness, member_id: &str) -> i16 {
    use kafka_protocol::messages::LeaveGroupRequest;
    let body = LeaveGroupRequest::default()
        .with_group_id(group_id())
        .with_member_id(text(member_id));
    let ResponseKind::LeaveGroup(response) = harness.ask(1, RequestKind::LeaveGroup(body)) else {
        panic!("not a LeaveGroup response")
    };
    response.error_code
}

#[test]
fn only_an_empty_group_is_deleted_and_its_tombstones_outlive_a_crash() {
    let storage = MemoryStorage::new();
    let mut harness = Harness::with_config(storage.clone(), group_config());
    harness.create_topic("t", 1, &[]);
    harness.find_coordinator();
    let (member_id, generation) = harness.lone_member();
    assert_eq!(harness.commit(&member_id, generation, 7), 0);
    assert_eq!(delete_group(&mut harness), ErrorCode::NonEmptyGroup.code());
    assert_eq!(leave(&mut harness, &member_id), 0);
    assert_eq!(delete_group(&mut harness), 0);
    assert_eq!(harness.committed(), -1, "the offsets went with the group");
    assert_eq!(
        delete_group(&mut harness),
        ErrorCode::GroupIdNotFound.code()
    );

    storage.crash(CrashLevel::Process, &mut |_| 0);
    let mut harness = Harness::with_config(storage, group_config());
    assert_eq!(harness.committed(), -1, "the tombstones are in the log");
}

#[test]
fn a_static_member_that_restarts_takes_its_old_place_and_fences_its_old_id() {
    let mut harness = Harness::with_config(MemoryStorage::new(), group_config());
    harness.create_topic("t", 1, &[]);
    harness.find_coordinator();
    let join = |harness: &mut Harness, member_id: &str| {
        let body = JoinGroupRequest::default()
            .with_group_id(group_id())
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(text(member_id))
            .with_group_instance_id(Some(text("instance-1")))
            .with_protocol_type(text("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(text("range"))
                .with_metadata(Bytes::from_static(b"subscription"))]);
        join_answer(harness.ask(5, RequestKind::JoinGroup(body)))
    };
    let (error, old_id, generation, ..) = join(&mut harness, "");
    assert_eq!(
        error, 0,
        "a static member needs no MEMBER_ID_REQUIRED round"
    );
    assert_eq!(harness.sync_group(&old_id, generation, true).0, 0);
    let (error, new_id, same_generation, leader, _) = join(&mut harness, "");
    assert_eq!(error, 0);
    assert_ne!(new_id, old_id);
    assert_eq!(
        (same_generation, leader),
        (generation, new_id.clone()),
        "a restart with unchanged protocols does not rebalance"
    );
    let body = HeartbeatRequest::default()
        .with_group_id(group_id())
        .with_generation_id(generation)
        .with_member_id(text(&old_id))
        .with_group_instance_id(Some(text("instance-1")));
    let ResponseKind::Heartbeat(response) = harness.ask(3, RequestKind::Heartbeat(body)) else {
        panic!("not a Heartbeat response")
    };
    assert_eq!(response.error_code, ErrorCode::FencedInstanceId.code());
    assert_eq!(harness.heartbeat(&new_id, generation), 0);
}

fn retention_config() -> BrokerConfig {
    let mut config = group_config();
    config
        .apply([
            ("offsets.retention.minutes", "1"),
            ("offsets.retention.check.interval.ms", "1000"),
        ])
        .expect("valid");
    config
}

impl Harness {
    /// Moves the clock on by `ms` and runs what falls due (the retention check among it).
    fn wait(&mut self, ms: u64) {
        self.now = self.now.plus(ms);
        let outputs = self.input(Input::Tick);
        self.flush_all(outputs, true);
    }

    /// An OffsetCommit of `offset` for partition 0 of `topic` by a simple consumer.
    fn commit_simple(&mut self, topic: &str, offset: i64) -> i16 {
        self.commit_to(topic, "", -1, offset)
    }
}

#[test]
fn an_empty_groups_offsets_expire_a_retention_after_it_emptied_and_stay_expired_after_a_crash() {
    let storage = MemoryStorage::new();
    let mut harness = Harness::with_config(storage.clone(), retention_config());
    harness.create_topic("t", 1, &[]);
    harness.find_coordinator();
    let (member_id, generation) = harness.lone_member();
    assert_eq!(harness.commit(&member_id, generation, 7), 0);
    harness.wait(5_000);
    assert_eq!(harness.heartbeat(&member_id, generation), 0);
    harness.wait(5_000);
    assert_eq!(leave(&mut harness, &member_id), 0);
    harness.wait(50_000);
    assert_eq!(
        harness.committed(),
        7,
        "the retention runs from when the group emptied, not from the commit"
    );
    harness.wait(11_000);
    assert_eq!(
        harness.committed(),
        -1,
        "expired a minute after the group emptied"
    );
    assert_eq!(
        delete_group(&mut harness),
        ErrorCode::GroupIdNotFound.code(),
        "an empty group without offsets is removed with them"
    );

    storage.crash(CrashLevel::Process, &mut |_| 0);
    let mut harness = Harness::with_config(storage, retention_config());
    assert_eq!(harness.committed(), -1, "the tombstones are in the log");
}

#[test]
fn a_simple_consumers_offset_expires_a_retention_after_its_last_commit() {
    let mut harness = Harness::with_config(MemoryStorage::new(), retention_config());
    harness.create_topic("t", 1, &[]);
    harness.find_coordinator();
    assert_eq!(harness.commit_simple("t", 3), 0);
    harness.wait(40_000);
    assert_eq!(
        harness.commit_simple("t", 4),
        0,
        "a new commit starts the retention again"
    );
    harness.wait(40_000);
    assert_eq!(harness.committed(), 4);
    harness.wait(21_000);
    assert_eq!(harness.committed(), -1);
}

#[test]
fn a_stable_group_keeps_its_subscribed_offsets_and_loses_the_others_after_the_retention() {
    let mut harness = Harness::with_config(MemoryStorage::new(), retention_config());
    harness.create_topic("t", 1, &[]);
    harness.create_topic("u", 1, &[]);
    harness.find_coordinator();
    let join = |harness: &mut Harness, member_id: &str| {
        let body = JoinGroupRequest::default()
            .with_group_id(group_id())
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(text(member_id))
            .with_protocol_type(text("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(text("range"))
                .with_metadata(crate::client::group::encode_subscription(
                    &["t".to_owned()],
                    &[],
                ))]);
        join_answer(harness.ask(5, RequestKind::JoinGroup(body)))
    };
    let (_, member_id, ..) = join(&mut harness, "");
    let (error, _, generation, ..) = join(&mut harness, &member_id);
    assert_eq!(error, 0);
    assert_eq!(harness.sync_group(&member_id, generation, true).0, 0);
    assert_eq!(harness.commit(&member_id, generation, 5), 0);
    assert_eq!(harness.commit_to("u", &member_id, generation, 9), 0);
    assert_eq!(harness.committed_of("u"), 9);
    for _ in 0..13 {
        harness.wait(5_000);
        assert_eq!(harness.heartbeat(&member_id, generation), 0);
    }
    assert_eq!(
        harness.committed_of("t"),
        5,
        "a subscribed topic's offset stays"
    );
    assert_eq!(
        harness.committed_of("u"),
        -1,
        "a topic no member subscribes to loses its offset"
    );
}

#[test]
fn after_a_restart_the_retention_check_loads_idle_groups_and_expires_their_offsets() {
    let storage = MemoryStorage::new();
    let mut harness = Harness::with_config(storage.clone(), retention_config());
    harness.create_topic("t", 1, &[]);
    harness.find_coordinator();
    let (member_id, generation) = harness.lone_member();
    assert_eq!(harness.commit(&member_id, generation, 7), 0);
    assert_eq!(leave(&mut harness, &member_id), 0);
    harness.wait(1_000);

    storage.crash(CrashLevel::Process, &mut |_| 0);
    let mut harness = Harness::with_config(storage, retention_config());
    harness.now = Millis(2_000); // the wall clock goes on from where the group emptied
    for _ in 0..14 {
        harness.wait(5_000); // no request: nobody asks for the group
    }
    assert_eq!(
        harness.committed(),
        -1,
        "the check loaded the group it leads and expired its offsets"
    );
}

/// Small `__consumer_offsets` segments and a cleaner that looks every 100 ms.
fn compaction_config() -> BrokerConfig {
    let mut config = group_config();
    config
        .apply([
            ("offsets.topic.segment.bytes", "300"),
            ("log.cleaner.backoff.ms", "100"),
        ])
        .expect("valid");
    config
}

impl Harness {
    /// The records of the group's `__consumer_offsets` partition.
    fn offsets_records(&self) -> usize {
        let partition = TopicPartition::new(
            OFFSETS_TOPIC,
            crate::broker::offsets_partition_for(GROUP, 2),
        );
        let log = &self.broker.partition(&partition).expect("hosted").log();
        crate::broker::read_log_records(log, log.log_start_offset())
            .expect("readable")
            .len()
    }
}

#[test]
fn committed_offsets_and_the_group_survive_compaction_and_a_coordinator_restart() {
    let storage = MemoryStorage::new();
    let mut harness = Harness::with_config(storage.clone(), compaction_config());
    harness.create_topic("t", 1, &[]);
    harness.create_topic("u", 1, &[]);
    harness.find_coordinator();
    let (member_id, generation) = harness.lone_member();
    for offset in 1..=60 {
        assert_eq!(harness.commit(&member_id, generation, offset), 0);
        if offset == 3 {
            assert_eq!(harness.commit_to("u", &member_id, generation, 3), 0);
        }
        harness.wait(20);
    }
    harness.wait(1_000);
    assert!(
        harness.broker.log_cleaner_runs() > 3,
        "the cleaner ran {} times",
        harness.broker.log_cleaner_runs()
    );
    let kept = harness.offsets_records();
    assert!(
        kept < 10,
        "62 writes compacted to the latest of each key and the uncleaned tail: {kept}"
    );
    assert_eq!(harness.committed(), 60);
    assert_eq!(harness.committed_of("u"), 3);

    for level in [CrashLevel::Process, CrashLevel::PowerLoss] {
        storage.crash(level, &mut |_| 0);
        let mut harness = Harness::with_config(storage.clone(), compaction_config());
        assert_eq!(
            harness.committed(),
            60,
            "after a {level:?}, from compacted segments"
        );
        assert_eq!(
            harness.committed_of("u"),
            3,
            "an old commit of another key stays"
        );
        assert_eq!(
            harness.heartbeat(&member_id, generation),
            0,
            "the group's latest metadata record stays"
        );
    }
    let mut harness = Harness::with_config(storage, compaction_config());
    assert_eq!(harness.commit(&member_id, generation, 61), 0);
    assert_eq!(harness.committed(), 61);
}
