//! Nemesis events, typed: what the harness did to the cluster and when (a crash, a partition, a
//! full disk...), one variant per function. In a history line a nemesis event is its function
//! as `f` and its fields as the `value` object, as Jepsen writes them; [`Nemesis`] serializes to
//! and parses from exactly that pair (`#[serde(tag = "f", content = "value")]`), so an unknown
//! function or a field of the wrong type in a saved history is an error that names it.
//!
//! Its hash is that of the function name and the value's compact JSON (the keys in order), the
//! form histories were hashed in before the events were typed: a history's hash is a fingerprint
//! of what it says, not of how the simulator holds it.

use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// How a crash took a node down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrashLevel {
    /// The process died; the page cache survived.
    Process,
    /// The machine lost power: what was not fsynced is gone.
    PowerLoss,
}

/// A nemesis event. The variant names are the functions in kebab case (`DiskFullEnd` is
/// `disk-full-end`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    tag = "f",
    content = "value",
    rename_all = "kebab-case",
    deny_unknown_fields
)]
pub enum Nemesis {
    /// The drawn times of every fault of the run, in milliseconds from the workload's start.
    Schedule {
        /// When each fault fires.
        at_ms: Vec<u64>,
    },
    /// A role selector (`leader(orders-0)`, `controller-leader`) resolved to a node as the
    /// brokers saw it when the fault fired; `None`: nothing matched, the fault did not fire.
    Resolve {
        /// The selector.
        target: String,
        /// The node it named.
        node: Option<String>,
    },
    /// A node was killed.
    Crash {
        /// Which.
        node: String,
        /// Process crash or power loss (absent in histories that predate power loss).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        level: Option<CrashLevel>,
    },
    /// A node stopped cleanly (SIGTERM); `running`: it was up when asked.
    Stop {
        /// Which.
        node: String,
        /// Whether it was running.
        running: bool,
    },
    /// A node exited by itself (a failed log directory halts a broker).
    Halt {
        /// Which.
        node: String,
        /// Why, as it said.
        reason: String,
    },
    /// A node started again.
    Restart {
        /// Which.
        node: String,
    },
    /// A node's tasks were frozen.
    Pause {
        /// Which.
        node: String,
    },
    /// A paused node runs again.
    Resume {
        /// Which.
        node: String,
    },
    /// The network was cut between groups of nodes (both ways).
    Partition {
        /// The sides.
        groups: Vec<Vec<String>>,
    },
    /// A node was cut off from every other.
    Isolate {
        /// Which.
        node: String,
    },
    /// One link was cut, one way.
    Clog {
        /// Sender.
        from: String,
        /// Receiver.
        to: String,
    },
    /// Cut links were healed.
    Heal {
        /// How many.
        links: usize,
    },
    /// Requests to a broker are dropped before it reads them.
    DropRequest(ConnectionFault),
    /// Responses are dropped after the broker applied the request.
    DropResponse(ConnectionFault),
    /// Responses are cut off mid-frame.
    ResetMidResponse(ConnectionFault),
    /// Produce requests are answered with an error, unapplied.
    RejectRequest(ConnectionFault),
    /// A broker's disk fails writes or fsyncs (EIO).
    DiskFault {
        /// Which broker.
        node: String,
        /// Writes that fail.
        fail_writes: u32,
        /// Fsyncs that fail.
        fail_syncs: u32,
        /// What a failed fsync does to the dirty pages: `drop` or `keep` (absent in histories
        /// that predate the choice).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on_fsync_failure: Option<String>,
    },
    /// A byte of one of a broker's files was flipped (`file` is `None` when no file matched).
    Corrupt {
        /// Which broker.
        node: String,
        /// The file.
        file: Option<String>,
        /// The byte.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        position: Option<u64>,
    },
    /// A broker's fsyncs became slow.
    SlowDisk {
        /// Which.
        node: String,
        /// The latency range, in microseconds.
        fsync_latency_us: [u64; 2],
    },
    /// A broker's fsyncs are normal again.
    SlowDiskEnd {
        /// Which.
        node: String,
    },
    /// A broker's disk filled up, `free_bytes` above what it used.
    DiskFull {
        /// Which.
        node: String,
        /// What its files used then.
        used_bytes: u64,
        /// What was left for them.
        free_bytes: u64,
    },
    /// A broker's disk has room again.
    DiskFullEnd {
        /// Which.
        node: String,
    },
    /// A node's wall clock was set off by `skew_ms`.
    ClockSkew {
        /// Which.
        node: String,
        /// By how much.
        skew_ms: i64,
    },
    /// A node's clock is true again.
    ClockSkewEnd {
        /// Which.
        node: String,
    },
    /// Every message's latency was raised (a delay spike).
    Delay {
        /// The range, in milliseconds.
        latency_ms: [u64; 2],
    },
    /// The delay spike is over.
    DelayEnd {},
    /// Producers that had not finished their workload when the run ended.
    ProducersUnfinished {
        /// Their ids.
        producers: Vec<String>,
    },
    /// The run panicked; the history ends here.
    RunPanicked {
        /// The panic message.
        message: String,
    },
}

/// A fault armed on a broker's connections.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionFault {
    /// Which broker.
    pub node: String,
    /// Only requests of this API (any, if `None`).
    pub api: Option<String>,
    /// How many requests it hits.
    pub count: u32,
    /// The chance that it hits each matching request.
    pub probability: f64,
    /// The error a rejected request gets (`reject-request` only).
    pub error: Option<String>,
}

impl Nemesis {
    /// The function, as `f` in a history line.
    pub fn f(&self) -> &'static str {
        match self {
            Nemesis::Schedule { .. } => "schedule",
            Nemesis::Resolve { .. } => "resolve",
            Nemesis::Crash { .. } => "crash",
            Nemesis::Stop { .. } => "stop",
            Nemesis::Halt { .. } => "halt",
            Nemesis::Restart { .. } => "restart",
            Nemesis::Pause { .. } => "pause",
            Nemesis::Resume { .. } => "resume",
            Nemesis::Partition { .. } => "partition",
            Nemesis::Isolate { .. } => "isolate",
            Nemesis::Clog { .. } => "clog",
            Nemesis::Heal { .. } => "heal",
            Nemesis::DropRequest(_) => "drop-request",
            Nemesis::DropResponse(_) => "drop-response",
            Nemesis::ResetMidResponse(_) => "reset-mid-response",
            Nemesis::RejectRequest(_) => "reject-request",
            Nemesis::DiskFault { .. } => "disk-fault",
            Nemesis::Corrupt { .. } => "corrupt",
            Nemesis::SlowDisk { .. } => "slow-disk",
            Nemesis::SlowDiskEnd { .. } => "slow-disk-end",
            Nemesis::DiskFull { .. } => "disk-full",
            Nemesis::DiskFullEnd { .. } => "disk-full-end",
            Nemesis::ClockSkew { .. } => "clock-skew",
            Nemesis::ClockSkewEnd { .. } => "clock-skew-end",
            Nemesis::Delay { .. } => "delay",
            Nemesis::DelayEnd {} => "delay-end",
            Nemesis::ProducersUnfinished { .. } => "producers-unfinished",
            Nemesis::RunPanicked { .. } => "run-panicked",
        }
    }

    /// The node it names, if one.
    pub fn node(&self) -> Option<&str> {
        match self {
            Nemesis::Crash { node, .. }
            | Nemesis::Stop { node, .. }
            | Nemesis::Halt { node, .. }
            | Nemesis::Restart { node }
            | Nemesis::Pause { node }
            | Nemesis::Resume { node }
            | Nemesis::Isolate { node }
            | Nemesis::DiskFault { node, .. }
            | Nemesis::Corrupt { node, .. }
            | Nemesis::SlowDisk { node, .. }
            | Nemesis::SlowDiskEnd { node }
            | Nemesis::DiskFull { node, .. }
            | Nemesis::DiskFullEnd { node }
            | Nemesis::ClockSkew { node, .. }
            | Nemesis::ClockSkewEnd { node } => Some(node),
            Nemesis::DropRequest(fault)
            | Nemesis::DropResponse(fault)
            | Nemesis::ResetMidResponse(fault)
            | Nemesis::RejectRequest(fault) => Some(&fault.node),
            Nemesis::Resolve { node, .. } => node.as_deref(),
            Nemesis::Schedule { .. }
            | Nemesis::Partition { .. }
            | Nemesis::Clog { .. }
            | Nemesis::Heal { .. }
            | Nemesis::Delay { .. }
            | Nemesis::DelayEnd {}
            | Nemesis::ProducersUnfinished { .. }
            | Nemesis::RunPanicked { .. } => None,
        }
    }

    /// Its fields as the JSON object of a history line's `value`.
    pub fn value(&self) -> Json {
        let mut tagged = serde_json::to_value(self).expect("a nemesis event serializes");
        tagged
            .get_mut("value")
            .map(Json::take)
            .expect("an adjacently tagged event has a value")
    }

    /// The event a history line's `f` and `value` describe.
    pub fn parse(f: &str, value: &Json) -> Result<Nemesis, String> {
        let tagged = serde_json::json!({ "f": f, "value": value });
        serde_json::from_value(tagged).map_err(|error| format!("a {f} event: {error}"))
    }
}

impl Hash for Nemesis {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.f().hash(state);
        self.value().to_string().hash(state);
    }
}

impl PartialEq for Nemesis {
    fn eq(&self, other: &Nemesis) -> bool {
        self.f() == other.f() && self.value() == other.value()
    }
}

impl Eq for Nemesis {}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;

    use super::*;
    use crate::history::NEMESIS_FUNCTIONS;

    #[allow(
        clippy::too_many_lines,
        reason = "one event of each kind, one field a line"
    )]
    fn one_of_each() -> Vec<Nemesis> {
        let node = || "broker-0".to_owned();
        let fault = |error: Option<&str>| ConnectionFault {
            node: node(),
            api: Some("Produce".to_owned()),
            count: 2,
            probability: 0.5,
            error: error.map(str::to_owned),
        };
        vec![
            Nemesis::Schedule { at_ms: vec![5, 9] },
            Nemesis::Resolve {
                target: "leader(orders-0)".to_owned(),
                node: None,
            },
            Nemesis::Crash {
                node: node(),
                level: Some(CrashLevel::PowerLoss),
            },
            Nemesis::Stop {
                node: node(),
                running: true,
            },
            Nemesis::Halt {
                node: node(),
                reason: "disk".to_owned(),
            },
            Nemesis::Restart { node: node() },
            Nemesis::Pause { node: node() },
            Nemesis::Resume { node: node() },
            Nemesis::Partition {
                groups: vec![vec![node()], vec!["broker-1".to_owned()]],
            },
            Nemesis::Isolate { node: node() },
            Nemesis::Clog {
                from: node(),
                to: "broker-1".to_owned(),
            },
            Nemesis::Heal { links: 2 },
            Nemesis::DropRequest(fault(None)),
            Nemesis::DropResponse(fault(None)),
            Nemesis::ResetMidResponse(fault(None)),
            Nemesis::RejectRequest(fault(Some("NOT_ENOUGH_REPLICAS"))),
            Nemesis::DiskFault {
                node: node(),
                fail_writes: 1,
                fail_syncs: 0,
                on_fsync_failure: Some("drop".to_owned()),
            },
            Nemesis::Corrupt {
                node: node(),
                file: None,
                position: None,
            },
            Nemesis::SlowDisk {
                node: node(),
                fsync_latency_us: [10, 20],
            },
            Nemesis::SlowDiskEnd { node: node() },
            Nemesis::DiskFull {
                node: node(),
                used_bytes: 100,
                free_bytes: 0,
            },
            Nemesis::DiskFullEnd { node: node() },
            Nemesis::ClockSkew {
                node: node(),
                skew_ms: -300,
            },
            Nemesis::ClockSkewEnd { node: node() },
            Nemesis::Delay {
                latency_ms: [1, 50],
            },
            Nemesis::DelayEnd {},
            Nemesis::ProducersUnfinished {
                producers: vec!["p1".to_owned()],
            },
            Nemesis::RunPanicked {
                message: "boom".to_owned(),
            },
        ]
    }

    #[test]
    fn every_function_is_listed_and_every_event_reads_back_as_written() {
        let events = one_of_each();
        let functions: BTreeSet<&str> = events.iter().map(Nemesis::f).collect();
        assert_eq!(
            functions,
            NEMESIS_FUNCTIONS.into_iter().collect::<BTreeSet<_>>()
        );
        for event in events {
            let value = event.value();
            assert!(value.is_object(), "{}: {value}", event.f());
            assert_eq!(Nemesis::parse(event.f(), &value), Ok(event.clone()));
        }
    }

    #[test]
    fn values_are_written_as_before_the_events_were_typed() {
        let crash = Nemesis::Crash {
            node: "broker-0".to_owned(),
            level: Some(CrashLevel::PowerLoss),
        };
        assert_eq!(
            crash.value().to_string(),
            r#"{"level":"power-loss","node":"broker-0"}"#
        );
        let corrupt = Nemesis::Corrupt {
            node: "broker-0".to_owned(),
            file: None,
            position: None,
        };
        assert_eq!(
            corrupt.value().to_string(),
            r#"{"file":null,"node":"broker-0"}"#
        );
        assert_eq!(Nemesis::DelayEnd {}.value().to_string(), "{}");
    }

    #[test]
    fn an_unknown_function_or_field_or_a_wrong_type_is_an_error_that_names_it() {
        let unknown = Nemesis::parse("meteor", &json!({})).expect_err("no such function");
        assert!(unknown.contains("meteor"), "{unknown}");
        let field = Nemesis::parse("restart", &json!({"node": "broker-0", "when": 3}))
            .expect_err("no such field");
        assert!(field.contains("when"), "{field}");
        let wrong = Nemesis::parse("heal", &json!({"links": "many"})).expect_err("not a number");
        assert!(wrong.contains("heal"), "{wrong}");
    }
}
