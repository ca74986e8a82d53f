//! The diagram: lanes, marks (thinned), fault shading, highlights, as inline SVG.

use std::collections::{BTreeMap, HashMap};

use super::faults::{faults, Fault};
use super::{escape, Violation};
use crate::checker::{Check, FINAL_READER};
use crate::export::Keys;
use crate::history::{Body, History, Op, OpType, Partition, Process};

/// Width of the lane-name column.
const LABEL_W: f64 = 170.0;
/// Height of the time axis.
const AXIS_H: f64 = 26.0;
const CLIENT_H: f64 = 42.0;
const BROKER_H: f64 = 30.0;
const PARTITION_H: f64 = 120.0;
const FAULT_ROW_H: f64 = 15.0;
/// Marks of one kind closer than this (pixels) in one lane are drawn as one.
const BUCKET_PX: f64 = 5.0;
/// Horizontal scale (a run of more than 100 s is squeezed into 16,000 pixels).
const PX_PER_S: f64 = 150.0;
/// Left and right margin inside the diagram.
const PAD: f64 = 12.0;

/// The page's stylesheet.
pub(crate) const CSS: &str = r"
body{font:13px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 2px}h2{font-size:16px;margin:14px 0 6px}
.sub{color:#666;margin:0 0 8px}
.check{font-family:ui-monospace,monospace;color:#b00020}.check.expected{color:#8a5a00}.check.allowed{color:#666}
#violations ol{margin:0;padding-left:22px;max-height:260px;overflow-y:auto;border:1px solid #eee}
#violations li{margin:2px 0}.ops a{color:#b00020;font-family:ui-monospace,monospace;font-size:12px}
.ops.none{color:#888}.more{color:#666;margin:4px 0}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:10px 0;font-size:12px;color:#444}
.legend i{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}
.diagram{display:flex;border:1px solid #ddd}.labels{flex:none;background:#fafafa;border-right:1px solid #ddd}
.scroll{overflow-x:auto;flex:1}
svg text{font:11px ui-monospace,monospace}
.lane-bg{fill:#fff}.lane-bg.odd{fill:#f7f8fa}.lane-line{stroke:#ddd}
.grid{stroke:#eee}.axis text{fill:#666}.lane-name{fill:#222}.lane-kind{fill:#888;font-size:10px}
.s-ok,.ps-ok{fill:#2e9e44}.s-info,.ps-info{fill:#f0a020}.s-fail,.ps-fail{fill:#d63c3c}.s-pending{fill:#aaa}
.p-ok,.pp{fill:#2f6fd6;fill-opacity:.75}.p-empty{fill:#b7c9ea}.p-info{fill:#f0a020}.p-fail{fill:#d63c3c}
.pf{fill:#7b3fb5;fill-opacity:.7}.pc,.e-commit{fill:#c2338a}.pr,.e-reset{fill:#555}
.e-assign,.e-join,.e-subscribe{fill:#1a7f8f}.e-process{fill:#8aa}.e-breach,.pi,.b-inv{fill:#b00020}
.pl,.b-leader{fill:#1a7f8f}.b-ctrl{fill:#4a6}.pt,.b-trunc{fill:#c0392b}.po,.b-offline{fill:#000}
.b-final,.b-other{fill:#999}.dur{stroke:#bbb;stroke-width:1}
.hw{fill:none;stroke-width:1.5}.ls{fill:none;stroke:#999;stroke-dasharray:3 2}
.f-crash{fill:#d63c3c;fill-opacity:.16}.f-power{fill:#8b0000;fill-opacity:.24}.f-pause{fill:#e0b000;fill-opacity:.22}
.f-net{fill:#5a5ac8;fill-opacity:.16}.f-disk{fill:#96642a;fill-opacity:.22}.f-clock{fill:#009696;fill-opacity:.16}
.f-delay{fill:#777;fill-opacity:.16}.f-point{fill:#555}.fault-bar{stroke:#0003}
.fault-label{fill:#222;font-size:10px}
.hl{fill:none;stroke:#ff0040;stroke-width:2.5}.hl-label{fill:#ff0040;font-weight:bold}
.guide{stroke:#ff0040;stroke-width:1;stroke-dasharray:4 3;opacity:.55}
.hl:target{stroke-width:5;stroke:#ff00c8}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
tr:target{background:#ffe0e8}code{word-break:break-all}
";

/// The legend shown above the diagram.
pub(crate) const LEGEND: &str = "<div class=\"legend\">\
<span><i style=\"background:#2e9e44\"></i>send ok</span>\
<span><i style=\"background:#f0a020\"></i>info (outcome unknown)</span>\
<span><i style=\"background:#d63c3c\"></i>fail</span>\
<span><i style=\"background:#2f6fd6\"></i>poll (offsets read)</span>\
<span><i style=\"background:#7b3fb5\"></i>final read</span>\
<span><i style=\"background:#c2338a\"></i>commit</span>\
<span><i style=\"background:#1a7f8f\"></i>assign / join / leader epoch</span>\
<span><i style=\"background:#c0392b\"></i>truncation</span>\
<span><i style=\"border-top:2px solid #333;height:0\"></i>high watermark (per broker)</span>\
<span><i style=\"border-top:2px dashed #999;height:0\"></i>log start</span>\
<span><i style=\"background:#d63c3c55\"></i>crash</span>\
<span><i style=\"background:#8b00003d\"></i>power loss</span>\
<span><i style=\"background:#e0b00038\"></i>pause</span>\
<span><i style=\"background:#5a5ac829\"></i>network fault</span>\
<span><i style=\"background:#96642a38\"></i>slow / full disk</span>\
<span><i style=\"border:2px solid #ff0040;height:6px\"></i>named by a violation</span>\
</div>\n";

/// Colours of the brokers' high-watermark lines.
const BROKER_COLOURS: [&str; 6] = [
    "#222", "#e8590c", "#1971c2", "#2f9e44", "#9c36b5", "#868e96",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LaneKind {
    Faults,
    Producer,
    Consumer,
    Broker,
    Partition,
}

impl LaneKind {
    fn name(self) -> &'static str {
        match self {
            LaneKind::Faults => "nemesis",
            LaneKind::Producer => "producer",
            LaneKind::Consumer => "client",
            LaneKind::Broker => "server",
            LaneKind::Partition => "partition",
        }
    }
}

#[derive(Debug, Clone)]
struct Lane {
    name: String,
    kind: LaneKind,
    y: f64,
    height: f64,
}

/// One thing to draw: a box in a lane, from `x0` to `x1`, `y0` to `y1`.
#[derive(Debug, Clone, Copy)]
struct Mark {
    lane: usize,
    class: &'static str,
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    index: u64,
}

/// Marks of one kind in one bucket of one lane.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    count: usize,
    first: Mark,
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    last_index: u64,
}

/// A history laid out for drawing.
pub(crate) struct Diagram<'a> {
    history: &'a History,
    lanes: Vec<Lane>,
    node_lanes: BTreeMap<String, usize>,
    partition_lanes: BTreeMap<Partition, usize>,
    /// Highest offset drawn in each partition lane.
    top_offsets: BTreeMap<Partition, i64>,
    faults: Vec<Fault>,
    /// Fault rows in the faults lane, per fault.
    fault_rows: Vec<usize>,
    /// Invocation -> completion.
    completions: HashMap<u64, u64>,
    /// Highlighted op -> the checks that name it.
    highlighted: BTreeMap<u64, Vec<Check>>,
    end_ns: u64,
    width: f64,
    height: f64,
}

fn client_node(op: &Op) -> Option<&str> {
    match op.process {
        Process::Client(_) => Some(op.node.as_deref().unwrap_or("client")),
        Process::Named(_) => None,
    }
}

/// Nodes with a lane: producers, then other clients, then named actors (not the nemesis).
fn node_lanes(history: &History) -> Vec<(String, LaneKind)> {
    let mut kinds: BTreeMap<String, LaneKind> = BTreeMap::new();
    for op in &history.ops {
        if let Some(node) = client_node(op) {
            let kind = kinds.entry(node.to_owned()).or_insert(LaneKind::Consumer);
            if matches!(op.body, Body::Send { .. }) {
                *kind = LaneKind::Producer;
            }
        } else if let Process::Named(name) = &op.process {
            if &**name != "nemesis" && &**name != FINAL_READER {
                kinds.entry(name.to_string()).or_insert(LaneKind::Broker);
            }
        }
    }
    if history
        .ops
        .iter()
        .any(|op| matches!(&op.process, Process::Named(name) if &**name == FINAL_READER))
    {
        kinds
            .entry(FINAL_READER.to_owned())
            .or_insert(LaneKind::Consumer);
    }
    let mut nodes: Vec<(String, LaneKind)> = kinds.into_iter().collect();
    let rank = |kind: &LaneKind, name: &str| match kind {
        LaneKind::Producer => 0,
        LaneKind::Consumer if name == FINAL_READER => 2,
        LaneKind::Consumer => 1,
        _ => 3,
    };
    nodes.sort_by(|(a, ka), (b, kb)| (rank(ka, a), a).cmp(&(rank(kb, b), b)));
    nodes
}

/// Rows for lasting faults so that none overlaps another (row 0 holds point events).
fn fault_rows(faults: &[Fault]) -> Vec<usize> {
    let mut row_ends: Vec<u64> = Vec::new();
    faults
        .iter()
        .map(|fault| {
            if !fault.lasting {
                return 0;
            }
            let row = row_ends
                .iter()
                .position(|end| *end < fault.start_ns)
                .unwrap_or(row_ends.len());
            if row == row_ends.len() {
                row_ends.push(fault.end_ns);
            } else {
                row_ends[row] = fault.end_ns;
            }
            row + 1
        })
        .collect()
}

/// The highest offset each partition lane must show.
fn top_offsets(history: &History) -> BTreeMap<Partition, i64> {
    let mut top: BTreeMap<Partition, i64> = BTreeMap::new();
    let mut raise = |partition: &Partition, offset: i64| {
        let entry = top.entry(partition.clone()).or_insert(1);
        *entry = (*entry).max(offset);
    };
    for op in &history.ops {
        match &op.body {
            Body::Send {
                partition,
                offset: Some(offset),
                ..
            }
            | Body::HighWatermark { partition, offset }
            | Body::LogStart { partition, offset }
            | Body::Position {
                partition, offset, ..
            }
            | Body::Truncate {
                partition,
                from_offset: offset,
                ..
            } => raise(partition, *offset),
            Body::Poll { records, .. } => {
                for (partition, entries) in records {
                    for (offset, _) in entries {
                        raise(partition, *offset);
                    }
                }
            }
            Body::Commit { offsets, .. } => {
                for (partition, offset) in offsets {
                    raise(partition, *offset);
                }
            }
            _ => {}
        }
    }
    top
}

impl<'a> Diagram<'a> {
    pub(crate) fn new(history: &'a History, found: &[Violation]) -> Diagram<'a> {
        let end_ns = history
            .ops
            .iter()
            .map(|op| op.time_ns)
            .max()
            .unwrap_or(0)
            .max(1);
        let faults = faults(history, end_ns);
        let fault_rows = fault_rows(&faults);
        let seconds = end_ns as f64 / 1e9;
        let width = (seconds * PX_PER_S).clamp(1200.0, 16_000.0);
        let mut diagram = Diagram {
            history,
            lanes: Vec::new(),
            node_lanes: BTreeMap::new(),
            partition_lanes: BTreeMap::new(),
            top_offsets: top_offsets(history),
            faults,
            fault_rows,
            completions: HashMap::new(),
            highlighted: BTreeMap::new(),
            end_ns,
            width,
            height: 0.0,
        };
        diagram.lay_out_lanes();
        for op in &history.ops {
            if let Some(invoke) = op.invoke {
                diagram.completions.insert(invoke, op.index);
            }
        }
        for violation in found {
            for index in &violation.ops {
                let checks = diagram.highlighted.entry(*index).or_default();
                if !checks.contains(&violation.check) {
                    checks.push(violation.check);
                }
            }
        }
        diagram
    }

    fn lay_out_lanes(&mut self) {
        let mut y = AXIS_H;
        let rows = self.fault_rows.iter().copied().max().unwrap_or(0) + 1;
        let mut push = |lanes: &mut Vec<Lane>, name: String, kind: LaneKind, height: f64| {
            lanes.push(Lane {
                name,
                kind,
                y,
                height,
            });
            y += height;
            lanes.len() - 1
        };
        let faults_h = (8.0 + rows as f64 * FAULT_ROW_H).max(BROKER_H);
        push(
            &mut self.lanes,
            "faults".to_owned(),
            LaneKind::Faults,
            faults_h,
        );
        for (node, kind) in node_lanes(self.history) {
            let height = if kind == LaneKind::Broker {
                BROKER_H
            } else {
                CLIENT_H
            };
            let lane = push(&mut self.lanes, node.clone(), kind, height);
            self.node_lanes.insert(node, lane);
        }
        let keys = Keys::of(self.history);
        for (_, partition) in keys.mapping() {
            let lane = push(
                &mut self.lanes,
                partition.to_owned(),
                LaneKind::Partition,
                PARTITION_H,
            );
            self.partition_lanes.insert(partition.into(), lane);
        }
        self.height = y + 4.0;
    }

    pub(crate) fn duration_s(&self) -> f64 {
        self.end_ns as f64 / 1e9
    }

    fn x(&self, time_ns: u64) -> f64 {
        PAD + time_ns as f64 / self.end_ns as f64 * (self.width - 2.0 * PAD)
    }

    /// The y of `offset` in a partition lane.
    fn offset_y(&self, lane: usize, partition: &str, offset: i64) -> f64 {
        let lane = &self.lanes[lane];
        let top = self.top_offsets.get(partition).copied().unwrap_or(1).max(1) as f64;
        let fraction = (offset.max(0) as f64 / top).min(1.0);
        lane.y + lane.height - 6.0 - fraction * (lane.height - 16.0)
    }

    /// One line about an operation, for links and tooltips.
    pub(crate) fn describe(&self, index: u64) -> String {
        let Some(op) = self.history.ops.get(index as usize) else {
            return "(not in the history)".to_owned();
        };
        let who = match (&op.process, &op.node) {
            (_, Some(node)) => node.to_string(),
            (Process::Named(name), None) => name.to_string(),
            (Process::Client(process), None) => format!("process {process}"),
        };
        let kind = match op.op_type {
            OpType::Invoke => "invoke",
            OpType::Ok => "ok",
            OpType::Fail => "fail",
            OpType::Info => "info",
        };
        let detail = describe_body(op);
        let time = format!("{:.1} ms", op.time_ns as f64 / 1e6);
        match &op.body {
            Body::Nemesis { .. } | Body::HighWatermark { .. } | Body::LogStart { .. } => {
                format!("{who} {detail} at {time}")
            }
            _ => format!("{who} {} {kind} {detail} at {time}", op.body.f()),
        }
    }
}

fn describe_body(op: &Op) -> String {
    match &op.body {
        Body::Send {
            partition,
            value,
            offset,
        } => match offset {
            Some(offset) => format!("{value} → {partition}@{offset}"),
            None => format!("{value} → {partition}"),
        },
        Body::Poll { records, .. } => {
            let parts: Vec<String> = records
                .iter()
                .filter_map(|(partition, entries)| {
                    let first = entries.first()?.0;
                    let last = entries.last()?.0;
                    Some(format!("{partition}@{first}..{last}"))
                })
                .collect();
            if parts.is_empty() {
                String::new()
            } else {
                parts.join(" ")
            }
        }
        Body::HighWatermark { partition, offset } => format!("hw {partition} = {offset}"),
        Body::LogStart { partition, offset } => format!("log start {partition} = {offset}"),
        Body::Truncate {
            partition,
            from_offset,
            reason,
        } => format!("{partition} from {from_offset} ({reason})"),
        Body::Leader { partition, epoch } => format!("{partition} epoch {epoch}"),
        Body::Commit { offsets, .. } => {
            let parts: Vec<String> = offsets.iter().map(|(p, o)| format!("{p}={o}")).collect();
            parts.join(" ")
        }
        Body::Position {
            partition, offset, ..
        } => format!("{partition}@{offset}"),
        Body::Nemesis(nemesis) => format!("{} {}", nemesis.f(), nemesis.value()),
        Body::Invariant {
            check,
            partition,
            detail,
        } => format!("{check} {partition}: {detail}"),
        Body::Offline { partition, reason } => format!("{partition} ({reason})"),
        Body::Controller { term } => format!("term {term}"),
        Body::Breach { detail } => detail.clone(),
        _ => String::new(),
    }
}

mod marks;
mod svg;
