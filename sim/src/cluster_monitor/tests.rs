//! The monitor on hand-written event sequences: each invariant fires on the smallest history
//! that breaks it, and stays silent on the same history made correct.

use super::*;

fn tp() -> TopicPartition {
    TopicPartition::new("t".to_owned(), 0)
}

fn monitor() -> ClusterMonitor {
    ClusterMonitor::new(
        (0..3)
            .map(|index| (format!("broker-{index}"), BrokerId(index)))
            .collect(),
    )
}

fn appended(base: i64, last: i64, epoch: i32, crc: u32) -> BrokerEvent {
    BrokerEvent::Appended {
        partition: tp(),
        base_offset: base,
        last_offset: last,
        leader_epoch: epoch,
        crc,
    }
}

fn hw(offset: i64) -> BrokerEvent {
    BrokerEvent::HighWatermark {
        partition: tp(),
        offset,
    }
}

fn truncated(from: i64) -> BrokerEvent {
    BrokerEvent::Truncated {
        partition: tp(),
        from_offset: from,
        reason: "test".to_owned(),
    }
}

fn state(leader: i32, epoch: i32, isr: &[i32]) -> BrokerEvent {
    BrokerEvent::PartitionState {
        partition: tp(),
        leader: BrokerId(leader),
        leader_epoch: epoch,
        replicas: vec![BrokerId(0), BrokerId(1), BrokerId(2)],
        isr: isr.iter().copied().map(BrokerId).collect(),
    }
}

/// Runs `(node, event)` pairs; returns the checks that fired, in order.
fn run(monitor: &mut ClusterMonitor, events: &[(usize, BrokerEvent)]) -> Vec<Check> {
    events
        .iter()
        .flat_map(|(node, event)| monitor.on_event(&format!("broker-{node}"), event))
        .map(|violation| violation.check)
        .collect()
}

/// Broker 0 leads epoch 1 with ISR {0, 1}; both hold batches [0..=4] and [5..=9].
fn replicated() -> Vec<(usize, BrokerEvent)> {
    vec![
        (0, state(0, 1, &[0, 1])),
        (1, state(0, 1, &[0, 1])),
        (0, appended(0, 4, 1, 10)),
        (1, appended(0, 4, 1, 10)),
        (0, appended(5, 9, 1, 11)),
        (1, appended(5, 9, 1, 11)),
        (0, hw(10)),
        (1, hw(10)),
    ]
}

#[test]
fn a_correct_replication_breaks_nothing() {
    assert_eq!(run(&mut monitor(), &replicated()), vec![]);
}

#[test]
fn a_leader_outside_its_isr_or_a_member_outside_the_replicas_breaks_leader_in_isr() {
    let mut monitor = monitor();
    assert_eq!(
        run(&mut monitor, &[(0, state(0, 1, &[1]))]),
        vec![Check::LeaderInIsr]
    );
    assert_eq!(
        run(&mut monitor, &[(0, state(0, 2, &[0, 7]))]),
        vec![Check::LeaderInIsr]
    );
    assert_eq!(run(&mut monitor, &[(0, state(-1, 3, &[1]))]), vec![]);
}

#[test]
fn a_high_watermark_past_an_isr_members_log_end_breaks_hw_within_isr() {
    let mut monitor = monitor();
    let mut events = replicated();
    events.insert(5, (0, hw(10))); // before broker 1 has [5..=9]
    assert_eq!(run(&mut monitor, &events), vec![Check::HwWithinIsr]);
}

#[test]
fn an_isr_member_with_other_batches_below_the_high_watermark_breaks_strong_isr() {
    let mut events = replicated();
    events[5] = (1, appended(5, 9, 1, 99));
    assert_eq!(run(&mut monitor(), &events), vec![Check::StrongIsr]);
}

#[test]
fn a_crashed_leader_presumes_nothing() {
    let mut monitor = monitor();
    let mut events = replicated();
    events.truncate(6); // broker 1 has everything, no HW yet
    run(&mut monitor, &events);
    monitor.down("broker-0");
    // A follower's truncation below the dead leader's stale state breaks nothing.
    assert_eq!(run(&mut monitor, &[(1, truncated(5))]), vec![]);
}

#[test]
fn truncating_the_last_copy_of_a_committed_batch_breaks_committed_lost() {
    let mut monitor = monitor();
    run(&mut monitor, &replicated());
    // Broker 0 goes; broker 1 is elected and cut back (a power loss): one copy is left.
    monitor.down("broker-0");
    assert_eq!(run(&mut monitor, &[(1, truncated(5))]), vec![]);
    // Broker 0 comes back and truncates to the new leader: the last copy of [5..=9] goes.
    assert_eq!(
        run(&mut monitor, &[(0, truncated(5))]),
        vec![Check::CommittedLost]
    );
}

#[test]
fn a_leader_committing_other_records_at_a_committed_offset_breaks_committed_lost() {
    let mut monitor = monitor();
    run(&mut monitor, &replicated());
    monitor.down("broker-0");
    let events = [
        (1, truncated(5)),
        (1, state(1, 2, &[1])),
        (1, appended(5, 7, 2, 42)),
        (1, hw(8)),
    ];
    assert_eq!(run(&mut monitor, &events), vec![Check::CommittedLost]);
}

#[test]
fn a_clean_failover_breaks_nothing() {
    let mut monitor = monitor();
    run(&mut monitor, &replicated());
    monitor.down("broker-0");
    let events = [
        (1, state(1, 2, &[1])),
        (1, appended(10, 12, 2, 50)),
        (1, hw(13)),
        // Broker 0 returns with its whole log, follows, catches up and rejoins.
        (0, truncated(10)),
        (0, hw(10)),
        (0, state(1, 2, &[1])),
        (0, appended(10, 12, 2, 50)),
        (1, state(1, 2, &[0, 1])),
        (0, state(1, 2, &[0, 1])),
        (0, hw(13)),
    ];
    assert_eq!(run(&mut monitor, &events), vec![]);
}
