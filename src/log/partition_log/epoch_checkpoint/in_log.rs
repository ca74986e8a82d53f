//! The log's side of its leader-epoch checkpoint: loading the cache on open, building it from
//! the file and the batch headers, writing the file anew when the cache changes, and handing
//! the unsynced file to the next flush.

use crate::log::leader_epochs::{
    LeaderEpochCache, LEADER_EPOCH_CHECKPOINT, LEADER_EPOCH_CHECKPOINT_TMP,
};
use crate::log::{FlushSync, LogError, PartitionLog, RecoveryReport};
use crate::storage::{Storage, StorageFile};

use super::LeaderEpochLoad;

impl<S: Storage> PartitionLog<S> {
    fn epoch_checkpoint_name(&self) -> String {
        format!("{}/{LEADER_EPOCH_CHECKPOINT}", self.directory)
    }

    /// On open, a log that has a checkpoint file loads its cache at once (see the module
    /// comment). A log whose recovery reported corruption goes offline and is left alone; one
    /// whose cache cannot be loaded goes offline too.
    pub(in crate::log::partition_log) fn open_leader_epochs(
        &mut self,
        has_checkpoint: bool,
        report: &mut RecoveryReport,
    ) {
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
    pub(in crate::log::partition_log) fn build_leader_epochs(
        &mut self,
        from_checkpoint: bool,
    ) -> Result<(), LogError> {
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
    pub(in crate::log::partition_log) fn write_epoch_checkpoint(&mut self) -> Result<(), LogError> {
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
    pub(in crate::log::partition_log) fn with_epoch_checkpoint(
        &self,
        mut sync: FlushSync<S::File>,
    ) -> FlushSync<S::File> {
        if let Some((_, file)) = &self.epoch_checkpoint.unsynced {
            sync.files.push(file.clone());
        }
        sync
    }

    /// How the leader-epoch cache was last built, if it was.
    pub fn leader_epoch_load(&self) -> Option<&LeaderEpochLoad> {
        self.epoch_checkpoint.load.as_ref()
    }

    pub(in crate::log::partition_log) fn check_epoch_checkpoint_invariants(&self) {
        // A rename is a directory change: while the file is unsynced, so is that.
        assert!(
            self.epoch_checkpoint.unsynced.is_none()
                || self.directory_changes > self.directory_synced,
            "an unsynced leader-epoch checkpoint whose directory entry counts as synced"
        );
    }
}
