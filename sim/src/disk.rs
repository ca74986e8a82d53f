//! `SimDisks`: the madsim plugin that gives every node its own [`MemoryStorage`] disk and applies
//! crash semantics when madsim kills the node (madsim calls `reset_node` from `Handle::kill`).
//!
//! The nemesis picks the level before killing: a process crash keeps the page cache; a power
//! loss keeps only durable bytes and names, plus any subset of the sectors still waiting for
//! writeback, drawn from the seed (see `MemoryStorage`). Every fsync takes 0.1–3 ms of simulated
//! time, so a kill in the middle of an fsync loses what it had not made durable.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use madsim::plugin::Simulator;
use madsim::rand::{GlobalRng, Rng};
use madsim::task::NodeId;
use madsim::time::TimeHandle;
use seedlog::storage::memory::{CrashLevel, DiskFaults, FsyncFailure, MemoryStorage};

struct Disk {
    storage: MemoryStorage,
    next_crash: CrashLevel,
    /// A `slow_disk` fault's fsync latency (µs, drawn per fsync), while it lasts.
    slow: Option<(u64, u64)>,
}

/// One simulated disk per node.
pub struct SimDisks {
    rng: GlobalRng,
    disks: Mutex<BTreeMap<NodeId, Disk>>,
}

const SYNC_LATENCY_MIN: Duration = Duration::from_micros(100);
const SYNC_LATENCY_MAX: Duration = Duration::from_millis(3);

impl Simulator for SimDisks {
    fn new(rng: &GlobalRng, _time: &TimeHandle, _config: &madsim::Config) -> Self {
        SimDisks {
            rng: rng.clone(),
            disks: Mutex::new(BTreeMap::new()),
        }
    }

    fn create_node(&self, id: NodeId) {
        let storage = MemoryStorage::new();
        let rng = self.rng.clone();
        storage
            .set_sync_latency(move || rng.clone().gen_range(SYNC_LATENCY_MIN..=SYNC_LATENCY_MAX));
        self.lock().insert(
            id,
            Disk {
                storage,
                next_crash: CrashLevel::Process,
                slow: None,
            },
        );
    }

    fn reset_node(&self, id: NodeId) {
        let mut disks = self.lock();
        let Some(disk) = disks.get_mut(&id) else {
            return;
        };
        let level = std::mem::replace(&mut disk.next_crash, CrashLevel::Process);
        let mut rng = self.rng.clone();
        disk.storage
            .crash(level, &mut |bound: u64| rng.gen_range(0..bound));
    }
}

impl SimDisks {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, Disk>> {
        self.disks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The disk of `node`.
    pub fn storage(&self, node: NodeId) -> MemoryStorage {
        self.lock()
            .get(&node)
            .map(|disk| disk.storage.clone())
            .expect("every node has a disk")
    }

    /// `node`'s disk, if it has one (client nodes have none).
    pub fn try_storage(&self, node: NodeId) -> Option<MemoryStorage> {
        self.lock().get(&node).map(|disk| disk.storage.clone())
    }

    /// The level the next kill of `node` applies.
    pub fn set_next_crash(&self, node: NodeId, level: CrashLevel) {
        if let Some(disk) = self.lock().get_mut(&node) {
            disk.next_crash = level;
        }
    }

    /// Makes `node`'s fsyncs take `latency` (µs, drawn per fsync) until set back to `None`;
    /// restarts keep it (the disk is the same).
    pub fn set_slow(&self, node: NodeId, latency: Option<(u64, u64)>) {
        if let Some(disk) = self.lock().get_mut(&node) {
            disk.slow = latency;
        }
    }

    /// The slow-disk latency of `node`, if a `slow_disk` fault holds.
    pub fn slow(&self, node: NodeId) -> Option<(u64, u64)> {
        self.lock().get(&node).and_then(|disk| disk.slow)
    }

    /// Arms EIO faults on `node`'s disk, with what a failed fsync does to dirty pages.
    pub fn inject(&self, node: NodeId, faults: &DiskFaults, policy: FsyncFailure) {
        let storage = self.storage(node);
        storage.set_fsync_failure(policy);
        storage.inject(faults);
    }

    /// Flips a byte of a durable sector of one of `node`'s files that `matches`; returns the
    /// file and position, if any file qualified.
    pub fn corrupt(&self, node: NodeId, matches: impl Fn(&str) -> bool) -> Option<(String, u64)> {
        let mut rng = self.rng.clone();
        self.storage(node)
            .corrupt(matches, &mut |bound: u64| rng.gen_range(0..bound))
    }
}
