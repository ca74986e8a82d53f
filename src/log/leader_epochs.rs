//! The leader-epoch cache of a partition log (Kafka's `LeaderEpochFileCache`, KIP-101): for each
//! leader epoch that wrote to the log, the offset of its first batch. A follower asks which
//! offset its last epoch ends at on the leader, and truncates what lies past it, instead of
//! truncating to its high watermark (which loses committed records when the high watermark
//! lags).
//!
//! The cache is kept in the log's `leader-epoch-checkpoint` file, in Kafka's format (a version
//! line `0`, a count line, then `epoch start_offset` lines); when and how the log writes, syncs
//! and trusts it is in `partition_log::epoch_checkpoint`.

/// The checkpoint file's name in a log's directory.
pub const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";
/// Where a new version of it is written before it replaces the old one.
pub const LEADER_EPOCH_CHECKPOINT_TMP: &str = "leader-epoch-checkpoint.tmp";
const CHECKPOINT_VERSION: &str = "0";

/// Kafka's `UNDEFINED_EPOCH` and `UNDEFINED_EPOCH_OFFSET`.
pub const UNDEFINED: (i32, i64) = (-1, -1);

/// Epochs and their start offsets, both increasing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<(i32, i64)>,
}

impl LeaderEpochCache {
    /// A batch of `epoch` starts at `start_offset` (or a leader starts `epoch` at the log end):
    /// entries starting at or past it go first (epochs a leader started but wrote nothing in,
    /// as Kafka's `maybeTruncateNonMonotonicEntries` drops them), then a new entry if the epoch
    /// is newer than the last. So the cache is always the one the log's batch headers make,
    /// plus at most an empty epoch at the log end. Batches without an epoch (`-1`, older
    /// clients' format) change nothing. Answers whether the cache changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 {
            return false;
        }
        let before = self.entries.len();
        let kept = self
            .entries
            .iter()
            .rposition(|(last, start)| *start < start_offset || *last == epoch)
            .map_or(0, |index| index + 1);
        self.entries.truncate(kept);
        let newer = self.entries.last().is_none_or(|(last, _)| *last < epoch);
        if newer {
            self.entries.push((epoch, start_offset));
        }
        newer || self.entries.len() != before
    }

    /// The epoch of the last batch, if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|(epoch, _)| *epoch)
    }

    /// Forgets epochs that start at or past `end_offset` (the log was truncated there).
    /// Answers whether the cache changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(_, start)| *start < end_offset);
        self.entries.len() != before
    }

    /// Forgets epochs wholly below `start_offset` (retention deleted their segments); the
    /// epoch that holds `start_offset` now starts there. Answers whether the cache changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let keep_from = self
            .entries
            .iter()
            .rposition(|(_, start)| *start <= start_offset);
        let Some(index) = keep_from else {
            return false;
        };
        let changed = index > 0 || self.entries[index].1 != start_offset;
        self.entries.drain(..index);
        self.entries[0].1 = start_offset;
        changed
    }

    /// Kafka's `endOffsetFor`: the largest epoch at or below `requested` and the offset where
    /// it ends (the next epoch's start, or `log_end_offset` for the latest epoch); `UNDEFINED`
    /// when `requested` is newer than every epoch here or undefined.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        if requested < 0 {
            return UNDEFINED;
        }
        if self.latest_epoch() == Some(requested) {
            return (requested, log_end_offset);
        }
        let Some(higher) = self.entries.iter().find(|(epoch, _)| *epoch > requested) else {
            return UNDEFINED;
        };
        match self
            .entries
            .iter()
            .rev()
            .find(|(epoch, _)| *epoch <= requested)
        {
            Some((floor, _)) => (*floor, higher.1),
            None => (requested, higher.1),
        }
    }

    /// Every entry, oldest first.
    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    /// The checkpoint file's text.
    pub fn to_checkpoint(&self) -> String {
        use std::fmt::Write;
        let mut text = format!("{CHECKPOINT_VERSION}\n{}\n", self.entries.len());
        for (epoch, start) in &self.entries {
            writeln!(text, "{epoch} {start}").expect("writing to a String");
        }
        text
    }

    /// Parses a checkpoint file. Anything but a whole, well-formed file of increasing epochs
    /// and non-decreasing start offsets is an error naming what is wrong (a power loss can
    /// leave a file torn or zeroed).
    pub fn from_checkpoint(bytes: &[u8]) -> Result<LeaderEpochCache, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?;
        let body = text
            .strip_suffix('\n')
            .ok_or_else(|| "no final newline (torn?)".to_owned())?;
        let mut lines = body.split('\n');
        let version = lines.next().unwrap_or_default();
        if version != CHECKPOINT_VERSION {
            return Err(format!(
                "version line {version:?}, expected {CHECKPOINT_VERSION:?}"
            ));
        }
        let count: usize = lines
            .next()
            .and_then(|line| line.parse().ok())
            .ok_or_else(|| "no entry count on line 2".to_owned())?;
        let mut cache = LeaderEpochCache::default();
        for (index, line) in lines.enumerate() {
            let entry = line
                .split_once(' ')
                .and_then(|(epoch, start)| Some((epoch.parse().ok()?, start.parse().ok()?)));
            let Some((epoch, start)): Option<(i32, i64)> = entry else {
                return Err(format!(
                    "line {}: {line:?} is not `epoch offset`",
                    index + 3
                ));
            };
            let ordered = cache
                .entries
                .last()
                .is_none_or(|(last, last_start)| epoch > *last && start >= *last_start);
            if epoch < 0 || start < 0 || !ordered {
                return Err(format!(
                    "line {}: entry {epoch} {start} out of order",
                    index + 3
                ));
            }
            cache.entries.push((epoch, start));
        }
        if cache.entries.len() != count {
            return Err(format!(
                "{} entries, the count line says {count}",
                cache.entries.len()
            ));
        }
        Ok(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_offsets_follow_kafkas_end_offset_for() {
        let mut cache = LeaderEpochCache::default();
        cache.assign(0, 0);
        cache.assign(0, 5);
        cache.assign(2, 10);
        cache.assign(1, 12); // older than the last: ignored
        cache.assign(4, 20);
        assert_eq!(cache.entries(), &[(0, 0), (2, 10), (4, 20)]);
        assert_eq!(
            cache.end_offset_for(4, 25),
            (4, 25),
            "the latest epoch ends at the log end"
        );
        assert_eq!(cache.end_offset_for(2, 25), (2, 20));
        assert_eq!(
            cache.end_offset_for(3, 25),
            (2, 20),
            "an epoch absent here: its floor"
        );
        assert_eq!(
            cache.end_offset_for(5, 25),
            UNDEFINED,
            "newer than any epoch here"
        );
        assert_eq!(cache.end_offset_for(-1, 25), UNDEFINED);
        let mut late = LeaderEpochCache::default();
        late.assign(3, 7);
        assert_eq!(
            late.end_offset_for(1, 9),
            (1, 7),
            "older than the first epoch"
        );

        assert!(cache.truncate_from_end(20));
        assert!(!cache.truncate_from_end(20), "nothing left to cut");
        assert_eq!(cache.latest_epoch(), Some(2));
        assert!(cache.truncate_from_start(12));
        assert!(!cache.truncate_from_start(12), "already starts there");
        assert_eq!(cache.entries(), &[(2, 12)]);
    }

    #[test]
    fn the_checkpoint_is_kafkas_format_and_refuses_what_a_tear_leaves() {
        let mut cache = LeaderEpochCache::default();
        assert!(cache.assign(0, 0));
        assert!(!cache.assign(0, 3), "the same epoch: no change");
        assert!(cache.assign(3, 17));
        let text = cache.to_checkpoint();
        assert_eq!(text, "0\n2\n0 0\n3 17\n");
        assert_eq!(
            LeaderEpochCache::from_checkpoint(text.as_bytes()),
            Ok(cache)
        );
        assert_eq!(
            LeaderEpochCache::from_checkpoint(b"0\n0\n"),
            Ok(LeaderEpochCache::default())
        );
        for (bad, why) in [
            (&b""[..], "no final newline"),
            (b"0\n2\n0 0\n", "entries, the count line says 2"),
            (b"0\n2\n0 0\n3 1", "no final newline"),
            (b"1\n0\n", "version line"),
            (b"0\n1\n\0\0\0\n", "line 3"),
            (b"0\n2\n3 17\n0 20\n", "out of order"),
            (b"0\n2\n3 17\n4 2\n", "out of order"),
            (b"\0\0\0\0\0\0", "no final newline"),
            (b"\0\0\0\0\0\n", "version line"),
        ] {
            let error = LeaderEpochCache::from_checkpoint(bad).expect_err("refused");
            assert!(error.contains(why), "{bad:?}: {error}");
        }
    }
}
