//! Broker configs (`server.properties`), Kafka names and defaults.

use super::listeners::ListenerKeys;
pub use super::listeners::{Listener, ProcessRole};
use super::{parse_at_least, parse_bool, parse_ratio, ConfigError, Configurable, Ratio};

/// Broker configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    /// `node.id`: this broker's id (Kafka requires it in KRaft mode; seedlog defaults to 0).
    pub node_id: i32,
    /// The broker listener of `listeners` (a controller-only node's controller listener).
    pub listeners: Listener,
    /// The entry of `advertised.listeners` for the broker listener: what Metadata responses
    /// tell clients (default: `listeners`).
    pub advertised_listeners: Option<Listener>,
    /// A combined node's controller listener (the entry `controller.listener.names` names).
    pub controller_listener: Option<Listener>,
    /// The listener keys as written; resolved into the three fields above by `validate`.
    pub listener_keys: ListenerKeys,
    /// `log.dirs` (or `log.dir`): the data directory. One directory for now.
    pub log_dirs: String,
    /// `log.flush.interval.messages`: default of the topic config `flush.messages`.
    pub log_flush_interval_messages: i64,
    /// `log.flush.interval.ms`: default of the topic config `flush.ms` (None: never by time).
    pub log_flush_interval_ms: Option<i64>,
    /// `log.flush.offset.checkpoint.interval.ms`: how often the recovery points are written to
    /// `recovery-point-offset-checkpoint` (start-up scans only what lies past them).
    pub log_flush_offset_checkpoint_interval_ms: i64,
    /// `log.retention.hours` (default 168): default of `retention.ms`, unless
    /// `log.retention.minutes` or `log.retention.ms` is set.
    pub log_retention_hours: i64,
    /// `log.retention.minutes`: takes precedence over the hours.
    pub log_retention_minutes: Option<i64>,
    /// `log.retention.ms`: takes precedence over the minutes (-1: keep for ever).
    pub log_retention_ms: Option<i64>,
    /// `log.retention.bytes` (default -1: no limit): default of `retention.bytes`.
    pub log_retention_bytes: i64,
    /// `log.retention.check.interval.ms` (default 300000): how often logs are checked for
    /// segments to delete.
    pub log_retention_check_interval_ms: i64,
    /// `log.segment.bytes`: default of `segment.bytes`.
    pub log_segment_bytes: i32,
    /// `log.roll.hours` (default 168): default of `segment.ms`, unless `log.roll.ms` is set.
    pub log_roll_hours: i64,
    /// `log.roll.ms`: takes precedence over the hours.
    pub log_roll_ms: Option<i64>,
    /// `log.index.interval.bytes`: default of `index.interval.bytes`.
    pub log_index_interval_bytes: i32,
    /// `message.max.bytes`: default of `max.message.bytes`.
    pub message_max_bytes: i32,
    /// `socket.request.max.bytes`: larger request frames close the connection.
    pub socket_request_max_bytes: i32,
    /// `num.partitions`: partitions of auto-created topics and of CreateTopics with -1.
    pub num_partitions: i32,
    /// `default.replication.factor`.
    pub default_replication_factor: i16,
    /// `min.insync.replicas`: default of the topic config.
    pub min_insync_replicas: i32,
    /// `auto.create.topics.enable`.
    pub auto_create_topics_enable: bool,
    /// `unclean.leader.election.enable`: default of the topic config.
    pub unclean_leader_election_enable: bool,
    /// `max.connections`: beyond it the broker stops accepting until a connection closes.
    pub max_connections: i32,
    /// `max.connections.per.ip`: a new connection from an address at the limit is closed at once.
    pub max_connections_per_ip: i32,
    /// `connections.max.idle.ms`: a connection that sends nothing for this long is closed.
    pub connections_max_idle_ms: i64,
    /// `queued.max.request.bytes` (-1: no bound): request bytes buffered across connections;
    /// when reached, the broker stops reading sockets until requests finish.
    pub queued_max_request_bytes: i64,
    /// `metrics.listener` (seedlog's own; `host:port`): where `GET /metrics` answers in the
    /// Prometheus text format. Off when unset.
    pub metrics_listener: Option<String>,
    /// The replica fetcher's and the leader's replication settings.
    pub replication: ReplicationConfig,
    /// `seedlog.idempotence.generation`: what a leader does with an idempotent batch of a
    /// producer it has no state for.
    pub idempotence_generation: IdempotenceGeneration,
    /// `seedlog.log.dir.failure`: what a storage error on the log directory does.
    pub log_dir_failure: LogDirFailure,
    /// `controller.quorum.voters` (`id@host:port,...`): the controllers this broker registers
    /// with and follows the metadata of. Empty: the broker is its own controller (one node).
    pub controller_quorum_voters: Vec<Voter>,
    /// `controller.quorum.bootstrap.servers` (`host:port,...`), Kafka 4's alternative to
    /// `controller.quorum.voters`. seedlog's voter set is static, so it stands for the voters:
    /// on a controller, one server, this node (Kafka's `--standalone`); on a broker, any number,
    /// each given a handle of its own. Hosts as written, as in `controller.quorum.voters`.
    pub controller_quorum_bootstrap_servers: Vec<(String, u16)>,
    /// `broker.heartbeat.interval.ms` (default 2000).
    pub broker_heartbeat_interval_ms: i64,
    /// `broker.session.timeout.ms` (default 9000): on a controller, how long a broker may go
    /// without a heartbeat before it is fenced.
    pub broker_session_timeout_ms: i64,
    /// `process.roles`: `broker` (the default; with no `controller.quorum.voters`, a broker that
    /// is its own controller) or `controller`.
    pub process_role: ProcessRole,
    /// `seedlog.controller.quorum` (seedlog's own): how a controller's metadata log is made
    /// durable. `raft` (the default with several voters): replicated by Raft among
    /// `controller.quorum.voters`; `local` (the default with one voter): the controller's own
    /// log, committed once fsynced (a quorum of one).
    pub controller_quorum: Option<ControllerQuorum>,
    /// `seedlog.metadata.snapshot.entries` (seedlog's own; default 500): a controller in a Raft
    /// quorum snapshots its metadata after this many log entries, and keeps a fifth of that
    /// behind the snapshot; a voter further behind is sent the snapshot.
    pub metadata_snapshot_entries: u64,
    /// The group coordinator's keys (`offsets.topic.*`, `group.*`).
    pub groups: GroupConfig,
    /// The log cleaner's keys (`log.cleaner.*`).
    pub cleaner: LogCleanerConfig,
    /// Keys set that change nothing in seedlog, with why (logged at start-up).
    pub without_effect: Vec<(String, String)>,
}

/// The log cleaner's configs (compaction of `cleanup.policy=compact` topics), Kafka's names and
/// defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogCleanerConfig {
    /// `log.cleaner.enable` (default true).
    pub enable: bool,
    /// `log.cleaner.backoff.ms` (default 15000): how long the cleaner sleeps when no log needs
    /// cleaning (seedlog checks every compacted log at this interval).
    pub backoff_ms: i64,
    /// `log.cleaner.min.cleanable.ratio` (default 0.5): default of `min.cleanable.dirty.ratio`.
    pub min_cleanable_ratio: Ratio,
    /// `log.cleaner.delete.retention.ms` (default 86400000): default of `delete.retention.ms`.
    pub delete_retention_ms: i64,
    /// `log.cleaner.min.compaction.lag.ms` (default 0): default of `min.compaction.lag.ms`.
    pub min_compaction_lag_ms: i64,
}

impl LogCleanerConfig {
    /// One `log.cleaner.*` key.
    fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            "log.cleaner.enable" => self.enable = parse_bool(key, value)?,
            "log.cleaner.backoff.ms" => self.backoff_ms = parse_at_least(key, value, 0)?,
            "log.cleaner.min.cleanable.ratio" => {
                self.min_cleanable_ratio = parse_ratio(key, value)?
            }
            "log.cleaner.delete.retention.ms" => {
                self.delete_retention_ms = parse_at_least(key, value, 0)?
            }
            "log.cleaner.min.compaction.lag.ms" => {
                self.min_compaction_lag_ms = parse_at_least(key, value, 0)?
            }
            "log.cleaner.threads"
            | "log.cleaner.dedupe.buffer.size"
            | "log.cleaner.io.buffer.size"
            | "log.cleaner.io.max.bytes.per.second" => {
                return Err(ConfigError::not_implemented(
                    key,
                    "one cleaner, no buffer limits",
                ))
            }
            _ => return Err(ConfigError::unknown(key)),
        }
        Ok(())
    }
}

impl Default for LogCleanerConfig {
    fn default() -> Self {
        LogCleanerConfig {
            enable: true,
            backoff_ms: 15_000,
            min_cleanable_ratio: Ratio(0.5),
            delete_retention_ms: 86_400_000,
            min_compaction_lag_ms: 0,
        }
    }
}

/// The group coordinator's configs, Kafka's names and defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `offsets.topic.num.partitions` (default 50): partitions of `__consumer_offsets`.
    pub offsets_topic_num_partitions: i32,
    /// `offsets.topic.replication.factor` (default 3) in a cluster; a lone broker uses 1.
    pub offsets_topic_replication_factor: i16,
    /// `offsets.topic.segment.bytes` (default 100 MiB).
    pub offsets_topic_segment_bytes: i32,
    /// `offsets.commit.timeout.ms` (default 5000): how long a commit waits for the followers.
    pub offsets_commit_timeout_ms: i32,
    /// `offset.metadata.max.bytes` (default 4096).
    pub offset_metadata_max_bytes: i32,
    /// `group.initial.rebalance.delay.ms` (default 3000).
    pub initial_rebalance_delay_ms: i32,
    /// `group.min.session.timeout.ms` (default 6000).
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms` (default 1800000).
    pub max_session_timeout_ms: i32,
    /// `group.max.size` (default unlimited).
    pub max_size: i32,
    /// `offsets.retention.minutes` (default 10080, seven days): how long the committed offsets
    /// of a group stay after it became empty (of a simple consumer's commits: after the commit;
    /// of a stable group: after the commit, for topics no member subscribes to any more).
    pub offsets_retention_minutes: i64,
    /// `offsets.retention.check.interval.ms` (default 600000): how often expired offsets are
    /// looked for.
    pub offsets_retention_check_interval_ms: u64,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            offsets_topic_num_partitions: 50,
            offsets_topic_replication_factor: 3,
            offsets_topic_segment_bytes: 104_857_600,
            offsets_commit_timeout_ms: 5_000,
            offset_metadata_max_bytes: 4_096,
            initial_rebalance_delay_ms: 3_000,
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            max_size: i32::MAX,
            offsets_retention_minutes: 10_080,
            offsets_retention_check_interval_ms: 600_000,
        }
    }
}

/// `seedlog.controller.quorum`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControllerQuorum {
    /// The controller's own log (one voter only).
    Local,
    /// A Raft quorum of every voter.
    Raft,
}

impl BrokerConfig {
    /// Turns `controller.quorum.bootstrap.servers` into the static voter set seedlog runs.
    fn resolve_quorum(&mut self) -> Result<(), ConfigError> {
        let servers = &self.controller_quorum_bootstrap_servers;
        if servers.is_empty() {
            return Ok(());
        }
        let key = "controller.quorum.bootstrap.servers";
        let ids: Vec<i32> = match self.process_role {
            // A broker only needs a handle per controller: its requests to controllers are
            // addressed by role, so a broker with the same id is never confused.
            ProcessRole::Broker => (0..servers.len() as i32).map(|i| i32::MAX - i).collect(),
            ProcessRole::Controller | ProcessRole::Combined if servers.len() == 1 => {
                vec![self.node_id]
            }
            ProcessRole::Controller | ProcessRole::Combined => {
                return Err(ConfigError::not_implemented(
                    key,
                    "a quorum of several controllers is set with controller.quorum.voters (seedlog's voter set is static)",
                ))
            }
        };
        let voters: Vec<Voter> = ids
            .into_iter()
            .zip(servers)
            .map(|(id, (host, port))| Voter {
                id,
                host: host.clone(),
                port: *port,
            })
            .collect();
        if !self.controller_quorum_voters.is_empty() && self.controller_quorum_voters != voters {
            return Err(ConfigError::Conflict(format!(
                "set controller.quorum.voters or {key}, not both"
            )));
        }
        self.controller_quorum_voters = voters;
        Ok(())
    }

    /// The quorum a controller runs: as configured, else Raft with several voters.
    pub fn controller_quorum(&self) -> ControllerQuorum {
        self.controller_quorum
            .unwrap_or(if self.controller_quorum_voters.len() > 1 {
                ControllerQuorum::Raft
            } else {
                ControllerQuorum::Local
            })
    }
}

/// `host:port` split at its last colon, the host as written (an IPv6 host keeps its brackets,
/// so `host:port` can be formed again).
fn host_port(address: &str) -> Option<(String, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

/// One controller of `controller.quorum.voters`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    /// Its node id.
    pub id: i32,
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
}

impl Voter {
    /// Parses `controller.quorum.voters`: `id@host:port` entries separated by commas.
    pub fn parse_list(key: &str, value: &str) -> Result<Vec<Voter>, ConfigError> {
        value
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                let invalid = || ConfigError::invalid(key, value, "expected id@host:port,...");
                let (id, address) = entry.split_once('@').ok_or_else(invalid)?;
                let (host, port) = host_port(address).ok_or_else(invalid)?;
                Ok(Voter {
                    id: id.parse().map_err(|_| invalid())?,
                    host,
                    port,
                })
            })
            .collect()
    }
}

/// Kafka's `replica.*` settings: how followers fetch from leaders and when a leader drops a
/// follower from the ISR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationConfig {
    /// `replica.lag.time.max.ms` (default 30000): a follower that has not caught up to the
    /// leader's log end for this long leaves the ISR.
    pub lag_time_max_ms: i64,
    /// `replica.fetch.wait.max.ms` (default 500): a follower fetch's `max_wait_ms`.
    pub fetch_wait_max_ms: i32,
    /// `replica.fetch.min.bytes` (default 1): a follower fetch's `min_bytes`.
    pub fetch_min_bytes: i32,
    /// `replica.fetch.max.bytes` (default 1 MiB): bytes per partition of a follower fetch.
    pub fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes` (default 10 MiB): bytes of a whole follower fetch.
    pub fetch_response_max_bytes: i32,
    /// `replica.fetch.backoff.ms` (default 1000): the pause after a failed follower fetch.
    pub fetch_backoff_ms: i64,
    /// `replica.socket.timeout.ms` (default 30000): how long a follower waits for the answer to
    /// a fetch before it drops the connection and fetches again on a new one (Kafka's
    /// NetworkClient request timeout for the replica fetcher).
    pub socket_timeout_ms: i64,
    /// `seedlog.replication.generation`: which historical follower protocol runs.
    pub generation: ReplicationGeneration,
    /// `replica.high.watermark.checkpoint.interval.ms` (default 5000): how often a cluster
    /// broker writes every partition's high watermark to `replication-offset-checkpoint`; a
    /// restarted replica's high watermark starts there.
    pub high_watermark_checkpoint_interval_ms: i64,
}

/// The follower protocol of a Kafka generation (`seedlog.replication.generation`), selectable
/// so that the simulator can show each historical anomaly and its fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplicationGeneration {
    /// `hw-truncation`: before KIP-101 a follower truncates to its high watermark when it
    /// starts following (and on restart), which loses committed records when the high
    /// watermark lags and that follower is elected next.
    HwTruncation,
    /// `kip-101` (Kafka 0.11–1.1): a new follower asks the leader (OffsetsForLeaderEpoch)
    /// where the epoch of its last batch ends, truncates there, and only then fetches. It
    /// ignores which epoch the leader's answer is for, so after fast consecutive leader changes
    /// it keeps batches of an epoch the leader never had, below an offset the leader filled
    /// with others: the logs diverge (the hole KIP-279 closed).
    Kip101,
    /// `kip-279` (Kafka 2.0–2.6): as `kip-101`, but when the leader answers for an older epoch
    /// than the one asked, the follower truncates to where that epoch ends in its own log and
    /// asks again, walking back epoch by epoch until both logs agree.
    Kip279,
    /// `kip-320` (Kafka 2.7 to 3.6, and 4.0 clusters without ELR): followers send the epoch
    /// of their last batch and truncate where the leader says their logs diverge (KIP-101's
    /// leader epochs, walked back over several epochs as KIP-279 fixed, carried in the Fetch
    /// itself as since Kafka 2.7); fetches are fenced by `current_leader_epoch` (KIP-320). The
    /// last member of an ISR stays in it when fenced, and is elected again when it returns,
    /// whatever a power loss took from its log ("last replica standing").
    Kip320,
    /// `kip-966` (Kafka 4.1 and later, the default for new clusters): `kip-320`'s followers,
    /// plus Eligible Leader Replicas. The high watermark does not move while the ISR is below
    /// `min.insync.replicas` ("strict min ISR"); a replica that leaves an ISR below the minimum
    /// joins the ELR and may be elected when the ISR is empty; the last ISR member leaves the
    /// ISR when fenced; a broker that registers after an unclean shutdown (no
    /// `.kafka_cleanshutdown` with its broker epoch, sent as `PreviousBrokerEpoch`) leaves every
    /// ISR and ELR, so a replica that lost its unflushed tail is not elected over one that
    /// kept it.
    #[default]
    Kip966,
}

impl ReplicationGeneration {
    /// Whether followers send the epoch of their last fetched batch and truncate where the
    /// leader says the logs diverge (KIP-320's fetch, and every generation after it).
    pub fn fetches_with_last_epoch(self) -> bool {
        matches!(
            self,
            ReplicationGeneration::Kip320 | ReplicationGeneration::Kip966
        )
    }
}

/// What a storage error (a failed write or fsync, a full disk) on the log directory does
/// (`seedlog.log.dir.failure`), selectable so that the simulator can show why Kafka halts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogDirFailure {
    /// `halt` (Kafka's `LogManager.handleLogDirFailure` with one log directory: "Shutdown
    /// broker because all log dirs in ... have failed"): the broker stops at once, writing
    /// nothing more (no clean-shutdown marker); the controller fences it when its session
    /// expires and moves its leaderships; a restart recovers the log.
    #[default]
    Halt,
    /// `offline-partitions` (seedlog before issue 47): the partition whose write failed goes
    /// offline (KAFKA_STORAGE_ERROR) until a restart and the broker goes on serving the others.
    /// A broker that stays up keeps its leaderships and ISR seats, which nothing moves: the
    /// partition stalls until someone restarts the broker.
    OfflinePartitions,
}

/// What a leader does with an idempotent batch whose producer it knows nothing of
/// (`seedlog.idempotence.generation`), selectable so that the simulator can show Kafka's
/// anomaly and its fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdempotenceGeneration {
    /// `kip-360` (Kafka 2.5 to 4.4): any first sequence is accepted (the producer's earlier
    /// batches may have gone with retention). A first batch refused for a retriable reason
    /// (NOT_ENOUGH_REPLICAS, a leader not yet ready) while the next one is accepted leaves the
    /// first behind a sequence it can never fill: its retries get OUT_OF_ORDER_SEQUENCE_NUMBER
    /// and the producer fails it (KAFKA-15591).
    Kip360,
    /// `kafka-19880` (the fix KAFKA-19880 proposes): a batch of an unknown producer must start
    /// at sequence 0, or it gets UNKNOWN_PRODUCER_ID and nothing is written; the producer
    /// sends its earlier batch first, or bumps its epoch and starts again at 0.
    #[default]
    Kafka19880,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            lag_time_max_ms: 30_000,
            fetch_wait_max_ms: 500,
            fetch_min_bytes: 1,
            fetch_max_bytes: 1024 * 1024,
            fetch_response_max_bytes: 10 * 1024 * 1024,
            fetch_backoff_ms: 1_000,
            socket_timeout_ms: 30_000,
            generation: ReplicationGeneration::default(),
            high_watermark_checkpoint_interval_ms: 5_000,
        }
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            node_id: 0,
            listeners: Listener {
                host: String::new(),
                port: 9092,
            },
            advertised_listeners: None,
            controller_listener: None,
            listener_keys: ListenerKeys::default(),
            log_dirs: "/tmp/kafka-logs".to_owned(),
            log_flush_interval_messages: i64::MAX,
            log_flush_interval_ms: None,
            log_flush_offset_checkpoint_interval_ms: 60_000,
            log_retention_hours: 168,
            log_retention_minutes: None,
            log_retention_ms: None,
            log_retention_bytes: -1,
            log_retention_check_interval_ms: 300_000,
            log_segment_bytes: 1024 * 1024 * 1024,
            log_roll_hours: 168,
            log_roll_ms: None,
            log_index_interval_bytes: 4096,
            message_max_bytes: 1_048_588,
            socket_request_max_bytes: 104_857_600,
            num_partitions: 1,
            default_replication_factor: 1,
            min_insync_replicas: 1,
            auto_create_topics_enable: true,
            unclean_leader_election_enable: false,
            max_connections: i32::MAX,
            max_connections_per_ip: i32::MAX,
            connections_max_idle_ms: 600_000,
            queued_max_request_bytes: -1,
            metrics_listener: None,
            replication: ReplicationConfig::default(),
            idempotence_generation: IdempotenceGeneration::default(),
            log_dir_failure: LogDirFailure::default(),
            controller_quorum_voters: Vec::new(),
            controller_quorum_bootstrap_servers: Vec::new(),
            broker_heartbeat_interval_ms: 2_000,
            broker_session_timeout_ms: 9_000,
            process_role: ProcessRole::Broker,
            controller_quorum: None,
            metadata_snapshot_entries: 500,
            groups: GroupConfig::default(),
            cleaner: LogCleanerConfig::default(),
            without_effect: Vec::new(),
        }
    }
}

/// Smallest legal segment (Kafka: `LegacyRecord.RECORD_OVERHEAD_V0`).
pub const SEGMENT_BYTES_MIN: i32 = 14;

impl BrokerConfig {
    /// The default `retention.ms`: `log.retention.ms`, else the minutes, else the hours (Kafka's
    /// precedence); -1 keeps segments for ever.
    pub fn retention_ms(&self) -> i64 {
        let minutes = || {
            self.log_retention_minutes
                .map(|minutes| if minutes < 0 { -1 } else { minutes * 60_000 })
        };
        let hours = || {
            if self.log_retention_hours < 0 {
                -1
            } else {
                self.log_retention_hours * 3_600_000
            }
        };
        self.log_retention_ms.or_else(minutes).unwrap_or_else(hours)
    }

    /// The default `segment.ms`: `log.roll.ms`, else `log.roll.hours` (Kafka's precedence).
    pub fn roll_ms(&self) -> i64 {
        self.log_roll_ms
            .unwrap_or_else(|| self.log_roll_hours.saturating_mul(3_600_000))
    }

    /// The listener clients are told about.
    pub fn advertised(&self) -> Listener {
        let listener = self
            .advertised_listeners
            .clone()
            .unwrap_or_else(|| self.listeners.clone());
        if listener.host.is_empty() {
            Listener {
                host: "localhost".to_owned(),
                port: listener.port,
            }
        } else {
            listener
        }
    }
}

impl BrokerConfig {
    /// The socket server's keys (connection limits, request memory, the metrics listener) and
    /// the replica fetcher's.
    fn set_network(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            "max.connections" => self.max_connections = parse_at_least(key, value, 1)?,
            "max.connections.per.ip" => {
                self.max_connections_per_ip = parse_at_least(key, value, 1)?
            }
            "connections.max.idle.ms" => {
                self.connections_max_idle_ms = parse_at_least(key, value, 1)?
            }
            "queued.max.request.bytes" => {
                self.queued_max_request_bytes = parse_at_least(key, value, -1)?;
                if self.queued_max_request_bytes == 0 {
                    return Err(ConfigError::invalid(key, value, "must be -1 or positive"));
                }
            }
            "replica.lag.time.max.ms" => {
                self.replication.lag_time_max_ms = parse_at_least(key, value, 1)?
            }
            "replica.fetch.wait.max.ms" => {
                self.replication.fetch_wait_max_ms = parse_at_least(key, value, 0)?
            }
            "replica.fetch.min.bytes" => {
                self.replication.fetch_min_bytes = parse_at_least(key, value, 1)?
            }
            "replica.fetch.max.bytes" => {
                self.replication.fetch_max_bytes = parse_at_least(key, value, 0)?
            }
            "replica.fetch.response.max.bytes" => {
                self.replication.fetch_response_max_bytes = parse_at_least(key, value, 0)?
            }
            "replica.high.watermark.checkpoint.interval.ms" => {
                self.replication.high_watermark_checkpoint_interval_ms =
                    parse_at_least(key, value, 1)?
            }
            "replica.fetch.backoff.ms" => {
                self.replication.fetch_backoff_ms = parse_at_least(key, value, 0)?
            }
            "replica.socket.timeout.ms" => {
                self.replication.socket_timeout_ms = parse_at_least(key, value, 1)?
            }
            "metrics.listener" => {
                let address = value.trim();
                if address.parse::<std::net::SocketAddr>().is_err() {
                    return Err(ConfigError::invalid(key, value, "expected ip:port"));
                }
                self.metrics_listener = Some(address.to_owned());
            }
            _ => return self.set_seedlog(key, value),
        }
        Ok(())
    }

    /// seedlog's own keys: the preset and the generations that choose which Kafka's behaviour
    /// the broker has.
    fn set_seedlog(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            "seedlog.replication.generation" => {
                self.replication.generation = match value.trim() {
                    "hw-truncation" => ReplicationGeneration::HwTruncation,
                    "kip-101" => ReplicationGeneration::Kip101,
                    "kip-279" => ReplicationGeneration::Kip279,
                    "kip-320" => ReplicationGeneration::Kip320,
                    "kip-966" => ReplicationGeneration::Kip966,
                    _ => {
                        return Err(ConfigError::invalid(
                            key,
                            value,
                            "expected hw-truncation, kip-101, kip-279, kip-320 or kip-966",
                        ))
                    }
                }
            }
            "seedlog.preset" => {
                // Expanded before the other keys (`Configurable::preset`): here only checked.
                preset_pairs(value, None)?;
            }
            "seedlog.log.dir.failure" => {
                self.log_dir_failure = match value.trim() {
                    "halt" => LogDirFailure::Halt,
                    "offline-partitions" => LogDirFailure::OfflinePartitions,
                    _ => {
                        return Err(ConfigError::invalid(
                            key,
                            value,
                            "expected halt or offline-partitions",
                        ))
                    }
                }
            }
            "seedlog.idempotence.generation" => {
                self.idempotence_generation = match value.trim() {
                    "kip-360" => IdempotenceGeneration::Kip360,
                    "kafka-19880" => IdempotenceGeneration::Kafka19880,
                    _ => {
                        return Err(ConfigError::invalid(
                            key,
                            value,
                            "expected kip-360 or kafka-19880",
                        ))
                    }
                }
            }
            _ => return self.set_cluster(key, value),
        }
        Ok(())
    }

    /// The keys of a node in a controller-run cluster.
    fn set_cluster(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            "process.roles" => {
                let mut roles: Vec<&str> = value.split(',').map(str::trim).collect();
                roles.sort_unstable();
                self.process_role = match roles.as_slice() {
                    ["broker"] => ProcessRole::Broker,
                    ["controller"] => ProcessRole::Controller,
                    ["broker", "controller"] => ProcessRole::Combined,
                    _ => {
                        return Err(ConfigError::invalid(
                            key,
                            value,
                            "expected broker, controller or broker,controller",
                        ))
                    }
                }
            }
            "controller.quorum.voters" => {
                self.controller_quorum_voters = Voter::parse_list(key, value)?;
            }
            "controller.quorum.bootstrap.servers" => {
                self.controller_quorum_bootstrap_servers = super::parse_servers(value)
                    .iter()
                    .map(|server| {
                        host_port(server).ok_or_else(|| {
                            ConfigError::invalid(key, value, "expected host:port,...")
                        })
                    })
                    .collect::<Result<_, ConfigError>>()?;
            }
            "controller.listener.names" => {
                self.listener_keys.controller_names = super::listeners::parse_names(value)
            }
            "inter.broker.listener.name" => {
                self.listener_keys.inter_broker = Some(value.trim().to_ascii_uppercase())
            }
            "listener.security.protocol.map" => {
                self.listener_keys.protocol_map =
                    Some(super::listeners::parse_protocol_map(key, value)?)
            }
            "seedlog.controller.quorum" => {
                self.controller_quorum = Some(match value.trim() {
                    "local" => ControllerQuorum::Local,
                    "raft" => ControllerQuorum::Raft,
                    _ => return Err(ConfigError::invalid(key, value, "expected local or raft")),
                })
            }
            "seedlog.metadata.snapshot.entries" => {
                self.metadata_snapshot_entries = parse_at_least::<i64>(key, value, 1)? as u64
            }
            "broker.heartbeat.interval.ms" => {
                self.broker_heartbeat_interval_ms = parse_at_least(key, value, 1)?
            }
            "broker.session.timeout.ms" => {
                self.broker_session_timeout_ms = parse_at_least(key, value, 1)?
            }
            _ => return self.set_groups(key, value),
        }
        Ok(())
    }

    /// The group coordinator's keys.
    fn set_groups(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let groups = &mut self.groups;
        match key {
            "offsets.topic.num.partitions" => {
                groups.offsets_topic_num_partitions = parse_at_least(key, value, 1)?
            }
            "offsets.topic.replication.factor" => {
                groups.offsets_topic_replication_factor = parse_at_least(key, value, 1)?
            }
            "offsets.topic.segment.bytes" => {
                groups.offsets_topic_segment_bytes = parse_at_least(key, value, SEGMENT_BYTES_MIN)?
            }
            "offsets.commit.timeout.ms" => {
                groups.offsets_commit_timeout_ms = parse_at_least(key, value, 1)?
            }
            "offset.metadata.max.bytes" => {
                groups.offset_metadata_max_bytes = parse_at_least(key, value, 0)?
            }
            "group.initial.rebalance.delay.ms" => {
                groups.initial_rebalance_delay_ms = parse_at_least(key, value, 0)?
            }
            "group.min.session.timeout.ms" => {
                groups.min_session_timeout_ms = parse_at_least(key, value, 1)?
            }
            "group.max.session.timeout.ms" => {
                groups.max_session_timeout_ms = parse_at_least(key, value, 1)?
            }
            "group.max.size" => groups.max_size = parse_at_least(key, value, 1)?,
            "offsets.retention.minutes" => {
                groups.offsets_retention_minutes = parse_at_least(key, value, 1)?
            }
            "offsets.retention.check.interval.ms" => {
                groups.offsets_retention_check_interval_ms = parse_at_least(key, value, 1)?
            }
            _ => return self.set_without_effect(key, value),
        }
        Ok(())
    }

    /// Kafka keys whose value is checked and kept, but which change nothing in seedlog: thread
    /// pools it does not have, socket buffers it leaves to the kernel, and the internal topics
    /// of features it does not have yet. Kafka's own `server.properties` sets them, so a node
    /// started from it runs; `seedlog broker` logs each one at start-up.
    fn set_without_effect(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let (min, why) = match key {
            "num.network.threads"
            | "num.io.threads"
            | "num.replica.fetchers"
            | "num.recovery.threads.per.data.dir"
            | "background.threads" => (1, "seedlog's runtime sizes its own threads"),
            "socket.send.buffer.bytes" | "socket.receive.buffer.bytes" => (
                -1,
                "seedlog leaves socket buffers to the kernel's autotuning (as -1 does)",
            ),
            "transaction.state.log.replication.factor"
            | "transaction.state.log.min.isr"
            | "transaction.state.log.num.partitions" => (
                1,
                "no transactions yet: __transaction_state is never created",
            ),
            "share.coordinator.state.topic.replication.factor"
            | "share.coordinator.state.topic.min.isr" => {
                (1, "no share groups: __share_group_state is never created")
            }
            _ => return Err(ConfigError::unknown(key)),
        };
        if key.starts_with("socket.") {
            let parsed: i32 = parse_at_least(key, value, min)?;
            if parsed == 0 {
                return Err(ConfigError::invalid(key, value, "must be -1 or positive"));
            }
        } else {
            parse_at_least::<i32>(key, value, min)?;
        }
        self.without_effect.retain(|(known, _)| known != key);
        self.without_effect.push((key.to_owned(), why.to_owned()));
        Ok(())
    }
}

/// `seedlog.preset`'s named configurations: what each stands for.
///
/// `durable`: every guarantee of docs/SEMANTICS.md's safe rows holds, internal topics
/// included. Every log fsyncs before a record counts (`log.flush.interval.messages=1`, the
/// default of every topic's `flush.messages`, `__consumer_offsets` included), acks=all needs
/// two in-sync replicas (`min.insync.replicas=2`, the default of every topic, internal ones
/// included), `__consumer_offsets` has three replicas, unclean elections stay off, and
/// replication is KIP-966's. `replicas` (a simulated cluster's size) caps the replication
/// factor and the minimum ISR; a real broker, which cannot know its cluster's size, takes 3
/// and 2: it is meant for a cluster of at least three brokers (a lone broker with it refuses
/// acks=all, as Kafka does when min.insync.replicas exceeds the replicas). Topics created by
/// clients choose their own replication factor: give them 3.
pub fn preset_pairs(
    name: &str,
    replicas: Option<u32>,
) -> Result<Vec<(String, String)>, ConfigError> {
    if name.trim() != "durable" {
        return Err(ConfigError::invalid(
            "seedlog.preset",
            name,
            "expected durable",
        ));
    }
    let factor = replicas.map_or(3, |brokers| brokers.clamp(1, 3));
    let min_insync = factor.min(2);
    Ok([
        ("log.flush.interval.messages", "1".to_owned()),
        ("min.insync.replicas", min_insync.to_string()),
        ("offsets.topic.replication.factor", factor.to_string()),
        ("unclean.leader.election.enable", "false".to_owned()),
        ("seedlog.replication.generation", "kip-966".to_owned()),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value))
    .collect())
}

impl Configurable for BrokerConfig {
    fn preset(&self, key: &str, value: &str) -> Option<Result<Vec<(String, String)>, ConfigError>> {
        (key == "seedlog.preset").then(|| preset_pairs(value, None))
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            "node.id" | "broker.id" => self.node_id = parse_at_least(key, value, 0)?,
            "listeners" => {
                self.listener_keys.listeners = Some(super::listeners::parse_list(key, value)?)
            }
            "advertised.listeners" => {
                self.listener_keys.advertised = Some(super::listeners::parse_list(key, value)?)
            }
            "log.dirs" | "log.dir" => {
                if value.contains(',') {
                    return Err(ConfigError::not_implemented(
                        key,
                        "seedlog uses exactly one log directory",
                    ));
                }
                if value.trim().is_empty() {
                    return Err(ConfigError::invalid(key, value, "must not be empty"));
                }
                self.log_dirs = value.trim().to_owned();
            }
            "log.flush.interval.messages" => {
                self.log_flush_interval_messages = parse_at_least(key, value, 1)?
            }
            "log.flush.interval.ms" => {
                self.log_flush_interval_ms = Some(parse_at_least(key, value, 0)?)
            }
            "log.retention.hours" => self.log_retention_hours = parse_at_least(key, value, -1)?,
            "log.retention.minutes" => {
                self.log_retention_minutes = Some(parse_at_least(key, value, -1)?);
            }
            "log.retention.ms" => self.log_retention_ms = Some(parse_at_least(key, value, -1)?),
            "log.retention.bytes" => self.log_retention_bytes = parse_at_least(key, value, -1)?,
            "log.retention.check.interval.ms" => {
                self.log_retention_check_interval_ms = parse_at_least(key, value, 1)?;
            }
            _ if key.starts_with("log.cleaner.") => self.cleaner.set(key, value)?,
            "log.flush.offset.checkpoint.interval.ms" => {
                self.log_flush_offset_checkpoint_interval_ms = parse_at_least(key, value, 1)?
            }
            "log.segment.bytes" => {
                self.log_segment_bytes = parse_at_least(key, value, SEGMENT_BYTES_MIN)?
            }
            "log.roll.hours" => self.log_roll_hours = parse_at_least(key, value, 1)?,
            "log.roll.ms" => self.log_roll_ms = Some(parse_at_least(key, value, 1)?),
            "log.index.interval.bytes" => {
                self.log_index_interval_bytes = parse_at_least(key, value, 0)?
            }
            "message.max.bytes" => self.message_max_bytes = parse_at_least(key, value, 0)?,
            "socket.request.max.bytes" => {
                self.socket_request_max_bytes = parse_at_least(key, value, 1)?
            }
            "num.partitions" => self.num_partitions = parse_at_least(key, value, 1)?,
            "default.replication.factor" => {
                self.default_replication_factor = parse_at_least(key, value, 1)?
            }
            "min.insync.replicas" => self.min_insync_replicas = parse_at_least(key, value, 1)?,
            "auto.create.topics.enable" => self.auto_create_topics_enable = parse_bool(key, value)?,
            "unclean.leader.election.enable" => {
                self.unclean_leader_election_enable = parse_bool(key, value)?
            }
            _ => return self.set_network(key, value),
        }
        Ok(())
    }

    fn validate(&mut self) -> Result<(), ConfigError> {
        if self.queued_max_request_bytes > 0
            && self.queued_max_request_bytes < i64::from(self.socket_request_max_bytes)
        {
            return Err(ConfigError::Conflict(format!(
                "queued.max.request.bytes={} is below socket.request.max.bytes={}: a largest request could never be read",
                self.queued_max_request_bytes, self.socket_request_max_bytes
            )));
        }
        if i64::from(self.replication.fetch_wait_max_ms) > self.replication.lag_time_max_ms {
            // Kafka's KafkaConfig rule: a follower waiting longer than the lag time would drop
            // out of the ISR while it waits.
            return Err(ConfigError::Conflict(format!(
                "replica.fetch.wait.max.ms={} should always be less than or equal to replica.lag.time.max.ms={} to prevent frequent changes in ISR",
                self.replication.fetch_wait_max_ms, self.replication.lag_time_max_ms
            )));
        }
        if self.replication.socket_timeout_ms < i64::from(self.replication.fetch_wait_max_ms) {
            // Kafka's KafkaConfig rule: a fetch may wait that long at the leader.
            return Err(ConfigError::Conflict(format!(
                "replica.socket.timeout.ms={} should always be at least replica.fetch.wait.max.ms={} to prevent unnecessary socket timeouts",
                self.replication.socket_timeout_ms, self.replication.fetch_wait_max_ms
            )));
        }
        if self.broker_heartbeat_interval_ms >= self.broker_session_timeout_ms {
            return Err(ConfigError::Conflict(format!(
                "broker.heartbeat.interval.ms={} must be less than broker.session.timeout.ms={}",
                self.broker_heartbeat_interval_ms, self.broker_session_timeout_ms
            )));
        }
        self.resolve_quorum()?;
        let resolved = self
            .listener_keys
            .resolve(self.process_role, &self.listeners)?;
        self.listeners = resolved.served;
        if self.listener_keys.advertised.is_some() {
            self.advertised_listeners = resolved.advertised;
        }
        self.controller_listener = resolved.controller;
        if self.process_role != ProcessRole::Broker
            && !self
                .controller_quorum_voters
                .iter()
                .any(|voter| voter.id == self.node_id)
        {
            return Err(ConfigError::Conflict(format!(
                "process.roles={} needs node.id={} among controller.quorum.voters",
                self.process_role, self.node_id
            )));
        }
        if self.controller_quorum == Some(ControllerQuorum::Local)
            && self.controller_quorum_voters.len() > 1
        {
            return Err(ConfigError::Conflict(format!(
                "seedlog.controller.quorum=local allows one voter, controller.quorum.voters has {}",
                self.controller_quorum_voters.len()
            )));
        }
        if self.groups.min_session_timeout_ms > self.groups.max_session_timeout_ms {
            return Err(ConfigError::Conflict(format!(
                "group.min.session.timeout.ms={} is above group.max.session.timeout.ms={}",
                self.groups.min_session_timeout_ms, self.groups.max_session_timeout_ms
            )));
        }
        if self.default_replication_factor != 1 && self.controller_quorum_voters.is_empty() {
            return Err(ConfigError::Conflict(format!(
                "default.replication.factor={} needs other brokers: set controller.quorum.voters",
                self.default_replication_factor
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{apply_properties, parse_properties};

    #[test]
    fn retention_follows_kafkas_precedence_ms_then_minutes_then_hours() {
        let mut config = BrokerConfig::default();
        assert_eq!(config.retention_ms(), 168 * 3_600_000, "a week by default");
        config.apply([("log.retention.hours", "2")]).expect("valid");
        assert_eq!(config.retention_ms(), 2 * 3_600_000);
        config
            .apply([("log.retention.minutes", "3")])
            .expect("valid");
        assert_eq!(config.retention_ms(), 3 * 60_000);
        config.apply([("log.retention.ms", "-1")]).expect("valid");
        assert_eq!(config.retention_ms(), -1, "-1 keeps segments for ever");
        assert!(config.apply([("log.retention.bytes", "-2")]).is_err());
    }

    #[test]
    fn a_server_properties_file_sets_kafka_named_fields() {
        let text = "node.id=2\nlisteners=PLAINTEXT://127.0.0.1:19092\nlog.dirs=/data/x\nlog.flush.interval.messages=1\n";
        let mut config = BrokerConfig::default();
        apply_properties(&mut config, &parse_properties(text).expect("parses")).expect("valid");
        assert_eq!(config.node_id, 2);
        assert_eq!(config.listeners.bind_address(), "127.0.0.1:19092");
        assert_eq!(config.advertised().host, "127.0.0.1");
        assert_eq!(config.log_dirs, "/data/x");
        assert_eq!(config.log_flush_interval_messages, 1);
    }

    /// `seedlog.preset=durable` sets the safe keys, internal topics' defaults included; a key
    /// written beside it overrides it wherever it stands; an unknown preset is refused.
    #[test]
    fn the_durable_preset_sets_the_safe_keys_and_explicit_keys_override_it() {
        let text = "min.insync.replicas=3\nseedlog.preset=durable\n";
        let mut config = BrokerConfig::default();
        apply_properties(&mut config, &parse_properties(text).expect("parses")).expect("valid");
        assert_eq!(config.log_flush_interval_messages, 1);
        assert_eq!(config.min_insync_replicas, 3, "the file's own key wins");
        assert_eq!(config.groups.offsets_topic_replication_factor, 3);
        assert!(!config.unclean_leader_election_enable);
        assert_eq!(config.replication.generation, ReplicationGeneration::Kip966);
        let sized = preset_pairs("durable", Some(1)).expect("durable");
        assert!(sized.contains(&(
            "offsets.topic.replication.factor".to_owned(),
            "1".to_owned()
        )));
        assert!(sized.contains(&("min.insync.replicas".to_owned(), "1".to_owned())));
        let error = BrokerConfig::default()
            .apply([("seedlog.preset", "fast")])
            .expect_err("unknown");
        assert!(error.to_string().contains("expected durable"), "{error}");
    }

    #[test]
    fn kafkas_combined_server_properties_run_a_controller_and_a_broker() {
        let text = "process.roles=broker,controller\nnode.id=1\n\
            controller.quorum.bootstrap.servers=localhost:9093\n\
            listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n\
            inter.broker.listener.name=PLAINTEXT\n\
            advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093\n\
            controller.listener.names=CONTROLLER\n\
            listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL\n\
            num.network.threads=3\nsocket.send.buffer.bytes=102400\n\
            transaction.state.log.replication.factor=1\n";
        let mut config = BrokerConfig::default();
        apply_properties(&mut config, &parse_properties(text).expect("parses")).expect("valid");
        assert_eq!(config.process_role, ProcessRole::Combined);
        assert_eq!(config.listeners.port, 9092);
        assert_eq!(
            config.controller_listener.as_ref().map(|l| l.port),
            Some(9093)
        );
        assert_eq!(config.advertised().host, "localhost");
        // The one bootstrap server is this node: a quorum of one (Kafka's --standalone).
        assert_eq!(
            config.controller_quorum_voters,
            vec![Voter {
                id: 1,
                host: "localhost".to_owned(),
                port: 9093
            }]
        );
        let kept: Vec<&str> = config
            .without_effect
            .iter()
            .map(|(key, _)| key.as_str())
            .collect();
        assert_eq!(
            kept,
            [
                "num.network.threads",
                "socket.send.buffer.bytes",
                "transaction.state.log.replication.factor"
            ]
        );
        // Validating again (a later key) resolves to the same.
        let before = config.clone();
        config.apply([("num.partitions", "3")]).expect("valid");
        assert_eq!(
            config.controller_quorum_voters,
            before.controller_quorum_voters
        );
        assert_eq!(config.listeners, before.listeners);
    }

    #[test]
    fn combined_mode_refuses_what_it_cannot_serve() {
        let check = |text: &str, wanted: &str| {
            let mut config = BrokerConfig::default();
            let error = apply_properties(&mut config, &parse_properties(text).expect("parses"))
                .expect_err(text);
            assert!(error.to_string().contains(wanted), "{text}: {error}");
        };
        let combined = "process.roles=broker,controller\nnode.id=1\n\
            listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n";
        check(combined, "needs controller.listener.names");
        check(
            &format!("{combined}controller.listener.names=CONTROLLER\n"),
            "needs node.id=1 among controller.quorum.voters",
        );
        check(
            &format!("{combined}controller.listener.names=CONTROLLER\ncontroller.quorum.bootstrap.servers=a:1,b:2\n"),
            "controller.quorum.voters",
        );
        check(
            &format!("{combined}controller.listener.names=CONTROLLER\ncontroller.quorum.voters=2@a:1\ncontroller.quorum.bootstrap.servers=a:1\n"),
            "not both",
        );
        check(
            "process.roles=broker,admin\n",
            "expected broker, controller or broker,controller",
        );
        check("num.io.threads=0\n", "at least 1");
        check("socket.send.buffer.bytes=0\n", "-1 or positive");
    }

    #[test]
    fn a_broker_addresses_controllers_from_bootstrap_servers() {
        let mut config = BrokerConfig::default();
        config
            .apply([("controller.quorum.bootstrap.servers", "c1:9093,[::1]:9093")])
            .expect("valid");
        let hosts: Vec<&str> = config
            .controller_quorum_voters
            .iter()
            .map(|v| v.host.as_str())
            .collect();
        // As in controller.quorum.voters, a host keeps its brackets: `[::1]:9093` is an address.
        assert_eq!(hosts, ["c1", "[::1]"]);
    }

    #[test]
    fn bad_lines_are_reported_with_their_line_number() {
        let mut config = BrokerConfig::default();
        let properties = parse_properties("node.id=1\nlog.segment.bytes=3\n").expect("parses");
        let error = apply_properties(&mut config, &properties).expect_err("too small");
        assert_eq!(
            error.to_string(),
            "line 2: invalid value '3' for 'log.segment.bytes': value must be at least 14"
        );
        let properties = parse_properties("\nlistener=PLAINTEXT://:1\n").expect("parses");
        let error = apply_properties(&mut config, &properties).expect_err("typo");
        assert_eq!(error.to_string(), "line 2: unknown config 'listener'");
        let properties = parse_properties("listeners=SSL://:1\n").expect("parses");
        assert!(apply_properties(&mut config, &properties).is_err());
    }
}
