//! The leader-epoch cache of a partition log (Kafka's `LeaderEpochFileCache`, KIP-101): for each
//! leader epoch that wrote to the log, the offset of its first batch. A follower asks which
//! offset its last epoch ends at on the leader, and truncates what lies past it, instead of
//! truncating to its high watermark (which loses committed records when the high watermark
//! lags).
//!
//! seedlog rebuilds the cache from the batch headers when a log opens, instead of keeping
//! Kafka's `leader-epoch-checkpoint` file.

/// Kafka's `UNDEFINED_EPOCH` and `UNDEFINED_EPOCH_OFFSET`.
pub const UNDEFINED: (i32, i64) = (-1, -1);

/// Epochs and their start offsets, both increasing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<(i32, i64)>,
}

impl LeaderEpochCache {
    /// A batch of `epoch` starts at `start_offset`: a new entry if the epoch is newer than the
    /// last. Batches without an epoch (`-1`, older clients' format) change nothing.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) {
        if epoch < 0 {
            return;
        }
        match self.entries.last() {
            Some((last, _)) if *last >= epoch => {}
            _ => self.entries.push((epoch, start_offset)),
        }
    }

    /// The epoch of the last batch, if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|(epoch, _)| *epoch)
    }

    /// Forgets epochs that start at or past `end_offset` (the log was truncated there).
    pub fn truncate_from_end(&mut self, end_offset: i64) {
        self.entries.retain(|(_, start)| *start < end_offset);
    }

    /// Forgets epochs wholly below `start_offset` (retention deleted their segments); the
    /// epoch that holds `start_offset` now starts there.
    pub fn truncate_from_start(&mut self, start_offset: i64) {
        let keep_from = self
            .entries
            .iter()
            .rposition(|(_, start)| *start <= start_offset);
        if let Some(index) = keep_from {
            self.entries.drain(..index);
            self.entries[0].1 = start_offset;
        }
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

        cache.truncate_from_end(20);
        assert_eq!(cache.latest_epoch(), Some(2));
        cache.truncate_from_start(12);
        assert_eq!(cache.entries(), &[(2, 12)]);
    }
}
