//! The log's producer-state snapshot files (`{offset:020}.snapshot`, the format in
//! [`crate::log::producer_state::snapshot`]): when they are written, synced, trusted and removed.
//!
//! * **Written** at the base offset of every new segment (a roll, as Kafka's `UnifiedLog.roll`
//!   does) and at the log end when the broker shuts down cleanly (Kafka's `UnifiedLog.close`),
//!   unless a snapshot is already there. A roll builds the producer state first if nothing has
//!   yet (a follower, a log no idempotent producer writes to): with snapshots that walk reads
//!   only the segments since the last one.
//! * **Synced** by the log's next flush: every flush started after a snapshot was written
//!   carries its file, and its name is a change to the log's directory, which the flush syncs
//!   too. A roll's flush (up to the new segment) is the one that usually covers it.
//! * **Trusted** on open only at or below the recovery point the log opened with; the others
//!   are deleted. Kafka trusts any snapshot at or below the log end. The recovery point is the
//!   stricter bound because a truncation (a follower's, or a torn tail cut on open) removes the
//!   snapshots past its offset, but the removal is durable only after a sync of the directory: a
//!   power loss before it brings back a snapshot of the records the truncation cut, next to new
//!   records written in their place whose pages happened to reach the disk. A recovery point at
//!   or past a snapshot's offset means a flush started after such a truncation completed, and
//!   that flush synced the directory. (The one window left is a truncation below a checkpointed
//!   recovery point followed by a power loss before the checkpoint is rewritten: the log itself
//!   then relies on what the checkpoint says.) A snapshot that fails its checks when read (torn
//!   by a power loss while it was written, a bad sector) is deleted, and the next older one is
//!   tried; with none left the state is rebuilt from every batch header.
//! * **Removed** past the new log end by a truncation, and below the log start by retention,
//!   except the newest one at or below the log start: a producer whose batches all went with
//!   retention is still known after a restart, as in Kafka (seedlog has no
//!   `producer.id.expiration.ms` to forget it later).
//!
//! A log whose recovery reports corruption touches no snapshot file either (it goes offline).

use std::collections::BTreeSet;
use std::ops::RangeBounds;

use crate::log::producer_state::snapshot::{is_snapshot_length, snapshot_name};
use crate::log::producer_state::ProducerStates;
use crate::log::LogError;
use crate::storage::{Storage, StorageFile};

use super::{FlushSync, PartitionLog, RecoveryReport};

/// The snapshot files of one log.
#[derive(Debug)]
pub(super) struct ProducerSnapshots<F> {
    /// The offsets of the snapshot files the log trusts: each describes the log's batches below
    /// it, and none lies past the log end.
    offsets: BTreeSet<i64>,
    /// Snapshots written but not yet covered by a completed flush: `(write number, offset,
    /// file)`.
    unsynced: Vec<(u64, i64, F)>,
    /// How many snapshots this log has written (the write number of the last).
    pub(super) written: u64,
}

impl<F> Default for ProducerSnapshots<F> {
    fn default() -> Self {
        ProducerSnapshots {
            offsets: BTreeSet::new(),
            unsynced: Vec::new(),
            written: 0,
        }
    }
}

impl<F> ProducerSnapshots<F> {
    /// A flush started when `written` snapshots had been written completed.
    pub(super) fn synced(&mut self, written: u64) {
        self.unsynced.retain(|(number, _, _)| *number > written);
    }
}

/// How the producer state was last built (Kafka logs the same at `loadProducerState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerStateLoad {
    /// The offset of the snapshot it started from; `None`: every batch header was walked.
    pub snapshot_offset: Option<i64>,
    /// Snapshots found invalid (torn, garbled) and deleted on the way.
    pub invalid_snapshots: u64,
    /// Batch headers walked at and past the snapshot's offset.
    pub batches_walked: u64,
}

impl<S: Storage> PartitionLog<S> {
    /// On open: trusts the snapshot files at or below `recovery_point` (the log reaches it, or
    /// recovery reported corruption) and deletes the rest. A log with corruption keeps every
    /// file and trusts none.
    pub(super) fn open_snapshots(
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
    pub(super) fn snapshot_at_roll(&mut self) -> Result<(), LogError> {
        if self.load_producer_states().is_err() {
            return Ok(());
        }
        self.maybe_take_snapshot().map(|_| ())
    }

    /// The newest valid snapshot: its state, its offset (`None`: no valid snapshot) and how
    /// many invalid ones were deleted on the way.
    pub(super) fn newest_snapshot(
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

    pub(super) fn remove_snapshot(&mut self, offset: i64) -> Result<(), LogError> {
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
    pub(super) fn remove_snapshots_above(&mut self, end: i64) -> Result<(), LogError> {
        self.remove_snapshots_in(end + 1..)
    }

    /// Retention moved the log start: the newest snapshot at or below it stays (it still knows
    /// the producers whose batches went), the older ones go.
    pub(super) fn remove_snapshots_before_start(&mut self) -> Result<(), LogError> {
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
    pub(super) fn with_snapshots(&self, mut sync: FlushSync<S::File>) -> FlushSync<S::File> {
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

    pub(super) fn check_snapshot_invariants(&self) {
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
