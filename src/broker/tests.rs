//! The broker state machine driven directly: inputs in, outputs checked. No runtime, no sockets.

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, FetchRequest, MetadataRequest, ProduceRequest, RequestKind,
    ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::*;
use crate::protocol::fetch_response::RecordsSource;
use crate::protocol::record_batch::{build_batch, decode_records};
use crate::storage::memory::{CrashLevel, MemoryStorage};
use crate::storage::StorageFile;

const CONNECTION: ConnectionId = ConnectionId(1);

type File = crate::storage::memory::MemoryFile;

struct Harness {
    broker: Broker<MemoryStorage>,
    storage: MemoryStorage,
    now: Millis,
    correlation_id: i32,
    /// Every event the broker produced, in order.
    events: Vec<BrokerEvent>,
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

impl Harness {
    fn new() -> Harness {
        Harness::on(MemoryStorage::new())
    }

    fn on(storage: MemoryStorage) -> Harness {
        Harness::with_config(storage, BrokerConfig::default())
    }

    fn with_config(storage: MemoryStorage, config: BrokerConfig) -> Harness {
        let (broker, report) = Broker::open(config, storage.clone(), 7, Millis(0)).expect("open");
        let harness = Harness {
            broker,
            storage,
            now: Millis(0),
            correlation_id: 0,
            events: report.events,
        };
        harness.sync(&report.to_sync).expect("start-up sync");
        harness
    }

    fn sync(&self, sync: &FlushSync<File>) -> std::io::Result<()> {
        sync.complete_now(&self.storage)
    }

    /// Feeds an input; keeps events aside and returns the other outputs.
    fn input(&mut self, input: Input) -> Vec<Output<File>> {
        let mut out = Vec::new();
        self.broker.handle(self.now, input, &mut out);
        self.broker.check_invariants();
        out.into_iter()
            .filter_map(|output| match output {
                Output::Event(event) => {
                    self.events.push(event);
                    None
                }
                other => Some(other),
            })
            .collect()
    }

    fn request(&mut self, api_version: i16, body: RequestKind) -> Vec<Output<File>> {
        self.correlation_id += 1;
        let api_key = crate::protocol::codec::RequestApiKey::api_key(&body);
        let request = Request {
            api_key,
            api_version,
            correlation_id: self.correlation_id,
            client_id: None,
            client_host: None,
            body,
        };
        self.input(Input::Request {
            connection: CONNECTION,
            request: Box::new(request),
        })
    }

    /// Runs every requested fsync to completion and returns all outputs that follow.
    fn flush_all(&mut self, mut outputs: Vec<Output<File>>, succeed: bool) -> Vec<Output<File>> {
        let mut done = Vec::new();
        while let Some(output) = outputs.pop() {
            match output {
                Output::Flush { flush_id, sync } => {
                    let result = if succeed {
                        self.sync(&sync).map_err(|error| error.to_string())
                    } else {
                        Err("injected".to_owned())
                    };
                    outputs.extend(self.input(Input::FlushCompleted { flush_id, result }));
                }
                other => done.push(other),
            }
        }
        done
    }

    fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> ResponseKind {
        let configs = configs
            .iter()
            .map(|(key, value)| {
                CreatableTopicConfig::default()
                    .with_name(StrBytes::from_string((*key).to_owned()))
                    .with_value(Some(StrBytes::from_string((*value).to_owned())))
            })
            .collect();
        let topic = CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(partitions)
            .with_replication_factor(1)
            .with_configs(configs);
        let outputs = self.request(
            7,
            RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(vec![topic])),
        );
        single_message(self.flush_all(outputs, true))
    }

    fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        acks: i16,
        records: Bytes,
    ) -> Vec<Output<File>> {
        let data = TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))]);
        self.request(
            9,
            RequestKind::Produce(
                ProduceRequest::default()
                    .with_acks(acks)
                    .with_timeout_ms(1000)
                    .with_topic_data(vec![data]),
            ),
        )
    }

    /// Produces `value-i` for each `i` in `indices` to `partition`, one batch each with acks=1,
    /// completing every fsync a produce asks for.
    fn produce_values(&mut self, topic: &str, partition: i32, indices: std::ops::Range<usize>) {
        for index in indices {
            let outputs = self.produce(topic, partition, 1, value(&format!("value-{index}")));
            self.flush_all(outputs, true);
        }
    }

    fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
    ) -> Vec<Output<File>> {
        let wanted = FetchPartition::default()
            .with_partition(partition)
            .with_fetch_offset(offset)
            .with_partition_max_bytes(1 << 20);
        let body = FetchRequest::default()
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(vec![wanted])]);
        self.request(12, RequestKind::Fetch(body))
    }
}

/// `seedlog.log.dir.failure=offline-partitions`: a storage error takes the partition offline
/// and the broker goes on (the behaviour the tests of offline partitions study).
fn offline_partitions() -> BrokerConfig {
    BrokerConfig {
        log_dir_failure: crate::config::broker::LogDirFailure::OfflinePartitions,
        ..BrokerConfig::default()
    }
}

/// Kafka halts a broker whose only log directory fails (issue 47): a failed fsync answers the
/// waiting produce with KAFKA_STORAGE_ERROR and halts the broker, saying why, with no
/// clean-shutdown marker; the halted broker reacts to nothing more; a restart recovers the log
/// and serves again.
#[test]
fn a_storage_error_on_the_only_log_directory_halts_even_a_single_broker() {
    let storage = MemoryStorage::new();
    let mut harness = Harness::on(storage.clone());
    harness.create_topic("t", 1, &[("flush.messages", "1")]);
    let outputs = harness.produce("t", 0, -1, value("a"));
    let done = harness.flush_all(outputs, false);
    let halted = done
        .iter()
        .any(|output| matches!(output, Output::Halt { reason } if reason.contains("t-0")));
    assert!(halted, "the broker halts, naming the partition: {done:?}");
    let answered: Vec<i16> = done
        .into_iter()
        .filter(|output| matches!(output, Output::Respond { .. }))
        .map(|output| produced_offset(vec![output]).0)
        .collect();
    assert_eq!(answered, [ErrorCode::KafkaStorageError.code()]);
    assert!(
        harness.produce("t", 0, -1, value("b")).is_empty(),
        "a halted broker reacts to nothing"
    );
    assert!(!storage
        .list("")
        .expect("list")
        .contains(&CLEAN_SHUTDOWN_FILE.to_owned()));
    let mut restarted = Harness::on(storage);
    let outputs = restarted.produce("t", 0, -1, value("c"));
    let (error, _) = produced_offset(restarted.flush_all(outputs, true));
    assert_eq!(error, 0, "the restarted broker serves the partition again");
}

fn single_message(outputs: Vec<Output<File>>) -> ResponseKind {
    assert_eq!(outputs.len(), 1, "expected one output, got {outputs:?}");
    match outputs.into_iter().next() {
        Some(Output::Respond {
            response:
                Response {
                    body: ResponseBody::Message(body),
                    ..
                },
            ..
        }) => *body,
        other => panic!("expected a response, got {other:?}"),
    }
}

fn produced_offset(outputs: Vec<Output<File>>) -> (i16, i64) {
    let ResponseKind::Produce(response) = single_message(outputs) else {
        panic!("not a produce response")
    };
    let partition = &response.responses[0].partition_responses[0];
    (partition.error_code, partition.base_offset)
}

fn fetched_values(outputs: Vec<Output<File>>) -> Vec<String> {
    assert_eq!(outputs.len(), 1);
    let Some(Output::Respond {
        response: Response {
            body: ResponseBody::Fetch(parts),
            ..
        },
        ..
    }) = outputs.into_iter().next()
    else {
        panic!("expected a fetch response")
    };
    let partition = &parts.topics[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    let bytes = match &partition.records {
        RecordsSource::Empty => return Vec::new(),
        RecordsSource::Bytes(bytes) => bytes.clone(),
        RecordsSource::File {
            file,
            position,
            len,
        } => {
            let mut buffer = vec![0; *len as usize];
            file.read_exact_at(&mut buffer, *position).expect("read");
            Bytes::from(buffer)
        }
    };
    decode_records(&bytes)
        .expect("valid batches")
        .into_iter()
        .map(|record| String::from_utf8(record.value.expect("value").to_vec()).expect("utf8"))
        .collect()
}

/// A Produce of one record to `topic-0` with `acks` and `timeout_ms`.
fn produce_one(topic: &str, acks: i16, timeout_ms: i32, text: &str) -> RequestKind {
    let data = TopicProduceData::default()
        .with_name(topic_name(topic))
        .with_partition_data(vec![PartitionProduceData::default()
            .with_index(0)
            .with_records(Some(value(text)))]);
    RequestKind::Produce(
        ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(timeout_ms)
            .with_topic_data(vec![data]),
    )
}

fn value(text: &str) -> Bytes {
    build_batch(&[(None, Some(text.as_bytes()))], 1)
}

#[test]
fn a_created_topic_takes_produces_and_serves_them_back_in_order() {
    let mut harness = Harness::new();
    let outputs = harness.request(
        7,
        RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(
            vec![CreatableTopic::default()
            .with_name(topic_name("orders"))
            .with_num_partitions(3)
            .with_replication_factor(1)],
        )),
    );
    assert!(
        matches!(outputs.as_slice(), [Output::Flush { .. }]),
        "CreateTopics waits for its record to be durable"
    );
    let ResponseKind::CreateTopics(created) = single_message(harness.flush_all(outputs, true))
    else {
        panic!()
    };
    assert_eq!(created.topics[0].error_code, 0);
    for (index, text) in ["a", "b", "c"].iter().enumerate() {
        let outputs = harness.produce("orders", 1, 1, value(text));
        assert_eq!(produced_offset(outputs), (0, index as i64));
    }
    assert_eq!(
        fetched_values(harness.fetch("orders", 1, 0, 0)),
        vec!["a", "b", "c"]
    );
    assert_eq!(fetched_values(harness.fetch("orders", 1, 2, 0)), vec!["c"]);
    assert_eq!(
        fetched_values(harness.fetch("orders", 0, 0, 0)),
        Vec::<String>::new()
    );
    let ResponseKind::Metadata(metadata) = single_message(harness.request(
        12,
        RequestKind::Metadata(MetadataRequest::default().with_topics(None)),
    )) else {
        panic!()
    };
    assert_eq!(metadata.topics.len(), 1);
    assert_eq!(metadata.topics[0].partitions.len(), 3);
}

#[test]
fn creating_an_existing_topic_or_bad_configs_fail_with_kafkas_codes() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[]);
    let topic = CreatableTopic::default()
        .with_name(topic_name("t"))
        .with_num_partitions(1)
        .with_replication_factor(1);
    let bad = CreatableTopic::default()
        .with_name(topic_name("u"))
        .with_num_partitions(1)
        .with_replication_factor(3);
    let outputs = harness.request(
        7,
        RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(vec![topic, bad])),
    );
    let ResponseKind::CreateTopics(response) = single_message(outputs) else {
        panic!()
    };
    assert_eq!(
        response.topics[0].error_code,
        ErrorCode::TopicAlreadyExists.code()
    );
    assert_eq!(
        response.topics[1].error_code,
        ErrorCode::InvalidReplicationFactor.code()
    );
    let ResponseKind::CreateTopics(response) = harness.create_topic("huge", i32::MAX, &[]) else {
        panic!()
    };
    assert_eq!(
        response.topics[0].error_code,
        ErrorCode::InvalidPartitions.code(),
        "no two billion logs"
    );
    let ResponseKind::CreateTopics(response) =
        harness.create_topic("v", 1, &[("flush.messages", "zero")])
    else {
        panic!()
    };
    assert_eq!(
        response.topics[0].error_code,
        ErrorCode::InvalidConfig.code()
    );
}

use crate::protocol::ErrorCode;

#[test]
fn with_flush_messages_1_the_ack_waits_for_the_fsync() {
    let mut harness = Harness::with_config(MemoryStorage::new(), offline_partitions());
    harness.create_topic("durable", 1, &[("flush.messages", "1")]);
    let outputs = harness.produce("durable", 0, 1, value("x"));
    assert!(
        matches!(outputs.as_slice(), [Output::Flush { .. }]),
        "no ack before the fsync: {outputs:?}"
    );
    assert_eq!(produced_offset(harness.flush_all(outputs, true)), (0, 0));
    let outputs = harness.produce("durable", 0, -1, value("y"));
    let (error, _) = produced_offset(harness.flush_all(outputs, false));
    assert_eq!(
        error,
        ErrorCode::KafkaStorageError.code(),
        "a failed fsync is never acknowledged as success"
    );
    let (error, _) = produced_offset(harness.produce("durable", 0, 1, value("z")));
    assert_eq!(
        error,
        ErrorCode::KafkaStorageError.code(),
        "the partition is offline after a failed fsync"
    );
}

#[test]
fn acks_0_gets_no_response_and_a_failure_closes_the_connection() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[]);
    assert!(matches!(
        harness.produce("t", 0, 0, value("x")).as_slice(),
        [Output::NoResponse { .. }]
    ));
    assert!(matches!(
        harness.produce("missing", 0, 0, value("x")).as_slice(),
        [Output::Close { .. }]
    ));
}

#[test]
fn acks_all_below_min_insync_replicas_is_refused() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[("min.insync.replicas", "2")]);
    assert_eq!(
        produced_offset(harness.produce("t", 0, -1, value("x"))).0,
        ErrorCode::NotEnoughReplicas.code()
    );
    assert_eq!(
        produced_offset(harness.produce("t", 0, 1, value("x"))),
        (0, 0),
        "acks=1 ignores min.insync.replicas"
    );
}

#[test]
fn corrupt_or_multi_batch_produces_are_rejected_without_touching_the_log() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[]);
    let mut corrupt = value("x").to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    assert_eq!(
        produced_offset(harness.produce("t", 0, 1, Bytes::from(corrupt))).0,
        ErrorCode::CorruptMessage.code()
    );
    let mut two = value("a").to_vec();
    two.extend_from_slice(&value("b"));
    assert_eq!(
        produced_offset(harness.produce("t", 0, 1, Bytes::from(two))).0,
        ErrorCode::InvalidRecord.code()
    );
    assert_eq!(
        produced_offset(harness.produce("t", 0, 1, value("ok"))),
        (0, 0),
        "nothing was appended before"
    );
}

/// `batch` with `recordsCount`/`lastOffsetDelta` claiming `records_count` records, or with
/// `attributes`, and its CRC recomputed so that only the record-level rules can reject it.
fn reseal(mut batch: Vec<u8>, records_count: i32, attributes: i16) -> Bytes {
    batch[21..23].copy_from_slice(&attributes.to_be_bytes());
    batch[23..27].copy_from_slice(&(records_count - 1).to_be_bytes());
    batch[57..61].copy_from_slice(&records_count.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(batch)
}

#[test]
fn a_batch_whose_records_do_not_parse_is_rejected_with_the_record_index_and_nothing_is_appended() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[]);
    let two = build_batch(&[(None, Some(b"a")), (None, Some(b"b"))], 1).to_vec();
    let ResponseKind::Produce(response) =
        single_message(harness.produce("t", 0, 1, reseal(two.clone(), 3, 0)))
    else {
        panic!("not a produce response")
    };
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, ErrorCode::InvalidRecord.code());
    assert_eq!(partition.base_offset, -1);
    assert_eq!(
        partition.record_errors.len(),
        1,
        "Produce v9 names the record"
    );
    assert_eq!(partition.record_errors[0].batch_index, 2);
    let message = partition
        .error_message
        .as_deref()
        .expect("v8+ has a message");
    assert!(message.contains("recordsCount is 3"), "{message}");
    let ResponseKind::Produce(response) =
        single_message(harness.produce("t", 0, -1, reseal(two, 2, 7)))
    else {
        panic!("not a produce response")
    };
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(
        partition.error_code,
        ErrorCode::UnknownServerError.code(),
        "Kafka's CompressionType.forId throws IllegalArgumentException"
    );
    assert!(partition.record_errors.is_empty(), "a batch-level error");
    assert_eq!(
        produced_offset(harness.produce("t", 0, 1, value("ok"))),
        (0, 0),
        "nothing was appended before"
    );
}

#[test]
fn a_long_poll_fetch_waits_for_data_or_its_deadline() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[]);
    assert!(
        harness.fetch("t", 0, 0, 500).is_empty(),
        "parked: no data yet"
    );
    assert_eq!(harness.broker.next_deadline(), Some(Millis(500)));
    let mut outputs = harness.produce("t", 0, 1, value("x"));
    let fetch = outputs.remove(0);
    assert_eq!(fetched_values(vec![fetch]), vec!["x"]);
    assert!(harness.fetch("t", 0, 1, 500).is_empty());
    harness.now = Millis(500);
    assert_eq!(
        fetched_values(harness.input(Input::Tick)),
        Vec::<String>::new()
    );
}

#[test]
fn a_parked_fetch_wakes_only_for_the_partitions_it_reads() {
    let mut harness = Harness::new();
    harness.create_topic("t", 2, &[]);
    assert!(harness.fetch("t", 0, 0, 500).is_empty(), "parked on t-0");
    let outputs = harness.produce("t", 1, 1, value("elsewhere"));
    assert_eq!(
        outputs.len(),
        1,
        "only the produce answer: t-1 is not watched"
    );
    let mut outputs = harness.produce("t", 0, 1, value("here"));
    assert_eq!(outputs.len(), 2, "the parked fetch and the produce answer");
    assert_eq!(fetched_values(vec![outputs.remove(0)]), vec!["here"]);
}

#[test]
fn data_survives_a_process_crash_but_unsynced_data_dies_with_the_power() {
    let storage = MemoryStorage::new();
    let mut harness = Harness::on(storage.clone());
    harness.create_topic("t", 1, &[]);
    harness.produce("t", 0, 1, value("a"));
    storage.crash(CrashLevel::Process, &mut |_| 0);
    let mut harness = Harness::on(storage.clone());
    assert_eq!(
        fetched_values(harness.fetch("t", 0, 0, 0)),
        vec!["a"],
        "the page cache survives a process crash; the restart syncs what it recovered"
    );
    harness.produce("t", 0, 1, value("b"));
    storage.crash(CrashLevel::PowerLoss, &mut |_| 0);
    let mut harness = Harness::on(storage);
    assert_eq!(
        fetched_values(harness.fetch("t", 0, 0, 0)),
        vec!["a"],
        "b was never fsynced: lost with the power; a was synced on the restart"
    );
    assert_eq!(
        harness.broker.metadata.topics().len(),
        1,
        "the topic record itself was fsynced before the ack"
    );
}

#[test]
fn fsynced_data_survives_power_loss_and_a_torn_tail_is_truncated() {
    let storage = MemoryStorage::new();
    let mut harness = Harness::on(storage.clone());
    harness.create_topic("t", 1, &[("flush.messages", "1")]);
    let outputs = harness.produce("t", 0, 1, value("kept"));
    harness.flush_all(outputs, true);
    let torn = "t".repeat(1500);
    let _unflushed = harness.produce("t", 0, 1, value(&torn));
    // The batch spans four sectors: the first and third reach the disk, the others do not.
    let mut draws = [1, 0, 1, 7, 0].into_iter();
    storage.crash(CrashLevel::PowerLoss, &mut |_| {
        draws.next().expect("a draw per choice")
    });
    let mut harness = Harness::on(storage);
    assert_eq!(fetched_values(harness.fetch("t", 0, 0, 0)), vec!["kept"]);
    let outputs = harness.produce("t", 0, 1, value("next"));
    assert_eq!(
        produced_offset(harness.flush_all(outputs, true)),
        (0, 1),
        "the torn offset is reused"
    );
}

#[test]
fn a_request_naming_another_leader_epoch_is_fenced() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[]);
    let partition = harness
        .broker
        .partition(&TopicPartition::new("t", 0))
        .expect("exists");
    assert_eq!(
        partition.check_leader_epoch(-1),
        Ok(()),
        "no epoch named: not checked"
    );
    assert_eq!(partition.check_leader_epoch(0), Ok(()));
    assert_eq!(
        partition.check_leader_epoch(1),
        Err(ErrorCode::UnknownLeaderEpoch)
    );
}

#[test]
fn responses_name_the_api_they_answer() {
    let mut harness = Harness::new();
    let outputs = harness.request(
        3,
        RequestKind::ApiVersions(kafka_protocol::messages::ApiVersionsRequest::default()),
    );
    let Some(Output::Respond { response, .. }) = outputs.into_iter().next() else {
        panic!()
    };
    assert_eq!(response.api_key, ApiKey::ApiVersions);
    assert_eq!(response.correlation_id, harness.correlation_id);
}

fn high_watermark(harness: &Harness, topic: &str) -> i64 {
    harness
        .broker
        .partition(&TopicPartition::new(topic, 0))
        .expect("exists")
        .high_watermark()
}

#[test]
fn with_flush_messages_1_nothing_is_visible_before_its_fsync_completes() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[("flush.messages", "1")]);
    let pending = harness.produce("t", 0, -1, value("x"));
    assert_eq!(
        high_watermark(&harness, "t"),
        0,
        "appended, not yet durable"
    );
    assert_eq!(
        fetched_values(harness.fetch("t", 0, 0, 0)),
        Vec::<String>::new(),
        "a consumer cannot read it yet"
    );
    assert!(
        harness.fetch("t", 0, 0, 500).is_empty(),
        "a long poll parks"
    );
    let outputs = harness.flush_all(pending, true);
    assert_eq!(
        outputs.len(),
        2,
        "the parked fetch and the produce answer: {outputs:?}"
    );
    assert_eq!(high_watermark(&harness, "t"), 1);
    assert!(harness.events.contains(&BrokerEvent::HighWatermark {
        partition: TopicPartition::new("t", 0),
        offset: 1
    }));
}

#[test]
fn a_later_successful_fsync_does_not_acknowledge_after_an_earlier_one_failed() {
    let mut harness = Harness::with_config(MemoryStorage::new(), offline_partitions());
    harness.create_topic("t", 1, &[("flush.messages", "1")]);
    let first = harness.produce("t", 0, -1, value("first"));
    let second = harness.produce("t", 0, -1, value("second"));
    let (Output::Flush { flush_id: f1, .. }, Output::Flush { flush_id: f2, sync }) =
        (&first[0], &second[0])
    else {
        panic!("two flushes in flight: {first:?} {second:?}")
    };
    let (f1, f2) = (*f1, *f2);
    harness.sync(sync).expect("the second fsync works");
    let failed = harness.input(Input::FlushCompleted {
        flush_id: f1,
        result: Err("EIO".to_owned()),
    });
    let codes: Vec<i16> = failed
        .into_iter()
        .map(|output| produced_offset(vec![output]).0)
        .collect();
    assert_eq!(
        codes,
        vec![ErrorCode::KafkaStorageError.code(); 2],
        "both produces are answered at once, the second one too: F2 cannot vouch for F1's pages"
    );
    let after = harness.input(Input::FlushCompleted {
        flush_id: f2,
        result: Ok(()),
    });
    assert!(after.is_empty(), "nothing left to acknowledge: {after:?}");
    assert_eq!(high_watermark(&harness, "t"), 0);
    assert!(harness
        .events
        .iter()
        .any(|event| matches!(event, BrokerEvent::Offline { .. })));
}

#[test]
fn the_recovery_point_checkpoint_spares_the_next_start_a_scan() {
    let storage = MemoryStorage::new();
    let config = BrokerConfig {
        log_flush_offset_checkpoint_interval_ms: 100,
        log_segment_bytes: 200,
        ..BrokerConfig::default()
    };
    let mut harness = Harness::with_config(storage.clone(), config.clone());
    harness.create_topic("t", 1, &[("flush.messages", "1")]);
    harness.produce_values("t", 0, 0..8);
    harness.now = Millis(100);
    let outputs = harness.input(Input::Tick);
    assert!(harness.flush_all(outputs, true).is_empty());
    let names = storage.list("").expect("list");
    assert!(
        names.contains(&RECOVERY_POINT_CHECKPOINT.to_owned()),
        "{names:?}"
    );
    storage.crash(CrashLevel::PowerLoss, &mut |_| 0);
    let (_, report) = Broker::open(config, storage, 7, Millis(0)).expect("reopen");
    assert!(
        report.recovery.unscanned_segments >= 2,
        "{:?}",
        report.recovery
    );
}

#[test]
fn corruption_below_the_recovery_point_takes_the_partition_offline_and_keeps_the_files() {
    let storage = MemoryStorage::new();
    let config = BrokerConfig {
        log_flush_offset_checkpoint_interval_ms: 100,
        ..BrokerConfig::default()
    };
    let mut harness = Harness::with_config(storage.clone(), config.clone());
    harness.create_topic("t", 1, &[("flush.messages", "1")]);
    harness.produce_values("t", 0, 0..3);
    harness.now = Millis(100);
    let outputs = harness.input(Input::Tick);
    harness.flush_all(outputs, true);
    let segment = "t-0/00000000000000000000.log";
    let file = storage.open(segment).expect("segment");
    let len = file.len().expect("len");
    file.write_all_at(&[0xee], len - 1)
        .expect("a flipped byte in the last batch");
    let mut harness = Harness::with_config(storage.clone(), config);
    let partition = harness
        .broker
        .partition(&TopicPartition::new("t", 0))
        .expect("exists");
    assert!(partition
        .offline()
        .expect("offline")
        .contains("recovery point"));
    assert_eq!(
        produced_offset(harness.produce("t", 0, 1, value("no"))).0,
        ErrorCode::KafkaStorageError.code()
    );
    assert_eq!(
        storage.open(segment).expect("open").len().expect("len"),
        len,
        "nothing truncated"
    );
    // The next checkpoint must not lower the offline partition's recovery point, or the next
    // restart would take the corrupt batch for a torn tail and truncate fsynced data.
    harness.now = Millis(200);
    let outputs = harness.input(Input::Tick);
    harness.flush_all(outputs, true);
    let config = BrokerConfig {
        log_flush_offset_checkpoint_interval_ms: 100,
        ..BrokerConfig::default()
    };
    let harness = Harness::with_config(storage.clone(), config);
    assert!(harness
        .broker
        .partition(&TopicPartition::new("t", 0))
        .expect("exists")
        .offline()
        .is_some());
    assert_eq!(
        storage.open(segment).expect("open").len().expect("len"),
        len,
        "still nothing truncated after a checkpoint and a second restart"
    );
}

#[test]
fn retention_deletes_expired_segments_once_their_new_log_start_is_checkpointed() {
    let storage = MemoryStorage::new();
    let config = BrokerConfig {
        log_retention_check_interval_ms: 1000,
        log_segment_bytes: 200,
        ..BrokerConfig::default()
    };
    let mut harness = Harness::with_config(storage.clone(), config.clone());
    // Records carry timestamp 1; the wall clock reads 1,000 at the first check.
    harness.create_topic("t", 1, &[("flush.messages", "1"), ("retention.ms", "500")]);
    harness.produce_values("t", 0, 0..8);
    let t0 = TopicPartition::new("t", 0);
    let segments = harness
        .broker
        .partition(&t0)
        .expect("t-0")
        .log()
        .segment_count();
    assert!(segments > 2, "small segments rolled: {segments}");
    harness.now = Millis(1000);
    let outputs = harness.input(Input::Tick);
    assert!(
        matches!(outputs.as_slice(), [Output::Flush { .. }]),
        "first the checkpoint's temporary file is synced: {outputs:?}"
    );
    let log = &harness.broker.partition(&t0).expect("t-0").log();
    assert_eq!(
        log.log_start_offset(),
        0,
        "nothing deleted before the checkpoint is durable"
    );
    assert!(harness.flush_all(outputs, true).is_empty());
    let log = &harness.broker.partition(&t0).expect("t-0").log();
    let start = log.log_start_offset();
    assert_eq!(log.segment_count(), 1, "an empty active segment is left");
    assert_eq!(
        start,
        log.log_end_offset(),
        "every record expired: the active segment rolled and went too, as in Kafka"
    );
    assert!(harness.events.iter().any(|event| matches!(
        event,
        BrokerEvent::LogStartOffset { offset, .. } if *offset == start
    )));
    // The removals were never synced: a power loss brings the files back, and the checkpointed
    // start deletes them again on the next start.
    storage.crash(CrashLevel::PowerLoss, &mut |_| 0);
    let (broker, _) = Broker::open(config, storage, 7, Millis(0)).expect("reopen");
    let log = &broker.partition(&t0).expect("t-0").log();
    assert_eq!(log.log_start_offset(), start);
    assert_eq!(log.segment_count(), 1);
}

#[test]
fn retention_by_size_keeps_at_least_retention_bytes_and_nothing_past_the_high_watermark() {
    let config = BrokerConfig {
        log_retention_check_interval_ms: 1000,
        log_segment_bytes: 200,
        ..BrokerConfig::default()
    };
    let mut harness = Harness::with_config(MemoryStorage::new(), config);
    harness.create_topic(
        "t",
        1,
        &[("flush.messages", "1"), ("retention.bytes", "300")],
    );
    harness.produce_values("t", 0, 0..8);
    let t0 = TopicPartition::new("t", 0);
    harness.now = Millis(1000);
    let outputs = harness.input(Input::Tick);
    harness.flush_all(outputs, true);
    let partition = harness.broker.partition(&t0).expect("t-0");
    assert!(
        partition.log().log_start_offset() > 0,
        "the oldest segments went"
    );
    // What is left is at least retention.bytes: one more deletion would go below it.
    assert!(partition.log().segment_count() >= 2);
    assert!(partition.log().log_start_offset() <= partition.high_watermark());
}

#[test]
fn a_clean_shutdown_survives_power_loss_and_the_next_start_trusts_the_logs() {
    let storage = MemoryStorage::new();
    let config = BrokerConfig {
        log_segment_bytes: 200,
        ..BrokerConfig::default()
    };
    let mut harness = Harness::with_config(storage.clone(), config.clone());
    harness.create_topic("t", 2, &[]);
    for index in 0..8 {
        let outputs = harness.produce("t", index % 2, 1, value(&format!("value-{index}")));
        harness.flush_all(outputs, true); // only what rolls is flushed
    }
    let outputs = harness.input(Input::Shutdown);
    let done = harness.flush_all(outputs, true);
    assert!(
        matches!(done.as_slice(), [Output::Stopped { clean: true }]),
        "{done:?}"
    );
    assert!(
        harness.input(Input::Shutdown).is_empty(),
        "a second request changes nothing"
    );
    // Everything the shutdown wrote was fsynced: the power may go now.
    storage.crash(CrashLevel::PowerLoss, &mut |_| 0);
    let (broker, report) =
        Broker::open(config.clone(), storage.clone(), 7, Millis(0)).expect("reopen");
    assert!(report.clean_shutdown);
    assert_eq!(report.recovery.batches, 0, "{:?}", report.recovery);
    assert!(
        report.recovery.unscanned_segments >= 3,
        "{:?}",
        report.recovery
    );
    for partition in 0..2 {
        let log = &broker
            .partition(&TopicPartition::new("t", partition))
            .expect("known")
            .log();
        assert_eq!(log.log_end_offset(), 4);
        assert_eq!(log.recovery_point(), 4);
        assert_eq!(
            log.snapshot_offsets().last(),
            Some(&4),
            "the producer-state snapshot the shutdown took at the log end is durable"
        );
    }
    report.to_sync.complete_now(&storage).expect("sync");
    assert!(
        !storage
            .list("")
            .expect("list")
            .contains(&CLEAN_SHUTDOWN_FILE.to_owned()),
        "the marker is gone, durably, once start-up synced"
    );
    storage.crash(CrashLevel::PowerLoss, &mut |_| 0);
    let (_, report) = Broker::open(config, storage, 7, Millis(0)).expect("reopen");
    assert!(
        !report.clean_shutdown,
        "a crash after a clean start is not clean"
    );
}

#[test]
fn a_failed_flush_during_shutdown_leaves_no_marker() {
    let storage = MemoryStorage::new();
    let mut harness = Harness::with_config(storage.clone(), offline_partitions());
    harness.create_topic("t", 1, &[]);
    harness.produce("t", 0, 1, value("a"));
    let outputs = harness.input(Input::Shutdown);
    let done = harness.flush_all(outputs, false);
    assert!(
        matches!(done.last(), Some(Output::Stopped { clean: false })),
        "{done:?}"
    );
    assert!(!storage
        .list("")
        .expect("list")
        .contains(&CLEAN_SHUTDOWN_FILE.to_owned()));
    let (_, report) = Broker::open(BrokerConfig::default(), storage, 7, Millis(0)).expect("reopen");
    assert!(!report.clean_shutdown);
}

#[test]
fn a_roll_flushes_the_closed_segments_so_retention_runs_without_a_flush_policy() {
    let storage = MemoryStorage::new();
    let config = BrokerConfig {
        log_retention_check_interval_ms: 1000,
        log_segment_bytes: 200,
        ..BrokerConfig::default()
    };
    let mut harness = Harness::with_config(storage.clone(), config);
    // Kafka's default flush policy: no fsync holds an acknowledgement.
    harness.create_topic("t", 1, &[("retention.ms", "500")]);
    let t0 = TopicPartition::new("t", 0);
    let mut rolls = 0;
    for index in 0..8 {
        let outputs = harness.produce("t", 0, 1, value(&format!("value-{index}")));
        let flushes: Vec<&FlushSync<File>> = outputs
            .iter()
            .filter_map(|output| match output {
                Output::Flush { sync, .. } => Some(sync),
                _ => None,
            })
            .collect();
        let log = &harness.broker.partition(&t0).expect("t-0").log();
        if let [sync] = flushes.as_slice() {
            rolls += 1;
            // Only the closed segments: the new active segment's record is not covered.
            assert!(!sync.files.is_empty());
            assert!(log.recovery_point() < log.log_end_offset());
        } else {
            assert!(
                flushes.is_empty(),
                "an append that did not roll flushes nothing"
            );
        }
        let answered = harness.flush_all(outputs, true);
        assert!(
            matches!(answered.as_slice(), [Output::Respond { .. }]),
            "the produce is answered at once, before any fsync: {answered:?}"
        );
    }
    let log = &harness.broker.partition(&t0).expect("t-0").log();
    assert!(rolls >= 2, "small segments rolled {rolls} times");
    let recovery_point = log.recovery_point();
    assert!(recovery_point > 0 && recovery_point < log.log_end_offset());
    // Retention deletes the closed, now durable segments while the broker runs.
    harness.now = Millis(1000);
    let outputs = harness.input(Input::Tick);
    assert!(harness.flush_all(outputs, true).is_empty());
    let log = &harness.broker.partition(&t0).expect("t-0").log();
    assert_eq!(log.log_start_offset(), recovery_point);
}

fn delete_records(
    harness: &mut Harness,
    offsets: &[(i32, i64)],
    timeout_ms: i32,
) -> Vec<Output<File>> {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    let partitions = offsets
        .iter()
        .map(|(partition, offset)| {
            DeleteRecordsPartition::default()
                .with_partition_index(*partition)
                .with_offset(*offset)
        })
        .collect();
    let body = kafka_protocol::messages::DeleteRecordsRequest::default()
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(topic_name("t"))
            .with_partitions(partitions)])
        .with_timeout_ms(timeout_ms);
    harness.request(2, RequestKind::DeleteRecords(body))
}

/// `(error code, low watermark)` per partition of a DeleteRecords response.
fn deleted(outputs: Vec<Output<File>>) -> Vec<(i16, i64)> {
    let ResponseKind::DeleteRecords(response) = single_message(outputs) else {
        panic!("a DeleteRecords response")
    };
    response.topics[0]
        .partitions
        .iter()
        .map(|partition| (partition.error_code, partition.low_watermark))
        .collect()
}

#[test]
fn delete_records_moves_the_log_start_inside_a_segment_once_it_is_durable() {
    let storage = MemoryStorage::new();
    let config = BrokerConfig {
        log_segment_bytes: 300,
        ..BrokerConfig::default()
    };
    let mut harness = Harness::with_config(storage.clone(), config.clone());
    harness.create_topic("t", 2, &[("flush.messages", "1")]);
    harness.produce_values("t", 0, 0..10);
    let outputs = delete_records(&mut harness, &[(0, 7)], 1000);
    assert!(
        matches!(outputs.as_slice(), [Output::Flush { .. }]),
        "first the log-start checkpoint: {outputs:?}"
    );
    let t0 = TopicPartition::new("t", 0);
    assert_eq!(
        harness
            .broker
            .partition(&t0)
            .expect("t-0")
            .log()
            .log_start_offset(),
        0
    );
    assert_eq!(deleted(harness.flush_all(outputs, true)), vec![(0, 7)]);
    let log = &harness.broker.partition(&t0).expect("t-0").log();
    assert_eq!(log.log_start_offset(), 7, "inside a segment");
    let Some(Output::Respond { response, .. }) = harness.fetch("t", 0, 6, 0).pop() else {
        panic!("a fetch response")
    };
    let ResponseBody::Fetch(parts) = response.body else {
        panic!("a fetch body")
    };
    assert_eq!(
        parts.topics[0].partitions[0].error_code,
        ErrorCode::OffsetOutOfRange.code(),
        "below the new start"
    );
    assert_eq!(
        fetched_values(harness.fetch("t", 0, 7, 0))
            .first()
            .map(String::as_str),
        Some("value-7")
    );
    // Asking again for less, the high watermark (-1), and what cannot be.
    assert_eq!(
        deleted(delete_records(&mut harness, &[(0, 3)], 1000)),
        vec![(0, 7)]
    );
    assert_eq!(
        deleted(delete_records(
            &mut harness,
            &[(0, 11), (1, -2), (5, 0)],
            1000
        )),
        vec![
            (ErrorCode::OffsetOutOfRange.code(), -1),
            (ErrorCode::OffsetOutOfRange.code(), -1),
            (ErrorCode::UnknownTopicOrPartition.code(), -1)
        ]
    );
    let outputs = delete_records(&mut harness, &[(0, -1)], 1000);
    assert_eq!(deleted(harness.flush_all(outputs, true)), vec![(0, 10)]);
    // The start is durable: a power loss does not bring the records back.
    storage.crash(CrashLevel::PowerLoss, &mut |_| 0);
    let (broker, _) = Broker::open(config, storage, 7, Millis(0)).expect("reopen");
    assert_eq!(
        broker.partition(&t0).expect("t-0").log().log_start_offset(),
        10
    );
}

#[test]
fn a_delete_records_whose_checkpoint_fails_times_out() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[("flush.messages", "1")]);
    harness.produce_values("t", 0, 0..3);
    let outputs = delete_records(&mut harness, &[(0, 2)], 500);
    assert!(harness.flush_all(outputs, false).is_empty(), "parked");
    harness.now = Millis(499);
    assert!(harness.input(Input::Tick).is_empty());
    harness.now = Millis(500);
    assert_eq!(
        deleted(harness.input(Input::Tick)),
        vec![(ErrorCode::RequestTimedOut.code(), -1)]
    );
    let t0 = TopicPartition::new("t", 0);
    assert_eq!(
        harness
            .broker
            .partition(&t0)
            .expect("t-0")
            .log()
            .log_start_offset(),
        0
    );
}

/// `(error, epoch, end offset)` for each `(current epoch, epoch)` asked of `topic-0`.
fn epoch_ends(harness: &mut Harness, topic: &str, asked: &[(i32, i32)]) -> Vec<(i16, i32, i64)> {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    let partitions = asked
        .iter()
        .map(|(current, epoch)| {
            OffsetForLeaderPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(*current)
                .with_leader_epoch(*epoch)
        })
        .collect();
    let body = kafka_protocol::messages::OffsetForLeaderEpochRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(partitions)]);
    let outputs = harness.request(4, RequestKind::OffsetForLeaderEpoch(body));
    let ResponseKind::OffsetForLeaderEpoch(response) = single_message(outputs) else {
        panic!("an OffsetForLeaderEpoch response");
    };
    response.topics[0]
        .partitions
        .iter()
        .map(|entry| (entry.error_code, entry.leader_epoch, entry.end_offset))
        .collect()
}

#[test]
fn offsets_for_leader_epoch_answers_where_an_epoch_ends_and_fences_the_current_epoch() {
    let mut harness = Harness::new();
    harness.create_topic("t", 1, &[]);
    harness.produce_values("t", 0, 0..3);
    assert_eq!(
        epoch_ends(
            &mut harness,
            "t",
            &[(-1, 0), (0, 0), (-1, 5), (7, 0), (-1, -1)]
        ),
        vec![
            (0, 0, 3),
            (0, 0, 3),
            (0, -1, -1), // newer than every epoch here: undefined, as Kafka's endOffsetFor
            (ErrorCode::UnknownLeaderEpoch.code(), -1, -1),
            (0, -1, -1),
        ]
    );
    assert_eq!(
        epoch_ends(&mut harness, "missing", &[(-1, 0)]),
        vec![(ErrorCode::UnknownTopicOrPartition.code(), -1, -1)]
    );
}

/// One resource of a DescribeConfigs answer: its error code and each config's
/// `(name, value, source)`.
type DescribedResource = (i16, Vec<(String, String, i8)>);

/// DescribeConfigs for `resources` (`(type, name, keys)`).
fn describe_configs(
    harness: &mut Harness,
    resources: &[(i8, &str, Option<&[&str]>)],
) -> Vec<DescribedResource> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    let resources = resources
        .iter()
        .map(|(resource_type, name, keys)| {
            DescribeConfigsResource::default()
                .with_resource_type(*resource_type)
                .with_resource_name(StrBytes::from_string((*name).to_owned()))
                .with_configuration_keys(keys.map(|keys| {
                    keys.iter()
                        .map(|key| StrBytes::from_string((*key).to_owned()))
                        .collect()
                }))
        })
        .collect();
    let body =
        kafka_protocol::messages::DescribeConfigsRequest::default().with_resources(resources);
    let outputs = harness.request(4, RequestKind::DescribeConfigs(body));
    let ResponseKind::DescribeConfigs(response) = single_message(outputs) else {
        panic!("a DescribeConfigs response");
    };
    response
        .results
        .iter()
        .map(|result| {
            let configs = result
                .configs
                .iter()
                .map(|config| {
                    let value = config.value.as_deref().unwrap_or_default().to_owned();
                    (config.name.to_string(), value, config.config_source)
                })
                .collect();
            (result.error_code, configs)
        })
        .collect()
}

#[test]
fn describe_configs_gives_a_topics_effective_configs_and_where_each_comes_from() {
    let mut harness = Harness::new();
    harness.create_topic(
        "t",
        1,
        &[("retention.ms", "60000"), ("flush.messages", "1")],
    );
    let described = describe_configs(&mut harness, &[(2, "t", None)]);
    let (error, configs) = &described[0];
    assert_eq!(*error, 0);
    let find = |name: &str| configs.iter().find(|(n, _, _)| n == name).cloned();
    assert_eq!(
        find("retention.ms"),
        Some(("retention.ms".into(), "60000".into(), 1))
    );
    assert_eq!(
        find("flush.messages"),
        Some(("flush.messages".into(), "1".into(), 1))
    );
    assert_eq!(
        find("segment.bytes"),
        Some(("segment.bytes".into(), "1073741824".into(), 5)),
        "a default comes from the broker (DEFAULT_CONFIG)"
    );
    assert_eq!(
        describe_configs(&mut harness, &[(2, "t", Some(&["min.insync.replicas"]))])[0].1,
        vec![("min.insync.replicas".to_owned(), "1".to_owned(), 5)],
        "only the keys asked for"
    );
    let refused = describe_configs(&mut harness, &[(2, "missing", None), (4, "0", None)]);
    assert_eq!(
        refused[0],
        (ErrorCode::UnknownTopicOrPartition.code(), vec![])
    );
    assert_eq!(
        refused[1],
        (ErrorCode::InvalidRequest.code(), vec![]),
        "broker resources are not described (yet): said, not answered empty"
    );
}

mod cluster;
mod compression;
mod groups;
mod idempotence;
mod replication;

#[test]
fn a_compacted_topic_refuses_a_record_without_a_key_and_names_it() {
    let mut harness = Harness::new();
    harness.create_topic("c", 1, &[("cleanup.policy", "compact")]);
    let keyed = build_batch(&[(Some(b"k".as_slice()), Some(b"v".as_slice()))], 1);
    assert_eq!(produced_offset(harness.produce("c", 0, 1, keyed)), (0, 0));
    let mixed = build_batch(
        &[
            (Some(b"k".as_slice()), Some(b"a".as_slice())),
            (None, Some(b"b".as_slice())),
        ],
        1,
    );
    let ResponseKind::Produce(response) = single_message(harness.produce("c", 0, 1, mixed)) else {
        panic!("not a produce response")
    };
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, ErrorCode::InvalidRecord.code());
    assert_eq!(partition.record_errors[0].batch_index, 1);
    assert_eq!(
        partition.error_message.as_deref(),
        Some("Compacted topic cannot accept message without key in topic partition c-0.")
    );
    // An ordinary topic takes it.
    harness.create_topic("d", 1, &[]);
    assert_eq!(produced_offset(harness.produce("d", 0, 1, value("x"))).0, 0);
}

/// The records of the broker's own metadata log, decoded.
fn own_metadata_records(harness: &Harness) -> Vec<crate::metadata::records::Record> {
    let log = &harness.broker.metadata.log;
    read_log_records(log, log.log_start_offset())
        .expect("readable")
        .iter()
        .map(|record| {
            crate::metadata::records::Record::decode(record.value.as_deref().unwrap_or_default())
                .expect("the controller's record format")
        })
        .collect()
}

#[test]
fn a_single_broker_writes_the_quorums_records_registers_once_and_replays_them() {
    use crate::metadata::records::Record;
    let storage = MemoryStorage::new();
    let mut harness = Harness::on(storage.clone());
    harness.create_topic("t", 2, &[("flush.messages", "1")]);
    harness.create_topic("u", 1, &[]);
    let records = own_metadata_records(&harness);
    let kinds: Vec<&str> = records.iter().map(Record::kind).collect();
    assert_eq!(
        kinds,
        [
            "register",
            "unfence",
            "topic",
            "partition",
            "partition",
            "topic",
            "partition"
        ]
    );
    let image = harness.broker.metadata.image().clone();
    let partition = image
        .partition(image.topic("t").expect("created").topic_id, 1)
        .expect("two partitions");
    assert_eq!(partition.leader, harness.broker.node_id());
    assert!(image.is_active(harness.broker.node_id()));
    let restarted = Harness::on(storage);
    assert_eq!(
        restarted.broker.metadata.image(),
        &image,
        "the restart replays the same image"
    );
    assert_eq!(
        restarted
            .broker
            .metadata
            .config("t")
            .expect("served")
            .flush_messages,
        1
    );
    assert_eq!(own_metadata_records(&restarted).len(), records.len());
}

#[test]
fn a_metadata_log_in_the_old_json_format_is_refused_with_what_to_do() {
    let storage = MemoryStorage::new();
    let harness = Harness::on(storage.clone());
    let json = br#"{"type":"topic","name":"t","topic_id":"00000000-0000-0000-0000-000000000007","partitions":1,"replication_factor":1,"configs":{}}"#;
    let (mut batch, header) = crate::protocol::record_batch::value_batch(&[json.to_vec()]);
    let mut broker = harness.broker;
    broker
        .metadata
        .log
        .append(&mut batch, &header, 0)
        .expect("appended");
    let (sync, mark) = broker.metadata.log.start_flush(Millis(0)).expect("to sync");
    sync.complete_now(&storage).expect("synced");
    broker.metadata.log.flush_completed(mark);
    let error = Broker::open(BrokerConfig::default(), storage, 7, Millis(0))
        .expect_err("the old format is refused");
    let message = error.to_string();
    assert!(
        message.contains("__cluster_metadata-0")
            && message.contains("record 0 is a JSON topic record")
            && message.contains("empty log.dirs"),
        "{message}"
    );
}
