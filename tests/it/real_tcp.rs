//! seedlog's own producer and consumer against the real broker over loopback, and raw sockets
//! showing that bad input closes only the offending connection.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use bytes::Bytes;
use seedlog::client::producer::ProducerRecord;
use seedlog::config::{Configurable, ConsumerConfig, ProducerConfig};
use seedlog::runtime::admin::{create_topics, NewTopic};
use seedlog::runtime::client::ClientConnection;
use seedlog::runtime::consumer::Consumer;
use seedlog::runtime::producer::Producer;
use seedlog::types::TopicPartition;

use super::broker_process::{temp_dir, BrokerProcess};

/// Sends `records` (one batch) to partition 0 of `topic` as a raw Produce request and returns
/// the partition's answer.
pub(crate) async fn produce_batch(
    connection: &mut ClientConnection,
    topic: &'static str,
    acks: i16,
    records: Bytes,
) -> kafka_protocol::messages::produce_response::PartitionProduceResponse {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, RequestKind, ResponseKind, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let data = TopicProduceData::default()
        .with_name(TopicName(StrBytes::from_static_str(topic)))
        .with_partition_data(vec![PartitionProduceData::default()
            .with_index(0)
            .with_records(Some(records))]);
    let request = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![data]);
    let ResponseKind::Produce(response) = connection
        .call_within(Duration::from_secs(10), RequestKind::Produce(request))
        .await
        .expect("produce answered")
    else {
        panic!("Produce answered with another API")
    };
    response.responses[0].partition_responses[0].clone()
}

pub(crate) async fn create(address: &str, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    let mut connection = ClientConnection::connect(address, "it")
        .await
        .expect("connect");
    let configs = configs
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect();
    let topic = NewTopic {
        name: topic.to_owned(),
        partitions,
        replication_factor: 1,
        configs,
    };
    for (name, outcome) in create_topics(&mut connection, &[topic], Duration::from_secs(10))
        .await
        .expect("create")
    {
        outcome.unwrap_or_else(|error| panic!("{name}: {error}"));
    }
}

/// Sends `count` values `prefix-i` to partition `i % partitions`; returns offsets by value.
pub(crate) async fn produce(
    address: &str,
    topic: &str,
    partitions: i32,
    acks: &str,
    prefix: &str,
    count: usize,
) -> BTreeMap<String, i64> {
    produce_stamped(address, topic, partitions, acks, prefix, count, 0).await
}

/// [`produce`] with every record stamped `timestamp_ms`.
pub(crate) async fn produce_stamped(
    address: &str,
    topic: &str,
    partitions: i32,
    acks: &str,
    prefix: &str,
    count: usize,
    timestamp_ms: i64,
) -> BTreeMap<String, i64> {
    let mut config = ProducerConfig::default();
    config
        .apply([
            ("bootstrap.servers", address),
            ("acks", acks),
            ("enable.idempotence", "false"),
        ])
        .expect("config");
    let producer = Producer::start(config).expect("producer");
    let mut deliveries = Vec::new();
    for index in 0..count {
        let value = format!("{prefix}-{index}");
        let record = ProducerRecord {
            topic: topic.to_owned(),
            partition: Some(index as i32 % partitions),
            key: None,
            value: Some(Bytes::from(value.clone())),
            timestamp_ms,
        };
        deliveries.push((value, producer.send(record).await));
    }
    let mut offsets = BTreeMap::new();
    for (value, delivery) in deliveries {
        offsets.insert(value, delivery.wait().await.expect("acknowledged").offset);
    }
    producer.close().await;
    offsets
}

/// A consumer of `address` that starts at the earliest offset.
pub(crate) fn earliest_consumer(address: &str) -> Consumer {
    let mut config = ConsumerConfig::default();
    config
        .apply([
            ("bootstrap.servers", address),
            ("auto.offset.reset", "earliest"),
        ])
        .expect("config");
    Consumer::new(config).expect("consumer")
}

/// Reads every partition from the start until `expected` records arrived (or 20 s passed).
pub(crate) async fn consume_all(
    address: &str,
    topic: &str,
    partitions: i32,
    expected: usize,
) -> BTreeMap<i32, Vec<(i64, String)>> {
    let mut consumer = earliest_consumer(address);
    let assigned: Vec<TopicPartition> = (0..partitions)
        .map(|partition| TopicPartition::new(topic, partition))
        .collect();
    consumer.assign(&assigned);
    let mut read: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while read.values().map(Vec::len).sum::<usize>() < expected
        && tokio::time::Instant::now() < deadline
    {
        let polled = consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("poll");
        assert!(polled.errors.is_empty(), "{:?}", polled.errors);
        for record in polled.records {
            let value = String::from_utf8(record.value.expect("value").to_vec()).expect("utf8");
            read.entry(record.topic_partition.partition)
                .or_default()
                .push((record.offset, value));
        }
    }
    read
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_round_trip_in_order_with_every_acks_setting() {
    let dir = temp_dir("round-trip");
    let broker = BrokerProcess::start(&dir, &[], &[]);
    create(&broker.address, "orders", 3, &[]).await;
    let mut sent = 0;
    for acks in ["all", "1", "0"] {
        let offsets = produce(
            &broker.address,
            "orders",
            3,
            acks,
            &format!("acks{acks}"),
            300,
        )
        .await;
        let expected = if acks == "0" { -1 } else { 0 };
        assert!(offsets.values().all(|offset| if acks == "0" {
            *offset == expected
        } else {
            *offset >= expected
        }));
        sent += offsets.len();
    }
    let read = consume_all(&broker.address, "orders", 3, sent).await;
    assert_eq!(
        read.values().map(Vec::len).sum::<usize>(),
        sent,
        "every record read back"
    );
    for records in read.values() {
        assert!(
            records.windows(2).all(|pair| pair[0].0 + 1 == pair[1].0),
            "offsets are dense and ordered"
        );
        let values: Vec<&str> = records.iter().map(|(_, value)| value.as_str()).collect();
        let acks_all: Vec<&&str> = values
            .iter()
            .filter(|value| value.starts_with("acksall-"))
            .collect();
        let indices: Vec<usize> = acks_all
            .iter()
            .map(|value| value[8..].parse().expect("index"))
            .collect();
        assert!(
            indices.windows(2).all(|pair| pair[0] < pair[1]),
            "one producer's order is kept per partition"
        );
    }
    broker.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_get_past_a_dead_bootstrap_server_to_the_next() {
    let dir = temp_dir("bootstrap");
    let broker = BrokerProcess::start(&dir, &[], &[]);
    create(&broker.address, "orders", 2, &[]).await;
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").to_string()
    }; // closed again: connecting is refused
    let servers = format!("{dead},{}", broker.address);
    let offsets = produce(&servers, "orders", 2, "all", "v", 20).await;
    assert_eq!(offsets.len(), 20, "every send acknowledged");
    let read = consume_all(&servers, "orders", 2, 20).await;
    assert_eq!(read.values().map(Vec::len).sum::<usize>(), 20);
    broker.stop();
}

fn raw_exchange(address: &str, bytes: &[u8]) -> Vec<u8> {
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    stream.write_all(bytes).expect("write");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_their_connection_and_the_broker_keeps_serving() {
    let dir = temp_dir("malformed");
    let broker = BrokerProcess::start(&dir, &["socket.request.max.bytes=1024"], &[]);
    let oversized = [0x00, 0x00, 0x10, 0x00];
    assert!(
        raw_exchange(&broker.address, &oversized).is_empty(),
        "a 4 KiB frame above the 1 KiB limit closes"
    );
    // Metadata v0, correlation 1, null client id, then a topic array claiming 54,265,856 entries.
    let hostile_metadata = [
        0x00, 0x00, 0x00, 0x0e, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff, 0x03,
        0x3c, 0x0c, 0x00,
    ];
    assert!(
        raw_exchange(&broker.address, &hostile_metadata).is_empty(),
        "a hostile array count closes"
    );
    let unknown_api = [
        0x00, 0x00, 0x00, 0x0a, 0x03, 0xe7, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff,
    ];
    assert!(raw_exchange(&broker.address, &unknown_api).is_empty());
    // ApiVersions v99: answered (KIP-511) in v0 format with UNSUPPORTED_VERSION.
    let api_versions_v99 = [
        0x00, 0x00, 0x00, 0x0b, 0x00, 0x12, 0x00, 0x63, 0x00, 0x00, 0x00, 0x07, 0xff, 0xff, 0x00,
    ];
    let answer = raw_exchange(&broker.address, &api_versions_v99);
    assert!(answer.len() > 10, "an answer, not a close");
    assert_eq!(&answer[4..8], &[0, 0, 0, 7], "correlation id echoed");
    assert_eq!(&answer[8..10], &[0, 35], "error 35 UNSUPPORTED_VERSION");
    create(&broker.address, "still-up", 1, &[]).await;
    assert_eq!(
        produce(&broker.address, "still-up", 1, "all", "v", 5)
            .await
            .len(),
        5
    );
    let log = broker.stop();
    assert!(
        log.contains("exceeds the limit of 1024 bytes"),
        "the reason is logged: {log}"
    );
    assert!(
        log.contains("Array length"),
        "the hostile count is named in the log"
    );
}
