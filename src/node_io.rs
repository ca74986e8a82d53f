//! What a node's state machine (a broker, a controller node) takes and gives: the [`Input`]s the
//! driver feeds it, the [`Output`]s it asks the driver to carry out, the responses and the
//! events the outside world may record, and the ids that tie an output to the input that
//! completes it. The broker and the controller share these types, and neither owns them.

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

use crate::log::{FlushSync, LogError};
use crate::protocol::codec::Request;
use crate::protocol::fetch_response::{Chunk, FetchResponseParts};
use crate::protocol::record_batch::RecordBatchHeader;
use crate::types::{BrokerId, TopicPartition};

/// A client connection, numbered by the network layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(pub u64);

/// An fsync started by the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlushId(pub u64);

/// A request this broker sent to another broker (a follower's fetch from its leader).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerRequestId(pub u64);

/// Hands out a node's [`PeerRequestId`]s, one after another.
#[derive(Debug, Default)]
pub struct PeerRequestIds {
    last: u64,
}

impl PeerRequestIds {
    /// The next id.
    pub fn next_id(&mut self) -> PeerRequestId {
        self.last += 1;
        PeerRequestId(self.last)
    }
}

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
    Quorum(crate::metadata::QuorumInput),
    /// A deadline from [`crate::broker::Broker::next_deadline`] passed.
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
        records: Vec<crate::metadata::records::Record>,
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
