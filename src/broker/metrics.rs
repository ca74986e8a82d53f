//! What the broker core counts and exposes for monitoring: bytes and messages appended per
//! topic, and a snapshot of every partition and the purgatory. Counting never changes what the
//! broker does; the shell reads a [`BrokerMetrics`] when the metrics endpoint is scraped.

use std::collections::BTreeMap;

/// Cumulative counts of one topic's appends (Kafka's `BrokerTopicMetrics` BytesIn, MessagesIn).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicCounts {
    /// Bytes of record batches appended.
    pub bytes_in: u64,
    /// Records appended.
    pub messages_in: u64,
}

/// One partition's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetrics {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Bytes of its segments (Kafka's `Log` Size).
    pub size_bytes: u64,
    /// Number of segments (Kafka's `Log` NumLogSegments).
    pub segments: usize,
    /// Log start offset.
    pub log_start_offset: i64,
    /// Log end offset.
    pub log_end_offset: i64,
    /// High watermark.
    pub high_watermark: i64,
    /// Whether it is offline (a failed fsync or corruption).
    pub offline: bool,
    /// Whether this broker leads it with fewer in-sync replicas than replicas (Kafka's
    /// `Partition.isUnderReplicated`: counted by the leader only, so a cluster counts each
    /// partition once).
    pub under_replicated: bool,
}

/// A snapshot for the metrics endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerMetrics {
    /// Append counts by topic.
    pub topics: BTreeMap<String, TopicCounts>,
    /// Every partition, in order.
    pub partitions: Vec<PartitionMetrics>,
    /// Produces waiting in the purgatory (for an fsync).
    pub delayed_produces: usize,
    /// Fetches waiting in the purgatory (for data or their deadline).
    pub delayed_fetches: usize,
}

/// Append counts by topic (Kafka's `BrokerTopicStats`).
#[derive(Debug, Default)]
pub(crate) struct TopicStats {
    topics: BTreeMap<String, TopicCounts>,
}

impl TopicStats {
    /// Counts an appended batch of `records` in `bytes` to `topic`.
    pub(crate) fn count_append(&mut self, topic: &str, bytes: usize, records: i32) {
        let counts = match self.topics.get_mut(topic) {
            Some(counts) => counts,
            None => self.topics.entry(topic.to_owned()).or_default(),
        };
        counts.bytes_in += bytes as u64;
        counts.messages_in += u64::try_from(records).unwrap_or(0);
    }

    /// The counts so far, by topic.
    pub(crate) fn snapshot(&self) -> BTreeMap<String, TopicCounts> {
        self.topics.clone()
    }
}
