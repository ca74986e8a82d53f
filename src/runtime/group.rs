//! A member of a consumer group, over its own connection to the group's coordinator: finds the
//! coordinator, joins (through MEMBER_ID_REQUIRED), assigns as leader with the assignor the group chose,
//! syncs, heartbeats, fetches and commits offsets, and leaves. What each coordinator error asks
//! for is `client::group::recovery`; this shell only does the calls. Like kafka-python's
//! consumer (and unlike the Java client's heartbeat thread) it heartbeats from the poll loop: a
//! member that processes longer than `session.timeout.ms` is removed from the group.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    FindCoordinatorRequest, GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, OffsetCommitRequest, OffsetFetchRequest, RequestKind, ResponseKind,
    SyncGroupRequest, TopicName,
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
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
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
            coordinator: None,
            member_id: String::new(),
            generation: -1,
            assignment: None,
            owned: Vec::new(),
            in_generation: false,
            next_heartbeat: tokio::time::Instant::now(),
        }
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
        let timeout = connection_timeout(&body, self.request_timeout, self.rebalance_timeout_ms);
        let connection = self.coordinator().await?;
        let outcome = tokio::time::timeout(timeout, connection.call_at_version(version, body))
            .await
            .map_err(|_| ClientError::Timeout(timeout))
            .and_then(|answer| answer);
        if outcome.is_err() {
            self.coordinator = None;
        }
        outcome
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
            Recovery::Rediscover => self.coordinator = None,
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
    /// assignment))` when it joined one now.
    pub async fn ensure_active(
        &mut self,
    ) -> Result<Option<(i32, Vec<TopicPartition>)>, ClientError> {
        if self.assignment.is_some() {
            return Ok(None);
        }
        // Joining: no heartbeats until the member is in a generation again (Kafka's
        // PREPARING_REBALANCE); the JoinGroup itself keeps the member known.
        self.in_generation = false;
        let mut last = None;
        for _ in 0..JOIN_ATTEMPTS {
            match self.join_and_sync().await {
                Ok(Some(joined)) => return Ok(Some(joined)),
                Ok(None) => {}
                Err(error @ ClientError::Kafka { .. }) => return Err(error),
                Err(error) => {
                    self.coordinator = None;
                    last = Some(error);
                    tokio::time::sleep(self.retry_backoff).await;
                }
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Protocol("the join did not settle".into())))
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

    /// The committed offsets of `partitions` (absent: none committed).
    pub async fn committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>, ClientError> {
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
                    offsets.insert(
                        TopicPartition::new(topic.name.to_string(), partition.partition_index),
                        partition.committed_offset,
                    );
                }
            }
        }
        Ok(offsets)
    }

    /// Commits `offsets` in the member's generation: `Err(Kafka)` with the first partition's
    /// error when the coordinator refused (a fenced generation among them).
    pub async fn commit(
        &mut self,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<(), ClientError> {
        let mut grouped: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for (partition, offset) in offsets {
            grouped.entry(&partition.topic).or_default().push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(partition.partition)
                    .with_committed_offset(*offset),
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
        let body = OffsetCommitRequest::default()
            .with_group_id(GroupId(text(&self.group_id)))
            .with_generation_id_or_member_epoch(self.generation)
            .with_member_id(text(&self.member_id))
            .with_group_instance_id(self.instance.as_deref().map(text))
            .with_topics(topics);
        let ResponseKind::OffsetCommit(answer) =
            self.call(7, RequestKind::OffsetCommit(body)).await?
        else {
            return Err(ClientError::Protocol(
                "OffsetCommit answered with another API".into(),
            ));
        };
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

    /// Leaves the group (best effort).
    pub async fn leave(&mut self) {
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
