//! One test per rule of the disk model.

use super::*;

/// Nothing pending survives a power loss; an unsynced truncation does not either.
fn nothing_survives(_: u64) -> u64 {
    0
}

/// Everything pending survives intact; an unsynced truncation too.
fn everything_survives(bound: u64) -> u64 {
    bound - 1
}

/// Answers from a script, in order.
fn scripted(answers: &[u64]) -> impl FnMut(u64) -> u64 + '_ {
    let mut next = answers.iter();
    move |_| *next.next().expect("the script covers every draw")
}

fn contents(disk: &MemoryStorage, name: &str) -> Vec<u8> {
    let file = disk.open(name).expect("open");
    let mut bytes = vec![0; file.len().expect("len") as usize];
    file.read_exact_at(&mut bytes, 0).expect("read");
    bytes
}

/// A file named `name` whose `bytes` and entry are durable.
fn durable_file(disk: &MemoryStorage, name: &str, bytes: &[u8]) -> MemoryFile {
    let file = disk.open(name).expect("open");
    file.write_all_at(bytes, 0).expect("write");
    file.begin_sync().finish().expect("sync");
    for directory in ancestors(name).chain([""]) {
        disk.begin_directory_sync(directory)
            .finish()
            .expect("directory sync");
    }
    file
}

#[test]
fn a_process_crash_keeps_the_page_cache() {
    let disk = MemoryStorage::new();
    let file = disk.open("x").expect("open");
    file.write_all_at(b"never synced", 0).expect("write");
    disk.crash(CrashLevel::Process, &mut |_| unreachable!("no draws"));
    assert_eq!(contents(&disk, "x"), b"never synced");
}

#[test]
fn an_fsync_issued_before_an_append_does_not_cover_it() {
    let disk = MemoryStorage::new();
    let file = durable_file(&disk, "x", b"first");
    file.write_all_at(b"-second", 5).expect("write");
    let sync = file.begin_sync(); // issued now: covers "-second"
    file.write_all_at(b"-third", 12)
        .expect("write after the fsync was issued");
    sync.finish().expect("sync");
    disk.check_invariants();
    disk.crash(CrashLevel::PowerLoss, &mut nothing_survives);
    assert_eq!(contents(&disk, "x"), b"first-second");
}

#[test]
fn an_older_fsync_finishing_after_a_newer_one_does_not_shrink_the_file() {
    let disk = MemoryStorage::new();
    let file = durable_file(&disk, "x", b"a");
    file.write_all_at(b"b", 1).expect("write");
    let older = file.begin_sync();
    file.write_all_at(b"c", 2).expect("write");
    let newer = file.begin_sync();
    newer.finish().expect("newer");
    older.finish().expect("older");
    assert_eq!(disk.durable_len("x"), Some(3));
}

#[test]
fn a_failed_fsync_drops_the_dirty_pages_it_covered() {
    let disk = MemoryStorage::new();
    let file = durable_file(&disk, "x", b"kept");
    file.write_all_at(b"+lost", 4).expect("write");
    disk.inject(&DiskFaults {
        fail_writes: 0,
        fail_syncs: 1,
    });
    assert!(file.begin_sync().finish().is_err());
    assert_eq!(
        contents(&disk, "x"),
        b"kept+lost",
        "the page cache still has them"
    );
    file.begin_sync().finish().expect("the next fsync succeeds");
    disk.crash(CrashLevel::PowerLoss, &mut everything_survives);
    let after = contents(&disk, "x");
    assert_eq!(&after[..4], b"kept");
    assert!(
        after[4..].iter().all(|byte| *byte == 0),
        "the later fsync wrote the new size but not the dropped pages: {after:?}"
    );
}

#[test]
fn with_keep_dirty_pages_a_later_fsync_persists_what_a_failed_one_did_not() {
    let disk = MemoryStorage::new();
    disk.set_fsync_failure(FsyncFailure::KeepDirtyPages);
    let file = durable_file(&disk, "x", b"kept");
    file.write_all_at(b"+later", 4).expect("write");
    disk.inject(&DiskFaults {
        fail_writes: 0,
        fail_syncs: 1,
    });
    assert!(file.begin_sync().finish().is_err());
    file.begin_sync().finish().expect("retry");
    disk.crash(CrashLevel::PowerLoss, &mut nothing_survives);
    assert_eq!(contents(&disk, "x"), b"kept+later");
}

#[test]
fn a_torn_tail_keeps_any_subset_of_sectors_with_holes_read_as_zeros() {
    let disk = MemoryStorage::new();
    let file = durable_file(&disk, "x", &[]);
    let tail: Vec<u8> = (0..3 * SECTOR_BYTES)
        .map(|byte| (byte % 251 + 1) as u8)
        .collect();
    file.write_all_at(&tail, 0).expect("write");
    // Sector 0 lost, sector 1 survives intact (not zeroed), sector 2 lost.
    disk.crash(CrashLevel::PowerLoss, &mut scripted(&[0, 1, 7, 0]));
    let after = contents(&disk, "x");
    let sector = SECTOR_BYTES as usize;
    assert_eq!(
        after.len(),
        2 * sector,
        "the file ends after the surviving sector"
    );
    assert!(after[..sector].iter().all(|byte| *byte == 0), "a hole");
    assert_eq!(after[sector..], tail[sector..2 * sector]);
}

#[test]
fn a_surviving_sector_may_come_back_zeroed() {
    let disk = MemoryStorage::new();
    let file = durable_file(&disk, "x", &[]);
    file.write_all_at(&[0xab; 100], 0).expect("write");
    disk.crash(CrashLevel::PowerLoss, &mut scripted(&[1, 0]));
    assert_eq!(contents(&disk, "x"), vec![0; 100]);
}

#[test]
fn what_survived_a_power_loss_is_durable_from_then_on() {
    let disk = MemoryStorage::new();
    let file = durable_file(&disk, "x", b"base");
    file.write_all_at(b"+tail", 4).expect("write");
    disk.crash(CrashLevel::PowerLoss, &mut everything_survives);
    assert_eq!(contents(&disk, "x"), b"base+tail");
    disk.crash(CrashLevel::PowerLoss, &mut nothing_survives);
    assert_eq!(
        contents(&disk, "x"),
        b"base+tail",
        "recovery read it: it stays"
    );
}

#[test]
fn an_unsynced_truncation_may_or_may_not_survive() {
    for (chooser, expected) in [(0, &b"0123456789"[..]), (1, &b"0123"[..])] {
        let disk = MemoryStorage::new();
        let file = durable_file(&disk, "x", b"0123456789");
        file.set_len(4).expect("truncate");
        disk.crash(CrashLevel::PowerLoss, &mut |_| chooser);
        assert_eq!(contents(&disk, "x"), expected);
    }
}

#[test]
fn a_new_file_vanishes_unless_its_directory_was_synced() {
    let disk = MemoryStorage::new();
    let file = disk.open("d/new.log").expect("open");
    file.write_all_at(b"data", 0).expect("write");
    file.begin_sync()
        .finish()
        .expect("the data is durable, the name is not");
    disk.crash(CrashLevel::PowerLoss, &mut everything_survives);
    assert!(disk.list("").expect("list").is_empty());

    let file = disk.open("d/new.log").expect("open");
    file.write_all_at(b"data", 0).expect("write");
    file.begin_sync().finish().expect("sync");
    disk.begin_directory_sync("d")
        .finish()
        .expect("the entry in d");
    disk.crash(CrashLevel::PowerLoss, &mut everything_survives);
    assert!(
        disk.list("").expect("list").is_empty(),
        "d itself was never synced into the root"
    );

    durable_file(&disk, "d/new.log", b"data");
    disk.crash(CrashLevel::PowerLoss, &mut nothing_survives);
    assert_eq!(contents(&disk, "d/new.log"), b"data");
}

#[test]
fn a_removal_and_a_rename_are_undone_by_power_loss_without_a_directory_sync() {
    let disk = MemoryStorage::new();
    durable_file(&disk, "gone", b"g");
    durable_file(&disk, "old", b"o");
    disk.remove("gone").expect("remove");
    disk.rename("old", "new").expect("rename");
    assert_eq!(disk.list("").expect("list"), vec!["new".to_owned()]);
    disk.crash(CrashLevel::PowerLoss, &mut nothing_survives);
    assert_eq!(
        disk.list("").expect("list"),
        vec!["gone".to_owned(), "old".to_owned()]
    );

    disk.remove("gone").expect("remove");
    disk.rename("old", "new").expect("rename");
    disk.begin_directory_sync("").finish().expect("sync");
    disk.crash(CrashLevel::PowerLoss, &mut nothing_survives);
    assert_eq!(disk.list("").expect("list"), vec!["new".to_owned()]);
    assert_eq!(contents(&disk, "new"), b"o");
}

#[test]
fn corruption_flips_a_byte_of_a_clean_durable_sector_in_both_views() {
    let disk = MemoryStorage::new();
    let original = vec![7u8; 2 * SECTOR_BYTES as usize];
    let file = durable_file(&disk, "t-0/0.log", &original);
    file.write_all_at(b"pending", 2 * SECTOR_BYTES)
        .expect("write");
    let (name, position) = disk
        .corrupt(|name| name.starts_with("t-0/"), &mut |bound| bound - 1)
        .expect("a clean sector");
    assert_eq!(name, "t-0/0.log");
    assert!(position < 2 * SECTOR_BYTES, "never a pending sector");
    let after = contents(&disk, "t-0/0.log");
    assert_ne!(after[position as usize], original[position as usize]);
    disk.crash(CrashLevel::PowerLoss, &mut nothing_survives);
    assert_ne!(
        contents(&disk, "t-0/0.log")[position as usize],
        original[position as usize],
        "the disk holds the flipped byte"
    );
    assert!(disk
        .corrupt(|name| name.starts_with("other/"), &mut |_| 0)
        .is_none());
}

#[test]
fn injected_write_faults_fail_the_next_writes() {
    let disk = MemoryStorage::new();
    let file = disk.open("x").expect("open");
    disk.inject(&DiskFaults {
        fail_writes: 1,
        fail_syncs: 0,
    });
    assert!(file.write_all_at(b"a", 0).is_err());
    file.write_all_at(b"a", 0).expect("second write works");
    assert_eq!(contents(&disk, "x"), b"a");
}

#[test]
fn a_full_disk_writes_what_fits_then_fails_with_enospc_until_space_is_freed() {
    let disk = MemoryStorage::new();
    let a = durable_file(&disk, "a", b"0123");
    let b = disk.open("b").expect("open");
    b.write_all_at(b"xy", 0).expect("write");
    assert_eq!(disk.used_bytes(), 6);
    disk.set_capacity(Some(9));
    let error = b.write_all_at(b"ABCDEF", 1).expect_err("past the capacity");
    assert_eq!(error.kind(), io::ErrorKind::StorageFull);
    assert_eq!(
        contents(&disk, "b"),
        b"xABCD",
        "a short write: the overwritten byte and the 3 bytes of room"
    );
    assert_eq!(disk.used_bytes(), 9);
    a.write_all_at(b"ab", 1)
        .expect("overwriting in place needs no room");
    assert_eq!(contents(&disk, "a"), b"0ab3");
    assert_eq!(
        a.write_all_at(b"!", 4).expect_err("full").kind(),
        io::ErrorKind::StorageFull
    );
    disk.set_capacity(None);
    a.write_all_at(b"!", 4).expect("space was freed");
    assert_eq!(contents(&disk, "a"), b"0ab3!");
}
