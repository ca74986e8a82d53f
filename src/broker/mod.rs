//! The broker as a deterministic state machine (sans-IO).
//!
//! [`Broker::handle`] takes an [`Input`] (a decoded request, a finished fsync, a closed
//! connection, a timer tick) and the current time, and pushes [`Output`]s (responses, fsyncs to
//! start). It never awaits, never reads a clock and never touches a socket; appends go to the
//! [`Storage`] synchronously (the page cache), and every fsync is an output whose completion
//! comes back as an input. The driver in `runtime::driver` runs it on real tokio or on madsim.
//!
//! Request handlers live one per file in `handlers/`, named `on_<api>_request`.

pub mod checkpoint;
mod flush;
mod handlers;
pub use checkpoint::{RECOVERY_POINT_CHECKPOINT, RECOVERY_POINT_CHECKPOINT_TMP};
pub use handlers::produce_rejection;
pub mod metadata;
pub mod partition;
mod purgatory;

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::{ApiKey, ResponseKind};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::{BrokerConfig, TopicConfig};
use crate::protocol::codec::Request;
use crate::protocol::fetch_response::{Chunk, FetchResponseParts};
use crate::protocol::record_batch::decode_records;
use crate::storage::{Storage, StorageFile};
use crate::types::{BrokerId, Millis, TopicPartition};

use self::checkpoint::{CheckpointWriter, RecoveryPoints};
use self::metadata::{MetadataImage, MetadataRecord, TopicMetadata, METADATA_LOG_DIRECTORY};
use self::partition::Partition;
use self::purgatory::{DelayedCreateTopics, DelayedFetch, DelayedProduce, FlushTarget};
use crate::log::{FlushSync, LogConfig, LogError, LogRead, PartitionLog, RecoveryReport};

/// A client connection, numbered by the network layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(pub u64);

/// An fsync started by the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlushId(pub u64);

/// What the broker reacts to.
#[derive(Debug)]
pub enum Input {
    /// A decoded request. The connection sends nothing else until it gets an output for it.
    Request {
        /// Where it came from.
        connection: ConnectionId,
        /// The request (boxed: the generated enum is large).
        request: Box<Request>,
    },
    /// An fsync asked for by [`Output::Flush`] finished.
    FlushCompleted {
        /// Which one.
        flush_id: FlushId,
        /// `Err` carries the IO error text.
        result: Result<(), String>,
    },
    /// The connection went away; drop whatever waits on it.
    ConnectionClosed {
        /// Which one.
        connection: ConnectionId,
    },
    /// A deadline from [`Broker::next_deadline`] passed.
    Tick,
}

/// What the broker asks the driver to do.
#[derive(Debug)]
pub enum Output<F> {
    /// Send a response on a connection.
    Respond {
        /// Where.
        connection: ConnectionId,
        /// What.
        response: Response<F>,
    },
    /// The request needs no response (Produce with acks=0): read the next one.
    NoResponse {
        /// Which connection.
        connection: ConnectionId,
    },
    /// Close the connection (Kafka closes acks=0 connections whose produce failed).
    Close {
        /// Which connection.
        connection: ConnectionId,
        /// Logged.
        reason: String,
    },
    /// fsync these files and directories, then feed back [`Input::FlushCompleted`].
    Flush {
        /// Echoed in the completion.
        flush_id: FlushId,
        /// What to sync.
        sync: FlushSync<F>,
    },
    /// Something the outside world may want to record (the simulator's history does).
    Event(BrokerEvent),
}

/// A change of a partition's externally visible state, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerEvent {
    /// The high watermark moved (or was set on start-up).
    HighWatermark {
        /// Which partition.
        partition: TopicPartition,
        /// The new high watermark.
        offset: i64,
    },
    /// The log start offset was set (on start-up) or moved.
    LogStartOffset {
        /// Which partition.
        partition: TopicPartition,
        /// The new log start offset.
        offset: i64,
    },
    /// Records at and past `from_offset` may be gone: recovery on start-up ends the log there.
    Truncated {
        /// Which partition.
        partition: TopicPartition,
        /// The first offset that may have held something else before.
        from_offset: i64,
        /// Why.
        reason: String,
    },
    /// The partition went offline (a failed fsync or write, or corruption).
    Offline {
        /// Which partition.
        partition: TopicPartition,
        /// Why.
        reason: String,
    },
}

/// A response ready to encode.
#[derive(Debug)]
pub struct Response<F> {
    /// The request's API.
    pub api_key: ApiKey,
    /// The request's version.
    pub api_version: i16,
    /// The request's correlation id.
    pub correlation_id: i32,
    /// The body.
    pub body: ResponseBody<F>,
}

/// A response body: a generated message, or a Fetch response whose records are file ranges.
#[derive(Debug)]
pub enum ResponseBody<F> {
    /// Encoded by `kafka-protocol` (boxed: the generated enum is large).
    Message(Box<ResponseKind>),
    /// Encoded by hand into chunks for sendfile.
    Fetch(FetchResponseParts<F>),
}

impl<F> Response<F> {
    /// The response to `request` carrying `body`.
    pub fn answering(request: &Request, body: ResponseBody<F>) -> Self {
        Response {
            api_key: request.api_key,
            api_version: request.api_version,
            correlation_id: request.correlation_id,
            body,
        }
    }
}

/// Where and how to answer a request: taken from the request once, so a handler or a parked
/// request can never answer with the wrong API, version or correlation id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplyTo {
    pub(crate) connection: ConnectionId,
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
}

impl ReplyTo {
    pub(crate) fn new(connection: ConnectionId, request: &Request) -> ReplyTo {
        ReplyTo {
            connection,
            api_key: request.api_key,
            api_version: request.api_version,
            correlation_id: request.correlation_id,
        }
    }

    pub(crate) fn api_version(self) -> i16 {
        self.api_version
    }

    /// The output that sends `body` back.
    pub(crate) fn respond<F>(self, body: ResponseBody<F>) -> Output<F> {
        let response = Response {
            api_key: self.api_key,
            api_version: self.api_version,
            correlation_id: self.correlation_id,
            body,
        };
        Output::Respond {
            connection: self.connection,
            response,
        }
    }
}

impl<F> ResponseBody<F> {
    /// A generated message body.
    pub fn message(body: ResponseKind) -> Self {
        ResponseBody::Message(Box::new(body))
    }
}

impl<F: Clone> Response<F> {
    /// The frame (size prefix included) as chunks: bytes and file ranges.
    pub fn encode(&self) -> Result<Vec<Chunk<F>>, crate::protocol::codec::CodecError> {
        match &self.body {
            ResponseBody::Message(body) => {
                let frame = crate::protocol::codec::encode_response(
                    self.api_key,
                    self.api_version,
                    self.correlation_id,
                    body,
                )?;
                Ok(vec![Chunk::Bytes(frame.freeze())])
            }
            ResponseBody::Fetch(parts) => Ok(parts.encode(self.api_version, self.correlation_id)),
        }
    }
}

/// An operating error that stops the broker from starting.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The log could not be opened or recovered.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The data directory belongs to another node or is unreadable.
    #[error("{0}")]
    DataDirectory(String),
}

/// What startup found and did.
#[derive(Debug)]
pub struct StartupReport<F> {
    /// Cluster id (new or from `meta.properties`).
    pub cluster_id: String,
    /// Topics known.
    pub topics: usize,
    /// Partition logs opened.
    pub partitions: usize,
    /// Recovery totals over every log.
    pub recovery: RecoveryReport,
    /// Files of partitions without a topic record, deleted.
    pub stray_files_removed: usize,
    /// What the driver must sync before serving: `meta.properties` when new, and everything
    /// recovery found past the recovery points (a process crash leaves it in the page cache,
    /// not on disk).
    pub to_sync: FlushSync<F>,
    /// Each partition's state after recovery, for the history.
    pub events: Vec<BrokerEvent>,
}

/// The broker state machine.
#[derive(Debug)]
pub struct Broker<S: Storage> {
    config: BrokerConfig,
    storage: S,
    cluster_id: String,
    rng: ChaCha8Rng,
    metadata: MetadataImage,
    metadata_log: PartitionLog<S>,
    partitions: BTreeMap<TopicPartition, Partition<S>>,
    /// Topics whose record is appended but not yet durable.
    pending_topics: BTreeSet<String>,
    next_flush_id: u64,
    flushes: BTreeMap<FlushId, FlushTarget>,
    checkpoint: CheckpointWriter,
    delayed_produces: Vec<DelayedProduce>,
    delayed_fetches: Vec<DelayedFetch>,
    delayed_creations: Vec<DelayedCreateTopics>,
}

const META_PROPERTIES: &str = "meta.properties";

fn metadata_log_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1 << 30,
        index_interval_bytes: 4096,
        flush_messages: 1,
        flush_ms: None,
    }
}

fn log_config(config: &TopicConfig) -> LogConfig {
    LogConfig {
        segment_bytes: config.segment_bytes as u64,
        index_interval_bytes: config.index_interval_bytes as u64,
        flush_messages: config.flush_messages,
        flush_ms: config.flush_ms.map(|ms| ms as u64),
    }
}

/// Kafka-style cluster id: 16 random bytes, URL-safe base64 without padding (22 characters).
fn new_cluster_id(rng: &mut ChaCha8Rng) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bits = (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64());
    (0..22)
        .map(|index| ALPHABET[((bits >> (index * 6)) & 0x3f) as usize] as char)
        .collect()
}

impl<S: Storage> Broker<S> {
    /// Opens the data directory: reads or writes `meta.properties`, replays the metadata log,
    /// deletes stray partition files, and recovers every partition log.
    pub fn open(
        config: BrokerConfig,
        storage: S,
        seed: u64,
        now: Millis,
    ) -> Result<(Self, StartupReport<S::File>), BrokerError> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut report = StartupReport {
            cluster_id: String::new(),
            topics: 0,
            partitions: 0,
            recovery: RecoveryReport::default(),
            stray_files_removed: 0,
            to_sync: FlushSync {
                files: Vec::new(),
                directories: Vec::new(),
            },
            events: Vec::new(),
        };
        let cluster_id = Self::load_meta_properties(&config, &storage, &mut rng, &mut report)?;
        let recovery_points = Self::load_recovery_points(&storage)?;
        let metadata_partition =
            TopicPartition::parse(METADATA_LOG_DIRECTORY).expect("a partition directory name");
        let (metadata_log, recovery) = PartitionLog::open(
            storage.clone(),
            METADATA_LOG_DIRECTORY,
            metadata_log_config(),
            recovery_points
                .get(&metadata_partition)
                .copied()
                .unwrap_or(0),
            now,
        )?;
        if let Some(corruption) = &recovery.corruption {
            // Without its metadata the broker cannot know its topics: Kafka refuses to start.
            return Err(BrokerError::DataDirectory(format!(
                "{METADATA_LOG_DIRECTORY}: {corruption}"
            )));
        }
        add_recovery(&mut report.recovery, &recovery);
        let interval_ms = config.log_flush_offset_checkpoint_interval_ms as u64;
        let mut broker = Broker {
            config,
            storage,
            cluster_id: cluster_id.clone(),
            rng,
            metadata: MetadataImage::default(),
            metadata_log,
            partitions: BTreeMap::new(),
            pending_topics: BTreeSet::new(),
            next_flush_id: 0,
            flushes: BTreeMap::new(),
            checkpoint: CheckpointWriter::new(interval_ms, now, recovery_points.clone()),
            delayed_produces: Vec::new(),
            delayed_fetches: Vec::new(),
            delayed_creations: Vec::new(),
        };
        for record in broker.read_metadata_records()? {
            broker
                .metadata
                .apply(&record, &broker.config)
                .map_err(BrokerError::DataDirectory)?;
        }
        report.stray_files_removed = broker.remove_stray_files()?;
        report.topics = broker.open_partitions(&recovery_points, now, &mut report)?;
        broker.sync_recovered_logs(now, &mut report);
        report.cluster_id = cluster_id;
        report.partitions = broker.partitions.len();
        broker.check_invariants();
        Ok((broker, report))
    }

    /// Opens (and recovers) every partition of every known topic; returns the number of topics.
    fn open_partitions(
        &mut self,
        recovery_points: &RecoveryPoints,
        now: Millis,
        report: &mut StartupReport<S::File>,
    ) -> Result<usize, BrokerError> {
        let topics: Vec<TopicMetadata> = self.metadata.topics().cloned().collect();
        for topic in &topics {
            for partition in 0..topic.partitions {
                let topic_partition = TopicPartition::new(topic.name.clone(), partition);
                let recovery_point = recovery_points.get(&topic_partition).copied().unwrap_or(0);
                let recovery = self.open_partition(topic, partition, recovery_point, now)?;
                add_recovery(&mut report.recovery, &recovery);
                let opened = &self.partitions[&topic_partition];
                report.events.extend(startup_events(opened, &recovery));
            }
        }
        Ok(topics.len())
    }

    /// Everything recovery kept past the recovery points goes into the start-up sync; the
    /// driver completes it before serving, so the logs are durable to their ends (and the high
    /// watermarks can start there).
    fn sync_recovered_logs(&mut self, now: Millis, report: &mut StartupReport<S::File>) {
        let mut add = |sync: FlushSync<S::File>| {
            report.to_sync.files.extend(sync.files);
            for directory in sync.directories {
                if !report.to_sync.directories.contains(&directory) {
                    report.to_sync.directories.push(directory);
                }
            }
        };
        if let Some((sync, mark)) = self.metadata_log.start_flush(now) {
            add(sync);
            self.metadata_log.flush_completed(mark);
        }
        for (topic_partition, partition) in &mut self.partitions {
            if partition.offline().is_some() {
                continue;
            }
            if let Some((sync, mark)) = partition.log.start_flush(now) {
                add(sync);
                partition.on_flush_completed(mark);
            }
            partition.maybe_advance_high_watermark();
            report.events.push(BrokerEvent::HighWatermark {
                partition: topic_partition.clone(),
                offset: partition.high_watermark(),
            });
        }
    }

    /// The recovery points of the last checkpoint (none: recover everything).
    fn load_recovery_points(storage: &S) -> Result<RecoveryPoints, BrokerError> {
        let names = storage
            .list(RECOVERY_POINT_CHECKPOINT)
            .map_err(LogError::from)?;
        if !names.iter().any(|name| name == RECOVERY_POINT_CHECKPOINT) {
            return Ok(RecoveryPoints::new());
        }
        let file = storage
            .open(RECOVERY_POINT_CHECKPOINT)
            .map_err(LogError::from)?;
        let mut bytes = vec![0; file.len().map_err(LogError::from)? as usize];
        file.read_exact_at(&mut bytes, 0).map_err(LogError::from)?;
        checkpoint::parse(&String::from_utf8_lossy(&bytes)).map_err(|error| {
            BrokerError::DataDirectory(format!("{RECOVERY_POINT_CHECKPOINT}: {error}"))
        })
    }

    fn load_meta_properties(
        config: &BrokerConfig,
        storage: &S,
        rng: &mut ChaCha8Rng,
        report: &mut StartupReport<S::File>,
    ) -> Result<String, BrokerError> {
        let file = storage.open(META_PROPERTIES).map_err(LogError::from)?;
        let len = file.len().map_err(LogError::from)?;
        if len == 0 {
            let cluster_id = new_cluster_id(rng);
            let text = format!(
                "#seedlog meta.properties\nversion=1\ncluster.id={cluster_id}\nnode.id={}\n",
                config.node_id
            );
            file.write_all_at(text.as_bytes(), 0)
                .map_err(LogError::from)?;
            report.to_sync.files.push(file);
            report.to_sync.directories.push(String::new());
            return Ok(cluster_id);
        }
        let mut bytes = vec![0; len as usize];
        file.read_exact_at(&mut bytes, 0).map_err(LogError::from)?;
        let text = String::from_utf8_lossy(&bytes);
        let properties = crate::config::parse_properties(&text)
            .map_err(|error| BrokerError::DataDirectory(format!("{META_PROPERTIES}: {error}")))?;
        let value = |key: &str| {
            properties
                .iter()
                .find(|property| property.key == key)
                .map(|property| property.value.clone())
        };
        let stored_node = value("node.id").unwrap_or_default();
        if stored_node != config.node_id.to_string() {
            return Err(BrokerError::DataDirectory(format!(
                "Stored node id {stored_node} doesn't match previous node id {} in {META_PROPERTIES}",
                config.node_id
            )));
        }
        value("cluster.id").ok_or_else(|| {
            BrokerError::DataDirectory(format!("{META_PROPERTIES} has no cluster.id"))
        })
    }

    fn read_metadata_records(&self) -> Result<Vec<MetadataRecord>, BrokerError> {
        let mut records = Vec::new();
        let mut offset = self.metadata_log.log_start_offset();
        let end = self.metadata_log.log_end_offset();
        while offset < end {
            let LogRead::Records {
                file,
                position,
                len,
            } = self.metadata_log.read(offset, end, 1 << 20)?
            else {
                break;
            };
            let mut bytes = vec![0; len as usize];
            file.read_exact_at(&mut bytes, position)
                .map_err(LogError::from)?;
            let decoded = decode_records(&bytes.into())
                .map_err(|error| BrokerError::DataDirectory(error.to_string()))?;
            for record in &decoded {
                let value = record.value.as_deref().unwrap_or_default();
                records
                    .push(MetadataRecord::from_bytes(value).map_err(BrokerError::DataDirectory)?);
                offset = record.offset + 1;
            }
        }
        Ok(records)
    }

    fn remove_stray_files(&self) -> Result<usize, BrokerError> {
        let mut removed = 0;
        for name in self.storage.list("").map_err(LogError::from)? {
            let Some((directory, _)) = name.split_once('/') else {
                continue;
            };
            let known = directory == METADATA_LOG_DIRECTORY
                || TopicPartition::parse(directory).is_some_and(|partition| {
                    self.metadata
                        .topic(&partition.topic)
                        .is_some_and(|topic| partition.partition < topic.partitions)
                });
            if !known {
                self.storage.remove(&name).map_err(LogError::from)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn open_partition(
        &mut self,
        topic: &TopicMetadata,
        partition: i32,
        recovery_point: i64,
        now: Millis,
    ) -> Result<RecoveryReport, LogError> {
        let topic_partition = TopicPartition::new(topic.name.clone(), partition);
        let (log, recovery) = PartitionLog::open(
            self.storage.clone(),
            &topic_partition.to_string(),
            log_config(&topic.config),
            recovery_point,
            now,
        )?;
        let mut replica = Partition::new_local_leader(
            topic_partition.clone(),
            log,
            BrokerId(self.config.node_id),
        );
        if let Some(corruption) = &recovery.corruption {
            replica.go_offline(format!("corrupt log: {corruption}"));
        }
        self.partitions.insert(topic_partition, replica);
        Ok(recovery)
    }

    /// This broker's id.
    pub fn node_id(&self) -> BrokerId {
        BrokerId(self.config.node_id)
    }

    /// The cluster id.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// A partition's replica state (for tests and the simulator's invariant checks).
    pub fn partition(&self, topic_partition: &TopicPartition) -> Option<&Partition<S>> {
        self.partitions.get(topic_partition)
    }

    /// Reacts to one input. Runs to completion; never blocks.
    pub fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Output<S::File>>) {
        match input {
            Input::Request {
                connection,
                request,
            } => self.on_request(now, connection, *request, out),
            Input::FlushCompleted { flush_id, result } => {
                self.on_flush_completed(now, flush_id, result, out)
            }
            Input::ConnectionClosed { connection } => {
                self.delayed_produces
                    .retain(|delayed| delayed.reply_to.connection != connection);
                self.delayed_fetches
                    .retain(|delayed| delayed.reply_to.connection != connection);
                self.delayed_creations
                    .retain(|delayed| delayed.reply_to.connection != connection);
            }
            Input::Tick => self.on_tick(now, out),
        }
    }

    fn on_request(
        &mut self,
        now: Millis,
        connection: ConnectionId,
        request: Request,
        out: &mut Vec<Output<S::File>>,
    ) {
        use kafka_protocol::messages::RequestKind;
        let reply_to = ReplyTo::new(connection, &request);
        let answer = |body: ResponseKind| reply_to.respond(ResponseBody::message(body));
        match &request.body {
            RequestKind::ApiVersions(body) => {
                out.push(answer(Self::on_api_versions_request(
                    request.api_version,
                    body,
                )));
            }
            RequestKind::Metadata(body) => {
                let response = self.on_metadata_request(now, request.api_version, body, out);
                out.push(answer(response));
            }
            RequestKind::ListOffsets(body) => {
                out.push(answer(
                    self.on_list_offsets_request(request.api_version, body),
                ));
            }
            RequestKind::CreateTopics(_) => {
                self.on_create_topics_request(now, reply_to, &request, out)
            }
            RequestKind::Produce(_) => self.on_produce_request(now, reply_to, request, out),
            RequestKind::Fetch(_) => self.on_fetch_request(now, reply_to, request, out),
            other => {
                // The codec only lets supported APIs through, so this is a bug in the table.
                let reason = format!("no handler for {:?}", request.api_key);
                debug_assert!(false, "{reason}: {other:?}");
                out.push(Output::Close { connection, reason });
            }
        }
    }

    /// The earliest time at which `handle(now, Input::Tick)` must run.
    pub fn next_deadline(&self) -> Option<Millis> {
        let flushes = self
            .partitions
            .values()
            .filter_map(|partition| partition.log.next_flush_deadline());
        let fetches = self.delayed_fetches.iter().map(|delayed| delayed.deadline);
        flushes
            .chain(fetches)
            .chain(self.checkpoint.next_deadline())
            .min()
    }

    /// Cross-field invariants over every partition; the driver calls this after every input.
    pub fn check_invariants(&self) {
        self.metadata_log.check_invariants();
        for (topic_partition, partition) in &self.partitions {
            assert_eq!(
                topic_partition, &partition.topic_partition,
                "partition keyed by itself"
            );
            partition.check_invariants();
            let topic = self
                .metadata
                .topic(&topic_partition.topic)
                .expect("a partition belongs to a known topic");
            assert!(
                topic_partition.partition < topic.partitions,
                "partition index within the topic"
            );
        }
        for delayed in &self.delayed_produces {
            for slot in &delayed.waiting {
                assert!(
                    self.partitions.contains_key(&slot.topic_partition),
                    "a delayed produce waits on a known partition"
                );
            }
        }
    }

    fn new_topic_id(&mut self) -> uuid::Uuid {
        loop {
            let id = uuid::Uuid::from_u64_pair(self.rng.next_u64(), self.rng.next_u64());
            if !id.is_nil() && self.metadata.topic_by_id(id).is_none() {
                return id;
            }
        }
    }
}

fn add_recovery(total: &mut RecoveryReport, one: &RecoveryReport) {
    total.segments += one.segments;
    total.unscanned_segments += one.unscanned_segments;
    total.batches += one.batches;
    total.truncated_bytes += one.truncated_bytes;
    total.deleted_segments += one.deleted_segments;
    if total.corruption.is_none() {
        total.corruption.clone_from(&one.corruption);
    }
}

/// What a partition looks like after recovery: where its log starts, that anything once past
/// its end may be gone (the broker cannot know what a crash took), and whether it is offline.
fn startup_events<S: Storage>(
    partition: &Partition<S>,
    recovery: &RecoveryReport,
) -> Vec<BrokerEvent> {
    let name = &partition.topic_partition;
    let mut events = vec![
        BrokerEvent::LogStartOffset {
            partition: name.clone(),
            offset: partition.log.log_start_offset(),
        },
        BrokerEvent::Truncated {
            partition: name.clone(),
            from_offset: partition.log.log_end_offset(),
            reason: format!(
                "recovery on start-up ({} bytes truncated, {} segments deleted)",
                recovery.truncated_bytes, recovery.deleted_segments
            ),
        },
    ];
    if let Some(reason) = partition.offline() {
        events.push(BrokerEvent::Offline {
            partition: name.clone(),
            reason: reason.to_owned(),
        });
    }
    events
}

impl<S: Storage> crate::state_machine::StateMachine for Broker<S> {
    type Input = Input;
    type Output = Output<S::File>;

    fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Output<S::File>>) {
        Broker::handle(self, now, input, out);
    }

    fn next_deadline(&self) -> Option<Millis> {
        Broker::next_deadline(self)
    }

    fn check_invariants(&self) {
        Broker::check_invariants(self);
    }
}

#[cfg(test)]
mod tests;
