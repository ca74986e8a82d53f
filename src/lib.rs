//! seedlog: a Kafka-compatible broker, producer and consumer whose every line runs both under a
//! seeded deterministic simulator (madsim) and as a real broker.
//!
//! # Layout
//!
//! Every module, from the top layer down:
//!
//! * [`runtime`]: the only place that touches tokio, sockets, files and clocks: the driver that
//!   runs a state machine, the connection layer (sendfile in production), fsync, `FileStorage`,
//!   the Raft quorum of controller nodes (openraft), and the async client facades.
//! * [`controller`]: the controller node (`process.roles=controller`) as a sans-IO state
//!   machine: its decisions, made durable in the metadata log (local, or replicated by the Raft
//!   quorum) before anyone hears of them.
//! * [`broker`]: the broker as a deterministic state machine (sans-IO) over a [`storage::Storage`]:
//!   a router over components (the replica manager, the log manager, the group coordinator, the
//!   metadata cache, the cluster membership).
//! * [`coordinator`]: coordinators over internal topics; so far the transaction coordinator's
//!   states and transitions.
//! * [`client`]: the producer and consumer state machines, and the group member's protocol.
//! * [`node_io`]: what a node's state machine (a broker, a controller node) takes and gives:
//!   inputs, outputs, responses, events and the ids that tie them together.
//! * [`config`]: Kafka-named, validated configs for broker, topics, producer and consumer.
//! * [`log`]: the partition log: segments, the offset index, recovery, the flush policy.
//! * [`metadata`]: the cluster's metadata records, the image they build, and what the Raft
//!   quorum tells a controller node.
//! * [`protocol`]: the pure wire layer (frames, codec, RecordBatch v2, error codes).
//! * [`storage`]: the synchronous storage traits and the in-memory disk model.
//! * [`state_machine`]: the one shape of every sans-IO machine (`handle`, `next_deadline`,
//!   `check_invariants`).
//! * [`types`]: newtypes shared by every layer.
//!
//! # Layers
//!
//! The order files may import in, downwards only: a file takes names from its own layer and the
//! layers below it, never from one above.
//!
//! ```text
//! runtime
//!   > controller
//!   > broker
//!   > client, coordinator, node_io
//!   > config, log, metadata
//!   > protocol, storage, state_machine
//!   > types
//! ```
//!
//! `scripts/layers.py` (the `layering` step of `scripts/test.sh`) checks it from the `use`
//! lines (test code aside), with a second rule: no import cycle among files but those it still
//! lists as known.
//! Only `runtime` (and the `seedlog-sim` crate) touch tokio or madsim; the same step refuses
//! tokio, `std::fs`, clocks, OS randomness and threads anywhere else in `src/` but `bin/`.

pub mod broker;
pub mod client;
pub mod config;
pub mod controller;
pub mod coordinator;
pub mod log;
pub mod metadata;
pub mod node_io;
pub mod protocol;
#[allow(
    clippy::disallowed_methods,
    reason = "runtime/ is the one layer that reads clocks; under madsim, tokio's Instant is std's, simulated"
)]
pub mod runtime;
pub mod state_machine;
pub mod storage;
pub mod types;
