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

mod in_log;

use std::collections::BTreeSet;

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
