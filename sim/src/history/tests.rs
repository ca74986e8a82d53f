use super::*;
use std::collections::BTreeSet;

use super::nemesis::CrashLevel;

fn node(name: &str) -> Arc<str> {
    name.into()
}

#[test]
fn a_history_round_trips_through_json_lines_and_hashes_stably() {
    let mut recorder = Recorder::default();
    let process = recorder.new_process();
    let value = Value {
        process,
        sequence: 1,
    };
    let send = |offset| Body::Send {
        partition: "t-0".into(),
        value,
        offset,
    };
    let invoke = recorder.invoke(10, process, &node("p1"), send(None));
    recorder.complete(20, invoke, Completion::Ok(send(Some(0))));
    recorder.event(
        30,
        "nemesis",
        Body::Nemesis(Nemesis::Crash {
            node: "broker-0".to_owned(),
            level: Some(CrashLevel::Process),
        }),
    );
    recorder.event(
        31,
        "broker-0",
        Body::HighWatermark {
            partition: "t-0".into(),
            offset: 1,
        },
    );
    recorder.event(
        32,
        "invariants",
        Body::Invariant {
            check: Check::StrongIsr,
            partition: "t-0".into(),
            detail: "the member differs".to_owned(),
        },
    );
    let consumer = recorder.new_process();
    let poll = recorder.invoke(40, consumer, &node("c1"), Body::poll_invocation());
    let records: Records = [("t-0".into(), vec![(0, value)])].into_iter().collect();
    let errors = vec![PartitionError {
        partition: "t-1".into(),
        error: "CORRUPT_MESSAGE".into(),
        position: 7,
    }];
    recorder.complete(50, poll, Completion::Ok(Body::Poll { records, errors }));
    let history = recorder.finish();
    let text = history.to_jsonl();
    assert!(text.starts_with(r#"{"index":0,"time_ns":10,"process":1,"type":"invoke","f":"send","value":[["send","t-0","1-1"]],"node":"p1"}"#), "{text}");
    assert!(text.contains(r#""value":[["send","t-0",[0,"1-1"]]]"#));
    assert!(text.contains(
        r#""partition_errors":[{"error":"CORRUPT_MESSAGE","partition":"t-1","position":7}]"#
    ));
    assert!(text.contains(
        r#""f":"invariant","value":{"check":"strong-isr","detail":"the member differs","partition":"t-0"}"#
    ));
    let parsed = History::from_jsonl(&text).expect("parses");
    assert_eq!(parsed, history);
    assert_eq!(parsed.hash(), history.hash());
}

#[test]
fn a_group_members_operations_round_trip() {
    let mut recorder = Recorder::default();
    let value = Value {
        process: 9,
        sequence: 1,
    };
    let records: Records = [("t-0".into(), vec![(0, value)])].into_iter().collect();
    let member = recorder.new_process();
    let group: Arc<str> = "g".into();
    recorder.client_event(
        60,
        member,
        &node("c2"),
        Body::Subscribe {
            group: Arc::clone(&group),
            topics: vec!["t".into()],
        },
    );
    recorder.client_event(
        61,
        member,
        &node("c2"),
        Body::Join {
            group: Arc::clone(&group),
            generation: 3,
            partitions: vec!["t-0".into()],
        },
    );
    recorder.client_event(
        62,
        member,
        &node("c2"),
        Body::Process {
            group: Arc::clone(&group),
            records,
        },
    );
    let commit = Body::Commit {
        group,
        generation: 3,
        offsets: [("t-0".into(), 1)].into_iter().collect(),
    };
    let committing = recorder.invoke(63, member, &node("c2"), commit.clone());
    recorder.complete(64, committing, Completion::Ok(commit));
    let history = recorder.finish();
    let parsed = History::from_jsonl(&history.to_jsonl()).expect("parses");
    assert_eq!(parsed, history);
}

#[test]
fn malformed_operations_are_errors_that_name_the_line() {
    let cases = [
        (r#"{"index":0}"#, "missing field"),
        (
            r#"{"index":0,"time_ns":0,"process":1,"type":"ok","f":"send","value":[["send","t-0",[0,"x"]]]}"#,
            "'x' is not a value",
        ),
        (
            r#"{"index":0,"time_ns":0,"process":1,"type":"ok","f":"send","value":[["send","t-0"]]}"#,
            "a send's value must be",
        ),
        (
            r#"{"index":0,"time_ns":0,"process":1,"type":"ok","f":"poll","value":[["poll",{"t-0":[[0]]}]]}"#,
            "a poll's value must be",
        ),
        (
            r#"{"index":0,"time_ns":0,"process":"nemesis","type":"info","f":"explode","value":{}}"#,
            "unknown f 'explode'",
        ),
        (
            r#"{"index":0,"time_ns":0,"process":1,"type":"maybe","f":"poll","value":[["poll"]]}"#,
            "unknown type 'maybe'",
        ),
        (
            r#"{"index":0,"time_ns":0,"process":"b","type":"info","f":"hw","value":{"partition":"t-0"}}"#,
            "hw: missing field `offset`",
        ),
        (
            r#"{"index":0,"time_ns":0,"process":"invariants","type":"info","f":"invariant","value":{"check":"weak-isr","partition":"t-0","detail":"x"}}"#,
            "unknown check 'weak-isr' in an invariant",
        ),
    ];
    for (line, expected) in cases {
        let text = format!("\n{line}\n");
        let error = History::from_jsonl(&text).expect_err(line);
        assert!(error.starts_with("line 2: "), "{error}");
        assert!(error.contains(expected), "{error} should say {expected}");
    }
}

#[test]
fn the_word_hasher_tells_apart_what_differs_in_one_place() {
    let hash = |write: &dyn Fn(&mut WordHasher)| {
        let mut hasher = WordHasher::default();
        write(&mut hasher);
        hasher.finish()
    };
    let bytes: [&[u8]; 6] = [b"", b"a", b"a\0", b"orders-0", b"orders-00", b"orders-1"];
    let hashes: BTreeSet<u64> = bytes
        .iter()
        .map(|bytes| hash(&|hasher| hasher.write(bytes)))
        .collect();
    assert_eq!(hashes.len(), bytes.len(), "{bytes:?}");
    assert_eq!(
        hash(&|h| h.write(b"orders-0")),
        hash(&|h| h.write(b"orders-0"))
    );
    assert_ne!(hash(&|h| h.write_u64(1)), hash(&|h| h.write_u64(1 << 63)));
    assert_ne!(
        hash(&|h| {
            h.write_u64(1);
            h.write_u64(2);
        }),
        hash(&|h| {
            h.write_u64(2);
            h.write_u64(1);
        })
    );
}

#[test]
fn parsing_bytes_accepts_what_parsing_text_accepts() {
    let cases: [&[u8]; 16] = [
        b"1-2",
        b"12-345",
        b"+1-+2",
        b"1-2-3",
        b"-1",
        b"1-",
        b"1",
        b"",
        b"+-1",
        b"a-1",
        b"1-2 ",
        b"18446744073709551615-1",
        b"18446744073709551616-1",
        b"\xff-1",
        b"1-\xc3\xa9",
        b"007-010",
    ];
    for bytes in cases {
        let text = std::str::from_utf8(bytes).ok().and_then(Value::parse);
        assert_eq!(Value::parse_bytes(bytes), text, "{bytes:?}");
    }
}

#[test]
fn value_bytes_are_its_display_form() {
    let mut out = Vec::new();
    for (process, sequence) in [
        (0, 0),
        (1, 9),
        (10, 99),
        (7, 100),
        (u64::MAX, 1_234_567),
        (3, u64::MAX),
    ] {
        let value = Value { process, sequence };
        out.clear();
        value.write_bytes(&mut out);
        assert_eq!(out, value.to_string().into_bytes());
        assert_eq!(Value::parse_bytes(&out), Some(value));
    }
}

#[test]
fn open_invocations_behave_as_an_ordered_set() {
    let mut open = OpenInvocations::default();
    let mut expected = BTreeSet::new();
    // A deterministic mix of inserts and removes over indexes that cross word boundaries.
    let mut state = 0x5eed_u64;
    for _ in 0..2_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let index = state % 300;
        if state.is_multiple_of(3) {
            assert_eq!(
                open.remove(index),
                expected.remove(&index),
                "remove {index}"
            );
        } else {
            open.insert(index);
            expected.insert(index);
        }
        assert!(open.iter().eq(expected.iter().copied()));
    }
}
