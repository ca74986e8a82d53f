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
//! Each broker gets its own connection (Kafka's `NetworkClient`): batches go to their
//! partition's leader as the metadata cache knows it, `max.in.flight.requests.per.connection`
//! counts per connection, and a partition whose leader is unknown waits for fresh metadata.
//! Metadata requests go to the least loaded connected broker. The first connection goes to a
//! bootstrap server ([`BOOTSTRAP`]); once an answer names the broker at that address, the
//! connection becomes that broker's (as librdkafka does), so one broker means one connection.
//!
//! Failures are classified for the history: [`ProduceError::Rejected`] means the broker
//! definitely did not write the record (a Jepsen `fail`); [`ProduceError::Indeterminate`] means
//! it may have (an `info`): some attempt was written to a connection that then broke or timed
//! out, or the broker answered with an error that allows a write (NOT_ENOUGH_REPLICAS_AFTER_APPEND).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, MetadataRequest, MetadataResponse,
    ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::backoff::ExponentialBackoff;
use crate::client::connections::Connections;
pub use crate::client::connections::{NodeId, BOOTSTRAP};
use crate::client::metadata::{refreshes_metadata, MetadataCache, TopicState};
use crate::client::partitioner::partition_for_key;
use crate::config::{Acks, ConfigError, ProducerConfig};
use crate::protocol::compression::Codec;
use crate::protocol::record_batch::{stamp_producer, BatchBuilder};
use crate::protocol::ErrorCode;
use crate::types::{Millis, TopicPartition};

mod idempotence;
use idempotence::{Idempotence, Stamp};

/// Identifies one `send` for its completion. Ids increase in the order of the sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId(pub u64);

/// A record to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    /// Destination topic.
    pub topic: String,
    /// Destination partition; `None` lets the partitioner choose: murmur2 of the key, or the
    /// sticky partition for a record without a key (or with `partitioner.ignore.keys`).
    pub partition: Option<i32>,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// CreateTime.
    pub timestamp_ms: i64,
}

/// Where a record was written (Kafka's `RecordMetadata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMetadata {
    /// The partition the record went to.
    pub partition: i32,
    /// Its offset (-1 with acks=0).
    pub offset: i64,
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
    /// The connection broke (or the core asked to close it).
    Disconnected {
        /// Which.
        node: NodeId,
        /// Why.
        reason: String,
    },
    /// A request that expects no response (acks=0) was written.
    Written {
        /// On which connection.
        node: NodeId,
    },
    /// The next response of a connection, in request order: a Produce response.
    Response {
        /// Which connection.
        node: NodeId,
        /// The response.
        response: ProduceResponse,
    },
    /// The next response of a connection, in request order: a Metadata response.
    Metadata {
        /// Which connection.
        node: NodeId,
        /// The response.
        response: MetadataResponse,
    },
    /// The next response of a connection, in request order: an InitProducerId response.
    ProducerId {
        /// Which connection.
        node: NodeId,
        /// The response.
        response: InitProducerIdResponse,
    },
    /// A deadline passed.
    Tick,
}

/// Outputs to the shell.
#[derive(Debug)]
pub enum ProducerOutput {
    /// Open a connection to `node`.
    Connect {
        /// Which node.
        node: NodeId,
        /// Its `host:port`; `None` for [`BOOTSTRAP`]: one of `bootstrap.servers`, the shell's
        /// choice (the next one after a failure).
        address: Option<String>,
    },
    /// The bootstrap connection turned out to be `node`'s: key it by `node` from now on.
    Identified {
        /// The broker at the bootstrap server's address.
        node: NodeId,
    },
    /// Close a connection (request timeout, protocol error). The core has already treated
    /// every request in flight on it as lost: do not feed [`ProducerInput::Disconnected`] back.
    Disconnect {
        /// Which.
        node: NodeId,
        /// Why.
        reason: String,
    },
    /// Write this Metadata request on `node`'s connection (a response will come).
    MetadataRequest {
        /// Which connection.
        node: NodeId,
        /// The request.
        request: MetadataRequest,
    },
    /// Write this InitProducerId request on `node`'s connection (a response will come).
    ProducerIdRequest {
        /// Which connection.
        node: NodeId,
        /// The request.
        request: InitProducerIdRequest,
    },
    /// Write this Produce request on `node`'s connection.
    Request {
        /// Which connection.
        node: NodeId,
        /// The request.
        request: ProduceRequest,
        /// Whether a response will come (acks != 0).
        expects_response: bool,
    },
    /// A send finished.
    Complete {
        /// Which.
        id: RecordId,
        /// Where it was written, or why it failed.
        result: Result<RecordMetadata, ProduceError>,
    },
}

/// The errors by which a broker refuses an idempotent batch's stamp.
fn is_sequence_error(error: ErrorCode) -> bool {
    matches!(
        error,
        ErrorCode::OutOfOrderSequenceNumber
            | ErrorCode::InvalidProducerEpoch
            | ErrorCode::UnknownProducerId
    )
}

/// The jitter generator's state before [`ProducerCore::with_seed`], and what a seed is mixed
/// with for it.
const JITTER_SEED: u64 = 0x6a09_e667_f3bc_c909;

/// xorshift64*: the next value of `state`.
fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Whether `batch` was stamped and an attempt of it may have been written: once its stamp is
/// stale (the producer bumped its epoch) it must not be stamped afresh.
fn stamped_and_maybe_written(batch: &Batch) -> bool {
    batch.stamp.is_some() && batch.maybe_written
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
    /// The idempotence stamp its bytes carry (idempotent producers, once drained).
    stamp: Option<Stamp>,
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

    /// Closes the batch to further records: its bytes are final, compressed with `codec`.
    fn close(&mut self, codec: Codec) {
        if let Contents::Open(builder) = &mut self.contents {
            let bytes = std::mem::take(builder).finish_compressed(codec);
            self.contents = Contents::Closed(bytes);
        }
    }
}

#[derive(Debug)]
enum Awaited {
    Produce(Vec<Batch>),
    Metadata,
    ProducerId,
}

#[derive(Debug)]
struct InFlight {
    awaited: Awaited,
    sent_at: Millis,
}

/// A record waiting for its topic's metadata (Kafka's `send` blocks on it up to
/// `max.block.ms`).
#[derive(Debug)]
struct Unrouted {
    id: RecordId,
    record: ProducerRecord,
    since: Millis,
}

/// The sticky partition of a topic for records without a key (KIP-480, KIP-794): kept until
/// `batch.size` bytes went to it, then another is drawn.
#[derive(Debug, Clone, Copy)]
struct Sticky {
    partition: i32,
    bytes: usize,
}

/// The accumulator and sender state machine.
#[derive(Debug)]
pub struct ProducerCore {
    config: ProducerConfig,
    /// Per partition, its batches not in flight, in creation order (a retried batch goes back
    /// ahead of later ones). Only the last batch of a deque may be open.
    batches: BTreeMap<TopicPartition, VecDeque<Batch>>,
    /// Connections by node, with the requests in flight on each.
    nodes: Connections<InFlight>,
    /// Records waiting for their topic's metadata, in send order.
    unrouted: VecDeque<Unrouted>,
    metadata: MetadataCache,
    sticky: BTreeMap<String, Sticky>,
    /// Each topic's name as its batches' keys share it: one copy a topic, not one a record.
    topic_names: BTreeMap<String, Arc<str>>,
    /// xorshift64* state for the sticky partitioner (seeded by the shell).
    rng: u64,
    /// `retry.backoff.ms` growing to `retry.backoff.max.ms`.
    backoff: ExponentialBackoff,
    /// xorshift64* state for the backoff's jitter, apart from the partitioner's so that a retry
    /// does not change which partitions later records stick to.
    jitter_rng: u64,
    /// Records sent by the application and not yet completed.
    unfinished: usize,
    /// Where the next drain starts among the partitions, so that under `max.request.size` no
    /// partition waits forever behind others (Kafka's `drainIndex`).
    drain_start: usize,
    closing: bool,
    /// `enable.idempotence`: the producer id and the sequences.
    idempotence: Option<Idempotence>,
    /// Bytes of the records admitted and not completed (each counted at its size as a batch of
    /// one), never above `buffer.memory`.
    buffered: u64,
    /// What each admitted, unfinished record counts in `buffered`.
    record_bytes: BTreeMap<RecordId, u64>,
    /// Sends waiting for room in `buffer.memory` (Kafka's `send` blocks on the `BufferPool`, up
    /// to `max.block.ms`), in send order, with their sizes.
    waiting_for_memory: VecDeque<(Unrouted, u64)>,
}

impl ProducerCore {
    /// A producer for a validated config.
    pub fn new(config: ProducerConfig) -> Result<ProducerCore, ConfigError> {
        let idempotence = config.enable_idempotence.then(Idempotence::default);
        let metadata =
            MetadataCache::new(config.metadata_max_age_ms, config.retry_backoff_ms, true);
        let backoff = ExponentialBackoff::new(config.retry_backoff_ms, config.retry_backoff_max_ms);
        Ok(ProducerCore {
            config,
            batches: BTreeMap::new(),
            unrouted: VecDeque::new(),
            metadata,
            sticky: BTreeMap::new(),
            topic_names: BTreeMap::new(),
            rng: 0x9e37_79b9_7f4a_7c15,
            backoff,
            jitter_rng: JITTER_SEED,
            nodes: Connections::default(),
            unfinished: 0,
            drain_start: 0,
            closing: false,
            idempotence,
            buffered: 0,
            record_bytes: BTreeMap::new(),
            waiting_for_memory: VecDeque::new(),
        })
    }

    /// Seeds the sticky partitioner's and the retry jitter's random choices (the simulator's
    /// seed, or entropy).
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> ProducerCore {
        self.rng = seed | 1;
        self.jitter_rng = (seed ^ JITTER_SEED) | 1;
        self
    }

    /// Number of sends not yet completed.
    pub fn pending(&self) -> usize {
        self.unfinished
    }

    /// Reacts to one input.
    pub fn handle(&mut self, now: Millis, input: ProducerInput, out: &mut Vec<ProducerOutput>) {
        match input {
            ProducerInput::Send { id, record } => self.on_send(now, id, record, out),
            ProducerInput::Close => self.closing = true,
            ProducerInput::Connected { node, address } => {
                self.nodes.on_connected(node, address);
                self.identify_bootstrap(out);
            }
            ProducerInput::ConnectFailed { node, reason } => {
                tracing::debug!(node, %reason, "producer connect failed");
                self.nodes.on_lost(now, node);
                // "Maybe the problem is our metadata, update it" (Kafka's NetworkClient): a
                // leader that refuses connections may have been replaced.
                self.metadata.request_update();
            }
            ProducerInput::Disconnected { node, reason } => {
                self.on_disconnected(now, node, &reason, out);
            }
            ProducerInput::Written { node } => {
                let in_flight = self
                    .nodes
                    .get_mut(node)
                    .and_then(|connection| connection.in_flight.pop_front())
                    .expect("a write without a request in flight");
                assert_eq!(
                    self.config.acks,
                    Acks::None,
                    "only acks=0 requests complete on write"
                );
                let Awaited::Produce(batches) = in_flight.awaited else {
                    panic!("only Produce requests go without a response");
                };
                for batch in batches {
                    let partition = batch.topic_partition.partition;
                    for id in batch.ids {
                        self.complete(
                            id,
                            Ok(RecordMetadata {
                                partition,
                                offset: -1,
                            }),
                            out,
                        );
                    }
                }
            }
            ProducerInput::Response { node, response } => {
                self.on_produce_response(now, node, &response, out);
            }
            ProducerInput::Metadata { node, response } => {
                self.on_metadata_response(now, node, &response, out);
            }
            ProducerInput::ProducerId { node, response } => {
                self.on_producer_id_response(now, node, &response, out);
            }
            ProducerInput::Tick => self.on_tick(now, out),
        }
        self.admit_waiting(now, out);
        self.maybe_connect(out);
        self.maybe_send(now, out);
    }

    fn complete(
        &mut self,
        id: RecordId,
        result: Result<RecordMetadata, ProduceError>,
        out: &mut Vec<ProducerOutput>,
    ) {
        self.unfinished -= 1;
        if let Some(size) = self.record_bytes.remove(&id) {
            self.buffered -= size;
        }
        out.push(ProducerOutput::Complete { id, result });
    }

    /// A record whose batch alone would exceed `max.request.size` or `buffer.memory` is refused
    /// at once; any other waits for room in `buffer.memory`, then for its topic's metadata, then
    /// goes to its partition's batches.
    fn on_send(
        &mut self,
        now: Millis,
        id: RecordId,
        record: ProducerRecord,
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
        let size = alone as u64;
        if size > self.config.buffer_memory {
            let message = format!(
                "The message is {size} bytes when serialized which is larger than the total memory buffer you have configured with the buffer.memory configuration."
            );
            let error = ErrorCode::MessageTooLarge;
            self.complete(id, Err(ProduceError::Rejected { error, message }), out);
            return;
        }
        let unrouted = Unrouted {
            id,
            record,
            since: now,
        };
        if self.waiting_for_memory.is_empty() && self.buffered + size <= self.config.buffer_memory {
            self.admit(now, unrouted, size, out);
        } else {
            self.waiting_for_memory.push_back((unrouted, size));
        }
    }

    /// Counts a record in `buffer.memory` and routes it.
    fn admit(&mut self, now: Millis, unrouted: Unrouted, size: u64, out: &mut Vec<ProducerOutput>) {
        self.buffered += size;
        self.record_bytes.insert(unrouted.id, size);
        self.metadata.want(&unrouted.record.topic);
        // Only a metadata answer changes what the cache knows, and every answer routes all that
        // waits (`route`): the records still waiting are of topics not known yet, so the new
        // record is the only one this send can move.
        if let Some(waiting) = self.route_one(now, unrouted, out) {
            self.unrouted.push_back(waiting);
        }
    }

    /// Admits the sends waiting for memory, in send order, while they fit.
    fn admit_waiting(&mut self, now: Millis, out: &mut Vec<ProducerOutput>) {
        while self
            .waiting_for_memory
            .front()
            .is_some_and(|(_, size)| self.buffered + size <= self.config.buffer_memory)
        {
            let (unrouted, size) = self.waiting_for_memory.pop_front().expect("front exists");
            self.admit(now, unrouted, size, out);
        }
    }

    /// Moves every waiting record whose topic's metadata is known to its partition, in send
    /// order; fails those whose topic failed, or whose partition does not exist.
    fn route(&mut self, now: Millis, out: &mut Vec<ProducerOutput>) {
        for unrouted in std::mem::take(&mut self.unrouted) {
            if let Some(waiting) = self.route_one(now, unrouted, out) {
                self.unrouted.push_back(waiting);
            }
        }
    }

    /// Routes one record by what the cache says of its topic, or hands it back to wait.
    fn route_one(
        &mut self,
        now: Millis,
        unrouted: Unrouted,
        out: &mut Vec<ProducerOutput>,
    ) -> Option<Unrouted> {
        let topic = unrouted.record.topic.as_str();
        let count = match self.metadata.topic(topic) {
            Some(TopicState::Known(partitions)) => partitions.len() as i32,
            Some(TopicState::Failed(error)) => {
                let error = *error;
                let message = format!("metadata for topic {topic} answered {error:?}");
                self.complete(
                    unrouted.id,
                    Err(ProduceError::Rejected { error, message }),
                    out,
                );
                return None;
            }
            Some(TopicState::Pending(_)) | None => return Some(unrouted),
        };
        match self.choose_partition(&unrouted.record, count) {
            Ok(partition) => self.append(now, unrouted.id, &unrouted.record, partition),
            Err(message) => self.complete(
                unrouted.id,
                Err(ProduceError::Rejected {
                    error: ErrorCode::UnknownTopicOrPartition,
                    message,
                }),
                out,
            ),
        }
        None
    }

    /// Kafka's default partitioning: the record's own partition, murmur2 of its key, or the
    /// topic's sticky partition, switched after `batch.size` bytes (KIP-794).
    fn choose_partition(&mut self, record: &ProducerRecord, count: i32) -> Result<i32, String> {
        if let Some(partition) = record.partition {
            if partition < 0 || partition >= count {
                return Err(format!(
                    "Partition {partition} of topic {} with partition count {count} is not present in metadata",
                    record.topic
                ));
            }
            return Ok(partition);
        }
        if let (Some(key), false) = (&record.key, self.config.partitioner_ignore_keys) {
            return Ok(partition_for_key(key, count));
        }
        let size =
            record.key.as_ref().map_or(0, Bytes::len) + record.value.as_ref().map_or(0, Bytes::len);
        let batch_size = self.config.batch_size as usize;
        let current = self.sticky.get(&record.topic).copied();
        let sticky = match current {
            Some(sticky) if sticky.bytes < batch_size.max(1) && sticky.partition < count => sticky,
            previous => {
                let partition = match previous {
                    // Another partition than the one just left, uniformly.
                    Some(previous) if count > 1 && previous.partition < count => {
                        let draw = (self.next_random() % (count as u64 - 1)) as i32;
                        if draw >= previous.partition {
                            draw + 1
                        } else {
                            draw
                        }
                    }
                    _ => (self.next_random() % count as u64) as i32,
                };
                Sticky {
                    partition,
                    bytes: 0,
                }
            }
        };
        self.sticky.insert(
            record.topic.clone(),
            Sticky {
                partition: sticky.partition,
                bytes: sticky.bytes + size,
            },
        );
        Ok(sticky.partition)
    }

    fn next_random(&mut self) -> u64 {
        xorshift(&mut self.rng)
    }

    /// Kafka's `RecordAccumulator.append`: into the partition's open batch if the record fits
    /// within `batch.size`, else into a new batch (a record larger than `batch.size` gets a batch
    /// of its own).
    fn append(&mut self, now: Millis, id: RecordId, record: &ProducerRecord, partition: i32) {
        let key = record.key.as_deref();
        let value = record.value.as_deref();
        let topic = if let Some(topic) = self.topic_names.get(record.topic.as_str()) {
            Arc::clone(topic)
        } else {
            let topic: Arc<str> = record.topic.as_str().into();
            self.topic_names
                .insert(record.topic.clone(), Arc::clone(&topic));
            topic
        };
        let topic_partition = TopicPartition::new(topic, partition);
        let batch_size = self.config.batch_size as usize;
        // The key is copied only when the partition has no deque yet (most records join the
        // open batch of an existing one).
        if !self.batches.contains_key(&topic_partition) {
            self.batches
                .insert(topic_partition.clone(), VecDeque::new());
        }
        let deque = self
            .batches
            .get_mut(&topic_partition)
            .expect("inserted above");
        if let Some(last) = deque.back_mut() {
            if let Contents::Open(builder) = &mut last.contents {
                if builder.size_with(record.timestamp_ms, key, value) <= batch_size {
                    builder.push(record.timestamp_ms, key, value);
                    last.ids.push(id);
                    return;
                }
                // Full: closed to further records (Kafka's `closeForRecordAppends`).
                last.close(self.config.compression_type);
            }
        }
        let mut builder = BatchBuilder::default();
        builder.push(record.timestamp_ms, key, value);
        deque.push_back(Batch {
            topic_partition,
            ids: vec![id],
            contents: Contents::Open(builder),
            created: now,
            retries: 0,
            maybe_written: false,
            retry_at: now,
            stamp: None,
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

    /// The leader of `partition` as the metadata cache knows it.
    fn leader(&self, partition: &TopicPartition) -> Option<NodeId> {
        self.metadata.leader(&partition.topic, partition.partition)
    }

    /// Once an answer names the broker at the bootstrap connection's address, that connection
    /// is the broker's.
    fn identify_bootstrap(&mut self, out: &mut Vec<ProducerOutput>) {
        if let Some(node) = self.nodes.identify_bootstrap(&self.metadata) {
            out.push(ProducerOutput::Identified { node });
        }
    }

    /// Opens the connections the queued work needs: each leader with batches waiting, and,
    /// when records wait for metadata, a batch's leader is unknown or a refresh is due (say,
    /// after the leader's connection was lost) and no connection is up or coming, one to a
    /// known broker (the bootstrap server before any is known). Kafka's `NetworkClient` does the
    /// same for a metadata update (`leastLoadedNode`, connecting if need be): without it a
    /// producer whose only connection was to a dead leader keeps reconnecting there and never
    /// hears of the new leader.
    fn maybe_connect(&mut self, out: &mut Vec<ProducerOutput>) {
        let needs_metadata = !self.unrouted.is_empty() || self.metadata.update_requested();
        let (opened, leaderless) =
            self.nodes
                .open_for(self.batches.keys(), &self.metadata, needs_metadata);
        if leaderless {
            self.metadata.request_update(); // Kafka's Sender, for `unknownLeaderTopics`
        }
        out.extend(
            opened
                .into_iter()
                .map(|(node, address)| ProducerOutput::Connect { node, address }),
        );
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

    /// Whether a batch led by `node` is sendable at `now`.
    fn any_sendable(&self, now: Millis, node: NodeId) -> bool {
        self.batches.iter().any(|(partition, deque)| {
            self.leader(partition) == Some(node)
                && !self.is_muted(partition)
                && self.sendable_at(deque).is_some_and(|at| at <= now)
        })
    }

    /// Kafka's `guaranteeMessageOrder`: with one request in flight per connection, a partition
    /// with a batch in flight anywhere (say, to a leader that just lost the partition) sends
    /// nothing more until that batch is answered, so a retried batch never lands behind a later
    /// one sent to the new leader. With more in flight, nothing is muted (and retries may
    /// reorder, as in Kafka without idempotence).
    ///
    /// A scan of the requests in flight (at most one per connection here), not a set built per
    /// call: the producer asks for every partition on every input.
    fn is_muted(&self, partition: &TopicPartition) -> bool {
        self.max_in_flight() == 1
            && self
                .batches_in_flight()
                .any(|batch| batch.topic_partition == *partition)
    }

    /// The batches of the produce requests in flight, on every connection.
    fn batches_in_flight(&self) -> impl Iterator<Item = &Batch> {
        self.nodes
            .in_flight()
            .filter_map(|in_flight| match &in_flight.awaited {
                Awaited::Produce(batches) => Some(batches),
                Awaited::Metadata | Awaited::ProducerId => None,
            })
            .flatten()
    }

    fn max_in_flight(&self) -> usize {
        self.config.max_in_flight_requests_per_connection as usize
    }

    /// The connected node with a free slot and the fewest requests in flight (Kafka's
    /// `leastLoadedNode`), lowest id first on a tie.
    fn least_loaded(&self) -> Option<NodeId> {
        self.nodes.least_loaded(self.max_in_flight())
    }

    fn maybe_send(&mut self, now: Millis, out: &mut Vec<ProducerOutput>) {
        let max_in_flight = self.max_in_flight();
        if self.metadata.wants_request(now) {
            if let Some(node) = self.least_loaded() {
                let request = self.metadata.request();
                out.push(ProducerOutput::MetadataRequest { node, request });
                self.nodes
                    .get_mut(node)
                    .expect("chosen above")
                    .in_flight
                    .push_back(InFlight {
                        awaited: Awaited::Metadata,
                        sent_at: now,
                    });
            }
        }
        self.maybe_request_producer_id(now, out);
        if self
            .idempotence
            .as_ref()
            .is_some_and(|idempotence| !idempotence.ready())
        {
            return;
        }
        let ready: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, connection)| connection.has_room(max_in_flight))
            .map(|(node, _)| node)
            .collect();
        for node in ready {
            while self
                .nodes
                .get(node)
                .is_some_and(|connection| connection.has_room(max_in_flight))
                && self.any_sendable(now, node)
            {
                let batches = self.drain(now, node);
                assert!(!batches.is_empty(), "a sendable batch drains");
                let request = self.request_for(&batches);
                let expects_response = self.config.acks != Acks::None;
                let connection = self.nodes.get_mut(node).expect("listed above");
                connection.in_flight.push_back(InFlight {
                    awaited: Awaited::Produce(batches),
                    sent_at: now,
                });
                out.push(ProducerOutput::Request {
                    node,
                    request,
                    expects_response,
                });
            }
        }
    }

    /// An idempotent producer in a reset bumps its epoch, and one without an id asks the least
    /// loaded broker for one, once no Produce request is in flight (the old epoch's requests
    /// finish first).
    fn maybe_request_producer_id(&mut self, now: Millis, out: &mut Vec<ProducerOutput>) {
        let producing = self
            .nodes
            .in_flight()
            .any(|in_flight| matches!(in_flight.awaited, Awaited::Produce(_)));
        let Some(idempotence) = &mut self.idempotence else {
            return;
        };
        if producing {
            return;
        }
        idempotence.finish_bump();
        if !idempotence.wants_producer_id(now) {
            return;
        }
        let Some(node) = self.least_loaded() else {
            return;
        };
        let request = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(i32::MAX)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        out.push(ProducerOutput::ProducerIdRequest { node, request });
        self.nodes
            .get_mut(node)
            .expect("chosen above")
            .in_flight
            .push_back(InFlight {
                awaited: Awaited::ProducerId,
                sent_at: now,
            });
        self.idempotence.as_mut().expect("checked above").requested = true;
    }

    /// InitProducerId answered: stamp and send from now on, or ask again after a backoff.
    fn on_producer_id_response(
        &mut self,
        now: Millis,
        node: NodeId,
        response: &InitProducerIdResponse,
        out: &mut Vec<ProducerOutput>,
    ) {
        let popped = self.nodes.get_mut(node).and_then(|connection| {
            connection
                .in_flight
                .pop_front_if(|in_flight| matches!(in_flight.awaited, Awaited::ProducerId))
        });
        if popped.is_none() {
            self.protocol_error(now, node, "an InitProducerId response out of turn", out);
            return;
        }
        let backoff_ms = self.config.retry_backoff_ms;
        let idempotence = self
            .idempotence
            .as_mut()
            .expect("only idempotent producers ask");
        let error = ErrorCode::from_code(response.error_code);
        if error == ErrorCode::None && response.producer_id.0 >= 0 {
            idempotence.on_producer_id(response.producer_id.0, response.producer_epoch);
        } else {
            tracing::debug!(?error, "InitProducerId failed; asking again");
            idempotence.on_failure(now, backoff_ms);
        }
    }

    /// Kafka's `drainBatchesForOneNode`: the first batch of every partition `node` leads that is
    /// not backing off, lingering or not, starting from a rotating partition, within
    /// `max.request.size` (the first batch always goes).
    fn drain(&mut self, now: Millis, node: NodeId) -> Vec<Batch> {
        let partitions: Vec<TopicPartition> = self
            .batches
            .keys()
            .filter(|partition| self.leader(partition) == Some(node) && !self.is_muted(partition))
            .cloned()
            .collect();
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
            batch.close(self.config.compression_type);
            if let Some(idempotence) = &mut self.idempotence {
                if !idempotence.is_current(batch.stamp) {
                    let stamp = idempotence.stamp(partition, batch.ids.len() as i32);
                    let Contents::Closed(bytes) = &batch.contents else {
                        unreachable!("closed above")
                    };
                    let stamped =
                        stamp_producer(bytes, stamp.producer_id, stamp.epoch, stamp.sequence);
                    batch.contents = Contents::Closed(stamped);
                    batch.stamp = Some(stamp);
                }
            }
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
            match topics
                .iter_mut()
                .find(|entry| entry.name.as_str() == &**topic)
            {
                Some(entry) => entry.partition_data.push(data),
                None => topics.push(
                    TopicProduceData::default()
                        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
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
        node: NodeId,
        response: &ProduceResponse,
        out: &mut Vec<ProducerOutput>,
    ) {
        let Some(InFlight {
            awaited: Awaited::Produce(batches),
            ..
        }) = self.nodes.get_mut(node).and_then(|connection| {
            connection
                .in_flight
                .pop_front_if(|in_flight| matches!(in_flight.awaited, Awaited::Produce(_)))
        })
        else {
            self.protocol_error(now, node, "a produce response out of turn", out);
            return;
        };
        for mut batch in batches {
            let partition = response
                .responses
                .iter()
                .find(|topic| topic.name.as_str() == &*batch.topic_partition.topic)
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
                let index = batch.topic_partition.partition;
                for (delta, id) in batch.ids.into_iter().enumerate() {
                    let offset = base_offset + delta as i64;
                    self.complete(
                        id,
                        Ok(RecordMetadata {
                            partition: index,
                            offset,
                        }),
                        out,
                    );
                }
                continue;
            }
            if refreshes_metadata(error) {
                self.metadata.request_update();
            }
            let message = partition
                .error_message
                .as_ref()
                .map_or_else(|| format!("{error:?}"), |text| format!("{error:?}: {text}"));
            batch.maybe_written |= error.may_have_been_written();
            if error.is_retriable() {
                self.retry_or_fail(now, batch, &message, out);
            } else if is_sequence_error(error) && self.idempotence.is_some() {
                self.on_sequence_error(now, batch, error, message, out);
            } else {
                self.fail(&batch, error, message, out);
            }
        }
    }

    /// The broker refused an idempotent batch's stamp. A batch of an older epoch (a reset is
    /// under way or done) goes to [`ProducerCore::retry_or_fail`], which gives it up if an
    /// earlier attempt may have been written and has it stamped afresh otherwise; a batch
    /// behind an earlier one of its partition that is still unfinished (it failed and will be
    /// retried first) is retried as is; UNKNOWN_PRODUCER_ID otherwise says the leader holds no
    /// batch of this producer, so this one was never written: the producer resets and sends it
    /// again first, at sequence 0 of the new epoch (Java's producer bumps its epoch on
    /// UNKNOWN_PRODUCER_ID too, and renumbers from the lowest unfinished batch; with an earlier
    /// batch unfinished, that batch's retry at its own sequence fills the gap without a bump);
    /// otherwise the broker lost track of the sequence (say, records lost to a failover): the
    /// batch fails and the producer resets.
    fn on_sequence_error(
        &mut self,
        now: Millis,
        batch: Batch,
        error: ErrorCode,
        message: String,
        out: &mut Vec<ProducerOutput>,
    ) {
        let idempotence = self.idempotence.as_ref().expect("checked by the caller");
        if !idempotence.is_current(batch.stamp) || self.earlier_unfinished(&batch) {
            self.retry_or_fail(now, batch, &message, out);
        } else if error == ErrorCode::UnknownProducerId {
            let mut batch = batch;
            batch.maybe_written = false;
            self.reset_if_current(batch.stamp, out);
            self.retry_or_fail(now, batch, &message, out);
        } else {
            self.fail(&batch, error, message, out);
            self.reset_if_current(batch.stamp, out);
        }
    }

    /// Whether a batch of `batch`'s partition created before it is still queued or in flight.
    fn earlier_unfinished(&self, batch: &Batch) -> bool {
        let first = batch.first_id();
        let queued = self
            .batches
            .get(&batch.topic_partition)
            .is_some_and(|deque| deque.front().is_some_and(|front| front.first_id() < first));
        queued
            || self.batches_in_flight().any(|other| {
                other.topic_partition == batch.topic_partition && other.first_id() < first
            })
    }

    /// A batch stamped `stamp` is gone for good. If the stamp is of the current producer id
    /// and epoch, the next batch's sequence would leave a gap: reset (the next epoch, every
    /// queued batch stamped afresh). A queued batch whose earlier attempt may have been written
    /// is given up instead: under a new epoch the broker could not recognise it as a retry and
    /// would write it twice (Kafka never restamps a batch that may have been written either).
    fn reset_if_current(&mut self, stamp: Option<Stamp>, out: &mut Vec<ProducerOutput>) {
        let Some(idempotence) = &mut self.idempotence else {
            return;
        };
        if !idempotence.is_current(stamp) {
            return;
        }
        idempotence.reset();
        let mut stale = Vec::new();
        self.batches.retain(|_, deque| {
            let (given_up, kept): (VecDeque<Batch>, _) = std::mem::take(deque)
                .into_iter()
                .partition(stamped_and_maybe_written);
            stale.extend(given_up);
            *deque = kept;
            !deque.is_empty()
        });
        for batch in stale {
            self.give_up_stale(&batch, out);
        }
    }

    /// Whether `batch` carries the stamp of an earlier epoch (or id) while an earlier attempt of
    /// it may have been written: it cannot be sent again without risking a duplicate.
    fn is_stale_and_maybe_written(&self, batch: &Batch) -> bool {
        stamped_and_maybe_written(batch)
            && self
                .idempotence
                .as_ref()
                .is_some_and(|idempotence| !idempotence.is_current(batch.stamp))
    }

    /// Fails a batch that may have been written under an earlier epoch: indeterminate.
    fn give_up_stale(&mut self, batch: &Batch, out: &mut Vec<ProducerOutput>) {
        let reason = "the producer bumped its epoch after an earlier attempt of this batch; \
                      resent under the new epoch it could be written twice"
            .to_owned();
        self.fail(batch, ErrorCode::OutOfOrderSequenceNumber, reason, out);
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
        if self.is_stale_and_maybe_written(&batch) {
            self.give_up_stale(&batch, out);
            return;
        }
        let expired = now >= batch.created.plus(self.config.delivery_timeout_ms);
        if batch.retries < self.config.retries as u32 && !expired {
            let wait = self
                .backoff
                .backoff_ms(batch.retries, xorshift(&mut self.jitter_rng));
            batch.retries += 1;
            batch.retry_at = now.plus(wait);
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
            self.reset_if_current(batch.stamp, out);
        }
    }

    fn on_metadata_response(
        &mut self,
        now: Millis,
        node: NodeId,
        response: &MetadataResponse,
        out: &mut Vec<ProducerOutput>,
    ) {
        if self
            .nodes
            .get_mut(node)
            .and_then(|connection| {
                connection
                    .in_flight
                    .pop_front_if(|in_flight| matches!(in_flight.awaited, Awaited::Metadata))
            })
            .is_none()
        {
            self.protocol_error(now, node, "a metadata response out of turn", out);
            return;
        }
        self.metadata.on_response(now, response);
        self.identify_bootstrap(out);
        self.route(now, out);
    }

    /// The broker broke the protocol: close the connection and treat everything in flight on
    /// it as lost.
    fn protocol_error(
        &mut self,
        now: Millis,
        node: NodeId,
        reason: &str,
        out: &mut Vec<ProducerOutput>,
    ) {
        out.push(ProducerOutput::Disconnect {
            node,
            reason: reason.to_owned(),
        });
        self.on_disconnected(now, node, reason, out);
    }

    fn on_disconnected(
        &mut self,
        now: Millis,
        node: NodeId,
        reason: &str,
        out: &mut Vec<ProducerOutput>,
    ) {
        let lost = self.nodes.on_lost(now, node);
        for in_flight in lost {
            match in_flight.awaited {
                Awaited::Produce(batches) => {
                    for mut batch in batches {
                        batch.maybe_written = true;
                        let reason = format!("connection lost: {reason}");
                        self.retry_or_fail(now, batch, &reason, out);
                    }
                }
                Awaited::Metadata => self.metadata.on_failure(now),
                Awaited::ProducerId => {
                    let backoff_ms = self.config.retry_backoff_ms;
                    if let Some(idempotence) = &mut self.idempotence {
                        idempotence.on_failure(now, backoff_ms);
                    }
                }
            }
        }
        self.metadata.request_update();
    }

    fn on_tick(&mut self, now: Millis, out: &mut Vec<ProducerOutput>) {
        let request_timeout_ms = self.config.request_timeout_ms;
        self.nodes.expire_backoffs(now);
        let timed_out: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, connection)| {
                connection
                    .in_flight
                    .front()
                    .is_some_and(|oldest| now >= oldest.sent_at.plus(request_timeout_ms))
            })
            .map(|(node, _)| node)
            .collect();
        for node in timed_out {
            let reason = format!("request timed out after {request_timeout_ms} ms");
            out.push(ProducerOutput::Disconnect {
                node,
                reason: reason.clone(),
            });
            self.on_disconnected(now, node, &reason, out);
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
            self.reset_if_current(batch.stamp, out);
        }
        self.expire_blocked_sends(now, out);
    }

    /// Sends blocked past `max.block.ms` (waiting for room in `buffer.memory`, or for their
    /// topic's metadata) fail, as Kafka's `send` would throw.
    fn expire_blocked_sends(&mut self, now: Millis, out: &mut Vec<ProducerOutput>) {
        // Sends still without room in buffer.memory after max.block.ms fail, as Kafka's
        // BufferPool.allocate does.
        let max_block_ms = self.config.max_block_ms;
        while self
            .waiting_for_memory
            .front()
            .is_some_and(|(front, _)| now >= front.since.plus(max_block_ms))
        {
            let (waiting, _) = self.waiting_for_memory.pop_front().expect("front exists");
            let message = format!(
                "Failed to allocate memory within the configured max blocking time {max_block_ms} ms."
            );
            let error = ErrorCode::RequestTimedOut;
            self.complete(
                waiting.id,
                Err(ProduceError::Rejected { error, message }),
                out,
            );
        }
        // Records still without metadata after max.block.ms fail as Kafka's send() would.
        let max_block_ms = self.config.max_block_ms;
        while self
            .unrouted
            .front()
            .is_some_and(|front| now >= front.since.plus(max_block_ms))
        {
            let unrouted = self.unrouted.pop_front().expect("front exists");
            let message = format!(
                "Topic {} not present in metadata after {max_block_ms} ms.",
                unrouted.record.topic
            );
            let error = ErrorCode::RequestTimedOut;
            self.complete(
                unrouted.id,
                Err(ProduceError::Rejected { error, message }),
                out,
            );
        }
    }

    /// The earliest time `handle(now, Tick)` must run.
    pub fn next_deadline(&self) -> Option<Millis> {
        let backoff = self.nodes.next_backoff_end();
        let request_timeout = self
            .nodes
            .iter()
            .filter_map(|(_, connection)| connection.in_flight.front())
            .map(|oldest| oldest.sent_at.plus(self.config.request_timeout_ms))
            .min();
        // Each deque is in creation order: its front expires first.
        let delivery = self
            .batches
            .values()
            .filter_map(|deque| deque.front())
            .map(|batch| batch.created.plus(self.config.delivery_timeout_ms))
            .min();
        // A batch becoming sendable matters only when its leader's connection has room.
        let max_in_flight = self.max_in_flight();
        let can_send = |node: NodeId| {
            self.nodes
                .get(node)
                .is_some_and(|connection| connection.has_room(max_in_flight))
        };
        let stamping = self.idempotence.as_ref().is_none_or(Idempotence::ready);
        let sendable = self
            .batches
            .iter()
            .filter(|_| stamping)
            .filter(|(partition, _)| {
                self.leader(partition).is_some_and(can_send) && !self.is_muted(partition)
            })
            .filter_map(|(_, deque)| self.sendable_at(deque))
            .min();
        let metadata = self
            .metadata
            .next_deadline()
            .filter(|_| self.least_loaded().is_some());
        let blocked = self
            .unrouted
            .front()
            .into_iter()
            .chain(self.waiting_for_memory.front().map(|(front, _)| front))
            .map(|front| front.since.plus(self.config.max_block_ms))
            .min();
        let producer_id = self
            .idempotence
            .as_ref()
            .and_then(Idempotence::producer_id_due)
            .filter(|_| self.least_loaded().is_some());
        [
            backoff,
            request_timeout,
            delivery,
            sendable,
            metadata,
            blocked,
            producer_id,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Cross-field invariants.
    pub fn check_invariants(&self) {
        self.nodes.check_invariants(self.max_in_flight());
        let metadata_awaited = self
            .nodes
            .in_flight()
            .filter(|in_flight| matches!(in_flight.awaited, Awaited::Metadata))
            .count();
        assert_eq!(
            metadata_awaited,
            usize::from(self.metadata.in_flight()),
            "the cache knows whether its request is in flight"
        );
        let producer_id_awaited = self
            .nodes
            .in_flight()
            .filter(|in_flight| matches!(in_flight.awaited, Awaited::ProducerId))
            .count();
        assert_eq!(
            producer_id_awaited,
            usize::from(self.idempotence.as_ref().is_some_and(|i| i.requested)),
            "an InitProducerId is in flight exactly when the producer waits for one"
        );
        assert!(
            self.buffered <= self.config.buffer_memory,
            "the producer holds at most buffer.memory"
        );
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
                .batches_in_flight()
                .map(|batch| batch.ids.len())
                .sum::<usize>();
            records += self.unrouted.len() + self.waiting_for_memory.len();
            assert_eq!(
                self.record_bytes.values().sum::<u64>(),
                self.buffered,
                "buffered counts the admitted records"
            );
            assert!(
                self.unrouted.iter().all(|waiting| matches!(
                    self.metadata.topic(&waiting.record.topic),
                    None | Some(TopicState::Pending(_))
                )),
                "only records of topics not known yet wait"
            );
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

    mod buffer_memory;
    mod compression;
    mod idempotence;
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
        let mut core = ProducerCore::new(config).expect("core");
        core.metadata.want("t");
        core.metadata.request();
        core.metadata
            .on_response(Millis(0), &metadata_answer(&[("t", 3)]));
        core
    }

    fn metadata_answer(topics: &[(&str, i32)]) -> MetadataResponse {
        use kafka_protocol::messages::metadata_response::{
            MetadataResponsePartition, MetadataResponseTopic,
        };
        let topics = topics
            .iter()
            .map(|(name, partitions)| {
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string((*name).to_owned()))))
                    .with_partitions(
                        (0..*partitions)
                            .map(|index| {
                                MetadataResponsePartition::default().with_partition_index(index)
                            })
                            .collect(),
                    )
            })
            .collect();
        let broker = kafka_protocol::messages::metadata_response::MetadataResponseBroker::default()
            .with_node_id(kafka_protocol::messages::BrokerId(0))
            .with_host(StrBytes::from_static_str("b"))
            .with_port(9092);
        MetadataResponse::default()
            .with_brokers(vec![broker])
            .with_topics(topics)
    }

    fn send(core: &mut ProducerCore, now: u64, id: u64) -> Vec<ProducerOutput> {
        send_to(core, now, id, 0)
    }

    fn send_to(core: &mut ProducerCore, now: u64, id: u64, partition: i32) -> Vec<ProducerOutput> {
        let record = ProducerRecord {
            topic: "t".to_owned(),
            partition: Some(partition),
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

    /// Broker `node`'s connection is up (broker 0 at `b:9092`, broker 1 at `c:9092`).
    fn up(node: NodeId) -> ProducerInput {
        let host = if node == 1 { "c" } else { "b" };
        ProducerInput::Connected {
            node,
            address: format!("{host}:9092"),
        }
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
                ProducerOutput::Complete { id, result } => {
                    Some((id.0, result.clone().map(|written| written.offset)))
                }
                _ => None,
            })
            .collect()
    }

    /// The definite failures among `outputs`: (record id, error).
    fn rejected(outputs: &[ProducerOutput]) -> Vec<(u64, ErrorCode)> {
        completions(outputs)
            .into_iter()
            .filter_map(|(id, result)| match result {
                Err(ProduceError::Rejected { error, .. }) => Some((id, error)),
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
    fn pipelines_up_to_max_in_flight_and_completes_in_order() {
        let mut core = core(&[("max.in.flight.requests.per.connection", "2")]);
        assert!(matches!(
            send(&mut core, 0, 1).as_slice(),
            [ProducerOutput::Connect { .. }]
        ));
        send(&mut core, 0, 2);
        send(&mut core, 0, 3);
        assert_eq!(requests(&step(&mut core, 1, up(0))), 2);
        let out = step(
            &mut core,
            2,
            ProducerInput::Response {
                node: 0,
                response: response(ErrorCode::None, 10),
            },
        );
        assert_eq!(completions(&out), vec![(1, Ok(10))]);
        assert_eq!(requests(&out), 1, "a slot opened for the third");
    }

    #[test]
    fn a_lost_connection_retries_and_marks_the_outcome_indeterminate_when_retries_run_out() {
        let mut core = core(&[("retries", "1"), ("retry.backoff.ms", "10")]);
        send(&mut core, 0, 1);
        step(&mut core, 0, up(0));
        let out = step(
            &mut core,
            5,
            ProducerInput::Disconnected {
                node: 0,
                reason: "reset".into(),
            },
        );
        assert!(completions(&out).is_empty(), "one retry left");
        let out = step(&mut core, 100, ProducerInput::Tick);
        assert!(matches!(out.as_slice(), [ProducerOutput::Connect { .. }]));
        assert_eq!(requests(&step(&mut core, 101, up(0))), 1);
        let out = step(
            &mut core,
            102,
            ProducerInput::Disconnected {
                node: 0,
                reason: "reset".into(),
            },
        );
        assert!(matches!(
            completions(&out).as_slice(),
            [(1, Err(ProduceError::Indeterminate { .. }))]
        ));
    }

    #[test]
    fn each_retry_waits_twice_as_long_with_jitter_up_to_retry_backoff_max_ms() {
        let mut core = core(&[
            ("enable.idempotence", "false"),
            ("retry.backoff.ms", "100"),
            ("retry.backoff.max.ms", "500"),
        ])
        .with_seed(7);
        send(&mut core, 0, 1);
        step(&mut core, 0, up(0));
        let mut now = 0;
        let mut waits = Vec::new();
        for _ in 0..5 {
            let out = step(
                &mut core,
                now,
                ProducerInput::Response {
                    node: 0,
                    response: response(ErrorCode::NotEnoughReplicas, -1),
                },
            );
            assert!(completions(&out).is_empty(), "retried");
            let at = core.next_deadline().expect("a retry is due").0;
            waits.push(at - now);
            assert_eq!(requests(&step(&mut core, at - 1, ProducerInput::Tick)), 0);
            assert_eq!(requests(&step(&mut core, at, ProducerInput::Tick)), 1);
            now = at;
        }
        for (attempt, (wait, term)) in waits.iter().zip([100, 200, 400, 500, 500]).enumerate() {
            assert!(
                (term * 8 / 10..=(term * 12 / 10).min(500)).contains(wait),
                "retry {attempt} waited {wait} ms, around {term}: {waits:?}"
            );
        }
        assert_ne!(waits, [100, 200, 400, 500, 500], "the waits are jittered");
    }

    #[test]
    fn a_non_retriable_error_on_the_first_attempt_is_a_definite_failure() {
        let mut core = core(&[]);
        send(&mut core, 0, 1);
        step(&mut core, 0, up(0));
        let out = step(
            &mut core,
            1,
            ProducerInput::Response {
                node: 0,
                response: response(ErrorCode::MessageTooLarge, -1),
            },
        );
        assert_eq!(rejected(&out), vec![(1, ErrorCode::MessageTooLarge)]);
    }

    #[test]
    fn a_storage_error_without_retries_is_indeterminate() {
        let mut core = core(&[("retries", "0")]);
        send(&mut core, 0, 1);
        step(&mut core, 0, up(0));
        let out = step(
            &mut core,
            1,
            ProducerInput::Response {
                node: 0,
                response: response(ErrorCode::KafkaStorageError, -1),
            },
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
        step(&mut core, 0, up(0));
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
        assert_eq!(requests(&step(&mut core, 0, up(0))), 2);
        let out = step(
            &mut core,
            1,
            ProducerInput::Response {
                node: 0,
                response: response(ErrorCode::NotLeaderOrFollower, -1),
            },
        );
        assert_eq!(
            requests(&out),
            1,
            "batch 1 is resent while batch 2 is still in flight"
        );
        assert!(
            matches!(out.first(), Some(ProducerOutput::MetadataRequest { .. })),
            "NOT_LEADER_OR_FOLLOWER refreshes the metadata first: {out:?}"
        );
        let out = step(
            &mut core,
            2,
            ProducerInput::Response {
                node: 0,
                response: response(ErrorCode::None, 0),
            },
        );
        assert_eq!(completions(&out), vec![(2, Ok(0))]);
        step(
            &mut core,
            2,
            ProducerInput::Metadata {
                node: 0,
                response: metadata_answer(&[("t", 3)]),
            },
        );
        let out = step(
            &mut core,
            3,
            ProducerInput::Response {
                node: 0,
                response: response(ErrorCode::None, 1),
            },
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
            [ProducerOutput::Connect { .. }]
        ));
        step(core, 0, up(0));
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
            ProducerInput::Response {
                node: 0,
                response: response(ErrorCode::None, 10),
            },
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
            topic: "t".to_owned(),
            partition: Some(0),
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
        assert_eq!(rejected(&out), vec![(1, ErrorCode::MessageTooLarge)]);
        assert_eq!(core.pending(), 0);
        send_to(&mut core, 0, 2, 0);
        send_to(&mut core, 0, 3, 1);
        let out = step(&mut core, 0, up(0));
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
                node: 0,
                reason: "refused".into(),
            },
        );
        assert_eq!(core.next_deadline(), Some(Millis(50)), "reconnect backoff");
        let out = step(&mut core, 200, ProducerInput::Tick);
        assert_eq!(
            rejected(&out),
            vec![
                (1, ErrorCode::RequestTimedOut),
                (2, ErrorCode::RequestTimedOut)
            ]
        );
    }

    fn record(
        topic: &str,
        partition: Option<i32>,
        key: Option<&str>,
        value: &str,
    ) -> ProducerRecord {
        ProducerRecord {
            topic: topic.to_owned(),
            partition,
            key: key.map(|key| Bytes::from(key.to_owned())),
            value: Some(Bytes::from(value.to_owned())),
            timestamp_ms: 0,
        }
    }

    fn send_record(
        core: &mut ProducerCore,
        now: u64,
        id: u64,
        record: ProducerRecord,
    ) -> Vec<ProducerOutput> {
        step(
            core,
            now,
            ProducerInput::Send {
                id: RecordId(id),
                record,
            },
        )
    }

    fn partitions_of(outputs: &[ProducerOutput]) -> Vec<i32> {
        batches(outputs)
            .concat()
            .into_iter()
            .map(|(partition, _)| partition)
            .collect()
    }

    #[test]
    fn a_send_to_an_unknown_topic_waits_for_metadata_then_goes_to_its_partition() {
        let mut core = core(&[]);
        assert!(matches!(
            send_record(&mut core, 0, 1, record("new", None, Some("k"), "v")).as_slice(),
            [ProducerOutput::Connect { .. }]
        ));
        let out = step(&mut core, 1, up(0));
        let [ProducerOutput::MetadataRequest { request, .. }] = out.as_slice() else {
            panic!("a metadata request first: {out:?}");
        };
        let asked: Vec<&str> = request
            .topics
            .iter()
            .flatten()
            .filter_map(|topic| topic.name.as_ref().map(|name| name.as_str()))
            .collect();
        assert_eq!(asked, vec!["new", "t"]);
        let out = step(
            &mut core,
            2,
            ProducerInput::Metadata {
                node: 0,
                response: metadata_answer(&[("new", 4), ("t", 3)]),
            },
        );
        assert_eq!(
            partitions_of(&out),
            vec![crate::client::partitioner::partition_for_key(b"k", 4)],
            "murmur2 of the key over 4 partitions"
        );
    }

    #[test]
    fn a_topic_that_never_appears_fails_its_sends_after_max_block_ms() {
        use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
        let mut core = core(&[("max.block.ms", "1000")]);
        send_record(&mut core, 0, 1, record("missing", None, None, "v"));
        step(&mut core, 0, up(0));
        let unknown =
            MetadataResponse::default().with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("missing"))))
                .with_error_code(ErrorCode::UnknownTopicOrPartition.code())]);
        let out = step(
            &mut core,
            5,
            ProducerInput::Metadata {
                node: 0,
                response: unknown,
            },
        );
        assert!(completions(&out).is_empty(), "still waiting");
        assert_eq!(
            core.next_deadline(),
            Some(Millis(105)),
            "asks again after retry.backoff.ms"
        );
        let out = step(&mut core, 1000, ProducerInput::Tick);
        assert_eq!(rejected(&out), vec![(1, ErrorCode::RequestTimedOut)]);
        assert_eq!(core.pending(), 0);
    }

    /// Topic `t` led as `leaders` says, by brokers 0 (`b:9092`) and 1 (`c:9092`).
    fn led_by(leaders: &[i32]) -> MetadataResponse {
        crate::client::metadata::answer_led_by("t", leaders)
    }

    /// Per output request: (node, partitions).
    fn requests_by_node(outputs: &[ProducerOutput]) -> Vec<(NodeId, Vec<i32>)> {
        outputs
            .iter()
            .filter_map(|output| match output {
                ProducerOutput::Request { node, request, .. } => Some((
                    *node,
                    request
                        .topic_data
                        .iter()
                        .flat_map(|topic| &topic.partition_data)
                        .map(|data| data.index)
                        .collect(),
                )),
                _ => None,
            })
            .collect()
    }

    /// Found by the simulator (`kip-279-fast-leader-changes-*.toml`): with its only
    /// connection to a leader that died, the producer kept reconnecting there and never asked
    /// anyone which broker leads now. A refused connection asks for fresh metadata, and with no
    /// connection up it connects to another known broker for it.
    #[test]
    fn a_leader_refusing_connections_sends_the_producer_to_another_broker_for_metadata() {
        let mut core = core(&[]);
        core.metadata.request();
        core.metadata.on_response(Millis(0), &led_by(&[1]));
        let out = send_to(&mut core, 0, 1, 0);
        assert!(
            matches!(out.as_slice(), [ProducerOutput::Connect { node: 1, .. }]),
            "the leader: {out:?}"
        );
        let refused = ProducerInput::ConnectFailed {
            node: 1,
            reason: "refused".into(),
        };
        let out = step(&mut core, 10, refused);
        assert!(
            out.iter()
                .any(|output| matches!(output, ProducerOutput::Connect { node: 0, .. })),
            "another broker, for metadata: {out:?}"
        );
        let out = step(&mut core, 11, up(0));
        assert!(
            out.iter()
                .any(|output| matches!(output, ProducerOutput::MetadataRequest { node: 0, .. })),
            "asks it who leads: {out:?}"
        );
        let out = step(
            &mut core,
            12,
            ProducerInput::Metadata {
                node: 0,
                response: led_by(&[0]),
            },
        );
        assert_eq!(
            requests_by_node(&out),
            vec![(0, vec![0])],
            "the new leader gets it"
        );
    }

    #[test]
    fn each_leader_gets_its_own_connection_and_requests() {
        let mut core = core(&[("max.in.flight.requests.per.connection", "1")]);
        core.metadata.request();
        core.metadata.on_response(Millis(0), &led_by(&[0, 1, 0]));
        send_to(&mut core, 0, 1, 0);
        send_to(&mut core, 0, 2, 1);
        let out = send_to(&mut core, 0, 3, 2);
        assert!(out.is_empty(), "connections already asked for: {out:?}");
        let connect = |node: NodeId, address: &str| ProducerInput::Connected {
            node,
            address: address.into(),
        };
        assert_eq!(
            requests_by_node(&step(&mut core, 1, connect(1, "c:9092"))),
            vec![(1, vec![1])]
        );
        let mut drained = requests_by_node(&step(&mut core, 1, connect(0, "b:9092")));
        drained[0].1.sort_unstable();
        assert_eq!(
            drained,
            vec![(0, vec![0, 2])],
            "node 0 drains both its partitions into one request"
        );
        // max.in.flight counts per connection: node 1 answering frees only node 1's slot.
        send_to(&mut core, 2, 4, 0);
        send_to(&mut core, 2, 5, 1);
        let mut answer = response(ErrorCode::None, 7);
        answer.responses[0].partition_responses[0].index = 1;
        let out = step(
            &mut core,
            3,
            ProducerInput::Response {
                node: 1,
                response: answer,
            },
        );
        assert_eq!(completions(&out)[0], (2, Ok(7)));
        assert_eq!(requests_by_node(&out), vec![(1, vec![1])]);
    }

    #[test]
    fn the_bootstrap_connection_becomes_the_broker_at_its_address() {
        let mut config = ProducerConfig::default();
        config
            .apply([("enable.idempotence", "false"), ("linger.ms", "0")])
            .expect("valid");
        let mut core = ProducerCore::new(config).expect("core");
        let out = send_to(&mut core, 0, 1, 2);
        assert!(
            matches!(
                out.as_slice(),
                [ProducerOutput::Connect {
                    node: BOOTSTRAP,
                    address: None
                }]
            ),
            "no broker known yet: a bootstrap server: {out:?}"
        );
        let out = step(
            &mut core,
            1,
            ProducerInput::Connected {
                node: BOOTSTRAP,
                address: "c:9092".into(),
            },
        );
        assert!(matches!(
            out.as_slice(),
            [ProducerOutput::MetadataRequest {
                node: BOOTSTRAP,
                ..
            }]
        ));
        let out = step(
            &mut core,
            2,
            ProducerInput::Metadata {
                node: BOOTSTRAP,
                response: led_by(&[0, 0, 1]),
            },
        );
        assert!(
            matches!(out.first(), Some(ProducerOutput::Identified { node: 1 })),
            "c:9092 is broker 1: {out:?}"
        );
        assert_eq!(
            requests_by_node(&out),
            vec![(1, vec![2])],
            "partition 2's leader is broker 1, reached already"
        );
    }

    #[test]
    fn a_partition_without_a_leader_waits_for_fresh_metadata() {
        let mut core = core(&[]);
        core.metadata.request();
        core.metadata.on_response(Millis(0), &led_by(&[-1, 0]));
        let out = send_to(&mut core, 0, 1, 0);
        assert!(
            matches!(out.as_slice(), [ProducerOutput::Connect { node: 0, .. }]),
            "a known broker, for the metadata: {out:?}"
        );
        assert!(
            send_to(&mut core, 0, 2, 1).is_empty(),
            "the leader's connection is coming"
        );
        let out = step(&mut core, 1, up(0));
        assert_eq!(
            requests_by_node(&out),
            vec![(0, vec![1])],
            "partition 0 waits"
        );
        assert!(
            matches!(
                out.first(),
                Some(ProducerOutput::MetadataRequest { node: 0, .. })
            ),
            "an unknown leader asks for metadata: {out:?}"
        );
        let out = step(
            &mut core,
            3,
            ProducerInput::Metadata {
                node: 0,
                response: led_by(&[0, 0]),
            },
        );
        assert_eq!(requests_by_node(&out), vec![(0, vec![0])]);
    }

    #[test]
    fn a_partition_beyond_the_topic_fails_at_once() {
        let mut core = core(&[]);
        let out = send_record(&mut core, 0, 1, record("t", Some(3), None, "v"));
        assert_eq!(
            rejected(&out),
            vec![(1, ErrorCode::UnknownTopicOrPartition)]
        );
    }

    #[test]
    fn unkeyed_records_stick_to_one_partition_until_batch_size_bytes_then_switch() {
        // 30-byte values and batch.size 100: four records (0, 30, 60, 90 bytes before each)
        // stay on the first sticky partition; the fifth finds 120 bytes there and switches.
        let mut core = core(&[("batch.size", "100")]).with_seed(7);
        let value = "x".repeat(30);
        let mut sticky = Vec::new();
        for id in 1..=8 {
            send_record(&mut core, 0, id, record("t", None, None, &value));
            sticky.push(core.sticky.get("t").expect("sticky").partition);
        }
        assert!(
            sticky[..4].iter().all(|partition| *partition == sticky[0]),
            "{sticky:?}"
        );
        assert!(
            sticky[4..].iter().all(|partition| *partition == sticky[4]),
            "{sticky:?}"
        );
        assert_ne!(sticky[0], sticky[4], "switched after batch.size bytes");
    }

    #[test]
    fn a_response_out_of_turn_breaks_the_connection() {
        let mut core = core(&[]);
        send(&mut core, 0, 1);
        step(&mut core, 0, up(0));
        let out = step(
            &mut core,
            1,
            ProducerInput::Metadata {
                node: 0,
                response: metadata_answer(&[("t", 3)]),
            },
        );
        assert!(out
            .iter()
            .any(|output| matches!(output, ProducerOutput::Disconnect { .. })));
        assert_eq!(core.pending(), 1, "the batch waits for a retry");
    }
}
