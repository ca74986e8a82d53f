//! The cluster's metadata image: what the records of the metadata log say, applied in order.
//! Brokers (registration, epoch, fenced), topics and their partitions (replicas, ISR, leader,
//! leader epoch, partition epoch). Applying a record that contradicts the image is an error:
//! the controller only writes records that apply.

use std::collections::BTreeMap;

use rand_chacha::rand_core::RngCore;
use uuid::Uuid;

use crate::types::{BrokerEpoch, BrokerId, LeaderEpoch, PartitionEpoch, TopicPartition};

use super::records::{Record, NO_LEADER};

/// A registered broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    /// Its id.
    pub id: BrokerId,
    /// Its registration epoch.
    pub epoch: BrokerEpoch,
    /// Host clients and brokers reach it at.
    pub host: String,
    /// Port.
    pub port: i32,
    /// Fenced brokers lead nothing and are in no ISR (except a last member kept for a clean
    /// election later).
    pub fenced: bool,
}

/// A partition's replication state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRegistration {
    /// Every replica, in preference order.
    pub replicas: Vec<BrokerId>,
    /// The in-sync replicas.
    pub isr: Vec<BrokerId>,
    /// The leader, or [`NO_LEADER`].
    pub leader: BrokerId,
    /// Bumped when the leader changes.
    pub leader_epoch: LeaderEpoch,
    /// Bumped by every change.
    pub partition_epoch: PartitionEpoch,
    /// KIP-966's eligible leader replicas: replicas out of the ISR that left it while it was
    /// below `min.insync.replicas` (the high watermark has not moved since), electable when
    /// the ISR is empty. Always empty before KIP-966.
    pub elr: Vec<BrokerId>,
    /// KIP-966's last known leader: the leader before the partition lost it (at most one),
    /// electable once ISR and ELR are both empty.
    pub last_known_elr: Vec<BrokerId>,
}

/// A topic and its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    /// Its name.
    pub name: String,
    /// Its id.
    pub topic_id: Uuid,
    /// Config overrides.
    pub configs: BTreeMap<String, String>,
    /// Partitions by index.
    pub partitions: BTreeMap<i32, PartitionRegistration>,
}

/// Everything the metadata log says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterImage {
    brokers: BTreeMap<BrokerId, BrokerRegistration>,
    topics: BTreeMap<Uuid, TopicImage>,
    ids_by_name: BTreeMap<String, Uuid>,
}

impl ClusterImage {
    /// A broker's registration.
    pub fn broker(&self, id: BrokerId) -> Option<&BrokerRegistration> {
        self.brokers.get(&id)
    }

    /// Every registered broker, by id.
    pub fn brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values()
    }

    /// Whether a broker is registered and unfenced.
    pub fn is_active(&self, id: BrokerId) -> bool {
        self.brokers.get(&id).is_some_and(|broker| !broker.fenced)
    }

    /// A topic by name.
    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.ids_by_name
            .get(name)
            .and_then(|id| self.topics.get(id))
    }

    /// A topic by id.
    pub fn topic_by_id(&self, topic_id: Uuid) -> Option<&TopicImage> {
        self.topics.get(&topic_id)
    }

    /// Every topic, by id.
    pub fn topics(&self) -> impl Iterator<Item = &TopicImage> {
        self.topics.values()
    }

    /// A fresh topic id drawn from `rng`: not the nil id, and no topic's here.
    pub fn new_topic_id(&self, rng: &mut impl RngCore) -> Uuid {
        loop {
            let id = Uuid::from_u64_pair(rng.next_u64(), rng.next_u64());
            if !id.is_nil() && self.topic_by_id(id).is_none() {
                return id;
            }
        }
    }

    /// A partition's state.
    pub fn partition(&self, topic_id: Uuid, partition: i32) -> Option<&PartitionRegistration> {
        self.topics
            .get(&topic_id)
            .and_then(|topic| topic.partitions.get(&partition))
    }

    /// The records that rebuild this image from nothing (a metadata snapshot, Kafka's
    /// `MetadataImage.write`): each broker's registration, then its unfencing if it is active;
    /// each topic, then each partition as it stands now, epochs included. Applied in order to an
    /// empty image they give an image equal to this one.
    pub fn to_records(&self) -> Vec<Record> {
        let mut records = Vec::new();
        for broker in self.brokers.values() {
            records.push(Record::RegisterBroker {
                broker: broker.id,
                epoch: broker.epoch,
                host: broker.host.clone(),
                port: broker.port,
            });
            if !broker.fenced {
                records.push(Record::UnfenceBroker {
                    broker: broker.id,
                    epoch: broker.epoch,
                });
            }
        }
        for topic in self.topics.values() {
            records.push(Record::Topic {
                name: topic.name.clone(),
                topic_id: topic.topic_id,
                configs: topic.configs.clone(),
            });
            for (index, partition) in &topic.partitions {
                records.push(Record::Partition {
                    topic_id: topic.topic_id,
                    partition: *index,
                    replicas: partition.replicas.clone(),
                    isr: partition.isr.clone(),
                    leader: partition.leader,
                    leader_epoch: partition.leader_epoch,
                    partition_epoch: partition.partition_epoch,
                    elr: partition.elr.clone(),
                    last_known_elr: partition.last_known_elr.clone(),
                });
            }
        }
        records
    }

    /// The image `records` build from nothing, or why one does not apply.
    pub fn from_records<'a>(records: impl IntoIterator<Item = &'a Record>) -> Result<Self, String> {
        let mut image = ClusterImage::default();
        for record in records {
            image.apply(record)?;
        }
        Ok(image)
    }

    /// Applies one record, or says why it does not apply.
    pub fn apply(&mut self, record: &Record) -> Result<(), String> {
        match record {
            Record::RegisterBroker {
                broker,
                epoch,
                host,
                port,
            } => self.register(*broker, *epoch, host, *port),
            Record::UnfenceBroker { broker, epoch } => self.set_fenced(*broker, *epoch, false),
            Record::FenceBroker { broker, epoch } => self.set_fenced(*broker, *epoch, true),
            Record::Topic {
                name,
                topic_id,
                configs,
            } => {
                if self.ids_by_name.contains_key(name) || self.topics.contains_key(topic_id) {
                    return Err(format!("topic {name} ({topic_id}) created twice"));
                }
                self.ids_by_name.insert(name.clone(), *topic_id);
                self.topics.insert(
                    *topic_id,
                    TopicImage {
                        name: name.clone(),
                        topic_id: *topic_id,
                        configs: configs.clone(),
                        partitions: BTreeMap::new(),
                    },
                );
                Ok(())
            }
            Record::Partition { .. } => self.create_partition(record),
            Record::PartitionChange {
                topic_id,
                partition,
                isr,
                leader,
                elr,
                last_known_elr,
                ..
            } => self.change_partition(
                *topic_id,
                *partition,
                Change {
                    isr: isr.as_deref(),
                    leader: *leader,
                    elr: elr.as_deref(),
                    last_known_elr: last_known_elr.as_deref(),
                },
            ),
        }
    }

    fn register(
        &mut self,
        broker: BrokerId,
        epoch: BrokerEpoch,
        host: &str,
        port: i32,
    ) -> Result<(), String> {
        if let Some(previous) = self.brokers.get(&broker) {
            if previous.epoch >= epoch {
                return Err(format!(
                    "broker {} registers with epoch {} not above {}",
                    broker.0, epoch.0, previous.epoch.0
                ));
            }
        }
        let registration = BrokerRegistration {
            id: broker,
            epoch,
            host: host.to_owned(),
            port,
            fenced: true,
        };
        self.brokers.insert(broker, registration);
        Ok(())
    }

    fn create_partition(&mut self, record: &Record) -> Result<(), String> {
        let Record::Partition {
            topic_id,
            partition,
            replicas,
            isr,
            leader,
            leader_epoch,
            partition_epoch,
            elr,
            last_known_elr,
        } = record
        else {
            unreachable!("called for partition records")
        };
        let topic = self
            .topics
            .get_mut(topic_id)
            .ok_or_else(|| format!("partition {partition} of unknown topic {topic_id}"))?;
        if topic.partitions.contains_key(partition) {
            return Err(format!("{}-{partition} created twice", topic.name));
        }
        let registration = PartitionRegistration {
            replicas: replicas.clone(),
            isr: isr.clone(),
            leader: *leader,
            leader_epoch: *leader_epoch,
            partition_epoch: *partition_epoch,
            elr: elr.clone(),
            last_known_elr: last_known_elr.clone(),
        };
        check_partition(&topic.name, *partition, &registration)?;
        topic.partitions.insert(*partition, registration);
        Ok(())
    }

    fn change_partition(
        &mut self,
        topic_id: Uuid,
        partition: i32,
        change: Change<'_>,
    ) -> Result<(), String> {
        let Change {
            isr,
            leader,
            elr,
            last_known_elr,
        } = change;
        let topic = self
            .topics
            .get_mut(&topic_id)
            .ok_or_else(|| format!("change of unknown topic {topic_id}"))?;
        let name = topic.name.clone();
        let current = topic
            .partitions
            .get_mut(&partition)
            .ok_or_else(|| format!("change of unknown partition {name}-{partition}"))?;
        let mut next = current.clone();
        if let Some(isr) = isr {
            next.isr = isr.to_vec();
        }
        if let Some(leader) = leader {
            if leader != next.leader {
                next.leader = leader;
                next.leader_epoch = LeaderEpoch(next.leader_epoch.0 + 1);
            }
        }
        if let Some(elr) = elr {
            next.elr = elr.to_vec();
        }
        if let Some(last_known_elr) = last_known_elr {
            next.last_known_elr = last_known_elr.to_vec();
        }
        next.partition_epoch = PartitionEpoch(next.partition_epoch.0 + 1);
        check_partition(&name, partition, &next)?;
        *current = next;
        Ok(())
    }

    fn set_fenced(&mut self, id: BrokerId, epoch: BrokerEpoch, fenced: bool) -> Result<(), String> {
        let broker = self
            .brokers
            .get_mut(&id)
            .ok_or_else(|| format!("broker {} is not registered", id.0))?;
        if broker.epoch != epoch {
            return Err(format!(
                "broker {} has epoch {}, not {}",
                id.0, broker.epoch.0, epoch.0
            ));
        }
        broker.fenced = fenced;
        Ok(())
    }

    /// What holds once a controller decision's records are all applied: every leader is an
    /// active broker in its partition's ISR, and the ISR is a non-empty set of replicas.
    pub fn check_invariants(&self) {
        for topic in self.topics.values() {
            for (index, partition) in &topic.partitions {
                check_partition(&topic.name, *index, partition).expect("a valid partition");
                assert!(
                    partition.leader == NO_LEADER || self.is_active(partition.leader),
                    "{}-{index}: leader {} is fenced or unknown",
                    topic.name,
                    partition.leader.0
                );
            }
        }
    }
}

/// What a partition change record changes (`None`: that part stays).
#[derive(Clone, Copy)]
struct Change<'a> {
    isr: Option<&'a [BrokerId]>,
    leader: Option<BrokerId>,
    elr: Option<&'a [BrokerId]>,
    last_known_elr: Option<&'a [BrokerId]>,
}

/// Leader ∈ ISR ⊆ replicas (or no leader), no duplicates; the ISR empty only without a leader
/// (KIP-966 lets the last member leave it); the eligible leader replicas are replicas outside
/// the ISR; at most one last known leader, a replica.
fn check_partition(
    topic: &str,
    index: i32,
    partition: &PartitionRegistration,
) -> Result<(), String> {
    // Written out only for an error (the check runs once a metadata record).
    let name = TopicPartition::new(topic, index);
    let mut replicas = partition.replicas.clone();
    replicas.sort_unstable();
    replicas.dedup();
    if replicas.len() != partition.replicas.len() || replicas.is_empty() {
        return Err(format!("{name}: replicas {:?}", partition.replicas));
    }
    let mut isr = partition.isr.clone();
    isr.sort_unstable();
    isr.dedup();
    if isr.len() != partition.isr.len() || (isr.is_empty() && partition.leader != NO_LEADER) {
        return Err(format!("{name}: ISR {:?}", partition.isr));
    }
    let mut elr = partition.elr.clone();
    elr.sort_unstable();
    elr.dedup();
    if elr.len() != partition.elr.len()
        || elr
            .iter()
            .any(|member| isr.contains(member) || !replicas.contains(member))
    {
        return Err(format!(
            "{name}: ELR {:?} with ISR {:?}",
            partition.elr, partition.isr
        ));
    }
    if partition.last_known_elr.len() > 1
        || partition
            .last_known_elr
            .iter()
            .any(|member| !replicas.contains(member))
    {
        return Err(format!(
            "{name}: last known leader {:?}",
            partition.last_known_elr
        ));
    }
    if let Some(stranger) = isr.iter().find(|member| !replicas.contains(member)) {
        return Err(format!(
            "{name}: ISR member {} is not a replica",
            stranger.0
        ));
    }
    if partition.leader != NO_LEADER && !isr.contains(&partition.leader) {
        return Err(format!(
            "{name}: leader {} not in the ISR {:?}",
            partition.leader.0, partition.isr
        ));
    }
    Ok(())
}
