//! Connections from a node to its peers (a follower to its leaders, a broker to the controller):
//! one task and one TCP connection per peer, requests sent one at a time at the version the
//! core chose, each answer (or the connection's failure) fed back to the driver. A failed
//! connection is dropped and made again for the next request.

use std::collections::BTreeMap;

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
        let result = match open.call_at_version(call.api_version, *call.body).await {
            Ok(response) => Ok(Box::new(response)),
            Err(error) => {
                connection = None;
                Err(format!("node {} at {address}: {error}", peer.0))
            }
        };
        if answers.send((peer, call.id, result)).is_err() {
            return;
        }
    }
}
