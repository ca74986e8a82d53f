//! Each check is shown to catch what it names on a hand-built history, and to stay quiet on a
//! clean one.

use serde_json::json;

use super::*;
use crate::history::{poll_result, send_invocation, send_result, Completion, Polled, Recorder};

struct Builder {
    recorder: Recorder,
    time: u64,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            recorder: Recorder::default(),
            time: 0,
        }
    }

    fn tick(&mut self) -> u64 {
        self.time += 1;
        self.time
    }

    fn process(&mut self) -> u64 {
        self.recorder.new_process()
    }

    fn send(&mut self, process: u64, partition: &str, value: &str, offset: Option<i64>) -> u64 {
        let time = self.tick();
        let invoke = self.recorder.invoke(
            time,
            process,
            "p1",
            "send",
            send_invocation(partition, value),
        );
        if let Some(offset) = offset {
            let time = self.tick();
            self.recorder.complete(
                time,
                invoke,
                Completion::Ok(send_result(partition, offset, value)),
            );
        }
        invoke
    }

    fn fail(&mut self, invoke: u64, definite: bool) {
        let time = self.tick();
        let completion = if definite {
            Completion::Fail("rejected".into())
        } else {
            Completion::Info("timeout".into())
        };
        self.recorder.complete(time, invoke, completion);
    }

    fn poll(&mut self, process: u64, node: &str, partition: &str, records: &[(i64, &str)]) {
        let time = self.tick();
        let invoke = self
            .recorder
            .invoke(time, process, node, "poll", json!([["poll"]]));
        let polled: Polled = [(
            partition.to_owned(),
            records.iter().map(|(o, v)| (*o, (*v).to_owned())).collect(),
        )]
        .into();
        let time = self.tick();
        self.recorder
            .complete(time, invoke, Completion::Ok(poll_result(&polled)));
    }

    fn final_read_start(&mut self) {
        let time = self.tick();
        self.recorder
            .event(time, "final-reader", "final-read-start", json!({}));
    }

    fn final_read(&mut self, partition: &str, reached_end: bool) {
        let time = self.tick();
        self.recorder.event(
            time,
            "final-reader",
            "final-read",
            json!({"partition": partition, "end_offset": 0, "reached_end": reached_end}),
        );
    }

    fn results(self) -> BTreeMap<&'static str, CheckResult> {
        check_all(&self.recorder.finish())
            .into_iter()
            .map(|result| (result.name, result))
            .collect()
    }
}

fn violated(results: &BTreeMap<&'static str, CheckResult>) -> Vec<&'static str> {
    results
        .values()
        .filter(|result| !result.holds())
        .map(|result| result.name)
        .collect()
}

#[test]
fn a_clean_history_passes_every_check() {
    let mut b = Builder::new();
    let p = b.process();
    b.send(p, "t-0", "1-1", Some(0));
    b.send(p, "t-0", "1-2", Some(1));
    let c = b.process();
    b.poll(c, "c1", "t-0", &[(0, "1-1"), (1, "1-2")]);
    assert_eq!(violated(&b.results()), Vec::<&str>::new());
}

#[test]
fn an_acked_value_missing_below_a_polled_offset_is_a_lost_write() {
    let mut b = Builder::new();
    let p = b.process();
    b.send(p, "t-0", "1-1", Some(0));
    b.send(p, "t-0", "1-2", Some(1));
    let c = b.process();
    b.poll(c, "c1", "t-0", &[(1, "1-2")]);
    assert_eq!(
        violated(&b.results()),
        vec!["at-least-once", "exactly-once", "lost-write"]
    );
}

#[test]
fn an_acked_value_never_reached_is_unseen_unless_the_final_read_reached_the_end() {
    let mut b = Builder::new();
    let p = b.process();
    b.send(p, "t-0", "1-1", Some(5));
    assert_eq!(
        violated(&b.results()),
        vec!["at-least-once", "exactly-once", "unseen"]
    );
    let mut b = Builder::new();
    let p = b.process();
    b.send(p, "t-0", "1-1", Some(5));
    b.final_read_start();
    b.final_read("t-0", true);
    assert_eq!(
        violated(&b.results()),
        vec!["at-least-once", "exactly-once", "lost-write"]
    );
}

#[test]
fn an_acked_value_read_early_but_missing_from_a_complete_final_read_is_lost() {
    let mut b = Builder::new();
    let p = b.process();
    b.send(p, "t-0", "1-1", Some(0));
    let c = b.process();
    b.poll(c, "c1", "t-0", &[(0, "1-1")]);
    b.final_read_start();
    let reader = b.process();
    b.poll(reader, "final-reader", "t-0", &[(0, "2-9")]);
    b.final_read("t-0", true);
    let results = b.results();
    assert_eq!(
        violated(&results),
        vec!["inconsistent-offsets", "lost-write"],
        "delivered once, then gone from the log"
    );
    assert!(results["lost-write"].examples[0].contains("polled before it vanished"));
}

#[test]
fn a_write_acknowledged_after_the_final_reads_snapshot_is_not_judged_by_it() {
    // Regression (scenarios/regressions/ack-after-final-read-snapshot.toml, seed 31): the
    // final read took its end offsets while a backlogged producer was still sending.
    let mut b = Builder::new();
    let p = b.process();
    b.send(p, "t-0", "1-1", Some(0));
    let late = b.send(p, "t-0", "1-2", None);
    b.final_read_start();
    let reader = b.process();
    b.poll(reader, "final-reader", "t-0", &[(0, "1-1")]);
    let time = b.tick();
    b.recorder
        .complete(time, late, Completion::Ok(send_result("t-0", 1, "1-2")));
    b.final_read("t-0", true);
    assert_eq!(
        violated(&b.results()),
        vec!["at-least-once", "exactly-once", "unseen"],
        "unseen, not lost"
    );
}

#[test]
fn a_value_at_two_offsets_is_a_duplicate_and_consumed_twice() {
    let mut b = Builder::new();
    let p = b.process();
    b.send(p, "t-0", "1-1", Some(1));
    let c = b.process();
    b.poll(c, "c1", "t-0", &[(0, "1-1"), (1, "1-1")]);
    assert_eq!(
        violated(&b.results()),
        vec!["at-most-once", "duplicate", "exactly-once"]
    );
}

#[test]
fn one_offset_with_two_values_is_inconsistent() {
    let mut b = Builder::new();
    let p = b.process();
    b.send(p, "t-0", "1-1", Some(0));
    let c = b.process();
    b.poll(c, "c1", "t-0", &[(0, "1-2")]);
    let results = b.results();
    assert!(!results["inconsistent-offsets"].holds());
    assert!(
        !results["lost-write"].holds(),
        "1-1 was read past and never seen"
    );
}

#[test]
fn polling_a_definitely_failed_value_is_an_aborted_read() {
    let mut b = Builder::new();
    let p = b.process();
    let invoke = b.send(p, "t-0", "1-1", None);
    b.fail(invoke, true);
    let indeterminate = b.send(p, "t-0", "1-2", None);
    b.fail(indeterminate, false);
    let c = b.process();
    b.poll(c, "c1", "t-0", &[(0, "1-1"), (1, "1-2")]);
    assert_eq!(
        violated(&b.results()),
        vec!["G1a"],
        "an indeterminate send may show up"
    );
}

#[test]
fn a_later_send_landing_earlier_is_nonmonotonic() {
    let mut b = Builder::new();
    let p = b.process();
    let first = b.send(p, "t-0", "1-1", None);
    b.send(p, "t-0", "1-2", Some(0));
    let time = b.tick();
    b.recorder
        .complete(time, first, Completion::Ok(send_result("t-0", 1, "1-1")));
    assert_eq!(
        violated(&b.results()),
        vec![
            "at-least-once",
            "exactly-once",
            "nonmonotonic-send",
            "unseen"
        ]
    );
}

#[test]
fn polling_backwards_is_nonmonotonic_and_rereading_breaks_at_most_once() {
    let mut b = Builder::new();
    let c = b.process();
    b.poll(c, "c1", "t-0", &[(0, "x"), (1, "y")]);
    b.poll(c, "c1", "t-0", &[(1, "y")]);
    assert_eq!(
        violated(&b.results()),
        vec!["at-most-once", "exactly-once", "nonmonotonic-poll"]
    );
    let mut b = Builder::new();
    let first = b.process();
    b.poll(first, "c1", "t-0", &[(0, "x")]);
    let restarted = b.process();
    b.poll(restarted, "c1", "t-0", &[(0, "x")]);
    assert_eq!(
        violated(&b.results()),
        vec!["at-most-once", "exactly-once"],
        "a new incarnation may restart, but the consumer saw x twice"
    );
}
