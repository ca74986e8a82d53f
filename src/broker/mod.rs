//! The broker as a deterministic state machine (sans-IO).
//!
//! [`Broker::handle`] takes an [`Input`] (a decoded request, a finished fsync, a closed
//! connection, a timer tick) and the current time, and pushes [`Output`]s (responses, fsyncs to
//! start). It never awaits, never reads a clock and never touches a socket; appends go to the
//! [`Storage`] synchronously (the page cache), and every fsync is an output whose completion
//! comes back as an input. The driver in `runtime::driver` runs it on real tokio or on madsim.
//!
//! `Broker` is a router over components, each in its own module with its own state:
//! `replica_manager/` (the partitions, their purgatories, replication and flushes),
//! `log_manager/` (retention, the log cleaner), `group/` (the group coordinator),
//! `metadata_cache` (the cluster image), `cluster` (the membership in a controller's cluster),
//! `producer_ids`, `flushes` and `checkpoint`. The router's own code (this file and `router/`,
//! the only places with `impl Broker`) hands each input to its component and carries what one
//! component's work means for another; its request handlers live one per file in
//! `router/handlers/`, named `on_<api>_request`.

pub mod checkpoint;
mod cluster;
mod flushes;
pub(crate) mod group;
mod log_manager;
mod router;
pub use checkpoint::{
    LOG_START_CHECKPOINT, LOG_START_CHECKPOINT_TMP, RECOVERY_POINT_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT_TMP,
};
pub use group::{partition_for as offsets_partition_for, OFFSETS_TOPIC};
pub use replica_manager::replication::{PartitionState, REPLICA_FETCH_VERSION};
pub use router::handlers::produce_rejection;
pub use router::shutdown::CLEAN_SHUTDOWN_FILE;
pub(crate) use router::startup::{metadata_log_config, read_log_records};

pub(crate) use crate::node_io::ReplyTo;
pub use crate::node_io::{
    BrokerError, BrokerEvent, ConnectionId, FlushId, Input, Output, PeerRequestId, PeerRole,
    Response, ResponseBody,
};
mod metadata_cache;
pub mod metrics;
mod producer_ids;
pub mod replica_manager;
pub use replica_manager::partition;

use std::collections::BTreeSet;

use kafka_protocol::messages::ResponseKind;
use rand_chacha::ChaCha8Rng;

use crate::config::broker::LogDirFailure;
use crate::config::BrokerConfig;
use crate::protocol::codec::Request;
use crate::storage::Storage;
use crate::types::{BrokerId, Millis, TopicPartition};

use self::checkpoint::CheckpointWriter;
use self::flushes::Flushes;
use self::metadata_cache::{DelayedCreateTopics, MetadataCache};
use self::partition::Partition;
use self::replica_manager::{AlterPartition, Link, ReplicaManager};
use crate::log::{FlushSync, RecoveryReport};
use crate::node_io::PeerRequestIds;

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
    /// The cluster's metadata as this broker knows it, and its own metadata log.
    metadata: MetadataCache<S>,
    /// The partitions held here, and the produces, fetches and follower fetches on them.
    replicas: ReplicaManager<S>,
    /// The fsyncs in flight.
    flushes: Flushes,
    checkpoint: CheckpointWriter,
    /// The log-start checkpoint, written when a retention check (every
    /// `log.retention.check.interval.ms`) moves some log start.
    log_starts: CheckpointWriter,
    /// The high-watermark checkpoint (`replication-offset-checkpoint`), written every
    /// `replica.high.watermark.checkpoint.interval.ms` in a cluster.
    high_watermarks: CheckpointWriter,
    /// The log cleaner (`cleanup.policy=compact` logs).
    cleaner: log_manager::LogCleaner,
    /// The producer-id allocator, with its `producer-id-block` checkpoint.
    producer_ids: producer_ids::ProducerIdManager,
    /// Wall-clock milliseconds since the epoch at `now = 0` (retention compares record
    /// timestamps with wall-clock time); set by the shell.
    wall_clock_at_zero: i64,
    /// CreateTopics answered once their records are durable.
    creations: Vec<DelayedCreateTopics>,
    /// A shutdown under way.
    closing: Option<router::shutdown::Closing>,
    /// Start-up found the clean-shutdown marker (logs opened then trust their active segment).
    clean_start: bool,
    /// Appends counted per topic, for the metrics endpoint.
    topic_counts: metrics::TopicStats,
    /// Log starts DeleteRecords asked for that no durable log-start checkpoint holds yet.
    requested_starts: checkpoint::RecoveryPoints,
    /// Membership of a cluster run by a controller (`controller.quorum.voters`); `None`: the
    /// broker is its own controller.
    cluster: Option<cluster::Membership>,
    /// The ids of requests to other nodes (follower fetches, controller calls).
    peer_ids: PeerRequestIds,
    /// The group coordinator: the consumer groups this broker coordinates.
    groups: group::GroupCoordinator,
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

    /// How many cleans rewrote segments since this broker started (tests, metrics).
    pub fn log_cleaner_runs(&self) -> u64 {
        self.cleaner.cleans()
    }

    /// A partition's replica state (for tests and the simulator's invariant checks).
    pub fn partition(&self, topic_partition: &TopicPartition) -> Option<&Partition<S>> {
        self.replicas.get(topic_partition)
    }

    /// The monitoring snapshot: append counts by topic, every partition, the purgatory.
    pub fn metrics(&self) -> metrics::BrokerMetrics {
        metrics::BrokerMetrics {
            topics: self.topic_counts.snapshot(),
            partitions: self.replicas.partition_metrics(),
            delayed_produces: self.replicas.purgatory.produces.len(),
            delayed_fetches: self.replicas.purgatory.fetches.len(),
        }
    }

    /// Reacts to one input. Runs to completion; never blocks.
    pub fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Output<S::File>>) {
        if self.closing == Some(router::shutdown::Closing::Halted) {
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
                self.replicas.purgatory.drop_connection(connection);
                self.creations
                    .retain(|delayed| delayed.reply_to.connection != connection);
                self.groups.drop_connection(connection);
            }
            Input::PeerResponse { peer, id, result } => {
                if !self.on_controller_response(now, id, &result, out) {
                    let (replicas, mut link) = self.replica_manager();
                    replicas.on_peer_response(now, peer, id, result, &mut link, out);
                }
            }
            Input::Tick => self.on_tick(now, out),
            Input::Quorum(_) => {}
            Input::Shutdown => self.on_shutdown(now, out),
        }
        loop {
            let finished = self.replicas.take_finished_group_writes();
            if finished.is_empty() {
                break;
            }
            for (write, error) in finished {
                self.with_groups(|groups, host| groups.on_write_done(now, write, error, host, out));
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
        if self.closing != Some(router::shutdown::Closing::Halted) {
            tracing::error!(
                %reason,
                "Shutdown broker because all log dirs in {} have failed",
                self.config.log_dirs
            );
            self.closing = Some(router::shutdown::Closing::Halted);
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
            RequestKind::ApiVersions(_)
            | RequestKind::Metadata(_)
            | RequestKind::ListOffsets(_)
            | RequestKind::OffsetForLeaderEpoch(_)
            | RequestKind::DescribeConfigs(_) => {
                let response = self.on_read_request(now, &request, out);
                out.push(answer(response));
            }
            RequestKind::CreateTopics(_) => {
                self.on_create_topics_request(now, reply_to, request, out)
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

    /// The requests answered at once from what the broker holds (metadata, configs, replicas).
    fn on_read_request(
        &mut self,
        now: Millis,
        request: &Request,
        out: &mut Vec<Output<S::File>>,
    ) -> ResponseKind {
        use kafka_protocol::messages::RequestKind;
        let version = request.api_version;
        match &request.body {
            RequestKind::ApiVersions(body) => {
                router::handlers::on_api_versions_request(version, body)
            }
            RequestKind::Metadata(body) => self.on_metadata_request(now, version, body, out),
            RequestKind::ListOffsets(body) => self.replicas.on_list_offsets_request(version, body),
            RequestKind::OffsetForLeaderEpoch(body) => {
                self.replicas.on_offsets_for_leader_epoch_request(body)
            }
            RequestKind::DescribeConfigs(body) => self.on_describe_configs_request(body),
            _ => unreachable!("routed by api key"),
        }
    }

    /// InitProducerId, answered by the producer-id allocator.
    fn on_init_producer_id_request(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        body: &kafka_protocol::messages::InitProducerIdRequest,
        out: &mut Vec<Output<S::File>>,
    ) {
        let reservation = self
            .producer_ids
            .on_init_producer_id_request(reply_to, body, out);
        self.reserve_producer_ids(now, reservation, out);
    }

    /// The group coordinator's requests (its handlers are in `group/handlers.rs` and
    /// `group/offsets.rs`).
    fn on_group_request(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        request: &Request,
        out: &mut Vec<Output<S::File>>,
    ) {
        use kafka_protocol::messages::RequestKind;
        let answer = |body: ResponseKind| reply_to.respond(ResponseBody::message(body));
        let version = request.api_version;
        self.with_groups(|groups, host| match &request.body {
            RequestKind::FindCoordinator(body) => {
                let response = groups.on_find_coordinator_request(now, version, body, host, out);
                out.push(answer(response));
            }
            RequestKind::JoinGroup(body) => {
                let sender = (request.client_id.as_deref(), request.client_host.as_deref());
                groups.on_join_group_request(now, reply_to, sender, body, host, out)
            }
            RequestKind::SyncGroup(body) => {
                groups.on_sync_group_request(now, reply_to, body, host, out)
            }
            RequestKind::Heartbeat(body) => {
                let response = groups.on_heartbeat_request(now, body, host, out);
                out.push(answer(response));
            }
            RequestKind::LeaveGroup(body) => {
                let response = groups.on_leave_group_request(now, version, body, host, out);
                out.push(answer(response));
            }
            RequestKind::OffsetCommit(body) => {
                groups.on_offset_commit_request(now, reply_to, body, host, out)
            }
            RequestKind::OffsetFetch(body) => {
                let response = groups.on_offset_fetch_request(now, version, body, host, out);
                out.push(answer(response));
            }
            RequestKind::DescribeGroups(body) => {
                let response = groups.on_describe_groups_request(now, version, body, host, out);
                out.push(answer(response));
            }
            RequestKind::ListGroups(body) => {
                let response = groups.on_list_groups_request(version, body, host, out);
                out.push(answer(response));
            }
            RequestKind::DeleteGroups(body) => {
                groups.on_delete_groups_request(now, reply_to, body, host, out);
            }
            _ => unreachable!("routed by api key"),
        });
    }

    /// The earliest time at which `handle(now, Input::Tick)` must run.
    pub fn next_deadline(&self) -> Option<Millis> {
        [
            self.replicas.next_flush_deadline(),
            self.replicas.purgatory.next_deadline(),
            self.checkpoint.next_deadline(),
            self.log_starts.next_deadline(),
            self.cleaner.next_deadline(),
            self.cluster
                .as_ref()
                .and_then(|_| self.high_watermarks.next_deadline()),
            self.replicas.next_replication_deadline(&self.config),
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
        self.metadata.check_invariants(self.cluster.is_none());
        self.replicas
            .check_invariants(|topic| self.metadata.partition_count(topic));
        self.groups.check_invariants();
    }

    /// The replica manager, with what it borrows from the rest of the broker.
    fn replica_manager(&mut self) -> (&mut ReplicaManager<S>, Link<'_, S>) {
        let link = Link {
            config: &self.config,
            metadata: &self.metadata,
            flushes: &mut self.flushes,
            peer_ids: &mut self.peer_ids,
            controller: self
                .cluster
                .as_mut()
                .map(|membership| membership as &mut dyn AlterPartition<S>),
        };
        (&mut self.replicas, link)
    }

    /// Makes this broker the leader or a follower of a partition it holds
    /// (`ReplicaManager::become_leader_or_follower`).
    pub fn become_leader_or_follower(
        &mut self,
        now: Millis,
        topic_partition: &TopicPartition,
        state: PartitionState,
        out: &mut Vec<Output<S::File>>,
    ) {
        let (replicas, mut link) = self.replica_manager();
        replicas.become_leader_or_follower(now, topic_partition, state, &mut link, out);
    }

    /// Starts a flush of one partition, if it has anything to flush.
    fn flush_partition(
        &mut self,
        now: Millis,
        topic_partition: &TopicPartition,
        out: &mut Vec<Output<S::File>>,
    ) {
        self.replicas
            .flush_partition(now, topic_partition, &mut self.flushes, out);
    }

    /// Answers the parked fetches that `advanced` (partitions whose high watermark moved) or
    /// their deadlines complete.
    fn complete_delayed_fetches(
        &mut self,
        now: Millis,
        advanced: &BTreeSet<TopicPartition>,
        out: &mut Vec<Output<S::File>>,
    ) {
        self.replicas
            .complete_delayed_fetches(now, advanced, &self.metadata, out);
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
