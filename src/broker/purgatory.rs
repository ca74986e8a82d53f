//! Work parked until something happens (Kafka's purgatory): produce responses waiting for an
//! fsync, CreateTopics responses waiting for their metadata record to be durable, and fetches
//! waiting for data (`min.bytes`) or for `max.wait.ms`.

use std::collections::BTreeSet;

use kafka_protocol::messages::{CreateTopicsResponse, FetchRequest, ProduceResponse, ResponseKind};

use crate::protocol::ErrorCode;
use crate::runtime::storage::Storage;
use crate::types::{Millis, TopicPartition};

use super::metadata::MetadataRecord;
use super::{Broker, FlushId, Output, ReplyTo, ResponseBody};

/// What a flush makes durable.
#[derive(Debug)]
pub(super) enum FlushTarget {
    /// A partition log up to `offset`.
    Partition {
        topic_partition: TopicPartition,
        offset: i64,
    },
    /// The metadata log up to `offset`; `records` apply once durable.
    Metadata {
        offset: i64,
        records: Vec<MetadataRecord>,
    },
}

/// A produce response waiting for fsyncs (the append crossed `flush.messages`).
#[derive(Debug)]
pub(super) struct DelayedProduce {
    pub(super) reply_to: ReplyTo,
    pub(super) response: ProduceResponse,
    pub(super) waiting: BTreeSet<FlushId>,
    /// `(flush, topic index, partition index)`: which response slot a failed flush turns into
    /// KAFKA_STORAGE_ERROR.
    pub(super) slots: Vec<(FlushId, usize, usize)>,
}

/// A CreateTopics response waiting for its metadata records to be durable.
#[derive(Debug)]
pub(super) struct DelayedCreateTopics {
    pub(super) reply_to: ReplyTo,
    pub(super) response: CreateTopicsResponse,
    pub(super) flush_id: FlushId,
}

/// A fetch waiting for `min.bytes` of data or for its deadline.
#[derive(Debug)]
pub(super) struct DelayedFetch {
    pub(super) reply_to: ReplyTo,
    pub(super) request: FetchRequest,
    pub(super) deadline: Millis,
    /// The partitions it reads: only an append to one of them can give it more bytes.
    pub(super) watched: BTreeSet<TopicPartition>,
}

impl<S: Storage> Broker<S> {
    pub(super) fn complete_delayed_produces(
        &mut self,
        flush_id: FlushId,
        succeeded: bool,
        out: &mut Vec<Output<S::File>>,
    ) {
        let mut index = 0;
        while index < self.delayed_produces.len() {
            let delayed = &mut self.delayed_produces[index];
            if !delayed.waiting.remove(&flush_id) {
                index += 1;
                continue;
            }
            if !succeeded {
                for &(_, topic, partition) in delayed
                    .slots
                    .iter()
                    .filter(|(slot, _, _)| *slot == flush_id)
                {
                    let slot =
                        &mut delayed.response.responses[topic].partition_responses[partition];
                    slot.error_code = ErrorCode::KafkaStorageError.code();
                    slot.base_offset = -1;
                }
            }
            if delayed.waiting.is_empty() {
                let delayed = self.delayed_produces.swap_remove(index);
                out.push(
                    delayed
                        .reply_to
                        .respond(ResponseBody::message(ResponseKind::Produce(
                            delayed.response,
                        ))),
                );
            } else {
                index += 1;
            }
        }
    }

    pub(super) fn complete_topic_creations(
        &mut self,
        flush_id: FlushId,
        out: &mut Vec<Output<S::File>>,
    ) {
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.delayed_creations)
            .into_iter()
            .partition(|delayed| delayed.flush_id == flush_id);
        self.delayed_creations = waiting;
        for delayed in ready {
            out.push(
                delayed
                    .reply_to
                    .respond(ResponseBody::message(ResponseKind::CreateTopics(
                        delayed.response,
                    ))),
            );
        }
    }

    /// Answers every parked fetch whose deadline passed, or that watches a partition in
    /// `appended` and now has `min.bytes` of data. Others are not read again (Kafka keys its
    /// fetch purgatory by partition for the same reason).
    pub(super) fn complete_delayed_fetches(
        &mut self,
        now: Millis,
        appended: &BTreeSet<TopicPartition>,
        out: &mut Vec<Output<S::File>>,
    ) {
        let parked = std::mem::take(&mut self.delayed_fetches);
        for delayed in parked {
            let fed = delayed
                .watched
                .iter()
                .any(|partition| appended.contains(partition));
            if !fed && now < delayed.deadline {
                self.delayed_fetches.push(delayed);
                continue;
            }
            let (parts, bytes) =
                self.read_for_fetch(delayed.reply_to.api_version(), &delayed.request);
            let min_bytes = delayed.request.min_bytes.max(1) as usize;
            if bytes >= min_bytes || now >= delayed.deadline {
                out.push(delayed.reply_to.respond(ResponseBody::Fetch(parts)));
            } else {
                self.delayed_fetches.push(delayed);
            }
        }
    }
}
