//! Writing the diagram as SVG.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::marks::thin;
use super::{escape, Bucket, Diagram, LaneKind, Mark, BROKER_COLOURS, FAULT_ROW_H, LABEL_W, PAD};
use crate::history::{Body, Partition, Process};

/// Round to a tenth of a pixel: enough for the eye, and short.
fn r(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

/// What a class of marks is, for tooltips of thinned marks.
fn class_name(class: &str) -> &'static str {
    match class {
        "s-ok" | "ps-ok" => "sends ok",
        "s-info" | "ps-info" => "sends info",
        "s-fail" | "ps-fail" => "sends failed",
        "s-pending" => "sends never completed",
        "p-ok" | "pp" => "polls",
        "p-empty" => "empty polls",
        "p-info" => "polls info",
        "p-fail" => "polls failed",
        "pf" => "final-reader polls",
        "pc" | "e-commit" => "commits",
        "pr" | "e-reset" => "resets / seeks",
        "e-assign" => "assigns / subscribes",
        "e-join" => "joins",
        "e-breach" => "contract breaches",
        "pl" | "b-leader" => "leader elections",
        "pt" | "b-trunc" => "truncations",
        "po" | "b-offline" => "partitions offline",
        "pi" | "b-inv" => "invariants broken",
        "b-ctrl" => "controller elections",
        "b-final" => "final reads",
        _ => "events",
    }
}

fn ms(time_ns: u64) -> String {
    format!("{:.1} ms", time_ns as f64 / 1e6)
}

impl Diagram<'_> {
    /// Writes the diagram: a column of lane names and the scrolling diagram itself.
    pub(crate) fn write(&self, out: &mut String) {
        let (width, height) = (r(self.width), r(self.height));
        out.push_str("<div class=\"diagram\">\n");
        let _ = writeln!(
            out,
            "<svg class=\"labels\" width=\"{LABEL_W}\" height=\"{height}\">"
        );
        self.write_labels(out);
        out.push_str("</svg>\n<div class=\"scroll\">\n");
        let _ = writeln!(
            out,
            "<svg id=\"timeline\" width=\"{width}\" height=\"{height}\">"
        );
        self.write_lanes(out);
        self.write_axis(out);
        self.write_fault_shading(out);
        self.write_steps(out);
        for bucket in thin(self.marks()) {
            self.write_bucket(out, &bucket);
        }
        self.write_fault_bars(out);
        self.write_highlights(out);
        out.push_str("</svg>\n</div>\n</div>\n");
    }

    fn write_labels(&self, out: &mut String) {
        for (number, lane) in self.lanes.iter().enumerate() {
            let odd = if number % 2 == 1 { " odd" } else { "" };
            let _ = writeln!(
                out,
                "<rect class=\"lane-bg{odd}\" x=\"0\" y=\"{}\" width=\"{LABEL_W}\" height=\"{}\"/>",
                r(lane.y),
                r(lane.height)
            );
            let kind = match lane.kind {
                LaneKind::Partition => {
                    let top = self
                        .top_offsets
                        .get(lane.name.as_str())
                        .copied()
                        .unwrap_or(0);
                    format!("offsets 0–{top}")
                }
                kind => kind.name().to_owned(),
            };
            let _ = writeln!(
                out,
                "<text class=\"lane-name\" x=\"8\" y=\"{}\">{}</text><text class=\"lane-kind\" x=\"8\" y=\"{}\">{}</text>",
                r(lane.y + 14.0),
                escape(&lane.name),
                r(lane.y + 26.0),
                escape(&kind)
            );
        }
    }

    fn write_lanes(&self, out: &mut String) {
        for (number, lane) in self.lanes.iter().enumerate() {
            let odd = if number % 2 == 1 { " odd" } else { "" };
            let _ = writeln!(
                out,
                "<rect class=\"lane-bg{odd}\" x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\"/><line class=\"lane-line\" x1=\"0\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/>",
                r(lane.y),
                r(self.width),
                r(lane.height),
                r(self.width),
                r(lane.y),
                r(lane.y)
            );
        }
    }

    /// Time ticks every 1, 2 or 5 × 10^k ms, about every 120 pixels.
    fn write_axis(&self, out: &mut String) {
        let ms_total = self.end_ns as f64 / 1e6;
        let wanted = (self.width / 120.0).max(1.0);
        let raw = ms_total / wanted;
        let magnitude = 10f64.powf(raw.max(1e-3).log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .into_iter()
            .map(|m| m * magnitude)
            .find(|step| *step >= raw)
            .unwrap_or(10.0 * magnitude);
        out.push_str("<g class=\"axis\">\n");
        let mut tick = 0.0;
        while tick <= ms_total {
            let x = r(self.x((tick * 1e6) as u64));
            let label = if step >= 1000.0 || tick >= 1000.0 {
                format!("{:.*} s", usize::from(step < 1000.0), tick / 1000.0)
            } else {
                format!("{tick:.0} ms")
            };
            let _ = writeln!(
                out,
                "<line class=\"grid\" x1=\"{x}\" x2=\"{x}\" y1=\"18\" y2=\"{}\"/><text x=\"{}\" y=\"13\">{label}</text>",
                r(self.height),
                r(x + 2.0)
            );
            tick += step;
        }
        out.push_str("</g>\n");
    }

    fn write_fault_shading(&self, out: &mut String) {
        for fault in &self.faults {
            let title = format!(
                "{} ({} – {}) #{}",
                fault.label,
                ms(fault.start_ns),
                ms(fault.end_ns),
                fault.index
            );
            for node in &fault.nodes {
                let Some(&lane) = self.node_lanes.get(node) else {
                    continue;
                };
                let lane = &self.lanes[lane];
                let x0 = self.x(fault.start_ns);
                let (y, height, width, class) = if fault.lasting {
                    let width = (self.x(fault.end_ns) - x0).max(2.0);
                    (lane.y, lane.height, width, fault.class)
                } else {
                    (lane.y, 5.0, 4.0, "f-point")
                };
                let _ = writeln!(
                    out,
                    "<rect class=\"{class}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}</title></rect>",
                    r(x0),
                    r(y),
                    r(width),
                    r(height),
                    escape(&title)
                );
            }
        }
    }

    fn write_fault_bars(&self, out: &mut String) {
        for (position, fault) in self.faults.iter().enumerate() {
            let mark = self.fault_mark(position);
            let width = if fault.lasting {
                (mark.x1 - mark.x0).max(2.0)
            } else {
                4.0
            };
            let title = format!(
                "{} ({} – {}) #{}",
                fault.label,
                ms(fault.start_ns),
                ms(fault.end_ns),
                fault.index
            );
            let _ = write!(
                out,
                "<rect class=\"{} fault-bar\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}</title></rect>",
                mark.class,
                r(mark.x0),
                r(mark.y0),
                r(width),
                r(FAULT_ROW_H - 3.0),
                escape(&title)
            );
            let fits = (width / 6.5) as usize;
            if fault.lasting && fits >= 4 {
                let text: String = fault.label.chars().take(fits).collect();
                let _ = write!(
                    out,
                    "<text class=\"fault-label\" x=\"{}\" y=\"{}\">{}</text>",
                    r(mark.x0 + 3.0),
                    r(mark.y0 + 9.5),
                    escape(&text)
                );
            }
            out.push('\n');
        }
    }

    /// Each broker's high watermark and log start offset per partition, as step lines.
    fn write_steps(&self, out: &mut String) {
        type Key = (Partition, String, bool);
        let mut samples: BTreeMap<Key, Vec<(u64, i64)>> = BTreeMap::new();
        let mut brokers: Vec<String> = Vec::new();
        for op in &self.history.ops {
            let (
                Process::Named(node),
                Body::HighWatermark { partition, offset } | Body::LogStart { partition, offset },
            ) = (&op.process, &op.body)
            else {
                continue;
            };
            let is_hw = matches!(op.body, Body::HighWatermark { .. });
            if !brokers.iter().any(|b| **b == **node) {
                brokers.push(node.to_string());
            }
            let key = (partition.clone(), node.to_string(), is_hw);
            samples.entry(key).or_default().push((op.time_ns, *offset));
        }
        for ((partition, node, is_hw), points) in samples {
            let Some(&lane) = self.partition_lanes.get(&partition) else {
                continue;
            };
            let d = self.step_path(lane, &partition, &points);
            let colour = brokers.iter().position(|b| *b == node).unwrap_or(0);
            let (class, what) = if is_hw {
                ("hw", "high watermark")
            } else {
                ("ls", "log start offset")
            };
            let stroke = if is_hw {
                format!(
                    " stroke=\"{}\"",
                    BROKER_COLOURS[colour % BROKER_COLOURS.len()]
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "<path class=\"{class}\"{stroke} d=\"{d}\"><title>{} {what} of {}</title></path>",
                escape(&node),
                escape(&partition)
            );
        }
    }

    /// `M x y H x V y ...`, skipping samples that change nothing at this scale.
    fn step_path(&self, lane: usize, partition: &str, points: &[(u64, i64)]) -> String {
        let mut d = String::new();
        let mut last: Option<(f64, f64)> = None;
        for (time_ns, offset) in points {
            let (x, y) = (
                r(self.x(*time_ns)),
                r(self.offset_y(lane, partition, *offset)),
            );
            match last {
                None => {
                    let _ = write!(d, "M{x} {y}");
                }
                Some((lx, ly)) if (x - lx).abs() < 0.5 && (y - ly).abs() < 0.05 => continue,
                Some((lx, _)) if (x - lx).abs() < 0.05 => {
                    let _ = write!(d, "V{y}");
                }
                Some(_) => {
                    let _ = write!(d, "H{x}V{y}");
                }
            }
            last = Some((x, y));
        }
        if let Some((_, y)) = last {
            let _ = write!(d, "H{}V{y}", r(self.width - PAD));
        }
        d
    }

    fn write_bucket(&self, out: &mut String, bucket: &Bucket) {
        let mark = &bucket.first;
        let title = if bucket.count == 1 {
            format!("#{} {}", mark.index, self.describe(mark.index))
        } else {
            format!(
                "{} {} (#{} … #{})",
                bucket.count,
                class_name(mark.class),
                mark.index,
                bucket.last_index
            )
        };
        if bucket.count == 1 && mark.x1 - mark.x0 > 2.0 {
            let y = r(f64::midpoint(mark.y0, mark.y1));
            let _ = write!(
                out,
                "<line class=\"dur\" x1=\"{}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\"/>",
                r(mark.x0),
                r(mark.x1)
            );
        }
        let (x, width) = (bucket.x0 - 1.0, bucket.x1 - bucket.x0 + 2.0);
        let (y, height) = (bucket.y0 - 1.5, (bucket.y1 - bucket.y0 + 3.0).max(3.0));
        let _ = writeln!(
            out,
            "<rect class=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}</title></rect>",
            mark.class,
            r(x),
            r(y),
            r(width),
            r(height),
            escape(&title)
        );
    }

    /// The operations the violations name: outlined, labelled, with a guide line and an anchor.
    fn write_highlights(&self, out: &mut String) {
        out.push_str("<g class=\"highlights\">\n");
        // Labels already written, per lane: a label close to another is left out.
        let mut labels: Vec<(usize, f64)> = Vec::new();
        for (index, checks) in &self.highlighted {
            let Some(op) = self.history.ops.get(*index as usize) else {
                continue;
            };
            let names: Vec<&str> = checks.iter().map(|check| check.name()).collect();
            let title = format!(
                "#{index} {} — named by {}",
                self.describe(*index),
                names.join(", ")
            );
            let marks = self.highlight_marks(op);
            let x = marks.first().map_or(0.0, |mark| mark.x1);
            let _ = writeln!(
                out,
                "<line class=\"guide\" x1=\"{}\" x2=\"{}\" y1=\"18\" y2=\"{}\"/>",
                r(x),
                r(x),
                r(self.height)
            );
            for (number, mark) in marks.iter().enumerate() {
                let crowded = labels
                    .iter()
                    .any(|(lane, x)| *lane == mark.lane && (x - mark.x1).abs() < LABEL_GAP_PX);
                if !crowded {
                    labels.push((mark.lane, mark.x1));
                }
                write_highlight(out, mark, *index, number == 0, !crowded, &title);
            }
        }
        out.push_str("</g>\n");
    }
}

/// Labels of highlighted operations closer than this in one lane would overlap.
const LABEL_GAP_PX: f64 = 40.0;

fn write_highlight(
    out: &mut String,
    mark: &Mark,
    index: u64,
    anchor: bool,
    label: bool,
    title: &str,
) {
    let id = if anchor {
        format!(" id=\"op-{index}\"")
    } else {
        String::new()
    };
    let (x, width) = (mark.x0.min(mark.x1) - 4.0, (mark.x1 - mark.x0).abs() + 8.0);
    let (y, height) = (mark.y0 - 4.0, (mark.y1 - mark.y0) + 8.0);
    let _ = write!(
        out,
        "<rect{id} class=\"hl\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}</title></rect>",
        r(x),
        r(y),
        r(width),
        r(height),
        escape(title),
    );
    if label {
        let _ = write!(
            out,
            "<text class=\"hl-label\" x=\"{}\" y=\"{}\">#{index}</text>",
            r(mark.x1 + 6.0),
            r(y + 2.0)
        );
    }
    out.push('\n');
}
