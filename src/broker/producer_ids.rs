//! Producer ids for idempotent producers: InitProducerId (API 22).
//!
//! Ids are never reused, also across restarts: they are handed out only from a block whose end
//! is durable in `producer-id-block` (the offset-checkpoint format, one line
//! `__producer_ids 0 END`, written like the other checkpoints: `.tmp`, fsync, rename, directory
//! fsync). A restart continues past the durable end, so ids handed out before a crash are skipped,
//! never repeated. Kafka allocates blocks of 1,000 ids from the controller's metadata log
//! (`AllocateProducerIds`); seedlog's brokers each own the ids whose upper 32 bits are their
//! `node.id`, so no two brokers of a cluster hand out the same id without asking the
//! controller. A request that finds no durable id left waits for the next block.

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ResponseKind};

use std::collections::VecDeque;

use super::checkpoint::{CheckpointKind, CheckpointStage, RecoveryPoints};
use super::{Broker, Output, ReplyTo, ResponseBody};
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

/// The checkpoint line's partition name.
const ENTRY: &str = "__producer_ids-0";
/// Ids reserved per durable write (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub(crate) const BLOCK_SIZE: i64 = 1_000;
/// Ids a broker owns: its `node.id` in the upper bits, a counter below.
const COUNTER_BITS: u32 = 32;

/// The allocator's state. What is reserved durably is what the `producer-id-block` writer
/// has written; whether a reservation is under way is whether that writer is busy.
#[derive(Debug, Default)]
pub(crate) struct ProducerIds {
    /// The next counter to hand out.
    next: i64,
    /// Requests waiting for a durable block, oldest first.
    waiting: VecDeque<ReplyTo>,
}

impl ProducerIds {
    /// The allocator after a start: past everything reserved before.
    pub(crate) fn loaded(points: &RecoveryPoints) -> ProducerIds {
        ProducerIds {
            next: reserved_end(points),
            waiting: VecDeque::new(),
        }
    }

    /// What the checkpoint holds for a reservation up to `end`.
    fn points(end: i64) -> RecoveryPoints {
        RecoveryPoints::from([(entry(), end)])
    }
}

fn entry() -> TopicPartition {
    TopicPartition::parse(ENTRY).expect("a partition name")
}

/// The end of the reservation `points` holds (0 without one).
fn reserved_end(points: &RecoveryPoints) -> i64 {
    points.get(&entry()).copied().unwrap_or(0).max(0)
}

fn response<F>(error: ErrorCode, producer_id: i64, producer_epoch: i16) -> ResponseBody<F> {
    ResponseBody::message(ResponseKind::InitProducerId(
        InitProducerIdResponse::default()
            .with_error_code(error.code())
            .with_producer_id(producer_id.into())
            .with_producer_epoch(producer_epoch),
    ))
}

impl<S: Storage> Broker<S> {
    /// InitProducerId for an idempotent producer: a new id at epoch 0, as Kafka's coordinator
    /// answers a request without a transactional id (a producer that asks again, KIP-360's
    /// epoch bump included, gets a fresh id). Transactional ids are refused: seedlog has no
    /// transaction coordinator yet.
    pub(in crate::broker) fn on_init_producer_id_request(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        body: &InitProducerIdRequest,
        out: &mut Vec<Output<S::File>>,
    ) {
        if body.transactional_id.is_some() {
            tracing::debug!("InitProducerId with a transactional id refused: no transactions");
            out.push(reply_to.respond(response(ErrorCode::InvalidRequest, -1, -1)));
            return;
        }
        self.producer_ids.waiting.push_back(reply_to);
        self.answer_producer_ids(now, out);
    }

    /// Answers what waits while durable ids last, and reserves the next block when the durable
    /// ones run low (half a block left) or out.
    fn answer_producer_ids(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        let prefix = i64::from(self.config.node_id) << COUNTER_BITS;
        let durable_end = reserved_end(&self.producer_id_block.written);
        let writing = self.producer_id_block.stage != CheckpointStage::Idle;
        let ids = &mut self.producer_ids;
        while ids.next < durable_end {
            let Some(reply_to) = ids.waiting.pop_front() else {
                break;
            };
            let id = prefix + ids.next;
            ids.next += 1;
            out.push(reply_to.respond(response(ErrorCode::None, id, 0)));
        }
        let exhausted = durable_end + BLOCK_SIZE > 1 << COUNTER_BITS;
        if exhausted {
            for reply_to in ids.waiting.drain(..) {
                tracing::error!("this broker has handed out every producer id it owns");
                out.push(reply_to.respond(response(ErrorCode::UnknownServerError, -1, -1)));
            }
            return;
        }
        let low = durable_end - ids.next < BLOCK_SIZE / 2;
        if low && !writing {
            let end = durable_end + BLOCK_SIZE;
            self.maybe_write_checkpoint(
                now,
                CheckpointKind::ProducerIds,
                ProducerIds::points(end),
                out,
            );
        }
    }

    /// A reservation is durable (`Ok`) or failed: hand out its ids, or fail what waits with a
    /// retriable error (the next request tries again).
    pub(in crate::broker) fn on_producer_ids_written(
        &mut self,
        now: Millis,
        result: Result<(), String>,
        out: &mut Vec<Output<S::File>>,
    ) {
        match result {
            Ok(()) => self.answer_producer_ids(now, out),
            Err(error) => {
                tracing::error!(%error, "cannot reserve producer ids");
                for reply_to in self.producer_ids.waiting.drain(..) {
                    let answer = response(ErrorCode::CoordinatorLoadInProgress, -1, -1);
                    out.push(reply_to.respond(answer));
                }
            }
        }
    }
}
