//! Retention (Kafka's `LogManager.cleanupLogs` with `cleanup.policy=delete`): every
//! `log.retention.check.interval.ms` each online partition's log is asked where it should start
//! under `retention.ms` and `retention.bytes` (whole closed segments only, none past the high
//! watermark or the recovery point). A new start is first written to the
//! `log-start-offset-checkpoint` (a `.tmp` file, fsync, rename, directory fsync); only once that
//! is durable are the segments below it deleted and the new start published, so no crash can
//! bring a deleted segment back into a log whose start a consumer saw move.

use std::collections::BTreeSet;

use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

use super::checkpoint::{CheckpointKind, RecoveryPoints};
use super::{Broker, BrokerEvent, Output};

impl<S: Storage> Broker<S> {
    /// A retention check: checkpoints the new log starts, if any moved.
    pub(super) fn check_retention(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        let wall_clock = self.wall_clock(now);
        let mut starts = RecoveryPoints::new();
        let mut moved = false;
        let mut to_roll = Vec::new();
        for (topic_partition, partition) in self.replicas.iter() {
            let current = partition.log().log_start_offset();
            let mut start = current;
            if partition.offline().is_none() {
                let Some(config) = self.metadata.config(&topic_partition.topic) else {
                    continue;
                };
                let limit = partition
                    .high_watermark()
                    .min(partition.log().recovery_point());
                // `cleanup.policy=compact` alone: the cleaner's log, never deleted by age or
                // size (DeleteRecords still moves its start).
                let target = if config.cleanup_policy.delete {
                    partition.log().retention_start(
                        wall_clock,
                        config.retention_ms,
                        config.retention_bytes,
                        limit,
                    )
                } else {
                    Ok(current)
                };
                match target {
                    Ok(target) => {
                        if target == partition.log().log_end_offset() && target > current {
                            to_roll.push(topic_partition.clone()); // every record expired
                        }
                        start = start.max(target);
                    }
                    Err(error) => {
                        tracing::warn!(%topic_partition, %error, "retention check failed");
                    }
                }
            }
            if let Some(requested) = self.requested_starts.get(topic_partition) {
                start = start.max(*requested); // a DeleteRecords whose write failed
            }
            moved |= start > current;
            starts.insert(topic_partition.clone(), start);
        }
        // A log whose every record expired rolls now, so that later appends go to the new
        // segment and the old active one can go with the rest (Kafka's `deleteOldSegments`).
        for topic_partition in to_roll {
            let partition = self
                .replicas
                .get_mut(&topic_partition)
                .expect("listed above");
            if let Err(error) = partition.log_mut().roll() {
                tracing::warn!(%topic_partition, %error, "rolling for retention failed");
                starts.insert(topic_partition.clone(), partition.log().log_start_offset());
            }
        }
        if moved {
            self.maybe_write_checkpoint(now, CheckpointKind::LogStarts, starts, out);
        } else {
            self.log_starts.rest(now);
        }
    }

    /// The log-start checkpoint is durable: delete what lies below each start and publish it.
    pub(super) fn apply_log_starts(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        let starts = self.log_starts.written.clone();
        let mut changed = BTreeSet::new();
        for (topic_partition, start) in starts {
            if self.delete_below(&topic_partition, start) {
                changed.insert(topic_partition);
            }
        }
        for topic_partition in &changed {
            let partition = self.replicas.get(topic_partition).expect("just changed");
            out.push(Output::Event(BrokerEvent::LogStartOffset {
                partition: topic_partition.clone(),
                offset: partition.log().log_start_offset(),
            }));
        }
        // A parked fetch below the new start now answers OFFSET_OUT_OF_RANGE.
        self.complete_delayed_fetches(now, &changed, out);
        self.complete_delete_records(now, out);
        // DeleteRecords that arrived while this checkpoint was written.
        self.write_requested_log_starts(now, out);
    }

    /// Deletes the segments of one partition below `start`; whether its log start moved.
    pub(super) fn delete_below(&mut self, topic_partition: &TopicPartition, start: i64) -> bool {
        let Some(partition) = self.replicas.get_mut(topic_partition) else {
            return false;
        };
        let before = partition.log().log_start_offset();
        if start <= before {
            return false;
        }
        match partition.log_mut().delete_segments_below(start) {
            Ok(deleted) => {
                tracing::info!(
                    %topic_partition,
                    deleted,
                    log_start = partition.log().log_start_offset(),
                    "retention deleted segments"
                );
            }
            Err(error) => {
                tracing::error!(%topic_partition, %error, "deleting segments failed");
            }
        }
        partition.log().log_start_offset() > before
    }
}
