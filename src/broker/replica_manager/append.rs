//! Appending a produced batch as a partition's leader (Kafka's `ReplicaManager.appendRecords`
//! down to `Partition.appendRecordsToLeader` and `UnifiedLog.append`): Kafka's checks of the
//! batch (`LogValidator`), of `acks` against the ISR and of the producer state, then the append.
//! What follows an append (its flush, the parked answer, the high watermark, the metrics) is the
//! router's (`router/handlers/produce.rs`).

use bytes::Bytes;
use kafka_protocol::messages::produce_response::BatchIndexAndErrorMessage;
use kafka_protocol::protocol::StrBytes;

use crate::config::broker::IdempotenceGeneration;
use crate::config::TopicConfig;
use crate::log::producer_state::{BatchMetadata, SequenceError};
use crate::protocol::compression::Codec;
use crate::protocol::record_batch::{recompress, validate_batch, BatchError, RecordBatchHeader};
use crate::protocol::record_validation::{validate_compression, validate_records, RecordsError};
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::TopicPartition;

use super::partition::{Acks, Partition};
use super::ReplicaManager;

/// A successful append as the response reports it.
pub(in crate::broker) struct Appended {
    pub(in crate::broker) base_offset: i64,
    pub(in crate::broker) end_offset: i64,
    pub(in crate::broker) log_start_offset: i64,
    pub(in crate::broker) flush_required: bool,
    pub(in crate::broker) rolled: Option<i64>,
    /// acks=all on a partition with followers: the answer waits for the high watermark.
    pub(in crate::broker) awaits_followers: bool,
    pub(in crate::broker) min_insync_replicas: usize,
    /// The batch's header as stored (offsets and leader epoch assigned).
    pub(in crate::broker) stored: RecordBatchHeader,
    /// A retry of an idempotent producer's batch already in the log: nothing was appended, and
    /// the answer carries the first write's offsets (waiting, as the first answer does, for its
    /// fsync and its replication).
    pub(in crate::broker) duplicate: bool,
    /// The stored batch's size in bytes (0 for a retry).
    pub(in crate::broker) stored_bytes: usize,
}

impl Appended {
    /// The answer to a retry of `original`: its offsets, waiting for its fsync if that is still
    /// under way and, like the first write's answer, for its replication.
    fn duplicate<S: Storage>(
        partition: &Partition<S>,
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
            stored_bytes: 0,
        }
    }
}

/// A rejected batch: the Kafka error, its message, and (Produce v8+) the records at fault.
pub(in crate::broker) struct Rejection {
    pub(in crate::broker) error: ErrorCode,
    pub(in crate::broker) message: String,
    /// Kafka's `RecordError`s: the index in the batch of a record that caused the rejection.
    pub(in crate::broker) record_errors: Vec<BatchIndexAndErrorMessage>,
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
    config: &TopicConfig,
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
    partition: &mut Partition<S>,
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

impl<S: Storage> ReplicaManager<S> {
    /// Appends a produced batch as this partition's leader (Kafka's `appendRecordsToLeader`),
    /// after Kafka's checks ([`validate_produced`], `acks` against the ISR, the producer
    /// state); a retry of a batch the log holds answers the first write. `config`: the topic's,
    /// `None` when the broker does not serve it.
    pub(in crate::broker) fn append_records(
        &mut self,
        topic_partition: &TopicPartition,
        records: Option<Bytes>,
        acks: Acks,
        config: Option<&TopicConfig>,
        generation: IdempotenceGeneration,
    ) -> Result<Appended, Rejection> {
        let unknown = || {
            let message =
                format!("This server does not host this topic-partition: {topic_partition}");
            (ErrorCode::UnknownTopicOrPartition, message)
        };
        let topic_config = config.ok_or_else(unknown)?;
        let topic_codec = topic_config.compression_type;
        let min_insync_replicas = topic_config.min_insync_replicas as usize;
        let partition = self.get_mut(topic_partition).ok_or_else(unknown)?;
        if let Some(reason) = partition.offline() {
            return Err((ErrorCode::KafkaStorageError, reason.to_owned()).into());
        }
        if !partition.is_leader() {
            let message = format!(
                "Leader not local for partition {topic_partition} on broker {}",
                partition.local().0
            );
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
            stored_bytes: batch.len(),
        };
        Ok(appended)
    }
}
