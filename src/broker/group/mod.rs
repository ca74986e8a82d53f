//! The group coordinator (Kafka's classic protocol): consumer groups and their committed
//! offsets, stored in the internal topic `__consumer_offsets`.
//!
//! A group belongs to the partition `abs(javaHash(group.id)) % offsets.topic.num.partitions`
//! of that topic, and its coordinator is that partition's leader. A broker loads a partition's
//! groups the first time it needs them while it leads the partition (replaying the partition's
//! records: offsets, and each group's last stored generation with its members and assignment),
//! and drops them when it no longer leads it. Every change that must survive a restart (an
//! offset commit, the leader's assignment, an empty generation, a deletion) is appended to the
//! partition as acks=all, and takes effect, and is answered, only once that append is durable
//! and replicated; the state machine of each group is in [`state`].

mod coordinator;
mod handlers;
mod offsets;
pub(crate) mod records;
pub(crate) mod state;

use std::collections::BTreeMap;

use bytes::Bytes;

pub(crate) use self::coordinator::GroupWrite;
use self::records::OffsetsRecord;
use self::state::{Effects, Group};
use crate::config::broker::GroupConfig;
use crate::node_io::{ConnectionId, Output, ReplyTo};
use crate::protocol::record_batch::Record;
use crate::protocol::ErrorCode;
use crate::types::Millis;

/// The internal topic of committed offsets and group state.
pub use crate::metadata::topics::OFFSETS_TOPIC;

/// The `__consumer_offsets` partition of a group id (Kafka's
/// `Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount`).
pub use crate::coordinator::partition_for;

/// A DeleteGroups waiting for its groups' tombstones.
#[derive(Debug)]
pub(crate) struct PendingDeletion {
    pub(super) reply_to: ReplyTo,
    pub(super) response: kafka_protocol::messages::DeleteGroupsResponse,
    pub(super) outstanding: usize,
}

/// What the group coordinator needs of the broker it runs in (Kafka's `PartitionWriter`,
/// `CoordinatorLoader` and metadata image, seen from `group-coordinator`): the
/// `__consumer_offsets` partitions it leads, their records, appends to them, where each
/// partition's leader is, and the broker's clock and randomness. The router implements it
/// (`broker/router/group_log.rs`); the coordinator never sees the rest of the broker.
pub(crate) trait OffsetsLog {
    /// The storage's file handle, in the outputs an append may push.
    type File;

    /// Wall-clock milliseconds since the epoch at `now` (commit timestamps, retention).
    fn wall_clock(&self, now: Millis) -> i64;

    /// A random 64-bit number from the broker's seeded generator (new member ids).
    fn random_u64(&mut self) -> u64;

    /// The leader epoch this broker leads `__consumer_offsets-partition` in, if it leads it and
    /// the replica is online.
    fn offsets_leader_epoch(&self, partition: i32) -> Option<i32>;

    /// Every record of `__consumer_offsets-partition` from its log start (NOT_COORDINATOR
    /// without a replica here, COORDINATOR_NOT_AVAILABLE when the log cannot be read).
    fn read_offsets(&self, partition: i32) -> Result<Vec<Record>, ErrorCode>;

    /// Appends `batch` to `__consumer_offsets-partition` as an acks=all produce would
    /// (validation, flush policy, replication within `timeout_ms`); `write` comes back to
    /// [`GroupCoordinator::on_write_done`] with the append's error once it is durable and
    /// replicated, or failed, at the end of the input at the latest.
    fn append_offsets(
        &mut self,
        now: Millis,
        partition: i32,
        batch: Bytes,
        timeout_ms: i32,
        write: GroupWrite,
        out: &mut Vec<Output<Self::File>>,
    );

    /// How many partitions `topic` has, if it exists (an offset commit names only those).
    fn partition_count(&self, topic: &str) -> Option<i32>;

    /// Whether `__consumer_offsets` exists yet.
    fn offsets_topic_exists(&self) -> bool;

    /// Asks for `__consumer_offsets` to be created with `config`'s `offsets.topic.*`.
    fn create_offsets_topic(&mut self, now: Millis, out: &mut Vec<Output<Self::File>>);

    /// The node, host and port of the broker that leads `__consumer_offsets-partition`
    /// (COORDINATOR_NOT_AVAILABLE when none does, or it is fenced).
    fn offsets_leader_address(&self, partition: i32) -> Result<(i32, String, i32), ErrorCode>;
}

/// The group coordinator (Kafka's `GroupCoordinator` with its `GroupMetadataManager`): every
/// group this broker coordinates, which offsets partitions it has loaded, and the DeleteGroups
/// waiting for their tombstones. Its inputs are the group APIs' requests, the completions of
/// its writes and the clock's ticks; its outputs are answers, events and appends through
/// [`OffsetsLog`].
#[derive(Debug, Default)]
pub(crate) struct GroupCoordinator {
    /// The broker's `offsets.*` and `group.*` settings.
    config: GroupConfig,
    /// Groups by id.
    groups: BTreeMap<String, Group>,
    /// Loaded `__consumer_offsets` partitions, with the leader epoch they were loaded in.
    loaded: BTreeMap<i32, i32>,
    /// DeleteGroups requests waiting for their tombstones, by number.
    deletions: BTreeMap<u64, PendingDeletion>,
    /// The last deletion number handed out.
    next_deletion: u64,
    /// When expired offsets are next looked for (`offsets.retention.check.interval.ms` after
    /// the broker started, then after each check).
    next_retention_check: Option<Millis>,
}

impl GroupCoordinator {
    /// A coordinator with no group loaded yet; the first offset retention check is due at
    /// `first_retention_check`.
    pub(crate) fn new(config: GroupConfig, first_retention_check: Millis) -> GroupCoordinator {
        GroupCoordinator {
            config,
            next_retention_check: Some(first_retention_check),
            ..GroupCoordinator::default()
        }
    }

    /// Whether it holds nothing at all (what the router leaves in its place while it runs).
    pub(crate) fn is_vacant(&self) -> bool {
        self.groups.is_empty()
            && self.loaded.is_empty()
            && self.deletions.is_empty()
            && self.next_retention_check.is_none()
    }

    /// A connection closed: its parked joins and syncs are dropped.
    pub(crate) fn drop_connection(&mut self, connection: ConnectionId) {
        for group in self.groups.values_mut() {
            group.drop_connection(connection);
        }
    }

    /// Replays one partition's records (in log order) into its groups.
    fn replay(&mut self, now: Millis, records: Vec<OffsetsRecord>) {
        for record in records {
            match record {
                OffsetsRecord::Offset {
                    group,
                    partition,
                    value,
                } => {
                    let entry = self
                        .groups
                        .entry(group.clone())
                        .or_insert_with(|| Group::new(group));
                    match value {
                        Some(offset) => {
                            entry.offsets.insert(partition, offset);
                        }
                        None => {
                            entry.offsets.remove(&partition);
                        }
                    }
                }
                OffsetsRecord::Group { group, value } => match value {
                    Some(stored) => self
                        .groups
                        .entry(group.clone())
                        .or_insert_with(|| Group::new(group))
                        .loaded(now, stored),
                    None => {
                        self.groups.remove(&group);
                    }
                },
            }
        }
    }

    /// Drops the groups of an offsets partition this broker no longer leads; their parked
    /// answers fail with NOT_COORDINATOR.
    fn unload(&mut self, partition: i32, partitions: i32, fx: &mut Effects) {
        self.loaded.remove(&partition);
        let gone: Vec<String> = self
            .groups
            .keys()
            .filter(|id| partition_for(id, partitions) == partition)
            .cloned()
            .collect();
        for id in gone {
            if let Some(mut group) = self.groups.remove(&id) {
                group.unload(crate::protocol::ErrorCode::NotCoordinator, fx);
            }
        }
    }

    /// The earliest deadline of any group.
    pub(crate) fn next_deadline(&self) -> Option<Millis> {
        self.groups
            .values()
            .filter_map(Group::next_deadline)
            .chain(self.next_retention_check)
            .min()
    }

    /// Every group's invariants.
    pub(crate) fn check_invariants(&self) {
        for group in self.groups.values() {
            group.check_invariants();
        }
    }
}
