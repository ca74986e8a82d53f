//! Coordinators over internal topics, as Kafka 4 splits them (`coordinator-common`,
//! `group-coordinator`, `transaction-coordinator`): each a sans-IO state machine over the
//! partitions of a compacted internal topic that it loads, replays and writes, answering a
//! request once its write is committed.
//!
//! - [`transaction`]: the transaction coordinator's state per `transactional.id` (Kafka's
//!   `TransactionState` table and `TransactionMetadata` transitions). What drives it
//!   (`__transaction_state`, the transaction APIs, the markers) comes with issue 43's next steps.
//!
//! The group coordinator still lives in `broker::group`; it moves here with the common runtime
//! the two will share.

pub mod transaction;
