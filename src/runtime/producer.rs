//! The async producer: a background task that owns a [`ProducerCore`] (accumulator and sender)
//! and its connections, one per broker, and turns the core's outputs into socket writes and
//! completions.

use std::collections::{BTreeMap, VecDeque};

use kafka_protocol::messages::{RequestKind, ResponseKind};
use tokio::sync::{mpsc, oneshot};

use crate::client::producer::{
    NodeId, ProduceError, ProducerCore, ProducerInput, ProducerOutput, ProducerRecord, RecordId,
    RecordMetadata,
};
use crate::config::{ConfigError, ProducerConfig};
use crate::runtime::client::{connect_node, receive_any, Bootstrap, ClientConnection};
use crate::runtime::clock::Clock;
use crate::runtime::driver::Driver;

enum Command {
    Send {
        record: ProducerRecord,
        reply: oneshot::Sender<Result<RecordMetadata, ProduceError>>,
    },
    Close {
        done: oneshot::Sender<()>,
    },
}

/// A handle to the producer task. Dropping every handle lets the task finish what is queued.
#[derive(Debug, Clone)]
pub struct Producer {
    commands: mpsc::Sender<Command>,
}

/// The outcome of one send, to await.
#[derive(Debug)]
pub struct Delivery(oneshot::Receiver<Result<RecordMetadata, ProduceError>>);

impl Delivery {
    /// Waits for the broker's answer: where the record was written (offset -1 with acks=0) or
    /// why it failed.
    pub async fn wait(self) -> Result<RecordMetadata, ProduceError> {
        self.0.await.unwrap_or_else(|_| {
            Err(ProduceError::Indeterminate {
                reason: "the producer stopped".into(),
            })
        })
    }
}

impl Producer {
    /// Starts a producer talking to the first of `bootstrap.servers`.
    pub fn start(config: ProducerConfig) -> Result<Producer, ConfigError> {
        let bootstrap = Bootstrap::new(&config.bootstrap_servers)?;
        let client_id = config.client_id.clone();
        // The sticky partitioner's draws: entropy in production, the seed in simulation.
        let core = ProducerCore::new(config)?.with_seed(madsim::rand::random::<u64>());
        let (commands, inbox) = mpsc::channel(1024);
        let task = Task {
            driver: Driver::new(core, Clock::start()),
            bootstrap,
            client_id,
            connections: BTreeMap::new(),
            replies: Replies::default(),
            next_id: 0,
        };
        tokio::spawn(task.run(inbox));
        Ok(Producer { commands })
    }

    /// Queues a record; await the returned [`Delivery`] for its outcome.
    pub async fn send(&self, record: ProducerRecord) -> Delivery {
        let (reply, delivered) = oneshot::channel();
        if let Err(mpsc::error::SendError(Command::Send { reply, .. })) =
            self.commands.send(Command::Send { record, reply }).await
        {
            let _ = reply.send(Err(ProduceError::Indeterminate {
                reason: "the producer stopped".into(),
            }));
        }
        Delivery(delivered)
    }

    /// Waits until every queued record completed, then stops the task.
    pub async fn close(self) {
        let (done, closed) = oneshot::channel();
        if self.commands.send(Command::Close { done }).await.is_ok() {
            let _ = closed.await;
        }
    }
}

/// Each queued record's reply by its id. Ids are handed out one after another and records
/// mostly complete in that order, so a deque from the oldest open id does: a record completed
/// early leaves an empty slot until those before it complete.
#[derive(Debug)]
struct Replies<T> {
    /// The id of the front slot.
    first: u64,
    slots: VecDeque<Option<T>>,
}

impl<T> Default for Replies<T> {
    fn default() -> Replies<T> {
        Replies {
            first: 0,
            slots: VecDeque::new(),
        }
    }
}

impl<T> Replies<T> {
    /// Files the reply of `id`, the id after the last one filed.
    fn insert(&mut self, id: RecordId, reply: T) {
        if self.slots.is_empty() {
            self.first = id.0;
        }
        assert_eq!(
            Some(id.0),
            u64::try_from(self.slots.len())
                .ok()
                .and_then(|len| self.first.checked_add(len)),
            "record ids are handed out in order"
        );
        self.slots.push_back(Some(reply));
    }

    /// Takes the reply of `id`, if it is still filed.
    fn remove(&mut self, id: RecordId) -> Option<T> {
        let at = usize::try_from(id.0.checked_sub(self.first)?).ok()?;
        let reply = self.slots.get_mut(at)?.take();
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.first += 1;
        }
        reply
    }
}

struct Task {
    driver: Driver<ProducerCore>,
    bootstrap: Bootstrap,
    client_id: String,
    connections: BTreeMap<NodeId, ClientConnection>,
    replies: Replies<oneshot::Sender<Result<RecordMetadata, ProduceError>>>,
    next_id: u64,
}

impl Task {
    async fn run(mut self, mut inbox: mpsc::Receiver<Command>) {
        let mut closing: Vec<oneshot::Sender<()>> = Vec::new();
        let mut handles_dropped = false;
        loop {
            let finishing = handles_dropped || !closing.is_empty();
            if finishing && self.driver.machine().pending() == 0 {
                for done in closing {
                    let _ = done.send(());
                }
                return;
            }
            let deadline = self.driver.wake(None);
            let awaiting = self
                .connections
                .values()
                .any(ClientConnection::has_in_flight);
            let input = tokio::select! {
                biased;
                (node, response) = receive_any(&mut self.connections), if awaiting => match response {
                    Ok(ResponseKind::Produce(response)) => ProducerInput::Response { node, response },
                    Ok(ResponseKind::Metadata(response)) => ProducerInput::Metadata { node, response },
                    Ok(ResponseKind::InitProducerId(response)) => ProducerInput::ProducerId { node, response },
                    Ok(_) => self.lost(node, "a response of another API"),
                    Err(reason) => self.lost(node, &reason),
                },
                command = inbox.recv(), if !finishing => match command {
                    Some(Command::Send { record, reply }) => {
                        self.next_id += 1;
                        let id = RecordId(self.next_id);
                        self.replies.insert(id, reply);
                        ProducerInput::Send { id, record }
                    }
                    Some(Command::Close { done }) => {
                        closing.push(done);
                        ProducerInput::Close
                    }
                    None => {
                        handles_dropped = true;
                        ProducerInput::Close
                    }
                },
                () = self.driver.clock().sleep_until(deadline), if deadline.is_some() => ProducerInput::Tick,
            };
            self.step(input).await;
        }
    }

    fn lost(&mut self, node: NodeId, reason: &str) -> ProducerInput {
        self.connections.remove(&node);
        ProducerInput::Disconnected {
            node,
            reason: reason.to_owned(),
        }
    }

    /// Writes a request on `node`'s connection; what the core must hear of it: `Written` for a
    /// request with no response, `Disconnected` if the write broke the connection. Without a
    /// connection nothing is written: a `Disconnected` input is already queued and covers the
    /// request.
    async fn write(
        &mut self,
        node: NodeId,
        body: RequestKind,
        expects_response: bool,
    ) -> Option<ProducerInput> {
        let connection = self.connections.get_mut(&node)?;
        let written = if expects_response {
            connection.send(&body).await
        } else {
            connection.send_one_way(&body).await
        };
        match written {
            Ok(()) if expects_response => None,
            Ok(()) => Some(ProducerInput::Written { node }),
            Err(error) => Some(self.lost(node, &error.to_string())),
        }
    }

    /// Feeds one input, then executes outputs (which may produce further inputs) until quiet.
    async fn step(&mut self, input: ProducerInput) {
        // Most inputs bring no further input: the queue and the output list allocate only when
        // something is pushed (once a step, the output list is reused).
        let mut next = Some(input);
        let mut inputs = VecDeque::new();
        let mut outputs = Vec::new();
        while let Some(input) = next.take().or_else(|| inputs.pop_front()) {
            self.driver.step(input, &mut outputs);
            for output in outputs.drain(..) {
                match output {
                    ProducerOutput::Complete { id, result } => {
                        if let Some(reply) = self.replies.remove(id) {
                            let _ = reply.send(result);
                        }
                    }
                    ProducerOutput::Connect { node, address } => {
                        match connect_node(&mut self.bootstrap, &self.client_id, address).await {
                            Ok((connection, address)) => {
                                self.connections.insert(node, connection);
                                inputs.push_back(ProducerInput::Connected { node, address });
                            }
                            Err(error) => inputs.push_back(ProducerInput::ConnectFailed {
                                node,
                                reason: error.to_string(),
                            }),
                        }
                    }
                    ProducerOutput::Identified { node } => {
                        if let Some(connection) =
                            self.connections.remove(&crate::client::producer::BOOTSTRAP)
                        {
                            self.connections.insert(node, connection);
                        }
                    }
                    ProducerOutput::Disconnect { node, reason } => {
                        tracing::debug!(node, %reason, "producer closes a connection");
                        self.connections.remove(&node);
                    }
                    ProducerOutput::MetadataRequest { node, request } => {
                        let body = RequestKind::Metadata(request);
                        inputs.extend(self.write(node, body, true).await);
                    }
                    ProducerOutput::ProducerIdRequest { node, request } => {
                        let body = RequestKind::InitProducerId(request);
                        inputs.extend(self.write(node, body, true).await);
                    }
                    ProducerOutput::Request {
                        node,
                        request,
                        expects_response,
                    } => {
                        let body = RequestKind::Produce(request);
                        inputs.extend(self.write(node, body, expects_response).await);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_taken_once_in_any_order() {
        let mut replies = Replies::default();
        for id in 1..=5 {
            replies.insert(RecordId(id), id * 10);
        }
        assert_eq!(replies.remove(RecordId(3)), Some(30));
        assert_eq!(replies.remove(RecordId(3)), None, "taken once");
        assert_eq!(replies.remove(RecordId(1)), Some(10));
        assert_eq!(replies.remove(RecordId(2)), Some(20));
        assert_eq!(
            replies.first, 4,
            "the slots before the oldest open id are gone"
        );
        assert_eq!(replies.remove(RecordId(9)), None, "never filed");
        assert_eq!(replies.remove(RecordId(0)), None, "before the first");
        replies.insert(RecordId(6), 60);
        assert_eq!(replies.remove(RecordId(5)), Some(50));
        assert_eq!(replies.remove(RecordId(4)), Some(40));
        assert_eq!(replies.remove(RecordId(6)), Some(60));
        assert!(replies.slots.is_empty());
        replies.insert(RecordId(7), 70);
        assert_eq!(replies.remove(RecordId(7)), Some(70));
    }
}
