//! The controller's decisions, driven directly.

use super::*;

const SESSION_MS: u64 = 9_000;

struct Cluster {
    controller: QuorumController,
    /// Every record written, in order (the metadata log).
    log: Vec<Record>,
    epochs: BTreeMap<BrokerId, BrokerEpoch>,
    now: Millis,
}

impl Cluster {
    /// `brokers` registered and unfenced.
    fn new(brokers: i32, config: ControllerConfig) -> Cluster {
        let mut cluster = Cluster {
            controller: QuorumController::new(config, 7),
            log: Vec::new(),
            epochs: BTreeMap::new(),
            now: Millis(0),
        };
        for id in 0..brokers {
            cluster.start(BrokerId(id));
        }
        cluster
    }

    /// Registers a broker (again: after a clean shutdown, with its previous epoch) and
    /// heartbeats it unfenced.
    fn start(&mut self, broker: BrokerId) {
        let previous = self.epochs.get(&broker).map_or(-1, |epoch| epoch.0);
        self.register(broker, previous);
    }

    /// Registers a broker after an unclean shutdown (no previous epoch) and heartbeats it
    /// unfenced.
    fn start_unclean(&mut self, broker: BrokerId) {
        self.register(broker, -1);
    }

    fn register(&mut self, broker: BrokerId, previous_broker_epoch: i64) {
        let port = 9092 + broker.0;
        let (epoch, records) = self.controller.register_broker(
            self.now,
            broker,
            "localhost",
            port,
            previous_broker_epoch,
        );
        self.log.extend(records);
        self.epochs.insert(broker, epoch);
        let (reply, records) = self
            .controller
            .heartbeat(self.now, broker, epoch, true)
            .expect("registered");
        assert!(!reply.fenced);
        self.log.extend(records);
    }

    /// Every broker but `silent` heartbeats every second for `ms`; ticks follow.
    fn run(&mut self, ms: u64, silent: &[BrokerId]) {
        for _ in 0..ms / 1_000 {
            self.now = self.now.plus(1_000);
            let alive: Vec<(BrokerId, BrokerEpoch)> = self
                .epochs
                .iter()
                .filter(|(id, _)| !silent.contains(id))
                .map(|(id, epoch)| (*id, *epoch))
                .collect();
            for (broker, epoch) in alive {
                let (_, records) = self
                    .controller
                    .heartbeat(self.now, broker, epoch, true)
                    .expect("registered");
                self.log.extend(records);
            }
            let records = self.controller.tick(self.now);
            self.log.extend(records);
        }
    }

    fn create(
        &mut self,
        name: &str,
        partitions: i32,
        factor: i16,
        configs: &[(&str, &str)],
    ) -> Uuid {
        let configs = configs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect();
        let (topic_id, records) = self
            .controller
            .create_topic(name, partitions, factor, configs)
            .expect("created");
        self.log.extend(records);
        topic_id
    }

    /// The leader of partition 0 of `topic` asks for `isr` (AlterPartition).
    fn shrink_isr(&mut self, topic: Uuid, leader: BrokerId, isr: Vec<BrokerId>) {
        let now = self.partition(topic, 0);
        let (_, records) = self
            .controller
            .alter_partition(&AlterPartition {
                broker: leader,
                broker_epoch: self.epochs[&leader],
                topic_id: topic,
                partition: 0,
                leader_epoch: now.leader_epoch,
                partition_epoch: now.partition_epoch,
                new_isr: isr,
            })
            .expect("the leader shrinks its ISR");
        self.log.extend(records);
    }

    fn partition(&self, topic_id: Uuid, partition: i32) -> PartitionRegistration {
        self.controller
            .image()
            .partition(topic_id, partition)
            .expect("exists")
            .clone()
    }
}

fn ids(brokers: &[BrokerId]) -> Vec<i32> {
    brokers.iter().map(|broker| broker.0).collect()
}

#[test]
fn a_topic_spreads_its_replicas_and_leaders_over_the_active_brokers() {
    let mut cluster = Cluster::new(3, ControllerConfig::default());
    let topic = cluster.create("t", 3, 3, &[]);
    let mut leaders = Vec::new();
    for index in 0..3 {
        let partition = cluster.partition(topic, index);
        assert_eq!(partition.replicas.len(), 3);
        assert_eq!(partition.isr, partition.replicas, "all in sync at creation");
        assert_eq!(partition.leader, partition.replicas[0]);
        assert_eq!(partition.leader_epoch, LeaderEpoch(0));
        leaders.push(partition.leader.0);
    }
    leaders.sort_unstable();
    assert_eq!(leaders, vec![0, 1, 2], "one leader per broker");
}

#[test]
fn topic_creation_refuses_what_kafka_refuses() {
    let mut cluster = Cluster::new(2, ControllerConfig::default());
    let refused = cluster
        .controller
        .create_topic("t", 1, 3, BTreeMap::new())
        .expect_err("three replicas on two brokers");
    assert_eq!(refused.0, ErrorCode::InvalidReplicationFactor);
    assert!(refused.1.contains("only 2 broker(s)"), "{}", refused.1);
    cluster.create("t", 1, 2, &[]);
    let refused = cluster
        .controller
        .create_topic("t", 1, 1, BTreeMap::new())
        .expect_err("twice");
    assert_eq!(refused.0, ErrorCode::TopicAlreadyExists);
}

#[test]
fn a_silent_leader_is_fenced_and_the_next_isr_replica_leads_in_a_new_epoch() {
    let mut cluster = Cluster::new(3, ControllerConfig::default());
    let topic = cluster.create("t", 1, 3, &[]);
    let before = cluster.partition(topic, 0);
    let old_leader = before.leader;
    cluster.run(SESSION_MS, &[old_leader]);
    assert_eq!(
        cluster.partition(topic, 0),
        before,
        "a session of exactly the timeout lives"
    );
    cluster.run(1_000, &[old_leader]);
    let after = cluster.partition(topic, 0);
    assert!(!cluster.controller.image().is_active(old_leader), "fenced");
    let expected: Vec<BrokerId> = before
        .replicas
        .iter()
        .copied()
        .filter(|replica| *replica != old_leader)
        .collect();
    assert_eq!(
        after.leader, expected[0],
        "the next replica in assignment order"
    );
    assert_eq!(
        ids(&after.isr),
        ids(&{
            let mut isr = expected.clone();
            isr.sort_unstable();
            isr
        })
    );
    assert_eq!(after.leader_epoch, LeaderEpoch(before.leader_epoch.0 + 1));
    assert_eq!(
        after.partition_epoch,
        PartitionEpoch(before.partition_epoch.0 + 1)
    );
}

/// A controller without KIP-966's eligible leader replicas (`kip-320`).
fn without_elr() -> ControllerConfig {
    ControllerConfig {
        eligible_leader_replicas: false,
        ..ControllerConfig::default()
    }
}

/// Before KIP-966 the last ISR member stays in the ISR when fenced; with it, the member leaves
/// the ISR for the ELR (the ISR below the minimum of one). Either way the partition waits for
/// it (unless unclean elections are on) and elects it, cleanly, when it returns.
#[test]
fn without_an_isr_replica_left_the_partition_waits_unless_unclean_elections_are_on() {
    for (unclean, elr) in [(false, false), (true, false), (false, true), (true, true)] {
        let config = if elr {
            ControllerConfig::default()
        } else {
            without_elr()
        };
        let mut cluster = Cluster::new(2, config);
        let value = if unclean { "true" } else { "false" };
        let topic = cluster.create("t", 1, 2, &[("unclean.leader.election.enable", value)]);
        let start = cluster.partition(topic, 0);
        let (leader, follower) = (start.leader, start.replicas[1]);
        // The follower falls out of the ISR: the leader shrinks it.
        cluster.shrink_isr(topic, leader, vec![leader]);
        cluster.run(SESSION_MS + 1_000, &[leader]);
        let after = cluster.partition(topic, 0);
        if unclean {
            assert_eq!(after.leader, follower, "an out-of-sync replica leads");
            assert_eq!(after.isr, vec![follower], "the ISR restarts from it");
            assert!(cluster
                .log
                .iter()
                .any(|record| matches!(record, Record::PartitionChange { unclean: true, .. })));
        } else {
            assert_eq!(after.leader, NO_LEADER, "no clean candidate: no leader");
            if elr {
                assert!(after.isr.is_empty(), "the last member left the ISR");
                assert_eq!(after.elr, vec![leader], "for the ELR");
                assert_eq!(after.last_known_elr, vec![leader], "who led last");
            } else {
                assert_eq!(after.isr, vec![leader], "the last ISR member is kept");
            }
            // The old leader restarts and comes back: it is elected again, cleanly.
            cluster.start(leader);
            let back = cluster.partition(topic, 0);
            assert_eq!(back.leader, leader);
            assert_eq!(back.isr, vec![leader]);
            assert!(back.elr.is_empty() && back.last_known_elr.is_empty());
            assert_eq!(back.leader_epoch, LeaderEpoch(start.leader_epoch.0 + 2));
        }
    }
}

/// KIP-966's "last replica standing" (RF 3, min.insync.replicas 2): two followers leave the
/// ISR one after the other (the second joins the ELR: the ISR is below the minimum, the high
/// watermark stops), then the last member is fenced and comes back after an unclean shutdown
/// (its `PreviousBrokerEpoch` is not the one held): it leaves the ELR and is not elected; the
/// ELR member that kept everything committed is, cleanly. Without KIP-966 the returning
/// member, still the last in the ISR, is elected again whatever it lost.
#[test]
fn the_last_replica_standing_is_not_elected_after_an_unclean_shutdown() {
    for elr in [true, false] {
        let config = ControllerConfig {
            min_insync_replicas: 2,
            ..if elr {
                ControllerConfig::default()
            } else {
                without_elr()
            }
        };
        let mut cluster = Cluster::new(3, config);
        let topic = cluster.create("t", 1, 3, &[]);
        let start = cluster.partition(topic, 0);
        let (last, second, first) = (start.leader, start.replicas[1], start.replicas[2]);
        cluster.shrink_isr(topic, last, vec![last, second]);
        assert!(
            cluster.partition(topic, 0).elr.is_empty(),
            "still at the minimum"
        );
        cluster.shrink_isr(topic, last, vec![last]);
        let below = cluster.partition(topic, 0);
        if elr {
            assert_eq!(below.elr, vec![second], "left below the minimum: eligible");
        }
        // The followers are cut off and fenced, then the last member dies too.
        cluster.run(SESSION_MS + 1_000, &[second, first]);
        cluster.run(SESSION_MS + 1_000, &[last, second, first]);
        let down = cluster.partition(topic, 0);
        assert_eq!(down.leader, NO_LEADER);
        if elr {
            assert!(down.isr.is_empty());
            let expected: Vec<BrokerId> = down
                .replicas
                .iter()
                .copied()
                .filter(|replica| *replica == second || *replica == last)
                .collect();
            assert_eq!(down.elr, expected, "both kept everything committed");
            assert_eq!(down.last_known_elr, vec![last]);
        }
        // The last member returns first, after an unclean shutdown.
        cluster.start_unclean(last);
        let back = cluster.partition(topic, 0);
        if elr {
            assert_eq!(
                back.leader, NO_LEADER,
                "not elected: it may have lost committed data"
            );
            assert_eq!(back.elr, vec![second]);
            cluster.start(second);
            let elected = cluster.partition(topic, 0);
            assert_eq!(elected.leader, second, "the ELR member leads");
            assert_eq!(elected.isr, vec![second]);
            assert!(!cluster
                .log
                .iter()
                .any(|record| matches!(record, Record::PartitionChange { unclean: true, .. })));
        } else {
            assert_eq!(
                back.leader, last,
                "the last replica standing is elected again"
            );
        }
    }
}

#[test]
fn alter_partition_is_a_compare_and_set_on_the_partition_epoch() {
    let mut cluster = Cluster::new(3, ControllerConfig::default());
    let topic = cluster.create("t", 1, 3, &[]);
    let start = cluster.partition(topic, 0);
    let leader = start.leader;
    let follower = start.replicas[1];
    let shrink = AlterPartition {
        broker: leader,
        broker_epoch: cluster.epochs[&leader],
        topic_id: topic,
        partition: 0,
        leader_epoch: start.leader_epoch,
        partition_epoch: start.partition_epoch,
        new_isr: vec![leader, start.replicas[2]],
    };
    let refusal = |request: &AlterPartition, cluster: &mut Cluster| {
        cluster
            .controller
            .alter_partition(request)
            .expect_err("refused")
            .0
    };
    let stale = AlterPartition {
        broker_epoch: BrokerEpoch(0),
        ..shrink.clone()
    };
    assert_eq!(refusal(&stale, &mut cluster), ErrorCode::StaleBrokerEpoch);
    let not_leader = AlterPartition {
        broker: follower,
        broker_epoch: cluster.epochs[&follower],
        ..shrink.clone()
    };
    assert_eq!(
        refusal(&not_leader, &mut cluster),
        ErrorCode::NotLeaderOrFollower
    );
    let old_epoch = AlterPartition {
        leader_epoch: LeaderEpoch(-1),
        ..shrink.clone()
    };
    assert_eq!(
        refusal(&old_epoch, &mut cluster),
        ErrorCode::FencedLeaderEpoch
    );
    let (updated, records) = cluster
        .controller
        .alter_partition(&shrink)
        .expect("applies");
    cluster.log.extend(records);
    assert_eq!(updated.partition_epoch, PartitionEpoch(1));
    assert_eq!(
        updated.leader_epoch, start.leader_epoch,
        "same leader, same epoch"
    );
    assert_eq!(
        refusal(&shrink, &mut cluster),
        ErrorCode::InvalidUpdateVersion,
        "the same request again is based on an old partition epoch"
    );
    // The follower dies; the leader may not add it back while it is fenced.
    cluster.run(SESSION_MS + 1_000, &[follower]);
    let current = cluster.partition(topic, 0);
    let expand = AlterPartition {
        partition_epoch: current.partition_epoch,
        new_isr: vec![leader, start.replicas[2], follower],
        ..shrink.clone()
    };
    assert_eq!(refusal(&expand, &mut cluster), ErrorCode::IneligibleReplica);
}

#[test]
fn heartbeats_name_a_stale_or_unknown_registration() {
    let mut cluster = Cluster::new(1, ControllerConfig::default());
    let broker = BrokerId(0);
    let old = cluster.epochs[&broker];
    cluster.start(broker);
    let refused = cluster
        .controller
        .heartbeat(cluster.now, broker, old, true)
        .expect_err("stale");
    assert_eq!(refused.0, ErrorCode::StaleBrokerEpoch);
    let refused = cluster
        .controller
        .heartbeat(cluster.now, BrokerId(9), old, true)
        .expect_err("unknown");
    assert_eq!(refused.0, ErrorCode::BrokerIdNotRegistered);
}

#[test]
fn replaying_the_log_rebuilds_the_same_image_through_the_record_bytes() {
    let mut cluster = Cluster::new(3, ControllerConfig::default());
    let topic = cluster.create("t", 4, 2, &[("flush.messages", "1")]);
    let leader = cluster.partition(topic, 0).leader;
    cluster.run(SESSION_MS + 2_000, &[leader]);
    cluster.start(leader);
    let mut follower = QuorumController::new(ControllerConfig::default(), 99);
    for record in &cluster.log {
        let decoded = Record::decode(&record.encode()).expect("round trip");
        follower.replay(&decoded).expect("applies");
    }
    assert_eq!(follower.image(), cluster.controller.image());
    follower.image().check_invariants();
}

/// One step of a random cluster history.
#[derive(Debug, Clone)]
enum Step {
    /// A topic with this many partitions and this replication factor (skipped when too few
    /// brokers are active).
    Create(i32, i16),
    /// Seconds of heartbeats, with the brokers in the mask silent.
    Run(u64, u8),
    /// A broker registers again (a restart).
    Restart(i32),
}

fn steps() -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
    use proptest::prelude::*;
    let step = prop_oneof![
        (1..4i32, 1..4i16).prop_map(|(partitions, factor)| Step::Create(partitions, factor)),
        (1..12u64, 0..8u8).prop_map(|(seconds, mask)| Step::Run(seconds, mask)),
        (0..3i32).prop_map(Step::Restart),
    ];
    proptest::collection::vec(step, 1..24)
}

proptest::proptest! {
    /// A snapshot of the image at any offset, followed by the records after that offset, gives
    /// the image of the whole log, and a controller rebuilt that way hands out the same next
    /// broker epoch (Kafka's snapshot plus log replay).
    #[test]
    fn a_snapshot_at_any_offset_plus_the_rest_of_the_log_rebuilds_the_image(steps in steps()) {
        let mut cluster = Cluster::new(3, ControllerConfig::default());
        for (index, step) in steps.iter().enumerate() {
            match step {
                Step::Create(partitions, factor) => {
                    let active = cluster.controller.image().brokers().filter(|b| !b.fenced).count();
                    if active >= *factor as usize {
                        cluster.create(&format!("t{index}"), *partitions, *factor, &[]);
                    }
                }
                Step::Run(seconds, mask) => {
                    let silent: Vec<BrokerId> =
                        (0..3).filter(|id| mask & (1 << id) != 0).map(BrokerId).collect();
                    cluster.run(seconds * 1_000, &silent);
                }
                Step::Restart(broker) => cluster.start(BrokerId(*broker)),
            }
        }
        let full = cluster.controller.image().clone();
        for cut in 0..=cluster.log.len() {
            let prefix = ClusterImage::from_records(&cluster.log[..cut]).expect("the log applies");
            let snapshot: Vec<Record> = prefix
                .to_records()
                .iter()
                .map(|record| Record::decode(&record.encode()).expect("round trip"))
                .collect();
            let mut rebuilt = QuorumController::new(ControllerConfig::default(), 1);
            for record in snapshot.iter().chain(&cluster.log[cut..]) {
                rebuilt.replay(record).expect("the snapshot and the rest apply");
            }
            proptest::prop_assert_eq!(
                ClusterImage::from_records(&snapshot).expect("applies"),
                prefix
            );
            proptest::prop_assert_eq!(rebuilt.image(), &full);
            let mut replayed = QuorumController::new(ControllerConfig::default(), 1);
            for record in &cluster.log {
                replayed.replay(record).expect("applies");
            }
            let (ours, _) = rebuilt.register_broker(cluster.now, BrokerId(7), "h", 1, -1);
            let (theirs, _) = replayed.register_broker(cluster.now, BrokerId(7), "h", 1, -1);
            proptest::prop_assert_eq!(ours, theirs);
        }
    }
}
