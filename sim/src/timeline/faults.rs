//! Nemesis events as intervals: a fault starts with its event and holds until the event that
//! ends it (or the end of the run).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value as Json;

use crate::history::{Body, History};

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

fn node_of(value: &Json) -> Option<String> {
    value.get("node").and_then(Json::as_str).map(str::to_owned)
}

fn strings(value: Option<&Json>) -> Vec<String> {
    value
        .and_then(Json::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Class and nodes of a fault that lasts, or `None` for a point event.
fn lasting(f: &str, value: &Json) -> Option<(&'static str, Vec<String>)> {
    let node = || node_of(value).into_iter().collect::<Vec<_>>();
    Some(match f {
        "crash" if value.get("level").and_then(Json::as_str) == Some("power-loss") => {
            ("f-power", node())
        }
        "crash" | "stop" | "halt" => ("f-crash", node()),
        "pause" => ("f-pause", node()),
        "isolate" => ("f-net", node()),
        "partition" => {
            let groups = value.get("groups").and_then(Json::as_array);
            let nodes = groups
                .into_iter()
                .flatten()
                .flat_map(|group| strings(Some(group)))
                .collect();
            ("f-net", nodes)
        }
        "clog" => {
            let ends = ["from", "to"].map(|end| value.get(end).and_then(Json::as_str));
            (
                "f-net",
                ends.into_iter().flatten().map(str::to_owned).collect(),
            )
        }
        "slow-disk" | "disk-full" => ("f-disk", node()),
        "clock-skew" => ("f-clock", node()),
        "delay" => ("f-delay", Vec::new()),
        _ => return None,
    })
}

fn ends(f: &str) -> Ends {
    match f {
        "restart" => Ends::Node(&["crash", "stop", "halt"]),
        "resume" => Ends::Node(&["pause"]),
        "slow-disk-end" => Ends::Node(&["slow-disk"]),
        "disk-full-end" => Ends::Node(&["disk-full"]),
        "clock-skew-end" => Ends::Node(&["clock-skew"]),
        "heal" => Ends::Network,
        "delay-end" => Ends::Delay,
        _ => Ends::Nothing,
    }
}

/// A short label: the function and the value's fields, `crash broker-0 level=power-loss`.
fn label(f: &str, value: &Json) -> String {
    let mut label = f.to_owned();
    if let Some(node) = node_of(value) {
        label.push(' ');
        label.push_str(&node);
    }
    if let Some(object) = value.as_object() {
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
        let Body::Nemesis { f, value } = &op.body else {
            continue;
        };
        if f == "schedule" {
            continue;
        }
        let value: Json = serde_json::from_str(value).unwrap_or(Json::Null);
        close(&mut faults, &mut open, f, &value, op.time_ns);
        let (class, nodes, lasts) = match lasting(f, &value) {
            Some((class, nodes)) => (class, nodes, true),
            None => ("f-point", node_of(&value).into_iter().collect(), false),
        };
        if lasts {
            let key = (f.clone(), node_of(&value).unwrap_or_default());
            open.entry(key).or_default().push(faults.len());
        }
        faults.push(Fault {
            index: op.index,
            start_ns: op.time_ns,
            end_ns: if lasts { end_ns } else { op.time_ns },
            lasting: lasts,
            f: f.clone(),
            class,
            label: label(f, &value),
            nodes,
        });
    }
    faults
}

/// Ends the open faults that event `f` ends.
fn close(
    faults: &mut [Fault],
    open: &mut BTreeMap<(String, String), Vec<usize>>,
    f: &str,
    value: &Json,
    time_ns: u64,
) {
    let node = node_of(value).unwrap_or_default();
    let keys: Vec<(String, String)> = match ends(f) {
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
