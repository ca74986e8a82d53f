//! One segment file (Kafka's `LogSegment`): batches appended back to back, each starting with
//! its RecordBatch v2 header, named after the segment's base offset.
//!
//! Invariants: batches are contiguous from position 0 to `size_bytes`; their offsets are
//! contiguous from `base_offset` to `next_offset` in an ordinary log (a gap there means damage:
//! the base offset is outside the CRC), and only strictly increasing in a compacted one
//! (`gaps`: the cleaner removes records and batches, and a follower copies its leader's gaps;
//! a closed compacted segment then covers offsets up to the next segment's base even if its
//! last batch ends earlier); every batch's CRC was checked on append (by
//! the caller) or on recovery (here). A segment below the recovery point is opened without a
//! scan ([`LogSegment::open_unscanned`]): its sparse index is built on first use, and any batch
//! found out of shape then is reported as corruption, never silently skipped.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::protocol::record_batch::{
    decode_batch, validate_batch, Record, RecordBatchHeader, RECORD_BATCH_HEADER_BYTES,
};
use crate::storage::{Storage, StorageFile};

use super::offset_index::OffsetIndex;
use super::LogError;

/// What recovery found in a segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentRecovery {
    /// Valid batches kept.
    pub batches: u64,
    /// Bytes cut off the end (a torn or corrupt tail past the recovery point).
    pub truncated_bytes: u64,
    /// A batch below the recovery point failed validation: the segment was left untouched and
    /// holds only the batches before it.
    pub corruption: Option<String>,
}

/// A segment file and its sparse index.
#[derive(Debug)]
pub struct LogSegment<F> {
    /// Offset of the first batch this segment may hold.
    pub base_offset: i64,
    file: F,
    size_bytes: u64,
    /// Offset after the last batch (`base_offset` when empty).
    next_offset: i64,
    /// Largest batch `maxTimestamp` seen (for ListOffsets by timestamp); -1 when empty.
    max_timestamp: i64,
    /// The newest timestamp of the first batch (Kafka's `rollingBasedTimestamp`), once loaded.
    first_batch_timestamp: Option<i64>,
    /// Whether `index` and `max_timestamp` cover the whole segment (false until first use for a
    /// segment opened without a scan).
    loaded: bool,
    index: OffsetIndex,
    bytes_since_index_entry: u64,
    index_interval_bytes: u64,
    /// Offsets may skip between batches (a compacted log's segment).
    gaps: bool,
    /// `(base offset, byte position)` of the newest batches tracked, oldest first (at most
    /// [`RECENT_BATCHES`]): a fetch mostly starts in one of them (a follower or a consumer at
    /// the log end), and finds it here instead of walking headers from the last index entry.
    recent: VecDeque<(i64, u64)>,
}

/// How many of the newest batches a segment remembers the positions of.
const RECENT_BATCHES: usize = 8;

/// `orders-0/00000000000000000042.log`.
pub fn segment_name(directory: &str, base_offset: i64) -> String {
    offset_file_name(directory, base_offset, "log")
}

/// The base offset encoded in a segment file name.
pub fn parse_segment_name(directory: &str, name: &str) -> Option<i64> {
    parse_offset_file_name(directory, name, "log")
}

/// A log file named by an offset, as Kafka names them: `{directory}/{offset:020}.{extension}`.
pub(crate) fn offset_file_name(directory: &str, offset: i64, extension: &str) -> String {
    format!("{directory}/{offset:020}.{extension}")
}

/// The offset in the name of a file of `directory` named by [`offset_file_name`] with
/// `extension`.
pub(crate) fn parse_offset_file_name(directory: &str, name: &str, extension: &str) -> Option<i64> {
    let file = name.strip_prefix(directory)?.strip_prefix('/')?;
    let digits = file.strip_suffix(extension)?.strip_suffix('.')?;
    (digits.len() == 20).then(|| digits.parse().ok()).flatten()
}

impl<F: StorageFile> LogSegment<F> {
    /// Creates an empty segment (truncating any leftover file of that name).
    pub fn create<S: Storage<File = F>>(
        storage: &S,
        directory: &str,
        base_offset: i64,
        index_interval_bytes: u64,
        gaps: bool,
    ) -> Result<LogSegment<F>, LogError> {
        let file = storage.open(&segment_name(directory, base_offset))?;
        file.set_len(0)?;
        Ok(LogSegment::empty(
            file,
            base_offset,
            index_interval_bytes,
            gaps,
        ))
    }

    /// A segment over `file` before any batch is tracked.
    fn empty(file: F, base_offset: i64, index_interval_bytes: u64, gaps: bool) -> LogSegment<F> {
        LogSegment {
            base_offset,
            file,
            size_bytes: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            first_batch_timestamp: None,
            loaded: true,
            index: OffsetIndex::default(),
            bytes_since_index_entry: 0,
            index_interval_bytes,
            gaps,
            recent: VecDeque::new(),
        }
    }

    /// Whether `base_offset` may follow `next` in this segment: the next offset in an ordinary
    /// log, any later one in a compacted log.
    fn follows(&self, base_offset: i64, next: i64) -> bool {
        base_offset == next || (self.gaps && base_offset > next)
    }

    /// A closed compacted segment covers offsets up to `end` (the next segment's base), past
    /// its last batch: what the cleaner removed, or a gap its leader had.
    pub fn extend_to(&mut self, end: i64) {
        assert!(
            end == self.next_offset || (self.gaps && end > self.next_offset),
            "only a compacted segment ends past its last batch"
        );
        self.next_offset = end;
    }

    /// Opens a segment that lies wholly below the recovery point without reading it: its end
    /// offset is the next segment's base offset. The index is built on first use.
    pub fn open_unscanned(
        file: F,
        base_offset: i64,
        next_offset: i64,
        index_interval_bytes: u64,
        gaps: bool,
    ) -> Result<LogSegment<F>, LogError> {
        assert!(next_offset >= base_offset, "a segment ends after it starts");
        let size_bytes = file.len()?;
        let mut segment = LogSegment::empty(file, base_offset, index_interval_bytes, gaps);
        segment.size_bytes = size_bytes;
        segment.next_offset = next_offset;
        segment.loaded = false;
        Ok(segment)
    }

    /// Opens the active segment after a clean shutdown: a walk over the batch headers (no CRC
    /// check, no rewrite) finds its end and builds its index. `Err` if its shape is wrong; the
    /// caller then recovers it instead.
    pub fn open_trusted(
        file: F,
        base_offset: i64,
        index_interval_bytes: u64,
        gaps: bool,
    ) -> Result<LogSegment<F>, LogError> {
        let mut probe = LogSegment::empty(file, base_offset, index_interval_bytes, gaps);
        probe.size_bytes = probe.file.len()?;
        probe.next_offset = i64::MAX; // the end is what the walk finds
        probe.rebuilt_by_walk()
    }

    /// Opens an existing segment, validating every batch (header, length, CRC-32C, contiguous
    /// offsets, or increasing ones with `gaps`). At the first bad batch: if it lies past `recovery_point` the rest of the file
    /// is a torn tail and is truncated; below it, nothing is touched and the corruption is
    /// reported (fsynced data is never deleted). Valid batches past the recovery point are
    /// written again so that the next fsync covers them even if an earlier failed fsync left
    /// their pages clean but not on disk.
    pub fn recover(
        file: F,
        base_offset: i64,
        index_interval_bytes: u64,
        recovery_point: i64,
        gaps: bool,
    ) -> Result<(LogSegment<F>, SegmentRecovery), LogError> {
        let file_len = file.len()?;
        let mut segment = LogSegment::empty(file, base_offset, index_interval_bytes, gaps);
        let mut report = SegmentRecovery::default();
        let mut buffer = Vec::new();
        while segment.size_bytes < file_len {
            let position = segment.size_bytes;
            match segment.read_valid_batch(position, file_len, &mut buffer)? {
                Ok(header) => {
                    if header.last_offset() >= recovery_point {
                        segment.file.write_all_at(&buffer, position)?;
                    }
                    segment.track_append(&header, position);
                    report.batches += 1;
                }
                Err(reason) if segment.next_offset < recovery_point => {
                    report.corruption = Some(format!(
                        "{reason} at byte {position}, offset {} (below the recovery point {recovery_point})",
                        segment.next_offset
                    ));
                    return Ok((segment, report));
                }
                Err(_) => break,
            }
        }
        if segment.size_bytes < file_len {
            report.truncated_bytes = file_len - segment.size_bytes;
            segment.file.set_len(segment.size_bytes)?;
        }
        Ok((segment, report))
    }

    /// Reads and checks the batch at `position`: `Err(reason)` if it is torn, corrupt or out of
    /// order; the batch bytes are left in `buffer`.
    fn read_valid_batch(
        &self,
        position: u64,
        file_len: u64,
        buffer: &mut Vec<u8>,
    ) -> Result<Result<RecordBatchHeader, String>, LogError> {
        if file_len - position < RECORD_BATCH_HEADER_BYTES as u64 {
            return Ok(Err("a partial batch header".to_owned()));
        }
        let mut head = [0u8; RECORD_BATCH_HEADER_BYTES];
        self.file.read_exact_at(&mut head, position)?;
        let header = match RecordBatchHeader::parse(&head) {
            Ok(header) => header,
            Err(error) => return Ok(Err(error.to_string())),
        };
        let size = header.size_bytes() as u64;
        if size > file_len - position {
            return Ok(Err(format!(
                "a batch of {size} bytes past the end of the file"
            )));
        }
        if !self.follows(header.base_offset, self.next_offset) {
            return Ok(Err(format!(
                "batch offset {} where {} was expected",
                header.base_offset, self.next_offset
            )));
        }
        buffer.resize(size as usize, 0);
        self.file.read_exact_at(buffer, position)?;
        Ok(validate_batch(buffer).map_err(|error| error.to_string()))
    }

    fn track_append(&mut self, header: &RecordBatchHeader, position: u64) {
        let size = header.size_bytes() as u64;
        if self.index.is_empty() || self.bytes_since_index_entry >= self.index_interval_bytes {
            self.index.append(header.base_offset, position);
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += size;
        if self.recent.len() == RECENT_BATCHES {
            self.recent.pop_front();
        }
        self.recent.push_back((header.base_offset, position));
        self.size_bytes = position + size;
        self.next_offset = header.last_offset() + 1;
        self.max_timestamp = self.max_timestamp.max(header.max_timestamp);
        if self.first_batch_timestamp.is_none() {
            self.first_batch_timestamp = Some(header.max_timestamp);
        }
    }

    /// Builds the index of a segment opened without a scan (a header walk, no CRC check).
    /// Corruption found here is an error: the caller takes the partition offline.
    pub fn ensure_loaded(&mut self) -> Result<(), LogError> {
        if self.loaded {
            return Ok(());
        }
        let expected_next = self.next_offset;
        let mut rebuilt = self.rebuilt_by_walk()?;
        if self.gaps && rebuilt.next_offset <= expected_next {
            rebuilt.extend_to(expected_next);
        }
        if rebuilt.next_offset != expected_next {
            return Err(LogError::Corrupt(format!(
                "segment {} ends at offset {}, the next segment starts at {expected_next}",
                self.base_offset, rebuilt.next_offset
            )));
        }
        *self = rebuilt;
        Ok(())
    }

    /// The loaded segment a header walk of this one finds: its end, index and timestamps.
    fn rebuilt_by_walk(&self) -> Result<LogSegment<F>, LogError> {
        let mut headers = Vec::new();
        self.walk(|position, header| headers.push((position, *header)))?;
        let mut rebuilt = LogSegment::empty(
            self.file.clone(),
            self.base_offset,
            self.index_interval_bytes,
            self.gaps,
        );
        for (position, header) in &headers {
            rebuilt.track_append(header, *position);
        }
        Ok(rebuilt)
    }

    /// Visits every batch header in order, checking the segment's shape: headers parse,
    /// batches fit in the file, offsets run contiguously from `base_offset` to `next_offset`
    /// (increase, with `gaps`).
    fn walk(&self, mut visit: impl FnMut(u64, &RecordBatchHeader)) -> Result<(), LogError> {
        let mut position = 0;
        let mut next = self.base_offset;
        while position < self.size_bytes {
            let header = self.header_at(position)?;
            self.check_shape(position, &header, next)?;
            visit(position, &header);
            next = header.last_offset() + 1;
            position += header.size_bytes() as u64;
        }
        Ok(())
    }

    fn check_shape(
        &self,
        position: u64,
        header: &RecordBatchHeader,
        next: i64,
    ) -> Result<(), LogError> {
        let fits = position + header.size_bytes() as u64 <= self.size_bytes;
        let ordered =
            self.follows(header.base_offset, next) && header.last_offset() < self.next_offset;
        if fits && ordered {
            return Ok(());
        }
        Err(LogError::Corrupt(format!(
            "segment {}: batch at byte {position} (offsets {}..={}, {} bytes) does not fit the segment",
            self.base_offset,
            header.base_offset,
            header.last_offset(),
            header.size_bytes()
        )))
    }

    /// Every batch's leader epoch and base offset, in order (a header walk).
    pub fn batch_epochs(&self, mut visit: impl FnMut(i32, i64)) -> Result<(), LogError> {
        self.walk(|_, header| visit(header.partition_leader_epoch, header.base_offset))
    }

    /// Every batch's header, in order (a header walk).
    pub fn batch_headers(&self, mut visit: impl FnMut(&RecordBatchHeader)) -> Result<(), LogError> {
        self.walk(|_, header| visit(header))
    }

    /// Removes every batch whose last offset is at or past `offset` (Kafka's
    /// `LogSegment.truncateTo`: a batch holding `offset` goes whole). Returns the bytes removed.
    pub fn truncate_to(&mut self, offset: i64) -> Result<u64, LogError> {
        self.ensure_loaded()?;
        let mut cut = None;
        self.walk(|position, header| {
            if cut.is_none() && header.last_offset() >= offset {
                cut = Some(position);
            }
        })?;
        let Some(position) = cut else {
            return Ok(0);
        };
        let removed = self.size_bytes - position;
        self.file.set_len(position)?;
        self.size_bytes = position;
        self.next_offset = i64::MAX; // the walk below finds the end
        *self = self.rebuilt_by_walk()?;
        Ok(removed)
    }

    /// Appends a batch whose offsets are already assigned and whose CRC was checked.
    pub fn append(&mut self, batch: &[u8], header: &RecordBatchHeader) -> Result<(), LogError> {
        assert!(self.loaded, "appends go to a loaded segment");
        assert_eq!(
            header.size_bytes(),
            batch.len(),
            "header and batch disagree on size"
        );
        assert!(
            self.follows(header.base_offset, self.next_offset),
            "offsets are contiguous within a segment (increasing, in a compacted log)"
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
    /// The newest timestamp of the first batch, if the segment is loaded and has one (a
    /// timestamp of -1, Kafka's NO_TIMESTAMP, counts as none).
    pub fn first_batch_timestamp(&self) -> Option<i64> {
        self.first_batch_timestamp
            .filter(|timestamp| *timestamp >= 0)
    }

    /// The offset after the last batch.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// Largest batch timestamp (-1 if none).
    pub fn max_timestamp(&self) -> Result<i64, LogError> {
        if self.loaded {
            return Ok(self.max_timestamp);
        }
        let mut max = -1;
        self.walk(|_, header| max = max.max(header.max_timestamp))?;
        Ok(max)
    }

    /// The segment file.
    pub fn file(&self) -> &F {
        &self.file
    }

    /// Every byte of the segment (the cleaner reads a closed segment whole).
    pub fn read_all(&self) -> Result<Vec<u8>, LogError> {
        let mut bytes = vec![0_u8; self.size_bytes as usize];
        self.file.read_exact_at(&mut bytes, 0)?;
        Ok(bytes)
    }

    fn header_at(&self, position: u64) -> Result<RecordBatchHeader, LogError> {
        let mut head = [0u8; RECORD_BATCH_HEADER_BYTES];
        if position + RECORD_BATCH_HEADER_BYTES as u64 > self.size_bytes {
            return Err(LogError::Corrupt(format!(
                "segment {}: a partial batch header at byte {position}",
                self.base_offset
            )));
        }
        self.file.read_exact_at(&mut head, position)?;
        RecordBatchHeader::parse(&head).map_err(|error| {
            LogError::Corrupt(format!(
                "segment {}: batch at byte {position}: {error}",
                self.base_offset
            ))
        })
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
        let (mut next, mut position) = self
            .index
            .lookup(start_offset)
            .unwrap_or((self.base_offset, 0));
        // The newest batch starting at or before `start_offset`, if it is one of the recent
        // ones and lies past the index entry: the walk starts there.
        if let Some(&(base, at)) = self
            .recent
            .iter()
            .rev()
            .find(|(base, _)| *base <= start_offset)
        {
            if base > next {
                (next, position) = (base, at);
            }
        }
        let mut start = None;
        while position < self.size_bytes {
            let header = self.header_at(position)?;
            self.check_shape(position, &header, next)?;
            if header.base_offset >= end_offset {
                break;
            }
            let size = header.size_bytes() as u64;
            match start {
                None if header.last_offset() >= start_offset => start = Some(position),
                Some(first) if position + size - first > max_bytes => break,
                _ => {}
            }
            next = header.last_offset() + 1;
            position += size;
        }
        Ok(start.map(|first| (first, position - first)))
    }

    /// `(offset, timestamp)` of the first record whose timestamp is at least `timestamp_ms`
    /// (Kafka's `LogSegment.findOffsetByTimestamp`): the first batch whose max timestamp
    /// reaches it, then the first record in it that does (a compressed batch is decompressed
    /// for it, as Kafka iterates its records).
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>, LogError> {
        if self.loaded && self.max_timestamp < timestamp_ms {
            return Ok(None);
        }
        let mut found = None;
        self.walk(|position, header| {
            if found.is_none() && header.max_timestamp >= timestamp_ms {
                found = Some((position, *header));
            }
        })?;
        let Some((position, header)) = found else {
            return Ok(None);
        };
        if header.is_control() {
            return Ok(Some((header.base_offset, header.max_timestamp)));
        }
        let record = self
            .records_at(position, &header)?
            .into_iter()
            .find(|record| record.timestamp_ms >= timestamp_ms)
            .map(|record| (record.offset, record.timestamp_ms));
        // A batch whose max timestamp lies about its records: the batch answers.
        Ok(Some(
            record.unwrap_or((header.base_offset, header.max_timestamp)),
        ))
    }

    /// The records of the batch at byte `position` (decompressed if need be).
    fn records_at(
        &self,
        position: u64,
        header: &RecordBatchHeader,
    ) -> Result<Vec<Record>, LogError> {
        let mut bytes = vec![0_u8; header.size_bytes()];
        self.file.read_exact_at(&mut bytes, position)?;
        let len = bytes.len();
        decode_batch(&Bytes::from(bytes), header, 0..len).map_err(|error| {
            LogError::Corrupt(format!(
                "segment {}: batch at byte {position}: {error}",
                self.base_offset
            ))
        })
    }

    /// `(offset, timestamp)` of the first record holding the largest timestamp (ListOffsets -3,
    /// as Kafka answers it since 3.8): the first batch with the largest max timestamp, then its
    /// first record carrying it (a compressed batch is decompressed for it). A control batch,
    /// or one whose max timestamp lies about its records, answers with its last offset.
    pub fn offset_of_max_timestamp(&self) -> Result<Option<(i64, i64)>, LogError> {
        let mut best: Option<(u64, RecordBatchHeader)> = None;
        self.walk(|position, header| {
            if best.is_none_or(|(_, best)| header.max_timestamp > best.max_timestamp) {
                best = Some((position, *header));
            }
        })?;
        let Some((position, header)) = best else {
            return Ok(None);
        };
        let fallback = (header.last_offset(), header.max_timestamp);
        if header.is_control() {
            return Ok(Some(fallback));
        }
        let record = self
            .records_at(position, &header)?
            .into_iter()
            .find(|record| record.timestamp_ms == header.max_timestamp)
            .map(|record| (record.offset, record.timestamp_ms));
        Ok(Some(record.unwrap_or(fallback)))
    }
}
