//! Delivery at a consumer group (the application's view): `group-at-least-once`,
//! `group-at-most-once`, `commit-regression` and `zombie-commit`, judged on the members' `process` events and
//! `commit` operations across members, crashes and rebalances.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Analysis, Check, CheckResult, Outcome};
use crate::history::{topic_of, Partition, Value};

pub(crate) fn check(analysis: &Analysis) -> Vec<CheckResult> {
    vec![
        CheckResult::new(Check::GroupAtLeastOnce, at_least_once(analysis)),
        CheckResult::new(Check::GroupAtMostOnce, at_most_once(analysis)),
        CheckResult::new(Check::CommitRegression, commit_regression(analysis)),
        CheckResult::new(Check::ZombieCommit, zombie_commit(analysis)),
    ]
}

/// Every acknowledged value of a group's topics was processed by some member by the end.
fn at_least_once(analysis: &Analysis) -> Vec<String> {
    let mut violations = Vec::new();
    for (group, topics) in &analysis.group_topics {
        let processed = analysis.processed.get(group);
        for (value, send) in analysis.sends.iter() {
            let Outcome::Ok(offset) = send.outcome else {
                continue;
            };
            if !topics
                .iter()
                .any(|topic| &**topic == topic_of(&send.partition))
            {
                continue;
            }
            if processed.is_none_or(|seen| !seen.contains_key(&value)) {
                violations.push(format!(
                    "group {group}: {value} (acknowledged at {}@{offset}) was never processed",
                    send.partition
                ));
            }
        }
    }
    violations
}

/// No value was processed twice by a group's members.
fn at_most_once(analysis: &Analysis) -> Vec<String> {
    let mut violations = Vec::new();
    for (group, processed) in &analysis.processed {
        for (value, by) in processed {
            if by.len() > 1 {
                let by: Vec<String> = by
                    .iter()
                    .map(|(index, node)| format!("{node} at {index}"))
                    .collect();
                violations.push(format!(
                    "group {group}: {value} processed {} times ({})",
                    by.len(),
                    by.join(", ")
                ));
            }
        }
    }
    violations
}

/// An acknowledged commit: when it was invoked and acknowledged (history indexes), its
/// generation and offsets. The coordinator applied it somewhere in between.
#[derive(Debug, Clone)]
pub(crate) struct Commit {
    pub(crate) group: Arc<str>,
    pub(crate) invoked: u64,
    pub(crate) acknowledged: u64,
    pub(crate) generation: i32,
    pub(crate) offsets: BTreeMap<Partition, i64>,
}

/// The pairs (earlier, later) of a group's acknowledged commits where `earlier` was
/// acknowledged before `later` was invoked: the coordinator surely applied them in that order.
fn ordered_pairs(analysis: &Analysis) -> impl Iterator<Item = (&Commit, &Commit)> {
    analysis.commits.iter().flat_map(move |later| {
        analysis
            .commits
            .iter()
            .filter(move |earlier| {
                earlier.group == later.group && earlier.acknowledged < later.invoked
            })
            .map(move |earlier| (earlier, later))
    })
}

/// A group's committed offset of a partition never went back: no acknowledged commit sets a
/// lower offset than one acknowledged before it was invoked.
fn commit_regression(analysis: &Analysis) -> Vec<String> {
    let mut violations = Vec::new();
    for (earlier, later) in ordered_pairs(analysis) {
        for (partition, offset) in &later.offsets {
            if let Some(before) = earlier
                .offsets
                .get(partition)
                .filter(|before| offset < before)
            {
                violations.push(format!(
                    "group {}: {partition} committed {offset} at {} after {before} at {}",
                    later.group, later.acknowledged, earlier.acknowledged
                ));
            }
        }
    }
    violations.sort();
    violations.dedup();
    violations
}

/// No commit of a generation was accepted once a later generation existed: a commit invoked
/// after some member had joined a later generation must be refused.
fn zombie_commit(analysis: &Analysis) -> Vec<String> {
    let mut violations = Vec::new();
    for commit in &analysis.commits {
        let later = analysis.joins.get(&commit.group).and_then(|joins| {
            joins.iter().find(|(index, generation)| {
                *index < commit.invoked && *generation > commit.generation
            })
        });
        if let Some((index, generation)) = later {
            violations.push(format!(
                "group {}: a commit of generation {} invoked at {} was acknowledged at {}, after generation {generation} was joined at {index}",
                commit.group, commit.generation, commit.invoked, commit.acknowledged
            ));
        }
    }
    violations
}

/// Who processed a value: `(history index, node)` of each time.
pub(crate) type ProcessedBy = BTreeMap<Value, Vec<(u64, Arc<str>)>>;
