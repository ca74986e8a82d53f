//! Newtypes shared by every layer.
//!
//! Offsets stay plain `i64` (named `*_offset`): they are wire values that take part in arithmetic
//! everywhere, and byte positions are `u64`, so the two cannot be confused.

use std::fmt;
use std::sync::Arc;

/// A broker's `node.id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BrokerId(pub i32);

/// A partition leader epoch (KIP-101). Bumped on every leader change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaderEpoch(pub i32);

/// A broker's registration epoch: a new one each time it registers with the controller.
/// Heartbeats and AlterPartition requests carrying an older one are stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BrokerEpoch(pub i64);

/// A partition epoch: bumped by every change of a partition's leader or ISR, so AlterPartition
/// is a compare-and-set on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionEpoch(pub i32);

/// Milliseconds of the driver's monotonic clock (simulated under madsim). State machines take
/// `now: Millis` as an argument and never read a clock themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Millis(pub u64);

impl Millis {
    /// `self + ms`, saturating.
    #[must_use]
    pub fn plus(self, ms: u64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }
}

/// A topic name and partition index, printed the Kafka way: `orders-0`.
///
/// Compared by name and index, as a derived order would; two names that share their bytes
/// (one `Arc`) are equal without comparing them, the common case of a lookup among one topic's
/// partitions.
#[derive(Debug, Clone)]
pub struct TopicPartition {
    /// Topic name, shared: a partition's name is copied once a record on the consume and
    /// produce paths, and a count is cheaper to copy than the bytes.
    pub topic: Arc<str>,
    /// Partition index within the topic.
    pub partition: i32,
}

impl TopicPartition {
    /// Builds a `TopicPartition`.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// Parses `orders-0` (the topic may itself contain dashes).
    pub fn parse(text: &str) -> Option<TopicPartition> {
        let (topic, partition) = text.rsplit_once('-')?;
        let partition = partition.parse::<i32>().ok()?;
        (!topic.is_empty() && partition >= 0).then(|| TopicPartition::new(topic, partition))
    }
}

impl PartialEq for TopicPartition {
    fn eq(&self, other: &TopicPartition) -> bool {
        self.partition == other.partition
            && (Arc::ptr_eq(&self.topic, &other.topic) || self.topic == other.topic)
    }
}

impl Eq for TopicPartition {}

impl PartialOrd for TopicPartition {
    fn partial_cmp(&self, other: &TopicPartition) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TopicPartition {
    fn cmp(&self, other: &TopicPartition) -> std::cmp::Ordering {
        let topic = if Arc::ptr_eq(&self.topic, &other.topic) {
            std::cmp::Ordering::Equal
        } else {
            self.topic.cmp(&other.topic)
        };
        topic.then(self.partition.cmp(&other.partition))
    }
}

// As derived: the name, then the index (equal partitions hash alike, shared name or not).
impl std::hash::Hash for TopicPartition {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.topic.hash(state);
        self.partition.hash(state);
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_partition_round_trips_through_its_display_form() {
        let partition = TopicPartition::new("my-topic", 12);
        assert_eq!(partition.to_string(), "my-topic-12");
        assert_eq!(TopicPartition::parse("my-topic-12"), Some(partition));
        assert_eq!(TopicPartition::parse("nodash"), None);
        assert_eq!(TopicPartition::parse("-3"), None);
        assert_eq!(
            TopicPartition::parse("t--1"),
            Some(TopicPartition::new("t-", 1))
        );
    }

    #[test]
    fn topic_partitions_compare_by_name_then_index_shared_or_not() {
        use std::hash::{BuildHasher, RandomState};
        let shared: Arc<str> = "b".into();
        let names = [
            Arc::clone(&shared),
            shared,
            "a".into(),
            "b".into(),
            "ba".into(),
        ];
        let hasher = RandomState::new();
        for (x, left) in names.iter().enumerate() {
            for (y, right) in names.iter().enumerate() {
                for (i, j) in [(0, 0), (0, 1), (1, 0)] {
                    let a = TopicPartition::new(Arc::clone(left), i);
                    let b = TopicPartition::new(Arc::clone(right), j);
                    let expected = (&**left, i).cmp(&(&**right, j));
                    assert_eq!(a.cmp(&b), expected, "{a} vs {b} ({x}, {y})");
                    assert_eq!(a.partial_cmp(&b), Some(expected), "{a} vs {b}, partially");
                    assert_eq!(a == b, expected.is_eq(), "{a} == {b}");
                    if a == b {
                        assert_eq!(hasher.hash_one(&a), hasher.hash_one(&b), "{a} hashes");
                    }
                }
            }
        }
    }
}
