//! `seedlog-sim explore` and `seedlog-sim shrink`: swarm exploration of a scenario's
//! `[explore]` fault space on every core, failure files that replay byte for byte, and delta
//! debugging of a failure file (docs/SIMULATION.md, "Exploration").
//!
//! A seed of exploration runs the text [`explored_source`] makes of the scenario file (its
//! drawn faults as `[[faults]]`, the seed pinned), parsed by the loader: the failure file is
//! that same text behind a comment header, so `seedlog-sim run FILE` runs exactly what the
//! explorer ran, and gives the same history.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::checker::{check_all, Check};
use crate::harness::{install_quiet_panic_hook, run_seed};
use crate::scenario::{explored_source, parse, DrawnFault, ExploreSpace, Scenario};
use crate::shrink::{describe_fault, ShrinkReport, Shrinker};
use crate::verdict::SeedVerdict;

/// The commit the simulator was built from (`sim/build.rs`; `+dirty` with local changes).
pub const COMMIT: &str = env!("SEEDLOG_COMMIT");

/// What `seedlog-sim explore` was asked to do.
#[derive(Debug, Clone)]
pub struct ExploreOptions {
    /// Seeds to explore, in order (`B` exclusive).
    pub seeds: Range<u64>,
    /// Stop starting new seeds after this long (`--for`).
    pub budget: Option<Duration>,
    /// Seeds run side by side.
    pub jobs: usize,
    /// Go on after a failure (otherwise stop starting seeds at the first).
    pub keep_going: bool,
    /// Where failure files go.
    pub out: PathBuf,
    /// Only this shard's seeds.
    pub shard: Option<crate::summary::Shard>,
    /// Where the exploration's summary goes (JSON, for `seedlog-sim merge`).
    pub summary: Option<PathBuf>,
}

/// `A..B` (B exclusive).
pub fn parse_seeds(text: &str) -> anyhow::Result<Range<u64>> {
    let (start, end) = text
        .split_once("..")
        .with_context(|| format!("expected A..B, got '{text}'"))?;
    let range = start.trim().parse::<u64>()?..end.trim().parse::<u64>()?;
    if range.is_empty() {
        bail!("empty seed range '{text}'");
    }
    Ok(range)
}

/// `90s`, `10m`, `2h` (a bare number is seconds).
pub fn parse_budget(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .with_context(|| format!("expected a duration such as 90s, 10m or 2h, got '{text}'"))?;
    let seconds = match unit {
        "" | "s" => number,
        "m" => number * 60,
        "h" => number * 3600,
        _ => bail!("unknown unit '{unit}' in '{text}' (s, m, h)"),
    };
    Ok(Duration::from_secs(seconds))
}

/// `1h02m`, `3m20s`, `42s`.
fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match (seconds / 3600, seconds / 60 % 60, seconds % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

/// One explored seed.
struct SeedResult {
    seed: u64,
    /// The scenario text it ran (the body of its failure file).
    text: String,
    faults: Vec<DrawnFault>,
    verdict: SeedVerdict,
    simulated: Duration,
}

fn judge(scenario: &Scenario, seed: u64) -> (SeedVerdict, Duration) {
    let outcome = run_seed(scenario, seed, false);
    let verdict = SeedVerdict::judge(
        &scenario.expect,
        seed,
        check_all(&outcome.history),
        outcome.error.clone(),
        outcome.history.hash(),
        outcome.history.ops.len(),
    );
    (verdict, outcome.simulated)
}

/// The scenario file being explored.
struct Explored {
    path: String,
    source: String,
    space: ExploreSpace,
}

impl Explored {
    fn load(path: &Path) -> anyhow::Result<Explored> {
        let display = path.display().to_string();
        let source = std::fs::read_to_string(path).with_context(|| display.clone())?;
        let scenario = parse(&display, &source)?;
        let Some(space) = scenario.explore else {
            bail!("{display} has no [explore] table (docs/SCENARIOS.md, \"Exploration\")");
        };
        Ok(Explored {
            path: display,
            source,
            space,
        })
    }

    fn run(&self, seed: u64) -> Result<SeedResult, String> {
        let faults = self.space.draw(seed);
        let text = explored_source(&self.source, seed, &faults)
            .map_err(|error| format!("{}: {error}", self.path))?;
        let scenario = parse(&self.path, &text)
            .map_err(|error| format!("seed {seed} drew a schedule the loader refuses: {error}"))?;
        let (verdict, simulated) = judge(&scenario, seed);
        Ok(SeedResult {
            seed,
            text,
            faults,
            verdict,
            simulated,
        })
    }
}

/// Shared by the explorer's workers: the next seed, and the seed no worker starts at or past
/// (the end of the range, lowered to a failing seed when the sweep stops at the first failure).
struct Work {
    next: AtomicU64,
    limit: AtomicU64,
    deadline: Option<Instant>,
    shard: Option<crate::summary::Shard>,
}

impl Work {
    #[allow(
        clippy::disallowed_methods,
        reason = "wall-clock budget of a sweep, outside any simulation"
    )]
    fn take(&self) -> Option<u64> {
        if self.deadline.is_some_and(|end| Instant::now() >= end) {
            return None;
        }
        loop {
            let seed = self.next.fetch_add(1, Ordering::SeqCst);
            if seed >= self.limit.load(Ordering::SeqCst) {
                return None;
            }
            if self.shard.is_none_or(|shard| shard.holds(seed)) {
                return Some(seed);
            }
        }
    }
}

/// Runs the seeds of `options` on `options.jobs` threads; calls `each` in completion order.
/// Once it answers `false` for a seed, no seed past that one is started, but every seed below
/// it still runs: seeds are started in order, so a sweep that stops at its first failure has
/// run every seed before the lowest failing one, whatever the threads' timing. An error stops
/// everything.
#[allow(
    clippy::disallowed_methods,
    reason = "the explorer runs simulations side by side, outside any simulation"
)]
fn sweep(
    explored: &Arc<Explored>,
    options: &ExploreOptions,
    started: Instant,
    mut each: impl FnMut(Result<SeedResult, String>) -> bool,
) {
    let work = Arc::new(Work {
        next: AtomicU64::new(options.seeds.start),
        limit: AtomicU64::new(options.seeds.end),
        deadline: options.budget.map(|budget| started + budget),
        shard: options.shard,
    });
    let (sender, receiver) = mpsc::channel();
    let workers: Vec<_> = (0..options.jobs.max(1))
        .map(|_| {
            let (work, sender, explored) =
                (Arc::clone(&work), sender.clone(), Arc::clone(explored));
            std::thread::spawn(move || {
                while let Some(seed) = work.take() {
                    if sender.send(explored.run(seed)).is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    drop(sender);
    for result in receiver {
        let seed = result.as_ref().map_or(0, |result| result.seed);
        if !each(result) {
            work.limit.fetch_min(seed, Ordering::SeqCst);
        }
    }
    for worker in workers {
        worker.join().expect("explore worker");
    }
}

/// What the explorer counts as it goes.
#[derive(Default)]
struct Tally {
    done: u64,
    failures: Vec<(u64, String, PathBuf)>,
    faults: usize,
    kinds: BTreeMap<String, usize>,
    simulated: Duration,
    last_print: Option<Instant>,
}

impl Tally {
    fn add(&mut self, result: &SeedResult) {
        self.done += 1;
        self.faults += result.faults.len();
        self.simulated += result.simulated;
        for fault in &result.faults {
            *self.kinds.entry(fault.kind.clone()).or_default() += 1;
        }
    }

    /// `1200/2000 seeds, 23.5 seeds/s, 0 failures, ETA 34s`.
    fn progress(&self, options: &ExploreOptions, elapsed: Duration) -> String {
        let rate = self.done as f64 / elapsed.as_secs_f64().max(1e-9);
        let span = options.seeds.end.saturating_sub(options.seeds.start);
        let total = options.shard.map_or(span, |shard| span / shard.count);
        let by_count = Duration::from_secs_f64((total - self.done) as f64 / rate.max(1e-9));
        let eta = match options.budget {
            Some(budget) => by_count.min(budget.saturating_sub(elapsed)),
            None => by_count,
        };
        let of = if total > 1 << 62 {
            String::new()
        } else {
            format!("/{total}")
        };
        format!(
            "{}{of} seeds, {rate:.1} seeds/s, {} failure{}, ETA {}",
            self.done,
            self.failures.len(),
            if self.failures.len() == 1 { "" } else { "s" },
            format_duration(eta)
        )
    }
}

/// The failing checks of a verdict, one line each: `lost-write (2): example`.
fn failed_checks(verdict: &SeedVerdict) -> Vec<String> {
    let mut lines: Vec<String> = verdict
        .unexpected
        .iter()
        .map(|check| {
            let result = verdict.checks.iter().find(|result| result.check == *check);
            let count = result.map_or(0, |result| result.violations);
            let example = result
                .and_then(|result| result.examples.first())
                .map(|example| format!(": {}", example.chars().take(160).collect::<String>()))
                .unwrap_or_default();
            format!("{} ({count}){example}", check.name())
        })
        .collect();
    if let Some(error) = &verdict.error {
        lines.push(format!(
            "crash: {}",
            error.lines().next().unwrap_or_default()
        ));
    }
    lines
}

/// The comment block at the top of a failure file.
fn failure_header(explored: &Explored, file: &Path, result: &SeedResult) -> String {
    let file = file.display();
    let seed = result.seed;
    let mut header = format!(
        "# seedlog-sim explore: a failing seed, as a self-contained scenario. It is\n\
         # {} with the fault schedule seed {seed} drew from its [explore] table\n\
         # written out as [[faults]] (and no [explore]).\n\
         #   seed:    {seed} (also [scenario] seed)\n\
         #   commit:  {COMMIT}\n\
         #   history: {} ops, hash {:016x}\n",
        explored.path, result.verdict.ops, result.verdict.hash
    );
    for line in failed_checks(&result.verdict) {
        let _ = writeln!(header, "#   failed:  {line}");
    }
    let _ = write!(
        header,
        "# Reproduce (same history, byte for byte, at that commit):\n\
         #   seedlog-sim run {file} --seed {seed}\n\
         # With logs and the history written next to this file: seedlog-sim replay {file}\n\
         # Smallest failing variant: seedlog-sim shrink {file}\n\n"
    );
    header
}

fn write_failure(explored: &Explored, out: &Path, result: &SeedResult) -> anyhow::Result<PathBuf> {
    let stem = Path::new(&explored.path)
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::fs::create_dir_all(out).with_context(|| out.display().to_string())?;
    let file = out.join(format!("{stem}-seed{}.toml", result.seed));
    let text = failure_header(explored, &file, result) + &result.text;
    std::fs::write(&file, text).with_context(|| file.display().to_string())?;
    Ok(file)
}

/// `seedlog-sim explore`: true when no seed failed.
#[allow(
    clippy::disallowed_methods,
    reason = "wall-clock progress of a sweep, outside any simulation"
)]
pub fn explore(path: &Path, options: &ExploreOptions) -> anyhow::Result<bool> {
    install_quiet_panic_hook();
    let explored = Arc::new(Explored::load(path)?);
    let interactive = std::io::stderr().is_terminal();
    let space = &explored.space;
    eprintln!(
        "== explore {} ({} fault kinds, {}..={} faults per seed, swarm {}; {} jobs; commit {COMMIT})",
        explored.path,
        space.kinds.len(),
        space.faults.0,
        space.faults.1,
        space.swarm,
        options.jobs
    );
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut error = None;
    // Without --keep-going only the lowest failing seed is reported (seeds past it that were
    // already running may fail too, depending on timing; they are not reported).
    let mut first_failure: Option<SeedResult> = None;
    sweep(&explored, options, started, |result| {
        let result = match result {
            Ok(result) => result,
            Err(message) => {
                error.get_or_insert(message);
                return false;
            }
        };
        tally.add(&result);
        let going_on = if !result.verdict.failed() {
            true
        } else if options.keep_going {
            report_failure(&explored, options, &mut tally, &result);
            true
        } else {
            if first_failure
                .as_ref()
                .is_none_or(|first| result.seed < first.seed)
            {
                first_failure = Some(result);
            }
            false
        };
        print_progress(&mut tally, options, started.elapsed(), interactive, false);
        going_on
    });
    print_progress(&mut tally, options, started.elapsed(), interactive, true);
    if let Some(message) = error {
        bail!(message);
    }
    if let Some(first) = &first_failure {
        report_failure(&explored, options, &mut tally, first);
    }
    print_summary(&explored, &tally, started.elapsed());
    if let Some(path) = &options.summary {
        write_summary(path, &explored, options, &tally, started.elapsed())?;
    }
    Ok(tally.failures.is_empty())
}

/// What the exploration found, as `seedlog-sim merge` reads it.
fn write_summary(
    path: &Path,
    explored: &Explored,
    options: &ExploreOptions,
    tally: &Tally,
    elapsed: Duration,
) -> anyhow::Result<()> {
    use crate::summary::{Failure, ScenarioSummary, Summary};
    let seeds = if options.seeds.end == u64::MAX {
        format!("{}..", options.seeds.start)
    } else {
        format!("{}..{}", options.seeds.start, options.seeds.end)
    };
    let summary = Summary {
        kind: "explore".to_owned(),
        commit: COMMIT.to_owned(),
        seeds,
        shard: options.shard,
        scenarios: vec![ScenarioSummary {
            path: explored.path.clone(),
            seeds: tally.done,
            failures: tally
                .failures
                .iter()
                .map(|(seed, reason, file)| Failure {
                    seed: *seed,
                    reason: reason.clone(),
                    file: Some(file.display().to_string()),
                })
                .collect(),
            hits: BTreeMap::new(),
            min_fraction: 1.0,
            hashes: std::collections::BTreeSet::new(),
            faults: tally
                .kinds
                .iter()
                .map(|(kind, count)| (kind.clone(), *count as u64))
                .collect(),
            simulated_seconds: tally.simulated.as_secs_f64(),
        }],
        cpu_seconds: crate::summary::process_cpu_seconds(),
        wall_seconds: elapsed.as_secs_f64(),
    };
    let text = serde_json::to_string_pretty(&summary)?;
    std::fs::write(path, text).with_context(|| path.display().to_string())
}

/// Reports a failing seed: its failure file, a summary, the repro command.
fn report_failure(
    explored: &Explored,
    options: &ExploreOptions,
    tally: &mut Tally,
    result: &SeedResult,
) {
    let file = match write_failure(explored, &options.out, result) {
        Ok(file) => file,
        Err(error) => {
            eprintln!(
                "\n   seed {}: cannot write its failure file: {error:#}",
                result.seed
            );
            PathBuf::new()
        }
    };
    let kinds: Vec<String> = result
        .faults
        .iter()
        .map(|fault| describe_fault(&fault_value(fault)))
        .collect();
    eprintln!(
        "\n   seed {} FAILED: {}\n     faults: {}\n     failure file: {}\n     \
         repro: seedlog-sim run {} --seed {}",
        result.seed,
        result.verdict.reason(),
        kinds.join("; "),
        file.display(),
        file.display(),
        result.seed
    );
    tally
        .failures
        .push((result.seed, result.verdict.reason(), file));
}

/// A drawn fault as the TOML table it becomes.
fn fault_value(fault: &DrawnFault) -> toml::Value {
    let mut table = toml::Table::new();
    table.insert("at_ms".to_owned(), toml::Value::Integer(fault.at_ms as i64));
    table.insert("kind".to_owned(), toml::Value::String(fault.kind.clone()));
    for (key, value) in &fault.fields {
        table.insert(key.clone(), value.clone());
    }
    toml::Value::Table(table)
}

#[allow(
    clippy::disallowed_methods,
    reason = "wall-clock progress of a sweep, outside any simulation"
)]
fn print_progress(
    tally: &mut Tally,
    options: &ExploreOptions,
    elapsed: Duration,
    interactive: bool,
    last: bool,
) {
    let now = Instant::now();
    let every = if interactive {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(10)
    };
    if !last
        && tally
            .last_print
            .is_some_and(|printed| now.duration_since(printed) < every)
    {
        return;
    }
    tally.last_print = Some(now);
    let line = tally.progress(options, elapsed);
    if interactive {
        eprint!("\r\x1b[2K   {line}");
        if last {
            eprintln!();
        }
    } else {
        eprintln!("   {line}");
    }
}

fn print_summary(explored: &Explored, tally: &Tally, elapsed: Duration) {
    let kinds: Vec<String> = tally
        .kinds
        .iter()
        .map(|(kind, count)| format!("{kind} {count}"))
        .collect();
    println!(
        "explored {} seeds of {} in {} ({:.1} seeds/s; {:.1} s simulated per seed; {:.1} faults per seed: {})",
        tally.done,
        explored.path,
        format_duration(elapsed),
        tally.done as f64 / elapsed.as_secs_f64().max(1e-9),
        tally.simulated.as_secs_f64() / tally.done.max(1) as f64,
        tally.faults as f64 / tally.done.max(1) as f64,
        kinds.join(", ")
    );
    if tally.failures.is_empty() {
        println!("no failure (commit {COMMIT})");
        return;
    }
    println!(
        "{} failing seed(s) (commit {COMMIT}):",
        tally.failures.len()
    );
    for (seed, reason, file) in &tally.failures {
        println!("  seed {seed}: {reason}\n    {}", file.display());
    }
}

/// What must keep failing while shrinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// This check is violated (and the scenario does not allow it).
    Check(Check),
    /// The run crashes (an invariant panic).
    Crash,
}

impl Target {
    fn parse(name: &str) -> anyhow::Result<Target> {
        if name == "crash" {
            return Ok(Target::Crash);
        }
        Check::from_name(name).map(Target::Check).with_context(|| {
            format!(
                "unknown check '{name}' (checks: {}, or crash)",
                Check::names()
            )
        })
    }

    fn name(self) -> &'static str {
        match self {
            Target::Check(check) => check.name(),
            Target::Crash => "crash",
        }
    }

    fn hit(self, verdict: &SeedVerdict) -> bool {
        match self {
            Target::Check(check) => verdict.unexpected.contains(&check),
            Target::Crash => verdict.error.is_some(),
        }
    }

    /// The first way `verdict` fails.
    fn of(verdict: &SeedVerdict) -> Option<Target> {
        match (verdict.unexpected.first(), &verdict.error) {
            (Some(check), _) => Some(Target::Check(*check)),
            (None, Some(_)) => Some(Target::Crash),
            (None, None) => None,
        }
    }
}

/// Runs each text at `seed` (side by side, `jobs` at a time): whether `target` still fails.
#[allow(
    clippy::disallowed_methods,
    reason = "runs simulations side by side, outside any simulation"
)]
fn still_fails(file: &str, seed: u64, target: Target, texts: &[String]) -> Vec<bool> {
    std::thread::scope(|scope| {
        let runs: Vec<_> = texts
            .iter()
            .map(|text| {
                scope.spawn(move || {
                    parse(file, text).is_ok_and(|scenario| target.hit(&judge(&scenario, seed).0))
                })
            })
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("a shrink run catches its own panics"))
            .collect()
    })
}

/// `FILE.toml` -> `FILE.min.toml`.
fn minimal_path(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{stem}.min.toml"))
}

/// The way `scenario` fails at `seed` that shrinking must keep: `check`, or the first.
fn shrink_target(
    file: &str,
    scenario: &Scenario,
    seed: u64,
    check: Option<&str>,
) -> anyhow::Result<Target> {
    let (verdict, _) = judge(scenario, seed);
    let target = match check {
        Some(name) => Target::parse(name)?,
        None => Target::of(&verdict).with_context(|| {
            format!("{file} does not fail at seed {seed}: {}", verdict.reason())
        })?,
    };
    if !target.hit(&verdict) {
        bail!(
            "{file} does not fail '{}' at seed {seed}: {}",
            target.name(),
            verdict.reason()
        );
    }
    Ok(target)
}

/// Writes the minimal scenario: a header saying how it was found, the comments that opened the
/// file it was shrunk from, and the exact text that was run.
fn write_minimal(
    path: &Path,
    source: &str,
    report: &ShrinkReport,
    target: Target,
    seed: u64,
) -> anyhow::Result<PathBuf> {
    let output = minimal_path(path);
    let header = source
        .lines()
        .take_while(|line| line.starts_with('#') || line.trim().is_empty())
        .filter(|line| line.starts_with('#'))
        .fold(String::new(), |mut header, line| {
            let _ = writeln!(header, "{line}");
            header
        });
    let text = format!(
        "# seedlog-sim shrink {}: {} steps, {} runs; '{}' still fails at seed {seed}.\n\
         #   seedlog-sim run {} --seed {seed}\n#\n\
         # From the file it was shrunk from:\n{header}\n{}",
        path.display(),
        report.steps.len(),
        report.runs + 1,
        target.name(),
        output.display(),
        report.text
    );
    std::fs::write(&output, text).with_context(|| output.display().to_string())?;
    Ok(output)
}

/// `seedlog-sim shrink`: writes `FILE.min.toml`; true when it did.
#[allow(
    clippy::disallowed_methods,
    reason = "wall-clock time of the shrink, outside any simulation"
)]
pub fn shrink(
    path: &Path,
    check: Option<&str>,
    seed: Option<u64>,
    jobs: usize,
) -> anyhow::Result<bool> {
    install_quiet_panic_hook();
    let started = Instant::now();
    let file = path.display().to_string();
    let source = std::fs::read_to_string(path).with_context(|| file.clone())?;
    let scenario = parse(&file, &source)?;
    let seed = seed
        .or(scenario.pinned_seed)
        .with_context(|| format!("{file} pins no seed ([scenario] seed); pass --seed"))?;
    let target = shrink_target(&file, &scenario, seed, check)?;
    println!(
        "shrinking {file} at seed {seed} while '{}' fails ({} faults; commit {COMMIT})",
        target.name(),
        scenario.faults.len()
    );
    let mut doc: toml::Table = toml::from_str(&source).with_context(|| file.clone())?;
    doc.entry("scenario")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .context("[scenario] is a table")?
        .insert("seed".to_owned(), toml::Value::Integer(seed as i64));
    let mut oracle = |texts: &[String]| still_fails(&file, seed, target, texts);
    let mut shrinker = Shrinker::new(&file, doc, jobs, true, &mut oracle);
    if !shrinker.reproduces() {
        bail!(
            "{file} rewritten by the shrinker no longer fails '{}' at seed {seed}",
            target.name()
        );
    }
    let report = shrinker.run();
    let minimal = parse(&file, &report.text)?;
    let output = write_minimal(path, &source, &report, target, seed)?;
    println!(
        "{} steps in {} runs ({} candidates refused by the loader, {}); {} -> {} faults",
        report.steps.len(),
        report.runs + 1,
        report.invalid,
        format_duration(started.elapsed()),
        scenario.faults.len(),
        minimal.faults.len()
    );
    for fault in minimal_faults(&report) {
        println!("  {}", describe_fault(fault));
    }
    println!("minimal scenario written to {}", output.display());
    Ok(true)
}

fn minimal_faults(report: &ShrinkReport) -> impl Iterator<Item = &toml::Value> {
    report
        .doc
        .get("faults")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
}

#[cfg(test)]
mod tests;
