use super::*;
use crate::protocol::record_batch::{build_batch, validate_batch};
use crate::storage::memory::{CrashLevel, MemoryFile, MemoryStorage};
use crate::storage::StorageFile;

fn config(segment_bytes: u64, flush_messages: i64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 100,
        flush_messages,
        flush_ms: None,
        segment_ms: i64::MAX,
        compacted: false,
    }
}

fn open(
    storage: &MemoryStorage,
    segment_bytes: u64,
    recovery_point: i64,
) -> (PartitionLog<MemoryStorage>, RecoveryReport) {
    PartitionLog::open(
        storage.clone(),
        "t-0",
        config(segment_bytes, i64::MAX),
        recovery_point,
        Millis(0),
    )
    .expect("open")
}

fn append_value(log: &mut PartitionLog<MemoryStorage>, value: &str) -> AppendInfo {
    let mut batch = build_batch(&[(None, Some(value.as_bytes()))], 1).to_vec();
    let header = validate_batch(&batch).expect("valid");
    log.append(&mut batch, &header, 0).expect("append")
}

fn flush(storage: &MemoryStorage, log: &mut PartitionLog<MemoryStorage>) {
    let (sync, mark) = log.start_flush(Millis(0)).expect("something to flush");
    sync.complete_now(storage).expect("sync");
    log.flush_completed(mark);
}

fn file_names(files: &[MemoryFile]) -> Vec<String> {
    files.iter().map(|file| format!("{file:?}")).collect()
}

/// The log's segment files (not its producer-state snapshots), in offset order.
fn segment_names(storage: &MemoryStorage) -> Vec<String> {
    let names = storage.list("t-0/").expect("list");
    names
        .into_iter()
        .filter(|name| parse_segment_name("t-0", name).is_some())
        .collect()
}

#[test]
fn offsets_are_assigned_in_order_across_segment_rolls_and_survive_reopen() {
    let storage = MemoryStorage::new();
    let (mut log, _) = open(&storage, 200, 0);
    for index in 0..10 {
        let info = append_value(&mut log, &format!("value-{index}"));
        assert_eq!(info.base_offset, index);
        assert!(!info.flush_required);
    }
    assert!(log.segment_count() > 1, "200-byte segments must roll");
    log.check_invariants();
    let LogRead::Records { len, .. } = log.read(4, 10, 1).expect("read") else {
        panic!("records expected")
    };
    assert!(
        len > 0,
        "the first batch is returned even above max_bytes (KIP-74)"
    );
    assert!(matches!(
        log.read(10, 10, 1000).expect("read"),
        LogRead::Empty
    ));
    assert!(matches!(
        log.read(11, 10, 1000).expect("read"),
        LogRead::OutOfRange
    ));
    drop(log);
    let (log, report) = open(&storage, 200, 0);
    assert_eq!(log.log_end_offset(), 10);
    assert_eq!(report.batches, 10);
    assert_eq!(report.truncated_bytes, 0);
}

#[test]
fn recovery_truncates_a_torn_tail_past_the_recovery_point() {
    let storage = MemoryStorage::new();
    let (mut log, _) = open(&storage, 1 << 20, 0);
    for index in 0..3 {
        append_value(&mut log, &format!("value-{index}"));
    }
    drop(log);
    let file = storage
        .open("t-0/00000000000000000000.log")
        .expect("segment");
    let len = file.len().expect("len");
    file.set_len(len - 5).expect("tear");
    let (log, report) = open(&storage, 1 << 20, 0);
    assert_eq!(log.log_end_offset(), 2, "the torn third batch is gone");
    assert!(report.truncated_bytes > 0);
    assert!(report.corruption.is_none());
}

#[test]
fn corruption_below_the_recovery_point_is_reported_and_nothing_is_deleted() {
    let storage = MemoryStorage::new();
    let (mut log, _) = open(&storage, 150, 0);
    for index in 0..6 {
        append_value(&mut log, &format!("value-{index}"));
    }
    let segments = log.segment_count();
    assert!(segments >= 3);
    drop(log);
    // The last segment holds the recovery point, so start-up scans it.
    let files = storage.list("t-0/").expect("list");
    let names = segment_names(&storage);
    let name = names.last().expect("segments").as_str();
    let file = storage.open(name).expect("segment");
    let len = file.len().expect("len");
    file.set_len(len - 5)
        .expect("a bad tail below the recovery point");
    let (log, report) = open(&storage, 150, 6);
    let corruption = report.corruption.expect("reported");
    assert!(
        corruption.contains("below the recovery point 6"),
        "{corruption}"
    );
    assert_eq!(report.deleted_segments, 0);
    assert_eq!(report.truncated_bytes, 0);
    assert_eq!(segment_names(&storage).len(), segments);
    assert_eq!(
        storage.list("t-0/").expect("list"),
        files,
        "every file kept, the producer-state snapshots too"
    );
    assert_eq!(
        storage.open(name).expect("open").len().expect("len"),
        len - 5,
        "not truncated"
    );
    assert!(log.log_end_offset() < 6);
}

#[test]
fn segments_below_the_recovery_point_are_not_scanned_and_read_lazily() {
    let storage = MemoryStorage::new();
    let (mut log, _) = open(&storage, 150, 0);
    for index in 0..6 {
        append_value(&mut log, &format!("value-{index}"));
    }
    drop(log);
    let (log, report) = open(&storage, 150, 6);
    assert!(report.unscanned_segments >= 2, "{report:?}");
    assert_eq!(log.log_end_offset(), 6);
    assert!(matches!(
        log.read(0, 6, 1 << 20).expect("read"),
        LogRead::Records { .. }
    ));
    assert_eq!(
        log.offset_for_timestamp(1).expect("time index"),
        Some((0, 1))
    );
    // Garbage in an unscanned segment's header is found on read, never skipped.
    let file = storage
        .open("t-0/00000000000000000000.log")
        .expect("segment");
    file.write_all_at(&[0xff; 4], 8)
        .expect("corrupt the batch length");
    assert!(matches!(log.read(0, 6, 1 << 20), Err(LogError::Corrupt(_))));
}

#[test]
fn a_log_that_ends_below_the_recovery_point_is_corrupt() {
    let storage = MemoryStorage::new();
    let (mut log, _) = open(&storage, 1 << 20, 0);
    append_value(&mut log, "only");
    drop(log);
    let (_, report) = open(&storage, 1 << 20, 5);
    assert!(report
        .corruption
        .expect("reported")
        .contains("below the recovery point 5"));
}

#[test]
fn the_flush_policy_asks_for_an_fsync_every_flush_messages() {
    let storage = MemoryStorage::new();
    let (mut log, _) =
        PartitionLog::open(storage.clone(), "t-0", config(1 << 20, 2), 0, Millis(0)).expect("open");
    assert!(!append_value(&mut log, "a").flush_required);
    assert!(append_value(&mut log, "b").flush_required);
    let (sync, mark) = log.start_flush(Millis(5)).expect("dirty");
    assert_eq!((sync.files.len(), mark.offset), (1, 2));
    assert_eq!(
        sync.directories,
        vec![String::new(), "t-0".to_owned()],
        "a new log's entries"
    );
    sync.complete_now(&storage).expect("sync");
    log.flush_completed(mark);
    assert_eq!(log.recovery_point(), 2);
    assert!(log.start_flush(Millis(6)).is_none(), "everything durable");
    assert!(!append_value(&mut log, "c").flush_required);
}

#[test]
fn a_flush_covers_every_segment_past_the_recovery_point_and_the_new_entry() {
    let storage = MemoryStorage::new();
    let (mut log, _) = open(&storage, 150, 0);
    append_value(&mut log, "first");
    flush(&storage, &mut log);
    append_value(&mut log, "second");
    let (older, _) = log.start_flush(Millis(0)).expect("in flight");
    assert_eq!(file_names(&older.files).len(), 1);
    while log.segment_count() == 1 {
        append_value(&mut log, "rolls");
    }
    let (newer, mark) = log.start_flush(Millis(0)).expect("in flight");
    let base = log.snapshot_offsets()[0];
    assert_eq!(
        file_names(&newer.files),
        vec![
            "MemoryFile(t-0/00000000000000000000.log)".to_owned(),
            format!("MemoryFile(t-0/{base:020}.log)"),
            format!("MemoryFile(t-0/{base:020}.snapshot)"),
        ],
        "the new segment's flush also syncs the old one, and the roll's snapshot"
    );
    assert_eq!(
        newer.directories,
        vec!["t-0".to_owned()],
        "the rolled segment's entry"
    );
    newer.complete_now(&storage).expect("sync");
    log.flush_completed(mark);
    storage.crash(CrashLevel::PowerLoss, &mut |_| 0);
    let (log, report) = open(&storage, 150, mark.offset);
    assert!(report.corruption.is_none(), "{report:?}");
    assert_eq!(
        log.log_end_offset(),
        mark.offset,
        "nothing durable was lost"
    );
}

#[test]
fn bytes_recovered_after_a_process_crash_are_not_taken_as_durable() {
    let storage = MemoryStorage::new();
    let (mut log, _) = open(&storage, 1 << 20, 0);
    append_value(&mut log, "durable");
    flush(&storage, &mut log);
    append_value(&mut log, "in the page cache only");
    drop(log);
    storage.crash(CrashLevel::Process, &mut |_| unreachable!());
    let (mut log, _) = open(&storage, 1 << 20, 1);
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(
        log.recovery_point(),
        1,
        "the recovered tail is not durable yet"
    );
    let (sync, mark) = log.start_flush(Millis(0)).expect("the tail needs an fsync");
    assert_eq!(sync.files.len(), 1);
    assert_eq!(mark.offset, 2);
}

#[test]
fn a_torn_gap_between_segments_past_the_recovery_point_deletes_the_later_ones() {
    let storage = MemoryStorage::new();
    let (mut log, _) = open(&storage, 150, 0);
    for index in 0..6 {
        append_value(&mut log, &format!("value-{index}"));
    }
    drop(log);
    let names = segment_names(&storage);
    storage.remove(&names[1]).expect("a segment vanished");
    let (log, report) = open(&storage, 150, 0);
    assert_eq!(report.deleted_segments as usize, names.len() - 2);
    assert!(report.corruption.is_none());
    let (sync, _) = {
        let mut log = log;
        log.start_flush(Millis(0))
            .expect("the deletions need a directory sync")
    };
    assert!(sync.directories.contains(&"t-0".to_owned()));
}

#[test]
fn a_segment_fills_to_exactly_segment_bytes_and_rolls_on_the_next_byte() {
    let batch_len = build_batch(&[(None, Some(b"v0".as_slice()))], 1).len() as u64;
    let storage = MemoryStorage::new();
    let (mut log, _) = open(&storage, 3 * batch_len, 0);
    for index in 0..3 {
        append_value(&mut log, &format!("v{index}"));
    }
    assert_eq!(log.segment_count(), 1, "three batches fill it exactly");
    append_value(&mut log, "v3");
    assert_eq!(log.segment_count(), 2, "the fourth rolls a new segment");
    let storage = MemoryStorage::new();
    let (mut log, _) = open(&storage, 10, 0);
    append_value(&mut log, "a batch above segment.bytes");
    assert_eq!(log.segment_count(), 1, "an empty segment takes any batch");
    append_value(&mut log, "b");
    assert_eq!(log.segment_count(), 2);
    log.check_invariants();
}

#[test]
fn timestamp_lookups_answer_records_inside_multi_record_batches() {
    use crate::protocol::record_batch::BatchBuilder;
    let storage = MemoryStorage::new();
    let (mut log, _) = open(&storage, 1 << 20, 0);
    // Offsets 0..=3 carry timestamps 10, 30, 30, 20; offsets 4..=5 carry 5, 25.
    for timestamps in [&[10, 30, 30, 20][..], &[5, 25][..]] {
        let mut builder = BatchBuilder::default();
        for &timestamp in timestamps {
            builder.push(timestamp, None, Some(b"v"));
        }
        let mut batch = builder.finish().to_vec();
        let header = validate_batch(&batch).expect("valid");
        log.append(&mut batch, &header, 0).expect("append");
    }
    assert_eq!(
        log.offset_of_max_timestamp().expect("read"),
        Some((1, 30)),
        "the first record with the largest timestamp, not its batch's last offset"
    );
    assert_eq!(log.offset_for_timestamp(15).expect("read"), Some((1, 30)));
    assert_eq!(log.offset_for_timestamp(21).expect("read"), Some((1, 30)));
    assert_eq!(log.offset_for_timestamp(5).expect("read"), Some((0, 10)));
    assert_eq!(log.offset_for_timestamp(31).expect("read"), None);
}

#[test]
fn a_batch_newer_than_segment_ms_past_the_first_batch_rolls_the_segment() {
    let storage = MemoryStorage::new();
    let config = LogConfig {
        segment_ms: 1000,
        ..config(1 << 20, i64::MAX)
    };
    let (mut log, _) = PartitionLog::open(storage, "t-0", config, 0, Millis(0)).expect("open");
    let mut append_at = |timestamp: i64| {
        let mut batch = build_batch(&[(None, Some(b"v".as_slice()))], timestamp).to_vec();
        let header = validate_batch(&batch).expect("valid");
        log.append(&mut batch, &header, 0).expect("append").rolled
    };
    assert_eq!(
        append_at(5_000),
        None,
        "the first batch of an empty segment"
    );
    assert_eq!(
        append_at(6_000),
        None,
        "exactly segment.ms later: not past it"
    );
    assert_eq!(append_at(4_000), None, "an older timestamp never rolls");
    assert_eq!(
        append_at(6_001),
        Some(3),
        "past segment.ms: a new segment at offset 3"
    );
    assert_eq!(
        append_at(7_000),
        None,
        "the new segment's first batch is 6,001"
    );
    assert_eq!(append_at(7_002), Some(5));
    assert_eq!(log.segment_count(), 3);
}

/// A follower's truncation (Kafka's `truncateTo`): whole batches from the one holding the
/// offset, later segments deleted, the recovery point lowered. Only the sync it asks for makes
/// it durable: without it a power loss brings the cut records back.
#[test]
fn truncation_cuts_whole_batches_deletes_later_segments_and_is_durable_once_synced() {
    for synced in [true, false] {
        let storage = MemoryStorage::new();
        let (mut log, _) = open(&storage, 200, 0);
        for index in 0..10 {
            append_value(&mut log, &format!("value-{index}"));
        }
        flush(&storage, &mut log);
        let segments = log.segment_count();
        assert!(segments > 2, "small segments roll");
        let (sync, mark) = log
            .truncate_to(4)
            .expect("truncates")
            .expect("something cut");
        assert_eq!(log.log_end_offset(), 4);
        assert_eq!(log.recovery_point(), 4);
        assert!(log.segment_count() < segments, "later segments are deleted");
        log.check_invariants();
        assert!(
            log.truncate_to(7).expect("nothing").is_none(),
            "past the end: no cut"
        );
        if synced {
            sync.complete_now(&storage).expect("sync");
            log.flush_completed(mark);
        }
        drop(log);
        storage.crash(CrashLevel::PowerLoss, &mut |_| 0);
        let (mut log, _) = open(&storage, 200, 0);
        let expected = if synced { 4 } else { 10 };
        assert_eq!(log.log_end_offset(), expected, "synced: {synced}");
        if synced {
            assert_eq!(
                append_value(&mut log, "new-4").base_offset,
                4,
                "the offset is reused"
            );
        }
    }
}

/// A flush started before a truncation synced bytes that may since have been cut and
/// replaced: its completion vouches for nothing past the truncation point.
#[test]
fn a_flush_from_before_a_truncation_does_not_vouch_for_what_replaced_the_cut() {
    let storage = MemoryStorage::new();
    let (mut log, _) = open(&storage, 1 << 20, 0);
    for index in 0..6 {
        append_value(&mut log, &format!("value-{index}"));
    }
    let (old_sync, old_mark) = log.start_flush(Millis(0)).expect("unflushed data");
    let (cut_sync, cut_mark) = log.truncate_to(4).expect("truncates").expect("cut");
    append_value(&mut log, "new-4");
    append_value(&mut log, "new-5");
    old_sync.complete_now(&storage).expect("sync");
    log.flush_completed(old_mark);
    assert_eq!(log.recovery_point(), 4, "capped at the truncation");
    cut_sync.complete_now(&storage).expect("sync");
    log.flush_completed(cut_mark);
    assert_eq!(log.recovery_point(), 4);
    flush(&storage, &mut log);
    assert_eq!(log.recovery_point(), 6);
}

/// `slice` answers as a walk from the segment's first byte does, whether it starts from an index
/// entry, from one of the newest batches it remembers, or from the start.
#[test]
fn a_slice_from_any_offset_is_what_a_walk_from_the_first_batch_finds() {
    let storage = MemoryStorage::new();
    let config = LogConfig {
        // One index entry: a read past the newest batches walks from the first one.
        index_interval_bytes: 1 << 20,
        ..config(1 << 20, i64::MAX)
    };
    let (mut log, _) =
        PartitionLog::open(storage.clone(), "t-0", config, 0, Millis(0)).expect("open");
    for index in 0..40 {
        append_value(&mut log, &"v".repeat(1 + index % 7));
    }
    let segment = log.active_segment();
    let mut batches = Vec::new();
    segment
        .batch_headers(|header| batches.push(*header))
        .expect("headers");
    let walked = |start: i64, end: i64, max: u64| {
        let (mut position, mut first) = (0u64, None);
        for header in &batches {
            if header.base_offset >= end {
                break;
            }
            let size = header.size_bytes() as u64;
            match first {
                None if header.last_offset() >= start => first = Some(position),
                Some(at) if position + size - at > max => break,
                _ => {}
            }
            position += size;
        }
        first.map(|at| (at, position - at))
    };
    for start in -1..=42 {
        for end in [start + 1, start + 3, 40, 41] {
            for max in [1, 150, 1 << 20] {
                assert_eq!(
                    segment.slice(start, end, max).expect("slice"),
                    walked(start, end, max),
                    "slice({start}, {end}, {max})"
                );
            }
        }
    }
}
