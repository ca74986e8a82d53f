//! The router's side of the purgatory: answering what the [`Purgatory`](super::purgatory::Purgatory) says is complete or
//! expired, and reading parked fetches again when their partitions move.

use std::collections::BTreeSet;

use kafka_protocol::messages::{ProduceResponse, ResponseKind};

use super::purgatory::ProduceWaiter;
use super::{Broker, FlushId, Output, ResponseBody};
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

impl<S: Storage> Broker<S> {
    /// Answers the parked produces whose appends to `topic_partition` are now durable (and,
    /// for acks=all, below the high watermark), or that failed there
    /// ([`Purgatory::completed_produces`]).
    pub(super) fn complete_delayed_produces(
        &mut self,
        topic_partition: &TopicPartition,
        out: &mut Vec<Output<S::File>>,
    ) {
        let Some(partition) = self.replicas.get(topic_partition) else {
            return;
        };
        for delayed in self
            .purgatory
            .completed_produces(topic_partition, partition)
        {
            self.finish_produce(delayed.waiter, delayed.response, out);
        }
    }

    /// Answers the parked produces whose `timeout_ms` passed ([`Purgatory::expired_produces`]).
    pub(super) fn time_out_delayed_produces(
        &mut self,
        now: Millis,
        out: &mut Vec<Output<S::File>>,
    ) {
        for delayed in self.purgatory.expired_produces(now) {
            self.finish_produce(delayed.waiter, delayed.response, out);
        }
    }

    /// Answers a finished produce: the client's response, or (for the coordinator's own
    /// write) the first partition's error queued for the group coordinator's `on_write_done` at the end
    /// of this input.
    pub(super) fn finish_produce(
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

    /// Answers the CreateTopics whose records `flush_id` made durable.
    pub(super) fn complete_topic_creations(
        &mut self,
        flush_id: FlushId,
        out: &mut Vec<Output<S::File>>,
    ) {
        for delayed in self.purgatory.completed_creations(flush_id) {
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
    /// `advanced` (its high watermark moved) and now has `min.bytes` of data. Others are not read again (Kafka keys its
    /// fetch purgatory by partition for the same reason).
    pub(super) fn complete_delayed_fetches(
        &mut self,
        now: Millis,
        advanced: &BTreeSet<TopicPartition>,
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
                self.read_for_fetch(delayed.reply_to.api_version(), &delayed.request);
            let min_bytes = delayed.request.min_bytes.max(1) as usize;
            if bytes >= min_bytes || now >= delayed.deadline {
                out.push(delayed.reply_to.respond(ResponseBody::Fetch(parts)));
            } else {
                self.purgatory.fetches.push(delayed);
            }
        }
    }
}
