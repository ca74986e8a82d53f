//! Scenario files (TOML): the cluster, topics, clients with their Kafka configs and workloads,
//! a scripted fault timeline, and what the checkers must find. See docs/SCENARIOS.md.
//!
//! Loading is strict: unknown keys, bad values, invalid Kafka configs (checked with seedlog's own
//! config rules), unknown fault targets and unknown check names are rejected with
//! `file:line: reason`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use kafka_protocol::messages::ApiKey;
use seedlog::broker::{offsets_partition_for, OFFSETS_TOPIC};
use seedlog::client::producer::ProducerCore;
use seedlog::config::{BrokerConfig, Configurable, ConsumerConfig, ProducerConfig, TopicConfig};
use seedlog::protocol::ErrorCode;
use seedlog::runtime::admin::NewTopic;
use seedlog::runtime::server::{api_by_name, FAULT_APIS};
use seedlog::storage::memory::{CrashLevel, FsyncFailure};
use seedlog::types::TopicPartition;
use serde::Deserialize;
use toml::Spanned;

use crate::checker::Check;

use self::faults::FaultFields;
pub(crate) use self::faults::{fields_of, parse_faults, FaultKind, RawFault};
use crate::explore;
pub use crate::explore::{explored_source, DrawnFault, ExploreSpace, FieldDraw, KindSpace};

/// A scenario that failed to load: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct ScenarioError {
    /// The file.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

type ConfigTable = Spanned<BTreeMap<String, Spanned<toml::Value>>>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    scenario: RawMeta,
    cluster: Spanned<RawCluster>,
    #[serde(default)]
    topics: Vec<Spanned<RawTopic>>,
    #[serde(default)]
    producers: Vec<Spanned<RawProducer>>,
    #[serde(default)]
    consumers: Vec<Spanned<RawConsumer>>,
    /// Read per kind by `faults::read_faults`, apart from the rest of the document.
    #[serde(skip)]
    faults: Vec<RawFault>,
    #[serde(default)]
    network: Option<Spanned<RawNetwork>>,
    #[serde(default)]
    disk: Option<Spanned<RawDisk>>,
    #[serde(default)]
    expect: Option<Spanned<RawExpect>>,
    #[serde(default)]
    explore: Option<Spanned<explore::RawExplore>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMeta {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    seed: Option<u64>,
    duration_ms: Spanned<u64>,
    #[serde(default)]
    liveness_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    brokers: Spanned<u32>,
    /// A named safe configuration (`durable`), sized to the cluster: what it sets comes before
    /// `config`, which overrides it.
    #[serde(default)]
    preset: Option<Spanned<String>>,
    /// Controller nodes (0: the one broker is its own controller; 1: a controller node; 2 to 5:
    /// a Raft quorum).
    #[serde(default)]
    controllers: Option<Spanned<u32>>,
    #[serde(default)]
    config: Option<ConfigTable>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopic {
    name: Spanned<String>,
    partitions: Spanned<i32>,
    #[serde(default)]
    replication_factor: Option<Spanned<i16>>,
    #[serde(default)]
    config: Option<ConfigTable>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProducer {
    id: Spanned<String>,
    #[serde(default)]
    config: Option<ConfigTable>,
    workload: Spanned<RawProducerWorkload>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProducerWorkload {
    topic: Spanned<String>,
    messages: u64,
    rate_per_sec: Spanned<f64>,
    #[serde(default)]
    on_restart: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConsumer {
    id: Spanned<String>,
    #[serde(default)]
    config: Option<ConfigTable>,
    #[serde(default)]
    assign: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    subscribe: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    processing: Option<Spanned<RawProcessing>>,
    #[serde(default)]
    poll_timeout_ms: Option<u64>,
    #[serde(default)]
    start_after_ms: Option<Spanned<RawTime>>,
}

/// How a group consumer processes what it polls.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProcessing {
    mode: Spanned<String>,
    #[serde(default)]
    time_ms: Option<u64>,
    #[serde(default)]
    on_revoke: Option<Spanned<String>>,
}

/// A time in a scenario: a number of milliseconds, or `[low, high]` drawn from the seed.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawTime {
    Fixed(u64),
    Range([u64; 2]),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    #[serde(default)]
    latency_ms: Option<Spanned<[u64; 2]>>,
    #[serde(default)]
    packet_loss_rate: Option<Spanned<f64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDisk {
    #[serde(default)]
    fsync_latency_us: Option<Spanned<[u64; 2]>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    #[serde(default)]
    violated: Vec<Spanned<String>>,
    /// Check name -> why this configuration permits it.
    #[serde(default)]
    may_violate: Option<Spanned<BTreeMap<String, Spanned<String>>>>,
    #[serde(default)]
    min_fraction: Option<Spanned<f64>>,
}

/// A producer process and its workload.
#[derive(Debug, Clone)]
pub struct ProducerSpec {
    /// Node name.
    pub id: String,
    /// Kafka producer config (bootstrap and client id are set by the harness).
    pub config: ProducerConfig,
    /// Topic written to.
    pub topic: String,
    /// Partitions of that topic (sends pick one at random).
    pub partitions: i32,
    /// Sends in total, across restarts.
    pub messages: u64,
    /// Pause between two sends.
    pub interval_ms: f64,
    /// What a restarted incarnation does with the values an earlier one sent without an
    /// acknowledgement.
    pub on_restart: OnRestart,
}

/// What a producer application does after a restart with the values its crashed incarnation
/// sent and never saw acknowledged (`workload.on_restart`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRestart {
    /// `"continue"` (the default): it goes on with new values; the unacknowledged ones are
    /// given up.
    Continue,
    /// `"resend-unacknowledged"`: it sends them again, with the same values, before new ones:
    /// an at-least-once application. The new incarnation has a new producer id, so a value the
    /// crashed one had written is written twice (Kafka's idempotence spans one producer id).
    ResendUnacknowledged,
}

/// A consumer process reading assigned partitions until the run ends.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    /// Node name.
    pub id: String,
    /// Kafka consumer config.
    pub config: ConsumerConfig,
    /// Assigned partitions (none for a group member).
    pub partitions: Vec<TopicPartition>,
    /// Timeout of each poll.
    pub poll_timeout_ms: u64,
    /// A member of a consumer group (`group.id` set, `subscribe` instead of `assign`).
    pub group: Option<GroupSpec>,
    /// How long after the scenario starts the consumer's first incarnation starts (drawn from
    /// the seed when a range; restarts after a crash are not delayed).
    pub start_after_ms: Option<TimeSpec>,
}

/// When a group member commits, relative to processing what it polled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Processing {
    /// Commit the polled position, then process: at-most-once (a crash in between loses).
    CommitBefore,
    /// Process, then commit: at-least-once (a crash in between processes again).
    CommitAfter,
    /// Process, then commit without waiting (`commitAsync`), and synchronously on revocation
    /// (unless `on_revoke = "none"`): at-least-once.
    CommitAsync,
    /// Process; commit every `auto.commit.interval.ms` whatever was polled (both can happen).
    AutoCommit,
}

/// A group member's subscription and processing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    /// The subscribed topics.
    pub topics: Vec<String>,
    /// When it commits.
    pub processing: Processing,
    /// How long processing one poll's records takes.
    pub processing_ms: u64,
    /// Whether an auto-committing member commits what it processed before it rejoins (Kafka's
    /// consumer does, `on_revoke = "commit"`; `"none"` is an application that commits on a
    /// timer with no rebalance listener, the faulty variant).
    pub commit_on_revoke: bool,
}

/// Which connection fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionFaultKind {
    /// Close instead of delivering the request.
    DropRequest,
    /// Close instead of sending the response, after the broker applied the request.
    DropResponse,
    /// Send half the response frame, then close.
    ResetMidResponse,
    /// Answer a produce with a Kafka error without applying it (a leader change in flight).
    RejectRequest(ErrorCode),
}

/// A time of a fault: fixed, or drawn uniformly from `[low, high]` by the run's seed (so a
/// fault can land anywhere in a window instead of always at the same point of a workload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSpec {
    /// Exactly this many milliseconds.
    Fixed(u64),
    /// Uniformly drawn from `low..=high` milliseconds.
    Range(u64, u64),
}

impl TimeSpec {
    /// The largest value it can take.
    pub fn max(self) -> u64 {
        match self {
            TimeSpec::Fixed(ms) | TimeSpec::Range(_, ms) => ms,
        }
    }

    /// The smallest value it can take.
    pub fn min(self) -> u64 {
        match self {
            TimeSpec::Fixed(ms) | TimeSpec::Range(ms, _) => ms,
        }
    }
}

/// A crash again soon after a restart: while the node is still recovering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recrash {
    /// Delay after the restart.
    pub after_ms: TimeSpec,
    /// Its level.
    pub level: CrashLevel,
}

/// Which files a `corrupt` fault may hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileSelector {
    /// Segment files (`*.log`).
    Segments,
    /// Files whose name starts with this.
    Prefix(String),
    /// Files whose name starts with `prefix` and ends with `suffix` (`orders-*.log`: that
    /// topic's segments, not its producer-state snapshots).
    Pattern {
        /// What the name starts with.
        prefix: String,
        /// What it ends with.
        suffix: String,
    },
}

impl FileSelector {
    /// Whether `name` is one of them.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            FileSelector::Segments => std::path::Path::new(name)
                .extension()
                .is_some_and(|extension| extension == "log"),
            FileSelector::Prefix(prefix) => name.starts_with(prefix.as_str()),
            FileSelector::Pattern { prefix, suffix } => {
                name.len() >= prefix.len() + suffix.len()
                    && name.starts_with(prefix.as_str())
                    && name.ends_with(suffix.as_str())
            }
        }
    }
}

/// One scripted fault. Fields carry the scenario keys of the same name (docs/SCENARIOS.md).
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum FaultAction {
    /// Kill a node at a crash level, optionally restarting it later (and crashing it again
    /// while it recovers).
    Crash {
        target: String,
        level: CrashLevel,
        restart_after_ms: Option<TimeSpec>,
        recrash: Option<Recrash>,
    },
    /// Restart a killed node.
    Restart { target: String },
    /// Stop a broker cleanly (SIGTERM: drain, flush, the clean-shutdown marker), optionally
    /// restarting it later.
    Stop {
        target: String,
        restart_after_ms: Option<TimeSpec>,
    },
    /// Cut every link between nodes of different groups (both ways).
    Partition {
        groups: Vec<Vec<String>>,
        heal_after_ms: Option<TimeSpec>,
    },
    /// Cut every link to and from one node (Jepsen's isolate nemesis); the target may be a
    /// selector such as `controller-leader`.
    Isolate {
        target: String,
        heal_after_ms: Option<TimeSpec>,
    },
    /// Freeze one node (SIGSTOP: a GC pause, a hung VM): its tasks stop running, its state,
    /// connections and disk stay as they are, and timers that came due run in a burst when it
    /// resumes after `heal_after_ms` (or at the end of the safety phase). The target may be a
    /// selector.
    Pause {
        target: String,
        heal_after_ms: Option<TimeSpec>,
    },
    /// A packet delay spike: every message on the network takes `latency_ms` (drawn per
    /// message) instead of the `[network]` latency, until `heal_after_ms`, a `heal` or the end
    /// of the safety phase.
    Delay {
        latency_ms: (u64, u64),
        heal_after_ms: Option<TimeSpec>,
    },
    /// Hold traffic from one node to another (one way).
    Clog {
        from: String,
        to: String,
        heal_after_ms: Option<TimeSpec>,
    },
    /// Connection faults on a broker's side.
    Connection {
        target: String,
        kind: ConnectionFaultKind,
        api: Option<ApiKey>,
        count: u32,
        probability: f64,
    },
    /// Disk faults on a broker: the next writes or fsyncs fail with EIO; what a failed fsync
    /// does to dirty pages.
    Disk {
        target: String,
        fail_writes: u32,
        fail_syncs: u32,
        on_fsync_failure: FsyncFailure,
    },
    /// A slow disk on a broker: every fsync takes `fsync_latency_us` (drawn per
    /// fsync) instead of the scenario's `[disk]` latency, until `heal_after_ms` or the end of
    /// the safety phase.
    SlowDisk {
        target: String,
        fsync_latency_us: (u64, u64),
        heal_after_ms: Option<TimeSpec>,
    },
    /// A full disk on a broker: its files may grow by `free_bytes` more (drawn when the fault
    /// fires), then writes fail with ENOSPC after writing what fits, until `heal_after_ms` (the
    /// operator freed space) or the end of the safety phase.
    DiskFull {
        target: String,
        free_bytes: (u64, u64),
        heal_after_ms: Option<TimeSpec>,
    },
    /// A node's wall clock skewed by `offset_ms` (drawn when the fault fires; negative is
    /// behind) until `heal_after_ms`. Clients see it at once (record CreateTime); a broker at
    /// its next start.
    ClockSkew {
        target: String,
        offset_ms: (i64, i64),
        heal_after_ms: Option<TimeSpec>,
    },
    /// Flip a byte of a durable sector of one of a broker's files (a latent sector error).
    Corrupt { target: String, files: FileSelector },
    /// Heal every network and connection fault.
    Heal,
}

impl FaultAction {
    /// The node (or selector) the action targets, if it targets one.
    pub fn target_mut(&mut self) -> Option<&mut String> {
        match self {
            FaultAction::Crash { target, .. }
            | FaultAction::Restart { target }
            | FaultAction::Stop { target, .. }
            | FaultAction::Connection { target, .. }
            | FaultAction::Disk { target, .. }
            | FaultAction::Corrupt { target, .. }
            | FaultAction::Isolate { target, .. }
            | FaultAction::Pause { target, .. }
            | FaultAction::SlowDisk { target, .. }
            | FaultAction::DiskFull { target, .. }
            | FaultAction::ClockSkew { target, .. } => Some(target),
            FaultAction::Partition { .. }
            | FaultAction::Clog { .. }
            | FaultAction::Delay { .. }
            | FaultAction::Heal => None,
        }
    }
}

/// A fault at a time.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// Milliseconds after the workload starts.
    pub at_ms: TimeSpec,
    /// What happens.
    pub action: FaultAction,
}

/// What the checkers must find. The default expects every check to hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Expect {
    /// Checks that must be violated (on pinned seeds, and on at least `min_fraction` of a sweep).
    pub violated: BTreeSet<Check>,
    /// Checks that may or may not be violated, each with why the configuration permits it.
    pub may_violate: BTreeMap<Check, String>,
    /// Fraction of seeds in a sweep on which every `violated` check must fire.
    pub min_fraction: f64,
}

impl Expect {
    /// Whether the violations must show on every seed of a sweep (`min_fraction` 1), a property
    /// of each seed, rather than on a share of it, a rate that only a long sweep measures.
    pub fn on_every_seed(&self) -> bool {
        self.min_fraction >= 1.0
    }
}

impl Default for Expect {
    fn default() -> Self {
        Expect {
            violated: BTreeSet::new(),
            may_violate: BTreeMap::new(),
            min_fraction: 1.0,
        }
    }
}

/// A loaded, validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Path as given.
    pub path: String,
    /// Short name.
    pub name: String,
    /// What it shows.
    pub description: String,
    /// The seed to use when none is given.
    pub pinned_seed: Option<u64>,
    /// Length of the safety phase (faults happen inside it).
    pub duration_ms: u64,
    /// Time allowed after healing for every acknowledged write to become readable.
    pub liveness_ms: u64,
    /// Number of brokers.
    pub brokers: u32,
    /// Number of controller nodes (0 to 5; 2 or more form a Raft quorum): with any, the brokers
    /// register with the active one and follow its metadata log.
    pub controllers: u32,
    /// Broker config overrides (Kafka names).
    pub broker_overrides: Vec<(String, String)>,
    /// Topics created before the workload.
    pub topics: Vec<NewTopic>,
    /// Producers.
    pub producers: Vec<ProducerSpec>,
    /// Consumers.
    pub consumers: Vec<ConsumerSpec>,
    /// Fault timeline, by time.
    pub faults: Vec<Fault>,
    /// One-way latency range of every message, ms.
    pub latency_ms: (u64, u64),
    /// madsim packet loss (TCP retransmits, so this delays, never drops).
    pub packet_loss_rate: f64,
    /// Range of one fsync's latency, microseconds (drawn per fsync).
    pub fsync_latency_us: (u64, u64),
    /// Expectations.
    pub expect: Expect,
    /// The fault space `seedlog-sim explore` draws from (`[explore]`; `run` ignores it).
    pub explore: Option<ExploreSpace>,
}

/// Default safety-phase-to-end allowance for liveness.
const LIVENESS_MS_DEFAULT: u64 = 30_000;
const POLL_TIMEOUT_MS_DEFAULT: u64 = 500;

pub(crate) struct Loader<'a> {
    pub(crate) file: &'a str,
    pub(crate) source: &'a str,
}

impl Loader<'_> {
    /// A time field (a number or `[low, high]` of milliseconds), if present.
    fn time(&self, field: Option<&Spanned<RawTime>>) -> Result<Option<TimeSpec>, ScenarioError> {
        let Some(field) = field else {
            return Ok(None);
        };
        match *field.get_ref() {
            RawTime::Fixed(ms) => Ok(Some(TimeSpec::Fixed(ms))),
            RawTime::Range([low, high]) if low <= high => Ok(Some(TimeSpec::Range(low, high))),
            RawTime::Range(_) => {
                Err(self.error_at(field.span(), "a range is [low, high] with low <= high"))
            }
        }
    }

    /// A `name = [min, max]` range, refused unless min <= max.
    fn min_max(&self, field: &Spanned<[u64; 2]>, name: &str) -> Result<(u64, u64), ScenarioError> {
        match *field.get_ref() {
            [low, high] if low <= high => Ok((low, high)),
            _ => Err(self.error_at(field.span(), format!("{name} = [min, max] with min <= max"))),
        }
    }

    pub(crate) fn error_at(
        &self,
        span: std::ops::Range<usize>,
        message: impl Into<String>,
    ) -> ScenarioError {
        let line = self.source[..span.start.min(self.source.len())]
            .matches('\n')
            .count()
            + 1;
        ScenarioError {
            file: self.file.to_owned(),
            line,
            message: message.into(),
        }
    }

    fn config_pairs(
        &self,
        table: Option<&ConfigTable>,
    ) -> Result<Vec<(String, String, std::ops::Range<usize>)>, ScenarioError> {
        let Some(table) = table else {
            return Ok(Vec::new());
        };
        table
            .get_ref()
            .iter()
            .map(|(key, value)| {
                let text = match value.get_ref() {
                    toml::Value::String(text) => text.clone(),
                    toml::Value::Integer(number) => number.to_string(),
                    toml::Value::Float(number) => number.to_string(),
                    toml::Value::Boolean(flag) => flag.to_string(),
                    other => {
                        return Err(self.error_at(
                            value.span(),
                            format!(
                                "config '{key}': expected a string, number or boolean, found {}",
                                other.type_str()
                            ),
                        ))
                    }
                };
                Ok((key.clone(), text, value.span()))
            })
            .collect()
    }

    fn apply<C: Configurable>(
        &self,
        config: &mut C,
        table: Option<&ConfigTable>,
        reserved: &[&str],
    ) -> Result<(), ScenarioError> {
        let pairs = self.config_pairs(table)?;
        // Presets first (`Configurable::preset`), so the keys beside them override them.
        for (key, value, span) in &pairs {
            if let Some(expanded) = config.preset(key, value) {
                let expanded =
                    expanded.map_err(|error| self.error_at(span.clone(), error.to_string()))?;
                for (key, value) in expanded {
                    config
                        .set(&key, &value)
                        .map_err(|error| self.error_at(span.clone(), error.to_string()))?;
                }
            }
        }
        for (key, value, span) in pairs {
            if reserved.contains(&key.as_str()) {
                return Err(self.error_at(span, format!("'{key}' is set by the simulator")));
            }
            config
                .set(&key, &value)
                .map_err(|error| self.error_at(span, error.to_string()))?;
        }
        let whole = table.map_or(0..0, Spanned::span);
        config
            .validate()
            .map_err(|error| self.error_at(whole, error.to_string()))
    }
}

/// Every `.toml` file among `paths` (directories are walked recursively), sorted.
pub fn scenario_files(paths: &[std::path::PathBuf]) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    let mut pending: Vec<std::path::PathBuf> = paths.to_vec();
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                pending.push(entry?.path());
            }
        } else if path
            .extension()
            .is_some_and(|extension| extension == "toml")
            || paths.contains(&path)
        {
            files.push(path);
        }
    }
    files.sort();
    files.dedup();
    Ok(files)
}

/// Loads and validates a scenario file.
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    let file = path.display().to_string();
    let source = std::fs::read_to_string(path).map_err(|error| ScenarioError {
        file: file.clone(),
        line: 0,
        message: error.to_string(),
    })?;
    parse(&file, &source)
}

/// Parses and validates scenario text (`file` only names it in errors).
pub fn parse(file: &str, source: &str) -> Result<Scenario, ScenarioError> {
    let loader = Loader { file, source };
    let mut root =
        toml::de::DeTable::parse(source).map_err(|error| faults::toml_error(&loader, &error))?;
    // `[[faults]]` entries are read per kind, apart from the rest of the document.
    let faults = root.get_mut().remove("faults");
    let mut raw = RawScenario::deserialize(toml::de::Deserializer::from(root))
        .map_err(|error| faults::toml_error(&loader, &error))?;
    raw.faults = faults::read_faults(&loader, faults)?;
    build(&loader, raw)
}

/// The numbers of brokers and controllers.
fn build_cluster_size(
    loader: &Loader<'_>,
    cluster: &RawCluster,
) -> Result<(u32, u32), ScenarioError> {
    let brokers = *cluster.brokers.get_ref();
    if !(1..=9).contains(&brokers) {
        return Err(loader.error_at(cluster.brokers.span(), "brokers must be 1 to 9"));
    }
    let controllers = match &cluster.controllers {
        Some(count) if *count.get_ref() > 5 => {
            return Err(loader.error_at(
                count.span(),
                "controllers must be 0 to 5 (2 or more: a Raft quorum)",
            ))
        }
        Some(count) if *count.get_ref() == 0 && brokers > 1 => {
            return Err(loader.error_at(
                count.span(),
                "several brokers need a controller (controllers = 1)",
            ))
        }
        Some(count) => *count.get_ref(),
        None => u32::from(brokers > 1),
    };
    Ok((brokers, controllers))
}

/// Broker keys the simulator sets for each node (addresses, data directory, identity, roles and
/// the controller quorum): a scenario's `[cluster.config]` may not. Combined mode
/// (`process.roles=broker,controller`) is a real-mode feature.
const SIMULATOR_KEYS: &[&str] = &[
    "listeners",
    "advertised.listeners",
    "log.dirs",
    "log.dir",
    "node.id",
    "broker.id",
    "process.roles",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "controller.listener.names",
    "listener.security.protocol.map",
    "inter.broker.listener.name",
];

fn build(loader: &Loader<'_>, raw: RawScenario) -> Result<Scenario, ScenarioError> {
    let cluster = raw.cluster.get_ref();
    let (brokers, controllers) = build_cluster_size(loader, cluster)?;
    let (broker_config, broker_overrides) = build_broker_config(loader, cluster, brokers)?;
    let mut nodes: BTreeSet<String> = (0..brokers)
        .map(|index| format!("broker-{index}"))
        .chain((0..controllers).map(|index| format!("controller-{index}")))
        .collect();
    let topics = build_topics(loader, &raw.topics, &broker_config, brokers)?;
    let (producers, consumers) = build_clients(loader, &raw, &topics, &mut nodes)?;
    let duration_ms = *raw.scenario.duration_ms.get_ref();
    let offsets_partitions = broker_config.groups.offsets_topic_num_partitions;
    let partitions: BTreeSet<String> = topics
        .iter()
        .flat_map(|topic| (0..topic.partitions).map(|index| format!("{}-{index}", topic.name)))
        .chain((0..offsets_partitions).map(|index| format!("{OFFSETS_TOPIC}-{index}")))
        .collect();
    let mut faults = Vec::new();
    for fault in &raw.faults {
        faults.push(build_fault(
            loader,
            fault,
            &nodes,
            (&partitions, offsets_partitions),
            duration_ms,
        )?);
    }
    faults.sort_by_key(|fault| fault.at_ms.min());
    let context = explore::FaultContext::new(&nodes, &partitions, offsets_partitions, duration_ms);
    let explore = explore::build_optional(loader, raw.explore.as_ref(), &context)?;
    let (latency_ms, packet_loss_rate) = build_network(loader, raw.network.as_ref())?;
    let fsync_latency_us = build_disk(loader, raw.disk.as_ref())?;
    let expect = build_expect(loader, raw.expect.as_ref())?;
    Ok(Scenario {
        path: loader.file.to_owned(),
        name: raw.scenario.name,
        description: raw.scenario.description.unwrap_or_default(),
        pinned_seed: raw.scenario.seed,
        duration_ms,
        liveness_ms: raw.scenario.liveness_ms.unwrap_or(LIVENESS_MS_DEFAULT),
        brokers,
        controllers,
        broker_overrides,
        topics,
        producers,
        consumers,
        faults,
        latency_ms,
        packet_loss_rate,
        fsync_latency_us,
        expect,
        explore,
    })
}

/// The brokers' configuration: the preset (sized to the cluster), then the scenario's keys;
/// and the pairs each broker is started with.
fn build_broker_config(
    loader: &Loader<'_>,
    cluster: &RawCluster,
    brokers: u32,
) -> Result<(BrokerConfig, Vec<(String, String)>), ScenarioError> {
    let preset = match &cluster.preset {
        Some(name) => seedlog::config::broker::preset_pairs(name.get_ref(), Some(brokers))
            .map_err(|error| loader.error_at(name.span(), error.to_string()))?,
        None => Vec::new(),
    };
    let mut broker_config = BrokerConfig::default();
    for (key, value) in &preset {
        broker_config
            .set(key, value)
            .expect("a preset's pairs are valid");
    }
    loader.apply(&mut broker_config, cluster.config.as_ref(), SIMULATOR_KEYS)?;
    let broker_overrides = preset
        .into_iter()
        .chain(
            loader
                .config_pairs(cluster.config.as_ref())?
                .into_iter()
                .map(|(key, value, _)| (key, value)),
        )
        .collect();
    Ok((broker_config, broker_overrides))
}

fn build_clients(
    loader: &Loader<'_>,
    raw: &RawScenario,
    topics: &[NewTopic],
    nodes: &mut BTreeSet<String>,
) -> Result<(Vec<ProducerSpec>, Vec<ConsumerSpec>), ScenarioError> {
    let partitions_of: BTreeMap<&str, i32> = topics
        .iter()
        .map(|topic| (topic.name.as_str(), topic.partitions))
        .collect();
    let mut producers = Vec::new();
    for producer in &raw.producers {
        producers.push(build_producer(loader, producer.get_ref(), &partitions_of)?);
        claim_name(loader, nodes, &producer.get_ref().id)?;
    }
    let mut consumers = Vec::new();
    for consumer in &raw.consumers {
        consumers.push(build_consumer(loader, consumer.get_ref(), &partitions_of)?);
        claim_name(loader, nodes, &consumer.get_ref().id)?;
    }
    Ok((producers, consumers))
}

fn claim_name(
    loader: &Loader<'_>,
    nodes: &mut BTreeSet<String>,
    id: &Spanned<String>,
) -> Result<(), ScenarioError> {
    let name = id.get_ref();
    let reserved = ["nemesis", "final-reader", "setup"];
    if name.is_empty() || reserved.contains(&name.as_str()) || !nodes.insert(name.clone()) {
        return Err(loader.error_at(
            id.span(),
            format!("client id '{name}' is empty, reserved or already used"),
        ));
    }
    Ok(())
}

fn build_topics(
    loader: &Loader<'_>,
    raw: &[Spanned<RawTopic>],
    broker: &BrokerConfig,
    brokers: u32,
) -> Result<Vec<NewTopic>, ScenarioError> {
    let mut topics = Vec::new();
    for topic in raw {
        let topic = topic.get_ref();
        let name = topic.name.get_ref().clone();
        seedlog::metadata::topics::validate_topic_name(&name)
            .map_err(|message| loader.error_at(topic.name.span(), message))?;
        if topics
            .iter()
            .any(|existing: &NewTopic| existing.name == name)
        {
            return Err(loader.error_at(
                topic.name.span(),
                format!("topic '{name}' is declared twice"),
            ));
        }
        if *topic.partitions.get_ref() < 1 {
            return Err(loader.error_at(topic.partitions.span(), "partitions must be at least 1"));
        }
        let replication_factor = topic
            .replication_factor
            .as_ref()
            .map_or(1, |factor| *factor.get_ref());
        if replication_factor < 1 || replication_factor as u32 > brokers {
            let span = topic
                .replication_factor
                .as_ref()
                .map_or(0..0, Spanned::span);
            return Err(loader.error_at(
                span,
                format!("replication_factor must be 1 to the number of brokers ({brokers})"),
            ));
        }
        let mut config = TopicConfig::defaults(broker);
        loader.apply(&mut config, topic.config.as_ref(), &[])?;
        if config.cleanup_policy.compact {
            // The delivery checkers expect every acknowledged record in the final read; a
            // cleaner removes the superseded ones (and the workload's records have no keys).
            let span = topic.config.as_ref().map_or(0..0, Spanned::span);
            return Err(loader.error_at(
                span,
                format!(
                    "topic '{name}': cleanup.policy=compact is not supported for workload topics (the checkers do not model compaction; __consumer_offsets is compacted)"
                ),
            ));
        }
        topics.push(NewTopic {
            name,
            partitions: *topic.partitions.get_ref(),
            replication_factor,
            configs: config.overrides,
        });
    }
    Ok(topics)
}

fn build_producer(
    loader: &Loader<'_>,
    raw: &RawProducer,
    partitions_of: &BTreeMap<&str, i32>,
) -> Result<ProducerSpec, ScenarioError> {
    let mut config = ProducerConfig::default();
    loader.apply(
        &mut config,
        raw.config.as_ref(),
        &["bootstrap.servers", "client.id"],
    )?;
    let span = raw
        .config
        .as_ref()
        .map_or_else(|| raw.id.span(), Spanned::span);
    ProducerCore::new(config.clone()).map_err(|error| loader.error_at(span, error.to_string()))?;
    let workload = raw.workload.get_ref();
    let topic = workload.topic.get_ref();
    let partitions = *partitions_of.get(topic.as_str()).ok_or_else(|| {
        loader.error_at(
            workload.topic.span(),
            format!("unknown topic '{topic}' (declare it under [[topics]])"),
        )
    })?;
    let rate = *workload.rate_per_sec.get_ref();
    if !(rate > 0.0 && rate.is_finite()) {
        return Err(loader.error_at(
            workload.rate_per_sec.span(),
            "rate_per_sec must be a positive number",
        ));
    }
    let on_restart = match workload.on_restart.as_ref() {
        None => OnRestart::Continue,
        Some(value) => match value.get_ref().as_str() {
            "continue" => OnRestart::Continue,
            "resend-unacknowledged" => OnRestart::ResendUnacknowledged,
            _ => {
                return Err(loader.error_at(
                    value.span(),
                    "on_restart is \"continue\" or \"resend-unacknowledged\"",
                ))
            }
        },
    };
    Ok(ProducerSpec {
        id: raw.id.get_ref().clone(),
        config,
        topic: topic.clone(),
        partitions,
        messages: workload.messages,
        interval_ms: 1000.0 / rate,
        on_restart,
    })
}

fn build_consumer(
    loader: &Loader<'_>,
    raw: &RawConsumer,
    partitions_of: &BTreeMap<&str, i32>,
) -> Result<ConsumerSpec, ScenarioError> {
    let mut config = ConsumerConfig::default();
    loader.apply(
        &mut config,
        raw.config.as_ref(),
        &["bootstrap.servers", "client.id"],
    )?;
    let (partitions, group) = match (&raw.assign, &raw.subscribe) {
        (Some(assign), None) => (assigned_partitions(loader, assign, partitions_of)?, None),
        (None, Some(subscribe)) => (
            Vec::new(),
            Some(group_spec(loader, raw, subscribe, &config, partitions_of)?),
        ),
        _ => return Err(loader.error_at(
            raw.id.span(),
            "a consumer takes either assign (partitions) or subscribe (topics, with a group.id)",
        )),
    };
    if group.is_none() && raw.processing.is_some() {
        return Err(loader.error_at(
            raw.id.span(),
            "processing applies to a group member (subscribe)",
        ));
    }
    let start_after_ms = loader.time(raw.start_after_ms.as_ref())?;
    Ok(ConsumerSpec {
        id: raw.id.get_ref().clone(),
        config,
        partitions,
        poll_timeout_ms: raw.poll_timeout_ms.unwrap_or(POLL_TIMEOUT_MS_DEFAULT),
        group,
        start_after_ms,
    })
}

fn assigned_partitions(
    loader: &Loader<'_>,
    assign: &Spanned<Vec<String>>,
    partitions_of: &BTreeMap<&str, i32>,
) -> Result<Vec<TopicPartition>, ScenarioError> {
    let mut partitions = Vec::new();
    for entry in assign.get_ref() {
        if let Some(count) = partitions_of.get(entry.as_str()) {
            partitions.extend(
                (0..*count).map(|partition| TopicPartition::new(entry.as_str(), partition)),
            );
            continue;
        }
        let parsed = TopicPartition::parse(entry).filter(|partition| {
            partitions_of
                .get(&*partition.topic)
                .is_some_and(|count| partition.partition < *count)
        });
        partitions.push(parsed.ok_or_else(|| {
            loader.error_at(
                assign.span(),
                format!("'{entry}' is neither a declared topic nor one of its partitions"),
            )
        })?);
    }
    if partitions.is_empty() {
        return Err(loader.error_at(assign.span(), "assign at least one topic or partition"));
    }
    Ok(partitions)
}

fn group_spec(
    loader: &Loader<'_>,
    raw: &RawConsumer,
    subscribe: &Spanned<Vec<String>>,
    config: &ConsumerConfig,
    partitions_of: &BTreeMap<&str, i32>,
) -> Result<GroupSpec, ScenarioError> {
    if config.group_id.is_none() {
        return Err(loader.error_at(subscribe.span(), "subscribe needs config group.id"));
    }
    if subscribe.get_ref().is_empty() {
        return Err(loader.error_at(subscribe.span(), "subscribe to at least one topic"));
    }
    for topic in subscribe.get_ref() {
        if !partitions_of.contains_key(topic.as_str()) {
            return Err(loader.error_at(
                subscribe.span(),
                format!("unknown topic '{topic}' (declare it under [[topics]])"),
            ));
        }
    }
    let Some(processing) = &raw.processing else {
        return Err(loader.error_at(
            subscribe.span(),
            "a group member needs processing = { mode = \"commit-before\" | \"commit-after\" | \"commit-async\" | \"auto-commit\" }",
        ));
    };
    let mode = processing.get_ref().mode.get_ref();
    let processing_mode = match mode.as_str() {
        "commit-before" => Processing::CommitBefore,
        "commit-after" => Processing::CommitAfter,
        "commit-async" => Processing::CommitAsync,
        "auto-commit" => Processing::AutoCommit,
        other => {
            return Err(loader.error_at(
                processing.get_ref().mode.span(),
                format!("unknown processing mode '{other}': expected commit-before, commit-after, commit-async or auto-commit"),
            ))
        }
    };
    if (processing_mode == Processing::AutoCommit) != config.enable_auto_commit {
        return Err(loader.error_at(
            processing.span(),
            "processing auto-commit goes with enable.auto.commit=true, the others with false",
        ));
    }
    let commit_on_revoke = match processing.get_ref().on_revoke.as_ref() {
        None => true,
        Some(on_revoke) => match (on_revoke.get_ref().as_str(), processing_mode) {
            ("commit", Processing::AutoCommit | Processing::CommitAsync) => true,
            ("none", Processing::AutoCommit | Processing::CommitAsync) => false,
            (_, Processing::AutoCommit | Processing::CommitAsync) => {
                return Err(loader.error_at(
                    on_revoke.span(),
                    "on_revoke is \"commit\" (Kafka's consumer) or \"none\"",
                ))
            }
            _ => {
                return Err(loader.error_at(
                    on_revoke.span(),
                    "on_revoke applies to auto-commit and commit-async (the other modes commit every poll synchronously)",
                ))
            }
        },
    };
    Ok(GroupSpec {
        topics: subscribe.get_ref().clone(),
        processing: processing_mode,
        processing_ms: processing.get_ref().time_ms.unwrap_or(0),
        commit_on_revoke,
    })
}

/// Validates one `[[faults]]` entry (serde has typed its keys by kind).
struct FaultBuilder<'a> {
    loader: &'a Loader<'a>,
    nodes: &'a BTreeSet<String>,
    /// Every declared partition (`topic-index`) and `__consumer_offsets`' partitions: what a
    /// selector may name.
    partitions: &'a BTreeSet<String>,
    /// `offsets.topic.num.partitions`: where `coordinator(G)` finds group G's coordinator.
    offsets_partitions: i32,
    /// The kind as written (errors quote it).
    kind: &'a str,
}

/// A fault target that names a role instead of a node, resolved when the fault fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `leader(topic-index)`: the broker leading the partition.
    Leader(String),
    /// `followers(topic-index)`: one of its followers, drawn from the seed.
    Followers(String),
    /// `isr(topic-index)`: one member of its ISR, drawn from the seed.
    Isr(String),
    /// `controller-leader`: the active controller.
    ControllerLeader,
}

impl Selector {
    /// The selector a target names, if it names one.
    pub fn parse(target: &str) -> Option<Selector> {
        if target == "controller-leader" {
            return Some(Selector::ControllerLeader);
        }
        let (kind, rest) = target.split_once('(')?;
        let partition = rest.strip_suffix(')')?.to_owned();
        match kind {
            "leader" => Some(Selector::Leader(partition)),
            "followers" => Some(Selector::Followers(partition)),
            "isr" => Some(Selector::Isr(partition)),
            _ => None,
        }
    }

    /// The partition it names, if any.
    pub fn partition(&self) -> Option<&str> {
        match self {
            Selector::Leader(partition)
            | Selector::Followers(partition)
            | Selector::Isr(partition) => Some(partition),
            Selector::ControllerLeader => None,
        }
    }
}

impl FaultBuilder<'_> {
    fn error(&self, span: std::ops::Range<usize>, message: impl Into<String>) -> ScenarioError {
        self.loader.error_at(span, message)
    }

    /// A node name (or a selector).
    fn node(&self, value: &Spanned<String>) -> Result<String, ScenarioError> {
        let name = value.get_ref();
        if let Some(group) = name
            .strip_prefix("coordinator(")
            .and_then(|rest| rest.strip_suffix(')'))
        {
            // Kafka's coordinator of group G is the leader of its __consumer_offsets partition.
            if group.is_empty() {
                return Err(self.error(value.span(), "'coordinator()' names no group"));
            }
            let partition = offsets_partition_for(group, self.offsets_partitions);
            return Ok(format!("leader({OFFSETS_TOPIC}-{partition})"));
        }
        if let Some(selector) = Selector::parse(name) {
            return match selector.partition() {
                Some(partition) if !self.partitions.contains(partition) => Err(self.error(
                    value.span(),
                    format!("'{name}' names no declared partition (topic-index, e.g. orders-0)"),
                )),
                None if !self.nodes.contains("controller-0") => Err(self.error(
                    value.span(),
                    "'controller-leader' needs a controller ([cluster] controllers >= 1)",
                )),
                _ => Ok(name.clone()),
            };
        }
        if !self.nodes.contains(name) {
            let known = self.nodes.iter().cloned().collect::<Vec<_>>().join(", ");
            return Err(self.error(
                value.span(),
                format!(
                    "unknown node '{name}' (nodes: {known}; or a selector: leader(P), \
                     followers(P), isr(P), coordinator(G), controller-leader)"
                ),
            ));
        }
        Ok(name.clone())
    }

    /// A broker name (or a selector of a partition's replica).
    fn broker(&self, target: &Spanned<String>) -> Result<String, ScenarioError> {
        let name = self.node(target)?;
        let selects_a_broker =
            Selector::parse(&name).is_some_and(|selector| selector.partition().is_some());
        if !name.starts_with("broker-") && !selects_a_broker {
            return Err(self.error(
                target.span(),
                format!("a '{}' fault targets a broker, not '{name}'", self.kind),
            ));
        }
        Ok(name)
    }

    fn level(&self, field: Option<&Spanned<String>>) -> Result<Option<CrashLevel>, ScenarioError> {
        match field.map(|level| (level.get_ref().as_str(), level.span())) {
            None => Ok(None),
            Some(("process", _)) => Ok(Some(CrashLevel::Process)),
            Some(("power-loss", _)) => Ok(Some(CrashLevel::PowerLoss)),
            Some((other, span)) => Err(self.error(
                span,
                format!("unknown crash level '{other}' (process, power-loss)"),
            )),
        }
    }

    fn crash(&self, fields: &faults::CrashFields) -> Result<FaultAction, ScenarioError> {
        let level = self
            .level(fields.level.as_ref())?
            .unwrap_or(CrashLevel::Process);
        let restart_after_ms = self.loader.time(fields.restart_after_ms.as_ref())?;
        let recrash = match self.loader.time(fields.recrash_after_ms.as_ref())? {
            None => {
                if let Some(recrash_level) = &fields.recrash_level {
                    let message = "recrash_level needs recrash_after_ms";
                    return Err(self.error(recrash_level.span(), message));
                }
                None
            }
            Some(_) if restart_after_ms.is_none() => {
                let span = fields.recrash_after_ms.as_ref().map_or(0..0, Spanned::span);
                return Err(self.error(span, "recrash_after_ms needs restart_after_ms"));
            }
            Some(after_ms) => Some(Recrash {
                after_ms,
                level: self.level(fields.recrash_level.as_ref())?.unwrap_or(level),
            }),
        };
        Ok(FaultAction::Crash {
            target: self.node(&fields.target)?,
            level,
            restart_after_ms,
            recrash,
        })
    }

    fn corrupt(&self, fields: &faults::CorruptFields) -> Result<FaultAction, ScenarioError> {
        let files = match fields.files.as_ref().map(Spanned::get_ref) {
            None => FileSelector::Segments,
            Some(text) if text == "segments" => FileSelector::Segments,
            Some(pattern) => match pattern.split_once('*') {
                Some((prefix, suffix)) => FileSelector::Pattern {
                    prefix: prefix.to_owned(),
                    suffix: suffix.to_owned(),
                },
                None => FileSelector::Prefix(pattern.clone()),
            },
        };
        Ok(FaultAction::Corrupt {
            target: self.broker(&fields.target)?,
            files,
        })
    }

    fn disk(&self, fields: &faults::DiskFaultFields) -> Result<FaultAction, ScenarioError> {
        let on_fsync_failure = match fields
            .on_fsync_failure
            .as_ref()
            .map(|v| (v.get_ref().as_str(), v.span()))
        {
            None | Some(("drop", _)) => FsyncFailure::DropDirtyPages,
            Some(("keep", _)) => FsyncFailure::KeepDirtyPages,
            Some((other, span)) => {
                return Err(self.error(
                    span,
                    format!("unknown on_fsync_failure '{other}' (drop, keep)"),
                ))
            }
        };
        let count =
            |field: &Option<Spanned<u32>>| field.as_ref().map_or(0, |value| *value.get_ref());
        Ok(FaultAction::Disk {
            target: self.broker(&fields.target)?,
            fail_writes: count(&fields.fail_writes),
            fail_syncs: count(&fields.fail_syncs),
            on_fsync_failure,
        })
    }

    fn clock_skew(&self, fields: &faults::ClockSkewFields) -> Result<FaultAction, ScenarioError> {
        let [low, high] = *fields.offset_ms.get_ref();
        if low > high {
            return Err(self.error(
                fields.offset_ms.span(),
                "offset_ms = [min, max] with min <= max",
            ));
        }
        Ok(FaultAction::ClockSkew {
            offset_ms: (low, high),
            target: self.node(&fields.target)?,
            heal_after_ms: self.loader.time(fields.heal_after_ms.as_ref())?,
        })
    }

    fn partition(&self, fields: &faults::PartitionFields) -> Result<FaultAction, ScenarioError> {
        let groups = &fields.groups;
        if let Some(name) = groups
            .get_ref()
            .iter()
            .flatten()
            .find(|name| !self.nodes.contains(*name))
        {
            return Err(self.error(groups.span(), format!("unknown node '{name}' in groups")));
        }
        if groups.get_ref().len() < 2 {
            return Err(self.error(groups.span(), "a partition needs at least two groups"));
        }
        Ok(FaultAction::Partition {
            groups: groups.get_ref().clone(),
            heal_after_ms: self.loader.time(fields.heal_after_ms.as_ref())?,
        })
    }

    /// A connection fault of the kind `kind` gives (`reject_request`'s reads its `error`):
    /// `drop_request`, `drop_response` and `reset_mid_response` take an `api`, `reject_request`
    /// answers produce requests only.
    fn connection(
        &self,
        target: &Spanned<String>,
        (count, probability): (Option<&Spanned<u32>>, Option<&Spanned<f64>>),
        api: Option<&Spanned<String>>,
        kind: impl FnOnce() -> Result<ConnectionFaultKind, ScenarioError>,
    ) -> Result<FaultAction, ScenarioError> {
        let api = match api {
            None => None,
            Some(name) => Some(api_by_name(name.get_ref()).ok_or_else(|| {
                let known: Vec<&str> = FAULT_APIS.iter().map(|(known, _)| *known).collect();
                let message = format!("unknown api '{}' ({})", name.get_ref(), known.join(", "));
                self.error(name.span(), message)
            })?),
        };
        if let Some(value) = probability {
            if !(0.0..=1.0).contains(value.get_ref()) {
                return Err(self.error(value.span(), "probability must be within 0..=1"));
            }
        }
        let kind = kind()?;
        let api = if matches!(kind, ConnectionFaultKind::RejectRequest(_)) {
            Some(ApiKey::Produce)
        } else {
            api
        };
        Ok(FaultAction::Connection {
            target: self.broker(target)?,
            kind,
            api,
            count: count.map_or(1, |count| *count.get_ref()),
            probability: probability.map_or(1.0, |value| *value.get_ref()),
        })
    }

    /// `drop_request`, `drop_response` or `reset_mid_response`.
    fn dropping(
        &self,
        fields: &faults::ConnectionFields,
        kind: ConnectionFaultKind,
    ) -> Result<FaultAction, ScenarioError> {
        self.connection(
            &fields.target,
            (fields.count.as_ref(), fields.probability.as_ref()),
            fields.api.as_ref(),
            || Ok(kind),
        )
    }

    /// `reject_request`.
    fn rejecting(&self, fields: &faults::RejectFields) -> Result<FaultAction, ScenarioError> {
        self.connection(
            &fields.target,
            (fields.count.as_ref(), fields.probability.as_ref()),
            None,
            || {
                let error = self.rejection_error(fields.error.as_ref())?;
                Ok(ConnectionFaultKind::RejectRequest(error))
            },
        )
    }

    fn slow_disk(&self, fields: &faults::SlowDiskFields) -> Result<FaultAction, ScenarioError> {
        Ok(FaultAction::SlowDisk {
            fsync_latency_us: self
                .loader
                .min_max(&fields.fsync_latency_us, "fsync_latency_us")?,
            target: self.broker(&fields.target)?,
            heal_after_ms: self.loader.time(fields.heal_after_ms.as_ref())?,
        })
    }

    fn disk_full(&self, fields: &faults::DiskFullFields) -> Result<FaultAction, ScenarioError> {
        Ok(FaultAction::DiskFull {
            free_bytes: self.loader.min_max(&fields.free_bytes, "free_bytes")?,
            target: self.broker(&fields.target)?,
            heal_after_ms: self.loader.time(fields.heal_after_ms.as_ref())?,
        })
    }

    /// The Kafka error a `reject_request` answers with (default NOT_LEADER_OR_FOLLOWER).
    fn rejection_error(&self, error: Option<&Spanned<String>>) -> Result<ErrorCode, ScenarioError> {
        let Some(name) = error else {
            return Ok(ErrorCode::NotLeaderOrFollower);
        };
        ErrorCode::from_name(name.get_ref())
            .filter(|error| *error != ErrorCode::None)
            .ok_or_else(|| {
                self.error(
                    name.span(),
                    format!(
                        "unknown Kafka error '{}' (snake case, e.g. not_leader_or_follower)",
                        name.get_ref()
                    ),
                )
            })
    }

    fn action(&self, fields: &FaultFields) -> Result<FaultAction, ScenarioError> {
        Ok(match fields {
            FaultFields::Crash(fields) => self.crash(fields)?,
            FaultFields::Restart(fields) => FaultAction::Restart {
                target: self.node(&fields.target)?,
            },
            FaultFields::Stop(fields) => FaultAction::Stop {
                target: self.broker(&fields.target)?,
                restart_after_ms: self.loader.time(fields.restart_after_ms.as_ref())?,
            },
            FaultFields::Partition(fields) => self.partition(fields)?,
            FaultFields::Isolate(fields) => FaultAction::Isolate {
                target: self.node(&fields.target)?,
                heal_after_ms: self.loader.time(fields.heal_after_ms.as_ref())?,
            },
            FaultFields::Pause(fields) => FaultAction::Pause {
                target: self.node(&fields.target)?,
                heal_after_ms: self.loader.time(fields.heal_after_ms.as_ref())?,
            },
            FaultFields::Clog(fields) => FaultAction::Clog {
                from: self.node(&fields.from)?,
                to: self.node(&fields.to)?,
                heal_after_ms: self.loader.time(fields.heal_after_ms.as_ref())?,
            },
            FaultFields::DropRequest(fields) => {
                self.dropping(fields, ConnectionFaultKind::DropRequest)?
            }
            FaultFields::DropResponse(fields) => {
                self.dropping(fields, ConnectionFaultKind::DropResponse)?
            }
            FaultFields::ResetMidResponse(fields) => {
                self.dropping(fields, ConnectionFaultKind::ResetMidResponse)?
            }
            FaultFields::RejectRequest(fields) => self.rejecting(fields)?,
            FaultFields::DiskFault(fields) => self.disk(fields)?,
            FaultFields::SlowDisk(fields) => self.slow_disk(fields)?,
            FaultFields::DiskFull(fields) => self.disk_full(fields)?,
            FaultFields::ClockSkew(fields) => self.clock_skew(fields)?,
            FaultFields::Delay(fields) => FaultAction::Delay {
                latency_ms: self.loader.min_max(&fields.latency_ms, "latency_ms")?,
                heal_after_ms: self.loader.time(fields.heal_after_ms.as_ref())?,
            },
            FaultFields::Corrupt(fields) => self.corrupt(fields)?,
            FaultFields::Heal(faults::HealFields {}) => FaultAction::Heal,
        })
    }
}

pub(crate) fn build_fault(
    loader: &Loader<'_>,
    raw: &RawFault,
    nodes: &BTreeSet<String>,
    (partitions, offsets_partitions): (&BTreeSet<String>, i32),
    duration_ms: u64,
) -> Result<Fault, ScenarioError> {
    let builder = FaultBuilder {
        loader,
        nodes,
        partitions,
        offsets_partitions,
        kind: raw.kind.get_ref(),
    };
    let at_ms = loader.time(Some(&raw.at_ms))?.expect("at_ms is required");
    if at_ms.max() > duration_ms {
        let message = format!(
            "at_ms {} is after the end of the safety phase (duration_ms {duration_ms})",
            at_ms.max()
        );
        return Err(loader.error_at(raw.at_ms.span(), message));
    }
    Ok(Fault {
        at_ms,
        action: builder.action(&raw.fields)?,
    })
}

fn build_network(
    loader: &Loader<'_>,
    raw: Option<&Spanned<RawNetwork>>,
) -> Result<((u64, u64), f64), ScenarioError> {
    const LATENCY_MS_DEFAULT: (u64, u64) = (1, 10);
    let Some(raw) = raw else {
        return Ok((LATENCY_MS_DEFAULT, 0.0));
    };
    let network = raw.get_ref();
    let latency = network
        .latency_ms
        .as_ref()
        .map_or(Ok(LATENCY_MS_DEFAULT), |latency| {
            loader.min_max(latency, "latency_ms")
        })?;
    let loss = network
        .packet_loss_rate
        .as_ref()
        .map_or(0.0, |rate| *rate.get_ref());
    if !(0.0..1.0).contains(&loss) {
        let span = network
            .packet_loss_rate
            .as_ref()
            .map_or(0..0, Spanned::span);
        return Err(loader.error_at(span, "packet_loss_rate must be within 0..1"));
    }
    Ok((latency, loss))
}

/// Default fsync latency: a fast SSD's.
const FSYNC_LATENCY_US_DEFAULT: (u64, u64) = (100, 3_000);

fn build_disk(
    loader: &Loader<'_>,
    raw: Option<&Spanned<RawDisk>>,
) -> Result<(u64, u64), ScenarioError> {
    let Some(latency) = raw.and_then(|raw| raw.get_ref().fsync_latency_us.as_ref()) else {
        return Ok(FSYNC_LATENCY_US_DEFAULT);
    };
    loader.min_max(latency, "fsync_latency_us")
}

fn build_expect(
    loader: &Loader<'_>,
    raw: Option<&Spanned<RawExpect>>,
) -> Result<Expect, ScenarioError> {
    let mut expect = Expect::default();
    let Some(raw) = raw else { return Ok(expect) };
    let raw = raw.get_ref();
    let check = |name: &str, span: std::ops::Range<usize>| {
        Check::from_name(name).ok_or_else(|| {
            loader.error_at(
                span,
                format!("unknown check '{name}' (checks: {})", Check::names()),
            )
        })
    };
    for name in &raw.violated {
        expect.violated.insert(check(name.get_ref(), name.span())?);
    }
    if let Some(table) = &raw.may_violate {
        for (name, reason) in table.get_ref() {
            let allowed = check(name, table.span())?;
            if reason.get_ref().trim().is_empty() {
                return Err(loader.error_at(
                    reason.span(),
                    format!("say why '{name}' may be violated under this configuration"),
                ));
            }
            if expect.violated.contains(&allowed) {
                return Err(loader.error_at(
                    reason.span(),
                    format!("'{name}' is listed in both violated and may_violate"),
                ));
            }
            expect.may_violate.insert(allowed, reason.get_ref().clone());
        }
    }
    if let Some(fraction) = &raw.min_fraction {
        if !(0.0..=1.0).contains(fraction.get_ref()) {
            return Err(loader.error_at(fraction.span(), "min_fraction must be within 0..=1"));
        }
        expect.min_fraction = *fraction.get_ref();
    }
    Ok(expect)
}

mod faults;
#[cfg(test)]
mod tests;
