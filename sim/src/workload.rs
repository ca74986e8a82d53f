//! What the client nodes do: producers send unique values at a rate, consumers poll their
//! assigned partitions until the run ends, the setup node creates the topics, and the final
//! reader reads every partition from the start to its end after faults heal. Every operation
//! goes into the history.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use madsim::rand::Rng;
use seedlog::client::consumer::ConsumerRecord;
use seedlog::client::producer::{ProduceError, ProducerRecord};
use seedlog::config::{Configurable, ConsumerConfig};
use seedlog::protocol::ErrorCode;
use seedlog::runtime::admin::{create_topics, NewTopic};
use seedlog::runtime::client::{ClientConnection, ClientError};
use seedlog::runtime::consumer::{Consumer, PartitionError};
use seedlog::runtime::producer::Producer;
use seedlog::types::TopicPartition;
use serde_json::json;

use crate::history::{poll_result, send_invocation, send_result, Completion, Polled, Recorder};
use crate::scenario::{ConsumerSpec, ProducerSpec};

/// What every node of a run shares: the history and the clock it is stamped with.
#[derive(Clone)]
pub struct Env {
    recorder: Arc<Mutex<Recorder>>,
    start: tokio::time::Instant,
    /// `host:port` of the first broker.
    pub bootstrap: String,
}

impl Env {
    /// A new environment whose clock starts now.
    pub fn new(bootstrap: String) -> Env {
        Env {
            recorder: Arc::new(Mutex::new(Recorder::default())),
            start: tokio::time::Instant::now(),
            bootstrap,
        }
    }

    /// Simulated nanoseconds since the run started.
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// The run's start.
    pub fn start(&self) -> tokio::time::Instant {
        self.start
    }

    /// Runs `f` on the recorder.
    pub fn record<T>(&self, f: impl FnOnce(&mut Recorder, u64) -> T) -> T {
        let now = self.now_ns();
        f(
            &mut self.recorder.lock().unwrap_or_else(PoisonError::into_inner),
            now,
        )
    }

    /// Records a named actor's event.
    pub fn event(&self, actor: &str, f: &str, value: serde_json::Value) {
        self.record(|recorder, now| recorder.event(now, actor, f, value));
    }

    /// Takes the recorder out (end of run).
    pub fn take_recorder(&self) -> Recorder {
        std::mem::take(&mut self.recorder.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Creates the topics, retrying until the broker answers (it may still be starting).
pub async fn setup_topics(env: &Env, topics: &[NewTopic]) -> Result<(), String> {
    const ATTEMPTS: u32 = 100;
    let mut last_error = String::new();
    for _ in 0..ATTEMPTS {
        match ClientConnection::connect(&env.bootstrap, "setup").await {
            Ok(mut connection) => {
                match create_topics(&mut connection, topics, Duration::from_secs(10)).await {
                    Ok(results) => {
                        let failed: Vec<String> = results
                            .into_iter()
                            .filter_map(|(name, outcome)| match outcome {
                                Ok(())
                                | Err(ClientError::Kafka {
                                    error: ErrorCode::TopicAlreadyExists,
                                    ..
                                }) => None,
                                Err(error) => Some(format!("{name}: {error}")),
                            })
                            .collect();
                        if failed.is_empty() {
                            return Ok(());
                        }
                        last_error = failed.join("; ");
                    }
                    Err(error) => last_error = error.to_string(),
                }
            }
            Err(error) => last_error = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("could not create topics: {last_error}"))
}

/// A producer's progress across its incarnations.
#[derive(Debug, Default)]
pub struct ProducerProgress {
    issued: u64,
    finished: bool,
}

/// Shared progress handle.
pub type SharedProgress = Arc<Mutex<ProducerProgress>>;

/// Whether the producer sent everything and saw every outcome.
pub fn finished(progress: &SharedProgress) -> bool {
    progress
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .finished
}

/// One incarnation of a producer node.
pub async fn producer_incarnation(env: Env, spec: ProducerSpec, progress: SharedProgress) {
    let process = env.record(|recorder, _| recorder.new_process());
    let mut config = spec.config.clone();
    config.bootstrap_servers = vec![env.bootstrap.clone()];
    config.client_id.clone_from(&spec.id);
    let producer = Producer::start(config).expect("the scenario loader validated this config");
    let interval = Duration::from_secs_f64(spec.interval_ms / 1000.0);
    let mut completions = Vec::new();
    let mut sequence = 0u64;
    loop {
        {
            let mut progress = progress.lock().unwrap_or_else(PoisonError::into_inner);
            if progress.issued >= spec.messages {
                break;
            }
            progress.issued += 1;
        }
        sequence += 1;
        let value = format!("{process}-{sequence}");
        let partition = TopicPartition::new(
            spec.topic.clone(),
            madsim::rand::thread_rng().gen_range(0..spec.partitions),
        );
        let name = partition.to_string();
        let invoke = env.record(|recorder, now| {
            recorder.invoke(
                now,
                process,
                &spec.id,
                "send",
                send_invocation(&name, &value),
            )
        });
        let record = ProducerRecord {
            topic_partition: partition,
            key: None,
            value: Some(Bytes::from(value.clone())),
            timestamp_ms: (env.now_ns() / 1_000_000) as i64,
        };
        let delivery = producer.send(record).await;
        let env = env.clone();
        completions.push(tokio::spawn(async move {
            let completion = match delivery.wait().await {
                Ok(offset) => Completion::Ok(send_result(&name, offset, &value)),
                Err(ProduceError::Rejected { error, message }) => {
                    Completion::Fail(format!("{error:?}: {message}"))
                }
                Err(ProduceError::Indeterminate { reason }) => Completion::Info(reason),
            };
            env.record(|recorder, now| recorder.complete(now, invoke, completion));
        }));
        tokio::time::sleep(interval).await;
    }
    for completion in completions {
        let _ = completion.await;
    }
    progress
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .finished = true;
}

fn group(records: &[ConsumerRecord]) -> Polled {
    let mut polled = Polled::new();
    for record in records {
        let value = record
            .value
            .as_deref()
            .map(String::from_utf8_lossy)
            .unwrap_or_default()
            .into_owned();
        polled
            .entry(record.topic_partition.to_string())
            .or_default()
            .push((record.offset, value));
    }
    polled
}

fn partition_errors(errors: &[PartitionError]) -> String {
    let errors: Vec<String> = errors
        .iter()
        .map(|error| format!("{}: {:?}: {}", error.partition, error.error, error.message))
        .collect();
    errors.join("; ")
}

/// One poll, recorded as an invocation and its completion.
async fn recorded_poll(
    env: &Env,
    process: u64,
    node: &str,
    consumer: &mut Consumer,
    timeout: Duration,
) -> bool {
    let invoke =
        env.record(|recorder, now| recorder.invoke(now, process, node, "poll", json!([["poll"]])));
    // A poll with records is recorded as ok even if another partition reported an error: the
    // consumer moved past those records, so leaving them out of the history would lose them.
    let outcome = match consumer.poll(timeout).await {
        Ok(polled) if polled.errors.is_empty() || !polled.records.is_empty() => Ok(polled.records),
        Ok(polled) => Err(partition_errors(&polled.errors)),
        Err(error) => Err(error.to_string()),
    };
    match outcome {
        Ok(records) => {
            let got = !records.is_empty();
            env.record(|recorder, now| {
                recorder.complete(now, invoke, Completion::Ok(poll_result(&group(&records))))
            });
            got
        }
        Err(error) => {
            env.record(|recorder, now| recorder.complete(now, invoke, Completion::Info(error)));
            tokio::time::sleep(Duration::from_millis(100)).await;
            false
        }
    }
}

/// One incarnation of a consumer node: polls until `stop`.
pub async fn consumer_incarnation(env: Env, spec: ConsumerSpec, stop: Arc<AtomicBool>) {
    let process = env.record(|recorder, _| recorder.new_process());
    let mut config = spec.config.clone();
    config.bootstrap_servers = vec![env.bootstrap.clone()];
    config.client_id.clone_from(&spec.id);
    let mut consumer = Consumer::new(config).expect("the scenario loader validated this config");
    consumer.assign(&spec.partitions);
    while !stop.load(Ordering::SeqCst) {
        recorded_poll(
            &env,
            process,
            &spec.id,
            &mut consumer,
            Duration::from_millis(spec.poll_timeout_ms),
        )
        .await;
    }
}

/// After healing: read every partition from its start to its end offset, then record for each
/// partition whether the read reached the end (the checkers' evidence for `lost-write`).
pub async fn final_read(env: Env, partitions: Vec<TopicPartition>, deadline: tokio::time::Instant) {
    const NODE: &str = crate::checker::FINAL_READER;
    let process = env.record(|recorder, _| recorder.new_process());
    let mut config = ConsumerConfig::default();
    config
        .apply([
            ("bootstrap.servers", env.bootstrap.as_str()),
            ("client.id", NODE),
            ("auto.offset.reset", "earliest"),
            ("request.timeout.ms", "5000"),
        ])
        .expect("a valid consumer config");
    let mut consumer = Consumer::new(config).expect("valid");
    consumer.assign(&partitions);
    let mut ends: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    while tokio::time::Instant::now() < deadline && ends.len() < partitions.len() {
        match consumer.list_offsets(&partitions, -1).await {
            Ok(offsets) => ends = offsets.into_iter().collect(),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let snapshot: BTreeMap<String, i64> = ends
        .iter()
        .map(|(partition, end)| (partition.to_string(), *end))
        .collect();
    env.event(NODE, "final-read-start", json!({ "end_offsets": snapshot }));
    let reached =
        |consumer: &Consumer, partition: &TopicPartition, ends: &BTreeMap<TopicPartition, i64>| {
            ends.get(partition).is_some_and(|end| {
                *end == 0
                    || consumer
                        .position(partition)
                        .is_some_and(|position| position >= *end)
            })
        };
    while tokio::time::Instant::now() < deadline
        && !partitions
            .iter()
            .all(|partition| reached(&consumer, partition, &ends))
    {
        recorded_poll(
            &env,
            process,
            NODE,
            &mut consumer,
            Duration::from_millis(500),
        )
        .await;
    }
    for partition in &partitions {
        let value = json!({
            "partition": partition.to_string(),
            "end_offset": ends.get(partition).copied().unwrap_or(-1),
            "reached_end": reached(&consumer, partition, &ends),
        });
        env.event(NODE, "final-read", value);
    }
}
