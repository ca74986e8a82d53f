//! Request bodies both sides of seedlog build the same way: the replica fetcher of a broker and
//! the seedlog clients.

use std::collections::BTreeMap;

use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{BrokerId, OffsetForLeaderEpochRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

/// An OffsetsForLeaderEpoch request for `partitions` grouped by topic, in topic order;
/// `replica_id` is the asking broker's id, or -1 for a consumer.
pub fn offset_for_leader_epoch_request(
    replica_id: i32,
    partitions: BTreeMap<String, Vec<OffsetForLeaderPartition>>,
) -> OffsetForLeaderEpochRequest {
    let topics = partitions
        .into_iter()
        .map(|(topic, partitions)| {
            OffsetForLeaderTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic)))
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(replica_id))
        .with_topics(topics)
}
