//! Exploration end to end, in the simulator: a failure file replays the explored run byte for
//! byte, and shrinking a real failure keeps it failing with fewer faults.

use super::*;
use crate::scenario::load;

/// Kafka's default flush on one broker: a power loss loses what was acknowledged and not yet
/// fsynced, so exploration that draws a power loss finds `lost-write`.
const LOSSY: &str = r#"# A lossy configuration to explore.
[scenario]
name = "explore: ack before fsync"
seed = 1
duration_ms = 6_000
liveness_ms = 20_000

[cluster]
brokers = 1

[[topics]]
name = "ledger"
partitions = 2

[[producers]]
id = "p1"
config = { "acks" = "all", "enable.idempotence" = false, "retries" = 10 }
workload = { topic = "ledger", messages = 200, rate_per_sec = 50 }

[[consumers]]
id = "c1"
assign = ["ledger"]
config = { "auto.offset.reset" = "earliest" }

[explore]
faults = [2, 5]
window_ms = [500, 5_000]
swarm = 0.7

[explore.crash]
target = ["broker-0", "c1"]
level = ["process", "power-loss"]
restart_after_ms = [100, 1_500]

[explore.drop_response]
target = "broker-0"
api = "produce"
count = [1, 3]

[explore.clog]
from = "broker-0"
to = ["p1", "c1"]
heal_after_ms = [100, 1_000]

[expect]

[expect.may_violate]
hw-monotonic = "consequence of the loss"
at-least-once = "consequence of the loss"
exactly-once = "consequence of the loss"
nonmonotonic-poll = "consequence of the loss"
at-most-once = "consequence of the loss"
duplicate = "retries without idempotence"
"#;

fn explored() -> Explored {
    let path = "lossy.toml".to_owned();
    let scenario = parse(&path, LOSSY).expect("valid");
    Explored {
        path,
        source: LOSSY.to_owned(),
        space: scenario.explore.expect("[explore]"),
    }
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("seedlog-explore-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn first_failure(explored: &Explored) -> SeedResult {
    (0..200)
        .map(|seed| explored.run(seed).expect("runs"))
        .find(|result| result.verdict.failed())
        .expect("a power loss before an fsync loses an acknowledged write on some seed")
}

#[test]
fn a_failure_file_replays_the_explored_run_byte_for_byte() {
    install_quiet_panic_hook();
    let explored = explored();
    let result = first_failure(&explored);
    assert!(
        result.verdict.unexpected.contains(&Check::LostWrite),
        "{}",
        result.verdict.reason()
    );
    let again = explored.run(result.seed).expect("runs");
    assert_eq!(
        again.text, result.text,
        "the schedule is drawn from the seed alone"
    );
    assert_eq!(again.verdict.hash, result.verdict.hash);

    let dir = scratch_dir("replay");
    let file = write_failure(&explored, &dir, &result).expect("written");
    let loaded = load(&file).expect("a failure file loads");
    assert_eq!(loaded.pinned_seed, Some(result.seed));
    assert!(loaded.explore.is_none());
    assert_eq!(loaded.faults.len(), result.faults.len());
    let outcome = run_seed(&loaded, result.seed, false);
    assert_eq!(
        outcome.history.hash(),
        result.verdict.hash,
        "run FILE --seed N replays the history"
    );
    let text = std::fs::read_to_string(&file).expect("read");
    assert!(text.contains(&format!("#   commit:  {COMMIT}")));
    assert!(text.contains("#   failed:  lost-write ("));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_passing_explored_seed_replays_from_its_file_too() {
    install_quiet_panic_hook();
    let explored = explored();
    let result = (0..50)
        .map(|seed| explored.run(seed).expect("runs"))
        .find(|result| !result.verdict.failed() && !result.faults.is_empty())
        .expect("a seed without a power loss passes");
    let scenario = parse("copy.toml", &result.text).expect("loads");
    let outcome = run_seed(&scenario, result.seed, false);
    assert_eq!(outcome.history.hash(), result.verdict.hash);
}

#[test]
fn shrinking_a_real_failure_keeps_it_failing_with_at_most_two_faults() {
    install_quiet_panic_hook();
    let explored = explored();
    let result = first_failure(&explored);
    let dir = scratch_dir("shrink");
    let file = write_failure(&explored, &dir, &result).expect("written");
    assert!(shrink(&file, Some("lost-write"), None, 2).expect("shrinks"));
    let minimal_file = minimal_path(&file);
    let minimal = load(&minimal_file).expect("the minimal file loads");
    assert!(minimal.faults.len() <= 2, "{:?}", minimal.faults);
    assert!(minimal.faults.len() <= result.faults.len());
    let (verdict, _) = judge(&minimal, minimal.pinned_seed.expect("pinned"));
    assert!(
        verdict.unexpected.contains(&Check::LostWrite),
        "{}",
        verdict.reason()
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn budgets_and_seed_ranges_parse() {
    assert_eq!(parse_budget("90s").expect("s"), Duration::from_secs(90));
    assert_eq!(parse_budget("10m").expect("m"), Duration::from_mins(10));
    assert_eq!(parse_budget("2h").expect("h"), Duration::from_hours(2));
    assert_eq!(parse_budget("45").expect("bare"), Duration::from_secs(45));
    assert!(parse_budget("10d").is_err());
    assert_eq!(parse_seeds("3..9").expect("range"), 3..9);
    assert!(parse_seeds("9..3").is_err());
    assert_eq!(format_duration(Duration::from_secs(3725)), "1h02m");
    assert_eq!(format_duration(Duration::from_secs(200)), "3m20s");
}
