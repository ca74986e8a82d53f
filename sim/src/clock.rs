//! `SimClocks`: the madsim plugin that skews each node's wall clock (the `clock_skew` fault).
//!
//! madsim gives every node the same simulated `SystemTime`; a skew is added to what a node
//! reads. Clients read it at every send (a record's CreateTime). A broker reads the wall clock
//! once, when it starts, and counts monotonic time from there (seedlog never steps its clock), so
//! a skew reaches a broker at its next start: its record timestamps, offset-commit times and a
//! group's empty-since time, hence time-based retention of logs and committed offsets.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use madsim::plugin::Simulator;
use madsim::rand::GlobalRng;
use madsim::task::NodeId;
use madsim::time::TimeHandle;

/// Each node's wall-clock skew in milliseconds (absent: none).
pub struct SimClocks {
    skews: Mutex<BTreeMap<NodeId, i64>>,
}

impl Simulator for SimClocks {
    fn new(_rng: &GlobalRng, _time: &TimeHandle, _config: &madsim::Config) -> Self {
        SimClocks {
            skews: Mutex::new(BTreeMap::new()),
        }
    }
}

impl SimClocks {
    /// Sets `node`'s skew (0: none).
    pub fn set(&self, node: NodeId, skew_ms: i64) {
        let mut skews = self.skews.lock().unwrap_or_else(PoisonError::into_inner);
        if skew_ms == 0 {
            skews.remove(&node);
        } else {
            skews.insert(node, skew_ms);
        }
    }

    /// `node`'s skew in milliseconds.
    pub fn skew(&self, node: NodeId) -> i64 {
        self.skews
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&node)
            .copied()
            .unwrap_or(0)
    }

    /// The wall clock as `node` reads it: the simulated time plus the node's skew. A caller
    /// finds the plugin once (a producer reads the clock at every send, and finding the plugin
    /// costs more than reading the clock).
    pub fn wall_clock_ms(&self, node: NodeId) -> i64 {
        seedlog::runtime::clock::wall_clock_ms() + self.skew(node)
    }
}
