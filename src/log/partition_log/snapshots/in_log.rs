//! The log's side of its producer-state snapshots: loading the producer state on open from the
//! latest valid snapshot and the batch headers past it, writing snapshots at segment rolls and
//! on a clean stop, deleting those a truncation or retention makes wrong, and handing the
//! unsynced ones to the next flush.

use std::ops::RangeBounds;

use crate::log::producer_state::snapshot::{is_snapshot_length, snapshot_name};
use crate::log::producer_state::ProducerStates;
use crate::log::{FlushSync, LogError, PartitionLog, RecoveryReport};
use crate::storage::{Storage, StorageFile};

impl<S: Storage> PartitionLog<S> {
    /// On open: trusts the snapshot files at or below `recovery_point` (the log reaches it, or
    /// recovery reported corruption) and deletes the rest. A log with corruption keeps every
    /// file and trusts none.
    pub(in crate::log::partition_log) fn open_snapshots(
        &mut self,
        found: Vec<i64>,
        recovery_point: i64,
        report: &RecoveryReport,
    ) -> Result<(), LogError> {
        if report.corruption.is_some() || self.log_end_offset < recovery_point {
            return Ok(()); // the partition goes offline: no file is touched
        }
        for offset in found {
            if offset <= recovery_point {
                self.snapshots.offsets.insert(offset);
            } else {
                self.remove_snapshot(offset)?;
            }
        }
        Ok(())
    }

    /// Writes a snapshot of the producer state at the log end (building the state first if
    /// need be), unless the log is empty or a snapshot is there already. The log's next flush
    /// syncs it. Answers whether it wrote one.
    pub fn maybe_take_snapshot(&mut self) -> Result<bool, LogError> {
        let offset = self.log_end_offset;
        if offset == 0 || self.snapshots.offsets.contains(&offset) {
            return Ok(false);
        }
        let bytes = self.load_producer_states()?.to_snapshot();
        let name = snapshot_name(&self.directory, offset);
        let written = self.storage.open(&name).and_then(|file| {
            file.set_len(0)?;
            file.write_all_at(&bytes, 0)?;
            Ok(file)
        });
        let file = match written {
            Ok(file) => file,
            Err(error) => {
                // Best effort: a partial file left behind fails its checks when read.
                let _ = self.storage.remove(&name);
                return Err(error.into());
            }
        };
        self.directory_changes += 1;
        self.snapshots.written += 1;
        self.snapshots.offsets.insert(offset);
        self.snapshots
            .unsynced
            .push((self.snapshots.written, offset, file));
        Ok(true)
    }

    /// The log just rolled to a new segment at the log end: a snapshot there. If the producer
    /// state cannot be built (a segment below is out of shape), the roll goes on without one:
    /// the state stays unbuilt, and whoever needs it next meets the error (a leader's produce
    /// takes the partition offline), as before snapshots. A failed write is an error of the
    /// roll, as in Kafka.
    pub(in crate::log::partition_log) fn snapshot_at_roll(&mut self) -> Result<(), LogError> {
        if self.load_producer_states().is_err() {
            return Ok(());
        }
        self.maybe_take_snapshot().map(|_| ())
    }

    /// The newest valid snapshot: its state, its offset (`None`: no valid snapshot) and how
    /// many invalid ones were deleted on the way.
    pub(in crate::log::partition_log) fn newest_snapshot(
        &mut self,
    ) -> Result<(ProducerStates, Option<i64>, u64), LogError> {
        let mut invalid = 0;
        while let Some(offset) = self.snapshots.offsets.last().copied() {
            if let Some(states) = self.read_snapshot(offset)? {
                return Ok((states, Some(offset), invalid));
            }
            self.remove_snapshot(offset)?;
            invalid += 1;
        }
        Ok((ProducerStates::default(), None, invalid))
    }

    /// The state the snapshot at `offset` holds, `None` if it is invalid.
    fn read_snapshot(&self, offset: i64) -> Result<Option<ProducerStates>, LogError> {
        let file = self.storage.open(&snapshot_name(&self.directory, offset))?;
        let len = file.len()?;
        if !is_snapshot_length(len) {
            return Ok(None);
        }
        let mut bytes = vec![0; usize::try_from(len).expect("a snapshot fits in memory")];
        file.read_exact_at(&mut bytes, 0)?;
        Ok(ProducerStates::from_snapshot(&bytes, offset).ok())
    }

    pub(in crate::log::partition_log) fn remove_snapshot(
        &mut self,
        offset: i64,
    ) -> Result<(), LogError> {
        self.storage
            .remove(&snapshot_name(&self.directory, offset))?;
        self.snapshots.offsets.remove(&offset);
        self.snapshots
            .unsynced
            .retain(|(_, unsynced, _)| *unsynced != offset);
        self.directory_changes += 1;
        Ok(())
    }

    /// A truncation: the snapshots past the new log end describe records that are gone.
    pub(in crate::log::partition_log) fn remove_snapshots_above(
        &mut self,
        end: i64,
    ) -> Result<(), LogError> {
        self.remove_snapshots_in(end + 1..)
    }

    /// Retention moved the log start: the newest snapshot at or below it stays (it still knows
    /// the producers whose batches went), the older ones go.
    pub(in crate::log::partition_log) fn remove_snapshots_before_start(
        &mut self,
    ) -> Result<(), LogError> {
        let Some(kept) = self
            .snapshots
            .offsets
            .range(..=self.log_start_offset)
            .next_back()
            .copied()
        else {
            return Ok(());
        };
        self.remove_snapshots_in(..kept)
    }

    fn remove_snapshots_in(&mut self, offsets: impl RangeBounds<i64>) -> Result<(), LogError> {
        let doomed: Vec<i64> = self.snapshots.offsets.range(offsets).copied().collect();
        for offset in doomed {
            self.remove_snapshot(offset)?;
        }
        Ok(())
    }

    /// `sync` with the snapshot files no completed flush has covered yet.
    pub(in crate::log::partition_log) fn with_snapshots(
        &self,
        mut sync: FlushSync<S::File>,
    ) -> FlushSync<S::File> {
        sync.files.extend(
            self.snapshots
                .unsynced
                .iter()
                .map(|(_, _, file)| file.clone()),
        );
        sync
    }

    /// The offsets of the snapshot files the log keeps, oldest first.
    pub fn snapshot_offsets(&self) -> Vec<i64> {
        self.snapshots.offsets.iter().copied().collect()
    }

    pub(in crate::log::partition_log) fn check_snapshot_invariants(&self) {
        if let Some(newest) = self.snapshots.offsets.last() {
            assert!(
                *newest <= self.log_end_offset,
                "a producer-state snapshot past the log end"
            );
        }
        // A snapshot's name is a directory change: while its file is unsynced, so is that.
        assert!(
            self.snapshots.unsynced.is_empty() || self.directory_changes > self.directory_synced,
            "an unsynced snapshot whose directory entry counts as synced"
        );
    }
}
