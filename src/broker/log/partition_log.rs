//! One partition's log (Kafka's `UnifiedLog`, local part): a sorted set of segments, offset
//! assignment, rolling, reads as file ranges, the flush policy and crash recovery.
//!
//! Invariants (checked by [`PartitionLog::check_invariants`]):
//! `log_start_offset <= flushed_offset <= log_end_offset`; segments are contiguous in offsets;
//! only the last segment is written to.

use std::collections::{BTreeMap, BTreeSet};

use crate::protocol::record_batch::{assign_offsets, RecordBatchHeader};
use crate::runtime::storage::Storage;
use crate::types::Millis;

use super::segment::{parse_segment_name, LogSegment};
use super::LogError;

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
}

/// What recovery did on open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments opened.
    pub segments: u64,
    /// Valid batches found.
    pub batches: u64,
    /// Bytes truncated from torn or corrupt tails.
    pub truncated_bytes: u64,
    /// Segments deleted because an earlier segment was corrupt.
    pub deleted_segments: u64,
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

/// A partition's local log.
#[derive(Debug)]
pub struct PartitionLog<S: Storage> {
    storage: S,
    directory: String,
    config: LogConfig,
    segments: BTreeMap<i64, LogSegment<S::File>>,
    log_start_offset: i64,
    log_end_offset: i64,
    /// Everything below is durable (as far as this process knows): Kafka's recovery point.
    flushed_offset: i64,
    unflushed_messages: i64,
    /// Base offsets of segments written since the last flush was started.
    dirty_segments: BTreeSet<i64>,
    last_flush: Millis,
}

impl<S: Storage> PartitionLog<S> {
    /// Opens (or creates) the log in `directory`, recovering every segment.
    pub fn open(
        storage: S,
        directory: &str,
        config: LogConfig,
        now: Millis,
    ) -> Result<(Self, RecoveryReport), LogError> {
        let mut report = RecoveryReport::default();
        let mut segments = BTreeMap::new();
        let mut names: Vec<(i64, String)> = storage
            .list(&format!("{directory}/"))?
            .into_iter()
            .filter_map(|name| parse_segment_name(directory, &name).map(|base| (base, name)))
            .collect();
        names.sort();
        let mut corrupt_before = false;
        let mut expected_next: Option<i64> = None;
        for (base_offset, name) in names {
            if corrupt_before || expected_next.is_some_and(|next| next != base_offset) {
                // A gap or an earlier torn segment: everything after it is unreachable.
                storage.remove(&name)?;
                report.deleted_segments += 1;
                corrupt_before = true;
                continue;
            }
            let file = storage.open(&name)?;
            let (segment, recovery) =
                LogSegment::recover(file, base_offset, config.index_interval_bytes)?;
            report.segments += 1;
            report.batches += recovery.batches;
            report.truncated_bytes += recovery.truncated_bytes;
            corrupt_before = recovery.truncated_bytes > 0;
            expected_next = Some(segment.next_offset());
            segments.insert(base_offset, segment);
        }
        if segments.is_empty() {
            segments.insert(
                0,
                LogSegment::create(&storage, directory, 0, config.index_interval_bytes)?,
            );
        }
        let log_start_offset = *segments.keys().next().expect("at least one segment");
        let log_end_offset = segments
            .values()
            .next_back()
            .expect("at least one segment")
            .next_offset();
        let mut log = PartitionLog {
            storage,
            directory: directory.to_owned(),
            config,
            segments,
            log_start_offset,
            log_end_offset,
            flushed_offset: log_end_offset,
            unflushed_messages: 0,
            dirty_segments: BTreeSet::new(),
            last_flush: now,
        };
        if report.truncated_bytes > 0 || report.deleted_segments > 0 {
            // The truncation itself must become durable before anything is acknowledged.
            log.dirty_segments.insert(log.active_segment().base_offset);
        }
        log.check_invariants();
        Ok((log, report))
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

    /// Offset below which everything was flushed.
    pub fn flushed_offset(&self) -> i64 {
        self.flushed_offset
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
        let size = batch.len() as u64;
        if self.active_segment().size_bytes() > 0
            && self.active_segment().size_bytes() + size > self.config.segment_bytes
        {
            self.roll()?;
        }
        let segment = self
            .segments
            .values_mut()
            .next_back()
            .expect("a log always has a segment");
        segment.append(batch, &header)?;
        let dirty = segment.base_offset;
        self.dirty_segments.insert(dirty);
        self.log_end_offset = header.last_offset() + 1;
        self.unflushed_messages += i64::from(header.records_count.max(1));
        Ok(AppendInfo {
            base_offset,
            last_offset: header.last_offset(),
            flush_required: self.unflushed_messages >= self.config.flush_messages,
        })
    }

    fn roll(&mut self) -> Result<(), LogError> {
        let base_offset = self.log_end_offset;
        let segment = LogSegment::create(
            &self.storage,
            &self.directory,
            base_offset,
            self.config.index_interval_bytes,
        )?;
        self.segments.insert(base_offset, segment);
        Ok(())
    }

    /// Starts a flush of everything appended so far: returns the files to fsync and the offset
    /// that will be durable once they are. `None` if nothing is unflushed.
    pub fn start_flush(&mut self, now: Millis) -> Option<(Vec<S::File>, i64)> {
        self.last_flush = now;
        self.unflushed_messages = 0;
        if self.dirty_segments.is_empty() {
            return None;
        }
        let files = std::mem::take(&mut self.dirty_segments)
            .into_iter()
            .filter_map(|base_offset| {
                self.segments
                    .get(&base_offset)
                    .map(|segment| segment.file().clone())
            })
            .collect();
        Some((files, self.log_end_offset))
    }

    /// Records that a flush started earlier completed.
    pub fn flush_completed(&mut self, durable_offset: i64) {
        assert!(
            durable_offset <= self.log_end_offset,
            "flushed past the log end"
        );
        self.flushed_offset = self.flushed_offset.max(durable_offset);
    }

    /// When `flush.ms` next requires a flush, if there is unflushed data.
    pub fn next_flush_deadline(&self) -> Option<Millis> {
        let interval = self.config.flush_ms?;
        (!self.dirty_segments.is_empty()).then(|| self.last_flush.plus(interval))
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

    /// Offset of the first batch with a timestamp at or after `timestamp_ms` (ListOffsets).
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<i64>, LogError> {
        for segment in self.segments.values() {
            if let Some(offset) = segment.offset_for_timestamp(timestamp_ms)? {
                return Ok(Some(offset.max(self.log_start_offset)));
            }
        }
        Ok(None)
    }

    /// `(offset, timestamp)` of the record batch with the largest timestamp.
    pub fn offset_of_max_timestamp(&self) -> Result<Option<(i64, i64)>, LogError> {
        let best = self
            .segments
            .values()
            .max_by_key(|segment| segment.max_timestamp());
        match best {
            Some(segment) if segment.max_timestamp() >= 0 => segment.offset_of_max_timestamp(),
            _ => Ok(None),
        }
    }

    /// Cross-field invariants; a violation is a bug.
    pub fn check_invariants(&self) {
        assert!(
            self.log_start_offset <= self.flushed_offset,
            "log start above flushed offset"
        );
        assert!(
            self.flushed_offset <= self.log_end_offset,
            "flushed offset above log end"
        );
        let mut expected = self.log_start_offset;
        for (base_offset, segment) in &self.segments {
            assert_eq!(
                *base_offset, segment.base_offset,
                "segment keyed by its base offset"
            );
            assert_eq!(segment.base_offset, expected, "segments are contiguous");
            expected = segment.next_offset();
        }
        assert_eq!(
            expected, self.log_end_offset,
            "log end is the last segment's end"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::record_batch::{build_batch, validate_batch};
    use crate::runtime::memory_storage::MemoryStorage;
    use crate::runtime::storage::StorageFile;

    fn config(segment_bytes: u64, flush_messages: i64) -> LogConfig {
        LogConfig {
            segment_bytes,
            index_interval_bytes: 100,
            flush_messages,
            flush_ms: None,
        }
    }

    fn append_value(log: &mut PartitionLog<MemoryStorage>, value: &str) -> AppendInfo {
        let mut batch = build_batch(&[(None, Some(value.as_bytes()))], 1).to_vec();
        let header = validate_batch(&batch).expect("valid");
        log.append(&mut batch, &header, 0).expect("append")
    }

    #[test]
    fn offsets_are_assigned_in_order_across_segment_rolls_and_survive_reopen() {
        let storage = MemoryStorage::new();
        let (mut log, _) =
            PartitionLog::open(storage.clone(), "t-0", config(200, i64::MAX), Millis(0))
                .expect("open");
        for index in 0..10 {
            let info = append_value(&mut log, &format!("value-{index}"));
            assert_eq!(info.base_offset, index);
            assert!(!info.flush_required);
        }
        assert!(log.segment_count() > 1, "200-byte segments must roll");
        log.check_invariants();
        let LogRead::Records { position, len, .. } = log.read(4, 10, 1).expect("read") else {
            panic!("records expected")
        };
        assert!(
            len > 0,
            "the first batch is returned even above max_bytes (KIP-74)"
        );
        let _ = position;
        assert!(matches!(
            log.read(10, 10, 1000).expect("read"),
            LogRead::Empty
        ));
        assert!(matches!(
            log.read(11, 10, 1000).expect("read"),
            LogRead::OutOfRange
        ));
        drop(log);
        let (log, report) =
            PartitionLog::open(storage, "t-0", config(200, i64::MAX), Millis(0)).expect("reopen");
        assert_eq!(log.log_end_offset(), 10);
        assert_eq!(report.batches, 10);
        assert_eq!(report.truncated_bytes, 0);
    }

    #[test]
    fn recovery_truncates_a_torn_tail() {
        let storage = MemoryStorage::new();
        let (mut log, _) =
            PartitionLog::open(storage.clone(), "t-0", config(1 << 20, i64::MAX), Millis(0))
                .expect("open");
        for index in 0..3 {
            append_value(&mut log, &format!("value-{index}"));
        }
        drop(log);
        let file = storage
            .open("t-0/00000000000000000000.log")
            .expect("segment");
        let len = file.len().expect("len");
        file.set_len(len - 5).expect("tear");
        let (log, report) =
            PartitionLog::open(storage, "t-0", config(1 << 20, i64::MAX), Millis(0))
                .expect("reopen");
        assert_eq!(log.log_end_offset(), 2, "the torn third batch is gone");
        assert!(report.truncated_bytes > 0);
    }

    #[test]
    fn the_flush_policy_asks_for_an_fsync_every_flush_messages() {
        let storage = MemoryStorage::new();
        let (mut log, _) =
            PartitionLog::open(storage, "t-0", config(1 << 20, 2), Millis(0)).expect("open");
        assert!(!append_value(&mut log, "a").flush_required);
        assert!(append_value(&mut log, "b").flush_required);
        let (files, offset) = log.start_flush(Millis(5)).expect("dirty");
        assert_eq!((files.len(), offset), (1, 2));
        log.flush_completed(offset);
        assert_eq!(log.flushed_offset(), 2);
        assert!(!append_value(&mut log, "c").flush_required);
    }
}
