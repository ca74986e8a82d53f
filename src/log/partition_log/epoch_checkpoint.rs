//! The log's `leader-epoch-checkpoint` file (Kafka's `LeaderEpochCheckpointFile`): the
//! leader-epoch cache ([`LeaderEpochCache`]) kept on disk, so a restart reads the epochs instead
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

use crate::log::leader_epochs::{
    LeaderEpochCache, LEADER_EPOCH_CHECKPOINT, LEADER_EPOCH_CHECKPOINT_TMP,
};
use crate::log::LogError;
use crate::storage::{Storage, StorageFile};

use super::{FlushSync, PartitionLog, RecoveryReport};

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

impl<S: Storage> PartitionLog<S> {
    fn epoch_checkpoint_name(&self) -> String {
        format!("{}/{LEADER_EPOCH_CHECKPOINT}", self.directory)
    }

    /// On open, a log that has a checkpoint file loads its cache at once (see the module
    /// comment). A log whose recovery reported corruption goes offline and is left alone; one
    /// whose cache cannot be loaded goes offline too.
    pub(super) fn open_leader_epochs(&mut self, has_checkpoint: bool, report: &mut RecoveryReport) {
        if !has_checkpoint || report.corruption.is_some() {
            return;
        }
        if let Err(error) = self.build_leader_epochs(true) {
            self.leader_epochs = None;
            report.corruption = Some(format!("leader epochs unreadable: {error}"));
        }
    }

    /// Builds the cache: from the checkpoint file below the recovery point and the batch
    /// headers from there (`from_checkpoint`, if the file parses), else from every batch
    /// header. Rewrites the file if what it says differs from what was built.
    pub(super) fn build_leader_epochs(&mut self, from_checkpoint: bool) -> Result<(), LogError> {
        let mut invalid_checkpoint = None;
        let mut on_disk = None;
        if from_checkpoint {
            match self.read_epoch_checkpoint()? {
                Ok(cache) => on_disk = Some(cache),
                Err(why) => {
                    tracing::warn!(directory = %self.directory, %why,
                        "leader-epoch-checkpoint unreadable: rebuilt from the batch headers");
                    invalid_checkpoint = Some(why);
                }
            }
        }
        let trusted_below = on_disk.as_ref().map(|_| self.recovery_point);
        let mut cache = on_disk.clone().unwrap_or_default();
        let walk_from = trusted_below.unwrap_or(i64::MIN);
        cache.truncate_from_end(walk_from); // trusted below the recovery point only
        let mut batches_walked = 0;
        for segment in self.segments_from(walk_from) {
            segment.batch_headers(|header| {
                if header.last_offset() >= walk_from {
                    cache.assign(header.partition_leader_epoch, header.base_offset);
                    batches_walked += 1;
                }
            })?;
        }
        cache.truncate_from_start(self.log_start_offset);
        cache.truncate_from_end(self.log_end_offset);
        let stale = on_disk.as_ref().is_some_and(|on_disk| *on_disk != cache)
            || invalid_checkpoint.is_some();
        if let Some(below) = trusted_below {
            tracing::info!(directory = %self.directory, epochs = cache.entries().len(),
                checkpoint_below = below, batches_walked, "leader epochs loaded from leader-epoch-checkpoint");
        }
        self.epoch_checkpoint.load = Some(LeaderEpochLoad {
            checkpoint_below: trusted_below,
            invalid_checkpoint,
            batches_walked,
        });
        self.leader_epochs = Some(cache);
        if stale {
            self.write_epoch_checkpoint()?;
        }
        Ok(())
    }

    /// The checkpoint file's cache, or why it does not parse.
    fn read_epoch_checkpoint(&self) -> Result<Result<LeaderEpochCache, String>, LogError> {
        let bytes = self
            .storage
            .open(&self.epoch_checkpoint_name())?
            .read_all()?;
        Ok(LeaderEpochCache::from_checkpoint(&bytes))
    }

    /// The cache changed: writes the file anew (a `.tmp` file renamed over it); the next flush
    /// syncs it.
    pub(super) fn write_epoch_checkpoint(&mut self) -> Result<(), LogError> {
        let Some(cache) = &self.leader_epochs else {
            return Ok(());
        };
        let text = cache.to_checkpoint();
        let temporary = format!("{}/{LEADER_EPOCH_CHECKPOINT_TMP}", self.directory);
        let file = self.storage.open(&temporary)?;
        file.set_len(0)?;
        file.write_all_at(text.as_bytes(), 0)?;
        self.storage
            .rename(&temporary, &self.epoch_checkpoint_name())?;
        self.directory_changes += 1;
        self.epoch_checkpoint.written += 1;
        self.epoch_checkpoint.unsynced = Some((self.epoch_checkpoint.written, file));
        Ok(())
    }

    /// `sync` with the checkpoint file, if no completed flush has covered its last write yet.
    pub(super) fn with_epoch_checkpoint(&self, mut sync: FlushSync<S::File>) -> FlushSync<S::File> {
        if let Some((_, file)) = &self.epoch_checkpoint.unsynced {
            sync.files.push(file.clone());
        }
        sync
    }

    /// How the leader-epoch cache was last built, if it was.
    pub fn leader_epoch_load(&self) -> Option<&LeaderEpochLoad> {
        self.epoch_checkpoint.load.as_ref()
    }

    pub(super) fn check_epoch_checkpoint_invariants(&self) {
        // A rename is a directory change: while the file is unsynced, so is that.
        assert!(
            self.epoch_checkpoint.unsynced.is_none()
                || self.directory_changes > self.directory_synced,
            "an unsynced leader-epoch checkpoint whose directory entry counts as synced"
        );
    }
}
