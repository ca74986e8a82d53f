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
mod cleaner;
mod cluster;
mod controller;
mod coordinator;
mod flush;
pub(crate) mod group;
mod handlers;
mod retention;
mod shutdown;
pub use checkpoint::{
    LOG_START_CHECKPOINT, LOG_START_CHECKPOINT_TMP, RECOVERY_POINT_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT_TMP,
};
pub use group::{partition_for as offsets_partition_for, OFFSETS_TOPIC};
pub use handlers::produce_rejection;
pub use replication::{PartitionState, REPLICA_FETCH_VERSION};
pub use shutdown::CLEAN_SHUTDOWN_FILE;
pub(crate) use startup::{metadata_log_config, read_log_records};
pub mod metadata;
pub mod metrics;
pub mod partition;
mod producer_ids;
mod purgatory;
pub mod replica_manager;
mod replication;
mod startup;

use std::collections::BTreeMap;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use rand_chacha::rand_core::RngCore;
use rand_chacha::ChaCha8Rng;

use crate::config::broker::LogDirFailure;
use crate::config::BrokerConfig;
use crate::protocol::codec::Request;
use crate::protocol::fetch_response::{Chunk, FetchResponseParts};
use crate::protocol::record_batch::RecordBatchHeader;
use crate::storage::Storage;
use crate::types::{BrokerId, Millis, TopicPartition};

use self::checkpoint::CheckpointWriter;
use self::controller::Controller;
use self::partition::Partition;
use self::purgatory::{FlushTarget, Purgatory};
use self::replica_manager::ReplicaManager;
use crate::log::{FlushSync, LogError, RecoveryReport};

/// A client connection, numbered by the network layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(pub u64);

/// An fsync started by the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlushId(pub u64);

/// A request this broker sent to another broker (a follower's fetch from its leader).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerRequestId(pub u64);

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
    /// The answer to an [`Output::PeerRequest`], or why there is none (the connection failed).
    PeerResponse {
        /// The broker that answered.
        peer: BrokerId,
        /// Which request.
        id: PeerRequestId,
        /// The decoded response, or the error text.
        result: Result<Box<ResponseKind>, String>,
    },
    /// What the controller quorum (Raft) decided: a controller node's only source of
    /// committed metadata when its log is replicated. Brokers never get it.
    Quorum(crate::controller::node::QuorumInput),
    /// A deadline from [`Broker::next_deadline`] passed.
    Tick,
    /// Shut down cleanly (SIGTERM): flush every log, checkpoint, write the clean-shutdown
    /// marker, then [`Output::Stopped`]. The shell stops reading requests first.
    Shutdown,
}

/// Which of a node's roles a peer request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRole {
    /// A controller of `controller.quorum.voters`, at its controller listener.
    Controller,
    /// A broker, at the listener its registration names.
    Broker,
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
    /// Send a request to another node and feed its answer back as [`Input::PeerResponse`].
    PeerRequest {
        /// To whom.
        peer: BrokerId,
        /// Whether `peer` names a controller or a broker (a combined node is both, under one
        /// id, on two listeners).
        role: PeerRole,
        /// Echoed in the answer.
        id: PeerRequestId,
        /// The request's version.
        api_version: i16,
        /// The request (boxed: the generated enum is large).
        body: Box<RequestKind>,
        /// How long the answer may take: past it the shell drops the connection (the next
        /// request makes a new one) and answers with an error, as Kafka's NetworkClient does
        /// on a request timeout. A connection that stalled (a network cut whose retransmits back
        /// off for seconds after it heals) is never waited on for longer.
        timeout_ms: u64,
    },
    /// Append these metadata records to the replicated metadata log: the controller quorum
    /// commits them (or not) and feeds them back as [`Input::Quorum`]. Only a controller node
    /// whose log is replicated asks for it.
    Propose {
        /// The records, in order, as one log entry.
        records: Vec<crate::controller::records::Record>,
    },
    /// Something the outside world may want to record (the simulator's history does).
    Event(BrokerEvent),
    /// A storage failure the process cannot serve through: stop at once, without flushing or
    /// checkpointing (Kafka halts when its only log directory fails). The shell exits with an
    /// error; a cluster's controller fences the broker when its heartbeats stop and moves its
    /// leaderships to the other replicas.
    Halt {
        /// What failed.
        reason: String,
    },
    /// A shutdown finished: the shell may exit. `clean`: the marker is on disk.
    Stopped {
        /// Whether the clean-shutdown marker was written.
        clean: bool,
    },
}

/// A change of a partition's externally visible state, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerEvent {
    /// A controller node became the active controller of its Raft quorum (Raft mode only).
    ControllerActive {
        /// The Raft term.
        term: u64,
    },
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
    /// This broker became the partition's leader in `leader_epoch` (a controller's decision).
    Leader {
        /// Which partition.
        partition: TopicPartition,
        /// The leader epoch it leads in.
        leader_epoch: i32,
    },
    /// The partition went offline (a failed fsync or write, or corruption).
    Offline {
        /// Which partition.
        partition: TopicPartition,
        /// Why.
        reason: String,
    },
    /// A batch went into this replica's log, as leader or as follower: enough to tell two
    /// replicas' logs apart (the simulator mirrors every log from these to check the cluster
    /// invariants).
    Appended {
        /// Which partition.
        partition: TopicPartition,
        /// The batch's first offset.
        base_offset: i64,
        /// The batch's last offset.
        last_offset: i64,
        /// The leader epoch stamped on it.
        leader_epoch: i32,
        /// Its CRC (which covers its records, not its offsets or epoch).
        crc: u32,
    },
    /// The group coordinator let an offset commit of a group member through its fencing (the
    /// commit goes on to be written), with what the group was at that moment: a commit of a
    /// generation (`generation` ≥ 0) must come from a member of the group's current generation
    /// (the simulator checks it as `unfenced-commit`).
    CommitAdmitted {
        /// The `__consumer_offsets` partition that holds the group.
        partition: TopicPartition,
        /// The group.
        group: String,
        /// The committing member.
        member: String,
        /// The generation the commit names (-1: a simple consumer's).
        generation: i32,
        /// The group's generation when the commit was admitted.
        group_generation: i32,
        /// Whether the member belonged to the group then.
        member_known: bool,
    },
    /// The partition's leadership and ISR as this broker now knows them (after a controller's
    /// decision, or an ISR change).
    PartitionState {
        /// Which partition.
        partition: TopicPartition,
        /// The leader (-1: none).
        leader: BrokerId,
        /// The leader epoch.
        leader_epoch: i32,
        /// Every replica.
        replicas: Vec<BrokerId>,
        /// The in-sync replicas.
        isr: Vec<BrokerId>,
    },
}

impl BrokerEvent {
    /// A batch went into a log: its header as stored says where and what.
    pub fn appended(partition: &TopicPartition, stored: &RecordBatchHeader) -> BrokerEvent {
        BrokerEvent::Appended {
            partition: partition.clone(),
            base_offset: stored.base_offset,
            last_offset: stored.last_offset(),
            leader_epoch: stored.partition_leader_epoch,
            crc: stored.crc,
        }
    }
}

impl<F> From<BrokerEvent> for Output<F> {
    fn from(event: BrokerEvent) -> Output<F> {
        Output::Event(event)
    }
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
    /// The last stop was clean (the marker was found and removed): active segments ending at
    /// their recovery points were walked, not recovered.
    pub clean_shutdown: bool,
}

/// The broker state machine.
#[derive(Debug)]
pub struct Broker<S: Storage> {
    config: BrokerConfig,
    storage: S,
    cluster_id: String,
    rng: ChaCha8Rng,
    controller: Controller<S>,
    replicas: ReplicaManager<S>,
    next_flush_id: u64,
    flushes: BTreeMap<FlushId, FlushTarget>,
    checkpoint: CheckpointWriter,
    /// The log-start checkpoint, written when a retention check (every
    /// `log.retention.check.interval.ms`) moves some log start.
    log_starts: CheckpointWriter,
    /// The high-watermark checkpoint (`replication-offset-checkpoint`), written every
    /// `replica.high.watermark.checkpoint.interval.ms` in a cluster.
    high_watermarks: CheckpointWriter,
    /// The log cleaner (`cleanup.policy=compact` logs).
    cleaner: cleaner::LogCleaner,
    /// `producer-id-block`, written when InitProducerId needs more durable ids.
    producer_id_block: CheckpointWriter,
    /// The producer ids handed out and reserved.
    producer_ids: producer_ids::ProducerIds,
    /// Wall-clock milliseconds since the epoch at `now = 0` (retention compares record
    /// timestamps with wall-clock time); set by the shell.
    wall_clock_at_zero: i64,
    purgatory: Purgatory,
    /// A shutdown under way.
    closing: Option<shutdown::Closing>,
    /// Start-up found the clean-shutdown marker (logs opened then trust their active segment).
    clean_start: bool,
    /// Appends counted per topic, for the metrics endpoint.
    topic_counts: BTreeMap<String, metrics::TopicCounts>,
    /// Log starts DeleteRecords asked for that no durable log-start checkpoint holds yet.
    requested_starts: checkpoint::RecoveryPoints,
    /// The follower side of replication: one fetch session per leader.
    fetchers: replication::ReplicaFetchers,
    /// Membership of a cluster run by a controller (`controller.quorum.voters`); `None`: the
    /// broker is its own controller.
    cluster: Option<cluster::Membership>,
    /// The last [`PeerRequestId`] handed out.
    next_peer_request: u64,
    /// The consumer groups this broker coordinates.
    groups: group::Groups,
    /// The coordinator's writes that finished during this input, with the append's error:
    /// handled at its end (see [`Broker::on_group_write_done`]).
    finished_group_writes: Vec<(coordinator::GroupWrite, crate::protocol::ErrorCode)>,
}

impl<S: Storage> Broker<S> {
    /// This broker's id.
    pub fn node_id(&self) -> BrokerId {
        BrokerId(self.config.node_id)
    }

    /// The cluster id.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// Tells the broker the wall-clock time (milliseconds since the epoch) at `now`: retention
    /// compares record timestamps with it. Until then the broker takes `now` itself for it.
    pub fn set_wall_clock(&mut self, now: Millis, epoch_ms: i64) {
        self.wall_clock_at_zero = epoch_ms - now.0 as i64;
    }

    /// Wall-clock milliseconds since the epoch at `now`.
    fn wall_clock(&self, now: Millis) -> i64 {
        self.wall_clock_at_zero + now.0 as i64
    }

    /// A partition's replica state (for tests and the simulator's invariant checks).
    pub fn partition(&self, topic_partition: &TopicPartition) -> Option<&Partition<S>> {
        self.replicas.get(topic_partition)
    }

    /// Reacts to one input. Runs to completion; never blocks.
    pub fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Output<S::File>>) {
        if self.closing == Some(shutdown::Closing::Halted) {
            return; // the shell is exiting: nothing more happens here
        }
        let first_output = out.len();
        match input {
            Input::Request {
                connection,
                request,
            } => self.on_request(now, connection, *request, out),
            Input::FlushCompleted { flush_id, result } => {
                self.on_flush_completed(now, flush_id, result, out)
            }
            Input::ConnectionClosed { connection } => {
                self.purgatory.drop_connection(connection);
                for group in self.groups.groups.values_mut() {
                    group.drop_connection(connection);
                }
            }
            Input::PeerResponse { peer, id, result } => {
                if !self.on_controller_response(now, id, &result, out) {
                    self.on_peer_response(now, peer, id, result, out);
                }
            }
            Input::Tick => self.on_tick(now, out),
            Input::Quorum(_) => {}
            Input::Shutdown => self.on_shutdown(now, out),
        }
        while !self.finished_group_writes.is_empty() {
            for (write, error) in std::mem::take(&mut self.finished_group_writes) {
                self.on_group_write_done(now, write, error, out);
            }
        }
        self.maybe_halt(first_output, out);
    }

    /// A partition that went offline in this step (a failed fsync, write or read: a storage
    /// error of the only log directory) halts the broker, as Kafka's does when its only log
    /// directory fails (`LogManager.handleLogDirFailure`): staying up would keep the
    /// partition's leadership and ISR seat on a replica that cannot serve it, since nothing
    /// tells the controller, and leave even a single broker's partition stalled until someone
    /// restarts it. Under `seedlog.log.dir.failure=offline-partitions` the partition stays
    /// offline (KAFKA_STORAGE_ERROR) and the broker serves the others.
    fn maybe_halt(&mut self, first_output: usize, out: &mut Vec<Output<S::File>>) {
        if self.config.log_dir_failure == LogDirFailure::OfflinePartitions {
            return;
        }
        let offline = out[first_output..].iter().find_map(|output| match output {
            Output::Event(BrokerEvent::Offline { partition, reason }) => {
                Some(format!("{partition}: {reason}"))
            }
            _ => None,
        });
        if let Some(reason) = offline {
            self.halt(reason, out);
        }
    }

    /// Stops at once on a storage failure ([`Output::Halt`]).
    pub(crate) fn halt(&mut self, reason: String, out: &mut Vec<Output<S::File>>) {
        if self.closing != Some(shutdown::Closing::Halted) {
            tracing::error!(
                %reason,
                "Shutdown broker because all log dirs in {} have failed",
                self.config.log_dirs
            );
            self.closing = Some(shutdown::Closing::Halted);
            out.push(Output::Halt { reason });
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
            RequestKind::OffsetForLeaderEpoch(body) => {
                out.push(answer(self.on_offsets_for_leader_epoch_request(body)));
            }
            RequestKind::DescribeConfigs(body) => {
                out.push(answer(self.on_describe_configs_request(body)));
            }
            RequestKind::CreateTopics(body)
                if self.cluster.is_some() && handlers::names_reserved_topic(body) =>
            {
                out.push(answer(handlers::reserved_topics_refused(
                    request.api_version,
                    body,
                )));
            }
            RequestKind::CreateTopics(_) if self.cluster.is_some() => {
                self.forward_create_topics(
                    now,
                    Some(reply_to),
                    request.api_version,
                    request.body,
                    out,
                );
            }
            RequestKind::CreateTopics(_) => {
                self.on_create_topics_request(now, reply_to, &request, out)
            }
            RequestKind::Produce(_) => self.on_produce_request(now, reply_to, request, out),
            RequestKind::Fetch(_) => self.on_fetch_request(now, reply_to, request, out),
            RequestKind::DeleteRecords(body) => {
                self.on_delete_records_request(now, reply_to, body, out)
            }
            RequestKind::InitProducerId(body) => {
                self.on_init_producer_id_request(now, reply_to, body, out)
            }
            RequestKind::FindCoordinator(_)
            | RequestKind::JoinGroup(_)
            | RequestKind::SyncGroup(_)
            | RequestKind::Heartbeat(_)
            | RequestKind::LeaveGroup(_)
            | RequestKind::OffsetCommit(_)
            | RequestKind::OffsetFetch(_)
            | RequestKind::DescribeGroups(_)
            | RequestKind::ListGroups(_)
            | RequestKind::DeleteGroups(_) => self.on_group_request(now, reply_to, &request, out),
            other => {
                // The codec only lets supported APIs through, so this is a bug in the table.
                let reason = format!("no handler for {:?}", request.api_key);
                debug_assert!(false, "{reason}: {other:?}");
                out.push(Output::Close { connection, reason });
            }
        }
    }

    /// The group coordinator's requests (handlers in `handlers/groups.rs` and
    /// `handlers/offsets.rs`).
    fn on_group_request(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        request: &Request,
        out: &mut Vec<Output<S::File>>,
    ) {
        use kafka_protocol::messages::RequestKind;
        let answer = |body: ResponseKind| reply_to.respond(ResponseBody::message(body));
        match &request.body {
            RequestKind::FindCoordinator(body) => {
                let response =
                    self.on_find_coordinator_request(now, request.api_version, body, out);
                out.push(answer(response));
            }
            RequestKind::JoinGroup(body) => {
                let sender = (request.client_id.as_deref(), request.client_host.as_deref());
                self.on_join_group_request(now, reply_to, sender, body, out)
            }
            RequestKind::SyncGroup(body) => self.on_sync_group_request(now, reply_to, body, out),
            RequestKind::Heartbeat(body) => {
                let response = self.on_heartbeat_request(now, body, out);
                out.push(answer(response));
            }
            RequestKind::LeaveGroup(body) => {
                let response = self.on_leave_group_request(now, request.api_version, body, out);
                out.push(answer(response));
            }
            RequestKind::OffsetCommit(body) => {
                self.on_offset_commit_request(now, reply_to, body, out)
            }
            RequestKind::OffsetFetch(body) => {
                let response = self.on_offset_fetch_request(now, request.api_version, body, out);
                out.push(answer(response));
            }
            RequestKind::DescribeGroups(body) => {
                let response = self.on_describe_groups_request(now, request.api_version, body, out);
                out.push(answer(response));
            }
            RequestKind::ListGroups(body) => {
                let response = self.on_list_groups_request(request.api_version, body, out);
                out.push(answer(response));
            }
            RequestKind::DeleteGroups(body) => {
                self.on_delete_groups_request(now, reply_to, body, out);
            }
            _ => unreachable!("routed by api key"),
        }
    }

    /// The earliest time at which `handle(now, Input::Tick)` must run.
    pub fn next_deadline(&self) -> Option<Millis> {
        [
            self.replicas.next_flush_deadline(),
            self.purgatory.next_deadline(),
            self.checkpoint.next_deadline(),
            self.log_starts.next_deadline(),
            self.cleaner.next_deadline(),
            self.cluster
                .as_ref()
                .and_then(|_| self.high_watermarks.next_deadline()),
            self.next_replication_deadline(),
            self.cluster
                .as_ref()
                .and_then(cluster::Membership::next_deadline),
            self.groups.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Cross-field invariants over every partition; the driver calls this after every input.
    pub fn check_invariants(&self) {
        self.controller.check_invariants();
        self.replicas.check_invariants(&self.controller.image);
        self.groups.check_invariants();
        assert!(
            self.finished_group_writes.is_empty(),
            "the coordinator's finished writes are handled within the input"
        );
        for delayed in &self.purgatory.produces {
            for slot in &delayed.waiting {
                assert!(
                    self.replicas.contains(&slot.topic_partition),
                    "a delayed produce waits on a known partition"
                );
            }
        }
    }

    fn next_peer_request_id(&mut self) -> PeerRequestId {
        self.next_peer_request += 1;
        PeerRequestId(self.next_peer_request)
    }

    fn new_topic_id(&mut self) -> uuid::Uuid {
        loop {
            let id = uuid::Uuid::from_u64_pair(self.rng.next_u64(), self.rng.next_u64());
            if !id.is_nil() && self.controller.image.topic_by_id(id).is_none() {
                return id;
            }
        }
    }
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
