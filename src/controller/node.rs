//! A controller node (Kafka's `process.roles=controller`) as a sans-IO state machine: the
//! [`QuorumController`]'s decisions, made durable in the metadata log `__cluster_metadata-0`
//! before anyone hears of them. A record is *committed* once an fsync covers it; every answer
//! (a registration's epoch, an AlterPartition's new state, a created topic) waits for the
//! commit of the records it reports, and brokers fetch only committed records.
//!
//! The metadata log is either local (a quorum of one: committed once fsynced) or replicated by
//! a Raft quorum of controllers ([`QuorumKind::Raft`]). The quorum replaces how records become
//! committed, not what the controller decides or what brokers see: in Raft mode the node
//! proposes its records ([`Output::Propose`]), the quorum feeds back every committed entry in
//! log order ([`Input::Quorum`]), and only the quorum's leader, once it has applied an entry of
//! its own term (everything committed before it), acts as the controller. The others answer
//! `NOT_CONTROLLER`; brokers then try the next voter.
//!
//! Brokers talk to it with Kafka's own APIs: BrokerRegistration, BrokerHeartbeat,
//! AlterPartition, CreateTopics (forwarded by brokers), and Fetch of `__cluster_metadata-0`,
//! whose record values are encoded [`Record`]s and whose offsets are metadata offsets.
//!
//! In Raft mode the quorum also hands the node each metadata snapshot (the image as the records
//! that rebuild it, at an end offset): the node's copy of the log then starts at that offset. A
//! broker fetching below it is answered with the snapshot's id (Fetch's `SnapshotId`) and
//! fetches the snapshot itself with FetchSnapshot, as KIP-630 has it.

use std::collections::{BTreeMap, VecDeque};

use kafka_protocol::messages::alter_partition_response::{
    PartitionData as AlterPartitionData, TopicData as AlterTopicData,
};
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{
    AlterPartitionRequest, AlterPartitionResponse, BrokerHeartbeatRequest, BrokerHeartbeatResponse,
    BrokerRegistrationRequest, BrokerRegistrationResponse, CreateTopicsRequest,
    CreateTopicsResponse, FetchRequest, FetchSnapshotRequest, FetchSnapshotResponse, RequestKind,
    ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::{metadata_log_config, read_log_records};
use crate::config::BrokerConfig;
use crate::log::{FlushMark, FlushSync, LogRead, PartitionLog};
use crate::metadata::METADATA_LOG_DIRECTORY;
use crate::protocol::codec::Request;
use crate::protocol::fetch_response::{
    FetchPartitionResponse, FetchResponseParts, FetchTopicResponse, RecordsSource,
};
use crate::protocol::record_batch::value_batch;
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{BrokerEpoch, BrokerId, LeaderEpoch, Millis, PartitionEpoch};

use super::{AlterPartition, ControllerConfig, QuorumController};
use crate::metadata::records::Record;
use crate::metadata::{QuorumInput, METADATA_TOPIC};
use crate::node_io::{
    BrokerError, BrokerEvent, ConnectionId, FlushId, Input, Output, ReplyTo, Response, ResponseBody,
};

/// A controller node and what its driver must sync before serving.
pub type Opened<S> = (ControllerNode<S>, Option<FlushSync<<S as Storage>::File>>);

/// An answer waiting for the records it reports to be committed.
#[derive(Debug)]
struct Pending<F> {
    /// The log end after its records.
    end: i64,
    output: Output<F>,
}

/// A broker's metadata fetch waiting for new committed records.
#[derive(Debug)]
struct ParkedFetch {
    reply_to: ReplyTo,
    request: FetchRequest,
    deadline: Millis,
}

/// The latest metadata snapshot a Raft-mode node was handed: where its copy of the log starts.
#[derive(Debug)]
struct MetadataSnapshot {
    /// The metadata offset the image stands at.
    end_offset: i64,
    /// The Raft term of the last entry it covers (Kafka's snapshot epoch).
    epoch: i32,
    /// The records that rebuild the image.
    records: Vec<Record>,
    /// The records as one RecordBatch, as FetchSnapshot serves them.
    bytes: bytes::Bytes,
}

/// How a controller node's metadata records become committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuorumKind {
    /// A quorum of one: the node's own log, committed once fsynced.
    Local,
    /// A Raft quorum; this node is voter `me`.
    Raft {
        /// This node's id among the voters.
        me: i32,
    },
}

/// A Raft-mode node's view of the quorum.
#[derive(Debug)]
struct RaftView {
    me: i32,
    leader: Option<i32>,
    term: u64,
    /// The term of the last entry applied.
    applied_term: u64,
    /// Whether this node acts as the controller (leader, with its term's entry applied).
    active: bool,
    /// Records proposed in this leadership, not yet seen committed, in order.
    uncommitted: VecDeque<Record>,
    seed: u64,
}

/// A controller node.
#[derive(Debug)]
pub struct ControllerNode<S: Storage> {
    controller: QuorumController,
    /// `None`: a quorum of one.
    raft: Option<RaftView>,
    /// Defaults topic configs are validated against.
    defaults: BrokerConfig,
    log: PartitionLog<S>,
    /// Raft mode: the latest metadata snapshot, where `log` starts.
    snapshot: Option<MetadataSnapshot>,
    flushes: BTreeMap<FlushId, FlushMark>,
    next_flush_id: u64,
    pending: Vec<Pending<S::File>>,
    fetches: Vec<ParkedFetch>,
    /// The metadata offset each broker must have reached (its registration record applied)
    /// before a heartbeat may unfence it.
    registered_at: BTreeMap<BrokerId, i64>,
}

impl<S: Storage> ControllerNode<S> {
    /// Opens the metadata log, replays it, and starts every broker's session at `now`.
    /// Returns what the caller must sync before serving (what recovery found past the last
    /// fsync: a crash may have left it in the page cache only).
    pub fn open(
        config: ControllerConfig,
        defaults: BrokerConfig,
        storage: S,
        seed: u64,
        now: Millis,
    ) -> Result<Opened<S>, BrokerError> {
        Self::open_with(QuorumKind::Local, config, defaults, storage, seed, now)
    }

    /// Opens a node whose metadata log is local or replicated. In Raft mode the local log is
    /// only a copy of what the quorum committed, for brokers to fetch: it starts empty (the
    /// quorum feeds every committed entry again) and is never synced.
    pub fn open_with(
        kind: QuorumKind,
        config: ControllerConfig,
        defaults: BrokerConfig,
        storage: S,
        seed: u64,
        now: Millis,
    ) -> Result<Opened<S>, BrokerError> {
        let raft = match kind {
            QuorumKind::Local => None,
            QuorumKind::Raft { me } => {
                let clear = |error: std::io::Error| {
                    BrokerError::DataDirectory(format!("clearing the metadata log copy: {error}"))
                };
                for name in storage
                    .list(&format!("{METADATA_LOG_DIRECTORY}/"))
                    .map_err(clear)?
                {
                    storage.remove(&name).map_err(clear)?;
                }
                Some(RaftView {
                    me,
                    leader: None,
                    term: 0,
                    applied_term: 0,
                    active: false,
                    uncommitted: VecDeque::new(),
                    seed,
                })
            }
        };
        let (log, _report) = PartitionLog::open(
            storage,
            METADATA_LOG_DIRECTORY,
            metadata_log_config(),
            0,
            now,
        )?;
        let mut node = ControllerNode {
            controller: QuorumController::new(config, seed),
            raft,
            defaults,
            log,
            snapshot: None,
            flushes: BTreeMap::new(),
            next_flush_id: 0,
            pending: Vec::new(),
            fetches: Vec::new(),
            registered_at: BTreeMap::new(),
        };
        if node.raft.is_some() {
            // The quorum feeds every committed entry again; the node acts once elected.
            return Ok((node, None));
        }
        let log = &mut node.log;
        let to_sync = log.start_flush(now).map(|(sync, mark)| {
            log.flush_completed(mark);
            sync
        });
        for (offset, record) in node.read_records(0)? {
            node.note(offset, &record);
            node.controller
                .replay(&record)
                .map_err(|error| BrokerError::DataDirectory(format!("metadata log: {error}")))?;
        }
        node.controller.activate(now);
        Ok((node, to_sync))
    }

    /// The decisions and the image.
    pub fn controller(&self) -> &QuorumController {
        &self.controller
    }

    /// Records below this offset are committed.
    pub fn committed(&self) -> i64 {
        if self.raft.is_some() {
            self.log.log_end_offset()
        } else {
            self.log.recovery_point()
        }
    }

    /// Whether this node acts as the controller now (always, for a quorum of one).
    pub fn is_active(&self) -> bool {
        self.raft.as_ref().is_none_or(|raft| raft.active)
    }

    fn note(&mut self, offset: i64, record: &Record) {
        if let Record::RegisterBroker { broker, .. } = record {
            self.registered_at.insert(*broker, offset + 1);
        }
    }

    /// Every record from `offset` on, with its offset.
    fn read_records(&self, offset: i64) -> Result<Vec<(i64, Record)>, BrokerError> {
        read_log_records(&self.log, offset)?
            .iter()
            .map(|record| {
                let value = record.value.as_deref().unwrap_or_default();
                let parsed = Record::decode(value)
                    .map_err(|error| BrokerError::DataDirectory(error.to_string()))?;
                Ok((record.offset, parsed))
            })
            .collect()
    }

    /// Reacts to one input.
    pub fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Output<S::File>>) {
        match input {
            Input::Request {
                connection,
                request,
            } => self.on_request(now, connection, *request, out),
            Input::FlushCompleted { flush_id, result } => {
                let mark = self
                    .flushes
                    .remove(&flush_id)
                    .expect("completion of an unknown flush");
                if let Err(error) = result {
                    // Whether the records are on disk is unknown: Kafka's controller halts.
                    panic!("fsync of the metadata log failed: {error}");
                }
                self.log.flush_completed(mark);
                self.release(now, out);
            }
            Input::ConnectionClosed { connection } => {
                self.fetches
                    .retain(|fetch| fetch.reply_to.connection != connection);
                self.pending.retain(|pending| match &pending.output {
                    Output::Respond { connection: to, .. } => *to != connection,
                    _ => true,
                });
            }
            Input::PeerResponse { .. } => {}
            Input::Quorum(input) => self.on_quorum(now, input, out),
            Input::Tick if !self.is_active() => self.answer_fetches(now, out),
            Input::Tick => {
                let records = self.controller.tick(now);
                if !records.is_empty() {
                    self.append(now, &records, out);
                }
                self.answer_fetches(now, out);
            }
            Input::Shutdown => out.push(Output::Stopped { clean: false }),
        }
    }

    /// The earliest session expiry or parked fetch deadline.
    pub fn next_deadline(&self) -> Option<Millis> {
        let fetches = self.fetches.iter().map(|fetch| fetch.deadline);
        let sessions = self
            .is_active()
            .then(|| self.controller.next_deadline())
            .flatten();
        fetches.chain(sessions).min()
    }

    /// Follows the quorum: committed entries extend the local copy of the log (and, unless
    /// this node wrote them as the active controller, its image); a change of leader or term
    /// deposes an active controller.
    fn on_quorum(&mut self, now: Millis, input: QuorumInput, out: &mut Vec<Output<S::File>>) {
        let raft = self.raft.as_mut().expect("quorum input in Raft mode only");
        match input {
            QuorumInput::Leader { leader, term } => {
                let deposed = raft.active && (leader != Some(raft.me) || term != raft.term);
                raft.leader = leader;
                raft.term = term;
                if deposed {
                    self.step_down(now, out);
                }
            }
            QuorumInput::Committed { term, records } => {
                raft.applied_term = term;
                let mut diverged = false;
                for record in &records {
                    let offset = self.log.log_end_offset();
                    let values = [record.encode()];
                    let (mut batch, header) = value_batch(&values);
                    if let Err(error) = self.log.append(&mut batch, &header, 0) {
                        panic!("append to the metadata log copy failed: {error}");
                    }
                    self.note(offset, record);
                    let raft = self.raft.as_mut().expect("Raft mode");
                    if raft.active && !diverged && raft.uncommitted.front() == Some(record) {
                        raft.uncommitted.pop_front();
                        continue;
                    }
                    diverged |= raft.active;
                    if !raft.active {
                        if let Err(error) = self.controller.replay(record) {
                            panic!("a committed metadata record does not apply: {error}");
                        }
                    }
                }
                if diverged {
                    // Not what this leader proposed: rebuild from what was committed.
                    self.step_down(now, out);
                }
                self.release(now, out);
            }
            QuorumInput::Snapshot {
                term,
                end_offset,
                records,
            } => self.on_snapshot(now, term, end_offset, records, out),
        }
        self.maybe_activate(now, out);
    }

    /// Takes a new snapshot. One of this node's own moves the copy's start to the previous
    /// snapshot's end: a broker a little behind still reads records, one further behind (or
    /// starting from nothing) reads the latest snapshot. A snapshot past the copy's end was
    /// installed from the leader: the copy starts over there, and the image is the snapshot's.
    /// Brokers registered in it must reach its end before they unfence (Kafka replays a
    /// snapshot's records at its end offset).
    fn on_snapshot(
        &mut self,
        now: Millis,
        term: u64,
        end_offset: i64,
        records: Vec<Record>,
        out: &mut Vec<Output<S::File>>,
    ) {
        if end_offset < self.log.log_start_offset()
            || self
                .snapshot
                .as_ref()
                .is_some_and(|snapshot| snapshot.end_offset >= end_offset)
        {
            return;
        }
        let installed = end_offset > self.log.log_end_offset();
        let start = if installed {
            end_offset
        } else {
            self.snapshot
                .as_ref()
                .map_or(self.log.log_start_offset(), |previous| previous.end_offset)
        };
        if let Err(error) = self.log.delete_segments_below(start) {
            panic!("starting the metadata log copy at {start} failed: {error}");
        }
        let values: Vec<Vec<u8>> = records.iter().map(Record::encode).collect();
        let batch = if values.is_empty() {
            Vec::new()
        } else {
            value_batch(&values).0
        };
        tracing::info!(
            end_offset,
            records = records.len(),
            installed,
            start,
            "metadata snapshot taken"
        );
        self.snapshot = Some(MetadataSnapshot {
            end_offset,
            epoch: i32::try_from(term).unwrap_or(i32::MAX),
            records,
            bytes: bytes::Bytes::from(batch),
        });
        if !installed {
            return;
        }
        let raft = self.raft.as_mut().expect("Raft mode");
        raft.applied_term = term;
        let active = raft.active;
        for record in &self.snapshot.as_ref().expect("just set").records {
            if let Record::RegisterBroker { broker, .. } = record {
                self.registered_at.insert(*broker, end_offset);
            }
        }
        if active {
            // A leader installs no snapshot; should one come, the image follows it.
            self.step_down(now, out);
        } else {
            let seed = self.raft.as_ref().expect("Raft mode").seed;
            self.rebuild_controller(seed);
        }
        self.release(now, out);
    }

    /// Becomes the controller once this node leads and has applied an entry of its term. Every
    /// term starts with an entry of its own (a new leader's blank entry; a restarted leader
    /// resigned and won a new term, see `runtime::quorum::journal`), and entries apply in log
    /// order, so everything committed before this leadership is in the image by then (Kafka's
    /// controller waits for its epoch's start offset the same way).
    fn maybe_activate(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        let raft = self.raft.as_mut().expect("Raft mode");
        if raft.active || raft.leader != Some(raft.me) || raft.applied_term != raft.term {
            return;
        }
        raft.active = true;
        let term = raft.term;
        tracing::info!(
            term,
            committed = self.log.log_end_offset(),
            "active controller"
        );
        out.push(Output::Event(BrokerEvent::ControllerActive { term }));
        // Topic ids drawn in this term must differ from any drawn before (a replayed
        // controller's generator starts over).
        let seed = raft.seed ^ raft.term.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.rebuild_controller(seed);
        self.controller.activate(now);
    }

    /// A controller whose image is the committed records (the snapshot's, then the log's),
    /// drawing ids from `seed`.
    fn rebuild_controller(&mut self, seed: u64) {
        self.controller = QuorumController::new(self.controller.config().clone(), seed);
        let from = self
            .snapshot
            .as_ref()
            .map_or(self.log.log_start_offset(), |snapshot| snapshot.end_offset);
        let logged = self
            .read_records(from)
            .expect("the metadata log copy reads back");
        let snapshot = self.snapshot.iter().flat_map(|snapshot| &snapshot.records);
        for record in snapshot.chain(logged.iter().map(|(_, record)| record)) {
            if let Err(error) = self.controller.replay(record) {
                panic!("a committed metadata record does not apply: {error}");
            }
        }
    }

    /// Stops acting as the controller: waiting answers and fetches get `NOT_CONTROLLER`, and the
    /// image goes back to what was committed.
    fn step_down(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        let raft = self.raft.as_mut().expect("Raft mode");
        tracing::info!(term = raft.term, leader = ?raft.leader, "no longer the active controller");
        raft.active = false;
        raft.uncommitted.clear();
        let seed = raft.seed;
        self.rebuild_controller(seed);
        for pending in std::mem::take(&mut self.pending) {
            if let Output::Respond {
                connection,
                response,
            } = pending.output
            {
                out.push(Output::Respond {
                    connection,
                    response: not_controller(response),
                });
            }
        }
        self.answer_fetches(now, out);
    }

    /// The image's invariants and the log's.
    pub fn check_invariants(&self) {
        self.log.check_invariants();
        self.controller.image().check_invariants();
        for pending in &self.pending {
            assert!(
                pending.end > self.committed(),
                "a committed answer is not held back"
            );
        }
    }

    fn on_request(
        &mut self,
        now: Millis,
        connection: ConnectionId,
        request: Request,
        out: &mut Vec<Output<S::File>>,
    ) {
        let reply_to = ReplyTo::new(connection, &request);
        let api_version = request.api_version;
        if !self.is_active() {
            if let Some(body) = not_controller_answer(&request.body) {
                out.push(reply_to.respond(ResponseBody::message(body)));
                return;
            }
        }
        match request.body {
            RequestKind::BrokerRegistration(body) => {
                self.on_registration(now, reply_to, &body, out)
            }
            RequestKind::BrokerHeartbeat(body) => self.on_heartbeat(now, reply_to, &body, out),
            RequestKind::AlterPartition(body) => self.on_alter_partition(now, reply_to, &body, out),
            RequestKind::CreateTopics(body) => {
                self.on_create_topics(now, reply_to, api_version, &body, out)
            }
            RequestKind::Fetch(body) => self.on_fetch(now, reply_to, body, out),
            RequestKind::FetchSnapshot(body) => {
                let answer = self.read_snapshot(&body);
                out.push(
                    reply_to.respond(ResponseBody::message(ResponseKind::FetchSnapshot(answer))),
                );
            }
            other => out.push(Output::Close {
                connection,
                reason: format!(
                    "a controller does not answer {:?}",
                    crate::protocol::codec::RequestApiKey::api_key(&other)
                ),
            }),
        }
    }

    /// Appends records as one batch and starts its fsync (in Raft mode: proposes them to the
    /// quorum); returns the log end after them.
    fn append(&mut self, now: Millis, records: &[Record], out: &mut Vec<Output<S::File>>) -> i64 {
        if let Some(raft) = self.raft.as_mut() {
            raft.uncommitted.extend(records.iter().cloned());
            out.push(Output::Propose {
                records: records.to_vec(),
            });
            return self.log.log_end_offset() + raft.uncommitted.len() as i64;
        }
        let base = self.log.log_end_offset();
        for (index, record) in records.iter().enumerate() {
            self.note(base + index as i64, record);
        }
        let values: Vec<Vec<u8>> = records.iter().map(Record::encode).collect();
        let (mut batch, header) = value_batch(&values);
        if let Err(error) = self.log.append(&mut batch, &header, 0) {
            panic!("append to the metadata log failed: {error}");
        }
        if let Some((sync, mark)) = self.log.start_flush(now) {
            self.next_flush_id += 1;
            let flush_id = FlushId(self.next_flush_id);
            self.flushes.insert(flush_id, mark);
            out.push(Output::Flush { flush_id, sync });
        }
        self.log.log_end_offset()
    }

    /// Sends `output` once everything below `end` is committed.
    fn reply_at(&mut self, end: i64, output: Output<S::File>, out: &mut Vec<Output<S::File>>) {
        if end <= self.committed() {
            out.push(output);
        } else {
            self.pending.push(Pending { end, output });
        }
    }

    /// Answers what a commit released, in arrival order, and feeds parked fetches.
    fn release(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        let committed = self.committed();
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|pending| pending.end <= committed);
        self.pending = waiting;
        out.extend(ready.into_iter().map(|pending| pending.output));
        self.answer_fetches(now, out);
    }

    fn on_registration(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        body: &BrokerRegistrationRequest,
        out: &mut Vec<Output<S::File>>,
    ) {
        let broker = BrokerId(body.broker_id.0);
        let (host, port) = body
            .listeners
            .first()
            .map_or((String::new(), 0), |listener| {
                (listener.host.to_string(), i32::from(listener.port))
            });
        // -1 (BrokerRegistration before version 3, or no clean shutdown): unclean.
        let previous = body.previous_broker_epoch;
        let (epoch, records) = self
            .controller
            .register_broker(now, broker, &host, port, previous);
        tracing::info!(broker = broker.0, epoch = epoch.0, %host, port, "broker registered");
        let end = self.append(now, &records, out);
        let response = BrokerRegistrationResponse::default().with_broker_epoch(epoch.0);
        let output = reply_to.respond(ResponseBody::message(ResponseKind::BrokerRegistration(
            response,
        )));
        self.reply_at(end, output, out);
    }

    fn on_heartbeat(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        body: &BrokerHeartbeatRequest,
        out: &mut Vec<Output<S::File>>,
    ) {
        let broker = BrokerId(body.broker_id.0);
        let caught_up = self
            .registered_at
            .get(&broker)
            .is_some_and(|at| body.current_metadata_offset >= *at && *at <= self.committed());
        let mut response = BrokerHeartbeatResponse::default().with_is_caught_up(caught_up);
        let result = self.controller.heartbeat(
            now,
            broker,
            BrokerEpoch(body.broker_epoch),
            caught_up && !body.want_fence,
        );
        let end = match result {
            Ok((reply, records)) => {
                response.is_fenced = reply.fenced;
                if records.is_empty() {
                    self.committed()
                } else {
                    self.append(now, &records, out)
                }
            }
            Err((error, message)) => {
                tracing::warn!(broker = broker.0, %message, "heartbeat refused");
                response.error_code = error.code();
                response.is_fenced = true;
                self.committed()
            }
        };
        let output = reply_to.respond(ResponseBody::message(ResponseKind::BrokerHeartbeat(
            response,
        )));
        self.reply_at(end, output, out);
    }

    fn on_alter_partition(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        body: &AlterPartitionRequest,
        out: &mut Vec<Output<S::File>>,
    ) {
        let mut response = AlterPartitionResponse::default();
        let mut records = Vec::new();
        for topic in &body.topics {
            let mut answers = AlterTopicData::default().with_topic_id(topic.topic_id);
            for data in &topic.partitions {
                let new_isr = if data.new_isr_with_epochs.is_empty() {
                    data.new_isr.iter().map(|id| BrokerId(id.0)).collect()
                } else {
                    data.new_isr_with_epochs
                        .iter()
                        .map(|member| BrokerId(member.broker_id.0))
                        .collect()
                };
                let request = AlterPartition {
                    broker: BrokerId(body.broker_id.0),
                    broker_epoch: BrokerEpoch(body.broker_epoch),
                    topic_id: topic.topic_id,
                    partition: data.partition_index,
                    leader_epoch: LeaderEpoch(data.leader_epoch),
                    partition_epoch: PartitionEpoch(data.partition_epoch),
                    new_isr,
                };
                let mut answer =
                    AlterPartitionData::default().with_partition_index(data.partition_index);
                match self.controller.alter_partition(&request) {
                    Ok((state, changes)) => {
                        records.extend(changes);
                        answer.leader_id = kafka_protocol::messages::BrokerId(state.leader.0);
                        answer.leader_epoch = state.leader_epoch.0;
                        answer.partition_epoch = state.partition_epoch.0;
                        answer.isr = state
                            .isr
                            .iter()
                            .map(|id| kafka_protocol::messages::BrokerId(id.0))
                            .collect();
                    }
                    Err((error, message)) => {
                        tracing::info!(%message, "AlterPartition refused");
                        answer.error_code = error.code();
                    }
                }
                answers.partitions.push(answer);
            }
            response.topics.push(answers);
        }
        let end = if records.is_empty() {
            self.committed()
        } else {
            self.append(now, &records, out)
        };
        let output = reply_to.respond(ResponseBody::message(ResponseKind::AlterPartition(
            response,
        )));
        self.reply_at(end, output, out);
    }

    fn on_create_topics(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        api_version: i16,
        body: &CreateTopicsRequest,
        out: &mut Vec<Output<S::File>>,
    ) {
        let (response, records) = self
            .controller
            .create_topics(api_version, body, &self.defaults);
        let end = if records.is_empty() {
            self.committed()
        } else {
            self.append(now, &records, out)
        };
        let output = reply_to.respond(ResponseBody::message(ResponseKind::CreateTopics(response)));
        self.reply_at(end, output, out);
    }

    fn on_fetch(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        request: FetchRequest,
        out: &mut Vec<Output<S::File>>,
    ) {
        let (parts, has_records) = self.read_metadata(&request);
        if has_records || request.max_wait_ms <= 0 {
            out.push(reply_to.respond(ResponseBody::Fetch(parts)));
        } else {
            self.fetches.push(ParkedFetch {
                reply_to,
                deadline: now.plus(request.max_wait_ms as u64),
                request,
            });
        }
    }

    /// Answers parked fetches that have new records or whose deadline passed.
    fn answer_fetches(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        for fetch in std::mem::take(&mut self.fetches) {
            let (parts, has_records) = self.read_metadata(&fetch.request);
            if has_records || now >= fetch.deadline {
                out.push(fetch.reply_to.respond(ResponseBody::Fetch(parts)));
            } else {
                self.fetches.push(fetch);
            }
        }
    }

    /// Committed metadata records from the fetch offset of `__cluster_metadata-0`; any other
    /// partition is UNKNOWN_TOPIC_OR_PARTITION.
    fn read_metadata(&self, request: &FetchRequest) -> (FetchResponseParts<S::File>, bool) {
        if !self.is_active() {
            let parts = FetchResponseParts {
                error_code: ErrorCode::NotController.code(),
                session_id: 0,
                topics: Vec::new(),
            };
            return (parts, true);
        }
        let mut has_records = false;
        let topics = request
            .topics
            .iter()
            .map(|topic| {
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|wanted| self.read_metadata_partition(topic, wanted, &mut has_records))
                    .collect();
                FetchTopicResponse {
                    topic: topic.topic.to_string(),
                    topic_id: topic.topic_id,
                    partitions,
                }
            })
            .collect();
        let parts = FetchResponseParts {
            error_code: 0,
            session_id: 0,
            topics,
        };
        (parts, has_records)
    }
}

impl<S: Storage> ControllerNode<S> {
    /// One partition of a metadata Fetch: committed records from the fetch offset, or the id
    /// of the snapshot to fetch instead when the offset lies below the copy's start (KIP-630).
    /// Sets `has_records` when the answer should go at once.
    fn read_metadata_partition(
        &self,
        topic: &kafka_protocol::messages::fetch_request::FetchTopic,
        wanted: &kafka_protocol::messages::fetch_request::FetchPartition,
        has_records: &mut bool,
    ) -> FetchPartitionResponse<S::File> {
        let committed = self.committed();
        let mut entry = FetchPartitionResponse {
            partition_index: wanted.partition,
            error_code: 0,
            high_watermark: committed,
            last_stable_offset: committed,
            log_start_offset: self.log.log_start_offset(),
            diverging_epoch: None,
            snapshot_id: None,
            records: RecordsSource::Empty,
        };
        if topic.topic.as_str() != METADATA_TOPIC || wanted.partition != 0 {
            entry.error_code = ErrorCode::UnknownTopicOrPartition.code();
            return entry;
        }
        if let Some(snapshot) = self
            .snapshot
            .as_ref()
            .filter(|_| wanted.fetch_offset < self.log.log_start_offset())
        {
            entry.snapshot_id = Some((snapshot.end_offset, snapshot.epoch));
            *has_records = true;
            return entry;
        }
        let max_bytes = wanted.partition_max_bytes.max(1) as u64;
        match self.log.read(wanted.fetch_offset, committed, max_bytes) {
            Ok(LogRead::Records {
                file,
                position,
                len,
            }) => {
                *has_records = true;
                entry.records = RecordsSource::File {
                    file,
                    position,
                    len,
                };
            }
            Ok(LogRead::Empty) => {}
            Ok(LogRead::OutOfRange) => {
                entry.error_code = ErrorCode::OffsetOutOfRange.code();
            }
            Err(error) => {
                tracing::error!(%error, "metadata log read failed");
                entry.error_code = ErrorCode::KafkaStorageError.code();
            }
        }
        entry
    }

    /// A FetchSnapshot answer: the bytes of the snapshot asked for from `position`, at most
    /// `max_bytes` of them; `SNAPSHOT_NOT_FOUND` when it is not the latest snapshot (the broker
    /// fetches again and learns the new one), `POSITION_OUT_OF_RANGE` past its end.
    fn read_snapshot(&self, request: &FetchSnapshotRequest) -> FetchSnapshotResponse {
        use kafka_protocol::messages::fetch_snapshot_response::{
            PartitionSnapshot, SnapshotId, TopicSnapshot,
        };
        if !self.is_active() {
            return FetchSnapshotResponse::default()
                .with_error_code(ErrorCode::NotController.code());
        }
        let topics = request
            .topics
            .iter()
            .map(|topic| {
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|wanted| {
                        let mut answer = PartitionSnapshot::default()
                            .with_index(wanted.partition)
                            .with_snapshot_id(
                                SnapshotId::default()
                                    .with_end_offset(wanted.snapshot_id.end_offset)
                                    .with_epoch(wanted.snapshot_id.epoch),
                            )
                            .with_position(wanted.position);
                        let snapshot = self.snapshot.as_ref().filter(|snapshot| {
                            topic.name.as_str() == METADATA_TOPIC
                                && wanted.partition == 0
                                && snapshot.end_offset == wanted.snapshot_id.end_offset
                                && snapshot.epoch == wanted.snapshot_id.epoch
                        });
                        let Some(snapshot) = snapshot else {
                            return answer.with_error_code(ErrorCode::SnapshotNotFound.code());
                        };
                        let size = snapshot.bytes.len() as i64;
                        if wanted.position < 0 || wanted.position > size {
                            return answer.with_error_code(ErrorCode::PositionOutOfRange.code());
                        }
                        let from = wanted.position as usize;
                        let to = (from + request.max_bytes.max(1) as usize).min(size as usize);
                        answer.size = size;
                        answer.unaligned_records = snapshot.bytes.slice(from..to);
                        answer
                    })
                    .collect();
                TopicSnapshot::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions)
            })
            .collect();
        FetchSnapshotResponse::default().with_topics(topics)
    }
}

/// `body` turned into `NOT_CONTROLLER`: a controller deposed before the records it answers
/// were committed does not know whether they will be.
fn not_controller<F>(mut response: Response<F>) -> Response<F> {
    if let ResponseBody::Message(message) = &mut response.body {
        let code = ErrorCode::NotController.code();
        match message.as_mut() {
            ResponseKind::BrokerRegistration(body) => body.error_code = code,
            ResponseKind::BrokerHeartbeat(body) => {
                body.error_code = code;
                body.is_fenced = true;
            }
            ResponseKind::AlterPartition(body) => {
                body.error_code = code;
                body.topics.clear();
            }
            ResponseKind::CreateTopics(body) => {
                for topic in &mut body.topics {
                    topic.error_code = code;
                    topic.error_message = Some(StrBytes::from_static_str(
                        "the controller lost its leadership",
                    ));
                }
            }
            _ => {}
        }
    }
    response
}

/// The `NOT_CONTROLLER` answer of a node that is not the active controller (`None`: a Fetch,
/// answered by [`ControllerNode::read_metadata`], or an API a controller does not serve).
fn not_controller_answer(request: &RequestKind) -> Option<ResponseKind> {
    let code = ErrorCode::NotController.code();
    Some(match request {
        RequestKind::BrokerRegistration(_) => ResponseKind::BrokerRegistration(
            BrokerRegistrationResponse::default().with_error_code(code),
        ),
        RequestKind::BrokerHeartbeat(_) => ResponseKind::BrokerHeartbeat(
            BrokerHeartbeatResponse::default()
                .with_error_code(code)
                .with_is_fenced(true),
        ),
        RequestKind::AlterPartition(_) => {
            ResponseKind::AlterPartition(AlterPartitionResponse::default().with_error_code(code))
        }
        RequestKind::CreateTopics(body) => {
            let topics = body
                .topics
                .iter()
                .map(|topic| {
                    CreatableTopicResult::default()
                        .with_name(topic.name.clone())
                        .with_error_code(code)
                        .with_error_message(Some(StrBytes::from_static_str(
                            "not the active controller",
                        )))
                })
                .collect();
            ResponseKind::CreateTopics(CreateTopicsResponse::default().with_topics(topics))
        }
        _ => return None,
    })
}

impl<S: Storage> crate::state_machine::StateMachine for ControllerNode<S> {
    type Input = Input;
    type Output = Output<S::File>;

    fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Output<S::File>>) {
        ControllerNode::handle(self, now, input, out);
    }

    fn next_deadline(&self) -> Option<Millis> {
        ControllerNode::next_deadline(self)
    }

    fn check_invariants(&self) {
        ControllerNode::check_invariants(self);
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::broker_registration_request::Listener;
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::TopicName;

    use super::*;
    use crate::broker::Response;
    use crate::protocol::record_batch::decode_records;
    use crate::storage::memory::{MemoryFile, MemoryStorage};
    use crate::storage::StorageFile;

    struct Node {
        machine: ControllerNode<MemoryStorage>,
        storage: MemoryStorage,
        now: Millis,
        correlation_id: i32,
    }

    impl Node {
        fn open(storage: MemoryStorage) -> Node {
            let (node, to_sync) = ControllerNode::open(
                ControllerConfig::default(),
                BrokerConfig::default(),
                storage.clone(),
                3,
                Millis(0),
            )
            .expect("opens");
            if let Some(sync) = to_sync {
                sync.complete_now(&storage).expect("sync");
            }
            Node {
                machine: node,
                storage,
                now: Millis(0),
                correlation_id: 0,
            }
        }

        /// Sends a request, completes every fsync, returns the one response body.
        fn call(&mut self, api_version: i16, body: RequestKind) -> ResponseBody<MemoryFile> {
            self.correlation_id += 1;
            let request = Request {
                api_key: crate::protocol::codec::RequestApiKey::api_key(&body),
                api_version,
                correlation_id: self.correlation_id,
                client_id: None,
                client_host: None,
                body,
            };
            let mut pending = Vec::new();
            self.machine.handle(
                self.now,
                Input::Request {
                    connection: ConnectionId(1),
                    request: Box::new(request),
                },
                &mut pending,
            );
            let mut responses = Vec::new();
            while let Some(output) = pending.pop() {
                match output {
                    Output::Flush { flush_id, sync } => {
                        assert!(responses.is_empty(), "an answer before its commit");
                        let result = sync.complete_now(&self.storage).map_err(|e| e.to_string());
                        self.machine.handle(
                            self.now,
                            Input::FlushCompleted { flush_id, result },
                            &mut pending,
                        );
                    }
                    Output::Respond {
                        response: Response { body, .. },
                        ..
                    } => responses.push(body),
                    other => panic!("unexpected {other:?}"),
                }
                self.machine.check_invariants();
            }
            assert_eq!(responses.len(), 1);
            responses.pop().expect("one")
        }

        fn message(&mut self, api_version: i16, body: RequestKind) -> ResponseKind {
            match self.call(api_version, body) {
                ResponseBody::Message(body) => *body,
                ResponseBody::Fetch(_) => panic!("not a message"),
            }
        }

        fn register(&mut self, broker: i32) -> i64 {
            let ResponseKind::BrokerRegistration(response) =
                self.message(1, registration(broker).body)
            else {
                panic!("registration")
            };
            assert_eq!(response.error_code, 0);
            response.broker_epoch
        }

        fn heartbeat(&mut self, broker: i32, epoch: i64, offset: i64) -> BrokerHeartbeatResponse {
            let body = BrokerHeartbeatRequest::default()
                .with_broker_id(kafka_protocol::messages::BrokerId(broker))
                .with_broker_epoch(epoch)
                .with_current_metadata_offset(offset);
            let ResponseKind::BrokerHeartbeat(response) =
                self.message(1, RequestKind::BrokerHeartbeat(body))
            else {
                panic!("heartbeat")
            };
            response
        }

        /// Every committed record, through a Fetch of `__cluster_metadata-0`.
        fn fetch_records(&mut self) -> Vec<Record> {
            let body = FetchRequest::default().with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])]);
            let ResponseBody::Fetch(parts) = self.call(12, RequestKind::Fetch(body)) else {
                panic!("a fetch response")
            };
            let RecordsSource::File {
                file,
                position,
                len,
            } = &parts.topics[0].partitions[0].records
            else {
                return Vec::new();
            };
            let mut bytes = vec![0; *len as usize];
            file.read_exact_at(&mut bytes, *position).expect("read");
            decode_records(&bytes.into())
                .expect("valid")
                .iter()
                .map(|record| {
                    Record::decode(record.value.as_deref().expect("value")).expect("a record")
                })
                .collect()
        }
    }

    #[test]
    fn brokers_register_catch_up_and_read_every_committed_decision_back() {
        let storage = MemoryStorage::new();
        let mut node = Node::open(storage.clone());
        let epoch = node.register(1);
        let response = node.heartbeat(1, epoch, 0);
        assert!(
            response.is_fenced && !response.is_caught_up,
            "has not read its registration"
        );
        let response = node.heartbeat(1, epoch, 1);
        assert!(
            response.is_caught_up && !response.is_fenced,
            "unfenced once caught up"
        );
        let topic = CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_num_partitions(2)
            .with_replication_factor(1);
        let ResponseKind::CreateTopics(created) = node.message(
            7,
            RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(vec![topic])),
        ) else {
            panic!("create topics")
        };
        assert_eq!(created.topics[0].error_code, 0);
        let records = node.fetch_records();
        let kinds: Vec<&str> = records.iter().map(Record::kind).collect();
        assert_eq!(
            kinds,
            ["register", "unfence", "topic", "partition", "partition"]
        );
        let stale = node.heartbeat(1, epoch + 5, 5);
        assert_eq!(
            ErrorCode::from_code(stale.error_code),
            ErrorCode::StaleBrokerEpoch
        );

        // A restart replays the log into the same image.
        let image = node.machine.controller().image().clone();
        let reopened = Node::open(storage);
        assert_eq!(reopened.machine.controller().image(), &image);
    }

    pub(super) fn registration(broker: i32) -> Request {
        let listener = Listener::default()
            .with_name(StrBytes::from_static_str("PLAINTEXT"))
            .with_host(StrBytes::from_static_str("localhost"))
            .with_port(9092);
        let body = BrokerRegistrationRequest::default()
            .with_broker_id(kafka_protocol::messages::BrokerId(broker))
            .with_listeners(vec![listener]);
        Request {
            api_key: kafka_protocol::messages::ApiKey::BrokerRegistration,
            api_version: 1,
            correlation_id: broker,
            client_id: None,
            client_host: None,
            body: RequestKind::BrokerRegistration(body),
        }
    }

    pub(super) fn step(
        node: &mut ControllerNode<MemoryStorage>,
        input: Input,
    ) -> Vec<Output<MemoryFile>> {
        let mut out = Vec::new();
        node.handle(Millis(0), input, &mut out);
        node.check_invariants();
        out
    }

    pub(super) fn request(
        node: &mut ControllerNode<MemoryStorage>,
        request: Request,
    ) -> Vec<Output<MemoryFile>> {
        let input = Input::Request {
            connection: ConnectionId(request.correlation_id as u64),
            request: Box::new(request),
        };
        step(node, input)
    }

    fn registration_error(outputs: &[Output<MemoryFile>]) -> Option<i16> {
        outputs.iter().find_map(|output| match output {
            Output::Respond { response, .. } => match &response.body {
                ResponseBody::Message(message) => match message.as_ref() {
                    ResponseKind::BrokerRegistration(body) => Some(body.error_code),
                    _ => None,
                },
                ResponseBody::Fetch(_) => None,
            },
            _ => None,
        })
    }

    pub(super) fn raft_node() -> ControllerNode<MemoryStorage> {
        let (node, to_sync) = ControllerNode::open_with(
            QuorumKind::Raft { me: 1000 },
            ControllerConfig::default(),
            BrokerConfig::default(),
            MemoryStorage::new(),
            3,
            Millis(0),
        )
        .expect("opens");
        assert!(
            to_sync.is_none(),
            "the Raft journal, not this log, is durable"
        );
        node
    }

    pub(super) fn quorum(
        node: &mut ControllerNode<MemoryStorage>,
        input: QuorumInput,
    ) -> Vec<Output<MemoryFile>> {
        step(node, Input::Quorum(input))
    }

    pub(super) fn committed(term: u64, records: Vec<Record>) -> QuorumInput {
        QuorumInput::Committed { term, records }
    }

    pub(super) fn proposal(outputs: &[Output<MemoryFile>]) -> Vec<Record> {
        outputs
            .iter()
            .find_map(|output| match output {
                Output::Propose { records } => Some(records.clone()),
                _ => None,
            })
            .expect("a proposal")
    }

    #[test]
    fn in_a_raft_quorum_only_the_leader_with_its_term_applied_answers_and_only_once_committed() {
        let mut node = raft_node();
        let not_controller = ErrorCode::NotController.code();
        // A follower, and a leader that has not applied an entry of its term, refuse.
        assert_eq!(
            registration_error(&request(&mut node, registration(1))),
            Some(not_controller)
        );
        quorum(
            &mut node,
            QuorumInput::Leader {
                leader: Some(1000),
                term: 2,
            },
        );
        quorum(&mut node, committed(1, Vec::new()));
        assert!(!node.is_active());
        assert_eq!(
            registration_error(&request(&mut node, registration(1))),
            Some(not_controller)
        );
        // Its blank entry applied, it acts: a registration is proposed, answered once committed.
        let out = quorum(&mut node, committed(2, Vec::new()));
        assert!(node.is_active());
        let activated = BrokerEvent::ControllerActive { term: 2 };
        assert!(out
            .iter()
            .any(|output| matches!(output, Output::Event(event) if *event == activated)));
        let out = request(&mut node, registration(1));
        assert_eq!(
            registration_error(&out),
            None,
            "no answer before the commit"
        );
        let out = quorum(&mut node, committed(2, proposal(&out)));
        assert_eq!(registration_error(&out), Some(0));
        assert_eq!(node.committed(), 1);
        // Elected again in a later term (the metrics may skip the election in between): it
        // stops acting until an entry of the new term is applied.
        quorum(
            &mut node,
            QuorumInput::Leader {
                leader: Some(1000),
                term: 4,
            },
        );
        assert!(
            !node.is_active(),
            "a new term needs its own entry applied first"
        );
        quorum(&mut node, committed(4, Vec::new()));
        assert!(node.is_active());
        // The same leader and term again changes nothing.
        quorum(
            &mut node,
            QuorumInput::Leader {
                leader: Some(1000),
                term: 4,
            },
        );
        assert!(node.is_active());
    }

    /// A Raft-mode node that leads `term` and has applied its blank entry: the active
    /// controller.
    pub(super) fn active_raft_node(term: u64) -> ControllerNode<MemoryStorage> {
        let mut node = raft_node();
        quorum(
            &mut node,
            QuorumInput::Leader {
                leader: Some(1000),
                term,
            },
        );
        quorum(&mut node, committed(term, Vec::new()));
        node
    }

    #[test]
    fn a_deposed_raft_controller_answers_not_controller_and_follows_the_new_leader() {
        let mut node = active_raft_node(2);
        let out = request(&mut node, registration(1));
        quorum(&mut node, committed(2, proposal(&out)));
        // Deposed with a proposal in flight: its answer is NOT_CONTROLLER, and the image goes
        // back to what was committed (broker 2's registration is not in it).
        let out = request(&mut node, registration(2));
        assert_eq!(registration_error(&out), None);
        let out = quorum(
            &mut node,
            QuorumInput::Leader {
                leader: Some(1001),
                term: 3,
            },
        );
        assert!(!node.is_active());
        assert_eq!(
            registration_error(&out),
            Some(ErrorCode::NotController.code())
        );
        assert!(node.controller().image().broker(BrokerId(2)).is_none());
        assert!(node.controller().image().broker(BrokerId(1)).is_some());
        // The new leader's records reach this follower's image and its copy of the log.
        let other = Record::RegisterBroker {
            broker: BrokerId(2),
            epoch: BrokerEpoch(7),
            host: "h".to_owned(),
            port: 1,
        };
        quorum(&mut node, committed(3, vec![other]));
        assert_eq!(node.committed(), 2);
        assert!(node.controller().image().broker(BrokerId(2)).is_some());
    }
}

#[cfg(test)]
mod snapshot_tests;
