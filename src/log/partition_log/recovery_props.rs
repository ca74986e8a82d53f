//! Property tests of recovery over arbitrary segment bytes: whatever a crash or a bad disk
//! leaves past the recovery point, start-up keeps every durable batch byte for byte, keeps only
//! whole original batches after it, and never panics; whatever lies below it is reported, never
//! deleted. The producer state loaded after recovery (from the snapshot files, damaged or not,
//! and the headers past them) is the one every header the log serves rebuilds.

use proptest::prelude::*;

use super::*;
use crate::log::producer_state::ProducerStates;
use crate::log::segment::parse_segment_name;
use crate::protocol::record_batch::{build_batch, stamp_producer, validate_batch};
use crate::storage::memory::{MemoryFile, MemoryStorage};
use crate::storage::StorageFile;

const SEGMENT_BYTES: u64 = 180;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: SEGMENT_BYTES,
        index_interval_bytes: 100,
        flush_messages: i64::MAX,
        flush_ms: None,
        segment_ms: i64::MAX,
        compacted: false,
    }
}

fn open(
    storage: &MemoryStorage,
    recovery_point: i64,
) -> (PartitionLog<MemoryStorage>, RecoveryReport) {
    PartitionLog::open(storage.clone(), "t-0", config(), recovery_point, Millis(0)).expect("open")
}

/// Appends `count` batches of one record each, from three idempotent producers in turn;
/// returns each batch as stored.
fn append(log: &mut PartitionLog<MemoryStorage>, first: usize, count: usize) -> Vec<Vec<u8>> {
    (first..first + count)
        .map(|index| {
            let value = format!("value-{index}-{}", "x".repeat(index % 7));
            let batch = build_batch(&[(None, Some(value.as_bytes()))], 1);
            let (producer_id, sequence) = ((index % 3) as i64, (index / 3) as i32);
            let mut batch = stamp_producer(&batch, producer_id, 0, sequence).to_vec();
            let header = validate_batch(&batch).expect("valid");
            log.append(&mut batch, &header, 0).expect("append");
            batch
        })
        .collect()
}

/// Makes everything appended so far durable, as the broker's flush does.
fn flush(storage: &MemoryStorage, log: &mut PartitionLog<MemoryStorage>) {
    if let Some((sync, mark)) = log.start_flush(Millis(0)) {
        sync.complete_now(storage).expect("sync");
        log.flush_completed(mark);
    }
}

/// Each file of the log and its length.
fn file_lengths(storage: &MemoryStorage) -> BTreeMap<String, u64> {
    storage
        .list("t-0/")
        .expect("list")
        .into_iter()
        .map(|name| {
            let len = storage.open(&name).expect("open").len().expect("len");
            (name, len)
        })
        .collect()
}

/// Every batch the log serves, in offset order, as `(base offset, bytes)`.
fn batches(log: &PartitionLog<MemoryStorage>) -> Result<Vec<(i64, Vec<u8>)>, LogError> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let LogRead::Records {
            file,
            position,
            len,
        } = log.read(offset, log.log_end_offset(), 1 << 20)?
        else {
            panic!("offset {offset} below the log end reads nothing");
        };
        let mut bytes = vec![0; len as usize];
        file.read_exact_at(&mut bytes, position).expect("read");
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let header = validate_batch(rest).expect("the log serves only valid batches");
            let size = header.size_bytes();
            assert!(header.base_offset <= offset && offset <= header.last_offset());
            out.push((header.base_offset, rest[..size].to_vec()));
            offset = header.last_offset() + 1;
            rest = &rest[size..];
        }
    }
    Ok(out)
}

/// The producer state of the batches `served`, rebuilt from each header.
fn states_of(served: &[(i64, Vec<u8>)]) -> ProducerStates {
    let mut states = ProducerStates::default();
    for (_, bytes) in served {
        states.update(&validate_batch(bytes).expect("served batches are valid"));
    }
    states
}

/// One change a crash or a bad disk may leave in a file.
#[derive(Debug, Clone)]
enum Damage {
    /// Cut the file to this fraction (per mille) of the way from `from` to its end.
    Truncate { per_mille: u64 },
    /// Overwrite bytes at this fraction of the way from `from` to the end.
    Overwrite { per_mille: u64, bytes: Vec<u8> },
    /// Append bytes at the end.
    Append { bytes: Vec<u8> },
    /// Zero a 512-byte-aligned run (a sector that never reached the disk).
    ZeroSector { per_mille: u64 },
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (0..=1000u64).prop_map(|per_mille| Damage::Truncate { per_mille }),
        (0..=1000u64, proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(per_mille, bytes)| Damage::Overwrite { per_mille, bytes }),
        proptest::collection::vec(any::<u8>(), 1..80).prop_map(|bytes| Damage::Append { bytes }),
        (0..=1000u64).prop_map(|per_mille| Damage::ZeroSector { per_mille }),
    ]
}

/// Applies `damage` to `file` at or after byte `from`.
fn apply(file: &MemoryFile, from: u64, damage: &Damage) {
    let len = file.len().expect("len");
    let at = |per_mille: u64| from + (len.saturating_sub(from)) * per_mille / 1000;
    match damage {
        Damage::Truncate { per_mille } => file.set_len(at(*per_mille)).expect("truncate"),
        Damage::Overwrite { per_mille, bytes } => {
            let position = at(*per_mille).min(len);
            file.write_all_at(bytes, position).expect("overwrite")
        }
        Damage::Append { bytes } => file.write_all_at(bytes, len).expect("append"),
        Damage::ZeroSector { per_mille } => {
            let position = at(*per_mille);
            let start = (position / 512 * 512).max(from);
            let end = ((position / 512 + 1) * 512).min(len);
            if end > start {
                file.write_all_at(&vec![0; (end - start) as usize], start)
                    .expect("zero")
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Damage past the recovery point: the durable prefix is intact, what follows is a prefix
    /// of the original batches, the log is consistent, and it takes new appends.
    #[test]
    fn damage_past_the_recovery_point_keeps_every_durable_batch(
        durable in 0usize..12,
        tail in 0usize..12,
        damages in proptest::collection::vec((any::<prop::sample::Index>(), damage()), 0..4),
        stray in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..120)),
    ) {
        let storage = MemoryStorage::new();
        let (mut log, _) = open(&storage, 0);
        let mut original = append(&mut log, 0, durable);
        flush(&storage, &mut log);
        let recovery_point = log.recovery_point();
        prop_assert_eq!(recovery_point, durable as i64);
        // What the flush made durable: each file's length now.
        let durable_len = file_lengths(&storage);
        original.extend(append(&mut log, durable, tail));
        drop(log);

        // Only files written after the flush have bytes a crash can tear: a segment rolled
        // before it is complete and synced, and nothing writes past its end again.
        let names: Vec<String> = storage
            .list("t-0/")
            .expect("list")
            .into_iter()
            .filter(|name| {
                let len = storage.open(name).expect("open").len().expect("len");
                durable_len.get(name) != Some(&len)
            })
            .collect();
        for (index, damage) in damages.iter().filter(|_| !names.is_empty()) {
            let name = index.get(&names);
            let from = durable_len.get(name).copied().unwrap_or(0);
            apply(&storage.open(name).expect("open"), from, damage);
        }
        if let Some(bytes) = &stray {
            // A segment created by a roll the crash interrupted.
            let name = format!("t-0/{:020}.log", durable + tail);
            storage.open(&name).expect("create").write_all_at(bytes, 0).expect("write");
        }

        let (mut log, report) = open(&storage, recovery_point);
        prop_assert!(report.corruption.is_none(), "{:?}", report);
        prop_assert!(log.log_end_offset() >= recovery_point);
        prop_assert!(log.log_end_offset() <= (durable + tail) as i64);
        log.check_invariants();
        let served = batches(&log).expect("no corruption");
        prop_assert_eq!(served.len() as i64, log.log_end_offset());
        for (offset, (base, bytes)) in served.iter().enumerate() {
            prop_assert_eq!(*base, offset as i64);
            if (offset as i64) < recovery_point {
                prop_assert_eq!(bytes, &original[offset], "durable batch {} changed", offset);
            } else {
                // Past the recovery point only whole original batches survive; the bytes the
                // CRC does not cover (the leader epoch) may differ.
                prop_assert_eq!(&bytes[..12], &original[offset][..12]);
                prop_assert_eq!(&bytes[16..], &original[offset][16..]);
            }
        }
        prop_assert_eq!(log.load_producer_states().expect("load"), &states_of(&served));

        // The recovered log takes appends where it ends, and a second start-up agrees.
        let end = log.log_end_offset();
        append(&mut log, end as usize, 2);
        flush(&storage, &mut log);
        let recovery_point = log.recovery_point();
        drop(log);
        let (mut log, report) = open(&storage, recovery_point);
        prop_assert!(report.corruption.is_none(), "{:?}", report);
        prop_assert_eq!(log.log_end_offset(), end + 2);
        log.check_invariants();
        let served = batches(&log).expect("no corruption");
        prop_assert_eq!(served.len() as i64, end + 2);
        prop_assert_eq!(log.load_producer_states().expect("load"), &states_of(&served));
    }

    /// Damage anywhere, the durable part included: start-up never panics, never deletes a
    /// segment below the recovery point, cuts nothing when it reports corruption, and reports
    /// what it cannot trust instead of serving it.
    #[test]
    fn damage_anywhere_is_reported_never_deleted(
        durable in 1usize..12,
        tail in 0usize..6,
        damages in proptest::collection::vec((any::<prop::sample::Index>(), damage()), 1..4),
    ) {
        let storage = MemoryStorage::new();
        let (mut log, _) = open(&storage, 0);
        append(&mut log, 0, durable);
        flush(&storage, &mut log);
        let recovery_point = log.recovery_point();
        append(&mut log, durable, tail);
        drop(log);
        let names = storage.list("t-0/").expect("list");
        let below: Vec<String> = names
            .iter()
            .filter(|name| parse_segment_name("t-0", name).is_some_and(|base| base < recovery_point))
            .cloned()
            .collect();
        for (index, damage) in &damages {
            apply(&storage.open(index.get(&names).as_str()).expect("open"), 0, damage);
        }
        let before = file_lengths(&storage);

        match PartitionLog::open(storage.clone(), "t-0", config(), recovery_point, Millis(0)) {
            Err(LogError::Corrupt(_)) => {}
            Err(error) => prop_assert!(false, "unexpected error {error}"),
            Ok((log, report)) => {
                let after = storage.list("t-0/").expect("list");
                for name in &below {
                    prop_assert!(after.contains(name), "{} deleted: {:?}", name, report);
                }
                if report.corruption.is_some() {
                    // Corruption below the recovery point touches no file: nothing is cut
                    // or deleted, so an operator can still repair it.
                    prop_assert_eq!(&file_lengths(&storage), &before, "{:?}", report);
                }
                if report.corruption.is_none() {
                    log.check_invariants();
                    // Unscanned segments are checked as they are read: a read either serves
                    // bytes inside the file or reports corruption; it never panics.
                    for offset in log.log_start_offset()..log.log_end_offset() {
                        match log.read(offset, log.log_end_offset(), 1 << 20) {
                            Ok(LogRead::Records { file, position, len }) => {
                                prop_assert!(position + len <= file.len().expect("len"));
                            }
                            Ok(_) => {}
                            Err(LogError::Corrupt(_)) => break,
                            Err(error) => prop_assert!(false, "unexpected error {error}"),
                        }
                    }
                }
            }
        }
    }
}
