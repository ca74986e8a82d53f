//! Nemesis events as intervals: a fault starts with its event and holds until the event that
//! ends it (or the end of the run).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value as Json;

use crate::history::nemesis::CrashLevel;
use crate::history::{Body, History, Nemesis};

/// A fault that held from `start_ns` to `end_ns`, or a point event (`start_ns == end_ns`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fault {
    /// History index of the event that started it.
    pub(crate) index: u64,
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    /// Whether it lasted (a crash until its restart) or happened at once (a dropped request).
    pub(crate) lasting: bool,
    /// The nemesis function (`crash`, `partition`, ...).
    pub(crate) f: String,
    /// CSS class of its shading.
    pub(crate) class: &'static str,
    /// What it was, in a few words.
    pub(crate) label: String,
    /// The nodes it hit (none: the whole cluster, such as a delay spike).
    pub(crate) nodes: Vec<String>,
}

/// How an event ends earlier faults: by node (`restart`), or every network fault (`heal`).
enum Ends {
    Nothing,
    Node(&'static [&'static str]),
    Network,
    Delay,
}

/// Class and nodes of a fault that lasts, or `None` for a point event.
fn lasting(nemesis: &Nemesis) -> Option<(&'static str, Vec<String>)> {
    let node = || {
        nemesis
            .node()
            .map(str::to_owned)
            .into_iter()
            .collect::<Vec<_>>()
    };
    Some(match nemesis {
        Nemesis::Crash {
            level: Some(CrashLevel::PowerLoss),
            ..
        } => ("f-power", node()),
        Nemesis::Crash { .. } | Nemesis::Stop { .. } | Nemesis::Halt { .. } => ("f-crash", node()),
        Nemesis::Pause { .. } => ("f-pause", node()),
        Nemesis::Isolate { .. } => ("f-net", node()),
        Nemesis::Partition { groups } => ("f-net", groups.iter().flatten().cloned().collect()),
        Nemesis::Clog { from, to } => ("f-net", vec![from.clone(), to.clone()]),
        Nemesis::SlowDisk { .. } | Nemesis::DiskFull { .. } => ("f-disk", node()),
        Nemesis::ClockSkew { .. } => ("f-clock", node()),
        Nemesis::Delay { .. } => ("f-delay", Vec::new()),
        _ => return None,
    })
}

fn ends(nemesis: &Nemesis) -> Ends {
    match nemesis {
        Nemesis::Restart { .. } => Ends::Node(&["crash", "stop", "halt"]),
        Nemesis::Resume { .. } => Ends::Node(&["pause"]),
        Nemesis::SlowDiskEnd { .. } => Ends::Node(&["slow-disk"]),
        Nemesis::DiskFullEnd { .. } => Ends::Node(&["disk-full"]),
        Nemesis::ClockSkewEnd { .. } => Ends::Node(&["clock-skew"]),
        Nemesis::Heal { .. } => Ends::Network,
        Nemesis::DelayEnd {} => Ends::Delay,
        _ => Ends::Nothing,
    }
}

/// A short label: the function, the node and the other fields, `crash broker-0
/// level=power-loss`.
fn label(nemesis: &Nemesis) -> String {
    let mut label = nemesis.f().to_owned();
    if let Some(node) = nemesis.node() {
        label.push(' ');
        label.push_str(node);
    }
    if let Json::Object(object) = nemesis.value() {
        for (key, field) in object.iter().filter(|(key, _)| *key != "node") {
            let text = match field {
                Json::String(text) => text.clone(),
                Json::Null => continue,
                other => other.to_string(),
            };
            let _ = write!(label, " {key}={text}");
        }
    }
    label
}

/// Every nemesis event of the history as a fault; lasting faults still open at `end_ns` end
/// there.
pub(crate) fn faults(history: &History, end_ns: u64) -> Vec<Fault> {
    let mut faults: Vec<Fault> = Vec::new();
    // Open lasting faults: (function, node or "") -> position in `faults`.
    let mut open: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for op in &history.ops {
        let Body::Nemesis(nemesis) = &op.body else {
            continue;
        };
        if matches!(nemesis, Nemesis::Schedule { .. }) {
            continue;
        }
        close(&mut faults, &mut open, nemesis, op.time_ns);
        let (class, nodes, lasts) = match lasting(nemesis) {
            Some((class, nodes)) => (class, nodes, true),
            None => (
                "f-point",
                nemesis.node().map(str::to_owned).into_iter().collect(),
                false,
            ),
        };
        if lasts {
            let key = (
                nemesis.f().to_owned(),
                nemesis.node().unwrap_or_default().to_owned(),
            );
            open.entry(key).or_default().push(faults.len());
        }
        faults.push(Fault {
            index: op.index,
            start_ns: op.time_ns,
            end_ns: if lasts { end_ns } else { op.time_ns },
            lasting: lasts,
            f: nemesis.f().to_owned(),
            class,
            label: label(nemesis),
            nodes,
        });
    }
    faults
}

/// Ends the open faults that `nemesis` ends.
fn close(
    faults: &mut [Fault],
    open: &mut BTreeMap<(String, String), Vec<usize>>,
    nemesis: &Nemesis,
    time_ns: u64,
) {
    let node = nemesis.node().unwrap_or_default().to_owned();
    let keys: Vec<(String, String)> = match ends(nemesis) {
        Ends::Nothing => return,
        Ends::Node(started) => started
            .iter()
            .map(|start| ((*start).to_owned(), node.clone()))
            .collect(),
        Ends::Network => open
            .keys()
            .filter(|(start, _)| {
                matches!(start.as_str(), "partition" | "isolate" | "clog" | "delay")
            })
            .cloned()
            .collect(),
        Ends::Delay => vec![("delay".to_owned(), String::new())],
    };
    for key in keys {
        for position in open.remove(&key).unwrap_or_default() {
            faults[position].end_ns = time_ns;
        }
    }
}
