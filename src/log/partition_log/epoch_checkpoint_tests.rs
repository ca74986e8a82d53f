//! The `leader-epoch-checkpoint` file: a reopened log reads its epochs from it and walks only
//! the batches past the recovery point; a torn file is set aside; and whatever a power loss
//! leaves, the cache a reopened log loads is the one its batch headers make.

use proptest::prelude::*;

use super::*;
use crate::log::leader_epochs::LEADER_EPOCH_CHECKPOINT;
use crate::protocol::record_batch::{build_batch, validate_batch};
use crate::storage::memory::{CrashLevel, MemoryStorage};
use crate::storage::StorageFile;

/// About three batches a segment.
const SEGMENT_BYTES: u64 = 250;
const CHECKPOINT: &str = "t-0/leader-epoch-checkpoint";

fn open(storage: &MemoryStorage, recovery_point: i64) -> PartitionLog<MemoryStorage> {
    super::snapshot_tests::open_with(storage, recovery_point, SEGMENT_BYTES)
}

/// Appends one batch of one record written by the leader of `epoch`.
fn append(log: &mut PartitionLog<MemoryStorage>, epoch: i32) {
    let batch = build_batch(&[(None, Some(b"value".as_slice()))], 1_000);
    let mut batch = batch.to_vec();
    let header = validate_batch(&batch).expect("valid");
    log.append(&mut batch, &header, epoch).expect("append");
}

fn flush(storage: &MemoryStorage, log: &mut PartitionLog<MemoryStorage>) {
    if let Some((sync, mark)) = log.start_flush(Millis(0)) {
        sync.complete_now(storage).expect("sync");
        log.flush_completed(mark);
    }
}

/// The cache every batch header of the log makes (what seedlog built before the file).
fn from_every_header(log: &PartitionLog<MemoryStorage>) -> LeaderEpochCache {
    let mut cache = LeaderEpochCache::default();
    for segment in log.segments.values() {
        segment
            .batch_epochs(|epoch, base| {
                cache.assign(epoch, base);
            })
            .expect("walk");
    }
    cache.truncate_from_start(log.log_start_offset());
    cache
}

fn checkpoint_text(storage: &MemoryStorage) -> String {
    let file = storage.open(CHECKPOINT).expect("open");
    let mut bytes = vec![0; file.len().expect("len") as usize];
    file.read_exact_at(&mut bytes, 0).expect("read");
    String::from_utf8(bytes).expect("text")
}

#[test]
fn a_reopened_log_reads_its_epochs_from_the_checkpoint_and_walks_only_past_the_recovery_point() {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    log.load_leader_epochs().expect("built");
    assert!(
        storage
            .list("t-0/")
            .expect("list")
            .iter()
            .all(|name| !name.ends_with(LEADER_EPOCH_CHECKPOINT)),
        "building the cache writes nothing: only a change does"
    );
    for epoch in [0, 0, 2, 2, 2, 5, 5] {
        append(&mut log, epoch);
    }
    log.start_leader_epoch(7).expect("epoch");
    assert_eq!(checkpoint_text(&storage), "0\n4\n0 0\n2 2\n5 5\n7 7\n");
    flush(&storage, &mut log);
    let durable = log.recovery_point();
    append(&mut log, 7);
    append(&mut log, 7);
    assert!(log.segment_count() > 2, "the epochs span segments");
    let expected = log.leader_epochs().expect("built").clone();
    drop(log);
    storage.crash(CrashLevel::Process, &mut |_| 0);

    let log = open(&storage, durable);
    let load = log.leader_epoch_load().expect("loaded on open");
    assert_eq!(load.checkpoint_below, Some(durable));
    assert_eq!(load.invalid_checkpoint, None);
    assert_eq!(
        load.batches_walked, 2,
        "the two batches past the recovery point"
    );
    assert_eq!(log.leader_epochs(), Some(&expected));
    assert_eq!(log.leader_epochs(), Some(&from_every_header(&log)));
}

#[test]
fn an_epoch_started_at_the_log_end_with_no_batch_is_gone_after_a_restart() {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    log.load_leader_epochs().expect("built");
    append(&mut log, 1);
    log.start_leader_epoch(4).expect("epoch");
    flush(&storage, &mut log);
    let end = log.log_end_offset();
    drop(log);

    // As Kafka's loader cuts the cache at the log end: no batch holds epoch 4 yet.
    let log = open(&storage, end);
    assert_eq!(log.leader_epochs().expect("loaded").entries(), &[(1, 0)]);
    assert_eq!(
        checkpoint_text(&storage),
        "0\n1\n1 0\n",
        "rewritten as loaded"
    );
}

#[test]
fn a_torn_checkpoint_is_set_aside_and_the_epochs_come_from_every_batch() {
    for garbage in [
        &b""[..],
        b"0\n3\n0 0\n",
        b"\0\0\0\0\0\0\0\0",
        b"0\n2\n0 0\n1 x\n",
    ] {
        let storage = MemoryStorage::new();
        let mut log = open(&storage, 0);
        log.load_leader_epochs().expect("built");
        for epoch in [0, 1, 1, 3] {
            append(&mut log, epoch);
        }
        flush(&storage, &mut log);
        let end = log.log_end_offset();
        drop(log);
        let file = storage.open(CHECKPOINT).expect("open");
        file.set_len(0).expect("cut");
        file.write_all_at(garbage, 0).expect("write");

        let log = open(&storage, end);
        let load = log.leader_epoch_load().expect("loaded on open");
        assert!(load.invalid_checkpoint.is_some(), "{garbage:?}");
        assert_eq!(load.checkpoint_below, None);
        assert_eq!(
            log.leader_epochs().expect("loaded").entries(),
            &[(0, 0), (1, 1), (3, 3)]
        );
        assert_eq!(
            checkpoint_text(&storage),
            "0\n3\n0 0\n1 1\n3 3\n",
            "written anew"
        );
    }
}

#[test]
fn the_flush_after_a_change_syncs_the_checkpoint_and_a_power_loss_before_it_loses_nothing_durable()
{
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    log.load_leader_epochs().expect("built");
    append(&mut log, 0);
    let (sync, mark) = log.start_flush(Millis(0)).expect("a flush");
    assert!(
        sync.files.len() == 2 && sync.directories.contains(&"t-0".to_owned()),
        "the segment, the checkpoint and the directory its rename changed: {sync:?}"
    );
    sync.complete_now(&storage).expect("sync");
    log.flush_completed(mark);
    let durable = log.recovery_point();
    append(&mut log, 3); // a new epoch, never flushed
    drop(log);
    storage.crash(CrashLevel::PowerLoss, &mut |_| 0); // no unsynced byte survives

    let log = open(&storage, durable);
    assert_eq!(log.leader_epochs().expect("loaded").entries(), &[(0, 0)]);
}

/// One step of a replica's life.
#[derive(Debug, Clone)]
enum Step {
    /// A batch of the leader epoch so many epochs past the newest.
    Append(i32),
    /// This replica leads a new epoch.
    Lead,
    /// A follower drops the last so many offsets; its truncation's flush completes.
    Truncate(i64),
    /// A flush of everything appended.
    Flush,
    /// Retention moves the log start to the first offset of the second segment, if any.
    Retain,
    /// The process crashes and the log reopens at its recovery point.
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..3i32).prop_map(Step::Append),
        1 => Just(Step::Lead),
        1 => (1..6i64).prop_map(Step::Truncate),
        3 => Just(Step::Flush),
        1 => Just(Step::Retain),
        1 => Just(Step::Restart),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Whatever a power loss keeps of the unsynced bytes and names, the cache a reopened log
    /// loads (from the checkpoint and the batches past its recovery point) is the one every
    /// batch header it kept makes.
    #[test]
    fn after_a_power_loss_the_loaded_epochs_are_those_of_the_batches(
        steps in proptest::collection::vec(step(), 1..40),
        survivors in proptest::collection::vec(any::<u64>(), 64),
    ) {
        let storage = MemoryStorage::new();
        let mut log = open(&storage, 0);
        log.load_leader_epochs().expect("built");
        let mut epoch = 0;
        for step in steps {
            match step {
                Step::Append(ahead) => {
                    epoch += ahead;
                    append(&mut log, epoch);
                }
                Step::Lead => {
                    epoch += 1;
                    log.start_leader_epoch(epoch).expect("epoch");
                }
                Step::Truncate(back) => {
                    let to = (log.log_end_offset() - back).max(log.recovery_point().min(log.log_start_offset()));
                    if let Some((sync, mark)) = log.truncate_to(to).expect("truncate") {
                        sync.complete_now(&storage).expect("sync");
                        log.flush_completed(mark);
                    }
                }
                Step::Flush => flush(&storage, &mut log),
                Step::Retain => {
                    if let Some(second) = log.segments.keys().nth(1).copied() {
                        if second <= log.recovery_point() {
                            log.delete_segments_below(second).expect("retention");
                        }
                    }
                }
                Step::Restart => {
                    let durable = log.recovery_point();
                    drop(log);
                    storage.crash(CrashLevel::Process, &mut |_| 0);
                    log = open(&storage, durable);
                    log.load_leader_epochs().expect("loaded");
                    prop_assert_eq!(log.leader_epochs(), Some(&from_every_header(&log)));
                }
            }
        }
        let durable = log.recovery_point();
        let start = log.log_start_offset();
        drop(log);
        let mut draws = survivors.into_iter().cycle();
        storage.crash(CrashLevel::PowerLoss, &mut |bound| draws.next().expect("cycle") % bound);
        let mut log = open(&storage, durable.max(start));
        log.load_leader_epochs().expect("loaded");
        prop_assert_eq!(log.leader_epochs(), Some(&from_every_header(&log)));
    }
}

/// A replica that led epoch 1 without appending keeps epoch 1's entry at its log end. Its new
/// leader never had epoch 1 and answers a diverging epoch ending past that log end: the cut
/// changes no batch but must drop the entry, or the replica would send epoch 1 as its last
/// fetched epoch for ever and never rejoin the ISR (Kafka's `UnifiedLog.truncateTo`).
#[test]
fn a_cut_at_the_log_end_drops_an_epoch_that_starts_there() {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    log.start_leader_epoch(0).expect("epoch 0");
    append(&mut log, 0);
    append(&mut log, 0);
    log.start_leader_epoch(1)
        .expect("epoch 1, nothing appended");
    let end = log.log_end_offset();
    let epochs =
        |log: &PartitionLog<MemoryStorage>| log.leader_epochs().expect("built").entries().to_vec();
    assert_eq!(epochs(&log), vec![(0, 0), (1, end)]);
    assert!(log.truncate_to(end + 5).expect("no cut").is_none());
    assert_eq!(epochs(&log), vec![(0, 0)], "the empty epoch's entry goes");
    assert_eq!(log.log_end_offset(), end, "no batch goes");
    flush(&storage, &mut log);
    assert_eq!(
        checkpoint_text(&storage),
        "0\n1\n0 0\n",
        "and the checkpoint says so"
    );
}
