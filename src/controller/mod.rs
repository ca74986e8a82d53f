//! The controller's decisions (Kafka's `QuorumController` with its `ClusterControlManager` and
//! `ReplicationControlManager`), sans-IO: each request or tick yields the metadata records that
//! carry it out, already applied to the controller's own image. The caller appends them to the
//! metadata log (a Raft quorum, or a single controller's log) and answers only once they are
//! committed; if it loses the leadership first, it rebuilds the controller from the committed
//! log with [`QuorumController::replay`].
//!
//! What it decides:
//! - broker registration (a new broker epoch each time), heartbeats, unfencing once a broker
//!   has caught up with the metadata, and fencing when its session
//!   (`broker.session.timeout.ms`) expires;
//! - topic creation with a replica assignment over the active brokers;
//! - leader elections when a leader is fenced or a leaderless partition's ISR member returns:
//!   clean from the ISR in replica order, unclean (any live replica, the ISR reset to it) only
//!   when `unclean.leader.election.enable` is true for the topic;
//! - AlterPartition from a leader, a compare-and-set on the partition epoch.

pub mod image;
pub mod node;
pub mod records;

use std::collections::BTreeMap;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use uuid::Uuid;

use crate::protocol::ErrorCode;
use crate::types::{BrokerEpoch, BrokerId, LeaderEpoch, Millis, PartitionEpoch};

use self::image::{ClusterImage, PartitionRegistration};
use self::records::{Record, NO_LEADER};

/// The controller's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// `broker.session.timeout.ms` (default 9000): a broker without a heartbeat for this long
    /// is fenced.
    pub broker_session_timeout_ms: u64,
    /// `unclean.leader.election.enable` (default false): the default of the topic config.
    pub unclean_leader_election_enable: bool,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            broker_session_timeout_ms: 9_000,
            unclean_leader_election_enable: false,
        }
    }
}

/// A controller's refusal: the Kafka error and its message.
pub type Refusal = (ErrorCode, String);

/// What a heartbeat answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatReply {
    /// The broker is fenced (after this heartbeat's records).
    pub fenced: bool,
}

/// The state an AlterPartition asks for: Kafka's `AlterPartitionRequest` partition data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartition {
    /// The leader asking.
    pub broker: BrokerId,
    /// Its registration epoch.
    pub broker_epoch: BrokerEpoch,
    /// The topic.
    pub topic_id: Uuid,
    /// The partition.
    pub partition: i32,
    /// The leader epoch the leader is in.
    pub leader_epoch: LeaderEpoch,
    /// The partition epoch the leader's view is based on.
    pub partition_epoch: PartitionEpoch,
    /// The ISR it wants.
    pub new_isr: Vec<BrokerId>,
}

/// The controller's state: the image plus what is not in the log (broker sessions).
#[derive(Debug)]
pub struct QuorumController {
    config: ControllerConfig,
    image: ClusterImage,
    /// Last heartbeat of each registered broker (volatile: a new active controller gives every
    /// broker a fresh session).
    sessions: BTreeMap<BrokerId, Millis>,
    next_broker_epoch: i64,
    rng: ChaCha8Rng,
}

impl QuorumController {
    /// A controller over an empty log.
    pub fn new(config: ControllerConfig, seed: u64) -> Self {
        QuorumController {
            config,
            image: ClusterImage::default(),
            sessions: BTreeMap::new(),
            next_broker_epoch: 1,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// The settings it decides by.
    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    /// The image, as the records so far make it.
    pub fn image(&self) -> &ClusterImage {
        &self.image
    }

    /// Applies a committed record (replaying the log, or following the active controller).
    pub fn replay(&mut self, record: &Record) -> Result<(), String> {
        self.image.apply(record)?;
        if let Record::RegisterBroker { epoch, .. } = record {
            self.next_broker_epoch = self.next_broker_epoch.max(epoch.0 + 1);
        }
        Ok(())
    }

    /// Starts every registered broker's session at `now`: called when this controller becomes
    /// active, so that brokers are judged by heartbeats it has seen itself.
    pub fn activate(&mut self, now: Millis) {
        self.sessions = self
            .image
            .brokers()
            .map(|broker| (broker.id, now))
            .collect();
    }

    fn commit(&mut self, records: Vec<Record>) -> Vec<Record> {
        for record in &records {
            if let Err(error) = self.replay(record) {
                panic!("the controller wrote a record that does not apply: {error}: {record:?}");
            }
        }
        self.image.check_invariants();
        records
    }

    /// A broker registers (Kafka's BrokerRegistration): a new epoch, fenced until a heartbeat
    /// says it caught up. A broker that registers again (it restarted) loses its leaderships
    /// like a fenced one.
    pub fn register_broker(
        &mut self,
        now: Millis,
        broker: BrokerId,
        host: &str,
        port: i32,
    ) -> (BrokerEpoch, Vec<Record>) {
        let epoch = BrokerEpoch(self.next_broker_epoch);
        let mut records = Vec::new();
        if self.image.is_active(broker) {
            records.extend(self.fence_records(broker));
        }
        let registration = Record::RegisterBroker {
            broker,
            epoch,
            host: host.to_owned(),
            port,
        };
        // Fencing first: the elections below must see the old registration fenced.
        let mut records = self.commit(records);
        records.extend(self.commit(vec![registration]));
        self.sessions.insert(broker, now);
        (epoch, records)
    }

    /// A broker's heartbeat (Kafka's BrokerHeartbeat). `caught_up`: it has applied the
    /// metadata up to its registration, so it may be unfenced, which also lets it take over
    /// leaderless partitions whose ISR holds it.
    pub fn heartbeat(
        &mut self,
        now: Millis,
        broker: BrokerId,
        epoch: BrokerEpoch,
        caught_up: bool,
    ) -> Result<(HeartbeatReply, Vec<Record>), Refusal> {
        let registration = self.image.broker(broker).ok_or_else(|| {
            (
                ErrorCode::BrokerIdNotRegistered,
                format!("broker {} is not registered", broker.0),
            )
        })?;
        if registration.epoch != epoch {
            return Err((
                ErrorCode::StaleBrokerEpoch,
                format!(
                    "broker {} heartbeats with epoch {}, registered as {}",
                    broker.0, epoch.0, registration.epoch.0
                ),
            ));
        }
        self.sessions.insert(broker, now);
        let mut records = Vec::new();
        if registration.fenced && caught_up {
            records = self.commit(vec![Record::UnfenceBroker { broker, epoch }]);
            let elections = self.elections_for_returning(broker);
            records.extend(self.commit(elections));
        }
        let fenced = !self.image.is_active(broker);
        Ok((HeartbeatReply { fenced }, records))
    }

    /// Fences every active broker whose session expired, with the elections that follows.
    pub fn tick(&mut self, now: Millis) -> Vec<Record> {
        let expired: Vec<BrokerId> = self
            .sessions
            .iter()
            .filter(|(broker, last)| {
                self.image.is_active(**broker)
                    && now.0 > last.0 + self.config.broker_session_timeout_ms
            })
            .map(|(broker, _)| *broker)
            .collect();
        let mut records = Vec::new();
        for broker in expired {
            tracing::info!(broker = broker.0, "broker session expired: fenced");
            let fence = self.fence_records(broker);
            records.extend(self.commit(fence));
        }
        records
    }

    /// When the next active broker's session may expire.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.sessions
            .iter()
            .filter(|(broker, _)| self.image.is_active(**broker))
            .map(|(_, last)| last.plus(self.config.broker_session_timeout_ms + 1))
            .min()
    }

    /// Creates a topic: `partitions` partitions of `replication_factor` replicas over the
    /// active brokers, each led by its first replica with the whole assignment in sync.
    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<(Uuid, Vec<Record>), Refusal> {
        if self.image.topic(name).is_some() {
            return Err((
                ErrorCode::TopicAlreadyExists,
                format!("Topic '{name}' already exists."),
            ));
        }
        if partitions < 1 {
            return Err((
                ErrorCode::InvalidPartitions,
                "Number of partitions must be larger than 0.".to_owned(),
            ));
        }
        let active: Vec<BrokerId> = self
            .image
            .brokers()
            .filter(|broker| !broker.fenced)
            .map(|broker| broker.id)
            .collect();
        let factor = usize::try_from(replication_factor).unwrap_or(0);
        if factor < 1 || factor > active.len() {
            return Err((
                ErrorCode::InvalidReplicationFactor,
                format!(
                    "Unable to replicate the partition {replication_factor} time(s): The target replication factor of {replication_factor} cannot be reached because only {} broker(s) are registered.",
                    active.len()
                ),
            ));
        }
        let topic_id = self.new_topic_id();
        let start = (self.rng.next_u64() % active.len() as u64) as usize;
        let mut records = vec![Record::Topic {
            name: name.to_owned(),
            topic_id,
            configs,
        }];
        for partition in 0..partitions {
            let first = start + partition as usize;
            let replicas: Vec<BrokerId> = (0..factor)
                .map(|index| active[(first + index) % active.len()])
                .collect();
            records.push(Record::Partition {
                topic_id,
                partition,
                isr: replicas.clone(),
                leader: replicas[0],
                replicas,
                leader_epoch: LeaderEpoch(0),
                partition_epoch: PartitionEpoch(0),
            });
        }
        Ok((topic_id, self.commit(records)))
    }

    /// A leader asks to change its partition's ISR (Kafka's AlterPartition): refused unless it
    /// is the current leader in the current leader epoch, its view is the current partition
    /// epoch, and every new ISR member is an active replica.
    pub fn alter_partition(
        &mut self,
        request: &AlterPartition,
    ) -> Result<(PartitionRegistration, Vec<Record>), Refusal> {
        self.check_alter_partition(request)?;
        let mut isr = request.new_isr.clone();
        isr.sort_unstable();
        isr.dedup();
        let (topic_id, partition) = (request.topic_id, request.partition);
        let records = self.commit(vec![Record::PartitionChange {
            topic_id,
            partition,
            isr: Some(isr),
            leader: None,
            unclean: false,
        }]);
        let updated = self
            .image
            .partition(topic_id, partition)
            .expect("just changed")
            .clone();
        Ok((updated, records))
    }

    /// Why an AlterPartition may not apply, in Kafka's order of checks.
    fn check_alter_partition(&self, request: &AlterPartition) -> Result<(), Refusal> {
        let AlterPartition {
            broker,
            broker_epoch,
            topic_id,
            partition,
            leader_epoch,
            partition_epoch,
            new_isr,
        } = request;
        let registration = self.image.broker(*broker).ok_or_else(|| {
            (
                ErrorCode::BrokerIdNotRegistered,
                format!("broker {} is not registered", broker.0),
            )
        })?;
        if registration.epoch != *broker_epoch {
            return Err((
                ErrorCode::StaleBrokerEpoch,
                format!("broker {} epoch {} is stale", broker.0, broker_epoch.0),
            ));
        }
        let current = self.image.partition(*topic_id, *partition).ok_or_else(|| {
            (
                ErrorCode::UnknownTopicOrPartition,
                format!("unknown partition {topic_id}-{partition}"),
            )
        })?;
        if current.leader != *broker {
            return Err((
                ErrorCode::NotLeaderOrFollower,
                format!("broker {} does not lead it", broker.0),
            ));
        }
        if current.leader_epoch != *leader_epoch {
            let message = format!(
                "leader epoch {} is not the current {}",
                leader_epoch.0, current.leader_epoch.0
            );
            return Err((ErrorCode::FencedLeaderEpoch, message));
        }
        if current.partition_epoch != *partition_epoch {
            let message = format!(
                "partition epoch {} is not the current {}",
                partition_epoch.0, current.partition_epoch.0
            );
            return Err((ErrorCode::InvalidUpdateVersion, message));
        }
        if !new_isr.contains(broker)
            || new_isr
                .iter()
                .any(|member| !current.replicas.contains(member))
        {
            return Err((
                ErrorCode::InvalidRequest,
                format!("ISR {new_isr:?} must hold the leader and replicas only"),
            ));
        }
        if let Some(ineligible) = new_isr
            .iter()
            .find(|member| !current.isr.contains(member) && !self.image.is_active(**member))
        {
            return Err((
                ErrorCode::IneligibleReplica,
                format!("replica {} is fenced or unregistered", ineligible.0),
            ));
        }
        Ok(())
    }

    /// Whether the topic allows unclean elections.
    fn unclean_allowed(&self, topic_id: Uuid) -> bool {
        self.image
            .topic_by_id(topic_id)
            .and_then(|topic| topic.configs.get("unclean.leader.election.enable"))
            .map_or(self.config.unclean_leader_election_enable, |value| {
                value.eq_ignore_ascii_case("true")
            })
    }

    /// Fences `broker`, takes it out of every ISR (a last member stays, for a clean election
    /// when it returns) and elects new leaders where it led.
    fn fence_records(&self, broker: BrokerId) -> Vec<Record> {
        let registration = self.image.broker(broker).expect("an active broker");
        let mut records = vec![Record::FenceBroker {
            broker,
            epoch: registration.epoch,
        }];
        let eligible = |member: BrokerId| member != broker && self.image.is_active(member);
        for topic in self.image.topics() {
            let unclean = self.unclean_allowed(topic.topic_id);
            for (index, partition) in &topic.partitions {
                if !partition.isr.contains(&broker) && partition.leader != broker {
                    continue;
                }
                let mut isr: Vec<BrokerId> = partition
                    .isr
                    .iter()
                    .copied()
                    .filter(|member| *member != broker)
                    .collect();
                if isr.is_empty() {
                    isr = partition.isr.clone();
                }
                if let Some(change) =
                    elect(topic.topic_id, *index, partition, isr, eligible, unclean)
                {
                    records.push(change);
                }
            }
        }
        records
    }

    /// Elections a returning (unfenced) broker makes possible: leaderless partitions whose ISR
    /// holds it, or any it replicates if the topic allows unclean elections.
    fn elections_for_returning(&self, broker: BrokerId) -> Vec<Record> {
        let eligible = |member: BrokerId| self.image.is_active(member);
        let mut records = Vec::new();
        for topic in self.image.topics() {
            let unclean = self.unclean_allowed(topic.topic_id);
            for (index, partition) in &topic.partitions {
                if partition.leader != NO_LEADER || !partition.replicas.contains(&broker) {
                    continue;
                }
                if let Some(change) = elect(
                    topic.topic_id,
                    *index,
                    partition,
                    partition.isr.clone(),
                    eligible,
                    unclean,
                ) {
                    records.push(change);
                }
            }
        }
        records
    }

    fn new_topic_id(&mut self) -> Uuid {
        loop {
            let id = Uuid::from_u64_pair(self.rng.next_u64(), self.rng.next_u64());
            if !id.is_nil() && self.image.topic_by_id(id).is_none() {
                return id;
            }
        }
    }
}

/// Kafka's `PartitionChangeBuilder` election: keep an eligible leader that stays in the ISR;
/// else the first replica (in assignment order) in the ISR that is eligible; else, if unclean
/// elections are allowed, the first eligible replica, with the ISR reset to it; else no leader.
/// `None` if nothing changes.
fn elect(
    topic_id: Uuid,
    partition: i32,
    current: &PartitionRegistration,
    isr: Vec<BrokerId>,
    eligible: impl Fn(BrokerId) -> bool,
    unclean_allowed: bool,
) -> Option<Record> {
    let keeps =
        current.leader != NO_LEADER && isr.contains(&current.leader) && eligible(current.leader);
    let clean = current
        .replicas
        .iter()
        .copied()
        .find(|replica| isr.contains(replica) && eligible(*replica));
    let (leader, isr, unclean) = if keeps {
        (current.leader, isr, false)
    } else if let Some(leader) = clean {
        (leader, isr, false)
    } else if let Some(leader) = current
        .replicas
        .iter()
        .copied()
        .find(|replica| unclean_allowed && eligible(*replica))
    {
        tracing::warn!(%topic_id, partition, leader = leader.0, "unclean leader election");
        (leader, vec![leader], true)
    } else {
        (NO_LEADER, isr, false)
    };
    if leader == current.leader && isr == current.isr {
        return None;
    }
    Some(Record::PartitionChange {
        topic_id,
        partition,
        isr: (isr != current.isr).then_some(isr),
        leader: (leader != current.leader).then_some(leader),
        unclean,
    })
}

#[cfg(test)]
mod tests;
