//! The cluster invariants, checked after every broker step: the monitor mirrors each replica's
//! log (batch boundaries, leader epochs and CRCs, from the brokers' `Appended`, `Truncated` and
//! `LogStartOffset` events), each broker's high watermark, and each broker's view of every
//! partition's leader and ISR. After each event it checks what the TLA+ specifications of Kafka
//! replication check after each action:
//!
//! | check | violated when |
//! |---|---|
//! | `leader-in-isr` | a broker was told (or decided) a partition state whose leader is not in the ISR, or whose ISR holds a broker that is not a replica (`LeaderInIsr`, `TypeOk`) |
//! | `hw-within-isr` | a running broker that leads a partition has a high watermark past the log end of a member of its ISR (`WeakIsr`) |
//! | `strong-isr` | below a running leader's high watermark, an ISR member's log holds other batches than the leader's (hachikuji's `StrongIsr`) |
//! | `committed-lost` | a committed batch (once below a leader's high watermark) is gone from every replica, or a leader's high watermark later covers other records at its offsets (Vanlightly's `NoCommittedRecordLostGlobally`) |
//!
//! A broker that crashes or stops stops presuming: its role is forgotten until the controller's
//! metadata gives it one again; its log stays as it was (a process crash keeps the page cache)
//! until its recovery on restart reports where the log ends. The monitor is plain code: the
//! simulator feeds it, and unit tests drive it with hand-written event sequences.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use seedlog::broker::BrokerEvent;
use seedlog::types::{BrokerId, TopicPartition};

use crate::checker::Check;

/// One batch of a replica's log, as far as telling logs apart goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Batch {
    base: i64,
    last: i64,
    epoch: i32,
    crc: u32,
}

impl fmt::Display for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}..={}] epoch {} crc {:08x}",
            self.base, self.last, self.epoch, self.crc
        )
    }
}

/// A partition state as one broker knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Role {
    leader: BrokerId,
    leader_epoch: i32,
    replicas: Vec<BrokerId>,
    isr: Vec<BrokerId>,
}

/// One broker's replica of one partition.
#[derive(Debug, Default)]
struct Replica {
    batches: VecDeque<Batch>,
    start: i64,
    end: i64,
    high_watermark: i64,
    /// `None` while the broker is down or has not heard from the controller since it started.
    role: Option<Role>,
}

impl Replica {
    /// The index of the batch holding `offset`, or of the first batch after it.
    fn index_of(&self, offset: i64) -> usize {
        self.batches.partition_point(|batch| batch.last < offset)
    }

    /// The batch starting at `base`, if the log has one.
    fn batch_at(&self, base: i64) -> Option<Batch> {
        let batch = *self.batches.get(self.index_of(base))?;
        (batch.base == base).then_some(batch)
    }

    fn holds(&self, batch: &Batch) -> bool {
        self.batch_at(batch.base) == Some(*batch)
    }

    fn leads(&self, id: BrokerId) -> Option<&Role> {
        self.role.as_ref().filter(|role| role.leader == id)
    }
}

/// Everything the monitor knows of one partition.
#[derive(Debug, Default)]
struct PartitionView {
    replicas: BTreeMap<BrokerId, Replica>,
    /// Every batch once below a leader's high watermark, by offset.
    committed: Vec<Batch>,
    /// Where the committed batches end.
    committed_end: i64,
    /// Per (leader, leader epoch, member): the offset below which their logs were compared.
    compared: BTreeMap<(BrokerId, i32, BrokerId), i64>,
    /// Per (leader, leader epoch): how far its high watermark was checked against the
    /// committed batches.
    checked: BTreeMap<(BrokerId, i32), i64>,
}

impl PartitionView {
    fn committed_at(&self, base: i64) -> Option<&Batch> {
        let index = self.committed.partition_point(|batch| batch.last < base);
        self.committed.get(index).filter(|batch| batch.base <= base)
    }
}

/// A broken invariant: which, of what, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub check: Check,
    /// Which partition.
    pub partition: TopicPartition,
    /// What happened.
    pub detail: String,
    /// What makes it the same violation as one already reported.
    key: String,
}

/// A partition's leadership, by node name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    /// The leader.
    pub leader: String,
    /// Every replica.
    pub replicas: Vec<String>,
    /// The in-sync replicas.
    pub isr: Vec<String>,
}

/// The cluster invariants' state over a run.
#[derive(Debug, Default)]
pub struct ClusterMonitor {
    /// Node name → broker id.
    ids: BTreeMap<String, BrokerId>,
    partitions: BTreeMap<TopicPartition, PartitionView>,
    /// Violations already reported (each is reported once).
    reported: BTreeSet<(Check, String)>,
}

impl ClusterMonitor {
    /// A monitor of the brokers named in `ids`.
    pub fn new(ids: BTreeMap<String, BrokerId>) -> ClusterMonitor {
        ClusterMonitor {
            ids,
            ..ClusterMonitor::default()
        }
    }

    /// `node` crashed or was asked to stop: it presumes nothing any more.
    pub fn down(&mut self, node: &str) {
        let Some(id) = self.ids.get(node).copied() else {
            return;
        };
        for view in self.partitions.values_mut() {
            if let Some(replica) = view.replicas.get_mut(&id) {
                replica.role = None;
            }
        }
    }

    /// One event of broker `node`; returns the invariants it broke (each reported once).
    pub fn on_event(&mut self, node: &str, event: &BrokerEvent) -> Vec<Violation> {
        let Some(id) = self.ids.get(node).copied() else {
            return Vec::new();
        };
        let mut violations = Vec::new();
        match event {
            BrokerEvent::Appended {
                partition,
                base_offset,
                last_offset,
                leader_epoch,
                crc,
            } => {
                let replica = self.replica(partition, id);
                let batch = Batch {
                    base: *base_offset,
                    last: *last_offset,
                    epoch: *leader_epoch,
                    crc: *crc,
                };
                if replica.batches.is_empty() {
                    replica.start = replica.start.min(batch.base);
                }
                replica.batches.push_back(batch);
                replica.end = batch.last + 1;
                // Nothing to check: a batch below a leader's high watermark means the log
                // ended below it, which `hw-within-isr` reported already.
                return Vec::new();
            }
            BrokerEvent::Truncated {
                partition,
                from_offset,
                reason,
            } => self.truncate(partition, id, *from_offset, reason, &mut violations),
            BrokerEvent::LogStartOffset { partition, offset } => {
                let replica = self.replica(partition, id);
                while replica
                    .batches
                    .front()
                    .is_some_and(|batch| batch.last < *offset)
                {
                    replica.batches.pop_front();
                }
                replica.start = *offset;
                replica.end = replica.end.max(*offset);
            }
            BrokerEvent::HighWatermark { partition, offset } => {
                self.replica(partition, id).high_watermark = *offset;
                self.check_committed(partition, id, &mut violations);
            }
            BrokerEvent::PartitionState {
                partition,
                leader,
                leader_epoch,
                replicas,
                isr,
            } => {
                let role = Role {
                    leader: *leader,
                    leader_epoch: *leader_epoch,
                    replicas: replicas.clone(),
                    isr: isr.clone(),
                };
                check_role(partition, node, &role, &mut violations);
                self.replica(partition, id).role = Some(role);
                self.check_committed(partition, id, &mut violations);
            }
            // Leader, Offline; ControllerActive never comes from a broker.
            _ => return Vec::new(),
        }
        self.check_isr(event_partition(event), &mut violations);
        self.dedupe(violations)
    }

    /// Who leads `partition` (`topic-index`) now, as the brokers see it: the node of the
    /// running claimant with the highest leader epoch, with its view of the replicas and the
    /// ISR (node names). `None` while no running broker leads it.
    pub fn leadership(&self, partition: &str) -> Option<Leadership> {
        let view = self
            .partitions
            .iter()
            .find(|(name, _)| name.to_string() == partition)?
            .1;
        let (id, role) = view
            .replicas
            .iter()
            .filter_map(|(id, replica)| replica.leads(*id).map(|role| (*id, role)))
            .max_by_key(|(_, role)| role.leader_epoch)?;
        let name_of = |id: BrokerId| {
            self.ids
                .iter()
                .find(|(_, known)| **known == id)
                .map(|(name, _)| name.clone())
        };
        Some(Leadership {
            leader: name_of(id)?,
            replicas: role.replicas.iter().filter_map(|id| name_of(*id)).collect(),
            isr: role.isr.iter().filter_map(|id| name_of(*id)).collect(),
        })
    }

    fn replica(&mut self, partition: &TopicPartition, id: BrokerId) -> &mut Replica {
        // The partition's name is copied only the first time it is seen.
        if !self.partitions.contains_key(partition) {
            self.partitions
                .insert(partition.clone(), PartitionView::default());
        }
        self.partitions
            .get_mut(partition)
            .expect("inserted above")
            .replicas
            .entry(id)
            .or_default()
    }

    fn dedupe(&mut self, violations: Vec<Violation>) -> Vec<Violation> {
        violations
            .into_iter()
            .filter(|violation| {
                let key = format!("{}: {}", violation.partition, violation.key);
                self.reported.insert((violation.check, key))
            })
            .collect()
    }

    /// Replica `id` cut its log at `from`: a committed batch it held may now be on no replica.
    fn truncate(
        &mut self,
        partition: &TopicPartition,
        id: BrokerId,
        from: i64,
        reason: &str,
        violations: &mut Vec<Violation>,
    ) {
        let view = self.partitions.entry(partition.clone()).or_default();
        let replica = view.replicas.entry(id).or_default();
        let mut removed = Vec::new();
        while replica
            .batches
            .back()
            .is_some_and(|batch| batch.last >= from)
        {
            removed.extend(replica.batches.pop_back());
        }
        replica.end = replica.end.min(from).max(replica.start);
        for value in view
            .compared
            .iter_mut()
            .filter(|((leader, _, member), _)| *leader == id || *member == id)
        {
            *value.1 = (*value.1).min(from);
        }
        for value in view
            .checked
            .iter_mut()
            .filter(|((leader, _), _)| *leader == id)
        {
            *value.1 = (*value.1).min(from);
        }
        for batch in removed.iter().rev() {
            if view.committed_at(batch.base) != Some(batch) {
                continue;
            }
            let held = view.replicas.values().any(|replica| replica.holds(batch));
            if !held {
                violations.push(Violation {
                    check: Check::CommittedLost,
                    partition: partition.clone(),
                    detail: format!(
                        "committed batch {batch} is gone from every replica: broker {} held the \
                         last copy and cut its log at {from} ({reason})",
                        id.0
                    ),
                    key: format!("gone {batch}"),
                });
            }
        }
    }

    /// A leader's high watermark covers only batches equal to those committed before; what it
    /// newly covers is committed from now on.
    fn check_committed(
        &mut self,
        partition: &TopicPartition,
        id: BrokerId,
        violations: &mut Vec<Violation>,
    ) {
        let Some(view) = self.partitions.get_mut(partition) else {
            return;
        };
        let Some(replica) = view.replicas.get(&id) else {
            return;
        };
        let Some(role) = replica.leads(id) else {
            return;
        };
        let key = (id, role.leader_epoch);
        let from = view
            .checked
            .get(&key)
            .copied()
            .unwrap_or(i64::MIN)
            .max(replica.start);
        let high_watermark = replica.high_watermark;
        if high_watermark <= from {
            return;
        }
        let mut checked = from;
        for batch in replica.batches.range(replica.index_of(from)..) {
            if batch.last >= high_watermark {
                break;
            }
            checked = batch.last + 1;
            if batch.base >= view.committed_end {
                view.committed.push(*batch);
                view.committed_end = batch.last + 1;
                continue;
            }
            match view.committed_at(batch.base) {
                Some(committed) if committed == batch => {}
                Some(committed) => violations.push(Violation {
                    check: Check::CommittedLost,
                    partition: partition.clone(),
                    detail: format!(
                        "offset {} was committed as batch {committed}; leader {} in epoch {} now \
                         commits batch {batch} there",
                        batch.base, id.0, role.leader_epoch
                    ),
                    key: format!("changed {batch}"),
                }),
                // Committed before this leader's log start (retention): nothing to compare.
                None => {}
            }
        }
        view.checked.insert(key, checked);
    }

    /// Every running leader's high watermark is within the log of each ISR member, and their
    /// logs agree below it.
    fn check_isr(&mut self, partition: &TopicPartition, violations: &mut Vec<Violation>) {
        let Some(view) = self.partitions.get_mut(partition) else {
            return;
        };
        for (id, leader) in &view.replicas {
            let Some(role) = leader.leads(*id) else {
                continue;
            };
            let high_watermark = leader.high_watermark;
            for member_id in role.isr.iter().filter(|member| *member != id) {
                let Some(member) = view.replicas.get(member_id) else {
                    continue;
                };
                if member.end < high_watermark {
                    violations.push(Violation {
                        check: Check::HwWithinIsr,
                        partition: partition.clone(),
                        detail: format!(
                            "leader {} (epoch {}) has its high watermark at {high_watermark}, past \
                             the log end {} of ISR member {}",
                            id.0, role.leader_epoch, member.end, member_id.0
                        ),
                        key: format!("{} {} {}", id.0, role.leader_epoch, member_id.0),
                    });
                }
                let key = (*id, role.leader_epoch, *member_id);
                let compared = view.compared.entry(key).or_insert(i64::MIN);
                let from = (*compared).max(leader.start).max(member.start);
                let to = high_watermark.min(member.end).min(leader.end);
                if let Some(detail) = first_difference(leader, member, from, to) {
                    violations.push(Violation {
                        check: Check::StrongIsr,
                        partition: partition.clone(),
                        detail: format!(
                            "below the high watermark {high_watermark} of leader {} (epoch {}), \
                             ISR member {} differs: {detail}",
                            id.0, role.leader_epoch, member_id.0
                        ),
                        key: format!("{} {} {}", id.0, role.leader_epoch, member_id.0),
                    });
                }
                *compared = (*compared).max(to);
            }
        }
    }
}

/// Where two logs first differ in `[from, to)`, if they do.
fn first_difference(leader: &Replica, member: &Replica, from: i64, to: i64) -> Option<String> {
    if from >= to {
        return None;
    }
    for batch in leader.batches.range(leader.index_of(from)..) {
        if batch.base >= to {
            break;
        }
        if batch.last < from {
            continue;
        }
        match member.batches.get(member.index_of(batch.base)) {
            Some(other) if other == batch => {}
            Some(other) if other.base <= batch.base => {
                return Some(format!("the leader has {batch}, the member {other}"));
            }
            _ => return Some(format!("the leader has {batch}, the member nothing there")),
        }
    }
    None
}

/// A partition state names its leader among the ISR, and its ISR among the replicas.
fn check_role(
    partition: &TopicPartition,
    node: &str,
    role: &Role,
    violations: &mut Vec<Violation>,
) {
    let no_leader = role.leader.0 < 0;
    let outside: Vec<i32> = role
        .isr
        .iter()
        .filter(|member| !role.replicas.contains(member))
        .map(|member| member.0)
        .collect();
    let mut problems = Vec::new();
    if !no_leader && !role.isr.contains(&role.leader) {
        problems.push(format!("leader {} is not in the ISR", role.leader.0));
    }
    if !outside.is_empty() {
        problems.push(format!("ISR members {outside:?} are not replicas"));
    }
    if !problems.is_empty() {
        let detail = format!(
            "{node} holds leader {} epoch {} ISR {:?} replicas {:?}: {}",
            role.leader.0,
            role.leader_epoch,
            role.isr.iter().map(|id| id.0).collect::<Vec<_>>(),
            role.replicas.iter().map(|id| id.0).collect::<Vec<_>>(),
            problems.join("; ")
        );
        violations.push(Violation {
            key: detail.clone(),
            check: Check::LeaderInIsr,
            partition: partition.clone(),
            detail,
        });
    }
}

fn event_partition(event: &BrokerEvent) -> &TopicPartition {
    match event {
        BrokerEvent::HighWatermark { partition, .. }
        | BrokerEvent::LogStartOffset { partition, .. }
        | BrokerEvent::Truncated { partition, .. }
        | BrokerEvent::Leader { partition, .. }
        | BrokerEvent::Offline { partition, .. }
        | BrokerEvent::Appended { partition, .. }
        | BrokerEvent::PartitionState { partition, .. } => partition,
        BrokerEvent::ControllerActive { .. } | BrokerEvent::CommitAdmitted { .. } => {
            unreachable!("handled before")
        }
    }
}

#[cfg(test)]
mod tests;
