//! Flushes and what their completions release: a partition's recovery point and high
//! watermark move, parked produces are answered, parked fetches see new data, durable metadata
//! records apply, and the checkpoints (recovery points, log starts) advance step by step. It is
//! also the router's side of the log manager (`log_manager`): a retention check's new starts go
//! into the log-start checkpoint and apply once it is durable, and a clean's steps run as
//! flushes.
//!
//! A failed fsync of a partition takes it offline: everything parked on it is answered
//! KAFKA_STORAGE_ERROR, and no later completion moves it again (Kafka marks the log directory
//! offline; a broker in a cluster then halts, see `Broker::maybe_halt`). A failed fsync of the
//! metadata log halts the broker, as Kafka does.

use std::collections::BTreeSet;

use crate::protocol::record_batch::value_batch;
use crate::storage::{Storage, StorageFile};
use crate::types::{Millis, TopicPartition};

use crate::broker::checkpoint::{
    self, CheckpointKind, CheckpointStage, CheckpointWriter, RecoveryPoints,
};
use crate::broker::flushes::FlushTarget;
use crate::broker::log_manager;
use crate::broker::{Broker, BrokerEvent, FlushId, Output};
use crate::log::{FlushSync, LogError};
use crate::metadata::records::Record;
use crate::metadata::METADATA_LOG_DIRECTORY;

impl<S: Storage> Broker<S> {
    pub(in crate::broker) fn start_flush(
        &mut self,
        target: FlushTarget,
        sync: FlushSync<S::File>,
        out: &mut Vec<Output<S::File>>,
    ) -> FlushId {
        self.flushes.start(target, sync, out)
    }

    /// Appends metadata records and flushes them; the caller parks its work on the flush.
    pub(in crate::broker) fn append_metadata(
        &mut self,
        now: Millis,
        records: &[Record],
        out: &mut Vec<Output<S::File>>,
    ) -> Result<FlushId, LogError> {
        let values: Vec<Vec<u8>> = records.iter().map(Record::encode).collect();
        let (mut batch, header) = value_batch(&values);
        self.metadata.log.append(&mut batch, &header, 0)?;
        let (sync, mark) = self.metadata.log.start_flush(now).expect("just appended");
        let target = FlushTarget::Metadata {
            mark,
            records: records.to_vec(),
        };
        Ok(self.start_flush(target, sync, out))
    }

    pub(in crate::broker) fn on_flush_completed(
        &mut self,
        now: Millis,
        flush_id: FlushId,
        result: Result<(), String>,
        out: &mut Vec<Output<S::File>>,
    ) {
        let target = self.flushes.complete(flush_id);
        match (target, result) {
            (
                FlushTarget::Partition {
                    topic_partition,
                    mark,
                },
                result,
            ) => {
                let (replicas, mut link) = self.replica_manager();
                replicas.on_partition_flushed(now, &topic_partition, mark, result, &mut link, out);
            }
            (FlushTarget::Metadata { mark, records }, Ok(())) => {
                self.metadata.log.flush_completed(mark);
                self.apply_durable_metadata(now, &records, out);
                self.complete_topic_creations(flush_id, out);
            }
            (FlushTarget::Metadata { records, .. }, Err(error)) => {
                // The records may or may not be on disk: this process must not guess. Kafka halts.
                let reason = format!(
                    "fsync of the metadata log failed ({error}) with {} records pending",
                    records.len()
                );
                self.halt(reason, out);
                return;
            }
            (FlushTarget::Checkpoint(kind), result) => {
                self.on_checkpoint_step(now, kind, result, out);
            }
            (FlushTarget::Cleaner(topic_partition), result) => {
                let next =
                    self.cleaner
                        .on_step_done(now, topic_partition, result, &mut self.replicas);
                if let Some((topic_partition, sync)) = next {
                    self.start_flush(FlushTarget::Cleaner(topic_partition), sync, out);
                }
            }
            (FlushTarget::CleanShutdownMarker, result) => {
                self.on_marker_synced(now, result, out);
                return;
            }
        }
        self.advance_shutdown(now, out);
    }

    fn apply_durable_metadata(
        &mut self,
        now: Millis,
        records: &[Record],
        out: &mut Vec<Output<S::File>>,
    ) {
        for record in records {
            if let Err(error) = self.metadata.apply(record) {
                panic!("a metadata record this broker decided failed to apply: {error}");
            }
        }
        if let Some((name, error)) = self.metadata.configure(&self.config).into_iter().next() {
            panic!("topic {name}: configs that validated on append do not parse: {error}");
        }
        for record in records {
            let Record::Topic { name, .. } = record else {
                continue;
            };
            let topic = self.metadata.topic(name).expect("just applied");
            for partition in 0..topic.partitions {
                if let Err(error) = self.open_partition(&topic, partition, 0, now) {
                    tracing::error!(topic = %name, partition, %error, "cannot create partition log");
                    continue;
                }
                let topic_partition = TopicPartition::new(name.as_str(), partition);
                out.push(Output::Event(BrokerEvent::LogStartOffset {
                    partition: topic_partition.clone(),
                    offset: 0,
                }));
                out.push(Output::Event(BrokerEvent::HighWatermark {
                    partition: topic_partition,
                    offset: 0,
                }));
            }
        }
    }

    pub(in crate::broker) fn on_tick(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        let due: Vec<TopicPartition> = self
            .replicas
            .iter()
            .filter(|(_, partition)| {
                partition
                    .log()
                    .next_flush_deadline()
                    .is_some_and(|deadline| deadline <= now)
            })
            .map(|(topic_partition, _)| topic_partition.clone())
            .collect();
        for topic_partition in due {
            self.flush_partition(now, &topic_partition, out);
        }
        self.complete_delayed_fetches(now, &BTreeSet::new(), out);
        self.complete_delete_records(now, out);
        let (replicas, mut link) = self.replica_manager();
        replicas.on_replication_tick(now, &mut link, out);
        self.on_cluster_tick(now, out);
        self.with_groups(|groups, host| groups.on_tick(now, host, out));
        if self
            .checkpoint
            .next_deadline()
            .is_some_and(|deadline| deadline <= now)
        {
            let points = self.recovery_points();
            self.maybe_write_checkpoint(now, CheckpointKind::RecoveryPoints, points, out);
        }
        if self
            .log_starts
            .next_deadline()
            .is_some_and(|deadline| deadline <= now)
        {
            self.check_retention(now, out);
        }
        if self.closing.is_none() {
            let wall_clock = self.wall_clock(now);
            let metadata = &self.metadata;
            let step = self
                .cleaner
                .on_tick(now, wall_clock, &mut self.replicas, |topic| {
                    metadata.config(topic)
                });
            if let Some((topic_partition, sync)) = step {
                self.start_flush(FlushTarget::Cleaner(topic_partition), sync, out);
            }
        }
        if self.cluster.is_some()
            && self
                .high_watermarks
                .next_deadline()
                .is_some_and(|deadline| deadline <= now)
        {
            let points = self.checkpointed_high_watermarks();
            self.maybe_write_checkpoint(now, CheckpointKind::HighWatermarks, points, out);
        }
    }

    /// Every partition's high watermark, as `replication-offset-checkpoint` records them (an
    /// offline partition keeps the one it had).
    fn checkpointed_high_watermarks(&self) -> RecoveryPoints {
        self.replicas
            .iter()
            .filter_map(|(topic_partition, partition)| {
                let offset = match self.high_watermarks.written.get(topic_partition) {
                    Some(written) if partition.offline().is_some() => *written,
                    _ if partition.offline().is_some() => return None,
                    _ => partition.high_watermark(),
                };
                Some((topic_partition.clone(), offset))
            })
            .collect()
    }

    /// Every log's recovery point, as the checkpoint records them.
    pub(in crate::broker) fn recovery_points(&self) -> RecoveryPoints {
        let metadata = TopicPartition::parse(METADATA_LOG_DIRECTORY).expect("a partition name");
        let mut points = RecoveryPoints::new();
        points.insert(metadata, self.metadata.log.recovery_point());
        for (topic_partition, partition) in self.replicas.iter() {
            // An offline partition keeps the recovery point it had: its loaded log may stop short
            // at corruption, and a lower point would let the next start truncate fsynced data.
            let point = match self.checkpoint.written.get(topic_partition) {
                Some(written) if partition.offline().is_some() => *written,
                _ => partition.log().recovery_point(),
            };
            points.insert(topic_partition.clone(), point);
        }
        points
    }

    /// The writer of a checkpoint file.
    fn writer(&mut self, kind: CheckpointKind) -> &mut CheckpointWriter {
        match kind {
            CheckpointKind::RecoveryPoints => &mut self.checkpoint,
            CheckpointKind::LogStarts => &mut self.log_starts,
            CheckpointKind::HighWatermarks => &mut self.high_watermarks,
            CheckpointKind::ProducerIds => &mut self.producer_ids.block,
        }
    }

    /// Step one of a checkpoint: write the `.tmp` file and fsync it (if anything changed).
    pub(in crate::broker) fn maybe_write_checkpoint(
        &mut self,
        now: Millis,
        kind: CheckpointKind,
        points: RecoveryPoints,
        out: &mut Vec<Output<S::File>>,
    ) {
        if points == self.writer(kind).written {
            self.checkpoint_finished(now, kind, Ok(()), out);
            return;
        }
        let text = checkpoint::format(&points);
        let written = self.storage.open(kind.temporary()).and_then(|file| {
            file.set_len(0)?;
            file.write_all_at(text.as_bytes(), 0)?;
            Ok(file)
        });
        match written {
            Ok(file) => {
                self.writer(kind).stage = CheckpointStage::SyncingTemporary(points);
                let sync = FlushSync {
                    files: vec![file],
                    directories: Vec::new(),
                };
                self.start_flush(FlushTarget::Checkpoint(kind), sync, out);
            }
            Err(error) => {
                tracing::error!(%error, "cannot write {}", kind.temporary());
                self.checkpoint_finished(now, kind, Err(error.to_string()), out);
            }
        }
    }

    /// Steps two and three: rename over the checkpoint and fsync the directory; then done (a
    /// durable log-start checkpoint then deletes the segments below the new starts).
    fn on_checkpoint_step(
        &mut self,
        now: Millis,
        kind: CheckpointKind,
        result: Result<(), String>,
        out: &mut Vec<Output<S::File>>,
    ) {
        if let Err(error) = result {
            tracing::error!(%error, file = kind.file(), "checkpointing failed; retrying later");
            self.checkpoint_finished(now, kind, Err(error), out);
            return;
        }
        match std::mem::replace(&mut self.writer(kind).stage, CheckpointStage::Idle) {
            CheckpointStage::SyncingTemporary(points) => {
                if let Err(error) = self.storage.rename(kind.temporary(), kind.file()) {
                    tracing::error!(%error, "cannot rename {}", kind.temporary());
                    self.checkpoint_finished(now, kind, Err(error.to_string()), out);
                    return;
                }
                self.writer(kind).stage = CheckpointStage::SyncingDirectory(points);
                let sync = FlushSync {
                    files: Vec::new(),
                    directories: vec![String::new()],
                };
                self.start_flush(FlushTarget::Checkpoint(kind), sync, out);
            }
            CheckpointStage::SyncingDirectory(points) => {
                self.writer(kind).written = points;
                if kind == CheckpointKind::LogStarts {
                    self.writer(kind).rest(now);
                    self.apply_log_starts(now, out);
                } else {
                    self.checkpoint_finished(now, kind, Ok(()), out);
                }
            }
            CheckpointStage::Idle => unreachable!("a checkpoint step completed while idle"),
        }
    }

    /// A checkpoint write ended (`Ok`: durable, or nothing to write): the writer rests until
    /// its next interval, and whoever waits for the write hears of it (InitProducerId requests
    /// wait for a producer-id block).
    fn checkpoint_finished(
        &mut self,
        now: Millis,
        kind: CheckpointKind,
        result: Result<(), String>,
        out: &mut Vec<Output<S::File>>,
    ) {
        self.writer(kind).rest(now);
        if kind == CheckpointKind::ProducerIds {
            let reservation = self.producer_ids.on_written(result, out);
            self.reserve_producer_ids(now, reservation, out);
        }
    }

    /// Writes the producer-id block the allocator asks for, if it asks.
    pub(in crate::broker) fn reserve_producer_ids(
        &mut self,
        now: Millis,
        reservation: Option<RecoveryPoints>,
        out: &mut Vec<Output<S::File>>,
    ) {
        if let Some(points) = reservation {
            self.maybe_write_checkpoint(now, CheckpointKind::ProducerIds, points, out);
        }
    }
    /// A retention check (`log_manager::check_retention`): checkpoints the new log starts, if
    /// any moved.
    pub(in crate::broker) fn check_retention(
        &mut self,
        now: Millis,
        out: &mut Vec<Output<S::File>>,
    ) {
        let wall_clock = self.wall_clock(now);
        let metadata = &self.metadata;
        let check = log_manager::check_retention(
            &mut self.replicas,
            |topic| metadata.config(topic),
            wall_clock,
            &self.requested_starts,
        );
        if check.moved {
            self.maybe_write_checkpoint(now, CheckpointKind::LogStarts, check.starts, out);
        } else {
            self.log_starts.rest(now);
        }
    }

    /// The log-start checkpoint is durable: delete what lies below each start and publish it.
    pub(in crate::broker) fn apply_log_starts(
        &mut self,
        now: Millis,
        out: &mut Vec<Output<S::File>>,
    ) {
        let starts = self.log_starts.written.clone();
        let mut changed = BTreeSet::new();
        for (topic_partition, start) in starts {
            if log_manager::delete_below(&mut self.replicas, &topic_partition, start) {
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
}
