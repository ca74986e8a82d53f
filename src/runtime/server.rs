//! The broker shell: opens storage, recovers, syncs, listens, and runs the [`Broker`] state
//! machine in one driver task fed by the connection tasks. The same code runs on real tokio
//! (`seedlog broker`) and on madsim (the simulator's broker nodes).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, Notify, OwnedSemaphorePermit, Semaphore};

use crate::broker::{
    produce_rejection, Broker, BrokerError, BrokerEvent, ConnectionId, FlushId, Input, Output,
    Response, ResponseBody,
};
use crate::config::BrokerConfig;
use crate::log::FlushSync;
use crate::protocol::codec::{decode_request, encode_api_versions_fallback, Decoded, Request};
use crate::runtime::clock::Clock;
use crate::runtime::driver::Driver;
use crate::runtime::metrics::{self, ShellMetrics, SnapshotRequest};
use crate::runtime::net::{Connection, ConnectionFaults, FaultAction, ReadLimits};
use crate::runtime::storage::{DurableFile, DurableStorage};
use crate::types::Millis;

/// Sees the broker's events (the simulator records them in its history).
pub trait BrokerObserver: Send + Sync {
    /// One event, in the order the broker produced them.
    fn on_event(&self, event: &BrokerEvent);
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
    /// The listener or an fsync failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// What a connection task hears back for its request.
enum Reply<F> {
    Respond(Box<Response<F>>),
    NoResponse,
    Close(String),
}

/// Messages into the driver task.
enum DriverMessage<F> {
    Request {
        connection: ConnectionId,
        request: Box<Request>,
        reply: oneshot::Sender<Reply<F>>,
    },
    Closed {
        connection: ConnectionId,
    },
    FlushDone {
        flush_id: FlushId,
        result: Result<(), String>,
    },
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
    broker.set_wall_clock(clock.now(), crate::runtime::clock::wall_clock_ms());
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
    let listener = TcpListener::bind(&bind_address).await?;
    tracing::info!(address = %bind_address, node_id = broker.node_id().0, "listening");
    let (to_driver, inbox) = mpsc::channel(1024);
    let (closing, closing_seen) = watch::channel(false);
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
            faults: options.faults.clone(),
            closing: closing_seen,
            metrics: metrics.clone(),
        },
        alive,
    };
    let accept_task = tokio::spawn(acceptor.run());
    let shell = Shell {
        storage,
        observer: options.observer,
        to_driver,
        metrics,
    };
    let stop = Stop {
        requested: options.shutdown,
        closing,
        accept_task,
        all_closed,
        snapshots,
    };
    drive(broker, clock, inbox, shell, stop).await;
    Ok(())
}

/// The connection limits of the broker's config.
#[derive(Debug, Clone)]
struct LimitsConfig {
    max_request_bytes: usize,
    max_connections: usize,
    max_connections_per_ip: usize,
    idle: Duration,
    queued_max_request_bytes: Option<usize>,
}

impl LimitsConfig {
    fn of(config: &BrokerConfig) -> LimitsConfig {
        LimitsConfig {
            max_request_bytes: config.socket_request_max_bytes as usize,
            max_connections: usize::try_from(config.max_connections).unwrap_or(1),
            max_connections_per_ip: usize::try_from(config.max_connections_per_ip).unwrap_or(1),
            idle: Duration::from_millis(config.connections_max_idle_ms as u64),
            queued_max_request_bytes: usize::try_from(config.queued_max_request_bytes).ok(),
        }
    }
}

/// What every connection shares: the connection count, per-address counts, request memory.
struct ConnectionLimits {
    config: LimitsConfig,
    connections: Arc<Semaphore>,
    per_ip: Arc<Mutex<HashMap<IpAddr, usize>>>,
    memory: Option<Arc<Semaphore>>,
}

impl ConnectionLimits {
    fn new(config: &LimitsConfig) -> ConnectionLimits {
        let bound = |limit: usize| limit.min(Semaphore::MAX_PERMITS);
        ConnectionLimits {
            config: config.clone(),
            connections: Arc::new(Semaphore::new(bound(config.max_connections))),
            per_ip: Arc::new(Mutex::new(HashMap::new())),
            memory: config
                .queued_max_request_bytes
                .map(|bytes| Arc::new(Semaphore::new(bound(bytes)))),
        }
    }

    /// Counts a connection from `ip`, or `None` if that address is at its limit.
    fn admit_ip(&self, ip: IpAddr) -> Option<IpSlot> {
        let mut counts = self.per_ip.lock().expect("not poisoned");
        let count = counts.entry(ip).or_insert(0);
        if *count >= self.config.max_connections_per_ip {
            return None;
        }
        *count += 1;
        Some(IpSlot {
            ip,
            counts: self.per_ip.clone(),
        })
    }
}

/// One connection's place in its address's count; given back on drop.
struct IpSlot {
    ip: IpAddr,
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().expect("not poisoned");
        if let Some(count) = counts.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// The accept loop and what it hands each connection.
struct Acceptor<F> {
    listener: TcpListener,
    limits: ConnectionLimits,
    shared: ConnectionShared<F>,
    /// Each connection task holds a clone: when all are gone, every connection has closed.
    alive: mpsc::Sender<()>,
}

/// What every connection task gets a clone of.
struct ConnectionShared<F> {
    to_driver: mpsc::Sender<DriverMessage<F>>,
    max_request_bytes: usize,
    faults: Option<Arc<dyn ConnectionFaults>>,
    /// Becomes true when the broker starts its shutdown.
    closing: watch::Receiver<bool>,
    metrics: Option<ShellMetrics>,
}

impl<F> Clone for ConnectionShared<F> {
    fn clone(&self) -> Self {
        ConnectionShared {
            to_driver: self.to_driver.clone(),
            max_request_bytes: self.max_request_bytes,
            faults: self.faults.clone(),
            closing: self.closing.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

impl<F: DurableFile> Acceptor<F> {
    /// Accepts until aborted: at `max.connections` it waits for a connection to close before
    /// accepting again (Kafka's acceptor does); a connection beyond `max.connections.per.ip`
    /// is closed at once.
    async fn run(self) {
        let mut next_connection = 0u64;
        loop {
            let slot = self
                .limits
                .connections
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            let (stream, peer) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let Some(ip_slot) = self.limits.admit_ip(peer.ip()) else {
                tracing::warn!(%peer, limit = self.limits.config.max_connections_per_ip, "max.connections.per.ip reached: closing the new connection");
                continue;
            };
            next_connection += 1;
            let connection = ConnectionId(next_connection);
            let _ = stream.set_nodelay(true);
            tracing::debug!(%peer, connection = connection.0, "accepted");
            let limits = ReadLimits {
                memory: self.limits.memory.clone(),
                idle: Some(self.limits.config.idle),
            };
            let task = serve_connection(
                Accepted {
                    stream,
                    connection,
                    limits,
                    slots: (slot, ip_slot),
                    alive: self.alive.clone(),
                },
                self.shared.clone(),
            );
            tokio::spawn(task);
        }
    }
}

/// An accepted connection and the slots it holds until it closes.
struct Accepted {
    stream: TcpStream,
    connection: ConnectionId,
    limits: ReadLimits,
    slots: (OwnedSemaphorePermit, IpSlot),
    alive: mpsc::Sender<()>,
}

/// How the driver loop stops.
struct Stop {
    requested: Option<Arc<Notify>>,
    closing: watch::Sender<bool>,
    accept_task: tokio::task::JoinHandle<()>,
    all_closed: mpsc::Receiver<()>,
    /// The metrics endpoint's requests for a snapshot of the core.
    snapshots: Option<mpsc::Receiver<SnapshotRequest>>,
}

/// What the driver needs to carry out outputs.
struct Shell<S: DurableStorage> {
    storage: S,
    observer: Option<Arc<dyn BrokerObserver>>,
    to_driver: mpsc::Sender<DriverMessage<S::File>>,
    metrics: Option<ShellMetrics>,
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

async fn next_snapshot(
    snapshots: Option<&mut mpsc::Receiver<SnapshotRequest>>,
) -> Option<SnapshotRequest> {
    match snapshots {
        Some(snapshots) => snapshots.recv().await,
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
async fn drive<S: DurableStorage>(
    broker: Broker<S>,
    clock: Clock,
    mut inbox: mpsc::Receiver<DriverMessage<S::File>>,
    shell: Shell<S>,
    mut stop: Stop,
) {
    let mut replies: BTreeMap<ConnectionId, oneshot::Sender<Reply<S::File>>> = BTreeMap::new();
    let mut outputs = Vec::new();
    let mut driver = Driver::new(broker, clock);
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
            Some(reply) = next_snapshot(stop.snapshots.as_mut()) => {
                let _ = reply.send(driver.machine().metrics());
                continue;
            }
            () = notified(requested.as_deref()), if phase == Phase::Serving => {
                tracing::info!("shutdown requested: no new connections or requests");
                stop.accept_task.abort();
                let _ = stop.closing.send(true);
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
        let mut stopped = None;
        for output in outputs.drain(..) {
            if let Output::Stopped { clean } = output {
                stopped = Some(clean);
                continue;
            }
            execute(output, &mut replies, &shell);
        }
        if let Some(clean) = stopped {
            tracing::info!(clean, "stopped");
            return;
        }
    }
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
        Output::Event(event) => publish(shell.observer.as_deref(), &event),
        Output::Stopped { .. } => unreachable!("the driver loop handles Stopped"),
    }
}

/// Serves one connection: read a request, hand it to the driver, write its response, repeat.
/// Once the broker is closing, the connection ends before reading another request.
async fn serve_connection<F: DurableFile>(accepted: Accepted, shared: ConnectionShared<F>) {
    let Accepted {
        stream,
        connection,
        limits,
        slots,
        alive,
    } = accepted;
    let peer = stream
        .peer_addr()
        .map(|address| address.to_string())
        .unwrap_or_default();
    if let Some(metrics) = &shared.metrics {
        metrics.connection(1);
    }
    let mut conn = Connection::with_limits(stream, limits);
    let outcome = serve_requests(&mut conn, connection, &shared).await;
    match outcome {
        Ok(()) => tracing::debug!(%peer, connection = connection.0, "closed"),
        Err(reason) => {
            tracing::info!(%peer, connection = connection.0, %reason, "closing connection")
        }
    }
    let _ = shared
        .to_driver
        .send(DriverMessage::Closed { connection })
        .await;
    if let Some(metrics) = &shared.metrics {
        metrics.connection(-1);
    }
    drop((conn, slots, alive));
}

/// Reads the next request, answering the KIP-511 ApiVersions fallback itself.
/// `Ok(None)`: the peer closed cleanly. `Err`: close with this reason.
async fn read_request(
    conn: &mut Connection,
    max_request_bytes: usize,
) -> Result<Option<Box<Request>>, String> {
    loop {
        let Some(frame) = conn
            .read_frame(max_request_bytes)
            .await
            .map_err(|error| error.to_string())?
        else {
            return Ok(None);
        };
        match decode_request(frame).map_err(|error| error.to_string())? {
            Decoded::Request(request) => return Ok(Some(request)),
            Decoded::UnsupportedApiVersions {
                correlation_id,
                api_version,
            } => {
                tracing::debug!(
                    api_version,
                    "ApiVersions at an unsupported version: answering in v0 (KIP-511)"
                );
                let frame = encode_api_versions_fallback(correlation_id);
                conn.write_frame(&frame)
                    .await
                    .map_err(|error| error.to_string())?;
            }
        }
    }
}

/// What the fault hook decided for a request before the broker saw it.
enum Admission {
    Forward,
    Answered,
}

async fn admit<F: DurableFile>(
    conn: &mut Connection,
    request: &Request,
    faults: Option<&dyn ConnectionFaults>,
) -> Result<Admission, String> {
    let api_key = request.api_key;
    match faults.map_or(FaultAction::Pass, |hook| hook.on_request(api_key)) {
        FaultAction::Pass => Ok(Admission::Forward),
        FaultAction::Reject(error) => {
            if let Some(response) = produce_rejection::<F>(request, error) {
                let chunks = response.encode().map_err(|error| error.to_string())?;
                conn.write_chunks(&chunks)
                    .await
                    .map_err(|error| error.to_string())?;
            }
            Ok(Admission::Answered)
        }
        FaultAction::Drop | FaultAction::Truncate => {
            Err(format!("fault injection: {api_key:?} request dropped"))
        }
    }
}

async fn write_response<F: DurableFile>(
    conn: &mut Connection,
    response: &Response<F>,
    faults: Option<&dyn ConnectionFaults>,
) -> Result<(), String> {
    let api_key = response.api_key;
    let chunks = response.encode().map_err(|error| error.to_string())?;
    match faults.map_or(FaultAction::Pass, |hook| hook.on_response(api_key)) {
        FaultAction::Pass => conn
            .write_chunks(&chunks)
            .await
            .map_err(|error| error.to_string()),
        FaultAction::Drop => Err(format!(
            "fault injection: {api_key:?} response dropped after apply"
        )),
        FaultAction::Truncate | FaultAction::Reject(_) => {
            let _ = conn.write_truncated(&chunks).await;
            Err(format!(
                "fault injection: {api_key:?} response cut mid-frame"
            ))
        }
    }
}

async fn serve_requests<F: DurableFile>(
    conn: &mut Connection,
    connection: ConnectionId,
    shared: &ConnectionShared<F>,
) -> Result<(), String> {
    let faults = shared.faults.as_deref();
    let mut closing = shared.closing.clone();
    loop {
        // A closing broker reads no new request, even one already buffered.
        let next = tokio::select! {
            biased;
            _ = closing.wait_for(|closing| *closing) => return Ok(()),
            next = read_request(conn, shared.max_request_bytes) => next?,
        };
        let Some(request) = next else {
            return Ok(());
        };
        if let Admission::Answered = admit::<F>(conn, &request, faults).await? {
            continue;
        }
        let started = shared.metrics.as_ref().map(|_| tokio::time::Instant::now());
        let api_key = request.api_key;
        let (reply, replied) = oneshot::channel();
        shared
            .to_driver
            .send(DriverMessage::Request {
                connection,
                request,
                reply,
            })
            .await
            .map_err(|_| "broker driver stopped".to_owned())?;
        match replied
            .await
            .map_err(|_| "broker driver dropped the request".to_owned())?
        {
            Reply::Respond(response) => {
                write_response(conn, &response, faults).await?;
                if let (Some(metrics), ResponseBody::Fetch(parts)) =
                    (&shared.metrics, &response.body)
                {
                    for (topic, bytes) in parts.record_bytes_by_topic() {
                        metrics.bytes_out(topic, bytes);
                    }
                }
            }
            Reply::NoResponse => {}
            Reply::Close(reason) => return Err(reason),
        }
        if let (Some(metrics), Some(started)) = (&shared.metrics, started) {
            metrics.request_done(api_key, started.elapsed());
        }
    }
}

/// Whether a response API is one the fault hook may target by name.
pub fn api_by_name(name: &str) -> Option<ApiKey> {
    match name {
        "produce" => Some(ApiKey::Produce),
        "fetch" => Some(ApiKey::Fetch),
        "list_offsets" => Some(ApiKey::ListOffsets),
        "metadata" => Some(ApiKey::Metadata),
        "api_versions" => Some(ApiKey::ApiVersions),
        "create_topics" => Some(ApiKey::CreateTopics),
        "delete_records" => Some(ApiKey::DeleteRecords),
        _ => None,
    }
}
