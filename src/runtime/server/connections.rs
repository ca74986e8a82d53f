//! The connection side of the broker shell: the accept loop with its limits
//! (`max.connections`, `max.connections.per.ip`), and one task per connection that reads a
//! request (`connections.max.idle.ms`, `queued.max.request.bytes`), hands it to the driver
//! task, writes its response, and ends before reading another once the broker is closing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::broker::{produce_rejection, ConnectionId, FlushId, Response, ResponseBody};
use crate::config::BrokerConfig;
use crate::protocol::api_versions::SupportedApi;
use crate::protocol::codec::{decode_request_for, encode_api_versions_fallback, Decoded, Request};
use crate::runtime::metrics::ShellMetrics;
use crate::runtime::net::{Connection, ConnectionFaults, FaultAction, ReadLimits};
use crate::runtime::storage::DurableFile;

/// What a connection task hears back for its request.
pub(super) enum Reply<F> {
    Respond(Box<Response<F>>),
    NoResponse,
    Close(String),
}

/// Messages into the driver task.
pub(super) enum DriverMessage<F> {
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

/// The connection limits of the broker's config.
#[derive(Debug, Clone)]
pub(super) struct LimitsConfig {
    pub(super) max_request_bytes: usize,
    pub(super) max_connections: usize,
    pub(super) max_connections_per_ip: usize,
    pub(super) idle: Duration,
    pub(super) queued_max_request_bytes: Option<usize>,
}

impl LimitsConfig {
    pub(super) fn of(config: &BrokerConfig) -> LimitsConfig {
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
pub(super) struct ConnectionLimits {
    config: LimitsConfig,
    connections: Arc<Semaphore>,
    per_ip: Arc<Mutex<HashMap<IpAddr, usize>>>,
    memory: Option<Arc<Semaphore>>,
}

impl ConnectionLimits {
    pub(super) fn new(config: &LimitsConfig) -> ConnectionLimits {
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
pub(super) struct Acceptor<F> {
    pub(super) listener: TcpListener,
    pub(super) limits: ConnectionLimits,
    pub(super) shared: ConnectionShared<F>,
    /// Each connection task holds a clone: when all are gone, every connection has closed.
    pub(super) alive: mpsc::Sender<()>,
}

/// What every connection task gets a clone of.
pub(super) struct ConnectionShared<F> {
    pub(super) to_driver: mpsc::Sender<DriverMessage<F>>,
    pub(super) max_request_bytes: usize,
    /// The APIs this listener answers (a broker's or a controller's).
    pub(super) apis: &'static [SupportedApi],
    pub(super) faults: Option<Arc<dyn ConnectionFaults>>,
    /// Closed (never given permits) when the broker starts its shutdown.
    pub(super) closing: Arc<Semaphore>,
    pub(super) metrics: Option<ShellMetrics>,
}

impl<F> Clone for ConnectionShared<F> {
    fn clone(&self) -> Self {
        ConnectionShared {
            to_driver: self.to_driver.clone(),
            max_request_bytes: self.max_request_bytes,
            apis: self.apis,
            faults: self.faults.clone(),
            closing: Arc::clone(&self.closing),
            metrics: self.metrics.clone(),
        }
    }
}

impl<F: DurableFile> Acceptor<F> {
    /// Accepts until aborted: at `max.connections` it waits for a connection to close before
    /// accepting again (Kafka's acceptor does); a connection beyond `max.connections.per.ip`
    /// is closed at once.
    pub(super) async fn run(self) {
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
    let address = stream.peer_addr().ok();
    let peer = address
        .map(|address| address.to_string())
        .unwrap_or_default();
    if let Some(metrics) = &shared.metrics {
        metrics.connection(1);
    }
    // Kafka's client host (DescribeGroups): a slash and the peer's IP address.
    let client_host: Arc<str> = address
        .map_or_else(
            || "/unknown".to_owned(),
            |address| format!("/{}", address.ip()),
        )
        .into();
    let mut conn = Connection::with_limits(stream, limits);
    let outcome = serve_requests(&mut conn, connection, &client_host, &shared).await;
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
    apis: &[SupportedApi],
) -> Result<Option<Box<Request>>, String> {
    loop {
        let Some(frame) = conn
            .read_frame(max_request_bytes)
            .await
            .map_err(|error| error.to_string())?
        else {
            return Ok(None);
        };
        match decode_request_for(frame, apis).map_err(|error| error.to_string())? {
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
    client_host: &Arc<str>,
    shared: &ConnectionShared<F>,
) -> Result<(), String> {
    let faults = shared.faults.as_deref();
    loop {
        // A closing broker reads no new request, even one already buffered.
        let next = tokio::select! {
            biased;
            _ = shared.closing.acquire() => return Ok(()),
            next = read_request(conn, shared.max_request_bytes, shared.apis) => next?,
        };
        let Some(mut request) = next else {
            return Ok(());
        };
        request.client_host = Some(Arc::clone(client_host));
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
