//! Ordering: per producer process and partition, acknowledged offsets follow send order; per
//! consumer process and partition, polled offsets only move forward.
//!
//! `nonmonotonic-send` orders sends by invocation, so it sees what pipelining does: with
//! `max.in.flight.requests.per.connection > 1`, retries and no idempotence, a retried send can
//! land after a later one.

use std::collections::BTreeMap;

use super::{Analysis, CheckResult, Outcome};

/// `(invocation index, acknowledged offset, value)` of one send.
type AckedSend<'a> = (u64, i64, &'a str);

pub(super) fn check(analysis: &Analysis) -> Vec<CheckResult> {
    let mut sends: BTreeMap<(u64, &str), Vec<AckedSend<'_>>> = BTreeMap::new();
    for (value, send) in &analysis.sends {
        if let Outcome::Ok(offset) = send.outcome {
            if offset >= 0 {
                sends
                    .entry((send.process, &send.partition))
                    .or_default()
                    .push((send.invoke_index, offset, value));
            }
        }
    }
    let mut nonmonotonic_sends = Vec::new();
    for ((process, partition), mut ordered) in sends {
        ordered.sort_unstable();
        for pair in ordered.windows(2) {
            let ((_, earlier_offset, earlier), (_, later_offset, later)) = (pair[0], pair[1]);
            if later_offset <= earlier_offset {
                nonmonotonic_sends.push(format!(
                    "process {process}: {later} landed at {partition}@{later_offset}, not after {earlier}@{earlier_offset} sent before it"
                ));
            }
        }
    }
    let mut last_polled: BTreeMap<(u64, &str), (i64, &str)> = BTreeMap::new();
    let mut nonmonotonic_polls = Vec::new();
    for poll in &analysis.polls {
        let key = (poll.process, poll.partition.as_str());
        if let Some((previous, previous_value)) = last_polled.get(&key) {
            if poll.offset <= *previous {
                nonmonotonic_polls.push(format!(
                    "process {}: polled {}@{} ({}) after {}@{previous} ({previous_value})",
                    poll.process, poll.partition, poll.offset, poll.value, poll.partition
                ));
            }
        }
        last_polled.insert(key, (poll.offset, &poll.value));
    }
    vec![
        CheckResult::new("nonmonotonic-send", nonmonotonic_sends),
        CheckResult::new("nonmonotonic-poll", nonmonotonic_polls),
    ]
}
