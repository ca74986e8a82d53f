//! Answering what the [`Purgatory`](super::purgatory::Purgatory) says is complete or expired, and reading parked fetches
//! again when their partitions move.

use std::collections::BTreeSet;

use kafka_protocol::messages::{ProduceResponse, ResponseKind};

use super::purgatory::ProduceWaiter;
use super::ReplicaManager;
use crate::broker::metadata_cache::MetadataCache;
use crate::node_io::{Output, ResponseBody};
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

impl<S: Storage> ReplicaManager<S> {
    /// Answers the parked produces whose appends to `topic_partition` are now durable (and,
    /// for acks=all, below the high watermark), or that failed there
    /// ([`Purgatory::completed_produces`](super::purgatory::Purgatory::completed_produces)).
    pub(in crate::broker) fn complete_delayed_produces(
        &mut self,
        topic_partition: &TopicPartition,
        out: &mut Vec<Output<S::File>>,
    ) {
        let Some(partition) = self.partitions.get(topic_partition) else {
            return;
        };
        for delayed in self
            .purgatory
            .completed_produces(topic_partition, partition)
        {
            self.finish_produce(delayed.waiter, delayed.response, out);
        }
    }

    /// Answers the parked produces whose `timeout_ms` passed ([`Purgatory::expired_produces`](super::purgatory::Purgatory::expired_produces)).
    pub(in crate::broker) fn time_out_delayed_produces(
        &mut self,
        now: Millis,
        out: &mut Vec<Output<S::File>>,
    ) {
        for delayed in self.purgatory.expired_produces(now) {
            self.finish_produce(delayed.waiter, delayed.response, out);
        }
    }

    /// Answers a finished produce: the client's response, or (for the coordinator's own
    /// write) the first partition's error queued for the group coordinator's `on_write_done` at
    /// the end of this input.
    pub(in crate::broker) fn finish_produce(
        &mut self,
        waiter: ProduceWaiter,
        response: ProduceResponse,
        out: &mut Vec<Output<S::File>>,
    ) {
        match waiter {
            ProduceWaiter::Client(reply_to) => {
                out.push(reply_to.respond(ResponseBody::message(ResponseKind::Produce(response))))
            }
            ProduceWaiter::Group(write) => {
                let error = response
                    .responses
                    .first()
                    .and_then(|topic| topic.partition_responses.first())
                    .map_or(ErrorCode::UnknownServerError, |entry| {
                        ErrorCode::from_code(entry.error_code)
                    });
                self.finished_group_writes.push((write, error));
            }
        }
    }

    /// Answers every parked fetch whose deadline passed, or that watches a partition in
    /// `advanced` (its high watermark moved) and now has `min.bytes` of data. Others are not
    /// read again (Kafka keys its fetch purgatory by partition for the same reason).
    pub(in crate::broker) fn complete_delayed_fetches(
        &mut self,
        now: Millis,
        advanced: &BTreeSet<TopicPartition>,
        metadata: &MetadataCache<S>,
        out: &mut Vec<Output<S::File>>,
    ) {
        let parked = std::mem::take(&mut self.purgatory.fetches);
        for delayed in parked {
            let fed = delayed
                .watched
                .iter()
                .any(|partition| advanced.contains(partition));
            if !fed && now < delayed.deadline {
                self.purgatory.fetches.push(delayed);
                continue;
            }
            let (parts, bytes) =
                self.read_served(delayed.reply_to.api_version(), &delayed.request, metadata);
            let min_bytes = delayed.request.min_bytes.max(1) as usize;
            if bytes >= min_bytes || now >= delayed.deadline {
                out.push(delayed.reply_to.respond(ResponseBody::Fetch(parts)));
            } else {
                self.purgatory.fetches.push(delayed);
            }
        }
    }
}
