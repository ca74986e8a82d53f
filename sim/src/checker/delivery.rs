//! Loss, duplication and delivery guarantees.
//!
//! The final log (what the final reader read from each partition after healing) backs
//! `lost-write`: an acknowledged value must sit at its acknowledged offset there, and a value a
//! consumer observed counts as committed whatever its send's outcome (as in Jepsen) unless a
//! recorded truncation took it back. The delivery verdicts are judged at the consumers, never
//! at the final reader: `at-least-once` asks whether every acknowledged value of a consumer's
//! assignment reached that consumer, `at-most-once` whether an incarnation consumed a value twice.

use std::cell::{Cell, OnceCell, RefCell};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::Arc;

use super::{
    final_read_covers, final_read_skipped, log_version, Analysis, Check, CheckResult, Coverage,
    Outcome, PollRecord, SendInfo, Truncation,
};
use crate::history::{FinalRead, Partition, Value};

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
            inconsistent_offsets(analysis, &ranks, &observed),
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

/// Every partition the sends, polls and final reads name, ranked by name. The history holds a
/// few copies of each name (one per producer, reader and broker that recorded it), so a rank is
/// looked up by name once per copy and then by the copy's address.
struct Ranks<'a> {
    names: BTreeMap<&'a str, u32>,
    by_address: RefCell<BTreeMap<usize, u32>>,
    /// The copy looked up last, with its rank: lookups come in runs of one copy.
    last: Cell<(usize, u32)>,
}

impl<'a> Ranks<'a> {
    fn new(analysis: &'a Analysis) -> Ranks<'a> {
        let mut names: BTreeMap<&'a str, u32> = BTreeMap::new();
        let sent = analysis.sends.values().map(|send| &send.partition);
        let polled = analysis.polls.iter().chain(&analysis.final_polls);
        let mut previous: Option<&Partition> = None;
        for partition in sent.chain(polled.map(|poll| &poll.partition)) {
            // Runs of one copy are common (a send after another to one partition, a poll's
            // records): a name is looked up once a run.
            if previous.is_some_and(|previous| Arc::ptr_eq(previous, partition)) {
                continue;
            }
            previous = Some(partition);
            names.entry(&**partition).or_insert(0);
        }
        for (rank, slot) in (0..).zip(names.values_mut()) {
            *slot = rank;
        }
        Ranks {
            names,
            by_address: RefCell::default(),
            last: Cell::new((0, 0)),
        }
    }

    fn of(&self, partition: &'a Partition) -> Ranked<'a> {
        // The copy's address, as a number: the analysis holds every copy, so it is unique.
        let address = Arc::as_ptr(partition).cast::<u8>() as usize;
        let (last_address, last_rank) = self.last.get();
        if last_address == address {
            return Ranked {
                rank: last_rank,
                partition,
            };
        }
        let known = self.by_address.borrow().get(&address).copied();
        let rank = known.unwrap_or_else(|| {
            let rank = self.names.get(&**partition).copied();
            let rank = rank.expect("every partition of the analysis is ranked");
            self.by_address.borrow_mut().insert(address, rank);
            rank
        });
        self.last.set((address, rank));
        Ranked { rank, partition }
    }

    /// The ranked names, in rank order.
    fn names(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.names.keys().copied()
    }
}

/// Items' dense keys (see [`sort_densely`]) as slots of one table: groups (producer processes,
/// partitions) take consecutive slots in key order, each as many as the end of its indexes.
struct DenseKeys {
    /// Each item's slot, with its index.
    keys: Vec<(usize, u64)>,
    /// How many slots the table has.
    slots: usize,
}

impl DenseKeys {
    /// `None` when an item has no key, or the keys are too sparse for a slot table (more
    /// slots than four an item).
    fn of<T>(items: &[T], key: impl Fn(&T) -> Option<(u64, u64)>) -> Option<DenseKeys> {
        let mut keys = Vec::with_capacity(items.len());
        // Each group with the end of its indexes; a run has a few groups, so a list searched
        // from the last hit will do.
        let mut groups: Vec<(u64, u64)> = Vec::new();
        let mut last = 0;
        for item in items {
            let (group, index) = key(item)?;
            if groups.get(last).is_none_or(|found| found.0 != group) {
                last = groups
                    .iter()
                    .position(|found| found.0 == group)
                    .unwrap_or_else(|| {
                        groups.push((group, 0));
                        groups.len() - 1
                    });
            }
            groups[last].1 = groups[last].1.max(index.saturating_add(1));
            keys.push((last, index));
        }
        let slots = groups
            .iter()
            .fold(0u64, |sum, group| sum.saturating_add(group.1));
        if slots > (items.len() as u64).saturating_mul(4) {
            return None;
        }
        // First slots in group order, so that slots run in key order.
        let mut order: Vec<usize> = (0..groups.len()).collect();
        order.sort_unstable_by_key(|at| groups[*at].0);
        let mut first = vec![0u64; groups.len()];
        let mut next_first = 0u64;
        for at in order {
            first[at] = next_first;
            next_first += groups[at].1;
        }
        for (at, index) in &mut keys {
            *at = usize::try_from(first[*at] + *index).ok()?;
        }
        Some(DenseKeys {
            keys,
            slots: usize::try_from(slots).ok()?,
        })
    }
}

/// Sorts `items` as `sort_unstable` would, when each item's order starts with a dense key: `key`
/// gives `(group, index)`, and items must order by group, then index, then the rest. Values are
/// such keys (a producer process counts its sequence up from 0 or 1), and so are a partition's
/// offsets. A counting sort puts every item in its key's slot in one pass and compares only
/// items of one key (mostly two or three a run): comparison sorts of the tens of thousands of
/// observations of a run were 40% of this checker's time. Keys too sparse for a slot table (more
/// slots than four times the items) or missing (`None`) fall back to `sort_unstable`; equal
/// items are identical, so the result is the same either way.
fn sort_densely<T: Ord + Copy>(items: &mut Vec<T>, key: impl Fn(&T) -> Option<(u64, u64)>) {
    if items.len() < 64 {
        items.sort_unstable();
        return;
    }
    let Some(DenseKeys { keys, slots }) = DenseKeys::of(items, key) else {
        items.sort_unstable();
        return;
    };
    let mut starts = vec![0usize; slots + 1];
    for (slot, _) in &keys {
        starts[slot + 1] += 1;
    }
    for slot in 1..starts.len() {
        starts[slot] += starts[slot - 1];
    }
    let mut next = starts.clone();
    let mut placed = items.clone();
    for (item, (slot, _)) in items.iter().zip(&keys) {
        placed[next[*slot]] = *item;
        next[*slot] += 1;
    }
    *items = placed;
    for run in starts.windows(2) {
        if run[1] - run[0] > 1 {
            items[run[0]..run[1]].sort_unstable();
        }
    }
}

/// A value as a dense key: its process, then its sequence.
#[allow(clippy::unnecessary_wraps)] // the shape `sort_densely` takes
fn value_key(value: Value) -> Option<(u64, u64)> {
    Some((value.process, value.sequence))
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
    sort_densely(&mut positions, |position| value_key(position.0));
    positions
}

/// One partition's final read and final log, by rank: the final log as a slice indexed by
/// offset from its first, so that judging a value takes no search.
struct RankedFinalLog<'a> {
    read: Option<&'a FinalRead>,
    log: Option<&'a BTreeMap<i64, Value>>,
    /// The log's values by offset from `first`, when its offsets are dense enough (a slot for
    /// at most four offsets of eight a record); else empty, and `log` is searched.
    first: i64,
    values: Vec<Option<Value>>,
}

impl<'a> RankedFinalLog<'a> {
    fn new(analysis: &'a Analysis, name: &str) -> RankedFinalLog<'a> {
        let read = analysis.final_reads.get(name);
        let log = analysis.final_logs.get(name);
        let mut ranked = RankedFinalLog {
            read,
            log,
            first: 0,
            values: Vec::new(),
        };
        let Some(log) = log else {
            return ranked;
        };
        let (Some(first), Some(last)) = (log.keys().next(), log.keys().next_back()) else {
            return ranked;
        };
        // Offsets are dense in a final log unless compaction or corrupt batches left gaps.
        let span = usize::try_from(last.saturating_sub(*first)).map_or(usize::MAX, |span| span + 1);
        if span > log.len().saturating_mul(4) {
            return ranked;
        }
        ranked.first = *first;
        ranked.values = vec![None; span];
        for (offset, value) in log {
            ranked.values[usize::try_from(offset - first).expect("sorted offsets")] = Some(*value);
        }
        ranked
    }

    /// The value the final log holds at `offset`.
    fn at(&self, offset: i64) -> Option<&Value> {
        if self.values.is_empty() {
            return self.log?.get(&offset);
        }
        let index = usize::try_from(offset.checked_sub(self.first)?).ok()?;
        self.values.get(index)?.as_ref()
    }
}

struct FinalLog<'a, 'r> {
    analysis: &'a Analysis,
    ranks: &'r Ranks<'a>,
    /// Where each value sits, sorted by value: built the first time a place is asked for (a
    /// value written with acks=0, or one gone from its offset), which most runs never do.
    positions: OnceCell<Vec<(Value, Ranked<'a>, i64)>>,
    /// Each partition's final read and log, by rank.
    by_rank: Vec<RankedFinalLog<'a>>,
}

impl FinalLog<'_, '_> {
    /// The places of `value` in the final log, in partition and offset order.
    fn places(&self, value: Value) -> &[(Value, Ranked<'_>, i64)] {
        let positions = self
            .positions
            .get_or_init(|| final_positions(self.analysis, self.ranks));
        let start = positions.partition_point(|place| place.0 < value);
        let end = positions.partition_point(|place| place.0 <= value);
        &positions[start..end]
    }

    /// Judges `value`, last known at `partition@offset` (history index `seen`), against the
    /// final log.
    fn judge(&self, value: Value, partition: Ranked<'_>, offset: i64, seen: u64) -> Verdict {
        let ranked = &self.by_rank[partition.rank as usize];
        let partition = partition.partition;
        let Some(read) = ranked.read else {
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
        match final_read_covers(read, offset) {
            Coverage::Unknown => Verdict::Unjudged,
            Coverage::PastTheEnd(end) => Verdict::Lost(format!(
                "the final log of {partition} ends at offset {end}{}",
                self.truncation_note(partition, offset, seen)
            )),
            Coverage::Unreadable(position) => Verdict::Lost(format!(
                "unreadable: the final read stopped at a corrupt batch at {partition}@{position}"
            )),
            Coverage::Read if final_read_skipped(read, offset) => {
                Verdict::Lost("unreadable: in a corrupt batch the final read skipped".into())
            }
            Coverage::Read => {
                let there = ranked.at(offset);
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
        ranks,
        positions: OnceCell::new(),
        by_rank: ranks
            .names()
            .map(|name| RankedFinalLog::new(analysis, name))
            .collect(),
    };
    // What was polled, and how far, are asked only of a value the final read cannot judge:
    // built on first use.
    let polled = OnceCell::new();
    let polled = || polled.get_or_init(|| polled_values(analysis));
    let furthest = OnceCell::new();
    let furthest = || furthest.get_or_init(|| furthest_polled(analysis));
    let mut lost: BTreeMap<Value, String> = BTreeMap::new();
    let mut unseen = Vec::new();
    for (value, send) in analysis.sends.iter() {
        let Outcome::Ok(offset) = send.outcome else {
            continue;
        };
        let place = || format!("{value} acknowledged at {}@{offset}", send.partition);
        if judged_by_final_read(analysis, send) {
            let acked = send.completed_index.unwrap_or(0);
            match final_log.judge(value, ranks.of(&send.partition), offset, acked) {
                Verdict::Present => continue,
                Verdict::Lost(why) => {
                    lost.insert(value, format!("{}: {why}", place()));
                    continue;
                }
                Verdict::Unjudged => {}
            }
        }
        if polled().binary_search(&value).is_err() {
            let read_past = offset >= 0
                && furthest()
                    .get(&send.partition)
                    .is_some_and(|furthest| *furthest > offset);
            if read_past {
                lost.insert(
                    value,
                    format!("{}: never polled although reads went past it", place()),
                );
            } else {
                unseen.push(format!("{}, never polled", place()));
            }
        }
    }
    observed_and_gone(analysis, ranks, &final_log, &mut lost);
    (lost.into_values().collect(), unseen)
}

/// Every polled value (the final reader's included), sorted.
fn polled_values(analysis: &Analysis) -> Vec<Value> {
    let mut polled: Vec<Value> = analysis
        .polls
        .iter()
        .chain(&analysis.final_polls)
        .map(|poll| poll.value)
        .collect();
    sort_densely(&mut polled, |value| value_key(*value));
    polled
}

/// The highest offset polled in each partition (the final reader's polls included).
fn furthest_polled(analysis: &Analysis) -> BTreeMap<&Partition, i64> {
    let mut furthest: BTreeMap<&Partition, i64> = BTreeMap::new();
    // A poll's records share a partition copy: one lookup a run of them.
    let polls: Vec<&PollRecord> = analysis.polls.iter().chain(&analysis.final_polls).collect();
    for run in polls.chunk_by(|a, b| Arc::ptr_eq(&a.partition, &b.partition)) {
        let highest = run.iter().map(|poll| poll.offset).max().unwrap_or(i64::MIN);
        let entry = furthest.entry(&run[0].partition).or_insert(highest);
        *entry = (*entry).max(highest);
    }
    furthest
}

/// Values a consumer observed before the final read that are gone from the final log with no
/// recorded truncation to explain it (Jepsen counts an observed value as committed).
fn observed_and_gone<'a>(
    analysis: &'a Analysis,
    ranks: &Ranks<'a>,
    final_log: &FinalLog<'_, '_>,
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
        let partition = ranks.of(&poll.partition);
        if let Verdict::Lost(why) = final_log.judge(poll.value, partition, poll.offset, poll.index)
        {
            let explained = || {
                analysis
                    .truncation_between(&poll.partition, poll.offset, poll.index, u64::MAX)
                    .is_some()
            };
            if why.starts_with("unreadable") || !explained() {
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

/// Every place a value was seen, as `(value, partition, offset, history index)`, in no
/// particular order.
fn observations<'a>(analysis: &'a Analysis, ranks: &Ranks<'a>) -> Vec<Observation<'a>> {
    let mut seen = Vec::with_capacity(analysis.sends.len() + analysis.polls.len());
    for (value, send) in analysis.sends.iter() {
        if let (Outcome::Ok(offset), Some(index)) = (send.outcome, send.completed_index) {
            if offset >= 0 {
                seen.push((value, ranks.of(&send.partition), offset, index));
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
    // Only values seen in more than one place can be duplicates, and only they are sorted.
    let marked = contested(
        observed,
        |seen| value_key(seen.0),
        |seen| (seen.1.rank, seen.2),
    );
    let mut observed: Vec<Observation<'_>> = match marked {
        Some(marked) => observed
            .iter()
            .zip(marked)
            .filter_map(|(seen, marked)| marked.then_some(*seen))
            .collect(),
        None => observed.to_vec(),
    };
    sort_densely(&mut observed, |seen| value_key(seen.0));
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
fn inconsistent_offsets(
    analysis: &Analysis,
    ranks: &Ranks<'_>,
    observed: &[Observation<'_>],
) -> Vec<String> {
    // Each partition's truncations by its rank, looked up once instead of by name per value.
    let truncations: Vec<&[Truncation]> = ranks
        .names()
        .map(|name| {
            analysis
                .truncations
                .get(name)
                .map_or(&[][..], Vec::as_slice)
        })
        .collect();
    let mut held: Vec<(Ranked<'_>, i64, usize, Value)> = observed
        .iter()
        .map(|&(value, partition, offset, index)| {
            let version = log_version(truncations[partition.rank as usize], offset, index);
            (partition, offset, version, value)
        })
        .collect();
    // Offsets of a partition are dense: slot them by partition and offset. Only offsets seen
    // holding more than one (version, value) can be inconsistent, and only they are sorted.
    let offset_key = |held: &(Ranked<'_>, i64, usize, Value)| {
        let offset = u64::try_from(held.1).ok()?;
        Some((u64::from(held.0.rank), offset))
    };
    let marked = contested(&held, offset_key, |held| (held.2, held.3));
    retain_contested(&mut held, marked);
    sort_densely(&mut held, offset_key);
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

/// For each item, whether some item of its key holds something else (`what`): only those can
/// make a violation of a check that compares the items of one key, and only they need sorting.
/// `key` is a dense key as [`sort_densely`] takes it; `None` when keys are missing or too
/// sparse for a slot table (more slots than four an item), and every item must be considered.
fn contested<T, W: PartialEq + Copy>(
    items: &[T],
    key: impl Fn(&T) -> Option<(u64, u64)>,
    what: impl Fn(&T) -> W,
) -> Option<Vec<bool>> {
    let DenseKeys { keys, slots } = DenseKeys::of(items, key)?;
    let mut seen: Vec<Option<W>> = vec![None; slots];
    let mut contested = vec![false; slots];
    for (item, &(at, _)) in items.iter().zip(&keys) {
        let held = what(item);
        match seen[at] {
            None => seen[at] = Some(held),
            Some(other) if other != held => contested[at] = true,
            Some(_) => {}
        }
    }
    Some(keys.iter().map(|&(at, _)| contested[at]).collect())
}

/// Keeps the items `contested` marks, if it could mark them.
fn retain_contested<T>(items: &mut Vec<T>, contested: Option<Vec<bool>>) {
    if let Some(contested) = contested {
        let mut flags = contested.into_iter();
        items.retain(|_| flags.next().unwrap_or(true));
    }
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
        for (value, send) in analysis.sends.iter() {
            let Outcome::Ok(offset) = send.outcome else {
                continue;
            };
            if !consumer.assigned.contains(&send.partition) || consumer.consumed.contains(&value) {
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
    // Dense by (incarnation, producer process) then sequence: a few groups a run.
    sort_densely(&mut consumed, |&(process, value, _)| {
        let group = (
            u32::try_from(process).ok(),
            u32::try_from(value.process).ok(),
        );
        let (Some(process), Some(producer)) = group else {
            return None;
        };
        Some((
            (u64::from(process) << 32) | u64::from(producer),
            value.sequence,
        ))
    });
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

#[cfg(test)]
mod sort_tests {
    use super::*;

    /// A small deterministic generator (no dependency): xorshift64.
    fn numbers(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    #[test]
    fn sorting_densely_gives_what_a_comparison_sort_gives() {
        let mut next = numbers(0x5eed);
        for round in 0..40 {
            let len = [0, 1, 63, 64, 65, 500, 3_000][round % 7];
            let processes = 1 + next() % 4;
            // Dense sequences (the usual case), then sparse ones (the fallback).
            let spread = if round % 3 == 2 {
                1_000_000
            } else {
                len as u64 / 2 + 1
            };
            let mut items: Vec<(Value, u32, i64, u64)> = (0..len)
                .map(|_| {
                    let value = Value {
                        process: 1 + next() % processes,
                        sequence: next() % spread,
                    };
                    (value, (next() % 3) as u32, (next() % 50) as i64, next() % 7)
                })
                .collect();
            let mut expected = items.clone();
            expected.sort_unstable();
            sort_densely(&mut items, |item| value_key(item.0));
            assert_eq!(items, expected, "round {round}: {len} items");
        }
    }

    #[test]
    fn a_missing_key_falls_back_to_the_comparison_sort() {
        let mut items: Vec<(i64, u64)> = (0..200).map(|i| (100 - i, i as u64 % 5)).collect();
        let mut expected = items.clone();
        expected.sort_unstable();
        sort_densely(&mut items, |item| Some((0, u64::try_from(item.0).ok()?)));
        assert_eq!(items, expected);
    }
}
