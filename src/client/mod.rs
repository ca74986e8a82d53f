//! Client state machines: the producer's sender (in-flight requests, retries, timeouts) and the
//! consumer core (positions, resets, fetches, retries, timeouts). The async shells that drive
//! them over a connection live in `runtime::producer` and `runtime::consumer`.

pub mod consumer;
pub mod partitioner;
pub mod producer;
