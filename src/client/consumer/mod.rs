//! The consumer as a state machine (the poll loop of Kafka's `KafkaConsumer` with its `Fetcher`
//! and `OffsetFetcher`), driven by the async shell in `runtime::consumer`.
//!
//! The core owns the policy: the positions ([`SubscriptionState`]), which partitions need a
//! reset (`auto.offset.reset` earliest/latest via ListOffsets at timestamp -2/-1), the metadata
//! cache that says which broker leads each assigned partition, one connection per broker with at
//! most one fetch or ListOffsets in flight on each (and the metadata request beside it), request
//! timeouts (`request.timeout.ms`, plus the fetch's own `max_wait_ms`), reconnect backoffs,
//! retry pauses (`retry.backoff.ms`), and the fetch's
//! `max_wait_ms = min(fetch.max.wait.ms, poll deadline - now)`. Fetches and resets go to each
//! partition's leader; a partition whose leader is unknown waits for fresh metadata, which
//! NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION and a lost connection
//! also ask for. The shell owns the connections and the clock: it feeds [`ConsumerInput`]s and
//! executes [`ConsumerOutput`]s.
//!
//! Invariants it owns:
//! * a record is never skipped or delivered twice by the core: each partition of a Fetch
//!   response is taken on its own, up to its first bad batch, and its position moves exactly
//!   past what was delivered ([`fetcher`]); a response only counts for a partition whose
//!   position is still the one fetched from (a `seek` or reset in between voids it);
//! * an active poll never holds records or partition errors: it completes as soon as it has
//!   some, or at its deadline;
//! * a poll and an application `ListOffsets` never overlap (the shell drives one at a time; a
//!   new one abandons the old, whose results wait for the next poll or are dropped).

mod buffer;
pub(crate) mod fetcher;
pub mod member;
mod subscription;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::offset_for_leader_epoch_request::OffsetForLeaderPartition;
use kafka_protocol::messages::{
    FetchResponse, ListOffsetsResponse, OffsetForLeaderEpochResponse, RequestKind, ResponseKind,
};

use self::buffer::RecordBuffer;
use crate::client::connections::Connections;
pub use crate::client::connections::{NodeId, BOOTSTRAP};
use crate::client::metadata::MetadataCache;

pub use self::fetcher::{list_offsets_outcomes, list_offsets_request, ConsumerRecord};
pub use self::subscription::{ResetReason, SubscriptionState};
use crate::config::{AutoOffsetReset, ConsumerConfig};
use crate::protocol::requests::offset_for_leader_epoch_request;
use crate::protocol::ErrorCode;
use crate::types::{Millis, TopicPartition};

/// What one poll returned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Polled {
    /// Records, per partition in offset order.
    pub records: Vec<ConsumerRecord>,
    /// Positions set by `auto.offset.reset` during this poll, in order.
    pub resets: Vec<PositionReset>,
    /// Partitions that could not deliver.
    pub errors: Vec<PartitionError>,
    /// Fetch answers that broke the request's contract (size limits, waiting): the broker's
    /// bug, described; their records were still taken.
    pub breaches: Vec<String>,
}

impl Polled {
    /// Whether nothing happened.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
            && self.resets.is_empty()
            && self.errors.is_empty()
            && self.breaches.is_empty()
    }
}

/// A position set by `auto.offset.reset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PositionReset {
    /// Which partition.
    pub partition: TopicPartition,
    /// Its new position.
    pub offset: i64,
    /// Why it was reset.
    pub reason: ResetReason,
}

/// A partition that could not deliver: nothing at or past `position` was delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionError {
    /// Which partition.
    pub partition: TopicPartition,
    /// CORRUPT_MESSAGE for a batch that fails its CRC or does not decode on the client, or the
    /// broker's partition error.
    pub error: ErrorCode,
    /// The position at which it failed; the partition stays there.
    pub position: i64,
    /// For a bad batch whose header parsed: its last offset, so a caller may seek past it.
    pub batch_last_offset: Option<i64>,
    /// Details.
    pub message: String,
}

/// Why a poll failed (network trouble is not an error: the poll retries until its deadline).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConsumerError {
    /// `auto.offset.reset=none` and a partition has no position.
    #[error("no offset for {0} and auto.offset.reset=none")]
    NoOffsetForPartition(TopicPartition),
}

/// Why an application ListOffsets failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListOffsetsError {
    /// The broker answered a partition with an error.
    #[error("ListOffsets {partition}: {error:?}")]
    Partition {
        /// Which partition.
        partition: TopicPartition,
        /// The Kafka error.
        error: ErrorCode,
    },
    /// No answer within `request.timeout.ms`.
    #[error("ListOffsets timed out after {timeout_ms} ms")]
    TimedOut {
        /// The timeout.
        timeout_ms: u64,
    },
    /// Connecting failed or the connection broke.
    #[error("ListOffsets failed: {reason}")]
    ConnectionFailed {
        /// Why.
        reason: String,
    },
}

/// Inputs from the shell.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one input at a time, moved once into `handle`: a box would only add an allocation"
)]
pub enum ConsumerInput {
    /// The application replaces the assignment.
    Assign {
        /// The new assignment.
        partitions: Vec<TopicPartition>,
    },
    /// The application sets the next offset of an assigned partition.
    Seek {
        /// Which partition.
        partition: TopicPartition,
        /// Its next offset.
        offset: i64,
        /// The leader epoch of the record before it, if known (a committed offset's, KIP-320):
        /// nothing is fetched from a leader of an older epoch.
        leader_epoch: Option<i32>,
    },
    /// The application polls until `deadline`; answered by [`ConsumerOutput::Polled`].
    Poll {
        /// When the poll returns at the latest.
        deadline: Millis,
    },
    /// The application asks for offsets; answered by [`ConsumerOutput::ListedOffsets`].
    ListOffsets {
        /// Which partitions.
        partitions: Vec<TopicPartition>,
        /// -1 latest, -2 earliest.
        timestamp: i64,
    },
    /// The connection the core asked for is up.
    Connected {
        /// To which node.
        node: NodeId,
        /// The `host:port` it reached.
        address: String,
    },
    /// Connecting failed.
    ConnectFailed {
        /// To which node.
        node: NodeId,
        /// Why.
        reason: String,
    },
    /// The connection broke.
    Disconnected {
        /// Which.
        node: NodeId,
        /// Why.
        reason: String,
    },
    /// The next response of a connection, in request order.
    Response {
        /// Which connection.
        node: NodeId,
        /// The response.
        response: ResponseKind,
    },
    /// A deadline passed.
    Tick,
}

/// Outputs to the shell.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "a handful per input, moved once to the shell: a box would only add an allocation"
)]
pub enum ConsumerOutput {
    /// Open a connection to `node`.
    Connect {
        /// Which node.
        node: NodeId,
        /// Its `host:port`; `None` for [`BOOTSTRAP`]: one of `bootstrap.servers`, the shell's
        /// choice.
        address: Option<String>,
    },
    /// The bootstrap connection turned out to be `node`'s: key it by `node` from now on.
    Identified {
        /// The broker at the bootstrap server's address.
        node: NodeId,
    },
    /// Close a connection (request timeout, protocol error). The core has already treated
    /// what was in flight on it as lost: do not feed [`ConsumerInput::Disconnected`] back.
    Disconnect {
        /// Which.
        node: NodeId,
        /// Why.
        reason: String,
    },
    /// Write this request on `node`'s connection; feed its response back as
    /// [`ConsumerInput::Response`].
    Request {
        /// Which connection.
        node: NodeId,
        /// The request.
        body: RequestKind,
        /// How long the core waits for the response (it times out through `next_deadline`).
        timeout_ms: u64,
    },
    /// The poll finished.
    Polled(Result<Polled, ConsumerError>),
    /// The application's ListOffsets finished.
    ListedOffsets(Result<Vec<(TopicPartition, i64)>, ListOffsetsError>),
}

/// An application ListOffsets call.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ListOffsetsCall {
    /// Numbers the calls: an answer to an abandoned call never counts for a later, equal one.
    id: u64,
    partitions: Vec<TopicPartition>,
    timestamp: i64,
}

/// An application ListOffsets call on its way: one request per leader.
#[derive(Debug)]
struct PendingCall {
    call: ListOffsetsCall,
    /// Partitions not asked yet (their leader is unknown, or its connection busy or down).
    unsent: Vec<TopicPartition>,
    /// Requests of this call in flight.
    awaiting: usize,
    /// The answers so far.
    answered: BTreeMap<TopicPartition, Result<i64, ErrorCode>>,
    /// When the call fails if some partition still has no leader to ask.
    deadline: Millis,
}

/// What the request in flight is for.
#[derive(Debug)]
enum Purpose {
    /// Fetch from these positions.
    Fetch {
        positions: BTreeMap<TopicPartition, i64>,
        asked: fetcher::FetchAsked,
    },
    /// Reset these partitions (`auto.offset.reset`).
    Reset { partitions: Vec<TopicPartition> },
    /// Validate these positions after a leader change (KIP-320's OffsetsForLeaderEpoch).
    Validate {
        positions: BTreeMap<TopicPartition, i64>,
    },
    /// Answer the application's call (a part of it: the partitions one leader leads).
    ListOffsets(ListOffsetsCall),
    /// Learn the leaders.
    Metadata,
}

#[derive(Debug)]
struct InFlight {
    purpose: Purpose,
    timeout_ms: u64,
    deadline: Millis,
}

/// Per connection: one fetch or ListOffsets, and the metadata request beside it.
const MAX_IN_FLIGHT: usize = 2;

/// The consumer state machine.
#[derive(Debug)]
pub struct ConsumerCore {
    config: ConsumerConfig,
    subscription: SubscriptionState,
    metadata: MetadataCache,
    /// Connections by node; on each, at most one fetch or ListOffsets at a time, as Kafka's
    /// consumer has per broker.
    nodes: Connections<InFlight>,
    /// No fetch before this (a retry pause after a top-level fetch error).
    fetch_paused_until: Option<Millis>,
    /// The active poll's deadline.
    poll_deadline: Option<Millis>,
    /// What the next poll returns besides records: resets and errors gathered since the last
    /// one (its `records` stay empty).
    fetched: Polled,
    /// Records fetched and not yet returned: a poll takes up to `max.poll.records` of them.
    buffered: RecordBuffer,
    /// The application's ListOffsets call awaiting its answer.
    list_offsets: Option<PendingCall>,
    /// ListOffsets calls so far.
    calls: u64,
}

impl ConsumerCore {
    /// A consumer core for a validated config, with nothing assigned.
    pub fn new(config: ConsumerConfig) -> ConsumerCore {
        assert!(config.fetch_max_wait_ms >= 0, "validated config");
        ConsumerCore {
            metadata: MetadataCache::new(
                config.metadata_max_age_ms,
                config.retry_backoff_ms,
                false,
            ),
            subscription: SubscriptionState::default(),
            nodes: Connections::default(),
            fetch_paused_until: None,
            poll_deadline: None,
            fetched: Polled::default(),
            buffered: RecordBuffer::default(),
            list_offsets: None,
            calls: 0,
            config,
        }
    }

    /// The next offset a poll returns for a partition, if known: its first record still
    /// buffered (`max.poll.records` held it back), else the fetch position.
    pub fn position(&self, partition: &TopicPartition) -> Option<i64> {
        self.buffered
            .next_offset(partition)
            .or_else(|| self.subscription.position(partition))
    }

    /// The leader epoch of the last record before the position of `partition`, if known:
    /// what a commit of that position names (Kafka's `OffsetAndMetadata.leaderEpoch`).
    pub fn offset_epoch(&self, partition: &TopicPartition) -> Option<i32> {
        self.subscription.offset_epoch(partition)
    }

    /// Reacts to one input.
    pub fn handle(&mut self, now: Millis, input: ConsumerInput, out: &mut Vec<ConsumerOutput>) {
        self.subscription.expire_pauses(now);
        if self.fetch_paused_until.is_some_and(|until| until <= now) {
            self.fetch_paused_until = None;
        }
        match input {
            ConsumerInput::Assign { partitions } => self.on_assign(&partitions),
            ConsumerInput::Seek {
                partition,
                offset,
                leader_epoch,
            } => self.on_seek(&partition, offset, leader_epoch),
            ConsumerInput::Poll { deadline } => self.on_poll(deadline, out),
            ConsumerInput::ListOffsets {
                partitions,
                timestamp,
            } => self.on_list_offsets(now, partitions, timestamp, out),
            ConsumerInput::Connected { node, address } => {
                self.nodes.on_connected(node, address);
                self.identify_bootstrap(out);
            }
            ConsumerInput::ConnectFailed { node, reason } => {
                tracing::debug!(node, %reason, "consumer connect failed");
                self.on_connection_lost(now, node, &reason, out);
            }
            ConsumerInput::Disconnected { node, reason } => {
                self.on_connection_lost(now, node, &reason, out);
            }
            ConsumerInput::Response { node, response } => {
                self.on_response(now, node, response, out);
            }
            ConsumerInput::Tick => self.on_tick(now, out),
        }
        self.maybe_complete_poll(now, out);
        self.maybe_connect(now, out);
        self.maybe_send(now, out);
    }

    fn on_assign(&mut self, partitions: &[TopicPartition]) {
        self.subscription.assign(partitions);
        for partition in partitions {
            self.metadata.want(&partition.topic);
        }
        let subscription = &self.subscription;
        self.buffered
            .retain(|partition| subscription.is_assigned(partition));
        let fetched = &mut self.fetched;
        fetched
            .resets
            .retain(|reset| subscription.is_assigned(&reset.partition));
        fetched
            .errors
            .retain(|error| subscription.is_assigned(&error.partition));
    }

    fn on_seek(&mut self, partition: &TopicPartition, offset: i64, leader_epoch: Option<i32>) {
        self.subscription
            .seek_with_epoch(partition, offset, leader_epoch);
        if let Some(epoch) = leader_epoch {
            self.metadata
                .update_last_seen_epoch(&partition.topic, partition.partition, epoch);
        }
        // Records and errors gathered before the seek are about the old position.
        self.buffered.retain(|held| held != partition);
        self.fetched
            .errors
            .retain(|error| error.partition != *partition);
    }

    fn on_poll(&mut self, deadline: Millis, out: &mut Vec<ConsumerOutput>) {
        // A ListOffsets call still here was abandoned by the application.
        self.list_offsets = None;
        self.poll_deadline = None;
        if self.config.auto_offset_reset == AutoOffsetReset::None {
            if let Some(partition) = self.subscription.awaiting_reset().next() {
                let error = ConsumerError::NoOffsetForPartition(partition.clone());
                out.push(ConsumerOutput::Polled(Err(error)));
                return;
            }
        }
        self.poll_deadline = Some(deadline);
    }

    fn on_list_offsets(
        &mut self,
        now: Millis,
        partitions: Vec<TopicPartition>,
        timestamp: i64,
        out: &mut Vec<ConsumerOutput>,
    ) {
        // A poll still active was abandoned; what it gathered waits for the next poll.
        self.poll_deadline = None;
        self.list_offsets = None;
        if partitions.is_empty() {
            out.push(ConsumerOutput::ListedOffsets(Ok(Vec::new())));
            return;
        }
        for partition in &partitions {
            self.metadata.want(&partition.topic);
        }
        self.calls += 1;
        self.list_offsets = Some(PendingCall {
            unsent: partitions.clone(),
            call: ListOffsetsCall {
                id: self.calls,
                partitions,
                timestamp,
            },
            awaiting: 0,
            answered: BTreeMap::new(),
            deadline: now.plus(self.config.request_timeout_ms),
        });
    }

    fn fail_list_offsets(&mut self, error: ListOffsetsError, out: &mut Vec<ConsumerOutput>) {
        if self.list_offsets.take().is_some() {
            out.push(ConsumerOutput::ListedOffsets(Err(error)));
        }
    }

    /// Whether `call` is the application's pending call.
    fn is_pending(&self, call: &ListOffsetsCall) -> bool {
        self.list_offsets
            .as_ref()
            .is_some_and(|pending| pending.call == *call)
    }

    fn identify_bootstrap(&mut self, out: &mut Vec<ConsumerOutput>) {
        if let Some(node) = self.nodes.identify_bootstrap(&self.metadata) {
            out.push(ConsumerOutput::Identified { node });
        }
    }

    /// A connection failed or broke: what was in flight on it is lost (positions stay, so
    /// fetches and resets are asked again); the application's call fails if it was waiting for
    /// this connection or for any connection at all; fresh metadata is asked for.
    fn on_connection_lost(
        &mut self,
        now: Millis,
        node: NodeId,
        reason: &str,
        out: &mut Vec<ConsumerOutput>,
    ) {
        let mut call_lost = self
            .list_offsets
            .as_ref()
            .is_some_and(|pending| !pending.unsent.is_empty());
        for in_flight in self.nodes.on_lost(now, node) {
            tracing::debug!(%reason, purpose = ?in_flight.purpose, "consumer request lost");
            match &in_flight.purpose {
                Purpose::Metadata => self.metadata.on_failure(now),
                Purpose::ListOffsets(call) => call_lost |= self.is_pending(call),
                Purpose::Fetch { .. } | Purpose::Reset { .. } | Purpose::Validate { .. } => {}
            }
        }
        if call_lost {
            let error = ListOffsetsError::ConnectionFailed {
                reason: reason.to_owned(),
            };
            self.fail_list_offsets(error, out);
        }
        self.metadata.request_update();
    }

    fn on_protocol_error(
        &mut self,
        now: Millis,
        node: NodeId,
        reason: &str,
        out: &mut Vec<ConsumerOutput>,
    ) {
        out.push(ConsumerOutput::Disconnect {
            node,
            reason: reason.to_owned(),
        });
        self.on_connection_lost(now, node, reason, out);
    }

    fn on_tick(&mut self, now: Millis, out: &mut Vec<ConsumerOutput>) {
        self.nodes.expire_backoffs(now);
        let timed_out: Vec<(NodeId, u64, bool)> = self
            .nodes
            .iter()
            .filter_map(|(node, connection)| {
                let late = connection
                    .in_flight
                    .iter()
                    .find(|in_flight| now >= in_flight.deadline)?;
                let answers_the_call = match &late.purpose {
                    Purpose::ListOffsets(call) => self.is_pending(call),
                    Purpose::Fetch { .. }
                    | Purpose::Reset { .. }
                    | Purpose::Validate { .. }
                    | Purpose::Metadata => false,
                };
                Some((node, late.timeout_ms, answers_the_call))
            })
            .collect();
        for (node, timeout_ms, answers_the_call) in timed_out {
            if answers_the_call {
                self.fail_list_offsets(ListOffsetsError::TimedOut { timeout_ms }, out);
            }
            let reason = format!("request timed out after {timeout_ms} ms");
            self.on_protocol_error(now, node, &reason, out);
        }
        // A call still waiting for a leader to ask gives up after request.timeout.ms.
        if let Some(pending) = &self.list_offsets {
            if !pending.unsent.is_empty() && now >= pending.deadline {
                let timeout_ms = self.config.request_timeout_ms;
                self.fail_list_offsets(ListOffsetsError::TimedOut { timeout_ms }, out);
            }
        }
    }

    fn on_response(
        &mut self,
        now: Millis,
        node: NodeId,
        response: ResponseKind,
        out: &mut Vec<ConsumerOutput>,
    ) {
        let Some(in_flight) = self
            .nodes
            .get_mut(node)
            .and_then(|connection| connection.in_flight.pop_front())
        else {
            self.on_protocol_error(now, node, "a response with nothing in flight", out);
            return;
        };
        match (in_flight.purpose, response) {
            (Purpose::Metadata, ResponseKind::Metadata(response)) => {
                self.metadata.on_response(now, &response);
                self.identify_bootstrap(out);
            }
            (Purpose::Fetch { positions, asked }, ResponseKind::Fetch(response)) => {
                let breaches = fetcher::contract_breaches(&asked, &positions, &response, now);
                for breach in &breaches {
                    tracing::warn!(%breach, "a fetch answer broke the request's contract");
                }
                self.fetched.breaches.extend(breaches);
                self.on_fetch_response(now, &positions, &response);
            }
            (Purpose::Reset { partitions }, ResponseKind::ListOffsets(response)) => {
                self.on_reset_response(now, &partitions, &response);
            }
            (Purpose::Validate { positions }, ResponseKind::OffsetForLeaderEpoch(response)) => {
                self.on_validate_response(now, &positions, &response);
            }
            (Purpose::ListOffsets(call), ResponseKind::ListOffsets(response)) => {
                self.on_list_offsets_response(&call, &response, out);
            }
            (purpose, _) => {
                // What the lost request was for is lost with it, as on a broken connection.
                match &purpose {
                    Purpose::Metadata => self.metadata.on_failure(now),
                    Purpose::ListOffsets(call) if self.is_pending(call) => {
                        let reason = "the broker answered another API".to_owned();
                        self.fail_list_offsets(ListOffsetsError::ConnectionFailed { reason }, out);
                    }
                    _ => {}
                }
                let reason = format!("a response of another API answered {purpose:?}");
                self.on_protocol_error(now, node, &reason, out);
            }
        }
    }

    /// Each partition on its own: one partition's error never costs another its records.
    fn on_fetch_response(
        &mut self,
        now: Millis,
        positions: &BTreeMap<TopicPartition, i64>,
        response: &FetchResponse,
    ) {
        let error = ErrorCode::from_code(response.error_code);
        if error != ErrorCode::None {
            tracing::debug!(?error, "fetch failed; retrying after retry.backoff.ms");
            self.fetch_paused_until = Some(now.plus(self.config.retry_backoff_ms));
            return;
        }
        for topic in &response.responses {
            for data in &topic.partitions {
                let partition = TopicPartition::new(topic.topic.as_str(), data.partition_index);
                let Some(&position) = positions.get(&partition) else {
                    continue; // not asked for
                };
                if self.subscription.fetch_position(&partition) != Some(position) {
                    continue; // seeked, reset, validating or unassigned since the request left
                }
                self.on_fetch_partition(now, partition, position, data);
            }
        }
    }

    fn on_fetch_partition(
        &mut self,
        now: Millis,
        partition: TopicPartition,
        position: i64,
        data: &PartitionData,
    ) {
        let error = ErrorCode::from_code(data.error_code);
        let reset = self.config.auto_offset_reset != AutoOffsetReset::None;
        match error {
            ErrorCode::None => {
                let records = data.records.clone().unwrap_or_default();
                let taken = fetcher::take_records(&partition, position, &records);
                self.subscription
                    .advance(&partition, taken.next_position, taken.last_epoch);
                if !taken.records.is_empty() {
                    self.subscription.move_to_end(&partition);
                }
                self.buffered.extend(taken.records);
                if let Some(failure) = taken.failure {
                    let message = format!(
                        "the batch at offset {} did not validate or decode: {}",
                        taken.next_position, failure.error
                    );
                    self.report(
                        now,
                        PartitionError {
                            partition,
                            error: ErrorCode::CorruptMessage,
                            position: taken.next_position,
                            batch_last_offset: failure.batch_last_offset,
                            message,
                        },
                    );
                }
            }
            ErrorCode::OffsetOutOfRange if reset => {
                tracing::info!(%partition, position, "offset out of range: auto.offset.reset");
                let reason = ResetReason::OffsetOutOfRange { position };
                self.subscription.request_reset(&partition, reason);
            }
            error => {
                if refreshes_metadata(error) {
                    self.metadata.request_update();
                }
                let message =
                    format!("the broker answered {error:?} for a fetch at offset {position}");
                self.report(
                    now,
                    PartitionError {
                        partition,
                        error,
                        position,
                        batch_last_offset: None,
                        message,
                    },
                );
            }
        }
    }

    /// Reports a partition that could not deliver and pauses it for `retry.backoff.ms`.
    fn report(&mut self, now: Millis, error: PartitionError) {
        tracing::debug!(partition = %error.partition, error = ?error.error, "{}", error.message);
        assert_eq!(
            self.subscription.position(&error.partition),
            Some(error.position),
            "a partition error leaves the position where delivery stopped"
        );
        let until = now.plus(self.config.retry_backoff_ms);
        self.subscription.pause(&error.partition, until);
        self.fetched.errors.push(error);
    }

    fn on_reset_response(
        &mut self,
        now: Millis,
        partitions: &[TopicPartition],
        response: &ListOffsetsResponse,
    ) {
        let outcomes = list_offsets_outcomes(response);
        for partition in partitions {
            let Some(reason) = self.subscription.reset_reason(partition) else {
                continue; // seeked or unassigned since the request left
            };
            match outcomes.get(partition) {
                Some(Ok(offset)) if *offset >= 0 => {
                    self.subscription.seek(partition, *offset);
                    self.fetched.resets.push(PositionReset {
                        partition: partition.clone(),
                        offset: *offset,
                        reason,
                    });
                }
                outcome => {
                    tracing::debug!(%partition, ?outcome, "offset reset failed; retrying");
                    // As Kafka's OffsetFetcher: a leader that moved (NOT_LEADER_OR_FOLLOWER and
                    // the like) or a partition missing from the answer asks for fresh metadata,
                    // or every retry goes to the same stale leader.
                    let stale = match outcome {
                        Some(Err(error)) => refreshes_metadata(*error),
                        Some(Ok(_)) => false,
                        None => true,
                    };
                    if stale {
                        self.metadata.request_update();
                    }
                    let until = now.plus(self.config.retry_backoff_ms);
                    self.subscription.pause(partition, until);
                }
            }
        }
    }

    /// KIP-320: each leader's answer for the positions it validated. A position past where the
    /// epoch of its last record ends on the leader moves back there (with `auto.offset.reset`;
    /// without it the partition reports the truncation and waits for a seek); a leader with
    /// nothing that old sends the position to `auto.offset.reset`.
    fn on_validate_response(
        &mut self,
        now: Millis,
        positions: &BTreeMap<TopicPartition, i64>,
        response: &OffsetForLeaderEpochResponse,
    ) {
        let reset = self.config.auto_offset_reset != AutoOffsetReset::None;
        for topic in &response.topics {
            for answer in &topic.partitions {
                let partition = TopicPartition::new(topic.topic.as_str(), answer.partition);
                let Some(&position) = positions.get(&partition) else {
                    continue; // not asked for
                };
                if self.subscription.awaiting_validation(&partition) != Some(position) {
                    continue; // seeked, reset or unassigned since the request left
                }
                let (epoch, end) = (answer.leader_epoch, answer.end_offset);
                match ErrorCode::from_code(answer.error_code) {
                    ErrorCode::None if end >= position && epoch >= 0 => {
                        self.subscription.complete_validation(&partition);
                    }
                    ErrorCode::None if reset && (end < 0 || epoch < 0) => {
                        tracing::info!(%partition, position, "no epoch that old on the leader: auto.offset.reset");
                        let reason = ResetReason::LogTruncation { position };
                        self.subscription.request_reset(&partition, reason);
                    }
                    ErrorCode::None if reset => {
                        tracing::info!(%partition, position, end, epoch, "log truncation detected: moving back to where the logs diverge");
                        self.subscription
                            .seek_with_epoch(&partition, end, Some(epoch));
                        self.fetched.resets.push(PositionReset {
                            partition,
                            offset: end,
                            reason: ResetReason::LogTruncation { position },
                        });
                    }
                    ErrorCode::None => {
                        let message = format!(
                            "log truncation detected: the leader's log ends at {end} for epoch \
                             {epoch}, below the position {position}; seek to go on"
                        );
                        self.subscription
                            .pause(&partition, now.plus(self.config.retry_backoff_ms));
                        self.fetched.errors.push(PartitionError {
                            partition,
                            error: ErrorCode::OffsetOutOfRange,
                            position,
                            batch_last_offset: None,
                            message,
                        });
                    }
                    error => {
                        tracing::debug!(%partition, ?error, "position validation failed; retrying");
                        if refreshes_metadata(error) {
                            self.metadata.request_update();
                        }
                        self.subscription
                            .pause(&partition, now.plus(self.config.retry_backoff_ms));
                    }
                }
            }
        }
    }

    fn on_list_offsets_response(
        &mut self,
        call: &ListOffsetsCall,
        response: &ListOffsetsResponse,
        out: &mut Vec<ConsumerOutput>,
    ) {
        if !self.is_pending(call) {
            return; // the application abandoned this call
        }
        let outcomes = list_offsets_outcomes(response);
        if outcomes
            .values()
            .any(|outcome| matches!(outcome, Err(error) if refreshes_metadata(*error)))
        {
            // A leader that moved: the application's retry must not go to it again.
            self.metadata.request_update();
        }
        let pending = self.list_offsets.as_mut().expect("pending");
        pending.awaiting -= 1;
        pending.answered.extend(outcomes);
        if pending.awaiting > 0 || !pending.unsent.is_empty() {
            return;
        }
        let answered = std::mem::take(&mut pending.answered);
        self.list_offsets = None;
        let result = answered
            .into_iter()
            .map(|(partition, outcome)| match outcome {
                Ok(offset) => Ok((partition, offset)),
                Err(error) => Err(ListOffsetsError::Partition { partition, error }),
            })
            .collect();
        out.push(ConsumerOutput::ListedOffsets(result));
    }

    fn maybe_complete_poll(&mut self, now: Millis, out: &mut Vec<ConsumerOutput>) {
        let Some(deadline) = self.poll_deadline else {
            return;
        };
        let news = !self.buffered.is_empty() || !self.fetched.errors.is_empty();
        if news || now >= deadline {
            self.poll_deadline = None;
            let mut polled = std::mem::take(&mut self.fetched);
            polled.records = self.buffered.take(self.config.max_poll_records);
            out.push(ConsumerOutput::Polled(Ok(polled)));
        }
    }

    /// The partitions to fetch and their positions: the subscription's fetchable ones, less
    /// those with records still buffered (fetched again once a poll took them all).
    fn fetchable(&self) -> impl Iterator<Item = (TopicPartition, i64)> + '_ {
        self.subscription
            .fetchable()
            .into_iter()
            .filter(|(partition, _)| !self.buffered.holds(partition))
    }

    /// The leader of `partition` as the metadata cache knows it.
    fn leader(&self, partition: &TopicPartition) -> Option<NodeId> {
        self.metadata.leader(&partition.topic, partition.partition)
    }

    /// The epoch of `partition`'s leader as the metadata cache knows it (-1: unknown).
    fn leader_epoch(&self, partition: &TopicPartition) -> i32 {
        self.metadata
            .leader_epoch(&partition.topic, partition.partition)
            .unwrap_or(-1)
    }

    /// Partitions the core has work for now: the application's call's unsent partitions, or,
    /// while polling, those to reset or fetch.
    fn work(&self) -> Vec<TopicPartition> {
        if let Some(pending) = &self.list_offsets {
            return pending.unsent.clone();
        }
        if self.poll_deadline.is_none() {
            return Vec::new();
        }
        let mut partitions = self.subscription.resettable();
        partitions.extend(
            self.subscription
                .validatable()
                .into_iter()
                .map(|(partition, _, _)| partition),
        );
        if self.fetch_paused_until.is_none() {
            partitions.extend(self.fetchable().map(|(partition, _)| partition));
        }
        partitions
    }

    /// Opens the connections the work needs: each leader of a partition with work, and, when
    /// some such partition has no known leader or metadata is due and no connection is up or
    /// coming, one to a known broker (a bootstrap server before any is known).
    fn maybe_connect(&mut self, now: Millis, out: &mut Vec<ConsumerOutput>) {
        if self.poll_deadline.is_none() && self.list_offsets.is_none() {
            return; // like Kafka's consumer, it connects only inside a call
        }
        let work = self.work();
        let due = self.metadata.wants_request(now);
        let (opened, leaderless) = self.nodes.open_for(&work, &self.metadata, due);
        if leaderless {
            self.metadata.request_update();
        }
        out.extend(
            opened
                .into_iter()
                .map(|(node, address)| ConsumerOutput::Connect { node, address }),
        );
    }

    /// Whether `node` is connected with no fetch or ListOffsets in flight.
    fn is_free(&self, node: NodeId) -> bool {
        self.nodes.get(node).is_some_and(|connection| {
            connection.has_room(MAX_IN_FLIGHT)
                && connection
                    .in_flight
                    .iter()
                    .all(|in_flight| matches!(in_flight.purpose, Purpose::Metadata))
        })
    }

    /// Sends what can go: metadata when due, then per free leader the application's
    /// ListOffsets, else resets, else a fetch.
    fn maybe_send(&mut self, now: Millis, out: &mut Vec<ConsumerOutput>) {
        if self.poll_deadline.is_none() && self.list_offsets.is_none() {
            return; // nothing goes out between calls: assign and seek need no IO
        }
        self.apply_leader_epochs();
        if self.metadata.wants_request(now) {
            if let Some(node) = self.nodes.least_loaded(MAX_IN_FLIGHT) {
                let request = self.metadata.request();
                let timeout_ms = self.config.request_timeout_ms;
                self.send(
                    now,
                    node,
                    Purpose::Metadata,
                    RequestKind::Metadata(request),
                    timeout_ms,
                    out,
                );
            }
        }
        let free: Vec<NodeId> = self
            .nodes
            .iter()
            .map(|(node, _)| node)
            .filter(|node| self.is_free(*node))
            .collect();
        for node in free {
            self.send_to(now, node, out);
        }
    }

    /// The next request for `node`, a free leader: the application's ListOffsets, then resets,
    /// then a fetch, each for the partitions `node` leads.
    fn send_to(&mut self, now: Millis, node: NodeId, out: &mut Vec<ConsumerOutput>) {
        if self.list_offsets.is_some() {
            self.send_call_part(now, node, out);
            return;
        }
        let Some(deadline) = self.poll_deadline else {
            return;
        };
        if !self.send_validation(now, node, out) && !self.send_reset(now, node, out) {
            self.send_fetch(now, deadline, node, out);
        }
    }

    /// Tells the positions the leader epochs the metadata names: a newer one sends a position
    /// to validation (KIP-320), unless `seedlog.truncation.detection=none`.
    fn apply_leader_epochs(&mut self) {
        let metadata = &self.metadata;
        self.subscription.on_leader_epochs(
            |partition| metadata.leader_epoch(&partition.topic, partition.partition),
            self.config.truncation_detection,
        );
    }

    /// OffsetsForLeaderEpoch for the positions awaiting validation that `node` leads; whether
    /// one went. Each asks where the epoch of its last record ends, fenced by the epoch the
    /// metadata names.
    fn send_validation(
        &mut self,
        now: Millis,
        node: NodeId,
        out: &mut Vec<ConsumerOutput>,
    ) -> bool {
        let mut by_topic: BTreeMap<String, Vec<OffsetForLeaderPartition>> = BTreeMap::new();
        let mut positions = BTreeMap::new();
        for (partition, position, offset_epoch) in self.subscription.validatable() {
            if self.leader(&partition) != Some(node) {
                continue;
            }
            let current = self
                .metadata
                .leader_epoch(&partition.topic, partition.partition)
                .unwrap_or(-1);
            by_topic
                .entry(partition.topic.to_string())
                .or_default()
                .push(
                    OffsetForLeaderPartition::default()
                        .with_partition(partition.partition)
                        .with_current_leader_epoch(current)
                        .with_leader_epoch(offset_epoch),
                );
            positions.insert(partition, position);
        }
        if positions.is_empty() {
            return false;
        }
        let request = offset_for_leader_epoch_request(-1, by_topic);
        let timeout_ms = self.config.request_timeout_ms;
        let body = RequestKind::OffsetForLeaderEpoch(request);
        self.send(
            now,
            node,
            Purpose::Validate { positions },
            body,
            timeout_ms,
            out,
        );
        true
    }

    /// The part of the application's call that `node` leads, if not asked yet.
    fn send_call_part(&mut self, now: Millis, node: NodeId, out: &mut Vec<ConsumerOutput>) {
        let pending = self.list_offsets.as_ref().expect("a call is pending");
        let (asked, unsent): (Vec<TopicPartition>, Vec<TopicPartition>) = pending
            .unsent
            .iter()
            .cloned()
            .partition(|partition| self.leader(partition) == Some(node));
        if asked.is_empty() {
            return;
        }
        let isolation_level = self.config.isolation_level.wire_value();
        let epoch = |partition: &TopicPartition| self.leader_epoch(partition);
        let request = list_offsets_request(&asked, epoch, pending.call.timestamp, isolation_level);
        let pending = self.list_offsets.as_mut().expect("a call is pending");
        pending.unsent = unsent;
        pending.awaiting += 1;
        // The purpose names the whole call: an answer counts only for the call still pending.
        let purpose = Purpose::ListOffsets(pending.call.clone());
        let timeout_ms = self.config.request_timeout_ms;
        let body = RequestKind::ListOffsets(request);
        self.send(now, node, purpose, body, timeout_ms, out);
    }

    /// Resets (`auto.offset.reset`) of the partitions `node` leads; whether one went.
    fn send_reset(&mut self, now: Millis, node: NodeId, out: &mut Vec<ConsumerOutput>) -> bool {
        let timestamp = match self.config.auto_offset_reset {
            AutoOffsetReset::Earliest => -2,
            AutoOffsetReset::Latest => -1,
            AutoOffsetReset::None => return false,
        };
        let resettable: Vec<TopicPartition> = self
            .subscription
            .resettable()
            .into_iter()
            .filter(|partition| self.leader(partition) == Some(node))
            .collect();
        if resettable.is_empty() {
            return false;
        }
        let isolation_level = self.config.isolation_level.wire_value();
        let epoch = |partition: &TopicPartition| self.leader_epoch(partition);
        let request = list_offsets_request(&resettable, epoch, timestamp, isolation_level);
        let purpose = Purpose::Reset {
            partitions: resettable,
        };
        let timeout_ms = self.config.request_timeout_ms;
        let body = RequestKind::ListOffsets(request);
        self.send(now, node, purpose, body, timeout_ms, out);
        true
    }

    /// A fetch of the partitions `node` leads, for a poll ending at `deadline`.
    fn send_fetch(
        &mut self,
        now: Millis,
        deadline: Millis,
        node: NodeId,
        out: &mut Vec<ConsumerOutput>,
    ) {
        if self.fetch_paused_until.is_some() {
            return;
        }
        let fenced = self.config.truncation_detection;
        let ordered: Vec<(TopicPartition, i64, i32)> = self
            .fetchable()
            .filter(|(partition, _)| self.leader(partition) == Some(node))
            .map(|(partition, position)| {
                let epoch = self
                    .metadata
                    .leader_epoch(&partition.topic, partition.partition)
                    .filter(|_| fenced)
                    .unwrap_or(-1);
                (partition, position, epoch)
            })
            .collect();
        if ordered.is_empty() {
            return;
        }
        assert!(
            now < deadline,
            "an expired poll completes before anything is sent"
        );
        let fetch_max_wait_ms = u64::try_from(self.config.fetch_max_wait_ms).expect("validated");
        let max_wait_ms = fetch_max_wait_ms.min(deadline.0 - now.0);
        let max_wait = i32::try_from(max_wait_ms).expect("at most fetch.max.wait.ms, an i32");
        let request = fetcher::fetch_request(&self.config, &ordered, max_wait);
        let positions: BTreeMap<TopicPartition, i64> = ordered
            .into_iter()
            .map(|(partition, position, _)| (partition, position))
            .collect();
        let timeout_ms = self.config.request_timeout_ms.saturating_add(max_wait_ms);
        let asked = fetcher::FetchAsked::of(&request, now);
        let purpose = Purpose::Fetch { positions, asked };
        self.send(
            now,
            node,
            purpose,
            RequestKind::Fetch(request),
            timeout_ms,
            out,
        );
    }

    fn send(
        &mut self,
        now: Millis,
        node: NodeId,
        purpose: Purpose,
        body: RequestKind,
        timeout_ms: u64,
        out: &mut Vec<ConsumerOutput>,
    ) {
        let connection = self.nodes.get_mut(node).expect("sent on a connection");
        connection.in_flight.push_back(InFlight {
            purpose,
            timeout_ms,
            deadline: now.plus(timeout_ms),
        });
        out.push(ConsumerOutput::Request {
            node,
            body,
            timeout_ms,
        });
    }

    /// The earliest time `handle(now, Tick)` must run.
    pub fn next_deadline(&self) -> Option<Millis> {
        let backoff = self.nodes.next_backoff_end();
        let request_timeout = self
            .nodes
            .in_flight()
            .map(|in_flight| in_flight.deadline)
            .min();
        // Pauses only matter to a poll: nothing else fetches or resets.
        let polling = self.poll_deadline.is_some();
        let unpause = self.subscription.next_unpause().filter(|_| polling);
        let fetch_pause = self.fetch_paused_until.filter(|_| polling);
        let in_a_call = polling || self.list_offsets.is_some();
        let metadata = self
            .metadata
            .next_deadline()
            .filter(|_| in_a_call && self.nodes.least_loaded(MAX_IN_FLIGHT).is_some());
        let call = self
            .list_offsets
            .as_ref()
            .filter(|pending| !pending.unsent.is_empty())
            .map(|pending| pending.deadline);
        [
            backoff,
            request_timeout,
            self.poll_deadline,
            unpause,
            fetch_pause,
            metadata,
            call,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// At most one fetch, reset, validation or ListOffsets in flight per connection.
    fn check_one_data_request_per_connection(&self) {
        for (_, connection) in self.nodes.iter() {
            let data = connection
                .in_flight
                .iter()
                .filter(|in_flight| !matches!(in_flight.purpose, Purpose::Metadata))
                .count();
            assert!(data <= 1, "one data request per connection");
        }
    }

    /// Cross-field invariants.
    pub fn check_invariants(&self) {
        self.subscription.check_invariants();
        self.nodes.check_invariants(MAX_IN_FLIGHT);
        self.check_one_data_request_per_connection();
        let mut metadata_awaited = 0;
        let mut call_awaited = 0;
        for in_flight in self.nodes.in_flight() {
            match &in_flight.purpose {
                Purpose::Fetch { positions, .. } => {
                    assert!(!positions.is_empty(), "a fetch asks for some partition");
                }
                Purpose::Validate { positions } => assert!(
                    !positions.is_empty() && self.config.truncation_detection,
                    "a validation asks for some partition, and only with truncation detection"
                ),
                Purpose::Reset { partitions } => {
                    assert!(!partitions.is_empty(), "a reset asks for some partition");
                    assert_ne!(
                        self.config.auto_offset_reset,
                        AutoOffsetReset::None,
                        "no reset without auto.offset.reset"
                    );
                }
                Purpose::ListOffsets(call) => {
                    assert!(
                        !call.partitions.is_empty(),
                        "an empty call is answered at once"
                    );
                    call_awaited += usize::from(self.is_pending(call));
                }
                Purpose::Metadata => metadata_awaited += 1,
            }
        }
        assert_eq!(
            metadata_awaited,
            usize::from(self.metadata.in_flight()),
            "the cache knows whether its request is in flight"
        );
        if let Some(pending) = &self.list_offsets {
            assert_eq!(
                pending.awaiting, call_awaited,
                "the pending call counts its requests in flight"
            );
        }
        if self.poll_deadline.is_some() {
            assert!(
                self.list_offsets.is_none(),
                "a poll and an application ListOffsets never overlap"
            );
            assert!(
                self.buffered.is_empty(),
                "an active poll with records has completed"
            );
            assert!(
                self.fetched.errors.is_empty(),
                "an active poll with partition errors has completed"
            );
        }
        assert!(
            self.fetched.records.is_empty(),
            "records wait in the buffer, not with the resets and errors"
        );
        self.buffered.check_invariants();
        debug_assert!(
            self.buffered
                .records()
                .all(|record| self.subscription.is_assigned(&record.topic_partition)),
            "buffered records belong to assigned partitions"
        );
    }
}

/// The errors after which Kafka's clients ask for metadata again: the leader moved or the
/// topic changed.
fn refreshes_metadata(error: ErrorCode) -> bool {
    crate::client::metadata::refreshes_metadata(error)
}

impl crate::state_machine::StateMachine for ConsumerCore {
    type Input = ConsumerInput;
    type Output = ConsumerOutput;

    fn handle(&mut self, now: Millis, input: ConsumerInput, out: &mut Vec<ConsumerOutput>) {
        ConsumerCore::handle(self, now, input, out);
    }

    fn next_deadline(&self) -> Option<Millis> {
        ConsumerCore::next_deadline(self)
    }

    fn check_invariants(&self) {
        ConsumerCore::check_invariants(self);
    }
}
