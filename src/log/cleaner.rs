//! Log compaction's record filter (Kafka's `MemoryRecords.filterTo` with the cleaner's
//! `shouldRetainRecord`): which records of a batch a cleaned segment keeps, and the batch that
//! holds them. The driving (which segments, the crash-safe swap) is in
//! `partition_log::cleaning`; the schedule in `broker::cleaner`.
//!
//! A record is kept if it is the latest of its key over the cleanable range; a record without a
//! key is dropped (a compacted topic refuses them on produce); a tombstone (null value) is kept
//! until its batch's delete horizon has passed. As in Kafka since KIP-534, the horizon lives in
//! the batch: the first clean that keeps a tombstone sets it to `now + delete.retention.ms` in
//! the batch's base timestamp and flags it in the attributes (bit 6), and the record timestamps
//! are re-expressed as deltas from it, so each replica's cleaner knows from the data alone when
//! a tombstone may go.
//!
//! A batch that keeps some records is rewritten with its original base offset, last offset
//! delta, producer id, epoch and base sequence (Kafka's `overrideLastOffset`), so offsets and
//! producer sequences survive; its records keep their bytes (only their timestamp delta changes
//! when a horizon is set). A batch that keeps nothing goes, unless it is the last batch of its
//! producer id in the log or the first batch of its leader epoch: then an empty batch (no
//! records, the same offsets and producer fields, uncompressed) takes its place, as Kafka's
//! `RETAIN_EMPTY` does for the producer state, so that the producer state and the leader-epoch
//! cache rebuilt from the headers on start-up stay what they were (Kafka keeps the epoch cache in
//! a file instead). Control and transactional batches are kept whole (seedlog has no
//! transactions).

use bytes::{BufMut, BytesMut};

use crate::protocol::compression::{compress, decompress, Codec};
use crate::protocol::record_batch::{RecordBatchHeader, LOG_OVERHEAD, RECORD_BATCH_HEADER_BYTES};

/// Attribute bit 6: the base timestamp holds the batch's delete horizon (Kafka's
/// `DELETE_HORIZON_FLAG_MASK`).
pub const ATTRIBUTE_DELETE_HORIZON: i16 = 0x40;

/// The topic configs a clean of one log uses, and the time it runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanerConfig {
    /// Wall-clock milliseconds now (delete horizons and the compaction lag compare with it).
    pub now_ms: i64,
    /// `delete.retention.ms`: how long a tombstone stays after the clean that first kept it.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: a segment holding a record newer than this is not cleaned.
    pub min_compaction_lag_ms: i64,
}

/// What one clean did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanStats {
    /// Segments read (every closed segment below the first uncleanable offset).
    pub segments_read: u64,
    /// Segments rewritten (those whose content changed).
    pub segments_rewritten: u64,
    /// Records read.
    pub records_read: u64,
    /// Records removed (superseded, keyless, or tombstones past their horizon).
    pub records_removed: u64,
    /// Tombstones removed because their delete horizon had passed.
    pub tombstones_removed: u64,
    /// Bytes of the segments read, and what they hold after the clean.
    pub bytes_before: u64,
    /// Bytes after.
    pub bytes_after: u64,
    /// The earliest delete horizon among the tombstones kept: a clean after it removes them.
    pub next_delete_horizon: Option<i64>,
}

/// One record of a batch, located in the batch's (decompressed) records section.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawRecord<'a> {
    /// The record's bytes after its length varint.
    pub(crate) body: &'a [u8],
    /// The timestamp delta and where it ends in `body` (the rest is copied as is).
    timestamp_delta: i64,
    after_timestamp: usize,
    /// The offset delta.
    pub(crate) offset_delta: i64,
    /// The key, if any.
    pub(crate) key: Option<&'a [u8]>,
    /// Whether the value is null.
    pub(crate) tombstone: bool,
}

/// What the filter decided for each record of a batch.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Decisions {
    pub(crate) kept: u64,
    pub(crate) removed: u64,
    pub(crate) tombstones_removed: u64,
    /// A kept tombstone in a batch without a horizon: the rewrite sets one.
    pub(crate) needs_horizon: bool,
}

fn read_varlong(bytes: &[u8], at: &mut usize) -> Result<i64, String> {
    let mut raw: u64 = 0;
    for shift in (0..70).step_by(7) {
        let byte = *bytes.get(*at).ok_or("a record ends inside a varint")?;
        *at += 1;
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    Err("a varint longer than 10 bytes".to_owned())
}

fn put_varlong(buf: &mut BytesMut, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        buf.put_u8((zigzag as u8) | 0x80);
        zigzag >>= 7;
    }
    buf.put_u8(zigzag as u8);
}

/// The records section of a batch, decompressed.
pub(crate) fn records_section(batch: &[u8], header: &RecordBatchHeader) -> Result<Vec<u8>, String> {
    let body = &batch[RECORD_BATCH_HEADER_BYTES..header.size_bytes()];
    if header.compression() == 0 {
        return Ok(body.to_vec());
    }
    let codec = Codec::from_id(header.compression()).map_err(|error| error.to_string())?;
    decompress(codec, body).map_err(|error| error.to_string())
}

/// The records of a decompressed records section.
pub(crate) fn raw_records<'a>(
    section: &'a [u8],
    header: &RecordBatchHeader,
) -> Result<Vec<RawRecord<'a>>, String> {
    let mut records = Vec::with_capacity(header.records_count.max(0) as usize);
    let mut at = 0;
    for _ in 0..header.records_count {
        let length = usize::try_from(read_varlong(section, &mut at)?)
            .map_err(|_| "a negative record length")?;
        let end = at
            .checked_add(length)
            .filter(|end| *end <= section.len())
            .ok_or("a record past the end of its batch")?;
        let body = &section[at..end];
        let mut cursor = 1; // attributes
        let timestamp_delta = read_varlong(body, &mut cursor)?;
        let after_timestamp = cursor;
        let offset_delta = read_varlong(body, &mut cursor)?;
        let key_length = read_varlong(body, &mut cursor)?;
        let key = if key_length < 0 {
            None
        } else {
            let key_end = cursor
                .checked_add(key_length as usize)
                .filter(|key_end| *key_end <= body.len())
                .ok_or("a key past the end of its record")?;
            let key = &body[cursor..key_end];
            cursor = key_end;
            Some(key)
        };
        let value_length = read_varlong(body, &mut cursor)?;
        records.push(RawRecord {
            body,
            timestamp_delta,
            after_timestamp,
            offset_delta,
            key,
            tombstone: value_length < 0,
        });
        at = end;
    }
    if at != section.len() {
        return Err("bytes after the last record of a batch".to_owned());
    }
    Ok(records)
}

/// The batch's delete horizon, if a clean set one.
pub(crate) fn delete_horizon(header: &RecordBatchHeader) -> Option<i64> {
    (header.attributes & ATTRIBUTE_DELETE_HORIZON != 0).then_some(header.base_timestamp)
}

/// Decides which records of a (non-control, non-transactional) batch stay: `latest(key)` is
/// the offset of the key's latest record over the cleanable range.
pub(crate) fn decide(
    header: &RecordBatchHeader,
    records: &[RawRecord<'_>],
    now_ms: i64,
    mut latest: impl FnMut(&[u8]) -> Option<i64>,
    keep: &mut Vec<bool>,
) -> Decisions {
    let horizon = delete_horizon(header);
    let mut decisions = Decisions::default();
    keep.clear();
    for record in records {
        let offset = header.base_offset + record.offset_delta;
        let retained = match record.key {
            None => false,
            Some(key) => latest(key) == Some(offset),
        };
        let expired = record.tombstone && horizon.is_some_and(|horizon| now_ms >= horizon);
        if retained && expired {
            decisions.tombstones_removed += 1;
        }
        let kept = retained && !expired;
        if kept {
            decisions.kept += 1;
            decisions.needs_horizon |= record.tombstone && horizon.is_none();
        } else {
            decisions.removed += 1;
        }
        keep.push(kept);
    }
    decisions
}

/// The batch holding the records `keep` marks, with its original offsets, producer fields and
/// codec; `set_horizon`: the delete horizon to record in it.
pub(crate) fn rebuild(
    batch: &[u8],
    header: &RecordBatchHeader,
    records: &[RawRecord<'_>],
    keep: &[bool],
    set_horizon: Option<i64>,
) -> Vec<u8> {
    let base_timestamp = set_horizon.unwrap_or(header.base_timestamp);
    let old_base = header.base_timestamp;
    let mut section = BytesMut::new();
    let mut count = 0_i32;
    let mut max_timestamp = i64::MIN;
    for (record, _) in records.iter().zip(keep).filter(|(_, keep)| **keep) {
        count += 1;
        let timestamp = old_base.wrapping_add(record.timestamp_delta);
        max_timestamp = max_timestamp.max(timestamp);
        if base_timestamp == old_base {
            put_varlong(&mut section, record.body.len() as i64);
            section.extend_from_slice(record.body);
            continue;
        }
        let mut body = BytesMut::with_capacity(record.body.len() + 8);
        body.put_u8(record.body[0]); // attributes
        put_varlong(&mut body, timestamp.wrapping_sub(base_timestamp));
        body.extend_from_slice(&record.body[record.after_timestamp..]);
        put_varlong(&mut section, body.len() as i64);
        section.extend_from_slice(&body);
    }
    // An empty batch is written uncompressed, as Kafka writes its empty headers.
    let codec = match Codec::from_id(header.compression()) {
        Ok(codec) if count > 0 => codec,
        _ => Codec::None,
    };
    let compressed;
    let body: &[u8] = if codec == Codec::None {
        &section
    } else {
        compressed = compress(codec, &section);
        &compressed
    };
    let mut out = Vec::with_capacity(RECORD_BATCH_HEADER_BYTES + body.len());
    out.extend_from_slice(&batch[..RECORD_BATCH_HEADER_BYTES]);
    out.extend_from_slice(body);
    let batch_length = (out.len() - LOG_OVERHEAD) as i32;
    out[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let mut attributes = (header.attributes & !0x7) | codec.id();
    if set_horizon.is_some() {
        attributes |= ATTRIBUTE_DELETE_HORIZON;
    }
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    out[27..35].copy_from_slice(&base_timestamp.to_be_bytes());
    // The newest kept record's timestamp, as Kafka's builder computes it for retained records.
    let max = if count > 0 {
        max_timestamp
    } else {
        header.max_timestamp
    };
    out[35..43].copy_from_slice(&max.to_be_bytes());
    out[57..61].copy_from_slice(&count.to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::record_batch::{
        assign_offsets, decode_batch, validate_batch, BatchBuilder,
    };

    fn batch(entries: &[(&str, Option<&str>)], base_offset: i64, timestamp: i64) -> Vec<u8> {
        let mut builder = BatchBuilder::default();
        for (index, (key, value)) in entries.iter().enumerate() {
            builder.push(
                timestamp + index as i64,
                Some(key.as_bytes()),
                value.map(str::as_bytes),
            );
        }
        let mut batch = builder.finish().to_vec();
        assign_offsets(&mut batch, base_offset, 3);
        batch
    }

    #[test]
    fn a_rewritten_batch_keeps_its_offsets_timestamps_and_the_kept_records() {
        let bytes = batch(
            &[("a", Some("1")), ("b", Some("2")), ("a", None)],
            10,
            1_000,
        );
        let header = validate_batch(&bytes).expect("valid");
        let section = records_section(&bytes, &header).expect("section");
        let records = raw_records(&section, &header).expect("records");
        let mut keep = Vec::new();
        let decisions = decide(
            &header,
            &records,
            0,
            |key| Some(if key == b"a" { 12 } else { 11 }),
            &mut keep,
        );
        assert_eq!(keep, [false, true, true]);
        assert!(decisions.needs_horizon, "a kept tombstone needs a horizon");
        let rebuilt = rebuild(&bytes, &header, &records, &keep, Some(50_000));
        let new_header = validate_batch(&rebuilt).expect("a valid CRC");
        assert_eq!(new_header.base_offset, 10);
        assert_eq!(new_header.last_offset(), 12, "the last offset survives");
        assert_eq!(new_header.records_count, 2);
        assert_eq!(new_header.partition_leader_epoch, 3);
        assert_eq!(delete_horizon(&new_header), Some(50_000));
        let len = rebuilt.len();
        let decoded = decode_batch(&rebuilt.into(), &new_header, 0..len).expect("decodes");
        let summary: Vec<(i64, i64, bool)> = decoded
            .iter()
            .map(|record| (record.offset, record.timestamp_ms, record.value.is_none()))
            .collect();
        assert_eq!(summary, [(11, 1_001, false), (12, 1_002, true)]);
    }

    #[test]
    fn a_tombstone_goes_once_its_horizon_has_passed() {
        let bytes = batch(&[("a", None)], 0, 1_000);
        let header = validate_batch(&bytes).expect("valid");
        let section = records_section(&bytes, &header).expect("section");
        let records = raw_records(&section, &header).expect("records");
        let mut keep = Vec::new();
        let rebuilt = rebuild(&bytes, &header, &records, &[true], Some(5_000));
        let with_horizon = validate_batch(&rebuilt).expect("valid");
        let section = records_section(&rebuilt, &with_horizon).expect("section");
        let records = raw_records(&section, &with_horizon).expect("records");
        let early = decide(&with_horizon, &records, 4_999, |_| Some(0), &mut keep);
        assert_eq!((early.kept, early.needs_horizon), (1, false));
        let late = decide(&with_horizon, &records, 5_000, |_| Some(0), &mut keep);
        assert_eq!((late.kept, late.tombstones_removed), (0, 1));
    }
}
