//! A member of a consumer group, over its own connection to the group's coordinator: finds the
//! coordinator, joins (through MEMBER_ID_REQUIRED), assigns as leader with the assignor the group chose,
//! syncs, heartbeats, fetches and commits offsets, and leaves. Every decision (what to send, what
//! an answer means, when a heartbeat is due, whether a join or commit is retried and after how
//! long, what the leader assigns, which partitions move) is the sans-IO core's,
//! [`MemberCore`]; this shell does the calls it asks for, reads the clock and runs the
//! application's [`RebalanceListener`]. Like kafka-python's
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

use std::collections::BTreeMap;
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    JoinGroupResponse, OffsetCommitResponse, RequestKind, ResponseKind,
};

use crate::client::consumer::member::{
    Failure, JoinAnswer, JoinNext, MemberCore, PendingCommit, Reaction, Revocation, SyncAnswer,
    OFFSET_COMMIT_VERSION,
};
use crate::config::ConsumerConfig;
use crate::protocol::ErrorCode;
use crate::runtime::admin::metadata;
use crate::runtime::client::{ClientConnection, ClientError};
use crate::types::TopicPartition;

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

impl CommitOutcome {
    /// How `pending` ended.
    fn of(pending: PendingCommit, result: Result<(), ClientError>) -> CommitOutcome {
        CommitOutcome {
            offsets: pending.offsets,
            generation: pending.generation,
            result,
        }
    }
}

/// A group member: the core's decisions ([`MemberCore`]) carried out over a connection to the
/// group's coordinator.
#[derive(Debug)]
pub struct GroupMember {
    core: MemberCore,
    client_id: String,
    /// Where the core's time starts: the member's creation.
    origin: tokio::time::Instant,
    coordinator: Option<ClientConnection>,
    /// Asynchronous commits whose answer was read, for `take_commit_outcomes`.
    commit_outcomes: Vec<CommitOutcome>,
}

fn kafka(error: ErrorCode, what: &str) -> ClientError {
    ClientError::Kafka {
        error,
        message: what.to_owned(),
    }
}

/// What a failed call means for a retry decision.
fn failure(error: &ClientError) -> Failure {
    match error {
        ClientError::Kafka { error, .. } => Failure::Refused(*error),
        ClientError::Io(_)
        | ClientError::Connection(_)
        | ClientError::Timeout(_)
        | ClientError::Codec(_)
        | ClientError::Protocol(_)
        | ClientError::Unsupported(_) => Failure::NoAnswer,
    }
}

fn another_api(api: &str) -> ClientError {
    ClientError::Protocol(format!("{api} answered with another API"))
}

impl GroupMember {
    /// A member of `config.group_id` subscribed to `topics`.
    pub fn new(config: &ConsumerConfig, topics: Vec<String>) -> GroupMember {
        GroupMember {
            core: MemberCore::new(config, topics),
            client_id: config.client_id.clone(),
            origin: tokio::time::Instant::now(),
            coordinator: None,
            commit_outcomes: Vec::new(),
        }
    }

    /// The core's time: since the member was created.
    fn now(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(self.origin)
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
                self.core.note_offset_epoch(partition, epoch);
            }
        }
    }

    /// The partitions the application holds (assigned and not yet revoked or lost).
    pub fn held(&self) -> &[TopicPartition] {
        self.core.held()
    }

    /// The generation the member belongs to (-1: none yet).
    pub fn generation(&self) -> i32 {
        self.core.generation()
    }

    /// Whether the member follows the cooperative rebalance protocol (KIP-429).
    pub fn is_cooperative(&self) -> bool {
        self.core.is_cooperative()
    }

    /// Whether the member must rejoin before its assignment counts.
    pub fn needs_rejoin(&self) -> bool {
        self.core.needs_rejoin()
    }

    /// How long until the next heartbeat is due.
    pub fn until_heartbeat(&self) -> Duration {
        self.core.until_heartbeat(self.now())
    }

    async fn call(&mut self, version: i16, body: RequestKind) -> Result<ResponseKind, ClientError> {
        // Answers come in order: the asynchronous commits' are read first.
        self.finish_commits().await;
        let timeout = self.core.call_timeout(&body);
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
        for pending in self.core.commits_lost() {
            self.commit_outcomes.push(CommitOutcome::of(
                pending,
                Err(ClientError::Protocol(
                    "the coordinator's connection was lost before the commit was answered".into(),
                )),
            ));
        }
    }

    /// Carries out what the core's reaction to an error asks; `Err` when it ends the call.
    fn carry_out(
        &mut self,
        reaction: Reaction,
        error: ErrorCode,
        what: &str,
    ) -> Result<(), ClientError> {
        match reaction {
            Reaction::Proceed => Ok(()),
            Reaction::Rediscover => {
                self.drop_coordinator();
                Ok(())
            }
            Reaction::Fatal => Err(kafka(error, what)),
        }
    }

    /// The coordinator's connection, found through a bootstrap server if needed.
    async fn coordinator(&mut self) -> Result<&mut ClientConnection, ClientError> {
        if self.coordinator.is_none() {
            let address = self.core.next_bootstrap();
            let mut bootstrap = ClientConnection::connect(&address, &self.client_id).await?;
            let request = self.core.find_coordinator_request();
            let timeout = self.core.request_timeout();
            let call = bootstrap.call_at_version(3, RequestKind::FindCoordinator(request));
            let ResponseKind::FindCoordinator(found) =
                tokio::time::timeout(timeout, call)
                    .await
                    .map_err(|_| ClientError::Timeout(timeout))??
            else {
                return Err(another_api("FindCoordinator"));
            };
            let address = MemberCore::on_find_coordinator(&found)
                .map_err(|error| kafka(error, "FindCoordinator"))?;
            self.coordinator = Some(ClientConnection::connect(&address, &self.client_id).await?);
        }
        Ok(self.coordinator.as_mut().expect("just set"))
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
        if !self.core.needs_rejoin() {
            return Ok(None);
        }
        match self.core.join_prepare() {
            None => {}
            Some(Revocation::Lost(lost)) => listener.on_partitions_lost(self, &lost).await,
            Some(Revocation::Revoked(revoked)) => {
                listener.on_partitions_revoked(self, &revoked).await;
                self.core.release(&revoked);
            }
        }
        self.core.start_join();
        let mut last = None;
        while self.core.join_attempt() {
            match self.join_and_sync().await {
                Ok(Some((generation, assignment))) => {
                    self.complete_join(listener, &assignment).await;
                    return Ok(Some((generation, assignment)));
                }
                Ok(None) => {}
                Err(error) => match self.core.join_failed(failure(&error)) {
                    JoinNext::GiveUp => return Err(error),
                    JoinNext::RetryAfter(backoff) => {
                        self.drop_coordinator();
                        last = Some(error);
                        tokio::time::sleep(backoff).await;
                    }
                },
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Protocol("the join did not settle".into())))
    }

    /// After a join: the partitions held and no longer assigned are revoked (cooperative
    /// protocol), then those newly assigned are announced.
    async fn complete_join<L: RebalanceListener>(
        &mut self,
        listener: &mut L,
        assignment: &[TopicPartition],
    ) {
        let revoked = self.core.moved_away(assignment);
        if !revoked.is_empty() {
            listener.on_partitions_revoked(self, &revoked).await;
            self.core.release(&revoked);
        }
        let added = self.core.take_assigned(assignment);
        listener.on_partitions_assigned(self, &added).await;
    }

    /// One JoinGroup and, if it succeeds, one SyncGroup; `Ok(None)` when it must be tried
    /// again (a retriable error, already acted upon).
    async fn join_and_sync(&mut self) -> Result<Option<(i32, Vec<TopicPartition>)>, ClientError> {
        let body = self.core.join_request();
        let ResponseKind::JoinGroup(joined) = self.call(5, RequestKind::JoinGroup(body)).await?
        else {
            return Err(another_api("JoinGroup"));
        };
        let (generation, leader) = match self.core.on_join_answer(&joined) {
            JoinAnswer::Joined { generation, leader } => (generation, leader),
            JoinAnswer::Fatal(error) => return Err(kafka(error, "JoinGroup")),
            JoinAnswer::Retry {
                backoff,
                rediscover,
            } => {
                if rediscover {
                    self.drop_coordinator();
                }
                if let Some(backoff) = backoff {
                    tokio::time::sleep(backoff).await;
                }
                return Ok(None);
            }
        };
        let assignments = if leader {
            self.assign(&joined).await?
        } else {
            Vec::new()
        };
        let body = self.core.sync_request(generation, assignments);
        let ResponseKind::SyncGroup(synced) = self.call(3, RequestKind::SyncGroup(body)).await?
        else {
            return Err(another_api("SyncGroup"));
        };
        match self.core.on_sync_answer(self.now(), generation, &synced) {
            SyncAnswer::Synced {
                generation,
                assignment,
            } => Ok(Some((generation, assignment))),
            SyncAnswer::Retry { rediscover } => {
                if rediscover {
                    self.drop_coordinator();
                }
                Ok(None)
            }
            SyncAnswer::Fatal(error) => Err(kafka(error, "SyncGroup")),
            SyncAnswer::Undecodable => Err(ClientError::Protocol(
                "an assignment that does not decode".into(),
            )),
        }
    }

    /// The leader's part: every member's partitions, dealt by the assignor the group chose
    /// over the partition counts the coordinator's broker describes.
    async fn assign(
        &mut self,
        joined: &JoinGroupResponse,
    ) -> Result<Vec<SyncGroupRequestAssignment>, ClientError> {
        let plan = self
            .core
            .assign_plan(joined)
            .map_err(ClientError::Protocol)?;
        let timeout = self.core.request_timeout();
        let connection = self.coordinator().await?;
        let described = metadata(connection, Some(plan.topics()), timeout).await?;
        Ok(MemberCore::assignments(&plan, &described))
    }

    /// Heartbeats if one is due while the member belongs to a live generation (a pending
    /// rejoin included); a rebalance or fencing marks the member for rejoining.
    pub async fn heartbeat_if_due(&mut self) -> Result<(), ClientError> {
        self.read_ready_commits();
        let Some(body) = self.core.heartbeat(self.now()) else {
            return Ok(());
        };
        let ResponseKind::Heartbeat(answer) = self.call(3, RequestKind::Heartbeat(body)).await?
        else {
            return Err(another_api("Heartbeat"));
        };
        match ErrorCode::from_code(answer.error_code) {
            ErrorCode::None => Ok(()),
            error => {
                let reaction = self.core.react(error);
                self.carry_out(reaction, error, "Heartbeat")
            }
        }
    }

    /// The committed offsets of `partitions` (absent: none committed), each with the leader
    /// epoch its commit named, if any.
    pub async fn committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, (i64, Option<i32>)>, ClientError> {
        let body = self.core.offset_fetch_request(partitions);
        let ResponseKind::OffsetFetch(fetched) =
            self.call(5, RequestKind::OffsetFetch(body)).await?
        else {
            return Err(another_api("OffsetFetch"));
        };
        match self.core.on_offset_fetch(&fetched) {
            Ok(offsets) => Ok(offsets),
            Err((error, reaction)) => {
                self.carry_out(reaction, error, "OffsetFetch")?;
                Err(kafka(error, "OffsetFetch"))
            }
        }
    }

    /// Commits `offsets` in the member's generation (Kafka's `commitSync`), after the
    /// asynchronous commits still in flight: `Err(Kafka)` with the first partition's error
    /// when the coordinator refused (a fenced generation among them). As Kafka's, a retriable
    /// failure ([`commit_retriable`](crate::client::consumer::member::commit_retriable)) is
    /// tried again every `retry.backoff.ms`, against the coordinator found again, until
    /// `default.api.timeout.ms` has passed; the last failure is the answer then.
    pub async fn commit(
        &mut self,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<(), ClientError> {
        let deadline = self.core.commit_deadline(self.now());
        loop {
            let outcome = self.commit_once(offsets).await;
            let retry = match &outcome {
                Err(error) => self.core.retry_commit(failure(error), self.now(), deadline),
                Ok(()) => None,
            };
            match retry {
                Some(backoff) => {
                    if let Err(error) = &outcome {
                        tracing::debug!(%error, "OffsetCommit failed retriably: retrying");
                    }
                    tokio::time::sleep(backoff).await;
                }
                None => return outcome,
            }
        }
    }

    /// One OffsetCommit of `offsets`: sent, answered, judged.
    async fn commit_once(
        &mut self,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<(), ClientError> {
        let body = self.core.commit_request(offsets);
        let ResponseKind::OffsetCommit(answer) = self
            .call(OFFSET_COMMIT_VERSION, RequestKind::OffsetCommit(body))
            .await?
        else {
            return Err(another_api("OffsetCommit"));
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
        let body = RequestKind::OffsetCommit(self.core.commit_request(&offsets));
        let sent = match self.coordinator().await {
            Ok(connection) => {
                connection
                    .send_at_version(OFFSET_COMMIT_VERSION, &body)
                    .await
            }
            Err(error) => Err(error),
        };
        match sent {
            Ok(()) => self.core.commit_sent(self.now(), offsets),
            Err(error) => {
                let unsent = self.core.commit_unsent(offsets);
                self.drop_coordinator();
                self.commit_outcomes
                    .push(CommitOutcome::of(unsent, Err(error)));
            }
        }
    }

    /// How many asynchronous commits await their answer.
    pub fn commits_in_flight(&self) -> usize {
        self.core.commits_in_flight()
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
        while let Some(deadline) = self.core.oldest_commit_deadline() {
            let left = deadline.saturating_sub(self.now());
            let Some(connection) = self.coordinator.as_mut() else {
                self.drop_coordinator();
                return;
            };
            if let Ok(answer) = tokio::time::timeout(left, connection.receive()).await {
                self.settle_commit(answer);
                continue;
            }
            if let Some(pending) = self.core.settle_commit() {
                let timeout = ClientError::Timeout(self.core.request_timeout());
                self.commit_outcomes
                    .push(CommitOutcome::of(pending, Err(timeout)));
            }
            self.drop_coordinator();
        }
    }

    /// Reads the commit answers already on the connection (one poll each, without waiting),
    /// and gives up the connection when the oldest is overdue.
    fn read_ready_commits(&mut self) {
        while self.core.commits_in_flight() > 0 {
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
        if self.core.commit_overdue(self.now()) {
            self.drop_coordinator();
        }
    }

    /// The oldest asynchronous commit's answer.
    fn settle_commit(&mut self, answer: Result<ResponseKind, ClientError>) {
        let Some(pending) = self.core.settle_commit() else {
            return;
        };
        let result = match answer {
            Ok(ResponseKind::OffsetCommit(answer)) => self.commit_answered(&answer),
            Ok(_) => Err(another_api("OffsetCommit")),
            Err(error) => Err(error),
        };
        let lost = result
            .as_ref()
            .is_err_and(|error| !matches!(error, ClientError::Kafka { .. }));
        self.commit_outcomes
            .push(CommitOutcome::of(pending, result));
        if lost {
            self.drop_coordinator();
        }
    }

    /// What an OffsetCommit answer means: the first partition's error, acted upon.
    fn commit_answered(&mut self, answer: &OffsetCommitResponse) -> Result<(), ClientError> {
        match self.core.on_commit_answer(answer) {
            Ok(()) => Ok(()),
            Err((error, reaction)) => {
                self.carry_out(reaction, error, "OffsetCommit")?;
                Err(kafka(error, "OffsetCommit"))
            }
        }
    }

    /// Leaves the group (best effort), as Kafka's `close`: the partitions held are revoked
    /// (lost, if the generation was), the asynchronous commits in flight are awaited, then
    /// LeaveGroup is sent.
    pub async fn leave<L: RebalanceListener>(&mut self, listener: &mut L) {
        match self.core.leave_revocation() {
            None => {}
            Some(Revocation::Revoked(held)) => listener.on_partitions_revoked(self, &held).await,
            Some(Revocation::Lost(held)) => listener.on_partitions_lost(self, &held).await,
        }
        self.finish_commits().await;
        let Some(body) = self.core.leave_request() else {
            return;
        };
        let _ = self.call(1, RequestKind::LeaveGroup(body)).await;
        self.core.left();
    }
}

#[cfg(all(test, not(madsim)))]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_a_refusal_and_every_other_failure_is_no_answer() {
        let refused = kafka(ErrorCode::NotCoordinator, "OffsetCommit");
        assert_eq!(
            failure(&refused),
            Failure::Refused(ErrorCode::NotCoordinator)
        );
        assert_eq!(
            failure(&ClientError::Timeout(Duration::from_secs(30))),
            Failure::NoAnswer
        );
        assert_eq!(
            failure(&ClientError::Io(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused
            ))),
            Failure::NoAnswer
        );
        // What the client reports when the broker closes the connection under a request.
        assert_eq!(
            failure(&ClientError::Protocol(
                "connection closed by the broker".into()
            )),
            Failure::NoAnswer
        );
    }
}
