//! Two broker state machines wired to each other by hand: a leader and a follower of one
//! partition. Peer requests go through the real codec (the leader's Fetch response is encoded
//! with its file ranges read back, and decoded as the follower's driver would).

use std::collections::VecDeque;

use super::*;
use crate::broker::{PartitionState, PeerRequestId, PeerRole};
use crate::config::broker::ReplicationGeneration;
use crate::types::{BrokerId, LeaderEpoch};

const LEADER: usize = 0;
const FOLLOWER: usize = 1;
const LAG_MS: u64 = 30_000;

/// The connection a broker's peer requests arrive on at the other broker.
fn peer_connection(from: usize) -> ConnectionId {
    ConnectionId(100 + from as u64)
}

struct Pair {
    nodes: [Harness; 2],
    /// Peer requests of a node are lost (it is cut off) while set.
    cut_off: [bool; 2],
    /// Fsyncs of a node wait in `held` while set.
    hold_flushes: [bool; 2],
    held: Vec<(usize, Output<File>)>,
    /// Peer requests on their way: the leader answers on `peer_connection(from)`.
    in_flight: Vec<(usize, PeerRequestId)>,
    /// What the brokers answered their clients, in order.
    client: Vec<Output<File>>,
}

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

/// Led by broker 0 in epoch 1, brokers 0 and 1 its replicas and in sync.
fn led_by_broker_0() -> PartitionState {
    PartitionState {
        leader: BrokerId(0),
        leader_epoch: LeaderEpoch(1),
        replicas: vec![BrokerId(0), BrokerId(1)],
        isr: vec![BrokerId(0), BrokerId(1)],
        partition_epoch: 0,
    }
}

fn node_config(node_id: i32, generation: ReplicationGeneration) -> BrokerConfig {
    let mut config = BrokerConfig {
        node_id,
        ..BrokerConfig::default()
    };
    config.replication.generation = generation;
    config
}

impl Pair {
    /// Topic `t` with one partition on both brokers, led by broker 0 in epoch 1 with both
    /// replicas in sync (today's generation, `kip-966`).
    fn new(configs: &[(&str, &str)]) -> Pair {
        Pair::of(ReplicationGeneration::Kip966, configs)
    }

    /// [`Pair::new`] with brokers of `generation`.
    fn of(generation: ReplicationGeneration, configs: &[(&str, &str)]) -> Pair {
        let mut nodes = [0, 1]
            .map(|id| Harness::with_config(MemoryStorage::new(), node_config(id, generation)));
        for node in &mut nodes {
            node.create_topic("t", 1, configs);
        }
        let mut pair = Pair {
            nodes,
            cut_off: [false; 2],
            hold_flushes: [false; 2],
            held: Vec::new(),
            in_flight: Vec::new(),
            client: Vec::new(),
        };
        let state = led_by_broker_0();
        for index in [LEADER, FOLLOWER] {
            let node = &mut pair.nodes[index];
            let mut out = Vec::new();
            node.broker
                .become_leader_or_follower(node.now, &tp(), state.clone(), &mut out);
            node.broker.check_invariants();
            pair.settle(index, out);
        }
        pair
    }

    fn partition(&self, index: usize) -> &Partition<MemoryStorage> {
        self.nodes[index].broker.partition(&tp()).expect("held")
    }

    /// Feeds `outputs` of node `from` onward until nothing moves.
    fn settle(&mut self, from: usize, outputs: Vec<Output<File>>) {
        let mut queue: VecDeque<(usize, Output<File>)> =
            outputs.into_iter().map(|output| (from, output)).collect();
        while let Some((index, output)) = queue.pop_front() {
            let more = self.route(index, output);
            queue.extend(more);
        }
    }

    fn route(&mut self, index: usize, output: Output<File>) -> Vec<(usize, Output<File>)> {
        let node_outputs = |pair: &mut Pair, target: usize, input: Input| {
            pair.nodes[target]
                .input(input)
                .into_iter()
                .map(|output| (target, output))
                .collect::<Vec<_>>()
        };
        match output {
            Output::Flush { .. } if self.hold_flushes[index] => {
                self.held.push((index, output));
                Vec::new()
            }
            Output::Flush { flush_id, sync } => {
                let result = self.nodes[index]
                    .sync(&sync)
                    .map_err(|error| error.to_string());
                node_outputs(self, index, Input::FlushCompleted { flush_id, result })
            }
            Output::PeerRequest {
                peer,
                role,
                id,
                api_version,
                body,
                timeout_ms: _,
            } => {
                assert_eq!(role, PeerRole::Broker, "replicas fetch from brokers");
                self.deliver_peer_request(index, peer, id, api_version, *body)
            }
            Output::Respond {
                connection,
                response,
            } if connection.0 >= 100 => {
                let to = (connection.0 - 100) as usize;
                let id = PeerRequestId(response.correlation_id as u64);
                self.in_flight.retain(|pending| *pending != (to, id));
                let decoded = decode(&response);
                node_outputs(
                    self,
                    to,
                    Input::PeerResponse {
                        peer: BrokerId(index as i32),
                        id,
                        result: Ok(Box::new(decoded)),
                    },
                )
            }
            Output::Event(event) => {
                self.nodes[index].events.push(event);
                Vec::new()
            }
            other => {
                self.client.push(other);
                Vec::new()
            }
        }
    }

    /// Node `from`'s request to `peer`, unless `from` is cut off.
    fn deliver_peer_request(
        &mut self,
        from: usize,
        peer: BrokerId,
        id: PeerRequestId,
        api_version: i16,
        body: RequestKind,
    ) -> Vec<(usize, Output<File>)> {
        assert!(
            !self.in_flight.iter().any(|(node, _)| *node == from),
            "one fetch in flight per leader"
        );
        self.in_flight.push((from, id));
        if self.cut_off[from] {
            return Vec::new();
        }
        let target = peer.0 as usize;
        let request = Request {
            api_key: crate::protocol::codec::RequestApiKey::api_key(&body),
            api_version,
            correlation_id: id.0 as i32,
            client_id: None,
            client_host: None,
            body,
        };
        let input = Input::Request {
            connection: peer_connection(from),
            request: Box::new(request),
        };
        self.nodes[target]
            .input(input)
            .into_iter()
            .map(|output| (target, output))
            .collect()
    }

    /// Completes the held fsyncs of node `index`.
    fn release_flushes(&mut self, index: usize) {
        self.hold_flushes[index] = false;
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(node, _)| *node == index);
        self.held = others;
        for (node, output) in mine {
            self.settle(node, vec![output]);
        }
    }

    /// Moves both clocks forward and ticks both brokers.
    fn advance(&mut self, ms: u64) {
        for index in [LEADER, FOLLOWER] {
            let node = &mut self.nodes[index];
            node.now = node.now.plus(ms);
            let out = node.input(Input::Tick);
            self.settle(index, out);
        }
    }

    /// A client request to node `index`; returns what the clients got back once settled.
    fn request(&mut self, index: usize, api_version: i16, body: RequestKind) -> Vec<Output<File>> {
        let out = self.nodes[index].request(api_version, body);
        self.settle(index, out);
        std::mem::take(&mut self.client)
    }

    fn produce(&mut self, acks: i16, timeout_ms: i32, text: &str) -> Vec<Output<File>> {
        self.request(LEADER, 9, produce_one("t", acks, timeout_ms, text))
    }

    /// The follower's fetch in flight fails (as a broken connection would).
    fn fail_follower_fetch(&mut self) {
        let pending: Vec<_> = std::mem::take(&mut self.in_flight);
        for (from, id) in pending {
            let out = self.nodes[from].input(Input::PeerResponse {
                peer: BrokerId(0),
                id,
                result: Err("connection lost".to_owned()),
            });
            self.settle(from, out);
        }
    }

    fn log_bytes(&self, index: usize) -> Vec<u8> {
        let log = &self.partition(index).log();
        match log
            .read(0, log.log_end_offset(), u64::MAX)
            .expect("readable")
        {
            crate::log::LogRead::Records {
                file,
                position,
                len,
            } => {
                let mut buffer = vec![0; len as usize];
                file.read_exact_at(&mut buffer, position).expect("read");
                buffer
            }
            _ => Vec::new(),
        }
    }
}

/// A response as the peer's driver sees it: encoded (file ranges read), then decoded.
pub(super) fn decode(response: &Response<File>) -> ResponseKind {
    let mut frame = Vec::new();
    for chunk in response.encode().expect("encodes") {
        match chunk {
            crate::protocol::fetch_response::Chunk::Bytes(bytes) => frame.extend_from_slice(&bytes),
            crate::protocol::fetch_response::Chunk::File {
                file,
                position,
                len,
            } => {
                let mut buffer = vec![0; len as usize];
                file.read_exact_at(&mut buffer, position).expect("read");
                frame.extend_from_slice(&buffer);
            }
        }
    }
    let (correlation_id, body) = crate::protocol::codec::decode_response(
        Bytes::from(frame).slice(4..),
        response.api_key,
        response.api_version,
    )
    .expect("decodes");
    assert_eq!(correlation_id, response.correlation_id);
    body
}

fn produce_result(outputs: Vec<Output<File>>) -> (ErrorCode, i64) {
    let (code, offset) = produced_offset(outputs);
    (ErrorCode::from_code(code), offset)
}

fn isr(pair: &Pair) -> Vec<i32> {
    pair.partition(LEADER).isr().iter().map(|id| id.0).collect()
}

#[test]
fn acks_all_waits_for_the_follower_which_copies_the_log_and_learns_the_high_watermark() {
    let mut pair = Pair::new(&[]);
    assert_eq!(
        produce_result(pair.produce(-1, 30_000, "a")),
        (ErrorCode::None, 0)
    );
    assert_eq!(pair.partition(FOLLOWER).log().log_end_offset(), 1);
    assert_eq!(pair.partition(LEADER).high_watermark(), 1);
    assert_eq!(
        pair.partition(FOLLOWER).high_watermark(),
        0,
        "the follower learns the new high watermark from the next fetch response"
    );
    pair.advance(500);
    assert_eq!(pair.partition(FOLLOWER).high_watermark(), 1);
    for index in 1..6 {
        let text = format!("v{index}");
        assert_eq!(
            produce_result(pair.produce(1, 30_000, &text)),
            (ErrorCode::None, index)
        );
    }
    pair.advance(500);
    assert_eq!(pair.partition(FOLLOWER).high_watermark(), 6);
    assert_eq!(
        pair.log_bytes(LEADER),
        pair.log_bytes(FOLLOWER),
        "the follower's log is the leader's, byte for byte (offsets and epochs kept)"
    );
    assert_eq!(isr(&pair), vec![0, 1]);
}

#[test]
fn acks_all_times_out_while_the_follower_is_away_then_the_isr_shrinks_and_expands() {
    // Before Kafka 3.7's strict min ISR: the high watermark follows the shrunk ISR.
    let mut pair = Pair::of(
        ReplicationGeneration::Kip320,
        &[("min.insync.replicas", "2")],
    );
    pair.cut_off[FOLLOWER] = true;
    pair.fail_follower_fetch();
    assert!(
        pair.produce(-1, 1_000, "a").is_empty(),
        "acks=all waits for the follower"
    );
    pair.advance(1_000);
    let timed_out = std::mem::take(&mut pair.client);
    assert_eq!(produce_result(timed_out), (ErrorCode::RequestTimedOut, -1));
    assert_eq!(
        isr(&pair),
        vec![0, 1],
        "not yet lagging for replica.lag.time.max.ms"
    );
    assert_eq!(pair.partition(LEADER).high_watermark(), 0);

    pair.advance(LAG_MS - 1_000);
    assert_eq!(
        isr(&pair),
        vec![0, 1],
        "lagging exactly replica.lag.time.max.ms is in sync"
    );
    pair.advance(1);
    assert_eq!(isr(&pair), vec![0], "the follower left the ISR");
    assert_eq!(
        pair.partition(LEADER).high_watermark(),
        1,
        "the high watermark follows the smaller ISR"
    );
    assert_eq!(
        produce_result(pair.produce(-1, 1_000, "b")).0,
        ErrorCode::NotEnoughReplicas
    );
    assert_eq!(
        produce_result(pair.produce(1, 1_000, "c")),
        (ErrorCode::None, 1),
        "acks=1 does not need the ISR"
    );

    pair.cut_off[FOLLOWER] = false;
    pair.fail_follower_fetch();
    pair.advance(1_000);
    assert_eq!(
        isr(&pair),
        vec![0, 1],
        "caught up, the follower is back in the ISR"
    );
    assert_eq!(pair.partition(FOLLOWER).log().log_end_offset(), 2);
    assert_eq!(
        produce_result(pair.produce(-1, 1_000, "d")),
        (ErrorCode::None, 2)
    );
    assert_eq!(pair.log_bytes(LEADER), pair.log_bytes(FOLLOWER));
}

/// KIP-966's strict min ISR (Kafka 3.7 and later): with the ISR below `min.insync.replicas`
/// the high watermark stays where it is, so an acks=1 write is acknowledged but not
/// committed (no consumer sees it) and acks=all is refused; once the follower is back in the
/// ISR the high watermark covers everything the leader appended meanwhile.
#[test]
fn under_the_minimum_isr_the_high_watermark_stays_until_the_isr_is_whole_again() {
    let mut pair = Pair::new(&[("min.insync.replicas", "2")]);
    assert_eq!(
        produce_result(pair.produce(-1, 1_000, "a")),
        (ErrorCode::None, 0)
    );
    pair.cut_off[FOLLOWER] = true;
    pair.fail_follower_fetch();
    pair.advance(LAG_MS + 1);
    assert_eq!(isr(&pair), vec![0], "the follower left the ISR");
    assert_eq!(
        produce_result(pair.produce(1, 1_000, "b")),
        (ErrorCode::None, 1),
        "acks=1 is appended and acknowledged"
    );
    assert_eq!(
        pair.partition(LEADER).high_watermark(),
        1,
        "but not committed: the ISR is below the minimum"
    );
    assert_eq!(
        produce_result(pair.produce(-1, 1_000, "c")).0,
        ErrorCode::NotEnoughReplicas
    );
    pair.cut_off[FOLLOWER] = false;
    pair.fail_follower_fetch();
    pair.advance(1_000);
    assert_eq!(isr(&pair), vec![0, 1], "the follower is back in the ISR");
    assert_eq!(pair.partition(LEADER).high_watermark(), 2);
}

/// Kafka's `DelayedProduce`: once the high watermark passes the append, acks=all still fails
/// if the ISR shrank below `min.insync.replicas` meanwhile; with `min.insync.replicas=1` the
/// leader alone acknowledges it (the catalogue's "acks=all with a shrunk ISR"). Under KIP-966's
/// strict min ISR the high watermark never passes it while the ISR is short: the request waits
/// until its timeout instead.
#[test]
fn an_isr_shrink_under_a_waiting_acks_all_decides_by_min_insync_replicas() {
    for (generation, min_insync, expected) in [
        (
            ReplicationGeneration::Kip320,
            "2",
            (ErrorCode::NotEnoughReplicasAfterAppend, -1),
        ),
        (ReplicationGeneration::Kip320, "1", (ErrorCode::None, 0)),
        (ReplicationGeneration::Kip966, "1", (ErrorCode::None, 0)),
    ] {
        let mut pair = Pair::of(generation, &[("min.insync.replicas", min_insync)]);
        pair.cut_off[FOLLOWER] = true;
        pair.fail_follower_fetch();
        assert!(pair.produce(-1, 60_000, "a").is_empty());
        pair.advance(LAG_MS + 1);
        let answered = std::mem::take(&mut pair.client);
        assert_eq!(
            produce_result(answered),
            expected,
            "min.insync.replicas={min_insync}"
        );
    }
}

/// Kafka's `tryCompleteElseWatch`: once the ISR is the leader alone (`min.insync.replicas=1`),
/// an acks=all append is committed as it lands and is answered at once, not parked until the
/// next change of the high watermark (found by the simulator: parked until its timeout, each
/// produce was retried and written again, and nothing was acknowledged while the followers
/// were away).
#[test]
fn with_the_leader_alone_in_the_isr_acks_all_is_answered_at_once() {
    let mut pair = Pair::new(&[("min.insync.replicas", "1")]);
    pair.cut_off[FOLLOWER] = true;
    pair.fail_follower_fetch();
    pair.advance(LAG_MS + 1);
    assert_eq!(isr(&pair), vec![0], "the follower left the ISR");
    assert_eq!(
        produce_result(pair.produce(-1, 60_000, "a")),
        (ErrorCode::None, 0),
        "committed on append: nothing to wait for"
    );
}

#[test]
fn a_follower_refuses_clients_with_not_leader_or_follower() {
    let mut pair = Pair::new(&[]);
    let produced = {
        let out = pair.nodes[FOLLOWER].produce("t", 0, 1, value("x"));
        pair.settle(FOLLOWER, out);
        std::mem::take(&mut pair.client)
    };
    assert_eq!(produce_result(produced).0, ErrorCode::NotLeaderOrFollower);
    let fetched = {
        let out = pair.nodes[FOLLOWER].fetch("t", 0, 0, 0);
        pair.settle(FOLLOWER, out);
        std::mem::take(&mut pair.client)
    };
    let Some(Output::Respond {
        response: Response {
            body: ResponseBody::Fetch(parts),
            ..
        },
        ..
    }) = fetched.into_iter().next()
    else {
        panic!("expected a fetch response")
    };
    assert_eq!(
        ErrorCode::from_code(parts.topics[0].partitions[0].error_code),
        ErrorCode::NotLeaderOrFollower
    );
}

/// With `flush.messages=1` a follower reports an append (by fetching past it) only once its
/// fsync is done, so acks=all never counts a follower's unsynced copy.
#[test]
fn with_flush_messages_1_the_follower_reports_only_durable_appends() {
    let mut pair = Pair::new(&[("flush.messages", "1")]);
    pair.hold_flushes[FOLLOWER] = true;
    assert!(pair.produce(-1, 30_000, "a").is_empty());
    assert_eq!(
        pair.partition(FOLLOWER).log().log_end_offset(),
        1,
        "appended"
    );
    assert_eq!(
        pair.partition(LEADER).high_watermark(),
        0,
        "the leader has not heard of it"
    );
    pair.advance(500);
    assert!(pair.client.is_empty(), "still not acknowledged");
    pair.release_flushes(FOLLOWER);
    assert_eq!(pair.partition(LEADER).high_watermark(), 1);
    assert_eq!(
        produce_result(std::mem::take(&mut pair.client)),
        (ErrorCode::None, 0)
    );
}

/// ListOffsets -3 on the leader's log as a client asks it: `(offset, timestamp)`.
fn max_timestamp_offset(pair: &mut Pair) -> (i64, i64) {
    let (error, offset, timestamp) = list_offsets(pair, LEADER, 7, -1, -3);
    assert_eq!(error, ErrorCode::None);
    (offset, timestamp)
}

/// ListOffsets at `timestamp` on node `index`, at `api_version`, from `replica_id` (-1: a
/// client): `(error, offset, timestamp)`.
fn list_offsets(
    pair: &mut Pair,
    index: usize,
    api_version: i16,
    replica_id: i32,
    timestamp: i64,
) -> (ErrorCode, i64, i64) {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{ListOffsetsRequest, TopicName};
    let body = ListOffsetsRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(replica_id))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_current_leader_epoch(-1)
                .with_timestamp(timestamp)])]);
    let out = pair.request(index, api_version, RequestKind::ListOffsets(body));
    let [Output::Respond { response, .. }] = out.as_slice() else {
        panic!("one answer: {out:?}")
    };
    let ResponseKind::ListOffsets(answer) = decode(response) else {
        panic!("a ListOffsets answer")
    };
    let partition = &answer.topics[0].partitions[0];
    (
        ErrorCode::from_code(partition.error_code),
        partition.offset,
        partition.timestamp,
    )
}

/// KIP-207: a new leader whose high watermark still lies below the start of its epoch (what
/// the previous leader may already have exposed) answers a client's "latest" with
/// OFFSET_NOT_AVAILABLE (LEADER_NOT_AVAILABLE before version 5), never an end of the log that
/// went backwards; "earliest", lookups below the high watermark and brokers' requests are
/// answered (found by the simulator: a final read trusted a new leader's old high watermark and
/// reported acknowledged records as lost).
#[test]
fn a_new_leader_whose_high_watermark_lags_its_epoch_start_answers_offset_not_available() {
    let mut pair = Pair::new(&[]);
    for text in ["a", "b", "c"] {
        assert_eq!(
            produce_result(pair.produce(-1, 30_000, text)).0,
            ErrorCode::None
        );
    }
    // The follower has every record but learns the leader's high watermark one fetch late.
    pair.cut_off[FOLLOWER] = true;
    pair.fail_follower_fetch();
    let follower = pair.partition(FOLLOWER);
    let (lagging, end) = (follower.high_watermark(), follower.log().log_end_offset());
    assert!(
        lagging < end,
        "the follower's high watermark lags: {lagging} < {end}"
    );
    // The follower leads epoch 2; the old leader follows it.
    let state = PartitionState {
        leader: BrokerId(1),
        leader_epoch: LeaderEpoch(2),
        replicas: vec![BrokerId(0), BrokerId(1)],
        isr: vec![BrokerId(0), BrokerId(1)],
        partition_epoch: 1,
    };
    for index in [FOLLOWER, LEADER] {
        let node = &mut pair.nodes[index];
        let mut out = Vec::new();
        node.broker
            .become_leader_or_follower(node.now, &tp(), state.clone(), &mut out);
        node.broker.check_invariants();
    }
    assert_eq!(pair.partition(FOLLOWER).lagging_epoch_start(), Some(end));
    let latest = list_offsets(&mut pair, FOLLOWER, 7, -1, -1);
    assert_eq!(latest.0, ErrorCode::OffsetNotAvailable, "{latest:?}");
    let old_client = list_offsets(&mut pair, FOLLOWER, 4, -1, -1);
    assert_eq!(
        old_client.0,
        ErrorCode::LeaderNotAvailable,
        "{old_client:?}"
    );
    // A lookup that finds a record below the high watermark is answered.
    let max_timestamp = list_offsets(&mut pair, FOLLOWER, 7, -1, -3);
    assert_eq!(max_timestamp.0, ErrorCode::None, "{max_timestamp:?}");
    assert!(max_timestamp.1 < lagging, "{max_timestamp:?}");
    // One that would reach past it is not.
    let future = list_offsets(&mut pair, FOLLOWER, 7, -1, i64::MAX);
    assert_eq!(future.0, ErrorCode::OffsetNotAvailable, "{future:?}");
    assert_eq!(
        list_offsets(&mut pair, FOLLOWER, 7, -1, -2),
        (ErrorCode::None, 0, -1)
    );
    assert_eq!(
        list_offsets(&mut pair, FOLLOWER, 7, 0, -1),
        (ErrorCode::None, lagging, -1),
        "a broker's request is answered"
    );
}

/// Kafka's `Partition.fetchOffsetForTimestamp`: the record with the largest timestamp is
/// answered only once it is below the high watermark (found by the simulator: the seedlog
/// leader answered an offset past it, `kip-279-fast-leader-changes-walk-back.toml` seed 2).
#[test]
fn the_max_timestamp_lookup_answers_nothing_past_the_high_watermark() {
    let mut pair = Pair::new(&[]);
    pair.cut_off[FOLLOWER] = true;
    pair.fail_follower_fetch();
    assert_eq!(
        produce_result(pair.produce(1, 1_000, "a")),
        (ErrorCode::None, 0)
    );
    assert_eq!(
        pair.partition(LEADER).high_watermark(),
        0,
        "the follower has not fetched it"
    );
    assert_eq!(max_timestamp_offset(&mut pair).0, -1);
    pair.cut_off[FOLLOWER] = false;
    pair.fail_follower_fetch();
    pair.advance(1_000);
    assert_eq!(pair.partition(LEADER).high_watermark(), 1);
    assert_eq!(max_timestamp_offset(&mut pair).0, 0);
}

/// The partitions a follower's fetch asks for, and its id.
fn fetched_partitions(outputs: &[Output<File>]) -> Option<(PeerRequestId, Vec<i32>)> {
    outputs.iter().find_map(|output| match output {
        Output::PeerRequest { id, body, .. } => match body.as_ref() {
            RequestKind::Fetch(fetch) => Some((
                *id,
                fetch
                    .topics
                    .iter()
                    .flat_map(|topic| topic.partitions.iter().map(|wanted| wanted.partition))
                    .collect(),
            )),
            _ => None,
        },
        _ => None,
    })
}

/// A leader's answer to fetch `id`: each partition with its error and no records.
fn fetch_answer(id: PeerRequestId, parts: &[(i32, ErrorCode)]) -> Input {
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::{FetchResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;

    let partitions = parts
        .iter()
        .map(|(index, error)| {
            PartitionData::default()
                .with_partition_index(*index)
                .with_error_code(error.code())
                .with_high_watermark(0)
                .with_records(Some(bytes::Bytes::default()))
        })
        .collect();
    let topic = FetchableTopicResponse::default()
        .with_topic(TopicName(StrBytes::from_static_str("t")))
        .with_partitions(partitions);
    Input::PeerResponse {
        peer: BrokerId(0),
        id,
        result: Ok(Box::new(ResponseKind::Fetch(
            FetchResponse::default().with_responses(vec![topic]),
        ))),
    }
}

#[test]
fn a_partition_whose_fetch_failed_backs_off_alone_while_the_others_go_on_fetching() {
    let mut follower = Harness::with_config(
        MemoryStorage::new(),
        node_config(1, ReplicationGeneration::Kip966),
    );
    follower.create_topic("t", 2, &[]);
    let mut sent = Vec::new();
    for index in [0, 1] {
        let state = led_by_broker_0();
        let now = follower.now;
        let mut out = Vec::new();
        follower.broker.become_leader_or_follower(
            now,
            &TopicPartition::new("t", index),
            state,
            &mut out,
        );
        sent.extend(out);
    }
    let (id, partitions) = fetched_partitions(&sent).expect("a fetch");
    assert_eq!(partitions, [0], "the second partition joins the next fetch");
    let out = follower.input(fetch_answer(id, &[(0, ErrorCode::None)]));
    let (id, partitions) = fetched_partitions(&out).expect("fetches again at once");
    assert_eq!(partitions, [0, 1]);

    // Partition 0 fails: it waits `replica.fetch.backoff.ms`, partition 1 is fetched at once.
    let out = follower.input(fetch_answer(
        id,
        &[(0, ErrorCode::UnknownLeaderEpoch), (1, ErrorCode::None)],
    ));
    let (id, partitions) = fetched_partitions(&out).expect("the other partition goes on");
    assert_eq!(partitions, [1]);
    let backoff = follower.broker.config.replication.fetch_backoff_ms as u64;
    follower.now = follower.now.plus(backoff - 1);
    let out = follower.input(fetch_answer(id, &[(1, ErrorCode::None)]));
    let (id, partitions) = fetched_partitions(&out).expect("still fetching");
    assert_eq!(partitions, [1], "partition 0 still waits");
    follower.now = follower.now.plus(1);
    let out = follower.input(fetch_answer(id, &[(1, ErrorCode::None)]));
    assert_eq!(fetched_partitions(&out).expect("fetching").1, [0, 1]);

    // When every partition waits, no fetch goes until the first wait ends.
    let (id, _) = fetched_partitions(&out).expect("fetching");
    let out = follower.input(fetch_answer(
        id,
        &[
            (0, ErrorCode::UnknownLeaderEpoch),
            (1, ErrorCode::UnknownLeaderEpoch),
        ],
    ));
    assert!(fetched_partitions(&out).is_none());
    assert_eq!(
        follower.broker.next_deadline(),
        Some(follower.now.plus(backoff))
    );
}
