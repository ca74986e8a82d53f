//! A client's connections, one per broker (the bookkeeping of Kafka's `NetworkClient`), shared
//! by the producer and consumer cores. Each connection has a state, a reconnect backoff that
//! grows with failures in a row (`reconnect.backoff.ms` 50, doubling up to
//! `reconnect.backoff.max.ms` 1,000), and its requests in flight, oldest first: a connection
//! answers in request order.
//!
//! The first connection goes to a bootstrap server ([`BOOTSTRAP`]), before any broker is known.
//! Once a metadata answer names the broker at the address it reached, that connection becomes the
//! broker's ([`Connections::identify_bootstrap`]), as librdkafka merges its bootstrap broker with
//! the learned one: a single broker means a single connection.

use std::collections::{BTreeMap, VecDeque};

use crate::client::metadata::MetadataCache;
use crate::types::{Millis, TopicPartition};

/// A connection's key: a broker's node id, or [`BOOTSTRAP`].
pub type NodeId = i32;

/// The key of the connection to a bootstrap server, until an answer shows which broker it is.
pub const BOOTSTRAP: NodeId = -1;

/// Where to connect to `node`: `host:port` for a broker the cache knows, `None` for a bootstrap
/// server (the shell's choice among `bootstrap.servers`).
fn address_of(node: NodeId, metadata: &MetadataCache) -> Option<String> {
    (node != BOOTSTRAP)
        .then(|| metadata.broker(node).map(str::to_owned))
        .flatten()
}

/// Kafka's `reconnect.backoff.ms` and `reconnect.backoff.max.ms` defaults.
const RECONNECT_BACKOFF_MS: u64 = 50;
const RECONNECT_BACKOFF_MAX_MS: u64 = 1000;

/// Where a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnectionState {
    Idle,
    Connecting,
    Connected,
    Backoff { until: Millis },
}

/// One broker's connection and what is in flight on it.
#[derive(Debug)]
pub(crate) struct NodeConnection<F> {
    pub(crate) state: ConnectionState,
    /// Connection attempts failed in a row (the reconnect backoff grows with them).
    pub(crate) failures: u32,
    /// Requests in flight, oldest first.
    pub(crate) in_flight: VecDeque<F>,
    /// The `host:port` reached, while connected.
    pub(crate) address: Option<String>,
}

impl<F> NodeConnection<F> {
    fn new() -> NodeConnection<F> {
        NodeConnection {
            state: ConnectionState::Idle,
            failures: 0,
            in_flight: VecDeque::new(),
            address: None,
        }
    }

    /// Connected, with fewer than `max_in_flight` requests in flight.
    pub(crate) fn has_room(&self, max_in_flight: usize) -> bool {
        self.state == ConnectionState::Connected && self.in_flight.len() < max_in_flight
    }

    /// Connected or on the way.
    fn is_up(&self) -> bool {
        matches!(
            self.state,
            ConnectionState::Connected | ConnectionState::Connecting
        )
    }
}

/// Every connection of one client, by node.
#[derive(Debug)]
pub(crate) struct Connections<F> {
    nodes: BTreeMap<NodeId, NodeConnection<F>>,
}

impl<F> Default for Connections<F> {
    fn default() -> Self {
        Connections {
            nodes: BTreeMap::new(),
        }
    }
}

impl<F> Connections<F> {
    pub(crate) fn get(&self, node: NodeId) -> Option<&NodeConnection<F>> {
        self.nodes.get(&node)
    }

    pub(crate) fn get_mut(&mut self, node: NodeId) -> Option<&mut NodeConnection<F>> {
        self.nodes.get_mut(&node)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (NodeId, &NodeConnection<F>)> {
        self.nodes
            .iter()
            .map(|(node, connection)| (*node, connection))
    }

    /// Every request in flight, on any connection.
    pub(crate) fn in_flight(&self) -> impl Iterator<Item = &F> {
        self.nodes
            .values()
            .flat_map(|connection| &connection.in_flight)
    }

    /// Starts connecting to `node` unless it is connected, connecting or backing off; answers
    /// whether it started.
    pub(crate) fn start_connect(&mut self, node: NodeId) -> bool {
        let connection = self.nodes.entry(node).or_insert_with(NodeConnection::new);
        if connection.state != ConnectionState::Idle {
            return false;
        }
        connection.state = ConnectionState::Connecting;
        true
    }

    /// The connection asked for is up, at `address`.
    pub(crate) fn on_connected(&mut self, node: NodeId, address: String) {
        let connection = self.nodes.get_mut(&node).expect("connected without asking");
        assert_eq!(
            connection.state,
            ConnectionState::Connecting,
            "connected without asking"
        );
        connection.state = ConnectionState::Connected;
        connection.failures = 0;
        connection.address = Some(address);
    }

    /// The connection to `node` failed or broke: it backs off, and what was in flight on it is
    /// handed back, oldest first.
    pub(crate) fn on_lost(&mut self, now: Millis, node: NodeId) -> VecDeque<F> {
        let connection = self.nodes.entry(node).or_insert_with(NodeConnection::new);
        connection.failures += 1;
        connection.address = None;
        let exponent = connection.failures.saturating_sub(1).min(10);
        let delay = (RECONNECT_BACKOFF_MS << exponent).min(RECONNECT_BACKOFF_MAX_MS);
        connection.state = ConnectionState::Backoff {
            until: now.plus(delay),
        };
        std::mem::take(&mut connection.in_flight)
    }

    /// Connections whose backoff is over may connect again.
    pub(crate) fn expire_backoffs(&mut self, now: Millis) {
        for connection in self.nodes.values_mut() {
            if let ConnectionState::Backoff { until } = connection.state {
                if now >= until {
                    connection.state = ConnectionState::Idle;
                }
            }
        }
    }

    /// When the first backoff ends.
    pub(crate) fn next_backoff_end(&self) -> Option<Millis> {
        self.nodes
            .values()
            .filter_map(|connection| match connection.state {
                ConnectionState::Backoff { until } => Some(until),
                _ => None,
            })
            .min()
    }

    /// If the last metadata answer names the broker at the bootstrap connection's address, the
    /// connection becomes that broker's (unless it has one of its own already): answers the
    /// broker, for the shell to rekey its connection.
    pub(crate) fn identify_bootstrap(&mut self, metadata: &MetadataCache) -> Option<NodeId> {
        let address = self.nodes.get(&BOOTSTRAP)?.address.as_deref()?;
        let node = metadata.broker_at(address)?;
        if self
            .nodes
            .get(&node)
            .is_some_and(|own| own.state != ConnectionState::Idle)
        {
            return None;
        }
        let connection = self.nodes.remove(&BOOTSTRAP).expect("looked up above");
        self.nodes.insert(node, connection);
        Some(node)
    }

    /// Starts the connections that work on `partitions` needs: each one's leader, and, when
    /// some partition has no known leader or `needs_metadata` and no connection is up or
    /// coming, one to ask for metadata ([`metadata_target`](Self::metadata_target)). Answers the
    /// connections to open, as `(node, address)` ([`address_of`]), and whether some partition
    /// had no known leader (the caller asks for fresh metadata, as Kafka's Sender does for its
    /// `unknownLeaderTopics`).
    pub(crate) fn open_for<'a>(
        &mut self,
        partitions: impl IntoIterator<Item = &'a TopicPartition>,
        metadata: &MetadataCache,
        needs_metadata: bool,
    ) -> (Vec<(NodeId, Option<String>)>, bool) {
        let mut leaderless = false;
        // Each leader in the order the partitions name it; `start_connect` starts a connection
        // once, so a leader named again is not opened twice.
        let mut opened: Vec<NodeId> = Vec::new();
        for partition in partitions {
            match metadata.leader(&partition.topic, partition.partition) {
                Some(node) => {
                    if self.start_connect(node) {
                        opened.push(node);
                    }
                }
                None => leaderless = true,
            }
        }
        if (leaderless || needs_metadata) && !self.any_up() {
            if let Some(node) = self.metadata_target(metadata) {
                if self.start_connect(node) {
                    opened.push(node);
                }
            }
        }
        let opened = opened
            .into_iter()
            .map(|node| (node, address_of(node, metadata)))
            .collect();
        (opened, leaderless)
    }

    /// Whether some connection is up or coming.
    pub(crate) fn any_up(&self) -> bool {
        self.nodes.values().any(NodeConnection::is_up)
    }

    /// Where to connect for metadata when no connection is up: the first known broker that is
    /// not backing off, or a bootstrap server while no broker is known.
    pub(crate) fn metadata_target(&self, metadata: &MetadataCache) -> Option<NodeId> {
        let mut brokers = metadata.brokers().peekable();
        if brokers.peek().is_none() {
            return Some(BOOTSTRAP);
        }
        brokers.find(|node| {
            self.nodes
                .get(node)
                .is_none_or(|connection| connection.state == ConnectionState::Idle)
        })
    }

    /// The connected node with fewer than `max_in_flight` requests in flight and the fewest of
    /// them (Kafka's `leastLoadedNode`), the lowest id on a tie.
    pub(crate) fn least_loaded(&self, max_in_flight: usize) -> Option<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, connection)| connection.has_room(max_in_flight))
            .min_by_key(|(_, connection)| connection.in_flight.len())
            .map(|(node, _)| *node)
    }

    /// Cross-field invariants: nothing in flight without a connection, at most `max_in_flight`
    /// on one.
    pub(crate) fn check_invariants(&self, max_in_flight: usize) {
        for connection in self.nodes.values() {
            assert!(
                connection.in_flight.len() <= max_in_flight,
                "too many requests in flight on one connection"
            );
            if connection.state != ConnectionState::Connected {
                assert!(
                    connection.in_flight.is_empty(),
                    "requests in flight without a connection"
                );
            }
            if let ConnectionState::Backoff { .. } = connection.state {
                assert!(connection.failures > 0, "a backoff follows a failure");
            }
        }
    }
}
