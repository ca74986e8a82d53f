//! The transaction coordinator (Kafka's `transaction-coordinator` module), built bottom-up:
//!
//! - [`state`]: the states a transaction goes through and Kafka's table of which state may
//!   follow which;
//! - [`metadata`]: one `transactional.id`'s producer id, epochs, partitions and state, and its
//!   transitions. Each transition is prepared first (a [`metadata::Transit`], written to
//!   `__transaction_state`) and completed only once that write is durable; until then no other
//!   transition may start;
//! - [`records`]: those records in Kafka's `TransactionLogKey`/`TransactionLogValue` format;
//! - [`decide`]: what a request does to one id's metadata (InitProducerId, AddPartitionsToTxn,
//!   EndTxn): an answer now, or a record to write first;
//! - [`cache`]: one `__transaction_state` partition's ids, loaded by replaying its records, with
//!   the decided transactions whose markers a new coordinator must write again.

pub mod cache;
pub mod decide;
pub mod metadata;
pub mod records;
pub mod state;

pub use metadata::{TransactionMetadata, TransactionVersion, Transit, TransitionError};
pub use state::TransactionState;
