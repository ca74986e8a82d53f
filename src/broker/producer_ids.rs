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

use super::checkpoint::{CheckpointStage, CheckpointWriter, RecoveryPoints};
use crate::node_io::{Output, ReplyTo, ResponseBody};
use crate::protocol::ErrorCode;
use crate::types::{Millis, TopicPartition};

/// The checkpoint line's partition name.
const ENTRY: &str = "__producer_ids-0";
/// Ids reserved per durable write (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub(crate) const BLOCK_SIZE: i64 = 1_000;
/// Ids a broker owns: its `node.id` in the upper bits, a counter below.
const COUNTER_BITS: u32 = 32;

/// The producer-id allocator (Kafka's `ProducerIdManager`): it answers InitProducerId from
/// durable blocks and asks for the next block to be written (its `producer-id-block` writer,
/// driven by the broker's checkpoint machinery) when the durable ids run low. Whether a
/// reservation is under way is whether that writer is busy.
#[derive(Debug)]
pub(crate) struct ProducerIdManager {
    /// This broker's ids: its `node.id` in the upper bits.
    prefix: i64,
    /// The `producer-id-block` checkpoint: what is reserved durably is what it has written.
    pub(crate) block: CheckpointWriter,
    /// The next counter to hand out.
    next: i64,
    /// Requests waiting for a durable block, oldest first.
    waiting: VecDeque<ReplyTo>,
}

impl ProducerIdManager {
    /// The allocator of `node_id` after a start at `now`: past everything reserved before
    /// (`points`, the checkpoint as read).
    pub(crate) fn loaded(node_id: i32, now: Millis, points: RecoveryPoints) -> ProducerIdManager {
        ProducerIdManager {
            prefix: i64::from(node_id) << COUNTER_BITS,
            next: reserved_end(&points),
            // Written on demand, never on a timer (its deadline is not the broker's).
            block: CheckpointWriter::new(0, now, points),
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

impl ProducerIdManager {
    /// InitProducerId for an idempotent producer: a new id at epoch 0, as Kafka's coordinator
    /// answers a request without a transactional id (a producer that asks again, KIP-360's
    /// epoch bump included, gets a fresh id). Transactional ids are refused: seedlog has no
    /// transaction coordinator yet. `Some(points)`: the block reservation to write now.
    pub(crate) fn on_init_producer_id_request<F>(
        &mut self,
        reply_to: ReplyTo,
        body: &InitProducerIdRequest,
        out: &mut Vec<Output<F>>,
    ) -> Option<RecoveryPoints> {
        if body.transactional_id.is_some() {
            tracing::debug!("InitProducerId with a transactional id refused: no transactions");
            out.push(reply_to.respond(response(ErrorCode::InvalidRequest, -1, -1)));
            return None;
        }
        self.waiting.push_back(reply_to);
        self.answer(out)
    }

    /// Answers what waits while durable ids last; `Some(points)`: the next block to reserve,
    /// when the durable ids run low (half a block left) or out and no reservation is under way.
    fn answer<F>(&mut self, out: &mut Vec<Output<F>>) -> Option<RecoveryPoints> {
        let durable_end = reserved_end(&self.block.written);
        let writing = self.block.stage != CheckpointStage::Idle;
        while self.next < durable_end {
            let Some(reply_to) = self.waiting.pop_front() else {
                break;
            };
            let id = self.prefix + self.next;
            self.next += 1;
            out.push(reply_to.respond(response(ErrorCode::None, id, 0)));
        }
        let exhausted = durable_end + BLOCK_SIZE > 1 << COUNTER_BITS;
        if exhausted {
            for reply_to in self.waiting.drain(..) {
                tracing::error!("this broker has handed out every producer id it owns");
                out.push(reply_to.respond(response(ErrorCode::UnknownServerError, -1, -1)));
            }
            return None;
        }
        let low = durable_end - self.next < BLOCK_SIZE / 2;
        (low && !writing).then(|| ProducerIdManager::points(durable_end + BLOCK_SIZE))
    }

    /// A reservation is durable (`Ok`) or failed: hand out its ids, or fail what waits with a
    /// retriable error (the next request tries again). `Some(points)`: the next block to
    /// reserve.
    pub(crate) fn on_written<F>(
        &mut self,
        result: Result<(), String>,
        out: &mut Vec<Output<F>>,
    ) -> Option<RecoveryPoints> {
        match result {
            Ok(()) => self.answer(out),
            Err(error) => {
                tracing::error!(%error, "cannot reserve producer ids");
                for reply_to in self.waiting.drain(..) {
                    let answer = response(ErrorCode::CoordinatorLoadInProgress, -1, -1);
                    out.push(reply_to.respond(answer));
                }
                None
            }
        }
    }
}
