//! Loss, duplication and delivery guarantees.

use std::collections::{BTreeMap, BTreeSet};

use super::{Analysis, CheckResult, Outcome, FINAL_READER};

pub(super) fn check(analysis: &Analysis) -> Vec<CheckResult> {
    let (lost, unseen) = lost_and_unseen(analysis);
    let (duplicates, inconsistent) = duplicates_and_inconsistent_offsets(analysis);
    let at_least_once = never_consumed(analysis);
    let at_most_once = consumed_more_than_once(analysis);
    let exactly_once = at_least_once.iter().chain(&at_most_once).cloned().collect();
    vec![
        CheckResult::new("lost-write", lost),
        CheckResult::new("unseen", unseen),
        CheckResult::new("duplicate", duplicates),
        CheckResult::new("inconsistent-offsets", inconsistent),
        CheckResult::new("G1a", aborted_reads(analysis)),
        CheckResult::new("at-least-once", at_least_once),
        CheckResult::new("at-most-once", at_most_once),
        CheckResult::new("exactly-once", exactly_once),
    ]
}

fn polled_values(analysis: &Analysis) -> BTreeSet<&str> {
    analysis
        .polls
        .iter()
        .map(|poll| poll.value.as_str())
        .collect()
}

/// Acknowledged values gone from the log (`lost-write`) or never reached by any read (`unseen`).
fn lost_and_unseen(analysis: &Analysis) -> (Vec<String>, Vec<String>) {
    let polled = polled_values(analysis);
    let finally_read: BTreeSet<&str> = analysis
        .polls
        .iter()
        .filter(|poll| poll.node == FINAL_READER)
        .map(|poll| poll.value.as_str())
        .collect();
    let mut furthest: BTreeMap<&str, i64> = BTreeMap::new();
    for poll in &analysis.polls {
        let entry = furthest
            .entry(poll.partition.as_str())
            .or_insert(poll.offset);
        *entry = (*entry).max(poll.offset);
    }
    let (mut lost, mut unseen) = (Vec::new(), Vec::new());
    for (value, send) in &analysis.sends {
        let Outcome::Ok(offset) = send.outcome else {
            continue;
        };
        let place = format!("{value} acknowledged at {}@{offset}", send.partition);
        let covered_by_final_read = analysis
            .final_reads
            .get(&send.partition)
            .is_some_and(|read| read.reached_end)
            && send
                .completed_index
                .zip(analysis.final_read_started)
                .is_some_and(|(acked, started)| acked < started);
        if covered_by_final_read {
            // Durability: after healing, the final read went through the whole partition.
            if !finally_read.contains(value.as_str()) {
                let seen_before = if polled.contains(value.as_str()) {
                    " (it was polled before it vanished)"
                } else {
                    ""
                };
                lost.push(format!(
                    "{place}, missing from the final read of the whole partition{seen_before}"
                ));
            }
        } else if !polled.contains(value.as_str()) {
            let read_past = offset >= 0
                && furthest
                    .get(send.partition.as_str())
                    .is_some_and(|furthest| *furthest >= offset);
            if read_past {
                lost.push(format!("{place}, never polled although reads went past it"));
            } else {
                unseen.push(format!("{place}, never polled"));
            }
        }
    }
    (lost, unseen)
}

/// Values at more than one place (`duplicate`); places holding more than one value
/// (`inconsistent-offsets`). Places come from acknowledged sends and from polls.
fn duplicates_and_inconsistent_offsets(analysis: &Analysis) -> (Vec<String>, Vec<String>) {
    let mut offsets_of: BTreeMap<&str, BTreeSet<(&str, i64)>> = BTreeMap::new();
    let mut values_at: BTreeMap<(&str, i64), BTreeSet<&str>> = BTreeMap::new();
    let acknowledged = analysis
        .sends
        .iter()
        .filter_map(|(value, send)| match send.outcome {
            Outcome::Ok(offset) if offset >= 0 => {
                Some((value.as_str(), send.partition.as_str(), offset))
            }
            _ => None,
        });
    let polled = analysis
        .polls
        .iter()
        .map(|poll| (poll.value.as_str(), poll.partition.as_str(), poll.offset));
    for (value, partition, offset) in acknowledged.chain(polled) {
        offsets_of
            .entry(value)
            .or_default()
            .insert((partition, offset));
        values_at
            .entry((partition, offset))
            .or_default()
            .insert(value);
    }
    let duplicates = offsets_of
        .iter()
        .filter(|(_, places)| places.len() > 1)
        .map(|(value, places)| {
            let places: Vec<String> = places
                .iter()
                .map(|(partition, offset)| format!("{partition}@{offset}"))
                .collect();
            format!("{value} at {}", places.join(", "))
        })
        .collect();
    let inconsistent = values_at
        .iter()
        .filter(|(_, values)| values.len() > 1)
        .map(|((partition, offset), values)| {
            let values: Vec<&str> = values.iter().copied().collect();
            format!("{partition}@{offset} held {}", values.join(" and "))
        })
        .collect();
    (duplicates, inconsistent)
}

/// Polled values whose send definitely failed (`G1a`).
fn aborted_reads(analysis: &Analysis) -> Vec<String> {
    analysis
        .polls
        .iter()
        .filter(|poll| {
            analysis
                .sends
                .get(&poll.value)
                .is_some_and(|send| send.outcome == Outcome::Fail)
        })
        .map(|poll| {
            format!(
                "{} polled by {} at {}@{} although its send definitely failed",
                poll.value, poll.node, poll.partition, poll.offset
            )
        })
        .collect()
}

/// Acknowledged values consumed by nobody (`at-least-once`).
fn never_consumed(analysis: &Analysis) -> Vec<String> {
    let polled = polled_values(analysis);
    analysis
        .sends
        .iter()
        .filter(|(value, send)| {
            matches!(send.outcome, Outcome::Ok(_)) && !polled.contains(value.as_str())
        })
        .map(|(value, send)| {
            format!(
                "{value} acknowledged at {}, consumed by nobody",
                send.partition
            )
        })
        .collect()
}

/// Values a consumer (across its restarts) consumed more than once (`at-most-once`).
fn consumed_more_than_once(analysis: &Analysis) -> Vec<String> {
    let mut consumed: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for poll in &analysis.polls {
        *consumed
            .entry((poll.node.as_str(), poll.value.as_str()))
            .or_default() += 1;
    }
    consumed
        .iter()
        .filter(|(_, count)| **count > 1)
        .map(|((node, value), count)| format!("{node} consumed {value} {count} times"))
        .collect()
}
