//! Produce: validate the one RecordBatch v2 per partition (header, CRC-32C, size, and every
//! record inside it, as Kafka's LogValidator does), assign
//! offsets, append, advance the high watermark, and answer by `acks`:
//! * `acks=0`: no response at all (a failed append closes the connection, as in Kafka);
//! * `acks=1`/`all`: answer after the append, or, when the append crossed `flush.messages`,
//!   after a flush covering it completes (the purgatory holds the response, and the high
//!   watermark waits for the same flush: Kafka's flush ordering);
//! * `acks=all` with fewer in-sync replicas than `min.insync.replicas`: NOT_ENOUGH_REPLICAS.

use std::collections::BTreeSet;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceResponse, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::broker::partition::Acks;
use crate::broker::purgatory::{DelayedProduce, ProduceWaiter, WaitingSlot};
use crate::broker::{Broker, BrokerEvent, Output, ReplyTo, Response, ResponseBody};
use crate::config::broker::IdempotenceGeneration;
use crate::log::producer_state::{BatchMetadata, SequenceError};
use crate::protocol::codec::Request;
use crate::protocol::compression::Codec;
use crate::protocol::record_batch::{recompress, validate_batch, BatchError, RecordBatchHeader};
use crate::protocol::record_validation::{validate_compression, validate_records, RecordsError};
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

/// A successful append as the response reports it.
struct Appended {
    base_offset: i64,
    end_offset: i64,
    log_start_offset: i64,
    flush_required: bool,
    rolled: Option<i64>,
    /// acks=all on a partition with followers: the answer waits for the high watermark.
    awaits_followers: bool,
    min_insync_replicas: usize,
    /// The batch's header as stored (offsets and leader epoch assigned).
    stored: RecordBatchHeader,
    /// A retry of an idempotent producer's batch already in the log: nothing was appended, and
    /// the answer carries the first write's offsets (waiting, as the first answer does, for its
    /// fsync and its replication).
    duplicate: bool,
}

impl Appended {
    /// The answer to a retry of `original`: its offsets, waiting for its fsync if that is still
    /// under way and, like the first write's answer, for its replication.
    fn duplicate<S: Storage>(
        partition: &crate::broker::partition::Partition<S>,
        original: BatchMetadata,
        header: RecordBatchHeader,
        awaits_followers: bool,
        min_insync_replicas: usize,
    ) -> Appended {
        Appended {
            base_offset: original.first_offset,
            end_offset: original.last_offset + 1,
            log_start_offset: partition.log().log_start_offset(),
            flush_required: partition.awaits_flush(original.last_offset + 1),
            rolled: None,
            awaits_followers,
            min_insync_replicas,
            stored: RecordBatchHeader {
                base_offset: original.first_offset,
                ..header
            },
            duplicate: true,
        }
    }
}

/// A rejected batch: the Kafka error, its message, and (Produce v8+) the records at fault.
struct Rejection {
    error: ErrorCode,
    message: String,
    /// Kafka's `RecordError`s: the index in the batch of a record that caused the rejection.
    record_errors: Vec<BatchIndexAndErrorMessage>,
}

impl From<(ErrorCode, String)> for Rejection {
    fn from((error, message): (ErrorCode, String)) -> Rejection {
        Rejection {
            error,
            message,
            record_errors: Vec::new(),
        }
    }
}

impl From<RecordsError> for Rejection {
    fn from(error: RecordsError) -> Rejection {
        let record_errors = error
            .batch_index()
            .map(|batch_index| {
                BatchIndexAndErrorMessage::default()
                    .with_batch_index(batch_index)
                    .with_batch_index_error_message(Some(StrBytes::from_string(
                        error.record_message(),
                    )))
            })
            .into_iter()
            .collect();
        Rejection {
            error: error.error_code(),
            message: error.to_string(),
            record_errors,
        }
    }
}

/// Kafka's checks of a produced batch, before anything is appended, in Kafka's order:
/// `ProduceRequest.validateRecords` (one v2 batch), `UnifiedLog.analyzeAndValidateRecords`
/// (size, CRC, `baseOffset` 0, codec), `LogValidator.validateBatch` (offset range, count,
/// control batches), the records (`LogValidator.assignOffsetsNonCompressed` iterating
/// `DefaultRecordBatch`; see `protocol::record_validation`; a compacted topic's need keys), and
/// last the producer state.
fn validate_produced(
    records: Option<Bytes>,
    config: &crate::config::topic::TopicConfig,
    topic_partition: &TopicPartition,
) -> Result<(Bytes, RecordBatchHeader), Rejection> {
    let max_message_bytes = config.max_message_bytes as usize;
    let records = records.filter(|records| !records.is_empty());
    let records = records.ok_or((ErrorCode::InvalidRecord, "no record batch".to_owned()))?;
    if records.len() > max_message_bytes {
        let message = format!(
            "batch of {} bytes exceeds max.message.bytes={max_message_bytes}",
            records.len()
        );
        return Err((ErrorCode::MessageTooLarge, message).into());
    }
    let header = validate_batch(&records).map_err(|error| batch_rejection(&error))?;
    if header.size_bytes() != records.len() {
        let message = "Produce requests with version 3 and above must contain exactly one record batch per partition";
        return Err((ErrorCode::InvalidRecord, message.to_owned()).into());
    }
    if header.base_offset != 0 {
        let message = format!(
            "The baseOffset of the record batch should be 0, but it is {}",
            header.base_offset
        );
        return Err((ErrorCode::InvalidRecord, message).into());
    }
    validate_compression(&header)?;
    if header.records_count < 1 || header.last_offset_delta != header.records_count - 1 {
        let message = "recordsCount and lastOffsetDelta disagree";
        return Err((ErrorCode::InvalidRecord, message.to_owned()).into());
    }
    if header.is_control() {
        let message = "clients may not write control batches";
        return Err((ErrorCode::InvalidRecord, message.to_owned()).into());
    }
    validate_records(&records, &header)?;
    if config.cleanup_policy.compact {
        refuse_keyless(&records, &header, topic_partition)?;
    }
    if header.is_transactional() {
        let message = "seedlog does not support transactional producers yet";
        return Err((ErrorCode::UnknownProducerId, message.to_owned()).into());
    }
    Ok((records, header))
}

/// Kafka's `LogValidator.validateKey`: a compacted topic refuses a record without a key
/// (INVALID_RECORD, naming the record).
fn refuse_keyless(
    records: &[u8],
    header: &RecordBatchHeader,
    topic_partition: &TopicPartition,
) -> Result<(), Rejection> {
    use crate::log::cleaner::{raw_records, records_section};
    let invalid = |error: String| Rejection::from((ErrorCode::InvalidRecord, error));
    let section = records_section(records, header).map_err(invalid)?;
    let keyless = raw_records(&section, header)
        .map_err(invalid)?
        .iter()
        .position(|record| record.key.is_none());
    let Some(index) = keyless else {
        return Ok(());
    };
    let message = format!(
        "Compacted topic cannot accept message without key in topic partition {topic_partition}."
    );
    Err(Rejection {
        error: ErrorCode::InvalidRecord,
        message: message.clone(),
        record_errors: vec![BatchIndexAndErrorMessage::default()
            .with_batch_index(index as i32)
            .with_batch_index_error_message(Some(StrBytes::from_string(message)))],
    })
}

/// The batch as the log stores it: as sent, or recompressed when the topic's `compression.type`
/// names another codec (Kafka's `LogValidator` recompresses then; it also keeps the producer's
/// codec when the topic says `producer`, the default).
fn recompressed_for_topic(
    records: &Bytes,
    header: RecordBatchHeader,
    topic_codec: Option<Codec>,
) -> Result<(Vec<u8>, RecordBatchHeader), Rejection> {
    match topic_codec {
        Some(codec) if codec.id() != header.compression() => {
            let batch = recompress(records, codec)
                .map_err(|error| Rejection::from((ErrorCode::InvalidRecord, error.to_string())))?;
            let header = RecordBatchHeader::parse(&batch)
                .map_err(|error| Rejection::from((ErrorCode::InvalidRecord, error.to_string())))?;
            Ok((batch.to_vec(), header))
        }
        _ => Ok((records.to_vec(), header)),
    }
}

/// The producer-state checks of a leader's idempotent batch (Kafka's
/// `UnifiedLog.analyzeAndValidateProducerState`): a retry of a retained batch answers with its
/// first write (`Some`), an older epoch is INVALID_PRODUCER_EPOCH, a gap
/// OUT_OF_ORDER_SEQUENCE_NUMBER, and (`kafka-19880`) an unknown producer's batch that does not
/// start at sequence 0 UNKNOWN_PRODUCER_ID.
fn check_producer_state<S: Storage>(
    partition: &mut crate::broker::partition::Partition<S>,
    header: &RecordBatchHeader,
    generation: IdempotenceGeneration,
) -> Result<Option<BatchMetadata>, Rejection> {
    let states = match partition.log_mut().load_producer_states() {
        Ok(states) => states,
        Err(error) => {
            let message = format!("cannot load the producer state: {error}");
            partition.go_offline(message.clone());
            return Err((ErrorCode::KafkaStorageError, message).into());
        }
    };
    if let Some(original) = states.find_duplicate(header) {
        return Ok(Some(original));
    }
    let unknown_starts_at_zero = generation == IdempotenceGeneration::Kafka19880;
    states
        .check(header, unknown_starts_at_zero)
        .map_err(|error| {
            let code = match error {
                SequenceError::FencedEpoch { .. } => ErrorCode::InvalidProducerEpoch,
                SequenceError::UnknownProducer { .. } => ErrorCode::UnknownProducerId,
                SequenceError::OutOfOrder { .. } => ErrorCode::OutOfOrderSequenceNumber,
            };
            Rejection::from((code, format!("producer {}: {error}", header.producer_id)))
        })?;
    Ok(None)
}

/// Kafka's answer to a batch whose framing is wrong: CORRUPT_MESSAGE for what
/// `ByteBufferLogInputStream.nextBatchSize` and `DefaultRecordBatch.isValid` throw
/// `CorruptRecordException` for (a length below the header, a magic outside 0..=2, the CRC);
/// INVALID_RECORD where `ProduceRequest.validateRecords` finds no whole v2 batch (a truncated
/// batch yields none; magic 0 or 1) and for a negative count or offset range
/// (`LogValidator.validateBatch`).
fn batch_rejection(error: &BatchError) -> Rejection {
    let code = match error {
        BatchError::CrcMismatch { .. }
        | BatchError::InvalidLength(_)
        | BatchError::UnsupportedMagic(i8::MIN..=-1 | 3..) => ErrorCode::CorruptMessage,
        BatchError::Truncated { .. } | BatchError::UnsupportedMagic(_) | BatchError::Invalid(_) => {
            ErrorCode::InvalidRecord
        }
    };
    (code, error.to_string()).into()
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

/// Where a partition's answer goes in the response, and the request's acks.
#[derive(Clone, Copy)]
struct Slot {
    topic_index: usize,
    partition_index: usize,
    acks: Acks,
}

/// What the produce request collects while appending partition by partition.
#[derive(Default)]
struct ProduceProgress {
    response: ProduceResponse,
    /// Appends that must be durable before the answer (the flush policy required an fsync).
    waiting: Vec<WaitingSlot>,
    first_error: Option<String>,
    /// Partitions whose parked fetches may now read more: the high watermark moved, or (for
    /// followers' fetches) the log end.
    advanced: BTreeSet<TopicPartition>,
    /// A slot waits for followers: the request's timeout applies.
    awaits_followers: bool,
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
        let (api_version, timeout_ms) = (request.api_version, body.timeout_ms);
        let acks = Acks::from_wire(body.acks);
        let mut progress = ProduceProgress::default();
        for (topic_index, topic) in body.topic_data.into_iter().enumerate() {
            let mut topic_response = TopicProduceResponse::default().with_name(topic.name.clone());
            for (partition_index, data) in topic.partition_data.into_iter().enumerate() {
                let topic_partition = TopicPartition::new(topic.name.as_str(), data.index);
                let outcome = if let Some(acks) = acks {
                    self.append_produced(&topic_partition, data.records, acks, out)
                } else {
                    Err((
                        ErrorCode::InvalidRequiredAcks,
                        format!("acks={} is not one of -1, 0, 1", body.acks),
                    )
                        .into())
                };
                let mut entry = PartitionProduceResponse::default().with_index(data.index);
                match outcome {
                    Ok(appended) => {
                        entry.base_offset = appended.base_offset;
                        if api_version >= 5 {
                            entry.log_start_offset = appended.log_start_offset;
                        }
                        let slot = Slot {
                            topic_index,
                            partition_index,
                            acks: acks.expect("appended under valid acks"),
                        };
                        self.after_append(
                            now,
                            topic_partition,
                            slot,
                            &appended,
                            &mut progress,
                            out,
                        );
                    }
                    Err(Rejection {
                        error,
                        message,
                        record_errors,
                    }) => {
                        tracing::debug!(partition = %topic_partition, ?error, %message, "produce rejected");
                        entry.error_code = error.code();
                        entry.base_offset = -1;
                        if api_version >= 8 {
                            entry.error_message = Some(StrBytes::from_string(message.clone()));
                            entry.record_errors = record_errors;
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
        let waiter = ProduceWaiter::Client(reply_to);
        // An invalid acks is answered (every partition with INVALID_REQUIRED_ACKS).
        let answer_by = acks.unwrap_or(Acks::Leader);
        self.answer_produce(now, waiter, answer_by, progress, timeout_ms, out);
    }

    /// The group coordinator's own append to `__consumer_offsets`: the same path as a
    /// client's acks=all produce (validation, flush policy, replication, the `timeout_ms` for
    /// followers), completing `write` instead of answering a connection.
    pub(in crate::broker) fn append_internal(
        &mut self,
        now: Millis,
        topic_partition: &TopicPartition,
        batch: Bytes,
        timeout_ms: i32,
        write: crate::broker::group::GroupWrite,
        out: &mut Vec<Output<S::File>>,
    ) {
        let mut progress = ProduceProgress::default();
        let mut entry = PartitionProduceResponse::default().with_index(topic_partition.partition);
        match self.append_produced(topic_partition, Some(batch), Acks::All, out) {
            Ok(appended) => {
                entry.base_offset = appended.base_offset;
                let slot = Slot {
                    topic_index: 0,
                    partition_index: 0,
                    acks: Acks::All,
                };
                self.after_append(
                    now,
                    topic_partition.clone(),
                    slot,
                    &appended,
                    &mut progress,
                    out,
                );
            }
            Err(rejection) => {
                tracing::warn!(partition = %topic_partition, error = ?rejection.error, message = %rejection.message, "group write rejected");
                entry.error_code = rejection.error.code();
                entry.base_offset = -1;
            }
        }
        progress.response.responses.push(
            TopicProduceResponse::default()
                .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(
                    topic_partition.topic.to_string(),
                )))
                .with_partition_responses(vec![entry]),
        );
        self.answer_produce(
            now,
            ProduceWaiter::Group(write),
            Acks::All,
            progress,
            timeout_ms,
            out,
        );
    }

    /// What follows a successful append: the flush it requires (or the roll's), a parked slot
    /// if the answer must wait, and the high watermark.
    fn after_append(
        &mut self,
        now: Millis,
        topic_partition: TopicPartition,
        slot: Slot,
        appended: &Appended,
        progress: &mut ProduceProgress,
        out: &mut Vec<Output<S::File>>,
    ) {
        if !appended.duplicate {
            out.push(BrokerEvent::appended(&topic_partition, &appended.stored).into());
            if appended.flush_required {
                self.flush_partition(now, &topic_partition, out);
            } else if let Some(new_segment) = appended.rolled {
                self.flush_rolled(&topic_partition, new_segment, out);
            }
        }
        if appended.flush_required || appended.awaits_followers {
            progress.awaits_followers |= appended.awaits_followers;
            progress.waiting.push(WaitingSlot {
                topic_partition: topic_partition.clone(),
                topic_index: slot.topic_index,
                partition_index: slot.partition_index,
                end_offset: appended.end_offset,
                durable: appended.flush_required,
                replicated: (slot.acks == Acks::All).then_some(appended.min_insync_replicas),
            });
        }
        // Followers' parked fetches read up to the log end, so an append feeds them.
        let replicated = self
            .replicas
            .get(&topic_partition)
            .is_some_and(|partition| !partition.followers().is_empty());
        if self.advance_high_watermark(&topic_partition, out) || replicated {
            progress.advanced.insert(topic_partition);
        }
    }

    /// Answers by `acks`: nothing (or a close) for acks=0; now; or once the fsyncs complete
    /// and, for acks=all, the followers have the appends.
    /// Parked fetches of the partitions that advanced are served first; a slot waiting for
    /// followers waits at most `timeout_ms`.
    fn answer_produce(
        &mut self,
        now: Millis,
        waiter: ProduceWaiter,
        acks: Acks,
        progress: ProduceProgress,
        timeout_ms: i32,
        out: &mut Vec<Output<S::File>>,
    ) {
        if !progress.advanced.is_empty() {
            self.complete_delayed_fetches(now, &progress.advanced, out);
        }
        let deadline = progress
            .awaits_followers
            .then(|| now.plus(timeout_ms.max(0) as u64));
        if let (Acks::None, ProduceWaiter::Client(reply_to)) = (acks, &waiter) {
            let connection = reply_to.connection;
            out.push(match progress.first_error {
                Some(reason) => Output::Close {
                    connection,
                    reason: format!("acks=0 produce failed: {reason}"),
                },
                None => Output::NoResponse { connection },
            });
        } else if progress.waiting.is_empty() {
            self.finish_produce(waiter, progress.response, out);
        } else {
            let partitions: BTreeSet<TopicPartition> = progress
                .waiting
                .iter()
                .map(|slot| slot.topic_partition.clone())
                .collect();
            self.purgatory.produces.push(DelayedProduce {
                waiter,
                response: progress.response,
                waiting: progress.waiting,
                deadline,
            });
            // Kafka's `tryCompleteElseWatch`: what is already satisfied (an ISR of the leader
            // alone commits an append as it lands) is answered now, not at the next change.
            for topic_partition in &partitions {
                self.complete_delayed_produces(topic_partition, out);
            }
        }
    }

    /// [`append_checked`](Self::append_checked), recording in the history a partition that the
    /// append took offline (a failed write: EIO, ENOSPC).
    fn append_produced(
        &mut self,
        topic_partition: &TopicPartition,
        records: Option<Bytes>,
        acks: Acks,
        out: &mut Vec<Output<S::File>>,
    ) -> Result<Appended, Rejection> {
        let online = |broker: &Self| {
            broker
                .replicas
                .get(topic_partition)
                .is_some_and(|partition| partition.offline().is_none())
        };
        let was_online = online(self);
        let result = self.append_checked(topic_partition, records, acks);
        if was_online && !online(self) {
            if let Some(reason) = self
                .replicas
                .get(topic_partition)
                .and_then(|partition| partition.offline())
            {
                out.push(Output::Event(BrokerEvent::Offline {
                    partition: topic_partition.clone(),
                    reason: reason.to_owned(),
                }));
            }
        }
        result
    }

    fn append_checked(
        &mut self,
        topic_partition: &TopicPartition,
        records: Option<Bytes>,
        acks: Acks,
    ) -> Result<Appended, Rejection> {
        let unknown = || {
            let message =
                format!("This server does not host this topic-partition: {topic_partition}");
            (ErrorCode::UnknownTopicOrPartition, message)
        };
        let topic_config = self
            .metadata
            .config(&topic_partition.topic)
            .ok_or_else(unknown)?;
        let node_id = self.config.node_id;
        let generation = self.config.idempotence_generation;
        let topic_codec = topic_config.compression_type;
        let min_insync_replicas = topic_config.min_insync_replicas as usize;
        let partition = self.replicas.get_mut(topic_partition).ok_or_else(unknown)?;
        if let Some(reason) = partition.offline() {
            return Err((ErrorCode::KafkaStorageError, reason.to_owned()).into());
        }
        if !partition.is_leader() {
            let message =
                format!("Leader not local for partition {topic_partition} on broker {node_id}");
            return Err((ErrorCode::NotLeaderOrFollower, message).into());
        }
        let (records, header) = validate_produced(records, topic_config, topic_partition)?;
        partition
            .check_enough_replicas(acks, min_insync_replicas)
            .map_err(|message| Rejection::from((ErrorCode::NotEnoughReplicas, message)))?;
        let awaits_followers = partition.awaits_followers(acks);
        if header.producer_id >= 0 {
            if let Some(original) = check_producer_state(partition, &header, generation)? {
                return Ok(Appended::duplicate(
                    partition,
                    original,
                    header,
                    awaits_followers,
                    min_insync_replicas,
                ));
            }
        }
        let (mut batch, header) = recompressed_for_topic(&records, header, topic_codec)?;
        let info = match partition.append_as_leader(&mut batch, &header) {
            Ok(info) => info,
            Err(error) => {
                partition.go_offline(format!("append failed: {error}"));
                return Err((ErrorCode::KafkaStorageError, error.to_string()).into());
            }
        };
        let appended = Appended {
            base_offset: info.base_offset,
            end_offset: info.last_offset + 1,
            log_start_offset: partition.log().log_start_offset(),
            flush_required: info.flush_required,
            rolled: info.rolled,
            awaits_followers,
            min_insync_replicas,
            stored: RecordBatchHeader {
                base_offset: info.base_offset,
                partition_leader_epoch: partition.leader_epoch().0,
                ..header
            },
            duplicate: false,
        };
        self.topic_counts
            .count_append(&topic_partition.topic, batch.len(), header.records_count);
        Ok(appended)
    }
}
