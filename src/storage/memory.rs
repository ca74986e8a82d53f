//! An in-memory disk with an honest durability model (after redb's crash backend, turmoil's
//! `unstable-fs` and what Linux ext4 really does). The simulator gives every node one; unit tests
//! use it directly.
//!
//! Per file there are the live bytes (the page cache, what reads see) and the durable bytes (what
//! survives a power loss), tracked in 512-byte sectors:
//!
//! * a write dirties the sectors it touches (a *pending* writeback);
//! * an fsync ([`MemoryFile::begin_sync`], then [`PendingSync::finish`]; the runtime sleeps for
//!   the fsync latency between the two) snapshots the pending sectors and the length **when it is
//!   issued** and makes exactly that snapshot durable when it finishes: bytes written after it was
//!   issued are not covered, even if the fsync completes later;
//! * an fsync that fails with EIO drops the dirty sectors it covered (ext4's behaviour since
//!   Linux 4.13: the pages are marked clean, stay readable, and no later fsync writes them);
//!   [`FsyncFailure::KeepDirtyPages`] keeps them pending instead;
//! * names are durable only through a directory sync ([`MemoryStorage::begin_directory_sync`]): a file created, removed or
//!   renamed comes back as it was at the last sync of its directory, and a new directory's entry
//!   needs a sync of its parent.
//!
//! [`MemoryStorage::crash`] applies a crash:
//!
//! * [`CrashLevel::Process`]: the page cache survives: nothing changes.
//! * [`CrashLevel::PowerLoss`]: the namespace falls back to its durable entries; in every file,
//!   each pending sector independently survives or not (a torn write at sector granularity, so a
//!   tail can survive with holes), a surviving sector past the durable end may come back zeroed
//!   (its space was allocated, its data never written), an unsynced truncation may or may not
//!   survive, and dropped sectors are lost. A sector write itself is atomic: a sector holding
//!   durable bytes comes back old or new, never torn inside. Whatever survived is
//!   durable from then on: a second power loss cannot take back what recovery read.
//!
//! [`MemoryStorage::corrupt`] flips a byte in a durable, clean sector (a latent sector error that
//! the CRCs must catch).
//!
//! [`MemoryStorage::set_capacity`] fills the disk: a write that would grow the files past the
//! capacity writes what fits (a short write) and fails with `ENOSPC`, as `write(2)` on a full
//! ext4 does for `write_all`; overwriting bytes in place still works. Lifting the capacity (the
//! operator freed space) makes writes work again.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{parent_directory, Storage, StorageFile};

/// The unit of a torn write.
pub const SECTOR_BYTES: u64 = 512;

/// How hard a crash is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashLevel {
    /// Process crash (kill -9): unsynced writes survive in the page cache.
    Process,
    /// Power loss: only durable bytes and names survive, plus any subset of pending sectors.
    PowerLoss,
}

/// What an fsync that fails with EIO does to the dirty pages it was writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FsyncFailure {
    /// Linux ext4: the pages are marked clean without reaching the disk. They stay readable
    /// until evicted, a power loss loses them, and no later fsync writes them.
    #[default]
    DropDirtyPages,
    /// The pages stay dirty: a later successful fsync persists them.
    KeepDirtyPages,
}

/// Faults the storage injects on demand (the simulator sets these).
#[derive(Debug, Clone, Default)]
pub struct DiskFaults {
    /// The next N writes fail with EIO.
    pub fail_writes: u32,
    /// The next N fsyncs (of files or directories) fail with EIO.
    pub fail_syncs: u32,
}

/// Uniform draws for the crash model: `pick(n)` returns a value in `0..n`.
pub trait Chooser {
    /// A value in `0..bound` (`bound >= 1`).
    fn pick(&mut self, bound: u64) -> u64;
}

impl<F: FnMut(u64) -> u64> Chooser for F {
    fn pick(&mut self, bound: u64) -> u64 {
        let value = self(bound);
        assert!(
            value < bound,
            "a chooser returned {value} for a bound of {bound}"
        );
        value
    }
}

/// Odds, out of `ZEROED_ONE_IN`, that a surviving sector past the durable end comes back zeroed.
const ZEROED_ONE_IN: u64 = 8;

#[derive(Debug, Default)]
struct FileState {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// Sectors written since their last writeback, with the generation of their last write.
    pending: BTreeMap<u64, u64>,
    /// Sectors whose writeback an fsync EIO dropped: live differs from durable there for good.
    dropped: BTreeSet<u64>,
    generation: u64,
    /// Sequence of the next fsync snapshot, and of the newest one applied: an older snapshot
    /// finishing after a newer one must not shrink the file back.
    next_sync: u64,
    applied_sync: u64,
}

/// What an fsync covers: taken when it is issued.
struct SyncSnapshot {
    sequence: u64,
    len: usize,
    sectors: Vec<(u64, u64, Vec<u8>)>,
}

fn sector_range(start: u64, end: u64) -> std::ops::Range<u64> {
    if end <= start {
        return 0..0;
    }
    start / SECTOR_BYTES..end.div_ceil(SECTOR_BYTES)
}

impl FileState {
    fn touch(&mut self, sectors: std::ops::Range<u64>) {
        for sector in sectors {
            self.generation += 1;
            self.pending.insert(sector, self.generation);
            self.dropped.remove(&sector);
        }
    }

    fn sector_bytes(&self, sector: u64, len: usize) -> &[u8] {
        let start = (sector * SECTOR_BYTES) as usize;
        let end = (start + SECTOR_BYTES as usize).min(len);
        if start >= end {
            return &[];
        }
        &self.live[start..end]
    }

    fn snapshot(&mut self) -> SyncSnapshot {
        self.next_sync += 1;
        let len = self.live.len();
        let sectors = self
            .pending
            .iter()
            .map(|(&sector, &generation)| {
                (sector, generation, self.sector_bytes(sector, len).to_vec())
            })
            .collect();
        SyncSnapshot {
            sequence: self.next_sync,
            len,
            sectors,
        }
    }

    /// Makes a snapshot durable. Sectors rewritten since stay pending.
    fn apply(&mut self, snapshot: SyncSnapshot) {
        if snapshot.sequence < self.applied_sync {
            // A newer fsync already wrote a superset of this one.
            return;
        }
        self.applied_sync = snapshot.sequence;
        self.durable.resize(snapshot.len, 0);
        for (sector, generation, bytes) in snapshot.sectors {
            let start = (sector * SECTOR_BYTES) as usize;
            if start < snapshot.len {
                self.durable[start..start + bytes.len()].copy_from_slice(&bytes);
            }
            if self.pending.get(&sector) == Some(&generation) {
                self.pending.remove(&sector);
            }
        }
    }

    /// An fsync failed: its dirty sectors are dropped (or kept).
    fn fail(&mut self, snapshot: &SyncSnapshot, policy: FsyncFailure) {
        if policy == FsyncFailure::KeepDirtyPages {
            return;
        }
        for (sector, generation, _) in &snapshot.sectors {
            if self.pending.get(sector) == Some(generation) {
                self.pending.remove(sector);
                self.dropped.insert(*sector);
            }
        }
    }

    /// What a power loss leaves of this file; it becomes both live and durable.
    fn lose_power(&mut self, chooser: &mut dyn Chooser) {
        let mut result = self.durable.clone();
        let live_len = self.live.len();
        if live_len < result.len() && chooser.pick(2) == 1 {
            result.truncate(live_len); // the unsynced truncation reached the disk
        }
        let pending: Vec<u64> = self.pending.keys().copied().collect();
        for sector in pending {
            if chooser.pick(2) == 0 {
                continue; // this sector's writeback never happened
            }
            let start = (sector * SECTOR_BYTES) as usize;
            let end = (start + SECTOR_BYTES as usize).min(live_len);
            if start >= end {
                continue; // beyond the live end: part of a truncation
            }
            let newly_allocated = start >= self.durable.len();
            if result.len() < end {
                result.resize(end, 0);
            }
            if newly_allocated && chooser.pick(ZEROED_ONE_IN) == 0 {
                result[start..end].fill(0);
            } else {
                result[start..end].copy_from_slice(&self.live[start..end]);
            }
        }
        self.live.clone_from(&result);
        self.durable = result;
        self.pending.clear();
        self.dropped.clear();
    }

    fn check_invariants(&self) {
        for (sector, _) in self.durable.chunks(SECTOR_BYTES as usize).enumerate() {
            let sector = sector as u64;
            if self.pending.contains_key(&sector) || self.dropped.contains(&sector) {
                continue;
            }
            let start = (sector * SECTOR_BYTES) as usize;
            let end = (start + SECTOR_BYTES as usize).min(self.durable.len());
            assert!(
                end <= self.live.len() && self.live[start..end] == self.durable[start..end],
                "a clean sector {sector} differs between page cache and disk"
            );
        }
    }
}

type FileRef = Arc<Mutex<FileState>>;
type SyncLatency = Arc<dyn Fn() -> Duration + Send + Sync>;

/// A change to a directory's entries, waiting for a sync of that directory.
enum EntryChange {
    Link(String, FileRef),
    Unlink(String),
    MakeDirectory(String),
}

struct Shared {
    /// The namespace as the running process sees it.
    files: BTreeMap<String, FileRef>,
    /// Directories that exist for the running process.
    directories: BTreeSet<String>,
    /// The namespace a power loss falls back to: entries as of each directory's last sync.
    durable_files: BTreeMap<String, FileRef>,
    /// Directories whose own entry is durable (the root always is).
    durable_directories: BTreeSet<String>,
    /// Per directory, its entry changes not yet synced, in order, numbered (a directory sync
    /// applies those made before it was issued: a journal, so a sync costs what changed).
    unsynced: BTreeMap<String, Vec<(u64, EntryChange)>>,
    next_change: u64,
    faults: DiskFaults,
    fsync_failure: FsyncFailure,
    sync_latency: Option<SyncLatency>,
    /// Bytes the files may hold in all (`None`: no limit); writes past it fail with ENOSPC.
    capacity: Option<u64>,
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

/// Every directory on the way to `name`, outermost first (`a/b/c` gives `a`, `a/b`).
fn ancestors(name: &str) -> impl Iterator<Item = &str> {
    name.match_indices('/').map(move |(at, _)| &name[..at])
}

impl Shared {
    /// The live bytes of every file in the namespace.
    fn used_bytes(&self) -> u64 {
        self.files
            .values()
            .map(|file| lock(file).live.len() as u64)
            .sum()
    }

    /// Whether `name`'s directory chain survives a power loss.
    fn directories_durable(&self, name: &str) -> bool {
        ancestors(name).all(|directory| self.durable_directories.contains(directory))
    }

    fn change(&mut self, directory: &str, change: EntryChange) {
        self.next_change += 1;
        let number = self.next_change;
        self.unsynced
            .entry(directory.to_owned())
            .or_default()
            .push((number, change));
    }

    /// Creates the directories on the way to `name` that do not exist yet.
    fn make_directories(&mut self, name: &str) {
        let missing: Vec<String> = ancestors(name)
            .filter(|directory| !self.directories.contains(*directory))
            .map(str::to_owned)
            .collect();
        for directory in missing {
            self.directories.insert(directory.clone());
            let parent = parent_directory(&directory).to_owned();
            self.change(&parent, EntryChange::MakeDirectory(directory));
        }
    }

    /// A sync of `directory` issued after change `upto`: makes its earlier changes durable.
    fn apply_directory_sync(&mut self, directory: &str, upto: u64) {
        let Some(changes) = self.unsynced.get_mut(directory) else {
            return;
        };
        let later = changes.partition_point(|(number, _)| *number <= upto);
        let applied: Vec<(u64, EntryChange)> = changes.drain(..later).collect();
        for (_, change) in applied {
            match change {
                EntryChange::Link(name, file) => {
                    self.durable_files.insert(name, file);
                }
                EntryChange::Unlink(name) => {
                    self.durable_files.remove(&name);
                }
                EntryChange::MakeDirectory(name) => {
                    self.durable_directories.insert(name);
                }
            }
        }
    }

    fn lose_power(&mut self, chooser: &mut dyn Chooser) {
        let mut survivors = BTreeMap::new();
        let mut resolved: Vec<FileRef> = Vec::new();
        for (name, file) in &self.durable_files {
            if !self.directories_durable(name) {
                continue;
            }
            if !resolved.iter().any(|done| Arc::ptr_eq(done, file)) {
                lock(file).lose_power(chooser);
                resolved.push(Arc::clone(file));
            }
            survivors.insert(name.clone(), Arc::clone(file));
        }
        self.durable_files.clone_from(&survivors);
        self.files = survivors;
        self.directories.clone_from(&self.durable_directories);
        self.unsynced.clear();
    }
}

impl MemoryStorage {
    /// An empty disk whose fsyncs complete immediately.
    pub fn new() -> MemoryStorage {
        MemoryStorage {
            shared: Arc::new(Mutex::new(Shared {
                files: BTreeMap::new(),
                durable_files: BTreeMap::new(),
                directories: BTreeSet::new(),
                durable_directories: BTreeSet::new(),
                unsynced: BTreeMap::new(),
                next_change: 0,
                faults: DiskFaults::default(),
                fsync_failure: FsyncFailure::default(),
                sync_latency: None,
                capacity: None,
            })),
        }
    }

    /// Every fsync takes `latency()` between issue and finish (the runtime sleeps for it:
    /// simulated time under madsim), so a crash during an fsync loses what it had not yet made
    /// durable.
    pub fn set_sync_latency(&self, latency: impl Fn() -> Duration + Send + Sync + 'static) {
        lock(&self.shared).sync_latency = Some(Arc::new(latency));
    }

    /// What a failed fsync does to dirty pages.
    pub fn set_fsync_failure(&self, policy: FsyncFailure) {
        lock(&self.shared).fsync_failure = policy;
    }

    /// Limits the bytes all files may hold together (`None`: no limit): a write growing them past
    /// it writes what fits and fails with ENOSPC. A crash keeps the limit (the disk stays full).
    pub fn set_capacity(&self, capacity: Option<u64>) {
        lock(&self.shared).capacity = capacity;
    }

    /// The capacity [`set_capacity`](Self::set_capacity) set, if any.
    pub fn capacity(&self) -> Option<u64> {
        lock(&self.shared).capacity
    }

    /// The bytes the files hold, as the running process sees them.
    pub fn used_bytes(&self) -> u64 {
        lock(&self.shared).used_bytes()
    }

    /// Arms faults (added to any already armed).
    pub fn inject(&self, faults: &DiskFaults) {
        let mut shared = lock(&self.shared);
        shared.faults.fail_writes += faults.fail_writes;
        shared.faults.fail_syncs += faults.fail_syncs;
    }

    /// Applies a crash. For a power loss, `chooser` decides which pending sectors survive (files
    /// are visited in name order, so a seeded chooser gives a reproducible outcome).
    pub fn crash(&self, level: CrashLevel, chooser: &mut dyn Chooser) {
        let mut shared = lock(&self.shared);
        shared.faults = DiskFaults::default();
        if level == CrashLevel::PowerLoss {
            shared.lose_power(chooser);
        }
    }

    /// Flips one byte of a durable, clean sector of a file whose name `matches` (a latent sector
    /// error): both the disk and the page cache see it. Returns the file and the position, or
    /// `None` if no matching file has a clean durable byte.
    pub fn corrupt(
        &self,
        matches: impl Fn(&str) -> bool,
        chooser: &mut dyn Chooser,
    ) -> Option<(String, u64)> {
        let shared = lock(&self.shared);
        let candidates: Vec<(String, FileRef, Vec<u64>)> = shared
            .files
            .iter()
            .filter(|(name, _)| matches(name))
            .filter_map(|(name, file)| {
                let state = lock(file);
                let clean: Vec<u64> = (0..(state.durable.len() as u64).div_ceil(SECTOR_BYTES))
                    .filter(|sector| {
                        !state.pending.contains_key(sector) && !state.dropped.contains(sector)
                    })
                    .collect();
                (!clean.is_empty()).then(|| (name.clone(), Arc::clone(file), clean))
            })
            .collect();
        drop(shared);
        if candidates.is_empty() {
            return None;
        }
        let (name, file, clean) = &candidates[chooser.pick(candidates.len() as u64) as usize];
        let sector = clean[chooser.pick(clean.len() as u64) as usize];
        let mut state = lock(file);
        let start = sector * SECTOR_BYTES;
        let end = (start + SECTOR_BYTES).min(state.durable.len() as u64);
        let position = start + chooser.pick(end - start);
        let flip = 1 + chooser.pick(255) as u8;
        state.durable[position as usize] ^= flip;
        state.live[position as usize] ^= flip;
        Some((name.clone(), position))
    }

    /// Durable length of a file under its durable name, for assertions in tests.
    pub fn durable_len(&self, name: &str) -> Option<usize> {
        let shared = lock(&self.shared);
        let file = Arc::clone(shared.durable_files.get(name)?);
        drop(shared);
        let state = lock(&file);
        Some(state.durable.len())
    }

    /// Cross-checks every file's sectors (for tests): a clean sector is the same in the page
    /// cache and on disk.
    pub fn check_invariants(&self) {
        let shared = lock(&self.shared);
        for file in shared.files.values().chain(shared.durable_files.values()) {
            lock(file).check_invariants();
        }
    }

    /// The latency of the next fsync, drawn from the function set by
    /// [`set_sync_latency`](Self::set_sync_latency); `None`: fsyncs finish at once.
    pub fn draw_sync_latency(&self) -> Option<Duration> {
        let latency = lock(&self.shared).sync_latency.clone();
        latency.map(|latency| latency())
    }

    /// Issues a sync of `directory`'s entries (`""`: the root): it covers the entry changes made
    /// so far, and [`PendingDirectorySync::finish`] makes them durable.
    pub fn begin_directory_sync(&self, directory: &str) -> PendingDirectorySync {
        PendingDirectorySync {
            storage: self.clone(),
            directory: directory.to_owned(),
            upto: lock(&self.shared).next_change,
        }
    }

    /// Consumes an armed fsync fault, if any.
    fn sync_fails(&self) -> Option<FsyncFailure> {
        let mut shared = lock(&self.shared);
        (shared.faults.fail_syncs > 0).then(|| {
            shared.faults.fail_syncs -= 1;
            shared.fsync_failure
        })
    }
}

impl Storage for MemoryStorage {
    type File = MemoryFile;

    fn open(&self, name: &str) -> io::Result<MemoryFile> {
        let mut shared = lock(&self.shared);
        let state = if let Some(state) = shared.files.get(name) {
            Arc::clone(state)
        } else {
            let state = FileRef::default();
            shared.make_directories(name);
            shared.files.insert(name.to_owned(), Arc::clone(&state));
            let link = EntryChange::Link(name.to_owned(), Arc::clone(&state));
            shared.change(parent_directory(name), link);
            state
        };
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
        let mut shared = lock(&self.shared);
        if shared.files.remove(name).is_some() {
            shared.change(parent_directory(name), EntryChange::Unlink(name.to_owned()));
        }
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut shared = lock(&self.shared);
        let file = shared
            .files
            .remove(from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("rename {from}")))?;
        shared.make_directories(to);
        shared.files.insert(to.to_owned(), Arc::clone(&file));
        shared.change(parent_directory(from), EntryChange::Unlink(from.to_owned()));
        shared.change(parent_directory(to), EntryChange::Link(to.to_owned(), file));
        Ok(())
    }
}

/// A file on a [`MemoryStorage`].
#[derive(Clone)]
pub struct MemoryFile {
    name: String,
    state: FileRef,
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
        let room = {
            let mut shared = lock(&self.storage.shared);
            if shared.faults.fail_writes > 0 {
                shared.faults.fail_writes -= 1;
                return Err(eio("write", &self.name));
            }
            shared
                .capacity
                .map(|capacity| capacity.saturating_sub(shared.used_bytes()))
        };
        if let Some(room) = room {
            let len = lock(&self.state).live.len() as u64;
            let growth = (position + data.len() as u64).saturating_sub(len);
            if growth > room {
                // A short write: what fits (up to the old end, then `room` new bytes), then ENOSPC.
                let fits = (len + room).saturating_sub(position).min(data.len() as u64) as usize;
                if fits > 0 && position <= len {
                    self.write_unchecked(&data[..fits], position);
                }
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!("injected ENOSPC on write of {}", self.name),
                ));
            }
        }
        self.write_unchecked(data, position);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = lock(&self.state);
        let old_len = state.live.len() as u64;
        state.touch(sector_range(len.min(old_len), len.max(old_len)));
        state.live.resize(len as usize, 0);
        Ok(())
    }
}

impl MemoryFile {
    /// Writes `data` at `position` into the page cache, growing the file if needed.
    fn write_unchecked(&self, data: &[u8], position: u64) {
        let mut state = lock(&self.state);
        let start = position as usize;
        let end = start + data.len();
        let old_len = state.live.len() as u64;
        state.touch(sector_range(position.min(old_len), end as u64));
        if state.live.len() < end {
            state.live.resize(end, 0);
        }
        state.live[start..end].copy_from_slice(data);
    }
}

/// An fsync of a [`MemoryFile`] issued but not finished: it covers what was written before it was
/// issued, whenever it finishes.
#[must_use = "an fsync does nothing until it finishes"]
pub struct PendingSync {
    file: MemoryFile,
    snapshot: SyncSnapshot,
}

impl PendingSync {
    /// Finishes the fsync: the covered sectors become durable, or an injected EIO drops them
    /// (or keeps them dirty, by [`FsyncFailure`]).
    pub fn finish(self) -> io::Result<()> {
        let PendingSync { file, snapshot } = self;
        if let Some(policy) = file.storage.sync_fails() {
            lock(&file.state).fail(&snapshot, policy);
            return Err(eio("fsync", &file.name));
        }
        lock(&file.state).apply(snapshot);
        Ok(())
    }
}

/// A directory sync issued but not finished: it covers the entry changes made before it was
/// issued.
#[must_use = "a directory sync does nothing until it finishes"]
pub struct PendingDirectorySync {
    storage: MemoryStorage,
    directory: String,
    upto: u64,
}

impl PendingDirectorySync {
    /// Finishes the sync: the covered entry changes become durable, or an injected EIO fails it.
    pub fn finish(self) -> io::Result<()> {
        if self.storage.sync_fails().is_some() {
            return Err(eio("fsync of directory", &self.directory));
        }
        lock(&self.storage.shared).apply_directory_sync(&self.directory, self.upto);
        Ok(())
    }
}

impl MemoryFile {
    /// Issues an fsync: it covers the pending sectors and the length as they are now.
    pub fn begin_sync(&self) -> PendingSync {
        PendingSync {
            file: self.clone(),
            snapshot: lock(&self.state).snapshot(),
        }
    }

    /// The disk this file lives on.
    pub fn storage(&self) -> &MemoryStorage {
        &self.storage
    }
}

#[cfg(test)]
mod tests;
