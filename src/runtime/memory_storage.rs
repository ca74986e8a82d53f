//! An in-memory disk with a durability model (after redb's crash backend and turmoil's
//! `unstable-fs`): each file has its live bytes (the page cache) and its durable bytes (what an
//! fsync last made stable). Writes touch only the live bytes; [`StorageFile::sync`] copies live
//! to durable. [`MemoryStorage::crash`] applies a crash:
//!
//! * [`CrashLevel::Process`]: the process dies, the page cache survives: nothing changes.
//! * [`CrashLevel::PowerLoss`]: live bytes fall back to the durable bytes, plus possibly a torn
//!   prefix of the unsynced tail; files never synced vanish.
//!
//! The simulator's disk plugin keeps one `MemoryStorage` per node and calls `crash` when madsim
//! kills the node; unit tests use it directly.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::storage::{Storage, StorageFile};

/// How hard a crash is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashLevel {
    /// Process crash (kill -9): unsynced writes survive in the page cache.
    Process,
    /// Power loss: unsynced writes are lost; an unsynced appended tail may survive in part.
    PowerLoss,
}

/// Faults the storage injects on demand (the simulator sets these).
#[derive(Debug, Clone, Default)]
pub struct DiskFaults {
    /// The next N writes fail with EIO.
    pub fail_writes: u32,
    /// The next N fsyncs fail with EIO.
    pub fail_syncs: u32,
}

#[derive(Debug, Default)]
struct FileState {
    live: Vec<u8>,
    /// `None` until the first fsync: a file created and never synced vanishes on power loss.
    durable: Option<Vec<u8>>,
    /// Lowest position written or truncated since the last fsync: below it, live and durable
    /// bytes agree. Lets an fsync copy only what changed, and tells an appended tail (which a
    /// power loss may tear) from an overwrite.
    dirty_from: usize,
}

impl FileState {
    fn touch(&mut self, position: usize) {
        self.dirty_from = self.dirty_from.min(position);
    }

    /// Makes the durable bytes equal the live bytes, copying only the changed part.
    fn sync(&mut self) {
        let clean = self.dirty_from.min(self.live.len());
        let durable = self.durable.get_or_insert_with(Vec::new);
        durable.truncate(clean);
        durable.extend_from_slice(&self.live[durable.len()..]);
        self.dirty_from = self.live.len();
    }
}

type SyncLatency = Arc<dyn Fn() -> Duration + Send + Sync>;

struct Shared {
    files: BTreeMap<String, Arc<Mutex<FileState>>>,
    faults: DiskFaults,
    sync_latency: Option<SyncLatency>,
}

/// An in-memory disk. Clones share the same disk.
#[derive(Clone)]
pub struct MemoryStorage {
    shared: Arc<Mutex<Shared>>,
}

impl std::fmt::Debug for MemoryStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStorage")
            .field("files", &lock(&self.shared).files.len())
            .finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Default for MemoryStorage {
    fn default() -> Self {
        MemoryStorage::new()
    }
}

impl MemoryStorage {
    /// An empty disk whose fsyncs complete immediately.
    pub fn new() -> MemoryStorage {
        MemoryStorage {
            shared: Arc::new(Mutex::new(Shared {
                files: BTreeMap::new(),
                faults: DiskFaults::default(),
                sync_latency: None,
            })),
        }
    }

    /// Every fsync first sleeps for `latency()` (simulated time under madsim), so a crash
    /// during an fsync loses its data.
    pub fn set_sync_latency(&self, latency: impl Fn() -> Duration + Send + Sync + 'static) {
        lock(&self.shared).sync_latency = Some(Arc::new(latency));
    }

    /// Arms faults (added to any already armed).
    pub fn inject(&self, faults: &DiskFaults) {
        let mut shared = lock(&self.shared);
        shared.faults.fail_writes += faults.fail_writes;
        shared.faults.fail_syncs += faults.fail_syncs;
    }

    /// Applies a crash. `torn_keep(unsynced_len)` picks how many bytes of an unsynced appended
    /// tail survive a power loss (0 keeps none); it is called once per such file, in name order.
    pub fn crash(&self, level: CrashLevel, mut torn_keep: impl FnMut(usize) -> usize) {
        let mut shared = lock(&self.shared);
        shared.faults = DiskFaults::default();
        if level == CrashLevel::Process {
            return;
        }
        let mut vanished = Vec::new();
        for (name, file) in &shared.files {
            let mut state = lock(file);
            let Some(durable) = state.durable.clone() else {
                vanished.push(name.clone());
                continue;
            };
            let appended_tail =
                state.live.len() > durable.len() && state.dirty_from >= durable.len();
            state.live = if appended_tail {
                let unsynced = state.live.len() - durable.len();
                let keep = torn_keep(unsynced).min(unsynced);
                state.live[..durable.len() + keep].to_vec()
            } else {
                durable
            };
            state.dirty_from = state.live.len();
        }
        for name in vanished {
            shared.files.remove(&name);
        }
    }

    /// Durable length of a file, for assertions in tests.
    pub fn durable_len(&self, name: &str) -> Option<usize> {
        let shared = lock(&self.shared);
        let file = Arc::clone(shared.files.get(name)?);
        drop(shared);
        let state = lock(&file);
        state.durable.as_ref().map(Vec::len)
    }
}

impl Storage for MemoryStorage {
    type File = MemoryFile;

    fn open(&self, name: &str) -> io::Result<MemoryFile> {
        let mut shared = lock(&self.shared);
        let state = Arc::clone(shared.files.entry(name.to_owned()).or_default());
        Ok(MemoryFile {
            name: name.to_owned(),
            state,
            storage: self.clone(),
        })
    }

    fn list(&self, prefix: &str) -> io::Result<Vec<String>> {
        Ok(lock(&self.shared)
            .files
            .keys()
            .filter(|name| name.starts_with(prefix))
            .cloned()
            .collect())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        lock(&self.shared).files.remove(name);
        Ok(())
    }
}

/// A file on a [`MemoryStorage`].
#[derive(Clone)]
pub struct MemoryFile {
    name: String,
    state: Arc<Mutex<FileState>>,
    storage: MemoryStorage,
}

impl std::fmt::Debug for MemoryFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemoryFile({})", self.name)
    }
}

fn eio(what: &str, name: &str) -> io::Error {
    io::Error::other(format!("injected EIO on {what} of {name}"))
}

impl StorageFile for MemoryFile {
    fn len(&self) -> io::Result<u64> {
        Ok(lock(&self.state).live.len() as u64)
    }

    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        let state = lock(&self.state);
        let start =
            usize::try_from(position).map_err(|_| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        let end = start
            .checked_add(buf.len())
            .filter(|end| *end <= state.live.len());
        let end = end.ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(&state.live[start..end]);
        Ok(())
    }

    fn write_all_at(&self, data: &[u8], position: u64) -> io::Result<()> {
        {
            let mut shared = lock(&self.storage.shared);
            if shared.faults.fail_writes > 0 {
                shared.faults.fail_writes -= 1;
                return Err(eio("write", &self.name));
            }
        }
        let mut state = lock(&self.state);
        let start = position as usize;
        state.touch(start);
        if state.live.len() < start + data.len() {
            state.live.resize(start + data.len(), 0);
        }
        state.live[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.touch(len as usize);
        state.live.resize(len as usize, 0);
        Ok(())
    }

    fn sync(&self) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let file = self.clone();
        async move {
            let latency = lock(&file.storage.shared).sync_latency.clone();
            if let Some(latency) = latency {
                tokio::time::sleep(latency()).await;
            }
            let mut shared = lock(&file.storage.shared);
            if shared.faults.fail_syncs > 0 {
                shared.faults.fail_syncs -= 1;
                return Err(eio("fsync", &file.name));
            }
            drop(shared);
            let mut state = lock(&file.state);
            state.sync();
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(future)
    }

    #[test]
    fn power_loss_drops_unsynced_bytes_and_unsynced_files() {
        let disk = MemoryStorage::new();
        let synced = disk.open("a/x.log").expect("open");
        synced.write_all_at(b"hello", 0).expect("write");
        block_on(synced.sync()).expect("sync");
        synced.write_all_at(b" world", 5).expect("write");
        let never_synced = disk.open("b/y.log").expect("open");
        never_synced.write_all_at(b"gone", 0).expect("write");
        disk.crash(CrashLevel::Process, |_| {
            unreachable!("process crashes keep everything")
        });
        assert_eq!(synced.len().expect("len"), 11);
        disk.crash(CrashLevel::PowerLoss, |_| 0);
        assert_eq!(disk.list("").expect("list"), vec!["a/x.log".to_owned()]);
        assert_eq!(disk.open("a/x.log").expect("open").len().expect("len"), 5);
    }

    #[test]
    fn a_torn_tail_keeps_a_prefix_of_the_unsynced_append() {
        let disk = MemoryStorage::new();
        let file = disk.open("x").expect("open");
        file.write_all_at(b"abc", 0).expect("write");
        block_on(file.sync()).expect("sync");
        file.write_all_at(b"defgh", 3).expect("write");
        disk.crash(CrashLevel::PowerLoss, |unsynced| {
            assert_eq!(unsynced, 5);
            2
        });
        let mut buf = [0u8; 5];
        file.read_exact_at(&mut buf, 0).expect("read");
        assert_eq!(&buf, b"abcde");
        assert_eq!(file.len().expect("len"), 5);
    }

    #[test]
    fn an_overwrite_inside_the_synced_region_is_undone_by_power_loss_and_never_torn() {
        let disk = MemoryStorage::new();
        let file = disk.open("x").expect("open");
        file.write_all_at(b"abcdef", 0).expect("write");
        block_on(file.sync()).expect("sync");
        file.write_all_at(b"XY", 2).expect("overwrite");
        file.write_all_at(b"gh", 6).expect("append");
        disk.crash(CrashLevel::PowerLoss, |_| {
            panic!("an overwrite is not a torn append")
        });
        let mut buf = [0u8; 6];
        file.read_exact_at(&mut buf, 0).expect("read");
        assert_eq!(&buf, b"abcdef");
        assert_eq!(file.len().expect("len"), 6);
        file.set_len(3).expect("truncate");
        block_on(file.sync()).expect("sync");
        file.write_all_at(b"z", 3).expect("append");
        block_on(file.sync()).expect("sync");
        assert_eq!(
            disk.durable_len("x"),
            Some(4),
            "truncation then append, both durable"
        );
    }

    #[test]
    fn injected_faults_fail_writes_and_syncs_once_each() {
        let disk = MemoryStorage::new();
        let file = disk.open("x").expect("open");
        disk.inject(&DiskFaults {
            fail_writes: 1,
            fail_syncs: 1,
        });
        assert!(file.write_all_at(b"a", 0).is_err());
        file.write_all_at(b"a", 0).expect("second write works");
        assert!(block_on(file.sync()).is_err());
        block_on(file.sync()).expect("second sync works");
        assert_eq!(disk.durable_len("x"), Some(1));
    }
}
