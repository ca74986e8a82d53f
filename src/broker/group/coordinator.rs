//! The group coordinator's own work: which groups it coordinates (the groups of the
//! `__consumer_offsets` partitions its broker leads), loading them from the log, storing their
//! changes in the log as acks=all appends through [`OffsetsLog`], and their deadlines.

use kafka_protocol::messages::{
    JoinGroupResponse, OffsetCommitResponse, ResponseKind, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::records::{CommittedOffset, OffsetsRecord};
use super::state::{Effects, GroupReply, Limits};
use super::{partition_for, GroupCoordinator, OffsetsLog, OFFSETS_TOPIC};
use crate::node_io::{Output, ReplyTo, ResponseBody};
use crate::protocol::record_batch::BatchBuilder;
use crate::protocol::ErrorCode;
use crate::types::{Millis, TopicPartition};

/// A write to `__consumer_offsets` and what its completion does.
#[derive(Debug)]
pub(crate) enum GroupWrite {
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

impl GroupCoordinator {
    /// The group state machine's limits (`group.initial.rebalance.delay.ms`, `group.max.size`).
    pub(super) fn limits(&self) -> Limits {
        Limits {
            initial_rebalance_delay_ms: self.config.initial_rebalance_delay_ms,
            max_size: self.config.max_size,
        }
    }

    /// `offsets.topic.num.partitions`.
    pub(crate) fn partitions(&self) -> i32 {
        self.config.offsets_topic_num_partitions
    }

    /// Drops the groups of every loaded partition this broker no longer leads (or leads in a
    /// newer epoch, when another leader may have written in between).
    pub(crate) fn sync_ownership<H: OffsetsLog>(
        &mut self,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) {
        let partitions = self.partitions();
        let lost: Vec<i32> = self
            .loaded
            .iter()
            .filter(|(partition, epoch)| host.offsets_leader_epoch(**partition) != Some(**epoch))
            .map(|(partition, _)| *partition)
            .collect();
        for partition in lost {
            let mut fx = Effects::default();
            self.unload(partition, partitions, &mut fx);
            Self::send_replies(fx.replies, out);
        }
    }

    /// Whether this broker coordinates `group_id` now, loading its partition first if needed:
    /// NOT_COORDINATOR if it does not lead the group's partition.
    pub(super) fn coordinate<H: OffsetsLog>(
        &mut self,
        now: Millis,
        group_id: &str,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) -> Result<(), ErrorCode> {
        if group_id.is_empty() {
            return Err(ErrorCode::InvalidGroupId);
        }
        self.sync_ownership(host, out);
        let partition = partition_for(group_id, self.partitions());
        let epoch = host
            .offsets_leader_epoch(partition)
            .ok_or(ErrorCode::NotCoordinator)?;
        if !self.loaded.contains_key(&partition) {
            self.load(now, partition, host)?;
            self.loaded.insert(partition, epoch);
        }
        Ok(())
    }

    /// Replays every record of an offsets partition into its groups.
    fn load<H: OffsetsLog>(
        &mut self,
        now: Millis,
        partition: i32,
        host: &H,
    ) -> Result<(), ErrorCode> {
        let topic_partition = TopicPartition::new(OFFSETS_TOPIC, partition);
        let records = host.read_offsets(partition)?;
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
        self.replay(now, decoded);
        Ok(())
    }

    /// Appends `records` to the group's offsets partition (acks=all); `write` completes when
    /// the append is durable and replicated, or failed.
    pub(super) fn write<H: OffsetsLog>(
        &mut self,
        now: Millis,
        group_id: &str,
        records: &[OffsetsRecord],
        write: GroupWrite,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) {
        let partition = partition_for(group_id, self.partitions());
        let timestamp = host.wall_clock(now);
        let mut builder = BatchBuilder::default();
        for record in records {
            let (key, value) = record.encode();
            builder.push(timestamp, Some(&key), value.as_deref());
        }
        let timeout_ms = self.config.offsets_commit_timeout_ms;
        host.append_offsets(now, partition, builder.finish(), timeout_ms, write, out);
    }

    /// A write finished with `error` (from the produce path): apply and answer.
    pub(crate) fn on_write_done<H: OffsetsLog>(
        &mut self,
        now: Millis,
        write: GroupWrite,
        error: ErrorCode,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) {
        let error = coordinator_error(error);
        match write {
            GroupWrite::Commit {
                reply_to,
                group_id,
                offsets,
                mut response,
            } => {
                if let Some(group) = self.groups.get_mut(&group_id) {
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
                let limits = self.limits();
                let mut fx = Effects::default();
                if let Some(group) = self.groups.get_mut(&group_id) {
                    let outcome = if error == ErrorCode::None {
                        Ok(())
                    } else {
                        Err(error)
                    };
                    group.on_stored(now, generation, outcome, limits, &mut fx);
                }
                self.apply_effects(now, &group_id, fx, host, out);
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
                let Some(pending) = self.deletions.get_mut(&deletion) else {
                    return;
                };
                pending.response.results[index].error_code = error.code();
                pending.outstanding -= 1;
                if pending.outstanding == 0 {
                    let pending = self.deletions.remove(&deletion).expect("present");
                    out.push(pending.reply_to.respond(ResponseBody::message(
                        ResponseKind::DeleteGroups(pending.response),
                    )));
                }
            }
        }
    }

    /// Sends a group operation's answers and starts its writes.
    pub(super) fn apply_effects<H: OffsetsLog>(
        &mut self,
        now: Millis,
        group_id: &str,
        fx: Effects,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) {
        Self::send_replies(fx.replies, out);
        let wall = host.wall_clock(now);
        let state_timestamp = self.groups.get_mut(group_id).and_then(|group| {
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
            self.write(now, group_id, &[record], write, host, out);
        }
    }

    /// The group state machine's answers, as responses.
    pub(super) fn send_replies<F>(replies: Vec<GroupReply>, out: &mut Vec<Output<F>>) {
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
    pub(crate) fn on_tick<H: OffsetsLog>(
        &mut self,
        now: Millis,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) {
        self.sync_ownership(host, out);
        if self.next_retention_check.is_some_and(|due| due <= now) {
            self.expire_offsets(now, host, out);
        }
        let limits = self.limits();
        let due: Vec<String> = self
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
            if let Some(group) = self.groups.get_mut(&id) {
                group.on_tick(now, limits, &mut fx);
            }
            self.apply_effects(now, &id, fx, host, out);
        }
    }

    /// Kafka's `cleanupGroupMetadata`: removes every loaded group's expired offsets
    /// ([`Group::expired_offsets`]) and the groups left empty without offsets, and appends their
    /// tombstones to `__consumer_offsets`. They are gone from memory at once, as in Kafka; a
    /// tombstone that fails to append leaves the offset to come back when the partition is
    /// loaded again.
    fn expire_offsets<H: OffsetsLog>(
        &mut self,
        now: Millis,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) {
        // Kafka loads a partition's groups when it becomes its leader; seedlog loads them when
        // first asked, so the check loads those nobody asked for, or their offsets would never
        // expire (after a restart, say).
        for partition in 0..self.partitions() {
            if let Some(epoch) = host.offsets_leader_epoch(partition) {
                if !self.loaded.contains_key(&partition) && self.load(now, partition, host).is_ok()
                {
                    self.loaded.insert(partition, epoch);
                }
            }
        }
        let groups = &self.config;
        self.next_retention_check = Some(now.plus(groups.offsets_retention_check_interval_ms));
        let retention_ms = groups.offsets_retention_minutes.saturating_mul(60_000);
        let wall = host.wall_clock(now);
        let mut writes = Vec::new();
        let mut expired_total = 0;
        self.groups.retain(|id, group| {
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
            self.write(now, &group_id, &records, write, host, out);
        }
    }

    /// Where the coordinator of `group_id` is (node, host, port), asking for
    /// `__consumer_offsets` when it does not exist yet (COORDINATOR_NOT_AVAILABLE meanwhile).
    pub(super) fn find_coordinator<H: OffsetsLog>(
        &mut self,
        now: Millis,
        group_id: &str,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) -> Result<(i32, String, i32), ErrorCode> {
        if !host.offsets_topic_exists() {
            host.create_offsets_topic(now, out);
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        host.offsets_leader_address(partition_for(group_id, self.partitions()))
    }
}
