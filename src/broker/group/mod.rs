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

pub(crate) mod records;
pub(crate) mod state;

use std::collections::BTreeMap;

use self::records::OffsetsRecord;
use self::state::{Effects, Group};
use crate::node_io::ReplyTo;
use crate::types::Millis;

/// The internal topic of committed offsets and group state.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Kafka's `String.hashCode` over UTF-16 code units.
fn java_string_hash(text: &str) -> i32 {
    text.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The `__consumer_offsets` partition of `group_id` (Kafka's
/// `Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount`).
pub fn partition_for(group_id: &str, partitions: i32) -> i32 {
    let hash = java_string_hash(group_id);
    let positive = if hash == i32::MIN { 0 } else { hash.abs() };
    positive % partitions.max(1)
}

/// A DeleteGroups waiting for its groups' tombstones.
#[derive(Debug)]
pub(crate) struct PendingDeletion {
    pub(super) reply_to: ReplyTo,
    pub(super) response: kafka_protocol::messages::DeleteGroupsResponse,
    pub(super) outstanding: usize,
}

/// Every group this broker coordinates, and which offsets partitions it has loaded.
#[derive(Debug, Default)]
#[allow(
    clippy::struct_field_names,
    reason = "`groups.groups` reads as the groups of the coordinator"
)]
pub(crate) struct Groups {
    /// Groups by id.
    pub(crate) groups: BTreeMap<String, Group>,
    /// Loaded `__consumer_offsets` partitions, with the leader epoch they were loaded in.
    pub(crate) loaded: BTreeMap<i32, i32>,
    /// When this broker last asked the controller to create `__consumer_offsets`.
    pub(crate) creation_asked: Option<Millis>,
    /// DeleteGroups requests waiting for their tombstones, by number.
    pub(crate) deletions: BTreeMap<u64, PendingDeletion>,
    /// The last deletion number handed out.
    pub(crate) next_deletion: u64,
    /// When expired offsets are next looked for (`offsets.retention.check.interval.ms` after
    /// the broker started, then after each check).
    pub(crate) next_retention_check: Option<Millis>,
}

impl Groups {
    /// Replays one partition's records (in log order) into its groups.
    pub(crate) fn replay(&mut self, now: Millis, records: Vec<OffsetsRecord>) {
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
    pub(crate) fn unload(&mut self, partition: i32, partitions: i32, fx: &mut Effects) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from Java: `Math.abs("my-group".hashCode()) % 50` and friends.
    #[test]
    fn the_partition_of_a_group_is_kafkas() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        assert_eq!(partition_for("hello", 50), 99_162_322 % 50);
        assert_eq!(partition_for("anything", 1), 0);
    }
}
