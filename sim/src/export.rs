//! `seedlog-sim export`: a history in the shape of Jepsen's Kafka workload
//! (`jepsen.tests.kafka`), as EDN, one operation map a line, so that a Jepsen user can load it
//! and hand it to that workload's checker (and through it to Elle).
//!
//! What maps to what:
//! - **Keys.** Jepsen names each topic-partition by an integer *key*. Every partition the
//!   history mentions is numbered in (topic, partition number) order from 0: a single topic
//!   `ledger` with partitions 0..n keeps its numbers (`ledger-3` is key 3). The header comments
//!   of the file list the mapping.
//! - **Values.** Jepsen's values are integers; seedlog's are `<process>-<sequence>`. The
//!   export writes `process * 1_000_000 + sequence` (`2-149` is `2000149`); a sequence of a
//!   million or more is refused rather than aliased.
//! - **Operations.** A `send` becomes `{:f :send, :value [[:send key value]]}` when invoked
//!   and `[[:send key [offset value]]]` when it completes `:ok` (offset `nil` with acks=0); a
//!   `poll` becomes `[[:poll]]`, completed `[[:poll {key [[offset value] ...]}]]`. seedlog
//!   records no transactions, so no `:txn` operation is ever written. A consumer's `assign` and
//!   a group member's `subscribe` become `:assign` / `:subscribe` operations (an invocation and
//!   an `:ok` at the same instant) whose value is the vector of keys (for `subscribe`, every
//!   key of the topics), which Jepsen's poll-skip analysis uses to forget positions. Nemesis
//!   events become `:info` pairs of process `:nemesis`, as Jepsen records its nemesis (but not
//!   the simulator's bookkeeping: `schedule`, `resolve`).
//!   Everything else (broker `hw`/`truncate`/`leader` events, resets and seeks, group joins,
//!   commits and processing, the final reader's summaries) has no counterpart and is left out.
//! - **Processes.** A seedlog producer pipelines sends, but a Jepsen process has one operation
//!   open at a time. Each client process therefore gets one Jepsen process per operation it
//!   has open at once (the lowest one free is reused); a process whose operation ended `:info`
//!   is not reused, as Jepsen retires a crashed process. `:seedlog-process` and `:node` keep
//!   seedlog's client process and node; `:seedlog-index` the original history index.
//! - **Time and indices.** `:time` is simulated nanoseconds since the run started; `:index` is
//!   dense over the exported operations, in history order.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::Value as Json;

use crate::history::{Body, History, Op, OpType, Partition, Process, Value};

/// Nemesis records that are the simulator's bookkeeping, not faults: left out.
const BOOKKEEPING: [&str; 2] = ["schedule", "resolve"];

/// Jepsen values are `process * VALUE_STRIDE + sequence`.
pub const VALUE_STRIDE: u64 = 1_000_000;

/// An export format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// EDN in the shape of Jepsen's Kafka workload.
    JepsenEdn,
}

impl Format {
    /// Every format's name.
    pub const NAMES: [&'static str; 1] = ["jepsen-edn"];

    /// The format of that name; the error names the known ones.
    pub fn parse(name: &str) -> Result<Format, String> {
        match name {
            "jepsen-edn" => Ok(Format::JepsenEdn),
            other => Err(format!(
                "unknown export format '{other}' (known: {})",
                Format::NAMES.join(", ")
            )),
        }
    }
}

/// Writes `history` in `format`.
pub fn export(history: &History, format: Format) -> Result<String, String> {
    match format {
        Format::JepsenEdn => jepsen_edn(history),
    }
}

/// The Jepsen value of a seedlog value.
pub fn jepsen_value(value: Value) -> Result<u64, String> {
    if value.sequence >= VALUE_STRIDE {
        return Err(format!(
            "value {value}: a sequence of {VALUE_STRIDE} or more has no Jepsen value here"
        ));
    }
    value
        .process
        .checked_mul(VALUE_STRIDE)
        .map(|base| base + value.sequence)
        .ok_or_else(|| format!("value {value}: process too large for a Jepsen value"))
}

/// Partition names to Jepsen keys: (topic, partition number) order, numbered from 0.
#[derive(Debug, Default)]
pub struct Keys {
    keys: BTreeMap<Partition, u32>,
}

fn partition_order(partition: &str) -> (&str, u64, &str) {
    match partition.rsplit_once('-') {
        Some((topic, number)) => match number.parse() {
            Ok(number) => (topic, number, partition),
            Err(_) => (partition, 0, partition),
        },
        None => (partition, 0, partition),
    }
}

impl Keys {
    /// Every partition the history mentions in a send, poll, assign or commit.
    pub fn of(history: &History) -> Keys {
        let mut partitions: BTreeSet<&Partition> = BTreeSet::new();
        for op in &history.ops {
            match &op.body {
                Body::Send { partition, .. } => {
                    partitions.insert(partition);
                }
                Body::Poll { records, .. } | Body::Process { records, .. } => {
                    partitions.extend(records.keys());
                }
                Body::Assign { partitions: list }
                | Body::Join {
                    partitions: list, ..
                } => {
                    partitions.extend(list.iter());
                }
                Body::Commit { offsets, .. } => partitions.extend(offsets.keys()),
                _ => {}
            }
        }
        let mut ordered: Vec<&Partition> = partitions.into_iter().collect();
        ordered.sort_by(|a, b| partition_order(a).cmp(&partition_order(b)));
        let keys = ordered
            .into_iter()
            .enumerate()
            .map(|(key, partition)| (Partition::clone(partition), key as u32))
            .collect();
        Keys { keys }
    }

    /// The key of a partition.
    pub fn key(&self, partition: &str) -> u32 {
        *self
            .keys
            .get(partition)
            .unwrap_or_else(|| panic!("partition {partition} was numbered"))
    }

    /// The keys of every partition of `topic`.
    fn of_topic(&self, topic: &str) -> Vec<u32> {
        let mut keys: Vec<u32> = self
            .keys
            .iter()
            .filter(|(partition, _)| crate::history::topic_of(partition) == topic)
            .map(|(_, key)| *key)
            .collect();
        keys.sort_unstable();
        keys
    }

    /// `(key, partition)` in key order.
    pub fn mapping(&self) -> Vec<(u32, &str)> {
        let mut mapping: Vec<(u32, &str)> = self.keys.iter().map(|(p, k)| (*k, &**p)).collect();
        mapping.sort_unstable();
        mapping
    }
}

/// Jepsen processes for seedlog client processes: one per operation open at once.
#[derive(Debug, Default)]
struct Lanes {
    free: BTreeMap<u64, BTreeSet<u64>>,
    open: BTreeMap<u64, u64>,
    next: u64,
}

impl Lanes {
    /// The lowest free Jepsen process of `client`, or a new one.
    fn take(&mut self, client: u64) -> u64 {
        self.free
            .entry(client)
            .or_default()
            .pop_first()
            .unwrap_or_else(|| {
                self.next += 1;
                self.next - 1
            })
    }

    fn invoke(&mut self, client: u64, index: u64) -> u64 {
        let lane = self.take(client);
        self.open.insert(index, lane);
        lane
    }

    fn complete(&mut self, client: u64, invoke: u64, op_type: OpType) -> Result<u64, String> {
        let lane = self
            .open
            .remove(&invoke)
            .ok_or_else(|| format!("a completion of {invoke}, which is not an open invocation"))?;
        if op_type != OpType::Info {
            self.free.entry(client).or_default().insert(lane);
        }
        Ok(lane)
    }

    /// A lane for an instantaneous operation (assign, subscribe).
    fn instant(&mut self, client: u64) -> u64 {
        let lane = self.take(client);
        self.free.entry(client).or_default().insert(lane);
        lane
    }
}

/// An EDN string literal.
fn edn_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A keyword from a JSON key or a function name: `fail_syncs` -> `:fail-syncs`.
fn edn_keyword(name: &str) -> String {
    let mut out = String::from(":");
    for c in name.chars() {
        out.push(if c.is_ascii_alphanumeric() || "-*+!?.<>=".contains(c) {
            c
        } else {
            '-'
        });
    }
    out
}

/// JSON as EDN: objects become maps with keyword keys.
fn edn_of_json(json: &Json) -> String {
    match json {
        Json::Null => "nil".to_owned(),
        Json::Bool(b) => b.to_string(),
        Json::Number(n) => n.to_string(),
        Json::String(s) => edn_string(s),
        Json::Array(items) => {
            let items: Vec<String> = items.iter().map(edn_of_json).collect();
            format!("[{}]", items.join(" "))
        }
        Json::Object(map) => {
            let entries: Vec<String> = map
                .iter()
                .map(|(key, value)| format!("{} {}", edn_keyword(key), edn_of_json(value)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}

fn type_keyword(op_type: OpType) -> &'static str {
    match op_type {
        OpType::Invoke => ":invoke",
        OpType::Ok => ":ok",
        OpType::Fail => ":fail",
        OpType::Info => ":info",
    }
}

/// The micro-operation vector of a send or poll.
fn micro_ops(op: &Op, keys: &Keys) -> Result<String, String> {
    Ok(match &op.body {
        Body::Send {
            partition,
            value,
            offset,
        } => {
            let key = keys.key(partition);
            let value = jepsen_value(*value)?;
            if op.op_type == OpType::Ok {
                let offset = offset
                    .filter(|offset| *offset >= 0)
                    .map_or_else(|| "nil".to_owned(), |offset| offset.to_string());
                format!("[[:send {key} [{offset} {value}]]]")
            } else {
                format!("[[:send {key} {value}]]")
            }
        }
        Body::Poll { records, .. } if op.op_type == OpType::Ok => {
            let mut by_key: Vec<(u32, String)> = Vec::new();
            for (partition, entries) in records {
                let mut pairs = Vec::with_capacity(entries.len());
                for (offset, value) in entries {
                    pairs.push(format!("[{offset} {}]", jepsen_value(*value)?));
                }
                by_key.push((keys.key(partition), pairs.join(" ")));
            }
            by_key.sort_unstable();
            let entries: Vec<String> = by_key
                .into_iter()
                .map(|(key, pairs)| format!("{key} [{pairs}]"))
                .collect();
            format!("[[:poll {{{}}}]]", entries.join(", "))
        }
        Body::Poll { .. } => "[[:poll]]".to_owned(),
        other => unreachable!("not a send or a poll: {}", other.f()),
    })
}

/// One EDN operation map.
struct EdnOp<'a> {
    op_type: OpType,
    f: &'a str,
    process: String,
    value: String,
    source: &'a Op,
}

/// Writes the history as Jepsen EDN (see the module documentation for the mapping).
pub fn jepsen_edn(history: &History) -> Result<String, String> {
    let keys = Keys::of(history);
    let mut out = header(history, &keys);
    let mut lanes = Lanes::default();
    let mut index = 0_u64;
    for op in &history.ops {
        for edn in edn_ops(op, &keys, &mut lanes)? {
            write_op(&mut out, index, &edn);
            index += 1;
        }
    }
    Ok(out)
}

fn header(history: &History, keys: &Keys) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        ";; seedlog history ({} ops) in the shape of Jepsen's Kafka workload (jepsen.tests.kafka)",
        history.ops.len()
    );
    let _ = writeln!(
        out,
        ";; values: process * {VALUE_STRIDE} + sequence (seedlog's 2-149 is 2000149)"
    );
    for (key, partition) in keys.mapping() {
        let _ = writeln!(out, ";; key {key} = {partition}");
    }
    out
}

/// The EDN operations one history operation becomes (none, one, or an invoke/complete pair).
fn edn_ops<'a>(op: &'a Op, keys: &Keys, lanes: &mut Lanes) -> Result<Vec<EdnOp<'a>>, String> {
    let pair = |f: &'a str, process: String, value: String| {
        vec![
            EdnOp {
                op_type: OpType::Invoke,
                f,
                process: process.clone(),
                value: value.clone(),
                source: op,
            },
            EdnOp {
                op_type: OpType::Ok,
                f,
                process,
                value,
                source: op,
            },
        ]
    };
    let keys_value = |list: Vec<u32>| {
        let list: Vec<String> = list.iter().map(u32::to_string).collect();
        format!("[{}]", list.join(" "))
    };
    Ok(match (&op.process, &op.body) {
        (Process::Client(client), Body::Send { .. } | Body::Poll { .. }) => {
            let lane = match op.op_type {
                OpType::Invoke => lanes.invoke(*client, op.index),
                completion => {
                    let invoke = op.invoke.ok_or_else(|| {
                        format!("op {}: a completion names no invocation", op.index)
                    })?;
                    lanes.complete(*client, invoke, completion)?
                }
            };
            vec![EdnOp {
                op_type: op.op_type,
                f: op.body.f(),
                process: lane.to_string(),
                value: micro_ops(op, keys)?,
                source: op,
            }]
        }
        (Process::Client(client), Body::Assign { partitions }) => {
            let list = partitions.iter().map(|p| keys.key(p)).collect();
            pair(
                "assign",
                lanes.instant(*client).to_string(),
                keys_value(list),
            )
        }
        (Process::Client(client), Body::Subscribe { topics, .. }) => {
            let list = topics.iter().flat_map(|t| keys.of_topic(t)).collect();
            pair(
                "subscribe",
                lanes.instant(*client).to_string(),
                keys_value(list),
            )
        }
        (Process::Named(_), Body::Nemesis(nemesis)) if !BOOKKEEPING.contains(&nemesis.f()) => {
            let value = edn_of_json(&nemesis.value());
            let mut ops = pair(nemesis.f(), ":nemesis".to_owned(), value);
            for edn in &mut ops {
                edn.op_type = OpType::Info;
            }
            ops
        }
        // Bookkeeping nemesis events (the drawn schedule, a resolved selector) are not Jepsen's.
        _ => Vec::new(),
    })
}

fn write_op(out: &mut String, index: u64, edn: &EdnOp<'_>) {
    let op = edn.source;
    let _ = write!(
        out,
        "{{:index {index}, :time {}, :type {}, :process {}, :f {}, :value {}",
        op.time_ns,
        type_keyword(edn.op_type),
        edn.process,
        edn_keyword(edn.f),
        edn.value
    );
    if let Process::Client(client) = op.process {
        let _ = write!(out, ", :seedlog-process {client}");
    }
    if let Some(node) = &op.node {
        let _ = write!(out, ", :node {}", edn_string(node));
    }
    if let Some(error) = &op.error {
        let _ = write!(out, ", :error {}", edn_string(error));
    }
    let _ = writeln!(out, ", :seedlog-index {}}}", op.index);
}

#[cfg(test)]
mod tests;
