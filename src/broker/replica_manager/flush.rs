//! Partition flushes: starting one (the flush policy's, or a rolled segment's), and what its
//! completion releases: the partition's recovery point and high watermark move, parked produces
//! are answered, parked fetches see new data, and a follower waiting for the fsync fetches
//! again. A failed fsync takes the partition offline: everything parked on it is answered
//! KAFKA_STORAGE_ERROR, and no later completion moves it again.

use std::collections::BTreeSet;

use crate::broker::flushes::{FlushTarget, Flushes};
use crate::log::{FlushMark, FlushSync, PartitionLog};
use crate::node_io::{BrokerEvent, Output};
use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

use super::{Link, ReplicaManager};

impl<S: Storage> ReplicaManager<S> {
    /// Starts a flush of one partition, if it has anything to flush.
    pub(in crate::broker) fn flush_partition(
        &mut self,
        now: Millis,
        topic_partition: &TopicPartition,
        flushes: &mut Flushes,
        out: &mut Vec<Output<S::File>>,
    ) {
        self.start_partition_flush(topic_partition, flushes, out, |log| log.start_flush(now));
    }

    /// Starts a flush of one partition's segments below `end`, the base of the segment an
    /// append just rolled to (Kafka flushes a rolled segment at once, whatever the policy).
    pub(in crate::broker) fn flush_rolled(
        &mut self,
        topic_partition: &TopicPartition,
        end: i64,
        flushes: &mut Flushes,
        out: &mut Vec<Output<S::File>>,
    ) {
        self.start_partition_flush(topic_partition, flushes, out, |log| {
            log.start_flush_upto(end)
        });
    }

    /// Starts the flush `start` asks the partition's log for, if any.
    fn start_partition_flush(
        &mut self,
        topic_partition: &TopicPartition,
        flushes: &mut Flushes,
        out: &mut Vec<Output<S::File>>,
        start: impl FnOnce(&mut PartitionLog<S>) -> Option<(FlushSync<S::File>, FlushMark)>,
    ) {
        let Some(partition) = self.partitions.get_mut(topic_partition) else {
            return;
        };
        let Some((sync, mark)) = start(partition.log_mut()) else {
            return;
        };
        let target = FlushTarget::Partition {
            topic_partition: topic_partition.clone(),
            mark,
        };
        flushes.start(target, sync, out);
    }

    /// A partition's flush up to `mark` completed (or failed).
    pub(in crate::broker) fn on_partition_flushed(
        &mut self,
        now: Millis,
        topic_partition: &TopicPartition,
        mark: FlushMark,
        result: Result<(), String>,
        link: &mut Link<'_, S>,
        out: &mut Vec<Output<S::File>>,
    ) {
        let Some(partition) = self.partitions.get_mut(topic_partition) else {
            return;
        };
        match result {
            Ok(()) => partition.on_flush_completed(mark),
            Err(error) => {
                let reason = format!("fsync failed: {error}");
                if partition.offline().is_none() {
                    partition.go_offline_with_event(reason, out);
                }
            }
        }
        if self.advance_high_watermark(topic_partition, out) {
            let advanced = BTreeSet::from([topic_partition.clone()]);
            self.complete_delayed_fetches(now, &advanced, link.metadata, out);
        }
        self.complete_delayed_produces(topic_partition, out);
        self.send_replica_fetches(now, link, out);
    }

    /// Moves a partition's high watermark if it can, and says so in an event.
    pub(in crate::broker) fn advance_high_watermark(
        &mut self,
        topic_partition: &TopicPartition,
        out: &mut Vec<Output<S::File>>,
    ) -> bool {
        let Some(partition) = self.partitions.get_mut(topic_partition) else {
            return false;
        };
        let advanced = partition.maybe_advance_high_watermark();
        if advanced {
            out.push(Output::Event(BrokerEvent::HighWatermark {
                partition: topic_partition.clone(),
                offset: partition.high_watermark(),
            }));
        }
        advanced
    }
}
