//! What the client nodes do: producers send unique values at a rate, consumers poll their
//! assigned partitions until the run ends, the setup node creates the topics, and the final
//! reader reads every partition from the start to its end after faults heal. Every operation
//! goes into the history, and so does every event a broker reports.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use madsim::rand::Rng;
use seedlog::broker::BrokerEvent;
use seedlog::client::consumer::{ConsumerRecord, PartitionError, Polled, ResetReason};
use seedlog::client::producer::{ProduceError, ProducerRecord};
use seedlog::config::{Configurable, ConsumerConfig};
use seedlog::protocol::ErrorCode;
use seedlog::runtime::admin::{create_topics, NewTopic};
use seedlog::runtime::client::{ClientConnection, ClientError};
use seedlog::runtime::consumer::Consumer;
use seedlog::runtime::group::{take_positions, GroupMember, RebalanceListener};
use seedlog::runtime::producer::Producer;
use seedlog::runtime::server::BrokerObserver;
use seedlog::types::TopicPartition;

use crate::checker::values::ValueMap;
use crate::checker::{Check, FINAL_READER};
use crate::cluster_monitor::ClusterMonitor;
use crate::history::{
    self, Body, Completion, FinalRead, Nemesis, Partition, Recorder, Records, Value,
};
use crate::scenario::{ConsumerSpec, GroupSpec, OnRestart, Processing, ProducerSpec};

/// The actor of the cluster monitor's records.
pub const INVARIANTS: &str = "invariants";

/// What every node of a run shares: the history and the clock it is stamped with.
#[derive(Clone)]
pub struct Env {
    recorder: Arc<Mutex<Recorder>>,
    start: tokio::time::Instant,
    /// The simulated clock, read directly: `Instant::now` under madsim goes through its
    /// `clock_gettime` hook, a handle lookup and two conversions, once a history operation.
    time: madsim::time::TimeHandle,
    /// `time`'s reading at `start`.
    start_elapsed: Duration,
    /// `host:port` of the first broker.
    pub bootstrap: Arc<str>,
    /// `host:port` of every broker: the clients' `bootstrap.servers`. Shared, as is all of an
    /// `Env` but its start: each send's completion task holds a copy.
    pub servers: Arc<[String]>,
    /// The controller node that last became active, with its term (Raft quorums only).
    active_controller: Arc<Mutex<Option<(u64, String)>>>,
    /// Per partition, the highest end of the log some client was shown as committed: past a
    /// record a consumer polled, or an acks=all write acknowledged (its leader's high watermark
    /// was past it). The final read does not stop below it while a leader can still answer
    /// more (a zombie leader's stale end, a new leader's lagging high watermark).
    seen_ends: Arc<Mutex<BTreeMap<TopicPartition, i64>>>,
}

impl Env {
    /// A new environment whose clock starts now, with room for about `expected_ops` operations
    /// (the history then grows without copying itself over and over).
    pub fn new(servers: Vec<String>, expected_ops: usize) -> Env {
        let time = madsim::time::TimeHandle::current();
        Env {
            recorder: Arc::new(Mutex::new(Recorder::with_capacity(expected_ops))),
            start: tokio::time::Instant::now(),
            start_elapsed: time.elapsed(),
            time,
            bootstrap: servers
                .first()
                .map_or_else(|| "".into(), |first| first.as_str().into()),
            servers: servers.into(),
            active_controller: Arc::default(),
            seen_ends: Arc::default(),
        }
    }

    /// Notes that a client was shown `partition`'s committed log reaching `end`.
    pub fn saw_end(&self, partition: &TopicPartition, end: i64) {
        let mut ends = self
            .seen_ends
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match ends.get_mut(partition) {
            Some(seen) => *seen = (*seen).max(end),
            None => {
                ends.insert(partition.clone(), end);
            }
        }
    }

    /// The highest committed end of `partition` any client was shown (0: none).
    pub fn seen_end(&self, partition: &TopicPartition) -> i64 {
        self.seen_ends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(partition)
            .copied()
            .unwrap_or(0)
    }

    /// The controller node that became active in the highest term so far, if any did.
    pub fn active_controller(&self) -> Option<String> {
        self.active_controller
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(_, node)| node.clone())
    }

    /// Simulated nanoseconds since the run started.
    pub fn now_ns(&self) -> u64 {
        self.time
            .elapsed()
            .saturating_sub(self.start_elapsed)
            .as_nanos() as u64
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
    pub fn event(&self, actor: &str, body: Body) {
        self.record(|recorder, now| recorder.event(now, actor, body));
    }

    /// Records a nemesis event.
    pub fn nemesis(&self, nemesis: Nemesis) {
        self.event("nemesis", Body::Nemesis(nemesis));
    }

    /// Takes the recorder out (end of run).
    pub fn take_recorder(&self) -> Recorder {
        std::mem::take(&mut self.recorder.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The cluster monitor every broker's observer feeds (replicated scenarios only).
pub type SharedMonitor = Arc<Mutex<ClusterMonitor>>;

/// Puts a broker's events into the history as operations of its node, and feeds them to the
/// cluster monitor, whose violations go into the history too.
pub struct HistoryObserver {
    env: Env,
    node: String,
    names: Mutex<BTreeMap<TopicPartition, Partition>>,
    monitor: Option<SharedMonitor>,
}

impl HistoryObserver {
    /// The observer of broker `node`.
    pub fn new(env: &Env, node: &str, monitor: Option<SharedMonitor>) -> HistoryObserver {
        HistoryObserver {
            env: env.clone(),
            node: node.to_owned(),
            names: Mutex::default(),
            monitor,
        }
    }

    fn monitor(&self, event: &BrokerEvent) {
        let Some(monitor) = &self.monitor else {
            return;
        };
        let violations = monitor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .on_event(&self.node, event);
        for violation in violations {
            let body = Body::Invariant {
                check: violation.check,
                partition: self.name(&violation.partition),
                detail: violation.detail,
            };
            self.env.event(INVARIANTS, body);
        }
    }

    fn name(&self, partition: &TopicPartition) -> Partition {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(name) = names.get(partition) {
            return Arc::clone(name);
        }
        let name: Partition = partition.to_string().into();
        names.insert(partition.clone(), Arc::clone(&name));
        name
    }
}

impl BrokerObserver for HistoryObserver {
    fn on_event(&self, event: &BrokerEvent) {
        self.monitor(event);
        let body = match event {
            BrokerEvent::HighWatermark { partition, offset } => Body::HighWatermark {
                partition: self.name(partition),
                offset: *offset,
            },
            BrokerEvent::LogStartOffset { partition, offset } => Body::LogStart {
                partition: self.name(partition),
                offset: *offset,
            },
            BrokerEvent::Truncated {
                partition,
                from_offset,
                reason,
            } => Body::Truncate {
                partition: self.name(partition),
                from_offset: *from_offset,
                reason: reason.clone(),
            },
            BrokerEvent::Leader {
                partition,
                leader_epoch,
            } => Body::Leader {
                partition: self.name(partition),
                epoch: *leader_epoch,
            },
            BrokerEvent::Offline { partition, reason } => Body::Offline {
                partition: self.name(partition),
                reason: reason.clone(),
            },
            BrokerEvent::ControllerActive { term } => {
                let mut active = self
                    .env
                    .active_controller
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if active.as_ref().is_none_or(|(seen, _)| *term > *seen) {
                    *active = Some((*term, self.node.clone()));
                }
                Body::Controller { term: *term }
            }
            // The monitor's food: too many to record, and what they break is recorded.
            BrokerEvent::Appended { .. } | BrokerEvent::PartitionState { .. } => return,
            BrokerEvent::CommitAdmitted {
                partition,
                group,
                member,
                generation,
                group_generation,
                member_known,
            } => {
                // Recorded only when the coordinator should have fenced it.
                let Some(detail) =
                    unfenced_commit(group, member, *generation, *group_generation, *member_known)
                else {
                    return;
                };
                let body = Body::Invariant {
                    check: Check::UnfencedCommit,
                    partition: self.name(partition),
                    detail: format!("{} admitted {detail}", self.node),
                };
                self.env.event(INVARIANTS, body);
                return;
            }
        };
        self.env.event(&self.node, body);
    }
}

/// Why the coordinator should have refused a commit it admitted (`unfenced-commit`): a commit
/// that names a generation must come from a member of the group's current generation, as
/// Kafka's `GroupCoordinator` requires (a simple consumer's commit, generation -1, is not
/// fenced).
fn unfenced_commit(
    group: &str,
    member: &str,
    generation: i32,
    group_generation: i32,
    member_known: bool,
) -> Option<String> {
    if generation < 0 {
        None
    } else if !member_known {
        Some(format!(
            "a commit of group {group} by {member}, not a member of generation {group_generation}"
        ))
    } else if generation != group_generation {
        Some(format!(
            "a commit of group {group} in generation {generation} while the group was in generation {group_generation}"
        ))
    } else {
        None
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
    /// Values sent and not (yet) acknowledged, with their partition index: what an
    /// `on_restart = "resend-unacknowledged"` incarnation sends again.
    unacknowledged: ValueMap<i32>,
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

/// The shortest sleep madsim performs (`../shared/notes/madsim.md`: sleeps are at least 1 ms).
const MIN_SLEEP: Duration = Duration::from_millis(1);

/// The values one producer incarnation sends: first, if its spec says so, what earlier
/// incarnations sent without an acknowledgement, then new values up to `messages` in all.
struct Values<'a> {
    spec: &'a ProducerSpec,
    progress: &'a SharedProgress,
    process: u64,
    sequence: u64,
    resends: std::vec::IntoIter<(Value, i32)>,
}

impl<'a> Values<'a> {
    fn new(spec: &'a ProducerSpec, progress: &'a SharedProgress, process: u64) -> Values<'a> {
        // In value order, as they were first sent.
        let resends: Vec<(Value, i32)> = match spec.on_restart {
            OnRestart::Continue => Vec::new(),
            OnRestart::ResendUnacknowledged => std::mem::take(
                &mut progress
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .unacknowledged,
            )
            .iter()
            .map(|(value, index)| (value, *index))
            .collect(),
        };
        Values {
            spec,
            progress,
            process,
            sequence: 0,
            resends: resends.into_iter(),
        }
    }

    /// The next value and its partition index (drawn from the seed for a new value), counted
    /// as unacknowledged until its send is; `None` once the workload is done.
    fn next(&mut self) -> Option<(Value, i32)> {
        let mut progress = self.progress.lock().unwrap_or_else(PoisonError::into_inner);
        let next = if let Some(resend) = self.resends.next() {
            resend
        } else {
            if progress.issued >= self.spec.messages {
                return None;
            }
            progress.issued += 1;
            self.sequence += 1;
            let value = Value {
                process: self.process,
                sequence: self.sequence,
            };
            let index = madsim::rand::thread_rng().gen_range(0..self.spec.partitions);
            (value, index)
        };
        progress.unacknowledged.insert(next.0, next.1);
        Some(next)
    }
}

/// Waits before the next send: `interval`, or, below madsim's shortest sleep, until the next
/// due time (`due` moves on by `interval`), so that records due in the same millisecond go
/// back to back.
async fn pace(interval: Duration, due: &mut tokio::time::Instant) {
    if interval >= MIN_SLEEP {
        tokio::time::sleep(interval).await;
    } else {
        *due += interval;
        if *due > tokio::time::Instant::now() {
            tokio::time::sleep_until(*due).await;
        }
    }
}

/// One incarnation of a producer node.
pub async fn producer_incarnation(env: Env, spec: ProducerSpec, progress: SharedProgress) {
    let process = env.record(|recorder, _| recorder.new_process());
    let node: Arc<str> = spec.id.as_str().into();
    let names: Vec<Partition> = (0..spec.partitions)
        .map(|partition| format!("{}-{partition}", spec.topic).into())
        .collect();
    let mut config = spec.config.clone();
    config.bootstrap_servers = env.servers.to_vec();
    config.client_id.clone_from(&spec.id);
    let acks_all = config.acks == seedlog::config::producer::Acks::All;
    let producer = Producer::start(config).expect("the scenario loader validated this config");
    let interval = Duration::from_secs_f64(spec.interval_ms / 1000.0);
    // madsim's sleeps last at least 1 ms: above 1,000 records a second, pace by a due time and
    // send the records due in the same millisecond back to back (a sleep per record would cap
    // the rate at 1,000).
    let mut due = tokio::time::Instant::now();
    let mut completions = Vec::new();
    let mut values = Values::new(&spec, &progress, process);
    let mut text = Vec::new();
    let clocks = madsim::plugin::simulator::<crate::clock::SimClocks>();
    let here = madsim::plugin::node();
    while let Some((value, index)) = values.next() {
        let partition = Arc::clone(&names[index as usize]);
        let send = move |offset| Body::Send {
            partition: Arc::clone(&partition),
            value,
            offset,
        };
        let invoke = env.record(|recorder, now| recorder.invoke(now, process, &node, send(None)));
        let record = ProducerRecord {
            topic: spec.topic.clone(),
            partition: Some(index),
            key: None,
            value: Some(value_bytes(&mut text, value)),
            // CreateTime from the (simulated) wall clock, as a Kafka producer stamps it.
            timestamp_ms: clocks.wall_clock_ms(here),
        };
        let delivery = producer.send(record).await;
        let topic_partition = TopicPartition::new(spec.topic.as_str(), index);
        let env = env.clone();
        let progress = Arc::clone(&progress);
        completions.push(tokio::spawn(async move {
            let completion = match delivery.wait().await {
                Ok(written) => {
                    if acks_all {
                        // acks=all answers once the high watermark is past the record.
                        env.saw_end(&topic_partition, written.offset + 1);
                    }
                    progress
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .unacknowledged
                        .remove(&value);
                    Completion::Ok(send(Some(written.offset)))
                }
                Err(ProduceError::Rejected { error, message }) => {
                    Completion::Fail(format!("{error:?}: {message}"))
                }
                Err(ProduceError::Indeterminate { reason }) => Completion::Info(reason),
            };
            env.record(|recorder, now| recorder.complete(now, invoke, completion));
        }));
        pace(interval, &mut due).await;
    }
    for completion in completions {
        let _ = completion.await;
    }
    progress
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .finished = true;
}

/// A value's bytes as its record carries them (`process-sequence`), written in a buffer the
/// caller keeps: one allocation a record, for the bytes themselves.
fn value_bytes(text: &mut Vec<u8>, value: Value) -> Bytes {
    text.clear();
    value.write_bytes(text);
    Bytes::copy_from_slice(text)
}

/// A consumer reads only below the high watermark: each record it polled shows the log's
/// committed end past it.
fn note_seen_ends(env: &Env, records: &[ConsumerRecord]) {
    for run in records.chunk_by(|a, b| a.topic_partition == b.topic_partition) {
        let last = run.last().expect("chunks are not empty");
        env.saw_end(&last.topic_partition, last.offset + 1);
    }
}

/// Records of a poll in the history's shape.
fn records_of(
    records: &[ConsumerRecord],
    names: &mut BTreeMap<TopicPartition, Partition>,
) -> Records {
    let mut grouped = Records::new();
    // A poll's records come partition by partition: a name and an entry a run of them.
    for run in records.chunk_by(|a, b| a.topic_partition == b.topic_partition) {
        let topic_partition = &run[0].topic_partition;
        // The partition's key and name are made once, for its first record.
        if !names.contains_key(topic_partition) {
            let name: Partition = topic_partition.to_string().into();
            names.insert(topic_partition.clone(), name);
        }
        let entries = grouped
            .entry(Arc::clone(&names[topic_partition]))
            .or_default();
        for record in run {
            let text = record.value.as_deref().unwrap_or_default();
            let value = Value::parse_bytes(text).unwrap_or_else(|| {
                panic!(
                    "{}@{} holds {text:?}, which no producer of this run wrote",
                    record.topic_partition, record.offset
                )
            });
            entries.push((record.offset, value));
        }
    }
    grouped
}

fn error_of(error: &PartitionError) -> history::PartitionError {
    history::PartitionError {
        partition: error.partition.to_string().into(),
        error: error.error.name().to_uppercase(),
        position: error.position,
    }
}

/// A consumer incarnation as the history sees it.
struct Reader<'a> {
    env: &'a Env,
    process: u64,
    node: Arc<str>,
    names: BTreeMap<TopicPartition, Partition>,
}

impl Reader<'_> {
    /// One poll, recorded as an invocation, the resets it made, and its completion.
    async fn poll(&mut self, consumer: &mut Consumer, timeout: Duration) -> Option<Polled> {
        let (process, node) = (self.process, Arc::clone(&self.node));
        let invoke = self
            .env
            .record(|recorder, now| recorder.invoke(now, process, &node, Body::poll_invocation()));
        match consumer.poll(timeout).await {
            Ok(polled) => {
                note_seen_ends(self.env, &polled.records);
                let records = records_of(&polled.records, &mut self.names);
                let errors = polled.errors.iter().map(error_of).collect();
                self.env.record(|recorder, now| {
                    for reset in &polled.resets {
                        let reason = match reset.reason {
                            ResetReason::NoPosition => "no-position".to_owned(),
                            ResetReason::OffsetOutOfRange { position } => {
                                format!("offset {position} out of range")
                            }
                            ResetReason::LogTruncation { position } => {
                                format!("log truncated below position {position}")
                            }
                        };
                        let body = Body::Position {
                            seek: false,
                            partition: reset.partition.to_string().into(),
                            offset: reset.offset,
                            reason,
                        };
                        recorder.client_event(now, process, &node, body);
                    }
                    recorder.complete(now, invoke, Completion::Ok(Body::Poll { records, errors }));
                    for detail in &polled.breaches {
                        let body = Body::Breach {
                            detail: detail.clone(),
                        };
                        recorder.client_event(now, process, &node, body);
                    }
                });
                Some(polled)
            }
            Err(error) => {
                self.env.record(|recorder, now| {
                    recorder.complete(now, invoke, Completion::Info(error.to_string()))
                });
                tokio::time::sleep(Duration::from_millis(100)).await;
                None
            }
        }
    }

    fn event(&self, body: Body) {
        let (process, node) = (self.process, Arc::clone(&self.node));
        self.env
            .record(|recorder, now| recorder.client_event(now, process, &node, body));
    }
}

/// One incarnation of a consumer node: polls until `stop`.
pub async fn consumer_incarnation(env: Env, spec: ConsumerSpec, stop: Arc<AtomicBool>) {
    if spec.group.is_some() {
        return group_consumer_incarnation(env, spec, stop).await;
    }
    let process = env.record(|recorder, _| recorder.new_process());
    let mut reader = Reader {
        env: &env,
        process,
        node: spec.id.as_str().into(),
        names: BTreeMap::new(),
    };
    let mut config = spec.config.clone();
    config.bootstrap_servers = env.servers.to_vec();
    config.client_id.clone_from(&spec.id);
    let mut consumer = Consumer::new(config).expect("the scenario loader validated this config");
    consumer.assign(&spec.partitions);
    reader.event(Body::Assign {
        partitions: spec
            .partitions
            .iter()
            .map(|partition| partition.to_string().into())
            .collect(),
    });
    while !stop.load(Ordering::SeqCst) {
        reader
            .poll(&mut consumer, Duration::from_millis(spec.poll_timeout_ms))
            .await;
    }
}

/// The final reader's progress in one partition.
#[derive(Debug, Default)]
struct FinalProgress {
    start: i64,
    end: i64,
    /// Why it stopped before the end, for good.
    stopped: Option<(i64, String)>,
    /// The last error it retried through.
    last_error: Option<String>,
    skipped: Vec<(i64, i64)>,
}

/// After healing: read every partition from its start to its end offset, skipping corrupt
/// batches it can step over, then record for each partition how far the read got (the
/// checkers' evidence for `lost-write`).
pub async fn final_read(
    env: Env,
    partitions: Vec<TopicPartition>,
    retention: BTreeMap<String, u64>,
    deadline: tokio::time::Instant,
) {
    let process = env.record(|recorder, _| recorder.new_process());
    let mut reader = Reader {
        env: &env,
        process,
        node: FINAL_READER.into(),
        names: BTreeMap::new(),
    };
    let mut consumer = final_consumer(&env, 0);
    let mut progress = final_snapshot(&env, &mut consumer, &partitions, deadline).await;
    consumer.assign(&partitions);
    let done = |consumer: &Consumer, progress: &BTreeMap<TopicPartition, FinalProgress>| {
        progress.iter().all(|(partition, read)| {
            read.stopped.is_some()
                || read.end <= read.start
                || consumer
                    .position(partition)
                    .is_some_and(|position| position >= read.end)
        })
    };
    let mut timestamps: BTreeMap<TopicPartition, Vec<(i64, i64)>> = BTreeMap::new();
    while tokio::time::Instant::now() < deadline && !done(&consumer, &progress) {
        let Some(polled) = reader.poll(&mut consumer, Duration::from_millis(500)).await else {
            continue;
        };
        for record in &polled.records {
            timestamps
                .entry(record.topic_partition.clone())
                .or_default()
                .push((record.offset, record.timestamp_ms));
        }
        for error in &polled.errors {
            on_final_read_error(&mut reader, &mut consumer, &mut progress, error);
        }
        // OFFSET_OUT_OF_RANGE moved the read to a later log start: retention deleted what lay
        // below it during the read, and the final log starts there.
        for reset in &polled.resets {
            if let Some(read) = progress.get_mut(&reset.partition) {
                read.start = read.start.max(reset.offset.min(read.end));
            }
        }
    }
    probe_timestamps(&mut reader, &mut consumer, &progress, &timestamps, deadline).await;
    probe_retention(
        &mut reader,
        &mut consumer,
        &partitions,
        &retention,
        deadline,
    )
    .await;
    for partition in &partitions {
        let read = final_read_of(partition, progress.remove(partition), &consumer);
        env.event(FINAL_READER, Body::FinalRead(read));
    }
}

/// What the final read found in one partition: how far it got, and why it stopped short.
fn final_read_of(
    partition: &TopicPartition,
    progress: Option<FinalProgress>,
    consumer: &Consumer,
) -> FinalRead {
    let name = partition.to_string().into();
    let Some(read) = progress else {
        // The broker never answered the end offsets (the partition stayed offline, say): the
        // final read says nothing about this partition's log.
        return FinalRead {
            partition: name,
            log_start_offset: 0,
            end_offset: 0,
            read_to: 0,
            reached_end: false,
            error: Some("no end offsets before the deadline".to_owned()),
            skipped: Vec::new(),
        };
    };
    let position = consumer.position(partition).unwrap_or(read.start);
    let (read_to, error) = match read.stopped {
        Some((at, why)) => (at, Some(why)),
        None => (position.min(read.end.max(read.start)), read.last_error),
    };
    FinalRead {
        partition: name,
        log_start_offset: read.start,
        end_offset: read.end,
        read_to,
        reached_end: read_to >= read.end,
        error,
        skipped: read.skipped,
    }
}

/// Retention's contract (Kafka's `deleteOldSegments`): once `retention.ms` has passed since a
/// topic's last write (plus the check interval, the flush interval and a second of slack),
/// every record has expired, the active segment is rolled, and the whole log goes: ListOffsets
/// earliest must equal latest. Producers have finished by now; a log that still holds records is
/// a breach. Skipped when the wait would outlast the liveness phase.
async fn probe_retention(
    reader: &mut Reader<'_>,
    consumer: &mut Consumer,
    partitions: &[TopicPartition],
    retention: &BTreeMap<String, u64>,
    deadline: tokio::time::Instant,
) {
    let Some(wait) = retention.values().max() else {
        return;
    };
    let until = tokio::time::Instant::now() + Duration::from_millis(*wait);
    if until + Duration::from_secs(5) >= deadline {
        return;
    }
    tokio::time::sleep_until(until).await;
    let asked: Vec<TopicPartition> = partitions
        .iter()
        .filter(|partition| retention.contains_key(&*partition.topic))
        .cloned()
        .collect();
    let (Ok(starts), Ok(ends)) = (
        consumer.list_offsets(&asked, -2).await,
        consumer.list_offsets(&asked, -1).await,
    ) else {
        return; // no answer says nothing about retention
    };
    for ((partition, start), (_, end)) in starts.iter().zip(&ends) {
        if start < end {
            reader.event(Body::Breach {
                detail: format!(
                    "{partition} still holds offsets {start}..{end} {wait} ms after its last write, \
                     past retention.ms, the check interval and the flush interval"
                ),
            });
        }
    }
}

/// ListOffsets by timestamp, judged against the final read: for a few timestamps taken from
/// the records read, the broker must answer the first offset whose record's timestamp is at or
/// after it (Kafka's `offsetsForTimes`). Only partitions read whole, from their log start with
/// no gap, skip or stop, are asked; a wrong answer is recorded as a breach.
async fn probe_timestamps(
    reader: &mut Reader<'_>,
    consumer: &mut Consumer,
    progress: &BTreeMap<TopicPartition, FinalProgress>,
    timestamps: &BTreeMap<TopicPartition, Vec<(i64, i64)>>,
    deadline: tokio::time::Instant,
) {
    for (partition, read) in progress {
        let Some(seen) = timestamps.get(partition) else {
            continue;
        };
        let whole = read.stopped.is_none()
            && read.skipped.is_empty()
            && seen
                .first()
                .is_some_and(|(offset, _)| *offset == read.start)
            && seen.windows(2).all(|pair| pair[1].0 == pair[0].0 + 1)
            && seen
                .last()
                .is_some_and(|(offset, _)| *offset + 1 >= read.end);
        if !whole {
            continue;
        }
        let picks = [
            0,
            seen.len() / 3,
            seen.len() / 2,
            seen.len() * 2 / 3,
            seen.len() - 1,
        ];
        let targets: BTreeSet<i64> = picks
            .iter()
            .flat_map(|&at| [seen[at].1, seen[at].1 + 1])
            .collect();
        for target in targets {
            let Some(&(expected, _)) = seen.iter().find(|(_, timestamp)| *timestamp >= target)
            else {
                continue; // only a record past the read could answer
            };
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            let asked = std::slice::from_ref(partition);
            let Ok(answer) = consumer.list_offsets(asked, target).await else {
                continue; // a failed call says nothing about the log
            };
            // Retention may have moved the log start past the records read: the read no longer
            // says what the answer must be.
            let start = consumer.list_offsets(asked, -2).await;
            let start = start
                .ok()
                .and_then(|starts| starts.first().map(|(_, offset)| *offset));
            if start != Some(read.start) {
                break;
            }
            let answered = answer.first().map(|(_, offset)| *offset);
            if answered != Some(expected) {
                reader.event(Body::Breach {
                    detail: format!(
                        "ListOffsets {partition} at timestamp {target} answered {answered:?}; \
                         the final read found the first record at or after it at offset {expected}"
                    ),
                });
            }
        }
        probe_max_timestamp(reader, consumer, partition, seen).await;
    }
}

/// ListOffsets -3 (the record with the largest timestamp, KIP-734), judged when the log end
/// stayed where the final read ended: then the first record holding the largest timestamp the
/// read saw is the answer, or none at all (Kafka answers none when the record with the largest
/// timestamp in its log lies past the high watermark, which the read cannot see).
async fn probe_max_timestamp(
    reader: &mut Reader<'_>,
    consumer: &mut Consumer,
    partition: &TopicPartition,
    seen: &[(i64, i64)],
) {
    const MAX_TIMESTAMP: i64 = -3;
    let asked = std::slice::from_ref(partition);
    let read_end = seen.last().map_or(0, |(offset, _)| offset + 1);
    let log_end = |answer: Result<Vec<(TopicPartition, i64)>, _>| {
        answer
            .ok()
            .and_then(|offsets| offsets.first().map(|(_, offset)| *offset))
    };
    if log_end(consumer.list_offsets(asked, -1).await) != Some(read_end) {
        return; // the log grew past the read (or did not answer): the read cannot judge
    }
    let answer = consumer.list_offsets(asked, MAX_TIMESTAMP).await;
    if log_end(consumer.list_offsets(asked, -1).await) != Some(read_end) {
        return;
    }
    let Ok(answer) = answer else {
        return;
    };
    let max = seen.iter().map(|(_, timestamp)| *timestamp).max();
    let expected = seen
        .iter()
        .find(|(_, timestamp)| Some(*timestamp) == max)
        .map(|(offset, _)| *offset);
    let answered = answer
        .first()
        .map(|(_, offset)| *offset)
        .filter(|offset| *offset >= 0);
    if answered.is_some() && answered != expected {
        reader.event(Body::Breach {
            detail: format!(
                "ListOffsets {partition} at -3 (max timestamp) answered {answered:?}; the final \
                 read found the first record with the largest timestamp at {expected:?}"
            ),
        });
    }
}

/// The final reader's consumer, bootstrapping from the brokers in order starting at `first`
/// (a retry asks another broker first: one that has not heard of a leader change, a zombie
/// leader itself, answers metadata naming the old leader).
fn final_consumer(env: &Env, first: usize) -> Consumer {
    let mut config = ConsumerConfig::default();
    let count = env.servers.len().max(1);
    let servers = (0..env.servers.len())
        .map(|index| env.servers[(first + index) % count].as_str())
        .collect::<Vec<_>>()
        .join(",");
    config
        .apply([
            ("bootstrap.servers", servers.as_str()),
            ("client.id", FINAL_READER),
            ("auto.offset.reset", "earliest"),
            ("request.timeout.ms", "5000"),
        ])
        .expect("a valid consumer config");
    Consumer::new(config).expect("valid")
}

/// How long the final read keeps asking when a leader answers an end offset below one a client
/// was already shown, before it takes the answer as the log's end (a loss, then).
const FINAL_SNAPSHOT_SETTLE: Duration = Duration::from_secs(10);

/// Every partition's log start and end offsets (each `final-read` event records them). An end
/// below what some client was already shown as committed (`Env::seen_end`) is asked again,
/// through another broker's metadata, for up to [`FINAL_SNAPSHOT_SETTLE`]: it comes from a
/// zombie leader that has not heard it was replaced, or from a new leader whose high watermark
/// still lags (KIP-207's OFFSET_NOT_AVAILABLE covers that on the broker side), and a final read
/// that stopped there would report what every replica still holds as lost.
async fn final_snapshot(
    env: &Env,
    consumer: &mut Consumer,
    partitions: &[TopicPartition],
    deadline: tokio::time::Instant,
) -> BTreeMap<TopicPartition, FinalProgress> {
    // Recorded before the end offsets are asked for: every write acknowledged before this point
    // lies below the end offsets the current leaders answer (a leader's end never goes below
    // what a client was shown, and the wait below passes over leaders that would), so the
    // checkers judge exactly those writes against the final read.
    env.event(FINAL_READER, Body::FinalReadStart);
    let settle_until = (tokio::time::Instant::now() + FINAL_SNAPSHOT_SETTLE).min(deadline);
    let mut progress: BTreeMap<TopicPartition, FinalProgress> = BTreeMap::new();
    let mut attempt = 0;
    while tokio::time::Instant::now() < deadline && progress.len() < partitions.len() {
        let (Ok(ends), Ok(starts)) = (
            consumer.list_offsets(partitions, -1).await,
            consumer.list_offsets(partitions, -2).await,
        ) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let short = ends
            .iter()
            .any(|(partition, end)| *end < env.seen_end(partition));
        if short && tokio::time::Instant::now() < settle_until {
            attempt += 1;
            *consumer = final_consumer(env, attempt);
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let starts: BTreeMap<TopicPartition, i64> = starts.into_iter().collect();
        progress = ends
            .into_iter()
            .map(|(partition, end)| {
                let start = starts.get(&partition).copied().unwrap_or(0);
                let read = FinalProgress {
                    start,
                    end,
                    ..FinalProgress::default()
                };
                (partition, read)
            })
            .collect();
    }
    progress
}

/// A corrupt batch whose header parsed is stepped over (recorded as a seek); one that cannot be
/// stepped over stops the read of that partition; anything else is retried.
fn on_final_read_error(
    reader: &mut Reader<'_>,
    consumer: &mut Consumer,
    progress: &mut BTreeMap<TopicPartition, FinalProgress>,
    error: &PartitionError,
) {
    let Some(read) = progress.get_mut(&error.partition) else {
        return;
    };
    let name = error.error.name().to_uppercase();
    if error.error != ErrorCode::CorruptMessage {
        read.last_error = Some(format!("{name} at {}", error.position));
        return;
    }
    match error.batch_last_offset {
        Some(last) if last >= error.position => {
            read.skipped.push((error.position, last));
            consumer.seek(&error.partition, last + 1);
            reader.event(Body::Position {
                seek: true,
                partition: error.partition.to_string().into(),
                offset: last + 1,
                reason: format!("skip the corrupt batch {}..={last}", error.position),
            });
        }
        _ => read.stopped = Some((error.position, format!("{name} at {}", error.position))),
    }
}

/// A group member's incarnation as the history sees it.
struct Member {
    env: Env,
    process: u64,
    node: Arc<str>,
    group: Arc<str>,
    names: BTreeMap<TopicPartition, Partition>,
    /// The asynchronous commits invoked and not yet answered, oldest first.
    async_commits: VecDeque<(u64, Body)>,
}

impl Member {
    /// A `commit` operation's body.
    fn commit_body(&self, generation: i32, offsets: &BTreeMap<TopicPartition, i64>) -> Body {
        Body::Commit {
            group: Arc::clone(&self.group),
            generation,
            offsets: offsets
                .iter()
                .map(|(partition, offset)| (partition.to_string().into(), *offset))
                .collect(),
        }
    }

    /// Records a commit's invocation.
    fn invoke_commit(&self, body: Body) -> u64 {
        let (process, node) = (self.process, Arc::clone(&self.node));
        self.env
            .record(|recorder, now| recorder.invoke(now, process, &node, body))
    }

    /// Records how a commit ended.
    fn complete_commit(&self, invoke: u64, body: Body, outcome: &Result<(), ClientError>) {
        let completion = match outcome {
            Ok(()) => Completion::Ok(body),
            Err(ClientError::Kafka { error, .. }) => Completion::Fail(error.name().to_uppercase()),
            Err(other) => Completion::Info(other.to_string()),
        };
        self.env
            .record(|recorder, now| recorder.complete(now, invoke, completion));
    }

    /// Commits `offsets` in the member's generation, recorded as a `commit` operation.
    async fn commit(
        &mut self,
        member: &mut GroupMember,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> bool {
        self.try_commit(member, offsets).await.is_ok()
    }

    /// [`commit`](Self::commit), answering how it ended.
    async fn try_commit(
        &mut self,
        member: &mut GroupMember,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<(), ClientError> {
        if offsets.is_empty() {
            return Ok(());
        }
        // Asynchronous commits still in flight are answered first (the member reads them
        // before its next call).
        let body = self.commit_body(member.generation(), offsets);
        let invoke = self.invoke_commit(body.clone());
        let outcome = member.commit(offsets).await;
        self.settle_async_commits(member);
        self.complete_commit(invoke, body, &outcome);
        outcome
    }

    /// Commits `offsets` without waiting (`commitAsync`): the operation is invoked now and
    /// completes when the member reports its answer.
    async fn commit_async(
        &mut self,
        member: &mut GroupMember,
        offsets: BTreeMap<TopicPartition, i64>,
    ) {
        if offsets.is_empty() {
            return;
        }
        let body = self.commit_body(member.generation(), &offsets);
        let invoke = self.invoke_commit(body.clone());
        self.async_commits.push_back((invoke, body));
        member.commit_async(offsets).await;
        self.settle_async_commits(member);
    }

    /// Completes the asynchronous commits the member has answered (they answer in order).
    fn settle_async_commits(&mut self, member: &mut GroupMember) {
        for outcome in member.take_commit_outcomes() {
            let Some((invoke, body)) = self.async_commits.pop_front() else {
                break;
            };
            self.complete_commit(invoke, body, &outcome.result);
        }
    }

    /// Processes a poll's records one at a time: each takes `processing_ms`, then counts as
    /// processed (so a crash can land in the middle of a poll's records). Heartbeats go on
    /// meanwhile, as the Java consumer's heartbeat thread sends them.
    async fn process(
        &mut self,
        member: &mut GroupMember,
        records: &[ConsumerRecord],
        processing_ms: u64,
    ) {
        for record in records {
            if processing_ms > 0 {
                tokio::time::sleep(Duration::from_millis(processing_ms)).await;
            }
            let _ = member.heartbeat_if_due().await;
            let records = records_of(std::slice::from_ref(record), &mut self.names);
            let (process, node) = (self.process, Arc::clone(&self.node));
            let body = Body::Process {
                group: Arc::clone(&self.group),
                records,
            };
            self.env
                .record(|recorder, now| recorder.client_event(now, process, &node, body));
        }
    }
}

/// The next position of each partition the records came from.
fn positions_after(records: &[ConsumerRecord]) -> BTreeMap<TopicPartition, i64> {
    let mut positions = BTreeMap::new();
    for record in records {
        positions.insert(record.topic_partition.clone(), record.offset + 1);
    }
    positions
}

/// What a (re)join gave.
enum Joined {
    /// The member was already in a generation.
    Already,
    /// A new generation with this assignment, not positioned yet.
    New(Vec<TopicPartition>),
    /// The join failed: try again.
    Failed,
}

/// Joins (or rejoins) the group, recording the assignment it got; `listener` hears of the
/// partitions that move.
async fn take_assignment(
    recorder: &mut Member,
    member: &mut GroupMember,
    application: &mut Application,
) -> Joined {
    let mut listener = RevokeCommit {
        recorder: &mut *recorder,
        positions: &mut application.positions,
        commit: application.processing == Processing::CommitAsync && application.commit_on_revoke,
    };
    let joined = member.ensure_active(&mut listener).await;
    let (generation, assignment) = match joined {
        Ok(Some(joined)) => joined,
        Ok(None) => return Joined::Already,
        Err(_) => return Joined::Failed,
    };
    let (process, node) = (recorder.process, Arc::clone(&recorder.node));
    let body = Body::Join {
        group: Arc::clone(&recorder.group),
        generation,
        partitions: assignment.iter().map(|p| p.to_string().into()).collect(),
    };
    recorder
        .env
        .record(|history, now| history.client_event(now, process, &node, body));
    Joined::New(assignment)
}

/// Positions the consumer at the committed offsets of `assignment` (`auto.offset.reset` where
/// none is committed); false, with no partition assigned, when OffsetFetch failed. The member
/// keeps its assignment and asks again, as Kafka's consumer refreshes committed offsets on every
/// poll until it has them (the seedlog CLI's group loop does the same).
async fn position(
    member: &mut GroupMember,
    consumer: &mut Consumer,
    assignment: &[TopicPartition],
) -> bool {
    consumer.assign(assignment);
    let Ok(committed) = member.committed(assignment).await else {
        consumer.assign(&[]);
        return false;
    };
    for (partition, (offset, epoch)) in committed {
        consumer.seek_with_epoch(&partition, offset, epoch);
    }
    true
}

/// A group member's application: what it processed since its last auto-commit.
struct Application {
    processing: Processing,
    processing_ms: u64,
    auto_commit: Duration,
    next_auto_commit: tokio::time::Instant,
    processed: BTreeMap<TopicPartition, i64>,
    commit_on_revoke: bool,
    /// Under `commit-async`: the position after the last processed record of each held
    /// partition, which the revocation hook commits synchronously.
    positions: BTreeMap<TopicPartition, i64>,
}

/// The rebalance listener of a `commit-async` member (Kafka's advice for `commitAsync`
/// users): the positions of revoked partitions are committed synchronously (`commit`;
/// `on_revoke = "none"` leaves that out), those of lost partitions dropped.
struct RevokeCommit<'a> {
    recorder: &'a mut Member,
    positions: &'a mut BTreeMap<TopicPartition, i64>,
    commit: bool,
}

impl RebalanceListener for RevokeCommit<'_> {
    async fn on_partitions_revoked(
        &mut self,
        member: &mut GroupMember,
        partitions: &[TopicPartition],
    ) {
        let offsets = take_positions(self.positions, partitions);
        if !self.commit {
            return;
        }
        // The member's commit is Kafka's commitSync: it retries what it may (a lost
        // connection, a moved coordinator) until `default.api.timeout.ms`; a refusal (a
        // fenced generation) ends it, and the next owner starts from the last commit.
        self.recorder.commit(member, &offsets).await;
    }

    async fn on_partitions_assigned(&mut self, _: &mut GroupMember, _: &[TopicPartition]) {}

    async fn on_partitions_lost(&mut self, _: &mut GroupMember, partitions: &[TopicPartition]) {
        take_positions(self.positions, partitions);
    }
}

impl Application {
    fn new(group_spec: &GroupSpec, config: &ConsumerConfig) -> Application {
        let auto_commit = Duration::from_millis(config.auto_commit_interval_ms);
        Application {
            processing: group_spec.processing,
            processing_ms: group_spec.processing_ms,
            auto_commit,
            next_auto_commit: tokio::time::Instant::now() + auto_commit,
            processed: BTreeMap::new(),
            commit_on_revoke: group_spec.commit_on_revoke,
            positions: BTreeMap::new(),
        }
    }

    /// Processes and commits one poll's records as `processing` says.
    async fn handle(
        &mut self,
        recorder: &mut Member,
        member: &mut GroupMember,
        consumer: &mut Consumer,
        records: &[ConsumerRecord],
    ) {
        let positions = positions_after(records);
        member.note_offset_epochs(consumer, positions.keys());
        match self.processing {
            Processing::CommitBefore if !records.is_empty() => {
                if recorder.commit(member, &positions).await {
                    recorder.process(member, records, self.processing_ms).await;
                } else {
                    // Not committed, so not processed: read them again.
                    for record in records.iter().rev() {
                        consumer.seek(&record.topic_partition, record.offset);
                    }
                }
            }
            Processing::CommitAfter if !records.is_empty() => {
                recorder.process(member, records, self.processing_ms).await;
                recorder.commit(member, &positions).await;
            }
            Processing::CommitAsync if !records.is_empty() => {
                recorder.process(member, records, self.processing_ms).await;
                self.positions.extend(positions.clone());
                recorder.commit_async(member, positions).await;
            }
            Processing::AutoCommit => {
                if !records.is_empty() {
                    recorder.process(member, records, self.processing_ms).await;
                    self.processed.extend(positions);
                }
                if tokio::time::Instant::now() >= self.next_auto_commit {
                    self.next_auto_commit = tokio::time::Instant::now() + self.auto_commit;
                    if recorder.commit(member, &self.processed).await {
                        self.processed.clear();
                    }
                }
            }
            _ => {}
        }
    }

    /// Before a rejoin: Kafka's consumer commits what it consumed when auto-commit is on
    /// (unless the scenario's `on_revoke = "none"` leaves that out).
    async fn before_rejoin(&mut self, recorder: &mut Member, member: &mut GroupMember) {
        if self.processing == Processing::AutoCommit && self.commit_on_revoke {
            recorder.commit(member, &self.processed).await;
        }
        self.processed.clear();
    }
}

/// One incarnation of a group member: joins, reads its assignment from the committed offsets
/// (or `auto.offset.reset`), and processes and commits as its `processing` says, heartbeating
/// between polls, until `stop`. Its polls are not `poll` operations (its partitions move): what
/// the history records are `process` events and `commit` operations.
async fn group_consumer_incarnation(env: Env, spec: ConsumerSpec, stop: Arc<AtomicBool>) {
    let group_spec = spec.group.clone().expect("a group member");
    let process = env.record(|recorder, _| recorder.new_process());
    let mut config = spec.config.clone();
    config.bootstrap_servers = env.servers.to_vec();
    config.client_id.clone_from(&spec.id);
    let group: Arc<str> = config.group_id.clone().unwrap_or_default().into();
    let mut member = GroupMember::new(&config, group_spec.topics.clone());
    let mut consumer =
        Consumer::new(config.clone()).expect("the scenario loader validated this config");
    let mut recorder = Member {
        env: env.clone(),
        process,
        node: spec.id.as_str().into(),
        group,
        names: BTreeMap::new(),
        async_commits: VecDeque::new(),
    };
    let body = Body::Subscribe {
        group: Arc::clone(&recorder.group),
        topics: group_spec
            .topics
            .iter()
            .map(|topic| topic.as_str().into())
            .collect(),
    };
    let node = Arc::clone(&recorder.node);
    env.record(|history, now| history.client_event(now, process, &node, body));
    let mut application = Application::new(&group_spec, &config);
    // A new assignment whose committed offsets are not known yet: nothing is polled until
    // they are (a coordinator that died after the join answers OffsetFetch only once found
    // again).
    let mut unpositioned: Option<Vec<TopicPartition>> = None;
    while !stop.load(Ordering::SeqCst) {
        if member.needs_rejoin() {
            application.before_rejoin(&mut recorder, &mut member).await;
            match take_assignment(&mut recorder, &mut member, &mut application).await {
                Joined::Failed => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Joined::New(assignment) => unpositioned = Some(assignment),
                Joined::Already => {}
            }
        }
        let beat = member.heartbeat_if_due().await;
        recorder.settle_async_commits(&mut member);
        if beat.is_err() || member.needs_rejoin() {
            continue;
        }
        if let Some(assignment) = &unpositioned {
            if position(&mut member, &mut consumer, assignment).await {
                unpositioned = None;
            } else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        }
        let timeout = Duration::from_millis(spec.poll_timeout_ms).min(member.until_heartbeat());
        let Ok(polled) = consumer.poll(timeout.max(Duration::from_millis(1))).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        note_seen_ends(&recorder.env, &polled.records);
        application
            .handle(&mut recorder, &mut member, &mut consumer, &polled.records)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::unfenced_commit;

    #[test]
    fn a_commit_is_fenced_unless_its_member_is_in_the_current_generation() {
        assert_eq!(
            unfenced_commit("g", "m", 3, 3, true),
            None,
            "current member and generation"
        );
        assert_eq!(
            unfenced_commit("g", "", -1, 0, false),
            None,
            "a simple consumer's"
        );
        let stale = unfenced_commit("g", "m", 2, 3, true).expect("an older generation");
        assert!(
            stale.contains("in generation 2 while the group was in generation 3"),
            "{stale}"
        );
        let gone = unfenced_commit("g", "m", 3, 3, false).expect("a removed member");
        assert!(gone.contains("not a member of generation 3"), "{gone}");
    }
}
