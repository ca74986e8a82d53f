//! Checkers: decide from a history whether each delivery guarantee and ordering property held.
//! Names follow Jepsen's Kafka checker so results compare with published analyses.
//!
//! | check | violated when |
//! |---|---|
//! | `lost-write` | an acknowledged value is not at its acknowledged offset in the final log (the final reader's read of the whole partition), or a value a consumer observed is gone from it with no recorded truncation to explain it; without a final read: never polled although reads went past it |
//! | `unseen` | an acknowledged value was never polled by anyone, and the final read did not get that far |
//! | `duplicate` | a value sat at two offsets at once (unless a recorded truncation removed the first before the second was seen) |
//! | `inconsistent-offsets` | one offset of a partition held two values in the same log version (a recorded truncation starts a new version past its offset) |
//! | `G1a` | a value whose send definitely failed was polled (aborted read) |
//! | `nonmonotonic-send` | a producer process's later send landed at or before its earlier send in a partition, with no recorded truncation between |
//! | `nonmonotonic-poll` | a consumer incarnation polled an offset at or before one it polled earlier in a partition |
//! | `poll-skip` | a consumer incarnation's successive polls of a partition jumped over offsets that exist in the final log, with no reset or seek between |
//! | `at-least-once` | an acknowledged value in a consumer's assignment never reached that consumer (any incarnation) by the end |
//! | `at-most-once` | a consumer incarnation consumed a value more than once |
//! | `exactly-once` | either of the two above |
//! | `hw-monotonic` | a broker's high watermark of a partition went backwards (across restarts included) |
//! | `log-start-monotonic` | a broker's log start offset of a partition went backwards |
//! | `contract` | an answer a client received broke its request's contract: a Fetch partition above `max.partition.fetch.bytes` or the whole above `fetch.max.bytes` (beyond KIP-74's one whole batch in the first partition with records), an empty Fetch answer before `fetch.max.wait.ms` with no error and no truncated log, or a ListOffsets by timestamp (or -3, the largest timestamp) that disagrees with the final read, or a log that still holds records once `retention.ms` has passed with no writes |
//! | `one-leader` | two brokers claimed to lead a partition in the same leader epoch |
//! | `leader-in-isr`, `hw-within-isr`, `strong-isr`, `committed-lost` | the cluster invariants the simulator's monitor checks after every broker step (see `cluster_monitor`); the history records each violation as an `invariant` operation |
//! | `group-at-least-once` | an acknowledged value of a group's topics was never processed by any member of the group by the end |
//! | `group-at-most-once` | a group's members processed a value more than once (across members, crashes and rebalances) |
//! | `zombie-commit` | a group's commit in generation g, invoked after a member had joined a later generation, was acknowledged: a fenced member's commit was accepted |
//! | `commit-regression` | a group's committed offset of a partition went backwards (in the order the coordinator acknowledged the commits) |
//! | `stalled` | liveness: the faults were healed, yet a producer had not finished its sends three quarters of the way through the liveness phase, or a consumer had not read an assigned partition to the end of the final log by the end of it (unless its broker last answered it `CORRUPT_MESSAGE` past what it read: it cannot go on without a seek); each is named, a consumer with the partition and the offsets (a cluster that never acknowledges passes every safety check; this one it fails) |

mod broker;
pub use broker::ConsumerLag;
mod delivery;
mod group;
mod order;
pub(crate) mod values;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use crate::history::{
    Body, FinalRead, History, Nemesis, Op, OpType, Partition, Process, Records, Value,
};
use values::{ValueMap, ValueSet};

/// Every check, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Check {
    /// `lost-write`.
    LostWrite,
    /// `unseen`.
    Unseen,
    /// `duplicate`.
    Duplicate,
    /// `inconsistent-offsets`.
    InconsistentOffsets,
    /// `G1a`.
    G1a,
    /// `nonmonotonic-send`.
    NonmonotonicSend,
    /// `nonmonotonic-poll`.
    NonmonotonicPoll,
    /// `poll-skip`.
    PollSkip,
    /// `truncation-skip`.
    TruncationSkip,
    /// `at-least-once`.
    AtLeastOnce,
    /// `at-most-once`.
    AtMostOnce,
    /// `exactly-once`.
    ExactlyOnce,
    /// `group-at-least-once`.
    GroupAtLeastOnce,
    /// `group-at-most-once`.
    GroupAtMostOnce,
    /// `commit-regression`.
    CommitRegression,
    /// `zombie-commit`.
    ZombieCommit,
    /// `hw-monotonic`.
    HwMonotonic,
    /// `log-start-monotonic`.
    LogStartMonotonic,
    /// `contract`.
    Contract,
    /// `stalled`.
    Stalled,
    /// `failed-send`.
    FailedSend,
    /// `one-leader`.
    OneLeader,
    /// `leader-in-isr`.
    LeaderInIsr,
    /// `hw-within-isr`.
    HwWithinIsr,
    /// `strong-isr`.
    StrongIsr,
    /// `committed-lost`.
    CommittedLost,
    /// `unfenced-commit`.
    UnfencedCommit,
}

impl Check {
    /// Every check, in report order.
    pub const ALL: [Check; 27] = [
        Check::LostWrite,
        Check::Unseen,
        Check::Duplicate,
        Check::InconsistentOffsets,
        Check::G1a,
        Check::NonmonotonicSend,
        Check::NonmonotonicPoll,
        Check::PollSkip,
        Check::TruncationSkip,
        Check::AtLeastOnce,
        Check::AtMostOnce,
        Check::ExactlyOnce,
        Check::GroupAtLeastOnce,
        Check::GroupAtMostOnce,
        Check::CommitRegression,
        Check::ZombieCommit,
        Check::HwMonotonic,
        Check::LogStartMonotonic,
        Check::Contract,
        Check::Stalled,
        Check::FailedSend,
        Check::OneLeader,
        Check::LeaderInIsr,
        Check::HwWithinIsr,
        Check::StrongIsr,
        Check::CommittedLost,
        Check::UnfencedCommit,
    ];

    /// Jepsen's name (or ours, in the same style).
    pub fn name(self) -> &'static str {
        match self {
            Check::LostWrite => "lost-write",
            Check::Unseen => "unseen",
            Check::Duplicate => "duplicate",
            Check::InconsistentOffsets => "inconsistent-offsets",
            Check::G1a => "G1a",
            Check::NonmonotonicSend => "nonmonotonic-send",
            Check::NonmonotonicPoll => "nonmonotonic-poll",
            Check::PollSkip => "poll-skip",
            Check::TruncationSkip => "truncation-skip",
            Check::AtLeastOnce => "at-least-once",
            Check::AtMostOnce => "at-most-once",
            Check::ExactlyOnce => "exactly-once",
            Check::GroupAtLeastOnce => "group-at-least-once",
            Check::GroupAtMostOnce => "group-at-most-once",
            Check::CommitRegression => "commit-regression",
            Check::ZombieCommit => "zombie-commit",
            Check::HwMonotonic => "hw-monotonic",
            Check::LogStartMonotonic => "log-start-monotonic",
            Check::Contract => "contract",
            Check::Stalled => "stalled",
            Check::FailedSend => "failed-send",
            Check::OneLeader => "one-leader",
            Check::LeaderInIsr => "leader-in-isr",
            Check::HwWithinIsr => "hw-within-isr",
            Check::StrongIsr => "strong-isr",
            Check::CommittedLost => "committed-lost",
            Check::UnfencedCommit => "unfenced-commit",
        }
    }

    /// The check of that name.
    pub fn from_name(name: &str) -> Option<Check> {
        Check::ALL.into_iter().find(|check| check.name() == name)
    }

    /// Every name, comma-separated (for error messages).
    pub fn names() -> String {
        Check::ALL.map(Check::name).join(", ")
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The node name of the liveness phase's reader.
pub const FINAL_READER: &str = "final-reader";

/// Examples kept per violated check.
const EXAMPLES_MAX: usize = 5;

/// A broker's claim to lead: `(history index, broker)`.
pub(crate) type Claim = (u64, Arc<str>);

/// The verdict of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// Which check.
    pub check: Check,
    /// Number of violations (0: the property held).
    pub violations: usize,
    /// A few violations, described.
    pub examples: Vec<String>,
}

impl CheckResult {
    fn new(check: Check, violations: Vec<String>) -> CheckResult {
        let count = violations.len();
        CheckResult {
            check,
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
    pub(crate) partition: Partition,
    pub(crate) process: u64,
    pub(crate) invoke_index: u64,
    pub(crate) outcome: Outcome,
    /// History index of the completion, if any.
    pub(crate) completed_index: Option<u64>,
}

/// One record returned by one poll.
#[derive(Debug, Clone)]
pub(crate) struct PollRecord {
    pub(crate) index: u64,
    pub(crate) process: u64,
    pub(crate) node: Arc<str>,
    pub(crate) partition: Partition,
    pub(crate) offset: i64,
    pub(crate) value: Value,
}

/// A position a consumer did not reach by polling: a reset or a seek.
#[derive(Debug, Clone)]
pub(crate) struct Repositioned {
    pub(crate) index: u64,
    pub(crate) process: u64,
    pub(crate) partition: Partition,
}

/// A broker's record that a partition's log may have lost what lay past `from_offset`.
#[derive(Debug, Clone)]
pub(crate) struct Truncation {
    pub(crate) index: u64,
    pub(crate) node: Arc<str>,
    pub(crate) from_offset: i64,
    pub(crate) reason: String,
}

/// A consumer node across its incarnations.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConsumerNode {
    pub(crate) assigned: BTreeSet<Partition>,
    pub(crate) consumed: ValueSet,
}

/// `(history index, offset)` samples of one broker's view of one partition.
pub(crate) type Samples = BTreeMap<(Arc<str>, Partition), Vec<(u64, i64)>>;

/// The history digested once for every check.
#[derive(Debug, Default)]
pub(crate) struct Analysis {
    pub(crate) sends: ValueMap<SendInfo>,
    /// Records polled by clients (the final reader excluded).
    pub(crate) polls: Vec<PollRecord>,
    /// Records polled by the final reader.
    pub(crate) final_polls: Vec<PollRecord>,
    pub(crate) repositioned: Vec<Repositioned>,
    pub(crate) truncations: BTreeMap<Partition, Vec<Truncation>>,
    pub(crate) high_watermarks: Samples,
    pub(crate) log_starts: Samples,
    /// The brokers that claimed leadership of each partition in each leader epoch.
    pub(crate) leaders: BTreeMap<(Partition, i32), Vec<Claim>>,
    pub(crate) consumers: BTreeMap<Arc<str>, ConsumerNode>,
    pub(crate) final_reads: BTreeMap<Partition, FinalRead>,
    /// The final log: what the final reader found at each offset.
    pub(crate) final_logs: BTreeMap<Partition, BTreeMap<i64, Value>>,
    /// Index of the final reader's end-offset snapshot: only writes acknowledged before it are
    /// judged against the final read.
    pub(crate) final_read_started: Option<u64>,
    /// `(history index, producers)` of each `producers-unfinished` record.
    pub(crate) unfinished_producers: Vec<(u64, String)>,
    /// `(history index, client node, detail)` of each contract breach a client saw.
    pub(crate) breaches: Vec<(u64, Arc<str>, String)>,
    /// Each cluster invariant the monitor saw broken: `(history index, partition, detail)`.
    pub(crate) invariants: BTreeMap<Check, Vec<(u64, Partition, String)>>,
    /// Each group's subscribed topics.
    pub(crate) group_topics: BTreeMap<Arc<str>, BTreeSet<Arc<str>>>,
    /// What each group's members processed.
    pub(crate) processed: BTreeMap<Arc<str>, group::ProcessedBy>,
    /// Acknowledged commits in completion order.
    pub(crate) commits: Vec<group::Commit>,
    /// `(history index, generation)` of each generation a group's member joined.
    pub(crate) joins: BTreeMap<Arc<str>, Vec<(u64, i32)>>,
}

impl Analysis {
    pub(crate) fn new(ops: &[Op]) -> Analysis {
        let mut analysis = Analysis::default();
        // The polled records, counted first: the two lists are the largest the analysis builds,
        // and grown by doubling they would be copied over and over.
        let (mut polled, mut final_polled) = (0, 0);
        for op in ops {
            if let (Body::Poll { records, .. }, OpType::Ok) = (&op.body, op.op_type) {
                let count: usize = records.values().map(Vec::len).sum();
                if op.node.as_deref() == Some(FINAL_READER) {
                    final_polled += count;
                } else {
                    polled += count;
                }
            }
        }
        analysis.polls.reserve_exact(polled);
        analysis.final_polls.reserve_exact(final_polled);
        for op in ops {
            match &op.process {
                Process::Client(process) => analysis.client_op(*process, op),
                Process::Named(actor) => analysis.named_op(actor, op),
            }
        }
        // Built from each partition's reads at once (a later read of an offset wins, as an
        // insert would have it): a tree built from a sorted list costs a fraction of the inserts.
        let mut reads: BTreeMap<Partition, Vec<(i64, Value)>> = BTreeMap::new();
        for poll in &analysis.final_polls {
            reads
                .entry(Arc::clone(&poll.partition))
                .or_default()
                .push((poll.offset, poll.value));
        }
        analysis.final_logs = reads
            .into_iter()
            .map(|(partition, mut read)| {
                read.sort_by_key(|(offset, _)| *offset); // stable: reads of one offset in order
                read.dedup_by(|later, earlier| {
                    let same = later.0 == earlier.0;
                    if same {
                        *earlier = *later;
                    }
                    same
                });
                (partition, read.into_iter().collect())
            })
            .collect();
        analysis
    }

    fn client_op(&mut self, process: u64, op: &crate::history::Op) {
        let node = op.node.clone().unwrap_or_else(|| "".into());
        let is_final_reader = &*node == FINAL_READER;
        match &op.body {
            Body::Send {
                partition,
                value,
                offset,
            } => match op.op_type {
                OpType::Invoke => {
                    self.sends.insert(
                        *value,
                        SendInfo {
                            partition: Arc::clone(partition),
                            process,
                            invoke_index: op.index,
                            outcome: Outcome::Pending,
                            completed_index: None,
                        },
                    );
                }
                completion => {
                    if let Some(send) = self.sends.get_mut(value) {
                        send.completed_index = Some(op.index);
                        send.outcome = match completion {
                            OpType::Ok => Outcome::Ok(offset.unwrap_or(-1)),
                            OpType::Fail => Outcome::Fail,
                            _ => Outcome::Info,
                        };
                    }
                }
            },
            Body::Poll { records, .. } if op.op_type == OpType::Ok => {
                self.poll_op(process, op, &node, records);
            }
            Body::Assign { partitions } if !is_final_reader => {
                let consumer = self.consumers.entry(node).or_default();
                consumer.assigned.extend(partitions.iter().cloned());
            }
            Body::Position { partition, .. } => self.repositioned.push(Repositioned {
                index: op.index,
                process,
                partition: Arc::clone(partition),
            }),
            Body::Breach { detail } => self.breaches.push((op.index, node, detail.clone())),
            _ => self.group_op(op, &node),
        }
    }

    /// The records of a client's acknowledged poll.
    fn poll_op(&mut self, process: u64, op: &Op, node: &Arc<str>, records: &Records) {
        let is_final_reader = &**node == FINAL_READER;
        // The consumer's set, looked up once a poll (every record is the same node's), and only
        // for a poll that brought records.
        let mut consumed = (!is_final_reader
            && records.values().any(|entries| !entries.is_empty()))
        .then(|| &mut self.consumers.entry(Arc::clone(node)).or_default().consumed);
        for (partition, entries) in records {
            for (offset, value) in entries {
                let record = PollRecord {
                    index: op.index,
                    process,
                    node: Arc::clone(node),
                    partition: Arc::clone(partition),
                    offset: *offset,
                    value: *value,
                };
                if let Some(consumed) = consumed.as_deref_mut() {
                    consumed.insert(*value, ());
                }
                if is_final_reader {
                    self.final_polls.push(record);
                } else {
                    self.polls.push(record);
                }
            }
        }
    }

    /// A group member's `subscribe`, `join`, `process` and acknowledged `commit`.
    fn group_op(&mut self, op: &crate::history::Op, node: &Arc<str>) {
        match &op.body {
            Body::Subscribe { group, topics } => self
                .group_topics
                .entry(Arc::clone(group))
                .or_default()
                .extend(topics.iter().cloned()),
            Body::Process { group, records } => {
                let processed = self.processed.entry(Arc::clone(group)).or_default();
                for (_, value) in records.values().flatten() {
                    processed
                        .entry(*value)
                        .or_default()
                        .push((op.index, Arc::clone(node)));
                }
            }
            Body::Join {
                group, generation, ..
            } => self
                .joins
                .entry(Arc::clone(group))
                .or_default()
                .push((op.index, *generation)),
            Body::Commit {
                group,
                generation,
                offsets,
            } if op.op_type == OpType::Ok => self.commits.push(group::Commit {
                group: Arc::clone(group),
                invoked: op.invoke.unwrap_or(op.index),
                acknowledged: op.index,
                generation: *generation,
                offsets: offsets.clone(),
            }),
            _ => {}
        }
    }

    fn named_op(&mut self, actor: &Arc<str>, op: &crate::history::Op) {
        match &op.body {
            Body::FinalReadStart => self.final_read_started = Some(op.index),
            Body::FinalRead(read) => {
                self.final_reads
                    .insert(Arc::clone(&read.partition), read.clone());
            }
            Body::HighWatermark { partition, offset } => self
                .high_watermarks
                .entry((Arc::clone(actor), Arc::clone(partition)))
                .or_default()
                .push((op.index, *offset)),
            Body::LogStart { partition, offset } => self
                .log_starts
                .entry((Arc::clone(actor), Arc::clone(partition)))
                .or_default()
                .push((op.index, *offset)),
            Body::Leader { partition, epoch } => self
                .leaders
                .entry((Arc::clone(partition), *epoch))
                .or_default()
                .push((op.index, Arc::clone(actor))),
            Body::Nemesis(nemesis @ Nemesis::ProducersUnfinished { .. }) => self
                .unfinished_producers
                .push((op.index, nemesis.value().to_string())),
            Body::Invariant {
                check,
                partition,
                detail,
            } => self.invariants.entry(*check).or_default().push((
                op.index,
                Arc::clone(partition),
                detail.clone(),
            )),
            Body::Truncate {
                partition,
                from_offset,
                reason,
            } => self
                .truncations
                .entry(Arc::clone(partition))
                .or_default()
                .push(Truncation {
                    index: op.index,
                    node: Arc::clone(actor),
                    from_offset: *from_offset,
                    reason: reason.clone(),
                }),
            _ => {}
        }
    }

    /// A recorded truncation of `partition` at or below `offset`, strictly between two history
    /// indexes: it explains why what sat at `offset` before may differ after.
    pub(crate) fn truncation_between(
        &self,
        partition: &Partition,
        offset: i64,
        after: u64,
        before: u64,
    ) -> Option<&Truncation> {
        self.truncations.get(partition)?.iter().find(|truncation| {
            truncation.from_offset <= offset
                && after < truncation.index
                && truncation.index < before
        })
    }
}

/// What the final read `read` of a partition says about its `offset` (for values that existed
/// before its snapshot).
pub(crate) fn final_read_covers(read: &FinalRead, offset: i64) -> Coverage {
    if offset < read.read_to {
        return Coverage::Read;
    }
    if read.reached_end && offset >= read.end_offset {
        return Coverage::PastTheEnd(read.end_offset);
    }
    let corrupt = read
        .error
        .as_deref()
        .is_some_and(|error| error.contains("CORRUPT"));
    if corrupt && offset < read.end_offset {
        Coverage::Unreadable(read.read_to)
    } else {
        Coverage::Unknown
    }
}

/// Whether the final reader skipped `offset` as part of a corrupt batch.
pub(crate) fn final_read_skipped(read: &FinalRead, offset: i64) -> bool {
    read.skipped
        .iter()
        .any(|(first, last)| (*first..=*last).contains(&offset))
}

/// What the final read says about one offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coverage {
    /// The final reader read past it: the final log says what is there.
    Read,
    /// The log ended before it (at the given offset).
    PastTheEnd(i64),
    /// The final read stopped at a corrupt batch at the given position, before it.
    Unreadable(i64),
    /// The final read did not get there, or there was none.
    Unknown,
}

/// Whether every assigned consumer has polled, in every partition it is assigned, the last
/// record the final read found (the liveness phase waits for it before the run ends, as it waits
/// for consumer groups; `stalled` names those that never get there).
pub fn consumers_caught_up(ops: &[Op]) -> bool {
    broker::lagging_consumers(ops).is_empty()
}

/// Runs every check.
pub fn check_all(history: &History) -> Vec<CheckResult> {
    let analysis = Analysis::new(&history.ops);
    let mut results = delivery::check(&analysis);
    results.extend(order::check(&analysis));
    results.extend(broker::check(&analysis, &history.ops));
    results.extend(group::check(&analysis));
    results.sort_by_key(|result| result.check);
    assert_eq!(
        results
            .iter()
            .map(|result| result.check)
            .collect::<Vec<_>>(),
        Check::ALL,
        "every check reports once"
    );
    results
}

/// How many of a partition's `truncations` reached `offset` before history index `index`: the
/// version of the log at that offset.
pub(crate) fn log_version(truncations: &[Truncation], offset: i64, index: u64) -> usize {
    truncations
        .iter()
        .filter(|truncation| truncation.from_offset <= offset && truncation.index < index)
        .count()
}

#[cfg(test)]
mod tests;
