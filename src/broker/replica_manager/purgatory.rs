//! Work parked until something happens (Kafka's purgatories): produce responses waiting for an
//! fsync or for the followers, fetches waiting for data (`min.bytes`) or for `max.wait.ms`, and
//! DeleteRecords waiting for their log starts to be durable.

use std::collections::BTreeSet;

use kafka_protocol::messages::{FetchRequest, ProduceResponse};

use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

use super::partition::{AppendProgress, Partition};
use crate::node_io::{ConnectionId, ReplyTo};

/// A produce response waiting for its appends to be durable (the appends crossed
/// `flush.messages`) or, with acks=all, replicated to the ISR (the high watermark passed them):
/// Kafka's `DelayedProduce`, keyed by partition and offset.
#[derive(Debug)]
pub(in crate::broker) struct DelayedProduce {
    pub(in crate::broker) waiter: ProduceWaiter,
    pub(in crate::broker) response: ProduceResponse,
    pub(in crate::broker) waiting: Vec<WaitingSlot>,
    /// The request's `timeout_ms` after arrival, when a slot waits for followers: what still
    /// waits then answers REQUEST_TIMED_OUT. `None` when only local fsyncs are awaited (Kafka
    /// flushes inside the append, so no timeout applies to them).
    pub(in crate::broker) deadline: Option<Millis>,
}

/// Who waits for a produce: a client, or the group coordinator's own write to
/// `__consumer_offsets` (completed through [`GroupCoordinator::on_write_done`](crate::broker::group::GroupCoordinator::on_write_done)).
#[derive(Debug)]
pub(in crate::broker) enum ProduceWaiter {
    Client(ReplyTo),
    Group(crate::broker::group::GroupWrite),
}

impl ProduceWaiter {
    fn is_on(&self, connection: ConnectionId) -> bool {
        matches!(self, ProduceWaiter::Client(reply_to) if reply_to.connection == connection)
    }
}

/// One partition of a delayed produce: its response slot, the offset its append ends at, and
/// what it waits for.
#[derive(Debug)]
pub(in crate::broker) struct WaitingSlot {
    pub(in crate::broker) topic_partition: TopicPartition,
    pub(in crate::broker) topic_index: usize,
    pub(in crate::broker) partition_index: usize,
    pub(in crate::broker) end_offset: i64,
    /// The append must be durable here (the flush policy required an fsync).
    pub(in crate::broker) durable: bool,
    /// acks=all: the high watermark must pass the append, and the ISR then hold at least
    /// this many replicas (else NOT_ENOUGH_REPLICAS_AFTER_APPEND).
    pub(in crate::broker) replicated: Option<usize>,
}

/// A fetch waiting for `min.bytes` of data or for its deadline.
#[derive(Debug)]
pub(in crate::broker) struct DelayedFetch {
    pub(in crate::broker) reply_to: ReplyTo,
    pub(in crate::broker) request: FetchRequest,
    pub(in crate::broker) deadline: Millis,
    /// The partitions it reads: only an append to one of them can give it more bytes.
    pub(in crate::broker) watched: BTreeSet<TopicPartition>,
}

/// Everything parked, by kind. The broker completes entries when their condition holds (an
/// fsync, a metadata record, an append or a deadline); a closed connection drops its entries.
#[derive(Debug, Default)]
pub(in crate::broker) struct Purgatory {
    pub(in crate::broker) produces: Vec<DelayedProduce>,
    pub(in crate::broker) fetches: Vec<DelayedFetch>,
    pub(in crate::broker) delete_records: Vec<DelayedDeleteRecords>,
}

/// A DeleteRecords waiting for its new log starts to be durable and published (Kafka's
/// `DelayedDeleteRecords`).
#[derive(Debug)]
pub(in crate::broker) struct DelayedDeleteRecords {
    pub(in crate::broker) reply_to: ReplyTo,
    pub(in crate::broker) response: kafka_protocol::messages::DeleteRecordsResponse,
    pub(in crate::broker) waiting: Vec<DeleteSlot>,
    /// `timeout_ms` after arrival: what still waits then answers REQUEST_TIMED_OUT.
    pub(in crate::broker) deadline: Millis,
}

/// One partition of a parked DeleteRecords and its response slot.
#[derive(Debug)]
pub(in crate::broker) struct DeleteSlot {
    pub(in crate::broker) topic_partition: TopicPartition,
    pub(in crate::broker) start: i64,
    pub(in crate::broker) topic_index: usize,
    pub(in crate::broker) partition_index: usize,
}

impl Purgatory {
    /// Drops whatever waits on `connection`: nobody is left to answer.
    pub(in crate::broker) fn drop_connection(&mut self, connection: ConnectionId) {
        self.produces
            .retain(|delayed| !delayed.waiter.is_on(connection));
        self.fetches
            .retain(|delayed| delayed.reply_to.connection != connection);
        self.delete_records
            .retain(|delayed| delayed.reply_to.connection != connection);
    }

    /// The earliest deadline of a parked fetch, DeleteRecords or replicated produce.
    pub(in crate::broker) fn next_deadline(&self) -> Option<Millis> {
        let fetches = self.fetches.iter().map(|delayed| delayed.deadline);
        let deletes = self.delete_records.iter().map(|delayed| delayed.deadline);
        let produces = self.produces.iter().filter_map(|delayed| delayed.deadline);
        fetches.chain(deletes).chain(produces).min()
    }

    /// Takes out the parked produces that `partition` (`topic_partition`'s replica) completes:
    /// each slot on it whose append is done ([`Partition::append_progress`]) is answered as
    /// appended, one that failed with its error (KAFKA_STORAGE_ERROR if the partition went
    /// offline, NOT_LEADER_OR_FOLLOWER if it is no longer led here,
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below `min.insync.replicas`); a
    /// produce none of whose slots waits any more is finished, in the order they complete.
    pub(in crate::broker) fn completed_produces<S: Storage>(
        &mut self,
        topic_partition: &TopicPartition,
        partition: &Partition<S>,
    ) -> Vec<DelayedProduce> {
        let mut finished = Vec::new();
        let mut index = 0;
        while index < self.produces.len() {
            let delayed = &mut self.produces[index];
            let response = &mut delayed.response;
            delayed.waiting.retain(|slot| {
                if &slot.topic_partition != topic_partition {
                    return true;
                }
                let error =
                    match partition.append_progress(slot.end_offset, slot.durable, slot.replicated)
                    {
                        AppendProgress::Waiting => return true,
                        AppendProgress::Done => return false,
                        AppendProgress::Failed(error) => error,
                    };
                let entry = &mut response.responses[slot.topic_index].partition_responses
                    [slot.partition_index];
                entry.error_code = error.code();
                entry.base_offset = -1;
                false
            });
            if delayed.waiting.is_empty() {
                finished.push(self.produces.swap_remove(index));
            } else {
                index += 1;
            }
        }
        finished
    }

    /// Takes out the parked produces whose `timeout_ms` passed at `now`: what still waits
    /// answers REQUEST_TIMED_OUT (Kafka's `DelayedProduce.onExpiration`).
    pub(in crate::broker) fn expired_produces(&mut self, now: Millis) -> Vec<DelayedProduce> {
        let mut expired = Vec::new();
        let mut index = 0;
        while index < self.produces.len() {
            let delayed = &self.produces[index];
            if delayed.deadline.is_none_or(|deadline| now < deadline) {
                index += 1;
                continue;
            }
            let mut delayed = self.produces.swap_remove(index);
            for slot in delayed.waiting.drain(..) {
                let entry = &mut delayed.response.responses[slot.topic_index].partition_responses
                    [slot.partition_index];
                entry.error_code = ErrorCode::RequestTimedOut.code();
                entry.base_offset = -1;
            }
            expired.push(delayed);
        }
        expired
    }
}
