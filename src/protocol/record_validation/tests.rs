//! One test per rule: each builds a batch with exactly one defect and a correct `batchLength`
//! and CRC, so that only the record-level rule can reject it. Then properties over arbitrary
//! and mutated batches.

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::protocol::compression::Codec;
use crate::protocol::record_batch::{build_batch, decode_batch, validate_batch, LOG_OVERHEAD};

const BASE_TIMESTAMP: i64 = 1_000;
const CRC_START: usize = 21;

fn unsigned(buf: &mut Vec<u8>, mut raw: u64) {
    while raw >= 0x80 {
        buf.push(raw as u8 | 0x80);
        raw >>= 7;
    }
    buf.push(raw as u8);
}

fn zigzag(buf: &mut Vec<u8>, value: i64) {
    unsigned(buf, ((value << 1) ^ (value >> 63)) as u64);
}

fn nullable(buf: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => zigzag(buf, -1),
        Some(bytes) => {
            zigzag(buf, bytes.len() as i64);
            buf.extend_from_slice(bytes);
        }
    }
}

/// `Attributes`, `TimestampDelta` and `OffsetDelta` of a record.
fn prefix(offset_delta: i64) -> Vec<u8> {
    let mut body = vec![0];
    zigzag(&mut body, 10 * offset_delta);
    zigzag(&mut body, offset_delta);
    body
}

type Header<'a> = (&'a [u8], Option<&'a [u8]>);

/// The fields of a record (everything after `Length`).
fn fields(
    offset_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) -> Vec<u8> {
    let mut body = prefix(offset_delta);
    nullable(&mut body, key);
    nullable(&mut body, value);
    zigzag(&mut body, headers.len() as i64);
    for (key, value) in headers {
        nullable(&mut body, Some(key));
        nullable(&mut body, *value);
    }
    body
}

/// The fields of a well-formed record at `index`: a key, a value and one header.
fn body(index: i64) -> Vec<u8> {
    fields(index, Some(b"key"), Some(b"value"), &[(b"h", Some(b"x"))])
}

/// `Length` followed by `body`.
fn framed(body: &[u8]) -> Vec<u8> {
    framed_as(body.len() as i64, body)
}

fn framed_as(length: i64, body: &[u8]) -> Vec<u8> {
    let mut record = Vec::new();
    zigzag(&mut record, length);
    record.extend_from_slice(body);
    record
}

/// Sets `batchLength` to the bytes present and recomputes the CRC.
fn seal(batch: &mut [u8]) {
    let batch_length = (batch.len() - LOG_OVERHEAD) as i32;
    batch[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c::crc32c(&batch[CRC_START..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// A sealed uncompressed batch of `records` (already framed) whose header claims
/// `records_count` records and `last_offset_delta`.
fn batch_claiming(records: &[Vec<u8>], records_count: i32, last_offset_delta: i32) -> Vec<u8> {
    let mut batch = Vec::new();
    batch.extend_from_slice(&0i64.to_be_bytes()); // baseOffset
    batch.extend_from_slice(&0i32.to_be_bytes()); // batchLength, sealed below
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // partitionLeaderEpoch
    batch.push(2); // magic
    batch.extend_from_slice(&0u32.to_be_bytes()); // crc, sealed below
    batch.extend_from_slice(&0i16.to_be_bytes()); // attributes
    batch.extend_from_slice(&last_offset_delta.to_be_bytes());
    batch.extend_from_slice(&BASE_TIMESTAMP.to_be_bytes()); // baseTimestamp
    batch.extend_from_slice(&BASE_TIMESTAMP.to_be_bytes()); // maxTimestamp
    batch.extend_from_slice(&(-1i64).to_be_bytes()); // producerId
    batch.extend_from_slice(&(-1i16).to_be_bytes()); // producerEpoch
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // baseSequence
    batch.extend_from_slice(&records_count.to_be_bytes());
    for record in records {
        batch.extend_from_slice(record);
    }
    seal(&mut batch);
    batch
}

/// A sealed batch of exactly `records`, its header consistent with them.
fn batch_of(records: &[Vec<u8>]) -> Vec<u8> {
    let count = records.len() as i32;
    batch_claiming(records, count, count - 1)
}

/// Well-formed records 0..count, framed.
fn records(count: i64) -> Vec<Vec<u8>> {
    (0..count).map(|index| framed(&body(index))).collect()
}

fn with_attributes(mut batch: Vec<u8>, attributes: i16) -> Vec<u8> {
    batch[21..23].copy_from_slice(&attributes.to_be_bytes());
    seal(&mut batch);
    batch
}

/// The record-level verdict on a batch whose framing and CRC are valid.
fn check(batch: &[u8]) -> Result<(), RecordsError> {
    let header = validate_batch(batch).expect("framing and CRC are valid");
    assert_eq!(header.size_bytes(), batch.len(), "one whole batch");
    validate_records(batch, &header)
}

fn defect_at(batch: &[u8]) -> (i32, RecordDefect) {
    match check(batch) {
        Err(RecordsError::Record { index, defect }) => (index, defect),
        other => panic!("expected a record defect, got {other:?}"),
    }
}

#[test]
fn a_well_formed_batch_with_keys_values_and_headers_is_accepted_and_decodes() {
    let batch = batch_of(&records(3));
    assert_eq!(check(&batch), Ok(()));
    let header = validate_batch(&batch).expect("valid");
    let decoded = decode_batch(&Bytes::from(batch.clone()), &header, 0..batch.len())
        .expect("an accepted batch decodes");
    let offsets: Vec<i64> = decoded.iter().map(|record| record.offset).collect();
    assert_eq!(offsets, [0, 1, 2]);
    assert_eq!(decoded[2].timestamp_ms, BASE_TIMESTAMP + 20);
}

#[test]
fn the_seedlog_producer_batch_is_accepted() {
    let batch = build_batch(&[(Some(b"k"), Some(b"v")), (None, None)], 7);
    assert_eq!(check(&batch), Ok(()));
}

#[test]
fn any_negative_key_value_or_header_value_length_is_null() {
    let mut body = prefix(0);
    zigzag(&mut body, -1); // key
    zigzag(&mut body, -7); // value: Kafka's Utils.readBytes reads any negative length as null
    zigzag(&mut body, 1);
    nullable(&mut body, Some(b"h"));
    zigzag(&mut body, -2); // header value
    assert_eq!(check(&batch_of(&[framed(&body)])), Ok(()));
}

#[test]
fn a_compression_codec_above_zstd_is_unknown_and_answers_unknown_server_error() {
    for codec in 5..=7 {
        let batch = with_attributes(batch_of(&records(1)), codec);
        let error = check(&batch).expect_err("no such codec");
        assert_eq!(error, RecordsError::UnknownCompression(codec));
        assert_eq!(error.error_code(), ErrorCode::UnknownServerError);
        assert_eq!(error.batch_index(), None, "a batch-level error");
        assert_eq!(
            error.to_string(),
            format!("Unknown compression type id: {codec}")
        );
    }
}

/// `batch` with its records compressed by `codec`, resealed.
fn compressed(batch: &[u8], codec: Codec) -> Vec<u8> {
    let body = crate::protocol::compression::compress(codec, &batch[RECORD_BATCH_HEADER_BYTES..]);
    let mut out = batch[..RECORD_BATCH_HEADER_BYTES].to_vec();
    out.extend_from_slice(&body);
    with_attributes(out, codec.id())
}

const CODECS: [Codec; 4] = [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd];

#[test]
fn compressed_batches_are_decompressed_checked_and_decode() {
    for codec in CODECS {
        let batch = compressed(&batch_of(&records(3)), codec);
        assert_eq!(check(&batch), Ok(()), "{codec:?}");
        let header = validate_batch(&batch).expect("valid");
        let bytes = Bytes::from(batch);
        let decoded = decode_batch(&bytes, &header, 0..bytes.len()).expect("decodes");
        assert_eq!(decoded.len(), 3, "{codec:?}");
        assert_eq!(decoded[2].offset, 2);
    }
}

#[test]
fn a_compressed_batch_whose_records_lie_is_rejected_with_the_record_index() {
    for codec in CODECS {
        let lying = compressed(&batch_claiming(&records(2), 3, 2), codec);
        let error = check(&lying).expect_err("two records claimed as three");
        assert_eq!(error.batch_index(), Some(2), "{codec:?}: {error}");
        assert_eq!(error.error_code(), ErrorCode::InvalidRecord);
    }
}

#[test]
fn compressed_bytes_that_do_not_decompress_are_invalid_records() {
    let garbage = vec![vec![0xff; 9]];
    for codec in CODECS {
        let batch = with_attributes(batch_claiming(&garbage, 1, 0), codec.id());
        let error = check(&batch).expect_err("garbage");
        assert!(
            matches!(error, RecordsError::Decompression(_)),
            "{codec:?}: {error}"
        );
        assert_eq!(error.error_code(), ErrorCode::InvalidRecord);
    }
}

#[test]
fn a_compressed_batch_still_needs_a_last_offset_delta_that_matches_records_count() {
    let batch = with_attributes(batch_claiming(&[vec![0xff; 9]], 2, 4), 1);
    assert!(matches!(
        check(&batch),
        Err(RecordsError::LastOffsetDelta { .. })
    ));
}

#[test]
fn a_last_offset_delta_that_disagrees_with_records_count_is_invalid() {
    let batch = batch_claiming(&records(2), 2, 2);
    let error = check(&batch).expect_err("lastOffsetDelta 2 for 2 records");
    assert_eq!(
        error,
        RecordsError::LastOffsetDelta {
            last_offset_delta: 2,
            records_count: 2
        }
    );
    assert_eq!(error.error_code(), ErrorCode::InvalidRecord);
}

#[test]
fn an_empty_batch_is_invalid() {
    assert!(matches!(
        check(&batch_claiming(&[], 0, 0)),
        Err(RecordsError::LastOffsetDelta {
            records_count: 0,
            ..
        })
    ));
}

#[test]
fn a_last_offset_beyond_i64_is_invalid() {
    let mut batch = batch_of(&records(2));
    batch[0..8].copy_from_slice(&i64::MAX.to_be_bytes()); // baseOffset is outside the CRC
    assert_eq!(check(&batch), Err(RecordsError::OffsetOverflow(i64::MAX)));
}

#[test]
fn a_records_count_above_the_records_present_is_invalid() {
    let batch = batch_claiming(&records(2), 3, 2);
    let error = check(&batch).expect_err("a record is missing");
    assert_eq!(
        error,
        RecordsError::MissingRecords {
            records_count: 3,
            found: 2
        }
    );
    assert_eq!(error.batch_index(), Some(2), "the first missing record");
    assert_eq!(error.error_code(), ErrorCode::InvalidRecord);
}

#[test]
fn a_records_count_below_the_records_present_leaves_trailing_bytes() {
    let all = records(3);
    let batch = batch_claiming(&all, 2, 1);
    let error = check(&batch).expect_err("an undeclared record");
    assert_eq!(
        error,
        RecordsError::TrailingBytes {
            records_count: 2,
            trailing: all[2].len()
        }
    );
    assert_eq!(error.batch_index(), Some(2), "the first undeclared record");
}

#[test]
fn a_byte_after_the_last_record_is_invalid() {
    let mut all = records(2);
    all[1].push(0);
    assert_eq!(
        check(&batch_of(&all)),
        Err(RecordsError::TrailingBytes {
            records_count: 2,
            trailing: 1
        })
    );
}

#[test]
fn a_negative_record_length_is_invalid() {
    let batch = batch_of(&[framed_as(-1, &body(0))]);
    assert_eq!(defect_at(&batch), (0, RecordDefect::NegativeLength(-1)));
}

#[test]
fn a_record_length_beyond_the_batch_is_invalid() {
    let last = body(1);
    let batch = batch_of(&[framed(&body(0)), framed_as(last.len() as i64 + 5, &last)]);
    assert_eq!(
        defect_at(&batch),
        (
            1,
            RecordDefect::LengthBeyondBatch {
                length: last.len() as i32 + 5,
                available: last.len()
            }
        )
    );
}

#[test]
fn a_record_length_beyond_its_fields_is_invalid() {
    let mut padded = body(0);
    let read = padded.len();
    padded.push(0);
    assert_eq!(
        defect_at(&batch_of(&[framed(&padded)])),
        (
            0,
            RecordDefect::LengthMismatch {
                length: read as i32 + 1,
                read
            }
        )
    );
}

#[test]
fn a_record_length_short_of_its_fields_is_invalid() {
    let fields = body(0);
    let batch = batch_of(&[framed_as(fields.len() as i64 - 1, &fields)]);
    assert_eq!(
        defect_at(&batch),
        (0, RecordDefect::Truncated(Field::HeaderValue)),
        "the last byte of the header value is outside the record"
    );
}

#[test]
fn a_zero_length_record_is_cut_inside_its_attributes() {
    let batch = batch_of(&[framed(&[])]);
    assert_eq!(
        defect_at(&batch),
        (0, RecordDefect::Truncated(Field::Attributes))
    );
}

#[test]
fn a_length_varint_cut_by_the_end_of_the_batch_is_invalid() {
    let batch = batch_claiming(&[framed(&body(0)), vec![0x80]], 2, 1);
    assert_eq!(
        defect_at(&batch),
        (1, RecordDefect::Truncated(Field::Length))
    );
}

#[test]
fn a_varint_longer_than_five_bytes_is_invalid() {
    let mut body = vec![0, 0]; // attributes, timestampDelta 0
    body.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]); // offsetDelta 0 in 6 bytes
    body.extend_from_slice(&[1, 1, 0]); // null key, null value, no headers
    assert_eq!(
        defect_at(&batch_of(&[framed(&body)])),
        (0, RecordDefect::InvalidVarint(Field::OffsetDelta))
    );
}

#[test]
fn a_varint_with_bits_beyond_32_is_invalid() {
    // Java's readVarint drops the high bits and reads 0; seedlog's decoder would read 2^32.
    let mut body = vec![0, 0];
    body.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x10]);
    body.extend_from_slice(&[1, 1, 0]);
    assert_eq!(
        defect_at(&batch_of(&[framed(&body)])),
        (0, RecordDefect::InvalidVarint(Field::OffsetDelta))
    );
}

#[test]
fn a_varlong_longer_than_ten_bytes_is_invalid() {
    let mut body = vec![0];
    body.extend_from_slice(&[0x80; 10]);
    body.push(0x00); // timestampDelta 0 in 11 bytes
    body.extend_from_slice(&[0, 1, 1, 0]);
    assert_eq!(
        defect_at(&batch_of(&[framed(&body)])),
        (0, RecordDefect::InvalidVarint(Field::TimestampDelta))
    );
}

#[test]
fn a_timestamp_delta_that_overflows_the_base_timestamp_is_invalid() {
    let mut body = vec![0];
    zigzag(&mut body, i64::MAX);
    body.extend_from_slice(&[0, 1, 1, 0]);
    assert_eq!(
        defect_at(&batch_of(&[framed(&body)])),
        (0, RecordDefect::TimestampOverflow(i64::MAX))
    );
}

#[test]
fn an_offset_delta_that_is_not_the_record_index_is_invalid() {
    let batch = batch_of(&[framed(&body(0)), framed(&body(2))]);
    let error = check(&batch).expect_err("offset deltas 0, 2");
    assert_eq!(
        error,
        RecordsError::Record {
            index: 1,
            defect: RecordDefect::OffsetDelta {
                expected: 1,
                found: 2
            }
        }
    );
    assert_eq!(error.batch_index(), Some(1));
    assert_eq!(error.error_code(), ErrorCode::InvalidRecord);
    assert_eq!(
        error.to_string(),
        "record 1: OffsetDelta is 2, expected 1 (the record's index)"
    );
    assert_eq!(
        error.record_message(),
        "OffsetDelta is 2, expected 1 (the record's index)"
    );
}

#[test]
fn a_key_longer_than_the_record_is_invalid() {
    let mut body = prefix(0);
    zigzag(&mut body, 100);
    body.extend_from_slice(b"key");
    assert_eq!(
        defect_at(&batch_of(&[framed(&body)])),
        (0, RecordDefect::Truncated(Field::Key))
    );
}

#[test]
fn a_value_longer_than_the_record_is_invalid() {
    let mut body = prefix(0);
    nullable(&mut body, None);
    zigzag(&mut body, 100);
    body.extend_from_slice(b"value");
    assert_eq!(
        defect_at(&batch_of(&[framed(&body)])),
        (0, RecordDefect::Truncated(Field::Value))
    );
}

#[test]
fn a_negative_headers_count_is_invalid() {
    let mut body = prefix(0);
    body.extend_from_slice(&[1, 1]);
    zigzag(&mut body, -1);
    assert_eq!(
        defect_at(&batch_of(&[framed(&body)])),
        (0, RecordDefect::HeadersCount(-1))
    );
}

#[test]
fn a_headers_count_above_the_bytes_left_is_invalid() {
    let mut body = prefix(0);
    body.extend_from_slice(&[1, 1]);
    zigzag(&mut body, 100);
    body.extend_from_slice(&[2, b'h', 1]); // one header
    assert_eq!(
        defect_at(&batch_of(&[framed(&body)])),
        (0, RecordDefect::HeadersCount(100))
    );
}

#[test]
fn a_headers_count_above_the_headers_present_is_invalid() {
    let mut body = prefix(0);
    body.extend_from_slice(&[1, 1]);
    zigzag(&mut body, 2);
    body.extend_from_slice(&[2, b'h', 1]); // only one header
    assert_eq!(
        defect_at(&batch_of(&[framed(&body)])),
        (0, RecordDefect::Truncated(Field::HeaderKeyLength))
    );
}

#[test]
fn a_negative_header_key_length_is_invalid() {
    let mut body = prefix(0);
    body.extend_from_slice(&[1, 1]);
    zigzag(&mut body, 1);
    zigzag(&mut body, -1);
    body.push(1);
    assert_eq!(
        defect_at(&batch_of(&[framed(&body)])),
        (0, RecordDefect::HeaderKeyLength(-1))
    );
}

#[test]
fn a_header_key_longer_than_the_record_is_invalid() {
    let mut body = prefix(0);
    body.extend_from_slice(&[1, 1]);
    zigzag(&mut body, 1);
    zigzag(&mut body, 50);
    body.extend_from_slice(b"h");
    assert_eq!(
        defect_at(&batch_of(&[framed(&body)])),
        (0, RecordDefect::Truncated(Field::HeaderKey))
    );
}

#[test]
fn a_header_value_longer_than_the_record_is_invalid() {
    let mut body = prefix(0);
    body.extend_from_slice(&[1, 1]);
    zigzag(&mut body, 1);
    nullable(&mut body, Some(b"h"));
    zigzag(&mut body, 50);
    body.extend_from_slice(b"x");
    assert_eq!(
        defect_at(&batch_of(&[framed(&body)])),
        (0, RecordDefect::Truncated(Field::HeaderValue))
    );
}

/// The property: the validator never panics, and a batch it accepts (uncompressed, not a
/// control batch, which the decoder skips) decodes into exactly `recordsCount` records whose
/// offsets are `baseOffset..=lastOffset`.
fn accepted_batches_decode_into_their_records(bytes: &[u8]) -> Result<bool, TestCaseError> {
    let Ok(header) = validate_batch(bytes) else {
        return Ok(false);
    };
    let batch = &bytes[..header.size_bytes()];
    if validate_records(batch, &header).is_err() {
        return Ok(false);
    }
    prop_assert!(header.compression() <= COMPRESSION_CODEC_MAX);
    prop_assert_eq!(header.last_offset_delta, header.records_count - 1);
    if header.compression() != 0 || header.is_control() {
        return Ok(true);
    }
    let decoded = decode_batch(&Bytes::copy_from_slice(batch), &header, 0..batch.len());
    let decoded = decoded.map_err(|error| TestCaseError::fail(format!("{error}")))?;
    prop_assert_eq!(decoded.len(), header.records_count as usize);
    let offsets: Vec<i64> = decoded.iter().map(|record| record.offset).collect();
    let expected: Vec<i64> = (header.base_offset..=header.last_offset()).collect();
    prop_assert_eq!(offsets, expected);
    Ok(true)
}

/// A well-formed record: timestamp delta, key, value and headers.
fn arbitrary_record() -> impl Strategy<Value = RecordSpec> {
    (
        any::<i32>(),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
        proptest::collection::vec(
            (
                proptest::collection::vec(any::<u8>(), 0..4),
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..4)),
            ),
            0..3,
        ),
    )
        .prop_map(|(timestamp_delta, key, value, headers)| RecordSpec {
            timestamp_delta: i64::from(timestamp_delta),
            key,
            value,
            headers,
        })
}

#[derive(Debug, Clone)]
struct RecordSpec {
    timestamp_delta: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

fn valid_batch(specs: &[RecordSpec]) -> Vec<u8> {
    let framed_records: Vec<Vec<u8>> = specs
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            let mut body = vec![0];
            zigzag(&mut body, spec.timestamp_delta);
            zigzag(&mut body, index as i64);
            nullable(&mut body, spec.key.as_deref());
            nullable(&mut body, spec.value.as_deref());
            zigzag(&mut body, spec.headers.len() as i64);
            for (key, value) in &spec.headers {
                nullable(&mut body, Some(key));
                nullable(&mut body, value.as_deref());
            }
            framed(&body)
        })
        .collect();
    batch_of(&framed_records)
}

/// One edit of a valid batch; the CRC and `batchLength` are recomputed afterwards.
#[derive(Debug, Clone)]
enum Mutation {
    Set { at: usize, byte: u8 },
    Flip { at: usize, bit: u8 },
    Truncate { keep: usize },
    Extend { bytes: Vec<u8> },
    Insert { at: usize, byte: u8 },
    Remove { at: usize },
}

fn arbitrary_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        any::<usize>().prop_map(|keep| Mutation::Truncate { keep }),
        proptest::collection::vec(any::<u8>(), 1..12).prop_map(|bytes| Mutation::Extend { bytes }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Insert { at, byte }),
        any::<usize>().prop_map(|at| Mutation::Remove { at }),
    ]
}

/// Applies `mutation` to the records section and the header fields after the CRC (bytes 21..),
/// or, for `Truncate`, anywhere; then seals the batch again when a header is left.
fn mutate(mut batch: Vec<u8>, mutation: &Mutation) -> Vec<u8> {
    let editable = batch.len() - CRC_START;
    match mutation {
        Mutation::Set { at, byte } => batch[CRC_START + at % editable] = *byte,
        Mutation::Flip { at, bit } => batch[CRC_START + at % editable] ^= 1 << bit,
        Mutation::Truncate { keep } => batch.truncate(keep % batch.len()),
        Mutation::Extend { bytes } => batch.extend_from_slice(bytes),
        Mutation::Insert { at, byte } => batch.insert(CRC_START + at % (editable + 1), *byte),
        Mutation::Remove { at } => {
            batch.remove(CRC_START + at % editable);
        }
    }
    if batch.len() >= RECORD_BATCH_HEADER_BYTES {
        seal(&mut batch);
    }
    batch
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_the_validator(
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        accepted_batches_decode_into_their_records(&bytes)?;
    }

    #[test]
    fn arbitrary_records_behind_a_sealed_header_are_accepted_only_when_they_decode(
        attributes in prop_oneof![Just(0i16), any::<i16>()],
        records_count in -1i32..5,
        last_offset_delta in -1i32..5,
        base_offset in prop_oneof![Just(0i64), any::<i64>()],
        base_timestamp in prop_oneof![Just(BASE_TIMESTAMP), any::<i64>()],
        records in proptest::collection::vec(any::<u8>(), 0..120),
    ) {
        let mut batch = batch_claiming(&[records], records_count, last_offset_delta);
        batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
        batch[21..23].copy_from_slice(&attributes.to_be_bytes());
        batch[27..35].copy_from_slice(&base_timestamp.to_be_bytes());
        seal(&mut batch);
        accepted_batches_decode_into_their_records(&batch)?;
    }

    #[test]
    fn valid_batches_are_accepted_and_decode_into_their_records(
        specs in proptest::collection::vec(arbitrary_record(), 1..6),
    ) {
        let batch = valid_batch(&specs);
        prop_assert!(accepted_batches_decode_into_their_records(&batch)?, "a valid batch is accepted");
    }

    #[test]
    fn mutated_valid_batches_are_accepted_only_when_they_decode(
        specs in proptest::collection::vec(arbitrary_record(), 1..6),
        mutation in arbitrary_mutation(),
    ) {
        let batch = mutate(valid_batch(&specs), &mutation);
        accepted_batches_decode_into_their_records(&batch)?;
    }
}
