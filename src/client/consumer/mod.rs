//! The consumer as a state machine (the poll loop of Kafka's `KafkaConsumer` with its `Fetcher`
//! and `OffsetFetcher`), driven by the async shell in `runtime::consumer`.
//!
//! The core owns the policy: the positions ([`SubscriptionState`]), which partitions need a
//! reset (`auto.offset.reset` earliest/latest via ListOffsets at timestamp -2/-1), one request
//! in flight at a time and its timeout (`request.timeout.ms`, plus the fetch's own
//! `max_wait_ms`), the reconnect backoff, retry pauses (`retry.backoff.ms`), and the fetch's
//! `max_wait_ms = min(fetch.max.wait.ms, poll deadline - now)`. The shell owns the connection
//! and the clock: it feeds [`ConsumerInput`]s and executes [`ConsumerOutput`]s.
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

pub(crate) mod fetcher;
mod subscription;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{FetchResponse, ListOffsetsResponse, RequestKind, ResponseKind};

pub use self::fetcher::{list_offsets_outcomes, list_offsets_request, ConsumerRecord};
pub use self::subscription::{ResetReason, SubscriptionState};
use crate::config::{AutoOffsetReset, ConsumerConfig};
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
    Connected,
    /// Connecting failed.
    ConnectFailed {
        /// Why.
        reason: String,
    },
    /// The connection broke.
    Disconnected {
        /// Why.
        reason: String,
    },
    /// The response to the request in flight.
    Response(ResponseKind),
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
    /// Open a connection.
    Connect,
    /// Close the connection (request timeout, protocol error). The core has already treated
    /// the request in flight as lost: do not feed [`ConsumerInput::Disconnected`] back.
    Disconnect {
        /// Why.
        reason: String,
    },
    /// Write this request; feed its response back as [`ConsumerInput::Response`].
    Request {
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
    partitions: Vec<TopicPartition>,
    timestamp: i64,
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
    /// Answer the application.
    ListOffsets(ListOffsetsCall),
}

#[derive(Debug)]
struct InFlight {
    purpose: Purpose,
    timeout_ms: u64,
    deadline: Millis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnectionState {
    Idle,
    Connecting,
    Connected,
    Backoff { until: Millis },
}

/// Kafka's `reconnect.backoff.ms` and `reconnect.backoff.max.ms` defaults.
const RECONNECT_BACKOFF_MS: u64 = 50;
const RECONNECT_BACKOFF_MAX_MS: u64 = 1000;

/// The consumer state machine.
#[derive(Debug)]
pub struct ConsumerCore {
    config: ConsumerConfig,
    subscription: SubscriptionState,
    connection: ConnectionState,
    connect_failures: u32,
    /// At most one request at a time, as Kafka's consumer has per broker.
    in_flight: Option<InFlight>,
    /// No fetch before this (a retry pause after a top-level fetch error).
    fetch_paused_until: Option<Millis>,
    /// The active poll's deadline.
    poll_deadline: Option<Millis>,
    /// What the next poll returns: records, resets and errors gathered since the last one.
    fetched: Polled,
    /// The application's ListOffsets call awaiting its answer.
    list_offsets: Option<ListOffsetsCall>,
}

impl ConsumerCore {
    /// A consumer core for a validated config, with nothing assigned.
    pub fn new(config: ConsumerConfig) -> ConsumerCore {
        assert!(config.fetch_max_wait_ms >= 0, "validated config");
        ConsumerCore {
            config,
            subscription: SubscriptionState::default(),
            connection: ConnectionState::Idle,
            connect_failures: 0,
            in_flight: None,
            fetch_paused_until: None,
            poll_deadline: None,
            fetched: Polled::default(),
            list_offsets: None,
        }
    }

    /// The next offset of a partition, if known.
    pub fn position(&self, partition: &TopicPartition) -> Option<i64> {
        self.subscription.position(partition)
    }

    /// Reacts to one input.
    pub fn handle(&mut self, now: Millis, input: ConsumerInput, out: &mut Vec<ConsumerOutput>) {
        self.subscription.expire_pauses(now);
        if self.fetch_paused_until.is_some_and(|until| until <= now) {
            self.fetch_paused_until = None;
        }
        match input {
            ConsumerInput::Assign { partitions } => self.on_assign(&partitions),
            ConsumerInput::Seek { partition, offset } => self.on_seek(&partition, offset),
            ConsumerInput::Poll { deadline } => self.on_poll(deadline, out),
            ConsumerInput::ListOffsets {
                partitions,
                timestamp,
            } => self.on_list_offsets(partitions, timestamp, out),
            ConsumerInput::Connected => {
                assert_eq!(
                    self.connection,
                    ConnectionState::Connecting,
                    "connected without asking"
                );
                self.connection = ConnectionState::Connected;
                self.connect_failures = 0;
            }
            ConsumerInput::ConnectFailed { reason } => {
                tracing::debug!(%reason, "consumer connect failed");
                self.on_connection_lost(now, &reason, out);
            }
            ConsumerInput::Disconnected { reason } => self.on_connection_lost(now, &reason, out),
            ConsumerInput::Response(response) => self.on_response(now, response, out),
            ConsumerInput::Tick => self.on_tick(now, out),
        }
        self.maybe_complete_poll(now, out);
        self.maybe_connect(out);
        self.maybe_send(now, out);
    }

    fn on_assign(&mut self, partitions: &[TopicPartition]) {
        self.subscription.assign(partitions);
        let subscription = &self.subscription;
        let fetched = &mut self.fetched;
        fetched
            .records
            .retain(|record| subscription.is_assigned(&record.topic_partition));
        fetched
            .resets
            .retain(|reset| subscription.is_assigned(&reset.partition));
        fetched
            .errors
            .retain(|error| subscription.is_assigned(&error.partition));
    }

    fn on_seek(&mut self, partition: &TopicPartition, offset: i64) {
        self.subscription.seek(partition, offset);
        // Records and errors gathered before the seek are about the old position.
        self.fetched
            .records
            .retain(|record| record.topic_partition != *partition);
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
        self.list_offsets = Some(ListOffsetsCall {
            partitions,
            timestamp,
        });
    }

    fn fail_list_offsets(&mut self, error: ListOffsetsError, out: &mut Vec<ConsumerOutput>) {
        if self.list_offsets.take().is_some() {
            out.push(ConsumerOutput::ListedOffsets(Err(error)));
        }
    }

    fn on_connection_lost(&mut self, now: Millis, reason: &str, out: &mut Vec<ConsumerOutput>) {
        if let Some(in_flight) = self.in_flight.take() {
            tracing::debug!(%reason, purpose = ?in_flight.purpose, "consumer request lost");
        }
        let error = ListOffsetsError::ConnectionFailed {
            reason: reason.to_owned(),
        };
        self.fail_list_offsets(error, out);
        self.connect_failures += 1;
        let exponent = self.connect_failures.saturating_sub(1).min(10);
        let delay = (RECONNECT_BACKOFF_MS << exponent).min(RECONNECT_BACKOFF_MAX_MS);
        self.connection = ConnectionState::Backoff {
            until: now.plus(delay),
        };
    }

    fn on_protocol_error(&mut self, now: Millis, reason: &str, out: &mut Vec<ConsumerOutput>) {
        out.push(ConsumerOutput::Disconnect {
            reason: reason.to_owned(),
        });
        self.on_connection_lost(now, reason, out);
    }

    fn on_tick(&mut self, now: Millis, out: &mut Vec<ConsumerOutput>) {
        if let ConnectionState::Backoff { until } = self.connection {
            if now >= until {
                self.connection = ConnectionState::Idle;
            }
        }
        let Some(in_flight) = &self.in_flight else {
            return;
        };
        if now < in_flight.deadline {
            return;
        }
        let timeout_ms = in_flight.timeout_ms;
        let answers_the_call = match &in_flight.purpose {
            Purpose::ListOffsets(call) => self.list_offsets.as_ref() == Some(call),
            Purpose::Fetch { .. } | Purpose::Reset { .. } => false,
        };
        if answers_the_call {
            self.fail_list_offsets(ListOffsetsError::TimedOut { timeout_ms }, out);
        }
        let reason = format!("request timed out after {timeout_ms} ms");
        self.on_protocol_error(now, &reason, out);
    }

    fn on_response(&mut self, now: Millis, response: ResponseKind, out: &mut Vec<ConsumerOutput>) {
        let Some(in_flight) = self.in_flight.take() else {
            self.on_protocol_error(now, "a response with nothing in flight", out);
            return;
        };
        match (in_flight.purpose, response) {
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
            (Purpose::ListOffsets(call), ResponseKind::ListOffsets(response)) => {
                self.on_list_offsets_response(&call, &response, out);
            }
            (purpose, _) => {
                let reason = format!("a response of another API answered {purpose:?}");
                self.on_protocol_error(now, &reason, out);
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
                let partition = TopicPartition::new(topic.topic.to_string(), data.partition_index);
                let Some(&position) = positions.get(&partition) else {
                    continue; // not asked for
                };
                if self.subscription.position(&partition) != Some(position) {
                    continue; // seeked, reset or unassigned since the request left
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
                self.subscription.advance(&partition, taken.next_position);
                if !taken.records.is_empty() {
                    self.subscription.move_to_end(&partition);
                }
                self.fetched.records.extend(taken.records);
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
                    let until = now.plus(self.config.retry_backoff_ms);
                    self.subscription.pause(partition, until);
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
        if self.list_offsets.as_ref() != Some(call) {
            return; // the application abandoned this call
        }
        self.list_offsets = None;
        let result = list_offsets_outcomes(response)
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
        let news = !self.fetched.records.is_empty() || !self.fetched.errors.is_empty();
        if news || now >= deadline {
            self.poll_deadline = None;
            let polled = std::mem::take(&mut self.fetched);
            out.push(ConsumerOutput::Polled(Ok(polled)));
        }
    }

    fn maybe_connect(&mut self, out: &mut Vec<ConsumerOutput>) {
        let polling = self.poll_deadline.is_some() && !self.subscription.is_empty();
        if self.connection == ConnectionState::Idle && (polling || self.list_offsets.is_some()) {
            self.connection = ConnectionState::Connecting;
            out.push(ConsumerOutput::Connect);
        }
    }

    /// Sends the next request: the application's ListOffsets, then resets, then a fetch.
    fn maybe_send(&mut self, now: Millis, out: &mut Vec<ConsumerOutput>) {
        if self.connection != ConnectionState::Connected || self.in_flight.is_some() {
            return;
        }
        if let Some(call) = &self.list_offsets {
            let isolation_level = self.config.isolation_level.wire_value();
            let request = list_offsets_request(&call.partitions, call.timestamp, isolation_level);
            let purpose = Purpose::ListOffsets(call.clone());
            let timeout_ms = self.config.request_timeout_ms;
            self.send(
                now,
                purpose,
                RequestKind::ListOffsets(request),
                timeout_ms,
                out,
            );
            return;
        }
        let Some(deadline) = self.poll_deadline else {
            return;
        };
        let timestamp = match self.config.auto_offset_reset {
            AutoOffsetReset::Earliest => Some(-2),
            AutoOffsetReset::Latest => Some(-1),
            AutoOffsetReset::None => None,
        };
        let resettable = self.subscription.resettable();
        if let (Some(timestamp), false) = (timestamp, resettable.is_empty()) {
            let isolation_level = self.config.isolation_level.wire_value();
            let request = list_offsets_request(&resettable, timestamp, isolation_level);
            let purpose = Purpose::Reset {
                partitions: resettable,
            };
            let timeout_ms = self.config.request_timeout_ms;
            self.send(
                now,
                purpose,
                RequestKind::ListOffsets(request),
                timeout_ms,
                out,
            );
            return;
        }
        let ordered = self.subscription.fetchable();
        if self.fetch_paused_until.is_some() || ordered.is_empty() {
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
        let positions: BTreeMap<TopicPartition, i64> = ordered.into_iter().collect();
        let timeout_ms = self.config.request_timeout_ms.saturating_add(max_wait_ms);
        let asked = fetcher::FetchAsked::of(&request, now);
        let purpose = Purpose::Fetch { positions, asked };
        self.send(now, purpose, RequestKind::Fetch(request), timeout_ms, out);
    }

    fn send(
        &mut self,
        now: Millis,
        purpose: Purpose,
        body: RequestKind,
        timeout_ms: u64,
        out: &mut Vec<ConsumerOutput>,
    ) {
        assert!(self.in_flight.is_none(), "one request in flight at a time");
        self.in_flight = Some(InFlight {
            purpose,
            timeout_ms,
            deadline: now.plus(timeout_ms),
        });
        out.push(ConsumerOutput::Request { body, timeout_ms });
    }

    /// The earliest time `handle(now, Tick)` must run.
    pub fn next_deadline(&self) -> Option<Millis> {
        let backoff = match self.connection {
            ConnectionState::Backoff { until } => Some(until),
            _ => None,
        };
        let request_timeout = self.in_flight.as_ref().map(|in_flight| in_flight.deadline);
        // Pauses only matter to a poll: nothing else fetches or resets.
        let polling = self.poll_deadline.is_some();
        let unpause = self.subscription.next_unpause().filter(|_| polling);
        let fetch_pause = self.fetch_paused_until.filter(|_| polling);
        [
            backoff,
            request_timeout,
            self.poll_deadline,
            unpause,
            fetch_pause,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Cross-field invariants.
    pub fn check_invariants(&self) {
        self.subscription.check_invariants();
        if let Some(in_flight) = &self.in_flight {
            assert_eq!(
                self.connection,
                ConnectionState::Connected,
                "a request in flight without a connection"
            );
            match &in_flight.purpose {
                Purpose::Fetch { positions, .. } => {
                    assert!(!positions.is_empty(), "a fetch asks for some partition");
                }
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
                }
            }
        }
        if let ConnectionState::Backoff { .. } = self.connection {
            assert!(self.connect_failures > 0, "a backoff follows a failure");
        }
        if self.poll_deadline.is_some() {
            assert!(
                self.list_offsets.is_none(),
                "a poll and an application ListOffsets never overlap"
            );
            assert!(
                self.fetched.records.is_empty(),
                "an active poll with records has completed"
            );
            assert!(
                self.fetched.errors.is_empty(),
                "an active poll with partition errors has completed"
            );
        }
        debug_assert!(
            self.fetched
                .records
                .iter()
                .all(|record| self.subscription.is_assigned(&record.topic_partition)),
            "gathered records belong to assigned partitions"
        );
    }
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
