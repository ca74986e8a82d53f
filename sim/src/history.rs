//! The operation history of one run: Jepsen-style operations stamped with simulated time,
//! saved as JSON lines, hashed for the determinism check.
//!
//! Shapes (as Jepsen's Kafka workload, with two additions noted below):
//! ```text
//! {"index":17,"time_ns":5012000,"process":3,"type":"invoke","f":"send","value":[["send","orders-0","3-42"]],"node":"p1"}
//! {"index":18,"time_ns":5230000,"process":3,"type":"ok","f":"send","value":[["send","orders-0",[118,"3-42"]]],"node":"p1","invoke":17}
//! {"index":31,"time_ns":6100000,"process":5,"type":"ok","f":"poll","value":[["poll",{"orders-0":[[117,"3-41"],[118,"3-42"]]}]],"node":"c1","invoke":30}
//! {"index":32,"time_ns":6100500,"process":"nemesis","type":"info","f":"crash","value":{"node":"broker-0","level":"power-loss"}}
//! ```
//! `type` is `invoke`, `ok`, `fail` (definitely did not happen) or `info` (indeterminate).
//! Additions: `node` names the client behind a process (a restarted client gets a new process
//! number, as in Jepsen), and `invoke` gives the index of the invocation a completion answers,
//! because a seedlog producer pipelines sends: one process may have several sends in flight.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Who performed an operation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Process {
    /// A client incarnation.
    Client(u64),
    /// `"nemesis"` (faults) or another named actor.
    Named(String),
}

/// Operation type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpType {
    /// Started.
    Invoke,
    /// Completed and took effect.
    Ok,
    /// Completed and definitely did not take effect.
    Fail,
    /// Unknown outcome, or a nemesis event.
    Info,
}

/// One history entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Op {
    /// Position in the history.
    pub index: u64,
    /// Simulated nanoseconds since the run started.
    pub time_ns: u64,
    /// Who.
    pub process: Process,
    /// What kind of entry.
    #[serde(rename = "type")]
    pub op_type: OpType,
    /// The function: `send`, `poll`, `crash`, `restart`, `partition`, `heal`, ...
    pub f: String,
    /// Arguments or results.
    pub value: Value,
    /// The client behind the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// For completions: the index of the invocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invoke: Option<u64>,
    /// For failures: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A send as the checkers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Send {
    /// Partition (`orders-0`).
    pub partition: String,
    /// The unique value.
    pub value: String,
    /// Offset, on `ok` completions (-1 with acks=0).
    pub offset: Option<i64>,
}

/// Records returned by a poll, per partition, in order.
pub type Polled = BTreeMap<String, Vec<(i64, String)>>;

impl Op {
    /// The send described by a `send` operation.
    pub fn send(&self) -> Option<Send> {
        if self.f != "send" {
            return None;
        }
        let micro = self.value.get(0)?;
        let partition = micro.get(1)?.as_str()?.to_owned();
        let argument = micro.get(2)?;
        if let Some(value) = argument.as_str() {
            return Some(Send {
                partition,
                value: value.to_owned(),
                offset: None,
            });
        }
        let offset = argument.get(0)?.as_i64()?;
        let value = argument.get(1)?.as_str()?.to_owned();
        Some(Send {
            partition,
            value,
            offset: Some(offset),
        })
    }

    /// The records of an `ok` poll.
    pub fn polled(&self) -> Option<Polled> {
        if self.f != "poll" || self.op_type != OpType::Ok {
            return None;
        }
        let by_partition = self.value.get(0)?.get(1)?.as_object()?;
        let mut polled = Polled::new();
        for (partition, records) in by_partition {
            let records = records
                .as_array()?
                .iter()
                .map(|pair| Some((pair.get(0)?.as_i64()?, pair.get(1)?.as_str()?.to_owned())))
                .collect::<Option<Vec<_>>>()?;
            polled.insert(partition.clone(), records);
        }
        Some(polled)
    }
}

/// A whole history.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// Operations in order.
    pub ops: Vec<Op>,
}

/// FNV-1a, 64 bits: stable across processes and platforms (never hash with `RandomState`).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

impl History {
    /// JSON lines, one operation per line.
    pub fn to_jsonl(&self) -> String {
        let mut text = String::new();
        for op in &self.ops {
            text.push_str(&serde_json::to_string(op).expect("ops serialize"));
            text.push('\n');
        }
        text
    }

    /// Parses JSON lines; errors name the line.
    pub fn from_jsonl(text: &str) -> Result<History, String> {
        let mut ops = Vec::new();
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            ops.push(
                serde_json::from_str(line)
                    .map_err(|error| format!("line {}: {error}", number + 1))?,
            );
        }
        Ok(History { ops })
    }

    /// Hash of the JSON lines: equal histories, equal hashes.
    pub fn hash(&self) -> u64 {
        fnv1a(self.to_jsonl().as_bytes())
    }
}

/// Builds a history as a run goes.
#[derive(Debug, Default)]
pub struct Recorder {
    history: History,
    next_process: u64,
}

/// How a client operation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// Took effect, with this value.
    Ok(Value),
    /// Definitely did not take effect.
    Fail(String),
    /// May or may not have taken effect.
    Info(String),
}

impl Recorder {
    /// A new process number for a client incarnation.
    pub fn new_process(&mut self) -> u64 {
        self.next_process += 1;
        self.next_process
    }

    fn push(
        &mut self,
        time_ns: u64,
        process: Process,
        op_type: OpType,
        f: &str,
        value: Value,
    ) -> u64 {
        let index = self.history.ops.len() as u64;
        self.history.ops.push(Op {
            index,
            time_ns,
            process,
            op_type,
            f: f.to_owned(),
            value,
            node: None,
            invoke: None,
            error: None,
        });
        index
    }

    /// Records an invocation by a client process; returns its index.
    pub fn invoke(&mut self, time_ns: u64, process: u64, node: &str, f: &str, value: Value) -> u64 {
        let index = self.push(time_ns, Process::Client(process), OpType::Invoke, f, value);
        self.history.ops[index as usize].node = Some(node.to_owned());
        index
    }

    /// Records the completion of invocation `invoke`.
    pub fn complete(&mut self, time_ns: u64, invoke: u64, completion: Completion) {
        let invocation = self.history.ops[invoke as usize].clone();
        let (op_type, value, error) = match completion {
            Completion::Ok(value) => (OpType::Ok, value, None),
            Completion::Fail(error) => (OpType::Fail, invocation.value.clone(), Some(error)),
            Completion::Info(error) => (OpType::Info, invocation.value.clone(), Some(error)),
        };
        let index = self.push(time_ns, invocation.process, op_type, &invocation.f, value);
        let op = &mut self.history.ops[index as usize];
        op.node = invocation.node;
        op.invoke = Some(invoke);
        op.error = error;
    }

    /// Records an event of a named actor (`nemesis`, `final-reader`) as an `info` operation.
    pub fn event(&mut self, time_ns: u64, actor: &str, f: &str, value: Value) {
        self.push(
            time_ns,
            Process::Named(actor.to_owned()),
            OpType::Info,
            f,
            value,
        );
    }

    /// Completes every invocation still open as `info` (its process crashed or the run ended
    /// first), as Jepsen does for crashed processes.
    pub fn complete_pending(&mut self, time_ns: u64, reason: &str) {
        let completed: std::collections::BTreeSet<u64> =
            self.history.ops.iter().filter_map(|op| op.invoke).collect();
        let pending: Vec<u64> = self
            .history
            .ops
            .iter()
            .filter(|op| op.op_type == OpType::Invoke && !completed.contains(&op.index))
            .map(|op| op.index)
            .collect();
        for invoke in pending {
            self.complete(time_ns, invoke, Completion::Info(reason.to_owned()));
        }
    }

    /// The history so far.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Takes the finished history.
    pub fn finish(self) -> History {
        self.history
    }
}

/// `[["send", partition, value]]`.
pub fn send_invocation(partition: &str, value: &str) -> Value {
    json!([["send", partition, value]])
}

/// `[["send", partition, [offset, value]]]`.
pub fn send_result(partition: &str, offset: i64, value: &str) -> Value {
    json!([["send", partition, [offset, value]]])
}

/// `[["poll", {partition: [[offset, value], ...]}]]`.
pub fn poll_result(polled: &Polled) -> Value {
    json!([["poll", polled]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_round_trips_through_json_lines_and_hashes_stably() {
        let mut recorder = Recorder::default();
        let process = recorder.new_process();
        let invoke = recorder.invoke(10, process, "p1", "send", send_invocation("t-0", "1-1"));
        recorder.complete(20, invoke, Completion::Ok(send_result("t-0", 0, "1-1")));
        recorder.event(
            30,
            "nemesis",
            "crash",
            json!({"node": "broker-0", "level": "process"}),
        );
        let history = recorder.finish();
        let text = history.to_jsonl();
        assert!(text.starts_with(r#"{"index":0,"time_ns":10,"process":1,"type":"invoke","f":"send","value":[["send","t-0","1-1"]],"node":"p1"}"#));
        let parsed = History::from_jsonl(&text).expect("parses");
        assert_eq!(parsed, history);
        assert_eq!(parsed.hash(), history.hash());
        assert_eq!(
            history.ops[1].send(),
            Some(Send {
                partition: "t-0".into(),
                value: "1-1".into(),
                offset: Some(0)
            })
        );
        assert_eq!(history.ops[2].process, Process::Named("nemesis".into()));
        assert!(History::from_jsonl("{\"index\":0}\n")
            .expect_err("incomplete")
            .starts_with("line 1:"));
    }

    #[test]
    fn fnv1a_matches_the_reference_vector() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
