//! One partition's log (Kafka's `UnifiedLog`, local part): a sorted set of segments, offset
//! assignment, rolling, reads as file ranges, the flush policy and crash recovery.
//!
//! Durability follows Kafka's recovery point: everything below `recovery_point` is durable.
//! A flush covers **every** segment holding offsets at or past the recovery point, plus the
//! directory entries created or removed since the last directory sync, so a flush that completes
//! makes everything below its offset durable whatever other flushes are still in flight (Kafka's
//! `LocalLog.flush`: segments from the recovery point, and the directory when a segment was
//! created past it). On open, segments wholly below the recovery point are trusted without a
//! scan; the rest are validated, a torn tail past the recovery point is truncated, and
//! corruption below it is reported (the broker takes the partition offline) without touching
//! any file.
//!
//! The producer state is built when first needed, from the newest producer-state snapshot
//! file and the batch headers past it ([`snapshots`]: when snapshots are written, synced,
//! trusted and removed). The leader-epoch cache is kept in the `leader-epoch-checkpoint` file
//! ([`epoch_checkpoint`]).
//!
//! Invariants (checked by [`PartitionLog::check_invariants`]):
//! `log_start_offset <= recovery_point <= log_end_offset`; segments are contiguous in offsets;
//! only the last segment is written to; no producer-state snapshot lies past the log end.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::protocol::record_batch::{assign_offsets, RecordBatchHeader};
use crate::storage::Storage;
use crate::types::Millis;

use super::leader_epochs::LeaderEpochCache;
use super::producer_state::snapshot::parse_snapshot_name;
use super::producer_state::ProducerStates;
use super::segment::{parse_segment_name, LogSegment};
use super::LogError;

mod cleaning;
mod epoch_checkpoint;
mod snapshots;

pub use cleaning::{cleaned_name, swap_name, CleanStage, StartedClean};
pub use epoch_checkpoint::LeaderEpochLoad;
use epoch_checkpoint::{is_epoch_checkpoint, EpochCheckpoint};
use snapshots::ProducerSnapshots;
pub use snapshots::ProducerStateLoad;

/// The topic configs the log itself uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes`.
    pub segment_bytes: u64,
    /// `index.interval.bytes`.
    pub index_interval_bytes: u64,
    /// `flush.messages`.
    pub flush_messages: i64,
    /// `flush.ms`.
    pub flush_ms: Option<u64>,
    /// `segment.ms`: roll when an append's newest timestamp is this much past the active
    /// segment's first batch (Kafka's `LogSegment.shouldRoll`, without jitter).
    pub segment_ms: i64,
    /// `cleanup.policy` includes `compact`: offsets may skip between batches (the cleaner
    /// removes records, a follower copies its leader's gaps). An ordinary log keeps treating a
    /// gap as damage.
    pub compacted: bool,
}

/// What recovery did on open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments opened.
    pub segments: u64,
    /// Segments below the recovery point, opened without a scan.
    pub unscanned_segments: u64,
    /// Valid batches found by the scan.
    pub batches: u64,
    /// Bytes truncated from torn or corrupt tails past the recovery point.
    pub truncated_bytes: u64,
    /// Segments deleted because they came after a torn tail.
    pub deleted_segments: u64,
    /// Corruption below the recovery point: the log holds what comes before it, and the
    /// partition must go offline.
    pub corruption: Option<String>,
}

/// Result of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset assigned to the first record.
    pub base_offset: i64,
    /// Offset of the last record.
    pub last_offset: i64,
    /// Whether `flush.messages` was reached: the caller must flush before acknowledging.
    pub flush_required: bool,
    /// The append rolled the log: the base offset of the new segment. The caller flushes up
    /// to it (Kafka schedules `flushUptoOffsetExclusive(newSegment.baseOffset)` on a roll), so
    /// closed segments become durable, and their retention possible, without a flush policy.
    pub rolled: Option<i64>,
}

/// Result of a read.
#[derive(Debug, Clone)]
pub enum LogRead<F> {
    /// `len` bytes of whole batches at `position` in `file`.
    Records {
        /// The segment file.
        file: F,
        /// Byte position.
        position: u64,
        /// Byte length.
        len: u64,
    },
    /// Nothing to return (the offset is at or past the end bound).
    Empty,
    /// The offset is below the log start or past the log end.
    OutOfRange,
}

/// What one flush must sync.
#[derive(Debug, Clone)]
pub struct FlushSync<F> {
    /// Segment files to fsync.
    pub files: Vec<F>,
    /// Directories to fsync (`""`: the root).
    pub directories: Vec<String>,
}

#[cfg(test)]
impl FlushSync<crate::storage::memory::MemoryFile> {
    /// Issues and finishes every sync at once on the disk model (tests: no latency, no runtime).
    pub(crate) fn complete_now(
        &self,
        storage: &crate::storage::memory::MemoryStorage,
    ) -> std::io::Result<()> {
        for file in &self.files {
            file.begin_sync().finish()?;
        }
        for directory in &self.directories {
            storage.begin_directory_sync(directory).finish()?;
        }
        Ok(())
    }
}

/// What a flush makes durable once every sync of its [`FlushSync`] succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushMark {
    /// Everything below is durable.
    pub offset: i64,
    directory_changes: u64,
    parent_changes: u64,
    /// How many truncations the log had when the flush started: a later truncation caps
    /// what the flush can vouch for (it synced bytes that may since have been cut and
    /// replaced).
    truncations: usize,
    /// How many producer-state snapshots were written when the flush started (it syncs them).
    snapshots_written: u64,
    /// How many leader-epoch checkpoints were written when the flush started (it syncs the
    /// last).
    epochs_written: u64,
}

/// A flush to run: what to sync, and what becomes durable once it is.
pub type StartedFlush<F> = (FlushSync<F>, FlushMark);

/// A partition's local log.
#[derive(Debug)]
pub struct PartitionLog<S: Storage> {
    storage: S,
    /// The offsets the log was truncated to (by a follower), in order.
    truncated_at: Vec<i64>,
    /// The leader-epoch cache, once built ([`PartitionLog::load_leader_epochs`]): a replica in
    /// a cluster needs it, a broker that is its own controller never does.
    leader_epochs: Option<LeaderEpochCache>,
    /// The `leader-epoch-checkpoint` file.
    epoch_checkpoint: EpochCheckpoint<S::File>,
    /// The producer state, once built ([`PartitionLog::load_producer_states`]); dropped by a
    /// truncation and rebuilt by the next header walk.
    producer_states: Option<ProducerStates>,
    /// The producer-state snapshot files.
    snapshots: ProducerSnapshots<S::File>,
    /// How the producer state was last built.
    producer_state_load: Option<ProducerStateLoad>,
    directory: String,
    config: LogConfig,
    segments: BTreeMap<i64, LogSegment<S::File>>,
    log_start_offset: i64,
    log_end_offset: i64,
    /// Everything below is durable: Kafka's recovery point.
    recovery_point: i64,
    unflushed_messages: i64,
    last_flush: Millis,
    /// The clean under way, if any (a compacted log's; see [`cleaning`]).
    cleaning: Option<cleaning::Cleaning>,
    /// Changes to this log's directory entries (segments created or deleted), and how many of
    /// them a completed directory sync covers.
    directory_changes: u64,
    directory_synced: u64,
    /// The same for this log's own entry in the root directory (1 when it was created).
    parent_changes: u64,
    parent_synced: u64,
}

/// Opening a log: the segment files in order, and what the scan found so far.
struct Opening<'a, S: Storage> {
    storage: &'a S,
    config: LogConfig,
    recovery_point: i64,
    segments: BTreeMap<i64, LogSegment<S::File>>,
    report: RecoveryReport,
    /// A torn tail was truncated: every later segment is unreachable.
    torn: bool,
    /// The broker shut down cleanly: the active segment is trusted (walked, not recovered)
    /// if it ends at the recovery point.
    clean: bool,
    lowest_truncated: Option<i64>,
}

impl<S: Storage> Opening<'_, S> {
    fn expected_next(&self) -> Option<i64> {
        self.segments
            .values()
            .next_back()
            .map(LogSegment::next_offset)
    }

    /// Takes in one segment file; returns `false` to stop (corruption below the recovery
    /// point: later files are left alone).
    fn add(
        &mut self,
        base_offset: i64,
        name: &str,
        next_base: Option<i64>,
    ) -> Result<bool, LogError> {
        if self.torn {
            self.storage.remove(name)?;
            self.report.deleted_segments += 1;
            return Ok(true);
        }
        let gaps = self.config.compacted;
        if let Some(expected) = self
            .expected_next()
            .filter(|next| *next < base_offset && gaps)
        {
            // A compacted segment may end before the next one starts.
            self.segments
                .values_mut()
                .next_back()
                .expect("an expected next offset comes from a segment")
                .extend_to(base_offset);
            debug_assert!(expected < base_offset);
        }
        if let Some(expected) = self.expected_next().filter(|next| *next != base_offset) {
            if expected < self.recovery_point {
                self.report.corruption = Some(format!(
                    "segment {base_offset} follows a segment ending at {expected}, below the recovery point {}",
                    self.recovery_point
                ));
                return Ok(false);
            }
            self.torn = true; // a gap past the recovery point: an unsynced tail
            return self.add(base_offset, name, next_base);
        }
        let file = self.storage.open(name)?;
        let interval = self.config.index_interval_bytes;
        if let Some(next_base) = next_base.filter(|next| *next <= self.recovery_point) {
            let segment = LogSegment::open_unscanned(file, base_offset, next_base, interval, gaps)?;
            self.segments.insert(base_offset, segment);
            self.report.segments += 1;
            self.report.unscanned_segments += 1;
            return Ok(true);
        }
        if self.clean && next_base.is_none() {
            match LogSegment::open_trusted(file.clone(), base_offset, interval, gaps) {
                Ok(segment) if segment.next_offset() == self.recovery_point => {
                    self.segments.insert(base_offset, segment);
                    self.report.segments += 1;
                    self.report.unscanned_segments += 1;
                    return Ok(true);
                }
                Ok(_) | Err(_) => {} // not what a clean shutdown leaves: recover it
            }
        }
        let (segment, recovery) =
            LogSegment::recover(file, base_offset, interval, self.recovery_point, gaps)?;
        self.report.segments += 1;
        self.report.batches += recovery.batches;
        self.segments.insert(base_offset, segment);
        if recovery.corruption.is_some() {
            self.report.corruption = recovery.corruption;
            return Ok(false);
        }
        if recovery.truncated_bytes > 0 {
            self.report.truncated_bytes += recovery.truncated_bytes;
            self.torn = true;
            self.lowest_truncated.get_or_insert(base_offset);
        }
        Ok(true)
    }
}

impl<S: Storage> PartitionLog<S> {
    /// Opens (or creates) the log in `directory`, recovering what lies past `recovery_point`.
    pub fn open(
        storage: S,
        directory: &str,
        config: LogConfig,
        recovery_point: i64,
        now: Millis,
    ) -> Result<(Self, RecoveryReport), LogError> {
        Self::open_with(storage, directory, config, recovery_point, false, now)
    }

    /// [`PartitionLog::open`]; after a clean shutdown (`clean`), an active segment that ends
    /// at the recovery point is trusted instead of recovered.
    pub fn open_with(
        storage: S,
        directory: &str,
        config: LogConfig,
        recovery_point: i64,
        clean: bool,
        now: Millis,
    ) -> Result<(Self, RecoveryReport), LogError> {
        let listed = Self::list_after_interrupted_clean(&storage, directory)?;
        let has_epoch_checkpoint = listed
            .iter()
            .any(|name| is_epoch_checkpoint(directory, name));
        let snapshot_offsets: Vec<i64> = listed
            .iter()
            .filter_map(|name| parse_snapshot_name(directory, name))
            .collect();
        let mut names: Vec<(i64, String)> = listed
            .into_iter()
            .filter_map(|name| parse_segment_name(directory, &name).map(|base| (base, name)))
            .collect();
        names.sort();
        let mut opening = Opening {
            storage: &storage,
            config,
            recovery_point,
            segments: BTreeMap::new(),
            report: RecoveryReport::default(),
            torn: false,
            clean,
            lowest_truncated: None,
        };
        for (index, (base_offset, name)) in names.iter().enumerate() {
            let next_base = names.get(index + 1).map(|(next, _)| *next);
            if !opening.add(*base_offset, name, next_base)? {
                break;
            }
        }
        let Opening {
            segments,
            mut report,
            lowest_truncated,
            ..
        } = opening;
        let created = segments.is_empty();
        let mut log = Self::opened(storage, directory, config, segments, now);
        if created {
            log.create_segment(0)?;
        }
        log.log_start_offset = *log.segments.keys().next().expect("at least one segment");
        log.log_end_offset = log.active_segment().next_offset();
        log.open_snapshots(snapshot_offsets, recovery_point, &report)?;
        if report.corruption.is_none() && log.log_end_offset < recovery_point {
            report.corruption = Some(format!(
                "the log ends at offset {}, below the recovery point {recovery_point}",
                log.log_end_offset
            ));
        }
        // A truncated segment's new length must be fsynced too: flush from its start.
        let trusted = lowest_truncated.map_or(recovery_point, |base| base.min(recovery_point));
        log.recovery_point = trusted.clamp(log.log_start_offset, log.log_end_offset);
        log.open_leader_epochs(has_epoch_checkpoint, &mut report);
        log.check_invariants();
        Ok((log, report))
    }

    /// The log as its files were found, before its offsets and recovery point are set.
    fn opened(
        storage: S,
        directory: &str,
        config: LogConfig,
        segments: BTreeMap<i64, LogSegment<S::File>>,
        now: Millis,
    ) -> Self {
        PartitionLog {
            truncated_at: Vec::new(),
            cleaning: None,
            leader_epochs: None,
            epoch_checkpoint: EpochCheckpoint::default(),
            producer_states: None,
            snapshots: ProducerSnapshots::default(),
            producer_state_load: None,
            storage,
            directory: directory.to_owned(),
            config,
            segments,
            log_start_offset: 0,
            log_end_offset: 0,
            recovery_point: 0,
            unflushed_messages: 0,
            last_flush: now,
            // A crashed process may have created or deleted segments, or this log's directory,
            // without a directory sync: the first flush syncs both entries before anything past
            // the recovery point counts as durable (Kafka flushes the directory when a segment
            // lies past the recovery point).
            directory_changes: 1,
            directory_synced: 0,
            parent_changes: 1,
            parent_synced: 0,
        }
    }

    fn create_segment(&mut self, base_offset: i64) -> Result<(), LogError> {
        let segment = LogSegment::create(
            &self.storage,
            &self.directory,
            base_offset,
            self.config.index_interval_bytes,
            self.config.compacted,
        )?;
        self.segments.insert(base_offset, segment);
        self.directory_changes += 1;
        Ok(())
    }

    fn active_segment(&self) -> &LogSegment<S::File> {
        self.segments
            .values()
            .next_back()
            .expect("a log always has a segment")
    }

    /// Offset of the first record still in the log.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// Offset the next record will get.
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    /// Offset below which everything is durable (Kafka's recovery point).
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }

    /// `flush.messages`: 1 means every append is fsynced before it is acknowledged or visible.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Where the log should start under a retention policy (Kafka's
    /// `deleteRetentionMsBreachedSegments` then `deleteRetentionSizeBreachedSegments`): past
    /// every leading segment whose newest record is older than `now_ms - retention_ms`, or whose
    /// deletion keeps the log at least `retention_bytes` long; -1 disables either rule. Only
    /// whole segments go, none reaching past `limit` (the high watermark, or anything not yet
    /// durable). The answer is a segment's base offset, or the log end when every record has
    /// expired, the active segment's too: the caller then [rolls](Self::roll) first, as Kafka
    /// does, so that the whole log can go.
    pub fn retention_start(
        &self,
        now_ms: i64,
        retention_ms: i64,
        retention_bytes: i64,
        limit: i64,
    ) -> Result<i64, LogError> {
        let closed: Vec<&LogSegment<S::File>> = self
            .segments
            .values()
            .take(self.segments.len() - 1)
            .take_while(|segment| segment.next_offset() <= limit)
            .collect();
        let mut by_time = 0;
        if retention_ms >= 0 {
            for segment in &closed {
                if segment.max_timestamp()? >= now_ms.saturating_sub(retention_ms) {
                    break;
                }
                by_time += 1;
            }
        }
        let mut by_size = 0;
        if retention_bytes >= 0 {
            let total: u64 = self.segments.values().map(LogSegment::size_bytes).sum();
            let mut excess = total.saturating_sub(retention_bytes.unsigned_abs());
            for segment in &closed {
                if segment.size_bytes() > excess {
                    break;
                }
                excess -= segment.size_bytes();
                by_size += 1;
            }
        }
        // With the log end within the limit every closed segment is in `closed`.
        let expired_whole_log = retention_ms >= 0
            && by_time == closed.len()
            && self.log_end_offset <= limit
            && self.active_segment().size_bytes() > 0
            && self.active_segment().max_timestamp()? < now_ms.saturating_sub(retention_ms);
        if expired_whole_log {
            return Ok(self.log_end_offset);
        }
        let keep = by_time.max(by_size);
        Ok(*self
            .segments
            .keys()
            .nth(keep)
            .expect("the active segment stays"))
    }

    /// Starts a new, empty active segment at the log end (unless the active one is empty).
    pub fn roll(&mut self) -> Result<(), LogError> {
        if self.active_segment().size_bytes() == 0 {
            return Ok(());
        }
        self.create_segment(self.log_end_offset)?;
        self.snapshot_at_roll()
    }

    /// Deletes every segment wholly below `start` (never the active one) and moves the log
    /// start to the first segment kept; answers how many went. The files' removal becomes
    /// durable with the next flush's directory sync: the caller records the new log start
    /// durably first (Kafka's `log-start-offset-checkpoint`).
    ///
    /// A start past the active segment's base (on start-up, after a power loss took back the
    /// records past a start that retention had checkpointed, so the log ends at or before it)
    /// replaces the whole log with an empty segment at `start`, as Kafka's loader does when the
    /// checkpointed start is ahead of the log end. (Retention rolls first, so at run time the
    /// start is at most the active segment's base.)
    pub fn delete_segments_below(&mut self, start: i64) -> Result<usize, LogError> {
        self.abort_clean()?;
        let past_the_active = start > self.active_segment().base_offset;
        if past_the_active && start >= self.log_end_offset {
            let all = self.remove_segments(self.segments.len())?;
            self.create_segment(start)?;
            self.log_start_offset = start;
            self.log_end_offset = start;
            self.recovery_point = start;
            self.unflushed_messages = 0;
            self.change_leader_epochs(|epochs| epochs.truncate_from_start(start))?;
            self.remove_snapshots_before_start()?;
            return Ok(all);
        }
        let doomed = self
            .segments
            .values()
            .take(self.segments.len() - 1)
            .take_while(|segment| segment.next_offset() <= start)
            .count();
        self.remove_segments(doomed)?;
        let first = *self
            .segments
            .keys()
            .next()
            .expect("the active segment stays");
        // DeleteRecords may start the log inside its first segment (retention never does).
        self.log_start_offset = start.clamp(first, self.log_end_offset);
        let log_start = self.log_start_offset;
        self.change_leader_epochs(|epochs| epochs.truncate_from_start(log_start))?;
        self.recovery_point = self.recovery_point.max(self.log_start_offset);
        self.remove_snapshots_before_start()?;
        Ok(doomed)
    }

    /// Builds the leader-epoch cache from every batch header, if not built yet (a log with a
    /// `leader-epoch-checkpoint` file built it on open).
    pub fn load_leader_epochs(&mut self) -> Result<&LeaderEpochCache, LogError> {
        if self.leader_epochs.is_none() {
            self.build_leader_epochs(false)?;
        }
        Ok(self.leader_epochs.as_ref().expect("built above"))
    }

    /// A new leader epoch starts at the log end (Kafka's `makeLeader` assigns it before the
    /// first batch of the epoch is written).
    pub fn start_leader_epoch(&mut self, epoch: i32) -> Result<(), LogError> {
        let end = self.log_end_offset;
        self.load_leader_epochs()?;
        self.change_leader_epochs(|epochs| epochs.assign(epoch, end))
    }

    /// Applies `change` to the leader-epoch cache, if built, and writes the checkpoint file if
    /// it changed.
    fn change_leader_epochs(
        &mut self,
        change: impl FnOnce(&mut LeaderEpochCache) -> bool,
    ) -> Result<(), LogError> {
        if self.leader_epochs.as_mut().is_some_and(change) {
            self.write_epoch_checkpoint()?;
        }
        Ok(())
    }

    /// Builds the producer state, if not built yet (Kafka's `loadProducerState`): from the
    /// newest valid snapshot and the batch headers at and past its offset (whole segments below
    /// it are not read), or from every batch header if there is no valid snapshot.
    pub fn load_producer_states(&mut self) -> Result<&ProducerStates, LogError> {
        if self.producer_states.is_none() {
            let (mut states, snapshot_offset, invalid_snapshots) = self.newest_snapshot()?;
            let from = snapshot_offset.unwrap_or(i64::MIN);
            let mut batches_walked = 0;
            for segment in self.segments_from(from) {
                segment.batch_headers(|header| {
                    if header.base_offset >= from {
                        states.update(header);
                        batches_walked += 1;
                    }
                })?;
            }
            self.producer_state_load = Some(ProducerStateLoad {
                snapshot_offset,
                invalid_snapshots,
                batches_walked,
            });
            self.producer_states = Some(states);
        }
        Ok(self.producer_states.as_ref().expect("built above"))
    }

    /// The segments holding offsets at or past `offset`, oldest first (whole segments below it
    /// are skipped, not read).
    fn segments_from(&self, offset: i64) -> impl Iterator<Item = &LogSegment<S::File>> {
        let first = self
            .segments
            .range(..=offset)
            .next_back()
            .map_or(offset, |(base, _)| *base);
        self.segments.range(first..).map(|(_, segment)| segment)
    }

    /// How the producer state was last built, if it was.
    pub fn producer_state_load(&self) -> Option<ProducerStateLoad> {
        self.producer_state_load
    }

    /// The leader-epoch cache, if built.
    pub fn leader_epochs(&self) -> Option<&LeaderEpochCache> {
        self.leader_epochs.as_ref()
    }

    /// Removes everything from the batch holding `offset` on (Kafka's `UnifiedLog.truncateTo`,
    /// which a follower runs to drop what its new leader does not have). The recovery point
    /// falls with the log end. Returns what must be synced for the truncation to be durable
    /// (the cut segment, and the directory if segments went), or `None` if nothing was cut.
    ///
    /// A cut at or past the log end cuts nothing but the leader-epoch cache, at the log end, as
    /// Kafka's does: a replica that led an epoch without appending to it keeps that epoch's
    /// start entry at its log end, and would otherwise send it as its last fetched epoch for
    /// ever (the new leader, which never had that epoch, answers with a diverging epoch ending
    /// at or past our log end; the cut changes nothing, and the replica never rejoins the ISR).
    pub fn truncate_to(&mut self, offset: i64) -> Result<Option<StartedFlush<S::File>>, LogError> {
        if offset >= self.log_end_offset {
            let log_end = self.log_end_offset;
            self.change_leader_epochs(|epochs| epochs.truncate_from_end(log_end))?;
            return Ok(None);
        }
        self.abort_clean()?;
        let first = *self.segments.keys().next().expect("a log has a segment");
        // Segments from `offset` on go whole, except the first, which is cut instead.
        let doomed: Vec<i64> = self
            .segments
            .range(offset.max(first + 1)..)
            .map(|(base, _)| *base)
            .collect();
        for base in doomed {
            self.segments.remove(&base);
            self.storage
                .remove(&crate::log::segment::segment_name(&self.directory, base))?;
            self.directory_changes += 1;
        }
        let active = self
            .segments
            .values_mut()
            .next_back()
            .expect("the first segment stays");
        active.truncate_to(offset)?;
        let file = active.file().clone();
        self.log_end_offset = active.next_offset();
        self.recovery_point = self.recovery_point.min(self.log_end_offset);
        self.truncated_at.push(self.log_end_offset);
        let log_end = self.log_end_offset;
        self.change_leader_epochs(|epochs| epochs.truncate_from_end(log_end))?;
        self.producer_states = None;
        self.remove_snapshots_above(self.log_end_offset)?;
        self.unflushed_messages = 0;
        let directories = self.unsynced_directories();
        let mark = FlushMark {
            offset: self.recovery_point,
            directory_changes: self.directory_changes,
            parent_changes: self.parent_changes,
            truncations: self.truncated_at.len(),
            snapshots_written: self.snapshots.written,
            epochs_written: self.epoch_checkpoint.written,
        };
        let sync = self.with_state_files(FlushSync {
            files: vec![file],
            directories,
        });
        Ok(Some((sync, mark)))
    }

    /// Removes the first `count` segments and their files; answers `count`.
    fn remove_segments(&mut self, count: usize) -> Result<usize, LogError> {
        for _ in 0..count {
            let (base, _) = self.segments.pop_first().expect("counted");
            self.storage
                .remove(&super::segment::segment_name(&self.directory, base))?;
            self.directory_changes += 1;
        }
        Ok(count)
    }

    /// Bytes of every segment.
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(LogSegment::size_bytes).sum()
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Assigns offsets to a validated batch (patching it in place), appends it, and reports
    /// whether the flush policy now requires an fsync before the append is acknowledged.
    pub fn append(
        &mut self,
        batch: &mut [u8],
        header: &RecordBatchHeader,
        leader_epoch: i32,
    ) -> Result<AppendInfo, LogError> {
        let base_offset = self.log_end_offset;
        assign_offsets(batch, base_offset, leader_epoch);
        let header = RecordBatchHeader {
            base_offset,
            partition_leader_epoch: leader_epoch,
            ..*header
        };
        self.append_at_end(batch, &header)
    }

    /// Appends a batch a leader already placed (Kafka's `appendAsFollower`): its offsets and
    /// leader epoch are kept, and it must start at the log end (or past it, in a compacted log:
    /// the leader's cleaner removed what lay between).
    pub fn append_as_follower(
        &mut self,
        batch: &[u8],
        header: &RecordBatchHeader,
    ) -> Result<AppendInfo, LogError> {
        let fits = header.base_offset == self.log_end_offset
            || (self.config.compacted && header.base_offset > self.log_end_offset);
        if !fits {
            return Err(LogError::Corrupt(format!(
                "a replicated batch at offset {} does not start at the log end {}",
                header.base_offset, self.log_end_offset
            )));
        }
        self.append_at_end(batch, header)
    }

    /// Appends a batch whose header already holds its final offsets, rolling first if the
    /// active segment is full or old.
    fn append_at_end(
        &mut self,
        batch: &[u8],
        header: &RecordBatchHeader,
    ) -> Result<AppendInfo, LogError> {
        let base_offset = header.base_offset;
        let header = *header;
        let size = batch.len() as u64;
        let mut rolled = None;
        let active = self.active_segment();
        let full = active.size_bytes() + size > self.config.segment_bytes;
        let aged = active
            .first_batch_timestamp()
            .is_some_and(|first| header.max_timestamp - first > self.config.segment_ms);
        if active.size_bytes() > 0 && (full || aged) {
            // A follower's batch past a gap: the closed segment covers the gap.
            self.segments
                .values_mut()
                .next_back()
                .expect("a log always has a segment")
                .extend_to(base_offset);
            self.create_segment(base_offset)?;
            self.snapshot_at_roll()?;
            rolled = Some(base_offset);
        }
        let segment = self
            .segments
            .values_mut()
            .next_back()
            .expect("a log always has a segment");
        segment.ensure_loaded()?;
        segment.append(batch, &header)?;
        assert!(
            segment.size_bytes() <= self.config.segment_bytes || segment.size_bytes() == size,
            "a segment outgrew segment.bytes with a second batch"
        );
        self.log_end_offset = header.last_offset() + 1;
        self.change_leader_epochs(|epochs| {
            epochs.assign(header.partition_leader_epoch, header.base_offset)
        })?;
        if let Some(states) = &mut self.producer_states {
            states.update(&header);
        }
        self.unflushed_messages += i64::from(header.records_count.max(1));
        Ok(AppendInfo {
            base_offset,
            last_offset: header.last_offset(),
            flush_required: self.unflushed_messages >= self.config.flush_messages,
            rolled,
        })
    }

    /// Starts a flush of everything appended so far: the files and directories to sync, and
    /// what becomes durable once they are. `None` if everything is durable already.
    pub fn start_flush(&mut self, now: Millis) -> Option<(FlushSync<S::File>, FlushMark)> {
        self.last_flush = now;
        self.unflushed_messages = 0;
        let directories = self.unsynced_directories();
        if self.recovery_point == self.log_end_offset && directories.is_empty() {
            return None;
        }
        let files = self.unsynced_files(Bound::Unbounded);
        let mark = FlushMark {
            offset: self.log_end_offset,
            directory_changes: self.directory_changes,
            parent_changes: self.parent_changes,
            truncations: self.truncated_at.len(),
            snapshots_written: self.snapshots.written,
            epochs_written: self.epoch_checkpoint.written,
        };
        Some((
            self.with_state_files(FlushSync { files, directories }),
            mark,
        ))
    }

    /// Starts a flush of the segments below `end` (a segment base offset) and of the log's
    /// directory entries: what a roll makes durable. `None` if that is durable already. The
    /// flush policy's counters are left alone: data past `end` is not covered.
    pub fn start_flush_upto(&mut self, end: i64) -> Option<(FlushSync<S::File>, FlushMark)> {
        assert!(
            self.segments.contains_key(&end) || end == self.log_end_offset,
            "a flush up to a segment boundary"
        );
        let directories = self.unsynced_directories();
        if self.recovery_point >= end && directories.is_empty() {
            return None;
        }
        let files = self.unsynced_files(Bound::Excluded(end));
        let mark = FlushMark {
            offset: end.max(self.recovery_point),
            directory_changes: self.directory_changes,
            parent_changes: self.parent_changes,
            truncations: self.truncated_at.len(),
            snapshots_written: self.snapshots.written,
            epochs_written: self.epoch_checkpoint.written,
        };
        Some((
            self.with_state_files(FlushSync { files, directories }),
            mark,
        ))
    }

    /// The files of the segments holding data past the recovery point, among those whose base
    /// offset is below `end`: the segment holding the recovery point and every later one, so
    /// O(log segments + synced).
    fn unsynced_files(&self, end: Bound<i64>) -> Vec<S::File> {
        let first = self
            .segments
            .range(..=self.recovery_point)
            .next_back()
            .map_or(self.log_start_offset, |(base, _)| *base);
        self.segments
            .range((Bound::Included(first), end))
            .map(|(_, segment)| segment)
            .filter(|segment| segment.next_offset() > self.recovery_point)
            .map(|segment| segment.file().clone())
            .collect()
    }

    /// The directories whose entries changed since their last sync: the root (this log's own
    /// entry) and the log's directory (segments created or deleted).
    fn unsynced_directories(&self) -> Vec<String> {
        let mut directories = Vec::new();
        if self.parent_changes > self.parent_synced {
            directories.push(String::new());
        }
        if self.directory_changes > self.directory_synced {
            directories.push(self.directory.clone());
        }
        directories
    }

    /// `sync` with the producer-state snapshots and the leader-epoch checkpoint that no
    /// completed flush has covered yet.
    fn with_state_files(&self, sync: FlushSync<S::File>) -> FlushSync<S::File> {
        self.with_epoch_checkpoint(self.with_snapshots(sync))
    }

    /// Records that every sync of a flush started earlier succeeded.
    pub fn flush_completed(&mut self, mark: FlushMark) {
        assert!(
            mark.offset <= self.log_end_offset || mark.truncations < self.truncated_at.len(),
            "flushed past the log end"
        );
        let cap = self.truncated_at[mark.truncations..]
            .iter()
            .copied()
            .min()
            .unwrap_or(i64::MAX);
        self.recovery_point = self.recovery_point.max(mark.offset.min(cap));
        self.directory_synced = self.directory_synced.max(mark.directory_changes);
        self.parent_synced = self.parent_synced.max(mark.parent_changes);
        self.snapshots.synced(mark.snapshots_written);
        self.epoch_checkpoint.synced(mark.epochs_written);
    }

    /// When `flush.ms` next requires a flush, if there is unflushed data.
    pub fn next_flush_deadline(&self) -> Option<Millis> {
        let interval = self.config.flush_ms?;
        (self.recovery_point < self.log_end_offset).then(|| self.last_flush.plus(interval))
    }

    /// Whole batches from the one containing `fetch_offset` up to `end_offset` (exclusive:
    /// the high watermark for consumers), at most `max_bytes` after the first batch.
    pub fn read(
        &self,
        fetch_offset: i64,
        end_offset: i64,
        max_bytes: u64,
    ) -> Result<LogRead<S::File>, LogError> {
        if fetch_offset < self.log_start_offset || fetch_offset > self.log_end_offset {
            return Ok(LogRead::OutOfRange);
        }
        if fetch_offset >= end_offset {
            return Ok(LogRead::Empty);
        }
        for (_, segment) in self
            .segments
            .range(..=fetch_offset)
            .next_back()
            .into_iter()
            .chain(self.segments.range(fetch_offset + 1..))
        {
            if let Some((position, len)) = segment.slice(fetch_offset, end_offset, max_bytes)? {
                return Ok(LogRead::Records {
                    file: segment.file().clone(),
                    position,
                    len,
                });
            }
        }
        Ok(LogRead::Empty)
    }

    /// `(offset, timestamp)` of the first record with a timestamp at or after `timestamp_ms`
    /// (ListOffsets), never below the log start.
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>, LogError> {
        for segment in self.segments.values() {
            if let Some((offset, timestamp)) = segment.offset_for_timestamp(timestamp_ms)? {
                return Ok(Some((offset.max(self.log_start_offset), timestamp)));
            }
        }
        Ok(None)
    }

    /// `(offset, timestamp)` of the record batch with the largest timestamp.
    pub fn offset_of_max_timestamp(&self) -> Result<Option<(i64, i64)>, LogError> {
        let mut best: Option<(&LogSegment<S::File>, i64)> = None;
        for segment in self.segments.values() {
            let max = segment.max_timestamp()?;
            if best.is_none_or(|(_, best_max)| max > best_max) {
                best = Some((segment, max));
            }
        }
        match best {
            Some((segment, max)) if max >= 0 => segment.offset_of_max_timestamp(),
            _ => Ok(None),
        }
    }

    /// Cross-field invariants; a violation is a bug.
    pub fn check_invariants(&self) {
        assert!(
            self.log_start_offset <= self.recovery_point,
            "log start above the recovery point"
        );
        assert!(
            self.recovery_point <= self.log_end_offset,
            "recovery point above log end"
        );
        assert!(
            self.directory_synced <= self.directory_changes,
            "synced directory changes that never happened"
        );
        self.check_snapshot_invariants();
        self.check_epoch_checkpoint_invariants();
        let active = self.active_segment();
        assert_eq!(
            active.next_offset(),
            self.log_end_offset,
            "log end is the last segment's end"
        );
        // O(segments): debug builds and the simulator's debug runs only.
        if cfg!(debug_assertions) {
            let first = self.segments.values().next().expect("a segment");
            assert!(
                first.base_offset <= self.log_start_offset
                    && self.log_start_offset <= first.next_offset(),
                "the log starts in its first segment"
            );
            let mut expected = first.base_offset;
            for (base_offset, segment) in &self.segments {
                assert_eq!(
                    *base_offset, segment.base_offset,
                    "segment keyed by its base offset"
                );
                assert_eq!(segment.base_offset, expected, "segments are contiguous");
                expected = segment.next_offset();
            }
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod recovery_props;

#[cfg(test)]
mod snapshot_tests;

#[cfg(test)]
mod cleaning_tests;

#[cfg(test)]
mod epoch_checkpoint_tests;
