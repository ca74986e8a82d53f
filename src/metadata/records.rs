//! The metadata log's records, typed and versioned, in a binary frame of their own (KRaft's
//! shape: a frame version, a record type, a record version, then the fields). Decoding an
//! unknown type or version, a short frame or trailing bytes is an error that names them: a
//! controller or broker never guesses at a record.
//!
//! Integers are big-endian; a string is an `i16` length and UTF-8 bytes; a list is an `i32`
//! count and its items; a UUID is 16 bytes.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut};
use uuid::Uuid;

use crate::types::{BrokerEpoch, BrokerId, LeaderEpoch, PartitionEpoch};

/// The frame format this code writes and reads.
const FRAME_VERSION: u8 = 0;

/// `leader` of a partition without one (Kafka's `NO_LEADER`).
pub const NO_LEADER: BrokerId = BrokerId(-1);

/// One metadata record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A broker registered (or registered again after a restart) with a new epoch. It starts
    /// fenced.
    RegisterBroker {
        /// Its `node.id`.
        broker: BrokerId,
        /// The epoch of this registration; heartbeats and AlterPartition must carry it.
        epoch: BrokerEpoch,
        /// Where clients and other brokers reach it.
        host: String,
        /// Its port.
        port: i32,
    },
    /// A broker may lead and be in ISRs (it heartbeats and has caught up with the metadata).
    UnfenceBroker {
        /// Which.
        broker: BrokerId,
        /// Its registration epoch.
        epoch: BrokerEpoch,
    },
    /// A broker's session expired (or it shut down): it leads nothing and leaves every ISR.
    FenceBroker {
        /// Which.
        broker: BrokerId,
        /// Its registration epoch.
        epoch: BrokerEpoch,
    },
    /// A topic was created.
    Topic {
        /// Its name.
        name: String,
        /// Its id.
        topic_id: Uuid,
        /// Config overrides.
        configs: BTreeMap<String, String>,
    },
    /// A partition was created.
    Partition {
        /// Its topic.
        topic_id: Uuid,
        /// Its index.
        partition: i32,
        /// Every replica, in preference order.
        replicas: Vec<BrokerId>,
        /// The in-sync replicas.
        isr: Vec<BrokerId>,
        /// The leader, or [`NO_LEADER`].
        leader: BrokerId,
        /// The leader epoch.
        leader_epoch: LeaderEpoch,
        /// The partition epoch (bumped by every change).
        partition_epoch: PartitionEpoch,
        /// KIP-966's eligible leader replicas: out of the ISR, but holding everything committed
        /// (they left while the ISR was below `min.insync.replicas`, so the high watermark has
        /// not moved since).
        elr: Vec<BrokerId>,
        /// KIP-966's last known leader: the leader before the partition lost it, electable
        /// once ISR and ELR are empty.
        last_known_elr: Vec<BrokerId>,
    },
    /// A partition's leader or ISR changed. The partition epoch always moves by one; the leader
    /// epoch moves when the leader does.
    PartitionChange {
        /// Its topic.
        topic_id: Uuid,
        /// Its index.
        partition: i32,
        /// The new ISR, if it changed.
        isr: Option<Vec<BrokerId>>,
        /// The new leader, if it changed ([`NO_LEADER`]: none).
        leader: Option<BrokerId>,
        /// The election was unclean: the new leader was not in the ISR.
        unclean: bool,
        /// The new eligible leader replicas, if they changed (KIP-966).
        elr: Option<Vec<BrokerId>>,
        /// The new last known leader, if it changed (KIP-966).
        last_known_elr: Option<Vec<BrokerId>>,
    },
}

/// A record that does not decode, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metadata record: {0}")]
pub struct RecordError(String);

impl Record {
    /// The record's type in a word, for tests that check which records a log holds.
    #[cfg(test)]
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Record::RegisterBroker { .. } => "register",
            Record::UnfenceBroker { .. } => "unfence",
            Record::FenceBroker { .. } => "fence",
            Record::Topic { .. } => "topic",
            Record::Partition { .. } => "partition",
            Record::PartitionChange { .. } => "partition-change",
        }
    }

    fn type_and_version(&self) -> (u8, u8) {
        match self {
            Record::RegisterBroker { .. } => (1, 0),
            Record::UnfenceBroker { .. } => (2, 0),
            Record::FenceBroker { .. } => (3, 0),
            Record::Topic { .. } => (4, 0),
            Record::Partition { .. } => (5, 1),
            Record::PartitionChange { .. } => (6, 1),
        }
    }

    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        let (kind, version) = self.type_and_version();
        out.put_u8(FRAME_VERSION);
        out.put_u8(kind);
        out.put_u8(version);
        match self {
            Record::RegisterBroker {
                broker,
                epoch,
                host,
                port,
            } => {
                out.put_i32(broker.0);
                out.put_i64(epoch.0);
                put_string(&mut out, host);
                out.put_i32(*port);
            }
            Record::UnfenceBroker { broker, epoch } | Record::FenceBroker { broker, epoch } => {
                out.put_i32(broker.0);
                out.put_i64(epoch.0);
            }
            Record::Topic {
                name,
                topic_id,
                configs,
            } => {
                put_string(&mut out, name);
                out.put_slice(topic_id.as_bytes());
                out.put_i32(configs.len() as i32);
                for (key, value) in configs {
                    put_string(&mut out, key);
                    put_string(&mut out, value);
                }
            }
            Record::Partition {
                topic_id,
                partition,
                replicas,
                isr,
                leader,
                leader_epoch,
                partition_epoch,
                elr,
                last_known_elr,
            } => {
                out.put_slice(topic_id.as_bytes());
                out.put_i32(*partition);
                put_brokers(&mut out, replicas);
                put_brokers(&mut out, isr);
                out.put_i32(leader.0);
                out.put_i32(leader_epoch.0);
                out.put_i32(partition_epoch.0);
                put_brokers(&mut out, elr);
                put_brokers(&mut out, last_known_elr);
            }
            Record::PartitionChange { .. } => self.encode_change(&mut out),
        }
        out
    }

    fn encode_change(&self, out: &mut Vec<u8>) {
        let Record::PartitionChange {
            topic_id,
            partition,
            isr,
            leader,
            unclean,
            elr,
            last_known_elr,
        } = self
        else {
            unreachable!("called for partition changes")
        };
        out.put_slice(topic_id.as_bytes());
        out.put_i32(*partition);
        match isr {
            Some(isr) => {
                out.put_u8(1);
                put_brokers(out, isr);
            }
            None => out.put_u8(0),
        }
        match leader {
            Some(leader) => {
                out.put_u8(1);
                out.put_i32(leader.0);
            }
            None => out.put_u8(0),
        }
        out.put_u8(u8::from(*unclean));
        for brokers in [elr, last_known_elr] {
            match brokers {
                Some(brokers) => {
                    out.put_u8(1);
                    put_brokers(out, brokers);
                }
                None => out.put_u8(0),
            }
        }
    }

    /// Decodes one record's bytes, all of them.
    pub fn decode(bytes: &[u8]) -> Result<Record, RecordError> {
        let mut input = Reader(bytes);
        let frame = input.u8("frame version")?;
        if frame != FRAME_VERSION {
            return Err(RecordError(format!("unknown frame version {frame}")));
        }
        let kind = input.u8("record type")?;
        let version = input.u8("record version")?;
        let record = match (kind, version) {
            (1, 0) => Record::RegisterBroker {
                broker: BrokerId(input.i32("broker")?),
                epoch: BrokerEpoch(input.i64("broker epoch")?),
                host: input.string("host")?,
                port: input.i32("port")?,
            },
            (2, 0) => Record::UnfenceBroker {
                broker: BrokerId(input.i32("broker")?),
                epoch: BrokerEpoch(input.i64("broker epoch")?),
            },
            (3, 0) => Record::FenceBroker {
                broker: BrokerId(input.i32("broker")?),
                epoch: BrokerEpoch(input.i64("broker epoch")?),
            },
            (4, 0) => input.topic()?,
            (5, version @ 0..=1) => Record::Partition {
                topic_id: input.uuid()?,
                partition: input.i32("partition")?,
                replicas: input.brokers("replicas")?,
                isr: input.brokers("isr")?,
                leader: BrokerId(input.i32("leader")?),
                leader_epoch: LeaderEpoch(input.i32("leader epoch")?),
                partition_epoch: PartitionEpoch(input.i32("partition epoch")?),
                // Version 0 (before KIP-966) has neither: both empty.
                elr: input.brokers_since(version, "elr")?,
                last_known_elr: input.brokers_since(version, "last known elr")?,
            },
            (6, version @ 0..=1) => input.partition_change(version)?,
            (kind, version) => {
                return Err(RecordError(format!(
                    "unknown record type {kind} version {version}"
                )))
            }
        };
        if !input.0.is_empty() {
            return Err(RecordError(format!(
                "{} trailing bytes after record type {kind}",
                input.0.len()
            )));
        }
        Ok(record)
    }
}

fn put_string(out: &mut Vec<u8>, text: &str) {
    let length = i16::try_from(text.len()).expect("metadata strings are short");
    out.put_i16(length);
    out.put_slice(text.as_bytes());
}

fn put_brokers(out: &mut Vec<u8>, brokers: &[BrokerId]) {
    out.put_i32(brokers.len() as i32);
    for broker in brokers {
        out.put_i32(broker.0);
    }
}

/// The bytes left to decode.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn need(&self, bytes: usize, what: &str) -> Result<(), RecordError> {
        if self.0.remaining() < bytes {
            return Err(RecordError(format!(
                "short record: {what} needs {bytes} bytes, {} left",
                self.0.remaining()
            )));
        }
        Ok(())
    }

    fn u8(&mut self, what: &str) -> Result<u8, RecordError> {
        self.need(1, what)?;
        Ok(self.0.get_u8())
    }

    fn i32(&mut self, what: &str) -> Result<i32, RecordError> {
        self.need(4, what)?;
        Ok(self.0.get_i32())
    }

    fn i64(&mut self, what: &str) -> Result<i64, RecordError> {
        self.need(8, what)?;
        Ok(self.0.get_i64())
    }

    fn count(&mut self, what: &str) -> Result<usize, RecordError> {
        let count = self.i32(what)?;
        usize::try_from(count)
            .ok()
            .filter(|count| *count <= self.0.len())
            .ok_or_else(|| RecordError(format!("{what}: bad count {count}")))
    }

    fn string(&mut self, what: &str) -> Result<String, RecordError> {
        self.need(2, what)?;
        let length = self.0.get_i16();
        let length = usize::try_from(length)
            .map_err(|_| RecordError(format!("{what}: negative length {length}")))?;
        self.need(length, what)?;
        let (text, rest) = self.0.split_at(length);
        self.0 = rest;
        String::from_utf8(text.to_vec()).map_err(|_| RecordError(format!("{what}: not UTF-8")))
    }

    fn uuid(&mut self) -> Result<Uuid, RecordError> {
        self.need(16, "topic id")?;
        let (id, rest) = self.0.split_at(16);
        self.0 = rest;
        Ok(Uuid::from_slice(id).expect("16 bytes"))
    }

    fn topic(&mut self) -> Result<Record, RecordError> {
        let name = self.string("topic name")?;
        let topic_id = self.uuid()?;
        let count = self.count("configs")?;
        let mut configs = BTreeMap::new();
        for _ in 0..count {
            let key = self.string("config key")?;
            let value = self.string("config value")?;
            configs.insert(key, value);
        }
        Ok(Record::Topic {
            name,
            topic_id,
            configs,
        })
    }

    /// A list of brokers a record has from version 1 on (empty in version 0).
    fn brokers_since(&mut self, version: u8, what: &str) -> Result<Vec<BrokerId>, RecordError> {
        if version == 0 {
            return Ok(Vec::new());
        }
        self.brokers(what)
    }

    /// An optional list of brokers a change has from version 1 on (`None` in version 0).
    fn optional_brokers_since(
        &mut self,
        version: u8,
        what: &str,
    ) -> Result<Option<Vec<BrokerId>>, RecordError> {
        if version == 0 {
            return Ok(None);
        }
        match self.u8(what)? {
            0 => Ok(None),
            _ => self.brokers(what).map(Some),
        }
    }

    fn partition_change(&mut self, version: u8) -> Result<Record, RecordError> {
        let topic_id = self.uuid()?;
        let partition = self.i32("partition")?;
        let isr = match self.u8("isr flag")? {
            0 => None,
            _ => Some(self.brokers("isr")?),
        };
        let leader = match self.u8("leader flag")? {
            0 => None,
            _ => Some(BrokerId(self.i32("leader")?)),
        };
        let unclean = self.u8("unclean flag")? != 0;
        let elr = self.optional_brokers_since(version, "elr")?;
        let last_known_elr = self.optional_brokers_since(version, "last known elr")?;
        Ok(Record::PartitionChange {
            topic_id,
            partition,
            isr,
            leader,
            unclean,
            elr,
            last_known_elr,
        })
    }

    fn brokers(&mut self, what: &str) -> Result<Vec<BrokerId>, RecordError> {
        let count = self.count(what)?;
        (0..count).map(|_| self.i32(what).map(BrokerId)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn brokers() -> impl Strategy<Value = Vec<BrokerId>> {
        prop::collection::vec((-1..8i32).prop_map(BrokerId), 0..5)
    }

    fn record() -> impl Strategy<Value = Record> {
        prop_oneof![
            (0..8i32, any::<i64>(), "[a-z.]{0,12}", any::<i32>()).prop_map(
                |(broker, epoch, host, port)| Record::RegisterBroker {
                    broker: BrokerId(broker),
                    epoch: BrokerEpoch(epoch),
                    host,
                    port,
                }
            ),
            (0..8i32, any::<i64>()).prop_map(|(broker, epoch)| Record::UnfenceBroker {
                broker: BrokerId(broker),
                epoch: BrokerEpoch(epoch),
            }),
            (0..8i32, any::<i64>()).prop_map(|(broker, epoch)| Record::FenceBroker {
                broker: BrokerId(broker),
                epoch: BrokerEpoch(epoch),
            }),
            (
                "[a-z]{1,10}",
                any::<u128>(),
                prop::collection::btree_map("[a-z.]{1,8}", "[0-9]{0,4}", 0..3)
            )
                .prop_map(|(name, id, configs)| Record::Topic {
                    name,
                    topic_id: Uuid::from_u128(id),
                    configs,
                }),
            partition(),
            partition_change(),
        ]
    }

    fn partition() -> impl Strategy<Value = Record> {
        (
            any::<u128>(),
            0..64i32,
            brokers(),
            brokers(),
            -1..8i32,
            any::<i32>(),
            any::<i32>(),
            (brokers(), brokers()),
        )
            .prop_map(
                |(id, partition, replicas, isr, leader, epoch, version, (elr, known))| {
                    Record::Partition {
                        topic_id: Uuid::from_u128(id),
                        partition,
                        replicas,
                        isr,
                        leader: BrokerId(leader),
                        leader_epoch: LeaderEpoch(epoch),
                        partition_epoch: PartitionEpoch(version),
                        elr,
                        last_known_elr: known,
                    }
                },
            )
    }

    fn partition_change() -> impl Strategy<Value = Record> {
        (
            any::<u128>(),
            0..64i32,
            prop::option::of(brokers()),
            prop::option::of((-1..8i32).prop_map(BrokerId)),
            any::<bool>(),
            prop::option::of(brokers()),
            prop::option::of(brokers()),
        )
            .prop_map(|(id, partition, isr, leader, unclean, elr, known)| {
                Record::PartitionChange {
                    topic_id: Uuid::from_u128(id),
                    partition,
                    isr,
                    leader,
                    unclean,
                    elr,
                    last_known_elr: known,
                }
            })
    }

    proptest! {
        #[test]
        fn every_record_round_trips(record in record()) {
            prop_assert_eq!(Record::decode(&record.encode()), Ok(record));
        }

        #[test]
        fn a_cut_or_extended_record_is_an_error_never_a_panic(
            record in record(),
            cut in 0usize..64,
            extra in prop::collection::vec(any::<u8>(), 1..4),
        ) {
            let bytes = record.encode();
            let cut = cut.min(bytes.len() - 1);
            prop_assert!(Record::decode(&bytes[..cut]).is_err());
            let mut longer = bytes.clone();
            longer.extend(extra);
            prop_assert!(Record::decode(&longer).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
            let _ = Record::decode(&bytes);
        }
    }

    /// A log written before KIP-966 (partition records of version 0) still reads: no eligible
    /// leader replicas, no last known leader.
    #[test]
    fn version_0_partition_records_read_without_eligible_leader_replicas() {
        let mut v0 = vec![FRAME_VERSION, 6, 0];
        v0.extend_from_slice(Uuid::from_u128(7).as_bytes());
        v0.extend_from_slice(&3i32.to_be_bytes());
        v0.extend_from_slice(&[0, 1]);
        v0.extend_from_slice(&2i32.to_be_bytes());
        v0.push(1);
        assert_eq!(
            Record::decode(&v0),
            Ok(Record::PartitionChange {
                topic_id: Uuid::from_u128(7),
                partition: 3,
                isr: None,
                leader: Some(BrokerId(2)),
                unclean: true,
                elr: None,
                last_known_elr: None,
            })
        );
    }

    #[test]
    fn unknown_types_and_versions_are_named() {
        let error = Record::decode(&[0, 9, 0]).expect_err("unknown type");
        assert!(error
            .to_string()
            .contains("unknown record type 9 version 0"));
        let error = Record::decode(&[0, 1, 7]).expect_err("unknown version");
        assert!(error.to_string().contains("type 1 version 7"));
        let error = Record::decode(&[3, 1, 0]).expect_err("unknown frame");
        assert!(error.to_string().contains("frame version 3"));
    }
}
