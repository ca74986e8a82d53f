//! Checkers: decide from a history whether each delivery guarantee and ordering property held.
//! Names follow Jepsen's Kafka checker so results compare with published analyses.
//!
//! | check | violated when |
//! |---|---|
//! | `lost-write` | an acknowledged value is missing from a final read that covered its whole partition, or (without one) was never polled although reads went past its offset |
//! | `unseen` | an acknowledged value was never polled and reads never got that far |
//! | `duplicate` | a value appears at more than one offset |
//! | `inconsistent-offsets` | one offset of a partition was seen holding different values |
//! | `G1a` | a value whose send definitely failed was polled (aborted read) |
//! | `nonmonotonic-send` | a producer process's later send landed at or before its earlier send in a partition |
//! | `nonmonotonic-poll` | a consumer process polled an offset at or before one it polled earlier in a partition |
//! | `at-least-once` | some acknowledged value was consumed by nobody (the final reader included) |
//! | `at-most-once` | some consumer (across its restarts) consumed a value more than once |
//! | `exactly-once` | either of the two above |

mod delivery;
mod order;

use std::collections::BTreeMap;

use crate::history::{History, OpType, Process};

/// Every check, in report order.
pub const CHECKS: [&str; 10] = [
    "lost-write",
    "unseen",
    "duplicate",
    "inconsistent-offsets",
    "G1a",
    "nonmonotonic-send",
    "nonmonotonic-poll",
    "at-least-once",
    "at-most-once",
    "exactly-once",
];

/// The node name of the liveness phase's reader.
pub const FINAL_READER: &str = "final-reader";

/// Examples kept per violated check.
const EXAMPLES_MAX: usize = 5;

/// The verdict of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// Check name (one of [`CHECKS`]).
    pub name: &'static str,
    /// Number of violations (0: the property held).
    pub violations: usize,
    /// A few violations, described.
    pub examples: Vec<String>,
}

impl CheckResult {
    fn new(name: &'static str, violations: Vec<String>) -> CheckResult {
        let count = violations.len();
        CheckResult {
            name,
            violations: count,
            examples: violations.into_iter().take(EXAMPLES_MAX).collect(),
        }
    }

    /// Whether the property held.
    pub fn holds(&self) -> bool {
        self.violations == 0
    }
}

/// How a send ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// No completion recorded.
    Pending,
    /// Acknowledged at this offset (-1 with acks=0).
    Ok(i64),
    /// Definitely not written.
    Fail,
    /// Unknown.
    Info,
}

#[derive(Debug, Clone)]
pub(crate) struct SendInfo {
    pub(crate) partition: String,
    pub(crate) process: u64,
    pub(crate) invoke_index: u64,
    pub(crate) outcome: Outcome,
    /// History index of the completion, if any.
    pub(crate) completed_index: Option<u64>,
}

#[derive(Debug, Clone)]
pub(crate) struct PollRecord {
    pub(crate) process: u64,
    pub(crate) node: String,
    pub(crate) partition: String,
    pub(crate) offset: i64,
    pub(crate) value: String,
}

/// What the final read found for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FinalRead {
    pub(crate) reached_end: bool,
}

/// The history digested once for every check.
#[derive(Debug, Default)]
pub(crate) struct Analysis {
    pub(crate) sends: BTreeMap<String, SendInfo>,
    pub(crate) polls: Vec<PollRecord>,
    pub(crate) final_reads: BTreeMap<String, FinalRead>,
    /// Index of the final reader's end-offset snapshot: only writes acknowledged before it are
    /// judged against the final read.
    pub(crate) final_read_started: Option<u64>,
}

impl Analysis {
    pub(crate) fn new(history: &History) -> Analysis {
        let mut analysis = Analysis::default();
        for op in &history.ops {
            let process = match &op.process {
                Process::Client(process) => *process,
                Process::Named(name) if name == FINAL_READER && op.f == "final-read-start" => {
                    analysis.final_read_started = Some(op.index);
                    continue;
                }
                Process::Named(name) if name == FINAL_READER && op.f == "final-read" => {
                    let partition = op
                        .value
                        .get("partition")
                        .and_then(|value| value.as_str())
                        .unwrap_or_default();
                    let reached_end = op
                        .value
                        .get("reached_end")
                        .and_then(serde_json::Value::as_bool)
                        .unwrap_or(false);
                    analysis
                        .final_reads
                        .insert(partition.to_owned(), FinalRead { reached_end });
                    continue;
                }
                Process::Named(_) => continue,
            };
            if let Some(send) = op.send() {
                match op.op_type {
                    OpType::Invoke => {
                        analysis.sends.insert(
                            send.value,
                            SendInfo {
                                partition: send.partition,
                                process,
                                invoke_index: op.index,
                                outcome: Outcome::Pending,
                                completed_index: None,
                            },
                        );
                    }
                    completion => {
                        if let Some(info) = analysis.sends.get_mut(&send.value) {
                            info.completed_index = Some(op.index);
                            info.outcome = match completion {
                                OpType::Ok => Outcome::Ok(send.offset.unwrap_or(-1)),
                                OpType::Fail => Outcome::Fail,
                                _ => Outcome::Info,
                            };
                        }
                    }
                }
            }
            if let Some(polled) = op.polled() {
                let node = op.node.clone().unwrap_or_default();
                for (partition, records) in polled {
                    for (offset, value) in records {
                        analysis.polls.push(PollRecord {
                            process,
                            node: node.clone(),
                            partition: partition.clone(),
                            offset,
                            value,
                        });
                    }
                }
            }
        }
        analysis
    }
}

/// Runs every check.
pub fn check_all(history: &History) -> Vec<CheckResult> {
    let analysis = Analysis::new(history);
    let mut results = delivery::check(&analysis);
    results.extend(order::check(&analysis));
    let order = |name: &str| {
        CHECKS
            .iter()
            .position(|check| *check == name)
            .expect("a known check")
    };
    results.sort_by_key(|result| order(result.name));
    assert_eq!(results.len(), CHECKS.len(), "every check reports");
    results
}

#[cfg(test)]
mod tests;
