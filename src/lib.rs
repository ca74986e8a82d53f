//! seedlog: a Kafka-compatible broker, producer and consumer whose every line runs both under a
//! seeded deterministic simulator (madsim) and as a real broker.
//!
//! # Layout
//!
//! * [`types`]: newtypes shared by every layer.
//! * [`protocol`]: the pure wire layer (frames, codec, RecordBatch v2, error codes).
//! * [`config`]: Kafka-named, validated configs for broker, topics, producer and consumer.
//! * [`storage`]: the synchronous storage traits and the in-memory disk model.
//! * [`log`]: the partition log: segments, the offset index, recovery, the flush policy.
//! * [`broker`]: the broker as a deterministic state machine (sans-IO) over a [`storage::Storage`].
//! * [`client`]: the producer and consumer state machines.
//! * [`runtime`]: the only place that touches tokio, sockets, files and clocks: the driver that
//!   runs a state machine, the connection layer (sendfile in production), fsync, `FileStorage`,
//!   and the async client facades.
//!
//! The layering is one-way: `protocol` and `types` depend on nothing; `storage` on nothing but
//! std; `log` on `storage`, `protocol` and `types`; `broker` and `client` on those and `config`;
//! only `runtime` (and the `seedlog-sim` crate) touch tokio or madsim.

pub mod broker;
pub mod client;
pub mod config;
pub mod controller;
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
