//! Recorded histories of real bugs: the checkers must keep flagging them.

use std::path::Path;

use seedlog_sim::checker::check_all;
use seedlog_sim::history::History;

fn violated(file: &str) -> Vec<&'static str> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/checker_selftest/histories")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("fixture");
    let history = History::from_jsonl(&text).expect("parses");
    check_all(&history)
        .into_iter()
        .filter(|check| !check.holds())
        .map(|check| check.check.name())
        .collect()
}

#[test]
fn a_storage_error_reported_as_a_definite_failure_is_an_aborted_read() {
    assert_eq!(
        violated("g1a-storage-error-reported-as-definite.jsonl"),
        // The bug reported definite failures, which `failed-send` names too.
        vec!["G1a", "failed-send"]
    );
}

#[test]
fn offsets_reused_with_no_recorded_truncation_are_inconsistent() {
    assert_eq!(
        violated("offsets-reused-without-a-recorded-truncation.jsonl"),
        vec![
            "lost-write",
            "inconsistent-offsets",
            "nonmonotonic-send",
            "nonmonotonic-poll"
        ]
    );
}

#[test]
fn records_dropped_on_a_decode_error_in_another_partition_are_a_poll_skip() {
    assert_eq!(
        violated("poll-skip-records-dropped-on-a-decode-error.jsonl"),
        vec!["lost-write", "poll-skip", "at-least-once", "exactly-once"],
        "the consumer stands before the corrupt batch of ledger-1 (CORRUPT_MESSAGE at 252), which \
         it cannot read past without a seek: not stalled, though the final reader stepped over it"
    );
}

#[test]
fn a_later_partition_above_its_fetch_limit_breaks_the_fetch_contract() {
    assert_eq!(
        violated("fetch-contract-a-later-partition-above-its-limit.jsonl"),
        vec!["contract"]
    );
}
