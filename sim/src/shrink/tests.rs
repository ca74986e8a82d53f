//! ddmin and the scenario shrinker on synthetic predicates (no simulation).

use std::path::Path;

use super::*;
use crate::scenario::{FaultAction, Scenario};

#[test]
fn ddmin_reduces_to_the_two_culprits() {
    let mut tests = 0;
    let kept = ddmin((0..16).collect(), |candidates| {
        tests += candidates.len();
        candidates
            .iter()
            .position(|items| items.contains(&3) && items.contains(&11))
    });
    assert_eq!(kept, vec![3, 11]);
    assert!(tests < 60, "{tests} tests");
}

#[test]
fn ddmin_reduces_to_a_single_culprit_and_keeps_a_failing_singleton() {
    let kept = ddmin((0..9).collect(), |candidates| {
        candidates.iter().position(|items| items.contains(&8))
    });
    assert_eq!(kept, vec![8]);
    let kept = ddmin(vec![5], |_| unreachable!("a single item is minimal"));
    assert_eq!(kept, vec![5]);
}

#[test]
fn ddmin_keeps_everything_when_every_item_is_needed() {
    let kept = ddmin((0..5).collect(), |candidates| {
        candidates.iter().position(|items| items.len() == 5)
    });
    assert_eq!(kept, vec![0, 1, 2, 3, 4]);
}

const FAILING: &str = r#"# found by explore
[scenario]
name = "synthetic"
seed = 7
duration_ms = 20_000

[cluster]
brokers = 1

[[topics]]
name = "orders"
partitions = 3
config = { "flush.messages" = 1 }

[[producers]]
id = "p1"
config = { "acks" = "all", "enable.idempotence" = false, "retries" = 5 }
workload = { topic = "orders", messages = 600, rate_per_sec = 40 }

[[producers]]
id = "p2"
config = { "acks" = "all", "enable.idempotence" = false, "retries" = 5 }
workload = { topic = "orders", messages = 400, rate_per_sec = 25 }

[[consumers]]
id = "c1"
assign = ["orders"]

[[faults]]
at_ms = 1000
kind = "drop_response"
target = "broker-0"
count = 4

[[faults]]
at_ms = 2000
kind = "crash"
target = "broker-0"
level = "process"
restart_after_ms = 800

[[faults]]
at_ms = 3000
kind = "partition"
groups = [["p1", "c1"], ["broker-0"]]
heal_after_ms = 3000

[[faults]]
at_ms = 4000
kind = "clog"
from = "broker-0"
to = "p2"
heal_after_ms = 2500

[[faults]]
at_ms = 5000
kind = "crash"
target = "broker-0"
level = "power-loss"
restart_after_ms = 1500

[[faults]]
at_ms = 6000
kind = "isolate"
target = "c1"
heal_after_ms = 1000

[[faults]]
at_ms = 7000
kind = "crash"
target = "c1"
restart_after_ms = 1000

[[faults]]
at_ms = 8000
kind = "pause"
target = "broker-0"
heal_after_ms = 700

[expect]
may_violate = { "duplicate" = "retries without idempotence" }
"#;

/// The synthetic bug: a power loss of broker-0 that restarts within 2 s, while a partition
/// started before it, and p1 writing at least 10 messages.
fn synthetic_bug(scenario: &Scenario) -> bool {
    let power_loss = scenario.faults.iter().any(|fault| {
        matches!(&fault.action, FaultAction::Crash { level, restart_after_ms: Some(after), .. }
            if *level == seedlog::storage::memory::CrashLevel::PowerLoss && after.max() <= 2_000)
    });
    let partition = scenario
        .faults
        .iter()
        .any(|fault| matches!(fault.action, FaultAction::Partition { .. }));
    let p1 = scenario
        .producers
        .iter()
        .any(|producer| producer.id == "p1" && producer.messages >= 10);
    power_loss && partition && p1
}

fn shrink_synthetic(batch: usize) -> (ShrinkReport, usize) {
    let doc: Table = toml::from_str(FAILING).expect("toml");
    let mut oracle_calls = 0;
    let mut oracle = |texts: &[String]| {
        oracle_calls += texts.len();
        texts
            .iter()
            .map(|text| synthetic_bug(&parse("f.toml", text).expect("only valid candidates run")))
            .collect()
    };
    let mut shrinker = Shrinker::new("f.toml", doc, batch, false, &mut oracle);
    assert!(shrinker.reproduces());
    let report = shrinker.run();
    (report, oracle_calls)
}

#[test]
fn the_shrinker_reduces_a_synthetic_failure_to_its_culprits() {
    let (report, calls) = shrink_synthetic(1);
    let scenario = parse("f.toml", &report.text).expect("valid");
    assert!(synthetic_bug(&scenario));
    let kinds: Vec<String> = scenario
        .faults
        .iter()
        .map(|fault| {
            format!("{:?}", fault.action)
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(kinds, ["Partition", "Crash"], "{}", report.text);
    assert_eq!(scenario.producers.len(), 1, "{}", report.text);
    assert_eq!(scenario.producers[0].messages, 10, "{}", report.text);
    assert_eq!(scenario.topics[0].partitions, 1, "{}", report.text);
    assert!(scenario.consumers.is_empty() || scenario.consumers.len() == 1);
    assert!(
        report
            .steps
            .iter()
            .any(|step| step.starts_with("faults: 8 -> ")),
        "{:?}",
        report.steps
    );
    assert_eq!(calls, report.runs);
}

#[test]
fn shrinking_is_deterministic_whatever_the_batch() {
    let (first, _) = shrink_synthetic(1);
    let (again, _) = shrink_synthetic(1);
    let (batched, _) = shrink_synthetic(4);
    assert_eq!(first.text, again.text);
    assert_eq!(first.steps, again.steps);
    assert_eq!(first.text, batched.text);
    assert_eq!(first.steps, batched.steps);
}

#[test]
fn every_scenario_file_renders_to_the_same_document() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let files = crate::scenario::scenario_files(&[root]).expect("scenarios");
    assert!(files.len() > 10);
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        let doc: Table = toml::from_str(&text).expect("toml");
        let rendered = render(&doc);
        let again: Table = toml::from_str(&rendered)
            .unwrap_or_else(|error| panic!("{}: {error}\n{rendered}", file.display()));
        assert_eq!(doc, again, "{}", file.display());
        assert_eq!(
            parse("x", &text).is_ok(),
            parse("x", &rendered).is_ok(),
            "{}",
            file.display()
        );
    }
}
