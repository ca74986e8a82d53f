//! Connections from a node to its peers (a follower to its leaders, a broker to the controller):
//! one task and one TCP connection per peer, requests sent one at a time at the version the
//! core chose, each answer (or the connection's failure) fed back to the driver. A failed
//! connection is dropped and made again for the next request; so is one whose answer does not
//! come within the request's timeout (Kafka's NetworkClient disconnects on a request timeout),
//! so a stalled connection is never waited on for longer than one request's timeout.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::{RequestKind, ResponseKind};
use tokio::sync::mpsc;

use crate::broker::PeerRequestId;
use crate::runtime::client::ClientConnection;
use crate::types::BrokerId;

/// One request for a peer.
#[derive(Debug)]
pub(crate) struct PeerCall {
    pub(crate) id: PeerRequestId,
    pub(crate) api_version: i16,
    pub(crate) body: Box<RequestKind>,
    /// How long the answer may take (the connection is dropped past it).
    pub(crate) timeout: Duration,
}

/// The answer to a [`PeerCall`].
pub(crate) type PeerAnswer = (BrokerId, PeerRequestId, Result<Box<ResponseKind>, String>);

/// A node's connections to its peers.
#[derive(Debug)]
pub(crate) struct Peers {
    client_id: String,
    answers: mpsc::UnboundedSender<PeerAnswer>,
    /// Each peer's task by the `(host, port)` it talks to (a peer that moves gets a new one).
    tasks: BTreeMap<BrokerId, Vec<(String, i32, mpsc::UnboundedSender<PeerCall>)>>,
}

impl Peers {
    /// Peers whose answers go to `answers`.
    pub(crate) fn new(client_id: String, answers: mpsc::UnboundedSender<PeerAnswer>) -> Self {
        Peers {
            client_id,
            answers,
            tasks: BTreeMap::new(),
        }
    }

    /// Sends `call` to `peer` at `address` (`None`: unknown, answered with an error at once).
    pub(crate) fn send(&mut self, peer: BrokerId, address: Option<(&str, i32)>, call: PeerCall) {
        let Some((host, port)) = address else {
            let error = format!("no address known for node {}", peer.0);
            let _ = self.answers.send((peer, call.id, Err(error)));
            return;
        };
        let tasks = self.tasks.entry(peer).or_default();
        let known = tasks
            .iter()
            .position(|(known, known_port, _)| *known == host && *known_port == port);
        let at = if let Some(at) = known {
            at
        } else {
            let (sender, calls) = mpsc::unbounded_channel();
            let answers = self.answers.clone();
            let client_id = self.client_id.clone();
            let address = format!("{host}:{port}");
            tokio::spawn(serve_peer(peer, address, client_id, calls, answers));
            tasks.push((host.to_owned(), port, sender));
            tasks.len() - 1
        };
        let sender = &tasks[at].2;
        if let Err(failed) = sender.send(call) {
            let error = "peer task ended".to_owned();
            let _ = self.answers.send((peer, failed.0.id, Err(error)));
        }
    }
}

async fn serve_peer(
    peer: BrokerId,
    address: String,
    client_id: String,
    mut calls: mpsc::UnboundedReceiver<PeerCall>,
    answers: mpsc::UnboundedSender<PeerAnswer>,
) {
    let mut connection: Option<ClientConnection> = None;
    while let Some(call) = calls.recv().await {
        if connection.is_none() {
            match ClientConnection::connect_raw(&address, &client_id).await {
                Ok(connected) => connection = Some(connected),
                Err(error) => {
                    let error = format!("connect to node {} at {address}: {error}", peer.0);
                    if answers.send((peer, call.id, Err(error))).is_err() {
                        return;
                    }
                    continue;
                }
            }
        }
        let open = connection.as_mut().expect("connected above");
        let answer = tokio::time::timeout(
            call.timeout,
            open.call_at_version(call.api_version, *call.body),
        );
        let result = match answer.await {
            Ok(Ok(response)) => Ok(Box::new(response)),
            Ok(Err(error)) => {
                connection = None;
                Err(format!("node {} at {address}: {error}", peer.0))
            }
            Err(_elapsed) => {
                connection = None;
                Err(format!(
                    "node {} at {address}: no answer within {} ms",
                    peer.0,
                    call.timeout.as_millis()
                ))
            }
        };
        if answers.send((peer, call.id, result)).is_err() {
            return;
        }
    }
}

#[cfg(all(test, not(madsim)))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use kafka_protocol::messages::BrokerHeartbeatRequest;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    use super::*;

    /// A peer that reads requests and never answers (a stalled connection) is given up on after
    /// the request's timeout, and the next request goes out on a new connection.
    #[test]
    fn a_request_without_an_answer_times_out_and_the_next_one_reconnects() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let port = i32::from(listener.local_addr().expect("address").port());
            let accepted = Arc::new(AtomicUsize::new(0));
            let counter = Arc::clone(&accepted);
            tokio::spawn(async move {
                while let Ok((mut stream, _)) = listener.accept().await {
                    counter.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(async move {
                        let mut buffer = [0u8; 4096];
                        while matches!(stream.read(&mut buffer).await, Ok(read) if read > 0) {}
                    });
                }
            });
            let (answers, mut answered) = mpsc::unbounded_channel();
            let mut peers = Peers::new("test".to_owned(), answers);
            let call = |id| PeerCall {
                id: PeerRequestId(id),
                api_version: 0,
                body: Box::new(RequestKind::BrokerHeartbeat(
                    BrokerHeartbeatRequest::default(),
                )),
                timeout: Duration::from_millis(100),
            };
            for id in [1, 2] {
                peers.send(BrokerId(7), Some(("127.0.0.1", port)), call(id));
                let (peer, answer_id, result) = answered.recv().await.expect("an answer");
                assert_eq!((peer, answer_id), (BrokerId(7), PeerRequestId(id)));
                let error = result.expect_err("no answer comes");
                assert!(error.contains("no answer within 100 ms"), "{error}");
            }
            assert_eq!(
                accepted.load(Ordering::SeqCst),
                2,
                "the timed-out connection was dropped and a new one made"
            );
        });
    }
}
