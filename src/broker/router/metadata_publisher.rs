//! The router's side of a broker in a cluster: it runs the [`Membership`] (ticks, the
//! controller's answers) and publishes what the metadata says to the replicas (Kafka's
//! `BrokerMetadataPublisher`): topics it did not know are added, partitions it replicates are
//! opened, and each becomes leader or follower as the image says.

use kafka_protocol::messages::{RequestKind, ResponseKind};

use crate::metadata::records::NO_LEADER;
use crate::storage::Storage;
use crate::types::{BrokerId, Millis, TopicPartition};

use crate::broker::cluster::{Answered, Call, Membership};
use crate::broker::metadata_cache::TopicMetadata;
use crate::broker::replica_manager::replication::PartitionState;
use crate::broker::{Broker, BrokerEvent, Output, PeerRequestId, PeerRole, ReplyTo};

impl<S: Storage> Broker<S> {
    /// This broker's registration epoch in its cluster, once registered.
    pub(in crate::broker) fn broker_epoch(&self) -> Option<i64> {
        self.cluster.as_ref().and_then(Membership::broker_epoch)
    }

    fn controller_call(
        &mut self,
        now: Millis,
        call: Call,
        body: RequestKind,
        api_version: i16,
        out: &mut Vec<Output<S::File>>,
    ) {
        let id = self.peer_ids.next_id();
        let membership = self.cluster.as_mut().expect("in a cluster");
        membership.call(id, now, (call, body, api_version), out);
    }

    /// Sends whatever the membership has due, and the AlterPartition proposals to send again.
    pub(in crate::broker) fn on_cluster_tick(
        &mut self,
        now: Millis,
        out: &mut Vec<Output<S::File>>,
    ) {
        let Some(membership) = self.cluster.as_mut() else {
            return;
        };
        let identity = (&self.config, self.cluster_id.as_str());
        if !membership.on_tick(now, identity, &mut self.peer_ids, out) {
            return;
        }
        let retries = membership.take_alter_retries(now);
        if !retries.is_empty() {
            let (replicas, mut link) = self.replica_manager();
            replicas.retry_isr_proposals(now, retries, &mut link, out);
        }
    }

    /// Whether a peer response answers one of the membership's calls; if so, handles it.
    pub(in crate::broker) fn on_controller_response(
        &mut self,
        now: Millis,
        id: PeerRequestId,
        result: &Result<Box<ResponseKind>, String>,
        out: &mut Vec<Output<S::File>>,
    ) -> bool {
        let Some(membership) = self.cluster.as_mut() else {
            return false;
        };
        match membership.on_response(now, id, result, &mut self.metadata, out) {
            Answered::NotOurs => false,
            Answered::Failed => true,
            Answered::Handled { reconcile, alter } => {
                if reconcile {
                    self.reconcile(now, out);
                }
                if let Some((partitions, response)) = alter {
                    self.replicas.on_alter_partition_answer(
                        now,
                        &partitions,
                        response,
                        &self.metadata,
                        out,
                    );
                }
                self.on_cluster_tick(now, out);
                true
            }
        }
    }

    /// Opens (and recovers) a partition the metadata assigns here; reports what recovery kept,
    /// as a single broker does at start-up (where the log starts and ends: a crash may have
    /// taken anything past the end), and syncs it. Returns whether it opened.
    fn open_assigned(
        &mut self,
        now: Millis,
        topic: &TopicMetadata,
        index: i32,
        out: &mut Vec<Output<S::File>>,
    ) -> bool {
        let topic_partition = TopicPartition::new(topic.name.as_str(), index);
        let point = self
            .checkpoint
            .written
            .get(&topic_partition)
            .copied()
            .unwrap_or(0);
        let recovery = match self.open_partition(topic, index, point, now) {
            Ok(recovery) => recovery,
            Err(error) => {
                tracing::error!(partition = %topic_partition, %error, "cannot open partition");
                return false;
            }
        };
        let restored = self
            .high_watermarks
            .written
            .get(&topic_partition)
            .copied()
            .unwrap_or(0);
        let opened = self
            .replicas
            .get_mut(&topic_partition)
            .expect("just opened");
        opened.restore_high_watermark(restored);
        out.extend(
            opened
                .recovered_events(&recovery)
                .into_iter()
                .map(Output::Event),
        );
        out.push(Output::Event(BrokerEvent::HighWatermark {
            partition: topic_partition.clone(),
            offset: opened.high_watermark(),
        }));
        self.flush_partition(now, &topic_partition, out);
        true
    }

    /// Brings topics and partitions in line with the image.
    fn reconcile(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        let local = self.node_id();
        for (topic, error) in self.metadata.configure(&self.config) {
            tracing::error!(%topic, %error, "topic not applied: its configs do not parse");
        }
        let image = self.metadata.image().clone();
        for topic in image.topics() {
            let Some(known) = self.metadata.topic(&topic.name) else {
                continue;
            };
            for (index, registration) in &topic.partitions {
                if !registration.replicas.contains(&local) {
                    continue;
                }
                let topic_partition = TopicPartition::new(topic.name.as_str(), *index);
                if !self.replicas.contains(&topic_partition)
                    && !self.open_assigned(now, &known, *index, out)
                {
                    continue;
                }
                let state = PartitionState {
                    leader: registration.leader,
                    leader_epoch: registration.leader_epoch,
                    replicas: registration.replicas.clone(),
                    isr: registration.isr.clone(),
                    partition_epoch: registration.partition_epoch.0,
                };
                let partition = self.replicas.get(&topic_partition).expect("opened");
                let current = (
                    partition.leader(),
                    partition.leader_epoch(),
                    partition.replicas(),
                    partition.isr(),
                    partition.partition_epoch(),
                );
                if current
                    != (
                        state.leader,
                        state.leader_epoch,
                        state.replicas.as_slice(),
                        state.isr.as_slice(),
                        state.partition_epoch,
                    )
                {
                    self.become_leader_or_follower(now, &topic_partition, state, out);
                }
            }
        }
    }

    /// A client's CreateTopics goes to the controller; its answer is relayed.
    pub(in crate::broker) fn forward_create_topics(
        &mut self,
        now: Millis,
        reply_to: Option<ReplyTo>,
        api_version: i16,
        body: RequestKind,
        out: &mut Vec<Output<S::File>>,
    ) {
        self.controller_call(now, Call::CreateTopics(reply_to), body, api_version, out);
    }

    /// Where another node listens: a controller from `controller.quorum.voters`, a broker from
    /// its registration in the metadata log.
    pub fn peer_address(&self, peer: BrokerId, role: PeerRole) -> Option<(&str, i32)> {
        match role {
            PeerRole::Controller => {
                let voter = self
                    .config
                    .controller_quorum_voters
                    .iter()
                    .find(|voter| voter.id == peer.0)?;
                Some((&voter.host, i32::from(voter.port)))
            }
            PeerRole::Broker => {
                self.cluster.as_ref()?;
                let registration = self.metadata.image().broker(peer)?;
                Some((&registration.host, registration.port))
            }
        }
    }

    /// Whether `leader` is a broker that leads nothing right now.
    pub(in crate::broker) fn is_no_leader(leader: BrokerId) -> bool {
        leader == NO_LEADER
    }
}
