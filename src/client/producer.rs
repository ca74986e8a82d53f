//! The producer's accumulator and sender as a state machine (Kafka's `RecordAccumulator` and
//! `Sender`).
//!
//! Records are appended to an open batch of their partition (one deque of batches per
//! partition) while it stays within `batch.size`. A partition's first batch is *sendable* once
//! it is full, a later batch waits behind it, `linger.ms` has passed since it was opened, it is a
//! retry whose backoff is over, or the producer is closing. When any partition has a sendable
//! batch and a request slot is free, one Produce request takes the first batch of *every*
//! partition that is not backing off (Kafka's `drain`), within `max.request.size`; a drained batch
//! is closed to further records. At most `max.in.flight.requests.per.connection` requests are in
//! flight; responses come back in request order. A retriable error or a lost connection puts the
//! batch back in its partition's deque in creation order, ahead of every later batch still
//! queued, so with more than one request in flight and no idempotence a retry can land after a
//! later batch of the same partition, exactly as in Kafka.
//!
//! Failures are classified for the history: [`ProduceError::Rejected`] means the broker
//! definitely did not write the record (a Jepsen `fail`); [`ProduceError::Indeterminate`] means
//! it may have (an `info`): some attempt was written to a connection that then broke or timed
//! out, or the broker answered with an error that allows a write (NOT_ENOUGH_REPLICAS_AFTER_APPEND).

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::config::{Acks, ConfigError, ProducerConfig};
use crate::protocol::record_batch::BatchBuilder;
use crate::protocol::ErrorCode;
use crate::types::{Millis, TopicPartition};

/// Identifies one `send` for its completion. Ids increase in the order of the sends.
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
        /// Its id (larger than every earlier send's).
        id: RecordId,
        /// The record.
        record: ProducerRecord,
    },
    /// The application closes the producer: every batch is sendable at once, without waiting
    /// for `linger.ms` (Kafka's `close` and `flush`).
    Close,
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

/// A batch's records: still accepting more, or closed (drained once) and kept as sent.
#[derive(Debug, Clone)]
enum Contents {
    Open(BatchBuilder),
    Closed(Bytes),
}

#[derive(Debug, Clone)]
struct Batch {
    topic_partition: TopicPartition,
    /// The records' ids, in offset order within the batch.
    ids: Vec<RecordId>,
    contents: Contents,
    created: Millis,
    retries: u32,
    maybe_written: bool,
    retry_at: Millis,
}

impl Batch {
    fn first_id(&self) -> RecordId {
        self.ids[0]
    }

    fn size_bytes(&self) -> usize {
        match &self.contents {
            Contents::Open(builder) => builder.size_bytes(),
            Contents::Closed(bytes) => bytes.len(),
        }
    }

    /// Closes the batch to further records and returns its bytes.
    fn close(&mut self) -> Bytes {
        if let Contents::Open(builder) = &mut self.contents {
            let bytes = std::mem::take(builder).finish();
            self.contents = Contents::Closed(bytes);
        }
        match &self.contents {
            Contents::Closed(bytes) => bytes.clone(),
            Contents::Open(_) => unreachable!("closed above"),
        }
    }
}

#[derive(Debug)]
struct InFlight {
    batches: Vec<Batch>,
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

/// The accumulator and sender state machine.
#[derive(Debug)]
pub struct ProducerCore {
    config: ProducerConfig,
    /// Per partition, its batches not in flight, in creation order (a retried batch goes back
    /// ahead of later ones). Only the last batch of a deque may be open.
    batches: BTreeMap<TopicPartition, VecDeque<Batch>>,
    in_flight: VecDeque<InFlight>,
    /// Records sent by the application and not yet completed.
    unfinished: usize,
    /// Where the next drain starts among the partitions, so that under `max.request.size` no
    /// partition waits forever behind others (Kafka's `drainIndex`).
    drain_start: usize,
    closing: bool,
    connection: ConnectionState,
    connect_failures: u32,
}

impl ProducerCore {
    /// A producer for a validated config. Idempotence is not implemented yet and is refused.
    pub fn new(config: ProducerConfig) -> Result<ProducerCore, ConfigError> {
        if config.enable_idempotence {
            return Err(ConfigError::not_implemented(
                "enable.idempotence",
                "the seedlog producer has no idempotence yet: set enable.idempotence=false (Kafka's default is true)",
            ));
        }
        Ok(ProducerCore {
            config,
            batches: BTreeMap::new(),
            in_flight: VecDeque::new(),
            unfinished: 0,
            drain_start: 0,
            closing: false,
            connection: ConnectionState::Idle,
            connect_failures: 0,
        })
    }

    /// Number of sends not yet completed.
    pub fn pending(&self) -> usize {
        self.unfinished
    }

    /// Reacts to one input.
    pub fn handle(&mut self, now: Millis, input: ProducerInput, out: &mut Vec<ProducerOutput>) {
        match input {
            ProducerInput::Send { id, record } => self.append(now, id, &record, out),
            ProducerInput::Close => self.closing = true,
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
                for batch in in_flight.batches {
                    for id in batch.ids {
                        self.complete(id, Ok(-1), out);
                    }
                }
            }
            ProducerInput::Response(response) => self.on_produce_response(now, &response, out),
            ProducerInput::Tick => self.on_tick(now, out),
        }
        self.maybe_connect(out);
        self.maybe_send(now, out);
    }

    fn complete(
        &mut self,
        id: RecordId,
        result: Result<i64, ProduceError>,
        out: &mut Vec<ProducerOutput>,
    ) {
        self.unfinished -= 1;
        out.push(ProducerOutput::Complete { id, result });
    }

    /// Kafka's `RecordAccumulator.append`: into the partition's open batch if the record fits
    /// within `batch.size`, else into a new batch (a record larger than `batch.size` gets a batch
    /// of its own). A record whose batch alone would exceed `max.request.size` is refused.
    fn append(
        &mut self,
        now: Millis,
        id: RecordId,
        record: &ProducerRecord,
        out: &mut Vec<ProducerOutput>,
    ) {
        self.unfinished += 1;
        let key = record.key.as_deref();
        let value = record.value.as_deref();
        let alone = BatchBuilder::default().size_with(record.timestamp_ms, key, value);
        if alone > self.config.max_request_size as usize {
            let message = format!(
                "The message is {alone} bytes when serialized which is larger than {}, which is the value of the max.request.size configuration.",
                self.config.max_request_size
            );
            self.complete(
                id,
                Err(ProduceError::Rejected {
                    error: ErrorCode::MessageTooLarge,
                    message,
                }),
                out,
            );
            return;
        }
        let batch_size = self.config.batch_size as usize;
        let deque = self
            .batches
            .entry(record.topic_partition.clone())
            .or_default();
        if let Some(last) = deque.back_mut() {
            if let Contents::Open(builder) = &mut last.contents {
                if builder.size_with(record.timestamp_ms, key, value) <= batch_size {
                    builder.push(record.timestamp_ms, key, value);
                    last.ids.push(id);
                    return;
                }
                // Full: closed to further records (Kafka's `closeForRecordAppends`).
                last.close();
            }
        }
        let mut builder = BatchBuilder::default();
        builder.push(record.timestamp_ms, key, value);
        deque.push_back(Batch {
            topic_partition: record.topic_partition.clone(),
            ids: vec![id],
            contents: Contents::Open(builder),
            created: now,
            retries: 0,
            maybe_written: false,
            retry_at: now,
        });
    }

    /// Puts a batch back into its partition's deque, in creation order.
    fn requeue(&mut self, batch: Batch) {
        let deque = self
            .batches
            .entry(batch.topic_partition.clone())
            .or_default();
        let at = deque.partition_point(|queued| queued.first_id() < batch.first_id());
        deque.insert(at, batch);
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
        if self.connection == ConnectionState::Idle && !self.batches.is_empty() {
            self.connection = ConnectionState::Connecting;
            out.push(ProducerOutput::Connect);
        }
    }

    /// When the first batch of `deque` becomes sendable (Kafka's `ready`): at once when it is
    /// full, has a batch behind it, is a retry or the producer is closing; otherwise when
    /// `linger.ms` has passed since it was opened. Never before its retry backoff ends.
    fn sendable_at(&self, deque: &VecDeque<Batch>) -> Option<Millis> {
        let front = deque.front()?;
        let at_once = self.closing
            || deque.len() > 1
            || front.retries > 0
            || front.size_bytes() >= self.config.batch_size as usize;
        let lingered = if at_once {
            front.created
        } else {
            front.created.plus(self.config.linger_ms)
        };
        Some(lingered.max(front.retry_at))
    }

    fn any_sendable(&self, now: Millis) -> bool {
        self.batches
            .values()
            .any(|deque| self.sendable_at(deque).is_some_and(|at| at <= now))
    }

    fn maybe_send(&mut self, now: Millis, out: &mut Vec<ProducerOutput>) {
        let max_in_flight = self.config.max_in_flight_requests_per_connection as usize;
        while self.connection == ConnectionState::Connected
            && self.in_flight.len() < max_in_flight
            && self.any_sendable(now)
        {
            let batches = self.drain(now);
            assert!(!batches.is_empty(), "a sendable batch drains");
            let request = self.request_for(&batches);
            let expects_response = self.config.acks != Acks::None;
            self.in_flight.push_back(InFlight {
                batches,
                sent_at: now,
            });
            out.push(ProducerOutput::Request {
                request,
                expects_response,
            });
        }
    }

    /// Kafka's `drainBatchesForOneNode`: the first batch of every partition not backing off,
    /// lingering or not, starting from a rotating partition, within `max.request.size` (the first
    /// batch always goes).
    fn drain(&mut self, now: Millis) -> Vec<Batch> {
        let partitions: Vec<TopicPartition> = self.batches.keys().cloned().collect();
        let start = self.drain_start % partitions.len().max(1);
        self.drain_start = self.drain_start.wrapping_add(1);
        let mut drained: Vec<Batch> = Vec::new();
        let mut size = 0;
        for partition in partitions[start..].iter().chain(&partitions[..start]) {
            let deque = self.batches.get_mut(partition).expect("listed above");
            let front = deque.front().expect("empty deques are removed");
            if front.retry_at > now {
                continue;
            }
            if !drained.is_empty()
                && size + front.size_bytes() > self.config.max_request_size as usize
            {
                break;
            }
            let mut batch = deque.pop_front().expect("front exists");
            if deque.is_empty() {
                self.batches.remove(partition);
            }
            batch.close();
            size += batch.size_bytes();
            drained.push(batch);
        }
        drained
    }

    fn request_for(&self, batches: &[Batch]) -> ProduceRequest {
        let mut topics: Vec<TopicProduceData> = Vec::new();
        for batch in batches {
            let records = match &batch.contents {
                Contents::Closed(bytes) => bytes.clone(),
                Contents::Open(_) => unreachable!("drained batches are closed"),
            };
            let data = PartitionProduceData::default()
                .with_index(batch.topic_partition.partition)
                .with_records(Some(records));
            let topic = &batch.topic_partition.topic;
            match topics.iter_mut().find(|entry| entry.name.as_str() == topic) {
                Some(entry) => entry.partition_data.push(data),
                None => topics.push(
                    TopicProduceData::default()
                        .with_name(TopicName(StrBytes::from_string(topic.clone())))
                        .with_partition_data(vec![data]),
                ),
            }
        }
        ProduceRequest::default()
            .with_acks(self.config.acks.wire_value())
            .with_timeout_ms(self.config.request_timeout_ms.min(i32::MAX as u64) as i32)
            .with_topic_data(topics)
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
        for mut batch in in_flight.batches {
            let partition = response
                .responses
                .iter()
                .find(|topic| topic.name.as_str() == batch.topic_partition.topic)
                .and_then(|topic| {
                    topic
                        .partition_responses
                        .iter()
                        .find(|entry| entry.index == batch.topic_partition.partition)
                });
            let Some(partition) = partition else {
                batch.maybe_written = true;
                self.retry_or_fail(
                    now,
                    batch,
                    "the response did not mention the partition",
                    out,
                );
                continue;
            };
            let error = ErrorCode::from_code(partition.error_code);
            if error == ErrorCode::None {
                let base_offset = partition.base_offset;
                for (index, id) in batch.ids.into_iter().enumerate() {
                    self.complete(id, Ok(base_offset + index as i64), out);
                }
                continue;
            }
            let message = partition
                .error_message
                .as_ref()
                .map_or_else(|| format!("{error:?}"), |text| format!("{error:?}: {text}"));
            batch.maybe_written |= error.may_have_been_written();
            if error.is_retriable() {
                self.retry_or_fail(now, batch, &message, out);
            } else {
                self.fail(&batch, error, message, out);
            }
        }
    }

    /// Fails every record of `batch`: definitely, unless some attempt may have been written.
    fn fail(
        &mut self,
        batch: &Batch,
        error: ErrorCode,
        message: String,
        out: &mut Vec<ProducerOutput>,
    ) {
        let result = if batch.maybe_written {
            ProduceError::Indeterminate {
                reason: format!("{message} (an earlier attempt may have been written)"),
            }
        } else {
            ProduceError::Rejected { error, message }
        };
        for &id in &batch.ids {
            self.complete(id, Err(result.clone()), out);
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
            tracing::debug!(
                first = batch.first_id().0,
                records = batch.ids.len(),
                retries = batch.retries,
                %reason,
                "retrying"
            );
            self.requeue(batch);
        } else {
            let reason = format!("{reason}; gave up after {} retries", batch.retries);
            self.fail(&batch, ErrorCode::RequestTimedOut, reason, out);
        }
    }

    fn on_disconnected(&mut self, now: Millis, reason: &str, out: &mut Vec<ProducerOutput>) {
        let lost: Vec<InFlight> = self.in_flight.drain(..).collect();
        for in_flight in lost {
            for mut batch in in_flight.batches {
                batch.maybe_written = true;
                self.retry_or_fail(now, batch, &format!("connection lost: {reason}"), out);
            }
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
        // Each deque is in creation order, so its oldest batches are in front: expire from there.
        let delivery_timeout_ms = self.config.delivery_timeout_ms;
        let mut expired = Vec::new();
        self.batches.retain(|_, deque| {
            while deque
                .front()
                .is_some_and(|front| now >= front.created.plus(delivery_timeout_ms))
            {
                expired.push(deque.pop_front().expect("front exists"));
            }
            !deque.is_empty()
        });
        for batch in expired {
            let message = format!(
                "Expiring {} record(s) for {}: delivery.timeout.ms of {delivery_timeout_ms} ms has passed",
                batch.ids.len(),
                batch.topic_partition
            );
            self.fail(&batch, ErrorCode::RequestTimedOut, message, out);
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
        // Each deque is in creation order: its front expires first.
        let delivery = self
            .batches
            .values()
            .filter_map(|deque| deque.front())
            .map(|batch| batch.created.plus(self.config.delivery_timeout_ms))
            .min();
        // A batch becoming sendable matters only when it can go out.
        let can_send = self.connection == ConnectionState::Connected
            && self.in_flight.len() < self.config.max_in_flight_requests_per_connection as usize;
        let sendable = self
            .batches
            .values()
            .filter(|_| can_send)
            .filter_map(|deque| self.sendable_at(deque))
            .min();
        [backoff, request_timeout, delivery, sendable]
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
        // O(batches): debug builds only (the release simulator runs it per input otherwise).
        if cfg!(debug_assertions) {
            let mut records = 0;
            for deque in self.batches.values() {
                assert!(!deque.is_empty(), "empty deques are removed");
                assert!(
                    deque.iter().zip(deque.iter().skip(1)).all(|(a, b)| {
                        a.first_id() < b.first_id()
                            && a.created <= b.created
                            && matches!(a.contents, Contents::Closed(_))
                    }),
                    "a deque is in creation order and only its last batch is open"
                );
                records += deque.iter().map(|batch| batch.ids.len()).sum::<usize>();
            }
            records += self
                .in_flight
                .iter()
                .flat_map(|in_flight| &in_flight.batches)
                .map(|batch| batch.ids.len())
                .sum::<usize>();
            assert_eq!(
                records, self.unfinished,
                "every unfinished record is in a batch"
            );
        }
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
                // One record per batch and no lingering, unless a test says otherwise.
                [
                    ("enable.idempotence", "false"),
                    ("linger.ms", "0"),
                    ("batch.size", "1"),
                ]
                .into_iter()
                .chain(pairs.iter().copied()),
            )
            .expect("valid");
        ProducerCore::new(config).expect("core")
    }

    fn send(core: &mut ProducerCore, now: u64, id: u64) -> Vec<ProducerOutput> {
        send_to(core, now, id, 0)
    }

    fn send_to(core: &mut ProducerCore, now: u64, id: u64, partition: i32) -> Vec<ProducerOutput> {
        let record = ProducerRecord {
            topic_partition: TopicPartition::new("t", partition),
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

    /// Per request: its batches as (partition, record count).
    fn batches(outputs: &[ProducerOutput]) -> Vec<Vec<(i32, i32)>> {
        outputs
            .iter()
            .filter_map(|output| match output {
                ProducerOutput::Request { request, .. } => Some(
                    request
                        .topic_data
                        .iter()
                        .flat_map(|topic| &topic.partition_data)
                        .map(|data| {
                            let bytes = data.records.as_ref().expect("records");
                            let header = crate::protocol::record_batch::validate_batch(bytes)
                                .expect("a valid batch");
                            (data.index, header.records_count)
                        })
                        .collect(),
                ),
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

    fn connected(core: &mut ProducerCore) {
        assert!(matches!(
            send(core, 0, 1).as_slice(),
            [ProducerOutput::Connect]
        ));
        step(core, 0, ProducerInput::Connected);
    }

    #[test]
    fn records_accumulate_in_one_batch_until_linger_ms_passes() {
        let mut core = core(&[("linger.ms", "5"), ("batch.size", "16384")]);
        connected(&mut core);
        assert_eq!(requests(&send(&mut core, 2, 2)), 0, "still lingering");
        assert_eq!(requests(&send(&mut core, 4, 3)), 0, "still lingering");
        assert_eq!(core.next_deadline(), Some(Millis(5)));
        let out = step(&mut core, 5, ProducerInput::Tick);
        assert_eq!(batches(&out), vec![vec![(0, 3)]]);
        let out = step(
            &mut core,
            6,
            ProducerInput::Response(response(ErrorCode::None, 10)),
        );
        assert_eq!(
            completions(&out),
            vec![(1, Ok(10)), (2, Ok(11)), (3, Ok(12))]
        );
        assert_eq!(core.pending(), 0);
    }

    #[test]
    fn a_full_batch_goes_at_once_and_a_record_that_does_not_fit_opens_the_next() {
        // A batch of n records of value "vN" is 61 + 9n bytes: two fit in 80, three do not.
        let mut core = core(&[("linger.ms", "1000"), ("batch.size", "80")]);
        connected(&mut core);
        let out = send(&mut core, 1, 2);
        assert_eq!(
            requests(&out),
            0,
            "two records fit, the batch is not full yet"
        );
        let out = send(&mut core, 2, 3);
        assert_eq!(
            batches(&out),
            vec![vec![(0, 2)]],
            "the third record opened a second batch, so the first is sendable"
        );
        assert_eq!(
            core.next_deadline(),
            Some(Millis(1002)),
            "the second lingers"
        );
    }

    #[test]
    fn a_request_carries_the_first_batch_of_every_partition_once_one_is_sendable() {
        let mut core = core(&[("linger.ms", "5"), ("batch.size", "16384")]);
        connected(&mut core);
        send_to(&mut core, 3, 2, 1);
        send_to(&mut core, 4, 3, 2);
        let out = step(&mut core, 5, ProducerInput::Tick);
        assert_eq!(
            batches(&out),
            vec![vec![(0, 1), (1, 1), (2, 1)]],
            "partition 0 lingered 5 ms; partitions 1 and 2 ride along"
        );
    }

    #[test]
    fn max_request_size_refuses_a_larger_record_and_splits_requests() {
        let mut core = core(&[("max.request.size", "100")]);
        let record = ProducerRecord {
            topic_partition: TopicPartition::new("t", 0),
            key: None,
            value: Some(Bytes::from(vec![0_u8; 64])),
            timestamp_ms: 0,
        };
        let out = step(
            &mut core,
            0,
            ProducerInput::Send {
                id: RecordId(1),
                record,
            },
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
        assert_eq!(core.pending(), 0);
        send_to(&mut core, 0, 2, 0);
        send_to(&mut core, 0, 3, 1);
        let out = step(&mut core, 0, ProducerInput::Connected);
        assert_eq!(
            batches(&out),
            vec![vec![(0, 1)], vec![(1, 1)]],
            "two batches of 68 bytes do not fit one request of 100"
        );
    }

    #[test]
    fn closing_sends_lingering_batches_at_once() {
        let mut core = core(&[("linger.ms", "1000"), ("batch.size", "16384")]);
        connected(&mut core);
        let out = step(&mut core, 1, ProducerInput::Close);
        assert_eq!(batches(&out), vec![vec![(0, 1)]]);
    }

    #[test]
    fn a_lingering_batch_expires_whole_after_delivery_timeout_ms() {
        let mut core = core(&[
            ("linger.ms", "5"),
            ("batch.size", "16384"),
            ("request.timeout.ms", "100"),
            ("delivery.timeout.ms", "200"),
        ]);
        send(&mut core, 0, 1);
        send(&mut core, 1, 2);
        step(
            &mut core,
            0,
            ProducerInput::ConnectFailed {
                reason: "refused".into(),
            },
        );
        assert_eq!(core.next_deadline(), Some(Millis(50)), "reconnect backoff");
        let out = step(&mut core, 200, ProducerInput::Tick);
        let failed = completions(&out);
        assert_eq!(failed.len(), 2);
        assert!(failed.iter().all(|(_, result)| matches!(
            result,
            Err(ProduceError::Rejected {
                error: ErrorCode::RequestTimedOut,
                ..
            })
        )));
    }
}
