//! RecordBatch v2 (magic 2): the 61-byte header, CRC-32C, offset patching, and the few record
//! encodings the seedlog clients need.
//!
//! The broker never decodes records on the produce or fetch path: it validates the header and
//! the checksum, patches `baseOffset` and `partitionLeaderEpoch` (neither is covered by the CRC),
//! and stores the batch bytes as received, so a fetch can send them straight from the segment file.
//!
//! Layout (big-endian, offsets from the start of the batch):
//! `baseOffset i64 @0 | batchLength i32 @8 | partitionLeaderEpoch i32 @12 | magic i8 @16 |
//! crc u32 @17 | attributes i16 @21 | lastOffsetDelta i32 @23 | baseTimestamp i64 @27 |
//! maxTimestamp i64 @35 | producerId i64 @43 | producerEpoch i16 @51 | baseSequence i32 @53 |
//! recordsCount i32 @57 | records @61`. The CRC covers bytes `[21, end)`.

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes before `batchLength` counts: `baseOffset` and `batchLength` themselves.
pub const LOG_OVERHEAD: usize = 12;
/// Size of the fixed RecordBatch v2 header.
pub const RECORD_BATCH_HEADER_BYTES: usize = 61;
/// The only record format seedlog accepts.
pub const MAGIC_V2: i8 = 2;
/// First byte covered by the CRC (the attributes field).
const CRC_START: usize = 21;

const ATTRIBUTE_COMPRESSION_MASK: i16 = 0x07;
pub(crate) const ATTRIBUTE_TRANSACTIONAL: i16 = 0x10;
pub(crate) const ATTRIBUTE_CONTROL: i16 = 0x20;

/// Why a batch was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Fewer bytes than a header, or than `batchLength` announces.
    #[error("truncated record batch: need {needed} bytes, have {available}")]
    Truncated {
        /// Bytes the header says the batch needs.
        needed: usize,
        /// Bytes present.
        available: usize,
    },
    /// `batchLength` is smaller than the header itself or negative.
    #[error("invalid batch length {0}")]
    InvalidLength(i32),
    /// Not magic 2.
    #[error("unsupported record batch magic {0} (only v2 is supported)")]
    UnsupportedMagic(i8),
    /// The stored CRC does not match the bytes.
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// CRC in the header.
        stored: u32,
        /// CRC-32C of bytes `[21, end)`.
        computed: u32,
    },
    /// A header field is inconsistent (for example a negative record count).
    #[error("invalid record batch: {0}")]
    Invalid(&'static str),
}

/// The parsed 61-byte header of a RecordBatch v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // field names are Kafka's, documented in the module table
pub struct RecordBatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

/// The big-endian `i64` at `at` (the caller checked the length).
pub(crate) fn be_i64(bytes: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(bytes[at..at + 8].try_into().expect("8-byte slice"))
}
/// The big-endian `i32` at `at` (the caller checked the length).
pub(crate) fn be_i32(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(bytes[at..at + 4].try_into().expect("4-byte slice"))
}
/// The big-endian `i16` at `at` (the caller checked the length).
pub(crate) fn be_i16(bytes: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(bytes[at..at + 2].try_into().expect("2-byte slice"))
}

impl RecordBatchHeader {
    /// Parses the header from the first 61 bytes of `bytes` (no CRC check).
    pub fn parse(bytes: &[u8]) -> Result<RecordBatchHeader, BatchError> {
        if bytes.len() < RECORD_BATCH_HEADER_BYTES {
            return Err(BatchError::Truncated {
                needed: RECORD_BATCH_HEADER_BYTES,
                available: bytes.len(),
            });
        }
        let magic = bytes[16] as i8;
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        let header = RecordBatchHeader {
            base_offset: be_i64(bytes, 0),
            batch_length: be_i32(bytes, 8),
            partition_leader_epoch: be_i32(bytes, 12),
            magic,
            crc: be_i32(bytes, 17) as u32,
            attributes: be_i16(bytes, 21),
            last_offset_delta: be_i32(bytes, 23),
            base_timestamp: be_i64(bytes, 27),
            max_timestamp: be_i64(bytes, 35),
            producer_id: be_i64(bytes, 43),
            producer_epoch: be_i16(bytes, 51),
            base_sequence: be_i32(bytes, 53),
            records_count: be_i32(bytes, 57),
        };
        if (header.batch_length as i64) < (RECORD_BATCH_HEADER_BYTES - LOG_OVERHEAD) as i64 {
            return Err(BatchError::InvalidLength(header.batch_length));
        }
        if header.last_offset_delta < 0 || header.records_count < 0 {
            return Err(BatchError::Invalid(
                "negative lastOffsetDelta or recordsCount",
            ));
        }
        Ok(header)
    }

    /// Total size of the batch on the wire and on disk.
    pub fn size_bytes(&self) -> usize {
        self.batch_length as usize + LOG_OVERHEAD
    }

    /// Offset of the last record in the batch.
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    /// Compression codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    pub fn compression(&self) -> i16 {
        self.attributes & ATTRIBUTE_COMPRESSION_MASK
    }

    /// Part of a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTRIBUTE_TRANSACTIONAL != 0
    }

    /// A control batch (transaction marker).
    pub fn is_control(&self) -> bool {
        self.attributes & ATTRIBUTE_CONTROL != 0
    }
}

/// Parses the header of the batch at the start of `bytes`, checks that the whole batch is
/// present, and verifies its CRC-32C. Returns the header.
pub fn validate_batch(bytes: &[u8]) -> Result<RecordBatchHeader, BatchError> {
    let header = RecordBatchHeader::parse(bytes)?;
    let size = header.size_bytes();
    if bytes.len() < size {
        return Err(BatchError::Truncated {
            needed: size,
            available: bytes.len(),
        });
    }
    let computed = crc32c::crc32c(&bytes[CRC_START..size]);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    Ok(header)
}

/// Rewrites `baseOffset` and `partitionLeaderEpoch` in place (neither is covered by the CRC).
pub fn assign_offsets(batch: &mut [u8], base_offset: i64, partition_leader_epoch: i32) {
    assert!(
        batch.len() >= RECORD_BATCH_HEADER_BYTES,
        "assign_offsets on a short batch"
    );
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
    batch[12..16].copy_from_slice(&partition_leader_epoch.to_be_bytes());
}

/// Kafka's `DefaultRecordBatch.incrementSequence`: sequences wrap from `i32::MAX` to 0.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// Rewrites a finished batch's `producerId`, `producerEpoch` and `baseSequence` (an idempotent
/// producer's stamp) and recomputes its CRC, which covers them.
pub fn stamp_producer(
    batch: &[u8],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) -> Bytes {
    assert!(
        batch.len() >= RECORD_BATCH_HEADER_BYTES,
        "stamp_producer on a short batch"
    );
    let mut batch = batch.to_vec();
    batch[43..51].copy_from_slice(&producer_id.to_be_bytes());
    batch[51..53].copy_from_slice(&producer_epoch.to_be_bytes());
    batch[53..57].copy_from_slice(&base_sequence.to_be_bytes());
    seal_crc(&mut batch);
    Bytes::from(batch)
}

/// Writes the CRC-32C of everything from the attributes on into the header's `crc` field.
pub(crate) fn seal_crc(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[CRC_START..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// `batch` (one validated batch) with its records recompressed by `codec`: the attributes'
/// codec bits, `batchLength` and the CRC follow; everything else is kept (Kafka's broker does
/// this when a topic's `compression.type` names another codec than the producer's).
pub fn recompress(
    batch: &[u8],
    codec: crate::protocol::compression::Codec,
) -> Result<Bytes, crate::protocol::compression::CompressionError> {
    use crate::protocol::compression::{compress, decompress, Codec};
    let attributes = i16::from_be_bytes([batch[21], batch[22]]);
    let records = decompress(
        Codec::from_id(attributes & 0x7)?,
        &batch[RECORD_BATCH_HEADER_BYTES..],
    )?;
    let body = compress(codec, &records);
    let mut out = Vec::with_capacity(RECORD_BATCH_HEADER_BYTES + body.len());
    out.extend_from_slice(&batch[..RECORD_BATCH_HEADER_BYTES]);
    out.extend_from_slice(&body);
    let batch_length = (out.len() - LOG_OVERHEAD) as i32;
    out[8..12].copy_from_slice(&batch_length.to_be_bytes());
    out[21..23].copy_from_slice(&((attributes & !0x7) | codec.id()).to_be_bytes());
    seal_crc(&mut out);
    Ok(Bytes::from(out))
}

/// Splits a records blob into validated batches. Stops with an error at the first bad batch.
pub fn split_batches(
    records: &[u8],
) -> Result<Vec<(RecordBatchHeader, std::ops::Range<usize>)>, BatchError> {
    let mut batches = Vec::new();
    let mut position = 0;
    while position < records.len() {
        let header = validate_batch(&records[position..])?;
        let end = position + header.size_bytes();
        batches.push((header, position..end));
        position = end;
    }
    Ok(batches)
}

/// A batch of key-less records holding `values`, timestamp 0, ready to append (a metadata
/// log's records).
pub fn value_batch(values: &[Vec<u8>]) -> (Vec<u8>, RecordBatchHeader) {
    let entries: Vec<KeyValue<'_>> = values
        .iter()
        .map(|value| (None, Some(value.as_slice())))
        .collect();
    let batch = build_batch(&entries, 0).to_vec();
    let header = validate_batch(&batch).expect("a freshly built batch is valid");
    (batch, header)
}

/// One record handed to or returned by the seedlog clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Absolute offset (on decode) or 0 (on encode).
    pub offset: i64,
    /// CreateTime in ms.
    pub timestamp_ms: i64,
    /// Key bytes, if any.
    pub key: Option<Bytes>,
    /// Value bytes, if any (a null value is a tombstone).
    pub value: Option<Bytes>,
}

/// A record's key and value, either of which may be null.
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Builds an uncompressed, non-transactional RecordBatch v2 whose records all carry
/// `timestamp_ms`.
pub fn build_batch(records: &[KeyValue<'_>], timestamp_ms: i64) -> Bytes {
    let mut builder = BatchBuilder::default();
    for (key, value) in records {
        builder.push(timestamp_ms, *key, *value);
    }
    builder.finish()
}

/// Encodes records one at a time into an uncompressed, non-transactional RecordBatch v2 (Kafka's
/// `MemoryRecordsBuilder`): the producer's accumulator appends to an open batch and asks its size
/// before each append. The first record's timestamp is the batch's base timestamp; every record
/// stores its delta from it.
#[derive(Debug, Clone, Default)]
pub struct BatchBuilder {
    body: BytesMut,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl BatchBuilder {
    /// Records appended so far.
    pub fn count(&self) -> i32 {
        self.count
    }

    /// The size of the batch as it stands, header included.
    pub fn size_bytes(&self) -> usize {
        RECORD_BATCH_HEADER_BYTES + self.body.len()
    }

    /// The size the batch would have with one more record.
    pub fn size_with(&self, timestamp_ms: i64, key: Option<&[u8]>, value: Option<&[u8]>) -> usize {
        let base = if self.count == 0 {
            timestamp_ms
        } else {
            self.base_timestamp
        };
        let record = record_body_bytes(
            timestamp_ms.wrapping_sub(base),
            i64::from(self.count),
            key,
            value,
        );
        self.size_bytes() + varlong_bytes(record as i64) + record
    }

    /// Appends a record.
    pub fn push(&mut self, timestamp_ms: i64, key: Option<&[u8]>, value: Option<&[u8]>) {
        if self.count == 0 {
            self.base_timestamp = timestamp_ms;
            self.max_timestamp = timestamp_ms;
        }
        self.max_timestamp = self.max_timestamp.max(timestamp_ms);
        let timestamp_delta = timestamp_ms.wrapping_sub(self.base_timestamp);
        let offset_delta = i64::from(self.count);
        let length = record_body_bytes(timestamp_delta, offset_delta, key, value);
        put_varlong(&mut self.body, length as i64);
        let before = self.body.len();
        self.body.put_i8(0); // attributes
        put_varlong(&mut self.body, timestamp_delta);
        put_varlong(&mut self.body, offset_delta);
        put_nullable(&mut self.body, key);
        put_nullable(&mut self.body, value);
        put_varlong(&mut self.body, 0); // header count
        debug_assert_eq!(self.body.len() - before, length, "record size predicted");
        self.count += 1;
    }

    /// The finished batch, with its CRC. Its base offset is 0 until the broker assigns one.
    pub fn finish(self) -> Bytes {
        self.finish_compressed(crate::protocol::compression::Codec::None)
    }

    /// The finished batch with its records compressed by `codec` (attributes bits 0–2).
    pub fn finish_compressed(self, codec: crate::protocol::compression::Codec) -> Bytes {
        let compressed;
        let body: &[u8] = if codec == crate::protocol::compression::Codec::None {
            &self.body
        } else {
            compressed = crate::protocol::compression::compress(codec, &self.body);
            &compressed
        };
        let mut batch = BytesMut::with_capacity(RECORD_BATCH_HEADER_BYTES + body.len());
        batch.put_i64(0); // baseOffset, assigned by the broker
        batch.put_i32((RECORD_BATCH_HEADER_BYTES - LOG_OVERHEAD + body.len()) as i32);
        batch.put_i32(-1); // partitionLeaderEpoch
        batch.put_i8(MAGIC_V2);
        batch.put_u32(0); // crc, filled below
        batch.put_i16(codec.id()); // attributes: the codec, CreateTime
        batch.put_i32((self.count - 1).max(0));
        batch.put_i64(self.base_timestamp);
        batch.put_i64(self.max_timestamp);
        batch.put_i64(-1); // producerId
        batch.put_i16(-1); // producerEpoch
        batch.put_i32(-1); // baseSequence
        batch.put_i32(self.count);
        batch.extend_from_slice(body);
        seal_crc(&mut batch);
        batch.freeze()
    }
}

/// Bytes of one record after its length varint.
fn record_body_bytes(
    timestamp_delta: i64,
    offset_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> usize {
    let nullable = |bytes: Option<&[u8]>| {
        bytes.map_or(1, |bytes| varlong_bytes(bytes.len() as i64) + bytes.len())
    };
    1 + varlong_bytes(timestamp_delta)
        + varlong_bytes(offset_delta)
        + nullable(key)
        + nullable(value)
        + 1
}

/// A varlong's zigzag encoding: small magnitudes, negative or not, become small numbers.
fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// Length of a zigzag varlong.
fn varlong_bytes(value: i64) -> usize {
    let mut zigzag = zigzag(value);
    let mut bytes = 1;
    while zigzag >= 0x80 {
        zigzag >>= 7;
        bytes += 1;
    }
    bytes
}

/// Decodes the records of every batch in `records` (seedlog consumer). Control batches are
/// skipped, as Kafka consumers do; compressed batches are an error for now.
pub fn decode_records(records: &Bytes) -> Result<Vec<Record>, BatchError> {
    let mut decoded = Vec::new();
    for (header, range) in split_batches(records)? {
        decoded.extend(decode_batch(records, &header, range)?);
    }
    Ok(decoded)
}

/// Decodes the records of the one batch at `range` of `records` (already validated).
pub fn decode_batch(
    records: &Bytes,
    header: &RecordBatchHeader,
    range: std::ops::Range<usize>,
) -> Result<Vec<Record>, BatchError> {
    if header.is_control() {
        return Ok(Vec::new());
    }
    batch_records(records, header, range)
}

/// Decodes the records of one batch, a control batch's included.
pub(crate) fn batch_records(
    records: &Bytes,
    header: &RecordBatchHeader,
    range: std::ops::Range<usize>,
) -> Result<Vec<Record>, BatchError> {
    if header.compression() != 0 {
        // The records section decompressed behind a copy of the header, so the cursor slices
        // keys and values out of one buffer as it does for an uncompressed batch.
        let codec = crate::protocol::compression::Codec::from_id(header.compression())
            .map_err(|_| BatchError::Invalid("unknown compression codec"))?;
        let body = &records[range.start + RECORD_BATCH_HEADER_BYTES..range.end];
        let decompressed = crate::protocol::compression::decompress(codec, body)
            .map_err(|_| BatchError::Invalid("compressed records that do not decompress"))?;
        let mut whole = Vec::with_capacity(RECORD_BATCH_HEADER_BYTES + decompressed.len());
        whole.extend_from_slice(&records[range.start..range.start + RECORD_BATCH_HEADER_BYTES]);
        whole.extend_from_slice(&decompressed);
        let whole = Bytes::from(whole);
        let mut cursor = Cursor {
            bytes: &whole[RECORD_BATCH_HEADER_BYTES..],
            at: 0,
        };
        return cursor.records(header, &whole, 0);
    }
    let mut cursor = Cursor {
        bytes: &records[range.start + RECORD_BATCH_HEADER_BYTES..range.end],
        at: 0,
    };
    cursor.records(header, records, range.start)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

const MALFORMED: BatchError = BatchError::Invalid("malformed record");

impl Cursor<'_> {
    /// The batch's `records_count` records, in a vector sized for them once (a record takes a
    /// byte at least, so a count that lies cannot size it past the bytes there are).
    fn records(
        &mut self,
        header: &RecordBatchHeader,
        whole: &Bytes,
        base: usize,
    ) -> Result<Vec<Record>, BatchError> {
        let count = usize::try_from(header.records_count).unwrap_or(0);
        let mut decoded = Vec::with_capacity(count.min(self.bytes.len()));
        for _ in 0..header.records_count {
            decoded.push(self.record(header, whole, base)?);
        }
        Ok(decoded)
    }

    fn varlong(&mut self) -> Result<i64, BatchError> {
        let mut raw: u64 = 0;
        for shift in (0..70).step_by(7) {
            let byte = *self.bytes.get(self.at).ok_or(MALFORMED)?;
            self.at += 1;
            raw |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64));
            }
        }
        Err(MALFORMED)
    }

    fn nullable(&mut self, whole: &Bytes, base: usize) -> Result<Option<Bytes>, BatchError> {
        let length = self.varlong()?;
        if length < 0 {
            return Ok(None);
        }
        let end = self
            .at
            .checked_add(length as usize)
            .filter(|end| *end <= self.bytes.len())
            .ok_or(MALFORMED)?;
        let start = base + RECORD_BATCH_HEADER_BYTES + self.at;
        self.at = end;
        Ok(Some(whole.slice(start..start + length as usize)))
    }

    fn record(
        &mut self,
        header: &RecordBatchHeader,
        whole: &Bytes,
        base: usize,
    ) -> Result<Record, BatchError> {
        let length = self.varlong()?;
        let end = self
            .at
            .checked_add(usize::try_from(length).map_err(|_| MALFORMED)?)
            .ok_or(MALFORMED)?;
        if end > self.bytes.len() {
            return Err(MALFORMED);
        }
        self.at += 1; // attributes
        let timestamp_delta = self.varlong()?;
        let offset_delta = self.varlong()?;
        let key = self.nullable(whole, base)?;
        let value = self.nullable(whole, base)?;
        self.at = end; // headers are skipped
        Ok(Record {
            offset: header.base_offset + offset_delta,
            timestamp_ms: header.base_timestamp + timestamp_delta,
            key,
            value,
        })
    }
}

fn put_varlong(buf: &mut BytesMut, value: i64) {
    let mut zigzag = zigzag(value);
    while zigzag >= 0x80 {
        buf.put_u8((zigzag as u8) | 0x80);
        zigzag >>= 7;
    }
    buf.put_u8(zigzag as u8);
}

fn put_nullable(buf: &mut BytesMut, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varlong(buf, -1),
        Some(bytes) => {
            put_varlong(buf, bytes.len() as i64);
            buf.extend_from_slice(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_batch_validates_and_decodes_after_offset_assignment() {
        let batch = build_batch(
            &[
                (Some(b"k0"), Some(b"v0")),
                (None, Some(b"v1")),
                (None, None),
            ],
            1_000,
        );
        let header = validate_batch(&batch).expect("valid");
        assert_eq!(header.records_count, 3);
        assert_eq!(header.last_offset_delta, 2);
        assert_eq!(header.size_bytes(), batch.len());
        let mut stored = batch.to_vec();
        assign_offsets(&mut stored, 40, 7);
        let header = validate_batch(&stored).expect("offsets are outside the CRC");
        assert_eq!(
            (
                header.base_offset,
                header.partition_leader_epoch,
                header.last_offset()
            ),
            (40, 7, 42)
        );
        let records = decode_records(&Bytes::from(stored)).expect("decodes");
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].key.as_deref(), Some(&b"k0"[..]));
        assert_eq!(records[1].offset, 41);
        assert_eq!(records[1].value.as_deref(), Some(&b"v1"[..]));
        assert_eq!(records[2].value, None);
    }

    #[test]
    fn a_builder_keeps_each_records_timestamp_and_predicts_its_size() {
        let mut builder = BatchBuilder::default();
        let big = [7_u8; 200];
        let records: [(i64, KeyValue<'_>); 3] = [
            (1_000, (Some(b"k"), Some(b"first"))),
            (1_300, (None, Some(&big))),
            (999, (Some(b"key"), None)),
        ];
        for (timestamp, (key, value)) in records {
            let predicted = builder.size_with(timestamp, key, value);
            builder.push(timestamp, key, value);
            assert_eq!(builder.size_bytes(), predicted);
        }
        assert_eq!(builder.count(), 3);
        let mut batch = builder.finish().to_vec();
        assign_offsets(&mut batch, 40, 0);
        let header = validate_batch(&batch).expect("valid");
        assert_eq!(header.max_timestamp, 1_300);
        assert_eq!(header.last_offset(), 42);
        let decoded = decode_records(&Bytes::from(batch)).expect("decodes");
        let seen: Vec<(i64, i64)> = decoded.iter().map(|r| (r.offset, r.timestamp_ms)).collect();
        assert_eq!(seen, vec![(40, 1_000), (41, 1_300), (42, 999)]);
        assert_eq!(decoded[2].key.as_deref(), Some(b"key".as_slice()));
        assert_eq!(decoded[2].value, None);
    }

    #[test]
    fn a_flipped_bit_fails_the_crc() {
        let mut batch = build_batch(&[(None, Some(b"hello"))], 5).to_vec();
        let last = batch.len() - 1;
        batch[last] ^= 0x01;
        assert!(matches!(
            validate_batch(&batch),
            Err(BatchError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn truncated_and_foreign_batches_are_rejected() {
        let batch = build_batch(&[(None, Some(b"hello"))], 5);
        assert!(matches!(
            validate_batch(&batch[..30]),
            Err(BatchError::Truncated { .. })
        ));
        assert!(matches!(
            validate_batch(&batch[..batch.len() - 1]),
            Err(BatchError::Truncated { .. })
        ));
        let mut old = batch.to_vec();
        old[16] = 1;
        assert_eq!(validate_batch(&old), Err(BatchError::UnsupportedMagic(1)));
        let mut short = batch.to_vec();
        short[8..12].copy_from_slice(&3i32.to_be_bytes());
        assert_eq!(validate_batch(&short), Err(BatchError::InvalidLength(3)));
    }

    #[test]
    fn a_crc_taken_from_a_real_librdkafka_batch_layout_matches() {
        // Kafka docs: the CRC is CRC-32C (Castagnoli). Known answer for "123456789".
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    }
}
