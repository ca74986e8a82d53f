//! Produce: validate the one RecordBatch v2 per partition (header, CRC-32C, size), assign
//! offsets, append, advance the high watermark, and answer by `acks`:
//! * `acks=0`: no response at all (a failed append closes the connection, as in Kafka);
//! * `acks=1`/`all`: answer after the append, or, when the append crossed `flush.messages`,
//!   after a flush covering it completes (the purgatory holds the response, and the high
//!   watermark waits for the same flush: Kafka's flush ordering);
//! * `acks=all` with fewer in-sync replicas than `min.insync.replicas`: NOT_ENOUGH_REPLICAS.

use std::collections::BTreeSet;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceResponse, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::broker::purgatory::{DelayedProduce, WaitingSlot};
use crate::broker::{Broker, Output, ReplyTo, Response, ResponseBody};
use crate::protocol::codec::Request;
use crate::protocol::record_batch::{validate_batch, BatchError, RecordBatchHeader};
use crate::protocol::ErrorCode;
use crate::runtime::storage::Storage;
use crate::types::{Millis, TopicPartition};

/// A successful append as the response reports it.
struct Appended {
    base_offset: i64,
    end_offset: i64,
    log_start_offset: i64,
    flush_required: bool,
}

/// A rejected batch: Kafka error and message.
type Rejection = (ErrorCode, String);

/// Kafka's `LogValidator` checks for a produced batch, before anything is appended.
fn validate_produced(
    records: Option<Bytes>,
    max_message_bytes: usize,
) -> Result<(Bytes, RecordBatchHeader), Rejection> {
    let records = records.filter(|records| !records.is_empty());
    let records = records.ok_or((ErrorCode::InvalidRecord, "no record batch".to_owned()))?;
    if records.len() > max_message_bytes {
        let message = format!(
            "batch of {} bytes exceeds max.message.bytes={max_message_bytes}",
            records.len()
        );
        return Err((ErrorCode::MessageTooLarge, message));
    }
    let header = validate_batch(&records).map_err(|error| match error {
        BatchError::CrcMismatch { .. }
        | BatchError::Truncated { .. }
        | BatchError::InvalidLength(_) => (ErrorCode::CorruptMessage, error.to_string()),
        BatchError::UnsupportedMagic(_) | BatchError::Invalid(_) => {
            (ErrorCode::InvalidRecord, error.to_string())
        }
    })?;
    if header.size_bytes() != records.len() {
        let message = "Produce requests with version 3 and above must contain exactly one record batch per partition";
        return Err((ErrorCode::InvalidRecord, message.into()));
    }
    if header.records_count < 1 || header.last_offset_delta != header.records_count - 1 {
        return Err((
            ErrorCode::InvalidRecord,
            "recordsCount and lastOffsetDelta disagree".into(),
        ));
    }
    if header.is_control() {
        return Err((
            ErrorCode::InvalidRecord,
            "clients may not write control batches".into(),
        ));
    }
    if header.producer_id >= 0 || header.is_transactional() {
        let message = "seedlog does not support idempotent or transactional producers yet";
        return Err((ErrorCode::UnknownProducerId, message.into()));
    }
    Ok((records, header))
}

/// A Produce response that rejects every partition of `request` with `error`, without
/// applying anything; `None` for acks=0 (or another API). The simulator's fault layer uses it to
/// play a leader change in the middle of a pipeline.
pub fn produce_rejection<F>(request: &Request, error: ErrorCode) -> Option<Response<F>> {
    let RequestKind::Produce(body) = &request.body else {
        return None;
    };
    if body.acks == 0 {
        return None;
    }
    let mut response = ProduceResponse::default();
    for topic in &body.topic_data {
        let partitions = topic
            .partition_data
            .iter()
            .map(|data| {
                PartitionProduceResponse::default()
                    .with_index(data.index)
                    .with_error_code(error.code())
                    .with_base_offset(-1)
            })
            .collect();
        response.responses.push(
            TopicProduceResponse::default()
                .with_name(topic.name.clone())
                .with_partition_responses(partitions),
        );
    }
    Some(Response::answering(
        request,
        ResponseBody::message(ResponseKind::Produce(response)),
    ))
}

/// What the produce request collects while appending partition by partition.
#[derive(Default)]
struct ProduceProgress {
    response: ProduceResponse,
    /// Appends that must be durable before the answer (the flush policy required an fsync).
    waiting: Vec<WaitingSlot>,
    first_error: Option<String>,
    /// Partitions whose high watermark moved.
    advanced: BTreeSet<TopicPartition>,
}

impl<S: Storage> Broker<S> {
    pub(in crate::broker) fn on_produce_request(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        request: Request,
        out: &mut Vec<Output<S::File>>,
    ) {
        let RequestKind::Produce(body) = request.body else {
            unreachable!("routed by api key")
        };
        let (api_version, acks) = (request.api_version, body.acks);
        let mut progress = ProduceProgress::default();
        for (topic_index, topic) in body.topic_data.into_iter().enumerate() {
            let mut topic_response = TopicProduceResponse::default().with_name(topic.name.clone());
            for (partition_index, data) in topic.partition_data.into_iter().enumerate() {
                let topic_partition = TopicPartition::new(topic.name.to_string(), data.index);
                let outcome = if matches!(acks, -1..=1) {
                    self.append_produced(&topic_partition, data.records, acks)
                } else {
                    Err((
                        ErrorCode::InvalidRequiredAcks,
                        format!("acks={acks} is not one of -1, 0, 1"),
                    ))
                };
                let mut entry = PartitionProduceResponse::default().with_index(data.index);
                match outcome {
                    Ok(appended) => {
                        entry.base_offset = appended.base_offset;
                        if api_version >= 5 {
                            entry.log_start_offset = appended.log_start_offset;
                        }
                        if appended.flush_required {
                            self.flush_partition(now, &topic_partition, out);
                            progress.waiting.push(WaitingSlot {
                                topic_partition: topic_partition.clone(),
                                topic_index,
                                partition_index,
                                end_offset: appended.end_offset,
                            });
                        }
                        if self.advance_high_watermark(&topic_partition, out) {
                            progress.advanced.insert(topic_partition);
                        }
                    }
                    Err((error, message)) => {
                        tracing::debug!(partition = %topic_partition, ?error, %message, "produce rejected");
                        entry.error_code = error.code();
                        entry.base_offset = -1;
                        if api_version >= 8 {
                            entry.error_message = Some(StrBytes::from_string(message.clone()));
                        }
                        progress
                            .first_error
                            .get_or_insert(format!("{topic_partition}: {message}"));
                    }
                }
                topic_response.partition_responses.push(entry);
            }
            progress.response.responses.push(topic_response);
        }
        if !progress.advanced.is_empty() {
            self.complete_delayed_fetches(now, &progress.advanced, out);
        }
        self.answer_produce(reply_to, acks, progress, out);
    }

    /// Answers by `acks`: nothing (or a close) for acks=0; now; or once the fsyncs complete.
    fn answer_produce(
        &mut self,
        reply_to: ReplyTo,
        acks: i16,
        progress: ProduceProgress,
        out: &mut Vec<Output<S::File>>,
    ) {
        let connection = reply_to.connection;
        if acks == 0 {
            out.push(match progress.first_error {
                Some(reason) => Output::Close {
                    connection,
                    reason: format!("acks=0 produce failed: {reason}"),
                },
                None => Output::NoResponse { connection },
            });
        } else if progress.waiting.is_empty() {
            out.push(
                reply_to.respond(ResponseBody::message(ResponseKind::Produce(
                    progress.response,
                ))),
            );
        } else {
            self.delayed_produces.push(DelayedProduce {
                reply_to,
                response: progress.response,
                waiting: progress.waiting,
            });
        }
    }

    fn append_produced(
        &mut self,
        topic_partition: &TopicPartition,
        records: Option<Bytes>,
        acks: i16,
    ) -> Result<Appended, Rejection> {
        let unknown = || {
            let message =
                format!("This server does not host this topic-partition: {topic_partition}");
            (ErrorCode::UnknownTopicOrPartition, message)
        };
        let topic = self
            .metadata
            .topic(&topic_partition.topic)
            .ok_or_else(unknown)?;
        let max_message_bytes = topic.config.max_message_bytes as usize;
        let min_insync_replicas = topic.config.min_insync_replicas as usize;
        let partition = self
            .partitions
            .get_mut(topic_partition)
            .ok_or_else(unknown)?;
        if let Some(reason) = partition.offline() {
            return Err((ErrorCode::KafkaStorageError, reason.to_owned()));
        }
        let (records, header) = validate_produced(records, max_message_bytes)?;
        if acks == -1 && partition.isr.len() < min_insync_replicas {
            let message = format!(
                "The size of the current ISR {} is insufficient to satisfy the min.isr requirement of {min_insync_replicas}",
                partition.isr.len()
            );
            return Err((ErrorCode::NotEnoughReplicas, message));
        }
        let mut batch = records.to_vec();
        let info = match partition.append_as_leader(&mut batch, &header) {
            Ok(info) => info,
            Err(error) => {
                partition.go_offline(format!("append failed: {error}"));
                return Err((ErrorCode::KafkaStorageError, error.to_string()));
            }
        };
        Ok(Appended {
            base_offset: info.base_offset,
            end_offset: info.last_offset + 1,
            log_start_offset: partition.log.log_start_offset(),
            flush_required: info.flush_required,
        })
    }
}
