//! What brokers recorded about their partitions: the high watermark and the log start offset of
//! a partition on a broker never go backwards, across its restarts included. A decrease is
//! reported with the truncation that came with it, if any: under a flush policy that fsyncs
//! before acknowledging (`flush.messages=1`) there must be none, because consumers only ever
//! saw durable records; under Kafka's default policy a power loss can take back what consumers
//! read, and scenarios allow it there, saying why.
//!
//! Answers must keep their requests' contracts: `contract` fires on every breach a client
//! recorded (the consumer core judges each Fetch answer against the limits and the wait it
//! asked for; the final reader asks ListOffsets for timestamps it read and judges the answers
//! against its read). Delivery checks cannot see a wrong size, a fetch answered early or a
//! wrong timestamp lookup: the same records arrive either way.
//!
//! In a cluster, a restarted replica's high watermark starts over from its recovery point (Kafka's
//! from its periodic high-watermark checkpoint): a decrease across a restart of a replicated
//! partition is not a violation there; what consumers may rely on is judged by the leader's
//! answers (the delivery and poll checks) and by the cluster invariants below.
//!
//! Leadership is a controller's decision: `one-leader` fires when two brokers claimed the same
//! partition in the same leader epoch.
//!
//! The cluster invariants (`leader-in-isr`, `hw-within-isr`, `strong-isr`, `committed-lost`)
//! are judged while the run goes, by the monitor that mirrors every replica's log
//! (`cluster_monitor`); the history carries each violation it saw as an `invariant` operation.
//!
//! And the cluster as a whole must make progress once it is healed: `stalled` (the liveness
//! check) fires when the harness recorded that producers were still sending three quarters of
//! the way through the liveness phase, or when a consumer had not read an assigned partition to
//! the end of the final log by the end of it. Safety checks alone pass a broker that
//! acknowledges nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

use super::{Analysis, Check, CheckResult, Samples, FINAL_READER};
use crate::history::{Body, Op, OpType, Partition, Process};

pub(super) fn check(analysis: &Analysis, ops: &[Op]) -> Vec<CheckResult> {
    vec![
        CheckResult::new(
            Check::HwMonotonic,
            backwards(analysis, &analysis.high_watermarks, "high watermark"),
        ),
        CheckResult::new(
            Check::LogStartMonotonic,
            backwards(analysis, &analysis.log_starts, "log start offset"),
        ),
        CheckResult::new(
            Check::Contract,
            analysis
                .breaches
                .iter()
                .map(|(index, node, detail)| format!("{node} received (op {index}): {detail}"))
                .collect(),
        ),
        CheckResult::new(Check::OneLeader, split_leaderships(analysis)),
        invariant(analysis, Check::LeaderInIsr),
        invariant(analysis, Check::HwWithinIsr),
        invariant(analysis, Check::StrongIsr),
        invariant(analysis, Check::CommittedLost),
        invariant(analysis, Check::UnfencedCommit),
        CheckResult::new(Check::Stalled, stalled(analysis, ops)),
    ]
}

/// Who did not make progress once every fault was healed: producers still sending three
/// quarters of the way through the liveness phase, and consumers that had not read their
/// partitions to the end of the final log by the end of it (naming the partition, where the
/// consumer stood and where the log ended).
fn stalled(analysis: &Analysis, ops: &[Op]) -> Vec<String> {
    let mut stuck: Vec<String> = analysis
        .unfinished_producers
        .iter()
        .map(|(index, producers)| {
            format!(
                "producers {producers} had not finished their sends three quarters of the way \
                 through the liveness phase, with every fault healed (op {index})"
            )
        })
        .collect();
    let corrupt = stopped_by_corruption(ops);
    stuck.extend(
        lagging_consumers(ops)
            .into_iter()
            .filter(|(node, partition, at, _)| {
                // It stands before a batch its broker reports corrupt: a Kafka consumer cannot
                // read past that without a seek (the loss is `lost-write`'s), and the final
                // reader, which steps over such batches, read further.
                corrupt
                    .get(&(&**node, &**partition))
                    .is_none_or(|position| position <= at)
            })
            .map(|(node, partition, at, last)| {
                format!(
                    "consumer {node} had read {partition} only to offset {at} by the end of the \
                     liveness phase; the log ends at {last}"
                )
            }),
    );
    stuck
}

/// Where each consumer's last poll error of each partition, if it was `CORRUPT_MESSAGE`, said
/// the consumer stood: `(consumer, partition) -> position`.
fn stopped_by_corruption(ops: &[Op]) -> BTreeMap<(&str, &str), i64> {
    let mut stopped = BTreeMap::new();
    for op in ops {
        let (Process::Client(_), Body::Poll { errors, .. }) = (&op.process, &op.body) else {
            continue;
        };
        let node = op.node.as_deref().unwrap_or("");
        if node == FINAL_READER {
            continue;
        }
        for error in errors {
            let key = (node, &*error.partition);
            if error.error == "CORRUPT_MESSAGE" {
                stopped.insert(key, error.position);
            } else {
                stopped.remove(&key);
            }
        }
    }
    stopped
}

/// Each assigned consumer's partition whose last record in the final log it had not polled:
/// `(consumer, partition, highest offset polled or -1, last offset of the final log)`, in
/// consumer and partition order.
///
/// It keeps only what the answer needs, not a full [`Analysis`]: the harness asks the same
/// question every 100 ms of the liveness phase, of a [`ConsumerLag`] fed as the history grows.
pub(super) fn lagging_consumers(ops: &[Op]) -> Vec<(Arc<str>, Partition, i64, i64)> {
    let mut lag = ConsumerLag::default();
    lag.feed(ops);
    lag.lagging()
        .map(|(node, partition, at, last)| (Arc::clone(node), Arc::clone(partition), at, last))
        .collect()
}

/// What [`lagging_consumers`] keeps of a history, fed the operations recorded since it was last
/// fed: the harness asks every 100 ms of the liveness phase
/// ([`ConsumerLag::caught_up`]), and each time reads only the new operations.
#[derive(Debug, Default)]
pub struct ConsumerLag {
    /// How many operations it has read.
    fed: usize,
    assigned: BTreeSet<(Arc<str>, Partition)>,
    /// The highest offset each consumer polled in each partition.
    reached: BTreeMap<(Arc<str>, Partition), i64>,
    /// The highest offset the final reader read in each partition.
    last: BTreeMap<Partition, i64>,
}

impl ConsumerLag {
    /// Reads the operations of `ops` past those it read before (`ops` is the same history, grown).
    pub fn feed(&mut self, ops: &[Op]) {
        for op in ops.get(self.fed..).unwrap_or_default() {
            if !matches!(op.process, Process::Client(_)) {
                continue;
            }
            let node = op.node.as_deref().unwrap_or("");
            match &op.body {
                Body::Poll { records, .. } if op.op_type == OpType::Ok => {
                    for (partition, entries) in records {
                        let Some(highest) = entries.iter().map(|(offset, _)| *offset).max() else {
                            continue;
                        };
                        if node == FINAL_READER {
                            raise(&mut self.last, partition, highest);
                        } else {
                            let key = (
                                op.node.clone().unwrap_or_else(|| "".into()),
                                Arc::clone(partition),
                            );
                            raise(&mut self.reached, &key, highest);
                        }
                    }
                }
                Body::Position {
                    partition, offset, ..
                } if node != FINAL_READER => {
                    // A reset or seek moves the position: everything below it is behind the
                    // consumer (what it skipped is `at-least-once`'s business, not liveness's).
                    let key = (
                        op.node.clone().unwrap_or_else(|| "".into()),
                        Arc::clone(partition),
                    );
                    raise(&mut self.reached, &key, offset - 1);
                }
                Body::Assign { partitions } if node != FINAL_READER => {
                    let node = op.node.clone().unwrap_or_else(|| "".into());
                    self.assigned.extend(
                        partitions
                            .iter()
                            .map(|partition| (Arc::clone(&node), Arc::clone(partition))),
                    );
                }
                _ => {}
            }
        }
        self.fed = self.fed.max(ops.len());
    }

    /// Whether every assigned consumer has polled the last record the final read found in each
    /// of its partitions, after reading the operations recorded since the last call.
    pub fn caught_up(&mut self, ops: &[Op]) -> bool {
        self.feed(ops);
        self.lagging().next().is_none()
    }

    /// `(consumer, partition, highest offset polled or -1, last offset of the final log)` of
    /// each assigned consumer's partition whose last record it has not polled, in consumer and
    /// partition order.
    fn lagging(&self) -> impl Iterator<Item = (&Arc<str>, &Partition, i64, i64)> {
        self.assigned.iter().filter_map(|key| {
            let last = *self.last.get(&key.1)?;
            let at = self.reached.get(key).copied().unwrap_or(-1);
            (at < last).then_some((&key.0, &key.1, at, last))
        })
    }
}

/// Raises `key`'s entry to `offset` (inserting it if absent).
fn raise<K: Ord + Clone>(map: &mut BTreeMap<K, i64>, key: &K, offset: i64) {
    match map.get_mut(key) {
        Some(highest) => *highest = (*highest).max(offset),
        None => {
            map.insert(key.clone(), offset);
        }
    }
}

/// A cluster invariant as the simulator's monitor judged it after every broker step.
fn invariant(analysis: &Analysis, check: Check) -> CheckResult {
    let violations = analysis
        .invariants
        .get(&check)
        .map_or_else(Vec::new, |found| {
            found
                .iter()
                .map(|(index, partition, detail)| format!("{partition}: {detail} (op {index})"))
                .collect()
        });
    CheckResult::new(check, violations)
}

/// At most one broker leads a partition in a leader epoch (Kafka's leader epochs are the
/// fencing tokens of KIP-101 and KIP-320: two leaders with one epoch would let both write
/// batches that followers cannot tell apart).
fn split_leaderships(analysis: &Analysis) -> Vec<String> {
    analysis
        .leaders
        .iter()
        .filter_map(|((partition, epoch), claims)| {
            let first = &claims.first()?.1;
            let other = claims.iter().find(|(_, node)| node != first)?;
            Some(format!(
                "{partition} in leader epoch {epoch}: led by {first} and by {} (op {})",
                other.1, other.0
            ))
        })
        .collect()
}

/// The reason a broker's start-up gives for what recovery kept (src/broker/startup.rs).
const RESTART_RECOVERY: &str = "recovery on start-up";

/// Whether brokers claimed leadership of `partition` (a replicated partition in a cluster).
fn replicated(analysis: &Analysis, partition: &Partition) -> bool {
    analysis.leaders.keys().any(|(led, _)| led == partition)
}

fn backwards(analysis: &Analysis, samples: &Samples, what: &str) -> Vec<String> {
    let mut violations = Vec::new();
    for ((node, partition), values) in samples {
        for pair in values.windows(2) {
            let ((before_index, before), (after_index, after)) = (pair[0], pair[1]);
            if after >= before {
                continue;
            }
            let mut text =
                format!("{node}: {partition}'s {what} went from {before} back to {after}");
            // Every truncation of this node between the two samples, not the first alone: a
            // follower may truncate as a follower and then restart, and only the restart's
            // recovery explains the drop.
            let between: Vec<_> = analysis
                .truncations
                .get(partition)
                .into_iter()
                .flatten()
                .filter(|truncation| {
                    *truncation.node == **node
                        && before_index < truncation.index
                        && truncation.index < after_index
                })
                .collect();
            let restarted = between
                .iter()
                .any(|truncation| truncation.reason.starts_with(RESTART_RECOVERY));
            if restarted && what == "high watermark" && replicated(analysis, partition) {
                // A restarted replica starts from what it knows for sure (its recovery point),
                // as Kafka's starts from its periodic high-watermark checkpoint; the leader's
                // answers and the cluster invariants judge what consumers may rely on.
                continue;
            }
            let truncation = between.first();
            if let Some(truncation) = truncation {
                let _ = write!(
                    text,
                    " ({}, the log ending at {})",
                    truncation.reason, truncation.from_offset
                );
            }
            violations.push(text);
        }
    }
    violations
}
