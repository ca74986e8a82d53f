//! The producer's sender as a state machine (Kafka's `Sender` + the retry half of the
//! `RecordAccumulator`).
//!
//! Every record is one batch for now (batching belongs to the producer-pipeline issue). Batches
//! are sent in order, at most `max.in.flight.requests.per.connection` requests at a time;
//! responses come back in request order. A retriable error or a lost connection sends the batch
//! again (before every later batch still queued), so with more than one request in flight and no
//! idempotence a retry can land after a later batch, exactly as in Kafka.
//!
//! Failures are classified for the history: [`ProduceError::Rejected`] means the broker
//! definitely did not write the record (a Jepsen `fail`); [`ProduceError::Indeterminate`] means
//! it may have (an `info`): some attempt was written to a connection that then broke or timed
//! out, or the broker answered with an error that allows a write (NOT_ENOUGH_REPLICAS_AFTER_APPEND).

use std::collections::VecDeque;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::config::{Acks, ConfigError, ProducerConfig};
use crate::protocol::record_batch::build_batch;
use crate::protocol::ErrorCode;
use crate::types::{Millis, TopicPartition};

/// Identifies one `send` for its completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId(pub u64);

/// A record to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    /// Destination.
    pub topic_partition: TopicPartition,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// CreateTime.
    pub timestamp_ms: i64,
}

/// Why a send failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProduceError {
    /// The broker definitely did not write the record.
    #[error("rejected: {error:?}: {message}")]
    Rejected {
        /// The Kafka error.
        error: ErrorCode,
        /// Details.
        message: String,
    },
    /// The record may or may not have been written.
    #[error("indeterminate: {reason}")]
    Indeterminate {
        /// Why we cannot know.
        reason: String,
    },
}

/// Inputs from the shell.
#[derive(Debug)]
pub enum ProducerInput {
    /// The application sends a record.
    Send {
        /// Its id.
        id: RecordId,
        /// The record.
        record: ProducerRecord,
    },
    /// The connection the core asked for is up.
    Connected,
    /// Connecting failed.
    ConnectFailed {
        /// Why.
        reason: String,
    },
    /// The connection broke (or the core asked to close it).
    Disconnected {
        /// Why.
        reason: String,
    },
    /// A request that expects no response (acks=0) was written.
    Written,
    /// The next Produce response, in request order.
    Response(ProduceResponse),
    /// A deadline passed.
    Tick,
}

/// Outputs to the shell.
#[derive(Debug)]
pub enum ProducerOutput {
    /// Open a connection.
    Connect,
    /// Close the connection (request timeout, protocol error). The core has already treated
    /// every request in flight as lost: do not feed [`ProducerInput::Disconnected`] back.
    Disconnect {
        /// Why.
        reason: String,
    },
    /// Write this request.
    Request {
        /// The request.
        request: ProduceRequest,
        /// Whether a response will come (acks != 0).
        expects_response: bool,
    },
    /// A send finished.
    Complete {
        /// Which.
        id: RecordId,
        /// Its offset (-1 with acks=0), or why it failed.
        result: Result<i64, ProduceError>,
    },
}

#[derive(Debug, Clone)]
struct Batch {
    id: RecordId,
    topic_partition: TopicPartition,
    bytes: Bytes,
    created: Millis,
    retries: u32,
    maybe_written: bool,
    retry_at: Millis,
}

#[derive(Debug)]
struct InFlight {
    batch: Batch,
    sent_at: Millis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnectionState {
    Idle,
    Connecting,
    Connected,
    Backoff { until: Millis, failures: u32 },
}

const RECONNECT_BACKOFF_MS: u64 = 50;
const RECONNECT_BACKOFF_MAX_MS: u64 = 1000;

/// The sender state machine.
#[derive(Debug)]
pub struct ProducerCore {
    config: ProducerConfig,
    queue: VecDeque<Batch>,
    in_flight: VecDeque<InFlight>,
    connection: ConnectionState,
    connect_failures: u32,
}

impl ProducerCore {
    /// A sender for a validated config. Idempotence is not implemented yet and is refused.
    pub fn new(config: ProducerConfig) -> Result<ProducerCore, ConfigError> {
        if config.enable_idempotence {
            return Err(ConfigError::not_implemented(
                "enable.idempotence",
                "the seedlog producer has no idempotence yet: set enable.idempotence=false (Kafka's default is true)",
            ));
        }
        Ok(ProducerCore {
            config,
            queue: VecDeque::new(),
            in_flight: VecDeque::new(),
            connection: ConnectionState::Idle,
            connect_failures: 0,
        })
    }

    /// Number of sends not yet completed.
    pub fn pending(&self) -> usize {
        self.queue.len() + self.in_flight.len()
    }

    /// Reacts to one input.
    pub fn handle(&mut self, now: Millis, input: ProducerInput, out: &mut Vec<ProducerOutput>) {
        match input {
            ProducerInput::Send { id, record } => {
                let bytes = build_batch(
                    &[(record.key.as_deref(), record.value.as_deref())],
                    record.timestamp_ms,
                );
                let batch = Batch {
                    id,
                    topic_partition: record.topic_partition,
                    bytes,
                    created: now,
                    retries: 0,
                    maybe_written: false,
                    retry_at: now,
                };
                self.requeue(batch);
            }
            ProducerInput::Connected => {
                assert_eq!(
                    self.connection,
                    ConnectionState::Connecting,
                    "connected without asking"
                );
                self.connection = ConnectionState::Connected;
                self.connect_failures = 0;
            }
            ProducerInput::ConnectFailed { reason } => {
                tracing::debug!(%reason, "producer connect failed");
                self.connect_failures += 1;
                self.backoff(now);
            }
            ProducerInput::Disconnected { reason } => self.on_disconnected(now, &reason, out),
            ProducerInput::Written => {
                let in_flight = self
                    .in_flight
                    .pop_front()
                    .expect("a write without a request in flight");
                assert_eq!(
                    self.config.acks,
                    Acks::None,
                    "only acks=0 requests complete on write"
                );
                out.push(ProducerOutput::Complete {
                    id: in_flight.batch.id,
                    result: Ok(-1),
                });
            }
            ProducerInput::Response(response) => self.on_produce_response(now, &response, out),
            ProducerInput::Tick => self.on_tick(now, out),
        }
        self.maybe_connect(out);
        self.maybe_send(now, out);
    }

    fn requeue(&mut self, batch: Batch) {
        let at = self.queue.partition_point(|queued| queued.id < batch.id);
        self.queue.insert(at, batch);
    }

    fn backoff(&mut self, now: Millis) {
        let exponent = self.connect_failures.saturating_sub(1).min(10);
        let delay = (RECONNECT_BACKOFF_MS << exponent).min(RECONNECT_BACKOFF_MAX_MS);
        self.connection = ConnectionState::Backoff {
            until: now.plus(delay),
            failures: self.connect_failures,
        };
    }

    fn maybe_connect(&mut self, out: &mut Vec<ProducerOutput>) {
        if self.connection == ConnectionState::Idle && !self.queue.is_empty() {
            self.connection = ConnectionState::Connecting;
            out.push(ProducerOutput::Connect);
        }
    }

    fn maybe_send(&mut self, now: Millis, out: &mut Vec<ProducerOutput>) {
        let max_in_flight = self.config.max_in_flight_requests_per_connection as usize;
        while self.connection == ConnectionState::Connected && self.in_flight.len() < max_in_flight
        {
            let Some(front) = self.queue.front() else {
                break;
            };
            if front.retry_at > now {
                break;
            }
            let batch = self.queue.pop_front().expect("front exists");
            let data = TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(
                    batch.topic_partition.topic.clone(),
                )))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(batch.topic_partition.partition)
                    .with_records(Some(batch.bytes.clone()))]);
            let request = ProduceRequest::default()
                .with_acks(self.config.acks.wire_value())
                .with_timeout_ms(self.config.request_timeout_ms.min(i32::MAX as u64) as i32)
                .with_topic_data(vec![data]);
            let expects_response = self.config.acks != Acks::None;
            self.in_flight.push_back(InFlight {
                batch,
                sent_at: now,
            });
            out.push(ProducerOutput::Request {
                request,
                expects_response,
            });
        }
    }

    fn on_produce_response(
        &mut self,
        now: Millis,
        response: &ProduceResponse,
        out: &mut Vec<ProducerOutput>,
    ) {
        let Some(in_flight) = self.in_flight.pop_front() else {
            let reason = "a produce response with nothing in flight".to_owned();
            out.push(ProducerOutput::Disconnect {
                reason: reason.clone(),
            });
            self.on_disconnected(now, &reason, out);
            return;
        };
        let partition = response
            .responses
            .iter()
            .find(|topic| topic.name.as_str() == in_flight.batch.topic_partition.topic)
            .and_then(|topic| {
                topic
                    .partition_responses
                    .iter()
                    .find(|entry| entry.index == in_flight.batch.topic_partition.partition)
            });
        let Some(partition) = partition else {
            let mut batch = in_flight.batch;
            batch.maybe_written = true;
            self.retry_or_fail(
                now,
                batch,
                "the response did not mention the partition",
                out,
            );
            return;
        };
        let error = ErrorCode::from_code(partition.error_code);
        if error == ErrorCode::None {
            out.push(ProducerOutput::Complete {
                id: in_flight.batch.id,
                result: Ok(partition.base_offset),
            });
            return;
        }
        let message = partition
            .error_message
            .as_ref()
            .map_or_else(|| format!("{error:?}"), |text| format!("{error:?}: {text}"));
        let mut batch = in_flight.batch;
        batch.maybe_written |= error.may_have_been_written();
        if error.is_retriable() {
            self.retry_or_fail(now, batch, &message, out);
        } else {
            out.push(ProducerOutput::Complete {
                id: batch.id,
                result: Err(Self::failure(&batch, error, message)),
            });
        }
    }

    fn failure(batch: &Batch, error: ErrorCode, message: String) -> ProduceError {
        if batch.maybe_written {
            ProduceError::Indeterminate {
                reason: format!("{message} (an earlier attempt may have been written)"),
            }
        } else {
            ProduceError::Rejected { error, message }
        }
    }

    fn retry_or_fail(
        &mut self,
        now: Millis,
        mut batch: Batch,
        reason: &str,
        out: &mut Vec<ProducerOutput>,
    ) {
        let expired = now >= batch.created.plus(self.config.delivery_timeout_ms);
        if batch.retries < self.config.retries as u32 && !expired {
            batch.retries += 1;
            batch.retry_at = now.plus(self.config.retry_backoff_ms);
            tracing::debug!(id = batch.id.0, retries = batch.retries, %reason, "retrying");
            self.requeue(batch);
        } else {
            let reason = format!("{reason}; gave up after {} retries", batch.retries);
            let result = Self::failure(&batch, ErrorCode::RequestTimedOut, reason);
            out.push(ProducerOutput::Complete {
                id: batch.id,
                result: Err(result),
            });
        }
    }

    fn on_disconnected(&mut self, now: Millis, reason: &str, out: &mut Vec<ProducerOutput>) {
        let lost: Vec<InFlight> = self.in_flight.drain(..).collect();
        for in_flight in lost {
            let mut batch = in_flight.batch;
            batch.maybe_written = true;
            self.retry_or_fail(now, batch, &format!("connection lost: {reason}"), out);
        }
        self.connect_failures += 1;
        self.backoff(now);
    }

    fn on_tick(&mut self, now: Millis, out: &mut Vec<ProducerOutput>) {
        if let ConnectionState::Backoff { until, .. } = self.connection {
            if now >= until {
                self.connection = ConnectionState::Idle;
            }
        }
        if let Some(oldest) = self.in_flight.front() {
            if now >= oldest.sent_at.plus(self.config.request_timeout_ms) {
                let reason = format!(
                    "request timed out after {} ms",
                    self.config.request_timeout_ms
                );
                out.push(ProducerOutput::Disconnect {
                    reason: reason.clone(),
                });
                self.on_disconnected(now, &reason, out);
            }
        }
        // The queue is ordered by id, which is creation order, so the oldest batches are in
        // front: expire from there.
        let delivery_timeout_ms = self.config.delivery_timeout_ms;
        while let Some(front) = self.queue.front() {
            if now < front.created.plus(delivery_timeout_ms) {
                break;
            }
            let batch = self.queue.pop_front().expect("front exists");
            let message = format!(
                "Expiring 1 record(s) for {}: delivery.timeout.ms of {delivery_timeout_ms} ms has passed",
                batch.topic_partition
            );
            let result = Err(Self::failure(&batch, ErrorCode::RequestTimedOut, message));
            out.push(ProducerOutput::Complete {
                id: batch.id,
                result,
            });
        }
    }

    /// The earliest time `handle(now, Tick)` must run.
    pub fn next_deadline(&self) -> Option<Millis> {
        let backoff = match self.connection {
            ConnectionState::Backoff { until, .. } => Some(until),
            _ => None,
        };
        let request_timeout = self
            .in_flight
            .front()
            .map(|oldest| oldest.sent_at.plus(self.config.request_timeout_ms));
        // Ordered by id = creation order: the front expires first.
        let delivery = self
            .queue
            .front()
            .map(|batch| batch.created.plus(self.config.delivery_timeout_ms));
        let retry = self
            .queue
            .front()
            .map(|batch| batch.retry_at)
            .filter(|_| self.connection == ConnectionState::Connected);
        [backoff, request_timeout, delivery, retry]
            .into_iter()
            .flatten()
            .min()
    }

    /// Cross-field invariants.
    pub fn check_invariants(&self) {
        assert!(
            self.in_flight.len() <= self.config.max_in_flight_requests_per_connection as usize,
            "too many requests in flight"
        );
        if self.connection != ConnectionState::Connected {
            assert!(
                self.in_flight.is_empty(),
                "requests in flight without a connection"
            );
        }
        // O(queue): debug builds only (the release simulator runs it per input otherwise).
        debug_assert!(
            self.queue
                .iter()
                .zip(self.queue.iter().skip(1))
                .all(|(a, b)| a.id < b.id && a.created <= b.created),
            "the queue is ordered by id, hence by creation time"
        );
    }
}

impl crate::state_machine::StateMachine for ProducerCore {
    type Input = ProducerInput;
    type Output = ProducerOutput;

    fn handle(&mut self, now: Millis, input: ProducerInput, out: &mut Vec<ProducerOutput>) {
        ProducerCore::handle(self, now, input, out);
    }

    fn next_deadline(&self) -> Option<Millis> {
        ProducerCore::next_deadline(self)
    }

    fn check_invariants(&self) {
        ProducerCore::check_invariants(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Configurable;
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };

    fn core(pairs: &[(&str, &str)]) -> ProducerCore {
        let mut config = ProducerConfig::default();
        config
            .apply(
                [("enable.idempotence", "false")]
                    .into_iter()
                    .chain(pairs.iter().copied()),
            )
            .expect("valid");
        ProducerCore::new(config).expect("core")
    }

    fn send(core: &mut ProducerCore, now: u64, id: u64) -> Vec<ProducerOutput> {
        let record = ProducerRecord {
            topic_partition: TopicPartition::new("t", 0),
            key: None,
            value: Some(Bytes::from(format!("v{id}"))),
            timestamp_ms: 0,
        };
        let mut out = Vec::new();
        core.handle(
            Millis(now),
            ProducerInput::Send {
                id: RecordId(id),
                record,
            },
            &mut out,
        );
        core.check_invariants();
        out
    }

    fn step(core: &mut ProducerCore, now: u64, input: ProducerInput) -> Vec<ProducerOutput> {
        let mut out = Vec::new();
        core.handle(Millis(now), input, &mut out);
        core.check_invariants();
        out
    }

    fn response(error: ErrorCode, base_offset: i64) -> ProduceResponse {
        let partition = PartitionProduceResponse::default()
            .with_index(0)
            .with_error_code(error.code())
            .with_base_offset(base_offset);
        ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_responses(vec![partition])])
    }

    fn completions(outputs: &[ProducerOutput]) -> Vec<(u64, Result<i64, ProduceError>)> {
        outputs
            .iter()
            .filter_map(|output| match output {
                ProducerOutput::Complete { id, result } => Some((id.0, result.clone())),
                _ => None,
            })
            .collect()
    }

    fn requests(outputs: &[ProducerOutput]) -> usize {
        outputs
            .iter()
            .filter(|output| matches!(output, ProducerOutput::Request { .. }))
            .count()
    }

    #[test]
    fn the_default_idempotent_config_is_refused_until_implemented() {
        let mut config = ProducerConfig::default();
        config.apply([]).expect("valid");
        assert!(ProducerCore::new(config).is_err());
    }

    #[test]
    fn pipelines_up_to_max_in_flight_and_completes_in_order() {
        let mut core = core(&[("max.in.flight.requests.per.connection", "2")]);
        assert!(matches!(
            send(&mut core, 0, 1).as_slice(),
            [ProducerOutput::Connect]
        ));
        send(&mut core, 0, 2);
        send(&mut core, 0, 3);
        assert_eq!(requests(&step(&mut core, 1, ProducerInput::Connected)), 2);
        let out = step(
            &mut core,
            2,
            ProducerInput::Response(response(ErrorCode::None, 10)),
        );
        assert_eq!(completions(&out), vec![(1, Ok(10))]);
        assert_eq!(requests(&out), 1, "a slot opened for the third");
    }

    #[test]
    fn a_lost_connection_retries_and_marks_the_outcome_indeterminate_when_retries_run_out() {
        let mut core = core(&[("retries", "1"), ("retry.backoff.ms", "10")]);
        send(&mut core, 0, 1);
        step(&mut core, 0, ProducerInput::Connected);
        let out = step(
            &mut core,
            5,
            ProducerInput::Disconnected {
                reason: "reset".into(),
            },
        );
        assert!(completions(&out).is_empty(), "one retry left");
        let out = step(&mut core, 100, ProducerInput::Tick);
        assert!(matches!(out.as_slice(), [ProducerOutput::Connect]));
        assert_eq!(requests(&step(&mut core, 101, ProducerInput::Connected)), 1);
        let out = step(
            &mut core,
            102,
            ProducerInput::Disconnected {
                reason: "reset".into(),
            },
        );
        assert!(matches!(
            completions(&out).as_slice(),
            [(1, Err(ProduceError::Indeterminate { .. }))]
        ));
    }

    #[test]
    fn a_non_retriable_error_on_the_first_attempt_is_a_definite_failure() {
        let mut core = core(&[]);
        send(&mut core, 0, 1);
        step(&mut core, 0, ProducerInput::Connected);
        let out = step(
            &mut core,
            1,
            ProducerInput::Response(response(ErrorCode::MessageTooLarge, -1)),
        );
        assert!(matches!(
            completions(&out).as_slice(),
            [(
                1,
                Err(ProduceError::Rejected {
                    error: ErrorCode::MessageTooLarge,
                    ..
                })
            )]
        ));
    }

    #[test]
    fn a_storage_error_without_retries_is_indeterminate() {
        let mut core = core(&[("retries", "0")]);
        send(&mut core, 0, 1);
        step(&mut core, 0, ProducerInput::Connected);
        let out = step(
            &mut core,
            1,
            ProducerInput::Response(response(ErrorCode::KafkaStorageError, -1)),
        );
        assert!(matches!(
            completions(&out).as_slice(),
            [(1, Err(ProduceError::Indeterminate { .. }))]
        ));
    }

    #[test]
    fn a_request_timeout_closes_the_connection_and_resends() {
        let mut core = core(&[
            ("request.timeout.ms", "1000"),
            ("delivery.timeout.ms", "5000"),
            ("linger.ms", "0"),
        ]);
        send(&mut core, 0, 1);
        step(&mut core, 0, ProducerInput::Connected);
        assert_eq!(core.next_deadline(), Some(Millis(1000)));
        let out = step(&mut core, 1000, ProducerInput::Tick);
        assert!(out
            .iter()
            .any(|output| matches!(output, ProducerOutput::Disconnect { .. })));
        assert_eq!(core.pending(), 1, "still queued for a retry");
    }

    #[test]
    fn with_two_in_flight_a_retried_first_batch_lands_after_the_second() {
        let mut core = core(&[("retry.backoff.ms", "0")]);
        send(&mut core, 0, 1);
        send(&mut core, 0, 2);
        assert_eq!(requests(&step(&mut core, 0, ProducerInput::Connected)), 2);
        let out = step(
            &mut core,
            1,
            ProducerInput::Response(response(ErrorCode::NotLeaderOrFollower, -1)),
        );
        assert_eq!(
            requests(&out),
            1,
            "batch 1 is resent while batch 2 is still in flight"
        );
        let out = step(
            &mut core,
            2,
            ProducerInput::Response(response(ErrorCode::None, 0)),
        );
        assert_eq!(completions(&out), vec![(2, Ok(0))]);
        let out = step(
            &mut core,
            3,
            ProducerInput::Response(response(ErrorCode::None, 1)),
        );
        assert_eq!(
            completions(&out),
            vec![(1, Ok(1))],
            "reordered: the anomaly idempotence exists to prevent"
        );
    }
}
