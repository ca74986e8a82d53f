//! A sparse offset index (Kafka's `OffsetIndex`): one `(offset, position)` entry every
//! `index.interval.bytes` of log, so a read finds a nearby batch without scanning the segment.
//!
//! It lives in memory and is never trusted from disk, so it can never disagree with the log it
//! indexes: the recovery scan rebuilds it for the segments it walks, and a segment below the
//! recovery point builds it on first use.

/// The sparse index of one segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetIndex {
    /// `(base offset of a batch, its byte position)`, both strictly increasing.
    entries: Vec<(i64, u64)>,
}

impl OffsetIndex {
    /// Adds an entry after every existing one.
    pub fn append(&mut self, offset: i64, position: u64) {
        if let Some(&(last_offset, last_position)) = self.entries.last() {
            assert!(
                offset > last_offset,
                "index offsets must increase: {offset} after {last_offset}"
            );
            assert!(position > last_position, "index positions must increase");
        }
        self.entries.push((offset, position));
    }

    /// The last entry at or before `offset`: where a scan for `offset` may start.
    pub fn lookup(&self, offset: i64) -> Option<(i64, u64)> {
        let after = self
            .entries
            .partition_point(|&(entry_offset, _)| entry_offset <= offset);
        after.checked_sub(1).map(|index| self.entries[index])
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_returns_the_floor_entry() {
        let mut index = OffsetIndex::default();
        assert_eq!(index.lookup(5), None);
        index.append(10, 0);
        index.append(20, 4096);
        index.append(35, 8200);
        assert_eq!(index.lookup(9), None);
        assert_eq!(index.lookup(10), Some((10, 0)));
        assert_eq!(index.lookup(34), Some((20, 4096)));
        assert_eq!(index.lookup(1000), Some((35, 8200)));
    }

    #[test]
    #[should_panic(expected = "index offsets must increase")]
    fn out_of_order_entries_are_a_bug() {
        let mut index = OffsetIndex::default();
        index.append(10, 0);
        index.append(10, 100);
    }
}
