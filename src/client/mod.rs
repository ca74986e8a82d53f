//! Client state machines: the producer's sender (in-flight requests, retries, timeouts) and the
//! consumer's subscription state (positions, resets, fetch building and parsing). The async
//! facades that drive them over a connection live in `runtime::producer` and
//! `runtime::consumer`.

pub mod consumer;
pub mod partitioner;
pub mod producer;
