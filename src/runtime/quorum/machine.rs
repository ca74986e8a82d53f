//! The Raft state machine of a controller: the metadata image the committed records make, and
//! how many records made it (the metadata offset it stands at). A snapshot is that image, as the
//! records that rebuild it ([`ClusterImage::to_records`], Kafka's `MetadataImage.write`), with
//! its end offset: its size follows the cluster, not the length of its history. Every applied
//! entry goes to the controller node's driver, which owns the controller's decisions and the
//! copy of the log brokers fetch; every snapshot goes there too, so that the copy can start at
//! the snapshot and lagging brokers fetch the snapshot instead (KIP-630).
//!
//! Between snapshots the machine is volatile: after a restart it starts from the last snapshot,
//! which is durable (written to a temporary file, fsynced, renamed over `__raft/snapshot`,
//! directory fsynced) before openraft may purge the log entries it covers, and openraft applies
//! the log again from there.

use std::io::{self, Cursor};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::metadata::image::ClusterImage;
use crate::metadata::records::Record;
use crate::metadata::QuorumInput;
use crate::runtime::storage::{DurableFile, DurableStorage};
use crate::storage::StorageFile;

use super::types::MetadataRaft;

/// The durable snapshot's file name in the node's storage.
const SNAPSHOT: &str = "__raft/snapshot";
/// Where a new snapshot is written before it replaces the old one.
const SNAPSHOT_NEW: &str = "__raft/snapshot.new";

/// What a snapshot holds: the records that rebuild the image, encoded, and the metadata offset
/// the image stands at.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SnapshotData {
    /// How many metadata records were committed before the snapshot. Absent in a snapshot
    /// written by an older seedlog, whose `records` were every committed record: then it is
    /// their count.
    #[serde(default)]
    end_offset: Option<i64>,
    records: Vec<Vec<u8>>,
}

impl SnapshotData {
    /// The end offset and the decoded records.
    fn decode(&self) -> io::Result<(i64, Vec<Record>)> {
        let records = decode_all(&self.records)?;
        let end_offset = self.end_offset.unwrap_or(records.len() as i64);
        Ok((end_offset, records))
    }
}

fn decode_all(records: &[Vec<u8>]) -> io::Result<Vec<Record>> {
    records
        .iter()
        .map(|bytes| Record::decode(bytes))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))
}

/// A snapshot as stored: its metadata and its data.
#[derive(Debug, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, BasicNode>,
    data: SnapshotData,
}

/// The state machine; its clone (sharing nothing but the storage) builds snapshots.
#[derive(Debug, Clone)]
pub(crate) struct MetadataMachine<S> {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    /// What the records applied so far say.
    image: ClusterImage,
    /// How many records were applied (the snapshot's, then the log's).
    end_offset: i64,
    to_node: mpsc::Sender<QuorumInput>,
    storage: S,
}

impl<S: DurableStorage> MetadataMachine<S> {
    /// The machine as the last durable snapshot left it (empty without one); hands `to_node`
    /// that snapshot at once.
    pub(crate) async fn open(storage: S, to_node: mpsc::Sender<QuorumInput>) -> io::Result<Self> {
        let mut machine = MetadataMachine {
            last_applied: None,
            membership: StoredMembership::default(),
            image: ClusterImage::default(),
            end_offset: 0,
            to_node,
            storage,
        };
        let leftover = machine.storage.list(SNAPSHOT_NEW)?;
        if leftover.iter().any(|name| name == SNAPSHOT_NEW) {
            // A crash before the rename: the old snapshot stands.
            machine.storage.remove(SNAPSHOT_NEW)?;
        }
        if !machine
            .storage
            .list(SNAPSHOT)?
            .iter()
            .any(|name| name == SNAPSHOT)
        {
            return Ok(machine);
        }
        let bytes = machine.storage.open(SNAPSHOT)?.read_all()?;
        let stored: StoredSnapshot = serde_json::from_slice(&bytes).map_err(|error| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{SNAPSHOT}: {error}"))
        })?;
        let (end_offset, records) = stored.data.decode()?;
        tracing::info!(
            snapshot = %stored.meta.snapshot_id,
            end_offset,
            records = records.len(),
            "metadata snapshot loaded"
        );
        machine.last_applied = stored.meta.last_log_id;
        machine.membership = stored.meta.last_membership;
        machine
            .take_snapshot(end_offset, records)
            .await
            .map_err(io::Error::other)?;
        Ok(machine)
    }

    /// Makes `meta` and `data` the durable snapshot; returns its encoding.
    async fn persist(
        &self,
        meta: &SnapshotMeta<u64, BasicNode>,
        data: SnapshotData,
    ) -> io::Result<Vec<u8>> {
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        let bytes = serde_json::to_vec(&stored).map_err(io::Error::other)?;
        let file = self.storage.open(SNAPSHOT_NEW)?;
        file.set_len(0)?;
        file.write_all_at(&bytes, 0)?;
        file.sync().await?;
        self.storage.rename(SNAPSHOT_NEW, SNAPSHOT)?;
        self.storage.sync_directory("__raft").await?;
        serde_json::to_vec(&stored.data).map_err(io::Error::other)
    }

    /// The term of the last applied entry.
    fn term(&self) -> u64 {
        self.last_applied.map_or(0, |log_id| log_id.leader_id.term)
    }

    /// Applies one committed entry's records and hands them to the node.
    async fn feed(&mut self, term: u64, records: &[Vec<u8>]) -> Result<(), StorageError<u64>> {
        let decoded = decode_all(records).map_err(|error| {
            StorageIOError::apply(self.last_applied.expect("set before feeding"), &error)
        })?;
        for record in &decoded {
            self.image.apply(record).map_err(|error| {
                StorageIOError::apply(
                    self.last_applied.expect("set before feeding"),
                    &io::Error::new(io::ErrorKind::InvalidData, error),
                )
            })?;
        }
        self.end_offset += decoded.len() as i64;
        self.send(QuorumInput::Committed {
            term,
            records: decoded,
        })
        .await;
        Ok(())
    }

    /// Makes the image the one `records` build, at `end_offset`, and hands the snapshot to the
    /// node.
    async fn take_snapshot(
        &mut self,
        end_offset: i64,
        records: Vec<Record>,
    ) -> Result<(), StorageError<u64>> {
        self.image = ClusterImage::from_records(&records).map_err(|error| {
            StorageIOError::read_state_machine(&io::Error::new(io::ErrorKind::InvalidData, error))
        })?;
        self.end_offset = end_offset;
        let term = self.term();
        self.send(QuorumInput::Snapshot {
            term,
            end_offset,
            records,
        })
        .await;
        Ok(())
    }

    async fn send(&self, input: QuorumInput) {
        // The node gone means the process is stopping: nothing left to feed.
        let _ = self.to_node.send(input).await;
    }
}

impl<S: DurableStorage> RaftSnapshotBuilder<MetadataRaft> for MetadataMachine<S> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<MetadataRaft>, StorageError<u64>> {
        let records = self.image.to_records();
        let data = SnapshotData {
            end_offset: Some(self.end_offset),
            records: records.iter().map(Record::encode).collect(),
        };
        let snapshot_id = match self.last_applied {
            Some(log_id) => format!("{}-{}", log_id.leader_id.term, log_id.index),
            None => "empty".to_owned(),
        };
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id,
        };
        let bytes = self
            .persist(&meta, data)
            .await
            .map_err(|error| StorageIOError::write_snapshot(Some(meta.signature()), &error))?;
        // Every entry this image covers went to the node before this builder was cloned, so
        // the node's copy of the log reaches `end_offset` already: it starts there now.
        self.send(QuorumInput::Snapshot {
            term: self.term(),
            end_offset: self.end_offset,
            records,
        })
        .await;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl<S: DurableStorage> RaftStateMachine<MetadataRaft> for MetadataMachine<S> {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<MetadataRaft>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut answers = Vec::new();
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            let term = entry.log_id.leader_id.term;
            match entry.payload {
                EntryPayload::Blank => self.feed(term, &[]).await?,
                EntryPayload::Normal(batch) => self.feed(term, &batch.records).await?,
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), membership);
                    self.feed(term, &[]).await?;
                }
            }
            answers.push(());
        }
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let bytes = snapshot.into_inner();
        let data: SnapshotData = serde_json::from_slice(&bytes)
            .map_err(|error| StorageIOError::read_snapshot(Some(meta.signature()), &error))?;
        let (end_offset, records) = data
            .decode()
            .map_err(|error| StorageIOError::read_snapshot(Some(meta.signature()), &error))?;
        tracing::info!(
            snapshot = %meta.snapshot_id,
            end_offset,
            records = records.len(),
            "metadata snapshot installed"
        );
        self.persist(meta, data)
            .await
            .map_err(|error| StorageIOError::write_snapshot(Some(meta.signature()), &error))?;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.take_snapshot(end_offset, records).await
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<MetadataRaft>>, StorageError<u64>> {
        // Built afresh (and made durable): the state machine is small, and a snapshot of the
        // current state is never older than the log the last build let openraft purge.
        if self.last_applied.is_none() {
            return Ok(None);
        }
        self.build_snapshot().await.map(Some)
    }
}
