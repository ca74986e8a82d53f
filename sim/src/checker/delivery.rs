//! Loss, duplication and delivery guarantees.
//!
//! The final log (what the final reader read from each partition after healing) backs
//! `lost-write`: an acknowledged value must sit at its acknowledged offset there, and a value a
//! consumer observed counts as committed whatever its send's outcome (as in Jepsen) unless a
//! recorded truncation took it back. The delivery verdicts are judged at the consumers, never
//! at the final reader: `at-least-once` asks whether every acknowledged value of a consumer's
//! assignment reached that consumer, `at-most-once` whether an incarnation consumed a value twice.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use super::{Analysis, Check, CheckResult, Coverage, Outcome, PollRecord, SendInfo};
use crate::history::{Partition, Value};

pub(super) fn check(analysis: &Analysis) -> Vec<CheckResult> {
    let ranks = Ranks::new(analysis);
    let observed = observations(analysis, &ranks);
    let (lost, unseen) = lost_and_unseen(analysis, &ranks);
    let at_least_once = never_consumed(analysis);
    let at_most_once = consumed_more_than_once(analysis);
    let exactly_once = at_least_once.iter().chain(&at_most_once).cloned().collect();
    vec![
        CheckResult::new(Check::LostWrite, lost),
        CheckResult::new(Check::Unseen, unseen),
        CheckResult::new(Check::Duplicate, duplicates(analysis, &observed)),
        CheckResult::new(
            Check::InconsistentOffsets,
            inconsistent_offsets(analysis, &observed),
        ),
        CheckResult::new(Check::G1a, aborted_reads(analysis)),
        CheckResult::new(Check::AtLeastOnce, at_least_once),
        CheckResult::new(Check::AtMostOnce, at_most_once),
        CheckResult::new(Check::ExactlyOnce, exactly_once),
        CheckResult::new(Check::FailedSend, failed_sends(analysis)),
    ]
}

/// A partition with its rank in name order. Sorting by rank sorts as by name, without comparing
/// strings: the checks below sort tens of thousands of observations a run, and comparing
/// partition names was most of that time.
#[derive(Debug, Clone, Copy)]
struct Ranked<'a> {
    rank: u32,
    partition: &'a Partition,
}

impl PartialEq for Ranked<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.rank == other.rank
    }
}

impl Eq for Ranked<'_> {}

impl PartialOrd for Ranked<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank.cmp(&other.rank)
    }
}

impl fmt::Display for Ranked<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.partition.fmt(f)
    }
}

/// Every partition the sends, polls and final reads name, ranked by name.
struct Ranks<'a>(BTreeMap<&'a str, u32>);

impl<'a> Ranks<'a> {
    fn new(analysis: &'a Analysis) -> Ranks<'a> {
        let mut names: BTreeMap<&'a str, u32> = BTreeMap::new();
        let sent = analysis.sends.values().map(|send| &send.partition);
        let polled = analysis.polls.iter().chain(&analysis.final_polls);
        for partition in sent.chain(polled.map(|poll| &poll.partition)) {
            names.entry(&**partition).or_insert(0);
        }
        for (rank, slot) in (0..).zip(names.values_mut()) {
            *slot = rank;
        }
        Ranks(names)
    }

    fn of(&self, partition: &'a Partition) -> Ranked<'a> {
        let rank = self.0.get(&**partition).copied();
        Ranked {
            rank: rank.expect("every partition of the analysis is ranked"),
            partition,
        }
    }
}

/// Sends that ended in a definite failure (`fail`): the producer gave up on a record it knows
/// was never written. Safety checks pass a producer that fails everything; a scenario whose
/// faults can exhaust retries or a timeout allows this, saying why.
fn failed_sends(analysis: &Analysis) -> Vec<String> {
    analysis
        .sends
        .iter()
        .filter(|(_, send)| send.outcome == Outcome::Fail)
        .map(|(value, send)| {
            format!(
                "{value} to {} failed definitely (op {})",
                send.partition,
                send.completed_index.unwrap_or(send.invoke_index)
            )
        })
        .collect()
}

/// What the final log says about one value at one offset.
enum Verdict {
    Present,
    Lost(String),
    /// The final read cannot tell (it did not get there, or there was none).
    Unjudged,
}

/// Where each value sits in the final log, sorted by value.
fn final_positions<'a>(analysis: &'a Analysis, ranks: &Ranks<'a>) -> Vec<(Value, Ranked<'a>, i64)> {
    let mut positions: Vec<(Value, Ranked<'a>, i64)> = analysis
        .final_logs
        .iter()
        .flat_map(|(partition, log)| {
            let partition = ranks.of(partition);
            log.iter()
                .map(move |(offset, value)| (*value, partition, *offset))
        })
        .collect();
    positions.sort_unstable();
    positions
}

struct FinalLog<'a> {
    analysis: &'a Analysis,
    positions: Vec<(Value, Ranked<'a>, i64)>,
}

impl FinalLog<'_> {
    /// The places of `value` in the final log, in partition and offset order.
    fn places(&self, value: Value) -> &[(Value, Ranked<'_>, i64)] {
        let start = self.positions.partition_point(|place| place.0 < value);
        let end = self.positions.partition_point(|place| place.0 <= value);
        &self.positions[start..end]
    }

    /// Judges `value`, last known at `partition@offset` (history index `seen`), against the
    /// final log.
    fn judge(&self, value: Value, partition: &Partition, offset: i64, seen: u64) -> Verdict {
        let analysis = self.analysis;
        let Some(read) = analysis.final_reads.get(partition) else {
            return Verdict::Unjudged;
        };
        if offset < 0 {
            // acks=0: no offset to check, only presence.
            let present = !self.places(value).is_empty();
            return match (present, read.reached_end) {
                (true, _) => Verdict::Present,
                (false, true) => {
                    Verdict::Lost("missing from the final read of the whole partition".into())
                }
                (false, false) => Verdict::Unjudged,
            };
        }
        if offset < read.log_start_offset {
            return Verdict::Present; // deleted by retention, not lost
        }
        match analysis.final_read_covers(partition, offset) {
            Coverage::Unknown => Verdict::Unjudged,
            Coverage::PastTheEnd(end) => Verdict::Lost(format!(
                "the final log of {partition} ends at offset {end}{}",
                self.truncation_note(partition, offset, seen)
            )),
            Coverage::Unreadable(position) => Verdict::Lost(format!(
                "unreadable: the final read stopped at a corrupt batch at {partition}@{position}"
            )),
            Coverage::Read if analysis.final_read_skipped(partition, offset) => {
                Verdict::Lost("unreadable: in a corrupt batch the final read skipped".into())
            }
            Coverage::Read => {
                let there = analysis
                    .final_logs
                    .get(partition)
                    .and_then(|log| log.get(&offset));
                if there == Some(&value) {
                    return Verdict::Present;
                }
                Verdict::Lost(self.describe_absence(value, partition, offset, seen, there))
            }
        }
    }

    fn truncation_note(&self, partition: &Partition, offset: i64, seen: u64) -> String {
        self.analysis
            .truncation_between(partition, offset, seen, u64::MAX)
            .map_or_else(String::new, |truncation| {
                format!(
                    " (taken by {}'s truncation from offset {}: {})",
                    truncation.node, truncation.from_offset, truncation.reason
                )
            })
    }

    fn describe_absence(
        &self,
        value: Value,
        partition: &Partition,
        offset: i64,
        seen: u64,
        there: Option<&Value>,
    ) -> String {
        let mut text = match there {
            Some(other) => format!("the final log holds {other} at {partition}@{offset}"),
            None => format!("the final log has nothing at {partition}@{offset}"),
        };
        let places = self.places(value);
        if !places.is_empty() {
            let places: Vec<String> = places.iter().map(|(_, p, o)| format!("{p}@{o}")).collect();
            let _ = write!(text, "; it is at {} instead", places.join(", "));
        }
        text.push_str(&self.truncation_note(partition, offset, seen));
        text
    }
}

/// Acknowledged values gone from their offset (`lost-write`) or never reached (`unseen`); and
/// observed values gone from the final log with no recorded truncation to explain it.
fn lost_and_unseen<'a>(analysis: &'a Analysis, ranks: &Ranks<'a>) -> (Vec<String>, Vec<String>) {
    let final_log = FinalLog {
        analysis,
        positions: final_positions(analysis, ranks),
    };
    let mut polled: Vec<Value> = analysis
        .polls
        .iter()
        .chain(&analysis.final_polls)
        .map(|poll| poll.value)
        .collect();
    polled.sort_unstable();
    let mut furthest: BTreeMap<&Partition, i64> = BTreeMap::new();
    for poll in analysis.polls.iter().chain(&analysis.final_polls) {
        let entry = furthest.entry(&poll.partition).or_insert(poll.offset);
        *entry = (*entry).max(poll.offset);
    }
    let mut lost: BTreeMap<Value, String> = BTreeMap::new();
    let mut unseen = Vec::new();
    for (value, send) in &analysis.sends {
        let Outcome::Ok(offset) = send.outcome else {
            continue;
        };
        let place = || format!("{value} acknowledged at {}@{offset}", send.partition);
        if judged_by_final_read(analysis, send) {
            let acked = send.completed_index.unwrap_or(0);
            match final_log.judge(*value, &send.partition, offset, acked) {
                Verdict::Present => continue,
                Verdict::Lost(why) => {
                    lost.insert(*value, format!("{}: {why}", place()));
                    continue;
                }
                Verdict::Unjudged => {}
            }
        }
        if polled.binary_search(value).is_err() {
            let read_past = offset >= 0
                && furthest
                    .get(&send.partition)
                    .is_some_and(|furthest| *furthest > offset);
            if read_past {
                lost.insert(
                    *value,
                    format!("{}: never polled although reads went past it", place()),
                );
            } else {
                unseen.push(format!("{}, never polled", place()));
            }
        }
    }
    observed_and_gone(analysis, &final_log, &mut lost);
    (lost.into_values().collect(), unseen)
}

/// Values a consumer observed before the final read that are gone from the final log with no
/// recorded truncation to explain it (Jepsen counts an observed value as committed).
fn observed_and_gone(
    analysis: &Analysis,
    final_log: &FinalLog<'_>,
    lost: &mut BTreeMap<Value, String>,
) {
    let before_final_read = |index: u64| {
        analysis
            .final_read_started
            .is_some_and(|started| index < started)
    };
    for poll in &analysis.polls {
        if lost.contains_key(&poll.value) || !before_final_read(poll.index) {
            continue;
        }
        let explained = analysis
            .truncation_between(&poll.partition, poll.offset, poll.index, u64::MAX)
            .is_some();
        if let Verdict::Lost(why) =
            final_log.judge(poll.value, &poll.partition, poll.offset, poll.index)
        {
            if !explained || why.starts_with("unreadable") {
                let text = format!(
                    "{} observed by {} at {}@{}: {why}",
                    poll.value, poll.node, poll.partition, poll.offset
                );
                lost.insert(poll.value, text);
            }
        }
    }
}

/// Whether the final read's snapshot came after the send's acknowledgement.
fn judged_by_final_read(analysis: &Analysis, send: &SendInfo) -> bool {
    send.completed_index
        .zip(analysis.final_read_started)
        .is_some_and(|(acked, started)| acked < started)
}

/// Every place a value was seen, as `(value, partition, offset, history index)`, sorted: the
/// observations of one value are adjacent, and within them those of one place.
fn observations<'a>(analysis: &'a Analysis, ranks: &Ranks<'a>) -> Vec<Observation<'a>> {
    let mut seen = Vec::with_capacity(analysis.sends.len() + analysis.polls.len());
    for (value, send) in &analysis.sends {
        if let (Outcome::Ok(offset), Some(index)) = (send.outcome, send.completed_index) {
            if offset >= 0 {
                seen.push((*value, ranks.of(&send.partition), offset, index));
            }
        }
    }
    for poll in analysis.polls.iter().chain(&analysis.final_polls) {
        seen.push((
            poll.value,
            ranks.of(&poll.partition),
            poll.offset,
            poll.index,
        ));
    }
    seen.sort_unstable();
    seen
}

/// Where one value was seen: first and last history index per `(partition, offset)`, in
/// partition and offset order.
type Placements<'a> = Vec<(Ranked<'a>, i64, u64, u64)>;

/// `(value, partition, offset, history index)`: one place a value was seen.
type Observation<'a> = (Value, Ranked<'a>, i64, u64);

/// Folds one value's sorted observations into its placements.
fn placements<'a>(observed: &[Observation<'a>]) -> Placements<'a> {
    let mut places: Placements<'a> = Vec::new();
    for &(_, partition, offset, index) in observed {
        match places.last_mut() {
            Some(last) if last.0 == partition && last.1 == offset => last.3 = index,
            _ => places.push((partition, offset, index, index)),
        }
    }
    places
}

/// A value in two places at once (`duplicate`). Two places did not coexist if a recorded
/// truncation removed the earlier one before the later one was first seen.
fn duplicates(analysis: &Analysis, observed: &[Observation<'_>]) -> Vec<String> {
    let mut violations = Vec::new();
    for group in observed.chunk_by(|a, b| a.0 == b.0) {
        let (first, last) = (group[0], group[group.len() - 1]);
        if (first.1, first.2) == (last.1, last.2) {
            continue; // one place only
        }
        let value = first.0;
        let places = placements(group);
        let ended_before = |place: &(Ranked<'_>, i64, u64, u64),
                            later: &(Ranked<'_>, i64, u64, u64)| {
            place.3 < later.2
                && analysis
                    .truncation_between(place.0.partition, place.1, place.3, later.2)
                    .is_some()
        };
        let coexisted = places.iter().enumerate().any(|(at, a)| {
            places[at + 1..]
                .iter()
                .any(|b| !ended_before(a, b) && !ended_before(b, a))
        });
        if coexisted {
            let shown: Vec<String> = places
                .iter()
                .map(|(p, o, _, _)| format!("{p}@{o}"))
                .collect();
            violations.push(format!("{value} at {}", shown.join(", ")));
        }
    }
    violations
}

/// One offset holding two values in the same log version (`inconsistent-offsets`).
fn inconsistent_offsets(analysis: &Analysis, observed: &[Observation<'_>]) -> Vec<String> {
    let mut held: Vec<(Ranked<'_>, i64, usize, Value)> = observed
        .iter()
        .map(|&(value, partition, offset, index)| {
            let version = analysis.log_version(partition.partition, offset, index);
            (partition, offset, version, value)
        })
        .collect();
    held.sort_unstable();
    held.dedup();
    held.chunk_by(|a, b| (a.0, a.1, a.2) == (b.0, b.1, b.2))
        .filter(|values| values.len() > 1)
        .map(|values| {
            let (partition, offset) = (values[0].0, values[0].1);
            let values: Vec<String> = values.iter().map(|held| held.3.to_string()).collect();
            format!(
                "{partition}@{offset} held {} with no truncation between",
                values.join(" and ")
            )
        })
        .collect()
}

/// Polled values whose send definitely failed (`G1a`).
fn aborted_reads(analysis: &Analysis) -> Vec<String> {
    analysis
        .polls
        .iter()
        .chain(&analysis.final_polls)
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

/// Acknowledged values of a consumer's assignment that never reached it (`at-least-once`).
/// Values acknowledged after the final read's snapshot are not required (the run ends first),
/// nor those below the final log's start (deleted by retention).
fn never_consumed(analysis: &Analysis) -> Vec<String> {
    let mut violations = Vec::new();
    for (node, consumer) in &analysis.consumers {
        for (value, send) in &analysis.sends {
            let Outcome::Ok(offset) = send.outcome else {
                continue;
            };
            if !consumer.assigned.contains(&send.partition) || consumer.consumed.contains(value) {
                continue;
            }
            let late = analysis
                .final_read_started
                .zip(send.completed_index)
                .is_some_and(|(started, acked)| acked > started);
            let expired = analysis
                .final_reads
                .get(&send.partition)
                .is_some_and(|read| offset >= 0 && offset < read.log_start_offset);
            if !late && !expired {
                violations.push(format!(
                    "{node} never consumed {value} (acknowledged at {}@{offset})",
                    send.partition
                ));
            }
        }
    }
    violations
}

/// Values a consumer incarnation consumed more than once (`at-most-once`).
fn consumed_more_than_once(analysis: &Analysis) -> Vec<String> {
    let mut consumed: Vec<(u64, Value, usize)> = analysis
        .polls
        .iter()
        .enumerate()
        .map(|(at, poll)| (poll.process, poll.value, at))
        .collect();
    consumed.sort_unstable();
    consumed
        .chunk_by(|a, b| (a.0, a.1) == (b.0, b.1))
        .filter(|polls| polls.len() > 1)
        .map(|polls| {
            let polls: Vec<&PollRecord> = polls
                .iter()
                .map(|(_, _, at)| &analysis.polls[*at])
                .collect();
            let places: Vec<String> = polls
                .iter()
                .map(|poll| format!("{}@{}", poll.partition, poll.offset))
                .collect();
            format!(
                "{} (process {}) consumed {} {} times: {}",
                polls[0].node,
                polls[0].process,
                polls[0].value,
                polls.len(),
                places.join(", ")
            )
        })
        .collect()
}
