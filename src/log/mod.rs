//! The partition log: segments, sparse offset index, recovery, flush policy, and the partition
//! side of transactions (`transactions`: open transactions, the LSO, the aborted-transaction
//! index).

pub mod cleaner;
pub mod leader_epochs;
pub mod offset_index;
pub mod partition_log;
pub mod producer_state;
pub mod segment;
pub mod transactions;

pub use partition_log::{
    AppendInfo, CleanStage, FlushMark, FlushSync, LogConfig, LogRead, PartitionLog, RecoveryReport,
    StartedFlush,
};

/// An operating error of the log (IO or corruption found while serving).
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The storage failed.
    #[error("storage error: {0}")]
    Io(#[from] std::io::Error),
    /// Bytes that were valid on append no longer parse.
    #[error("corrupt log: {0}")]
    Corrupt(String),
}
