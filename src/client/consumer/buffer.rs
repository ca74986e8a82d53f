//! Records fetched and not yet returned by a poll: Kafka's `max.poll.records`.
//!
//! A poll hands out at most `max.poll.records` of them, oldest first, and keeps the rest for the
//! next poll, as Kafka's consumer keeps its completed fetches. While a partition has records
//! here it is not fetched again, and the position the application sees for it is the offset of
//! its first record still here: what a poll has returned, not what the fetcher has read.

use std::collections::{BTreeMap, VecDeque};

use super::fetcher::ConsumerRecord;
use crate::types::TopicPartition;

/// Fetched records in arrival order (per partition in offset order), with a count per
/// partition so that "is this partition held?" costs no scan.
#[derive(Debug, Default)]
pub(crate) struct RecordBuffer {
    records: VecDeque<ConsumerRecord>,
    held: BTreeMap<TopicPartition, usize>,
}

impl RecordBuffer {
    /// Adds one partition's newly fetched records, in offset order.
    pub(crate) fn extend(&mut self, records: Vec<ConsumerRecord>) {
        // A count and a lookup a run of one partition's records; the partition's name is
        // copied only for its first buffered record.
        for run in records.chunk_by(|a, b| a.topic_partition == b.topic_partition) {
            let partition = &run[0].topic_partition;
            match self.held.get_mut(partition) {
                Some(count) => *count += run.len(),
                None => {
                    self.held.insert(partition.clone(), run.len());
                }
            }
        }
        self.records.extend(records);
    }

    /// Takes up to `max` records, oldest first.
    pub(crate) fn take(&mut self, max: usize) -> Vec<ConsumerRecord> {
        let n = max.min(self.records.len());
        let taken: Vec<ConsumerRecord> = self.records.drain(..n).collect();
        for run in taken.chunk_by(|a, b| a.topic_partition == b.topic_partition) {
            let partition = &run[0].topic_partition;
            let count = self
                .held
                .get_mut(partition)
                .expect("a buffered record's partition is counted");
            *count -= run.len();
            if *count == 0 {
                self.held.remove(partition);
            }
        }
        taken
    }

    /// Keeps only the records of the partitions `keep` accepts.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&TopicPartition) -> bool) {
        self.records.retain(|record| keep(&record.topic_partition));
        self.held.retain(|partition, _| keep(partition));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Whether `partition` has records waiting for a poll.
    pub(crate) fn holds(&self, partition: &TopicPartition) -> bool {
        self.held.contains_key(partition)
    }

    /// The offset of `partition`'s first record waiting for a poll.
    pub(crate) fn next_offset(&self, partition: &TopicPartition) -> Option<i64> {
        if !self.holds(partition) {
            return None;
        }
        self.records
            .iter()
            .find(|record| record.topic_partition == *partition)
            .map(|record| record.offset)
    }

    pub(crate) fn records(&self) -> impl Iterator<Item = &ConsumerRecord> {
        self.records.iter()
    }

    /// The counts match the records.
    pub(crate) fn check_invariants(&self) {
        assert_eq!(
            self.held.values().sum::<usize>(),
            self.records.len(),
            "every buffered record is counted once"
        );
        debug_assert!(
            self.held.iter().all(|(partition, count)| self
                .records
                .iter()
                .filter(|record| record.topic_partition == *partition)
                .count()
                == *count),
            "each partition's count is its number of buffered records"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(partition: i32, offset: i64) -> ConsumerRecord {
        ConsumerRecord {
            topic_partition: TopicPartition::new("t", partition),
            offset,
            timestamp_ms: 0,
            key: None,
            value: None,
        }
    }

    #[test]
    fn takes_oldest_first_and_tracks_what_each_partition_still_holds() {
        let mut buffer = RecordBuffer::default();
        buffer.extend(vec![record(0, 5), record(0, 6), record(0, 7)]);
        buffer.extend(vec![record(1, 2)]);
        let p0 = TopicPartition::new("t", 0);
        let p1 = TopicPartition::new("t", 1);
        let taken: Vec<i64> = buffer.take(2).iter().map(|r| r.offset).collect();
        assert_eq!(taken, [5, 6]);
        assert_eq!(buffer.next_offset(&p0), Some(7));
        assert_eq!(buffer.next_offset(&p1), Some(2));
        let taken = buffer.take(2);
        assert_eq!(taken.len(), 2);
        assert!(!buffer.holds(&p0) && !buffer.holds(&p1) && buffer.is_empty());
        assert_eq!(buffer.next_offset(&p0), None);
        buffer.check_invariants();
    }

    #[test]
    fn retain_drops_a_partition_and_its_count() {
        let mut buffer = RecordBuffer::default();
        buffer.extend(vec![record(0, 1), record(1, 1), record(0, 2)]);
        let p0 = TopicPartition::new("t", 0);
        buffer.retain(|partition| *partition != p0);
        assert!(!buffer.holds(&p0));
        assert_eq!(buffer.records().count(), 1);
        buffer.check_invariants();
    }
}
