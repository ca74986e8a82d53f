//! The consumer-group member's decisions, without IO: which request comes next, what each
//! answer means, when a heartbeat is due, whether a failed join or commit is tried again and
//! after how long, what the leader assigns, and which partitions a rebalance revokes, loses or
//! assigns. `runtime::group` is the shell that does the calls this core asks for and hands it
//! the answers and the time.
//!
//! Time is a [`Duration`] since an origin the shell chooses (the member's creation), read from
//! the shell's clock at each call: sums and comparisons stay exact to the nanosecond, so the
//! core decides exactly as a clock-reading member would.
//!
//! The member's life (Kafka's `AbstractCoordinator` states):
//!
//! ```text
//!   new ──start_join──▶ joining ──on_join_answer: Joined──▶ syncing ──on_sync_answer──▶ stable
//!    ▲                   │  ▲                                  │                         │
//!    │                   │  └───── Retry (backoff, rediscover) ◀┘                         │
//!    │                   └─ join_failed: GiveUp (the caller polls and tries again)       │
//!    │                                                                                  │
//!    └──── react: RejoinAsNew (member id lost) / Rejoin (generation ended or rebalance) ◀┘
//! ```
//!
//! In a stable generation the member heartbeats every `heartbeat.interval.ms`
//! ([`MemberCore::heartbeat`]); a rebalance keeps the generation live (heartbeats go on) until
//! the member rejoins, a fenced generation or member id ends it.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, HeartbeatRequest, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, MetadataResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, RequestKind, SyncGroupRequest,
    SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::group::{
    by_topic, decode_assignment, decode_full_subscription, encode_assignment, encode_subscription,
    recovery, Assignor, Recovery, Subscription, PROTOCOL_TYPE,
};
use crate::config::ConsumerConfig;
use crate::protocol::ErrorCode;
use crate::types::TopicPartition;

/// Attempts of one join before the member gives up (the caller polls and tries again).
pub const JOIN_ATTEMPTS: usize = 10;

/// The OffsetCommit version the member sends.
pub const OFFSET_COMMIT_VERSION: i16 = 7;

/// How a call failed, as far as a retry decision goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The coordinator (or the broker asked for it) answered with this error.
    Refused(ErrorCode),
    /// No usable answer came: the connection failed, closed, timed out or carried something
    /// undecodable.
    NoAnswer,
}

/// What an error answer asks of the shell, once the core has updated the member's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaction {
    /// Nothing more: the state says what comes next (a rejoin, a retry).
    Proceed,
    /// The coordinator moved: drop its connection and find it again.
    Rediscover,
    /// The error ends the call (it is the caller's to handle).
    Fatal,
}

/// What the member gives up before a join, or on leaving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revocation {
    /// The generation was lost: another member may own these already (Kafka's
    /// `onPartitionsLost`). The member no longer holds them.
    Lost(Vec<TopicPartition>),
    /// Given up in good order (Kafka's `onPartitionsRevoked`), while the generation is live so
    /// that a commit made now is accepted. Before a join the member holds them until
    /// [`MemberCore::release`]; on leaving it lets them go at once.
    Revoked(Vec<TopicPartition>),
}

/// What a JoinGroup answer means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinAnswer {
    /// Join again: after `backoff` if any, with the coordinator found again if `rediscover`.
    Retry {
        /// How long to wait first.
        backoff: Option<Duration>,
        /// Whether the coordinator's connection must be dropped first.
        rediscover: bool,
    },
    /// The error ends the join.
    Fatal(ErrorCode),
    /// The member is in `generation`; it syncs next, as the leader if `leader`.
    Joined {
        /// The generation joined.
        generation: i32,
        /// Whether this member assigns for the group.
        leader: bool,
    },
}

/// What a SyncGroup answer means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncAnswer {
    /// Join again, with the coordinator found again if `rediscover`.
    Retry {
        /// Whether the coordinator's connection must be dropped first.
        rediscover: bool,
    },
    /// The error ends the join.
    Fatal(ErrorCode),
    /// The assignment does not decode.
    Undecodable,
    /// The member took its generation's assignment. It rejoins at once when
    /// [`MemberCore::needs_rejoin`] (the cooperative protocol moved some of its partitions).
    Synced {
        /// The generation.
        generation: i32,
        /// Its partitions.
        assignment: Vec<TopicPartition>,
    },
}

/// What a failed join attempt leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinNext {
    /// Try again after this long (the coordinator's connection dropped first).
    RetryAfter(Duration),
    /// Stop: the failure is the answer (a refusal, or the attempts are spent).
    GiveUp,
}

/// The leader's assignment, half done: the assignor the group chose and every member's
/// subscription. The shell asks for the partition counts of [`topics`](Self::topics), then
/// [`MemberCore::assignments`] deals them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignPlan {
    assignor: Assignor,
    subscriptions: BTreeMap<String, Subscription>,
    topics: Vec<String>,
}

impl AssignPlan {
    /// Every topic some member subscribes to, sorted: what the metadata request names.
    pub fn topics(&self) -> &[String] {
        &self.topics
    }
}

/// An asynchronous commit written to the coordinator's connection, its answer not read yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCommit {
    /// The offsets it commits.
    pub offsets: BTreeMap<TopicPartition, i64>,
    /// The generation it was made in.
    pub generation: i32,
    /// When its answer is overdue.
    pub deadline: Duration,
}

/// A group member's state and decisions.
#[derive(Debug)]
pub struct MemberCore {
    bootstrap: Vec<String>,
    next_bootstrap: usize,
    group_id: String,
    instance: Option<String>,
    topics: Vec<String>,
    assignors: Vec<Assignor>,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    heartbeat_interval: Duration,
    request_timeout: Duration,
    retry_backoff: Duration,
    /// `default.api.timeout.ms`: how long a synchronous commit is retried.
    api_timeout: Duration,
    member_id: String,
    generation: i32,
    /// The assignment of the current generation; `None` while the member must (re)join.
    assignment: Option<Vec<TopicPartition>>,
    /// The partitions the member owns going into its next join: under the cooperative protocol
    /// (every offered assignor cooperative) its assignment, kept through a rebalance; under the
    /// eager one nothing (everything is given up before rejoining). A lost generation or member
    /// id loses them (Kafka's `onPartitionsLost`).
    owned: Vec<TopicPartition>,
    /// The member belongs to a live generation and heartbeats, also while a rejoin is pending
    /// after REBALANCE_IN_PROGRESS: as Kafka's heartbeat thread, it keeps the session alive
    /// until the application comes back to rejoin (within the rebalance timeout). A fenced
    /// generation or member id stops it.
    in_generation: bool,
    next_heartbeat: Duration,
    /// Join attempts left in the join under way.
    join_attempts_left: usize,
    /// The partitions the application holds: announced by an assignment, not yet revoked or
    /// lost.
    held: Vec<TopicPartition>,
    /// Asynchronous commits in flight on the coordinator's connection, oldest first.
    pending_commits: VecDeque<PendingCommit>,
    /// The leader epoch of the last record consumed before each partition's position: what a
    /// commit of that partition names (Kafka's `OffsetAndMetadata.leaderEpoch`, KIP-320).
    offset_epochs: BTreeMap<TopicPartition, i32>,
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

/// Whether a failed synchronous commit is tried again (Kafka's `commitSync`): the coordinator
/// moved or is loading (`NOT_COORDINATOR`, `COORDINATOR_NOT_AVAILABLE`,
/// `COORDINATOR_LOAD_IN_PROGRESS`, `REQUEST_TIMED_OUT`), or no answer came (the retry finds the
/// coordinator again). A fenced generation or member (`ILLEGAL_GENERATION`,
/// `UNKNOWN_MEMBER_ID`, `REBALANCE_IN_PROGRESS`: Kafka's `CommitFailedException` and
/// `RebalanceInProgressException`) and every other refusal are not.
pub fn commit_retriable(failure: Failure) -> bool {
    match failure {
        Failure::Refused(error) => {
            matches!(recovery(error), Recovery::Rediscover | Recovery::Retry)
        }
        Failure::NoAnswer => true,
    }
}

impl MemberCore {
    /// A member of `config.group_id` subscribed to `topics`, created at time zero.
    pub fn new(config: &ConsumerConfig, topics: Vec<String>) -> MemberCore {
        MemberCore {
            bootstrap: config.bootstrap_servers.clone(),
            next_bootstrap: 0,
            group_id: config.group_id.clone().unwrap_or_default(),
            instance: config.group_instance_id.clone(),
            topics,
            assignors: config.partition_assignment_strategy.clone(),
            session_timeout_ms: config.session_timeout_ms,
            rebalance_timeout_ms: config.max_poll_interval_ms,
            heartbeat_interval: Duration::from_millis(config.heartbeat_interval_ms),
            request_timeout: Duration::from_millis(config.request_timeout_ms),
            retry_backoff: Duration::from_millis(config.retry_backoff_ms.max(1)),
            api_timeout: Duration::from_millis(config.default_api_timeout_ms),
            member_id: String::new(),
            generation: -1,
            assignment: None,
            owned: Vec::new(),
            in_generation: false,
            next_heartbeat: Duration::ZERO,
            join_attempts_left: 0,
            held: Vec::new(),
            pending_commits: VecDeque::new(),
            offset_epochs: BTreeMap::new(),
        }
    }

    /// The partitions the application holds (assigned and not yet revoked or lost).
    pub fn held(&self) -> &[TopicPartition] {
        &self.held
    }

    /// The generation the member belongs to (-1: none yet).
    pub fn generation(&self) -> i32 {
        self.generation
    }

    /// The member id the coordinator gave (empty: none yet, or lost).
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    /// Whether the member belongs to a live generation (and so heartbeats).
    pub fn in_generation(&self) -> bool {
        self.in_generation
    }

    /// Whether the member follows the cooperative rebalance protocol (KIP-429): every assignor
    /// it offers is cooperative, as Kafka's consumer decides.
    pub fn is_cooperative(&self) -> bool {
        !self.assignors.is_empty()
            && self
                .assignors
                .iter()
                .all(|assignor| assignor.is_cooperative())
    }

    /// Whether the member must rejoin before its assignment counts.
    pub fn needs_rejoin(&self) -> bool {
        self.assignment.is_none()
    }

    /// `request.timeout.ms`.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// How long a call of `body` may take: a JoinGroup may be parked for up to the rebalance
    /// timeout, so it waits that long beyond the request timeout (Kafka's consumer does the
    /// same).
    pub fn call_timeout(&self, body: &RequestKind) -> Duration {
        match body {
            RequestKind::JoinGroup(_) => {
                self.request_timeout
                    + Duration::from_millis(self.rebalance_timeout_ms.max(0) as u64)
            }
            _ => self.request_timeout,
        }
    }

    /// Records the leader epoch of the last record consumed before `partition`'s position, for
    /// the commits that follow to name.
    pub fn note_offset_epoch(&mut self, partition: &TopicPartition, epoch: i32) {
        self.offset_epochs.insert(partition.clone(), epoch);
    }

    // ---- the coordinator ----

    /// The bootstrap server to ask for the coordinator next: each in turn.
    pub fn next_bootstrap(&mut self) -> String {
        let address = self.bootstrap[self.next_bootstrap % self.bootstrap.len().max(1)].clone();
        self.next_bootstrap += 1;
        address
    }

    /// FindCoordinator for the member's group.
    pub fn find_coordinator_request(&self) -> FindCoordinatorRequest {
        FindCoordinatorRequest::default().with_key(text(&self.group_id))
    }

    /// The coordinator's address, or the error the broker gave.
    pub fn on_find_coordinator(found: &FindCoordinatorResponse) -> Result<String, ErrorCode> {
        if found.error_code != 0 {
            return Err(ErrorCode::from_code(found.error_code));
        }
        Ok(format!("{}:{}", found.host, found.port))
    }

    /// Acts on an error answer: what Kafka's coordinator does for it (`client::group::recovery`).
    pub fn react(&mut self, error: ErrorCode) -> Reaction {
        match recovery(error) {
            Recovery::Rediscover => return Reaction::Rediscover,
            Recovery::RejoinAsNew => {
                self.member_id.clear();
                self.assignment = None;
                self.owned.clear();
                self.in_generation = false;
            }
            Recovery::Rejoin => {
                self.assignment = None;
                // A rebalance under way leaves the generation live until the member rejoins
                // (a cooperative member keeps its partitions through it); ILLEGAL_GENERATION
                // ends it, and with it what the member owned.
                if error != ErrorCode::RebalanceInProgress {
                    self.in_generation = false;
                    self.owned.clear();
                }
            }
            Recovery::Retry => {}
            Recovery::Fatal => return Reaction::Fatal,
        }
        Reaction::Proceed
    }

    // ---- joining ----

    /// Before a join: a member that lost its generation loses what it held; an eager member
    /// in a live generation revokes all of it (a cooperative one keeps it through the join).
    pub fn join_prepare(&mut self) -> Option<Revocation> {
        if self.held.is_empty() {
            return None;
        }
        if !self.in_generation {
            Some(Revocation::Lost(std::mem::take(&mut self.held)))
        } else if !self.is_cooperative() {
            Some(Revocation::Revoked(self.held.clone()))
        } else {
            None
        }
    }

    /// `partitions`, revoked, are no longer held.
    pub fn release(&mut self, partitions: &[TopicPartition]) {
        self.held.retain(|held| !partitions.contains(held));
    }

    /// A join begins: no heartbeats until the member is in a generation again (Kafka's
    /// PREPARING_REBALANCE; the JoinGroup itself keeps the member known), and
    /// [`JOIN_ATTEMPTS`] attempts.
    pub fn start_join(&mut self) {
        self.in_generation = false;
        self.join_attempts_left = JOIN_ATTEMPTS;
    }

    /// Whether another join attempt is allowed (and counts it).
    pub fn join_attempt(&mut self) -> bool {
        if self.join_attempts_left == 0 {
            return false;
        }
        self.join_attempts_left -= 1;
        true
    }

    /// A join attempt failed outright: a refusal ends the join; a lost answer is tried again
    /// after `retry.backoff.ms` (against the coordinator found again).
    pub fn join_failed(&self, failure: Failure) -> JoinNext {
        match failure {
            Failure::Refused(_) => JoinNext::GiveUp,
            Failure::NoAnswer => JoinNext::RetryAfter(self.retry_backoff),
        }
    }

    /// The JoinGroup to send: the subscription with, under the cooperative protocol, what the
    /// member owns (under the eager one everything is given up before the join).
    pub fn join_request(&mut self) -> JoinGroupRequest {
        if !self.is_cooperative() {
            self.owned.clear();
        }
        let subscription = encode_subscription(&self.topics, &self.owned);
        let protocols = self
            .assignors
            .iter()
            .map(|assignor| {
                JoinGroupRequestProtocol::default()
                    .with_name(text(assignor.name()))
                    .with_metadata(subscription.clone())
            })
            .collect();
        JoinGroupRequest::default()
            .with_group_id(GroupId(text(&self.group_id)))
            .with_session_timeout_ms(self.session_timeout_ms)
            .with_rebalance_timeout_ms(self.rebalance_timeout_ms)
            .with_member_id(text(&self.member_id))
            .with_group_instance_id(self.instance.as_deref().map(text))
            .with_protocol_type(text(PROTOCOL_TYPE))
            .with_protocols(protocols)
    }

    /// What a JoinGroup answer means. MEMBER_ID_REQUIRED gives the member its id and is joined
    /// again at once (KIP-394); another error is acted upon and joined again after
    /// `retry.backoff.ms`, unless it is fatal.
    pub fn on_join_answer(&mut self, joined: &JoinGroupResponse) -> JoinAnswer {
        let error = ErrorCode::from_code(joined.error_code);
        if error == ErrorCode::MemberIdRequired {
            self.member_id = joined.member_id.to_string();
            return JoinAnswer::Retry {
                backoff: None,
                rediscover: false,
            };
        }
        if error != ErrorCode::None {
            return match self.react(error) {
                Reaction::Fatal => JoinAnswer::Fatal(error),
                reaction => JoinAnswer::Retry {
                    backoff: Some(self.retry_backoff),
                    rediscover: reaction == Reaction::Rediscover,
                },
            };
        }
        self.member_id = joined.member_id.to_string();
        JoinAnswer::Joined {
            generation: joined.generation_id,
            leader: joined.leader == joined.member_id,
        }
    }

    /// The leader's first step: the assignor the group chose (one this member offered) and
    /// every member's subscription; `Err` names what is wrong.
    pub fn assign_plan(&self, joined: &JoinGroupResponse) -> Result<AssignPlan, String> {
        let chosen = joined.protocol_name.as_deref().unwrap_or_default();
        let assignor = Assignor::by_name(chosen)
            .filter(|assignor| self.assignors.contains(assignor))
            .ok_or_else(|| format!("the group chose assignor {chosen:?}, not offered"))?;
        let subscriptions: BTreeMap<String, Subscription> = joined
            .members
            .iter()
            .map(|member| {
                let subscription = decode_full_subscription(&member.metadata).unwrap_or_default();
                (member.member_id.to_string(), subscription)
            })
            .collect();
        let mut topics: Vec<String> = subscriptions
            .values()
            .flat_map(|subscription| subscription.topics.iter().cloned())
            .collect();
        topics.sort();
        topics.dedup();
        Ok(AssignPlan {
            assignor,
            subscriptions,
            topics,
        })
    }

    /// The leader's second step: every member's partitions, dealt by the plan's assignor over
    /// the partition counts `described` gives (a topic it reports with an error has none).
    pub fn assignments(
        plan: &AssignPlan,
        described: &MetadataResponse,
    ) -> Vec<SyncGroupRequestAssignment> {
        let counts: BTreeMap<String, i32> = described
            .topics
            .iter()
            .filter(|topic| topic.error_code == 0)
            .filter_map(|topic| {
                let name = topic.name.as_ref()?.to_string();
                Some((name, topic.partitions.len() as i32))
            })
            .collect();
        plan.assignor
            .assign(&plan.subscriptions, &counts)
            .into_iter()
            .map(|(member, partitions)| {
                SyncGroupRequestAssignment::default()
                    .with_member_id(text(&member))
                    .with_assignment(encode_assignment(&partitions))
            })
            .collect()
    }

    /// The SyncGroup for `generation`, with the leader's `assignments` (none from a follower).
    pub fn sync_request(
        &self,
        generation: i32,
        assignments: Vec<SyncGroupRequestAssignment>,
    ) -> SyncGroupRequest {
        SyncGroupRequest::default()
            .with_group_id(GroupId(text(&self.group_id)))
            .with_generation_id(generation)
            .with_member_id(text(&self.member_id))
            .with_group_instance_id(self.instance.as_deref().map(text))
            .with_assignments(assignments)
    }

    /// What a SyncGroup answer for `generation` means, at `now`. On success the member takes
    /// the generation's assignment and its next heartbeat is due one interval later. Under the
    /// cooperative protocol, partitions owned before and not assigned now are revoked, and the
    /// member rejoins at once so that the next rebalance can hand them to their new owner.
    pub fn on_sync_answer(
        &mut self,
        now: Duration,
        generation: i32,
        synced: &SyncGroupResponse,
    ) -> SyncAnswer {
        let error = ErrorCode::from_code(synced.error_code);
        if error != ErrorCode::None {
            return match self.react(error) {
                Reaction::Fatal => SyncAnswer::Fatal(error),
                reaction => SyncAnswer::Retry {
                    rediscover: reaction == Reaction::Rediscover,
                },
            };
        }
        let Some(assignment) = decode_assignment(&synced.assignment) else {
            return SyncAnswer::Undecodable;
        };
        self.generation = generation;
        self.in_generation = true;
        self.next_heartbeat = now + self.heartbeat_interval;
        let revoked = self.owned.iter().any(|owned| !assignment.contains(owned));
        self.owned = assignment.clone();
        self.assignment = (!revoked).then(|| assignment.clone());
        SyncAnswer::Synced {
            generation,
            assignment,
        }
    }

    /// After a join, the partitions held and no longer assigned: revoked (cooperative
    /// protocol) before the new ones are announced; [`release`](Self::release) them after.
    pub fn moved_away(&self, assignment: &[TopicPartition]) -> Vec<TopicPartition> {
        self.held
            .iter()
            .filter(|held| !assignment.contains(held))
            .cloned()
            .collect()
    }

    /// After a join, the partitions newly assigned: held from now on.
    pub fn take_assigned(&mut self, assignment: &[TopicPartition]) -> Vec<TopicPartition> {
        let added: Vec<TopicPartition> = assignment
            .iter()
            .filter(|partition| !self.held.contains(partition))
            .cloned()
            .collect();
        self.held.extend(added.iter().cloned());
        added
    }

    // ---- heartbeats ----

    /// How long after `now` the next heartbeat is due.
    pub fn until_heartbeat(&self, now: Duration) -> Duration {
        self.next_heartbeat.saturating_sub(now)
    }

    /// The heartbeat to send at `now`, if one is due: only while the member belongs to a live
    /// generation (a pending rejoin included). The next one is due an interval later.
    pub fn heartbeat(&mut self, now: Duration) -> Option<HeartbeatRequest> {
        if !self.in_generation || now < self.next_heartbeat {
            return None;
        }
        self.next_heartbeat = now + self.heartbeat_interval;
        Some(
            HeartbeatRequest::default()
                .with_group_id(GroupId(text(&self.group_id)))
                .with_generation_id(self.generation)
                .with_member_id(text(&self.member_id))
                .with_group_instance_id(self.instance.as_deref().map(text)),
        )
    }

    // ---- offsets ----

    /// An OffsetFetch of `partitions`' committed offsets.
    pub fn offset_fetch_request(&self, partitions: &[TopicPartition]) -> OffsetFetchRequest {
        let topics = by_topic(partitions)
            .into_iter()
            .map(|(topic, indexes)| {
                OffsetFetchRequestTopic::default()
                    .with_name(TopicName(text(topic)))
                    .with_partition_indexes(indexes)
            })
            .collect();
        OffsetFetchRequest::default()
            .with_group_id(GroupId(text(&self.group_id)))
            .with_topics(Some(topics))
    }

    /// The committed offsets an OffsetFetch answered (absent: none committed), each with the
    /// leader epoch its commit named; `Err` with the group's error, already acted upon.
    #[allow(clippy::type_complexity)]
    pub fn on_offset_fetch(
        &mut self,
        fetched: &OffsetFetchResponse,
    ) -> Result<BTreeMap<TopicPartition, (i64, Option<i32>)>, (ErrorCode, Reaction)> {
        let error = ErrorCode::from_code(fetched.error_code);
        if error != ErrorCode::None {
            return Err((error, self.react(error)));
        }
        let mut offsets = BTreeMap::new();
        for topic in &fetched.topics {
            for partition in &topic.partitions {
                if partition.error_code == 0 && partition.committed_offset >= 0 {
                    let epoch = partition.committed_leader_epoch;
                    offsets.insert(
                        TopicPartition::new(topic.name.as_str(), partition.partition_index),
                        (partition.committed_offset, (epoch >= 0).then_some(epoch)),
                    );
                }
            }
        }
        Ok(offsets)
    }

    /// An OffsetCommit of `offsets` in the member's generation, each naming the leader epoch
    /// noted for it.
    pub fn commit_request(&self, offsets: &BTreeMap<TopicPartition, i64>) -> OffsetCommitRequest {
        let mut grouped: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for (partition, offset) in offsets {
            grouped.entry(&partition.topic).or_default().push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(partition.partition)
                    .with_committed_offset(*offset)
                    .with_committed_leader_epoch(
                        self.offset_epochs.get(partition).copied().unwrap_or(-1),
                    ),
            );
        }
        let topics = grouped
            .into_iter()
            .map(|(topic, partitions)| {
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(text(topic)))
                    .with_partitions(partitions)
            })
            .collect();
        OffsetCommitRequest::default()
            .with_group_id(GroupId(text(&self.group_id)))
            .with_generation_id_or_member_epoch(self.generation)
            .with_member_id(text(&self.member_id))
            .with_group_instance_id(self.instance.as_deref().map(text))
            .with_topics(topics)
    }

    /// What an OffsetCommit answer means: the first partition's error, acted upon.
    pub fn on_commit_answer(
        &mut self,
        answer: &OffsetCommitResponse,
    ) -> Result<(), (ErrorCode, Reaction)> {
        let error = answer
            .topics
            .iter()
            .flat_map(|topic| &topic.partitions)
            .map(|partition| ErrorCode::from_code(partition.error_code))
            .find(|error| *error != ErrorCode::None);
        match error {
            None => Ok(()),
            Some(error) => Err((error, self.react(error))),
        }
    }

    /// When a synchronous commit begun at `now` stops retrying (`default.api.timeout.ms`).
    pub fn commit_deadline(&self, now: Duration) -> Duration {
        now + self.api_timeout
    }

    /// Whether a synchronous commit that failed with `failure` at `now` is tried again, and
    /// after how long: a retriable failure ([`commit_retriable`]) is, every `retry.backoff.ms`,
    /// while another attempt can start before `deadline`.
    pub fn retry_commit(
        &self,
        failure: Failure,
        now: Duration,
        deadline: Duration,
    ) -> Option<Duration> {
        (commit_retriable(failure) && now + self.retry_backoff < deadline)
            .then_some(self.retry_backoff)
    }

    /// An asynchronous commit of `offsets`, written at `now`: its answer is due within the
    /// request timeout. Answers come in order, so it is settled after those before it.
    pub fn commit_sent(&mut self, now: Duration, offsets: BTreeMap<TopicPartition, i64>) {
        let pending = PendingCommit {
            offsets,
            generation: self.generation,
            deadline: now + self.request_timeout,
        };
        self.pending_commits.push_back(pending);
    }

    /// An asynchronous commit of `offsets` that could not be written: how it ended.
    pub fn commit_unsent(&self, offsets: BTreeMap<TopicPartition, i64>) -> PendingCommit {
        PendingCommit {
            offsets,
            generation: self.generation,
            deadline: Duration::ZERO,
        }
    }

    /// How many asynchronous commits await their answer.
    pub fn commits_in_flight(&self) -> usize {
        self.pending_commits.len()
    }

    /// When the oldest asynchronous commit's answer is overdue, if one is in flight.
    pub fn oldest_commit_deadline(&self) -> Option<Duration> {
        self.pending_commits.front().map(|pending| pending.deadline)
    }

    /// Whether the oldest asynchronous commit's answer is overdue at `now` (its connection is
    /// then given up).
    pub fn commit_overdue(&self, now: Duration) -> bool {
        self.pending_commits
            .front()
            .is_some_and(|pending| now >= pending.deadline)
    }

    /// The oldest asynchronous commit, answered (or timed out): settled now.
    pub fn settle_commit(&mut self) -> Option<PendingCommit> {
        self.pending_commits.pop_front()
    }

    /// The coordinator's connection is gone, and with it the answers of every asynchronous
    /// commit in flight: they end unanswered, oldest first.
    pub fn commits_lost(&mut self) -> Vec<PendingCommit> {
        self.pending_commits.drain(..).collect()
    }

    // ---- leaving ----

    /// On leaving: the partitions held are revoked (lost, if the generation was), and no longer
    /// held.
    pub fn leave_revocation(&mut self) -> Option<Revocation> {
        if self.held.is_empty() {
            return None;
        }
        let held = std::mem::take(&mut self.held);
        Some(if self.in_generation {
            Revocation::Revoked(held)
        } else {
            Revocation::Lost(held)
        })
    }

    /// The LeaveGroup to send, if the member has an id to leave with.
    pub fn leave_request(&self) -> Option<LeaveGroupRequest> {
        (!self.member_id.is_empty()).then(|| {
            LeaveGroupRequest::default()
                .with_group_id(GroupId(text(&self.group_id)))
                .with_member_id(text(&self.member_id))
        })
    }

    /// The member left: no generation, no id, nothing owned.
    pub fn left(&mut self) {
        self.assignment = None;
        self.owned.clear();
        self.in_generation = false;
        self.member_id.clear();
    }
}

#[cfg(test)]
mod tests;
