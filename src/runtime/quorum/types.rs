//! The controller quorum's Raft types: an entry's data and openraft's type configuration,
//! shared by the journal, the state machine, the network and the quorum's driver.

use std::fmt;

use openraft::BasicNode;
use serde::{Deserialize, Serialize};

use super::rt;

/// The data of one Raft log entry: metadata records, encoded as the metadata log stores them
/// (typed and versioned by [`Record::encode`](crate::metadata::records::Record::encode)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataBatch {
    /// The encoded records, in order.
    pub records: Vec<Vec<u8>>,
}

impl fmt::Display for MetadataBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} metadata records", self.records.len())
    }
}

openraft::declare_raft_types!(
    /// The controller quorum's Raft types.
    pub(crate) MetadataRaft:
        D = MetadataBatch,
        R = (),
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<MetadataRaft>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = rt::Rt,
);
