//! The controller quorum: the metadata log replicated by Raft (openraft `=0.9.25`) among the
//! controllers of `controller.quorum.voters`. openraft's types stay in this module; the
//! controller node (sans-IO) sees only [`QuorumInput`]s and asks for proposals with
//! [`crate::node_io::Output::Propose`].
//!
//! - [`journal`]: the Raft log and vote, durable in the node's storage;
//! - [`machine`]: the state machine, which feeds committed entries to the node;
//! - [`network`]: Raft messages between controllers over TCP;
//! - [`rt`]: openraft's runtime, madsim's under the simulator;
//! - [`types`]: the Raft types (an entry's data, [`MetadataBatch`]), shared by the others.

mod journal;
mod machine;
mod network;
mod rt;
mod types;

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::sync::Arc;

use openraft::{BasicNode, Config, Raft, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::config::broker::Voter;
use crate::metadata::records::Record;
use crate::metadata::QuorumInput;
use crate::runtime::storage::DurableStorage;

use self::journal::Journal;
use self::machine::MetadataMachine;
use self::network::{raft_address, Network};
pub use self::types::MetadataBatch;
use self::types::MetadataRaft;

/// Raft timing. A KRaft follower stands for election once it has not heard from the leader for
/// `controller.quorum.fetch.timeout.ms` (2000), and a split vote backs off up to
/// `controller.quorum.election.backoff.max.ms` (1000). An openraft follower that knows a leader
/// waits its leader lease (`election_timeout_max`) plus an election timeout drawn from
/// [min, max) once at start: 2.0 to 2.5 s here, about Kafka's (with 1000..2000 it was 3 to 4 s,
/// issue 41's finding 7; `sim/tests/quorum.rs` measures the gap). A snapshot every
/// `snapshot_entries` entries, keeping a fifth of that many behind it.
fn raft_config(snapshot_entries: u64) -> io::Result<Arc<Config>> {
    let config = Config {
        cluster_name: "seedlog-controllers".to_owned(),
        heartbeat_interval: 250,
        election_timeout_min: 750,
        election_timeout_max: 1_250,
        install_snapshot_timeout: 2_000,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_entries),
        max_in_snapshot_log_to_keep: snapshot_entries / 5,
        ..Config::default()
    };
    config.validate().map(Arc::new).map_err(io::Error::other)
}

/// A running member of the quorum.
#[derive(Clone)]
pub struct Quorum {
    /// Proposals, to the one task that hands them to Raft in order.
    proposals: mpsc::UnboundedSender<MetadataBatch>,
}

impl fmt::Debug for Quorum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quorum").finish_non_exhaustive()
    }
}

impl Quorum {
    /// Joins the quorum of `voters` as `me`: opens the journal in `storage`, listens for Raft
    /// messages, and feeds committed entries and leader changes to `to_node`. A pristine node
    /// proposes the voter set itself (every voter may: they propose the same one).
    pub async fn start<S: DurableStorage>(
        me: u64,
        voters: &[Voter],
        snapshot_entries: u64,
        bind_host: &str,
        storage: &S,
        to_node: mpsc::Sender<QuorumInput>,
    ) -> io::Result<Quorum> {
        let members: BTreeMap<u64, BasicNode> = voters
            .iter()
            .map(|voter| {
                let node = BasicNode::new(raft_address(&voter.host, voter.port));
                (u64::from(voter.id as u32), node)
            })
            .collect();
        let own = voters
            .iter()
            .find(|voter| u64::from(voter.id as u32) == me)
            .ok_or_else(|| io::Error::other(format!("node {me} is not a voter")))?;
        let listener = TcpListener::bind(raft_address(bind_host, own.port)).await?;
        let journal = Journal::open(storage).await?;
        let machine = MetadataMachine::open(storage.clone(), to_node.clone()).await?;
        let raft = Raft::new(
            me,
            raft_config(snapshot_entries)?,
            Network,
            journal,
            machine,
        )
        .await
        .map_err(io::Error::other)?;
        tokio::spawn(network::serve(listener, raft.clone()));
        if !raft.is_initialized().await.map_err(io::Error::other)? {
            // Refused if another voter's initialization reached this node first: fine.
            if let Err(error) = raft.initialize(members).await {
                tracing::debug!(%error, "quorum already initialized");
            }
        }
        tokio::spawn(watch_leader(raft.clone(), to_node));
        let (proposals, to_propose) = mpsc::unbounded_channel();
        tokio::spawn(propose_in_order(raft.clone(), to_propose));
        Ok(Quorum { proposals })
    }

    /// Proposes `records` as one entry. Whether it commits is learned from the entries fed
    /// back; a node that is not the leader has its proposal refused, and is told so by a
    /// leader change. Proposals reach the Raft log in the order they are made: each was decided
    /// on an image that holds every earlier one.
    pub fn propose(&self, records: &[Record]) {
        let batch = MetadataBatch {
            records: records.iter().map(Record::encode).collect(),
        };
        // The task ends only with the node.
        let _ = self.proposals.send(batch);
    }
}

/// Hands proposals to Raft one after the other, in the order they were made (a task per
/// proposal let the scheduler reorder them: a later decision, made on an image holding an
/// earlier one, could be committed before it, and the committed log then held a change that does
/// not apply, on every controller). Answers are awaited apart, so a slow commit holds nothing
/// back.
async fn propose_in_order(
    raft: Raft<MetadataRaft>,
    mut proposals: mpsc::UnboundedReceiver<MetadataBatch>,
) {
    while let Some(batch) = proposals.recv().await {
        match raft.client_write_ff(batch).await {
            Ok(answer) => {
                tokio::spawn(async move {
                    match answer.await {
                        Ok(Ok(_)) => {}
                        Ok(Err(error)) => {
                            tracing::debug!(%error, "metadata proposal not committed here");
                        }
                        Err(_) => tracing::debug!("metadata proposal dropped"),
                    }
                });
            }
            Err(error) => {
                tracing::debug!(%error, "the Raft core is gone");
                return;
            }
        }
    }
}

/// Feeds each change of leader or term to the node.
async fn watch_leader(raft: Raft<MetadataRaft>, to_node: mpsc::Sender<QuorumInput>) {
    let mut metrics = raft.metrics();
    let mut last = None;
    loop {
        let seen = {
            let current = metrics.borrow();
            (current.current_leader, current.current_term)
        };
        if last != Some(seen) {
            last = Some(seen);
            let input = QuorumInput::Leader {
                leader: seen.0.map(|id| id as i32),
                term: seen.1,
            };
            if to_node.send(input).await.is_err() {
                return;
            }
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}
