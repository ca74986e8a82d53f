//! A controller and three brokers wired by hand: registration, heartbeats, the metadata log,
//! topic creation through a broker, replication, and a leader failover after the leader's
//! session expires. Requests between nodes travel as structs; responses go through the codec.

use crate::config::broker::Listener;
use crate::config::broker::Voter;
use crate::controller::node::ControllerNode;
use crate::controller::ControllerConfig;
use crate::log::LogRead;
use crate::metadata::records::NO_LEADER;
use crate::types::BrokerId;

use super::*;

const CONTROLLER: i32 = 100;
const STEP_MS: u64 = 100;

enum Machine {
    Controller(Box<ControllerNode<MemoryStorage>>),
    Broker(Box<Broker<MemoryStorage>>),
}

struct Node {
    id: i32,
    machine: Machine,
    storage: MemoryStorage,
    down: bool,
}

impl Node {
    fn handle(&mut self, now: Millis, input: Input) -> Vec<Output<File>> {
        let mut out = Vec::new();
        match &mut self.machine {
            Machine::Controller(node) => {
                node.handle(now, input, &mut out);
                node.check_invariants();
            }
            Machine::Broker(broker) => {
                broker.handle(now, input, &mut out);
                broker.check_invariants();
            }
        }
        out
    }

    fn broker(&self) -> &Broker<MemoryStorage> {
        match &self.machine {
            Machine::Broker(broker) => broker,
            Machine::Controller(_) => panic!("node {} is the controller", self.id),
        }
    }

    fn controller(&self) -> &ControllerNode<MemoryStorage> {
        match &self.machine {
            Machine::Controller(node) => node,
            Machine::Broker(_) => panic!("node {} is a broker", self.id),
        }
    }
}

struct Cluster {
    nodes: Vec<Node>,
    now: Millis,
    /// Peer requests not yet answered: (from, to, id).
    in_flight: Vec<(usize, usize, PeerRequestId)>,
    /// What clients got back.
    client: Vec<Output<File>>,
    correlation_id: i32,
    /// Node pairs (by index) that cannot reach each other.
    blocked: Vec<(usize, usize)>,
}

fn broker_config(id: i32) -> BrokerConfig {
    BrokerConfig {
        node_id: id,
        advertised_listeners: Some(Listener {
            host: format!("broker-{id}"),
            port: 9092,
        }),
        controller_quorum_voters: vec![Voter {
            id: CONTROLLER,
            host: "controller".to_owned(),
            port: 9093,
        }],
        ..BrokerConfig::default()
    }
}

impl Cluster {
    fn new(brokers: i32) -> Cluster {
        let storage = MemoryStorage::new();
        let (controller, to_sync) = ControllerNode::open(
            ControllerConfig::default(),
            BrokerConfig::default(),
            storage.clone(),
            1,
            Millis(0),
        )
        .expect("controller opens");
        if let Some(sync) = to_sync {
            sync.complete_now(&storage).expect("sync");
        }
        let mut nodes = vec![Node {
            id: CONTROLLER,
            machine: Machine::Controller(Box::new(controller)),
            storage,
            down: false,
        }];
        for id in 0..brokers {
            let storage = MemoryStorage::new();
            let (broker, report) = Broker::open(
                broker_config(id),
                storage.clone(),
                10 + id as u64,
                Millis(0),
            )
            .expect("broker opens");
            report.to_sync.complete_now(&storage).expect("sync");
            nodes.push(Node {
                id,
                machine: Machine::Broker(Box::new(broker)),
                storage,
                down: false,
            });
        }
        Cluster {
            nodes,
            now: Millis(0),
            in_flight: Vec::new(),
            client: Vec::new(),
            correlation_id: 0,
            blocked: Vec::new(),
        }
    }

    fn index(&self, id: i32) -> usize {
        self.nodes
            .iter()
            .position(|node| node.id == id)
            .expect("a node of the cluster")
    }

    fn settle(&mut self, from: usize, outputs: Vec<Output<File>>) {
        let mut queue: std::collections::VecDeque<(usize, Output<File>)> =
            outputs.into_iter().map(|output| (from, output)).collect();
        while let Some((index, output)) = queue.pop_front() {
            if self.nodes[index].down {
                continue;
            }
            let more = self.route(index, output);
            queue.extend(more);
        }
    }

    fn feed(&mut self, index: usize, input: Input) -> Vec<(usize, Output<File>)> {
        let now = self.now;
        self.nodes[index]
            .handle(now, input)
            .into_iter()
            .map(|output| (index, output))
            .collect()
    }

    fn route(&mut self, index: usize, output: Output<File>) -> Vec<(usize, Output<File>)> {
        match output {
            Output::Flush { flush_id, sync } => {
                let result = sync
                    .complete_now(&self.nodes[index].storage)
                    .map_err(|error| error.to_string());
                self.feed(index, Input::FlushCompleted { flush_id, result })
            }
            Output::PeerRequest {
                peer,
                role: _,
                id,
                api_version,
                body,
                timeout_ms: _,
            } => {
                let target = self.index(peer.0);
                if self.nodes[target].down {
                    let result = Err("connection refused".to_owned());
                    return self.feed(index, Input::PeerResponse { peer, id, result });
                }
                self.in_flight.push((index, target, id));
                if self.is_blocked(index, target) {
                    return Vec::new();
                }
                let request = Request {
                    api_key: crate::protocol::codec::RequestApiKey::api_key(body.as_ref()),
                    api_version,
                    correlation_id: id.0 as i32,
                    client_id: None,
                    client_host: None,
                    body: *body,
                };
                let connection = ConnectionId(1000 + index as u64);
                let input = Input::Request {
                    connection,
                    request: Box::new(request),
                };
                self.feed(target, input)
            }
            Output::Respond {
                connection,
                response,
            } if connection.0 >= 1000 => {
                let to = (connection.0 - 1000) as usize;
                let id = PeerRequestId(response.correlation_id as u64);
                if self.is_blocked(index, to) {
                    return Vec::new();
                }
                self.in_flight.retain(|pending| *pending != (to, index, id));
                if self.nodes[to].down {
                    return Vec::new();
                }
                let decoded = super::replication::decode(&response);
                let peer = BrokerId(self.nodes[index].id);
                let result = Ok(Box::new(decoded));
                self.feed(to, Input::PeerResponse { peer, id, result })
            }
            Output::Event(_) => Vec::new(),
            Output::Halt { reason } => {
                // The process exits: as a kill, and the harness remembers why.
                let id = self.nodes[index].id;
                self.kill(id);
                self.client.push(Output::Halt { reason });
                Vec::new()
            }
            other => {
                self.client.push(other);
                Vec::new()
            }
        }
    }

    /// Moves time forward in steps, ticking every live node.
    fn advance(&mut self, ms: u64) {
        for _ in 0..ms / STEP_MS {
            self.now = self.now.plus(STEP_MS);
            for index in 0..self.nodes.len() {
                if self.nodes[index].down {
                    continue;
                }
                let now = self.now;
                let out = self.nodes[index].handle(now, Input::Tick);
                self.settle(index, out);
            }
        }
    }

    fn is_blocked(&self, a: usize, b: usize) -> bool {
        self.blocked.contains(&(a, b)) || self.blocked.contains(&(b, a))
    }

    /// Cuts the links between two nodes.
    fn block(&mut self, a: i32, b: i32) {
        let pair = (self.index(a), self.index(b));
        self.blocked.push(pair);
    }

    /// Heals every cut link; requests lost on them fail at their senders.
    fn heal(&mut self) {
        let blocked = std::mem::take(&mut self.blocked);
        let lost: Vec<(usize, usize, PeerRequestId)> = self
            .in_flight
            .iter()
            .copied()
            .filter(|(from, to, _)| {
                blocked.contains(&(*from, *to)) || blocked.contains(&(*to, *from))
            })
            .collect();
        self.in_flight.retain(|pending| !lost.contains(pending));
        for (from, to, id) in lost {
            if self.nodes[from].down {
                continue;
            }
            let peer = BrokerId(self.nodes[to].id);
            let result = Err("connection reset".to_owned());
            let out = self.nodes[from].handle(self.now, Input::PeerResponse { peer, id, result });
            self.settle(from, out);
        }
    }

    /// A killed broker starts again on what its disk kept (a process crash keeps the page cache).
    fn restart(&mut self, id: i32) {
        let index = self.index(id);
        let storage = self.nodes[index].storage.clone();
        storage.crash(CrashLevel::Process, &mut |_| 0);
        let (broker, report) =
            Broker::open(broker_config(id), storage.clone(), 20 + id as u64, self.now)
                .expect("broker reopens");
        report.to_sync.complete_now(&storage).expect("sync");
        self.nodes[index].machine = Machine::Broker(Box::new(broker));
        self.nodes[index].down = false;
    }

    /// The node stops: its requests fail at their senders, as a reset connection would.
    fn kill(&mut self, id: i32) {
        let index = self.index(id);
        self.nodes[index].down = true;
        let failed: Vec<(usize, usize, PeerRequestId)> = self
            .in_flight
            .iter()
            .copied()
            .filter(|(from, to, _)| *to == index || *from == index)
            .collect();
        self.in_flight.retain(|pending| !failed.contains(pending));
        for (from, _, id) in failed {
            if from == index {
                continue;
            }
            let peer = BrokerId(id_of(&self.nodes, index));
            let result = Err("connection reset".to_owned());
            let out = self.nodes[from].handle(self.now, Input::PeerResponse { peer, id, result });
            self.settle(from, out);
        }
    }

    fn request(&mut self, id: i32, api_version: i16, body: RequestKind) -> Vec<Output<File>> {
        self.correlation_id += 1;
        let request = Request {
            api_key: crate::protocol::codec::RequestApiKey::api_key(&body),
            api_version,
            correlation_id: self.correlation_id,
            client_id: None,
            client_host: None,
            body,
        };
        let index = self.index(id);
        let out = self.nodes[index].handle(
            self.now,
            Input::Request {
                connection: CONNECTION,
                request: Box::new(request),
            },
        );
        self.settle(index, out);
        std::mem::take(&mut self.client)
    }

    fn produce(&mut self, id: i32, acks: i16, text: &str) -> (ErrorCode, i64) {
        let body = produce_one("t", acks, 30_000, text);
        let (code, offset) = produced_offset(self.request(id, 9, body));
        (ErrorCode::from_code(code), offset)
    }

    fn image(&self) -> &crate::metadata::image::ClusterImage {
        self.nodes[0].controller().controller().image()
    }

    fn leader(&self) -> BrokerId {
        let topic = self.image().topic("t").expect("created");
        topic.partitions[&0].leader
    }

    /// The values in broker `id`'s log of `t-0`.
    fn values(&self, id: i32) -> Vec<String> {
        let partition = self.nodes[self.index(id)]
            .broker()
            .partition(&TopicPartition::new("t", 0))
            .expect("held");
        let log = &partition.log();
        let LogRead::Records {
            file,
            position,
            len,
        } = log
            .read(0, log.log_end_offset(), u64::MAX)
            .expect("readable")
        else {
            return Vec::new();
        };
        let mut bytes = vec![0; len as usize];
        file.read_exact_at(&mut bytes, position).expect("read");
        decode_records(&Bytes::from(bytes))
            .expect("valid")
            .into_iter()
            .map(|record| String::from_utf8(record.value.expect("value").to_vec()).expect("utf8"))
            .collect()
    }
}

fn id_of(nodes: &[Node], index: usize) -> i32 {
    nodes[index].id
}

/// Three brokers up and unfenced, and topic `t` (one partition, three replicas,
/// `min.insync.replicas=2`) created through broker 1.
fn cluster_with_a_topic() -> Cluster {
    let mut cluster = Cluster::new(3);
    cluster.advance(5_000);
    let active: Vec<i32> = cluster
        .image()
        .brokers()
        .filter(|broker| !broker.fenced)
        .map(|broker| broker.id.0)
        .collect();
    assert_eq!(
        active,
        vec![0, 1, 2],
        "every broker registered, caught up, unfenced"
    );

    let topic = CreatableTopic::default()
        .with_name(topic_name("t"))
        .with_num_partitions(1)
        .with_replication_factor(3)
        .with_configs(vec![CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("min.insync.replicas"))
            .with_value(Some(StrBytes::from_static_str("2")))]);
    let created = single_message(cluster.request(
        1,
        7,
        RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(vec![topic])),
    ));
    let ResponseKind::CreateTopics(created) = created else {
        panic!("a CreateTopics answer")
    };
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    cluster.advance(1_000);
    cluster
}

#[test]
fn a_cluster_replicates_and_fails_over_without_losing_acknowledged_writes() {
    let mut cluster = cluster_with_a_topic();

    let leader = cluster.leader();
    for index in 0..5 {
        assert_eq!(
            cluster.produce(leader.0, -1, &format!("v{index}")),
            (ErrorCode::None, index)
        );
    }
    let follower = (0..3).find(|id| *id != leader.0).expect("a follower");
    assert_eq!(
        cluster.produce(follower, -1, "x").0,
        ErrorCode::NotLeaderOrFollower
    );

    cluster.kill(leader.0);
    // The last heartbeat was at most broker.heartbeat.interval.ms (2 s) before the kill, and
    // the session lasts broker.session.timeout.ms (9 s).
    cluster.advance(6_900);
    assert_eq!(cluster.leader(), leader, "the session has not expired yet");
    cluster.advance(2_200);
    let new_leader = cluster.leader();
    assert!(
        new_leader != leader && new_leader != NO_LEADER,
        "a new leader: {new_leader:?}"
    );
    let state = &cluster.image().topic("t").expect("exists").partitions[&0];
    assert!(!state.isr.contains(&leader), "the dead leader left the ISR");
    assert_eq!(state.leader_epoch.0, 1);
    cluster.advance(1_000);

    let acknowledged: Vec<String> = (0..5).map(|index| format!("v{index}")).collect();
    assert_eq!(
        cluster.values(new_leader.0),
        acknowledged,
        "nothing acknowledged is lost"
    );
    assert_eq!(
        cluster.produce(new_leader.0, -1, "v5"),
        (ErrorCode::None, 5),
        "the new leader takes acks=all writes with the two live replicas"
    );
    cluster.advance(1_000);
    let survivor = (0..3)
        .find(|id| *id != leader.0 && *id != new_leader.0)
        .expect("a third broker");
    let mut all = acknowledged;
    all.push("v5".to_owned());
    assert_eq!(
        cluster.values(survivor),
        all,
        "the follower follows the new leader"
    );
    let fenced: Vec<i32> = cluster
        .image()
        .brokers()
        .filter(|broker| broker.fenced)
        .map(|broker| broker.id.0)
        .collect();
    assert_eq!(fenced, vec![leader.0], "only the dead broker is fenced");
}

/// Kafka halts a broker whose only log directory fails: a leader whose disk fails a write stops
/// at once (no flush, no clean-shutdown marker), its session expires, and the controller moves the
/// leadership to a replica that holds every acknowledged write. Staying up with the partition
/// offline would keep the leadership where nothing can be served.
#[test]
fn a_leader_whose_disk_fails_halts_and_the_controller_moves_its_leadership() {
    let mut cluster = cluster_with_a_topic();
    let leader = cluster.leader();
    for index in 0..3 {
        assert_eq!(
            cluster.produce(leader.0, -1, &format!("v{index}")),
            (ErrorCode::None, index)
        );
    }
    let index = cluster.index(leader.0);
    cluster.nodes[index]
        .storage
        .inject(&crate::storage::memory::DiskFaults {
            fail_writes: 1,
            fail_syncs: 0,
        });
    let mut outputs = cluster.request(leader.0, 9, produce_one("t", -1, 30_000, "unwritten"));
    assert!(
        matches!(outputs.pop(), Some(Output::Halt { reason }) if reason.contains("append failed")),
        "the leader halts, saying why"
    );
    let (code, _) = produced_offset(outputs);
    assert_eq!(
        ErrorCode::from_code(code),
        ErrorCode::KafkaStorageError,
        "a failed write is answered, not acknowledged"
    );
    assert!(cluster.nodes[index].down, "the leader halted");
    assert!(
        !cluster.nodes[index]
            .storage
            .list(CLEAN_SHUTDOWN_FILE)
            .expect("list")
            .iter()
            .any(|name| name == CLEAN_SHUTDOWN_FILE),
        "a halt writes no clean-shutdown marker"
    );

    cluster.advance(12_000);
    let new_leader = cluster.leader();
    assert!(
        new_leader != leader && new_leader != NO_LEADER,
        "the controller moved the leadership: {new_leader:?}"
    );
    let acknowledged: Vec<String> = (0..3).map(|index| format!("v{index}")).collect();
    assert_eq!(cluster.values(new_leader.0)[..3], acknowledged[..]);
    assert_eq!(
        cluster.produce(new_leader.0, -1, "after").0,
        ErrorCode::None,
        "the partition takes acks=all writes again"
    );
}

/// The catalogue's first anomaly, in the core: an acks=1 write that only the leader had is
/// acknowledged, the leader dies, a follower takes over and reuses the offset; when the old
/// leader returns, the new leader's fetch answer says where their logs diverge (epoch 0 ends at
/// offset 1 there), the old leader truncates to it and converges.
#[test]
fn an_acks_1_write_only_the_dead_leader_had_is_lost_and_its_offset_reused() {
    let mut cluster = cluster_with_a_topic();
    let leader = cluster.leader();
    assert_eq!(cluster.produce(leader.0, -1, "v0"), (ErrorCode::None, 0));
    cluster.advance(1_000);
    let followers: Vec<i32> = (0..3).filter(|id| *id != leader.0).collect();
    for follower in &followers {
        cluster.block(leader.0, *follower);
    }
    assert_eq!(
        cluster.produce(leader.0, 1, "lost"),
        (ErrorCode::None, 1),
        "acks=1 answers from the leader alone"
    );
    cluster.kill(leader.0);
    cluster.heal();
    cluster.advance(9_200);
    let new_leader = cluster.leader();
    assert!(
        followers.contains(&new_leader.0),
        "a follower leads: {new_leader:?}"
    );
    assert_eq!(
        cluster.produce(new_leader.0, -1, "v1"),
        (ErrorCode::None, 1),
        "offset 1 is given to another record"
    );

    cluster.restart(leader.0);
    cluster.advance(5_000);
    assert_eq!(
        cluster.values(leader.0),
        vec!["v0".to_owned(), "v1".to_owned()],
        "the old leader dropped its unreplicated write and follows"
    );
    for follower in followers {
        assert_eq!(
            cluster.values(follower),
            vec!["v0".to_owned(), "v1".to_owned()]
        );
    }
}

/// UnderReplicatedPartitions (Kafka's `Partition.isUnderReplicated`): the leader counts a
/// partition whose ISR is smaller than its replica set; followers never count it, so a cluster
/// counts each partition once. A follower cut off from the leader leaves the ISR after
/// `replica.lag.time.max.ms` and the count goes to 1; once it catches up again, back to 0.
#[test]
fn the_leader_counts_a_partition_under_replicated_while_its_isr_is_short() {
    let mut cluster = cluster_with_a_topic();
    let under_replicated = |cluster: &Cluster, id: i32| -> Vec<bool> {
        let index = cluster.index(id);
        let Machine::Broker(broker) = &cluster.nodes[index].machine else {
            panic!("broker {id} is a broker")
        };
        broker
            .metrics()
            .partitions
            .iter()
            .filter(|partition| partition.topic == "t")
            .map(|partition| partition.under_replicated)
            .collect()
    };
    let leader = cluster.leader().0;
    let follower = (0..3).find(|id| *id != leader).expect("a follower");
    for id in 0..3 {
        assert_eq!(
            under_replicated(&cluster, id),
            vec![false],
            "broker {id}, full ISR"
        );
    }

    cluster.block(leader, follower);
    let lag_time_max_ms = BrokerConfig::default().replication.lag_time_max_ms;
    cluster.advance(u64::try_from(lag_time_max_ms).expect("positive") + 5_000);
    let isr = &cluster.image().topic("t").expect("exists").partitions[&0].isr;
    assert!(
        !isr.contains(&BrokerId(follower)),
        "the cut-off follower left the ISR: {isr:?}"
    );
    assert_eq!(
        under_replicated(&cluster, leader),
        vec![true],
        "the leader counts it"
    );
    for id in (0..3).filter(|id| *id != leader) {
        assert_eq!(
            under_replicated(&cluster, id),
            vec![false],
            "follower {id} does not"
        );
    }

    cluster.heal();
    cluster.advance(5_000);
    let isr = &cluster.image().topic("t").expect("exists").partitions[&0].isr;
    assert_eq!(isr.len(), 3, "the follower caught up and rejoined: {isr:?}");
    assert_eq!(under_replicated(&cluster, leader), vec![false]);
}
