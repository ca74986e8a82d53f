//! The broker's side of the group coordinator: which groups it coordinates (the groups of
//! the `__consumer_offsets` partitions it leads), loading them from the log, storing their
//! changes in the log as acks=all appends, and their deadlines.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{
    CreateTopicsRequest, JoinGroupResponse, OffsetCommitResponse, RequestKind, ResponseKind,
    SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::group::records::{CommittedOffset, OffsetsRecord};
use super::group::state::{Effects, GroupReply, Limits};
use super::group::{partition_for, OFFSETS_TOPIC};
use super::metadata::MetadataRecord;
use super::{Broker, Output, ReplyTo, ResponseBody};
use crate::protocol::record_batch::BatchBuilder;
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

/// A write to `__consumer_offsets` and what its completion does.
#[derive(Debug)]
pub(super) enum GroupWrite {
    /// An OffsetCommit: applied to the group and answered once stored.
    Commit {
        reply_to: ReplyTo,
        group_id: String,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
        response: OffsetCommitResponse,
    },
    /// A group's generation (with the leader's assignment when `generation` is set).
    Store {
        group_id: String,
        generation: Option<i32>,
    },
    /// The tombstones of a deleted group: result `index` of DeleteGroups `deletion`.
    Delete { deletion: u64, index: usize },
    /// The tombstones of a group's expired offsets (and of the group, if it went with them).
    Expire { group_id: String },
}

/// Kafka's mapping of an append error to what a group request answers
/// (`GroupMetadataManager`): the partition is unavailable, or not led here any more.
fn coordinator_error(error: ErrorCode) -> ErrorCode {
    match error {
        ErrorCode::None => ErrorCode::None,
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend
        | ErrorCode::RequestTimedOut => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        ErrorCode::MessageTooLarge
        | ErrorCode::RecordListTooLarge
        | ErrorCode::InvalidFetchSize => ErrorCode::InvalidCommitOffsetSize,
        _ => ErrorCode::UnknownServerError,
    }
}

impl<S: Storage> Broker<S> {
    pub(super) fn group_limits(&self) -> Limits {
        Limits {
            initial_rebalance_delay_ms: self.config.groups.initial_rebalance_delay_ms,
            max_size: self.config.groups.max_size,
        }
    }

    pub(super) fn offsets_partitions(&self) -> i32 {
        self.config.groups.offsets_topic_num_partitions
    }

    /// The leader epoch this broker leads `__consumer_offsets-partition` in, if it does.
    fn leads_offsets_partition(&self, partition: i32) -> Option<i32> {
        let replica = self
            .replicas
            .get(&TopicPartition::new(OFFSETS_TOPIC, partition))?;
        (replica.is_leader() && replica.offline().is_none()).then_some(replica.leader_epoch.0)
    }

    /// Drops the groups of every loaded partition this broker no longer leads (or leads in a
    /// newer epoch, when another leader may have written in between).
    pub(super) fn sync_group_ownership(&mut self, out: &mut Vec<Output<S::File>>) {
        let partitions = self.offsets_partitions();
        let lost: Vec<i32> = self
            .groups
            .loaded
            .iter()
            .filter(|(partition, epoch)| self.leads_offsets_partition(**partition) != Some(**epoch))
            .map(|(partition, _)| *partition)
            .collect();
        for partition in lost {
            let mut fx = Effects::default();
            self.groups.unload(partition, partitions, &mut fx);
            Self::send_group_replies(fx.replies, out);
        }
    }

    /// Whether this broker coordinates `group_id` now, loading its partition first if needed:
    /// NOT_COORDINATOR if it does not lead the group's partition.
    pub(super) fn coordinate(
        &mut self,
        now: Millis,
        group_id: &str,
        out: &mut Vec<Output<S::File>>,
    ) -> Result<(), ErrorCode> {
        if group_id.is_empty() {
            return Err(ErrorCode::InvalidGroupId);
        }
        self.sync_group_ownership(out);
        let partition = partition_for(group_id, self.offsets_partitions());
        let epoch = self
            .leads_offsets_partition(partition)
            .ok_or(ErrorCode::NotCoordinator)?;
        if !self.groups.loaded.contains_key(&partition) {
            self.load_offsets_partition(now, partition)?;
            self.groups.loaded.insert(partition, epoch);
        }
        Ok(())
    }

    /// Replays every record of an offsets partition into its groups.
    fn load_offsets_partition(&mut self, now: Millis, partition: i32) -> Result<(), ErrorCode> {
        let topic_partition = TopicPartition::new(OFFSETS_TOPIC, partition);
        let replica = self
            .replicas
            .get(&topic_partition)
            .ok_or(ErrorCode::NotCoordinator)?;
        let records = super::read_log_records(&replica.log, replica.log.log_start_offset())
            .map_err(|error| {
                tracing::error!(partition = %topic_partition, %error, "cannot load groups");
                ErrorCode::CoordinatorNotAvailable
            })?;
        let mut decoded = Vec::with_capacity(records.len());
        for record in records {
            let Some(key) = record.key else { continue };
            match OffsetsRecord::decode(&key, record.value.as_deref()) {
                Ok(Some(record)) => decoded.push(record),
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(partition = %topic_partition, offset = record.offset, %error, "skipped");
                }
            }
        }
        tracing::info!(partition = %topic_partition, records = decoded.len(), "loaded groups");
        self.groups.replay(now, decoded);
        Ok(())
    }

    /// Appends `records` to the group's offsets partition (acks=all); `write` completes when
    /// the append is durable and replicated, or failed.
    pub(super) fn write_group_records(
        &mut self,
        now: Millis,
        group_id: &str,
        records: &[OffsetsRecord],
        write: GroupWrite,
        out: &mut Vec<Output<S::File>>,
    ) {
        let partition = partition_for(group_id, self.offsets_partitions());
        let timestamp = self.wall_clock(now);
        let mut builder = BatchBuilder::default();
        for record in records {
            let (key, value) = record.encode();
            builder.push(timestamp, Some(&key), value.as_deref());
        }
        let timeout_ms = self.config.groups.offsets_commit_timeout_ms;
        self.append_internal(
            now,
            &TopicPartition::new(OFFSETS_TOPIC, partition),
            builder.finish(),
            timeout_ms,
            write,
            out,
        );
    }

    /// A write finished with `error` (from the produce path): apply and answer.
    pub(super) fn on_group_write_done(
        &mut self,
        now: Millis,
        write: GroupWrite,
        error: ErrorCode,
        out: &mut Vec<Output<S::File>>,
    ) {
        let error = coordinator_error(error);
        match write {
            GroupWrite::Commit {
                reply_to,
                group_id,
                offsets,
                mut response,
            } => {
                if let Some(group) = self.groups.groups.get_mut(&group_id) {
                    group.pending_commits = group.pending_commits.saturating_sub(1);
                    if error == ErrorCode::None {
                        group.offsets.extend(offsets);
                    }
                }
                for topic in &mut response.topics {
                    for partition in &mut topic.partitions {
                        if partition.error_code == ErrorCode::None.code() {
                            partition.error_code = error.code();
                        }
                    }
                }
                out.push(
                    reply_to.respond(ResponseBody::message(ResponseKind::OffsetCommit(response))),
                );
            }
            GroupWrite::Store {
                group_id,
                generation: Some(generation),
            } => {
                let limits = self.group_limits();
                let mut fx = Effects::default();
                if let Some(group) = self.groups.groups.get_mut(&group_id) {
                    let outcome = if error == ErrorCode::None {
                        Ok(())
                    } else {
                        Err(error)
                    };
                    group.on_stored(now, generation, outcome, limits, &mut fx);
                }
                self.apply_group_effects(now, &group_id, fx, out);
            }
            GroupWrite::Store { .. } => {
                if error != ErrorCode::None {
                    tracing::warn!(?error, "storing an empty generation failed");
                }
            }
            GroupWrite::Expire { group_id } => {
                if error != ErrorCode::None {
                    tracing::warn!(group = %group_id, ?error, "storing expired offsets' tombstones failed");
                }
            }
            GroupWrite::Delete { deletion, index } => {
                let Some(pending) = self.groups.deletions.get_mut(&deletion) else {
                    return;
                };
                pending.response.results[index].error_code = error.code();
                pending.outstanding -= 1;
                if pending.outstanding == 0 {
                    let pending = self.groups.deletions.remove(&deletion).expect("present");
                    out.push(pending.reply_to.respond(ResponseBody::message(
                        ResponseKind::DeleteGroups(pending.response),
                    )));
                }
            }
        }
    }

    /// Sends a group operation's answers and starts its writes.
    pub(super) fn apply_group_effects(
        &mut self,
        now: Millis,
        group_id: &str,
        fx: Effects,
        out: &mut Vec<Output<S::File>>,
    ) {
        Self::send_group_replies(fx.replies, out);
        let wall = self.wall_clock(now);
        let state_timestamp = self.groups.groups.get_mut(group_id).and_then(|group| {
            group.stamp(wall);
            group.state_timestamp()
        });
        for (mut stored, generation) in fx.store {
            stored.state_timestamp = state_timestamp.unwrap_or(-1);
            let record = OffsetsRecord::Group {
                group: group_id.to_owned(),
                value: Some(stored),
            };
            let write = GroupWrite::Store {
                group_id: group_id.to_owned(),
                generation,
            };
            self.write_group_records(now, group_id, &[record], write, out);
        }
    }

    pub(super) fn send_group_replies(replies: Vec<GroupReply>, out: &mut Vec<Output<S::File>>) {
        for reply in replies {
            out.push(match reply {
                GroupReply::Join {
                    reply_to,
                    error,
                    generation,
                    protocol_type,
                    protocol,
                    leader,
                    member_id,
                    members,
                } => {
                    let version = reply_to.api_version();
                    let string = |text: String| StrBytes::from_string(text);
                    let mut body = JoinGroupResponse::default()
                        .with_error_code(error.code())
                        .with_generation_id(generation)
                        .with_leader(string(leader))
                        .with_member_id(string(member_id))
                        .with_protocol_name(Some(string(protocol.unwrap_or_default())));
                    if version >= 7 {
                        body.protocol_type = protocol_type.map(string);
                        if error != ErrorCode::None {
                            body.protocol_name = None;
                        }
                    }
                    body.members = members
                        .into_iter()
                        .map(|member| {
                            let mut entry = kafka_protocol::messages::join_group_response::JoinGroupResponseMember::default()
                                .with_member_id(string(member.member_id))
                                .with_metadata(member.metadata);
                            if version >= 5 {
                                entry.group_instance_id = member.group_instance_id.map(string);
                            }
                            entry
                        })
                        .collect();
                    reply_to.respond(ResponseBody::message(ResponseKind::JoinGroup(body)))
                }
                GroupReply::Sync {
                    reply_to,
                    error,
                    protocol_type,
                    protocol,
                    assignment,
                } => {
                    let mut body = SyncGroupResponse::default()
                        .with_error_code(error.code())
                        .with_assignment(assignment);
                    if reply_to.api_version() >= 5 {
                        body.protocol_type = protocol_type.map(StrBytes::from_string);
                        body.protocol_name = protocol.map(StrBytes::from_string);
                    }
                    reply_to.respond(ResponseBody::message(ResponseKind::SyncGroup(body)))
                }
            });
        }
    }

    /// Session expiries and join deadlines due at `now`, groups whose partition moved, and the
    /// offset retention check when it is due.
    pub(super) fn on_groups_tick(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        self.sync_group_ownership(out);
        if self
            .groups
            .next_retention_check
            .is_some_and(|due| due <= now)
        {
            self.expire_offsets(now, out);
        }
        let limits = self.group_limits();
        let due: Vec<String> = self
            .groups
            .groups
            .iter()
            .filter(|(_, group)| {
                group
                    .next_deadline()
                    .is_some_and(|deadline| deadline <= now)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            let mut fx = Effects::default();
            if let Some(group) = self.groups.groups.get_mut(&id) {
                group.on_tick(now, limits, &mut fx);
            }
            self.apply_group_effects(now, &id, fx, out);
        }
    }

    /// Kafka's `cleanupGroupMetadata`: removes every loaded group's expired offsets
    /// ([`Group::expired_offsets`]) and the groups left empty without offsets, and appends their
    /// tombstones to `__consumer_offsets`. They are gone from memory at once, as in Kafka; a
    /// tombstone that fails to append leaves the offset to come back when the partition is
    /// loaded again.
    fn expire_offsets(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        // Kafka loads a partition's groups when it becomes its leader; seedlog loads them when
        // first asked, so the check loads those nobody asked for, or their offsets would never
        // expire (after a restart, say).
        for partition in 0..self.offsets_partitions() {
            if let Some(epoch) = self.leads_offsets_partition(partition) {
                if !self.groups.loaded.contains_key(&partition)
                    && self.load_offsets_partition(now, partition).is_ok()
                {
                    self.groups.loaded.insert(partition, epoch);
                }
            }
        }
        let groups = &self.config.groups;
        self.groups.next_retention_check =
            Some(now.plus(groups.offsets_retention_check_interval_ms));
        let retention_ms = groups.offsets_retention_minutes.saturating_mul(60_000);
        let wall = self.wall_clock(now);
        let mut writes = Vec::new();
        let mut expired_total = 0;
        self.groups.groups.retain(|id, group| {
            let expired = group.expired_offsets(wall, retention_ms);
            let mut records: Vec<OffsetsRecord> = expired
                .into_iter()
                .filter_map(|partition| {
                    group.offsets.remove(&partition)?;
                    Some(OffsetsRecord::Offset {
                        group: id.clone(),
                        partition,
                        value: None,
                    })
                })
                .collect();
            expired_total += records.len();
            let gone = group.remove_if_unused();
            if gone {
                records.push(OffsetsRecord::Group {
                    group: id.clone(),
                    value: None,
                });
            }
            if !records.is_empty() {
                writes.push((id.clone(), records));
            }
            !gone
        });
        if writes.is_empty() {
            return;
        }
        tracing::info!(
            offsets = expired_total,
            groups = writes.len(),
            "removed expired offsets"
        );
        for (group_id, records) in writes {
            let write = GroupWrite::Expire {
                group_id: group_id.clone(),
            };
            self.write_group_records(now, &group_id, &records, write, out);
        }
    }

    /// Where the coordinator of `group_id` is (node, host, port), creating
    /// `__consumer_offsets` when it does not exist yet (COORDINATOR_NOT_AVAILABLE meanwhile).
    pub(super) fn find_group_coordinator(
        &mut self,
        now: Millis,
        group_id: &str,
        out: &mut Vec<Output<S::File>>,
    ) -> Result<(i32, String, i32), ErrorCode> {
        if self.controller.image.topic(OFFSETS_TOPIC).is_none() {
            self.create_offsets_topic(now, out);
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        let partition = partition_for(group_id, self.offsets_partitions());
        if let Some(membership) = &self.cluster {
            let leader = membership
                .image
                .topic(OFFSETS_TOPIC)
                .and_then(|topic| topic.partitions.get(&partition))
                .map(|registration| registration.leader)
                .filter(|leader| !Self::is_no_leader(*leader))
                .ok_or(ErrorCode::CoordinatorNotAvailable)?;
            let broker = membership
                .image
                .broker(leader)
                .filter(|broker| !broker.fenced)
                .ok_or(ErrorCode::CoordinatorNotAvailable)?;
            return Ok((leader.0, broker.host.clone(), broker.port));
        }
        self.leads_offsets_partition(partition)
            .ok_or(ErrorCode::CoordinatorNotAvailable)?;
        let advertised = self.config.advertised();
        Ok((
            self.config.node_id,
            advertised.host,
            i32::from(advertised.port),
        ))
    }

    /// Asks for `__consumer_offsets` (`offsets.topic.*`): through the controller in a cluster
    /// (again at most once a second: it may lack brokers for the replication factor), else as
    /// this broker's own metadata record.
    fn create_offsets_topic(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        let groups = &self.config.groups;
        let mut configs = BTreeMap::new();
        configs.insert(
            "segment.bytes".to_owned(),
            groups.offsets_topic_segment_bytes.to_string(),
        );
        // Kafka's `GroupCoordinator.offsetsTopicConfigs`: compacted, so the latest commit
        // and group record of each key stay and the rest goes.
        configs.insert("cleanup.policy".to_owned(), "compact".to_owned());
        let partitions = groups.offsets_topic_num_partitions;
        if self.cluster.is_some() {
            if self
                .groups
                .creation_asked
                .is_some_and(|asked| now < asked.plus(1_000))
            {
                return;
            }
            self.groups.creation_asked = Some(now);
            let topic = CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(OFFSETS_TOPIC)))
                .with_num_partitions(partitions)
                .with_replication_factor(groups.offsets_topic_replication_factor)
                .with_configs(
                    configs
                        .into_iter()
                        .map(|(name, value)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string(name))
                                .with_value(Some(StrBytes::from_string(value)))
                        })
                        .collect(),
                );
            let body = CreateTopicsRequest::default()
                .with_topics(vec![topic])
                .with_timeout_ms(30_000);
            self.forward_create_topics(now, None, 7, RequestKind::CreateTopics(body), out);
            return;
        }
        if self.controller.pending.contains(OFFSETS_TOPIC) {
            return;
        }
        let record = MetadataRecord::Topic {
            name: OFFSETS_TOPIC.to_owned(),
            topic_id: self.new_topic_id().to_string(),
            partitions,
            replication_factor: 1,
            configs,
        };
        match self.append_metadata(now, &[record], out) {
            Ok(_) => {
                self.controller.pending.insert(OFFSETS_TOPIC.to_owned());
            }
            Err(error) => tracing::error!(%error, "cannot create {OFFSETS_TOPIC}"),
        }
    }
}
