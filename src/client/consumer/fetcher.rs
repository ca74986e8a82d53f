//! The parsing half of Kafka's `Fetcher` and its `OffsetFetcher`: building Fetch and ListOffsets
//! requests, and turning one partition's fetched bytes into records and a new position.
//!
//! Each partition is taken on its own, batch by batch: the records of every whole batch at or
//! past the position are delivered, up to the first batch that fails to validate or decode.
//! Nothing at or past that batch is delivered and the position stops at its first undelivered
//! offset, so a bad batch can delay a partition but never make it skip or lose a record.
//!
//! Every answer is also held to the Fetch contract ([`contract_breaches`]): the size limits
//! with KIP-74's one exception, and no empty answer before `max_wait_ms`. A breach is the
//! broker's bug; the consumer reports it and still takes the records.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::config::ConsumerConfig;
use crate::protocol::record_batch::{decode_batch, validate_batch, BatchError, RecordBatchHeader};
use crate::protocol::ErrorCode;
use crate::types::{Millis, TopicPartition};

/// A record handed to the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Where it came from.
    pub topic_partition: TopicPartition,
    /// Its offset.
    pub offset: i64,
    /// CreateTime.
    pub timestamp_ms: i64,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
}

/// What one partition's fetched bytes yielded.
#[derive(Debug, Default)]
pub(crate) struct PartitionRecords {
    /// Records at or past the position, in offset order.
    pub(crate) records: Vec<ConsumerRecord>,
    /// The first offset not delivered: past every whole batch taken, at a bad batch if any.
    pub(crate) next_position: i64,
    /// The leader epoch of the last batch taken (KIP-320's offset epoch), if any was.
    pub(crate) last_epoch: Option<i32>,
    /// The batch that stopped delivery.
    pub(crate) failure: Option<BatchFailure>,
}

/// A batch that failed to validate or decode on the client.
#[derive(Debug)]
pub(crate) struct BatchFailure {
    /// Why.
    pub(crate) error: BatchError,
    /// Its last offset, when its header parsed (a caller may choose to seek past it).
    pub(crate) batch_last_offset: Option<i64>,
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

/// A Fetch request (v4–v12: topics by name) for `positions`, in their order (the broker fills
/// the response's byte budget in request order); topics appear in order of first appearance.
///
/// Each position carries the leader epoch the metadata names (-1: unknown) as
/// `current_leader_epoch`, so that a deposed leader answers FENCED_LEADER_EPOCH (KIP-320).
pub(crate) fn fetch_request(
    config: &ConsumerConfig,
    positions: &[(TopicPartition, i64, i32)],
    max_wait_ms: i32,
) -> FetchRequest {
    assert!(max_wait_ms >= 0, "a fetch waits a non-negative time");
    let mut topics: Vec<(&str, Vec<FetchPartition>)> = Vec::new();
    for (partition, offset, leader_epoch) in positions {
        assert!(*offset >= 0, "fetch at a non-negative position");
        let fetch = FetchPartition::default()
            .with_partition(partition.partition)
            .with_fetch_offset(*offset)
            .with_current_leader_epoch(*leader_epoch)
            .with_partition_max_bytes(config.max_partition_fetch_bytes);
        match topics
            .iter_mut()
            .find(|(topic, _)| *topic == &*partition.topic)
        {
            Some((_, partitions)) => partitions.push(fetch),
            None => topics.push((&*partition.topic, vec![fetch])),
        }
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(config.fetch_min_bytes)
        .with_max_bytes(config.fetch_max_bytes)
        .with_isolation_level(config.isolation_level.wire_value())
        .with_session_epoch(-1)
        .with_topics(
            topics
                .into_iter()
                .map(|(topic, partitions)| {
                    FetchTopic::default()
                        .with_topic(topic_name(topic))
                        .with_partitions(partitions)
                })
                .collect(),
        )
}

/// What a Fetch asked for, kept to judge its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FetchAsked {
    /// When it left.
    pub(crate) sent_at: Millis,
    /// `max_wait_ms`.
    pub(crate) max_wait_ms: i32,
    /// `min_bytes`.
    pub(crate) min_bytes: i32,
    /// `max_bytes` (`fetch.max.bytes`).
    pub(crate) max_bytes: i32,
    /// Every partition's `partition_max_bytes` (`max.partition.fetch.bytes`).
    pub(crate) partition_max_bytes: i32,
}

impl FetchAsked {
    /// What `request` asks for, sent at `sent_at`.
    pub(crate) fn of(request: &FetchRequest, sent_at: Millis) -> FetchAsked {
        let partition_max_bytes = request
            .topics
            .iter()
            .flat_map(|topic| &topic.partitions)
            .map(|partition| partition.partition_max_bytes)
            .max()
            .unwrap_or(0);
        FetchAsked {
            sent_at,
            max_wait_ms: request.max_wait_ms,
            min_bytes: request.min_bytes,
            max_bytes: request.max_bytes,
            partition_max_bytes,
        }
    }
}

/// How a Fetch answer broke the request's contract, if it did (Kafka's `ReplicaManager.fetchMessages`
/// and `DelayedFetch`), one line per breach:
/// * sizes: each partition's records fit `partition_max_bytes` and all of them `max_bytes`,
///   except that the first partition with records may hold one whole batch above both
///   (KIP-74), the rest then getting what is left of `max_bytes`;
/// * waiting: an answer with no records and no error comes only after `max_wait_ms`, unless a
///   partition's high watermark lies below the position fetched (a truncated log answers at
///   once).
///
/// `positions` are the offsets the request fetched from; `now` is when the answer arrived.
pub(crate) fn contract_breaches(
    asked: &FetchAsked,
    positions: &BTreeMap<TopicPartition, i64>,
    response: &FetchResponse,
    now: Millis,
) -> Vec<String> {
    let mut breaches = Vec::new();
    if response.error_code != 0 {
        return breaches;
    }
    let partition_limit = u64::try_from(asked.partition_max_bytes.max(0)).expect("non-negative");
    let mut remaining = if asked.max_bytes > 0 {
        u64::try_from(asked.max_bytes).expect("positive")
    } else {
        u64::from(i32::MAX.unsigned_abs())
    };
    // Still true after the loop: no partition answered any records.
    let mut first = true;
    let mut any_error = false;
    let mut truncated = false;
    for topic in &response.responses {
        for data in &topic.partitions {
            let partition = TopicPartition::new(topic.topic.as_str(), data.partition_index);
            any_error |= data.error_code != 0;
            if positions
                .get(&partition)
                .is_some_and(|position| data.high_watermark >= 0 && data.high_watermark < *position)
            {
                truncated = true;
            }
            let records = data.records.as_deref().unwrap_or_default();
            let len = records.len() as u64;
            if len == 0 {
                continue;
            }
            let limit = partition_limit.min(remaining);
            let one_whole_batch = RecordBatchHeader::parse(records)
                .is_ok_and(|header| header.size_bytes() as u64 == len);
            if len > limit && !(first && one_whole_batch) {
                breaches.push(format!(
                    "{partition}: {len} record bytes, above the {limit} left of \
                     partition_max_bytes {} and max_bytes {}{}",
                    asked.partition_max_bytes,
                    asked.max_bytes,
                    if first {
                        " (KIP-74 lets only one whole batch exceed them)"
                    } else {
                        " (only the first partition with records may exceed them)"
                    }
                ));
            }
            first = false;
            remaining = remaining.saturating_sub(len);
        }
    }
    let waited = now.0.saturating_sub(asked.sent_at.0);
    let max_wait = u64::try_from(asked.max_wait_ms.max(0)).expect("non-negative");
    if first && !any_error && !truncated && waited < max_wait {
        breaches.push(format!(
            "an empty answer after {waited} ms, before max_wait_ms {max_wait} passed \
             (min_bytes {})",
            asked.min_bytes
        ));
    }
    breaches
}

/// A ListOffsets request for `partitions` at `timestamp` (-1 latest, -2 earliest), each with
/// the leader epoch the client knows (`current_leader_epoch`, -1: unknown): as KIP-320 has it,
/// a leader of an older epoch (a zombie that has not heard it was replaced) answers
/// FENCED_LEADER_EPOCH instead of its own, stale, offsets.
pub fn list_offsets_request(
    partitions: &[TopicPartition],
    current_leader_epoch: impl Fn(&TopicPartition) -> i32,
    timestamp: i64,
    isolation_level: i8,
) -> ListOffsetsRequest {
    let mut by_topic: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
    for partition in partitions {
        by_topic.entry(&*partition.topic).or_default().push(
            ListOffsetsPartition::default()
                .with_partition_index(partition.partition)
                .with_current_leader_epoch(current_leader_epoch(partition))
                .with_timestamp(timestamp),
        );
    }
    let topics = by_topic
        .into_iter()
        .map(|(topic, partitions)| {
            ListOffsetsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(isolation_level)
        .with_topics(topics)
}

/// Each partition's offset or error in a ListOffsets response.
pub fn list_offsets_outcomes(
    response: &ListOffsetsResponse,
) -> BTreeMap<TopicPartition, Result<i64, ErrorCode>> {
    let mut offsets = BTreeMap::new();
    for topic in &response.topics {
        for partition in &topic.partitions {
            let outcome = match ErrorCode::from_code(partition.error_code) {
                ErrorCode::None => Ok(partition.offset),
                error => Err(error),
            };
            offsets.insert(
                TopicPartition::new(topic.name.as_str(), partition.partition_index),
                outcome,
            );
        }
    }
    offsets
}

/// Takes the records of `partition` at or past `position` from its fetched bytes, whole batch
/// by whole batch (control batches advance the position too). A trailing partial batch (allowed
/// by Kafka) is left for the next fetch; a batch that fails its CRC, does not parse or does not
/// decode stops delivery there.
pub(crate) fn take_records(
    partition: &TopicPartition,
    position: i64,
    records: &Bytes,
) -> PartitionRecords {
    assert!(position >= 0, "fetch at a non-negative position");
    let mut taken = PartitionRecords {
        next_position: position,
        ..PartitionRecords::default()
    };
    let mut at = 0;
    while at < records.len() {
        let header = match validate_batch(&records[at..]) {
            Ok(header) => header,
            Err(BatchError::Truncated { .. }) => break,
            Err(error) => {
                let batch_last_offset = RecordBatchHeader::parse(&records[at..])
                    .ok()
                    .map(|header| header.last_offset());
                taken.failure = Some(BatchFailure {
                    error,
                    batch_last_offset,
                });
                break;
            }
        };
        let range = at..at + header.size_bytes();
        at = range.end;
        if header.last_offset() < taken.next_position {
            continue;
        }
        let decoded = match decode_batch(records, &header, range) {
            Ok(decoded) => decoded,
            Err(error) => {
                taken.failure = Some(BatchFailure {
                    error,
                    batch_last_offset: Some(header.last_offset()),
                });
                break;
            }
        };
        taken.records.reserve(decoded.len());
        for record in decoded
            .into_iter()
            .filter(|r| r.offset >= taken.next_position)
        {
            assert!(
                record.offset <= header.last_offset(),
                "a decoded record lies within its batch"
            );
            taken.records.push(ConsumerRecord {
                topic_partition: partition.clone(),
                offset: record.offset,
                timestamp_ms: record.timestamp_ms,
                key: record.key,
                value: record.value,
            });
        }
        taken.next_position = header.last_offset() + 1;
        taken.last_epoch = Some(header.partition_leader_epoch);
    }
    debug_assert!(
        taken.records.windows(2).all(|w| w[0].offset < w[1].offset),
        "records are delivered in offset order"
    );
    assert!(
        taken
            .records
            .last()
            .is_none_or(|last| last.offset < taken.next_position),
        "the position moves past every delivered record"
    );
    taken
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::record_batch::{assign_offsets, build_batch, KeyValue};

    pub(crate) fn batch_at(offset: i64, values: &[&str]) -> Vec<u8> {
        let records: Vec<KeyValue<'_>> = values
            .iter()
            .map(|value| (None, Some(value.as_bytes())))
            .collect();
        let mut batch = build_batch(&records, 0).to_vec();
        assign_offsets(&mut batch, offset, 0);
        batch
    }

    fn answer(partitions: &[(i32, i64, Vec<u8>)]) -> FetchResponse {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        let partitions = partitions
            .iter()
            .map(|(index, high_watermark, records)| {
                PartitionData::default()
                    .with_partition_index(*index)
                    .with_high_watermark(*high_watermark)
                    .with_records(Some(records.clone().into()))
            })
            .collect();
        FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(topic_name("t"))
            .with_partitions(partitions)])
    }

    fn breaches(
        max_bytes: i32,
        partition_max: i32,
        answer: &FetchResponse,
        at: u64,
    ) -> Vec<String> {
        let asked = FetchAsked {
            sent_at: Millis(100),
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes,
            partition_max_bytes: partition_max,
        };
        let positions = (0..3).map(|p| (TopicPartition::new("t", p), 0)).collect();
        contract_breaches(&asked, &positions, answer, Millis(at))
    }

    #[test]
    fn the_first_partition_with_records_may_exceed_the_limits_by_one_whole_batch() {
        let big = batch_at(0, &["a value well above the limit"]);
        let small = batch_at(0, &["s"]);
        let limit = i32::try_from(small.len()).expect("a small batch");
        let ok = answer(&[(0, 9, Vec::new()), (1, 9, big.clone()), (2, 9, Vec::new())]);
        assert!(breaches(limit, limit, &ok, 110).is_empty());
        let mut two = big.clone();
        two.extend(batch_at(1, &["b"]));
        let one_too_many = answer(&[(0, 9, two)]);
        assert_eq!(breaches(10_000, limit, &one_too_many, 110).len(), 1);
        let second = answer(&[(0, 9, small.clone()), (1, 9, big.clone())]);
        let found = breaches(10_000, limit, &second, 110);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("t-1:"), "{found:?}");
        let over_total = answer(&[(0, 9, small.clone()), (1, 9, small.clone())]);
        assert_eq!(breaches(limit + 1, limit, &over_total, 110).len(), 1);
        assert!(breaches(2 * limit, limit, &over_total, 110).is_empty());
    }

    #[test]
    fn an_empty_answer_before_max_wait_is_a_breach_unless_a_log_was_truncated() {
        let empty = answer(&[(0, 9, Vec::new())]);
        assert_eq!(breaches(100, 100, &empty, 599).len(), 1);
        assert!(breaches(100, 100, &empty, 600).is_empty());
        let truncated = answer(&[(0, 9, Vec::new()), (1, -1, Vec::new())]);
        assert_eq!(breaches(100, 100, &truncated, 110).len(), 1, "-1: unknown");
        let truncated = answer(&[(0, 9, Vec::new()), (1, 0, Vec::new())]);
        let asked = FetchAsked {
            sent_at: Millis(100),
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 100,
            partition_max_bytes: 100,
        };
        let positions = [(TopicPartition::new("t", 1), 5)].into_iter().collect();
        assert!(contract_breaches(&asked, &positions, &truncated, Millis(110)).is_empty());
    }

    fn offsets(taken: &PartitionRecords) -> Vec<i64> {
        taken.records.iter().map(|record| record.offset).collect()
    }

    #[test]
    fn records_before_the_position_are_skipped_and_a_partial_tail_is_left() {
        let partition = TopicPartition::new("t", 0);
        let mut bytes = batch_at(5, &["five", "six"]);
        bytes.extend(batch_at(7, &["seven"]));
        let partial = batch_at(8, &["eight"]);
        bytes.extend_from_slice(&partial[..partial.len() - 3]);
        let taken = take_records(&partition, 6, &bytes.into());
        assert_eq!(offsets(&taken), vec![6, 7]);
        assert_eq!(taken.next_position, 8);
        assert!(taken.failure.is_none());
    }

    #[test]
    fn a_corrupt_batch_stops_delivery_at_its_first_offset_and_names_its_last() {
        let partition = TopicPartition::new("t", 0);
        let mut bytes = batch_at(0, &["zero", "one"]);
        let mut corrupt = batch_at(2, &["two", "three"]);
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        bytes.extend(corrupt);
        bytes.extend(batch_at(4, &["four"]));
        let taken = take_records(&partition, 0, &bytes.into());
        assert_eq!(
            offsets(&taken),
            vec![0, 1],
            "nothing at or past the bad batch"
        );
        assert_eq!(taken.next_position, 2);
        let failure = taken.failure.expect("the corrupt batch is reported");
        assert!(matches!(failure.error, BatchError::CrcMismatch { .. }));
        assert_eq!(failure.batch_last_offset, Some(3));
    }

    #[test]
    fn a_batch_whose_header_does_not_parse_has_no_last_offset() {
        let partition = TopicPartition::new("t", 0);
        let mut bytes = batch_at(0, &["zero"]);
        bytes[16] = 1; // magic 1
        let taken = take_records(&partition, 0, &bytes.into());
        assert!(taken.records.is_empty());
        assert_eq!(taken.next_position, 0);
        let failure = taken.failure.expect("reported");
        assert_eq!(failure.error, BatchError::UnsupportedMagic(1));
        assert_eq!(failure.batch_last_offset, None);
    }
}
