//! The records of `__transaction_state`, in Kafka's format (`TransactionLogKey` v0 and
//! `TransactionLogValue` v0/v1 of Kafka's `transaction-coordinator` schemas), so that Kafka's
//! tools read a seedlog transaction log and the other way round. The key is the
//! `transactional.id`; the value the [`Transit`] a transition wrote; a null value (a tombstone)
//! removes an expired id.
//!
//! Values are written as v1 (flexible: compact strings and arrays, and the tagged fields that
//! carry the previous and next producer ids and the client's transaction version, KIP-890);
//! v0 values are read too. An Empty transaction's partitions are written as null, as Kafka does.
//! The last producer epoch is not in the record (nor in Kafka's): metadata loaded from the log
//! has none, so a KIP-360 retry that spans a coordinator change is fenced, as in Kafka.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, BufMut};

use crate::types::TopicPartition;

use super::metadata::{TransactionVersion, Transit, NO_PRODUCER_ID};
use super::state::TransactionState;

/// The value version written.
const VALUE_VERSION: i16 = 1;

/// A record that does not decode: what and where.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("__transaction_state record: {0}")]
pub struct RecordError(String);

/// The key of `transactional_id`'s records.
pub fn encode_key(transactional_id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + transactional_id.len());
    out.put_i16(0);
    out.put_i16(transactional_id.len() as i16);
    out.put_slice(transactional_id.as_bytes());
    out
}

/// The `transactional.id` a key names.
pub fn decode_key(key: &[u8]) -> Result<String, RecordError> {
    let mut reader = Reader(key);
    let version = reader.i16()?;
    if version != 0 {
        return Err(RecordError(format!("key version {version}, only 0 exists")));
    }
    let id = reader.string()?;
    reader.end()?;
    Ok(id)
}

/// The value a transition writes (v1).
pub fn encode_value(transit: &Transit) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.put_i16(VALUE_VERSION);
    out.put_i64(transit.producer_id);
    out.put_i16(transit.producer_epoch);
    out.put_i32(transit.timeout_ms);
    out.put_i8(transit.state.id());
    if transit.state == TransactionState::Empty {
        put_uvarint(&mut out, 0); // null
    } else {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for partition in &transit.partitions {
            by_topic
                .entry(&partition.topic)
                .or_default()
                .push(partition.partition);
        }
        put_uvarint(&mut out, by_topic.len() as u64 + 1);
        for (topic, partitions) in by_topic {
            put_uvarint(&mut out, topic.len() as u64 + 1);
            out.put_slice(topic.as_bytes());
            put_uvarint(&mut out, partitions.len() as u64 + 1);
            for partition in partitions {
                out.put_i32(partition);
            }
            put_uvarint(&mut out, 0); // no tagged fields
        }
    }
    out.put_i64(transit.last_update_ms);
    out.put_i64(transit.start_ms);
    let client_version: i16 = match transit.client_version {
        TransactionVersion::V1 => 1,
        TransactionVersion::V2 => 2,
    };
    let tagged: Vec<(u64, Vec<u8>)> = [
        (transit.previous_producer_id != NO_PRODUCER_ID)
            .then(|| (0, transit.previous_producer_id.to_be_bytes().to_vec())),
        (transit.next_producer_id != NO_PRODUCER_ID)
            .then(|| (1, transit.next_producer_id.to_be_bytes().to_vec())),
        Some((2, client_version.to_be_bytes().to_vec())),
    ]
    .into_iter()
    .flatten()
    .collect();
    put_uvarint(&mut out, tagged.len() as u64);
    for (tag, data) in tagged {
        put_uvarint(&mut out, tag);
        put_uvarint(&mut out, data.len() as u64);
        out.put_slice(&data);
    }
    out
}

/// A value (v0 or v1) as the transition it records.
pub fn decode_value(value: &[u8]) -> Result<Transit, RecordError> {
    let mut reader = Reader(value);
    let version = reader.i16()?;
    let flexible = match version {
        0 => false,
        1 => true,
        other => return Err(RecordError(format!("value version {other}, 0 and 1 exist"))),
    };
    let producer_id = reader.i64()?;
    let producer_epoch = reader.i16()?;
    let timeout_ms = reader.i32()?;
    let status = reader.i8()?;
    let state = TransactionState::from_id(status)
        .ok_or_else(|| RecordError(format!("transaction status {status} is no state")))?;
    let partitions = read_partitions(&mut reader, flexible)?;
    let last_update_ms = reader.i64()?;
    let start_ms = reader.i64()?;
    let mut transit = Transit {
        producer_id,
        previous_producer_id: NO_PRODUCER_ID,
        next_producer_id: NO_PRODUCER_ID,
        producer_epoch,
        last_producer_epoch: crate::coordinator::transaction::metadata::NO_PRODUCER_EPOCH,
        timeout_ms,
        state,
        partitions,
        start_ms,
        last_update_ms,
        client_version: TransactionVersion::V1,
    };
    if flexible {
        read_tagged_fields(&mut reader, &mut transit)?;
    }
    reader.end()?;
    Ok(transit)
}

/// The transaction's partitions, by topic (null: none).
fn read_partitions(
    reader: &mut Reader<'_>,
    flexible: bool,
) -> Result<BTreeSet<TopicPartition>, RecordError> {
    let mut partitions = BTreeSet::new();
    let topics = if flexible {
        reader.compact_len()?
    } else {
        reader.len32()?
    };
    for _ in 0..topics.unwrap_or(0) {
        let topic = if flexible {
            reader.compact_string()?
        } else {
            reader.string()?
        };
        let count = if flexible {
            reader.compact_len()?
        } else {
            reader.len32()?
        };
        for _ in 0..count.unwrap_or(0) {
            partitions.insert(TopicPartition::new(topic.as_str(), reader.i32()?));
        }
        if flexible {
            reader.skip_tagged_fields()?;
        }
    }
    Ok(partitions)
}

/// The v1 tagged fields: the previous and next producer ids, the client's transaction version.
fn read_tagged_fields(reader: &mut Reader<'_>, transit: &mut Transit) -> Result<(), RecordError> {
    for _ in 0..reader.uvarint()? {
        let tag = reader.uvarint()?;
        let size = reader.uvarint()? as usize;
        let mut field = Reader(reader.take(size)?);
        match tag {
            0 => transit.previous_producer_id = field.i64()?,
            1 => transit.next_producer_id = field.i64()?,
            2 => {
                transit.client_version = match field.i16()? {
                    level if level >= 2 => TransactionVersion::V2,
                    _ => TransactionVersion::V1,
                }
            }
            _ => {} // a field of a later version: skipped
        }
    }
    Ok(())
}

fn put_uvarint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// A bounds-checked reader: a short or malformed record is an error, never a panic.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], RecordError> {
        if self.0.len() < len {
            return Err(RecordError(format!(
                "{} bytes left, {len} needed",
                self.0.len()
            )));
        }
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(taken)
    }

    fn i8(&mut self) -> Result<i8, RecordError> {
        Ok(self.take(1)?.get_i8())
    }

    fn i16(&mut self) -> Result<i16, RecordError> {
        Ok(self.take(2)?.get_i16())
    }

    fn i32(&mut self) -> Result<i32, RecordError> {
        Ok(self.take(4)?.get_i32())
    }

    fn i64(&mut self) -> Result<i64, RecordError> {
        Ok(self.take(8)?.get_i64())
    }

    fn uvarint(&mut self) -> Result<u64, RecordError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(RecordError("a varint longer than 64 bits".to_owned()))
    }

    /// A compact array's length (`None`: null).
    fn compact_len(&mut self) -> Result<Option<usize>, RecordError> {
        let encoded = self.uvarint()?;
        let len = encoded.checked_sub(1).map(|len| len as usize);
        // Every element takes at least a byte: a length past the record is malformed.
        match len {
            Some(len) if len > self.0.len() => Err(RecordError(format!(
                "an array of {len} in {} bytes",
                self.0.len()
            ))),
            len => Ok(len),
        }
    }

    /// A classic array's length (`None`: null).
    fn len32(&mut self) -> Result<Option<usize>, RecordError> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(None);
        }
        let len = len as usize;
        if len > self.0.len() {
            return Err(RecordError(format!(
                "an array of {len} in {} bytes",
                self.0.len()
            )));
        }
        Ok(Some(len))
    }

    fn utf8(bytes: &[u8]) -> Result<String, RecordError> {
        String::from_utf8(bytes.to_vec())
            .map_err(|_| RecordError("a string that is not UTF-8".to_owned()))
    }

    fn string(&mut self) -> Result<String, RecordError> {
        let len = self.i16()?;
        if len < 0 {
            return Err(RecordError(
                "a null string where one is required".to_owned(),
            ));
        }
        let bytes = self.take(len as usize)?;
        Self::utf8(bytes)
    }

    fn compact_string(&mut self) -> Result<String, RecordError> {
        let len = self
            .uvarint()?
            .checked_sub(1)
            .ok_or_else(|| RecordError("a null string where one is required".to_owned()))?;
        let bytes = self.take(len as usize)?;
        Self::utf8(bytes)
    }

    fn skip_tagged_fields(&mut self) -> Result<(), RecordError> {
        for _ in 0..self.uvarint()? {
            self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }

    fn end(&self) -> Result<(), RecordError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(RecordError(format!("{} bytes past the end", self.0.len())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::transaction::metadata::NO_PRODUCER_EPOCH;

    fn ongoing() -> Transit {
        Transit {
            producer_id: 4_000,
            previous_producer_id: 3_999,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: 3,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms: 60_000,
            state: TransactionState::Ongoing,
            partitions: [("orders", 0), ("orders", 2), ("audit", 1)]
                .into_iter()
                .map(|(topic, partition)| TopicPartition::new(topic, partition))
                .collect(),
            start_ms: 1_700_000_000_000,
            last_update_ms: 1_700_000_000_500,
            client_version: TransactionVersion::V2,
        }
    }

    #[test]
    fn a_key_is_kafkas_layout_and_round_trips() {
        let key = encode_key("app-1");
        assert_eq!(key, [0, 0, 0, 5, b'a', b'p', b'p', b'-', b'1']);
        assert_eq!(decode_key(&key), Ok("app-1".to_owned()));
        assert!(
            decode_key(&[0, 1, 0, 0]).is_err(),
            "key version 1 does not exist"
        );
    }

    #[test]
    fn values_round_trip_in_every_state() {
        for state in crate::coordinator::transaction::state::ALL_STATES {
            let mut transit = ongoing();
            transit.state = state;
            if state == TransactionState::Empty {
                transit.partitions.clear();
            }
            transit.next_producer_id = 4_001;
            assert_eq!(
                decode_value(&encode_value(&transit)),
                Ok(transit),
                "{state}"
            );
        }
    }

    #[test]
    fn a_v1_value_is_kafkas_layout() {
        let mut transit = ongoing();
        transit.partitions = [TopicPartition::new("t", 7)].into_iter().collect();
        transit.previous_producer_id = NO_PRODUCER_ID;
        transit.client_version = TransactionVersion::V1;
        let expected: Vec<u8> = [
            &[0, 1][..],                         // version 1
            &4_000i64.to_be_bytes(),             // producer id
            &3i16.to_be_bytes(),                 // epoch
            &60_000i32.to_be_bytes(),            // timeout
            &[1],                                // Ongoing
            &[2, 2, b't', 2],                    // one topic "t", one partition
            &7i32.to_be_bytes(),                 // partition 7
            &[0],                                // the topic's tagged fields
            &1_700_000_000_500i64.to_be_bytes(), // last update
            &1_700_000_000_000i64.to_be_bytes(), // start
            &[1, 2, 2, 0, 1],                    // tag 2: client transaction version 1
        ]
        .concat();
        assert_eq!(encode_value(&transit), expected);
    }

    #[test]
    fn a_v0_value_reads_without_its_tagged_fields() {
        let value: Vec<u8> = [
            &[0, 0][..],
            &9i64.to_be_bytes(),
            &0i16.to_be_bytes(),
            &1_000i32.to_be_bytes(),
            &[4],                   // CompleteCommit
            &(-1i32).to_be_bytes(), // null partitions
            &5i64.to_be_bytes(),
            &4i64.to_be_bytes(),
        ]
        .concat();
        let transit = decode_value(&value).expect("a v0 value");
        assert_eq!(transit.state, TransactionState::CompleteCommit);
        assert_eq!((transit.producer_id, transit.timeout_ms), (9, 1_000));
        assert_eq!(transit.previous_producer_id, NO_PRODUCER_ID);
        assert!(transit.partitions.is_empty());
    }

    #[test]
    fn a_damaged_value_is_an_error_not_a_panic() {
        let value = encode_value(&ongoing());
        for cut in 0..value.len() {
            assert!(decode_value(&value[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_state = value.clone();
        bad_state[16] = 9;
        assert!(decode_value(&bad_state).is_err(), "status 9 is no state");
        let mut huge_array = value;
        huge_array[17] = 0x7f;
        assert!(decode_value(&huge_array).is_err());
        assert!(decode_value(&[0, 7]).is_err(), "version 7 does not exist");
    }
}
