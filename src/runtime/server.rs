//! The broker shell: opens storage, recovers, syncs, listens, and runs the [`Broker`] state
//! machine in one driver task fed by the connection tasks. The same code runs on real tokio
//! (`seedlog broker`) and on madsim (the simulator's broker nodes).

mod connections;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};

use crate::broker::metrics::BrokerMetrics;
use crate::broker::{Broker, BrokerError, BrokerEvent, ConnectionId, Input, Output, PeerRole};
use crate::config::broker::{ControllerQuorum, ProcessRole};
use crate::config::BrokerConfig;
use crate::controller::node::{ControllerNode, QuorumKind};
use crate::log::FlushSync;
use crate::metadata::QuorumInput;
use crate::runtime::clock::Clock;
use crate::runtime::driver::Driver;
use crate::runtime::metrics::{self, ShellMetrics, SnapshotRequest};
use crate::runtime::net::ConnectionFaults;
use crate::runtime::peers::{PeerAnswer, PeerCall, Peers};
use crate::runtime::quorum::Quorum;
use crate::runtime::storage::{DurableFile, DurableStorage};
use crate::state_machine::StateMachine;
use crate::types::{BrokerId, Millis};

use self::connections::{
    Acceptor, ConnectionLimits, ConnectionShared, DriverMessage, LimitsConfig, Reply,
};

/// Sees the broker's events (the simulator records them in its history).
pub trait BrokerObserver: Send + Sync {
    /// One event, in the order the broker produced them.
    fn on_event(&self, event: &BrokerEvent);
}

/// What the server loop needs of the machine it serves, beyond the state machine: a broker
/// or a controller.
pub trait Served<F>: StateMachine<Input = Input, Output = Output<F>> {
    /// A snapshot for the metrics endpoint, if the machine has one.
    fn metrics_snapshot(&self) -> Option<BrokerMetrics>;
    /// Where to reach another node (`host:port`), if known.
    fn peer_address(&self, peer: BrokerId, role: PeerRole) -> Option<(&str, i32)>;
}

impl<S: DurableStorage> Served<S::File> for Broker<S> {
    fn metrics_snapshot(&self) -> Option<BrokerMetrics> {
        Some(self.metrics())
    }

    fn peer_address(&self, peer: BrokerId, role: PeerRole) -> Option<(&str, i32)> {
        Broker::peer_address(self, peer, role)
    }
}

impl<S: DurableStorage> Served<S::File> for ControllerNode<S> {
    fn metrics_snapshot(&self) -> Option<BrokerMetrics> {
        None
    }

    fn peer_address(&self, _peer: BrokerId, _role: PeerRole) -> Option<(&str, i32)> {
        None
    }
}

/// Knobs the embedding world sets.
#[derive(Clone, Default)]
pub struct ServerOptions {
    /// Seeds the broker's RNG (topic and cluster ids).
    pub seed: u64,
    /// Network fault hook (simulation only).
    pub faults: Option<Arc<dyn ConnectionFaults>>,
    /// Event hook (simulation only); without one, events are logged at debug level.
    pub observer: Option<Arc<dyn BrokerObserver>>,
    /// Notified to shut down cleanly (the CLI does on SIGTERM and SIGINT).
    pub shutdown: Option<Arc<Notify>>,
    /// Added to the wall clock read at start (a skewed clock; simulation only, 0 in
    /// production). The broker counts monotonic time from that reading and never steps it.
    pub wall_clock_offset_ms: i64,
}

/// How long a shutdown waits for in-flight requests before it flushes anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

fn publish(observer: Option<&dyn BrokerObserver>, event: &BrokerEvent) {
    if let Some(observer) = observer {
        observer.on_event(event);
    } else {
        tracing::debug!(?event, "broker event");
    }
}

/// Runs one flush: every file, then every directory; the first failure ends it.
async fn run_flush<S: DurableStorage>(storage: &S, sync: FlushSync<S::File>) -> Result<(), String> {
    for file in sync.files {
        file.sync()
            .await
            .map_err(|error| format!("{file:?}: {error}"))?;
    }
    for directory in sync.directories {
        storage
            .sync_directory(&directory)
            .await
            .map_err(|error| format!("directory '{directory}': {error}"))?;
    }
    Ok(())
}

/// Why the broker stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Startup failed.
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// The listener or an fsync failed. The message carries the error's text, so it is not
    /// also a `source` (an error chain would print it twice).
    #[error("io: {0}")]
    Io(std::io::Error),
    /// A storage failure halted the node ([`Output::Halt`]).
    #[error("halted: {0}")]
    Halted(String),
}

impl From<std::io::Error> for ServerError {
    fn from(error: std::io::Error) -> Self {
        ServerError::Io(error)
    }
}

/// Runs a broker until the process (or simulated node) dies.
pub async fn run_broker<S: DurableStorage>(
    config: BrokerConfig,
    storage: S,
    options: ServerOptions,
) -> Result<(), ServerError> {
    let clock = Clock::start();
    let config_limits = LimitsConfig::of(&config);
    let metrics_listener = config.metrics_listener.clone();
    let bind_address = config.listeners.bind_address();
    let (mut broker, report) = Broker::open(config, storage.clone(), options.seed, clock.now())?;
    broker.set_wall_clock(
        clock.now(),
        crate::runtime::clock::wall_clock_ms() + options.wall_clock_offset_ms,
    );
    run_flush(&storage, report.to_sync)
        .await
        .map_err(std::io::Error::other)?;
    for event in &report.events {
        publish(options.observer.as_deref(), event);
    }
    tracing::info!(
        cluster_id = %report.cluster_id,
        topics = report.topics,
        partitions = report.partitions,
        batches = report.recovery.batches,
        truncated_bytes = report.recovery.truncated_bytes,
        stray_files_removed = report.stray_files_removed,
        unscanned_segments = report.recovery.unscanned_segments,
        clean_shutdown = report.clean_shutdown,
        corruption = report.recovery.corruption.as_deref().unwrap_or("none"),
        "log recovered"
    );
    let listening = Listening {
        bind_address,
        limits: config_limits,
        apis: &crate::protocol::api_versions::SUPPORTED_APIS,
        metrics_listener,
        client_id: format!("broker-{}", broker.node_id().0),
    };
    serve(broker, clock, storage, listening, options, None).await
}

/// A controller node (`process.roles=controller`): the controller's decisions over its local
/// metadata log, served to brokers until the process (or simulated node) dies.
pub async fn run_controller<S: DurableStorage>(
    config: BrokerConfig,
    storage: S,
    options: ServerOptions,
) -> Result<(), ServerError> {
    let clock = Clock::start();
    let settings = crate::controller::ControllerConfig {
        broker_session_timeout_ms: config.broker_session_timeout_ms as u64,
        unclean_leader_election_enable: config.unclean_leader_election_enable,
        eligible_leader_replicas: config.replication.generation
            == crate::config::broker::ReplicationGeneration::Kip966,
        min_insync_replicas: config.min_insync_replicas,
    };
    let bind_address = config.listeners.bind_address();
    let listening = Listening {
        bind_address,
        limits: LimitsConfig::of(&config),
        apis: &crate::protocol::api_versions::CONTROLLER_APIS,
        metrics_listener: None,
        client_id: format!("controller-{}", config.node_id),
    };
    let node_id = config.node_id;
    let (kind, quorum) = match config.controller_quorum() {
        ControllerQuorum::Local => (QuorumKind::Local, None),
        ControllerQuorum::Raft => {
            let (to_node, inputs) = mpsc::channel(1024);
            let host = listening
                .bind_address
                .rsplit_once(':')
                .map_or("0.0.0.0", |(host, _)| host)
                .to_owned();
            let quorum = Quorum::start(
                u64::from(node_id as u32),
                &config.controller_quorum_voters,
                config.metadata_snapshot_entries,
                &host,
                &storage,
                to_node,
            )
            .await?;
            (QuorumKind::Raft { me: node_id }, Some((quorum, inputs)))
        }
    };
    let (node, to_sync) = ControllerNode::open_with(
        kind,
        settings,
        config,
        storage.clone(),
        options.seed,
        clock.now(),
    )?;
    if let Some(sync) = to_sync {
        run_flush(&storage, sync)
            .await
            .map_err(std::io::Error::other)?;
    }
    tracing::info!(node_id, committed = node.committed(), "controller opened");
    serve(node, clock, storage, listening, options, quorum).await
}

pub use crate::metadata::COMBINED_CONTROLLER_DIRECTORY;

/// Kafka's combined mode (`process.roles=broker,controller`): a controller on the listener
/// `controller.listener.names` names, with its files in `controller_storage`, and a broker on
/// the other listener, in one process. A shutdown stops the broker first, then the controller,
/// as Kafka's `KafkaRaftServer` does; when either stops on its own, the other is stopped too.
pub async fn run_combined<S: DurableStorage>(
    config: BrokerConfig,
    storage: S,
    controller_storage: S,
    options: ServerOptions,
) -> Result<(), ServerError> {
    let mut controller_config = config.clone();
    controller_config.process_role = ProcessRole::Controller;
    controller_config.listeners = config
        .controller_listener
        .clone()
        .expect("validated: a combined node has a controller listener");
    controller_config.metrics_listener = None;
    let mut broker_config = config;
    broker_config.process_role = ProcessRole::Broker;
    let stop_controller = Arc::new(Notify::new());
    let stop_broker = options.shutdown.clone().unwrap_or_default();
    let controller_options = ServerOptions {
        shutdown: Some(stop_controller.clone()),
        ..options.clone()
    };
    let broker_options = ServerOptions {
        shutdown: Some(stop_broker.clone()),
        ..options
    };
    let mut controller = Box::pin(run_controller(
        controller_config,
        controller_storage,
        controller_options,
    ));
    let mut broker = Box::pin(run_broker(broker_config, storage, broker_options));
    tokio::select! {
        biased;
        stopped = &mut broker => {
            stop_controller.notify_one();
            let controller_stopped = controller.await;
            stopped.and(controller_stopped)
        }
        stopped = &mut controller => {
            tracing::error!("the controller stopped: stopping the broker");
            stop_broker.notify_one();
            let broker_stopped = broker.await;
            stopped.and(broker_stopped)
        }
    }
}

/// Where and how a node listens.
struct Listening {
    bind_address: String,
    limits: LimitsConfig,
    apis: &'static [crate::protocol::api_versions::SupportedApi],
    metrics_listener: Option<String>,
    /// Names this node in its requests to peers.
    client_id: String,
}

/// Binds, accepts and drives `machine` until it stops.
async fn serve<S: DurableStorage, M: Served<S::File>>(
    machine: M,
    clock: Clock,
    storage: S,
    listening: Listening,
    options: ServerOptions,
    quorum: Option<(Quorum, mpsc::Receiver<QuorumInput>)>,
) -> Result<(), ServerError> {
    let Listening {
        bind_address,
        limits: config_limits,
        apis,
        metrics_listener,
        client_id,
    } = listening;
    let listener = TcpListener::bind(&bind_address).await?;
    tracing::info!(address = %bind_address, node = %client_id, "listening");
    let (to_driver, inbox) = mpsc::channel(1024);
    // Closed when the shutdown starts: every waiter wakes, in the order it waited. (Not a
    // `watch` channel: its notify shards are picked at random, so wake-ups would not be
    // deterministic under the simulator.)
    let closing = Arc::new(Semaphore::new(0));
    let (alive, all_closed) = mpsc::channel::<()>(1);
    let (metrics, snapshots) = match metrics_listener {
        Some(address) => {
            let listener = TcpListener::bind(&address).await?;
            tracing::info!(%address, "metrics at GET /metrics");
            let metrics = ShellMetrics::default();
            let (ask, snapshots) = mpsc::channel(16);
            tokio::spawn(metrics::serve(listener, metrics.clone(), ask));
            (Some(metrics), Some(snapshots))
        }
        None => (None, None),
    };
    let acceptor = Acceptor {
        listener,
        limits: ConnectionLimits::new(&config_limits),
        shared: ConnectionShared {
            to_driver: to_driver.clone(),
            max_request_bytes: config_limits.max_request_bytes,
            apis,
            faults: options.faults.clone(),
            closing: Arc::clone(&closing),
            metrics: metrics.clone(),
        },
        alive,
    };
    let accept_task = tokio::spawn(acceptor.run());
    let (answers, peer_answers) = mpsc::unbounded_channel();
    let (quorum, quorum_inputs) = quorum.unzip();
    let shell = Shell {
        quorum,
        quorum_inputs,
        storage,
        observer: options.observer,
        to_driver,
        metrics,
        peers: Peers::new(client_id, answers),
        peer_answers,
    };
    let stop = Stop {
        requested: options.shutdown,
        closing,
        accept_task,
        all_closed,
        snapshots,
    };
    drive(machine, clock, inbox, shell, stop).await
}

/// How the driver loop stops.
struct Stop {
    requested: Option<Arc<Notify>>,
    closing: Arc<Semaphore>,
    accept_task: tokio::task::JoinHandle<()>,
    all_closed: mpsc::Receiver<()>,
    /// The metrics endpoint's requests for a snapshot of the core.
    snapshots: Option<mpsc::Receiver<SnapshotRequest>>,
}

impl Stop {
    /// The machine stopped (`Ok(clean)`) or halted (`Err(reason)`): after a halt, with no drain
    /// and no flush, every connection closes now.
    fn finish(self, stopped: Result<bool, String>) -> Result<(), ServerError> {
        match stopped {
            Ok(clean) => {
                tracing::info!(clean_shutdown_marker = clean, "stopped");
                Ok(())
            }
            Err(reason) => {
                self.accept_task.abort();
                self.closing.close();
                tracing::error!(%reason, "halted");
                Err(ServerError::Halted(reason))
            }
        }
    }
}

/// What the driver needs to carry out outputs.
struct Shell<S: DurableStorage> {
    /// The controller quorum this node is a member of, and what it feeds the node.
    quorum: Option<Quorum>,
    quorum_inputs: Option<mpsc::Receiver<QuorumInput>>,
    storage: S,
    observer: Option<Arc<dyn BrokerObserver>>,
    to_driver: mpsc::Sender<DriverMessage<S::File>>,
    metrics: Option<ShellMetrics>,
    peers: Peers,
    peer_answers: mpsc::UnboundedReceiver<PeerAnswer>,
}

/// Where a broker is on its way out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Serving,
    /// No new connections or requests; in-flight requests finish until every connection has
    /// closed or the grace period ends.
    Draining {
        until: Millis,
    },
    /// [`Input::Shutdown`] sent: flushing until [`Output::Stopped`].
    Flushing,
}

/// The next message of an optional channel (never, without one).
async fn next_of<T>(receiver: Option<&mut mpsc::Receiver<T>>) -> Option<T> {
    match receiver {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

async fn notified(notify: Option<&Notify>) {
    match notify {
        Some(notify) => notify.notified().await,
        None => std::future::pending().await,
    }
}

/// The driver loop: one input at a time into the state machine, outputs executed in order.
async fn drive<S: DurableStorage, M: Served<S::File>>(
    machine: M,
    clock: Clock,
    mut inbox: mpsc::Receiver<DriverMessage<S::File>>,
    mut shell: Shell<S>,
    mut stop: Stop,
) -> Result<(), ServerError> {
    let mut replies: BTreeMap<ConnectionId, oneshot::Sender<Reply<S::File>>> = BTreeMap::new();
    let mut outputs = Vec::new();
    let mut driver = Driver::new(machine, clock);
    let mut phase = Phase::Serving;
    let requested = stop.requested.clone();
    loop {
        let grace_end = match phase {
            Phase::Draining { until } => Some(until),
            Phase::Serving | Phase::Flushing => None,
        };
        let deadline = driver.wake(grace_end);
        let draining = grace_end.is_some();
        let input = tokio::select! {
            biased;
            message = inbox.recv() => match message.expect("the shell keeps a sender alive") {
                DriverMessage::Request { connection, request, reply } => {
                    replies.insert(connection, reply);
                    Input::Request { connection, request }
                }
                DriverMessage::Closed { connection } => {
                    replies.remove(&connection);
                    Input::ConnectionClosed { connection }
                }
                DriverMessage::FlushDone { flush_id, result } => Input::FlushCompleted { flush_id, result },
            },
            Some((peer, id, result)) = shell.peer_answers.recv() => Input::PeerResponse { peer, id, result },
            Some(input) = next_of(shell.quorum_inputs.as_mut()) => Input::Quorum(input),
            Some(reply) = next_of(stop.snapshots.as_mut()) => {
                if let Some(snapshot) = driver.machine().metrics_snapshot() {
                    let _ = reply.send(snapshot);
                }
                continue;
            }
            () = notified(requested.as_deref()), if phase == Phase::Serving => {
                tracing::info!("shutdown requested: no new connections or requests");
                stop.accept_task.abort();
                stop.closing.close();
                phase = Phase::Draining { until: driver.now().plus(SHUTDOWN_GRACE.as_millis() as u64) };
                continue;
            }
            None = stop.all_closed.recv(), if draining => {
                phase = Phase::Flushing;
                Input::Shutdown
            }
            () = driver.clock().sleep_until(deadline), if deadline.is_some() => {
                if grace_end.is_some_and(|until| driver.now() >= until) {
                    tracing::warn!("requests still in flight after the grace period: flushing anyway");
                    phase = Phase::Flushing;
                    Input::Shutdown
                } else {
                    Input::Tick
                }
            }
        };
        driver.step(input, &mut outputs);
        if let Some(stopped) = carry_out(&mut outputs, &driver, &mut replies, &mut shell) {
            return stop.finish(stopped);
        }
    }
}

/// Carries out a step's outputs in order; returns `Some(Ok(clean))` if the machine stopped,
/// `Some(Err(reason))` if it halted.
fn carry_out<S: DurableStorage, M: Served<S::File>>(
    outputs: &mut Vec<Output<S::File>>,
    driver: &Driver<M>,
    replies: &mut BTreeMap<ConnectionId, oneshot::Sender<Reply<S::File>>>,
    shell: &mut Shell<S>,
) -> Option<Result<bool, String>> {
    let mut stopped = None;
    for output in outputs.drain(..) {
        match output {
            Output::Stopped { clean } => stopped = Some(Ok(clean)),
            Output::Halt { reason } => stopped = Some(Err(reason)),
            Output::PeerRequest {
                peer,
                role,
                id,
                api_version,
                body,
                timeout_ms,
            } => {
                let address = driver.machine().peer_address(peer, role);
                let call = PeerCall {
                    id,
                    api_version,
                    body,
                    timeout: std::time::Duration::from_millis(timeout_ms),
                };
                shell.peers.send(peer, address, call);
            }
            output => execute(output, replies, shell),
        }
    }
    stopped
}

fn execute<S: DurableStorage>(
    output: Output<S::File>,
    replies: &mut BTreeMap<ConnectionId, oneshot::Sender<Reply<S::File>>>,
    shell: &Shell<S>,
) {
    let reply = |replies: &mut BTreeMap<ConnectionId, oneshot::Sender<Reply<S::File>>>,
                 connection,
                 reply| {
        if let Some(sender) = replies.remove(&connection) {
            let _ = sender.send(reply);
        }
    };
    match output {
        Output::Respond {
            connection,
            response,
        } => reply(replies, connection, Reply::Respond(Box::new(response))),
        Output::NoResponse { connection } => reply(replies, connection, Reply::NoResponse),
        Output::Close { connection, reason } => reply(replies, connection, Reply::Close(reason)),
        Output::Flush { flush_id, sync } => {
            let to_driver = shell.to_driver.clone();
            let storage = shell.storage.clone();
            let metrics = shell.metrics.clone();
            tokio::spawn(async move {
                let started = tokio::time::Instant::now();
                let result = run_flush(&storage, sync).await;
                if let Some(metrics) = metrics {
                    metrics.flush_done(started.elapsed());
                }
                let _ = to_driver
                    .send(DriverMessage::FlushDone { flush_id, result })
                    .await;
            });
        }
        Output::PeerRequest { .. } => unreachable!("the driver loop sends peer requests"),
        Output::Propose { records } => match &shell.quorum {
            Some(quorum) => quorum.propose(&records),
            None => unreachable!("only a controller in a Raft quorum proposes"),
        },
        Output::Event(event) => publish(shell.observer.as_deref(), &event),
        Output::Stopped { .. } | Output::Halt { .. } => {
            unreachable!("the driver loop handles Stopped and Halt")
        }
    }
}

/// The APIs a connection fault may target, by the names scenarios give them.
pub const FAULT_APIS: &[(&str, ApiKey)] = &[
    ("produce", ApiKey::Produce),
    ("fetch", ApiKey::Fetch),
    ("list_offsets", ApiKey::ListOffsets),
    ("metadata", ApiKey::Metadata),
    ("api_versions", ApiKey::ApiVersions),
    ("create_topics", ApiKey::CreateTopics),
    ("delete_records", ApiKey::DeleteRecords),
    ("init_producer_id", ApiKey::InitProducerId),
    ("find_coordinator", ApiKey::FindCoordinator),
    ("join_group", ApiKey::JoinGroup),
    ("sync_group", ApiKey::SyncGroup),
    ("heartbeat", ApiKey::Heartbeat),
    ("leave_group", ApiKey::LeaveGroup),
    ("offset_commit", ApiKey::OffsetCommit),
    ("offset_fetch", ApiKey::OffsetFetch),
];

/// The API a fault names (one of [`FAULT_APIS`]).
pub fn api_by_name(name: &str) -> Option<ApiKey> {
    FAULT_APIS
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, api)| *api)
}
