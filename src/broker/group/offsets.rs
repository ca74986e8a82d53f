//! OffsetCommit and OffsetFetch: a group's committed offsets, fenced by generation and member
//! (Kafka's classic-group rules), stored in `__consumer_offsets` before they are answered.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::records::{CommittedOffset, OffsetsRecord};
use super::state::Group;
use super::{partition_for, GroupCoordinator, GroupWrite, OffsetsLog, OFFSETS_TOPIC};
use crate::node_io::{BrokerEvent, Output, ReplyTo, ResponseBody};
use crate::protocol::ErrorCode;
use crate::types::{Millis, TopicPartition};

/// Committed offsets of some partitions of one topic (`None`: nothing committed).
type TopicOffsets = (String, Vec<(i32, Option<CommittedOffset>)>);

impl GroupCoordinator {
    pub(crate) fn on_offset_commit_request<H: OffsetsLog>(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        request: &OffsetCommitRequest,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) {
        let group_id = request.group_id.as_str();
        let mut response = commit_response(request);
        if let Err(error) = self.check_commit(now, request, host, out) {
            for partition in response
                .topics
                .iter_mut()
                .flat_map(|topic| &mut topic.partitions)
            {
                partition.error_code = error.code();
            }
            out.push(reply_to.respond(ResponseBody::message(ResponseKind::OffsetCommit(response))));
            return;
        }
        self.note_admitted_commit(request, out);
        let commit_timestamp = host.wall_clock(now);
        let max_metadata = self.config.offset_metadata_max_bytes.max(0) as usize;
        let mut offsets = Vec::new();
        let mut records = Vec::new();
        for (topic, answered) in request.topics.iter().zip(&mut response.topics) {
            let known = host.partition_count(topic.name.as_str());
            for (partition, entry) in topic.partitions.iter().zip(&mut answered.partitions) {
                let metadata = partition
                    .committed_metadata
                    .as_ref()
                    .map_or("", StrBytes::as_str);
                if !known.is_some_and(|count| (0..count).contains(&partition.partition_index)) {
                    entry.error_code = ErrorCode::UnknownTopicOrPartition.code();
                } else if metadata.len() > max_metadata {
                    entry.error_code = ErrorCode::OffsetMetadataTooLarge.code();
                } else {
                    let topic_partition =
                        TopicPartition::new(topic.name.as_str(), partition.partition_index);
                    let committed = CommittedOffset {
                        offset: partition.committed_offset,
                        leader_epoch: if reply_to.api_version() >= 6 {
                            partition.committed_leader_epoch
                        } else {
                            -1
                        },
                        metadata: metadata.to_owned(),
                        commit_timestamp,
                    };
                    records.push(OffsetsRecord::Offset {
                        group: group_id.to_owned(),
                        partition: topic_partition.clone(),
                        value: Some(committed.clone()),
                    });
                    offsets.push((topic_partition, committed));
                }
            }
        }
        if records.is_empty() {
            out.push(reply_to.respond(ResponseBody::message(ResponseKind::OffsetCommit(response))));
            return;
        }
        if let Some(group) = self.groups.get_mut(group_id) {
            group.pending_commits += 1;
        }
        let write = GroupWrite::Commit {
            reply_to,
            group_id: group_id.to_owned(),
            offsets,
            response,
        };
        self.write(now, group_id, &records, write, host, out);
    }

    /// Reports a commit that passed the fencing, with the group as it is now.
    fn note_admitted_commit<F>(&self, request: &OffsetCommitRequest, out: &mut Vec<Output<F>>) {
        let group_id = request.group_id.as_str();
        let Some(group) = self.groups.get(group_id) else {
            return;
        };
        let member = request.member_id.as_str();
        out.push(Output::Event(BrokerEvent::CommitAdmitted {
            partition: TopicPartition::new(
                OFFSETS_TOPIC,
                partition_for(group_id, self.partitions()),
            ),
            group: group_id.to_owned(),
            member: member.to_owned(),
            generation: request.generation_id_or_member_epoch,
            group_generation: group.generation(),
            member_known: group.has_member(member),
        }));
    }

    /// Kafka's `handleCommitOffsets` checks: an unknown group takes only a simple consumer's
    /// commit (generation -1), which creates it; a known one fences by generation and member.
    fn check_commit<H: OffsetsLog>(
        &mut self,
        now: Millis,
        request: &OffsetCommitRequest,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) -> Result<(), ErrorCode> {
        let group_id = request.group_id.as_str();
        self.coordinate(now, group_id, host, out)?;
        let generation = request.generation_id_or_member_epoch;
        let instance = request.group_instance_id.as_ref().map(StrBytes::as_str);
        match self.groups.get_mut(group_id) {
            Some(group) => {
                group.check_commit(now, request.member_id.as_str(), instance, generation)
            }
            None if generation < 0 => {
                self.groups
                    .insert(group_id.to_owned(), Group::new(group_id.to_owned()));
                Ok(())
            }
            None => Err(ErrorCode::IllegalGeneration),
        }
    }

    pub(crate) fn on_offset_fetch_request<H: OffsetsLog>(
        &mut self,
        now: Millis,
        api_version: i16,
        request: &OffsetFetchRequest,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) -> ResponseKind {
        let mut response = OffsetFetchResponse::default();
        if api_version >= 8 {
            for group in &request.groups {
                let topics = group.topics.as_ref().map(|topics| {
                    topics
                        .iter()
                        .map(|topic| (topic.name.to_string(), topic.partition_indexes.clone()))
                        .collect()
                });
                let mut entry =
                    OffsetFetchResponseGroup::default().with_group_id(group.group_id.clone());
                match self.committed_offsets(now, group.group_id.as_str(), topics, host, out) {
                    Ok(found) => {
                        entry.topics = found
                            .into_iter()
                            .map(|(name, partitions)| {
                                OffsetFetchResponseTopics::default()
                                    .with_name(topic_name(name))
                                    .with_partitions(
                                        partitions
                                            .into_iter()
                                            .map(|(index, offset)| {
                                                let (offset, epoch, metadata) = fields(offset);
                                                OffsetFetchResponsePartitions::default()
                                                    .with_partition_index(index)
                                                    .with_committed_offset(offset)
                                                    .with_committed_leader_epoch(epoch)
                                                    .with_metadata(Some(metadata))
                                            })
                                            .collect(),
                                    )
                            })
                            .collect();
                    }
                    Err(error) => entry.error_code = error.code(),
                }
                response.groups.push(entry);
            }
            return ResponseKind::OffsetFetch(response);
        }
        let topics = request.topics.as_ref().map(|topics| {
            topics
                .iter()
                .map(|topic| (topic.name.to_string(), topic.partition_indexes.clone()))
                .collect::<Vec<_>>()
        });
        match self.committed_offsets(now, request.group_id.as_str(), topics.clone(), host, out) {
            Ok(found) => {
                response.topics = found
                    .into_iter()
                    .map(|(name, partitions)| {
                        v1_topic(name, partitions, api_version, ErrorCode::None)
                    })
                    .collect();
            }
            Err(error) if api_version >= 2 => response.error_code = error.code(),
            Err(error) => {
                // v1 has no top-level error: every requested partition carries it.
                response.topics = topics
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(name, partitions)| {
                        let partitions =
                            partitions.into_iter().map(|index| (index, None)).collect();
                        v1_topic(name, partitions, api_version, error)
                    })
                    .collect();
            }
        }
        ResponseKind::OffsetFetch(response)
    }

    /// The committed offsets of `topics` (`None`: every partition the group committed for).
    fn committed_offsets<H: OffsetsLog>(
        &mut self,
        now: Millis,
        group_id: &str,
        topics: Option<Vec<(String, Vec<i32>)>>,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) -> Result<Vec<TopicOffsets>, ErrorCode> {
        self.coordinate(now, group_id, host, out)?;
        let group = self.groups.get(group_id);
        let offset_of = |partition: &TopicPartition| {
            group.and_then(|group| group.offsets.get(partition).cloned())
        };
        let Some(topics) = topics else {
            let mut by_topic: Vec<TopicOffsets> = Vec::new();
            for (partition, offset) in group.iter().flat_map(|group| &group.offsets) {
                if by_topic
                    .last()
                    .is_none_or(|(name, _)| **name != *partition.topic)
                {
                    by_topic.push((partition.topic.to_string(), Vec::new()));
                }
                let (_, partitions) = by_topic.last_mut().expect("pushed");
                partitions.push((partition.partition, Some(offset.clone())));
            }
            return Ok(by_topic);
        };
        Ok(topics
            .into_iter()
            .map(|(name, partitions)| {
                let found = partitions
                    .into_iter()
                    .map(|index| (index, offset_of(&TopicPartition::new(name.as_str(), index))))
                    .collect();
                (name, found)
            })
            .collect())
    }
}

/// An OffsetCommit answer with every requested partition, no error yet.
fn commit_response(request: &OffsetCommitRequest) -> OffsetCommitResponse {
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|partition| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(partition.partition_index)
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

fn topic_name(name: String) -> TopicName {
    TopicName(StrBytes::from_string(name))
}

/// Offset, leader epoch and metadata as OffsetFetch reports them (-1, -1, "" when none).
fn fields(offset: Option<CommittedOffset>) -> (i64, i32, StrBytes) {
    match offset {
        Some(offset) => (
            offset.offset,
            offset.leader_epoch,
            StrBytes::from_string(offset.metadata),
        ),
        None => (-1, -1, StrBytes::default()),
    }
}

fn v1_topic(
    name: String,
    partitions: Vec<(i32, Option<CommittedOffset>)>,
    api_version: i16,
    error: ErrorCode,
) -> OffsetFetchResponseTopic {
    OffsetFetchResponseTopic::default()
        .with_name(topic_name(name))
        .with_partitions(
            partitions
                .into_iter()
                .map(|(index, offset)| {
                    let (offset, epoch, metadata) = fields(offset);
                    let mut entry = OffsetFetchResponsePartition::default()
                        .with_partition_index(index)
                        .with_committed_offset(offset)
                        .with_metadata(Some(metadata))
                        .with_error_code(error.code());
                    if api_version >= 5 {
                        entry.committed_leader_epoch = epoch;
                    }
                    entry
                })
                .collect(),
        )
}
