//! The log's `leader-epoch-checkpoint` file (Kafka's `LeaderEpochCheckpointFile`): the
//! leader-epoch cache ([`LeaderEpochCache`](crate::log::leader_epochs::LeaderEpochCache)) kept on disk, so a restart reads the epochs instead
//! of walking every batch header of the log.
//!
//! * **Written** whenever the cache changes once it is built: a new epoch (a batch of a newer
//!   epoch, or a leader starting its epoch), a truncation, a new log start. As Kafka's
//!   `CheckpointFile.write`, a `.tmp` file is written and renamed over the checkpoint, so the
//!   name holds either the old text or the new one.
//! * **Synced** by the log's next flush, with the producer-state snapshots: every flush started
//!   after a write carries the file, and the rename is a change to the log's directory, which
//!   the flush syncs too. A batch of a new epoch is appended after the cache (and so the file)
//!   took the epoch, so the flush that makes the batch durable makes the epoch durable: the
//!   checkpoint on disk holds every epoch that starts below the recovery point. (Kafka fsyncs
//!   in `assign` itself; here no fsync runs inside a handler, and the recovery point is what
//!   durability is judged by.)
//! * **Trusted** on open below the log's recovery point only: past it, the batches recovery
//!   keeps are walked, and each epoch they start is assigned again (Kafka's `LogSegment.recover`
//!   does the same), then the cache is cut to the log's start and end. A file that fails to
//!   parse (a power loss tore it, or zeroed its sector) is set aside and the cache is rebuilt
//!   from every batch header, as before the file existed.
//! * **Loaded at open** when the file exists (Kafka loads every log's cache at open). A log
//!   without one builds its cache when first needed ([`PartitionLog::load_leader_epochs`]: a
//!   broker that is its own controller never needs it) and writes the file at its first change.
//!   So a file on disk always belongs to a log whose cache has been kept since it was written.
//!
//! The window the snapshots have is here too: a follower truncating below a checkpointed
//! recovery point, then a power loss before the truncation's flush completes, can leave the old
//! file naming epochs of records the truncation cut. The truncation's own flush carries the
//! file, so that window closes with it.

mod in_log;

use crate::log::leader_epochs::LEADER_EPOCH_CHECKPOINT;

/// The checkpoint file of one log.
#[derive(Debug)]
pub(super) struct EpochCheckpoint<F> {
    /// The file written last, if no completed flush covers it yet: `(write number, file)`.
    unsynced: Option<(u64, F)>,
    /// How many times this log wrote the file (the write number of the last).
    pub(super) written: u64,
    /// How the cache was last built.
    load: Option<LeaderEpochLoad>,
}

impl<F> Default for EpochCheckpoint<F> {
    fn default() -> Self {
        EpochCheckpoint {
            unsynced: None,
            written: 0,
            load: None,
        }
    }
}

impl<F> EpochCheckpoint<F> {
    /// A flush started when `written` files had been written completed.
    pub(super) fn synced(&mut self, written: u64) {
        if self
            .unsynced
            .as_ref()
            .is_some_and(|(number, _)| *number <= written)
        {
            self.unsynced = None;
        }
    }
}

/// How the leader-epoch cache was last built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderEpochLoad {
    /// It started from the checkpoint file's entries below this offset (the recovery point);
    /// `None`: every batch header was walked.
    pub checkpoint_below: Option<i64>,
    /// Why the checkpoint file was set aside, if one was there and failed to parse.
    pub invalid_checkpoint: Option<String>,
    /// Batch headers walked.
    pub batches_walked: u64,
}

/// Whether `name` is the checkpoint file of the log in `directory`.
pub(super) fn is_epoch_checkpoint(directory: &str, name: &str) -> bool {
    name.strip_prefix(directory)
        .and_then(|rest| rest.strip_prefix('/'))
        == Some(LEADER_EPOCH_CHECKPOINT)
}
