//! The consumer's subscription state (Kafka's `SubscriptionState` + the parsing half of the
//! `Fetcher`): assigned partitions, their positions, resets, and turning Fetch responses into
//! records and new positions.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::config::ConsumerConfig;
use crate::protocol::record_batch::{decode_batch, validate_batch, BatchError};
use crate::protocol::ErrorCode;
use crate::types::TopicPartition;

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

/// What one Fetch response did.
#[derive(Debug, Default)]
pub struct FetchOutcome {
    /// Records, per partition in offset order.
    pub records: Vec<ConsumerRecord>,
    /// Partitions whose position is now unknown (OFFSET_OUT_OF_RANGE): reset them.
    pub resets: Vec<TopicPartition>,
    /// Partitions that answered with another error.
    pub errors: Vec<(TopicPartition, ErrorCode)>,
}

/// Assigned partitions and their positions (`None`: needs a reset).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriptionState {
    positions: BTreeMap<TopicPartition, Option<i64>>,
}

impl SubscriptionState {
    /// Replaces the assignment; kept partitions keep their positions.
    pub fn assign(&mut self, partitions: &[TopicPartition]) {
        let mut positions = BTreeMap::new();
        for partition in partitions {
            positions.insert(
                partition.clone(),
                self.positions.get(partition).copied().flatten(),
            );
        }
        self.positions = positions;
    }

    /// Sets the next offset to read.
    pub fn seek(&mut self, partition: &TopicPartition, offset: i64) {
        assert!(offset >= 0, "positions are non-negative");
        let slot = self
            .positions
            .get_mut(partition)
            .expect("seek on an assigned partition");
        *slot = Some(offset);
    }

    /// The next offset to read, if known.
    pub fn position(&self, partition: &TopicPartition) -> Option<i64> {
        self.positions.get(partition).copied().flatten()
    }

    /// Assigned partitions.
    pub fn assigned(&self) -> impl Iterator<Item = &TopicPartition> {
        self.positions.keys()
    }

    /// Partitions without a position.
    pub fn needing_reset(&self) -> Vec<TopicPartition> {
        self.positions
            .iter()
            .filter(|(_, position)| position.is_none())
            .map(|(partition, _)| partition.clone())
            .collect()
    }

    /// A Fetch request (v4–v12: topics by name) for every partition with a position.
    pub fn fetch_request(&self, config: &ConsumerConfig, max_wait_ms: i32) -> FetchRequest {
        let mut topics: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
        for (partition, position) in &self.positions {
            let Some(offset) = position else { continue };
            topics.entry(partition.topic.as_str()).or_default().push(
                FetchPartition::default()
                    .with_partition(partition.partition)
                    .with_fetch_offset(*offset)
                    .with_partition_max_bytes(config.max_partition_fetch_bytes),
            );
        }
        FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
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
                            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                            .with_partitions(partitions)
                    })
                    .collect(),
            )
    }

    /// Applies a Fetch response: returns the records at or past each position and advances the
    /// positions past every whole batch (control batches included).
    pub fn on_fetch_response(
        &mut self,
        response: &FetchResponse,
    ) -> Result<FetchOutcome, BatchError> {
        let mut outcome = FetchOutcome::default();
        for topic in &response.responses {
            for data in &topic.partitions {
                let partition = TopicPartition::new(topic.topic.to_string(), data.partition_index);
                let Some(Some(position)) = self.positions.get(&partition).copied() else {
                    continue;
                };
                match ErrorCode::from_code(data.error_code) {
                    ErrorCode::None => {}
                    ErrorCode::OffsetOutOfRange => {
                        self.positions.insert(partition.clone(), None);
                        outcome.resets.push(partition);
                        continue;
                    }
                    error => {
                        outcome.errors.push((partition, error));
                        continue;
                    }
                }
                let records = data.records.clone().unwrap_or_default();
                let next =
                    Self::take_records(&partition, position, &records, &mut outcome.records)?;
                self.positions.insert(partition, Some(next));
            }
        }
        Ok(outcome)
    }

    /// Decodes whole batches; a trailing partial batch (allowed by Kafka) is left for later.
    fn take_records(
        partition: &TopicPartition,
        mut position: i64,
        records: &Bytes,
        out: &mut Vec<ConsumerRecord>,
    ) -> Result<i64, BatchError> {
        let mut at = 0;
        while at < records.len() {
            let header = match validate_batch(&records[at..]) {
                Ok(header) => header,
                Err(BatchError::Truncated { .. }) => break,
                Err(error) => return Err(error),
            };
            let range = at..at + header.size_bytes();
            at = range.end;
            if header.last_offset() < position {
                continue;
            }
            for record in decode_batch(records, &header, range)? {
                if record.offset >= position {
                    out.push(ConsumerRecord {
                        topic_partition: partition.clone(),
                        offset: record.offset,
                        timestamp_ms: record.timestamp_ms,
                        key: record.key,
                        value: record.value,
                    });
                }
            }
            position = position.max(header.last_offset() + 1);
        }
        Ok(position)
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};

    use super::*;
    use crate::protocol::record_batch::{assign_offsets, build_batch, KeyValue};

    fn batch_at(offset: i64, values: &[&str]) -> Vec<u8> {
        let records: Vec<KeyValue<'_>> = values
            .iter()
            .map(|value| (None, Some(value.as_bytes())))
            .collect();
        let mut batch = build_batch(&records, 0).to_vec();
        assign_offsets(&mut batch, offset, 0);
        batch
    }

    fn response(error: ErrorCode, records: Vec<u8>) -> FetchResponse {
        FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![PartitionData::default()
                .with_partition_index(0)
                .with_error_code(error.code())
                .with_records(Some(records.into()))])])
    }

    #[test]
    fn records_before_the_position_are_skipped_and_a_partial_tail_is_left() {
        let partition = TopicPartition::new("t", 0);
        let mut state = SubscriptionState::default();
        state.assign(std::slice::from_ref(&partition));
        assert_eq!(state.needing_reset(), vec![partition.clone()]);
        state.seek(&partition, 6);
        let mut bytes = batch_at(5, &["five", "six"]);
        bytes.extend(batch_at(7, &["seven"]));
        let partial = batch_at(8, &["eight"]);
        bytes.extend_from_slice(&partial[..partial.len() - 3]);
        let outcome = state
            .on_fetch_response(&response(ErrorCode::None, bytes))
            .expect("valid");
        let offsets: Vec<i64> = outcome.records.iter().map(|record| record.offset).collect();
        assert_eq!(offsets, vec![6, 7]);
        assert_eq!(state.position(&partition), Some(8));
    }

    #[test]
    fn out_of_range_asks_for_a_reset_and_corruption_is_an_error() {
        let partition = TopicPartition::new("t", 0);
        let mut state = SubscriptionState::default();
        state.assign(std::slice::from_ref(&partition));
        state.seek(&partition, 100);
        let outcome = state
            .on_fetch_response(&response(ErrorCode::OffsetOutOfRange, Vec::new()))
            .expect("ok");
        assert_eq!(outcome.resets, vec![partition.clone()]);
        assert_eq!(state.position(&partition), None);
        state.seek(&partition, 0);
        let mut corrupt = batch_at(0, &["x"]);
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        assert!(state
            .on_fetch_response(&response(ErrorCode::None, corrupt))
            .is_err());
    }
}
