//! The cluster's metadata, as the controller writes it and every broker reads it (Kafka's
//! `metadata` module): the records of the metadata log ([`records`]), the image they build
//! ([`image`]), topic creation as every metadata path decides it ([`topics`]), and what the Raft
//! quorum that replicates the log tells a controller node ([`QuorumInput`]). It sits below both
//! the broker and the controller, so neither imports the other to share them.

pub mod image;
pub mod records;
pub mod topics;

use self::records::Record;

/// The metadata log's partition name, as brokers fetch it.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

/// Directory of a metadata log: a controller's, or the one a broker that is its own controller
/// keeps (`log.dirs/__cluster_metadata-0`).
pub const METADATA_LOG_DIRECTORY: &str = "__cluster_metadata-0";

/// Where a combined node's controller keeps its files (`process.roles=broker,controller`): a
/// directory of `log.dirs` of its own, since the broker and the controller each keep a
/// `__cluster_metadata-0` log. The broker never takes it for a stray partition.
pub const COMBINED_CONTROLLER_DIRECTORY: &str = "__controller";

/// What the Raft quorum tells a controller node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuorumInput {
    /// One committed log entry, applied in log order: its records (none for a leader's blank
    /// entry or a membership change) and the term it was written in.
    Committed {
        /// The entry's term.
        term: u64,
        /// Its metadata records.
        records: Vec<Record>,
    },
    /// A metadata snapshot: the image at `end_offset`, as the records that rebuild it. Either
    /// this node's own (its copy of the log already reaches `end_offset`, and now starts there)
    /// or one it installed (its copy then starts over, empty, at `end_offset`).
    Snapshot {
        /// The term of the last entry it covers.
        term: u64,
        /// How many metadata records were committed before it.
        end_offset: i64,
        /// The records that rebuild the image.
        records: Vec<Record>,
    },
    /// The quorum's leader as this node knows it, and the current term.
    Leader {
        /// The leader's node id, if there is one.
        leader: Option<i32>,
        /// The current term (Kafka's controller epoch).
        term: u64,
    },
}
