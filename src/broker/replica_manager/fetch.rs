//! Reading a fetch (Kafka's `ReplicaManager.readFromLocalLog` and `Partition.fetchRecords`):
//! for each partition, leadership and epoch fencing, a follower's diverging epoch (KIP-320/595),
//! then whole batches from the fetch offset up to the high watermark (a follower: the log end),
//! as file ranges, within the partition's and the request's byte limits (KIP-74). Parking a
//! fetch is the router's (`router/handlers/fetch.rs`); reading it again ([`parked`](super::parked))
//! and what a follower's fetch offsets tell the leader ([`replication`](super::replication))
//! are the replica manager's.

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::FetchRequest;

use crate::log::{LogError, LogRead};
use crate::protocol::fetch_response::{
    FetchPartitionResponse, FetchResponseParts, FetchTopicResponse, RecordsSource,
};
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{BrokerId, TopicPartition};

use super::partition::Partition;
use super::ReplicaManager;
use crate::broker::metadata_cache::MetadataCache;

/// Fetch addresses topics by id from this version on.
pub(in crate::broker) const TOPIC_IDS_FROM: i16 = 13;
const REPLICA_STATE_FROM: i16 = 15;
const DIVERGING_EPOCH_FROM: i16 = 12;

/// The follower a fetch comes from, if it is a replica's fetch.
pub(in crate::broker) fn fetching_replica(
    api_version: i16,
    body: &FetchRequest,
) -> Option<BrokerId> {
    let id = if api_version >= REPLICA_STATE_FROM {
        body.replica_state.replica_id.0
    } else {
        body.replica_id.0
    };
    (id >= 0).then_some(BrokerId(id))
}
const LEADER_EPOCH_FROM: i16 = 9;

fn error_partition<F>(partition_index: i32, error: ErrorCode) -> FetchPartitionResponse<F> {
    FetchPartitionResponse {
        partition_index,
        error_code: error.code(),
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        diverging_epoch: None,
        snapshot_id: None,
        records: RecordsSource::Empty,
    }
}

impl<S: Storage> ReplicaManager<S> {
    /// Reads what a fetch would return now over the topics `metadata` says this broker
    /// serves, and how many record bytes that is.
    pub(in crate::broker) fn read_served(
        &self,
        api_version: i16,
        body: &FetchRequest,
        metadata: &MetadataCache<S>,
    ) -> (FetchResponseParts<S::File>, usize) {
        self.read_for_fetch(api_version, body, |requested| {
            let topic = if api_version >= TOPIC_IDS_FROM {
                metadata.served_by_id(requested.topic_id)
            } else {
                metadata.served(&requested.topic)
            };
            topic.map(|topic| topic.name.clone())
        })
    }

    /// Reads what a fetch would return now, and how many record bytes that is
    /// (`served`: the name of a requested topic the broker serves, by id from v13, else by name).
    pub(in crate::broker) fn read_for_fetch(
        &self,
        api_version: i16,
        body: &FetchRequest,
        served: impl Fn(&FetchTopic) -> Option<String>,
    ) -> (FetchResponseParts<S::File>, usize) {
        let mut budget = FetchBudget {
            remaining: if body.max_bytes > 0 {
                body.max_bytes as u64
            } else {
                i32::MAX as u64
            },
            total: 0,
        };
        let replica = fetching_replica(api_version, body);
        let mut topics = Vec::with_capacity(body.topics.len());
        for requested in &body.topics {
            let topic = served(requested);
            let missing = if api_version >= TOPIC_IDS_FROM {
                ErrorCode::UnknownTopicId
            } else {
                ErrorCode::UnknownTopicOrPartition
            };
            let name = topic.clone().unwrap_or_else(|| requested.topic.to_string());
            let partitions = requested
                .partitions
                .iter()
                .map(|wanted| {
                    let partition = topic.as_ref().and_then(|_| {
                        self.get(&TopicPartition::new(name.as_str(), wanted.partition))
                    });
                    match partition {
                        None => error_partition(wanted.partition, missing),
                        Some(partition) => Self::read_partition(
                            api_version,
                            partition,
                            replica,
                            wanted,
                            &mut budget,
                        ),
                    }
                })
                .collect();
            topics.push(FetchTopicResponse {
                topic: name,
                topic_id: requested.topic_id,
                partitions,
            });
        }
        let parts = FetchResponseParts {
            error_code: 0,
            session_id: 0,
            topics,
        };
        (parts, budget.total)
    }

    /// One partition of a fetch: leadership and epoch fencing, then whole batches up to the
    /// high watermark (for a follower, the log end) within the partition's and the request's
    /// byte limits.
    fn read_partition(
        api_version: i16,
        partition: &Partition<S>,
        replica: Option<BrokerId>,
        wanted: &FetchPartition,
        budget: &mut FetchBudget,
    ) -> FetchPartitionResponse<S::File> {
        if partition.offline().is_some() {
            return error_partition(wanted.partition, ErrorCode::KafkaStorageError);
        }
        let known_follower =
            replica.is_none_or(|replica| partition.followers().contains_key(&replica));
        if !partition.is_leader() || !known_follower {
            return error_partition(wanted.partition, ErrorCode::NotLeaderOrFollower);
        }
        if api_version >= LEADER_EPOCH_FROM {
            if let Err(error) = partition.check_leader_epoch(wanted.current_leader_epoch) {
                return error_partition(wanted.partition, error);
            }
        }
        let high_watermark = partition.high_watermark();
        let mut entry = FetchPartitionResponse {
            partition_index: wanted.partition,
            error_code: 0,
            high_watermark,
            last_stable_offset: high_watermark,
            log_start_offset: partition.log().log_start_offset(),
            diverging_epoch: None,
            snapshot_id: None,
            records: RecordsSource::Empty,
        };
        let max_bytes = (wanted.partition_max_bytes.max(0) as u64).min(budget.remaining);
        if max_bytes == 0 && budget.total > 0 {
            return entry;
        }
        if replica.is_some() && api_version >= DIVERGING_EPOCH_FROM {
            entry.diverging_epoch = diverging_epoch(partition, wanted);
            if entry.diverging_epoch.is_some() {
                return entry;
            }
        }
        let read_end = if replica.is_some() {
            partition.log().log_end_offset()
        } else {
            high_watermark
        };
        match partition
            .log()
            .read(wanted.fetch_offset, read_end, max_bytes)
        {
            // KIP-74: the first batch of the response goes out even above the limits; in any
            // later partition both limits hold (Kafka's `minOneMessage` is off by then).
            Ok(LogRead::Records {
                file,
                position,
                len,
            }) if budget.total == 0 || len <= max_bytes => {
                budget.remaining = budget.remaining.saturating_sub(len);
                budget.total += len as usize;
                entry.records = RecordsSource::File {
                    file,
                    position,
                    len,
                };
            }
            Ok(LogRead::Records { .. } | LogRead::Empty) => {}
            Ok(LogRead::OutOfRange) => entry.error_code = ErrorCode::OffsetOutOfRange.code(),
            Err(LogError::Corrupt(reason)) => {
                // Kafka answers a CorruptRecordException on the read path with CORRUPT_MESSAGE.
                tracing::error!(partition = %partition.topic_partition(), %reason, "fetch found a corrupt batch");
                entry.error_code = ErrorCode::CorruptMessage.code();
            }
            Err(error) => {
                tracing::error!(partition = %partition.topic_partition(), %error, "fetch read failed");
                entry.error_code = ErrorCode::KafkaStorageError.code();
            }
        }
        entry
    }
}

/// KIP-320/595: where the follower's last fetched epoch ends on this leader, if the follower's
/// log has gone past it (Kafka's check in `Partition.fetchRecords`).
fn diverging_epoch<S: Storage>(
    partition: &Partition<S>,
    wanted: &FetchPartition,
) -> Option<(i32, i64)> {
    if wanted.last_fetched_epoch < 0 {
        return None;
    }
    let epochs = partition.log().leader_epochs()?;
    let (epoch, end) =
        epochs.end_offset_for(wanted.last_fetched_epoch, partition.log().log_end_offset());
    (end < wanted.fetch_offset || epoch < wanted.last_fetched_epoch).then_some((epoch, end))
}

/// The request-wide `max_bytes` as partitions consume it.
struct FetchBudget {
    remaining: u64,
    total: usize,
}
