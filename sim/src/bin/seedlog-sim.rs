//! `seedlog-sim`: run scenarios in the simulator, sweep seeds in parallel, check determinism,
//! re-check saved histories, draw them as timelines, export them for Jepsen, and benchmark
//! simulation speed.
//!
//! Every run prints one line that reproduces it: `(commit, scenario file, seed)`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use seedlog_sim::checker::check_all;
use seedlog_sim::export::{export, Format};
use seedlog_sim::history::History;
use seedlog_sim::timeline::{render, Page};

/// Seeds run on short-lived threads that allocate and free millions of small objects; mimalloc
/// keeps that cheaper than glibc's arenas (measured in docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use seedlog_sim::scenario::load;
use seedlog_sim::summary::Summary;
use seedlog_sim::verdict::SeedVerdict;

#[derive(Parser)]
#[command(name = "seedlog-sim", about = "seedlog's deterministic simulator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run scenario files (or every .toml under a directory) and print verdicts.
    Run {
        /// Scenario files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// One seed (default: each scenario's pinned `seed`, or 1).
        #[arg(long, conflicts_with = "seeds")]
        seed: Option<u64>,
        /// A sweep, `A..B` (B exclusive), run in parallel.
        #[arg(long)]
        seeds: Option<String>,
        /// Parallel seeds (default: available cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Run every seed twice and fail on any difference in the history.
        #[arg(long)]
        check_determinism: bool,
        /// Judge a sweep by what it says of each seed: every seed as expected, and a must-fail
        /// scenario's violations on every seed where its `min_fraction` is 1; a `min_fraction`
        /// below 1 (a rate) is reported, not required. For sweeps too short to measure a rate,
        /// such as the mutation runner's (`scripts/mutants.sh`).
        #[arg(long, requires = "seeds")]
        per_seed: bool,
        /// Only the seeds `s` of the sweep with `s % N == K`: shard K (from 0) of N, to split a
        /// sweep over machines (`seedlog-sim merge` adds their summaries up).
        #[arg(long, requires = "seeds")]
        shard: Option<String>,
        /// Write what the sweep found as JSON, for `seedlog-sim merge`.
        #[arg(long, requires = "seeds")]
        summary: Option<PathBuf>,
        /// Write the history of a single-seed run here (JSON lines).
        #[arg(long)]
        history: Option<PathBuf>,
        /// Print broker and client logs (single seed only).
        #[arg(long)]
        log: bool,
    },
    /// Run the checkers on a saved history, optionally judging it against a scenario's [expect].
    Check {
        /// History file (JSON lines).
        history: PathBuf,
        /// Scenario whose expectations apply.
        #[arg(long)]
        scenario: Option<PathBuf>,
    },
    /// Draw a saved history as one self-contained HTML page (a space-time diagram per node and
    /// partition), the operations each violation names highlighted.
    Timeline {
        /// History file (JSON lines).
        history: PathBuf,
        /// The page to write (default: the history's path with `.html`).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Scenario the history came from: its name titles the page, its [expect] tags the
        /// violations.
        #[arg(long)]
        scenario: Option<PathBuf>,
    },
    /// Write a saved history in another tool's format.
    Export {
        /// History file (JSON lines).
        history: PathBuf,
        /// `jepsen-edn`: Jepsen's Kafka workload (jepsen.tests.kafka), one EDN map a line.
        #[arg(long)]
        format: String,
        /// Output file (default: standard output).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Measure simulation speed: seeds per second and simulated time per wall time.
    Bench {
        /// Scenario file.
        path: PathBuf,
        /// Seeds, `A..B`.
        #[arg(long, default_value = "0..100")]
        seeds: String,
        /// Parallel seeds.
        #[arg(long, default_value_t = 1)]
        jobs: usize,
    },
    /// Swarm exploration: each seed draws its own fault schedule from the scenario's [explore]
    /// table; each failing seed is written as a self-contained scenario file.
    Explore {
        /// Scenario file with an [explore] table.
        path: PathBuf,
        /// Seeds, `A..B` (B exclusive); with --for alone, from 0 on.
        #[arg(long)]
        seeds: Option<String>,
        /// Stop starting seeds after this long (`90s`, `10m`, `2h`).
        #[arg(long = "for")]
        budget: Option<String>,
        /// Parallel seeds (default: available cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Go on after a failure (default: stop at the first).
        #[arg(long)]
        keep_going: bool,
        /// Where failure files go.
        #[arg(long, default_value = "target/sim-failures")]
        out: PathBuf,
        /// Only the seeds `s` with `s % N == K`: shard K (from 0) of N.
        #[arg(long)]
        shard: Option<String>,
        /// Write what the exploration found as JSON, for `seedlog-sim merge`.
        #[arg(long)]
        summary: Option<PathBuf>,
    },
    /// Add up the summaries of a sweep's or an exploration's shards (`--shard K/N --summary
    /// FILE`) and judge the whole: every shard of the split once, one commit, one seed range.
    Merge {
        /// Summary files.
        #[arg(required = true)]
        summaries: Vec<PathBuf>,
        /// Write the merged summary here.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Run a failure file at its recorded seed with logs; write its history (and, if it fails,
    /// its timeline) next to it.
    Replay {
        /// Failure file (or any scenario with a pinned seed).
        file: PathBuf,
        /// Another seed than the recorded one.
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Delta debugging of a failure file: the smallest variant on which the same check still
    /// fails at the same seed, written to FILE.min.toml.
    Shrink {
        /// Failure file (or any scenario with a pinned seed).
        file: PathBuf,
        /// The check that must keep failing (default: the first that fails; `crash`: the run
        /// crashes).
        #[arg(long)]
        check: Option<String>,
        /// Another seed than the recorded one.
        #[arg(long)]
        seed: Option<u64>,
        /// Parallel runs (default: available cores).
        #[arg(long)]
        jobs: Option<usize>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tune_allocator();
    match run(cli.command) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// mimalloc's options as the simulator wants them, in the environment mimalloc reads them from
/// when the process starts.
///
/// Each seed runs on a thread of its own, and by default mimalloc hands the memory a finished
/// seed freed back to the kernel (`purge_delay`) and backs arenas with transparent huge pages,
/// so every seed faulted its heap in again and the kernel zeroed it 2 MiB at a time: a fifth of
/// a sweep's CPU time went to `clear_page` (docs/BENCHMARKS.md). Never purging keeps the freed
/// memory for the next seed (the peak resident size does not change, as one seed's heap is
/// reused by the next). mimalloc reads its options once, before `main`, and setting them from
/// Rust would need `unsafe`, so the process runs itself again with them set; an environment that
/// sets either option already (or a failed exec) is left as it is.
fn tune_allocator() {
    use std::os::unix::process::CommandExt as _;
    const OPTIONS: [(&str, &str); 2] =
        [("MIMALLOC_PURGE_DELAY", "-1"), ("MIMALLOC_ALLOW_THP", "0")];
    if OPTIONS
        .iter()
        .any(|(name, _)| std::env::var_os(name).is_some())
    {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let error = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .envs(OPTIONS)
        .exec();
    eprintln!("note: running without the allocator options ({error})");
}

fn run(command: Command) -> anyhow::Result<bool> {
    match command {
        Command::Check { history, scenario } => check(&history, scenario.as_deref()),
        Command::Timeline {
            history,
            output,
            scenario,
        } => timeline(&history, output.as_deref(), scenario.as_deref()),
        Command::Export {
            history,
            format,
            output,
        } => export_command(&history, &format, output.as_deref()),
        Command::Merge { summaries, output } => merge(&summaries, output.as_deref()),
        Command::Run { .. }
        | Command::Bench { .. }
        | Command::Explore { .. }
        | Command::Replay { .. }
        | Command::Shrink { .. } => simulated(command),
    }
}

/// `--shard K/N`, parsed.
#[cfg(madsim)]
fn parse_shard(shard: Option<&str>) -> anyhow::Result<Option<seedlog_sim::summary::Shard>> {
    shard
        .map(seedlog_sim::summary::Shard::parse)
        .transpose()
        .map_err(anyhow::Error::msg)
}

/// The subcommands that run the simulator.
#[cfg(madsim)]
fn simulated(command: Command) -> anyhow::Result<bool> {
    match command {
        Command::Run {
            paths,
            seed,
            seeds,
            jobs,
            check_determinism,
            per_seed,
            shard,
            summary,
            history,
            log,
        } => simulate::run_command(
            &paths,
            seed,
            seeds.as_deref(),
            jobs,
            simulate::Judging {
                check_determinism,
                per_seed,
            },
            &simulate::Output {
                shard: parse_shard(shard.as_deref())?,
                summary,
                history,
            },
            log,
        ),
        Command::Bench { path, seeds, jobs } => simulate::bench(&path, &seeds, jobs),
        Command::Explore {
            path,
            seeds,
            budget,
            jobs,
            keep_going,
            out,
            shard,
            summary,
        } => simulate::explore(
            &path,
            seeds.as_deref(),
            budget.as_deref(),
            jobs,
            keep_going,
            out,
            parse_shard(shard.as_deref())?,
            summary,
        ),
        Command::Replay { file, seed } => simulate::replay(&file, seed),
        Command::Shrink {
            file,
            check,
            seed,
            jobs,
        } => seedlog_sim::explore::shrink(&file, check.as_deref(), seed, simulate::jobs(jobs)),
        Command::Check { .. }
        | Command::Timeline { .. }
        | Command::Export { .. }
        | Command::Merge { .. } => run(command),
    }
}

/// The subcommands that run the simulator, in a build without it.
#[cfg(not(madsim))]
fn simulated(_command: Command) -> anyhow::Result<bool> {
    anyhow::bail!(
        "the simulator needs the madsim build: cargo sim run --release -p seedlog-sim -- ..."
    )
}

/// `seedlog-sim merge`: the shards' summaries as one, judged; true when every scenario passes.
fn merge(paths: &[PathBuf], output: Option<&Path>) -> anyhow::Result<bool> {
    let summaries = paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
            serde_json::from_str::<Summary>(&text).with_context(|| path.display().to_string())
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let merged = seedlog_sim::summary::merge(&summaries).map_err(anyhow::Error::msg)?;
    println!(
        "merged {} {} summar{} (seeds {}, commit {}): {:.0} CPU seconds in all",
        paths.len(),
        merged.kind,
        if paths.len() == 1 { "y" } else { "ies" },
        merged.seeds,
        merged.commit,
        merged.cpu_seconds
    );
    let mut passed = true;
    for scenario in &merged.scenarios {
        passed &= scenario.passes();
        println!("{}", scenario.line());
    }
    if let Some(output) = output {
        let text = serde_json::to_string_pretty(&merged)?;
        std::fs::write(output, text).with_context(|| output.display().to_string())?;
    }
    Ok(passed)
}

fn read_history(history_path: &Path) -> anyhow::Result<History> {
    let text = std::fs::read_to_string(history_path)
        .with_context(|| history_path.display().to_string())?;
    History::from_jsonl(&text)
        .map_err(|error| anyhow::anyhow!("{}: {error}", history_path.display()))
}

/// Where a history's timeline goes by default: next to it, with `.html`.
fn timeline_path(history_path: &Path) -> PathBuf {
    history_path.with_extension("html")
}

/// Renders `history` (saved at `history_path`) as a timeline page at `output`; returns the
/// number of checks violated.
fn write_timeline(
    history: &History,
    history_path: &Path,
    output: &Path,
    scenario: Option<&seedlog_sim::scenario::Scenario>,
) -> anyhow::Result<usize> {
    let checks = check_all(history);
    let page = Page {
        title: scenario.map_or_else(
            || format!("timeline of {}", history_path.display()),
            |scenario| scenario.name.clone(),
        ),
        subtitle: match scenario {
            Some(scenario) => format!("{} · {}", scenario.path, history_path.display()),
            None => history_path.display().to_string(),
        },
        expect: scenario.map(|scenario| scenario.expect.clone()),
    };
    std::fs::write(output, render(history, &checks, &page))
        .with_context(|| output.display().to_string())?;
    Ok(checks.iter().filter(|check| !check.holds()).count())
}

fn timeline(
    history_path: &Path,
    output: Option<&Path>,
    scenario: Option<&Path>,
) -> anyhow::Result<bool> {
    let history = read_history(history_path)?;
    let scenario = scenario.map(load).transpose()?;
    let output = output.map_or_else(|| timeline_path(history_path), Path::to_path_buf);
    let violated = write_timeline(&history, history_path, &output, scenario.as_ref())?;
    println!(
        "timeline written to {} ({} ops, {violated} checks violated)",
        output.display(),
        history.ops.len()
    );
    Ok(true)
}

fn export_command(
    history_path: &Path,
    format: &str,
    output: Option<&Path>,
) -> anyhow::Result<bool> {
    let format = Format::parse(format).map_err(|error| anyhow::anyhow!(error))?;
    let history = read_history(history_path)?;
    let text = export(&history, format)
        .map_err(|error| anyhow::anyhow!("{}: {error}", history_path.display()))?;
    if let Some(path) = output {
        std::fs::write(path, text).with_context(|| path.display().to_string())?;
        eprintln!("{} ops exported to {}", history.ops.len(), path.display());
        return Ok(true);
    }
    let written = std::io::stdout().lock().write_all(text.as_bytes());
    match written {
        // A reader that stopped early (`| head`) is not an error.
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(error.into()),
        _ => Ok(true),
    }
}

fn check(history_path: &Path, scenario: Option<&Path>) -> anyhow::Result<bool> {
    let history = read_history(history_path)?;
    let checks = check_all(&history);
    let expect = match scenario {
        Some(path) => load(path)?.expect,
        None => seedlog_sim::scenario::Expect::default(),
    };
    let verdict = SeedVerdict::judge(&expect, 0, checks, None, history.hash(), history.ops.len());
    println!("history: {} ops, hash {:016x}", verdict.ops, verdict.hash);
    print!("{}", verdict.table(&expect));
    println!("verdict: {}", verdict.reason());
    Ok(verdict.as_expected())
}

#[cfg(madsim)]
mod simulate {
    use std::collections::VecDeque;
    use std::io::IsTerminal;
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::{Duration, Instant};

    use anyhow::{bail, Context};
    use seedlog_sim::checker::{check_all, CheckResult};
    use seedlog_sim::harness::{install_quiet_panic_hook, run_seed, RunOutcome};
    use seedlog_sim::history::History;
    use seedlog_sim::scenario::{load, Scenario};
    use seedlog_sim::summary::{shard_seeds, Failure, ScenarioSummary, Shard, Summary};
    use seedlog_sim::verdict::{SeedVerdict, SweepSummary};

    use super::{Path, PathBuf};

    /// How `run` judges what it ran.
    #[derive(Debug, Clone, Copy)]
    pub(super) struct Judging {
        /// Every seed runs twice; a difference in the history fails it.
        pub(super) check_determinism: bool,
        /// A sweep is judged by what the expectation says of each seed, a `min_fraction` rate
        /// only reported (`--per-seed`, `SweepSummary::passes_each_seed`).
        pub(super) per_seed: bool,
    }

    fn parse_seeds(text: &str) -> anyhow::Result<std::ops::Range<u64>> {
        let (start, end) = text
            .split_once("..")
            .with_context(|| format!("expected A..B, got '{text}'"))?;
        let range = start.trim().parse::<u64>()?..end.trim().parse::<u64>()?;
        if range.is_empty() {
            bail!("empty seed range '{text}'");
        }
        Ok(range)
    }

    fn scenario_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
        let files =
            seedlog_sim::scenario::scenario_files(paths).with_context(|| format!("{paths:?}"))?;
        if files.is_empty() {
            bail!("no scenario files in {paths:?}");
        }
        Ok(files)
    }

    /// The commit this binary was built from (recorded by `sim/build.rs`).
    fn commit() -> String {
        env!("SEEDLOG_COMMIT").to_owned()
    }

    /// The one line that reproduces a run: the commit the binary was built from, the file, the
    /// seed.
    fn repro(scenario: &Scenario, seed: u64) -> String {
        let commit = commit();
        let run = format!(
            "cargo sim run --release -p seedlog-sim -- run {} --seed {seed}",
            scenario.path
        );
        match commit.strip_suffix("+dirty") {
            Some(base) => format!("repro: {run}   (built from {base} with uncommitted changes)"),
            None if commit == "unknown" => format!("repro: {run}"),
            None => format!("repro: git checkout {commit} && {run}"),
        }
    }

    fn judge(scenario: &Scenario, outcome: &RunOutcome) -> SeedVerdict {
        let checks = check_all(&outcome.history);
        SeedVerdict::judge(
            &scenario.expect,
            outcome.seed,
            checks,
            outcome.error.clone(),
            outcome.history.hash(),
            outcome.history.ops.len(),
        )
    }

    /// What a worker reports for one seed.
    struct SeedReport {
        outcome: RunOutcome,
        wall: Duration,
        /// For --check-determinism: the first difference between the two runs.
        difference: Option<String>,
    }

    fn first_difference(first: &History, second: &History) -> Option<String> {
        let (a, b) = (first.to_jsonl(), second.to_jsonl());
        if a == b {
            return None;
        }
        let line = a
            .lines()
            .zip(b.lines())
            .position(|(x, y)| x != y)
            .unwrap_or_else(|| a.lines().count().min(b.lines().count()));
        let show = |text: &str| {
            text.lines()
                .nth(line)
                .unwrap_or("<end of history>")
                .chars()
                .take(200)
                .collect::<String>()
        };
        Some(format!(
            "line {}: first run `{}`, second run `{}`",
            line + 1,
            show(&a),
            show(&b)
        ))
    }

    #[allow(clippy::disallowed_methods)] // wall-clock timing of simulator runs, outside any simulation
    fn run_one(scenario: &Scenario, seed: u64, twice: bool, log: bool) -> SeedReport {
        let started = Instant::now();
        let outcome = run_seed(scenario, seed, log);
        let wall = started.elapsed();
        let difference = twice
            .then(|| first_difference(&outcome.history, &run_seed(scenario, seed, false).history))
            .flatten();
        SeedReport {
            outcome,
            wall,
            difference,
        }
    }

    /// Runs `seeds` on `jobs` worker threads; calls `each` in completion order.
    #[allow(
        clippy::disallowed_methods,
        reason = "the sweep runs simulations side by side, outside any simulation"
    )]
    fn sweep(
        scenario: &Scenario,
        seeds: Vec<u64>,
        jobs: usize,
        twice: bool,
        mut each: impl FnMut(SeedReport),
    ) {
        let queue = Arc::new(Mutex::new(seeds.into_iter().collect::<VecDeque<u64>>()));
        let (sender, receiver) = mpsc::channel();
        let workers: Vec<_> = (0..jobs.max(1))
            .map(|_| {
                let (queue, sender, scenario) =
                    (Arc::clone(&queue), sender.clone(), scenario.clone());
                std::thread::spawn(move || loop {
                    let Some(seed) = queue.lock().expect("queue").pop_front() else {
                        break;
                    };
                    if sender.send(run_one(&scenario, seed, twice, false)).is_err() {
                        break;
                    }
                })
            })
            .collect();
        drop(sender);
        for report in receiver {
            each(report);
        }
        for worker in workers {
            worker.join().expect("worker");
        }
    }

    /// Where a run's results go besides the terminal.
    pub(super) struct Output {
        /// Only this shard's seeds of a sweep.
        pub(super) shard: Option<Shard>,
        /// A sweep's summary file.
        pub(super) summary: Option<PathBuf>,
        /// A single run's history file.
        pub(super) history: Option<PathBuf>,
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "the wall time of a sweep, outside any simulation"
    )]
    pub(super) fn run_command(
        paths: &[PathBuf],
        seed: Option<u64>,
        seeds: Option<&str>,
        jobs: Option<usize>,
        judging: Judging,
        output: &Output,
        log: bool,
    ) -> anyhow::Result<bool> {
        let started = std::time::Instant::now();
        let history = output.history.as_deref();
        let check_determinism = judging.check_determinism;
        install_quiet_panic_hook();
        let files = scenario_files(paths)?;
        let scenarios = files
            .iter()
            .map(|file| load(file))
            .collect::<Result<Vec<_>, _>>()?;
        let jobs = jobs.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
        });
        let commit = commit();
        let mut all_passed = true;
        let mut lines = Vec::new();
        let mut summaries = Vec::new();
        for scenario in &scenarios {
            let passed = if let Some(range) = seeds {
                let seeds = shard_seeds(parse_seeds(range)?, output.shard);
                let (passed, summary) = sweep_scenario(scenario, seeds, jobs, judging, &mut lines);
                summaries.push(summary);
                passed
            } else {
                let seed = seed.or(scenario.pinned_seed).unwrap_or(1);
                single(
                    scenario,
                    seed,
                    check_determinism,
                    history,
                    log,
                    &commit,
                    &mut lines,
                )?
            };
            all_passed &= passed;
        }
        println!(
            "\nsummary ({} scenario{}, commit {commit}):",
            scenarios.len(),
            if scenarios.len() == 1 { "" } else { "s" }
        );
        for line in lines {
            println!("{line}");
        }
        if let (Some(path), Some(range)) = (&output.summary, seeds) {
            let summary = Summary {
                kind: "run".to_owned(),
                commit,
                seeds: range.to_owned(),
                shard: output.shard,
                scenarios: summaries,
                cpu_seconds: process_cpu_time().as_secs_f64(),
                wall_seconds: started.elapsed().as_secs_f64(),
            };
            std::fs::write(path, serde_json::to_string_pretty(&summary)?)
                .with_context(|| path.display().to_string())?;
        }
        Ok(all_passed)
    }

    fn single(
        scenario: &Scenario,
        seed: u64,
        check_determinism: bool,
        history: Option<&Path>,
        log: bool,
        commit: &str,
        lines: &mut Vec<String>,
    ) -> anyhow::Result<bool> {
        let report = run_one(scenario, seed, check_determinism, log);
        let verdict = judge(scenario, &report.outcome);
        println!("== {} — {}", scenario.path, scenario.name);
        println!(
            "seed {seed} | commit {commit} | {:.1} s simulated in {:.3} s wall | history: {} ops, hash {:016x}",
            report.outcome.simulated.as_secs_f64(),
            report.wall.as_secs_f64(),
            verdict.ops,
            verdict.hash
        );
        print!("{}", verdict.table(&scenario.expect));
        let mut passed = verdict.as_expected();
        if check_determinism {
            match &report.difference {
                None => println!("determinism: a second run gave a byte-identical history"),
                Some(difference) => {
                    passed = false;
                    println!("determinism: NOT DETERMINISTIC at {difference}");
                }
            }
        }
        let saved = if let Some(path) = history {
            std::fs::write(path, report.outcome.history.to_jsonl())
                .with_context(|| path.display().to_string())?;
            println!("history written to {}", path.display());
            Some(path.to_path_buf())
        } else if !passed {
            let path = save_failure(scenario, &report.outcome)?;
            println!("history written to {path}");
            Some(PathBuf::from(path))
        } else {
            None
        };
        if let Some(saved) = saved {
            let violated = verdict.checks.iter().any(|check| !check.holds());
            timeline_hint(scenario, &report.outcome.history, &saved, passed, violated)?;
        }
        let status = if passed { "PASS" } else { "FAIL" };
        println!("verdict: {status}: {}", verdict.reason());
        println!("{}\n", repro(scenario, seed));
        lines.push(format!(
            "{status} {} (seed {seed}): {}",
            scenario.path,
            verdict.reason()
        ));
        Ok(passed)
    }

    /// The command that draws a saved history's timeline next to it.
    fn timeline_command(scenario: &Scenario, saved: &Path) -> String {
        format!(
            "cargo sim run --release -p seedlog-sim -- timeline {} -o {} --scenario {}",
            saved.display(),
            super::timeline_path(saved).display(),
            scenario.path
        )
    }

    /// A failing run writes its timeline next to its history (rendering takes milliseconds);
    /// a run whose checks were violated as expected prints the command that draws it.
    fn timeline_hint(
        scenario: &Scenario,
        history: &History,
        saved: &Path,
        passed: bool,
        violated: bool,
    ) -> anyhow::Result<()> {
        let command = timeline_command(scenario, saved);
        if !passed {
            let output = super::timeline_path(saved);
            super::write_timeline(history, saved, &output, Some(scenario))?;
            println!(
                "timeline written to {} (redraw: {command})",
                output.display()
            );
        } else if violated {
            println!("timeline: {command}");
        }
        Ok(())
    }

    /// Parallel seeds: as asked, or one per core.
    pub(super) fn jobs(jobs: Option<usize>) -> usize {
        jobs.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
        })
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "the command's flags, passed through"
    )]
    pub(super) fn explore(
        path: &Path,
        seeds: Option<&str>,
        budget: Option<&str>,
        jobs: Option<usize>,
        keep_going: bool,
        out: PathBuf,
        shard: Option<Shard>,
        summary: Option<PathBuf>,
    ) -> anyhow::Result<bool> {
        use seedlog_sim::explore::{parse_budget, ExploreOptions};
        let seeds = match (seeds, budget) {
            (Some(range), _) => seedlog_sim::explore::parse_seeds(range)?,
            (None, Some(_)) => 0..u64::MAX,
            (None, None) => bail!("say how much to explore: --seeds A..B or --for 10m"),
        };
        let options = ExploreOptions {
            seeds,
            budget: budget.map(parse_budget).transpose()?,
            jobs: self::jobs(jobs),
            keep_going,
            out,
            shard,
            summary,
        };
        seedlog_sim::explore::explore(path, &options)
    }

    /// `replay FILE`: `run FILE --seed <recorded> --log --history FILE.jsonl`.
    pub(super) fn replay(file: &Path, seed: Option<u64>) -> anyhow::Result<bool> {
        install_quiet_panic_hook();
        let scenario = load(file)?;
        let seed = seed.or(scenario.pinned_seed).with_context(|| {
            format!(
                "{} records no seed ([scenario] seed); pass --seed",
                file.display()
            )
        })?;
        let history = file.with_extension("jsonl");
        let mut lines = Vec::new();
        let passed = single(
            &scenario,
            seed,
            false,
            Some(&history),
            true,
            &commit(),
            &mut lines,
        )?;
        // `single` drew the timeline of a failure, and named it for expected violations.
        let saved = super::read_history(&history)?;
        if passed && check_all(&saved).iter().all(CheckResult::holds) {
            println!("timeline: {}", timeline_command(&scenario, &history));
        }
        Ok(passed)
    }

    fn save_failure(scenario: &Scenario, outcome: &RunOutcome) -> anyhow::Result<String> {
        let stem = Path::new(&scenario.path)
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_default();
        let directory = Path::new("target/sim-failures");
        std::fs::create_dir_all(directory)?;
        let path = directory.join(format!("{stem}-seed{}.jsonl", outcome.seed));
        std::fs::write(&path, outcome.history.to_jsonl())?;
        Ok(path.display().to_string())
    }

    /// What a sweep accumulates besides the verdict summary.
    #[derive(Default)]
    struct SweepTotals {
        simulated: Duration,
        wall: Duration,
        nondeterministic: Vec<u64>,
        done: usize,
    }

    fn report_seed(
        scenario: &Scenario,
        report: SeedReport,
        summary: &mut SweepSummary,
        totals: &mut SweepTotals,
    ) {
        totals.done += 1;
        let verdict = judge(scenario, &report.outcome);
        summary.add(&scenario.expect, &verdict);
        totals.simulated += report.outcome.simulated;
        totals.wall += report.wall;
        if verdict.failed() {
            let saved =
                save_failure(scenario, &report.outcome).unwrap_or_else(|error| error.to_string());
            eprintln!(
                "\n   seed {} FAILED: {} (history {saved})\n   {}\n   timeline: {}",
                verdict.seed,
                verdict.reason(),
                repro(scenario, verdict.seed),
                timeline_command(scenario, Path::new(&saved))
            );
        }
        if let Some(difference) = report.difference {
            eprintln!(
                "\n   seed {} NOT DETERMINISTIC: {difference}",
                report.outcome.seed
            );
            totals.nondeterministic.push(report.outcome.seed);
        }
    }

    fn summary_line(
        scenario: &Scenario,
        summary: &SweepSummary,
        totals: &SweepTotals,
        judging: Judging,
    ) -> (bool, String) {
        use std::fmt::Write as _;
        let total = summary.seeds.max(1);
        let judged = if judging.per_seed {
            summary.passes_each_seed(&scenario.expect)
        } else {
            summary.passes(&scenario.expect)
        };
        let passed = judged && totals.nondeterministic.is_empty();
        let status = if passed { "PASS" } else { "FAIL" };
        let mut line = format!(
            "{status} {}: {}/{} seeds as expected",
            scenario.path,
            summary.seeds - summary.failures.len(),
            summary.seeds
        );
        if !scenario.expect.violated.is_empty() {
            let hits = summary.describe_hits(&scenario.expect, !judging.per_seed);
            let _ = write!(line, "; {hits}");
        }
        let _ = write!(
            line,
            "; {} distinct histories; {:.1} s simulated / {:.3} s wall per seed",
            summary.distinct_hashes.len(),
            totals.simulated.as_secs_f64() / total as f64,
            totals.wall.as_secs_f64() / total as f64
        );
        if judging.check_determinism {
            let identical = summary.seeds - totals.nondeterministic.len();
            let _ = write!(
                line,
                "; determinism: {identical}/{} identical on a second run",
                summary.seeds
            );
        }
        if let Some((seed, reason)) = summary.failures.first() {
            let _ = write!(
                line,
                "\n     first failure: seed {seed}: {reason}\n     {}",
                repro(scenario, *seed)
            );
        }
        (passed, line)
    }

    fn sweep_scenario(
        scenario: &Scenario,
        seeds: Vec<u64>,
        jobs: usize,
        judging: Judging,
        lines: &mut Vec<String>,
    ) -> (bool, ScenarioSummary) {
        let total = seeds.len();
        let interactive = std::io::stderr().is_terminal();
        eprintln!(
            "== {} — {} ({total} seeds, {jobs} jobs)",
            scenario.path, scenario.name
        );
        let mut summary = SweepSummary::default();
        let mut totals = SweepTotals::default();
        sweep(scenario, seeds, jobs, judging.check_determinism, |report| {
            report_seed(scenario, report, &mut summary, &mut totals);
            let (done, failed) = (totals.done, summary.failures.len());
            if interactive {
                eprint!("\r   {done}/{total} seeds, {failed} failed");
            } else if done % (total / 10).max(1) == 0 || done == total {
                eprintln!("   {done}/{total} seeds, {failed} failed");
            }
        });
        if interactive {
            eprintln!();
        }
        let (passed, line) = summary_line(scenario, &summary, &totals, judging);
        eprintln!("{line}");
        lines.push(line);
        let shard_summary = ScenarioSummary {
            path: scenario.path.clone(),
            seeds: summary.seeds as u64,
            failures: summary
                .failures
                .iter()
                .map(|(seed, reason)| Failure {
                    seed: *seed,
                    reason: reason.clone(),
                    file: None,
                })
                .collect(),
            hits: scenario
                .expect
                .violated
                .iter()
                .map(|check| {
                    let hits = summary.hits.get(check).copied().unwrap_or(0);
                    (check.name().to_owned(), hits as u64)
                })
                .collect(),
            min_fraction: scenario.expect.min_fraction,
            hashes: summary
                .distinct_hashes
                .iter()
                .map(|hash| format!("{hash:016x}"))
                .collect(),
            faults: std::collections::BTreeMap::new(),
            simulated_seconds: totals.simulated.as_secs_f64(),
        };
        (passed, shard_summary)
    }

    /// CPU time used so far by every thread of this process, living or ended.
    fn process_cpu_time() -> Duration {
        let time = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        Duration::new(
            u64::try_from(time.tv_sec).unwrap_or(0),
            u32::try_from(time.tv_nsec).unwrap_or(0),
        )
    }

    #[allow(clippy::disallowed_methods)] // wall-clock timing of simulator runs, outside any simulation
    pub(super) fn bench(path: &Path, seeds: &str, jobs: usize) -> anyhow::Result<bool> {
        install_quiet_panic_hook();
        let scenario = load(path)?;
        let range = parse_seeds(seeds)?;
        let total = (range.end - range.start) as usize;
        let started = Instant::now();
        let cpu_started = process_cpu_time();
        let mut simulated = Duration::ZERO;
        let mut failures = 0;
        let mut ops = 0;
        sweep(&scenario, range.collect(), jobs, false, |report| {
            simulated += report.outcome.simulated;
            ops += report.outcome.history.ops.len();
            failures += usize::from(judge(&scenario, &report.outcome).failed());
        });
        let wall = started.elapsed().as_secs_f64();
        let cpu = process_cpu_time().saturating_sub(cpu_started).as_secs_f64();
        let seeds_per_second = total as f64 / wall;
        println!("scenario: {} — {}", scenario.path, scenario.name);
        println!(
            "seeds: {total} ({jobs} parallel), failures: {failures}, history ops per seed: {}",
            ops / total.max(1)
        );
        println!(
            "wall: {wall:.2} s; simulated: {:.1} s ({:.2} s per seed)",
            simulated.as_secs_f64(),
            simulated.as_secs_f64() / total as f64
        );
        println!(
            "cpu: {cpu:.2} s ({:.1} ms per seed, every thread: the seeds and the checkers)",
            cpu * 1000.0 / total as f64
        );
        println!(
            "seeds per second: {seeds_per_second:.1}; seeds per core-minute: {:.0}",
            total as f64 * 60.0 / cpu
        );
        println!(
            "simulated/wall time ratio: {:.0}x",
            simulated.as_secs_f64() / wall
        );
        Ok(failures == 0)
    }
}
