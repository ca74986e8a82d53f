//! Record-level validation of a RecordBatch v2: the rules Kafka's broker applies to the records
//! inside a produced batch before it appends anything, so that a batch whose records cannot be
//! read is refused instead of being stored and poisoning every consumer.
//!
//! [`validate_records`] walks every record of an uncompressed batch the way Kafka's
//! `DefaultRecordBatch.RecordIterator` and `DefaultRecord.readFrom` do (clients module,
//! `org.apache.kafka.common.record`), and applies the checks of `LogValidator.validateBatch` /
//! `assignOffsetsNonCompressed` (storage module, `LogValidator.java`) that concern the records:
//! * per record: `Length` varint, `Attributes` byte, `TimestampDelta` varlong, `OffsetDelta`
//!   varint, `KeyLength` + key, `ValueLength` + value, `HeadersCount` + each header's key and
//!   value. A negative key, value or header value length is null; a negative header key length
//!   or header count is invalid; a header count larger than the bytes left is invalid; the
//!   fields must end exactly at the declared `Length`;
//! * per batch: exactly `recordsCount` records, no byte after the last one, and
//!   `lastOffsetDelta == recordsCount - 1`;
//! * varints are at most 5 bytes and varlongs at most 10, as `ByteUtils.readVarint` and
//!   `readVarlong` require. Unlike Java, which drops them silently, bits beyond 32 (64) in the
//!   last byte are invalid: no Kafka writer sets them, and seedlog's own decoder would read them.
//!
//! Two rules are seedlog's, stricter than Kafka, because seedlog stores a batch byte for byte
//! and a fetch serves it as stored, so `baseOffset..=lastOffset` must be what consumers read:
//! * `OffsetDelta` must equal the record's index in the batch. Kafka does not check it for an
//!   uncompressed batch (`assignOffsetsNonCompressed` iterates without looking at it) and rewrites
//!   a compressed batch whose inner offsets are not consecutive
//!   (`validateMessagesAndAssignOffsetsCompressed`); every Kafka client writes `0, 1, 2, …`;
//! * `baseTimestamp + TimestampDelta` (and `baseOffset + lastOffsetDelta`) must not overflow
//!   an i64, where Java wraps around.
//!
//! Timestamps are otherwise not checked: seedlog has no `message.timestamp.type` nor
//! `message.timestamp.{before,after}.max.ms` yet (Kafka's `validateTimestamp`), and it does not
//! rewrite `maxTimestamp` as `assignOffsetsNonCompressed` does, so a `maxTimestamp` that is not
//! the largest record timestamp is stored as sent. Record attributes are read but not checked:
//! they are unused in v2 and Kafka ignores them too.
//!
//! Compressed batches (codecs 1–4) are decompressed (`protocol::compression`) and their records
//! checked the same way; data that does not decompress is INVALID_RECORD (Kafka's Java reader
//! throws from inside the record iterator). Codecs 5–7 do not exist: `CompressionType.forId` throws `IllegalArgumentException`, which a
//! Kafka 4.x broker answers with UNKNOWN_SERVER_ERROR (see [`RecordsError::error_code`]).

use crate::protocol::compression::{decompress, Codec};
use crate::protocol::record_batch::{RecordBatchHeader, RECORD_BATCH_HEADER_BYTES};
use crate::protocol::ErrorCode;

/// The highest compression codec id Kafka knows (4, zstd; `CompressionType.forId`).
pub const COMPRESSION_CODEC_MAX: i16 = 4;

/// A field of a v2 record, named as in the schema of Kafka's `DefaultRecord`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // the names are Kafka's
pub enum Field {
    Length,
    Attributes,
    TimestampDelta,
    OffsetDelta,
    KeyLength,
    Key,
    ValueLength,
    Value,
    HeadersCount,
    HeaderKeyLength,
    HeaderKey,
    HeaderValueLength,
    HeaderValue,
}

impl std::fmt::Display for Field {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, formatter)
    }
}

/// What is wrong with one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordDefect {
    /// The record (or, for `Length`, the batch) ends inside this field.
    #[error("the record ends inside its {0}")]
    Truncated(Field),
    /// A varint longer than 5 bytes or a varlong longer than 10, or with bits beyond 32 (64).
    #[error("{0} is not a valid varint")]
    InvalidVarint(Field),
    /// A negative `Length`.
    #[error("Length {0} is negative")]
    NegativeLength(i32),
    /// A `Length` beyond the end of the batch.
    #[error("Length {length} exceeds the {available} bytes left in the batch")]
    LengthBeyondBatch {
        /// Declared `Length`.
        length: i32,
        /// Bytes after the `Length` varint up to the end of the batch.
        available: usize,
    },
    /// The fields end before the declared `Length`.
    #[error("Length is {length} but the fields end after {read} bytes")]
    LengthMismatch {
        /// Declared `Length`.
        length: i32,
        /// Bytes the fields took.
        read: usize,
    },
    /// `OffsetDelta` is not the record's index in the batch.
    #[error("OffsetDelta is {found}, expected {expected} (the record's index)")]
    OffsetDelta {
        /// The record's index.
        expected: i32,
        /// The `OffsetDelta` read.
        found: i32,
    },
    /// `baseTimestamp + TimestampDelta` does not fit an i64.
    #[error("TimestampDelta {0} overflows the batch's baseTimestamp")]
    TimestampOverflow(i64),
    /// A negative `HeadersCount`, or one larger than the bytes left in the record.
    #[error("HeadersCount {0} is negative or exceeds the bytes left in the record")]
    HeadersCount(i32),
    /// A negative `HeaderKeyLength` (header keys are not nullable).
    #[error("HeaderKeyLength {0} is negative")]
    HeaderKeyLength(i32),
}

/// Why the records of a batch were rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordsError {
    /// A compression codec id above 4 (attributes bits 0–2 hold 5, 6 or 7).
    #[error("Unknown compression type id: {0}")]
    UnknownCompression(i16),
    /// The compressed records do not decompress (a corrupt stream, or past
    /// [`DECOMPRESSED_MAX`](crate::protocol::compression::DECOMPRESSED_MAX)).
    #[error("the records do not decompress: {0}")]
    Decompression(String),
    /// `lastOffsetDelta` does not describe `recordsCount` records.
    #[error("lastOffsetDelta {last_offset_delta} does not match recordsCount {records_count}")]
    LastOffsetDelta {
        /// From the header.
        last_offset_delta: i32,
        /// From the header.
        records_count: i32,
    },
    /// `baseOffset + lastOffsetDelta` does not fit an i64.
    #[error("baseOffset {0} plus lastOffsetDelta overflows")]
    OffsetOverflow(i64),
    /// One record is malformed.
    #[error("record {index}: {defect}")]
    Record {
        /// The record's index in the batch (Kafka's `batchIndex`).
        index: i32,
        /// What is wrong with it.
        defect: RecordDefect,
    },
    /// The batch ends before `recordsCount` records were read.
    #[error("recordsCount is {records_count} but the batch ends after {found} records")]
    MissingRecords {
        /// From the header.
        records_count: i32,
        /// Records present.
        found: i32,
    },
    /// Bytes follow the last of the `recordsCount` records.
    #[error("{trailing} bytes follow the last of the {records_count} records (recordsCount)")]
    TrailingBytes {
        /// From the header.
        records_count: i32,
        /// Bytes after the last record.
        trailing: usize,
    },
}

impl RecordsError {
    /// The error a Kafka 4.x broker answers a produce of such a batch with.
    ///
    /// * An unknown codec: `UnifiedLog.analyzeAndValidateRecords` calls `CompressionType.forId`,
    ///   whose `IllegalArgumentException` is not an `ApiException`; `ReplicaManager.
    ///   appendToLocalLog` catches it as a `Throwable`, and `Errors.forException` maps it to
    ///   UNKNOWN_SERVER_ERROR (-1).
    /// * Everything else: `LogValidator.validateBatch`, `DefaultRecordBatch.RecordIterator` and
    ///   `DefaultRecord.readFrom` throw `InvalidRecordException` (no longer a
    ///   `CorruptRecordException` since Kafka 2.5): INVALID_RECORD (87). CORRUPT_MESSAGE (2) is
    ///   for the batch framing and CRC, checked before (`record_batch::validate_batch`).
    pub fn error_code(&self) -> ErrorCode {
        match self {
            RecordsError::UnknownCompression(_) => ErrorCode::UnknownServerError,
            RecordsError::LastOffsetDelta { .. }
            | RecordsError::Decompression(_)
            | RecordsError::OffsetOverflow(_)
            | RecordsError::Record { .. }
            | RecordsError::MissingRecords { .. }
            | RecordsError::TrailingBytes { .. } => ErrorCode::InvalidRecord,
        }
    }

    /// The index in the batch of the record at fault (Kafka's `RecordError.batchIndex`), when
    /// the defect is in or at a record: the first missing record for [`MissingRecords`], the
    /// first undeclared one for [`TrailingBytes`]. `None` for header-level errors.
    ///
    /// [`MissingRecords`]: RecordsError::MissingRecords
    /// [`TrailingBytes`]: RecordsError::TrailingBytes
    pub fn batch_index(&self) -> Option<i32> {
        match self {
            RecordsError::Record { index, .. } => Some(*index),
            RecordsError::MissingRecords { found, .. } => Some(*found),
            RecordsError::TrailingBytes { records_count, .. } => Some(*records_count),
            RecordsError::UnknownCompression(_)
            | RecordsError::Decompression(_)
            | RecordsError::LastOffsetDelta { .. }
            | RecordsError::OffsetOverflow(_) => None,
        }
    }

    /// What is wrong at [`batch_index`](Self::batch_index), without the index (Kafka's
    /// `RecordError.message`).
    pub fn record_message(&self) -> String {
        match self {
            RecordsError::Record { defect, .. } => defect.to_string(),
            other => other.to_string(),
        }
    }
}

/// Checks the compression codec id in `header` (Kafka's `CompressionType.forId`).
pub fn validate_compression(header: &RecordBatchHeader) -> Result<(), RecordsError> {
    let codec = header.compression();
    if codec > COMPRESSION_CODEC_MAX {
        return Err(RecordsError::UnknownCompression(codec));
    }
    Ok(())
}

/// Checks the records of the one batch `batch` whose header, length and CRC were already
/// checked by [`validate_batch`](crate::protocol::record_batch::validate_batch) into `header`.
/// Compressed batches are decompressed first (see the module docs).
pub fn validate_records(batch: &[u8], header: &RecordBatchHeader) -> Result<(), RecordsError> {
    assert_eq!(
        batch.len(),
        header.size_bytes(),
        "validate_records takes exactly one validated batch"
    );
    validate_compression(header)?;
    if i64::from(header.last_offset_delta) != i64::from(header.records_count) - 1 {
        return Err(RecordsError::LastOffsetDelta {
            last_offset_delta: header.last_offset_delta,
            records_count: header.records_count,
        });
    }
    if header
        .base_offset
        .checked_add(i64::from(header.last_offset_delta))
        .is_none()
    {
        return Err(RecordsError::OffsetOverflow(header.base_offset));
    }
    let body = &batch[RECORD_BATCH_HEADER_BYTES..];
    let codec = Codec::from_id(header.compression())
        .map_err(|_| RecordsError::UnknownCompression(header.compression()))?;
    if codec == Codec::None {
        return validate_record_bytes(body, header);
    }
    let records =
        decompress(codec, body).map_err(|error| RecordsError::Decompression(error.to_string()))?;
    validate_record_bytes(&records, header)
}

/// Checks the (uncompressed) records that follow a batch's header.
fn validate_record_bytes(records: &[u8], header: &RecordBatchHeader) -> Result<(), RecordsError> {
    let mut reader = Reader {
        bytes: records,
        at: 0,
    };
    for index in 0..header.records_count {
        if reader.remaining() == 0 {
            return Err(RecordsError::MissingRecords {
                records_count: header.records_count,
                found: index,
            });
        }
        validate_record(&mut reader, index, header.base_timestamp)
            .map_err(|defect| RecordsError::Record { index, defect })?;
    }
    if reader.remaining() != 0 {
        return Err(RecordsError::TrailingBytes {
            records_count: header.records_count,
            trailing: reader.remaining(),
        });
    }
    Ok(())
}

/// Reads the record at `reader` (Kafka's `DefaultRecord.readFrom`) and leaves `reader` after it.
fn validate_record(
    reader: &mut Reader<'_>,
    index: i32,
    base_timestamp: i64,
) -> Result<(), RecordDefect> {
    let length = reader.varint(Field::Length)?;
    let Ok(length_bytes) = usize::try_from(length) else {
        return Err(RecordDefect::NegativeLength(length));
    };
    if length_bytes > reader.remaining() {
        return Err(RecordDefect::LengthBeyondBatch {
            length,
            available: reader.remaining(),
        });
    }
    let mut record = Reader {
        bytes: &reader.bytes[reader.at..reader.at + length_bytes],
        at: 0,
    };
    record.byte(Field::Attributes)?;
    let timestamp_delta = record.varlong(Field::TimestampDelta)?;
    if base_timestamp.checked_add(timestamp_delta).is_none() {
        return Err(RecordDefect::TimestampOverflow(timestamp_delta));
    }
    let offset_delta = record.varint(Field::OffsetDelta)?;
    if offset_delta != index {
        return Err(RecordDefect::OffsetDelta {
            expected: index,
            found: offset_delta,
        });
    }
    record.nullable_bytes(Field::KeyLength, Field::Key)?;
    record.nullable_bytes(Field::ValueLength, Field::Value)?;
    validate_headers(&mut record)?;
    if record.remaining() != 0 {
        return Err(RecordDefect::LengthMismatch {
            length,
            read: record.at,
        });
    }
    reader.at += length_bytes;
    Ok(())
}

/// `HeadersCount` and each header's key (not nullable) and value (nullable).
fn validate_headers(record: &mut Reader<'_>) -> Result<(), RecordDefect> {
    let count = record.varint(Field::HeadersCount)?;
    if usize::try_from(count).map_or(true, |count| count > record.remaining()) {
        return Err(RecordDefect::HeadersCount(count));
    }
    for _ in 0..count {
        let key_length = record.varint(Field::HeaderKeyLength)?;
        if key_length < 0 {
            return Err(RecordDefect::HeaderKeyLength(key_length));
        }
        record.skip(key_length, Field::HeaderKey)?;
        record.nullable_bytes(Field::HeaderValueLength, Field::HeaderValue)?;
    }
    Ok(())
}

/// A bounded cursor: the records of a batch, or the fields of one record.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn byte(&mut self, field: Field) -> Result<u8, RecordDefect> {
        let byte = *self
            .bytes
            .get(self.at)
            .ok_or(RecordDefect::Truncated(field))?;
        self.at += 1;
        Ok(byte)
    }

    /// An unsigned LEB128 value of at most `bits` bits (`ByteUtils.readUnsignedVarint/-long`).
    fn unsigned(&mut self, field: Field, bits: u32) -> Result<u64, RecordDefect> {
        let mut raw: u64 = 0;
        let mut shift = 0;
        loop {
            let byte = self.byte(field)?;
            let payload = u64::from(byte & 0x7f);
            if shift + 7 > bits && payload >> (bits - shift) != 0 {
                return Err(RecordDefect::InvalidVarint(field));
            }
            raw |= payload << shift;
            if byte & 0x80 == 0 {
                return Ok(raw);
            }
            shift += 7;
            if shift >= bits {
                return Err(RecordDefect::InvalidVarint(field));
            }
        }
    }

    /// A zig-zag varint (`ByteUtils.readVarint`).
    fn varint(&mut self, field: Field) -> Result<i32, RecordDefect> {
        let raw = u32::try_from(self.unsigned(field, u32::BITS)?).expect("at most 32 bits read");
        Ok((raw >> 1) as i32 ^ -((raw & 1) as i32))
    }

    /// A zig-zag varlong (`ByteUtils.readVarlong`).
    fn varlong(&mut self, field: Field) -> Result<i64, RecordDefect> {
        let raw = self.unsigned(field, u64::BITS)?;
        Ok((raw >> 1) as i64 ^ -((raw & 1) as i64))
    }

    fn skip(&mut self, length: i32, field: Field) -> Result<(), RecordDefect> {
        let length = usize::try_from(length).expect("callers skip non-negative lengths");
        if length > self.remaining() {
            return Err(RecordDefect::Truncated(field));
        }
        self.at += length;
        Ok(())
    }

    /// A varint length and that many bytes; a negative length is null (`Utils.readBytes`).
    fn nullable_bytes(&mut self, length_field: Field, field: Field) -> Result<(), RecordDefect> {
        let length = self.varint(length_field)?;
        if length >= 0 {
            self.skip(length, field)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
