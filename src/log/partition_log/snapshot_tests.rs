//! The producer-state snapshot files of a log: written at a roll, read back on a restart with
//! only the headers past them walked, never trusted past what they describe, removed by
//! truncation and retention.

use super::*;
use crate::log::producer_state::snapshot::snapshot_name;
use crate::protocol::record_batch::{build_batch, stamp_producer, validate_batch};
use crate::storage::memory::{CrashLevel, MemoryStorage};
use crate::storage::StorageFile;

/// Four batches of two records a segment.
const SEGMENT_BYTES: u64 = 400;

fn open(storage: &MemoryStorage, recovery_point: i64) -> PartitionLog<MemoryStorage> {
    open_with(storage, recovery_point, SEGMENT_BYTES)
}

/// Opens the log `t-0` (no flush policy, `segment_bytes` segments); the other test modules use
/// it too.
pub(super) fn open_with(
    storage: &MemoryStorage,
    recovery_point: i64,
    segment_bytes: u64,
) -> PartitionLog<MemoryStorage> {
    let config = LogConfig {
        segment_bytes,
        index_interval_bytes: 100,
        flush_messages: i64::MAX,
        flush_ms: None,
        segment_ms: i64::MAX,
        compacted: false,
    };
    let (log, report) =
        PartitionLog::open(storage.clone(), "t-0", config, recovery_point, Millis(0))
            .expect("open");
    assert!(report.corruption.is_none(), "{report:?}");
    log
}

/// The batches a log was given, as stored, and the producer state they make.
#[derive(Default)]
struct Written {
    headers: Vec<RecordBatchHeader>,
}

impl Written {
    /// Appends a batch of `count` records of `producer_id` (epoch 0) at `sequence`.
    fn append(
        &mut self,
        log: &mut PartitionLog<MemoryStorage>,
        producer_id: i64,
        sequence: i32,
        count: usize,
    ) -> AppendInfo {
        let records = vec![(None, Some(b"value".as_slice())); count];
        let batch = build_batch(&records, 1_000 + self.headers.len() as i64);
        let mut batch = stamp_producer(&batch, producer_id, 0, sequence).to_vec();
        let header = validate_batch(&batch).expect("valid");
        let info = log.append(&mut batch, &header, 0).expect("append");
        self.headers.push(validate_batch(&batch).expect("stored"));
        info
    }

    /// Three producers taking turns, `rounds` batches each, two records a batch.
    fn rounds(&mut self, log: &mut PartitionLog<MemoryStorage>, rounds: i32) {
        let first = self.headers.len() as i32 / 3;
        for round in first..first + rounds {
            for producer_id in 1..=3 {
                self.append(log, producer_id, round * 2, 2);
            }
        }
    }

    /// The producer state of every batch below `end`, rebuilt from each header.
    fn states_below(&self, end: i64) -> ProducerStates {
        let mut states = ProducerStates::default();
        for header in self
            .headers
            .iter()
            .filter(|header| header.base_offset < end)
        {
            states.update(header);
        }
        states
    }

    fn batches_from(&self, offset: i64) -> u64 {
        self.headers
            .iter()
            .filter(|header| header.base_offset >= offset)
            .count() as u64
    }
}

/// A log opened on `storage` with `rounds` rounds of batches written to it (see
/// [`Written::rounds`]).
fn written_rounds(storage: &MemoryStorage, rounds: i32) -> (PartitionLog<MemoryStorage>, Written) {
    let mut log = open(storage, 0);
    let mut written = Written::default();
    written.rounds(&mut log, rounds);
    (log, written)
}

/// The reopened `log` (ending at `end`) loads the state `written` left below `end` from the
/// snapshot at `snapshot`, after deleting `invalid` invalid ones, walking only the headers
/// past it.
fn assert_loaded_from(
    log: &mut PartitionLog<MemoryStorage>,
    written: &Written,
    end: i64,
    snapshot: i64,
    invalid: u64,
) {
    assert_eq!(
        log.load_producer_states().expect("load"),
        &written.states_below(end)
    );
    assert_eq!(
        log.producer_state_load(),
        Some(ProducerStateLoad {
            snapshot_offset: Some(snapshot),
            invalid_snapshots: invalid,
            batches_walked: written.batches_from(snapshot),
        })
    );
}

fn flush(storage: &MemoryStorage, log: &mut PartitionLog<MemoryStorage>) {
    let (sync, mark) = log.start_flush(Millis(0)).expect("something to flush");
    sync.complete_now(storage).expect("sync");
    log.flush_completed(mark);
}

fn snapshot_files(storage: &MemoryStorage) -> Vec<i64> {
    storage
        .list("t-0/")
        .expect("list")
        .iter()
        .filter_map(|name| crate::log::producer_state::snapshot::parse_snapshot_name("t-0", name))
        .collect()
}

fn segment_bases(log: &PartitionLog<MemoryStorage>) -> Vec<i64> {
    log.segments.keys().copied().collect()
}

/// A retry: the same producer, epoch and sequences as `header`.
fn retry_of(header: &RecordBatchHeader) -> RecordBatchHeader {
    RecordBatchHeader {
        base_offset: 0,
        ..*header
    }
}

#[test]
fn a_roll_writes_a_snapshot_and_a_reopened_log_walks_only_the_headers_past_it() {
    let storage = MemoryStorage::new();
    let (mut log, written) = written_rounds(&storage, 4);
    let bases = segment_bases(&log);
    assert!(bases.len() >= 3, "small segments roll: {bases:?}");
    assert_eq!(
        log.snapshot_offsets(),
        bases[1..].to_vec(),
        "a snapshot at every rolled segment's base"
    );
    assert_eq!(snapshot_files(&storage), bases[1..].to_vec());
    for offset in &bases[1..] {
        let file = storage
            .open(&snapshot_name("t-0", *offset))
            .expect("snapshot");
        let mut bytes = vec![0; file.len().expect("len") as usize];
        file.read_exact_at(&mut bytes, 0).expect("read");
        assert_eq!(
            ProducerStates::from_snapshot(&bytes, *offset).expect("valid"),
            written.states_below(*offset),
            "the snapshot at {offset} describes every batch below it"
        );
    }
    flush(&storage, &mut log);
    let end = log.log_end_offset();
    drop(log);

    let mut log = open(&storage, end);
    let newest = *bases.last().expect("segments");
    assert_loaded_from(&mut log, &written, end, newest, 0);
    assert!(written.batches_from(newest) < written.headers.len() as u64);
}

#[test]
fn a_torn_or_garbled_snapshot_is_ignored_and_the_state_is_still_right() {
    let storage = MemoryStorage::new();
    let (mut log, written) = written_rounds(&storage, 4);
    flush(&storage, &mut log);
    let end = log.log_end_offset();
    let snapshots = log.snapshot_offsets();
    assert!(snapshots.len() >= 2, "{snapshots:?}");
    drop(log);
    let [.., older, newest] = snapshots[..] else {
        unreachable!("two snapshots at least")
    };
    let garbled = storage
        .open(&snapshot_name("t-0", newest))
        .expect("snapshot");
    garbled.write_all_at(&[0x5a], 20).expect("a flipped byte");

    let mut log = open(&storage, end);
    assert_loaded_from(&mut log, &written, end, older, 1);
    assert!(
        !snapshot_files(&storage).contains(&newest),
        "the garbled file is deleted"
    );
    let (sync, _) = log.start_flush(Millis(0)).expect("the deletion");
    assert!(sync.directories.contains(&"t-0".to_owned()));
    drop(log);

    // Torn to nothing but its header, or cut mid-entry: every snapshot left is invalid.
    for (index, offset) in snapshot_files(&storage).into_iter().enumerate() {
        let file = storage.open(&snapshot_name("t-0", offset)).expect("open");
        let len = if index % 2 == 0 { 10 } else { 33 };
        file.set_len(len).expect("tear");
    }
    let mut log = open(&storage, end);
    assert_eq!(
        log.load_producer_states().expect("load"),
        &written.states_below(end)
    );
    let load = log.producer_state_load().expect("loaded");
    assert_eq!(load.snapshot_offset, None, "a walk of every header");
    assert_eq!(load.batches_walked, written.headers.len() as u64);
    assert!(snapshot_files(&storage).is_empty());
}

#[test]
fn a_snapshot_past_the_log_end_after_a_power_loss_is_ignored_and_removed() {
    let storage = MemoryStorage::new();
    let (mut log, mut written) = written_rounds(&storage, 2);
    flush(&storage, &mut log);
    let durable = log.log_end_offset();
    written.rounds(&mut log, 3);
    let (before, past): (Vec<i64>, Vec<i64>) = log
        .snapshot_offsets()
        .into_iter()
        .partition(|offset| *offset <= durable);
    assert!(!past.is_empty(), "rolls past the flush");
    // The snapshots reach the disk, the records they describe do not (their fsync never ran).
    for offset in log.snapshot_offsets() {
        let file = storage.open(&snapshot_name("t-0", offset)).expect("open");
        file.begin_sync().finish().expect("sync");
    }
    storage
        .begin_directory_sync("t-0")
        .finish()
        .expect("sync the directory");
    drop(log);
    storage.crash(CrashLevel::PowerLoss, &mut |_| 0);

    let mut log = open(&storage, durable);
    assert_eq!(log.log_end_offset(), durable, "the tail is lost");
    assert_eq!(log.snapshot_offsets(), before);
    assert_eq!(
        snapshot_files(&storage),
        before,
        "the later ones are deleted"
    );
    assert_eq!(
        log.load_producer_states().expect("load"),
        &written.states_below(durable)
    );
    assert_eq!(
        log.producer_state_load().expect("loaded").snapshot_offset,
        before.last().copied()
    );
}

/// Kafka trusts a snapshot at or below the log end; seedlog only one at or below the recovery
/// point it opens with. Here a follower truncates below a snapshot, writes new batches past it
/// and loses power before any directory sync: the snapshot's removal is undone while the new
/// batches' pages happened to reach the disk.
#[test]
fn a_snapshot_past_the_recovery_point_is_not_trusted_after_its_removal_was_lost() {
    let storage = MemoryStorage::new();
    let mut log = open_with(&storage, 0, 1 << 20); // one segment: no roll, no new file
    let mut written = Written::default();
    written.append(&mut log, 1, 0, 2);
    written.append(&mut log, 1, 2, 2);
    assert!(
        log.maybe_take_snapshot().expect("snapshot"),
        "at the log end, 4"
    );
    assert!(
        !log.maybe_take_snapshot().expect("snapshot"),
        "one is there already"
    );
    flush(&storage, &mut log);
    let (cut, _) = log.truncate_to(2).expect("truncate").expect("cut");
    assert_eq!(log.snapshot_offsets(), Vec::<i64>::new());
    assert!(cut.directories.contains(&"t-0".to_owned()), "the removal");
    written.headers.truncate(1);
    written.append(&mut log, 2, 0, 2);
    written.append(&mut log, 2, 2, 2);
    drop(log);
    storage.crash(CrashLevel::PowerLoss, &mut |_| 1); // every pending sector survives
    assert_eq!(snapshot_files(&storage), vec![4], "the removal was lost");

    let mut log = open_with(&storage, 2, 1 << 20);
    assert_eq!(log.log_end_offset(), 6, "the new batches survived");
    assert!(
        snapshot_files(&storage).is_empty(),
        "past the recovery point: deleted"
    );
    let states = log.load_producer_states().expect("load");
    assert_eq!(states, &written.states_below(6));
    assert!(
        states
            .find_duplicate(&retry_of(&written.headers[0]))
            .is_some(),
        "producer 1's first batch is still in the log"
    );
    let mut gone = written.headers[0];
    gone.base_sequence = 2;
    assert_eq!(
        states.find_duplicate(&gone),
        None,
        "its second batch was cut"
    );
}

#[test]
fn truncation_removes_the_snapshots_past_the_new_end() {
    let storage = MemoryStorage::new();
    let (mut log, mut written) = written_rounds(&storage, 4);
    flush(&storage, &mut log);
    let snapshots = log.snapshot_offsets();
    assert!(snapshots.len() >= 2, "{snapshots:?}");
    let kept = snapshots[0];
    // Inside the segment at `kept`: its second batch goes.
    let (sync, mark) = log.truncate_to(kept + 3).expect("truncate").expect("cut");
    let end = log.log_end_offset();
    assert_eq!(end, kept + 2);
    assert_eq!(log.snapshot_offsets(), vec![kept]);
    assert_eq!(snapshot_files(&storage), vec![kept]);
    assert!(sync.directories.contains(&"t-0".to_owned()));
    sync.complete_now(&storage).expect("sync");
    log.flush_completed(mark);
    log.check_invariants();
    assert_eq!(
        log.load_producer_states().expect("load"),
        &written.states_below(end)
    );
    assert_eq!(
        log.producer_state_load().expect("loaded").snapshot_offset,
        Some(kept)
    );
    written.headers.retain(|header| header.base_offset < end);

    // A truncation onto a snapshot's offset keeps it: it describes what is below.
    log.truncate_to(kept).expect("truncate").expect("cut");
    assert_eq!(log.log_end_offset(), kept);
    assert_eq!(log.snapshot_offsets(), vec![kept]);
}

#[test]
fn retention_keeps_the_newest_snapshot_at_or_below_the_log_start_and_removes_older_ones() {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    let mut written = Written::default();
    // Producer 9 writes only into the first segment: retention takes all its batches.
    let gone = written.append(&mut log, 9, 0, 1);
    written.rounds(&mut log, 5);
    flush(&storage, &mut log);
    let bases = segment_bases(&log);
    assert!(bases.len() >= 4, "{bases:?}");
    assert!(gone.last_offset < bases[1]);

    log.delete_segments_below(bases[2]).expect("retention");
    assert_eq!(log.log_start_offset(), bases[2]);
    assert_eq!(log.snapshot_offsets(), bases[2..].to_vec());
    assert_eq!(snapshot_files(&storage), bases[2..].to_vec());
    flush(&storage, &mut log);
    let end = log.log_end_offset();
    drop(log);

    let mut log = open(&storage, end);
    let states = log.load_producer_states().expect("load");
    assert!(
        states
            .find_duplicate(&retry_of(&written.headers[0]))
            .is_some(),
        "a producer whose batches all went with retention is still known after a restart"
    );
    assert_eq!(states, &written.states_below(end));

    // Without a snapshot at the new start (say it was torn), the newest one below it stays,
    // though its segment went: it is all that still knows the oldest producers.
    log.remove_snapshot(bases[3]).expect("remove");
    log.delete_segments_below(bases[3] + 1)
        .expect("DeleteRecords");
    assert_eq!(log.log_start_offset(), bases[3] + 1);
    assert_eq!(segment_bases(&log)[0], bases[3]);
    assert_eq!(log.snapshot_offsets()[0], bases[2]);
    assert_eq!(snapshot_files(&storage)[0], bases[2]);
}

#[test]
fn a_retry_of_a_batch_written_before_a_restart_is_still_found_after_reopening() {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    let mut written = Written::default();
    let mut sequence = 0;
    while log.segment_count() < 3 {
        written.append(&mut log, 7, sequence, 1);
        sequence += 1;
    }
    // Two more after the roll: the last five batches straddle the snapshot at the roll.
    for _ in 0..2 {
        written.append(&mut log, 7, sequence, 1);
        sequence += 1;
    }
    let snapshot = *log.snapshot_offsets().last().expect("rolled");
    let end = log.log_end_offset();
    assert_eq!(written.batches_from(snapshot), 3);
    // A clean shutdown: a snapshot at the log end, synced with the last flush.
    assert!(log.maybe_take_snapshot().expect("snapshot"));
    flush(&storage, &mut log);
    drop(log);
    storage.crash(CrashLevel::PowerLoss, &mut |_| 0);

    let mut log = open(&storage, end);
    let states = log.load_producer_states().expect("load");
    let last_five = &written.headers[written.headers.len() - 5..];
    for header in last_five {
        let found = states
            .find_duplicate(&retry_of(header))
            .expect("a duplicate");
        assert_eq!(found.first_offset, header.base_offset);
    }
    let sixth = &written.headers[written.headers.len() - 6];
    assert_eq!(
        states.find_duplicate(&retry_of(sixth)),
        None,
        "five retained"
    );
    assert_eq!(
        log.producer_state_load(),
        Some(ProducerStateLoad {
            snapshot_offset: Some(end),
            invalid_snapshots: 0,
            batches_walked: 0,
        }),
        "read from the snapshot at the log end alone"
    );
}
