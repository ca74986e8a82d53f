//! The async consumer: a thin shell around [`ConsumerCore`]. It owns the connections (one per
//! broker) and the clock, feeds the core's inputs (application calls, connection events, responses, ticks) and
//! executes its outputs, sleeping until `min(next_deadline, poll deadline)`. It reads the
//! partitions it is assigned; a group member ([`crate::runtime::group::GroupMember`]) gets its
//! assignment from the group and hands it to this consumer. Like Kafka's consumer it rides out connection failures
//! until the poll's timeout.
//!
//! Neither `poll` nor `list_offsets` is cancel-safe: dropping one mid-way may leave a frame
//! half-written on the connection (which then breaks and is replaced). The core itself loses
//! nothing: what an abandoned poll gathered is returned by the next one.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::client::consumer::{
    ConsumerCore, ConsumerInput, ConsumerOutput, ListOffsetsError, NodeId, BOOTSTRAP,
};
pub use crate::client::consumer::{
    ConsumerError, ConsumerRecord, PartitionError, Polled, PositionReset, ResetReason,
};
use crate::config::{ConfigError, ConsumerConfig};
use crate::protocol::codec::RequestApiKey;
use crate::runtime::client::{connect_node, receive_any, Bootstrap, ClientConnection, ClientError};
use crate::runtime::clock::Clock;
use crate::runtime::driver::Driver;
use crate::types::{Millis, TopicPartition};

/// A consumer of assigned partitions.
#[derive(Debug)]
pub struct Consumer {
    driver: Driver<ConsumerCore>,
    bootstrap: Bootstrap,
    client_id: String,
    connections: BTreeMap<NodeId, ClientConnection>,
}

/// What the core answered the application.
enum Answer {
    Polled(Result<Polled, ConsumerError>),
    ListedOffsets(Result<Vec<(TopicPartition, i64)>, ListOffsetsError>),
}

impl Consumer {
    /// A consumer for a validated config.
    pub fn new(config: ConsumerConfig) -> Result<Consumer, ConfigError> {
        let bootstrap = Bootstrap::new(&config.bootstrap_servers)?;
        let client_id = config.client_id.clone();
        Ok(Consumer {
            driver: Driver::new(ConsumerCore::new(config), Clock::start()),
            bootstrap,
            client_id,
            connections: BTreeMap::new(),
        })
    }

    /// Replaces the assignment.
    pub fn assign(&mut self, partitions: &[TopicPartition]) {
        self.apply(ConsumerInput::Assign {
            partitions: partitions.to_vec(),
        });
    }

    /// Sets the next offset of an assigned partition.
    pub fn seek(&mut self, partition: &TopicPartition, offset: i64) {
        self.seek_with_epoch(partition, offset, None);
    }

    /// Sets the next offset of an assigned partition, with the leader epoch of the record
    /// before it (a committed offset's): nothing is fetched from a leader of an older epoch.
    pub fn seek_with_epoch(
        &mut self,
        partition: &TopicPartition,
        offset: i64,
        leader_epoch: Option<i32>,
    ) {
        self.apply(ConsumerInput::Seek {
            partition: partition.clone(),
            offset,
            leader_epoch,
        });
    }

    /// The leader epoch of the last record before the position of `partition`, if known.
    pub fn offset_epoch(&self, partition: &TopicPartition) -> Option<i32> {
        self.driver.machine().offset_epoch(partition)
    }

    /// The next offset of a partition, if known.
    pub fn position(&self, partition: &TopicPartition) -> Option<i64> {
        self.driver.machine().position(partition)
    }

    /// Log end (`-1`) or log start (`-2`) offsets of `partitions`: one attempt, over the
    /// consumer's connection (after any fetch still in flight).
    pub async fn list_offsets(
        &mut self,
        partitions: &[TopicPartition],
        timestamp: i64,
    ) -> Result<Vec<(TopicPartition, i64)>, ClientError> {
        let input = ConsumerInput::ListOffsets {
            partitions: partitions.to_vec(),
            timestamp,
        };
        let Answer::ListedOffsets(result) = self.drive(input, None).await else {
            unreachable!("the core answers a ListOffsets call with ListedOffsets");
        };
        result.map_err(|error| match error {
            ListOffsetsError::Partition { partition, error } => ClientError::Kafka {
                error,
                message: format!("ListOffsets {partition}"),
            },
            ListOffsetsError::TimedOut { timeout_ms } => {
                ClientError::Timeout(Duration::from_millis(timeout_ms))
            }
            ListOffsetsError::ConnectionFailed { reason } => {
                ClientError::Io(std::io::Error::other(reason))
            }
        })
    }

    /// Fetches records from the assigned partitions: returns as soon as some partition
    /// delivered records or reported an error, or when `timeout` passes (with the resets that
    /// happened). Network trouble is retried until then, never an error.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Polled, ConsumerError> {
        let deadline = self.driver.now().plus(timeout.as_millis() as u64);
        let Answer::Polled(result) = self
            .drive(ConsumerInput::Poll { deadline }, Some(deadline))
            .await
        else {
            unreachable!("the core answers a poll with Polled");
        };
        result
    }

    /// An application input that needs no IO.
    fn apply(&mut self, input: ConsumerInput) {
        let mut outputs = Vec::new();
        self.driver.step(input, &mut outputs);
        assert!(
            outputs.is_empty(),
            "assign and seek need no IO: {outputs:?}"
        );
    }

    /// Feeds `input`, then responses and ticks, until the core answers the application.
    async fn drive(&mut self, input: ConsumerInput, deadline: Option<Millis>) -> Answer {
        let mut input = input;
        loop {
            if let Some(answer) = self.step(input).await {
                return answer;
            }
            let wake = self.driver.wake(deadline);
            let awaiting = self
                .connections
                .values()
                .any(ClientConnection::has_in_flight);
            assert!(
                awaiting || wake.is_some(),
                "the core waits for nothing and has not answered"
            );
            input = tokio::select! {
                biased;
                                (node, response) = receive_any(&mut self.connections), if awaiting => match response {
                    Ok(response) => ConsumerInput::Response { node, response },
                    Err(reason) => self.lost(node, &reason),
                },
                () = self.driver.clock().sleep_until(wake), if wake.is_some() => ConsumerInput::Tick,
            };
        }
    }

    fn lost(&mut self, node: NodeId, reason: &str) -> ConsumerInput {
        self.connections.remove(&node);
        ConsumerInput::Disconnected {
            node,
            reason: reason.to_owned(),
        }
    }

    /// Feeds one input, then executes outputs (which may produce further inputs) until quiet.
    async fn step(&mut self, input: ConsumerInput) -> Option<Answer> {
        let mut answer = None;
        let mut inputs = VecDeque::from([input]);
        while let Some(input) = inputs.pop_front() {
            let mut outputs = Vec::new();
            self.driver.step(input, &mut outputs);
            for output in outputs {
                let answered = match output {
                    ConsumerOutput::Connect { node, address } => {
                        inputs.push_back(self.connect(node, address).await);
                        None
                    }
                    ConsumerOutput::Identified { node } => {
                        if let Some(connection) = self.connections.remove(&BOOTSTRAP) {
                            self.connections.insert(node, connection);
                        }
                        None
                    }
                    ConsumerOutput::Disconnect { node, reason } => {
                        tracing::debug!(node, %reason, "consumer closes a connection");
                        self.connections.remove(&node);
                        None
                    }
                    ConsumerOutput::Request {
                        node,
                        body,
                        timeout_ms,
                    } => {
                        // No connection: a Disconnected input is already queued and covers this.
                        let Some(connection) = self.connections.get_mut(&node) else {
                            continue;
                        };
                        tracing::trace!(node, api = ?body.api_key(), timeout_ms, "consumer request");
                        if let Err(error) = connection.send(&body).await {
                            inputs.push_back(self.lost(node, &error.to_string()));
                        }
                        None
                    }
                    ConsumerOutput::Polled(result) => Some(Answer::Polled(result)),
                    ConsumerOutput::ListedOffsets(result) => Some(Answer::ListedOffsets(result)),
                };
                if answered.is_some() {
                    assert!(answer.is_none(), "the core answers once per call");
                    answer = answered;
                }
            }
        }
        answer
    }

    async fn connect(&mut self, node: NodeId, address: Option<String>) -> ConsumerInput {
        match connect_node(&mut self.bootstrap, &self.client_id, address).await {
            Ok((connection, address)) => {
                self.connections.insert(node, connection);
                ConsumerInput::Connected { node, address }
            }
            Err(error) => ConsumerInput::ConnectFailed {
                node,
                reason: error.to_string(),
            },
        }
    }
}
