//! The logs' upkeep (Kafka's `LogManager`): retention, which moves log starts, and the log
//! cleaner ([`LogCleaner`]), which compacts. Both work over the [`ReplicaManager`]'s partitions
//! and hand the router what must become durable (a checkpoint, a clean's syncs); the router
//! runs those as flushes and brings back their completions.
//!
//! Retention (Kafka's `LogManager.cleanupLogs` with `cleanup.policy=delete`): every
//! `log.retention.check.interval.ms` each online partition's log is asked where it should start
//! under `retention.ms` and `retention.bytes` (whole closed segments only, none past the high
//! watermark or the recovery point). A new start is first written to the
//! `log-start-offset-checkpoint` (a `.tmp` file, fsync, rename, directory fsync); only once that
//! is durable are the segments below it deleted ([`delete_below`]) and the new start published,
//! so no crash can bring a deleted segment back into a log whose start a consumer saw move.

mod cleaner;

pub(super) use cleaner::LogCleaner;

use crate::config::TopicConfig;
use crate::storage::Storage;
use crate::types::TopicPartition;

use super::checkpoint::RecoveryPoints;
use super::replica_manager::ReplicaManager;

/// What a retention check decided.
#[derive(Debug)]
pub(super) struct RetentionCheck {
    /// Every partition's start: the checkpoint to write when one moved.
    pub(super) starts: RecoveryPoints,
    /// Some start moved.
    pub(super) moved: bool,
}

/// A retention check at `wall_clock` (milliseconds since the epoch): where each log should start
/// (`requested`: starts DeleteRecords asked for that no durable checkpoint holds yet). A log
/// whose every record expired rolls now. `config_of`: a served topic's config.
pub(super) fn check_retention<'a, S: Storage>(
    replicas: &mut ReplicaManager<S>,
    config_of: impl Fn(&str) -> Option<&'a TopicConfig>,
    wall_clock: i64,
    requested: &RecoveryPoints,
) -> RetentionCheck {
    let mut starts = RecoveryPoints::new();
    let mut moved = false;
    let mut to_roll = Vec::new();
    for (topic_partition, partition) in replicas.iter() {
        let current = partition.log().log_start_offset();
        let mut start = current;
        if partition.offline().is_none() {
            let Some(config) = config_of(&topic_partition.topic) else {
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
        if let Some(requested) = requested.get(topic_partition) {
            start = start.max(*requested); // a DeleteRecords whose write failed
        }
        moved |= start > current;
        starts.insert(topic_partition.clone(), start);
    }
    // A log whose every record expired rolls now, so that later appends go to the new
    // segment and the old active one can go with the rest (Kafka's `deleteOldSegments`).
    for topic_partition in to_roll {
        let partition = replicas.get_mut(&topic_partition).expect("listed above");
        if let Err(error) = partition.log_mut().roll() {
            tracing::warn!(%topic_partition, %error, "rolling for retention failed");
            starts.insert(topic_partition.clone(), partition.log().log_start_offset());
        }
    }
    RetentionCheck { starts, moved }
}

/// Deletes the segments of one partition below `start`; whether its log start moved.
pub(super) fn delete_below<S: Storage>(
    replicas: &mut ReplicaManager<S>,
    topic_partition: &TopicPartition,
    start: i64,
) -> bool {
    let Some(partition) = replicas.get_mut(topic_partition) else {
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
