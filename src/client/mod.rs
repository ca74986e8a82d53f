//! Client state machines: the producer's accumulator and sender (batches, in-flight requests,
//! retries, timeouts), the metadata cache they share, and the consumer core (positions, resets, fetches, retries, timeouts). The async shells that drive
//! them over a connection live in `runtime::producer` and `runtime::consumer`.

pub mod backoff;
pub mod connections;
pub mod consumer;
pub mod group;
pub mod metadata;
pub mod partitioner;
pub mod producer;
