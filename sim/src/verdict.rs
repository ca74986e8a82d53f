//! Judging runs against a scenario's `[expect]`, for one seed and for a sweep.
//!
//! One seed is as expected when it did not crash, every check named in `violated` was
//! violated, and every other check held (except those in `may_violate`). A sweep passes when no
//! seed crashed or violated an unexpected check, and each `violated` check fired on at least
//! `min_fraction` of the seeds.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::checker::{Check, CheckResult};
use crate::scenario::Expect;

/// The judgement of one seed.
#[derive(Debug, Clone)]
pub struct SeedVerdict {
    /// The seed.
    pub seed: u64,
    /// Every check's result.
    pub checks: Vec<CheckResult>,
    /// Checks violated that must hold.
    pub unexpected: Vec<Check>,
    /// Checks in `violated` that held.
    pub missing: Vec<Check>,
    /// A crash of the run (invariant panic, time limit).
    pub error: Option<String>,
    /// History hash.
    pub hash: u64,
    /// Operations in the history.
    pub ops: usize,
}

impl SeedVerdict {
    /// Judges one seed.
    pub fn judge(
        expect: &Expect,
        seed: u64,
        checks: Vec<CheckResult>,
        error: Option<String>,
        hash: u64,
        ops: usize,
    ) -> SeedVerdict {
        let unexpected = checks
            .iter()
            .filter(|check| {
                !check.holds()
                    && !expect.violated.contains(&check.check)
                    && !expect.may_violate.contains_key(&check.check)
            })
            .map(|check| check.check)
            .collect();
        let missing = expect
            .violated
            .iter()
            .filter(|name| {
                checks
                    .iter()
                    .any(|check| check.check == **name && check.holds())
            })
            .copied()
            .collect();
        SeedVerdict {
            seed,
            checks,
            unexpected,
            missing,
            error,
            hash,
            ops,
        }
    }

    /// Strict: nothing unexpected and every expected violation present.
    pub fn as_expected(&self) -> bool {
        self.error.is_none() && self.unexpected.is_empty() && self.missing.is_empty()
    }

    /// Something went wrong that no sweep may tolerate.
    pub fn failed(&self) -> bool {
        self.error.is_some() || !self.unexpected.is_empty()
    }

    /// The full per-check table.
    pub fn table(&self, expect: &Expect) -> String {
        let mut out = String::new();
        for check in &self.checks {
            let tag = if expect.violated.contains(&check.check) {
                "  (expected)"
            } else if expect.may_violate.contains_key(&check.check) {
                "  (allowed)"
            } else {
                ""
            };
            let name = check.check.name();
            if check.holds() {
                let _ = writeln!(out, "  {name:<22} holds{tag}");
            } else {
                let _ = writeln!(out, "  {name:<22} VIOLATED x{}{tag}", check.violations);
                for example in &check.examples {
                    let _ = writeln!(out, "      - {example}");
                }
            }
        }
        if let Some(error) = &self.error {
            let _ = writeln!(out, "  run crashed: {error}");
        }
        out
    }

    /// One line: why the verdict is what it is.
    pub fn reason(&self) -> String {
        if let Some(error) = &self.error {
            return format!("run crashed: {}", error.lines().next().unwrap_or_default());
        }
        let mut parts = Vec::new();
        if !self.unexpected.is_empty() {
            let names: Vec<&str> = self.unexpected.iter().map(|check| check.name()).collect();
            parts.push(format!("unexpectedly violated: {}", names.join(", ")));
        }
        if !self.missing.is_empty() {
            let names: Vec<&str> = self.missing.iter().map(|check| check.name()).collect();
            parts.push(format!("expected violation missing: {}", names.join(", ")));
        }
        if parts.is_empty() {
            "as expected".to_owned()
        } else {
            parts.join("; ")
        }
    }
}

/// A sweep of seeds over one scenario.
#[derive(Debug, Default)]
pub struct SweepSummary {
    /// Seeds run.
    pub seeds: usize,
    /// Seeds that crashed or violated an unexpected check: `(seed, reason)`.
    pub failures: Vec<(u64, String)>,
    /// For each expected violation, on how many seeds it fired.
    pub hits: BTreeMap<Check, usize>,
    /// Distinct history hashes.
    pub distinct_hashes: BTreeSet<u64>,
}

impl SweepSummary {
    /// Adds one seed.
    pub fn add(&mut self, expect: &Expect, verdict: &SeedVerdict) {
        self.seeds += 1;
        self.distinct_hashes.insert(verdict.hash);
        if verdict.failed() {
            self.failures.push((verdict.seed, verdict.reason()));
        }
        for name in &expect.violated {
            let fired = verdict
                .checks
                .iter()
                .any(|check| check.check == *name && !check.holds());
            *self.hits.entry(*name).or_default() += usize::from(fired);
        }
    }

    /// Whether the sweep meets the expectation.
    pub fn passes(&self, expect: &Expect) -> bool {
        self.failures.is_empty()
            && expect.violated.iter().all(|name| {
                let hits = self.hits.get(name).copied().unwrap_or(0);
                self.seeds > 0 && hits as f64 >= expect.min_fraction * self.seeds as f64
            })
    }

    /// Whether the sweep meets what the expectation says of each seed (`run --per-seed`): every
    /// seed as expected and, where `min_fraction` is 1, every seed showing the violations. A
    /// `min_fraction` below 1 is a rate, which a sweep of a few seeds cannot judge: it is only
    /// reported (a scenario's pinned seed still requires its violations).
    pub fn passes_each_seed(&self, expect: &Expect) -> bool {
        if expect.on_every_seed() {
            return self.passes(expect);
        }
        self.seeds > 0 && self.failures.is_empty()
    }

    /// "duplicate on 100/100 seeds (required >= 100%)" for each expected violation, or
    /// "(25% not required: --per-seed)" when a rate is only reported.
    pub fn describe_hits(&self, expect: &Expect, required: bool) -> String {
        expect
            .violated
            .iter()
            .map(|name| {
                let hits = self.hits.get(name).copied().unwrap_or(0);
                let fraction = expect.min_fraction * 100.0;
                let requirement = if required || expect.on_every_seed() {
                    format!("required >= {fraction:.0}%")
                } else {
                    format!("{fraction:.0}% not required: --per-seed")
                };
                format!(
                    "{} on {hits}/{} seeds ({requirement})",
                    name.name(),
                    self.seeds
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str) -> Check {
        Check::from_name(name).expect("a check name")
    }

    fn expect(violated: &[&str], may: &[&str], min_fraction: f64) -> Expect {
        Expect {
            violated: violated.iter().map(|name| check(name)).collect(),
            may_violate: may
                .iter()
                .map(|name| (check(name), "because".to_owned()))
                .collect(),
            min_fraction,
        }
    }

    fn checks(violated: &[&str]) -> Vec<CheckResult> {
        Check::ALL
            .iter()
            .map(|check| CheckResult {
                check: *check,
                violations: usize::from(violated.contains(&check.name())),
                examples: Vec::new(),
            })
            .collect()
    }

    /// Adds seed `seed` to a sweep, with `violated` failing its checks (its hash is the seed).
    fn add_seed(summary: &mut SweepSummary, expect: &Expect, seed: u64, violated: &[&str]) {
        let verdict = SeedVerdict::judge(expect, seed, checks(violated), None, seed, 0);
        summary.add(expect, &verdict);
    }

    #[test]
    fn a_seed_is_as_expected_only_with_exactly_the_expected_violations() {
        let must_fail = expect(&["duplicate"], &["at-most-once"], 1.0);
        assert!(SeedVerdict::judge(
            &must_fail,
            1,
            checks(&["duplicate", "at-most-once"]),
            None,
            0,
            0
        )
        .as_expected());
        assert!(
            SeedVerdict::judge(&must_fail, 1, checks(&["duplicate"]), None, 0, 0).as_expected()
        );
        let missing = SeedVerdict::judge(&must_fail, 1, checks(&[]), None, 0, 0);
        assert!(!missing.as_expected() && !missing.failed());
        let unexpected = SeedVerdict::judge(
            &must_fail,
            1,
            checks(&["duplicate", "lost-write"]),
            None,
            0,
            0,
        );
        assert!(unexpected.failed());
        assert!(SeedVerdict::judge(
            &expect(&[], &[], 1.0),
            1,
            checks(&[]),
            Some("boom".into()),
            0,
            0
        )
        .failed());
    }

    #[test]
    fn a_sweep_needs_the_expected_violation_on_min_fraction_of_seeds() {
        let must_fail = expect(&["lost-write"], &[], 0.5);
        let mut summary = SweepSummary::default();
        add_seed(&mut summary, &must_fail, 1, &["lost-write"]);
        add_seed(&mut summary, &must_fail, 2, &[]);
        assert!(summary.passes(&must_fail), "1 of 2 meets 50%");
        add_seed(&mut summary, &must_fail, 3, &[]);
        assert!(!summary.passes(&must_fail), "1 of 3 does not");
        assert_eq!(summary.distinct_hashes.len(), 3);
    }

    #[test]
    fn judged_seed_by_seed_a_rate_is_not_required_but_every_seed_is_judged() {
        let must_fail = expect(&["lost-write"], &["duplicate"], 0.25);
        let mut summary = SweepSummary::default();
        assert!(
            !summary.passes_each_seed(&must_fail),
            "an empty sweep judges nothing"
        );
        add_seed(&mut summary, &must_fail, 1, &[]);
        add_seed(&mut summary, &must_fail, 2, &["duplicate"]);
        assert!(!summary.passes(&must_fail), "0 of 2 is short of 25%");
        assert!(
            summary.passes_each_seed(&must_fail),
            "no seed broke its expectation"
        );
        add_seed(&mut summary, &must_fail, 3, &["at-most-once"]);
        assert!(
            !summary.passes_each_seed(&must_fail),
            "an unexpected violation fails the sweep seed by seed too"
        );
    }

    #[test]
    fn judged_seed_by_seed_every_seed_must_fail_where_min_fraction_is_one() {
        let every_seed = expect(&["lost-write"], &[], 1.0);
        let mut summary = SweepSummary::default();
        add_seed(&mut summary, &every_seed, 1, &["lost-write"]);
        assert!(summary.passes_each_seed(&every_seed));
        add_seed(&mut summary, &every_seed, 2, &[]);
        assert!(
            !summary.passes_each_seed(&every_seed),
            "a seed without the violation breaks 'on every seed'"
        );
    }
}
