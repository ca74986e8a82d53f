//! `seedlog-sim timeline`: one self-contained HTML page (inline SVG and CSS, no script, no
//! network) drawing a history as a space-time diagram, with the operations each violation
//! names highlighted and linked from a list at the top.
//!
//! Lanes, top to bottom:
//! - **faults**: every nemesis event; faults that hold for a while (a crash until its restart, a
//!   pause until its resume, a partition, isolation or clog until the heal, a slow or full disk,
//!   a clock skew, a delay spike) as labelled bars;
//! - **one lane per node**: producers, consumers and the final reader (sends, polls, and client
//!   events such as assign, reset, join and commit), then brokers and controllers (leader and
//!   controller elections, truncations, offline partitions, invariant breaks); faults that hit a
//!   node shade its lane;
//! - **one lane per partition**, with offsets upwards: acknowledged sends at their offset, the
//!   offsets each poll returned, committed offsets, each broker's high watermark and log start
//!   as step lines, truncations, leader epochs.
//!
//! Dense lanes are thinned: the marks of one kind that fall into the same few pixels of one lane
//! are drawn as one, whose tooltip counts them. The operations a violation names are always
//! drawn one by one on top, outlined, with an anchor (`#op-INDEX`). Which operations a
//! violation names is read from its text (see [`refs`]): the checkers describe examples in
//! words, with values (`2-149`), places (`ledger-0@68`) and history indices (`op 812`).

mod draw;
mod faults;
pub mod refs;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::checker::{Check, CheckResult};
use crate::history::History;
use crate::scenario::Expect;

pub use refs::{violations, Violation};

/// What the page says about where the history came from.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// The page title (the scenario's name, or the history file).
    pub title: String,
    /// A line under the title (the history file, the scenario file).
    pub subtitle: String,
    /// The scenario's expectations, when known: violations are tagged expected or allowed.
    pub expect: Option<Expect>,
}

/// Escapes text for HTML and SVG (element text and attribute values).
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The whole page.
pub fn render(history: &History, checks: &[CheckResult], page: &Page) -> String {
    let found = violations(history, checks);
    let diagram = draw::Diagram::new(history, &found);
    let mut out = String::with_capacity(64 * 1024 + history.ops.len() * 64);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    let _ = writeln!(out, "<title>{}</title>", escape(&page.title));
    let _ = writeln!(out, "<style>{}</style></head><body>", draw::CSS);
    let _ = writeln!(
        out,
        "<header><h1>{}</h1><p class=\"sub\">{} · {} ops · {:.3} s simulated</p></header>",
        escape(&page.title),
        escape(&page.subtitle),
        history.ops.len(),
        diagram.duration_s()
    );
    summary(&mut out, checks, page.expect.as_ref());
    violation_list(&mut out, &found, &diagram, checks, page.expect.as_ref());
    out.push_str(draw::LEGEND);
    diagram.write(&mut out);
    highlighted_table(&mut out, history, &found);
    out.push_str("</body></html>\n");
    out
}

fn tag(check: Check, expect: Option<&Expect>) -> &'static str {
    match expect {
        Some(expect) if expect.violated.contains(&check) => "expected",
        Some(expect) if expect.may_violate.contains_key(&check) => "allowed",
        Some(_) => "unexpected",
        None => "",
    }
}

fn summary(out: &mut String, checks: &[CheckResult], expect: Option<&Expect>) {
    let violated: Vec<&CheckResult> = checks.iter().filter(|c| !c.holds()).collect();
    let _ = write!(
        out,
        "<section id=\"checks\"><p>{} checks: {} hold",
        checks.len(),
        checks.len() - violated.len()
    );
    if violated.is_empty() {
        out.push_str(", none violated.</p></section>\n");
        return;
    }
    out.push_str("; violated: ");
    let names: Vec<String> = violated
        .iter()
        .map(|check| {
            let tag = tag(check.check, expect);
            format!(
                "<b class=\"check {tag}\">{}</b> ×{}{}",
                escape(check.check.name()),
                check.violations,
                if tag.is_empty() {
                    String::new()
                } else {
                    format!(" ({tag})")
                }
            )
        })
        .collect();
    out.push_str(&names.join(", "));
    out.push_str(".</p></section>\n");
}

fn violation_list(
    out: &mut String,
    found: &[Violation],
    diagram: &draw::Diagram<'_>,
    checks: &[CheckResult],
    expect: Option<&Expect>,
) {
    if found.is_empty() {
        return;
    }
    out.push_str("<section id=\"violations\"><h2>Violations</h2><ol>\n");
    for (number, violation) in found.iter().enumerate() {
        let tag = tag(violation.check, expect);
        let _ = write!(
            out,
            "<li id=\"v-{number}\" class=\"violation\"><b class=\"check {tag}\">{}</b> {}",
            escape(violation.check.name()),
            escape(&violation.text)
        );
        if violation.ops.is_empty() {
            out.push_str(" <span class=\"ops none\">(names no operation in the history)</span>");
        } else {
            out.push_str(" <span class=\"ops\">→ ");
            let links: Vec<String> = violation
                .ops
                .iter()
                .map(|index| {
                    format!(
                        "<a href=\"#op-{index}\">#{index} {}</a>",
                        escape(&diagram.describe(*index))
                    )
                })
                .collect();
            out.push_str(&links.join(", "));
            out.push_str("</span>");
        }
        out.push_str("</li>\n");
    }
    out.push_str("</ol>");
    let shown: BTreeMap<Check, usize> = found.iter().fold(BTreeMap::new(), |mut counts, v| {
        *counts.entry(v.check).or_default() += 1;
        counts
    });
    for check in checks.iter().filter(|c| !c.holds()) {
        let listed = shown.get(&check.check).copied().unwrap_or(0);
        if listed < check.violations {
            let _ = write!(
                out,
                "<p class=\"more\">{}: the checker describes {listed} of its {} violations.</p>",
                escape(check.check.name()),
                check.violations
            );
        }
    }
    out.push_str("</section>\n");
}

fn highlighted_table(out: &mut String, history: &History, found: &[Violation]) {
    let mut named: BTreeMap<u64, Vec<Check>> = BTreeMap::new();
    for violation in found {
        for index in &violation.ops {
            named.entry(*index).or_default().push(violation.check);
        }
    }
    if named.is_empty() {
        return;
    }
    out.push_str("<section id=\"ops\"><h2>Highlighted operations</h2><table>\n");
    out.push_str("<tr><th>index</th><th>named by</th><th>operation (history JSON)</th></tr>\n");
    for (index, checks) in named {
        let Some(op) = history.ops.get(index as usize) else {
            continue;
        };
        let mut names: Vec<&str> = checks.iter().map(|c| c.name()).collect();
        names.dedup();
        let _ = writeln!(
            out,
            "<tr id=\"row-{index}\"><td><a href=\"#op-{index}\">#{index}</a></td><td>{}</td><td><code>{}</code></td></tr>",
            escape(&names.join(", ")),
            escape(&op.to_json_line())
        );
    }
    out.push_str("</table></section>\n");
}

#[cfg(test)]
mod tests;
