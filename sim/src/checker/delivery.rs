//! Loss, duplication and delivery guarantees.

use std::collections::{BTreeMap, BTreeSet};

use super::{Analysis, CheckResult, Outcome, FINAL_READER};

pub(super) fn check(analysis: &Analysis) -> Vec<CheckResult> {
    let polled: BTreeSet<&str> = analysis.polls.iter().map(|poll| poll.value.as_str()).collect();
    let mut furthest: BTreeMap<&str, i64> = BTreeMap::new();
    for poll in &analysis.polls {
        let entry = furthest.entry(poll.partition.as_str()).or_insert(poll.offset);
        *entry = (*entry).max(poll.offset);
    }
    let finally_read: BTreeSet<&str> =
        analysis.polls.iter().filter(|poll| poll.node == FINAL_READER).map(|poll| poll.value.as_str()).collect();
    let mut lost = Vec::new();
    let mut unseen = Vec::new();
    for (value, send) in &analysis.sends {
        let Outcome::Ok(offset) = send.outcome else { continue };
        let place = format!("{value} acknowledged at {}@{offset}", send.partition);
        if analysis.final_reads.get(&send.partition).is_some_and(|read| read.reached_end) {
            // Durability: after healing, the final read went through the whole partition.
            if !finally_read.contains(value.as_str()) {
                let seen_before = if polled.contains(value.as_str()) { " (it was polled before it vanished)" } else { "" };
                lost.push(format!("{place}, missing from the final read of the whole partition{seen_before}"));
            }
            continue;
        }
        if polled.contains(value.as_str()) {
            continue;
        }
        let read_past = offset >= 0 && furthest.get(send.partition.as_str()).is_some_and(|furthest| *furthest >= offset);
        if read_past {
            lost.push(format!("{place}, never polled although reads went past it"));
        } else {
            unseen.push(format!("{place}, never polled"));
        }
    }
    let never_consumed = analysis.sends.iter().filter(|(value, send)| matches!(send.outcome, Outcome::Ok(_)) && !polled.contains(value.as_str()));
    let at_least_once: Vec<String> = never_consumed
        .map(|(value, send)| format!("{value} acknowledged at {}, consumed by nobody", send.partition))
        .collect();

    let mut offsets_of: BTreeMap<&str, BTreeSet<(&str, i64)>> = BTreeMap::new();
    let mut values_at: BTreeMap<(&str, i64), BTreeSet<&str>> = BTreeMap::new();
    for (value, send) in &analysis.sends {
        if let Outcome::Ok(offset) = send.outcome {
            if offset >= 0 {
                offsets_of.entry(value).or_default().insert((&send.partition, offset));
                values_at.entry((&send.partition, offset)).or_default().insert(value);
            }
        }
    }
    for poll in &analysis.polls {
        offsets_of.entry(&poll.value).or_default().insert((&poll.partition, poll.offset));
        values_at.entry((&poll.partition, poll.offset)).or_default().insert(&poll.value);
    }
    let duplicates = offsets_of
        .iter()
        .filter(|(_, places)| places.len() > 1)
        .map(|(value, places)| format!("{value} at {}", places.iter().map(|(p, o)| format!("{p}@{o}")).collect::<Vec<_>>().join(", ")))
        .collect();
    let inconsistent = values_at
        .iter()
        .filter(|(_, values)| values.len() > 1)
        .map(|((partition, offset), values)| format!("{partition}@{offset} held {}", values.iter().copied().collect::<Vec<_>>().join(" and ")))
        .collect();
    let aborted_reads = analysis
        .polls
        .iter()
        .filter(|poll| analysis.sends.get(&poll.value).is_some_and(|send| send.outcome == Outcome::Fail))
        .map(|poll| format!("{} polled by {} at {}@{} although its send definitely failed", poll.value, poll.node, poll.partition, poll.offset))
        .collect();

    let mut consumed: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for poll in &analysis.polls {
        *consumed.entry((poll.node.as_str(), poll.value.as_str())).or_default() += 1;
    }
    let at_most_once: Vec<String> = consumed
        .iter()
        .filter(|(_, count)| **count > 1)
        .map(|((node, value), count)| format!("{node} consumed {value} {count} times"))
        .collect();
    let exactly_once = at_least_once.iter().chain(&at_most_once).cloned().collect();

    vec![
        CheckResult::new("lost-write", lost),
        CheckResult::new("unseen", unseen),
        CheckResult::new("duplicate", duplicates),
        CheckResult::new("inconsistent-offsets", inconsistent),
        CheckResult::new("G1a", aborted_reads),
        CheckResult::new("at-least-once", at_least_once),
        CheckResult::new("at-most-once", at_most_once),
        CheckResult::new("exactly-once", exactly_once),
    ]
}
