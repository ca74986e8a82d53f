//! Ordering: per producer process and partition, acknowledged offsets follow send order; per
//! consumer incarnation and partition, polled offsets only move forward and never jump over
//! records of the final log unless the consumer was repositioned (a reset or a seek).
//!
//! `truncation-skip` is KIP-320's anomaly: a consumer read a record at an offset that a
//! truncation then gave to another record, and never read that other one: its position stayed
//! past the rewritten range (a consumer that validates its position after a leader change moves
//! back and reads it).
//!
//! `nonmonotonic-send` orders sends by invocation, so it sees what pipelining does: with
//! `max.in.flight.requests.per.connection > 1`, retries and no idempotence, a retried send can
//! land after a later one. An earlier send whose offset a recorded truncation took back before
//! the later send was acknowledged explains a reused offset.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{Analysis, Check, CheckResult, Outcome, PollRecord};
use crate::history::{Partition, Value};

pub(super) fn check(analysis: &Analysis) -> Vec<CheckResult> {
    let streams = streams(analysis);
    vec![
        CheckResult::new(Check::NonmonotonicSend, nonmonotonic_sends(analysis)),
        CheckResult::new(Check::NonmonotonicPoll, nonmonotonic_polls(&streams)),
        CheckResult::new(Check::PollSkip, poll_skips(analysis, &streams)),
        CheckResult::new(Check::TruncationSkip, truncation_skips(analysis)),
    ]
}

/// Records a consumer read at an offset where the final log holds another record, which no
/// incarnation of that consumer ever read.
fn truncation_skips(analysis: &Analysis) -> Vec<String> {
    let mut violations = Vec::new();
    let mut reported = BTreeSet::new();
    // A poll's records share a partition copy: its final log is looked up once a run.
    let mut log: Option<(&Partition, Option<&BTreeMap<i64, Value>>)> = None;
    for poll in &analysis.polls {
        let final_log = match log {
            Some((partition, final_log)) if Arc::ptr_eq(partition, &poll.partition) => final_log,
            _ => {
                let final_log = analysis.final_logs.get(&poll.partition);
                log = Some((&poll.partition, final_log));
                final_log
            }
        };
        let Some(kept) = final_log.and_then(|log| log.get(&poll.offset)) else {
            continue;
        };
        if *kept == poll.value {
            continue;
        }
        let read_it = analysis
            .consumers
            .get(&poll.node)
            .is_some_and(|consumer| consumer.consumed.contains(kept));
        if !read_it && reported.insert((Arc::clone(&poll.node), *kept)) {
            violations.push(format!(
                "{} (process {}) read {} at {}@{}, where the final log holds {}, and never read {}: its position stayed past the rewritten offset",
                poll.node, poll.process, poll.value, poll.partition, poll.offset, kept, kept
            ));
        }
    }
    violations
}

/// `(invocation index, completion index, acknowledged offset, value)` of one send.
type AckedSend = (u64, u64, i64, Value);

fn nonmonotonic_sends(analysis: &Analysis) -> Vec<String> {
    let mut sends: BTreeMap<(u64, &Partition), Vec<AckedSend>> = BTreeMap::new();
    // Sends come by value, so by process, and a producer's sends share a few partition copies:
    // runs of one (process, copy) are collected, then filed under their key at once.
    let mut run: Option<(u64, &Partition, Vec<AckedSend>)> = None;
    for (value, send) in analysis.sends.iter() {
        let (Outcome::Ok(offset), Some(acked)) = (send.outcome, send.completed_index) else {
            continue;
        };
        if offset < 0 {
            continue;
        }
        let same = run.as_ref().is_some_and(|(process, partition, _)| {
            *process == send.process && Arc::ptr_eq(partition, &send.partition)
        });
        if !same {
            if let Some((process, partition, acked_sends)) = run.take() {
                sends
                    .entry((process, partition))
                    .or_default()
                    .extend(acked_sends);
            }
            run = Some((send.process, &send.partition, Vec::new()));
        }
        if let Some((_, _, acked_sends)) = run.as_mut() {
            acked_sends.push((send.invoke_index, acked, offset, value));
        }
    }
    if let Some((process, partition, acked_sends)) = run {
        sends
            .entry((process, partition))
            .or_default()
            .extend(acked_sends);
    }
    let mut violations = Vec::new();
    for ((process, partition), mut ordered) in sends {
        ordered.sort_unstable();
        for pair in ordered.windows(2) {
            let (
                (_, earlier_acked, earlier_offset, earlier),
                (_, later_acked, later_offset, later),
            ) = (pair[0], pair[1]);
            if later_offset > earlier_offset {
                continue;
            }
            let explained = earlier_acked < later_acked
                && analysis
                    .truncation_between(partition, earlier_offset, earlier_acked, later_acked)
                    .is_some();
            if !explained {
                violations.push(format!(
                    "process {process}: {later} landed at {partition}@{later_offset}, not after {earlier}@{earlier_offset} sent before it"
                ));
            }
        }
    }
    violations
}

/// Each consumer incarnation's records of each partition, in the order it polled them.
type Streams<'a> = BTreeMap<(u64, &'a Partition), Vec<&'a PollRecord>>;

/// The [`Streams`] of a history, built once for the checks that walk them.
fn streams(analysis: &Analysis) -> Streams<'_> {
    let mut streams = Streams::new();
    let polls: Vec<&PollRecord> = analysis.polls.iter().chain(&analysis.final_polls).collect();
    // A poll's records are adjacent and share a partition copy: one lookup a run.
    for run in
        polls.chunk_by(|a, b| a.process == b.process && Arc::ptr_eq(&a.partition, &b.partition))
    {
        streams
            .entry((run[0].process, &run[0].partition))
            .or_default()
            .extend_from_slice(run);
    }
    for stream in streams.values_mut() {
        stream.sort_by_key(|poll| poll.index); // stable: a poll's records keep their order
    }
    streams
}

fn nonmonotonic_polls(streams: &Streams<'_>) -> Vec<String> {
    let mut violations = Vec::new();
    for (&(process, partition), stream) in streams {
        for pair in stream.windows(2) {
            let (previous, next) = (pair[0], pair[1]);
            if next.offset <= previous.offset {
                violations.push(format!(
                    "{} (process {process}): polled {partition}@{} ({}) after {partition}@{} ({})",
                    next.node, next.offset, next.value, previous.offset, previous.value
                ));
            }
        }
    }
    violations
}

/// Whether the incarnation was repositioned in `partition` between two history indexes.
fn repositioned(
    analysis: &Analysis,
    process: u64,
    partition: &Partition,
    from: u64,
    to: u64,
) -> bool {
    analysis.repositioned.iter().any(|moved| {
        moved.process == process
            && &moved.partition == partition
            && from <= moved.index
            && moved.index <= to
    })
}

fn poll_skips(analysis: &Analysis, streams: &Streams<'_>) -> Vec<String> {
    let mut violations = Vec::new();
    for (&(process, partition), stream) in streams {
        let Some(final_log) = analysis.final_logs.get(partition) else {
            continue; // without a final log a gap cannot be told from offsets that hold no record
        };
        for pair in stream.windows(2) {
            let (previous, next) = (pair[0], pair[1]);
            if next.offset <= previous.offset + 1
                || repositioned(analysis, process, partition, previous.index, next.index)
            {
                continue;
            }
            let skipped = final_log.range(previous.offset + 1..next.offset).count();
            if skipped > 0 {
                violations.push(format!(
                    "{} (process {process}): polled {partition}@{} then {partition}@{}, skipping {skipped} record(s) of the final log",
                    next.node, previous.offset, next.offset
                ));
            }
        }
    }
    violations
}
