//! The Raft log of a controller: one append-only journal file on the node's storage, so the
//! simulator's disk model (lost unsynced writes, torn tails, fsync failures) applies to it as to
//! any partition log. Each frame is `[u32 length][u32 CRC-32C][JSON of a JournalRecord]`; on
//! open the journal is replayed up to the first frame that does not check out (a torn tail past
//! the last fsync), and the rest is cut off.
//!
//! Votes and appended entries are fsynced before openraft hears they are saved; truncations,
//! purges and the committed id ride on the next fsync (losing them is safe: Raft writes the
//! truncation again, and re-derives the commit).
//!
//! A reopened journal hands back its vote **uncommitted**: a node that led before it stopped
//! comes back as a follower and must win a new term, as a KRaft leader comes back Resigned
//! (Kafka's `QuorumState`). openraft would otherwise restore it as the leader of its old term at
//! once, with no entry of its own term, and its controller could act before it had applied
//! entries that its quorum committed while the committed id was still unsynced.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, PoisonError};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    Entry, LogId, LogState, OptionalSend, RaftLogId, RaftLogReader, StorageError, StorageIOError,
    Vote,
};
use serde::{Deserialize, Serialize};

use crate::runtime::storage::{DurableFile, DurableStorage};
use crate::storage::StorageFile;

use super::types::MetadataRaft;

/// The journal's file name in the node's storage.
pub(crate) const JOURNAL: &str = "__raft/journal";

/// One change to the Raft log's durable state.
#[derive(Debug, Serialize, Deserialize)]
enum JournalRecord {
    Vote(Vote<u64>),
    Committed(Option<LogId<u64>>),
    Append(Vec<Entry<MetadataRaft>>),
    /// Entries from this index on are gone (a conflict with the leader's log).
    Truncate(u64),
    /// Entries up to this one are gone (covered by a snapshot).
    Purge(LogId<u64>),
}

#[derive(Debug)]
struct State<F> {
    file: F,
    end: u64,
    vote: Option<Vote<u64>>,
    committed: Option<LogId<u64>>,
    last_purged: Option<LogId<u64>>,
    log: BTreeMap<u64, Entry<MetadataRaft>>,
}

impl<F: StorageFile> State<F> {
    fn apply(&mut self, record: JournalRecord) {
        match record {
            JournalRecord::Vote(vote) => self.vote = Some(vote),
            JournalRecord::Committed(committed) => self.committed = committed,
            JournalRecord::Append(entries) => {
                for entry in entries {
                    self.log.insert(entry.get_log_id().index, entry);
                }
            }
            JournalRecord::Truncate(index) => {
                self.log.split_off(&index);
            }
            JournalRecord::Purge(log_id) => {
                self.log = self.log.split_off(&(log_id.index + 1));
                self.last_purged = Some(log_id);
            }
        }
    }

    fn write(&mut self, record: &JournalRecord) -> io::Result<()> {
        let payload = serde_json::to_vec(record).map_err(io::Error::other)?;
        let mut frame = Vec::with_capacity(payload.len() + 8);
        frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        frame.extend_from_slice(&payload);
        self.file.write_all_at(&frame, self.end)?;
        self.end += frame.len() as u64;
        Ok(())
    }
}

/// The Raft log store; clones share one journal.
#[derive(Debug)]
pub(crate) struct Journal<F> {
    state: Arc<Mutex<State<F>>>,
}

impl<F> Clone for Journal<F> {
    fn clone(&self) -> Self {
        Journal {
            state: Arc::clone(&self.state),
        }
    }
}

/// Reads the valid frames of a journal; returns them and where the valid part ends.
fn read_frames<F: StorageFile>(file: &F) -> io::Result<(Vec<JournalRecord>, u64)> {
    let len = file.len()?;
    let mut position = 0;
    let mut records = Vec::new();
    while position + 8 <= len {
        let mut header = [0u8; 8];
        file.read_exact_at(&mut header, position)?;
        let size = u64::from(u32::from_le_bytes(header[..4].try_into().expect("4 bytes")));
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        if position + 8 + size > len {
            break;
        }
        let mut payload = vec![0u8; size as usize];
        file.read_exact_at(&mut payload, position + 8)?;
        if crc32c::crc32c(&payload) != crc {
            break;
        }
        let Ok(record) = serde_json::from_slice(&payload) else {
            break;
        };
        records.push(record);
        position += 8 + size;
    }
    Ok((records, position))
}

impl<F: DurableFile> Journal<F> {
    /// Opens (or creates) the journal in `storage` and replays it.
    pub(crate) async fn open<S: DurableStorage<File = F>>(storage: &S) -> io::Result<Self> {
        let existed = storage.list(JOURNAL)?.iter().any(|name| name == JOURNAL);
        let file = storage.open(JOURNAL)?;
        if !existed {
            storage.sync_directory("__raft").await?;
            storage.sync_directory("").await?;
        }
        let (records, end) = read_frames(&file)?;
        if end < file.len()? {
            tracing::warn!(
                kept = end,
                dropped = file.len()? - end,
                "raft journal: torn tail cut"
            );
            file.set_len(end)?;
        }
        let mut state = State {
            file,
            end,
            vote: None,
            committed: None,
            last_purged: None,
            log: BTreeMap::new(),
        };
        for record in records {
            state.apply(record);
        }
        if let Some(vote) = state.vote.as_mut() {
            // Resigned: whatever this node led, it leads again only in a term it wins anew.
            vote.committed = false;
        }
        Ok(Journal {
            state: Arc::new(Mutex::new(state)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<F>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes `record` (not yet durable) and applies it; returns the file to sync.
    fn record(&self, record: JournalRecord) -> io::Result<F> {
        let mut state = self.lock();
        state.write(&record)?;
        state.apply(record);
        Ok(state.file.clone())
    }
}

impl<F: DurableFile> RaftLogReader<MetadataRaft> for Journal<F> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<MetadataRaft>>, StorageError<u64>> {
        Ok(self
            .lock()
            .log
            .range(range)
            .map(|(_, entry)| entry.clone())
            .collect())
    }
}

impl<F: DurableFile> RaftLogStorage<MetadataRaft> for Journal<F> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<MetadataRaft>, StorageError<u64>> {
        let state = self.lock();
        let last = state
            .log
            .values()
            .next_back()
            .map(|entry| *entry.get_log_id());
        Ok(LogState {
            last_purged_log_id: state.last_purged,
            last_log_id: last.or(state.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        let file = self
            .record(JournalRecord::Vote(*vote))
            .map_err(|error| StorageIOError::write_vote(&error))?;
        file.sync()
            .await
            .map_err(|error| StorageIOError::write_vote(&error).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.lock().vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<u64>>,
    ) -> Result<(), StorageError<u64>> {
        self.record(JournalRecord::Committed(committed))
            .map(drop)
            .map_err(|error| StorageIOError::write(&error).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<MetadataRaft>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<MetadataRaft>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let file = self
            .record(JournalRecord::Append(entries))
            .map_err(|error| StorageIOError::write_logs(&error))?;
        let result = file.sync().await;
        callback.log_io_completed(result);
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        self.record(JournalRecord::Truncate(log_id.index))
            .map(drop)
            .map_err(|error| StorageIOError::write_logs(&error).into())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        self.record(JournalRecord::Purge(log_id))
            .map(drop)
            .map_err(|error| StorageIOError::write_logs(&error).into())
    }
}

#[cfg(all(test, not(madsim)))]
mod tests {
    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::storage::memory::MemoryStorage;
    use crate::storage::Storage;

    fn entry(term: u64, index: u64) -> Entry<MetadataRaft> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1000), index),
            payload: EntryPayload::Blank,
        }
    }

    fn indexes(journal: &Journal<crate::storage::memory::MemoryFile>) -> Vec<(u64, u64)> {
        journal
            .lock()
            .log
            .values()
            .map(|entry| (entry.log_id.leader_id.term, entry.log_id.index))
            .collect()
    }

    #[test]
    fn a_reopened_journal_has_its_votes_truncations_and_purges_and_drops_a_torn_tail() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let storage = MemoryStorage::new();
            let mut journal = Journal::open(&storage).await.expect("opens");
            let vote = Vote::new(2, 1000);
            journal.save_vote(&vote).await.expect("vote");
            journal
                .blocking_append((0..4).map(|index| entry(1, index)))
                .await
                .expect("append");
            journal
                .truncate(entry(1, 2).log_id)
                .await
                .expect("truncate");
            journal
                .blocking_append([entry(2, 2)])
                .await
                .expect("append");
            journal.purge(entry(1, 0).log_id).await.expect("purge");
            assert_eq!(indexes(&journal), [(1, 1), (2, 2)]);
            // Half a frame past the end, as a crash in the middle of a write leaves it.
            let file = storage.open(JOURNAL).expect("file");
            let end = file.len().expect("len");
            file.write_all_at(&[9, 0, 0, 0, 1, 2], end)
                .expect("garbage");

            let mut reopened = Journal::open(&storage).await.expect("reopens");
            assert_eq!(reopened.read_vote().await.expect("vote"), Some(vote));
            assert_eq!(indexes(&reopened), [(1, 1), (2, 2)]);
            let state = reopened.get_log_state().await.expect("state");
            assert_eq!(state.last_purged_log_id, Some(entry(1, 0).log_id));
            assert_eq!(state.last_log_id, Some(entry(2, 2).log_id));
            assert_eq!(
                storage.open(JOURNAL).expect("file").len().expect("len"),
                end
            );
            // Appends go after the valid part.
            reopened
                .blocking_append([entry(2, 3)])
                .await
                .expect("append");
            let again = Journal::open(&storage).await.expect("reopens");
            assert_eq!(indexes(&again), [(1, 1), (2, 2), (2, 3)]);
        });
    }

    /// KRaft's leader comes back Resigned (QuorumState): a node that led when it stopped must
    /// win a new term before it acts, so it never acts on a log it has not applied to the end.
    #[test]
    fn a_reopened_journal_hands_back_a_leaders_vote_uncommitted() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let storage = MemoryStorage::new();
            let mut journal = Journal::open(&storage).await.expect("opens");
            let mut led = Vote::new(3, 1000);
            led.commit();
            journal.save_vote(&led).await.expect("vote");
            assert_eq!(journal.read_vote().await.expect("vote"), Some(led));
            let mut reopened = Journal::open(&storage).await.expect("reopens");
            assert_eq!(
                reopened.read_vote().await.expect("vote"),
                Some(Vote::new(3, 1000)),
                "the term and the candidate stay; the leadership does not"
            );
        });
    }
}
