//! `recovery-point-offset-checkpoint`: every log's recovery point, in Kafka's
//! `OffsetCheckpointFile` format (a version line `0`, a count line, then `topic partition offset`
//! lines), so start-up recovery scans only what lies past it.
//!
//! It is replaced atomically, as Kafka's `CheckpointFile.write` does: write a `.tmp` file, fsync
//! it, rename it over the checkpoint, fsync the directory. A crash at any step leaves either the
//! old checkpoint or the new one; an older recovery point is always safe (recovery scans more).

use std::collections::BTreeMap;

use crate::types::{Millis, TopicPartition};

/// The checkpoint's file name, at the root of the data directory.
pub const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
/// Where a new checkpoint is written before it replaces the old one.
pub const RECOVERY_POINT_CHECKPOINT_TMP: &str = "recovery-point-offset-checkpoint.tmp";
const VERSION: &str = "0";

/// Recovery points by partition.
pub type RecoveryPoints = BTreeMap<TopicPartition, i64>;

/// `log-start-offset-checkpoint`: every log's start after retention, in the same format and
/// written the same way. A log start is published only once this file holds it durably, so a
/// crash can never bring back segments retention deleted (on start-up, segments below the
/// checkpointed start are deleted again).
pub const LOG_START_CHECKPOINT: &str = "log-start-offset-checkpoint";
/// Where a new log-start checkpoint is written before it replaces the old one.
pub const LOG_START_CHECKPOINT_TMP: &str = "log-start-offset-checkpoint.tmp";

/// `replication-offset-checkpoint`: every partition's high watermark, written every
/// `replica.high.watermark.checkpoint.interval.ms` by a cluster broker (Kafka's
/// `ReplicaManager.checkpointHighWatermarks`). A restarted replica starts its high watermark
/// there, bounded by its log: before leader epochs (`hw-truncation`) it also truncates to it.
pub const HIGH_WATERMARK_CHECKPOINT: &str = "replication-offset-checkpoint";
/// Where a new high-watermark checkpoint is written before it replaces the old one.
pub const HIGH_WATERMARK_CHECKPOINT_TMP: &str = "replication-offset-checkpoint.tmp";

/// `producer-id-block`: the end of the producer ids this broker reserved durably (see
/// `broker::producer_ids`).
pub const PRODUCER_ID_BLOCK: &str = "producer-id-block";
/// Where a new producer-id block is written before it replaces the old one.
pub const PRODUCER_ID_BLOCK_TMP: &str = "producer-id-block.tmp";

/// Which checkpoint file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckpointKind {
    /// `recovery-point-offset-checkpoint`, written every `log.flush.offset.checkpoint.interval.ms`.
    RecoveryPoints,
    /// `log-start-offset-checkpoint`, written when retention moves a log start.
    LogStarts,
    /// `replication-offset-checkpoint`, written every
    /// `replica.high.watermark.checkpoint.interval.ms` in a cluster.
    HighWatermarks,
    /// `producer-id-block`, written when the durable producer ids run low.
    ProducerIds,
}

impl CheckpointKind {
    /// The file's name, at the root of the data directory.
    pub(crate) fn file(self) -> &'static str {
        match self {
            CheckpointKind::RecoveryPoints => RECOVERY_POINT_CHECKPOINT,
            CheckpointKind::LogStarts => LOG_START_CHECKPOINT,
            CheckpointKind::HighWatermarks => HIGH_WATERMARK_CHECKPOINT,
            CheckpointKind::ProducerIds => PRODUCER_ID_BLOCK,
        }
    }

    /// Where a new version is written first.
    pub(crate) fn temporary(self) -> &'static str {
        match self {
            CheckpointKind::RecoveryPoints => RECOVERY_POINT_CHECKPOINT_TMP,
            CheckpointKind::LogStarts => LOG_START_CHECKPOINT_TMP,
            CheckpointKind::HighWatermarks => HIGH_WATERMARK_CHECKPOINT_TMP,
            CheckpointKind::ProducerIds => PRODUCER_ID_BLOCK_TMP,
        }
    }
}

/// The file's text.
pub fn format(points: &RecoveryPoints) -> String {
    use std::fmt::Write as _;
    let mut text = format!("{VERSION}\n{}\n", points.len());
    for (partition, offset) in points {
        let _ = writeln!(text, "{} {} {offset}", partition.topic, partition.partition);
    }
    text
}

/// Parses the file's text; the error says which line is wrong and why.
pub fn parse(text: &str) -> Result<RecoveryPoints, String> {
    let mut lines = text.lines().enumerate();
    let mut next = |what: &str| {
        lines
            .next()
            .ok_or_else(|| format!("ends before its {what}"))
    };
    let (_, version) = next("version line")?;
    if version.trim() != VERSION {
        return Err(format!(
            "line 1: unsupported version '{version}' (expected {VERSION})"
        ));
    }
    let (_, count) = next("count line")?;
    let count: usize = count
        .trim()
        .parse()
        .map_err(|_| format!("line 2: '{count}' is not a count"))?;
    let mut points = RecoveryPoints::new();
    for _ in 0..count {
        let (number, line) = next("entries")?;
        let fields: Vec<&str> = line.split_whitespace().collect();
        let parsed = match fields.as_slice() {
            [topic, partition, offset] => partition
                .parse::<i32>()
                .ok()
                .zip(offset.parse::<i64>().ok())
                .filter(|(partition, offset)| *partition >= 0 && *offset >= 0)
                .map(|(partition, offset)| (TopicPartition::new(*topic, partition), offset)),
            _ => None,
        };
        let (partition, offset) = parsed.ok_or_else(|| {
            format!(
                "line {}: expected 'topic partition offset', found '{line}'",
                number + 1
            )
        })?;
        points.insert(partition, offset);
    }
    Ok(points)
}

/// Where the checkpoint writer stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CheckpointStage {
    /// Nothing in flight; the next write is due at `next_due`.
    Idle,
    /// The `.tmp` file holding `points` is being fsynced.
    SyncingTemporary(RecoveryPoints),
    /// The rename is being made durable by a directory fsync.
    SyncingDirectory(RecoveryPoints),
}

/// The periodic checkpoint writer's state (`log.flush.offset.checkpoint.interval.ms`).
#[derive(Debug)]
pub(crate) struct CheckpointWriter {
    pub(crate) interval_ms: u64,
    pub(crate) next_due: Millis,
    pub(crate) stage: CheckpointStage,
    /// What the durable checkpoint holds.
    pub(crate) written: RecoveryPoints,
}

impl CheckpointWriter {
    pub(crate) fn new(interval_ms: u64, now: Millis, written: RecoveryPoints) -> CheckpointWriter {
        CheckpointWriter {
            interval_ms,
            next_due: now.plus(interval_ms),
            stage: CheckpointStage::Idle,
            written,
        }
    }

    /// When the writer needs a tick.
    pub(crate) fn next_deadline(&self) -> Option<Millis> {
        (self.stage == CheckpointStage::Idle).then_some(self.next_due)
    }

    /// The write finished or failed: wait an interval for the next one.
    pub(crate) fn rest(&mut self, now: Millis) {
        self.stage = CheckpointStage::Idle;
        self.next_due = now.plus(self.interval_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_round_trips_in_kafkas_format() {
        let points: RecoveryPoints = [
            (TopicPartition::new("orders", 0), 42),
            (TopicPartition::new("__cluster_metadata", 0), 3),
        ]
        .into_iter()
        .collect();
        let text = format(&points);
        assert_eq!(text, "0\n2\n__cluster_metadata 0 3\norders 0 42\n");
        assert_eq!(parse(&text), Ok(points));
    }

    #[test]
    fn a_malformed_checkpoint_names_the_line() {
        assert_eq!(
            parse("1\n0\n").expect_err("version"),
            "line 1: unsupported version '1' (expected 0)"
        );
        assert_eq!(
            parse("0\n2\norders 0 4\n").expect_err("short"),
            "ends before its entries"
        );
        assert!(parse("0\n1\norders zero 4\n")
            .expect_err("bad partition")
            .starts_with("line 3:"));
    }
}
