//! A single broker's own metadata store (no `controller.quorum.voters`): the metadata log
//! (`__cluster_metadata`), the image replayed from its durable records, and the topics whose
//! record is appended but not yet durable. Records apply to the image only once an fsync covers
//! them. A cluster's brokers follow the controller quorum instead (`crate::controller`, whose
//! records and image are `crate::metadata`'s); issue 42 makes both one metadata path.

use std::collections::BTreeSet;

use crate::log::PartitionLog;
use crate::storage::Storage;

use super::metadata::MetadataImage;

/// The metadata log and its image.
#[derive(Debug)]
pub(super) struct Controller<S: Storage> {
    /// What the durable metadata records say.
    pub(super) image: MetadataImage,
    /// The metadata log.
    pub(super) log: PartitionLog<S>,
    /// Topics whose record is appended but not yet durable.
    pub(super) pending: BTreeSet<String>,
}

impl<S: Storage> Controller<S> {
    /// A controller over a recovered metadata log, with an empty image (replay fills it).
    pub(super) fn new(log: PartitionLog<S>) -> Self {
        Controller {
            image: MetadataImage::default(),
            log,
            pending: BTreeSet::new(),
        }
    }

    /// Whether a topic of that name exists or is being created.
    pub(super) fn topic_taken(&self, name: &str) -> bool {
        self.image.topic(name).is_some() || self.pending.contains(name)
    }

    /// The log's invariants, and that no pending topic already exists.
    pub(super) fn check_invariants(&self) {
        self.log.check_invariants();
        debug_assert!(
            self.pending
                .iter()
                .all(|name| self.image.topic(name).is_none()),
            "a pending topic is not yet in the image"
        );
    }
}
