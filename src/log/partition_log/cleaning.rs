//! Compaction of a partition log (Kafka's `Cleaner.clean` and `UnifiedLog.replaceSegments`).
//!
//! A clean covers the closed segments wholly below the first uncleanable offset (the caller
//! bounds it by the high watermark and the recovery point: unflushed data and the active
//! segment are never cleaned; `min.compaction.lag.ms` stops it at the first segment holding a
//! newer record). It reads them to find each key's latest offset, then rewrites each segment
//! on its own (no merging: a cleaned segment keeps its base offset and name, and covers the
//! same offsets, so replacing it is one rename) and swaps the segments whose content changed:
//!
//! 1. write `{base}.cleaned`, fsync it;
//! 2. rename it to `{base}.swap`, fsync the directory;
//! 3. rename `{base}.swap` over `{base}.log` (atomically: the reader sees the old segment or
//!    the new one), fsync the directory; the in-memory segment is replaced at the rename.
//!
//! On open (Kafka's `LogLoader` rules) a leftover `.cleaned` file is deleted (its content may be
//! incomplete: it was never renamed), and a `.swap` file completes its swap (it was fsynced
//! before the rename that named it): it replaces its `.log`, or is deleted if that segment is
//! gone. Either way the log holds every latest record: the old segment and the cleaned one
//! differ only in superseded records. The log start and the recovery point never move.
//!
//! A truncation or a retention deletion while a clean is under way aborts it (its `.cleaned`
//! and `.swap` files go) before anything is cut, so a swap can never bring back what they took.

use std::collections::BTreeMap;

use crate::log::cleaner::{
    decide, delete_horizon, raw_records, rebuild, records_section, CleanStats, CleanerConfig,
};
use crate::log::segment::{offset_file_name, parse_offset_file_name, segment_name, LogSegment};
use crate::log::{FlushSync, LogError};
use crate::protocol::record_batch::split_batches;
use crate::storage::{Storage, StorageFile};

use super::PartitionLog;

/// `orders-0/00000000000000000042.cleaned`: a cleaned segment being written.
pub fn cleaned_name(directory: &str, base_offset: i64) -> String {
    offset_file_name(directory, base_offset, "cleaned")
}

/// `orders-0/00000000000000000042.swap`: a cleaned segment, durable, about to replace its log.
pub fn swap_name(directory: &str, base_offset: i64) -> String {
    offset_file_name(directory, base_offset, "swap")
}

/// The step a clean is at: what the fsync under way makes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanStage {
    /// The `.cleaned` files are written; their fsync is under way.
    Written,
    /// They are renamed to `.swap`; the directory sync is under way.
    Swapping,
    /// The `.swap` files replaced their segments; the directory sync is under way.
    Replaced,
}

/// A clean under way.
#[derive(Debug, Clone)]
pub(crate) struct Cleaning {
    /// `(base offset, offset the segment covers up to)` of each segment rewritten.
    segments: Vec<(i64, i64)>,
    stage: CleanStage,
}

/// What `start_clean` did: what the clean found, and the fsync to issue (`None`: nothing
/// changed, the clean is over).
pub type StartedClean<F> = (CleanStats, Option<FlushSync<F>>);

/// Each key's latest offset (Kafka's `OffsetMap`, without its size bound).
type OffsetMap = BTreeMap<Vec<u8>, i64>;

/// A segment read whole: base offset, the offset it covers up to, its bytes.
type SegmentBytes = (i64, i64, Vec<u8>);

/// The batches a clean keeps whole when it would otherwise drop them.
#[derive(Debug, Default)]
struct Keepers {
    /// Each producer id's last batch, by last offset: the producer state rebuilt from the log
    /// must still know the producer's last sequence (Kafka's `RETAIN_EMPTY`).
    last_of_producer: BTreeMap<i64, i64>,
    /// The first batch of each leader epoch, by base offset: the leader-epoch cache is rebuilt
    /// from batch headers on start-up (Kafka keeps it in `leader-epoch-checkpoint` instead), so
    /// dropping such a batch would move or lose an epoch's start and mislead a follower's
    /// divergence check.
    epoch_starts: std::collections::BTreeSet<i64>,
}

fn corrupt(base: i64, error: impl std::fmt::Display) -> LogError {
    LogError::Corrupt(format!("cleaning segment {base}: {error}"))
}

/// The bytes segment `base` holds after a clean: each batch kept, rewritten or dropped.
fn clean_segment(
    base: i64,
    bytes: &[u8],
    config: &CleanerConfig,
    latest: &BTreeMap<Vec<u8>, i64>,
    keepers: &Keepers,
    stats: &mut CleanStats,
) -> Result<Vec<u8>, LogError> {
    let mut cleaned = Vec::with_capacity(bytes.len());
    let mut keep = Vec::new();
    for (header, range) in split_batches(bytes).map_err(|error| corrupt(base, error))? {
        let batch = &bytes[range];
        if header.is_control() || header.is_transactional() {
            cleaned.extend_from_slice(batch);
            continue;
        }
        let section = records_section(batch, &header).map_err(|error| corrupt(base, error))?;
        let records = raw_records(&section, &header).map_err(|error| corrupt(base, error))?;
        stats.records_read += records.len() as u64;
        let decisions = decide(
            &header,
            &records,
            config.now_ms,
            |key| latest.get(key).copied(),
            &mut keep,
        );
        let horizon = delete_horizon(&header).or(decisions
            .needs_horizon
            .then(|| config.now_ms.saturating_add(config.delete_retention_ms)));
        let keeps_tombstone = records
            .iter()
            .zip(&keep)
            .any(|(record, kept)| *kept && record.tombstone);
        if keeps_tombstone {
            stats.next_delete_horizon = stats.next_delete_horizon.min(horizon).or(horizon);
        }
        let last_of_its_producer = header.producer_id >= 0
            && keepers.last_of_producer.get(&header.producer_id) == Some(&header.last_offset());
        let starts_an_epoch = keepers.epoch_starts.contains(&header.base_offset);
        if decisions.removed == 0 && !decisions.needs_horizon {
            cleaned.extend_from_slice(batch);
            continue;
        }
        stats.records_removed += decisions.removed;
        stats.tombstones_removed += decisions.tombstones_removed;
        if decisions.kept > 0 || last_of_its_producer || starts_an_epoch {
            // With nothing kept: an empty batch that still holds the producer's last sequence
            // or the epoch's start (Kafka's `RETAIN_EMPTY`).
            let set = decisions.needs_horizon.then_some(horizon).flatten();
            cleaned.extend(rebuild(batch, &header, &records, &keep, set));
        }
    }
    Ok(cleaned)
}

impl<S: Storage> PartitionLog<S> {
    /// The log's files, once what an interrupted clean left behind is completed or discarded:
    /// a `.cleaned` file goes, a `.swap` file replaces its segment (or goes if the segment is
    /// gone).
    pub(super) fn list_after_interrupted_clean(
        storage: &S,
        directory: &str,
    ) -> Result<Vec<String>, LogError> {
        let listed = storage.list(&format!("{directory}/"))?;
        let leftover = |name: &String| {
            parse_offset_file_name(directory, name, "cleaned").is_some()
                || parse_offset_file_name(directory, name, "swap").is_some()
        };
        if !listed.iter().any(leftover) {
            return Ok(listed);
        }
        let mut completed = 0;
        for name in &listed {
            if parse_offset_file_name(directory, name, "cleaned").is_some() {
                storage.remove(name)?;
            } else if let Some(base) = parse_offset_file_name(directory, name, "swap") {
                let log = segment_name(directory, base);
                if listed.contains(&log) {
                    storage.rename(name, &log)?;
                    completed += 1;
                } else {
                    storage.remove(name)?;
                }
            }
        }
        tracing::info!(directory, completed, "finished an interrupted clean");
        Ok(storage.list(&format!("{directory}/"))?)
    }

    /// Kafka's first uncleanable offset: the active segment's base, `limit` (the caller's
    /// bound: the high watermark and the recovery point), and the base of the first segment
    /// holding a record newer than `min.compaction.lag.ms`, whichever is lowest.
    pub fn first_uncleanable_offset(
        &self,
        limit: i64,
        config: &CleanerConfig,
    ) -> Result<i64, LogError> {
        let mut end = self.active_segment().base_offset.min(limit);
        if config.min_compaction_lag_ms > 0 {
            let newest_allowed = config.now_ms.saturating_sub(config.min_compaction_lag_ms);
            for segment in self.segments.values() {
                if segment.base_offset >= end {
                    break;
                }
                if segment.max_timestamp()? > newest_allowed {
                    end = segment.base_offset;
                    break;
                }
            }
        }
        Ok(end)
    }

    /// The closed segments wholly below `end`: what a clean up to `end` rewrites.
    fn cleanable_segments(&self, end: i64) -> impl Iterator<Item = &LogSegment<S::File>> {
        self.segments
            .values()
            .take(self.segments.len() - 1)
            .take_while(move |segment| segment.next_offset() <= end)
    }

    /// The dirty ratio's terms (Kafka's `LogToClean`): bytes of the cleanable segments from
    /// `first_dirty` on, and of every cleanable segment.
    pub fn cleanable_bytes(&self, first_dirty: i64, end: i64) -> (u64, u64) {
        let mut dirty = 0;
        let mut total = 0;
        for segment in self.cleanable_segments(end) {
            total += segment.size_bytes();
            if segment.next_offset() > first_dirty {
                dirty += segment.size_bytes();
            }
        }
        (dirty, total)
    }

    /// The step of the clean under way, if any.
    pub fn clean_stage(&self) -> Option<CleanStage> {
        self.cleaning.as_ref().map(|cleaning| cleaning.stage)
    }

    /// Step 1: finds each key's latest offset below `end` and writes the segments below it
    /// whose content changes to `.cleaned` files. Answers what it found and the fsync of those
    /// files (`None` when nothing changes).
    pub fn start_clean(
        &mut self,
        end: i64,
        config: &CleanerConfig,
    ) -> Result<StartedClean<S::File>, LogError> {
        assert!(self.cleaning.is_none(), "one clean at a time");
        assert!(self.config.compacted, "only a compacted log is cleaned");
        let (latest, contents) = self.latest_offsets(end)?;
        let keepers = self.keepers()?;
        let mut stats = CleanStats::default();
        let mut changed = Vec::new();
        for (base, next, bytes) in contents {
            let cleaned = clean_segment(base, &bytes, config, &latest, &keepers, &mut stats)?;
            stats.segments_read += 1;
            stats.bytes_before += bytes.len() as u64;
            stats.bytes_after += cleaned.len() as u64;
            if cleaned != bytes {
                let file = self.storage.open(&cleaned_name(&self.directory, base))?;
                file.set_len(0)?;
                file.write_all_at(&cleaned, 0)?;
                self.directory_changes += 1;
                changed.push((base, next, file));
            }
        }
        stats.segments_rewritten = changed.len() as u64;
        if changed.is_empty() {
            return Ok((stats, None));
        }
        let files = changed.iter().map(|(_, _, file)| file.clone()).collect();
        self.cleaning = Some(Cleaning {
            segments: changed
                .iter()
                .map(|(base, next, _)| (*base, *next))
                .collect(),
            stage: CleanStage::Written,
        });
        let sync = FlushSync {
            files,
            directories: Vec::new(),
        };
        Ok((stats, Some(sync)))
    }

    /// The batches that stay even if every record in them goes (a header walk of the log).
    fn keepers(&self) -> Result<Keepers, LogError> {
        let mut keepers = Keepers::default();
        let mut epoch = None;
        for segment in self.segments.values() {
            segment.batch_headers(|header| {
                if header.producer_id >= 0 {
                    keepers
                        .last_of_producer
                        .insert(header.producer_id, header.last_offset());
                }
                if epoch != Some(header.partition_leader_epoch) {
                    keepers.epoch_starts.insert(header.base_offset);
                    epoch = Some(header.partition_leader_epoch);
                }
            })?;
        }
        Ok(keepers)
    }

    /// Each key's latest offset over the closed segments below `end` (Kafka's offset map),
    /// and those segments' `(base offset, covered end, bytes)`.
    fn latest_offsets(&self, end: i64) -> Result<(OffsetMap, Vec<SegmentBytes>), LogError> {
        let mut latest: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        let mut contents = Vec::new();
        for segment in self.cleanable_segments(end) {
            let base = segment.base_offset;
            let bytes = segment.read_all()?;
            for (header, range) in split_batches(&bytes).map_err(|error| corrupt(base, error))? {
                if header.is_control() || header.is_transactional() {
                    continue;
                }
                let section = records_section(&bytes[range], &header)
                    .map_err(|error| corrupt(base, error))?;
                for record in
                    raw_records(&section, &header).map_err(|error| corrupt(base, error))?
                {
                    if let Some(key) = record.key {
                        latest.insert(key.to_vec(), header.base_offset + record.offset_delta);
                    }
                }
            }
            contents.push((base, segment.next_offset(), bytes));
        }
        Ok((latest, contents))
    }

    /// The sync of the clean's current step finished: takes the next step and answers its
    /// sync, or `None` when the clean is over (done, aborted, or failed: a failed step
    /// abandons the clean and answers the error).
    pub fn clean_step_done(
        &mut self,
        result: Result<(), String>,
    ) -> Result<Option<FlushSync<S::File>>, LogError> {
        let Some(cleaning) = self.cleaning.clone() else {
            return Ok(None); // aborted by a truncation or a retention deletion
        };
        if let Err(error) = result {
            self.abort_clean()?;
            return Err(LogError::Io(std::io::Error::other(error)));
        }
        let stepped = match cleaning.stage {
            CleanStage::Written => self.rename_cleaned(&cleaning),
            CleanStage::Swapping => self.replace_segments(&cleaning),
            CleanStage::Replaced => {
                self.cleaning = None;
                return Ok(None);
            }
        };
        if let Err(error) = stepped {
            self.abort_clean()?;
            return Err(error);
        }
        Ok(Some(FlushSync {
            files: Vec::new(),
            directories: vec![self.directory.clone()],
        }))
    }

    /// Step 2: every `.cleaned` file becomes a `.swap` file.
    fn rename_cleaned(&mut self, cleaning: &Cleaning) -> Result<(), LogError> {
        for (base, _) in &cleaning.segments {
            self.storage.rename(
                &cleaned_name(&self.directory, *base),
                &swap_name(&self.directory, *base),
            )?;
            self.directory_changes += 1;
        }
        self.set_clean_stage(CleanStage::Swapping);
        Ok(())
    }

    /// Step 3: every `.swap` file replaces its segment, on disk and in memory.
    fn replace_segments(&mut self, cleaning: &Cleaning) -> Result<(), LogError> {
        for (base, next) in &cleaning.segments {
            let log = segment_name(&self.directory, *base);
            self.storage
                .rename(&swap_name(&self.directory, *base), &log)?;
            self.directory_changes += 1;
            let file = self.storage.open(&log)?;
            let interval = self.config.index_interval_bytes;
            let mut segment = LogSegment::open_unscanned(file, *base, *next, interval, true)?;
            segment.ensure_loaded()?;
            let replaced = self.segments.insert(*base, segment);
            assert!(
                replaced.is_some(),
                "a clean replaces a segment the log still has"
            );
        }
        self.set_clean_stage(CleanStage::Replaced);
        Ok(())
    }

    fn set_clean_stage(&mut self, stage: CleanStage) {
        if let Some(cleaning) = &mut self.cleaning {
            cleaning.stage = stage;
        }
    }

    /// Abandons the clean under way: its `.cleaned` and `.swap` files go (after step 3 there
    /// are none: the cleaned segments are the log's).
    pub(super) fn abort_clean(&mut self) -> Result<(), LogError> {
        let Some(cleaning) = self.cleaning.take() else {
            return Ok(());
        };
        if cleaning.stage == CleanStage::Replaced {
            return Ok(());
        }
        for (base, _) in &cleaning.segments {
            self.storage.remove(&cleaned_name(&self.directory, *base))?;
            self.storage.remove(&swap_name(&self.directory, *base))?;
            self.directory_changes += 1;
        }
        Ok(())
    }
}
