//! Which operations a violation names. The checkers describe each example in words; this reads
//! back what those words point at:
//! - `op N` (a history index, as the broker checks write it), and `at N` in the group checks'
//!   texts;
//! - a value `P-S` that was sent: its send's invocation and completion;
//! - a place `partition@offset`: the polls that returned that offset (only those that returned a
//!   value the text names, when it names one there; only `process N`'s, when it names one), the
//!   first few of them;
//! - `NODE: PARTITION's high watermark went from A back to B` (and the log start offset): the
//!   two samples of that broker either side of the drop.
//!
//! A text that names none of these is listed without links.

use std::collections::{BTreeMap, BTreeSet};

use crate::checker::{Check, CheckResult};
use crate::history::{Body, History, OpType, Partition, Process, Value};

/// Polls listed per place.
const POLLS_PER_PLACE: usize = 3;
/// Operations listed per violation.
const OPS_PER_VIOLATION: usize = 16;

/// One described violation and the operations it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The check.
    pub check: Check,
    /// The checker's description.
    pub text: String,
    /// History indices it names, ascending.
    pub ops: Vec<u64>,
}

/// `(poll index, process, value)` of each poll that returned a place.
type PollsAt = Vec<(u64, u64, Value)>;
/// `(node, partition, "high watermark" or "log start offset")`.
type SampleKey = (String, Partition, &'static str);

/// What the texts are resolved against.
#[derive(Debug, Default)]
struct Index {
    sends: BTreeMap<Value, Vec<u64>>,
    /// `(partition, offset)` -> the polls that returned it.
    polls: BTreeMap<(Partition, i64), PollsAt>,
    /// `(index, offset)` samples.
    samples: BTreeMap<SampleKey, Vec<(u64, i64)>>,
    ops: u64,
}

impl Index {
    fn new(history: &History) -> Index {
        let mut index = Index {
            ops: history.ops.len() as u64,
            ..Index::default()
        };
        for op in &history.ops {
            match (&op.process, &op.body) {
                (_, Body::Send { value, .. }) => {
                    index.sends.entry(*value).or_default().push(op.index);
                }
                (Process::Client(process), Body::Poll { records, .. })
                    if op.op_type == OpType::Ok =>
                {
                    for (partition, entries) in records {
                        for (offset, value) in entries {
                            index
                                .polls
                                .entry((partition.clone(), *offset))
                                .or_default()
                                .push((op.index, *process, *value));
                        }
                    }
                }
                (Process::Named(node), Body::HighWatermark { partition, offset }) => {
                    let key = (node.to_string(), partition.clone(), "high watermark");
                    index
                        .samples
                        .entry(key)
                        .or_default()
                        .push((op.index, *offset));
                }
                (Process::Named(node), Body::LogStart { partition, offset }) => {
                    let key = (node.to_string(), partition.clone(), "log start offset");
                    index
                        .samples
                        .entry(key)
                        .or_default()
                        .push((op.index, *offset));
                }
                _ => {}
            }
        }
        index
    }
}

/// Every described violation of `checks`, with the operations it names.
pub fn violations(history: &History, checks: &[CheckResult]) -> Vec<Violation> {
    let index = Index::new(history);
    checks
        .iter()
        .filter(|check| !check.holds())
        .flat_map(|check| {
            check.examples.iter().map(|text| Violation {
                check: check.check,
                text: text.clone(),
                ops: referenced(&index, check.check, text),
            })
        })
        .collect()
}

/// The words of a text, stripped of surrounding punctuation.
fn words(text: &str) -> Vec<&str> {
    text.split_whitespace()
        .map(|word| {
            word.trim_matches(|c: char| {
                !(c.is_ascii_alphanumeric() || c == '-' || c == '@' || c == '_' || c == '.')
            })
            .trim_end_matches('.')
        })
        .filter(|word| !word.is_empty())
        .collect()
}

/// What a text names, before it is resolved to operations.
#[derive(Debug, Default)]
struct Named<'a> {
    indices: BTreeSet<u64>,
    values: BTreeSet<Value>,
    places: Vec<(&'a str, i64)>,
    process: Option<u64>,
}

fn named<'a>(index: &Index, check: Check, words: &[&'a str]) -> Named<'a> {
    // Only the group checks write a bare history index after "at" ("committed 5 at 812");
    // elsewhere "at 1" is an offset ("the log ending at 1").
    let at_is_an_index = matches!(
        check,
        Check::CommitRegression | Check::ZombieCommit | Check::GroupAtMostOnce
    );
    let mut named = Named::default();
    for (position, word) in words.iter().enumerate() {
        let previous = position.checked_sub(1).map(|p| words[p]);
        let number = word.parse::<u64>().ok();
        match (previous, number) {
            (Some("op"), Some(number)) if number < index.ops => {
                named.indices.insert(number);
            }
            (Some("at"), Some(number)) if at_is_an_index && number < index.ops => {
                named.indices.insert(number);
            }
            (Some("process"), Some(number)) => named.process = Some(number),
            _ => {}
        }
        if let Some(value) = Value::parse(word).filter(|v| index.sends.contains_key(v)) {
            named.values.insert(value);
        }
        if let Some((partition, offset)) = word.split_once('@') {
            if let Ok(offset) = offset.parse::<i64>() {
                named.places.push((partition, offset));
            }
        }
    }
    named
}

/// The operations one violation's text names, ascending, at most [`OPS_PER_VIOLATION`].
fn referenced(index: &Index, check: Check, text: &str) -> Vec<u64> {
    let words = words(text);
    let named = named(index, check, &words);
    let mut ops = named.indices.clone();
    for value in &named.values {
        ops.extend(index.sends[value].iter().copied());
    }
    for (partition, offset) in &named.places {
        let Some(polls) = index.polls.get(&(Partition::from(*partition), *offset)) else {
            continue;
        };
        let names_a_value_here = polls.iter().any(|(_, _, v)| named.values.contains(v));
        polls
            .iter()
            .filter(|(_, _, value)| !names_a_value_here || named.values.contains(value))
            .filter(|(_, process, _)| named.process.is_none_or(|p| p == *process))
            .take(POLLS_PER_PLACE)
            .for_each(|(poll, _, _)| {
                ops.insert(*poll);
            });
    }
    ops.extend(went_back(index, text));
    ops.into_iter().take(OPS_PER_VIOLATION).collect()
}

/// `NODE: PARTITION's WHAT went from A back to B`: the samples either side of the drop.
fn went_back(index: &Index, text: &str) -> Vec<u64> {
    let parse = || -> Option<Vec<u64>> {
        let (node, rest) = text.split_once(": ")?;
        let (partition, rest) = rest.split_once("'s ")?;
        let (what, rest) = rest.split_once(" went from ")?;
        let (before, rest) = rest.split_once(" back to ")?;
        let after = rest.split(|c: char| !c.is_ascii_digit()).next()?;
        let (before, after) = (before.parse::<i64>().ok()?, after.parse::<i64>().ok()?);
        let key = (
            node.to_owned(),
            Partition::from(partition),
            static_what(what)?,
        );
        let samples = index.samples.get(&key)?;
        samples.windows(2).find_map(|pair| {
            (pair[0].1 == before && pair[1].1 == after).then(|| vec![pair[0].0, pair[1].0])
        })
    };
    parse().unwrap_or_default()
}

fn static_what(what: &str) -> Option<&'static str> {
    match what {
        "high watermark" => Some("high watermark"),
        "log start offset" => Some("log start offset"),
        _ => None,
    }
}
