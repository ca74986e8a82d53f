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
//! - AlterPartition from a leader, a compare-and-set on the partition epoch;
//! - with KIP-966 (`seedlog.replication.generation=kip-966`, Kafka 4.1's default for new
//!   clusters), eligible leader replicas: a replica that leaves an ISR below
//!   `min.insync.replicas` joins the ELR (the high watermark is frozen from then on, so it
//!   holds everything committed) and may be elected when the ISR is empty; the last member of
//!   an ISR leaves it when fenced; a broker that registers after an unclean shutdown (its
//!   `PreviousBrokerEpoch` is not the epoch the controller holds) leaves every ISR and ELR, so a
//!   last replica that lost its unflushed tail is never elected over one that kept it.

pub mod node;

use std::collections::BTreeMap;

use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::protocol::ErrorCode;
use crate::types::{BrokerEpoch, BrokerId, LeaderEpoch, Millis, PartitionEpoch};

use crate::metadata::image::{ClusterImage, PartitionRegistration};
use crate::metadata::records::{Record, NO_LEADER};
use crate::metadata::topics::{self, Names, TopicCreator};

/// The controller's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// `broker.session.timeout.ms` (default 9000): a broker without a heartbeat for this long
    /// is fenced.
    pub broker_session_timeout_ms: u64,
    /// `unclean.leader.election.enable` (default false): the default of the topic config.
    pub unclean_leader_election_enable: bool,
    /// KIP-966's eligible leader replicas and unclean-shutdown detection
    /// (`seedlog.replication.generation=kip-966`, the default).
    pub eligible_leader_replicas: bool,
    /// `min.insync.replicas` (default 1): the default of the topic config, which sizes the ELR.
    pub min_insync_replicas: i32,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            broker_session_timeout_ms: 9_000,
            unclean_leader_election_enable: false,
            eligible_leader_replicas: true,
            min_insync_replicas: 1,
        }
    }
}

/// A controller's refusal: the Kafka error and its message.
pub use crate::metadata::topics::Refusal;

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
    /// like a fenced one. With KIP-966, one whose `previous_broker_epoch` is not the epoch held
    /// for it shut down uncleanly (its unflushed tail may be gone): it leaves every ISR and ELR,
    /// the last ISR member included (Kafka's `handleBrokerUncleanShutdown`), before its
    /// registration record.
    pub fn register_broker(
        &mut self,
        now: Millis,
        broker: BrokerId,
        host: &str,
        port: i32,
        previous_broker_epoch: i64,
    ) -> (BrokerEpoch, Vec<Record>) {
        let epoch = BrokerEpoch(self.next_broker_epoch);
        let stored = self
            .image
            .broker(broker)
            .map(|registration| registration.epoch.0);
        let mut records = Vec::new();
        if self.image.is_active(broker) {
            records.extend(self.commit(self.fence_records(broker)));
        }
        if self.config.eligible_leader_replicas
            && stored.is_some_and(|stored| stored != previous_broker_epoch)
        {
            tracing::info!(
                broker = broker.0,
                previous_broker_epoch,
                "unclean shutdown: out of every ISR and ELR"
            );
            let changes = self.unclean_shutdown_records(broker);
            records.extend(self.commit(changes));
        }
        let registration = Record::RegisterBroker {
            broker,
            epoch,
            host: host.to_owned(),
            port,
        };
        // Fencing first: the elections below must see the old registration fenced.
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
    /// active brokers, each led by its first replica with the whole assignment in sync. For
    /// tests: requests go through [`Self::create_topics`], which checks the request first.
    #[cfg(test)]
    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<(Uuid, Vec<Record>), Refusal> {
        let topic = topics::NewTopic {
            name: name.to_owned(),
            partitions,
            replicas: topics::Replicas::Factor(replication_factor),
            configs,
        };
        let (topic_id, records) = topics::topic_records(self, &topic)?;
        Ok((topic_id, self.commit(records)))
    }

    /// Decides a CreateTopics request (the checks every metadata path shares,
    /// [`topics::create_topics`]); the records it returns are applied already.
    pub fn create_topics(
        &mut self,
        api_version: i16,
        body: &CreateTopicsRequest,
        defaults: &BrokerConfig,
    ) -> (CreateTopicsResponse, Vec<Record>) {
        // Brokers refuse clients' reserved names before forwarding; what arrives with one is a
        // broker creating an internal topic.
        let decided = topics::create_topics(api_version, body, Names::Internal, defaults, self);
        (decided.response, self.commit(decided.records))
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
        let current = self
            .image
            .partition(topic_id, partition)
            .expect("checked above");
        let (elr, last_known_elr) = self.target_elr(topic_id, current, &isr, None);
        let change = |old: &Vec<BrokerId>, new: Vec<BrokerId>| (*old != new).then_some(new);
        let records = self.commit(vec![Record::PartitionChange {
            topic_id,
            partition,
            elr: change(&current.elr, elr),
            last_known_elr: change(&current.last_known_elr, last_known_elr),
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

    /// A topic's `min.insync.replicas`, bounded by a partition's replication factor (Kafka's
    /// `getTopicEffectiveMinIsr`).
    fn effective_min_isr(&self, topic_id: Uuid, replicas: usize) -> usize {
        let configured = self
            .image
            .topic_by_id(topic_id)
            .and_then(|topic| topic.configs.get("min.insync.replicas"))
            .and_then(|value| value.parse::<usize>().ok())
            .unwrap_or(usize::try_from(self.config.min_insync_replicas).unwrap_or(1));
        configured.min(replicas)
    }

    /// KIP-966's ELR and last known leader after the ISR becomes `target_isr` (Kafka's
    /// `PartitionChangeBuilder.maybePopulateTargetElr`): at or above the minimum ISR both are
    /// empty; below it, every member of the old ELR or ISR not in the new ISR (nor shut down
    /// uncleanly) is eligible, since the high watermark stops while the ISR is below the
    /// minimum. Without KIP-966 both stay empty.
    fn target_elr(
        &self,
        topic_id: Uuid,
        current: &PartitionRegistration,
        target_isr: &[BrokerId],
        unclean_shutdown: Option<BrokerId>,
    ) -> (Vec<BrokerId>, Vec<BrokerId>) {
        if !self.config.eligible_leader_replicas {
            return (Vec::new(), Vec::new());
        }
        if target_isr.len() >= self.effective_min_isr(topic_id, current.replicas.len()) {
            return (Vec::new(), Vec::new());
        }
        let elr = current
            .replicas
            .iter()
            .copied()
            .filter(|replica| current.elr.contains(replica) || current.isr.contains(replica))
            .filter(|replica| !target_isr.contains(replica) && Some(*replica) != unclean_shutdown)
            .collect();
        (elr, current.last_known_elr.clone())
    }

    /// Fences `broker`, takes it out of every ISR and elects new leaders where it led. Before
    /// KIP-966 a last ISR member stays, for a clean election when it returns; with KIP-966 it
    /// leaves too and joins the ELR (the ISR below the minimum keeps the high watermark still).
    fn fence_records(&self, broker: BrokerId) -> Vec<Record> {
        let registration = self.image.broker(broker).expect("an active broker");
        let mut records = vec![Record::FenceBroker {
            broker,
            epoch: registration.epoch,
        }];
        let acceptable = |member: BrokerId| member != broker && self.image.is_active(member);
        for topic in self.image.topics() {
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
                if isr.is_empty() && !self.config.eligible_leader_replicas {
                    isr = partition.isr.clone();
                }
                let target = Target {
                    isr,
                    unclean_shutdown: None,
                };
                if let Some(change) =
                    self.elect(topic.topic_id, *index, partition, target, acceptable)
                {
                    records.push(change);
                }
            }
        }
        records
    }

    /// KIP-966: `broker` registered after an unclean shutdown. It leaves every ISR and ELR it is
    /// in, the last ISR member included, and cannot be elected now (Kafka's
    /// `handleBrokerUncleanShutdown`).
    fn unclean_shutdown_records(&self, broker: BrokerId) -> Vec<Record> {
        let acceptable = |member: BrokerId| member != broker && self.image.is_active(member);
        let mut records = Vec::new();
        for topic in self.image.topics() {
            for (index, partition) in &topic.partitions {
                if !partition.isr.contains(&broker) && !partition.elr.contains(&broker) {
                    continue;
                }
                let target = Target {
                    isr: partition
                        .isr
                        .iter()
                        .copied()
                        .filter(|member| *member != broker)
                        .collect(),
                    unclean_shutdown: Some(broker),
                };
                if let Some(change) =
                    self.elect(topic.topic_id, *index, partition, target, acceptable)
                {
                    records.push(change);
                }
            }
        }
        records
    }

    /// Elections a returning (unfenced) broker makes possible: leaderless partitions whose ISR
    /// (or, with the ISR empty, ELR; or, with both empty, last known leader) holds it, or any
    /// it replicates if the topic allows unclean elections.
    fn elections_for_returning(&self, broker: BrokerId) -> Vec<Record> {
        let acceptable = |member: BrokerId| self.image.is_active(member);
        let mut records = Vec::new();
        for topic in self.image.topics() {
            for (index, partition) in &topic.partitions {
                if partition.leader != NO_LEADER || !partition.replicas.contains(&broker) {
                    continue;
                }
                let target = Target {
                    isr: partition.isr.clone(),
                    unclean_shutdown: None,
                };
                if let Some(change) =
                    self.elect(topic.topic_id, *index, partition, target, acceptable)
                {
                    records.push(change);
                }
            }
        }
        records
    }

    /// Kafka's `maybeUpdateLastKnownLeader` (with KIP-966): the first time a partition loses
    /// its leader, remember who led; a partition with a leader has none.
    fn remember_last_leader(
        &self,
        current: &PartitionRegistration,
        leader: BrokerId,
        last_known_elr: &mut Vec<BrokerId>,
    ) {
        if !self.config.eligible_leader_replicas {
            return;
        }
        if leader == NO_LEADER && current.leader != NO_LEADER && last_known_elr.is_empty() {
            *last_known_elr = vec![current.leader];
        } else if leader != NO_LEADER {
            last_known_elr.clear();
        }
    }

    /// Kafka's `PartitionChangeBuilder`: the ELR for the target ISR, then the election: keep an
    /// acceptable leader that stays in the ISR; else the first replica (in assignment order) in
    /// the ISR that is acceptable; with KIP-966 and the ISR empty, the first acceptable ELR
    /// member (a clean election: the ISR becomes it); with ISR and ELR both empty, the last
    /// known leader if acceptable (unclean, as Kafka counts it, whatever the topic says); else,
    /// if unclean elections are allowed, the first acceptable replica, with the ISR reset to it;
    /// else no leader (the last known leader remembers who led). `None` if nothing changes.
    fn elect(
        &self,
        topic_id: Uuid,
        partition: i32,
        current: &PartitionRegistration,
        target: Target,
        acceptable: impl Fn(BrokerId) -> bool,
    ) -> Option<Record> {
        let Target {
            isr,
            unclean_shutdown,
        } = target;
        let unclean_allowed = self.unclean_allowed(topic_id);
        let (mut elr, mut last_known_elr) =
            self.target_elr(topic_id, current, &isr, unclean_shutdown);
        let from_elr = |replica: BrokerId| isr.is_empty() && elr.contains(&replica);
        let valid = |replica: BrokerId| {
            (isr.contains(&replica) || from_elr(replica)) && acceptable(replica)
        };
        let keeps = current.leader != NO_LEADER && valid(current.leader);
        let clean = current
            .replicas
            .iter()
            .copied()
            .find(|replica| valid(*replica));
        let last_known = last_known_elr.first().copied().filter(|leader| {
            self.config.eligible_leader_replicas
                && isr.is_empty()
                && elr.is_empty()
                && last_known_elr.len() == 1
                && acceptable(*leader)
        });
        let (leader, isr, unclean) = if keeps {
            (current.leader, isr, false)
        } else if let Some(leader) = clean {
            if from_elr(leader) {
                tracing::info!(%topic_id, partition, leader = leader.0, "leader elected from the ELR");
                elr.retain(|member| *member != leader);
                (leader, vec![leader], false)
            } else {
                (leader, isr, false)
            }
        } else if let Some(leader) = last_known {
            tracing::warn!(%topic_id, partition, leader = leader.0, "the last known leader elected");
            elr.clear();
            last_known_elr.clear();
            (leader, vec![leader], true)
        } else if let Some(leader) = current
            .replicas
            .iter()
            .copied()
            .find(|replica| unclean_allowed && acceptable(*replica))
        {
            tracing::warn!(%topic_id, partition, leader = leader.0, "unclean leader election");
            elr.clear();
            last_known_elr.clear();
            (leader, vec![leader], true)
        } else {
            (NO_LEADER, isr, false)
        };
        self.remember_last_leader(current, leader, &mut last_known_elr);
        if leader == current.leader
            && isr == current.isr
            && elr == current.elr
            && last_known_elr == current.last_known_elr
        {
            return None;
        }
        let change = |old: &Vec<BrokerId>, new: Vec<BrokerId>| (*old != new).then_some(new);
        Some(Record::PartitionChange {
            topic_id,
            partition,
            isr: change(&current.isr, isr),
            leader: (leader != current.leader).then_some(leader),
            unclean,
            elr: change(&current.elr, elr),
            last_known_elr: change(&current.last_known_elr, last_known_elr),
        })
    }
}

impl TopicCreator for QuorumController {
    fn is_taken(&self, name: &str) -> bool {
        self.image.topic(name).is_some()
    }

    fn active_brokers(&self) -> Vec<BrokerId> {
        self.image
            .brokers()
            .filter(|broker| !broker.fenced)
            .map(|broker| broker.id)
            .collect()
    }

    fn new_topic_id(&mut self) -> Uuid {
        self.image.new_topic_id(&mut self.rng)
    }

    fn first_replica(&mut self, active: usize) -> usize {
        (self.rng.next_u64() % active as u64) as usize
    }
}

/// The ISR a partition change aims for, and a broker that shut down uncleanly (out of the ELR
/// too, and not electable).
struct Target {
    isr: Vec<BrokerId>,
    unclean_shutdown: Option<BrokerId>,
}

#[cfg(test)]
mod tests;
