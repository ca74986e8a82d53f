//! ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4) and
//! offsets by timestamp. "Latest" is the high watermark (also the last stable offset, as
//! seedlog has no transactions yet).
//!
//! KIP-207: right after a leader change the new leader's high watermark may still lie below
//! what the previous leader exposed. Until it reaches the start offset of the leader's epoch,
//! a client (replica id -1) asking for the latest offset, or for a timestamp whose answer
//! would reach the high watermark, gets `OFFSET_NOT_AVAILABLE` (retriable; before version 5,
//! `LEADER_NOT_AVAILABLE`), never an end of the log that moved backwards.

use kafka_protocol::messages::list_offsets_request::ListOffsetsPartition;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, ResponseKind};

use super::partition::Partition;
use super::ReplicaManager;
use crate::log::LogError;
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::TopicPartition;

const LATEST_TIMESTAMP: i64 = -1;
const EARLIEST_TIMESTAMP: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
const LATEST_TIERED_TIMESTAMP: i64 = -5;

/// The first version whose response may carry `OFFSET_NOT_AVAILABLE` (Kafka's
/// `ListOffsetsRequest`: older clients get `LEADER_NOT_AVAILABLE` instead).
const OFFSET_NOT_AVAILABLE_VERSION: i16 = 5;

/// `(offset, timestamp)` answered for one partition. As in Kafka's
/// `Partition.fetchOffsetForTimestamp`, a lookup by timestamp (max timestamp included) answers
/// only an offset below the high watermark: when the record it finds lies past it, there is no
/// answer (-1), never an offset a consumer cannot read yet. `lagging` is KIP-207's error: the
/// answer a client must not get while a new leader's high watermark lags behind its epoch's
/// start (the latest offset, and a lookup that finds nothing below the high watermark).
fn lookup<S: Storage>(
    partition: &Partition<S>,
    timestamp: i64,
    lagging: Option<ErrorCode>,
) -> Result<Result<(i64, i64), ErrorCode>, LogError> {
    let below_high_watermark = |found: Option<(i64, i64)>| match (found, lagging) {
        (Some((offset, timestamp)), _) if offset < partition.high_watermark() => {
            Ok((offset, timestamp))
        }
        (_, Some(error)) => Err(error),
        (_, None) => Ok((-1, -1)),
    };
    Ok(match timestamp {
        LATEST_TIMESTAMP => lagging.map_or(Ok((partition.high_watermark(), -1)), Err),
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => {
            Ok((partition.log().log_start_offset(), -1))
        }
        MAX_TIMESTAMP => below_high_watermark(partition.log().offset_of_max_timestamp()?),
        LATEST_TIERED_TIMESTAMP => below_high_watermark(None),
        target => below_high_watermark(partition.log().offset_for_timestamp(target)?),
    })
}

/// `((offset, timestamp), leader epoch)` for one requested partition, or why not.
fn answer<S: Storage>(
    partition: &Partition<S>,
    api_version: i16,
    from_client: bool,
    requested: &ListOffsetsPartition,
) -> Result<((i64, i64), i32), ErrorCode> {
    if partition.offline().is_some() {
        return Err(ErrorCode::KafkaStorageError);
    }
    if !partition.is_leader() {
        return Err(ErrorCode::NotLeaderOrFollower);
    }
    if api_version >= 4 {
        partition.check_leader_epoch(requested.current_leader_epoch)?;
    }
    let lagging = partition
        .lagging_epoch_start()
        .filter(|_| from_client)
        .map(|_| {
            if api_version >= OFFSET_NOT_AVAILABLE_VERSION {
                ErrorCode::OffsetNotAvailable
            } else {
                ErrorCode::LeaderNotAvailable
            }
        });
    let found = lookup(partition, requested.timestamp, lagging).map_err(|error| {
        tracing::error!(partition = %partition.topic_partition(), %error, "ListOffsets read failed");
        ErrorCode::KafkaStorageError
    })??;
    Ok((found, partition.leader_epoch().0))
}

impl<S: Storage> ReplicaManager<S> {
    pub(crate) fn on_list_offsets_request(
        &self,
        api_version: i16,
        request: &ListOffsetsRequest,
    ) -> ResponseKind {
        let mut response = ListOffsetsResponse::default();
        // Kafka's `isClientRequest`: consumers and admin clients, not brokers or debug tools.
        let from_client = request.replica_id.0 == -1;
        for topic in &request.topics {
            let mut topic_response =
                ListOffsetsTopicResponse::default().with_name(topic.name.clone());
            for requested in &topic.partitions {
                let mut entry = ListOffsetsPartitionResponse::default()
                    .with_partition_index(requested.partition_index);
                let topic_partition =
                    TopicPartition::new(topic.name.as_str(), requested.partition_index);
                let outcome = match self.get(&topic_partition) {
                    None => Err(ErrorCode::UnknownTopicOrPartition),
                    Some(partition) => answer(partition, api_version, from_client, requested),
                };
                match outcome {
                    Ok(((offset, timestamp), leader_epoch)) => {
                        entry.offset = offset;
                        entry.timestamp = timestamp;
                        if api_version >= 4 {
                            entry.leader_epoch = leader_epoch;
                        }
                    }
                    Err(error) => entry.error_code = error.code(),
                }
                topic_response.partitions.push(entry);
            }
            response.topics.push(topic_response);
        }
        ResponseKind::ListOffsets(response)
    }
}
