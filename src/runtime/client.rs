//! A client connection: connect, negotiate versions with ApiVersions, then send requests and
//! read their responses in order. Shared by the producer, the consumer, the admin helpers, the
//! CLI and the simulator's clients.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use tokio::net::TcpStream;

use crate::client::connections::NodeId;
use crate::protocol::codec::{decode_response, encode_request, CodecError, RequestApiKey};
use crate::protocol::ErrorCode;
use crate::runtime::net::{Connection, ConnectionError};

/// The versions this client can speak: `(api, min, max)`. Fetch stops at v12 (topics by name).
const CLIENT_VERSIONS: [(ApiKey, i16, i16); 8] = [
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::OffsetForLeaderEpoch, 3, 4), // v3+: replica_id (-1, a consumer)
    (ApiKey::InitProducerId, 0, 4),
];

/// Largest response frame accepted.
const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Kafka's `socket.connection.setup.timeout.ms` default.
pub const CONNECTION_SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connecting or the socket failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The connection broke.
    #[error(transparent)]
    Connection(#[from] ConnectionError),
    /// A frame did not encode or decode.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The broker broke the protocol (for example a correlation id mismatch).
    #[error("protocol: {0}")]
    Protocol(String),
    /// The broker does not support a version this client can speak.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The call did not finish in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The broker answered with an error.
    #[error("{error:?}: {message}")]
    Kafka {
        /// The Kafka error.
        error: ErrorCode,
        /// Details.
        message: String,
    },
}

/// The `bootstrap.servers` a client connects through, tried in turn as Kafka's clients do: a
/// failed connect moves the next attempt to the next address (the caller's reconnect backoff
/// still applies between attempts), so one dead address does not strand the client.
#[derive(Debug, Clone)]
pub(crate) struct Bootstrap {
    servers: Vec<String>,
    next: usize,
}

impl Bootstrap {
    /// The addresses of a validated config; an empty list is a config error.
    pub(crate) fn new(servers: &[String]) -> Result<Bootstrap, crate::config::ConfigError> {
        crate::config::first_bootstrap_server(servers)?;
        Ok(Bootstrap {
            servers: servers.to_vec(),
            next: 0,
        })
    }

    /// Connects to the current address; on failure the next attempt goes to the next one.
    /// The server the next [`connect`](Self::connect) tries (after a success: the one reached).
    pub(crate) fn current(&self) -> &str {
        &self.servers[self.next]
    }

    pub(crate) async fn connect(
        &mut self,
        client_id: &str,
    ) -> Result<ClientConnection, ClientError> {
        let address = &self.servers[self.next];
        let connected = ClientConnection::connect(address, client_id).await;
        if let Err(error) = &connected {
            tracing::debug!(%address, %error, "bootstrap server unreachable; trying the next");
            self.next = (self.next + 1) % self.servers.len();
        }
        connected
    }
}

/// A negotiated connection to one broker.
#[derive(Debug)]
pub struct ClientConnection {
    conn: Connection,
    client_id: String,
    next_correlation_id: i32,
    in_flight: VecDeque<(i32, ApiKey, i16)>,
    versions: BTreeMap<i16, i16>,
    readiness: Arc<Readiness>,
}

/// Whether a connection's socket may have a response for [`ClientConnection::poll_receive`].
///
/// A producer's or a consumer's task waits on every connection with requests in flight, its
/// inbox and its deadline at once, and wakes for any of them (eighteen times a response, in
/// the simulator's standard scenario): reading every socket at every wake-up was 4% of a
/// simulated seed. The socket is read with a waker that marks the connection woken, so a
/// socket that found nothing is read again only once it woke its task (the way tokio's
/// `FuturesUnordered` skips futures that were not woken); the task's own waker is woken as
/// before, through this one. Under madsim a read of a socket whose bytes are still in flight
/// also armed one more timer for their arrival: fewer reads leave fewer such timers, which
/// can reorder wake-ups that fall on the same nanosecond.
#[derive(Debug)]
struct Readiness {
    /// Set by a wake-up from the socket and after a read that got something; cleared by a
    /// read that found nothing (the socket then holds this waker).
    woken: AtomicBool,
    /// The waker of the task that last polled the connection.
    task: Mutex<Option<Waker>>,
}

impl Readiness {
    fn new() -> Arc<Readiness> {
        Arc::new(Readiness {
            woken: AtomicBool::new(true),
            task: Mutex::new(None),
        })
    }

    /// `read` with this connection's waker, unless nothing woke the socket since `read` last
    /// found nothing: then pending without reading.
    fn poll<T>(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        read: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        {
            let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
            if !task.as_ref().is_some_and(|task| task.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        if !self.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let waker = Waker::from(Arc::clone(self));
        let read = read(&mut Context::from_waker(&waker));
        if read.is_ready() {
            // More may be buffered already, with no wake-up to come for it.
            self.woken.store(true, Ordering::Release);
        }
        read
    }
}

impl Wake for Readiness {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        let task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(task) = task.as_ref() {
            task.wake_by_ref();
        }
    }
}

impl ClientConnection {
    /// Connects (within [`CONNECTION_SETUP_TIMEOUT`]) and negotiates API versions.
    pub async fn connect(address: &str, client_id: &str) -> Result<ClientConnection, ClientError> {
        let stream = tokio::time::timeout(CONNECTION_SETUP_TIMEOUT, TcpStream::connect(address))
            .await
            .map_err(|_| ClientError::Timeout(CONNECTION_SETUP_TIMEOUT))??;
        stream.set_nodelay(true)?;
        let mut connection = ClientConnection {
            conn: Connection::new(stream),
            client_id: client_id.to_owned(),
            next_correlation_id: 0,
            in_flight: VecDeque::new(),
            versions: BTreeMap::new(),
            readiness: Readiness::new(),
        };
        connection.negotiate().await?;
        Ok(connection)
    }

    /// Connects without negotiating versions: for a peer node, whose request versions the
    /// core fixes.
    pub async fn connect_raw(
        address: &str,
        client_id: &str,
    ) -> Result<ClientConnection, ClientError> {
        let stream = tokio::time::timeout(CONNECTION_SETUP_TIMEOUT, TcpStream::connect(address))
            .await
            .map_err(|_| ClientError::Timeout(CONNECTION_SETUP_TIMEOUT))??;
        stream.set_nodelay(true)?;
        Ok(ClientConnection {
            conn: Connection::new(stream),
            client_id: client_id.to_owned(),
            next_correlation_id: 0,
            in_flight: VecDeque::new(),
            versions: BTreeMap::new(),
            readiness: Readiness::new(),
        })
    }

    /// Sends a request at `api_version` and waits for its response (nothing else in flight).
    pub async fn call_at_version(
        &mut self,
        api_version: i16,
        body: RequestKind,
    ) -> Result<ResponseKind, ClientError> {
        self.call_at(api_version, body).await
    }

    async fn negotiate(&mut self) -> Result<(), ClientError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("seedlog"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut response = self
            .call_at(3, RequestKind::ApiVersions(request.clone()))
            .await;
        if matches!(&response, Ok(ResponseKind::ApiVersions(body)) if body.error_code == ErrorCode::UnsupportedVersion.code())
            || response.is_err()
        {
            response = self.call_at(0, RequestKind::ApiVersions(request)).await;
        }
        let ResponseKind::ApiVersions(body) = response? else {
            return Err(ClientError::Protocol(
                "ApiVersions answered with another API".into(),
            ));
        };
        if body.error_code != 0 {
            return Err(ClientError::Kafka {
                error: ErrorCode::from_code(body.error_code),
                message: "ApiVersions".into(),
            });
        }
        for (api, client_min, client_max) in CLIENT_VERSIONS {
            let Some(broker) = body
                .api_keys
                .iter()
                .find(|entry| entry.api_key == api as i16)
            else {
                continue;
            };
            let version = client_max.min(broker.max_version);
            if version >= client_min.max(broker.min_version) {
                self.versions.insert(api as i16, version);
            }
        }
        Ok(())
    }

    /// The negotiated version of `api`.
    pub fn version(&self, api: ApiKey) -> Result<i16, ClientError> {
        self.versions.get(&(api as i16)).copied().ok_or_else(|| {
            ClientError::Unsupported(format!(
                "the broker and seedlog share no version of {api:?}"
            ))
        })
    }

    async fn send_at(&mut self, api_version: i16, body: &RequestKind) -> Result<(), ClientError> {
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let correlation_id = self.next_correlation_id;
        let frame = encode_request(api_version, correlation_id, &self.client_id, body)?;
        self.conn.write_frame(&frame).await?;
        self.in_flight
            .push_back((correlation_id, body.api_key(), api_version));
        Ok(())
    }

    /// Sends a request at `api_version` without waiting for its response (read it later with
    /// [`receive`](Self::receive)).
    pub async fn send_at_version(
        &mut self,
        api_version: i16,
        body: &RequestKind,
    ) -> Result<(), ClientError> {
        self.send_at(api_version, body).await
    }

    /// Sends a request at the negotiated version without waiting for its response.
    pub async fn send(&mut self, body: &RequestKind) -> Result<(), ClientError> {
        let version = self.version(body.api_key())?;
        self.send_at(version, body).await
    }

    /// Sends a request that gets no response (Produce with acks=0).
    pub async fn send_one_way(&mut self, body: &RequestKind) -> Result<(), ClientError> {
        self.send(body).await?;
        self.in_flight.pop_back();
        Ok(())
    }

    /// Whether a response is awaited.
    pub fn has_in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Reads the response to the oldest request in flight. Cancel-safe.
    pub async fn receive(&mut self) -> Result<ResponseKind, ClientError> {
        std::future::poll_fn(|cx| self.poll_receive(cx)).await
    }

    /// [`receive`](Self::receive) as a poll.
    pub fn poll_receive(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<ResponseKind, ClientError>> {
        let Some(&(correlation_id, api_key, api_version)) = self.in_flight.front() else {
            return Poll::Ready(Err(ClientError::Protocol(
                "receive with nothing in flight".into(),
            )));
        };
        let conn = &mut self.conn;
        let frame = match self
            .readiness
            .poll(cx, |cx| conn.poll_frame(cx, RESPONSE_BYTES_MAX))
        {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(Some(frame))) => frame,
            Poll::Ready(Ok(None)) => {
                return Poll::Ready(Err(ClientError::Protocol(
                    "connection closed by the broker".into(),
                )))
            }
            Poll::Ready(Err(error)) => return Poll::Ready(Err(error.into())),
        };
        Poll::Ready(self.answered(correlation_id, api_key, api_version, frame))
    }

    /// Decodes the response to the oldest request in flight and takes that request off.
    fn answered(
        &mut self,
        correlation_id: i32,
        api_key: ApiKey,
        api_version: i16,
        frame: bytes::Bytes,
    ) -> Result<ResponseKind, ClientError> {
        self.in_flight.pop_front();
        let (answered, body) = decode_response(frame, api_key, api_version)?;
        if answered != correlation_id {
            return Err(ClientError::Protocol(format!(
                "correlation id {answered} answered, {correlation_id} expected"
            )));
        }
        Ok(body)
    }

    async fn call_at(
        &mut self,
        api_version: i16,
        body: RequestKind,
    ) -> Result<ResponseKind, ClientError> {
        self.send_at(api_version, &body).await?;
        self.receive().await
    }

    /// Sends a request and waits for its response (nothing else may be in flight).
    pub async fn call(&mut self, body: RequestKind) -> Result<ResponseKind, ClientError> {
        assert!(
            self.in_flight.is_empty(),
            "call() with requests already in flight"
        );
        self.send(&body).await?;
        self.receive().await
    }

    /// [`call`](Self::call) within `timeout`.
    pub async fn call_within(
        &mut self,
        timeout: Duration,
        body: RequestKind,
    ) -> Result<ResponseKind, ClientError> {
        tokio::time::timeout(timeout, self.call(body))
            .await
            .map_err(|_| ClientError::Timeout(timeout))?
    }
}

/// Connects to `address`, or to a bootstrap server when it is `None`; answers the connection and
/// the `host:port` it reached.
pub(crate) async fn connect_node(
    bootstrap: &mut Bootstrap,
    client_id: &str,
    address: Option<String>,
) -> Result<(ClientConnection, String), ClientError> {
    if let Some(address) = address {
        return Ok((
            ClientConnection::connect(&address, client_id).await?,
            address,
        ));
    }
    let connection = bootstrap.connect(client_id).await?;
    Ok((connection, bootstrap.current().to_owned()))
}

/// The next response of whichever connection with requests in flight answers first (the lowest
/// key first when several are ready). Cancel-safe as [`ClientConnection::receive`] is.
pub(crate) async fn receive_any(
    connections: &mut BTreeMap<NodeId, ClientConnection>,
) -> (NodeId, Result<ResponseKind, String>) {
    assert!(
        connections.values().any(ClientConnection::has_in_flight),
        "guarded by the select precondition"
    );
    std::future::poll_fn(|cx| {
        for (node, connection) in connections.iter_mut() {
            if !connection.has_in_flight() {
                continue;
            }
            if let Poll::Ready(response) = connection.poll_receive(cx) {
                return Poll::Ready((*node, response.map_err(|error| error.to_string())));
            }
        }
        Poll::Pending
    })
    .await
}
