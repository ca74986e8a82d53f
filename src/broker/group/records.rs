//! The records of `__consumer_offsets`, in Kafka's own format (`OffsetCommitKey` v1,
//! `OffsetCommitValue` v3, `GroupMetadataKey` v2, `GroupMetadataValue` v3 of Kafka's
//! `group-coordinator` schemas), so Kafka's tools could read a seedlog offsets log and the
//! other way round. A null value is a tombstone: the offset or the group is gone.

use bytes::{Buf, BufMut, Bytes};

use crate::types::TopicPartition;

/// A committed offset as stored and served by OffsetFetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommittedOffset {
    /// The next offset to consume.
    pub(crate) offset: i64,
    /// The leader epoch of the last consumed record (-1: unknown).
    pub(crate) leader_epoch: i32,
    /// The client's metadata string.
    pub(crate) metadata: String,
    /// When the commit was written (wall clock, ms).
    pub(crate) commit_timestamp: i64,
}

/// A member as the group's record stores it (Kafka's `MemberMetadata` in `GroupMetadataValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredMember {
    /// The member id the coordinator gave.
    pub(crate) member_id: String,
    /// `group.instance.id` of a static member.
    pub(crate) group_instance_id: Option<String>,
    /// The client's `client.id`.
    pub(crate) client_id: String,
    /// The client's address.
    pub(crate) client_host: String,
    /// The member's rebalance timeout.
    pub(crate) rebalance_timeout_ms: i32,
    /// The member's session timeout.
    pub(crate) session_timeout_ms: i32,
    /// Its subscription: the metadata of the chosen protocol.
    pub(crate) subscription: Bytes,
    /// What the leader assigned it.
    pub(crate) assignment: Bytes,
}

/// A group's generation as the record stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredGroup {
    /// `consumer` for Kafka consumers.
    pub(crate) protocol_type: String,
    /// The generation.
    pub(crate) generation: i32,
    /// The chosen protocol (assignor), none when empty.
    pub(crate) protocol: Option<String>,
    /// The leader's member id.
    pub(crate) leader: Option<String>,
    /// When the group last changed state (wall clock, ms).
    pub(crate) state_timestamp: i64,
    /// The members with their assignments (empty for an empty group).
    pub(crate) members: Vec<StoredMember>,
}

/// One record of `__consumer_offsets`, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OffsetsRecord {
    /// An offset commit, or (`None`) its deletion.
    Offset {
        /// The group.
        group: String,
        /// The partition committed for.
        partition: TopicPartition,
        /// The commit, `None` for a tombstone.
        value: Option<CommittedOffset>,
    },
    /// A group's generation, or (`None`) the group's deletion.
    Group {
        /// The group.
        group: String,
        /// Its state, `None` for a tombstone.
        value: Option<StoredGroup>,
    },
}

/// A record that does not decode: what and where.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("__consumer_offsets record: {0}")]
pub(crate) struct RecordError(String);

fn put_string(out: &mut Vec<u8>, value: &str) {
    out.put_i16(value.len() as i16);
    out.put_slice(value.as_bytes());
}

fn put_nullable_string(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => put_string(out, value),
        None => out.put_i16(-1),
    }
}

fn put_bytes(out: &mut Vec<u8>, value: &[u8]) {
    out.put_i32(value.len() as i32);
    out.put_slice(value);
}

impl OffsetsRecord {
    /// Key and value (`None`: tombstone) as written to the log.
    pub(crate) fn encode(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        match self {
            OffsetsRecord::Offset {
                group,
                partition,
                value,
            } => {
                let mut key = Vec::new();
                key.put_i16(1);
                put_string(&mut key, group);
                put_string(&mut key, &partition.topic);
                key.put_i32(partition.partition);
                let value = value.as_ref().map(|value| {
                    let mut out = Vec::new();
                    out.put_i16(3);
                    out.put_i64(value.offset);
                    out.put_i32(value.leader_epoch);
                    put_string(&mut out, &value.metadata);
                    out.put_i64(value.commit_timestamp);
                    out
                });
                (key, value)
            }
            OffsetsRecord::Group { group, value } => {
                let mut key = Vec::new();
                key.put_i16(2);
                put_string(&mut key, group);
                (key, value.as_ref().map(encode_group))
            }
        }
    }

    /// Decodes a record: `Ok(None)` for key versions seedlog does not use (Kafka's newer
    /// consumer-group and share-group records), skipped on load.
    pub(crate) fn decode(
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<Option<OffsetsRecord>, RecordError> {
        let mut key = Reader(key);
        let version = key.i16()?;
        match version {
            0 | 1 => {
                let group = key.string()?;
                let topic = key.string()?;
                let partition = TopicPartition::new(topic, key.i32()?);
                let value = value.map(decode_offset).transpose()?;
                Ok(Some(OffsetsRecord::Offset {
                    group,
                    partition,
                    value,
                }))
            }
            2 => {
                let group = key.string()?;
                let value = value.map(decode_group).transpose()?;
                Ok(Some(OffsetsRecord::Group { group, value }))
            }
            _ => Ok(None),
        }
    }
}

fn encode_group(group: &StoredGroup) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_i16(3);
    put_string(&mut out, &group.protocol_type);
    out.put_i32(group.generation);
    put_nullable_string(&mut out, group.protocol.as_deref());
    put_nullable_string(&mut out, group.leader.as_deref());
    out.put_i64(group.state_timestamp);
    out.put_i32(group.members.len() as i32);
    for member in &group.members {
        put_string(&mut out, &member.member_id);
        put_nullable_string(&mut out, member.group_instance_id.as_deref());
        put_string(&mut out, &member.client_id);
        put_string(&mut out, &member.client_host);
        out.put_i32(member.rebalance_timeout_ms);
        out.put_i32(member.session_timeout_ms);
        put_bytes(&mut out, &member.subscription);
        put_bytes(&mut out, &member.assignment);
    }
    out
}

/// `OffsetCommitValue` v0–v3 (v4 adds tagged fields seedlog never writes).
fn decode_offset(value: &[u8]) -> Result<CommittedOffset, RecordError> {
    let mut value = Reader(value);
    let version = value.i16()?;
    if !(0..=3).contains(&version) {
        return Err(RecordError(format!("offset value version {version}")));
    }
    let offset = value.i64()?;
    let leader_epoch = if version >= 3 { value.i32()? } else { -1 };
    let metadata = value.string()?;
    let commit_timestamp = value.i64()?;
    if version == 1 {
        value.i64()?; // expire timestamp
    }
    Ok(CommittedOffset {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp,
    })
}

/// `GroupMetadataValue` v0–v3.
fn decode_group(value: &[u8]) -> Result<StoredGroup, RecordError> {
    let mut value = Reader(value);
    let version = value.i16()?;
    if !(0..=3).contains(&version) {
        return Err(RecordError(format!("group value version {version}")));
    }
    let protocol_type = value.string()?;
    let generation = value.i32()?;
    let protocol = value.nullable_string()?;
    let leader = value.nullable_string()?;
    let state_timestamp = if version >= 2 { value.i64()? } else { -1 };
    let count = value.i32()?;
    let mut members = Vec::new();
    for _ in 0..count.max(0) {
        let member_id = value.string()?;
        let group_instance_id = if version >= 3 {
            value.nullable_string()?
        } else {
            None
        };
        let client_id = value.string()?;
        let client_host = value.string()?;
        let rebalance_timeout_ms = if version >= 1 { value.i32()? } else { -1 };
        let session_timeout_ms = value.i32()?;
        let subscription = value.bytes()?;
        let assignment = value.bytes()?;
        members.push(StoredMember {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    Ok(StoredGroup {
        protocol_type,
        generation,
        protocol,
        leader,
        state_timestamp,
        members,
    })
}

/// A bounds-checked reader: a short record is an error, never a panic.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn need(&self, len: usize) -> Result<(), RecordError> {
        if self.0.len() < len {
            return Err(RecordError(format!(
                "{} bytes left, {len} needed",
                self.0.len()
            )));
        }
        Ok(())
    }

    fn i16(&mut self) -> Result<i16, RecordError> {
        self.need(2)?;
        Ok(self.0.get_i16())
    }

    fn i32(&mut self) -> Result<i32, RecordError> {
        self.need(4)?;
        Ok(self.0.get_i32())
    }

    fn i64(&mut self) -> Result<i64, RecordError> {
        self.need(8)?;
        Ok(self.0.get_i64())
    }

    fn nullable_string(&mut self) -> Result<Option<String>, RecordError> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        self.need(len as usize)?;
        let (text, rest) = self.0.split_at(len as usize);
        self.0 = rest;
        String::from_utf8(text.to_vec())
            .map(Some)
            .map_err(|_| RecordError("a string that is not UTF-8".to_owned()))
    }

    fn string(&mut self) -> Result<String, RecordError> {
        self.nullable_string()?
            .ok_or_else(|| RecordError("a null string where one is required".to_owned()))
    }

    fn bytes(&mut self) -> Result<Bytes, RecordError> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(Bytes::new());
        }
        self.need(len as usize)?;
        let (data, rest) = self.0.split_at(len as usize);
        self.0 = rest;
        Ok(Bytes::copy_from_slice(data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_and_group_records_round_trip() {
        let records = [
            OffsetsRecord::Offset {
                group: "g".into(),
                partition: TopicPartition::new("t", 3),
                value: Some(CommittedOffset {
                    offset: 42,
                    leader_epoch: 7,
                    metadata: "m".into(),
                    commit_timestamp: 1_000,
                }),
            },
            OffsetsRecord::Offset {
                group: "g".into(),
                partition: TopicPartition::new("t", 3),
                value: None,
            },
            OffsetsRecord::Group {
                group: "g".into(),
                value: Some(StoredGroup {
                    protocol_type: "consumer".into(),
                    generation: 4,
                    protocol: Some("range".into()),
                    leader: Some("m-1".into()),
                    state_timestamp: 9,
                    members: vec![StoredMember {
                        member_id: "m-1".into(),
                        group_instance_id: Some("i".into()),
                        client_id: "c".into(),
                        client_host: "/127.0.0.1".into(),
                        rebalance_timeout_ms: 300_000,
                        session_timeout_ms: 45_000,
                        subscription: Bytes::from_static(b"sub"),
                        assignment: Bytes::from_static(b"as"),
                    }],
                }),
            },
        ];
        for record in records {
            let (key, value) = record.encode();
            let decoded = OffsetsRecord::decode(&key, value.as_deref()).expect("decodes");
            assert_eq!(decoded, Some(record));
        }
    }

    /// The bytes Kafka writes for an `OffsetCommitKey` v1 (version, group, topic, partition).
    #[test]
    fn an_offset_key_is_kafkas_layout() {
        let record = OffsetsRecord::Offset {
            group: "ab".into(),
            partition: TopicPartition::new("t", 1),
            value: None,
        };
        let (key, value) = record.encode();
        assert_eq!(key, [0, 1, 0, 2, b'a', b'b', 0, 1, b't', 0, 0, 0, 1]);
        assert_eq!(value, None);
    }

    #[test]
    fn a_truncated_record_is_an_error_not_a_panic() {
        let (key, value) = OffsetsRecord::Group {
            group: "g".into(),
            value: Some(StoredGroup {
                protocol_type: "consumer".into(),
                generation: 1,
                protocol: None,
                leader: None,
                state_timestamp: 0,
                members: Vec::new(),
            }),
        }
        .encode();
        let value = value.expect("a value");
        for cut in 0..value.len() {
            assert!(OffsetsRecord::decode(&key, Some(&value[..cut])).is_err());
        }
        for cut in 0..key.len() {
            assert!(OffsetsRecord::decode(&key[..cut], None).is_err());
        }
    }
}
