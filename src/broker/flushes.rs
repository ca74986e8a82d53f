//! The broker's fsyncs in flight: each is an [`Output::Flush`] with a [`FlushId`], and what it
//! makes durable ([`FlushTarget`]) is kept here until its completion comes back as an input.
//! Every component starts its flushes through [`Flushes::start`]; the router hands each
//! completion to the component its target names.

use std::collections::BTreeMap;

use crate::log::{FlushMark, FlushSync};
use crate::metadata::records::Record;
use crate::node_io::{FlushId, Output};
use crate::types::TopicPartition;

use super::checkpoint::CheckpointKind;

/// What a flush makes durable.
#[derive(Debug)]
pub(super) enum FlushTarget {
    /// A partition log up to the mark.
    Partition {
        topic_partition: TopicPartition,
        mark: FlushMark,
    },
    /// The metadata log up to the mark; `records` apply once durable.
    Metadata {
        mark: FlushMark,
        records: Vec<Record>,
    },
    /// A step of writing a checkpoint file.
    Checkpoint(CheckpointKind),
    /// A step of the log cleaner's clean of a partition.
    Cleaner(TopicPartition),
    /// The clean-shutdown marker (file and root directory).
    CleanShutdownMarker,
}

/// The flushes started and not yet completed.
#[derive(Debug, Default)]
pub(super) struct Flushes {
    /// The last [`FlushId`] handed out.
    last: u64,
    pending: BTreeMap<FlushId, FlushTarget>,
}

impl Flushes {
    /// Starts a flush of `target`: the fsync `sync` goes out, and its completion will name the
    /// returned id.
    pub(super) fn start<F>(
        &mut self,
        target: FlushTarget,
        sync: FlushSync<F>,
        out: &mut Vec<Output<F>>,
    ) -> FlushId {
        self.last += 1;
        let flush_id = FlushId(self.last);
        self.pending.insert(flush_id, target);
        out.push(Output::Flush { flush_id, sync });
        flush_id
    }

    /// What the completed flush `flush_id` made durable.
    pub(super) fn complete(&mut self, flush_id: FlushId) -> FlushTarget {
        self.pending
            .remove(&flush_id)
            .expect("completion of an unknown flush")
    }

    /// Whether no flush is in flight.
    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}
