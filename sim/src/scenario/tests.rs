//! The loader rejects bad files with `file:line: reason`.

use super::*;

const GOOD: &str = r#"
[scenario]
name = "good"
duration_ms = 5000

[cluster]
brokers = 1
config = { "log.flush.interval.messages" = 1 }

[[topics]]
name = "orders"
partitions = 2
config = { "flush.messages" = 1 }

[[producers]]
id = "p1"
config = { "acks" = "all", "enable.idempotence" = false, "retries" = 3 }
workload = { topic = "orders", messages = 10, rate_per_sec = 100 }

[[consumers]]
id = "c1"
assign = ["orders"]
config = { "auto.offset.reset" = "earliest" }

[[faults]]
at_ms = 1000
kind = "crash"
target = "broker-0"
level = "power-loss"
restart_after_ms = 500

[[faults]]
at_ms = [1500, 2500]
kind = "crash"
target = "broker-0"
restart_after_ms = [100, 300]
recrash_after_ms = [0, 5]
recrash_level = "process"

[[faults]]
at_ms = 3000
kind = "corrupt"
target = "broker-0"

[expect]
violated = ["lost-write"]
may_violate = { "at-least-once" = "the lost values never reach the consumer" }
"#;

fn error_of(text: &str) -> String {
    parse("t.toml", text)
        .expect_err("must be rejected")
        .to_string()
}

#[test]
fn a_valid_file_loads_with_typed_configs_and_faults() {
    let scenario = parse("t.toml", GOOD).expect("valid");
    assert_eq!(
        scenario.producers[0].config.acks,
        seedlog::config::Acks::All
    );
    assert_eq!(scenario.producers[0].partitions, 2);
    assert_eq!(scenario.consumers[0].partitions.len(), 2);
    assert_eq!(
        scenario.faults[0].action,
        FaultAction::Crash {
            target: "broker-0".into(),
            level: CrashLevel::PowerLoss,
            restart_after_ms: Some(TimeSpec::Fixed(500)),
            recrash: None,
        }
    );
    assert_eq!(scenario.faults[1].at_ms, TimeSpec::Range(1500, 2500));
    assert_eq!(
        scenario.faults[1].action,
        FaultAction::Crash {
            target: "broker-0".into(),
            level: CrashLevel::Process,
            restart_after_ms: Some(TimeSpec::Range(100, 300)),
            recrash: Some(Recrash {
                after_ms: TimeSpec::Range(0, 5),
                level: CrashLevel::Process
            }),
        }
    );
    assert_eq!(
        scenario.faults[2].action,
        FaultAction::Corrupt {
            target: "broker-0".into(),
            files: FileSelector::Segments
        }
    );
    assert!(scenario.expect.violated.contains(&Check::LostWrite));
    assert_eq!(
        scenario.expect.may_violate[&Check::AtLeastOnce],
        "the lost values never reach the consumer"
    );
}

#[test]
fn bad_ranges_and_allowances_without_a_reason_are_rejected() {
    let text = GOOD.replace("at_ms = [1500, 2500]", "at_ms = [2500, 1500]");
    assert!(
        error_of(&text).contains("low <= high"),
        "{}",
        error_of(&text)
    );
    let text = GOOD.replace("at_ms = [1500, 2500]", "at_ms = [1500, 9000]");
    assert!(error_of(&text).contains("after the end of the safety phase"));
    let text = GOOD.replace(r#""the lost values never reach the consumer""#, r#""""#);
    assert!(error_of(&text).contains("say why 'at-least-once' may be violated"));
    let text = GOOD.replace("restart_after_ms = [100, 300]\n", "");
    assert!(error_of(&text).contains("recrash_after_ms needs restart_after_ms"));
}

#[test]
fn an_unknown_key_is_reported_at_its_line() {
    let text = GOOD.replace("duration_ms = 5000", "duration_ms = 5000\nduraton_ms = 3");
    let error = error_of(&text);
    assert!(
        error.starts_with("t.toml:5: unknown field `duraton_ms`"),
        "{error}"
    );
}

#[test]
fn keys_the_simulator_sets_are_refused_in_a_scenario() {
    for key in ["listeners", "process.roles", "controller.listener.names"] {
        let text = GOOD.replace(
            r#"config = { "log.flush.interval.messages" = 1 }"#,
            &format!(r#"config = {{ "{key}" = "x" }}"#),
        );
        let error = error_of(&text);
        assert!(
            error.contains(&format!("'{key}' is set by the simulator")),
            "{key}: {error}"
        );
    }
}

#[test]
fn a_bad_kafka_config_value_is_reported_with_kafkas_reason() {
    let text = GOOD.replace(r#""acks" = "all""#, r#""acks" = "2""#);
    let error = error_of(&text);
    assert!(
        error.starts_with("t.toml:17: invalid value '2' for 'acks'"),
        "{error}"
    );
    let text = GOOD
        .replace(r#""acks" = "all""#, r#""acks" = "1""#)
        .replace(
            r#""enable.idempotence" = false"#,
            r#""enable.idempotence" = true"#,
        );
    assert!(
        error_of(&text).contains("Must set acks to all in order to use the idempotent producer"),
        "explicit idempotence needs acks=all, as Kafka's ProducerConfig says: {}",
        error_of(&text)
    );
}

#[test]
fn an_unknown_fault_target_or_misplaced_field_is_rejected() {
    let text = GOOD.replace(r#"target = "broker-0""#, r#"target = "broker-7""#);
    assert!(
        error_of(&text).starts_with("t.toml:28: unknown node 'broker-7'"),
        "{}",
        error_of(&text)
    );
    let text = GOOD.replace("restart_after_ms = 500", "heal_after_ms = 500");
    let error = error_of(&text);
    assert!(
        error.starts_with(
            "t.toml:30: unknown field `heal_after_ms` for fault kind `crash`, expected one of \
             `at_ms`, `kind`, `target`, `level`, `restart_after_ms`, `recrash_after_ms`, \
             `recrash_level`"
        ),
        "{error}"
    );
    let text = GOOD.replace(r#"level = "power-loss""#, r#"level = "meteor""#);
    assert!(error_of(&text).contains("unknown crash level 'meteor'"));
}

#[test]
fn unknown_checks_topics_and_replication_are_rejected() {
    assert!(error_of(&GOOD.replace(
        r#"violated = ["lost-write"]"#,
        r#"violated = ["lost-writes"]"#
    ))
    .contains("unknown check 'lost-writes'"));
    assert!(
        error_of(&GOOD.replace(r#"topic = "orders""#, r#"topic = "order""#))
            .contains("unknown topic 'order'")
    );
    assert!(error_of(&GOOD.replace("brokers = 1", "brokers = 10")).starts_with("t.toml:7:"));
    assert!(
        error_of(&GOOD.replace("brokers = 1", "brokers = 3\ncontrollers = 0"))
            .contains("several brokers need a controller")
    );
    assert!(
        error_of(&GOOD.replace("brokers = 1", "brokers = 3\ncontrollers = 6"))
            .contains("controllers must be 0 to 5")
    );
    assert!(error_of(&GOOD.replace(
        r#"may_violate = { "at-least-once""#,
        r#"may_violate = { "lost-write""#
    ))
    .contains("both"));
}

#[test]
fn selectors_name_declared_partitions_and_resolve_when_the_fault_fires() {
    let text = GOOD.replace(
        "target = \"broker-0\"\nlevel = \"power-loss\"",
        "target = \"leader(orders-1)\"\nlevel = \"power-loss\"",
    );
    let scenario = parse("t.toml", &text).expect("valid");
    let FaultAction::Crash { target, .. } = &scenario.faults[0].action else {
        panic!("a crash");
    };
    assert_eq!(
        Selector::parse(target),
        Some(Selector::Leader("orders-1".into()))
    );
    assert_eq!(
        Selector::parse("isr(a-0)"),
        Some(Selector::Isr("a-0".into()))
    );
    assert_eq!(
        Selector::parse("followers(a-0)"),
        Some(Selector::Followers("a-0".into()))
    );
    assert_eq!(Selector::parse("broker-0"), None);
    let text = GOOD.replace(
        "target = \"broker-0\"\nlevel",
        "target = \"leader(orders-7)\"\nlevel",
    );
    assert!(error_of(&text).contains("'leader(orders-7)' names no declared partition"));
    let text = GOOD.replace(
        "target = \"broker-0\"\nlevel",
        "target = \"controller-leader\"\nlevel",
    );
    assert!(error_of(&text).contains("'controller-leader' needs a controller"));
    let text = GOOD.replace(
        "target = \"broker-0\"\nlevel",
        "target = \"leaders(orders-0)\"\nlevel",
    );
    assert!(error_of(&text).contains("or a selector: leader(P)"));
}

#[test]
fn a_corrupt_fault_selects_files_by_prefix_or_by_prefix_and_suffix() {
    let text = GOOD.replace(
        "kind = \"corrupt\"\ntarget = \"broker-0\"\n",
        "kind = \"corrupt\"\ntarget = \"broker-0\"\nfiles = \"orders-*.log\"\n",
    );
    let scenario = parse("t.toml", &text).expect("valid");
    let FaultAction::Corrupt { files, .. } = &scenario.faults[2].action else {
        panic!("a corrupt fault: {:?}", scenario.faults[2].action);
    };
    assert!(files.matches("orders-0/00000000000000000000.log"));
    assert!(!files.matches("orders-0/00000000000000000012.snapshot"));
    assert!(!files.matches("audit-0/00000000000000000000.log"));
    let overlapping = FileSelector::Pattern {
        prefix: "ab".into(),
        suffix: "bc".into(),
    };
    assert!(
        !overlapping.matches("abc"),
        "prefix and suffix may not overlap"
    );
    assert!(
        FileSelector::Prefix("orders-".into()).matches("orders-0/00000000000000000012.snapshot")
    );
}

#[test]
fn coordinator_of_a_group_is_the_leader_of_its_offsets_partition() {
    // "g" hashes to 103 (Java's String.hashCode): partition 103 % 50 = 3 with the default 50
    let text = GOOD.replace(
        "target = \"broker-0\"\nlevel",
        "target = \"coordinator(g)\"\nlevel",
    );
    let scenario = parse("t.toml", &text).expect("valid");
    let FaultAction::Crash { target, .. } = &scenario.faults[0].action else {
        panic!("a crash");
    };
    assert_eq!(target, "leader(__consumer_offsets-3)");
    let text = GOOD.replace(
        "target = \"broker-0\"\nlevel",
        "target = \"leader(__consumer_offsets-49)\"\nlevel",
    );
    assert!(
        parse("t.toml", &text).is_ok(),
        "the offsets topic's partitions are selectable"
    );
    let text = GOOD.replace(
        "target = \"broker-0\"\nlevel",
        "target = \"coordinator()\"\nlevel",
    );
    assert!(error_of(&text).contains("'coordinator()' names no group"));
}

#[test]
fn a_slow_disk_needs_an_ordered_latency_range_and_a_broker() {
    let crash =
        "kind = \"crash\"\ntarget = \"broker-0\"\nlevel = \"power-loss\"\nrestart_after_ms = 500";
    let slow = |fields: &str| GOOD.replacen(crash, &format!("kind = \"slow_disk\"\n{fields}"), 1);
    let scenario = parse(
        "t.toml",
        &slow("target = \"broker-0\"\nfsync_latency_us = [10, 20]\nheal_after_ms = 300"),
    )
    .expect("valid");
    assert!(matches!(
        &scenario.faults[0].action,
        FaultAction::SlowDisk { target, fsync_latency_us: (10, 20), heal_after_ms: Some(_) }
            if target == "broker-0"
    ));
    assert!(error_of(&slow("target = \"broker-0\"")).contains("needs 'fsync_latency_us"));
    assert!(
        error_of(&slow("target = \"broker-0\"\nfsync_latency_us = [20, 10]"))
            .contains("min <= max")
    );
    assert!(
        error_of(&slow("target = \"c1\"\nfsync_latency_us = [10, 20]"))
            .contains("targets a broker")
    );
    assert!(error_of(&slow(
        "target = \"broker-0\"\nfsync_latency_us = [1, 2]\nlevel = \"process\""
    ))
    .contains("unknown field `level` for fault kind `slow_disk`"));
}

#[test]
fn a_full_disk_needs_a_free_bytes_range_and_a_broker() {
    let crash =
        "kind = \"crash\"\ntarget = \"broker-0\"\nlevel = \"power-loss\"\nrestart_after_ms = 500";
    let full = |fields: &str| GOOD.replacen(crash, &format!("kind = \"disk_full\"\n{fields}"), 1);
    let scenario = parse(
        "t.toml",
        &full("target = \"broker-0\"\nfree_bytes = [0, 4096]\nheal_after_ms = 300"),
    )
    .expect("valid");
    assert!(matches!(
        &scenario.faults[0].action,
        FaultAction::DiskFull { target, free_bytes: (0, 4096), heal_after_ms: Some(_) }
            if target == "broker-0"
    ));
    assert!(error_of(&full("target = \"broker-0\"")).contains("needs 'free_bytes"));
    assert!(error_of(&full("target = \"broker-0\"\nfree_bytes = [9, 1]")).contains("min <= max"));
    assert!(error_of(&full("target = \"c1\"\nfree_bytes = [0, 1]")).contains("targets a broker"));
    assert!(error_of(&full(
        "target = \"broker-0\"\nfree_bytes = [0, 1]\nfail_writes = 1"
    ))
    .contains("unknown field `fail_writes` for fault kind `disk_full`"));
}

#[test]
fn a_clock_skew_takes_a_signed_ordered_range_and_any_node() {
    let crash =
        "kind = \"crash\"\ntarget = \"broker-0\"\nlevel = \"power-loss\"\nrestart_after_ms = 500";
    let skew = |fields: &str| GOOD.replacen(crash, &format!("kind = \"clock_skew\"\n{fields}"), 1);
    let scenario = parse(
        "t.toml",
        &skew("target = \"c1\"\noffset_ms = [-5_000, 60_000]"),
    )
    .expect("valid");
    assert!(matches!(
        &scenario.faults[0].action,
        FaultAction::ClockSkew { target, offset_ms: (-5_000, 60_000), heal_after_ms: None }
            if target == "c1"
    ));
    assert!(error_of(&skew("target = \"c1\"")).contains("needs 'offset_ms"));
    assert!(error_of(&skew("target = \"c1\"\noffset_ms = [10, -10]")).contains("min <= max"));
    assert!(error_of(&skew("target = \"nobody\"\noffset_ms = [0, 1]")).contains("nobody"));
    assert!(error_of(&skew(
        "target = \"c1\"\noffset_ms = [0, 1]\nfree_bytes = [0, 1]"
    ))
    .contains("unknown field `free_bytes` for fault kind `clock_skew`"));
}

#[test]
fn a_delay_spike_takes_an_ordered_latency_range_and_no_target() {
    let crash =
        "kind = \"crash\"\ntarget = \"broker-0\"\nlevel = \"power-loss\"\nrestart_after_ms = 500";
    let delay = |fields: &str| GOOD.replacen(crash, &format!("kind = \"delay\"\n{fields}"), 1);
    let scenario = parse(
        "t.toml",
        &delay("latency_ms = [100, 900]\nheal_after_ms = [1, 2]"),
    )
    .expect("valid");
    assert!(matches!(
        scenario.faults[0].action,
        FaultAction::Delay {
            latency_ms: (100, 900),
            heal_after_ms: Some(_)
        }
    ));
    assert!(error_of(&delay("heal_after_ms = 5")).contains("needs 'latency_ms"));
    assert!(error_of(&delay("latency_ms = [9, 1]")).contains("min <= max"));
    assert!(
        error_of(&delay("latency_ms = [1, 9]\ntarget = \"broker-0\""))
            .contains("unknown field `target` for fault kind `delay`")
    );
}

#[test]
fn a_compacted_workload_topic_is_refused_at_its_config() {
    let text = GOOD.replace(
        r#"config = { "flush.messages" = 1 }"#,
        r#"config = { "flush.messages" = 1, "cleanup.policy" = "compact,delete" }"#,
    );
    let error = error_of(&text);
    assert!(
        error.starts_with("t.toml:13: topic 'orders': cleanup.policy=compact is not supported"),
        "{error}"
    );
}

/// The `[[faults]]` entries of `text` alone, or the error.
fn faults_of(text: &str) -> Result<Vec<RawFault>, String> {
    parse_faults(&Loader {
        file: "t.toml",
        source: text,
    })
    .map_err(|error| error.to_string())
}

#[test]
fn each_kind_takes_the_fields_its_table_lists_and_no_other() {
    // `fields_of` reads the names from each kind's `Deserialize` impl; serde must then accept
    // exactly those keys (with any value: an unknown key is refused before its value is read).
    let every_field: BTreeSet<&str> = FaultKind::names()
        .iter()
        .flat_map(|name| {
            fields_of(FaultKind::from_name(name).expect("a kind"))
                .iter()
                .copied()
        })
        .chain(["bogus"])
        .collect();
    assert_eq!(every_field.len(), 21 + 1, "{every_field:?}");
    for name in FaultKind::names() {
        let kind = FaultKind::from_name(name).expect("a kind");
        for field in &every_field {
            let text = format!("[[faults]]\nat_ms = 0\nkind = \"{name}\"\n{field} = 0\n");
            let refused = faults_of(&text).is_err_and(|error| {
                error.starts_with(&format!(
                    "t.toml:4: unknown field `{field}` for fault kind `{name}`"
                ))
            });
            assert_eq!(refused, !fields_of(kind).contains(field), "{name}: {field}");
        }
    }
}

#[test]
fn the_kinds_are_the_documented_ones() {
    let names = FaultKind::names().join(", ");
    assert_eq!(
        names,
        "crash, restart, stop, partition, isolate, pause, clog, drop_request, drop_response, \
         reset_mid_response, reject_request, disk_fault, slow_disk, disk_full, clock_skew, \
         delay, corrupt, heal"
    );
    assert_eq!(
        FaultKind::from_name("drop_request"),
        Some(FaultKind::DropRequest)
    );
    assert_eq!(FaultKind::from_name("DropRequest"), None);
    let error = faults_of("[[faults]]\nat_ms = 0\nkind = \"meteor\"\n").expect_err("unknown");
    assert_eq!(
        error,
        format!("t.toml:3: unknown fault kind 'meteor' ({names})")
    );
}

#[test]
fn fault_entries_keep_the_line_of_each_error() {
    let error = faults_of("[[faults]]\nkind = \"heal\"\n").expect_err("no at_ms");
    assert_eq!(error, "t.toml:1: missing field `at_ms`");
    let error = faults_of("\n[[faults]]\nat_ms = \"x\"\nkind = \"heal\"\n").expect_err("bad");
    assert!(error.starts_with("t.toml:3: data did not match"), "{error}");
    let error = faults_of("[[faults]]\nat_ms = 1\nkind = 3\n").expect_err("bad kind");
    assert!(
        error.starts_with("t.toml:3: invalid type: integer `3`"),
        "{error}"
    );
    let error =
        faults_of("[[faults]]\nat_ms = 1\nkind = \"crash\"\n\nlevel = 3\n").expect_err("bad level");
    assert!(
        error.starts_with("t.toml:5: invalid type: integer `3`"),
        "{error}"
    );
    let error =
        faults_of("[[faults]]\nat_ms = 1\nkind = \"clog\"\nfrom = \"a\"\n").expect_err("no to");
    assert_eq!(error, "t.toml:3: a 'clog' fault needs 'to'");
    let error =
        faults_of("[[faults]]\nat_ms = 1\nkind = \"clock_skew\"\ntarget = \"a\"\n").expect_err("");
    assert_eq!(
        error,
        "t.toml:3: a 'clock_skew' fault needs 'offset_ms = [min, max]' (milliseconds, negative: \
         behind)"
    );
    let error =
        faults_of("[[faults]]\nat_ms = 1\nkind = \"heal\"\ntarget = \"a\"\n").expect_err("");
    assert_eq!(
        error,
        "t.toml:4: unknown field `target` for fault kind `heal`, expected one of `at_ms`, `kind`"
    );
    let error = faults_of("faults = 3\n").expect_err("not an array");
    assert_eq!(error, "t.toml:1: faults is an array of tables ([[faults]])");
    let error = faults_of("faults = [1]\n").expect_err("not a table");
    assert_eq!(error, "t.toml:1: a [[faults]] entry is a table");
    let inline = faults_of("faults = [{ at_ms = 1, kind = \"heal\" }]\n").expect("inline");
    assert!(matches!(
        inline[..],
        [RawFault {
            fields: FaultFields::Heal(_),
            ..
        }]
    ));
}
