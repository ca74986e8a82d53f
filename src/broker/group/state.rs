//! One classic consumer group: Kafka's `ClassicGroup` and the `GroupCoordinator` logic that
//! drives it (members, generations, the join and sync phases, heartbeats, leaving), as a
//! sans-IO state machine. Parked JoinGroup and SyncGroup answers come out as [`GroupReply`]s;
//! what must be stored in `__consumer_offsets` comes out as a [`StoredGroup`] write.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::records::{CommittedOffset, StoredGroup, StoredMember};
use crate::broker::ReplyTo;
use crate::protocol::ErrorCode;
use crate::types::{Millis, TopicPartition};

/// Kafka's `ClassicGroupState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum GroupState {
    /// No members; offsets may remain.
    Empty,
    /// Members are (re)joining.
    PreparingRebalance,
    /// The join finished; waiting for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
    /// Deleted or unloaded.
    Dead,
}

impl GroupState {
    /// Kafka's transition table (`ClassicGroupState.validPreviousStates`).
    fn valid_previous(self) -> &'static [GroupState] {
        use GroupState::{CompletingRebalance, Dead, Empty, PreparingRebalance, Stable};
        match self {
            Empty | CompletingRebalance => &[PreparingRebalance],
            PreparingRebalance => &[Stable, CompletingRebalance, Empty],
            Stable => &[CompletingRebalance],
            Dead => &[Stable, PreparingRebalance, CompletingRebalance, Empty, Dead],
        }
    }

    /// Kafka's name, as DescribeGroups and ListGroups report it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// The coordinator's limits (`group.*` broker configs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// `group.initial.rebalance.delay.ms`.
    pub(crate) initial_rebalance_delay_ms: i32,
    /// `group.max.size`.
    pub(crate) max_size: i32,
}

/// A member of the group.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// `group.instance.id` of a static member.
    pub(crate) group_instance_id: Option<String>,
    /// The client's `client.id`.
    pub(crate) client_id: String,
    /// The client's address.
    pub(crate) client_host: String,
    /// How long without a heartbeat before the member is removed.
    pub(crate) session_timeout_ms: i32,
    /// How long a rebalance waits for it to rejoin.
    pub(crate) rebalance_timeout_ms: i32,
    /// Its protocols (assignors) in preference order, each with its subscription.
    pub(crate) protocols: Vec<(String, Bytes)>,
    /// What the leader assigned it in this generation.
    pub(crate) assignment: Bytes,
    /// Its JoinGroup waits for the join phase to finish.
    join_reply: Option<ReplyTo>,
    /// Its SyncGroup waits for the leader's assignment.
    sync_reply: Option<ReplyTo>,
    /// Removed if no heartbeat comes by then (unless it waits in a join or sync).
    heartbeat_deadline: Millis,
}

impl Member {
    /// Its subscription for `protocol`.
    pub(crate) fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.clone())
            .unwrap_or_default()
    }

    fn same_protocols(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }
}

/// A JoinGroup as the group sees it.
#[derive(Debug, Clone)]
pub(crate) struct JoinRequest {
    /// Where to answer.
    pub(crate) reply_to: ReplyTo,
    /// Empty for a new member.
    pub(crate) member_id: String,
    /// `group.instance.id`.
    pub(crate) group_instance_id: Option<String>,
    /// `client.id`.
    pub(crate) client_id: String,
    /// The client's address.
    pub(crate) client_host: String,
    /// `session.timeout.ms`.
    pub(crate) session_timeout_ms: i32,
    /// `max.poll.interval.ms` for Kafka consumers.
    pub(crate) rebalance_timeout_ms: i32,
    /// `consumer` for Kafka consumers.
    pub(crate) protocol_type: String,
    /// Assignors with subscriptions, in preference order.
    pub(crate) protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a new member first gets MEMBER_ID_REQUIRED and an id (KIP-394).
    pub(crate) require_known_member_id: bool,
}

/// A member as the leader's JoinGroup answer lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JoinedMember {
    /// Its id.
    pub(crate) member_id: String,
    /// Its `group.instance.id`.
    pub(crate) group_instance_id: Option<String>,
    /// Its subscription for the chosen protocol.
    pub(crate) metadata: Bytes,
}

/// An answer the group gives, possibly long after the request.
#[derive(Debug, Clone)]
pub(crate) enum GroupReply {
    /// The answer to a JoinGroup.
    Join {
        /// Where.
        reply_to: ReplyTo,
        /// The outcome.
        error: ErrorCode,
        /// The generation joined.
        generation: i32,
        /// The group's protocol type.
        protocol_type: Option<String>,
        /// The chosen protocol.
        protocol: Option<String>,
        /// The leader's member id.
        leader: String,
        /// The member's id.
        member_id: String,
        /// Every member with its subscription, for the leader only.
        members: Vec<JoinedMember>,
    },
    /// The answer to a SyncGroup.
    Sync {
        /// Where.
        reply_to: ReplyTo,
        /// The outcome.
        error: ErrorCode,
        /// The group's protocol type.
        protocol_type: Option<String>,
        /// The chosen protocol.
        protocol: Option<String>,
        /// The member's assignment.
        assignment: Bytes,
    },
}

impl GroupReply {
    /// A JoinGroup answer carrying only an error.
    pub(crate) fn join_error(reply_to: ReplyTo, error: ErrorCode, member_id: String) -> GroupReply {
        GroupReply::Join {
            reply_to,
            error,
            generation: -1,
            protocol_type: None,
            protocol: None,
            leader: String::new(),
            member_id,
            members: Vec::new(),
        }
    }

    fn sync_error(reply_to: ReplyTo, error: ErrorCode) -> GroupReply {
        GroupReply::Sync {
            reply_to,
            error,
            protocol_type: None,
            protocol: None,
            assignment: Bytes::new(),
        }
    }
}

/// What a group operation asks of the coordinator.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    /// Answers to send.
    pub(crate) replies: Vec<GroupReply>,
    /// The group's state to store in `__consumer_offsets` (the leader's assignment, or a new
    /// empty generation). `Some(generation)` pairs it with [`Group::on_stored`].
    pub(crate) store: Vec<(StoredGroup, Option<i32>)>,
}

/// `group.initial.rebalance.delay.ms` at work: the first join of an empty group waits for more
/// members (Kafka's `InitialDelayedJoin`).
#[derive(Debug, Clone, Copy)]
struct InitialDelay {
    deadline: Millis,
    delay_ms: u64,
    remaining_ms: u64,
    member_added: bool,
}

/// A consumer group.
#[derive(Debug)]
pub(crate) struct Group {
    /// Its id.
    pub(crate) id: String,
    state: GroupState,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, each until its session timeout.
    pending: BTreeMap<String, Millis>,
    /// The join phase ends by then (the largest rebalance timeout).
    join_deadline: Option<Millis>,
    initial_delay: Option<InitialDelay>,
    /// The leader's assignment for this generation, being stored.
    storing: Option<(i32, BTreeMap<String, Bytes>)>,
    /// Committed offsets.
    pub(crate) offsets: BTreeMap<TopicPartition, CommittedOffset>,
    /// OffsetCommits being stored (their offsets do not expire meanwhile: Kafka's
    /// `pendingOffsetCommits`).
    pub(crate) pending_commits: u32,
    /// Wall-clock milliseconds when the group entered `stamped_state` (Kafka's
    /// `currentStateTimestamp`); `None` until stamped.
    state_timestamp: Option<i64>,
    /// The state `state_timestamp` belongs to.
    stamped_state: GroupState,
}

impl Group {
    /// A new, empty group.
    pub(crate) fn new(id: String) -> Group {
        Group {
            id,
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: BTreeMap::new(),
            join_deadline: None,
            initial_delay: None,
            storing: None,
            offsets: BTreeMap::new(),
            pending_commits: 0,
            state_timestamp: None,
            stamped_state: GroupState::Empty,
        }
    }

    /// The group as `__consumer_offsets` stored it, loaded at `now`: Stable with its members
    /// when it had some (each gets a full session to heartbeat), else Empty.
    pub(crate) fn loaded(&mut self, now: Millis, stored: StoredGroup) {
        self.generation = stored.generation;
        self.protocol_type = Some(stored.protocol_type).filter(|kind| !kind.is_empty());
        self.protocol = stored.protocol;
        self.leader = stored.leader;
        self.members = stored
            .members
            .into_iter()
            .map(|member| {
                let protocols = match &self.protocol {
                    Some(protocol) => vec![(protocol.clone(), member.subscription)],
                    None => Vec::new(),
                };
                let restored = Member {
                    group_instance_id: member.group_instance_id,
                    client_id: member.client_id,
                    client_host: member.client_host,
                    session_timeout_ms: member.session_timeout_ms,
                    rebalance_timeout_ms: member.rebalance_timeout_ms,
                    protocols,
                    assignment: member.assignment,
                    join_reply: None,
                    sync_reply: None,
                    heartbeat_deadline: now.plus(member.session_timeout_ms.max(0) as u64),
                };
                (member.member_id, restored)
            })
            .collect();
        self.state = if self.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        self.stamped_state = self.state;
        self.state_timestamp = Some(stored.state_timestamp).filter(|stamp| *stamp >= 0);
        if self
            .leader
            .as_ref()
            .is_none_or(|leader| !self.members.contains_key(leader))
        {
            self.leader = self.members.keys().next().cloned();
        }
    }

    /// Its state.
    pub(crate) fn state(&self) -> GroupState {
        self.state
    }

    /// Its current generation.
    pub(crate) fn generation(&self) -> i32 {
        self.generation
    }

    /// Whether `member_id` is a member (of the current generation).
    pub(crate) fn has_member(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }

    /// Its protocol type (`consumer`), if any member ever joined.
    pub(crate) fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }

    /// The chosen protocol of this generation.
    pub(crate) fn protocol(&self) -> Option<&str> {
        self.protocol.as_deref()
    }

    /// Its members by id.
    pub(crate) fn members(&self) -> &BTreeMap<String, Member> {
        &self.members
    }

    /// Records `wall_ms` as the time the group entered its state, if the state changed since
    /// the last stamp (the coordinator stamps after every operation on the group).
    pub(crate) fn stamp(&mut self, wall_ms: i64) {
        if self.state_timestamp.is_none() || self.stamped_state != self.state {
            self.state_timestamp = Some(wall_ms);
            self.stamped_state = self.state;
        }
    }

    /// When the group entered its current state (wall-clock milliseconds), if known.
    pub(crate) fn state_timestamp(&self) -> Option<i64> {
        self.state_timestamp
            .filter(|_| self.stamped_state == self.state)
    }

    /// The committed offsets that have expired at `wall_ms` after `retention_ms`, by Kafka's
    /// rules (`GroupMetadata.removeExpiredOffsets`, KIP-211): in an empty group, every offset
    /// once the retention has passed since the group became empty (or since the commit, when
    /// that time is unknown); in a stable consumer group, the offsets of topics no member
    /// subscribes to, once the retention has passed since their commit; a simple consumer's
    /// offsets (no protocol type) once it has passed since their commit. Nothing while a
    /// commit is being stored.
    pub(crate) fn expired_offsets(&self, wall_ms: i64, retention_ms: i64) -> Vec<TopicPartition> {
        if self.pending_commits > 0 {
            return Vec::new();
        }
        let expired = |base: i64| wall_ms.saturating_sub(base) >= retention_ms;
        let since_commit = |offset: &CommittedOffset| expired(offset.commit_timestamp);
        let pick = |keep: &dyn Fn(&TopicPartition, &CommittedOffset) -> bool| {
            self.offsets
                .iter()
                .filter(|(partition, offset)| keep(partition, offset))
                .map(|(partition, _)| partition.clone())
                .collect()
        };
        match (self.protocol_type.as_deref(), self.state) {
            (Some(_), GroupState::Empty) => match self.state_timestamp() {
                Some(empty_since) if expired(empty_since) => pick(&|_, _| true),
                Some(_) => Vec::new(),
                None => pick(&|_, offset| since_commit(offset)),
            },
            (Some(crate::client::group::PROTOCOL_TYPE), GroupState::Stable) => {
                // Kafka's `computeSubscribedTopics`: unknown when any subscription does not
                // decode, and then nothing expires.
                let protocol = self.protocol.clone().unwrap_or_default();
                let Some(subscribed) = self
                    .members
                    .values()
                    .map(|member| {
                        crate::client::group::decode_subscription(&member.metadata(&protocol))
                    })
                    .collect::<Option<Vec<Vec<String>>>>()
                else {
                    return Vec::new();
                };
                let subscribed: std::collections::BTreeSet<String> =
                    subscribed.into_iter().flatten().collect();
                pick(&|partition, offset| {
                    !subscribed.contains(&*partition.topic) && since_commit(offset)
                })
            }
            (None, _) => pick(&|_, offset| since_commit(offset)),
            _ => Vec::new(),
        }
    }

    /// Removes the group once it is empty and has no offsets left (Kafka turns it Dead and
    /// writes its tombstone): whether it is gone.
    pub(crate) fn remove_if_unused(&mut self) -> bool {
        if self.state == GroupState::Empty && self.offsets.is_empty() && self.pending_commits == 0 {
            self.transition(GroupState::Dead);
            return true;
        }
        false
    }

    fn transition(&mut self, to: GroupState) {
        assert!(
            to.valid_previous().contains(&self.state),
            "group {}: illegal transition {:?} -> {to:?}",
            self.id,
            self.state
        );
        self.state = to;
    }

    /// Kafka's `isStaticMemberFenced`: the instance id belongs to another member.
    fn is_fenced(&self, group_instance_id: Option<&str>, member_id: &str) -> bool {
        group_instance_id.is_some_and(|instance| {
            self.static_member(instance)
                .is_some_and(|owner| owner != member_id)
        })
    }

    fn static_member(&self, instance: &str) -> Option<&str> {
        self.members
            .iter()
            .find(|(_, member)| member.group_instance_id.as_deref() == Some(instance))
            .map(|(id, _)| id.as_str())
    }

    /// Protocols every member supports.
    fn candidate_protocols(&self) -> Vec<String> {
        let mut members = self.members.values();
        let Some(first) = members.next() else {
            return Vec::new();
        };
        let mut candidates: Vec<String> = first
            .protocols
            .iter()
            .map(|(name, _)| name.clone())
            .collect();
        for member in members {
            candidates.retain(|name| member.protocols.iter().any(|(other, _)| other == name));
        }
        candidates
    }

    /// Kafka's `supportsProtocols`: an empty group takes any non-empty set; otherwise the
    /// type must match and one protocol must be common to everyone.
    fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && self
                .candidate_protocols()
                .iter()
                .any(|name| protocols.iter().any(|(other, _)| other == name))
    }

    /// Kafka's `selectProtocol`: each member votes for its most preferred candidate; the most
    /// votes win (ties: the candidate listed first).
    fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for member in self.members.values() {
            if let Some((name, _)) = member
                .protocols
                .iter()
                .find(|(name, _)| candidates.contains(name))
            {
                *votes.entry(name).or_default() += 1;
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for name in &candidates {
            let count = votes.get(name.as_str()).copied().unwrap_or(0);
            if best.is_none_or(|(_, most)| count > most) {
                best = Some((name, count));
            }
        }
        best.map(|(name, _)| name.to_owned())
    }

    /// JoinGroup. `new_member_id` is used if the request needs one.
    pub(crate) fn join(
        &mut self,
        now: Millis,
        request: JoinRequest,
        new_member_id: String,
        limits: Limits,
        fx: &mut Effects,
    ) {
        let reply_to = request.reply_to;
        let fail = |fx: &mut Effects, error, member_id: String| {
            fx.replies
                .push(GroupReply::join_error(reply_to, error, member_id));
        };
        if self.state == GroupState::Dead {
            return fail(fx, ErrorCode::CoordinatorNotAvailable, request.member_id);
        }
        if !self.supports(&request.protocol_type, &request.protocols) {
            return fail(fx, ErrorCode::InconsistentGroupProtocol, request.member_id);
        }
        if request.member_id.is_empty() {
            self.join_new(now, request, new_member_id, limits, fx);
        } else {
            self.join_known(now, request, limits, fx);
        }
    }

    fn join_new(
        &mut self,
        now: Millis,
        request: JoinRequest,
        member_id: String,
        limits: Limits,
        fx: &mut Effects,
    ) {
        if self.members.len() + self.pending.len() >= limits.max_size.max(0) as usize {
            fx.replies.push(GroupReply::join_error(
                request.reply_to,
                ErrorCode::GroupMaxSizeReached,
                String::new(),
            ));
            return;
        }
        if let Some(instance) = request.group_instance_id.clone() {
            if let Some(old) = self.static_member(&instance).map(str::to_owned) {
                return self.replace_static_member(now, &old, member_id, request, limits, fx);
            }
        } else if request.require_known_member_id {
            let deadline = now.plus(request.session_timeout_ms.max(0) as u64);
            self.pending.insert(member_id.clone(), deadline);
            fx.replies.push(GroupReply::join_error(
                request.reply_to,
                ErrorCode::MemberIdRequired,
                member_id,
            ));
            return;
        }
        self.add_member_and_rebalance(now, member_id, request, limits, fx);
    }

    /// A static member rejoined with no member id (a restart): the new id takes the old
    /// one's place and assignment, and the old one's parked join is fenced. A stable group
    /// whose member kept its protocols does not rebalance.
    fn replace_static_member(
        &mut self,
        now: Millis,
        old: &str,
        member_id: String,
        request: JoinRequest,
        limits: Limits,
        fx: &mut Effects,
    ) {
        let mut member = self.members.remove(old).expect("the static member exists");
        if let Some(reply_to) = member.join_reply.take() {
            fx.replies.push(GroupReply::join_error(
                reply_to,
                ErrorCode::FencedInstanceId,
                old.to_owned(),
            ));
        }
        if let Some(reply_to) = member.sync_reply.take() {
            fx.replies.push(GroupReply::sync_error(
                reply_to,
                ErrorCode::FencedInstanceId,
            ));
        }
        let unchanged = member.same_protocols(&request.protocols);
        member.heartbeat_deadline = now.plus(request.session_timeout_ms.max(0) as u64);
        self.members.insert(member_id.clone(), member);
        if self.leader.as_deref() == Some(old) {
            self.leader = Some(member_id.clone());
        }
        if self.state == GroupState::Stable && unchanged {
            let reply = self.join_result(request.reply_to, &member_id);
            fx.replies.push(reply);
            return;
        }
        self.members.remove(&member_id);
        self.add_member_and_rebalance(now, member_id, request, limits, fx);
    }

    fn join_known(&mut self, now: Millis, request: JoinRequest, limits: Limits, fx: &mut Effects) {
        let member_id = request.member_id.clone();
        let reply_to = request.reply_to;
        if self.pending.remove(&member_id).is_some() {
            return self.add_member_and_rebalance(now, member_id, request, limits, fx);
        }
        let error = if self.is_fenced(request.group_instance_id.as_deref(), &member_id) {
            Some(ErrorCode::FencedInstanceId)
        } else if !self.members.contains_key(&member_id)
            || matches!(self.state, GroupState::Empty | GroupState::Dead)
        {
            Some(ErrorCode::UnknownMemberId)
        } else {
            None
        };
        if let Some(error) = error {
            fx.replies
                .push(GroupReply::join_error(reply_to, error, member_id));
            return;
        }
        let member = self.members.get_mut(&member_id).expect("checked above");
        let unchanged = member.same_protocols(&request.protocols);
        member.protocols = request.protocols;
        member.session_timeout_ms = request.session_timeout_ms;
        member.rebalance_timeout_ms = request.rebalance_timeout_ms;
        member.heartbeat_deadline = now.plus(request.session_timeout_ms.max(0) as u64);
        let is_leader = self.leader.as_deref() == Some(member_id.as_str());
        match self.state {
            GroupState::PreparingRebalance => {
                member.join_reply = Some(reply_to);
                self.try_complete_join(now, fx);
            }
            GroupState::CompletingRebalance | GroupState::Stable
                if unchanged && !(self.state == GroupState::Stable && is_leader) =>
            {
                let reply = self.join_result(reply_to, &member_id);
                fx.replies.push(reply);
            }
            _ => {
                member.join_reply = Some(reply_to);
                self.prepare_rebalance(now, limits, fx);
            }
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        now: Millis,
        member_id: String,
        request: JoinRequest,
        limits: Limits,
        fx: &mut Effects,
    ) {
        if self.members.is_empty() {
            self.protocol_type = Some(request.protocol_type.clone());
        }
        let member = Member {
            group_instance_id: request.group_instance_id,
            client_id: request.client_id,
            client_host: request.client_host,
            session_timeout_ms: request.session_timeout_ms,
            rebalance_timeout_ms: request.rebalance_timeout_ms,
            protocols: request.protocols,
            assignment: Bytes::new(),
            join_reply: Some(request.reply_to),
            sync_reply: None,
            heartbeat_deadline: now.plus(request.session_timeout_ms.max(0) as u64),
        };
        if self.leader.is_none() {
            self.leader = Some(member_id.clone());
        }
        self.members.insert(member_id, member);
        if let Some(delay) = &mut self.initial_delay {
            delay.member_added = true;
        }
        if self.state == GroupState::PreparingRebalance {
            self.try_complete_join(now, fx);
        } else {
            self.prepare_rebalance(now, limits, fx);
        }
    }

    /// The answer to a member of the current generation.
    fn join_result(&self, reply_to: ReplyTo, member_id: &str) -> GroupReply {
        let leader = self.leader.clone().unwrap_or_default();
        let protocol = self.protocol.clone().unwrap_or_default();
        let members = if leader == member_id {
            self.members
                .iter()
                .map(|(id, member)| JoinedMember {
                    member_id: id.clone(),
                    group_instance_id: member.group_instance_id.clone(),
                    metadata: member.metadata(&protocol),
                })
                .collect()
        } else {
            Vec::new()
        };
        GroupReply::Join {
            reply_to,
            error: ErrorCode::None,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader,
            member_id: member_id.to_owned(),
            members,
        }
    }

    /// Kafka's `prepareRebalance` (when the state allows one): sync waiters learn of the
    /// rebalance, and the join phase starts, delayed by `group.initial.rebalance.delay.ms`
    /// when the group was empty.
    fn prepare_rebalance(&mut self, now: Millis, limits: Limits, fx: &mut Effects) {
        if !matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty
        ) {
            return;
        }
        if self.state == GroupState::CompletingRebalance {
            self.storing = None;
            for member in self.members.values_mut() {
                member.assignment = Bytes::new();
                if let Some(reply_to) = member.sync_reply.take() {
                    fx.replies.push(GroupReply::sync_error(
                        reply_to,
                        ErrorCode::RebalanceInProgress,
                    ));
                }
            }
        }
        let was_empty = self.state == GroupState::Empty;
        self.transition(GroupState::PreparingRebalance);
        let rebalance_timeout = self
            .members
            .values()
            .map(|member| member.rebalance_timeout_ms.max(0) as u64)
            .max()
            .unwrap_or(0);
        let delay_ms = limits.initial_rebalance_delay_ms.max(0) as u64;
        if was_empty && delay_ms > 0 {
            self.initial_delay = Some(InitialDelay {
                deadline: now.plus(delay_ms.min(rebalance_timeout)),
                delay_ms,
                remaining_ms: rebalance_timeout.saturating_sub(delay_ms),
                member_added: false,
            });
            self.join_deadline = None;
        } else {
            self.join_deadline = Some(now.plus(rebalance_timeout));
            self.try_complete_join(now, fx);
        }
    }

    /// Kafka's `DelayedJoin.tryComplete`: every member rejoined and no new member is pending.
    fn try_complete_join(&mut self, now: Millis, fx: &mut Effects) {
        if self.state == GroupState::PreparingRebalance
            && self.initial_delay.is_none()
            && self.pending.is_empty()
            && self
                .members
                .values()
                .all(|member| member.join_reply.is_some())
        {
            self.complete_join(now, fx);
        }
    }

    /// Kafka's `onCompleteJoin`: dynamic members that did not rejoin are dropped, the next
    /// generation starts, and every waiting member gets its answer (the leader with everyone's
    /// subscriptions).
    fn complete_join(&mut self, now: Millis, fx: &mut Effects) {
        let dropped: Vec<String> = self
            .members
            .iter()
            .filter(|(_, member)| member.join_reply.is_none() && member.group_instance_id.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in dropped {
            self.remove_member(&id, fx);
        }
        self.join_deadline = None;
        self.initial_delay = None;
        self.generation += 1;
        if self.members.is_empty() {
            self.protocol = None;
            self.leader = None;
            self.transition(GroupState::Empty);
            fx.store.push((self.stored(&BTreeMap::new()), None));
            return;
        }
        self.protocol = self.select_protocol();
        if self
            .leader
            .as_ref()
            .is_none_or(|leader| !self.members.contains_key(leader))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.transition(GroupState::CompletingRebalance);
        let waiting: Vec<(String, ReplyTo)> = self
            .members
            .iter_mut()
            .filter_map(|(id, member)| {
                member.heartbeat_deadline = now.plus(member.session_timeout_ms.max(0) as u64);
                member
                    .join_reply
                    .take()
                    .map(|reply_to| (id.clone(), reply_to))
            })
            .collect();
        for (id, reply_to) in waiting {
            let reply = self.join_result(reply_to, &id);
            fx.replies.push(reply);
        }
    }

    /// Drops a member, failing its parked answers, and moves leadership on.
    fn remove_member(&mut self, member_id: &str, fx: &mut Effects) {
        let Some(member) = self.members.remove(member_id) else {
            return;
        };
        if let Some(reply_to) = member.join_reply {
            fx.replies.push(GroupReply::join_error(
                reply_to,
                ErrorCode::UnknownMemberId,
                member_id.to_owned(),
            ));
        }
        if let Some(reply_to) = member.sync_reply {
            fx.replies
                .push(GroupReply::sync_error(reply_to, ErrorCode::UnknownMemberId));
        }
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
    }

    /// Kafka's `removeMemberAndUpdateGroup`: a member left or its session expired.
    fn remove_member_and_update(
        &mut self,
        now: Millis,
        member_id: &str,
        limits: Limits,
        fx: &mut Effects,
    ) {
        self.remove_member(member_id, fx);
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now, limits, fx)
            }
            GroupState::PreparingRebalance => self.try_complete_join(now, fx),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// The checks every request of a member of the current generation passes (Heartbeat,
    /// SyncGroup, OffsetCommit), in Kafka's order.
    fn check_member(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ErrorCode> {
        if self.state == GroupState::Dead {
            Err(ErrorCode::CoordinatorNotAvailable)
        } else if self.is_fenced(group_instance_id, member_id) {
            Err(ErrorCode::FencedInstanceId)
        } else if !self.members.contains_key(member_id) {
            Err(ErrorCode::UnknownMemberId)
        } else if generation != self.generation {
            Err(ErrorCode::IllegalGeneration)
        } else {
            Ok(())
        }
    }

    fn refresh(&mut self, now: Millis, member_id: &str) {
        if let Some(member) = self.members.get_mut(member_id) {
            member.heartbeat_deadline = now.plus(member.session_timeout_ms.max(0) as u64);
        }
    }

    /// SyncGroup: the leader's assignment is stored first, then handed out.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sync(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
        protocol: (Option<&str>, Option<&str>),
        assignments: BTreeMap<String, Bytes>,
        fx: &mut Effects,
    ) {
        let (protocol_type, protocol_name) = protocol;
        let inconsistent = protocol_type
            .is_some_and(|kind| self.protocol_type.as_deref() != Some(kind))
            || protocol_name.is_some_and(|name| self.protocol.as_deref() != Some(name));
        let checked = self
            .check_member(member_id, group_instance_id, generation)
            .and_then(|()| {
                (!inconsistent)
                    .then_some(())
                    .ok_or(ErrorCode::InconsistentGroupProtocol)
            });
        if let Err(error) = checked {
            fx.replies.push(GroupReply::sync_error(reply_to, error));
            return;
        }
        self.refresh(now, member_id);
        match self.state {
            GroupState::Empty | GroupState::Dead => fx
                .replies
                .push(GroupReply::sync_error(reply_to, ErrorCode::UnknownMemberId)),
            GroupState::PreparingRebalance => fx.replies.push(GroupReply::sync_error(
                reply_to,
                ErrorCode::RebalanceInProgress,
            )),
            GroupState::CompletingRebalance => {
                self.members.get_mut(member_id).expect("checked").sync_reply = Some(reply_to);
                if self.leader.as_deref() == Some(member_id) && self.storing.is_none() {
                    fx.store
                        .push((self.stored(&assignments), Some(self.generation)));
                    self.storing = Some((self.generation, assignments));
                }
            }
            GroupState::Stable => fx.replies.push(GroupReply::Sync {
                reply_to,
                error: ErrorCode::None,
                protocol_type: self.protocol_type.clone(),
                protocol: self.protocol.clone(),
                assignment: self.members[member_id].assignment.clone(),
            }),
        }
    }

    /// The leader's assignment for `generation` was stored (or not): hand it out and become
    /// Stable, or fail the waiting syncs and rebalance (Kafka's `resetAndPropagateAssignmentError`).
    pub(crate) fn on_stored(
        &mut self,
        now: Millis,
        generation: i32,
        outcome: Result<(), ErrorCode>,
        limits: Limits,
        fx: &mut Effects,
    ) {
        if self.state != GroupState::CompletingRebalance
            || self.storing.as_ref().map(|(stored, _)| *stored) != Some(generation)
        {
            return;
        }
        let (_, assignments) = self.storing.take().expect("checked");
        match outcome {
            Ok(()) => {
                for (id, member) in &mut self.members {
                    member.assignment = assignments.get(id).cloned().unwrap_or_default();
                }
                self.transition(GroupState::Stable);
                let waiting: Vec<(String, ReplyTo)> = self
                    .members
                    .iter_mut()
                    .filter_map(|(id, member)| member.sync_reply.take().map(|r| (id.clone(), r)))
                    .collect();
                for (id, reply_to) in waiting {
                    fx.replies.push(GroupReply::Sync {
                        reply_to,
                        error: ErrorCode::None,
                        protocol_type: self.protocol_type.clone(),
                        protocol: self.protocol.clone(),
                        assignment: self.members[&id].assignment.clone(),
                    });
                }
            }
            Err(error) => {
                for member in self.members.values_mut() {
                    if let Some(reply_to) = member.sync_reply.take() {
                        fx.replies.push(GroupReply::sync_error(reply_to, error));
                    }
                }
                self.prepare_rebalance(now, limits, fx);
            }
        }
    }

    /// Heartbeat: the error to answer.
    pub(crate) fn heartbeat(
        &mut self,
        now: Millis,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
    ) -> ErrorCode {
        if let Err(error) = self.check_member(member_id, group_instance_id, generation) {
            return error;
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => ErrorCode::UnknownMemberId,
            GroupState::PreparingRebalance => {
                self.refresh(now, member_id);
                ErrorCode::RebalanceInProgress
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.refresh(now, member_id);
                ErrorCode::None
            }
        }
    }

    /// LeaveGroup of one member (by id, or by instance id when the id is empty).
    pub(crate) fn leave(
        &mut self,
        now: Millis,
        member_id: &str,
        group_instance_id: Option<&str>,
        limits: Limits,
        fx: &mut Effects,
    ) -> ErrorCode {
        if self.state == GroupState::Dead {
            return ErrorCode::CoordinatorNotAvailable;
        }
        let id = match (member_id.is_empty(), group_instance_id) {
            (true, Some(instance)) => match self.static_member(instance) {
                Some(id) => id.to_owned(),
                None => return ErrorCode::UnknownMemberId,
            },
            _ => member_id.to_owned(),
        };
        if self.pending.remove(&id).is_some() {
            self.try_complete_join(now, fx);
            return ErrorCode::None;
        }
        if self.is_fenced(group_instance_id, &id) {
            return ErrorCode::FencedInstanceId;
        }
        if !self.members.contains_key(&id) {
            return ErrorCode::UnknownMemberId;
        }
        self.remove_member_and_update(now, &id, limits, fx);
        ErrorCode::None
    }

    /// Kafka's OffsetCommit checks: a commit with generation -1 to an empty group is a
    /// simple (unmanaged) consumer's; otherwise the member must belong to the current
    /// generation, and not while the assignment is being decided.
    pub(crate) fn check_commit(
        &mut self,
        now: Millis,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ErrorCode> {
        if self.state == GroupState::Dead {
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        if self.is_fenced(group_instance_id, member_id) {
            return Err(ErrorCode::FencedInstanceId);
        }
        if generation < 0 && self.state == GroupState::Empty {
            return Ok(());
        }
        if self.state == GroupState::CompletingRebalance {
            return Err(ErrorCode::RebalanceInProgress);
        }
        self.check_member(member_id, group_instance_id, generation)?;
        self.refresh(now, member_id);
        Ok(())
    }

    /// Expires sessions, pending members and the join phase's deadlines due at `now`.
    pub(crate) fn on_tick(&mut self, now: Millis, limits: Limits, fx: &mut Effects) {
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, member)| {
                member.join_reply.is_none()
                    && member.sync_reply.is_none()
                    && member.heartbeat_deadline <= now
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            tracing::debug!(group = %self.id, member = %id, "session expired");
            self.remove_member_and_update(now, &id, limits, fx);
        }
        let before = self.pending.len();
        self.pending.retain(|_, deadline| *deadline > now);
        if self.pending.len() != before {
            self.try_complete_join(now, fx);
        }
        if let Some(mut delay) = self.initial_delay {
            if delay.deadline <= now {
                if delay.member_added && delay.remaining_ms > 0 {
                    let next = delay.delay_ms.min(delay.remaining_ms);
                    delay.deadline = now.plus(next);
                    delay.remaining_ms -= next;
                    delay.member_added = false;
                    self.initial_delay = Some(delay);
                } else {
                    self.initial_delay = None;
                    self.complete_join(now, fx);
                }
            }
        }
        if self.join_deadline.is_some_and(|deadline| deadline <= now)
            && self.state == GroupState::PreparingRebalance
        {
            self.complete_join(now, fx);
        }
    }

    /// The earliest time [`on_tick`](Self::on_tick) has something to do.
    pub(crate) fn next_deadline(&self) -> Option<Millis> {
        let sessions = self
            .members
            .values()
            .filter(|member| member.join_reply.is_none() && member.sync_reply.is_none())
            .map(|member| member.heartbeat_deadline);
        sessions
            .chain(self.pending.values().copied())
            .chain(self.join_deadline)
            .chain(self.initial_delay.map(|delay| delay.deadline))
            .min()
    }

    /// Marks the group gone (deleted, or its partition moved away) and fails what waits.
    pub(crate) fn unload(&mut self, error: ErrorCode, fx: &mut Effects) {
        for (id, member) in &mut self.members {
            if let Some(reply_to) = member.join_reply.take() {
                fx.replies
                    .push(GroupReply::join_error(reply_to, error, id.clone()));
            }
            if let Some(reply_to) = member.sync_reply.take() {
                fx.replies.push(GroupReply::sync_error(reply_to, error));
            }
        }
        self.transition(GroupState::Dead);
    }

    /// The record storing this generation, with `assignments` (empty: none yet).
    fn stored(&self, assignments: &BTreeMap<String, Bytes>) -> StoredGroup {
        let protocol = self.protocol.clone().unwrap_or_default();
        StoredGroup {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            state_timestamp: -1,
            members: self
                .members
                .iter()
                .map(|(id, member)| StoredMember {
                    member_id: id.clone(),
                    group_instance_id: member.group_instance_id.clone(),
                    client_id: member.client_id.clone(),
                    client_host: member.client_host.clone(),
                    rebalance_timeout_ms: member.rebalance_timeout_ms,
                    session_timeout_ms: member.session_timeout_ms,
                    subscription: member.metadata(&protocol),
                    assignment: assignments.get(id).cloned().unwrap_or_default(),
                })
                .collect(),
        }
    }

    /// Whether a connection's parked answers are gone with it: drop them.
    pub(crate) fn drop_connection(&mut self, connection: crate::broker::ConnectionId) {
        for member in self.members.values_mut() {
            if member
                .join_reply
                .is_some_and(|r| r.connection == connection)
            {
                member.join_reply = None;
            }
            if member
                .sync_reply
                .is_some_and(|r| r.connection == connection)
            {
                member.sync_reply = None;
            }
        }
    }

    /// The state invariants: members exactly when not Empty or Dead; a leader among them;
    /// answers parked only in the phases that park them.
    pub(crate) fn check_invariants(&self) {
        match self.state {
            GroupState::Empty => {
                assert!(self.members.is_empty(), "{}: empty with members", self.id)
            }
            GroupState::Stable | GroupState::CompletingRebalance => {
                assert!(
                    !self.members.is_empty(),
                    "{}: {:?} without members",
                    self.id,
                    self.state
                );
            }
            GroupState::PreparingRebalance | GroupState::Dead => {}
        }
        if let Some(leader) = &self.leader {
            assert!(
                self.members.contains_key(leader),
                "{}: leader {leader} is not a member",
                self.id
            );
        } else {
            assert!(
                self.members.is_empty(),
                "{}: members but no leader",
                self.id
            );
        }
        for member in self.members.values() {
            if member.join_reply.is_some() {
                assert_eq!(
                    self.state,
                    GroupState::PreparingRebalance,
                    "{}: a join parked outside the join phase",
                    self.id
                );
            }
            if member.sync_reply.is_some() {
                assert_eq!(
                    self.state,
                    GroupState::CompletingRebalance,
                    "{}: a sync parked outside the sync phase",
                    self.id
                );
            }
        }
        assert!(self.generation >= 0, "{}: negative generation", self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "illegal transition Empty -> Stable")]
    fn an_illegal_transition_is_asserted() {
        let mut group = Group::new("g".to_owned());
        group.transition(GroupState::Stable);
    }

    #[test]
    fn the_transition_table_is_kafkas() {
        use GroupState::{CompletingRebalance, Dead, Empty, PreparingRebalance, Stable};
        let all = [Empty, PreparingRebalance, CompletingRebalance, Stable, Dead];
        let legal: Vec<(GroupState, GroupState)> = all
            .iter()
            .flat_map(|to| to.valid_previous().iter().map(move |from| (*from, *to)))
            .collect();
        assert_eq!(legal.len(), 11);
        assert!(legal.contains(&(Stable, PreparingRebalance)));
        assert!(!legal.contains(&(Empty, CompletingRebalance)));
        assert!(!legal.contains(&(Dead, Empty)), "a dead group stays dead");
    }
}
