//! The broker shell: opens storage, recovers, syncs, listens, and runs the [`Broker`] state
//! machine in one driver task fed by the connection tasks. The same code runs on real tokio
//! (`seedlog broker`) and on madsim (the simulator's broker nodes).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::ApiKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::broker::{
    produce_rejection, Broker, BrokerError, BrokerEvent, ConnectionId, FlushId, Input, Output,
    Response,
};
use crate::config::BrokerConfig;
use crate::log::FlushSync;
use crate::protocol::codec::{decode_request, encode_api_versions_fallback, Decoded, Request};
use crate::runtime::clock::Clock;
use crate::runtime::driver::Driver;
use crate::runtime::net::{Connection, ConnectionFaults, FaultAction};
use crate::runtime::storage::{DurableFile, DurableStorage};

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
}

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
    let max_request_bytes = config.socket_request_max_bytes as usize;
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
        corruption = report.recovery.corruption.as_deref().unwrap_or("none"),
        "log recovered"
    );
    let listener = TcpListener::bind(&bind_address).await?;
    tracing::info!(address = %bind_address, node_id = broker.node_id().0, "listening");
    let (to_driver, inbox) = mpsc::channel(1024);
    let accept_sender = to_driver.clone();
    tokio::spawn(async move {
        let mut next_connection = 0u64;
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    next_connection += 1;
                    let connection = ConnectionId(next_connection);
                    let _ = stream.set_nodelay(true);
                    tracing::debug!(%peer, connection = connection.0, "accepted");
                    let task = serve_connection(
                        stream,
                        connection,
                        accept_sender.clone(),
                        max_request_bytes,
                        options.faults.clone(),
                    );
                    tokio::spawn(task);
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
    });
    let shell = Shell {
        storage,
        observer: options.observer,
        to_driver,
    };
    drive(broker, clock, inbox, shell).await;
    Ok(())
}

/// What the driver needs to carry out outputs.
struct Shell<S: DurableStorage> {
    storage: S,
    observer: Option<Arc<dyn BrokerObserver>>,
    to_driver: mpsc::Sender<DriverMessage<S::File>>,
}

/// The driver loop: one input at a time into the state machine, outputs executed in order.
async fn drive<S: DurableStorage>(
    broker: Broker<S>,
    clock: Clock,
    mut inbox: mpsc::Receiver<DriverMessage<S::File>>,
    shell: Shell<S>,
) {
    let mut replies: BTreeMap<ConnectionId, oneshot::Sender<Reply<S::File>>> = BTreeMap::new();
    let mut outputs = Vec::new();
    let mut driver = Driver::new(broker, clock);
    loop {
        let deadline = driver.wake(None);
        let input = tokio::select! {
            biased;
            message = inbox.recv() => match message.expect("the accept loop keeps a sender alive") {
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
            () = driver.clock().sleep_until(deadline), if deadline.is_some() => Input::Tick,
        };
        driver.step(input, &mut outputs);
        for output in outputs.drain(..) {
            execute(output, &mut replies, &shell);
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
            tokio::spawn(async move {
                let result = run_flush(&storage, sync).await;
                let _ = to_driver
                    .send(DriverMessage::FlushDone { flush_id, result })
                    .await;
            });
        }
        Output::Event(event) => publish(shell.observer.as_deref(), &event),
    }
}

/// Serves one connection: read a request, hand it to the driver, write its response, repeat.
async fn serve_connection<F: DurableFile>(
    stream: TcpStream,
    connection: ConnectionId,
    to_driver: mpsc::Sender<DriverMessage<F>>,
    max_request_bytes: usize,
    faults: Option<Arc<dyn ConnectionFaults>>,
) {
    let peer = stream
        .peer_addr()
        .map(|address| address.to_string())
        .unwrap_or_default();
    let mut conn = Connection::new(stream);
    let outcome = serve_requests(
        &mut conn,
        connection,
        &to_driver,
        max_request_bytes,
        faults.as_deref(),
    )
    .await;
    match outcome {
        Ok(()) => tracing::debug!(%peer, connection = connection.0, "closed by peer"),
        Err(reason) => {
            tracing::info!(%peer, connection = connection.0, %reason, "closing connection")
        }
    }
    let _ = to_driver.send(DriverMessage::Closed { connection }).await;
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
    to_driver: &mpsc::Sender<DriverMessage<F>>,
    max_request_bytes: usize,
    faults: Option<&dyn ConnectionFaults>,
) -> Result<(), String> {
    while let Some(request) = read_request(conn, max_request_bytes).await? {
        if let Admission::Answered = admit::<F>(conn, &request, faults).await? {
            continue;
        }
        let (reply, replied) = oneshot::channel();
        to_driver
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
            Reply::Respond(response) => write_response(conn, &response, faults).await?,
            Reply::NoResponse => {}
            Reply::Close(reason) => return Err(reason),
        }
    }
    Ok(())
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
        _ => None,
    }
}
