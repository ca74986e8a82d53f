//! Shrinking a failing scenario (`seedlog-sim shrink`): delta debugging on the scenario as a
//! TOML document while a predicate (in the CLI: "this check still fails at this seed") holds.
//!
//! The phases, in order: drop faults (ddmin over `[[faults]]`); move each remaining fault later
//! and shorten it (`restart_after_ms`, `heal_after_ms`, ...), and lower its counts; then drop
//! producers and consumers (ddmin), lower message counts and partition counts, and shorten
//! `duration_ms`. The phases repeat while a pass changed something.
//!
//! Invariants this module owns:
//! * shrinking is deterministic: candidates are tried in a fixed order and the first failing one
//!   in that order is taken, whatever order parallel runs finish in;
//! * every candidate is a file the loader accepts (others are never run), and the result is the
//!   exact text of a candidate that failed.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use toml::{Table, Value};

use crate::scenario::parse;

/// Zeller's ddmin: a 1-minimal sublist of `items` on which the test still fails, assuming it
/// fails on `items`. `first_failing` gets the candidates of one round, in order (the chunks,
/// then their complements), and answers the index of the first that fails.
pub fn ddmin<T: Clone>(
    items: Vec<T>,
    mut first_failing: impl FnMut(&[Vec<T>]) -> Option<usize>,
) -> Vec<T> {
    let mut current = items;
    let mut granularity = 2;
    while current.len() >= 2 {
        let chunks = split(&current, granularity);
        let mut candidates = chunks.clone();
        if granularity > 2 {
            for index in 0..chunks.len() {
                candidates.push(
                    chunks
                        .iter()
                        .enumerate()
                        .filter(|(other, _)| *other != index)
                        .flat_map(|(_, chunk)| chunk.iter().cloned())
                        .collect(),
                );
            }
        }
        match first_failing(&candidates) {
            Some(index) if index < chunks.len() => {
                current = candidates.swap_remove(index);
                granularity = 2;
            }
            Some(index) => {
                current = candidates.swap_remove(index);
                granularity = (granularity - 1).max(2);
            }
            None if granularity < current.len() => {
                granularity = (granularity * 2).min(current.len());
            }
            None => break,
        }
    }
    current
}

/// `items` in `parts` contiguous chunks whose lengths differ by at most one.
fn split<T: Clone>(items: &[T], parts: usize) -> Vec<Vec<T>> {
    assert!(
        parts >= 1 && parts <= items.len(),
        "split {} in {parts}",
        items.len()
    );
    let (base, extra) = (items.len() / parts, items.len() % parts);
    let mut chunks = Vec::with_capacity(parts);
    let mut start = 0;
    for index in 0..parts {
        let length = base + usize::from(index < extra);
        chunks.push(items[start..start + length].to_vec());
        start += length;
    }
    chunks
}

/// Top-level tables in the order scenario files write them.
const TABLE_ORDER: [&str; 9] = [
    "scenario",
    "cluster",
    "topics",
    "producers",
    "consumers",
    "network",
    "disk",
    "faults",
    "expect",
];
/// Keys written first in their table.
const KEYS_FIRST: [&str; 6] = ["name", "id", "at_ms", "kind", "target", "topic"];

fn key(name: &str) -> String {
    let bare = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !name.is_empty() && name.chars().all(bare) {
        name.to_owned()
    } else {
        Value::String(name.to_owned()).to_string()
    }
}

fn ordered<'a>(table: &'a Table, first: &[&str]) -> Vec<(&'a String, &'a Value)> {
    let mut entries: Vec<(&String, &Value)> = table.iter().collect();
    entries.sort_by_key(|(name, _)| {
        first
            .iter()
            .position(|wanted| wanted == name)
            .unwrap_or(first.len())
    });
    entries
}

fn is_array_of_tables(value: &Value) -> bool {
    value
        .as_array()
        .is_some_and(|items| !items.is_empty() && items.iter().all(Value::is_table))
}

/// A scenario document as TOML in the house layout: `[table]` sections in the usual order,
/// `[[array]]` entries with their nested tables inline (`config = { ... }`).
pub fn render(doc: &Table) -> String {
    let mut out = String::new();
    let sections = ordered(doc, &TABLE_ORDER);
    for (name, value) in &sections {
        if !value.is_table() && !is_array_of_tables(value) {
            let _ = writeln!(out, "{} = {value}", key(name));
        }
    }
    for (name, value) in sections {
        if let Value::Table(table) = value {
            render_section(&mut out, &key(name), table);
        } else if let Some(items) = value.as_array().filter(|_| is_array_of_tables(value)) {
            for item in items.iter().filter_map(Value::as_table) {
                let _ = writeln!(out, "\n[[{}]]", key(name));
                for (field, value) in ordered(item, &KEYS_FIRST) {
                    let _ = writeln!(out, "{} = {value}", key(field));
                }
            }
        }
    }
    out.trim_start().to_owned()
}

fn render_section(out: &mut String, path: &str, table: &Table) {
    let _ = writeln!(out, "\n[{path}]");
    let entries = ordered(table, &KEYS_FIRST);
    for (field, value) in &entries {
        if !value.is_table() {
            let _ = writeln!(out, "{} = {value}", key(field));
        }
    }
    for (field, value) in entries {
        if let Value::Table(nested) = value {
            render_section(out, &format!("{path}.{}", key(field)), nested);
        }
    }
}

/// What a shrink run did.
#[derive(Debug, Clone)]
pub struct ShrinkReport {
    /// The smallest failing document.
    pub doc: Table,
    /// Its text (exactly what was run).
    pub text: String,
    /// Each accepted step, in order.
    pub steps: Vec<String>,
    /// Candidates run (each a simulation in the CLI).
    pub runs: usize,
    /// Candidates the loader refused (never run).
    pub invalid: usize,
}

/// Delta debugging over one scenario document.
pub struct Shrinker<'a> {
    file: String,
    doc: Table,
    /// Runs each candidate text; `true` when it still fails.
    oracle: &'a mut dyn FnMut(&[String]) -> Vec<bool>,
    /// Candidates handed to the oracle at once (the CLI runs them in parallel).
    batch: usize,
    cache: BTreeMap<String, bool>,
    steps: Vec<String>,
    print: bool,
    runs: usize,
    invalid: usize,
}

/// Numeric fields of a fault the shrinker lowers, and the least value it tries.
const FAULT_LOWERED: [(&str, i64); 6] = [
    ("restart_after_ms", 1),
    ("recrash_after_ms", 0),
    ("heal_after_ms", 1),
    ("count", 1),
    ("fail_writes", 0),
    ("fail_syncs", 0),
];
/// Passes over all phases at most (each after one that changed something).
const PASSES_MAX: usize = 3;
/// Accepted steps on one number at most.
const TUNE_STEPS_MAX: usize = 24;

impl<'a> Shrinker<'a> {
    /// A shrinker of `doc` (loaded as `file`); `oracle` answers, for each candidate text, whether
    /// it still fails. `print` prints each accepted step as it is taken.
    pub fn new(
        file: &str,
        doc: Table,
        batch: usize,
        print: bool,
        oracle: &'a mut dyn FnMut(&[String]) -> Vec<bool>,
    ) -> Shrinker<'a> {
        Shrinker {
            file: file.to_owned(),
            doc,
            oracle,
            batch: batch.max(1),
            cache: BTreeMap::new(),
            steps: Vec::new(),
            print,
            runs: 0,
            invalid: 0,
        }
    }

    /// Whether the document as given fails (run once).
    pub fn reproduces(&mut self) -> bool {
        let text = render(&self.doc);
        self.first_failing(&[text]) == Some(0)
    }

    /// Shrinks to a fixpoint (or `PASSES_MAX` passes) and reports.
    pub fn run(mut self) -> ShrinkReport {
        for _ in 0..PASSES_MAX {
            let before = self.steps.len();
            self.drop_faults();
            self.tune_faults();
            self.shrink_workload();
            if self.steps.len() == before {
                break;
            }
        }
        ShrinkReport {
            text: render(&self.doc),
            doc: self.doc,
            steps: self.steps,
            runs: self.runs,
            invalid: self.invalid,
        }
    }

    /// The index of the first candidate that fails, trying them in order, `batch` at a time;
    /// candidates the loader refuses count as passing and are not run.
    fn first_failing(&mut self, texts: &[String]) -> Option<usize> {
        let mut start = 0;
        while start < texts.len() {
            let mut pending = Vec::new();
            let mut end = start;
            while end < texts.len() && pending.len() < self.batch {
                let text = &texts[end];
                if !self.cache.contains_key(text) {
                    if parse(&self.file, text).is_ok() {
                        pending.push(text.clone());
                    } else {
                        self.invalid += 1;
                        self.cache.insert(text.clone(), false);
                    }
                }
                end += 1;
            }
            if !pending.is_empty() {
                let results = (self.oracle)(&pending);
                assert_eq!(results.len(), pending.len(), "one answer per candidate");
                self.runs += pending.len();
                self.cache.extend(pending.into_iter().zip(results));
            }
            if let Some(index) = (start..end).find(|index| self.cache[&texts[*index]]) {
                return Some(index);
            }
            start = end;
        }
        None
    }

    fn step(&mut self, description: String) {
        if self.print {
            println!("  step {}: {description}", self.steps.len() + 1);
        }
        self.steps.push(description);
    }

    /// Runs `candidates` (documents); takes the first that fails.
    fn try_docs(&mut self, candidates: Vec<Table>) -> Option<usize> {
        let texts: Vec<String> = candidates.iter().map(render).collect();
        let index = self.first_failing(&texts)?;
        self.doc = candidates.into_iter().nth(index).expect("index in range");
        Some(index)
    }

    fn list(&self, name: &str) -> Vec<Value> {
        self.doc
            .get(name)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    fn with_list(&self, name: &str, items: Vec<Value>) -> Table {
        let mut doc = self.doc.clone();
        if items.is_empty() {
            doc.remove(name);
        } else {
            doc.insert(name.to_owned(), Value::Array(items));
        }
        doc
    }

    /// ddmin over the array `name` (`faults`, `producers`, ...), after trying none at all.
    fn drop_entries(&mut self, name: &str, describe: fn(&Value) -> String, keep_one: bool) {
        let items = self.list(name);
        if items.is_empty() {
            return;
        }
        if !keep_one
            && self
                .try_docs(vec![self.with_list(name, Vec::new())])
                .is_some()
        {
            self.step(format!("{name}: dropped all {}", items.len()));
            return;
        }
        let labelled: Vec<(usize, Value)> = items.iter().cloned().enumerate().collect();
        let mut previous: Vec<usize> = (0..items.len()).collect();
        let kept = ddmin(labelled, |candidates| {
            let docs = candidates
                .iter()
                .map(|kept| {
                    self.with_list(name, kept.iter().map(|(_, item)| item.clone()).collect())
                })
                .collect();
            let index = self.try_docs(docs)?;
            let kept: Vec<usize> = candidates[index].iter().map(|(at, _)| *at).collect();
            let dropped: Vec<String> = previous
                .iter()
                .filter(|at| !kept.contains(at))
                .map(|at| describe(&items[*at]))
                .collect();
            self.step(format!(
                "{name}: {} -> {} (dropped {})",
                previous.len(),
                kept.len(),
                dropped.join("; ")
            ));
            previous = kept;
            Some(index)
        });
        assert!(!kept.is_empty(), "ddmin keeps at least one");
    }

    fn drop_faults(&mut self) {
        self.drop_entries("faults", describe_fault, false);
    }

    /// Moves each fault later and shortens it, then lowers its counts.
    fn tune_faults(&mut self) {
        let duration_ms = self.scenario_integer("duration_ms").unwrap_or(0);
        for index in 0..self.list("faults").len() {
            let label = describe_fault(&self.list("faults")[index]);
            self.tune(
                &format!("{label}: at_ms"),
                &|doc: &Table| fault_field(doc, index, "at_ms"),
                &|doc: &mut Table, value| set_fault_field(doc, index, "at_ms", value),
                duration_ms,
            );
            for (field, least) in FAULT_LOWERED {
                self.tune(
                    &format!("{label}: {field}"),
                    &|doc: &Table| fault_field(doc, index, field),
                    &|doc: &mut Table, value| set_fault_field(doc, index, field, value),
                    least,
                );
            }
        }
    }

    fn scenario_integer(&self, field: &str) -> Option<i64> {
        self.doc.get("scenario")?.get(field)?.as_integer()
    }

    /// Drops producers and consumers, lowers messages and partitions, shortens the run.
    fn shrink_workload(&mut self) {
        self.drop_entries("producers", describe_client, true);
        self.drop_entries("consumers", describe_client, true);
        for index in 0..self.list("producers").len() {
            let label = describe_client(&self.list("producers")[index]);
            self.tune(
                &format!("producer {label}: messages"),
                &|doc: &Table| {
                    entry(doc, "producers", index)?
                        .get("workload")?
                        .get("messages")?
                        .as_integer()
                },
                &|doc: &mut Table, value| {
                    if let Some(Value::Table(workload)) = entry_mut(doc, "producers", index)
                        .and_then(|producer| producer.get_mut("workload"))
                    {
                        workload.insert("messages".to_owned(), Value::Integer(value));
                    }
                },
                1,
            );
        }
        for index in 0..self.list("topics").len() {
            let label = describe_client(&self.list("topics")[index]);
            self.tune(
                &format!("topic {label}: partitions"),
                &|doc: &Table| entry(doc, "topics", index)?.get("partitions")?.as_integer(),
                &|doc: &mut Table, value| {
                    if let Some(topic) = entry_mut(doc, "topics", index) {
                        topic.insert("partitions".to_owned(), Value::Integer(value));
                    }
                },
                1,
            );
        }
        let last_fault_ms = (0..self.list("faults").len())
            .filter_map(|index| fault_field(&self.doc, index, "at_ms"))
            .max()
            .unwrap_or(1);
        self.tune(
            "duration_ms",
            &|doc: &Table| doc.get("scenario")?.get("duration_ms")?.as_integer(),
            &|doc: &mut Table, value| {
                if let Some(Value::Table(scenario)) = doc.get_mut("scenario") {
                    scenario.insert("duration_ms".to_owned(), Value::Integer(value));
                }
            },
            last_fault_ms.max(1),
        );
    }

    /// Moves one number toward `target` while the document still fails: tries `target`, then
    /// half, a quarter and an eighth of the way there.
    fn tune(
        &mut self,
        label: &str,
        get: &dyn Fn(&Table) -> Option<i64>,
        set: &dyn Fn(&mut Table, i64),
        target: i64,
    ) {
        for _ in 0..TUNE_STEPS_MAX {
            let Some(current) = get(&self.doc) else {
                return;
            };
            // Moves below a hundredth of the value are not worth a run (except to the target).
            let step_min = (current.abs() / 100).max(1);
            let mut values: Vec<i64> = [1, 2, 4, 8]
                .iter()
                .map(|part| (target - current) / part)
                .filter(|change| {
                    *change != 0 && (change.abs() >= step_min || *change == target - current)
                })
                .map(|change| current + change)
                .collect();
            values.dedup();
            if values.is_empty() {
                return;
            }
            let docs = values
                .iter()
                .map(|value| {
                    let mut doc = self.doc.clone();
                    set(&mut doc, *value);
                    doc
                })
                .collect();
            let Some(index) = self.try_docs(docs) else {
                return;
            };
            self.step(format!("{label} {current} -> {}", values[index]));
        }
    }
}

fn entry<'a>(doc: &'a Table, list: &str, index: usize) -> Option<&'a Table> {
    doc.get(list)?.as_array()?.get(index)?.as_table()
}

fn entry_mut<'a>(doc: &'a mut Table, list: &str, index: usize) -> Option<&'a mut Table> {
    doc.get_mut(list)?
        .as_array_mut()?
        .get_mut(index)?
        .as_table_mut()
}

/// An integer field of fault `index` (ranges and absent fields: none).
fn fault_field(doc: &Table, index: usize, field: &str) -> Option<i64> {
    entry(doc, "faults", index)?.get(field)?.as_integer()
}

fn set_fault_field(doc: &mut Table, index: usize, field: &str, value: i64) {
    if let Some(fault) = entry_mut(doc, "faults", index) {
        fault.insert(field.to_owned(), Value::Integer(value));
    }
}

/// `crash broker-0 at 4210 ms`.
pub fn describe_fault(fault: &Value) -> String {
    let text = |field: &str| {
        fault.get(field).map(|value| match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
    };
    let mut description = text("kind").unwrap_or_else(|| "fault".to_owned());
    for field in ["target", "level", "from", "to", "groups"] {
        if let Some(value) = text(field) {
            let _ = write!(description, " {value}");
        }
    }
    if let Some(at_ms) = text("at_ms") {
        let _ = write!(description, " at {at_ms} ms");
    }
    description
}

fn describe_client(entry: &Value) -> String {
    entry
        .get("id")
        .or_else(|| entry.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_owned()
}

#[cfg(test)]
mod tests;
