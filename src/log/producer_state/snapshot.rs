//! Kafka's producer-state snapshot file (`ProducerStateManager.writeSnapshot` and
//! `readSnapshot`, schema version 1): the producer state of a log as of an offset, kept in the
//! partition directory as `{offset:020}.snapshot`. It describes every batch below that offset.
//!
//! The layout (big-endian, Kafka's `Struct` encoding of its snapshot schema):
//!
//! ```text
//! version i16 (1) | crc u32 (CRC-32C of every byte after it) | entry count i32 | entries:
//!   producer_id i64 | epoch i16 | last_sequence i32 | last_offset i64 | offset_delta i32 |
//!   timestamp i64 | coordinator_epoch i32 (-1) | current_txn_first_offset i64 (-1)
//! ```
//!
//! Kafka writes one entry per producer, for its last batch. seedlog writes one entry per
//! retained batch (up to five per producer), producers in id order and each producer's batches
//! oldest first, so the whole window a retry is recognised among survives a restart. Kafka's
//! reader keeps the last entry of each producer id, which is its last batch: it reads these
//! files as if Kafka had written them. seedlog reads the entries back as batch headers through
//! [`ProducerStates::update`], so the rules that built the state (a new epoch drops the older
//! epoch's batches, five batches kept) rebuild it. There are no transactions yet:
//! `coordinator_epoch` and `current_txn_first_offset` are written -1 and ignored on read.
//!
//! A file whose length does not fit its entry count, of another version, whose CRC does not
//! match, or whose entries do not describe batches below its offset is invalid (Kafka's
//! `CorruptSnapshotException`): the log deletes it and falls back to an older snapshot or to the
//! header walk.
//!
//! The first sequence of an entry is its last sequence minus its offset delta, wrapping past
//! the largest int as Kafka's `DefaultRecordBatch.decrementSequence` does; that inverts
//! [`increment_sequence`] for every sequence a producer stamps (0 and up).

use super::{increment_sequence, ProducerStates};
use crate::log::segment::{offset_file_name, parse_offset_file_name};
use crate::protocol::record_batch::{be_i16, be_i32, be_i64, RecordBatchHeader, MAGIC_V2};

/// The only version Kafka writes and reads.
pub const SNAPSHOT_VERSION: i16 = 1;
/// Where the bytes the CRC covers start: after the version (2 bytes) and the CRC (4).
const CRC_START: usize = 6;
/// Version, CRC and entry count.
const HEADER_BYTES: usize = CRC_START + 4;
/// One entry: 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8 bytes.
pub const ENTRY_BYTES: usize = 46;
/// `coordinator_epoch` of a producer with no transaction (Kafka's empty entry's).
const NO_COORDINATOR_EPOCH: i32 = -1;
/// `current_txn_first_offset` of a producer with no open transaction.
const NO_TRANSACTION: i64 = -1;

/// `orders-0/00000000000000000042.snapshot`.
pub fn snapshot_name(directory: &str, offset: i64) -> String {
    offset_file_name(directory, offset, "snapshot")
}

/// The offset encoded in a snapshot file name.
pub fn parse_snapshot_name(directory: &str, name: &str) -> Option<i64> {
    parse_offset_file_name(directory, name, "snapshot")
}

/// Whether a file of `len` bytes can hold a snapshot (checked before it is read).
pub fn is_snapshot_length(len: u64) -> bool {
    len >= HEADER_BYTES as u64 && (len - HEADER_BYTES as u64).is_multiple_of(ENTRY_BYTES as u64)
}

/// Why a snapshot file is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// The length does not fit the entry count.
    #[error("a snapshot of {len} bytes cannot hold {count} entries")]
    Length {
        /// The file's length.
        len: usize,
        /// The count it holds (-1 if too short to hold one).
        count: i32,
    },
    /// Another version.
    #[error("snapshot version {0}, expected {SNAPSHOT_VERSION}")]
    Version(i16),
    /// The CRC does not match.
    #[error("snapshot CRC {stored:#010x}, computed {computed:#010x}")]
    Crc {
        /// The CRC the file holds.
        stored: u32,
        /// The CRC of its bytes.
        computed: u32,
    },
    /// An entry is out of shape.
    #[error("snapshot entry {index}: {reason}")]
    Entry {
        /// Its position in the file.
        index: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl ProducerStates {
    /// The snapshot file of this state.
    pub fn to_snapshot(&self) -> Vec<u8> {
        let batches: usize = self
            .producers
            .values()
            .map(|entry| entry.batches.len())
            .sum();
        let count = i32::try_from(batches).expect("five batches per producer id fit an i32");
        let mut bytes = Vec::with_capacity(HEADER_BYTES + batches * ENTRY_BYTES);
        bytes.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        bytes.extend_from_slice(&[0; 4]); // the CRC, sealed below
        bytes.extend_from_slice(&count.to_be_bytes());
        for (producer_id, entry) in &self.producers {
            for batch in &entry.batches {
                let offset_delta = i32::try_from(batch.last_offset - batch.first_offset)
                    .expect("a batch's offsets span at most an i32 (its last offset delta)");
                assert_eq!(
                    increment_sequence(batch.first_sequence, offset_delta),
                    batch.last_sequence,
                    "a batch's sequences span its offsets"
                );
                bytes.extend_from_slice(&producer_id.to_be_bytes());
                bytes.extend_from_slice(&entry.epoch.to_be_bytes());
                bytes.extend_from_slice(&batch.last_sequence.to_be_bytes());
                bytes.extend_from_slice(&batch.last_offset.to_be_bytes());
                bytes.extend_from_slice(&offset_delta.to_be_bytes());
                bytes.extend_from_slice(&batch.timestamp.to_be_bytes());
                bytes.extend_from_slice(&NO_COORDINATOR_EPOCH.to_be_bytes());
                bytes.extend_from_slice(&NO_TRANSACTION.to_be_bytes());
            }
        }
        assert_eq!(bytes.len(), HEADER_BYTES + batches * ENTRY_BYTES);
        let crc = crc32c::crc32c(&bytes[CRC_START..]);
        bytes[2..CRC_START].copy_from_slice(&crc.to_be_bytes());
        bytes
    }

    /// The state a snapshot file taken at `offset` holds.
    pub fn from_snapshot(bytes: &[u8], offset: i64) -> Result<ProducerStates, SnapshotError> {
        let count = if bytes.len() >= HEADER_BYTES {
            be_i32(bytes, CRC_START)
        } else {
            -1
        };
        let fits = usize::try_from(count).is_ok_and(|count| {
            Some(bytes.len()) == count.checked_mul(ENTRY_BYTES).map(|len| len + HEADER_BYTES)
        });
        if !fits {
            return Err(SnapshotError::Length {
                len: bytes.len(),
                count,
            });
        }
        let version = i16::from_be_bytes([bytes[0], bytes[1]]);
        if version != SNAPSHOT_VERSION {
            return Err(SnapshotError::Version(version));
        }
        let stored = be_i32(bytes, 2) as u32;
        let computed = crc32c::crc32c(&bytes[CRC_START..]);
        if stored != computed {
            return Err(SnapshotError::Crc { stored, computed });
        }
        let mut states = ProducerStates::default();
        for (index, entry) in bytes[HEADER_BYTES..].chunks_exact(ENTRY_BYTES).enumerate() {
            let header =
                entry_header(entry).map_err(|reason| SnapshotError::Entry { index, reason })?;
            let reason = if header.last_offset() >= offset {
                Some("a batch at or past the snapshot's offset")
            } else if states.last_offset(header.producer_id) >= Some(header.base_offset) {
                Some("a producer's batches out of order")
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(SnapshotError::Entry { index, reason });
            }
            states.update(&header);
        }
        Ok(states)
    }

    /// The last offset of a producer's newest retained batch.
    fn last_offset(&self, producer_id: i64) -> Option<i64> {
        let entry = self.producers.get(&producer_id)?;
        entry.batches.back().map(|batch| batch.last_offset)
    }
}

/// The batch header an entry describes (the fields [`ProducerStates::update`] reads).
fn entry_header(entry: &[u8]) -> Result<RecordBatchHeader, &'static str> {
    let producer_id = be_i64(entry, 0);
    let epoch = be_i16(entry, 8);
    let last_sequence = be_i32(entry, 10);
    let last_offset = be_i64(entry, 14);
    let offset_delta = be_i32(entry, 22);
    let timestamp = be_i64(entry, 26);
    if producer_id < 0 {
        return Err("no producer id");
    }
    if offset_delta < 0 {
        return Err("a negative offset delta");
    }
    let first_offset = last_offset
        .checked_sub(i64::from(offset_delta))
        .filter(|first_offset| *first_offset >= 0)
        .ok_or("a negative offset")?;
    let first_sequence =
        decrement_sequence(last_sequence, offset_delta).ok_or("a sequence out of range")?;
    Ok(RecordBatchHeader {
        base_offset: first_offset,
        batch_length: 0,
        partition_leader_epoch: -1,
        magic: MAGIC_V2,
        crc: 0,
        attributes: 0,
        last_offset_delta: offset_delta,
        base_timestamp: timestamp,
        max_timestamp: timestamp,
        producer_id,
        producer_epoch: epoch,
        base_sequence: first_sequence,
        records_count: offset_delta.saturating_add(1),
    })
}

/// Kafka's `DefaultRecordBatch.decrementSequence`: the inverse of [`increment_sequence`] for
/// sequences from 0 up (a sequence below `decrement` wraps back past the largest int).
fn decrement_sequence(sequence: i32, decrement: i32) -> Option<i32> {
    if (0..decrement).contains(&sequence) {
        Some(i32::MAX - (decrement - sequence) + 1)
    } else {
        sequence.checked_sub(decrement)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::test_batch as batch;

    #[test]
    fn one_entry_is_laid_out_as_kafkas_snapshot_schema() {
        let mut states = ProducerStates::default();
        states.update(&batch(
            0x0102_0304_0506_0708,
            9,
            10,
            100,
            3,
            1_700_000_000_000,
        ));
        let bytes = states.to_snapshot();
        assert_eq!(bytes.len(), HEADER_BYTES + ENTRY_BYTES);
        assert_eq!(&bytes[0..2], &[0, 1], "version 1");
        assert_eq!(&bytes[6..10], &[0, 0, 0, 1], "one entry");
        let mut entry = Vec::new();
        entry.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]); // producer_id
        entry.extend_from_slice(&[0, 9]); // epoch
        entry.extend_from_slice(&[0, 0, 0, 12]); // last_sequence 10 + 2
        entry.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 102]); // last_offset
        entry.extend_from_slice(&[0, 0, 0, 2]); // offset_delta
        entry.extend_from_slice(&1_700_000_000_000_i64.to_be_bytes()); // timestamp
        entry.extend_from_slice(&[0xff; 4]); // coordinator_epoch -1
        entry.extend_from_slice(&[0xff; 8]); // current_txn_first_offset -1
        assert_eq!(&bytes[HEADER_BYTES..], entry.as_slice());
        let crc = crc32c::crc32c(&bytes[6..]);
        assert_eq!(
            &bytes[2..6],
            crc.to_be_bytes().as_slice(),
            "CRC-32C of what follows it"
        );
    }

    #[test]
    fn a_snapshot_reads_back_every_retained_batch_of_every_producer() {
        let mut states = ProducerStates::default();
        for sequence in 0..7 {
            let offset = i64::from(sequence) * 10;
            states.update(&batch(1, 0, sequence * 2, offset, 2, offset));
        }
        states.update(&batch(2, 3, i32::MAX - 1, 200, 3, 5)); // wraps to 1
        states.update(&batch(3, 0, 0, 210, 1, 6));
        states.update(&batch(3, 1, 0, 220, 1, 7)); // a new epoch drops the old batch
        let bytes = states.to_snapshot();
        assert_eq!(
            bytes.len(),
            HEADER_BYTES + 7 * ENTRY_BYTES,
            "5 + 1 + 1 batches"
        );
        let read = ProducerStates::from_snapshot(&bytes, 221).expect("valid");
        assert_eq!(read, states);
        assert!(
            read.find_duplicate(&batch(1, 0, 4, 0, 2, 0)).is_some(),
            "the oldest kept"
        );
        assert!(read
            .find_duplicate(&batch(2, 3, i32::MAX - 1, 0, 3, 0))
            .is_some());
        assert_eq!(ProducerStates::default().to_snapshot().len(), HEADER_BYTES);
        assert_eq!(
            ProducerStates::from_snapshot(&ProducerStates::default().to_snapshot(), 0),
            Ok(ProducerStates::default())
        );
    }

    #[test]
    fn kafkas_reader_sees_each_producers_last_batch() {
        let mut states = ProducerStates::default();
        states.update(&batch(7, 0, 0, 0, 1, 0));
        states.update(&batch(7, 0, 1, 1, 1, 0));
        let bytes = states.to_snapshot();
        // Kafka keeps the last entry per producer id: it must be the newest batch.
        let last = &bytes[HEADER_BYTES + ENTRY_BYTES..];
        assert_eq!(be_i64(last, 0), 7);
        assert_eq!(be_i32(last, 10), 1, "last_sequence of the second batch");
        assert_eq!(be_i64(last, 14), 1, "its last offset");
    }

    #[test]
    fn a_torn_or_garbled_snapshot_is_invalid() {
        let mut states = ProducerStates::default();
        states.update(&batch(1, 0, 0, 0, 2, 0));
        states.update(&batch(2, 0, 0, 2, 2, 0));
        let bytes = states.to_snapshot();
        for len in [
            0,
            5,
            HEADER_BYTES,
            bytes.len() - 1,
            bytes.len() - ENTRY_BYTES,
        ] {
            assert!(
                matches!(
                    ProducerStates::from_snapshot(&bytes[..len], 10),
                    Err(SnapshotError::Length { .. } | SnapshotError::Crc { .. })
                ),
                "cut to {len} bytes"
            );
        }
        let mut flipped = bytes.clone();
        flipped[HEADER_BYTES + 3] ^= 0x10;
        assert!(matches!(
            ProducerStates::from_snapshot(&flipped, 10),
            Err(SnapshotError::Crc { .. })
        ));
        let mut version = bytes.clone();
        version[1] = 2;
        assert_eq!(
            ProducerStates::from_snapshot(&version, 10),
            Err(SnapshotError::Version(2))
        );
        let mut zeroed = bytes.clone();
        zeroed[HEADER_BYTES..].fill(0);
        assert!(
            ProducerStates::from_snapshot(&zeroed, 10).is_err(),
            "a zeroed sector"
        );
        assert!(
            matches!(
                ProducerStates::from_snapshot(&bytes, 3),
                Err(SnapshotError::Entry { index: 1, .. })
            ),
            "a batch at offset 3 is past a snapshot taken at 3"
        );
    }

    #[test]
    fn snapshot_names_carry_their_offset() {
        assert_eq!(
            snapshot_name("t-0", 42),
            "t-0/00000000000000000042.snapshot"
        );
        assert_eq!(
            parse_snapshot_name("t-0", "t-0/00000000000000000042.snapshot"),
            Some(42)
        );
        assert_eq!(
            parse_snapshot_name("t-0", "t-0/00000000000000000042.log"),
            None
        );
        assert_eq!(
            parse_snapshot_name("t-0", "t-1/00000000000000000042.snapshot"),
            None
        );
        assert!(is_snapshot_length(HEADER_BYTES as u64));
        assert!(!is_snapshot_length(HEADER_BYTES as u64 + 1));
    }

    #[test]
    fn sequences_decrement_back_past_zero() {
        for (first, delta) in [
            (0, 0),
            (5, 3),
            (i32::MAX, 1),
            (i32::MAX - 1, 3),
            (i32::MAX, 0),
        ] {
            let last = increment_sequence(first, delta);
            assert_eq!(
                decrement_sequence(last, delta),
                Some(first),
                "{first} + {delta}"
            );
        }
    }
}
