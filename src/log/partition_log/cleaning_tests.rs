//! The cleaner on a partition log: what a compacted log keeps, tombstones and their delete
//! horizon, a follower copying a compacted leader, and recovery after a power loss at every
//! step of the swap.

use std::collections::BTreeMap;

use super::*;
use crate::log::cleaner::CleanerConfig;
use crate::protocol::record_batch::{build_batch, decode_records, split_batches, validate_batch};
use crate::storage::memory::{CrashLevel, MemoryStorage};
use crate::storage::StorageFile;

fn extension(name: &str) -> &str {
    std::path::Path::new(name)
        .extension()
        .and_then(|extension| extension.to_str())
        .unwrap_or_default()
}

fn compacted(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 100,
        flush_messages: i64::MAX,
        flush_ms: None,
        segment_ms: i64::MAX,
        compacted: true,
    }
}

fn open(storage: &MemoryStorage, recovery_point: i64) -> PartitionLog<MemoryStorage> {
    let (log, report) = PartitionLog::open(
        storage.clone(),
        "c-0",
        compacted(300),
        recovery_point,
        Millis(0),
    )
    .expect("open");
    assert_eq!(report.corruption, None);
    log
}

/// Appends one record per entry, one batch each (`None` value: a tombstone).
fn append(log: &mut PartitionLog<MemoryStorage>, entries: &[(&str, Option<&str>)]) {
    for (key, value) in entries {
        let mut batch =
            build_batch(&[(Some(key.as_bytes()), value.map(str::as_bytes))], 1_000).to_vec();
        let header = validate_batch(&batch).expect("valid");
        log.append(&mut batch, &header, 0).expect("append");
    }
}

fn flush_all(storage: &MemoryStorage, log: &mut PartitionLog<MemoryStorage>) {
    log.roll().expect("roll");
    if let Some((sync, mark)) = log.start_flush(Millis(0)) {
        sync.complete_now(storage).expect("sync");
        log.flush_completed(mark);
    }
}

fn cleaner(now_ms: i64) -> CleanerConfig {
    CleanerConfig {
        now_ms,
        delete_retention_ms: 500,
        min_compaction_lag_ms: 0,
    }
}

/// Starts a clean of everything flushed; answers the first step's sync, if any.
fn start(
    log: &mut PartitionLog<MemoryStorage>,
    now_ms: i64,
) -> Option<FlushSync<crate::storage::memory::MemoryFile>> {
    let config = cleaner(now_ms);
    let end = log
        .first_uncleanable_offset(log.recovery_point(), &config)
        .expect("end");
    log.start_clean(end, &config).expect("clean").1
}

/// Runs a whole clean, every sync completing at once.
fn clean(storage: &MemoryStorage, log: &mut PartitionLog<MemoryStorage>, now_ms: i64) {
    let mut sync = start(log, now_ms);
    while let Some(step) = sync {
        step.complete_now(storage).expect("sync");
        sync = log.clean_step_done(Ok(())).expect("step");
    }
    assert_eq!(log.clean_stage(), None);
    log.check_invariants();
}

/// The log read from its start to its end, one fetch-sized chunk of whole batches at a time.
fn chunks(log: &PartitionLog<MemoryStorage>) -> Vec<bytes::Bytes> {
    let mut chunks = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let LogRead::Records {
            file,
            position,
            len,
        } = log
            .read(offset, log.log_end_offset(), 1 << 20)
            .expect("read")
        else {
            break;
        };
        let mut bytes = vec![0; len as usize];
        file.read_exact_at(&mut bytes, position).expect("bytes");
        let bytes = bytes::Bytes::from(bytes);
        let batches = split_batches(&bytes).expect("batches");
        offset = batches.last().expect("a batch").0.last_offset() + 1;
        chunks.push(bytes);
    }
    chunks
}

/// Every record of the log: offset, key, value.
fn records(log: &PartitionLog<MemoryStorage>) -> Vec<(i64, String, Option<String>)> {
    let text = |bytes: &bytes::Bytes| String::from_utf8(bytes.to_vec()).expect("utf-8");
    chunks(log)
        .iter()
        .flat_map(|chunk| decode_records(chunk).expect("decode"))
        .map(|record| {
            (
                record.offset,
                text(&record.key.expect("a key")),
                record.value.as_ref().map(text),
            )
        })
        .collect()
}

/// The latest record of each key in `all`, in offset order.
fn latest(all: &[(i64, String, Option<String>)]) -> Vec<(i64, String, Option<String>)> {
    let mut by_key = BTreeMap::new();
    for record in all {
        by_key.insert(record.1.clone(), record.clone());
    }
    let mut kept: Vec<_> = by_key.into_values().collect();
    kept.sort();
    kept
}

/// Forty writes to five keys over many segments.
fn workload(log: &mut PartitionLog<MemoryStorage>) {
    for index in 0..40 {
        let key = format!("k{}", index % 5);
        let value = format!("v{index}");
        append(log, &[(key.as_str(), Some(value.as_str()))]);
    }
}

#[test]
fn a_compacted_log_keeps_exactly_the_latest_record_of_each_key_at_its_offset() {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    workload(&mut log);
    flush_all(&storage, &mut log);
    let before = records(&log);
    assert_eq!(before.len(), 40);
    assert!(log.segment_count() > 5, "many segments to clean");
    let end = log.log_end_offset();
    clean(&storage, &mut log, 10_000);
    let after = records(&log);
    assert_eq!(after, latest(&before));
    assert_eq!(
        (log.log_start_offset(), log.log_end_offset()),
        (0, end),
        "the offsets stay"
    );
    assert!(log.size_bytes() < 40 * 70, "the segments shrank");
    // What the disk holds reads the same after a restart, and a second clean changes nothing.
    drop(log);
    let mut log = open(&storage, end);
    assert_eq!(records(&log), after);
    assert!(start(&mut log, 10_000).is_none(), "already clean");
    assert!(storage
        .list("c-0/")
        .expect("list")
        .iter()
        .all(|name| extension(name) == "log" || extension(name) == "snapshot"));
}

#[test]
fn new_writes_after_a_clean_supersede_the_cleaned_records() {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    workload(&mut log);
    flush_all(&storage, &mut log);
    clean(&storage, &mut log, 10_000);
    let mut all = records(&log);
    append(&mut log, &[("k1", Some("new")), ("k9", Some("only"))]);
    all.extend([
        (40, "k1".to_owned(), Some("new".to_owned())),
        (41, "k9".to_owned(), Some("only".to_owned())),
    ]);
    flush_all(&storage, &mut log);
    clean(&storage, &mut log, 10_000);
    assert_eq!(records(&log), latest(&all));
}

#[test]
fn a_tombstone_stays_until_delete_retention_ms_after_the_clean_that_kept_it() {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    append(
        &mut log,
        &[
            ("a", Some("1")),
            ("b", Some("2")),
            ("a", None),
            ("c", Some("3")),
        ],
    );
    flush_all(&storage, &mut log);
    clean(&storage, &mut log, 1_000);
    let kept = |log: &PartitionLog<MemoryStorage>| {
        records(log)
            .into_iter()
            .map(|(offset, key, value)| (offset, key, value.is_none()))
            .collect::<Vec<_>>()
    };
    let with_tombstone = vec![
        (1, "b".to_owned(), false),
        (2, "a".to_owned(), true),
        (3, "c".to_owned(), false),
    ];
    assert_eq!(
        kept(&log),
        with_tombstone,
        "the tombstone replaced a's value"
    );
    clean(&storage, &mut log, 1_499);
    assert_eq!(
        kept(&log),
        with_tombstone,
        "inside delete.retention.ms (500)"
    );
    clean(&storage, &mut log, 1_500);
    assert_eq!(
        kept(&log),
        vec![(1, "b".to_owned(), false), (3, "c".to_owned(), false)],
        "past the delete horizon"
    );
    assert_eq!(log.log_end_offset(), 4);
}

#[test]
fn min_compaction_lag_keeps_recent_segments_uncleaned() {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    workload(&mut log);
    flush_all(&storage, &mut log);
    let config = CleanerConfig {
        min_compaction_lag_ms: 1_000,
        ..cleaner(1_500)
    };
    let end = log.first_uncleanable_offset(log.recovery_point(), &config);
    assert_eq!(end.expect("end"), 0, "every record is younger than the lag");
    let config = CleanerConfig {
        min_compaction_lag_ms: 1_000,
        ..cleaner(10_000)
    };
    let end = log.first_uncleanable_offset(log.recovery_point(), &config);
    assert_eq!(end.expect("end"), log.log_end_offset());
}

#[test]
fn a_follower_copies_a_compacted_leader_across_its_gaps() {
    let storage = MemoryStorage::new();
    let mut leader = open(&storage, 0);
    workload(&mut leader);
    flush_all(&storage, &mut leader);
    clean(&storage, &mut leader, 10_000);
    let follower_disk = MemoryStorage::new();
    let mut follower = open(&follower_disk, 0);
    let mut offset = 0;
    while offset < leader.log_end_offset() {
        let LogRead::Records {
            file,
            position,
            len,
        } = leader
            .read(offset, leader.log_end_offset(), 150)
            .expect("read")
        else {
            break;
        };
        let mut bytes = vec![0; len as usize];
        file.read_exact_at(&mut bytes, position).expect("bytes");
        for (header, range) in split_batches(&bytes).expect("batches") {
            follower
                .append_as_follower(&bytes[range], &header)
                .expect("a batch past the log end is accepted");
            offset = header.last_offset() + 1;
        }
    }
    follower.check_invariants();
    assert_eq!(records(&follower), records(&leader));
    // A batch below the log end is still refused.
    let mut batch = build_batch(&[(Some(b"k".as_slice()), Some(b"v".as_slice()))], 1).to_vec();
    let header = validate_batch(&batch).expect("valid");
    crate::protocol::record_batch::assign_offsets(&mut batch, 0, 0);
    assert!(follower.append_as_follower(&batch, &header).is_err());
    // And the follower's log survives a restart (its gaps lie past its recovery point).
    follower.roll().expect("roll");
    drop(follower);
    let follower = open(&follower_disk, 0);
    assert_eq!(records(&follower), records(&leader));
}

#[test]
fn an_ordinary_log_still_calls_a_gap_damage() {
    let storage = MemoryStorage::new();
    let config = LogConfig {
        compacted: false,
        ..compacted(300)
    };
    let (mut log, _) =
        PartitionLog::open(storage.clone(), "d-0", config, 0, Millis(0)).expect("open");
    let mut batch = build_batch(&[(None, Some(b"v".as_slice()))], 1).to_vec();
    crate::protocol::record_batch::assign_offsets(&mut batch, 5, 0);
    let header = validate_batch(&batch).expect("valid");
    assert!(log.append_as_follower(&batch, &header).is_err());
}

/// Where a crash interrupts the clean: after `steps` completed syncs, and whether the next
/// step's renames already happened (they precede their sync).
fn crash_during_clean(steps: usize, level: CrashLevel, keep_sectors: bool) {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    workload(&mut log);
    flush_all(&storage, &mut log);
    let before = records(&log);
    let end = log.log_end_offset();
    let mut sync = start(&mut log, 10_000);
    for _ in 0..steps {
        let Some(step) = sync else { break };
        step.complete_now(&storage).expect("sync");
        sync = log.clean_step_done(Ok(())).expect("step");
    }
    let cleaned = log.clean_stage().is_none();
    drop(log);
    let mut chooser = |bound: u64| if keep_sectors { bound - 1 } else { 0 };
    storage.crash(level, &mut chooser);
    let log = open(&storage, end);
    log.check_invariants();
    let after = records(&log);
    assert_eq!(
        (log.log_start_offset(), log.log_end_offset()),
        (0, end),
        "steps {steps}: the offsets stay"
    );
    // Every latest record is there, at its offset; anything else is a superseded record.
    assert_eq!(latest(&after), latest(&before), "steps {steps}, {level:?}");
    assert!(after.iter().all(|record| before.contains(record)));
    if cleaned {
        assert_eq!(after, latest(&before), "a finished clean is durable");
    }
    assert!(
        storage
            .list("c-0/")
            .expect("list")
            .iter()
            .all(|name| extension(name) != "cleaned" && extension(name) != "swap"),
        "recovery leaves no clean's files"
    );
}

#[test]
fn a_crash_at_any_step_of_the_swap_keeps_every_latest_record() {
    for steps in 0..=3 {
        for level in [CrashLevel::Process, CrashLevel::PowerLoss] {
            for keep_sectors in [false, true] {
                crash_during_clean(steps, level, keep_sectors);
            }
        }
    }
}

#[test]
fn recovery_completes_a_durable_swap_and_drops_a_cleaned_file() {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    workload(&mut log);
    flush_all(&storage, &mut log);
    let before = records(&log);
    let end = log.log_end_offset();
    // Through step 2: the `.swap` files are durable, the segments not yet replaced.
    let sync = start(&mut log, 10_000).expect("a clean");
    sync.complete_now(&storage).expect("sync");
    let sync = log.clean_step_done(Ok(())).expect("step").expect("step 2");
    sync.complete_now(&storage).expect("sync");
    assert_eq!(log.clean_stage(), Some(CleanStage::Swapping));
    let swaps = storage.list("c-0/").expect("list");
    assert!(swaps.iter().any(|name| extension(name) == "swap"));
    // A stray `.cleaned` file, as a crash in step 1 leaves.
    let stray = storage.open(&cleaned_name("c-0", 0)).expect("open");
    stray.write_all_at(b"half a batch", 0).expect("write");
    drop(log);
    storage.crash(CrashLevel::PowerLoss, &mut |_| 0);
    let log = open(&storage, end);
    assert_eq!(records(&log), latest(&before), "the swap completed");
}

#[test]
fn a_truncation_aborts_the_clean_under_way() {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    workload(&mut log);
    flush_all(&storage, &mut log);
    let sync = start(&mut log, 10_000).expect("something to clean");
    sync.complete_now(&storage).expect("sync");
    log.truncate_to(10).expect("truncate");
    assert_eq!(log.clean_stage(), None);
    assert!(log.clean_step_done(Ok(())).expect("nothing").is_none());
    assert!(storage
        .list("c-0/")
        .expect("list")
        .iter()
        .all(|name| extension(name) != "cleaned" && extension(name) != "swap"));
    assert_eq!(log.log_end_offset(), 10);
}

#[test]
fn a_fetch_at_any_offset_of_a_compacted_log_starts_at_the_first_batch_past_it() {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    workload(&mut log);
    flush_all(&storage, &mut log);
    clean(&storage, &mut log, 10_000);
    let batches = batch_ranges(&log);
    assert!(batches.len() < 40, "batches went");
    for offset in 0..log.log_end_offset() {
        let LogRead::Records {
            file,
            position,
            len,
        } = log.read(offset, log.log_end_offset(), 1).expect("read")
        else {
            panic!("offset {offset}: nothing read below the log end")
        };
        let mut bytes = vec![0; len as usize];
        file.read_exact_at(&mut bytes, position).expect("bytes");
        let header = validate_batch(&bytes).expect("a whole batch");
        let expected = batches
            .iter()
            .find(|(_, last)| *last >= offset)
            .expect("a batch at or past every offset below the end");
        assert_eq!(
            (header.base_offset, header.last_offset()),
            *expected,
            "offset {offset}: the first batch reaching it"
        );
    }
}

/// `(base, last)` offsets of every batch of the log.
fn batch_ranges(log: &PartitionLog<MemoryStorage>) -> Vec<(i64, i64)> {
    chunks(log)
        .iter()
        .flat_map(|chunk| split_batches(chunk).expect("batches"))
        .map(|(header, _)| (header.base_offset, header.last_offset()))
        .collect()
}

#[test]
fn the_first_batch_of_each_leader_epoch_stays_as_an_empty_batch_so_the_epochs_survive_a_restart() {
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    let mut all = Vec::new();
    for (epoch, keys) in [(0, ["a", "b"]), (1, ["a", "b"]), (2, ["a", "b"])] {
        log.start_leader_epoch(epoch).expect("epoch");
        for key in keys {
            let value = format!("{key}{epoch}");
            let mut batch =
                build_batch(&[(Some(key.as_bytes()), Some(value.as_bytes()))], 1_000).to_vec();
            let header = validate_batch(&batch).expect("valid");
            let info = log.append(&mut batch, &header, epoch).expect("append");
            all.push((info.base_offset, key.to_owned(), Some(value)));
        }
    }
    flush_all(&storage, &mut log);
    let epochs = log.load_leader_epochs().expect("epochs").clone();
    assert_eq!(epochs.entries(), [(0, 0), (1, 2), (2, 4)]);
    clean(&storage, &mut log, 10_000);
    assert_eq!(records(&log), latest(&all), "only the latest records");
    assert_eq!(
        batch_ranges(&log),
        [(0, 0), (2, 2), (4, 4), (5, 5)],
        "empty batches at 0 and 2 hold their epochs' starts"
    );
    let end = log.log_end_offset();
    drop(log);
    let mut log = open(&storage, end);
    assert_eq!(log.load_leader_epochs().expect("epochs"), &epochs);
}

#[test]
fn batches_that_keep_some_records_keep_their_offsets_and_compressed_batches_stay_compressed() {
    use crate::protocol::compression::Codec;
    use crate::protocol::record_batch::BatchBuilder;
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    let mut all = Vec::new();
    for round in 0..6 {
        let mut builder = BatchBuilder::default();
        for (index, key) in ["a", "b", "c", "d"].iter().enumerate() {
            // Rounds rewrite a, b and c (the last only a); d only in the first.
            if (round > 0 && *key == "d") || (round == 5 && *key != "a") {
                continue;
            }
            let value = format!("{key}{round}");
            builder.push(
                1_000 + index as i64,
                Some(key.as_bytes()),
                Some(value.as_bytes()),
            );
            all.push((0, key.to_string(), Some(value)));
        }
        let codec = if round % 2 == 0 {
            Codec::Gzip
        } else {
            Codec::None
        };
        let mut batch = builder.finish_compressed(codec).to_vec();
        let header = validate_batch(&batch).expect("valid");
        let info = log.append(&mut batch, &header, 0).expect("append");
        let first = all.len() - (info.last_offset - info.base_offset + 1) as usize;
        for (offset, record) in (info.base_offset..).zip(&mut all[first..]) {
            record.0 = offset;
        }
    }
    flush_all(&storage, &mut log);
    clean(&storage, &mut log, 10_000);
    assert_eq!(records(&log), latest(&all));
    // The first batch kept only d, at offset 3, with its offsets 0..=3 and its codec (round 4's
    // kept b and c, compressed too).
    let LogRead::Records { file, position, .. } = log.read(0, 4, 1).expect("read") else {
        panic!("the first batch")
    };
    let mut head = vec![0; crate::protocol::record_batch::RECORD_BATCH_HEADER_BYTES];
    file.read_exact_at(&mut head, position).expect("header");
    let header = RecordBatchHeader::parse(&head).expect("header");
    assert_eq!(
        (
            header.base_offset,
            header.last_offset(),
            header.records_count
        ),
        (0, 3, 1)
    );
    assert_eq!(header.compression(), Codec::Gzip.id());
}

#[test]
fn an_idempotent_producers_last_batch_stays_as_an_empty_batch_so_its_sequence_survives() {
    use crate::protocol::record_batch::stamp_producer;
    let storage = MemoryStorage::new();
    let mut log = open(&storage, 0);
    let mut last = None;
    for sequence in 0..2 {
        let built = build_batch(&[(Some(b"a".as_slice()), Some(b"p".as_slice()))], 1_000);
        let mut batch = stamp_producer(&built, 7, 0, sequence).to_vec();
        let header = validate_batch(&batch).expect("valid");
        log.append(&mut batch, &header, 0).expect("append");
        last = Some(header);
    }
    append(&mut log, &[("a", Some("later"))]);
    flush_all(&storage, &mut log);
    clean(&storage, &mut log, 10_000);
    assert_eq!(
        records(&log),
        vec![(2, "a".to_owned(), Some("later".to_owned()))]
    );
    assert_eq!(
        batch_ranges(&log),
        [(0, 0), (1, 1), (2, 2)],
        "0 starts the epoch"
    );
    let end = log.log_end_offset();
    drop(log);
    let mut log = open(&storage, end);
    let states = log.load_producer_states().expect("states");
    let retry = last.expect("appended");
    assert_eq!(
        states
            .find_duplicate(&retry)
            .map(|batch| batch.first_offset),
        Some(1),
        "a retry of the producer's last batch is still recognised"
    );
}
