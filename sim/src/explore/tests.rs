//! `[explore]`: strict loading, schedules drawn from the seed alone, and the text a seed runs.

use super::*;
use crate::scenario::{parse, FaultAction};

const EXPLORED: &str = r#"# A comment that stays.
[scenario]
name = "explored"
seed = 3
duration_ms = 10_000

[cluster]
brokers = 1

[[topics]]
name = "orders"
partitions = 2

[[producers]]
id = "p1"
config = { "acks" = "all", "enable.idempotence" = false, "retries" = 3 }
workload = { topic = "orders", messages = 10, rate_per_sec = 100 }

[[consumers]]
id = "c1"
assign = ["orders"]

# The scripted crash, which exploration replaces.
[[faults]]
at_ms = 1000
kind = "crash"
target = "broker-0"

[explore]
faults = [2, 6]
window_ms = [500, 9_000]
swarm = 0.5

[explore.crash]
weight = 2
target = ["broker-0", "leader(orders-1)", "c1"]
level = ["process", "power-loss"]
restart_after_ms = [100, 2_000]

[explore.partition]
groups = "random"
heal_after_ms = [100, 3_000]

[explore.drop_response]
max = 1
target = "broker-0"
api = ["produce", "fetch"]
count = [1, 4]
probability = [0.2, 1.0]

[explore.slow_disk]
at_ms = [2_000, 3_000]
target = "broker-0"
fsync_latency_us = [[1_000, 5_000], [10_000, 50_000]]

[expect]
may_violate = { "duplicate" = "retries without idempotence" }
"#;

fn space() -> ExploreSpace {
    parse("x.toml", EXPLORED)
        .expect("valid")
        .explore
        .expect("has [explore]")
}

fn error_of(text: &str) -> String {
    parse("x.toml", text)
        .expect_err("must be rejected")
        .to_string()
}

#[test]
fn a_seed_draws_the_same_schedule_every_time_and_seeds_differ() {
    let space = space();
    for seed in 0..50 {
        assert_eq!(space.draw(seed), space.draw(seed), "seed {seed}");
    }
    let distinct: BTreeSet<String> = (0..50)
        .map(|seed| format!("{:?}", space.draw(seed)))
        .collect();
    assert!(
        distinct.len() > 40,
        "only {} distinct schedules",
        distinct.len()
    );
}

#[test]
fn drawn_schedules_stay_inside_the_space() {
    let space = space();
    let mut kinds_seen = BTreeSet::new();
    let mut subsets = BTreeSet::new();
    for seed in 0..300 {
        let faults = space.draw(seed);
        // Fewer than 2 only when every enabled kind reached its `max`.
        let limited = faults.iter().all(|fault| fault.kind == "drop_response");
        assert!(
            faults.len() <= 6 && (faults.len() >= 2 || limited),
            "seed {seed}: {faults:?}"
        );
        assert!(faults.windows(2).all(|pair| pair[0].at_ms <= pair[1].at_ms));
        assert!(
            faults
                .iter()
                .filter(|fault| fault.kind == "drop_response")
                .count()
                <= 1
        );
        let kinds: BTreeSet<&str> = faults.iter().map(|fault| fault.kind.as_str()).collect();
        for fault in &faults {
            kinds_seen.insert(fault.kind.clone());
            let window = if fault.kind == "slow_disk" {
                2_000..=3_000
            } else {
                500..=9_000
            };
            assert!(window.contains(&fault.at_ms), "seed {seed}: {fault:?}");
        }
        subsets.insert(format!("{kinds:?}"));
    }
    assert_eq!(kinds_seen.len(), 4, "{kinds_seen:?}");
    assert!(
        subsets.len() >= 8,
        "swarm draws few kind subsets: {subsets:?}"
    );
}

#[test]
fn the_explored_text_loads_with_the_drawn_faults_instead_of_the_scripted_ones() {
    let space = space();
    for seed in 0..100 {
        let drawn = space.draw(seed);
        let text = explored_source(EXPLORED, seed, &drawn).expect("cut");
        assert!(text.starts_with("# A comment that stays.\n"));
        assert!(!text.lines().any(|line| line.starts_with("[explore")));
        assert!(!text.contains("The scripted crash"));
        let scenario = parse("x-seed.toml", &text).expect("the drawn faults load");
        assert_eq!(scenario.pinned_seed, Some(seed));
        assert!(scenario.explore.is_none());
        assert_eq!(scenario.faults.len(), drawn.len(), "seed {seed}");
        for (fault, drawn) in scenario.faults.iter().zip(&drawn) {
            assert_eq!(fault.at_ms, crate::scenario::TimeSpec::Fixed(drawn.at_ms));
        }
        assert_eq!(text, explored_source(EXPLORED, seed, &drawn).expect("cut"));
    }
}

#[test]
fn random_groups_split_every_node_in_two() {
    let space = space();
    let partitions: Vec<FaultAction> = (0..200)
        .flat_map(|seed| {
            let text = explored_source(EXPLORED, seed, &space.draw(seed)).expect("cut");
            parse("x.toml", &text).expect("loads").faults
        })
        .map(|fault| fault.action)
        .filter(|action| matches!(action, FaultAction::Partition { .. }))
        .collect();
    assert!(!partitions.is_empty());
    for action in partitions {
        let FaultAction::Partition { groups, .. } = action else {
            unreachable!()
        };
        assert_eq!(groups.len(), 2);
        assert!(groups.iter().all(|group| !group.is_empty()));
        let mut all: Vec<&String> = groups.iter().flatten().collect();
        all.sort();
        assert_eq!(all, ["broker-0", "c1", "p1"]);
    }
}

#[test]
fn unknown_keys_in_explore_are_rejected_with_file_and_line() {
    let text = EXPLORED.replace("swarm = 0.5", "swarm = 0.5\nfautls = 3");
    let error = error_of(&text);
    assert!(error.starts_with("x.toml:33:"), "{error}");
    assert!(
        error.contains("unknown key 'fautls' in [explore]"),
        "{error}"
    );
    let text = EXPLORED.replace("weight = 2", "weight = 2\nrestart_ms = 5");
    let error = error_of(&text);
    assert!(error.starts_with("x.toml:36:"), "{error}");
    assert!(
        error.contains("[explore.crash] restart_ms: unknown key"),
        "{error}"
    );
    let text = EXPLORED.replace("api = [\"produce\", \"fetch\"]", "heal_after_ms = 5");
    let error = error_of(&text);
    assert!(
        error.contains("[explore.drop_response] heal_after_ms: unknown key"),
        "{error}"
    );
}

#[test]
fn bad_choices_in_explore_are_rejected_at_their_key() {
    let text = EXPLORED.replace("\"leader(orders-1)\"", "\"leader(orders-7)\"");
    let error = error_of(&text);
    assert!(error.starts_with("x.toml:36:"), "{error}");
    assert!(error.contains("names no declared partition"), "{error}");
    let text = EXPLORED.replace(
        "level = [\"process\", \"power-loss\"]",
        "level = [\"process\", \"meteor\"]",
    );
    assert!(error_of(&text).contains("unknown crash level 'meteor'"));
    let text = EXPLORED.replace(
        "restart_after_ms = [100, 2_000]",
        "restart_after_ms = [2_000, 100]",
    );
    assert!(error_of(&text).contains("a number or [low, high]"));
    let text = EXPLORED.replace("window_ms = [500, 9_000]", "window_ms = [500, 19_000]");
    assert!(error_of(&text).contains("after the safety phase"));
    let text = EXPLORED.replace("groups = \"random\"\n", "");
    assert!(error_of(&text).contains("[explore.partition] a 'partition' fault needs 'groups'"));
    let text = EXPLORED.replace("[explore.crash]", "[explore.meteor]");
    assert!(error_of(&text).contains("unknown key 'meteor' in [explore]"));
}

#[test]
fn a_file_without_a_scenario_header_cannot_be_cut() {
    let text = EXPLORED
        .replace("[scenario]\nname", "scenario.name")
        .replace(
            "seed = 3\nduration_ms",
            "scenario.seed = 3\nscenario.duration_ms",
        );
    let space = parse("x.toml", &text)
        .expect("dotted keys load")
        .explore
        .expect("space");
    assert!(explored_source(&text, 1, &space.draw(1)).is_err());
}
