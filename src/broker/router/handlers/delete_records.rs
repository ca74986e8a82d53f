//! DeleteRecords (API 21): move a partition's log start forward to a given offset (-1: the high
//! watermark), as `kafka-delete-records.sh` and `AdminClient.deleteRecords` do. The new start
//! goes through the same path as retention's: it is first written to
//! `log-start-offset-checkpoint`, and only once that is durable are the segments below it
//! deleted, the start published and the request answered with it (`low_watermark`), so no crash
//! brings deleted records back. A start may fall inside a segment: that segment stays, and reads
//! below the start answer OFFSET_OUT_OF_RANGE. The request waits at most its `timeout_ms`
//! (REQUEST_TIMED_OUT), as Kafka's `DelayedDeleteRecords` does.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse, ResponseKind};

use crate::broker::checkpoint::{CheckpointKind, CheckpointStage, RecoveryPoints};
use crate::broker::replica_manager::purgatory::{DelayedDeleteRecords, DeleteSlot};
use crate::broker::{Broker, Output, ReplyTo, ResponseBody};
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

/// The offset that means "the high watermark".
const HIGH_WATERMARK: i64 = -1;

impl<S: Storage> Broker<S> {
    pub(in crate::broker) fn on_delete_records_request(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        body: &DeleteRecordsRequest,
        out: &mut Vec<Output<S::File>>,
    ) {
        let mut response = DeleteRecordsResponse::default();
        let mut waiting = Vec::new();
        for (topic_index, topic) in body.topics.iter().enumerate() {
            let mut results = Vec::with_capacity(topic.partitions.len());
            for (partition_index, wanted) in topic.partitions.iter().enumerate() {
                let topic_partition =
                    TopicPartition::new(topic.name.as_str(), wanted.partition_index);
                let mut result = DeleteRecordsPartitionResult::default()
                    .with_partition_index(wanted.partition_index)
                    .with_low_watermark(-1);
                match self.requested_start(&topic_partition, wanted.offset) {
                    Err(error) => result.error_code = error.code(),
                    Ok(Requested::Already(start)) => result.low_watermark = start,
                    Ok(Requested::Move(start)) => {
                        let pending = self.requested_starts.entry(topic_partition.clone());
                        let pending = pending.or_insert(start);
                        *pending = (*pending).max(start);
                        waiting.push(DeleteSlot {
                            topic_partition,
                            start,
                            topic_index,
                            partition_index,
                        });
                    }
                }
                results.push(result);
            }
            response.topics.push(
                DeleteRecordsTopicResult::default()
                    .with_name(topic.name.clone())
                    .with_partitions(results),
            );
        }
        if waiting.is_empty() {
            out.push(
                reply_to.respond(ResponseBody::message(ResponseKind::DeleteRecords(response))),
            );
            return;
        }
        self.replicas
            .purgatory
            .delete_records
            .push(DelayedDeleteRecords {
                reply_to,
                response,
                waiting,
                deadline: now.plus(body.timeout_ms.max(0) as u64),
            });
        self.write_requested_log_starts(now, out);
    }

    /// Where `offset` asks the partition to start, or why it cannot.
    fn requested_start(
        &self,
        topic_partition: &TopicPartition,
        offset: i64,
    ) -> Result<Requested, ErrorCode> {
        let partition = self
            .replicas
            .get(topic_partition)
            .ok_or(ErrorCode::UnknownTopicOrPartition)?;
        if partition.offline().is_some() {
            return Err(ErrorCode::KafkaStorageError);
        }
        let high_watermark = partition.high_watermark();
        let offset = if offset == HIGH_WATERMARK {
            high_watermark
        } else {
            offset
        };
        if offset < 0 || offset > high_watermark {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        let current = partition.log().log_start_offset();
        Ok(if offset <= current {
            Requested::Already(current)
        } else {
            Requested::Move(offset)
        })
    }

    /// Writes the log-start checkpoint with the starts DeleteRecords asked for, unless a write
    /// is under way (its completion calls this again).
    pub(in crate::broker) fn write_requested_log_starts(
        &mut self,
        now: Millis,
        out: &mut Vec<Output<S::File>>,
    ) {
        if self.requested_starts.is_empty() || self.log_starts.stage != CheckpointStage::Idle {
            return;
        }
        let mut starts = RecoveryPoints::new();
        for (topic_partition, partition) in self.replicas.iter() {
            let current = partition.log().log_start_offset();
            let requested = self.requested_starts.get(topic_partition).copied();
            starts.insert(
                topic_partition.clone(),
                requested.map_or(current, |requested| requested.max(current)),
            );
        }
        self.maybe_write_checkpoint(now, CheckpointKind::LogStarts, starts, out);
    }

    /// Answers the parked DeleteRecords whose starts are now durable and published (called
    /// once a log-start checkpoint is applied), fails those on partitions gone offline, and
    /// times out those past their deadline.
    pub(in crate::broker) fn complete_delete_records(
        &mut self,
        now: Millis,
        out: &mut Vec<Output<S::File>>,
    ) {
        let written = &self.log_starts.written;
        self.requested_starts
            .retain(|topic_partition, start| written.get(topic_partition) < Some(start));
        let parked = std::mem::take(&mut self.replicas.purgatory.delete_records);
        for mut delayed in parked {
            let expired = now >= delayed.deadline;
            let response = &mut delayed.response;
            delayed.waiting.retain(|slot| {
                let entry = &mut response.topics[slot.topic_index].partitions[slot.partition_index];
                let partition = self.replicas.get(&slot.topic_partition);
                let error = match partition {
                    None => Some(ErrorCode::UnknownTopicOrPartition),
                    Some(partition) if partition.offline().is_some() => {
                        Some(ErrorCode::KafkaStorageError)
                    }
                    Some(partition) if partition.log().log_start_offset() >= slot.start => {
                        entry.low_watermark = partition.log().log_start_offset();
                        return false;
                    }
                    Some(_) if expired => Some(ErrorCode::RequestTimedOut),
                    Some(_) => None,
                };
                if let Some(error) = error {
                    entry.error_code = error.code();
                }
                error.is_none()
            });
            if delayed.waiting.is_empty() {
                out.push(delayed.reply_to.respond(ResponseBody::message(
                    ResponseKind::DeleteRecords(delayed.response),
                )));
            } else {
                self.replicas.purgatory.delete_records.push(delayed);
            }
        }
    }
}

/// What a DeleteRecords asks of one partition.
enum Requested {
    /// The log starts there or later already: answer at once.
    Already(i64),
    /// Move the start here.
    Move(i64),
}
