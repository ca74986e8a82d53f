//! Produce: validate the one RecordBatch v2 per partition (header, CRC-32C, size, and every
//! record inside it, as Kafka's LogValidator does), assign
//! offsets, append, advance the high watermark, and answer by `acks`:
//! * `acks=0`: no response at all (a failed append closes the connection, as in Kafka);
//! * `acks=1`/`all`: answer after the append, or, when the append crossed `flush.messages`,
//!   after a flush covering it completes (the purgatory holds the response, and the high
//!   watermark waits for the same flush: Kafka's flush ordering);
//! * `acks=all` with fewer in-sync replicas than `min.insync.replicas`: NOT_ENOUGH_REPLICAS.

use std::collections::BTreeSet;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceResponse, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::broker::partition::Acks;
use crate::broker::replica_manager::append::{Appended, Rejection};
use crate::broker::replica_manager::purgatory::{DelayedProduce, ProduceWaiter, WaitingSlot};
use crate::broker::{Broker, BrokerEvent, Output, ReplyTo, Response, ResponseBody};
use crate::protocol::codec::Request;
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

/// A Produce response that rejects every partition of `request` with `error`, without
/// applying anything; `None` for acks=0 (or another API). The simulator's fault layer uses it to
/// play a leader change in the middle of a pipeline.
pub fn produce_rejection<F>(request: &Request, error: ErrorCode) -> Option<Response<F>> {
    let RequestKind::Produce(body) = &request.body else {
        return None;
    };
    if body.acks == 0 {
        return None;
    }
    let mut response = ProduceResponse::default();
    for topic in &body.topic_data {
        let partitions = topic
            .partition_data
            .iter()
            .map(|data| {
                PartitionProduceResponse::default()
                    .with_index(data.index)
                    .with_error_code(error.code())
                    .with_base_offset(-1)
            })
            .collect();
        response.responses.push(
            TopicProduceResponse::default()
                .with_name(topic.name.clone())
                .with_partition_responses(partitions),
        );
    }
    Some(Response::answering(
        request,
        ResponseBody::message(ResponseKind::Produce(response)),
    ))
}

/// Where a partition's answer goes in the response, and the request's acks.
#[derive(Clone, Copy)]
struct Slot {
    topic_index: usize,
    partition_index: usize,
    acks: Acks,
}

/// What the produce request collects while appending partition by partition.
#[derive(Default)]
struct ProduceProgress {
    response: ProduceResponse,
    /// Appends that must be durable before the answer (the flush policy required an fsync).
    waiting: Vec<WaitingSlot>,
    first_error: Option<String>,
    /// Partitions whose parked fetches may now read more: the high watermark moved, or (for
    /// followers' fetches) the log end.
    advanced: BTreeSet<TopicPartition>,
    /// A slot waits for followers: the request's timeout applies.
    awaits_followers: bool,
}

impl<S: Storage> Broker<S> {
    pub(in crate::broker) fn on_produce_request(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        request: Request,
        out: &mut Vec<Output<S::File>>,
    ) {
        let RequestKind::Produce(body) = request.body else {
            unreachable!("routed by api key")
        };
        let (api_version, timeout_ms) = (request.api_version, body.timeout_ms);
        let acks = Acks::from_wire(body.acks);
        let mut progress = ProduceProgress::default();
        for (topic_index, topic) in body.topic_data.into_iter().enumerate() {
            let mut topic_response = TopicProduceResponse::default().with_name(topic.name.clone());
            for (partition_index, data) in topic.partition_data.into_iter().enumerate() {
                let topic_partition = TopicPartition::new(topic.name.as_str(), data.index);
                let outcome = if let Some(acks) = acks {
                    self.append_produced(&topic_partition, data.records, acks, out)
                } else {
                    Err((
                        ErrorCode::InvalidRequiredAcks,
                        format!("acks={} is not one of -1, 0, 1", body.acks),
                    )
                        .into())
                };
                let mut entry = PartitionProduceResponse::default().with_index(data.index);
                match outcome {
                    Ok(appended) => {
                        entry.base_offset = appended.base_offset;
                        if api_version >= 5 {
                            entry.log_start_offset = appended.log_start_offset;
                        }
                        let slot = Slot {
                            topic_index,
                            partition_index,
                            acks: acks.expect("appended under valid acks"),
                        };
                        self.after_append(
                            now,
                            topic_partition,
                            slot,
                            &appended,
                            &mut progress,
                            out,
                        );
                    }
                    Err(Rejection {
                        error,
                        message,
                        record_errors,
                    }) => {
                        tracing::debug!(partition = %topic_partition, ?error, %message, "produce rejected");
                        entry.error_code = error.code();
                        entry.base_offset = -1;
                        if api_version >= 8 {
                            entry.error_message = Some(StrBytes::from_string(message.clone()));
                            entry.record_errors = record_errors;
                        }
                        progress
                            .first_error
                            .get_or_insert(format!("{topic_partition}: {message}"));
                    }
                }
                topic_response.partition_responses.push(entry);
            }
            progress.response.responses.push(topic_response);
        }
        let waiter = ProduceWaiter::Client(reply_to);
        // An invalid acks is answered (every partition with INVALID_REQUIRED_ACKS).
        let answer_by = acks.unwrap_or(Acks::Leader);
        self.answer_produce(now, waiter, answer_by, progress, timeout_ms, out);
    }

    /// The group coordinator's own append to `__consumer_offsets`: the same path as a
    /// client's acks=all produce (validation, flush policy, replication, the `timeout_ms` for
    /// followers), completing `write` instead of answering a connection.
    pub(in crate::broker) fn append_internal(
        &mut self,
        now: Millis,
        topic_partition: &TopicPartition,
        batch: Bytes,
        timeout_ms: i32,
        write: crate::broker::group::GroupWrite,
        out: &mut Vec<Output<S::File>>,
    ) {
        let mut progress = ProduceProgress::default();
        let mut entry = PartitionProduceResponse::default().with_index(topic_partition.partition);
        match self.append_produced(topic_partition, Some(batch), Acks::All, out) {
            Ok(appended) => {
                entry.base_offset = appended.base_offset;
                let slot = Slot {
                    topic_index: 0,
                    partition_index: 0,
                    acks: Acks::All,
                };
                self.after_append(
                    now,
                    topic_partition.clone(),
                    slot,
                    &appended,
                    &mut progress,
                    out,
                );
            }
            Err(rejection) => {
                tracing::warn!(partition = %topic_partition, error = ?rejection.error, message = %rejection.message, "group write rejected");
                entry.error_code = rejection.error.code();
                entry.base_offset = -1;
            }
        }
        progress.response.responses.push(
            TopicProduceResponse::default()
                .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(
                    topic_partition.topic.to_string(),
                )))
                .with_partition_responses(vec![entry]),
        );
        self.answer_produce(
            now,
            ProduceWaiter::Group(write),
            Acks::All,
            progress,
            timeout_ms,
            out,
        );
    }

    /// What follows a successful append: the flush it requires (or the roll's), a parked slot
    /// if the answer must wait, and the high watermark.
    fn after_append(
        &mut self,
        now: Millis,
        topic_partition: TopicPartition,
        slot: Slot,
        appended: &Appended,
        progress: &mut ProduceProgress,
        out: &mut Vec<Output<S::File>>,
    ) {
        if !appended.duplicate {
            out.push(BrokerEvent::appended(&topic_partition, &appended.stored).into());
            if appended.flush_required {
                self.flush_partition(now, &topic_partition, out);
            } else if let Some(new_segment) = appended.rolled {
                self.replicas
                    .flush_rolled(&topic_partition, new_segment, &mut self.flushes, out);
            }
        }
        if appended.flush_required || appended.awaits_followers {
            progress.awaits_followers |= appended.awaits_followers;
            progress.waiting.push(WaitingSlot {
                topic_partition: topic_partition.clone(),
                topic_index: slot.topic_index,
                partition_index: slot.partition_index,
                end_offset: appended.end_offset,
                durable: appended.flush_required,
                replicated: (slot.acks == Acks::All).then_some(appended.min_insync_replicas),
            });
        }
        // Followers' parked fetches read up to the log end, so an append feeds them.
        let replicated = self
            .replicas
            .get(&topic_partition)
            .is_some_and(|partition| !partition.followers().is_empty());
        if self.replicas.advance_high_watermark(&topic_partition, out) || replicated {
            progress.advanced.insert(topic_partition);
        }
    }

    /// Answers by `acks`: nothing (or a close) for acks=0; now; or once the fsyncs complete
    /// and, for acks=all, the followers have the appends.
    /// Parked fetches of the partitions that advanced are served first; a slot waiting for
    /// followers waits at most `timeout_ms`.
    fn answer_produce(
        &mut self,
        now: Millis,
        waiter: ProduceWaiter,
        acks: Acks,
        progress: ProduceProgress,
        timeout_ms: i32,
        out: &mut Vec<Output<S::File>>,
    ) {
        if !progress.advanced.is_empty() {
            self.complete_delayed_fetches(now, &progress.advanced, out);
        }
        let deadline = progress
            .awaits_followers
            .then(|| now.plus(timeout_ms.max(0) as u64));
        if let (Acks::None, ProduceWaiter::Client(reply_to)) = (acks, &waiter) {
            let connection = reply_to.connection;
            out.push(match progress.first_error {
                Some(reason) => Output::Close {
                    connection,
                    reason: format!("acks=0 produce failed: {reason}"),
                },
                None => Output::NoResponse { connection },
            });
        } else if progress.waiting.is_empty() {
            self.replicas.finish_produce(waiter, progress.response, out);
        } else {
            let partitions: BTreeSet<TopicPartition> = progress
                .waiting
                .iter()
                .map(|slot| slot.topic_partition.clone())
                .collect();
            self.replicas.purgatory.produces.push(DelayedProduce {
                waiter,
                response: progress.response,
                waiting: progress.waiting,
                deadline,
            });
            // Kafka's `tryCompleteElseWatch`: what is already satisfied (an ISR of the leader
            // alone commits an append as it lands) is answered now, not at the next change.
            for topic_partition in &partitions {
                self.replicas
                    .complete_delayed_produces(topic_partition, out);
            }
        }
    }

    /// [`ReplicaManager::append_records`](crate::broker::replica_manager::ReplicaManager::append_records),
    /// counting the append for the metrics and recording in the history a partition that the
    /// append took offline (a failed write: EIO, ENOSPC).
    fn append_produced(
        &mut self,
        topic_partition: &TopicPartition,
        records: Option<Bytes>,
        acks: Acks,
        out: &mut Vec<Output<S::File>>,
    ) -> Result<Appended, Rejection> {
        let online = |broker: &Self| {
            broker
                .replicas
                .get(topic_partition)
                .is_some_and(|partition| partition.offline().is_none())
        };
        let was_online = online(self);
        let generation = self.config.idempotence_generation;
        let config = self.metadata.config(&topic_partition.topic);
        let result =
            self.replicas
                .append_records(topic_partition, records, acks, config, generation);
        if let Some(appended) = result.as_ref().ok().filter(|appended| !appended.duplicate) {
            self.topic_counts.count_append(
                &topic_partition.topic,
                appended.stored_bytes,
                appended.stored.records_count,
            );
        }
        if was_online && !online(self) {
            if let Some(reason) = self
                .replicas
                .get(topic_partition)
                .and_then(|partition| partition.offline())
            {
                out.push(Output::Event(BrokerEvent::Offline {
                    partition: topic_partition.clone(),
                    reason: reason.to_owned(),
                }));
            }
        }
        result
    }
}
