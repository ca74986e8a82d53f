//! What each operation draws, and the thinning of dense lanes.

use std::collections::BTreeMap;

use super::{Bucket, Diagram, Mark, BUCKET_PX};
use crate::checker::FINAL_READER;
use crate::history::{Body, Op, OpType, Process};

/// Row `row` (0: sends, 1: polls, 2: other client events) of a client lane: `(y0, y1)`.
fn client_row(lane_y: f64, row: usize) -> (f64, f64) {
    let y0 = lane_y + 4.0 + row as f64 * 12.0;
    (y0, y0 + 10.0)
}

fn client_class(op: &Op) -> (usize, &'static str) {
    let outcome = |ok: &'static str, info: &'static str, fail: &'static str| match op.op_type {
        OpType::Ok => ok,
        OpType::Fail => fail,
        OpType::Info | OpType::Invoke => info,
    };
    match &op.body {
        Body::Send { .. } if op.op_type == OpType::Invoke => (0, "s-pending"),
        Body::Send { .. } => (0, outcome("s-ok", "s-info", "s-fail")),
        Body::Poll { records, .. } if op.op_type == OpType::Ok && records.is_empty() => {
            (1, "p-empty")
        }
        Body::Poll { .. } => (1, outcome("p-ok", "p-info", "p-fail")),
        Body::Commit { .. } => (2, "e-commit"),
        Body::Assign { .. } | Body::Subscribe { .. } => (2, "e-assign"),
        Body::Join { .. } => (2, "e-join"),
        Body::Position { .. } => (2, "e-reset"),
        Body::Breach { .. } => (2, "e-breach"),
        _ => (2, "e-process"),
    }
}

fn named_class(op: &Op) -> Option<&'static str> {
    Some(match &op.body {
        Body::Leader { .. } => "b-leader",
        Body::Truncate { .. } => "b-trunc",
        Body::Offline { .. } => "b-offline",
        Body::Invariant { .. } => "b-inv",
        Body::Controller { .. } => "b-ctrl",
        Body::FinalRead(_) | Body::FinalReadStart => "b-final",
        Body::HighWatermark { .. } | Body::LogStart { .. } => return None,
        _ => "b-other",
    })
}

impl Diagram<'_> {
    /// Every mark of the history (invocations draw with their completions).
    pub(super) fn marks(&self) -> Vec<Mark> {
        let mut marks = Vec::new();
        for op in &self.history.ops {
            if op.op_type == OpType::Invoke && self.completions.contains_key(&op.index) {
                continue;
            }
            self.op_marks(op, &mut marks);
        }
        marks
    }

    /// The marks of one operation (an invocation without completion: pending to the end).
    pub(super) fn op_marks(&self, op: &Op, marks: &mut Vec<Mark>) {
        match &op.process {
            Process::Client(_) => self.client_marks(op, marks),
            Process::Named(name) if &**name == "nemesis" => {}
            Process::Named(name) => self.named_marks(name, op, marks),
        }
    }

    fn client_marks(&self, op: &Op, marks: &mut Vec<Mark>) {
        let node = op.node.as_deref().unwrap_or("client");
        let Some(&lane) = self.node_lanes.get(node) else {
            return;
        };
        let start_ns = op
            .invoke
            .and_then(|invoke| self.history.ops.get(invoke as usize))
            .map_or(op.time_ns, |invocation| invocation.time_ns);
        let end_ns = if op.op_type == OpType::Invoke {
            self.end_ns
        } else {
            op.time_ns
        };
        let (row, class) = client_class(op);
        let (y0, y1) = client_row(self.lanes[lane].y, row);
        marks.push(Mark {
            lane,
            class,
            x0: self.x(start_ns),
            x1: self.x(end_ns),
            y0,
            y1,
            index: op.index,
        });
        self.client_partition_marks(op, node, marks);
    }

    fn point(&self, lane: usize, class: &'static str, op: &Op, y: f64) -> Mark {
        let x = self.x(op.time_ns);
        Mark {
            lane,
            class,
            x0: x,
            x1: x,
            y0: y,
            y1: y,
            index: op.index,
        }
    }

    fn client_partition_marks(&self, op: &Op, node: &str, marks: &mut Vec<Mark>) {
        let lane_of = |partition: &str| self.partition_lanes.get(partition).copied();
        match &op.body {
            Body::Send {
                partition, offset, ..
            } if op.op_type != OpType::Invoke => {
                let Some(lane) = lane_of(partition) else {
                    return;
                };
                let mark = match (op.op_type, offset) {
                    (OpType::Ok, Some(offset)) if *offset >= 0 => {
                        self.point(lane, "ps-ok", op, self.offset_y(lane, partition, *offset))
                    }
                    (OpType::Ok, _) => return,
                    (OpType::Fail, _) => self.bottom(lane, "ps-fail", op),
                    _ => self.bottom(lane, "ps-info", op),
                };
                marks.push(mark);
            }
            Body::Poll { records, .. } if op.op_type == OpType::Ok => {
                let class = if node == FINAL_READER { "pf" } else { "pp" };
                for (partition, entries) in records {
                    let (Some(lane), Some(first), Some(last)) =
                        (lane_of(partition), entries.first(), entries.last())
                    else {
                        continue;
                    };
                    let mut mark = self.point(lane, class, op, 0.0);
                    mark.y0 = self.offset_y(lane, partition, last.0.max(first.0));
                    mark.y1 = self.offset_y(lane, partition, first.0.min(last.0));
                    marks.push(mark);
                }
            }
            Body::Commit { offsets, .. } if op.op_type == OpType::Ok => {
                for (partition, offset) in offsets {
                    if let Some(lane) = lane_of(partition) {
                        let y = self.offset_y(lane, partition, *offset);
                        marks.push(self.point(lane, "pc", op, y));
                    }
                }
            }
            Body::Position {
                partition, offset, ..
            } => {
                if let Some(lane) = lane_of(partition) {
                    let y = self.offset_y(lane, partition, *offset);
                    marks.push(self.point(lane, "pr", op, y));
                }
            }
            _ => {}
        }
    }

    /// A mark along the bottom of a partition lane (a send with no offset).
    fn bottom(&self, lane: usize, class: &'static str, op: &Op) -> Mark {
        let y = self.lanes[lane].y + self.lanes[lane].height - 4.0;
        let mut mark = self.point(lane, class, op, y);
        mark.y0 = y - 2.0;
        mark
    }

    /// A mark along the top of a partition lane (leader epochs, offline, invariants).
    fn top(&self, lane: usize, class: &'static str, op: &Op) -> Mark {
        let y = self.lanes[lane].y + 2.0;
        let mut mark = self.point(lane, class, op, y);
        mark.y1 = y + 5.0;
        mark
    }

    fn named_marks(&self, name: &str, op: &Op, marks: &mut Vec<Mark>) {
        if let (Some(&lane), Some(class)) = (self.node_lanes.get(name), named_class(op)) {
            let lane_y = self.lanes[lane].y;
            let mut mark = self.point(lane, class, op, lane_y + 6.0);
            mark.y1 = lane_y + self.lanes[lane].height - 6.0;
            marks.push(mark);
        }
        let lane_of = |partition: &str| self.partition_lanes.get(partition).copied();
        match &op.body {
            Body::Leader { partition, .. } => {
                if let Some(lane) = lane_of(partition) {
                    marks.push(self.top(lane, "pl", op));
                }
            }
            Body::Offline { partition, .. } => {
                if let Some(lane) = lane_of(partition) {
                    marks.push(self.top(lane, "po", op));
                }
            }
            Body::Invariant { partition, .. } => {
                if let Some(lane) = lane_of(partition) {
                    marks.push(self.top(lane, "pi", op));
                }
            }
            Body::Truncate { partition, .. } => {
                if let Some(lane) = lane_of(partition) {
                    let mut mark = self.top(lane, "pt", op);
                    mark.y1 = self.lanes[lane].y + self.lanes[lane].height - 2.0;
                    marks.push(mark);
                }
            }
            _ => {}
        }
    }

    /// The marks a highlighted operation draws: its own (or its completion's), a point in its
    /// partition for a high watermark or log start, its bar for a nemesis event, and, failing
    /// all of these, a point in its node's lane.
    pub(super) fn highlight_marks(&self, op: &Op) -> Vec<Mark> {
        let mut marks = Vec::new();
        let drawn = self
            .completions
            .get(&op.index)
            .and_then(|completion| self.history.ops.get(*completion as usize))
            .unwrap_or(op);
        self.op_marks(drawn, &mut marks);
        if let Body::HighWatermark { partition, offset } | Body::LogStart { partition, offset } =
            &op.body
        {
            if let Some(&lane) = self.partition_lanes.get(partition) {
                let y = self.offset_y(lane, partition, *offset);
                marks.push(self.point(lane, "hl", op, y));
            }
        }
        if let Some(position) = self.faults.iter().position(|f| f.index == op.index) {
            marks.push(self.fault_mark(position));
        }
        if marks.is_empty() {
            let lane = match &op.process {
                Process::Named(name) => self.node_lanes.get(&**name).copied().unwrap_or(0),
                Process::Client(_) => 0,
            };
            let y = self.lanes[lane].y + self.lanes[lane].height / 2.0;
            marks.push(self.point(lane, "hl", op, y));
        }
        for mark in &mut marks {
            mark.index = op.index;
        }
        marks
    }

    /// The bar of fault `position` in the faults lane.
    pub(super) fn fault_mark(&self, position: usize) -> Mark {
        let fault = &self.faults[position];
        let y0 = self.lanes[0].y + 4.0 + self.fault_rows[position] as f64 * super::FAULT_ROW_H;
        Mark {
            lane: 0,
            class: fault.class,
            x0: self.x(fault.start_ns),
            x1: self.x(fault.end_ns),
            y0,
            y1: y0 + super::FAULT_ROW_H - 3.0,
            index: fault.index,
        }
    }
}

/// Marks of one class within [`BUCKET_PX`] of each other in one lane become one bucket.
pub(super) fn thin(marks: Vec<Mark>) -> Vec<Bucket> {
    let mut buckets: BTreeMap<(usize, i64, &'static str), Bucket> = BTreeMap::new();
    for mark in marks {
        let column = (mark.x1 / BUCKET_PX).floor() as i64;
        buckets
            .entry((mark.lane, column, mark.class))
            .and_modify(|bucket| {
                bucket.count += 1;
                bucket.x0 = bucket.x0.min(mark.x1);
                bucket.x1 = bucket.x1.max(mark.x1);
                bucket.y0 = bucket.y0.min(mark.y0);
                bucket.y1 = bucket.y1.max(mark.y1);
                bucket.last_index = bucket.last_index.max(mark.index);
            })
            .or_insert(Bucket {
                count: 1,
                first: mark,
                x0: mark.x1,
                x1: mark.x1,
                y0: mark.y0,
                y1: mark.y1,
                last_index: mark.index,
            });
    }
    buckets.into_values().collect()
}
