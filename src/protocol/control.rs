//! Transaction markers: the control batches a transaction coordinator has written to each
//! partition of a transaction when it commits or aborts (Kafka's `EndTransactionMarker`). A
//! marker batch is transactional and control (attributes `0x30`), uncompressed, stamped with the
//! producer's id and epoch, and holds one record: key `[version i16 = 0, type i16]` (0 abort,
//! 1 commit), value `[version i16 = 0, coordinator epoch i32]`. Consumers skip control batches;
//! a `read_committed` reader learns from them where a transaction ends.

use bytes::{BufMut, Bytes};

use super::record_batch::{
    batch_records, seal_crc, BatchBuilder, BatchError, RecordBatchHeader, ATTRIBUTE_CONTROL,
    ATTRIBUTE_TRANSACTIONAL,
};

/// What a marker says of its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlType {
    /// The transaction's records are discarded.
    Abort,
    /// The transaction's records become visible to `read_committed` readers.
    Commit,
}

impl ControlType {
    /// The record key's type field.
    pub fn id(self) -> i16 {
        match self {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
        }
    }
}

/// A transaction marker's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndTransactionMarker {
    /// Commit or abort.
    pub control: ControlType,
    /// The epoch of the coordinator that wrote it (a marker from an older coordinator is
    /// refused by the partition leader).
    pub coordinator_epoch: i32,
}

/// The marker batch for `producer_id` at `producer_epoch` (its base offset 0 until appended).
pub fn marker_batch(
    marker: EndTransactionMarker,
    (producer_id, producer_epoch): (i64, i16),
    timestamp_ms: i64,
) -> Bytes {
    let mut key = Vec::with_capacity(4);
    key.put_i16(0);
    key.put_i16(marker.control.id());
    let mut value = Vec::with_capacity(6);
    value.put_i16(0);
    value.put_i32(marker.coordinator_epoch);
    let mut builder = BatchBuilder::default();
    builder.push(timestamp_ms, Some(&key), Some(&value));
    let mut batch = builder.finish().to_vec();
    batch[21..23].copy_from_slice(&(ATTRIBUTE_TRANSACTIONAL | ATTRIBUTE_CONTROL).to_be_bytes());
    batch[43..51].copy_from_slice(&producer_id.to_be_bytes());
    batch[51..53].copy_from_slice(&producer_epoch.to_be_bytes());
    seal_crc(&mut batch);
    Bytes::from(batch)
}

/// The marker a control batch (validated, at `range` of `records`) holds.
pub fn decode_marker(
    records: &Bytes,
    header: &RecordBatchHeader,
    range: std::ops::Range<usize>,
) -> Result<EndTransactionMarker, BatchError> {
    if !header.is_control() || !header.is_transactional() {
        return Err(BatchError::Invalid("not a transaction marker batch"));
    }
    let decoded = batch_records(records, header, range)?;
    let [record] = decoded.as_slice() else {
        return Err(BatchError::Invalid("a marker batch holds one record"));
    };
    let key = record.key.as_deref().unwrap_or_default();
    let value = record.value.as_deref().unwrap_or_default();
    if key.len() < 4 || value.len() < 6 {
        return Err(BatchError::Invalid(
            "a marker record shorter than its fields",
        ));
    }
    let field = |bytes: &[u8], at: usize| i16::from_be_bytes([bytes[at], bytes[at + 1]]);
    if field(key, 0) != 0 || field(value, 0) != 0 {
        return Err(BatchError::Invalid("a marker version other than 0"));
    }
    let control = match field(key, 2) {
        0 => ControlType::Abort,
        1 => ControlType::Commit,
        _ => {
            return Err(BatchError::Invalid(
                "a control record that is no transaction marker",
            ))
        }
    };
    let coordinator_epoch = i32::from_be_bytes([value[2], value[3], value[4], value[5]]);
    Ok(EndTransactionMarker {
        control,
        coordinator_epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::record_batch::{decode_records, validate_batch};

    fn commit() -> EndTransactionMarker {
        EndTransactionMarker {
            control: ControlType::Commit,
            coordinator_epoch: 5,
        }
    }

    #[test]
    fn a_marker_batch_round_trips_and_carries_the_producer() {
        for control in [ControlType::Commit, ControlType::Abort] {
            let marker = EndTransactionMarker {
                control,
                ..commit()
            };
            let batch = marker_batch(marker, (42, 3), 1_000);
            let header = validate_batch(&batch).expect("a valid batch, CRC included");
            assert!(header.is_control() && header.is_transactional());
            assert_eq!((header.producer_id, header.producer_epoch), (42, 3));
            assert_eq!(header.compression(), 0);
            assert_eq!(decode_marker(&batch, &header, 0..batch.len()), Ok(marker));
        }
    }

    #[test]
    fn consumers_skip_markers() {
        let batch = marker_batch(commit(), (42, 3), 1_000);
        assert_eq!(decode_records(&batch), Ok(Vec::new()));
    }

    #[test]
    fn the_marker_record_is_kafkas_layout() {
        let batch = marker_batch(commit(), (42, 3), 1_000);
        let header = validate_batch(&batch).expect("valid");
        let records = batch_records(&batch, &header, 0..batch.len()).expect("decodes");
        assert_eq!(records[0].key.as_deref(), Some(&[0u8, 0, 0, 1][..]));
        assert_eq!(records[0].value.as_deref(), Some(&[0u8, 0, 0, 0, 0, 5][..]));
    }

    #[test]
    fn a_data_batch_is_no_marker() {
        let batch = crate::protocol::record_batch::build_batch(&[(None, Some(b"v"))], 0);
        let header = validate_batch(&batch).expect("valid");
        assert!(decode_marker(&batch, &header, 0..batch.len()).is_err());
    }
}
