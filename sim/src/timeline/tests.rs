use std::sync::Arc;

use super::*;
use crate::checker::check_all;
use crate::history::{Body, Completion, Partition, Recorder, Records, Value};

/// One producer, one consumer, a broker that loses power and comes back with a shorter log:
/// `1-2`, acknowledged at `t-0@1`, is gone from the final log.
const LOST: &str = r#"{"index":0,"time_ns":1000000,"process":2,"type":"info","f":"assign","value":["t-0"],"node":"c1"}
{"index":1,"time_ns":1000000,"process":1,"type":"invoke","f":"send","value":[["send","t-0","1-1"]],"node":"p1"}
{"index":2,"time_ns":2000000,"process":1,"type":"ok","f":"send","value":[["send","t-0",[0,"1-1"]]],"node":"p1","invoke":1}
{"index":3,"time_ns":2000000,"process":"broker-0","type":"info","f":"hw","value":{"offset":1,"partition":"t-0"}}
{"index":4,"time_ns":3000000,"process":1,"type":"invoke","f":"send","value":[["send","t-0","1-2"]],"node":"p1"}
{"index":5,"time_ns":4000000,"process":1,"type":"ok","f":"send","value":[["send","t-0",[1,"1-2"]]],"node":"p1","invoke":4}
{"index":6,"time_ns":4000000,"process":"broker-0","type":"info","f":"hw","value":{"offset":2,"partition":"t-0"}}
{"index":7,"time_ns":5000000,"process":"nemesis","type":"info","f":"crash","value":{"level":"power-loss","node":"broker-0"}}
{"index":8,"time_ns":6000000,"process":"nemesis","type":"info","f":"restart","value":{"node":"broker-0"}}
{"index":9,"time_ns":6500000,"process":"broker-0","type":"info","f":"truncate","value":{"from_offset":1,"partition":"t-0","reason":"recovery on start-up"}}
{"index":10,"time_ns":6500000,"process":"broker-0","type":"info","f":"hw","value":{"offset":1,"partition":"t-0"}}
{"index":11,"time_ns":7000000,"process":1,"type":"invoke","f":"send","value":[["send","t-0","1-3"]],"node":"p1"}
{"index":12,"time_ns":8000000,"process":1,"type":"ok","f":"send","value":[["send","t-0",[1,"1-3"]]],"node":"p1","invoke":11}
{"index":13,"time_ns":9000000,"process":"final-reader","type":"info","f":"final-read-start","value":{}}
{"index":14,"time_ns":9000000,"process":3,"type":"invoke","f":"poll","value":[["poll"]],"node":"final-reader"}
{"index":15,"time_ns":9500000,"process":3,"type":"ok","f":"poll","value":[["poll",{"t-0":[[0,"1-1"],[1,"1-3"]]}]],"node":"final-reader","invoke":14}
{"index":16,"time_ns":9600000,"process":"final-reader","type":"info","f":"final-read","value":{"end_offset":2,"log_start_offset":0,"partition":"t-0","reached_end":true,"read_to":2}}
"#;

fn lost() -> History {
    History::from_jsonl(LOST).expect("parses")
}

#[test]
fn a_lost_write_names_its_send_and_the_final_read_of_its_offset() {
    let history = lost();
    let checks = check_all(&history);
    let found = violations(&history, &checks);
    let lost_write = found
        .iter()
        .find(|v| v.check == Check::LostWrite)
        .expect("a lost write");
    assert!(
        lost_write.text.starts_with("1-2 acknowledged at t-0@1"),
        "{lost_write:?}"
    );
    // The send (invocation and completion), the final read that found 1-3 there instead, and
    // the send of 1-3.
    assert_eq!(lost_write.ops, vec![4, 5, 11, 12, 15], "{lost_write:?}");
}

#[test]
fn the_page_is_self_contained_and_highlights_and_links_every_named_operation() {
    let history = lost();
    let checks = check_all(&history);
    let page = Page {
        title: "power loss <test>".to_owned(),
        subtitle: "lost.jsonl".to_owned(),
        expect: None,
    };
    let html = render(&history, &checks, &page);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<title>power loss &lt;test&gt;</title>"));
    for forbidden in ["<script", "<link", "http://", "https://", "url(", "@import"] {
        assert!(
            !html.contains(forbidden),
            "the page must not load anything: {forbidden}"
        );
    }
    assert!(html.contains("<b class=\"check \">lost-write</b> 1-2 acknowledged at t-0@1"));
    for index in [4, 5, 11, 12, 15] {
        assert!(
            html.contains(&format!("<a href=\"#op-{index}\">#{index} ")),
            "link {index}"
        );
        assert_eq!(
            html.matches(&format!(" id=\"op-{index}\" class=\"hl\""))
                .count(),
            1,
            "one anchor for op {index}"
        );
    }
    assert!(html.contains("<a href=\"#op-4\">#4 p1 send invoke 1-2 → t-0 at 3.0 ms</a>"));
    // Lanes: the faults, each node, the partition; the power loss shades broker-0's lane.
    for lane in ["faults", "p1", "c1", "final-reader", "broker-0", "t-0"] {
        assert!(html.contains(&format!(">{lane}</text>")), "lane {lane}");
    }
    assert!(html.contains("class=\"f-power fault-bar\""));
    assert!(html.contains("<title>crash broker-0 level=power-loss (5.0 ms – 6.0 ms) #7</title>"));
    assert!(html.contains("class=\"pt\""), "the truncation");
    assert!(html.contains("<path class=\"hw\""), "the high watermark");
    assert!(
        html.contains("<tr id=\"row-5\">"),
        "the table of highlighted operations"
    );
}

#[test]
fn expectations_tag_violations() {
    let history = lost();
    let checks = check_all(&history);
    let mut expect = Expect::default();
    expect.violated.insert(Check::LostWrite);
    let page = Page {
        expect: Some(expect),
        ..Page::default()
    };
    let html = render(&history, &checks, &page);
    assert!(html.contains("<b class=\"check expected\">lost-write</b> ×1 (expected)"));
}

#[test]
fn faults_hold_until_what_ends_them() {
    let text = r#"{"index":0,"time_ns":10,"process":"nemesis","type":"info","f":"crash","value":{"level":"process","node":"broker-0"}}
{"index":1,"time_ns":20,"process":"nemesis","type":"info","f":"partition","value":{"groups":[["p1","c1"],["broker-1"]]}}
{"index":2,"time_ns":25,"process":"nemesis","type":"info","f":"drop-request","value":{"api":"Fetch","count":2,"error":null,"node":"broker-1","probability":1.0}}
{"index":3,"time_ns":30,"process":"nemesis","type":"info","f":"restart","value":{"node":"broker-0"}}
{"index":4,"time_ns":40,"process":"nemesis","type":"info","f":"heal","value":{"links":4}}
{"index":5,"time_ns":50,"process":"nemesis","type":"info","f":"pause","value":{"node":"broker-1"}}
"#;
    let history = History::from_jsonl(text).expect("parses");
    let found = faults::faults(&history, 100);
    let spans: Vec<(&str, u64, u64, bool)> = found
        .iter()
        .map(|f| (f.f.as_str(), f.start_ns, f.end_ns, f.lasting))
        .collect();
    assert_eq!(
        spans,
        vec![
            ("crash", 10, 30, true),
            ("partition", 20, 40, true),
            ("drop-request", 25, 25, false),
            ("restart", 30, 30, false),
            ("heal", 40, 40, false),
            ("pause", 50, 100, true),
        ]
    );
    assert_eq!(found[1].nodes, vec!["p1", "c1", "broker-1"]);
    assert_eq!(found[0].class, "f-crash");
}

#[test]
fn texts_name_indices_values_places_and_high_watermark_drops() {
    let history = lost();
    let result = |check, text: &str| CheckResult {
        check,
        violations: 1,
        examples: vec![text.to_owned()],
    };
    let checks = [
        result(Check::Stalled, "producers p1 had not finished (op 13)"),
        result(
            Check::HwMonotonic,
            "broker-0: t-0's high watermark went from 2 back to 1 (recovery on start-up, the log ending at 1)",
        ),
        result(Check::NonmonotonicPoll, "c9 (process 3): polled t-0@1 (1-3) after t-0@0 (1-1)"),
        result(Check::Contract, "nothing here names an operation, not even 9-9 or x@y"),
    ];
    let found = violations(&history, &checks);
    let ops: Vec<Vec<u64>> = found.iter().map(|v| v.ops.clone()).collect();
    assert_eq!(
        ops,
        vec![vec![13], vec![6, 10], vec![1, 2, 11, 12, 15], Vec::new()]
    );
}

/// ~30,000 operations over a minute: a producer's sends and a consumer's polls, each read.
fn dense_history() -> History {
    let mut recorder = Recorder::default();
    let producer = recorder.new_process();
    let consumer = recorder.new_process();
    let (p1, c1): (Arc<str>, Arc<str>) = ("p1".into(), "c1".into());
    for sequence in 0..7_500_u64 {
        let time = sequence * 8_000_000;
        let partition: Partition = format!("t-{}", sequence % 2).into();
        let offset = (sequence / 2) as i64;
        let value = Value {
            process: producer,
            sequence: sequence + 1,
        };
        let send = |offset| Body::Send {
            partition: partition.clone(),
            value,
            offset,
        };
        let invoke = recorder.invoke(time, producer, &p1, send(None));
        recorder.complete(time + 3_000_000, invoke, Completion::Ok(send(Some(offset))));
        let poll = recorder.invoke(time + 4_000_000, consumer, &c1, Body::poll_invocation());
        let records: Records = [(partition.clone(), vec![(offset, value)])]
            .into_iter()
            .collect();
        let body = Body::Poll {
            records,
            errors: Vec::new(),
        };
        recorder.complete(time + 5_000_000, poll, Completion::Ok(body));
    }
    recorder.finish()
}

/// The page of a dense history stays small, yet every named operation is drawn.
#[test]
fn dense_histories_are_thinned_but_named_operations_are_always_drawn() {
    let history = dense_history();
    assert_eq!(history.ops.len(), 30_000);
    let named = ["1-100", "1-101", "1-4000", "1-7499"];
    let checks = [CheckResult {
        check: Check::LostWrite,
        violations: named.len(),
        examples: named
            .iter()
            .map(|value| format!("{value} acknowledged somewhere: made up"))
            .collect(),
    }];
    let html = render(&history, &checks, &Page::default());
    assert!(html.len() < 6_000_000, "{} bytes", html.len());
    let titles = html.matches("<title>").count();
    assert!(
        titles < 15_000,
        "{titles} tooltips for 30,000 ops: not thinned"
    );
    for violation in violations(&history, &checks) {
        assert_eq!(violation.ops.len(), 2, "{violation:?}");
        for index in violation.ops {
            assert!(
                html.contains(&format!(" id=\"op-{index}\" class=\"hl\"")),
                "op {index}"
            );
        }
    }
}

#[test]
fn the_recorded_ack_before_fsync_history_highlights_each_lost_write() {
    let text = include_str!("../../tests/fixtures/lost-write-ack-before-fsync.jsonl");
    let history = History::from_jsonl(text).expect("parses");
    let checks = check_all(&history);
    let found = violations(&history, &checks);
    let lost: Vec<&Violation> = found
        .iter()
        .filter(|v| v.check == Check::LostWrite)
        .collect();
    assert_eq!(lost.len(), 5);
    let html = render(&history, &checks, &Page::default());
    for violation in lost {
        let value = violation.text.split(' ').next().expect("a value");
        let sends: Vec<u64> = history
            .ops
            .iter()
            .filter(|op| matches!(&op.body, crate::history::Body::Send { value: v, .. } if v.to_string() == value))
            .map(|op| op.index)
            .collect();
        assert!(
            sends.iter().all(|send| violation.ops.contains(send)),
            "{violation:?}"
        );
        for index in &violation.ops {
            assert!(
                html.contains(&format!(" id=\"op-{index}\" class=\"hl\"")),
                "op {index}"
            );
        }
    }
}
