//! Fetch: whole batches from the fetch offset up to the high watermark, as file ranges (sent
//! with sendfile in production). A fetch with less than `min.bytes` available waits in the
//! purgatory until data arrives or `max.wait.ms` passes. Sessionless: `session_id` is 0.
//!
//! A fetch from a follower (`replica_id` set, or `replica_state` from v15) reads up to the log
//! end instead, and its fetch offsets tell the leader how far each follower has come (see
//! `broker::replication`). Only the leader serves fetches.

use kafka_protocol::messages::fetch_request::FetchPartition;
use kafka_protocol::messages::{FetchRequest, RequestKind};

use crate::broker::partition::Partition;
use crate::broker::purgatory::DelayedFetch;
use crate::broker::{Broker, Output, ReplyTo, ResponseBody};
use crate::log::{LogError, LogRead};
use crate::protocol::codec::Request;
use crate::protocol::fetch_response::{
    FetchPartitionResponse, FetchResponseParts, FetchTopicResponse, RecordsSource,
};
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{BrokerId, Millis, TopicPartition};

const TOPIC_IDS_FROM: i16 = 13;
const REPLICA_STATE_FROM: i16 = 15;
const DIVERGING_EPOCH_FROM: i16 = 12;

/// The follower a fetch comes from, if it is a replica's fetch.
fn fetching_replica(api_version: i16, body: &FetchRequest) -> Option<BrokerId> {
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

impl<S: Storage> Broker<S> {
    pub(in crate::broker) fn on_fetch_request(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        request: Request,
        out: &mut Vec<Output<S::File>>,
    ) {
        let RequestKind::Fetch(body) = request.body else {
            unreachable!("routed by api key")
        };
        let (parts, bytes) = self.read_for_fetch(request.api_version, &body);
        if let Some(replica) = fetching_replica(request.api_version, &body) {
            let fetched: Vec<(TopicPartition, i64)> = parts
                .topics
                .iter()
                .zip(&body.topics)
                .flat_map(|(topic, requested)| {
                    topic
                        .partitions
                        .iter()
                        .zip(&requested.partitions)
                        .filter(|(answer, _)| {
                            // A diverging follower's fetch offset is not its log end here.
                            answer.error_code == 0 && answer.diverging_epoch.is_none()
                        })
                        .map(|(answer, wanted)| {
                            let partition =
                                TopicPartition::new(topic.topic.as_str(), answer.partition_index);
                            (partition, wanted.fetch_offset)
                        })
                })
                .collect();
            self.on_follower_fetched(now, replica, &fetched, out);
        }
        let has_error = parts
            .topics
            .iter()
            .flat_map(|topic| &topic.partitions)
            .any(|partition| partition.error_code != 0);
        let ready = body.max_wait_ms <= 0
            || bytes >= body.min_bytes.max(1) as usize
            || has_error
            || body.topics.is_empty();
        if ready {
            out.push(reply_to.respond(ResponseBody::Fetch(parts)));
        } else {
            let watched = parts
                .topics
                .iter()
                .flat_map(|topic| {
                    topic.partitions.iter().map(|partition| {
                        TopicPartition::new(topic.topic.as_str(), partition.partition_index)
                    })
                })
                .collect();
            self.purgatory.fetches.push(DelayedFetch {
                reply_to,
                deadline: now.plus(body.max_wait_ms as u64),
                request: body,
                watched,
            });
        }
    }

    /// Reads what a fetch would return now, and how many record bytes that is.
    pub(in crate::broker) fn read_for_fetch(
        &self,
        api_version: i16,
        body: &FetchRequest,
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
            let topic = if api_version >= TOPIC_IDS_FROM {
                self.metadata.served_by_id(requested.topic_id)
            } else {
                self.metadata.served(&requested.topic)
            };
            let missing = if api_version >= TOPIC_IDS_FROM {
                ErrorCode::UnknownTopicId
            } else {
                ErrorCode::UnknownTopicOrPartition
            };
            let name =
                topic.map_or_else(|| requested.topic.to_string(), |topic| topic.name.clone());
            let partitions = requested
                .partitions
                .iter()
                .map(|wanted| {
                    let partition = topic.and_then(|_| {
                        self.replicas
                            .get(&TopicPartition::new(name.as_str(), wanted.partition))
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
