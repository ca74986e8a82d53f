//! How long a Raft quorum of controllers goes without an active controller after the active one
//! crashes (issue 41, finding 7): a follower stops hearing from the leader, waits openraft's
//! leader lease (`election_timeout_max`, 1.25 s) plus its election timeout (0.75 to 1.25 s,
//! drawn at start; KRaft's followers wait `controller.quorum.fetch.timeout.ms`, 2 s), wins the
//! next term, and goes active once it has applied that term's first entry. A restarted leader
//! never resumes its old term (it comes back resigned, `runtime::quorum::journal`), so the gap
//! is one election. Simulated time is deterministic: this is a property of the protocol's
//! timers, not a timed test.
#![cfg(madsim)]

use std::path::Path;
use std::time::Duration;

use seedlog_sim::harness::run_seed;
use seedlog_sim::history::{Body, History, Nemesis, Process};
use seedlog_sim::scenario::load;

/// openraft's leader lease plus its longest election timeout (runtime/quorum): a follower has
/// started an election by then (the crash may come up to a heartbeat interval after the last
/// heartbeat it heard); the vote and the first entry of the new term take a few network round
/// trips more.
const LEASE_AND_ELECTION_TIMEOUT: Duration = Duration::from_millis(2_500);
const ROUND_TRIPS: Duration = Duration::from_millis(500);

/// Each crash of the active controller, and how long until a controller became active again.
fn gaps(history: &History) -> Vec<(u64, Duration)> {
    let mut active: Option<String> = None;
    let mut pending: Option<u64> = None;
    let mut gaps = Vec::new();
    for op in &history.ops {
        match (&op.process, &op.body) {
            (Process::Named(node), Body::Controller { .. }) => {
                if let Some(crashed_at) = pending.take() {
                    gaps.push((crashed_at, Duration::from_nanos(op.time_ns - crashed_at)));
                }
                active = Some(node.to_string());
            }
            (_, Body::Nemesis(nemesis @ Nemesis::Crash { .. })) => {
                let crashed = nemesis.node();
                if crashed.is_some() && crashed == active.as_deref() && pending.is_none() {
                    pending = Some(op.time_ns);
                    active = None;
                }
            }
            _ => {}
        }
    }
    gaps
}

#[test]
fn a_new_controller_is_active_within_one_election_after_the_active_one_crashes() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/quorum/active-controller-crashes.toml");
    let scenario = load(&file).expect("loads");
    let mut all = Vec::new();
    for seed in 0..20 {
        let outcome = run_seed(&scenario, seed, false);
        assert!(outcome.error.is_none(), "seed {seed}: {:?}", outcome.error);
        let found = gaps(&outcome.history);
        assert!(
            !found.is_empty(),
            "seed {seed}: the active controller crashed"
        );
        all.extend(found.into_iter().map(|(_, gap)| (seed, gap)));
    }
    let (worst_seed, worst) = all
        .iter()
        .copied()
        .max_by_key(|(_, gap)| *gap)
        .expect("gaps");
    assert!(
        worst <= LEASE_AND_ELECTION_TIMEOUT + ROUND_TRIPS,
        "seed {worst_seed}: no active controller for {worst:?} after the active one crashed"
    );
}
