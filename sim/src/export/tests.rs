use super::*;

/// A producer with two sends in flight (one acknowledged, one lost track of), a consumer that
/// polls one of them, a crash, and broker events the export leaves out.
const HISTORY: &str = r#"{"index":0,"time_ns":100,"process":1,"type":"info","f":"assign","value":["ledger-0","ledger-1"],"node":"c1"}
{"index":1,"time_ns":110,"process":2,"type":"invoke","f":"send","value":[["send","ledger-1","2-1"]],"node":"p1"}
{"index":2,"time_ns":120,"process":2,"type":"invoke","f":"send","value":[["send","ledger-0","2-2"]],"node":"p1"}
{"index":3,"time_ns":130,"process":"broker-0","type":"info","f":"hw","value":{"offset":1,"partition":"ledger-1"}}
{"index":4,"time_ns":140,"process":2,"type":"ok","f":"send","value":[["send","ledger-1",[0,"2-1"]]],"node":"p1","invoke":1}
{"index":5,"time_ns":150,"process":1,"type":"invoke","f":"poll","value":[["poll"]],"node":"c1"}
{"index":6,"time_ns":160,"process":1,"type":"ok","f":"poll","value":[["poll",{"ledger-1":[[0,"2-1"]]}]],"node":"c1","invoke":5}
{"index":7,"time_ns":170,"process":"nemesis","type":"info","f":"crash","value":{"level":"power-loss","node":"broker-0"}}
{"index":8,"time_ns":180,"process":2,"type":"info","f":"send","value":[["send","ledger-0","2-2"]],"node":"p1","invoke":2,"error":"request timed out"}
{"index":9,"time_ns":190,"process":2,"type":"invoke","f":"send","value":[["send","ledger-0","2-3"]],"node":"p1"}
{"index":10,"time_ns":200,"process":2,"type":"fail","f":"send","value":[["send","ledger-0","2-3"]],"node":"p1","invoke":9,"error":"NOT_LEADER"}
"#;

fn lines(edn: &str) -> Vec<&str> {
    edn.lines().filter(|line| !line.starts_with(';')).collect()
}

#[test]
fn a_history_becomes_jepsen_kafka_operations() {
    let history = History::from_jsonl(HISTORY).expect("parses");
    let edn = jepsen_edn(&history).expect("exports");
    assert!(
        edn.contains(";; key 0 = ledger-0\n;; key 1 = ledger-1\n"),
        "{edn}"
    );
    let expected = [
        "{:index 0, :time 100, :type :invoke, :process 0, :f :assign, :value [0 1], :seedlog-process 1, :node \"c1\", :seedlog-index 0}",
        "{:index 1, :time 100, :type :ok, :process 0, :f :assign, :value [0 1], :seedlog-process 1, :node \"c1\", :seedlog-index 0}",
        // Two sends in flight: two Jepsen processes.
        "{:index 2, :time 110, :type :invoke, :process 1, :f :send, :value [[:send 1 2000001]], :seedlog-process 2, :node \"p1\", :seedlog-index 1}",
        "{:index 3, :time 120, :type :invoke, :process 2, :f :send, :value [[:send 0 2000002]], :seedlog-process 2, :node \"p1\", :seedlog-index 2}",
        "{:index 4, :time 140, :type :ok, :process 1, :f :send, :value [[:send 1 [0 2000001]]], :seedlog-process 2, :node \"p1\", :seedlog-index 4}",
        "{:index 5, :time 150, :type :invoke, :process 0, :f :poll, :value [[:poll]], :seedlog-process 1, :node \"c1\", :seedlog-index 5}",
        "{:index 6, :time 160, :type :ok, :process 0, :f :poll, :value [[:poll {1 [[0 2000001]]}]], :seedlog-process 1, :node \"c1\", :seedlog-index 6}",
        "{:index 7, :time 170, :type :info, :process :nemesis, :f :crash, :value {:level \"power-loss\", :node \"broker-0\"}, :seedlog-index 7}",
        "{:index 8, :time 170, :type :info, :process :nemesis, :f :crash, :value {:level \"power-loss\", :node \"broker-0\"}, :seedlog-index 7}",
        "{:index 9, :time 180, :type :info, :process 2, :f :send, :value [[:send 0 2000002]], :seedlog-process 2, :node \"p1\", :error \"request timed out\", :seedlog-index 8}",
        // Process 1 is free again; process 2 ended :info and is retired.
        "{:index 10, :time 190, :type :invoke, :process 1, :f :send, :value [[:send 0 2000003]], :seedlog-process 2, :node \"p1\", :seedlog-index 9}",
        "{:index 11, :time 200, :type :fail, :process 1, :f :send, :value [[:send 0 2000003]], :seedlog-process 2, :node \"p1\", :error \"NOT_LEADER\", :seedlog-index 10}",
    ];
    assert_eq!(lines(&edn), expected);
}

#[test]
fn every_invocation_is_completed_on_its_own_jepsen_process() {
    let history = History::from_jsonl(HISTORY).expect("parses");
    let edn = jepsen_edn(&history).expect("exports");
    let mut open: BTreeMap<String, usize> = BTreeMap::new();
    for line in lines(&edn) {
        let process = line
            .split(":process ")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .expect("a process")
            .to_owned();
        if line.contains(":type :invoke") {
            assert!(
                open.insert(process, 1).is_none(),
                "one open op a process: {line}"
            );
        } else if process != ":nemesis" {
            assert!(
                open.remove(&process).is_some(),
                "a completion of an open op: {line}"
            );
        }
    }
    assert!(open.is_empty(), "{open:?}");
}

#[test]
fn acks_zero_offsets_are_nil_and_keys_follow_topic_and_partition_number() {
    let text = r#"{"index":0,"time_ns":1,"process":1,"type":"invoke","f":"send","value":[["send","b-10","1-1"]],"node":"p1"}
{"index":1,"time_ns":2,"process":1,"type":"ok","f":"send","value":[["send","b-10",[-1,"1-1"]]],"node":"p1","invoke":0}
{"index":2,"time_ns":3,"process":1,"type":"invoke","f":"send","value":[["send","b-2","1-2"]],"node":"p1"}
{"index":3,"time_ns":4,"process":1,"type":"invoke","f":"send","value":[["send","a-0","1-3"]],"node":"p1"}
"#;
    let history = History::from_jsonl(text).expect("parses");
    let edn = jepsen_edn(&history).expect("exports");
    assert!(
        edn.contains(";; key 0 = a-0\n;; key 1 = b-2\n;; key 2 = b-10\n"),
        "{edn}"
    );
    assert!(edn.contains(":value [[:send 2 [nil 1000001]]]"), "{edn}");
}

#[test]
fn unknown_formats_and_huge_sequences_are_errors() {
    assert_eq!(Format::parse("jepsen-edn"), Ok(Format::JepsenEdn));
    let error = Format::parse("elle-json").expect_err("unknown");
    assert!(
        error.contains("unknown export format 'elle-json'"),
        "{error}"
    );
    assert!(error.contains("jepsen-edn"), "{error}");
    let value = Value {
        process: 1,
        sequence: VALUE_STRIDE,
    };
    assert!(jepsen_value(value).is_err());
}

#[test]
fn edn_strings_and_keywords_are_escaped() {
    assert_eq!(edn_string("a \"b\" \\ c\n"), r#""a \"b\" \\ c\n""#);
    assert_eq!(edn_keyword("fail_syncs"), ":fail-syncs");
    let json: Json =
        serde_json::from_str(r#"{"a":null,"b":[1,true],"c":{"d":"e"}}"#).expect("json");
    assert_eq!(edn_of_json(&json), r#"{:a nil, :b [1 true], :c {:d "e"}}"#);
}
