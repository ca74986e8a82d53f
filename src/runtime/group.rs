//! A member of a consumer group, over its own connection to the group's coordinator: finds the
//! coordinator, joins (through MEMBER_ID_REQUIRED), assigns as leader with the assignor the group chose,
//! syncs, heartbeats, fetches and commits offsets, and leaves. What each coordinator error asks
//! for is `client::group::recovery`; this shell only does the calls. Like kafka-python's
//! consumer (and unlike the Java client's heartbeat thread) it heartbeats from the poll loop: a
//! member that processes longer than `session.timeout.ms` is removed from the group.
//!
//! The application hears of partitions moving through a [`RebalanceListener`] (Kafka's
//! `ConsumerRebalanceListener`), and commits either synchronously ([`GroupMember::commit`],
//! Kafka's `commitSync`) or without waiting ([`GroupMember::commit_async`], `commitAsync`): an
//! asynchronous commit is written to the coordinator's connection at once and its answer read
//! later, in order, before any other call on that connection, so commits complete in the order
//! they were made and a failed one is reported, never retried (a retry could land after a later
//! commit and move the group's offset back).

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    FindCoordinatorRequest, GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, RequestKind,
    ResponseKind, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::group::{
    by_topic, decode_full_subscription, encode_assignment, encode_subscription, recovery, Assignor,
    Recovery, PROTOCOL_TYPE,
};
use crate::config::ConsumerConfig;
use crate::protocol::ErrorCode;
use crate::runtime::admin::{consumer_assignment, metadata};
use crate::runtime::client::{ClientConnection, ClientError};
use crate::types::TopicPartition;

/// Attempts of one join before `ensure_active` gives up (the caller polls and tries again).
const JOIN_ATTEMPTS: usize = 10;

/// The OffsetCommit version the member sends.
const OFFSET_COMMIT_VERSION: i16 = 7;

/// Kafka's `ConsumerRebalanceListener`: what the application does when its partitions move.
/// Each hook gets the member, so that it can commit; a revocation runs while the member still
/// belongs to a live generation, so a commit made there is accepted.
pub trait RebalanceListener {
    /// `partitions` are given up in a rebalance: under the eager protocol every partition the
    /// member held, before it rejoins; under the cooperative one those the new assignment moved
    /// to another member, before they are released.
    fn on_partitions_revoked(
        &mut self,
        member: &mut GroupMember,
        partitions: &[TopicPartition],
    ) -> impl Future<Output = ()>;

    /// `partitions` were added to the member's assignment (under the eager protocol, all of
    /// it). Called after every join that succeeded, possibly with none.
    fn on_partitions_assigned(
        &mut self,
        member: &mut GroupMember,
        partitions: &[TopicPartition],
    ) -> impl Future<Output = ()>;

    /// The member lost its generation (fenced, removed, its session expired) and with it
    /// `partitions`: another member may own them already and a commit would be refused. As in
    /// Kafka, the default treats them as revoked.
    fn on_partitions_lost(
        &mut self,
        member: &mut GroupMember,
        partitions: &[TopicPartition],
    ) -> impl Future<Output = ()> {
        self.on_partitions_revoked(member, partitions)
    }
}

/// Removes the positions of `partitions` from `positions` and answers them: what a listener
/// commits when they are revoked (and drops when they are lost).
pub fn take_positions(
    positions: &mut BTreeMap<TopicPartition, i64>,
    partitions: &[TopicPartition],
) -> BTreeMap<TopicPartition, i64> {
    partitions
        .iter()
        .filter_map(|partition| Some((partition.clone(), positions.remove(partition)?)))
        .collect()
}

/// A listener that does nothing (Kafka's `NoOpConsumerRebalanceListener`).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoListener;

impl RebalanceListener for NoListener {
    async fn on_partitions_revoked(&mut self, _: &mut GroupMember, _: &[TopicPartition]) {}

    async fn on_partitions_assigned(&mut self, _: &mut GroupMember, _: &[TopicPartition]) {}

    async fn on_partitions_lost(&mut self, _: &mut GroupMember, _: &[TopicPartition]) {}
}

/// How an asynchronous commit ended (what Kafka's `OffsetCommitCallback` is given).
#[derive(Debug)]
pub struct CommitOutcome {
    /// The offsets it committed.
    pub offsets: BTreeMap<TopicPartition, i64>,
    /// The generation it was made in.
    pub generation: i32,
    /// `Err(Kafka)` when the coordinator refused it, another error when its answer was lost.
    pub result: Result<(), ClientError>,
}

/// An asynchronous commit written to the coordinator's connection, its answer not read yet.
#[derive(Debug)]
struct PendingCommit {
    offsets: BTreeMap<TopicPartition, i64>,
    generation: i32,
    deadline: tokio::time::Instant,
}

impl PendingCommit {
    /// How it ended.
    fn ended(self, result: Result<(), ClientError>) -> CommitOutcome {
        CommitOutcome {
            offsets: self.offsets,
            generation: self.generation,
            result,
        }
    }
}

/// A group member.
#[derive(Debug)]
pub struct GroupMember {
    bootstrap: Vec<String>,
    next_bootstrap: usize,
    client_id: String,
    group_id: String,
    instance: Option<String>,
    topics: Vec<String>,
    assignors: Vec<Assignor>,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    heartbeat_interval: Duration,
    request_timeout: Duration,
    retry_backoff: Duration,
    /// `default.api.timeout.ms`: how long [`GroupMember::commit`] retries.
    api_timeout: Duration,
    coordinator: Option<ClientConnection>,
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
    next_heartbeat: tokio::time::Instant,
    /// The partitions the application holds: announced by `on_partitions_assigned`, not yet
    /// revoked or lost.
    held: Vec<TopicPartition>,
    /// Asynchronous commits in flight on the coordinator's connection, oldest first.
    pending_commits: VecDeque<PendingCommit>,
    /// Asynchronous commits whose answer was read, for `take_commit_outcomes`.
    commit_outcomes: Vec<CommitOutcome>,
    /// The leader epoch of the last record consumed before each partition's position, as
    /// [`note_offset_epochs`](Self::note_offset_epochs) last read it from the consumer: what a
    /// commit of that partition names (Kafka's `OffsetAndMetadata.leaderEpoch`, KIP-320).
    offset_epochs: BTreeMap<TopicPartition, i32>,
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

/// Whether a failed synchronous commit is tried again (Kafka's `commitSync`): the coordinator
/// moved or is loading (`NOT_COORDINATOR`, `COORDINATOR_NOT_AVAILABLE`,
/// `COORDINATOR_LOAD_IN_PROGRESS`, `REQUEST_TIMED_OUT`), or no answer came (the connection
/// failed, was closed, timed out or carried something undecodable: the call dropped it, and
/// the retry finds the coordinator again). A fenced generation or member
/// (`ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`, `REBALANCE_IN_PROGRESS`: Kafka's
/// `CommitFailedException` and `RebalanceInProgressException`) and every other refusal are not.
fn commit_retriable(error: &ClientError) -> bool {
    match error {
        ClientError::Kafka { error, .. } => {
            matches!(recovery(*error), Recovery::Rediscover | Recovery::Retry)
        }
        ClientError::Io(_)
        | ClientError::Connection(_)
        | ClientError::Timeout(_)
        | ClientError::Codec(_)
        | ClientError::Protocol(_)
        | ClientError::Unsupported(_) => true,
    }
}

fn kafka(error: ErrorCode, what: &str) -> ClientError {
    ClientError::Kafka {
        error,
        message: what.to_owned(),
    }
}

impl GroupMember {
    /// A member of `config.group_id` subscribed to `topics`.
    pub fn new(config: &ConsumerConfig, topics: Vec<String>) -> GroupMember {
        GroupMember {
            bootstrap: config.bootstrap_servers.clone(),
            next_bootstrap: 0,
            client_id: config.client_id.clone(),
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
            coordinator: None,
            member_id: String::new(),
            generation: -1,
            assignment: None,
            owned: Vec::new(),
            in_generation: false,
            next_heartbeat: tokio::time::Instant::now(),
            held: Vec::new(),
            pending_commits: VecDeque::new(),
            commit_outcomes: Vec::new(),
            offset_epochs: BTreeMap::new(),
        }
    }

    /// Reads from `consumer` the leader epoch of the last record consumed before the position
    /// of each of `partitions`, for the commits that follow to name (as Kafka's consumer
    /// commits its positions with their epochs). A member that later fetches the committed
    /// offset learns the epoch with it, and fetches nothing from a leader older than that.
    pub fn note_offset_epochs<'a>(
        &mut self,
        consumer: &crate::runtime::consumer::Consumer,
        partitions: impl IntoIterator<Item = &'a TopicPartition>,
    ) {
        for partition in partitions {
            if let Some(epoch) = consumer.offset_epoch(partition) {
                self.offset_epochs.insert(partition.clone(), epoch);
            }
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

    /// How long until the next heartbeat is due.
    pub fn until_heartbeat(&self) -> Duration {
        self.next_heartbeat
            .saturating_duration_since(tokio::time::Instant::now())
    }

    async fn call(&mut self, version: i16, body: RequestKind) -> Result<ResponseKind, ClientError> {
        // Answers come in order: the asynchronous commits' are read first.
        self.finish_commits().await;
        let timeout = connection_timeout(&body, self.request_timeout, self.rebalance_timeout_ms);
        let connection = self.coordinator().await?;
        let outcome = tokio::time::timeout(timeout, connection.call_at_version(version, body))
            .await
            .map_err(|_| ClientError::Timeout(timeout))
            .and_then(|answer| answer);
        if outcome.is_err() {
            self.drop_coordinator();
        }
        outcome
    }

    /// Forgets the coordinator's connection; the asynchronous commits in flight on it fail
    /// (their answers are lost with it; Kafka's callback gets a retriable error).
    fn drop_coordinator(&mut self) {
        self.coordinator = None;
        while let Some(pending) = self.pending_commits.pop_front() {
            self.commit_outcomes
                .push(pending.ended(Err(ClientError::Protocol(
                    "the coordinator's connection was lost before the commit was answered".into(),
                ))));
        }
    }

    /// The coordinator's connection, found through a bootstrap server if needed.
    async fn coordinator(&mut self) -> Result<&mut ClientConnection, ClientError> {
        if self.coordinator.is_none() {
            let address = self.bootstrap[self.next_bootstrap % self.bootstrap.len().max(1)].clone();
            self.next_bootstrap += 1;
            let mut bootstrap = ClientConnection::connect(&address, &self.client_id).await?;
            let request = FindCoordinatorRequest::default().with_key(text(&self.group_id));
            let call = bootstrap.call_at_version(3, RequestKind::FindCoordinator(request));
            let ResponseKind::FindCoordinator(found) =
                tokio::time::timeout(self.request_timeout, call)
                    .await
                    .map_err(|_| ClientError::Timeout(self.request_timeout))??
            else {
                return Err(ClientError::Protocol(
                    "FindCoordinator answered with another API".into(),
                ));
            };
            if found.error_code != 0 {
                return Err(kafka(
                    ErrorCode::from_code(found.error_code),
                    "FindCoordinator",
                ));
            }
            let address = format!("{}:{}", found.host, found.port);
            self.coordinator = Some(ClientConnection::connect(&address, &self.client_id).await?);
        }
        Ok(self.coordinator.as_mut().expect("just set"))
    }

    /// What an error answer asks for; `Err` when it is fatal.
    fn recover(&mut self, error: ErrorCode, what: &str) -> Result<(), ClientError> {
        match recovery(error) {
            Recovery::Rediscover => self.drop_coordinator(),
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
            Recovery::Fatal => return Err(kafka(error, what)),
        }
        Ok(())
    }

    /// Makes sure the member belongs to a generation, joining if it must: `Some((generation,
    /// assignment))` when it joined one now. `listener` hears of the partitions that move
    /// (Kafka's `onJoinPrepare` and `onJoinComplete`): before the join, the partitions held
    /// are revoked (eager protocol) or, when the generation was lost, lost; after it, those the
    /// cooperative protocol moved away are revoked and the new ones assigned.
    pub async fn ensure_active<L: RebalanceListener>(
        &mut self,
        listener: &mut L,
    ) -> Result<Option<(i32, Vec<TopicPartition>)>, ClientError> {
        if self.assignment.is_some() {
            return Ok(None);
        }
        self.prepare_join(listener).await;
        // Joining: no heartbeats until the member is in a generation again (Kafka's
        // PREPARING_REBALANCE); the JoinGroup itself keeps the member known.
        self.in_generation = false;
        let mut last = None;
        for _ in 0..JOIN_ATTEMPTS {
            match self.join_and_sync().await {
                Ok(Some((generation, assignment))) => {
                    self.complete_join(listener, &assignment).await;
                    return Ok(Some((generation, assignment)));
                }
                Ok(None) => {}
                Err(error @ ClientError::Kafka { .. }) => return Err(error),
                Err(error) => {
                    self.drop_coordinator();
                    last = Some(error);
                    tokio::time::sleep(self.retry_backoff).await;
                }
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Protocol("the join did not settle".into())))
    }

    /// Before a join: a member that lost its generation loses what it held; an eager member
    /// in a live generation revokes all of it (a cooperative one keeps it through the join).
    async fn prepare_join<L: RebalanceListener>(&mut self, listener: &mut L) {
        if self.held.is_empty() {
            return;
        }
        if !self.in_generation {
            let lost = std::mem::take(&mut self.held);
            listener.on_partitions_lost(self, &lost).await;
        } else if !self.is_cooperative() {
            let revoked = self.held.clone();
            listener.on_partitions_revoked(self, &revoked).await;
            self.held.clear();
        }
    }

    /// After a join: the partitions held and no longer assigned are revoked (cooperative
    /// protocol), then those newly assigned are announced.
    async fn complete_join<L: RebalanceListener>(
        &mut self,
        listener: &mut L,
        assignment: &[TopicPartition],
    ) {
        let revoked: Vec<TopicPartition> = self
            .held
            .iter()
            .filter(|held| !assignment.contains(held))
            .cloned()
            .collect();
        if !revoked.is_empty() {
            listener.on_partitions_revoked(self, &revoked).await;
            self.held.retain(|held| assignment.contains(held));
        }
        let added: Vec<TopicPartition> = assignment
            .iter()
            .filter(|partition| !self.held.contains(partition))
            .cloned()
            .collect();
        self.held.extend(added.iter().cloned());
        listener.on_partitions_assigned(self, &added).await;
    }

    /// One JoinGroup and, if it succeeds, one SyncGroup; `Ok(None)` when it must be tried
    /// again (a retriable error, already acted upon).
    async fn join_and_sync(&mut self) -> Result<Option<(i32, Vec<TopicPartition>)>, ClientError> {
        if !self.is_cooperative() {
            self.owned.clear(); // eager: everything is given up before the join
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
        let body = JoinGroupRequest::default()
            .with_group_id(GroupId(text(&self.group_id)))
            .with_session_timeout_ms(self.session_timeout_ms)
            .with_rebalance_timeout_ms(self.rebalance_timeout_ms)
            .with_member_id(text(&self.member_id))
            .with_group_instance_id(self.instance.as_deref().map(text))
            .with_protocol_type(text(PROTOCOL_TYPE))
            .with_protocols(protocols);
        let ResponseKind::JoinGroup(joined) = self.call(5, RequestKind::JoinGroup(body)).await?
        else {
            return Err(ClientError::Protocol(
                "JoinGroup answered with another API".into(),
            ));
        };
        let error = ErrorCode::from_code(joined.error_code);
        if error == ErrorCode::MemberIdRequired {
            self.member_id = joined.member_id.to_string();
            return Ok(None);
        }
        if error != ErrorCode::None {
            self.recover(error, "JoinGroup")?;
            tokio::time::sleep(self.retry_backoff).await;
            return Ok(None);
        }
        self.member_id = joined.member_id.to_string();
        let assignments = if joined.leader == joined.member_id {
            self.assign(&joined).await?
        } else {
            Vec::new()
        };
        let body = SyncGroupRequest::default()
            .with_group_id(GroupId(text(&self.group_id)))
            .with_generation_id(joined.generation_id)
            .with_member_id(text(&self.member_id))
            .with_group_instance_id(self.instance.as_deref().map(text))
            .with_assignments(assignments);
        let ResponseKind::SyncGroup(synced) = self.call(3, RequestKind::SyncGroup(body)).await?
        else {
            return Err(ClientError::Protocol(
                "SyncGroup answered with another API".into(),
            ));
        };
        let error = ErrorCode::from_code(synced.error_code);
        if error != ErrorCode::None {
            self.recover(error, "SyncGroup")?;
            return Ok(None);
        }
        let assignment = consumer_assignment(&synced.assignment)
            .ok_or_else(|| ClientError::Protocol("an assignment that does not decode".into()))?;
        self.adopt(joined.generation_id, &assignment);
        Ok(Some((self.generation, assignment)))
    }

    /// Takes a generation's assignment. Cooperative: partitions owned before and not assigned
    /// now are revoked, and the member rejoins at once so that the next rebalance can hand them
    /// to their new owner.
    fn adopt(&mut self, generation: i32, assignment: &[TopicPartition]) {
        self.generation = generation;
        self.in_generation = true;
        self.next_heartbeat = tokio::time::Instant::now() + self.heartbeat_interval;
        let revoked = self.owned.iter().any(|owned| !assignment.contains(owned));
        self.owned = assignment.to_vec();
        self.assignment = (!revoked).then(|| assignment.to_vec());
    }

    /// The leader's part: every member's partitions, dealt by the assignor the group chose.
    async fn assign(
        &mut self,
        joined: &JoinGroupResponse,
    ) -> Result<Vec<SyncGroupRequestAssignment>, ClientError> {
        let chosen = joined.protocol_name.as_deref().unwrap_or_default();
        let assignor = Assignor::by_name(chosen)
            .filter(|assignor| self.assignors.contains(assignor))
            .ok_or_else(|| {
                ClientError::Protocol(format!("the group chose assignor {chosen:?}, not offered"))
            })?;
        let subscriptions: BTreeMap<String, _> = joined
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
        let timeout = self.request_timeout;
        let connection = self.coordinator().await?;
        let described = metadata(connection, Some(&topics), timeout).await?;
        let counts: BTreeMap<String, i32> = described
            .topics
            .iter()
            .filter(|topic| topic.error_code == 0)
            .filter_map(|topic| {
                let name = topic.name.as_ref()?.to_string();
                Some((name, topic.partitions.len() as i32))
            })
            .collect();
        Ok(assignor
            .assign(&subscriptions, &counts)
            .into_iter()
            .map(|(member, partitions)| {
                SyncGroupRequestAssignment::default()
                    .with_member_id(text(&member))
                    .with_assignment(encode_assignment(&partitions))
            })
            .collect())
    }

    /// Heartbeats if one is due while the member belongs to a live generation (a pending
    /// rejoin included); a rebalance or fencing marks the member for rejoining.
    pub async fn heartbeat_if_due(&mut self) -> Result<(), ClientError> {
        self.read_ready_commits();
        if !self.in_generation || tokio::time::Instant::now() < self.next_heartbeat {
            return Ok(());
        }
        self.next_heartbeat = tokio::time::Instant::now() + self.heartbeat_interval;
        let body = HeartbeatRequest::default()
            .with_group_id(GroupId(text(&self.group_id)))
            .with_generation_id(self.generation)
            .with_member_id(text(&self.member_id))
            .with_group_instance_id(self.instance.as_deref().map(text));
        let ResponseKind::Heartbeat(answer) = self.call(3, RequestKind::Heartbeat(body)).await?
        else {
            return Err(ClientError::Protocol(
                "Heartbeat answered with another API".into(),
            ));
        };
        match ErrorCode::from_code(answer.error_code) {
            ErrorCode::None => Ok(()),
            error => self.recover(error, "Heartbeat"),
        }
    }

    /// The committed offsets of `partitions` (absent: none committed), each with the leader
    /// epoch its commit named, if any.
    pub async fn committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, (i64, Option<i32>)>, ClientError> {
        let topics = by_topic(partitions)
            .into_iter()
            .map(|(topic, indexes)| {
                OffsetFetchRequestTopic::default()
                    .with_name(TopicName(text(topic)))
                    .with_partition_indexes(indexes)
            })
            .collect();
        let body = OffsetFetchRequest::default()
            .with_group_id(GroupId(text(&self.group_id)))
            .with_topics(Some(topics));
        let ResponseKind::OffsetFetch(fetched) =
            self.call(5, RequestKind::OffsetFetch(body)).await?
        else {
            return Err(ClientError::Protocol(
                "OffsetFetch answered with another API".into(),
            ));
        };
        let error = ErrorCode::from_code(fetched.error_code);
        if error != ErrorCode::None {
            self.recover(error, "OffsetFetch")?;
            return Err(kafka(error, "OffsetFetch"));
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

    /// Commits `offsets` in the member's generation (Kafka's `commitSync`), after the
    /// asynchronous commits still in flight: `Err(Kafka)` with the first partition's error
    /// when the coordinator refused (a fenced generation among them). As Kafka's, a retriable
    /// failure (see [`commit_retriable`]) is tried again every `retry.backoff.ms`, against the
    /// coordinator found again, until `default.api.timeout.ms` has passed; the last failure is
    /// the answer then.
    pub async fn commit(
        &mut self,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<(), ClientError> {
        let deadline = tokio::time::Instant::now() + self.api_timeout;
        loop {
            let outcome = self.commit_once(offsets).await;
            match &outcome {
                Err(error)
                    if commit_retriable(error)
                        && tokio::time::Instant::now() + self.retry_backoff < deadline =>
                {
                    tracing::debug!(%error, "OffsetCommit failed retriably: retrying");
                    tokio::time::sleep(self.retry_backoff).await;
                }
                _ => return outcome,
            }
        }
    }

    /// One OffsetCommit of `offsets`: sent, answered, judged.
    async fn commit_once(
        &mut self,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<(), ClientError> {
        let body = self.commit_request(offsets);
        let ResponseKind::OffsetCommit(answer) = self
            .call(OFFSET_COMMIT_VERSION, RequestKind::OffsetCommit(body))
            .await?
        else {
            return Err(ClientError::Protocol(
                "OffsetCommit answered with another API".into(),
            ));
        };
        self.commit_answered(&answer)
    }

    /// Commits `offsets` without waiting for the answer (Kafka's `commitAsync`): the request
    /// is written now and its answer read, in order, by a later call of the member (or by
    /// [`flush_commits`](Self::flush_commits)); [`take_commit_outcomes`] then reports it. A
    /// commit that could not be sent is reported the same way. Never retried.
    ///
    /// [`take_commit_outcomes`]: Self::take_commit_outcomes
    pub async fn commit_async(&mut self, offsets: BTreeMap<TopicPartition, i64>) {
        if offsets.is_empty() {
            return;
        }
        let generation = self.generation;
        let body = RequestKind::OffsetCommit(self.commit_request(&offsets));
        let sent = match self.coordinator().await {
            Ok(connection) => {
                connection
                    .send_at_version(OFFSET_COMMIT_VERSION, &body)
                    .await
            }
            Err(error) => Err(error),
        };
        let pending = PendingCommit {
            offsets,
            generation,
            deadline: tokio::time::Instant::now() + self.request_timeout,
        };
        match sent {
            Ok(()) => self.pending_commits.push_back(pending),
            Err(error) => {
                self.drop_coordinator();
                self.commit_outcomes.push(pending.ended(Err(error)));
            }
        }
    }

    /// How many asynchronous commits await their answer.
    pub fn commits_in_flight(&self) -> usize {
        self.pending_commits.len()
    }

    /// The asynchronous commits answered since the last call, oldest first; answers already
    /// on the connection are read first, without waiting.
    pub fn take_commit_outcomes(&mut self) -> Vec<CommitOutcome> {
        self.read_ready_commits();
        std::mem::take(&mut self.commit_outcomes)
    }

    /// Waits for every asynchronous commit in flight to be answered (or to time out), then
    /// reports them all (Kafka's `commitSync()` after `commitAsync`s, as in a `finally`).
    pub async fn flush_commits(&mut self) -> Vec<CommitOutcome> {
        self.finish_commits().await;
        std::mem::take(&mut self.commit_outcomes)
    }

    /// Reads the answers of the asynchronous commits in flight, waiting up to each one's
    /// deadline; one that does not come in time drops the connection.
    async fn finish_commits(&mut self) {
        while let Some(deadline) = self.pending_commits.front().map(|pending| pending.deadline) {
            let Some(connection) = self.coordinator.as_mut() else {
                self.drop_coordinator();
                return;
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if let Ok(answer) = tokio::time::timeout(left, connection.receive()).await {
                self.settle_commit(answer);
                continue;
            }
            if let Some(pending) = self.pending_commits.pop_front() {
                let timeout = ClientError::Timeout(self.request_timeout);
                self.commit_outcomes.push(pending.ended(Err(timeout)));
            }
            self.drop_coordinator();
        }
    }

    /// Reads the commit answers already on the connection (one poll each, without waiting),
    /// and fails those past their deadline.
    fn read_ready_commits(&mut self) {
        while !self.pending_commits.is_empty() {
            let Some(connection) = self.coordinator.as_mut() else {
                self.drop_coordinator();
                return;
            };
            // `receive` is cancel-safe: a frame half read stays buffered for the next poll.
            let answer = {
                let mut receive = std::pin::pin!(connection.receive());
                match receive
                    .as_mut()
                    .poll(&mut Context::from_waker(Waker::noop()))
                {
                    Poll::Ready(answer) => answer,
                    Poll::Pending => break,
                }
            };
            self.settle_commit(answer);
        }
        let overdue = self
            .pending_commits
            .front()
            .is_some_and(|pending| tokio::time::Instant::now() >= pending.deadline);
        if overdue {
            self.drop_coordinator();
        }
    }

    /// The oldest asynchronous commit's answer.
    fn settle_commit(&mut self, answer: Result<ResponseKind, ClientError>) {
        let Some(pending) = self.pending_commits.pop_front() else {
            return;
        };
        let result = match answer {
            Ok(ResponseKind::OffsetCommit(answer)) => self.commit_answered(&answer),
            Ok(_) => Err(ClientError::Protocol(
                "OffsetCommit answered with another API".into(),
            )),
            Err(error) => Err(error),
        };
        let lost = result
            .as_ref()
            .is_err_and(|error| !matches!(error, ClientError::Kafka { .. }));
        self.commit_outcomes.push(pending.ended(result));
        if lost {
            self.drop_coordinator();
        }
    }

    /// What an OffsetCommit answer means: the first partition's error, acted upon.
    fn commit_answered(&mut self, answer: &OffsetCommitResponse) -> Result<(), ClientError> {
        let error = answer
            .topics
            .iter()
            .flat_map(|topic| &topic.partitions)
            .map(|partition| ErrorCode::from_code(partition.error_code))
            .find(|error| *error != ErrorCode::None);
        match error {
            None => Ok(()),
            Some(error) => {
                self.recover(error, "OffsetCommit")?;
                Err(kafka(error, "OffsetCommit"))
            }
        }
    }

    /// An OffsetCommit of `offsets` in the member's generation.
    fn commit_request(&self, offsets: &BTreeMap<TopicPartition, i64>) -> OffsetCommitRequest {
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

    /// Leaves the group (best effort), as Kafka's `close`: the partitions held are revoked
    /// (lost, if the generation was), the asynchronous commits in flight are awaited, then
    /// LeaveGroup is sent.
    pub async fn leave<L: RebalanceListener>(&mut self, listener: &mut L) {
        if !self.held.is_empty() {
            let held = std::mem::take(&mut self.held);
            if self.in_generation {
                listener.on_partitions_revoked(self, &held).await;
            } else {
                listener.on_partitions_lost(self, &held).await;
            }
        }
        self.finish_commits().await;
        if self.member_id.is_empty() {
            return;
        }
        let body = LeaveGroupRequest::default()
            .with_group_id(GroupId(text(&self.group_id)))
            .with_member_id(text(&self.member_id));
        let _ = self.call(1, RequestKind::LeaveGroup(body)).await;
        self.assignment = None;
        self.owned.clear();
        self.in_generation = false;
        self.member_id.clear();
    }
}

/// A JoinGroup may be parked for up to the rebalance timeout: wait that long beyond the request
/// timeout (Kafka's consumer does the same).
fn connection_timeout(
    body: &RequestKind,
    request: Duration,
    rebalance_timeout_ms: i32,
) -> Duration {
    match body {
        RequestKind::JoinGroup(_) => {
            request + Duration::from_millis(rebalance_timeout_ms.max(0) as u64)
        }
        _ => request,
    }
}

#[cfg(all(test, not(madsim)))]
mod tests {
    use super::*;

    fn refused(error: ErrorCode) -> ClientError {
        kafka(error, "OffsetCommit")
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
            assert!(commit_retriable(&refused(error)), "{error:?}");
        }
        assert!(commit_retriable(&ClientError::Timeout(
            Duration::from_secs(30)
        )));
        assert!(commit_retriable(&ClientError::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused
        ))));
        // What the client reports when the broker closes the connection under a request.
        assert!(commit_retriable(&ClientError::Protocol(
            "connection closed by the broker".into()
        )));
    }

    #[test]
    fn a_fenced_commit_fails_at_once() {
        for error in [
            ErrorCode::IllegalGeneration,
            ErrorCode::UnknownMemberId,
            ErrorCode::RebalanceInProgress,
            ErrorCode::OffsetMetadataTooLarge,
        ] {
            assert!(!commit_retriable(&refused(error)), "{error:?}");
        }
    }
}
