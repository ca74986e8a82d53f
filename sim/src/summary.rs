//! Sweeps split over machines: `--shard K/N` gives a sweep (`run --seeds`) or an exploration
//! the seeds `s` of its range with `s % N == K`, so N shards are disjoint and together cover
//! the range; `--summary FILE` writes what a shard found as JSON; `seedlog-sim merge` reads the
//! shards' summaries, checks that they come from one commit and cover each range once, adds
//! them up and judges the whole as one sweep would have (a `min_fraction` is a rate of the
//! total, not of each shard). Any engine that runs N copies of a command with an index (a CI
//! matrix, a Kubernetes Indexed Job) spreads a sweep this way: docs/SIMULATION.md shows both.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::ops::Range;

use serde::{Deserialize, Serialize};

/// `K/N`: shard K (from 0) of N.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// This shard's index, `0..count`.
    pub index: u64,
    /// How many shards the sweep is split into.
    pub count: u64,
}

impl Shard {
    /// Parses `K/N` (K from 0, below N).
    pub fn parse(text: &str) -> Result<Shard, String> {
        let (index, count) = text
            .split_once('/')
            .ok_or_else(|| format!("expected K/N (shard K of N, K from 0), got '{text}'"))?;
        let parse = |part: &str| {
            part.trim()
                .parse::<u64>()
                .map_err(|_| format!("expected K/N with whole numbers, got '{text}'"))
        };
        let shard = Shard {
            index: parse(index)?,
            count: parse(count)?,
        };
        if shard.count == 0 || shard.index >= shard.count {
            return Err(format!(
                "shard '{text}': K must be below N (K counts from 0, as a Kubernetes Indexed \
                 Job's JOB_COMPLETION_INDEX)"
            ));
        }
        Ok(shard)
    }

    /// Whether `seed` is this shard's.
    pub fn holds(&self, seed: u64) -> bool {
        seed % self.count == self.index
    }
}

/// CPU seconds this process has used so far, every thread's, living or ended.
pub fn process_cpu_seconds() -> f64 {
    let time = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    time.tv_sec as f64 + time.tv_nsec as f64 / 1e9
}

/// The seeds of `range` that `shard` (if any) holds.
pub fn shard_seeds(range: Range<u64>, shard: Option<Shard>) -> Vec<u64> {
    range
        .filter(|seed| shard.is_none_or(|shard| shard.holds(*seed)))
        .collect()
}

/// What one shard's sweep or exploration found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// `run` (a sweep of each scenario) or `explore` (a fault space).
    pub kind: String,
    /// The commit the simulator was built from.
    pub commit: String,
    /// The seed range asked for (`A..B`; an exploration bounded by time alone: from `A` on).
    pub seeds: String,
    /// The shard, if the sweep was split.
    pub shard: Option<Shard>,
    /// Per scenario file.
    pub scenarios: Vec<ScenarioSummary>,
    /// CPU seconds the process used.
    pub cpu_seconds: f64,
    /// Wall-clock seconds.
    pub wall_seconds: f64,
}

/// One scenario's part of a summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioSummary {
    /// The scenario file.
    pub path: String,
    /// Seeds run.
    pub seeds: u64,
    /// Seeds that failed, with why (and, for an exploration, the failure file).
    pub failures: Vec<Failure>,
    /// The violations `[expect]` requires, and on how many seeds each fired.
    pub hits: BTreeMap<String, u64>,
    /// `[expect] min_fraction`.
    pub min_fraction: f64,
    /// History hashes seen (hex), for the count of distinct histories.
    #[serde(default)]
    pub hashes: BTreeSet<String>,
    /// Faults drawn, by kind (explorations).
    #[serde(default)]
    pub faults: BTreeMap<String, u64>,
    /// Simulated seconds, summed over the seeds.
    pub simulated_seconds: f64,
}

/// A failing seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// Why it failed.
    pub reason: String,
    /// Its failure file (explorations).
    #[serde(default)]
    pub file: Option<String>,
}

impl ScenarioSummary {
    /// Whether these seeds meet the expectation: none failed, and each required violation
    /// fired on at least `min_fraction` of them.
    pub fn passes(&self) -> bool {
        self.seeds > 0
            && self.failures.is_empty()
            && self
                .hits
                .values()
                .all(|hits| *hits as f64 >= self.min_fraction * self.seeds as f64)
    }

    /// One line: `PASS file: 5000 seeds, 0 failures; lost-write on 12/5000 seeds ...`.
    pub fn line(&self) -> String {
        let status = if self.passes() { "PASS" } else { "FAIL" };
        let mut line = format!(
            "{status} {}: {} seeds, {} failure{}",
            self.path,
            self.seeds,
            self.failures.len(),
            if self.failures.len() == 1 { "" } else { "s" }
        );
        for (check, hits) in &self.hits {
            let _ = write!(
                line,
                "; {check} on {hits}/{} seeds (required >= {:.0}%)",
                self.seeds,
                self.min_fraction * 100.0
            );
        }
        if !self.hashes.is_empty() {
            let _ = write!(line, "; {} distinct histories", self.hashes.len());
        }
        let _ = write!(
            line,
            "; {:.1} s simulated per seed",
            self.simulated_seconds / self.seeds.max(1) as f64
        );
        for failure in self.failures.iter().take(5) {
            let _ = write!(line, "\n     seed {}: {}", failure.seed, failure.reason);
            if let Some(file) = &failure.file {
                let _ = write!(line, " ({file})");
            }
        }
        line
    }

    fn absorb(&mut self, other: &ScenarioSummary) {
        self.seeds += other.seeds;
        self.failures.extend(other.failures.iter().cloned());
        for (check, hits) in &other.hits {
            *self.hits.entry(check.clone()).or_default() += hits;
        }
        self.hashes.extend(other.hashes.iter().cloned());
        for (kind, count) in &other.faults {
            *self.faults.entry(kind.clone()).or_default() += count;
        }
        self.simulated_seconds += other.simulated_seconds;
    }
}

/// Several shards' summaries as one: the same kind, commit and seed range; shards of one
/// split, each once, all of them (an exploration bounded by time alone is complete however far
/// each shard got). Failures sorted by seed.
pub fn merge(summaries: &[Summary]) -> Result<Summary, String> {
    let first = summaries.first().ok_or("no summaries to merge")?;
    for summary in summaries {
        if (
            summary.kind.as_str(),
            summary.commit.as_str(),
            summary.seeds.as_str(),
        ) != (
            first.kind.as_str(),
            first.commit.as_str(),
            first.seeds.as_str(),
        ) {
            return Err(format!(
                "summaries differ: {} {} seeds {} at commit {}, and {} seeds {} at commit {}",
                first.kind,
                first.seeds,
                first.kind,
                first.commit,
                summary.kind,
                summary.seeds,
                summary.commit
            ));
        }
    }
    check_shards(summaries)?;
    let mut merged = Summary {
        kind: first.kind.clone(),
        commit: first.commit.clone(),
        seeds: first.seeds.clone(),
        shard: None,
        scenarios: Vec::new(),
        cpu_seconds: 0.0,
        wall_seconds: 0.0,
    };
    let mut by_path: BTreeMap<String, ScenarioSummary> = BTreeMap::new();
    for summary in summaries {
        merged.cpu_seconds += summary.cpu_seconds;
        merged.wall_seconds = merged.wall_seconds.max(summary.wall_seconds);
        for scenario in &summary.scenarios {
            match by_path.get_mut(&scenario.path) {
                Some(total) => total.absorb(scenario),
                None => {
                    by_path.insert(scenario.path.clone(), scenario.clone());
                }
            }
        }
    }
    merged.scenarios = by_path.into_values().collect();
    for scenario in &mut merged.scenarios {
        scenario.failures.sort_by_key(|failure| failure.seed);
    }
    Ok(merged)
}

/// The shards of a split, each once, all of them; or one unsplit summary.
fn check_shards(summaries: &[Summary]) -> Result<(), String> {
    let shards: Vec<Option<Shard>> = summaries.iter().map(|summary| summary.shard).collect();
    if shards.iter().all(Option::is_none) {
        return if summaries.len() == 1 {
            Ok(())
        } else {
            Err(format!(
                "{} summaries of the whole range: they overlap (split a sweep with --shard K/N)",
                summaries.len()
            ))
        };
    }
    let Some(count) = shards.iter().flatten().map(|shard| shard.count).next() else {
        unreachable!("some summary has a shard")
    };
    let mut seen = BTreeSet::new();
    for shard in &shards {
        let Some(shard) = shard else {
            return Err("a summary of the whole range among shards".to_owned());
        };
        if shard.count != count {
            return Err(format!("shards of {} and of {count} mixed", shard.count));
        }
        if !seen.insert(shard.index) {
            return Err(format!("shard {}/{count} given twice", shard.index));
        }
    }
    let missing: Vec<String> = (0..count)
        .filter(|index| !seen.contains(index))
        .map(|index| format!("{index}/{count}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing shards: {}", missing.join(", ")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(shard: Option<Shard>, seeds: u64, hits: u64, failures: &[u64]) -> Summary {
        Summary {
            kind: "run".to_owned(),
            commit: "abc".to_owned(),
            seeds: "0..100".to_owned(),
            shard,
            scenarios: vec![ScenarioSummary {
                path: "s.toml".to_owned(),
                seeds,
                failures: failures
                    .iter()
                    .map(|seed| Failure {
                        seed: *seed,
                        reason: "lost-write".to_owned(),
                        file: None,
                    })
                    .collect(),
                hits: [("duplicate".to_owned(), hits)].into_iter().collect(),
                min_fraction: 0.5,
                hashes: (0..seeds).map(|seed| format!("{seed:x}-{hits}")).collect(),
                faults: BTreeMap::new(),
                simulated_seconds: seeds as f64,
            }],
            cpu_seconds: 1.0,
            wall_seconds: 2.0,
        }
    }

    #[test]
    fn shards_are_disjoint_and_cover_the_range() {
        let shards: Vec<Shard> = (0..3)
            .map(|index| Shard::parse(&format!("{index}/3")).expect("valid"))
            .collect();
        let mut all: Vec<u64> = shards
            .iter()
            .flat_map(|shard| shard_seeds(10..20, Some(*shard)))
            .collect();
        all.sort_unstable();
        assert_eq!(all, (10..20).collect::<Vec<_>>());
        assert!(Shard::parse("3/3").is_err());
        assert!(Shard::parse("1/0").is_err());
        assert!(Shard::parse("1-3").is_err());
    }

    /// The merged sweep is judged on its totals: one shard alone below the rate does not fail
    /// a whole that meets it; a failure anywhere fails the whole.
    #[test]
    fn a_merge_judges_the_totals() {
        let shard = |index| Some(Shard { index, count: 2 });
        let merged = merge(&[
            summary(shard(0), 50, 10, &[]),
            summary(shard(1), 50, 45, &[]),
        ])
        .expect("merges");
        let total = &merged.scenarios[0];
        assert_eq!((total.seeds, total.hits["duplicate"]), (100, 55));
        assert!(total.passes(), "{}", total.line());
        assert!((merged.cpu_seconds - 2.0).abs() < 1e-9);
        let failing = merge(&[
            summary(shard(0), 50, 30, &[7]),
            summary(shard(1), 50, 30, &[]),
        ])
        .expect("merges");
        assert!(!failing.scenarios[0].passes());
        assert!(failing.scenarios[0].line().contains("seed 7: lost-write"));
    }

    #[test]
    fn a_merge_refuses_missing_repeated_or_foreign_shards() {
        let shard = |index| Some(Shard { index, count: 3 });
        let error = merge(&[summary(shard(0), 1, 1, &[]), summary(shard(2), 1, 1, &[])])
            .expect_err("incomplete");
        assert!(error.contains("missing shards: 1/3"), "{error}");
        let error = merge(&[summary(shard(0), 1, 1, &[]), summary(shard(0), 1, 1, &[])])
            .expect_err("twice");
        assert!(error.contains("given twice"), "{error}");
        let mut other = summary(shard(1), 1, 1, &[]);
        other.commit = "def".to_owned();
        let error = merge(&[summary(shard(0), 1, 1, &[]), other]).expect_err("commits differ");
        assert!(error.contains("commit"), "{error}");
        assert!(merge(&[summary(None, 1, 1, &[]), summary(None, 1, 1, &[])]).is_err());
    }
}
