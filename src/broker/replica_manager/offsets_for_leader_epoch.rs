//! OffsetsForLeaderEpoch (API 23): where a leader epoch ends in the leader's log (Kafka's
//! `Partition.lastOffsetForLeaderEpoch`). A consumer asks it after a leader change with the
//! epoch of the last batch it read (KIP-320's position validation), and a follower of the
//! `kip-101` protocol before fetching. The answer is the largest epoch at most the one asked
//! and the offset where it ends (the log end for the current epoch); (-1, -1) when the log has
//! nothing that old.

use kafka_protocol::messages::offset_for_leader_epoch_request::OffsetForLeaderPartition;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ResponseKind,
};

use super::partition::Partition;
use super::ReplicaManager;
use crate::log::leader_epochs::UNDEFINED;
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::TopicPartition;

/// `(epoch, end offset)` for one requested partition, or why not.
fn end_of_epoch<S: Storage>(
    partition: &mut Partition<S>,
    requested: &OffsetForLeaderPartition,
) -> Result<(i32, i64), ErrorCode> {
    if partition.offline().is_some() {
        return Err(ErrorCode::KafkaStorageError);
    }
    partition.check_leader_epoch(requested.current_leader_epoch)?;
    if !partition.is_leader() {
        return Err(ErrorCode::NotLeaderOrFollower);
    }
    if let Err(error) = partition.log_mut().load_leader_epochs() {
        tracing::error!(partition = %partition.topic_partition(), %error, "leader epochs unreadable");
        return Err(ErrorCode::KafkaStorageError);
    }
    let end = partition.log().log_end_offset();
    Ok(partition.log().leader_epochs().map_or(UNDEFINED, |epochs| {
        epochs.end_offset_for(requested.leader_epoch, end)
    }))
}

impl<S: Storage> ReplicaManager<S> {
    pub(crate) fn on_offsets_for_leader_epoch_request(
        &mut self,
        request: &OffsetForLeaderEpochRequest,
    ) -> ResponseKind {
        let mut response = OffsetForLeaderEpochResponse::default();
        for topic in &request.topics {
            let mut result = OffsetForLeaderTopicResult::default().with_topic(topic.topic.clone());
            for requested in &topic.partitions {
                let mut entry = EpochEndOffset::default()
                    .with_partition(requested.partition)
                    .with_leader_epoch(-1)
                    .with_end_offset(-1);
                let topic_partition =
                    TopicPartition::new(topic.topic.as_str(), requested.partition);
                let outcome = match self.get_mut(&topic_partition) {
                    None => Err(ErrorCode::UnknownTopicOrPartition),
                    Some(partition) => end_of_epoch(partition, requested),
                };
                match outcome {
                    Ok((epoch, end_offset)) => {
                        entry.leader_epoch = epoch;
                        entry.end_offset = end_offset;
                    }
                    Err(error) => entry.error_code = error.code(),
                }
                result.partitions.push(entry);
            }
            response.topics.push(result);
        }
        ResponseKind::OffsetForLeaderEpoch(response)
    }
}
