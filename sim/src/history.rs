//! The operation history of one run: typed, Jepsen-style operations stamped with simulated time.
//! JSON lines exist only at the edges (saving a failure, `seedlog-sim check`, the determinism
//! diff); the checkers and the hash work on the types.
//!
//! JSON shapes (as Jepsen's Kafka workload, with the additions noted below):
//! ```text
//! {"index":17,"time_ns":5012000,"process":3,"type":"invoke","f":"send","value":[["send","orders-0","3-42"]],"node":"p1"}
//! {"index":18,"time_ns":5230000,"process":3,"type":"ok","f":"send","value":[["send","orders-0",[118,"3-42"]]],"node":"p1","invoke":17}
//! {"index":31,"time_ns":6100000,"process":5,"type":"ok","f":"poll","value":[["poll",{"orders-0":[[117,"3-41"],[118,"3-42"]]}]],"node":"c1","invoke":30}
//! {"index":32,"time_ns":6100500,"process":"nemesis","type":"info","f":"crash","value":{"node":"broker-0","level":"power-loss"}}
//! {"index":40,"time_ns":6200000,"process":"broker-0","type":"info","f":"hw","value":{"partition":"orders-0","offset":119}}
//! ```
//! `type` is `invoke`, `ok`, `fail` (definitely did not happen) or `info` (indeterminate, or an
//! event). Additions: `node` names the client behind a process (a restarted client gets a new
//! process number, as in Jepsen); `invoke` gives the index of the invocation a completion answers
//! (a seedlog producer pipelines sends); a poll's `partition_errors` lists partitions that could
//! not deliver; clients record `assign`, `reset` (auto.offset.reset) and `seek`; brokers record
//! `hw`, `log-start`, `truncate`, `offline` and `leader`; the final reader records `final-read-start`
//! (before it asks for the end offsets) and one `final-read` per partition.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::Deserialize;

use crate::checker::Check;

pub mod nemesis;
pub use self::nemesis::Nemesis;
use serde_json::{json, Value as Json};

/// A unique value written by a producer: `<process>-<sequence>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Value {
    /// The producer process that first sent it (an incarnation that resends it after a
    /// restart keeps it).
    pub process: u64,
    /// Its sequence within that process.
    pub sequence: u64,
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.process, self.sequence)
    }
}

impl Value {
    /// Parses `<process>-<sequence>`.
    pub fn parse(text: &str) -> Option<Value> {
        let (process, sequence) = text.split_once('-')?;
        Some(Value {
            process: process.parse().ok()?,
            sequence: sequence.parse().ok()?,
        })
    }

    /// The bytes of `<process>-<sequence>`, as `Display` writes them, without the formatting
    /// machinery (once a send, it cost about 500 instructions a value).
    pub fn write_bytes(self, out: &mut Vec<u8>) {
        push_decimal(out, self.process);
        out.push(b'-');
        push_decimal(out, self.sequence);
    }

    /// [`Value::parse`] of a record's bytes, without checking them as UTF-8 first (a byte
    /// that is not ASCII is not a digit either): what [`Value::parse`] accepts and nothing else.
    pub fn parse_bytes(bytes: &[u8]) -> Option<Value> {
        let dash = bytes.iter().position(|byte| *byte == b'-')?;
        Some(Value {
            process: decimal(&bytes[..dash])?,
            sequence: decimal(&bytes[dash + 1..])?,
        })
    }
}

/// Appends `number` in decimal.
fn push_decimal(out: &mut Vec<u8>, mut number: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (number % 10) as u8;
        number /= 10;
        if number == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// A `u64` as `str::parse` reads it: an optional `+`, then one or more ASCII digits.
fn decimal(bytes: &[u8]) -> Option<u64> {
    let digits = bytes.strip_prefix(b"+").unwrap_or(bytes);
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |number, byte| {
        let digit = byte.checked_sub(b'0').filter(|digit| *digit < 10)?;
        number.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// A partition name (`orders-0`), cheap to clone.
pub type Partition = Arc<str>;

/// The topic of a partition named `topic-N`.
pub fn topic_of(partition: &str) -> &str {
    partition
        .rsplit_once('-')
        .map_or(partition, |(topic, _)| topic)
}

/// Whether every consumer group has processed every acknowledged value of its topics (the
/// liveness phase waits for it before the run ends).
pub fn groups_caught_up(ops: &[Op]) -> bool {
    let mut topics: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut processed: BTreeMap<&str, BTreeSet<Value>> = BTreeMap::new();
    let mut acknowledged = Vec::new();
    for op in ops {
        match &op.body {
            Body::Subscribe {
                group,
                topics: subscribed,
            } => {
                topics
                    .entry(group)
                    .or_default()
                    .extend(subscribed.iter().map(|t| &**t));
            }
            Body::Process { group, records } => processed
                .entry(group)
                .or_default()
                .extend(records.values().flatten().map(|(_, value)| *value)),
            Body::Send {
                partition, value, ..
            } if op.op_type == OpType::Ok => {
                acknowledged.push((topic_of(partition), *value));
            }
            _ => {}
        }
    }
    topics.iter().all(|(group, subscribed)| {
        acknowledged
            .iter()
            .filter(|(topic, _)| subscribed.contains(topic))
            .all(|(_, value)| {
                processed
                    .get(group)
                    .is_some_and(|seen| seen.contains(value))
            })
    })
}

/// Records of a poll, per partition, in order.
pub type Records = BTreeMap<Partition, Vec<(i64, Value)>>;

/// Who performed an operation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Process {
    /// A client incarnation.
    Client(u64),
    /// `nemesis`, `final-reader`, a broker (`broker-0`), ...
    Named(Arc<str>),
}

/// Operation type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpType {
    /// Started.
    Invoke,
    /// Completed and took effect.
    Ok,
    /// Completed and definitely did not take effect.
    Fail,
    /// Unknown outcome, or an event.
    Info,
}

impl OpType {
    fn name(self) -> &'static str {
        match self {
            OpType::Invoke => "invoke",
            OpType::Ok => "ok",
            OpType::Fail => "fail",
            OpType::Info => "info",
        }
    }
}

/// A partition a poll could not read, and where.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionError {
    /// Which partition.
    pub partition: Partition,
    /// Kafka's error name (`CORRUPT_MESSAGE`, ...).
    pub error: String,
    /// The position at which it failed: nothing at or past it was delivered.
    pub position: i64,
}

/// What the final reader found in one partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FinalRead {
    /// Which partition.
    pub partition: Partition,
    /// The log start offset the reader began at.
    pub log_start_offset: i64,
    /// The end offset it aimed for (its snapshot).
    pub end_offset: i64,
    /// The position it reached.
    pub read_to: i64,
    /// Whether it read up to `end_offset`.
    pub reached_end: bool,
    /// Why it stopped early, if it did.
    pub error: Option<String>,
    /// Offset ranges (inclusive) of corrupt batches it skipped.
    pub skipped: Vec<(i64, i64)>,
}

/// Nemesis functions.
pub const NEMESIS_FUNCTIONS: [&str; 28] = [
    "crash",
    "restart",
    "stop",
    "partition",
    "isolate",
    "clog",
    "heal",
    "drop-request",
    "drop-response",
    "reset-mid-response",
    "reject-request",
    "disk-fault",
    "disk-full",
    "disk-full-end",
    "clock-skew",
    "clock-skew-end",
    "corrupt",
    "producers-unfinished",
    "schedule",
    "resolve",
    "pause",
    "resume",
    "slow-disk",
    "slow-disk-end",
    "delay",
    "run-panicked",
    "halt",
    "delay-end",
];

/// What an operation is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Body {
    /// `send`: the invocation names partition and value; an ok completion adds the offset
    /// (-1 with acks=0).
    Send {
        /// Partition.
        partition: Partition,
        /// The unique value.
        value: Value,
        /// The acknowledged offset.
        offset: Option<i64>,
    },
    /// `poll`: an ok completion carries records and the partitions that failed.
    Poll {
        /// Records per partition.
        records: Records,
        /// Partitions that could not deliver.
        errors: Vec<PartitionError>,
    },
    /// `subscribe`: a group member incarnation's group and topics.
    Subscribe {
        /// The group.
        group: Arc<str>,
        /// The topics.
        topics: Vec<Arc<str>>,
    },
    /// `join`: a group member joined a generation with this assignment.
    Join {
        /// The group.
        group: Arc<str>,
        /// The generation.
        generation: i32,
        /// Its assigned partitions.
        partitions: Vec<Partition>,
    },
    /// `process`: a group member finished processing these records (what the application
    /// did with them; at-most-once and at-least-once at the group are judged on these).
    Process {
        /// The member's group.
        group: Arc<str>,
        /// The records, per partition.
        records: Records,
    },
    /// `commit`: a group member commits these positions in its generation; an ok completion
    /// means the coordinator stored them.
    Commit {
        /// The member's group.
        group: Arc<str>,
        /// The member's generation.
        generation: i32,
        /// The next offset to consume, per partition.
        offsets: BTreeMap<Partition, i64>,
    },
    /// `assign`: a consumer incarnation's partitions.
    Assign {
        /// The partitions.
        partitions: Vec<Partition>,
    },
    /// `reset` (auto.offset.reset moved a position) or `seek` (the application did).
    Position {
        /// `reset` or `seek`.
        seek: bool,
        /// Partition.
        partition: Partition,
        /// New position.
        offset: i64,
        /// Why.
        reason: String,
    },
    /// `hw`: a broker's high watermark for a partition.
    HighWatermark {
        /// Partition.
        partition: Partition,
        /// The high watermark.
        offset: i64,
    },
    /// `log-start`: a broker's log start offset for a partition.
    LogStart {
        /// Partition.
        partition: Partition,
        /// The log start offset.
        offset: i64,
    },
    /// `truncate`: records at and past `from_offset` may be gone.
    Truncate {
        /// Partition.
        partition: Partition,
        /// First offset that may have held something else.
        from_offset: i64,
        /// Why.
        reason: String,
    },
    /// `offline`: a partition went offline on a broker.
    Offline {
        /// Partition.
        partition: Partition,
        /// Why.
        reason: String,
    },
    /// `breach`: an answer a client received broke its request's contract (for Fetch: the
    /// size limits with KIP-74's exception, no empty answer before `max_wait_ms`).
    Breach {
        /// What the answer did.
        detail: String,
    },
    /// `final-read-start`: the final reader is about to take its end-offset snapshot; writes
    /// acknowledged before it are judged against the final read.
    FinalReadStart,
    /// `final-read`: one partition's final read.
    FinalRead(FinalRead),
    /// A nemesis event (its `f` is one of [`NEMESIS_FUNCTIONS`]).
    Nemesis(Nemesis),
    /// `leader`: a broker became a partition's leader in a leader epoch. (Last, so that the
    /// hashes of histories without it stay as they were.)
    Leader {
        /// Partition.
        partition: Partition,
        /// The leader epoch.
        epoch: i32,
    },
    /// `invariant`: the cluster monitor saw a cluster invariant broken. (After `Leader`, for
    /// the same reason.)
    Invariant {
        /// Which invariant.
        check: Check,
        /// Partition.
        partition: Partition,
        /// What happened.
        detail: String,
    },
    /// `controller`: a controller node became the active controller of the Raft quorum in a
    /// term (its process names the node). Quorums of one never record it.
    Controller {
        /// The Raft term (Kafka's controller epoch).
        term: u64,
    },
}

impl Body {
    /// The `f` of the operation.
    pub fn f(&self) -> &str {
        match self {
            Body::Send { .. } => "send",
            Body::Poll { .. } => "poll",
            Body::Assign { .. } => "assign",
            Body::Subscribe { .. } => "subscribe",
            Body::Join { .. } => "join",
            Body::Process { .. } => "process",
            Body::Commit { .. } => "commit",
            Body::Position { seek: true, .. } => "seek",
            Body::Position { seek: false, .. } => "reset",
            Body::HighWatermark { .. } => "hw",
            Body::LogStart { .. } => "log-start",
            Body::Truncate { .. } => "truncate",
            Body::Leader { .. } => "leader",
            Body::Controller { .. } => "controller",
            Body::Invariant { .. } => "invariant",
            Body::Offline { .. } => "offline",
            Body::Breach { .. } => "breach",
            Body::FinalReadStart => "final-read-start",
            Body::FinalRead(_) => "final-read",
            Body::Nemesis(nemesis) => nemesis.f(),
        }
    }

    /// A poll invocation.
    pub fn poll_invocation() -> Body {
        Body::Poll {
            records: Records::new(),
            errors: Vec::new(),
        }
    }

    /// A nemesis event.
    pub fn nemesis(nemesis: Nemesis) -> Body {
        Body::Nemesis(nemesis)
    }
}

/// One history entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Op {
    /// Position in the history.
    pub index: u64,
    /// Simulated nanoseconds since the run started.
    pub time_ns: u64,
    /// Who.
    pub process: Process,
    /// What kind of entry.
    pub op_type: OpType,
    /// The client behind a client process.
    pub node: Option<Arc<str>>,
    /// For completions: the index of the invocation.
    pub invoke: Option<u64>,
    /// For failures: why.
    pub error: Option<String>,
    /// What it is about.
    pub body: Body,
}

/// A whole history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// Operations in order.
    pub ops: Vec<Op>,
}

/// The history's hash: a word at a time (FxHash's step, as rustc hashes), then a final
/// avalanche (MurmurHash3's `fmix64`). Stable across processes and platforms (never hash with
/// `RandomState`): integers are mixed as the numbers they are, bytes eight at a time in
/// little-endian order. Hashing byte by byte (FNV-1a) cost 2% of a seed of the standard
/// scenario, most of the history being integers.
#[derive(Debug, Clone, Copy, Default)]
pub struct WordHasher(u64);

impl WordHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        let mut hash = self.0;
        hash ^= hash >> 33;
        hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
        hash ^= hash >> 33;
        hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        hash ^ (hash >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.add(u64::from_le_bytes(word.try_into().expect("eight bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            // The length in the top byte: "a" and "a\0" differ.
            word[7] = rest.len() as u8;
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn write_i8(&mut self, n: i8) {
        self.add(n as u64);
    }

    fn write_i16(&mut self, n: i16) {
        self.add(n as u64);
    }

    fn write_i32(&mut self, n: i32) {
        self.add(n as u64);
    }

    fn write_i64(&mut self, n: i64) {
        self.add(n as u64);
    }

    fn write_isize(&mut self, n: isize) {
        self.add(n as u64);
    }
}

impl History {
    /// JSON lines, one operation per line.
    pub fn to_jsonl(&self) -> String {
        let mut text = String::new();
        for op in &self.ops {
            text.push_str(&op.to_json_line());
            text.push('\n');
        }
        text
    }

    /// Parses JSON lines; errors name the line and what is wrong with it.
    pub fn from_jsonl(text: &str) -> Result<History, String> {
        let mut ops = Vec::new();
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let op =
                Op::from_json(line).map_err(|error| format!("line {}: {error}", number + 1))?;
            ops.push(op);
        }
        Ok(History { ops })
    }

    /// Hash of the typed operations: equal histories, equal hashes (within one build).
    pub fn hash(&self) -> u64 {
        let mut hasher = WordHasher::default();
        self.ops.hash(&mut hasher);
        hasher.finish()
    }
}

fn records_json(records: &Records) -> Json {
    let map: serde_json::Map<String, Json> = records
        .iter()
        .map(|(partition, entries)| {
            let pairs: Vec<Json> = entries
                .iter()
                .map(|(offset, value)| json!([offset, value.to_string()]))
                .collect();
            (partition.to_string(), Json::Array(pairs))
        })
        .collect();
    Json::Object(map)
}

impl Op {
    /// The value of a group member's operation.
    fn group_json(&self) -> Option<Json> {
        Some(match &self.body {
            Body::Subscribe { group, topics } => {
                json!({"group": &**group, "topics": topics.iter().map(|t| &**t).collect::<Vec<_>>()})
            }
            Body::Process { group, records } => {
                json!({"group": &**group, "records": records_json(records)})
            }
            Body::Join {
                group,
                generation,
                partitions,
            } => json!({
                "group": &**group,
                "generation": generation,
                "partitions": partitions.iter().map(|p| &**p).collect::<Vec<_>>(),
            }),
            Body::Commit {
                group,
                generation,
                offsets,
            } => {
                let offsets: serde_json::Map<String, Json> = offsets
                    .iter()
                    .map(|(partition, offset)| (partition.to_string(), json!(offset)))
                    .collect();
                json!({"group": &**group, "generation": generation, "offsets": offsets})
            }
            _ => return None,
        })
    }

    fn value_json(&self) -> Json {
        if let Some(json) = self.group_json() {
            return json;
        }
        match &self.body {
            Body::Send {
                partition,
                value,
                offset: Some(offset),
            } if self.op_type == OpType::Ok => {
                json!([["send", &**partition, [offset, value.to_string()]]])
            }
            Body::Send {
                partition, value, ..
            } => json!([["send", &**partition, value.to_string()]]),
            Body::Poll { records, .. } if self.op_type == OpType::Ok => {
                json!([["poll", records_json(records)]])
            }
            Body::Poll { .. } => json!([["poll"]]),
            Body::Assign { partitions } => {
                json!(partitions.iter().map(|p| &**p).collect::<Vec<_>>())
            }
            Body::Position {
                partition,
                offset,
                reason,
                ..
            } => json!({"partition": &**partition, "offset": offset, "reason": reason}),
            Body::HighWatermark { partition, offset } | Body::LogStart { partition, offset } => {
                json!({"partition": &**partition, "offset": offset})
            }
            Body::Truncate {
                partition,
                from_offset,
                reason,
            } => json!({"partition": &**partition, "from_offset": from_offset, "reason": reason}),
            Body::Leader { partition, epoch } => {
                json!({"partition": &**partition, "epoch": epoch})
            }
            Body::Controller { term } => json!({"term": term}),
            Body::Invariant {
                check,
                partition,
                detail,
            } => json!({"check": check.name(), "partition": &**partition, "detail": detail}),
            Body::Offline { partition, reason } => {
                json!({"partition": &**partition, "reason": reason})
            }
            Body::Breach { detail } => json!({"detail": detail}),
            Body::FinalReadStart => json!({}),
            Body::FinalRead(read) => final_read_json(read),
            Body::Nemesis(nemesis) => nemesis.value(),
            Body::Subscribe { .. }
            | Body::Join { .. }
            | Body::Process { .. }
            | Body::Commit { .. } => unreachable!("answered by group_json"),
        }
    }

    /// This operation as one line of JSON (fields in Jepsen's order).
    pub fn to_json_line(&self) -> String {
        let partition_errors = match &self.body {
            Body::Poll { errors, .. } if !errors.is_empty() => Some(
                errors
                    .iter()
                    .map(|e| json!({"partition": &*e.partition, "error": e.error, "position": e.position}))
                    .collect(),
            ),
            _ => None,
        };
        let out = OutOp {
            index: self.index,
            time_ns: self.time_ns,
            process: match &self.process {
                Process::Client(number) => json!(number),
                Process::Named(name) => json!(&**name),
            },
            op_type: self.op_type.name(),
            f: self.body.f(),
            value: self.value_json(),
            node: self.node.as_deref(),
            invoke: self.invoke,
            error: self.error.as_deref(),
            partition_errors,
        };
        serde_json::to_string(&out).expect("ops serialize")
    }

    /// Parses one JSON line.
    pub fn from_json(line: &str) -> Result<Op, String> {
        let raw: RawOp = serde_json::from_str(line).map_err(|error| error.to_string())?;
        raw.build()
    }
}

#[derive(serde::Serialize)]
struct OutOp<'a> {
    index: u64,
    time_ns: u64,
    process: Json,
    #[serde(rename = "type")]
    op_type: &'static str,
    f: &'a str,
    value: Json,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    invoke: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition_errors: Option<Vec<Json>>,
}

fn final_read_json(read: &FinalRead) -> Json {
    let mut value = json!({
        "partition": &*read.partition,
        "log_start_offset": read.log_start_offset,
        "end_offset": read.end_offset,
        "read_to": read.read_to,
        "reached_end": read.reached_end,
    });
    if let Some(error) = &read.error {
        value["error"] = json!(error);
    }
    if !read.skipped.is_empty() {
        value["skipped"] = json!(read.skipped);
    }
    value
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOp {
    index: u64,
    time_ns: u64,
    process: Json,
    #[serde(rename = "type")]
    op_type: String,
    f: String,
    value: Json,
    #[serde(default)]
    node: Option<String>,
    #[serde(default)]
    invoke: Option<u64>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    partition_errors: Option<Vec<RawPartitionError>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPartitionError {
    partition: String,
    error: String,
    position: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPosition {
    partition: String,
    offset: i64,
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPartitionOffset {
    partition: String,
    offset: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLeader {
    partition: String,
    epoch: i32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawController {
    term: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInvariant {
    check: String,
    partition: String,
    detail: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTruncate {
    partition: String,
    from_offset: i64,
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOffline {
    partition: String,
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBreach {
    detail: String,
}

/// Histories recorded before the marker moved ahead of the snapshot carry the end offsets.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFinalReadStart {
    #[serde(default)]
    #[allow(dead_code)]
    end_offsets: Option<BTreeMap<String, i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFinalRead {
    partition: String,
    #[serde(default)]
    log_start_offset: i64,
    end_offset: i64,
    #[serde(default)]
    read_to: Option<i64>,
    reached_end: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    skipped: Vec<(i64, i64)>,
}

fn parse_as<T: serde::de::DeserializeOwned>(value: Json, what: &str) -> Result<T, String> {
    serde_json::from_value(value).map_err(|error| format!("{what}: {error}"))
}

fn value_of(text: &Json) -> Result<Value, String> {
    let text = text
        .as_str()
        .ok_or_else(|| format!("a value must be a string, found {text}"))?;
    Value::parse(text)
        .ok_or_else(|| format!("'{text}' is not a value of the form process-sequence"))
}

/// `[["send", partition, value]]` or, completed, `[["send", partition, [offset, value]]]`.
fn send_body(value: &Json, op_type: OpType) -> Result<Body, String> {
    const SHAPE: &str = r#"a send's value must be [["send", partition, value]] or [["send", partition, [offset, value]]]"#;
    let micro = value
        .as_array()
        .filter(|ops| ops.len() == 1)
        .and_then(|ops| ops[0].as_array())
        .filter(|micro| micro.len() == 3 && micro[0] == "send")
        .ok_or(SHAPE)?;
    let partition: Partition = micro[1].as_str().ok_or(SHAPE)?.into();
    let (value, offset) = match &micro[2] {
        Json::Array(pair) if pair.len() == 2 && op_type == OpType::Ok => {
            (value_of(&pair[1])?, Some(pair[0].as_i64().ok_or(SHAPE)?))
        }
        text @ Json::String(_) => (value_of(text)?, None),
        _ => return Err(SHAPE.to_owned()),
    };
    Ok(Body::Send {
        partition,
        value,
        offset,
    })
}

/// `[["poll"]]` or, completed, `[["poll", {partition: [[offset, value], ...]}]]`.
#[derive(Deserialize)]
struct RawSubscribe {
    group: String,
    topics: Vec<String>,
}

#[derive(Deserialize)]
struct RawJoin {
    group: String,
    generation: i32,
    partitions: Vec<String>,
}

#[derive(Deserialize)]
struct RawProcess {
    group: String,
    records: BTreeMap<String, Vec<(i64, String)>>,
}

#[derive(Deserialize)]
struct RawCommit {
    group: String,
    generation: i32,
    offsets: BTreeMap<String, i64>,
}

fn poll_body(value: &Json, errors: Option<Vec<RawPartitionError>>) -> Result<Body, String> {
    const SHAPE: &str =
        r#"a poll's value must be [["poll"]] or [["poll", {partition: [[offset, value], ...]}]]"#;
    let micro = value
        .as_array()
        .filter(|ops| ops.len() == 1)
        .and_then(|ops| ops[0].as_array())
        .filter(|micro| matches!(micro.len(), 1 | 2) && micro[0] == "poll")
        .ok_or(SHAPE)?;
    let mut records = Records::new();
    if let Some(by_partition) = micro.get(1) {
        for (partition, entries) in by_partition.as_object().ok_or(SHAPE)? {
            let mut parsed = Vec::new();
            for pair in entries.as_array().ok_or(SHAPE)? {
                let pair = pair
                    .as_array()
                    .filter(|pair| pair.len() == 2)
                    .ok_or(SHAPE)?;
                parsed.push((pair[0].as_i64().ok_or(SHAPE)?, value_of(&pair[1])?));
            }
            records.insert(partition.as_str().into(), parsed);
        }
    }
    let errors = errors
        .unwrap_or_default()
        .into_iter()
        .map(|raw| PartitionError {
            partition: raw.partition.into(),
            error: raw.error,
            position: raw.position,
        })
        .collect();
    Ok(Body::Poll { records, errors })
}

impl RawOp {
    fn build(self) -> Result<Op, String> {
        let RawOp {
            index,
            time_ns,
            process,
            op_type,
            f,
            value,
            node,
            invoke,
            error,
            partition_errors,
        } = self;
        let op_type = match op_type.as_str() {
            "invoke" => OpType::Invoke,
            "ok" => OpType::Ok,
            "fail" => OpType::Fail,
            "info" => OpType::Info,
            other => return Err(format!("unknown type '{other}'")),
        };
        let process = match &process {
            Json::Number(number) => Process::Client(
                number
                    .as_u64()
                    .ok_or_else(|| format!("bad process number {number}"))?,
            ),
            Json::String(name) => Process::Named(name.as_str().into()),
            other => return Err(format!("a process is a number or a name, found {other}")),
        };
        if partition_errors.is_some() && f != "poll" {
            return Err("only a poll has partition_errors".to_owned());
        }
        let body = body_of(&f, value, op_type, partition_errors)?;
        Ok(Op {
            index,
            time_ns,
            process,
            op_type,
            node: node.map(Into::into),
            invoke,
            error,
            body,
        })
    }
}

fn invariant_body(raw: RawInvariant) -> Result<Body, String> {
    Ok(Body::Invariant {
        check: Check::from_name(&raw.check)
            .ok_or_else(|| format!("unknown check '{}' in an invariant", raw.check))?,
        partition: raw.partition.into(),
        detail: raw.detail,
    })
}

/// A group member's operation (or an unknown `f`).
fn group_body(f: &str, value: Json) -> Result<Body, String> {
    Ok(match f {
        "subscribe" => {
            let raw: RawSubscribe = parse_as(value, f)?;
            Body::Subscribe {
                group: raw.group.into(),
                topics: raw.topics.into_iter().map(Into::into).collect(),
            }
        }
        "join" => {
            let raw: RawJoin = parse_as(value, f)?;
            Body::Join {
                group: raw.group.into(),
                generation: raw.generation,
                partitions: raw.partitions.into_iter().map(Into::into).collect(),
            }
        }
        "process" => {
            let raw: RawProcess = parse_as(value, f)?;
            let mut records = Records::new();
            for (partition, entries) in raw.records {
                let mut parsed = Vec::new();
                for (offset, text) in entries {
                    parsed.push((offset, value_of(&Json::String(text))?));
                }
                records.insert(partition.into(), parsed);
            }
            Body::Process {
                group: raw.group.into(),
                records,
            }
        }
        "commit" => {
            let raw: RawCommit = parse_as(value, f)?;
            Body::Commit {
                group: raw.group.into(),
                generation: raw.generation,
                offsets: raw
                    .offsets
                    .into_iter()
                    .map(|(p, o)| (p.into(), o))
                    .collect(),
            }
        }
        other => return Err(format!("unknown f '{other}'")),
    })
}

fn body_of(
    f: &str,
    value: Json,
    op_type: OpType,
    partition_errors: Option<Vec<RawPartitionError>>,
) -> Result<Body, String> {
    Ok(match f {
        "send" => send_body(&value, op_type)?,
        "poll" => poll_body(&value, partition_errors)?,
        "assign" => Body::Assign {
            partitions: parse_as::<Vec<String>>(value, "assign")?
                .into_iter()
                .map(Into::into)
                .collect(),
        },
        "reset" | "seek" => {
            let raw: RawPosition = parse_as(value, f)?;
            Body::Position {
                seek: f == "seek",
                partition: raw.partition.into(),
                offset: raw.offset,
                reason: raw.reason,
            }
        }
        "hw" | "log-start" => {
            let raw: RawPartitionOffset = parse_as(value, f)?;
            let (partition, offset) = (raw.partition.into(), raw.offset);
            if f == "hw" {
                Body::HighWatermark { partition, offset }
            } else {
                Body::LogStart { partition, offset }
            }
        }
        "truncate" => {
            let raw: RawTruncate = parse_as(value, f)?;
            Body::Truncate {
                partition: raw.partition.into(),
                from_offset: raw.from_offset,
                reason: raw.reason,
            }
        }
        "leader" => {
            let raw: RawLeader = parse_as(value, f)?;
            Body::Leader {
                partition: raw.partition.into(),
                epoch: raw.epoch,
            }
        }
        "controller" => Body::Controller {
            term: parse_as::<RawController>(value, f)?.term,
        },
        "invariant" => invariant_body(parse_as(value, f)?)?,
        "offline" => {
            let raw: RawOffline = parse_as(value, f)?;
            Body::Offline {
                partition: raw.partition.into(),
                reason: raw.reason,
            }
        }
        "breach" => {
            let raw: RawBreach = parse_as(value, f)?;
            Body::Breach { detail: raw.detail }
        }
        "final-read-start" => {
            let _: RawFinalReadStart = parse_as(value, f)?;
            Body::FinalReadStart
        }
        "final-read" => Body::FinalRead(final_read_of(parse_as(value, f)?)),
        f if NEMESIS_FUNCTIONS.contains(&f) => {
            if !value.is_object() {
                return Err(format!("a {f} event's value must be an object"));
            }
            Body::Nemesis(Nemesis::parse(f, &value)?)
        }
        other => group_body(other, value)?,
    })
}

fn final_read_of(raw: RawFinalRead) -> FinalRead {
    // Histories recorded before `read_to` existed: a read that reached the end read to it.
    let read_to = raw
        .read_to
        .unwrap_or(if raw.reached_end { raw.end_offset } else { 0 });
    FinalRead {
        partition: raw.partition.into(),
        log_start_offset: raw.log_start_offset,
        end_offset: raw.end_offset,
        read_to,
        reached_end: raw.reached_end,
        error: raw.error,
        skipped: raw.skipped,
    }
}

/// Builds a history as a run goes.
#[derive(Debug, Default)]
pub struct Recorder {
    history: History,
    next_process: u64,
    /// Invocations not yet completed.
    open: OpenInvocations,
}

/// The indexes of invocations not yet completed: a bit an operation (indexes are dense), in
/// index order.
#[derive(Debug, Default)]
struct OpenInvocations {
    words: Vec<u64>,
}

impl OpenInvocations {
    fn insert(&mut self, index: u64) {
        let (word, bit) = Self::place(index);
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= bit;
    }

    /// Removes `index`; whether it was there.
    fn remove(&mut self, index: u64) -> bool {
        let (word, bit) = Self::place(index);
        let Some(bits) = self.words.get_mut(word) else {
            return false;
        };
        let was = *bits & bit != 0;
        *bits &= !bit;
        was
    }

    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0u64..).zip(&self.words).flat_map(|(word, bits)| {
            (0..64)
                .filter(move |bit| bits & (1 << bit) != 0)
                .map(move |bit| word * 64 + bit)
        })
    }

    fn place(index: u64) -> (usize, u64) {
        let word = usize::try_from(index / 64).expect("an operation index fits in memory");
        (word, 1 << (index % 64))
    }
}

/// How a client operation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// Took effect; the body carries the result.
    Ok(Body),
    /// Definitely did not take effect.
    Fail(String),
    /// May or may not have taken effect.
    Info(String),
}

impl Recorder {
    /// A recorder with room for `ops` operations.
    pub fn with_capacity(ops: usize) -> Recorder {
        Recorder {
            history: History {
                ops: Vec::with_capacity(ops),
            },
            ..Recorder::default()
        }
    }

    /// The operations so far.
    pub fn ops(&self) -> &[Op] {
        &self.history.ops
    }

    /// A new process number for a client incarnation.
    pub fn new_process(&mut self) -> u64 {
        self.next_process += 1;
        self.next_process
    }

    fn push(&mut self, time_ns: u64, process: Process, op_type: OpType, body: Body) -> u64 {
        let index = self.history.ops.len() as u64;
        self.history.ops.push(Op {
            index,
            time_ns,
            process,
            op_type,
            node: None,
            invoke: None,
            error: None,
            body,
        });
        index
    }

    /// Records an invocation by a client process; returns its index.
    pub fn invoke(&mut self, time_ns: u64, process: u64, node: &Arc<str>, body: Body) -> u64 {
        let index = self.push(time_ns, Process::Client(process), OpType::Invoke, body);
        self.history.ops[index as usize].node = Some(Arc::clone(node));
        self.open.insert(index);
        index
    }

    /// Records the completion of invocation `invoke`.
    pub fn complete(&mut self, time_ns: u64, invoke: u64, completion: Completion) {
        assert!(
            self.open.remove(invoke),
            "a completion of an open invocation"
        );
        let invocation = &self.history.ops[invoke as usize];
        let (process, node) = (invocation.process.clone(), invocation.node.clone());
        let (op_type, body, error) = match completion {
            Completion::Ok(body) => (OpType::Ok, body, None),
            Completion::Fail(error) => (OpType::Fail, invocation.body.clone(), Some(error)),
            Completion::Info(error) => (OpType::Info, invocation.body.clone(), Some(error)),
        };
        assert_eq!(
            body.f(),
            invocation.body.f(),
            "a completion answers its invocation"
        );
        let index = self.push(time_ns, process, op_type, body);
        let op = &mut self.history.ops[index as usize];
        op.node = node;
        op.invoke = Some(invoke);
        op.error = error;
    }

    /// Records an event of a client process (`assign`, `reset`, `seek`).
    pub fn client_event(&mut self, time_ns: u64, process: u64, node: &Arc<str>, body: Body) {
        let index = self.push(time_ns, Process::Client(process), OpType::Info, body);
        self.history.ops[index as usize].node = Some(Arc::clone(node));
    }

    /// Records an event of a named actor (`nemesis`, `final-reader`, a broker).
    pub fn event(&mut self, time_ns: u64, actor: &str, body: Body) {
        self.push(time_ns, Process::Named(actor.into()), OpType::Info, body);
    }

    /// Completes every invocation still open as `info` (its process crashed or the run ended
    /// first), as Jepsen does for crashed processes.
    pub fn complete_pending(&mut self, time_ns: u64, reason: &str) {
        let pending: Vec<u64> = self.open.iter().collect();
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

#[cfg(test)]
mod tests;
