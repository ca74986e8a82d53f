//! One segment file (Kafka's `LogSegment`): batches appended back to back, each starting with
//! its RecordBatch v2 header, named after the segment's base offset.
//!
//! Invariants: batches are contiguous from position 0 to `size_bytes`; their base offsets
//! increase; every batch's CRC was checked on append (by the caller) and on recovery (here).

use crate::protocol::record_batch::{validate_batch, RecordBatchHeader, RECORD_BATCH_HEADER_BYTES};
use crate::runtime::storage::{Storage, StorageFile};

use super::offset_index::OffsetIndex;
use super::LogError;

/// What recovery found in a segment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentRecovery {
    /// Valid batches kept.
    pub batches: u64,
    /// Bytes cut off the end (torn or corrupt tail).
    pub truncated_bytes: u64,
}

/// A segment file and its in-memory sparse index.
#[derive(Debug)]
pub struct LogSegment<F> {
    /// Offset of the first batch this segment may hold.
    pub base_offset: i64,
    file: F,
    size_bytes: u64,
    /// Offset after the last batch (`base_offset` when empty).
    next_offset: i64,
    /// Largest batch `maxTimestamp` seen (for ListOffsets by timestamp).
    max_timestamp: i64,
    index: OffsetIndex,
    bytes_since_index_entry: u64,
    index_interval_bytes: u64,
}

/// `orders-0/00000000000000000042.log`.
pub fn segment_name(directory: &str, base_offset: i64) -> String {
    format!("{directory}/{base_offset:020}.log")
}

/// The base offset encoded in a segment file name.
pub fn parse_segment_name(directory: &str, name: &str) -> Option<i64> {
    let file = name.strip_prefix(directory)?.strip_prefix('/')?;
    let digits = file.strip_suffix(".log")?;
    (digits.len() == 20).then(|| digits.parse().ok()).flatten()
}

impl<F: StorageFile> LogSegment<F> {
    /// Creates an empty segment (truncating any leftover file of that name).
    pub fn create<S: Storage<File = F>>(
        storage: &S,
        directory: &str,
        base_offset: i64,
        index_interval_bytes: u64,
    ) -> Result<LogSegment<F>, LogError> {
        let file = storage.open(&segment_name(directory, base_offset))?;
        file.set_len(0)?;
        Ok(LogSegment::empty(file, base_offset, index_interval_bytes))
    }

    /// A segment over `file` before any batch is tracked.
    fn empty(file: F, base_offset: i64, index_interval_bytes: u64) -> LogSegment<F> {
        LogSegment {
            base_offset,
            file,
            size_bytes: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            index: OffsetIndex::default(),
            bytes_since_index_entry: 0,
            index_interval_bytes,
        }
    }

    /// Opens an existing segment, validating every batch (header, length, CRC-32C, increasing
    /// offsets) and truncating the file at the first bad one: a torn tail after a crash.
    pub fn recover(
        file: F,
        base_offset: i64,
        index_interval_bytes: u64,
    ) -> Result<(LogSegment<F>, SegmentRecovery), LogError> {
        let file_len = file.len()?;
        let mut segment = LogSegment::empty(file, base_offset, index_interval_bytes);
        let mut report = SegmentRecovery::default();
        let mut buffer = Vec::new();
        while segment.size_bytes < file_len {
            let position = segment.size_bytes;
            let Some(header) = segment.read_valid_batch(position, file_len, &mut buffer)? else {
                break;
            };
            segment.track_append(&header, position);
            report.batches += 1;
        }
        if segment.size_bytes < file_len {
            report.truncated_bytes = file_len - segment.size_bytes;
            segment.file.set_len(segment.size_bytes)?;
        }
        Ok((segment, report))
    }

    /// Reads and checks the batch at `position`; `None` if it is torn, corrupt or out of order.
    fn read_valid_batch(
        &self,
        position: u64,
        file_len: u64,
        buffer: &mut Vec<u8>,
    ) -> Result<Option<RecordBatchHeader>, LogError> {
        if file_len - position < RECORD_BATCH_HEADER_BYTES as u64 {
            return Ok(None);
        }
        let mut head = [0u8; RECORD_BATCH_HEADER_BYTES];
        self.file.read_exact_at(&mut head, position)?;
        let Ok(header) = RecordBatchHeader::parse(&head) else {
            return Ok(None);
        };
        let size = header.size_bytes() as u64;
        if size > file_len - position || header.base_offset < self.next_offset {
            return Ok(None);
        }
        buffer.resize(size as usize, 0);
        self.file.read_exact_at(buffer, position)?;
        Ok(validate_batch(buffer).ok())
    }

    fn track_append(&mut self, header: &RecordBatchHeader, position: u64) {
        let size = header.size_bytes() as u64;
        if self.index.is_empty() || self.bytes_since_index_entry >= self.index_interval_bytes {
            self.index.append(header.base_offset, position);
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += size;
        self.size_bytes = position + size;
        self.next_offset = header.last_offset() + 1;
        self.max_timestamp = self.max_timestamp.max(header.max_timestamp);
    }

    /// Appends a batch whose offsets are already assigned and whose CRC was checked.
    pub fn append(&mut self, batch: &[u8], header: &RecordBatchHeader) -> Result<(), LogError> {
        assert_eq!(
            header.size_bytes(),
            batch.len(),
            "header and batch disagree on size"
        );
        assert!(
            header.base_offset >= self.next_offset,
            "offsets must increase within a segment"
        );
        self.file.write_all_at(batch, self.size_bytes)?;
        let position = self.size_bytes;
        self.track_append(header, position);
        Ok(())
    }

    /// Bytes in the segment.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Offset after the last batch.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// Largest batch timestamp.
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }

    /// The segment file.
    pub fn file(&self) -> &F {
        &self.file
    }

    fn header_at(&self, position: u64) -> Result<RecordBatchHeader, LogError> {
        let mut head = [0u8; RECORD_BATCH_HEADER_BYTES];
        self.file.read_exact_at(&mut head, position)?;
        RecordBatchHeader::parse(&head)
            .map_err(|error| LogError::Corrupt(format!("batch at {position}: {error}")))
    }

    /// The byte range of whole batches starting with the one that contains `start_offset`,
    /// stopping before `end_offset` (exclusive) and, after the first batch, before `max_bytes`
    /// (KIP-74: the first batch is returned even if larger). `None` if nothing qualifies.
    pub fn slice(
        &self,
        start_offset: i64,
        end_offset: i64,
        max_bytes: u64,
    ) -> Result<Option<(u64, u64)>, LogError> {
        let mut position = self
            .index
            .lookup(start_offset)
            .map_or(0, |(_, position)| position);
        let mut start = None;
        while position < self.size_bytes {
            let header = self.header_at(position)?;
            if header.base_offset >= end_offset {
                break;
            }
            let size = header.size_bytes() as u64;
            match start {
                None if header.last_offset() >= start_offset => start = Some(position),
                Some(first) if position + size - first > max_bytes => break,
                _ => {}
            }
            position += size;
        }
        Ok(start.map(|first| (first, position - first)))
    }

    /// Offset of the first batch whose max timestamp is at least `timestamp_ms`.
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<i64>, LogError> {
        if self.max_timestamp < timestamp_ms {
            return Ok(None);
        }
        let mut position = 0;
        while position < self.size_bytes {
            let header = self.header_at(position)?;
            if header.max_timestamp >= timestamp_ms {
                return Ok(Some(header.base_offset));
            }
            position += header.size_bytes() as u64;
        }
        Ok(None)
    }

    /// `(offset, timestamp)` of the batch holding the largest timestamp (ListOffsets -3).
    pub fn offset_of_max_timestamp(&self) -> Result<Option<(i64, i64)>, LogError> {
        let mut best: Option<(i64, i64)> = None;
        let mut position = 0;
        while position < self.size_bytes {
            let header = self.header_at(position)?;
            if best.is_none_or(|(_, timestamp)| header.max_timestamp > timestamp) {
                best = Some((header.last_offset(), header.max_timestamp));
            }
            position += header.size_bytes() as u64;
        }
        Ok(best)
    }
}
