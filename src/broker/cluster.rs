//! A broker in a cluster (`controller.quorum.voters` set): its side of the controller protocol
//! (Kafka's `BrokerLifecycleManager`, `BrokerMetadataListener` and `AlterPartitionManager`).
//!
//! - It registers (BrokerRegistration) for a broker epoch, then heartbeats every
//!   `broker.heartbeat.interval.ms` with the metadata offset it has applied; the controller
//!   unfences it once that offset passes its registration.
//! - It follows the metadata log with long-polling Fetches of `__cluster_metadata-0`, applies the
//!   records to its [`ClusterImage`] (or, when the controller's log starts past its offset,
//!   fetches the controller's snapshot with FetchSnapshot and takes its image), and reconciles: topics it did not know are added, partitions
//!   it replicates are opened, and each partition becomes leader or follower as the image says.
//! - As a leader it asks the controller to change ISRs (AlterPartition) instead of changing them
//!   itself; until the answer comes the high watermark counts the maximal ISR.
//! - CreateTopics from clients is forwarded to the controller and its answer relayed.
//!
//! Without `controller.quorum.voters` none of this runs: the broker is its own controller.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::alter_partition_request::{PartitionData, TopicData};
use kafka_protocol::messages::broker_registration_request::Listener;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_snapshot_request::{
    PartitionSnapshot, SnapshotId, TopicSnapshot,
};
use kafka_protocol::messages::{
    AlterPartitionRequest, BrokerHeartbeatRequest, BrokerRegistrationRequest, CreateTopicsResponse,
    FetchRequest, FetchSnapshotRequest, FetchSnapshotResponse, RequestKind, ResponseKind,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::metadata::image::ClusterImage;
use crate::metadata::records::{Record, NO_LEADER};
use crate::metadata::METADATA_TOPIC;
use crate::protocol::record_batch::decode_records;
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{BrokerEpoch, BrokerId, LeaderEpoch, Millis, TopicPartition};

use super::metadata_cache::{MetadataCache, TopicMetadata};
use super::partition::Partition;
use super::replica_manager::replication::PartitionState;
use super::replica_manager::AlterPartition;
use super::{Broker, BrokerEvent, Output, PeerRequestId, PeerRole, ReplyTo, ResponseBody};
use crate::node_io::PeerRequestIds;

/// BrokerRegistration's version: 3 carries `PreviousBrokerEpoch` (KIP-966).
const REGISTRATION_VERSION: i16 = 3;

/// The pause after a failed registration or metadata fetch.
const RETRY_MS: u64 = 1_000;
/// How long a metadata fetch waits for new records at the controller.
const METADATA_FETCH_WAIT_MS: i32 = 500;
/// How long a request to the controller may go unanswered before the broker gives up on it and
/// tries the next voter (Kafka's `controller.quorum.request.timeout.ms` is 2000; a metadata
/// fetch may also wait `METADATA_FETCH_WAIT_MS` at the controller).
const CONTROLLER_REQUEST_TIMEOUT_MS: u64 = 2_000 + METADATA_FETCH_WAIT_MS as u64;

/// What a request to the controller was for.
#[derive(Debug)]
enum Call {
    Registration,
    Heartbeat,
    MetadataFetch,
    /// A FetchSnapshot of the metadata snapshot being downloaded.
    SnapshotFetch,
    /// AlterPartition for these partitions.
    AlterPartition(Vec<TopicPartition>),
    /// A client's CreateTopics, to relay (`None`: an auto-creation nobody waits for).
    CreateTopics(Option<ReplyTo>),
}

/// The broker's membership in a cluster.
#[derive(Debug)]
pub(super) struct Membership {
    /// `controller.quorum.voters`, in order; requests go to `voters[current]`, and move to the
    /// next voter when it fails, times out, or answers `NOT_CONTROLLER`.
    voters: Vec<BrokerId>,
    current: usize,
    epoch: Option<BrokerEpoch>,
    /// Requests to the controller, with when and to whom each was sent.
    in_flight: BTreeMap<PeerRequestId, (Call, Millis, BrokerId)>,
    next_heartbeat: Millis,
    /// After a failure, no registration or metadata fetch before this.
    retry_at: Millis,
    /// The next metadata offset to fetch.
    next_offset: i64,
    fenced: bool,
    /// The controller's snapshot being fetched, when its log starts past `next_offset`.
    download: Option<SnapshotDownload>,
    /// Partitions whose AlterPartition got no answer (the controller was unreachable): the
    /// same proposal goes again at `retry_at`, as Kafka's `AlterPartitionManager` resends it.
    alter_retries: BTreeSet<TopicPartition>,
    /// The broker epoch the clean-shutdown marker held at start-up (-1: no marker with one,
    /// an unclean shutdown), sent as BrokerRegistration's `PreviousBrokerEpoch` (KIP-966).
    previous_broker_epoch: i64,
    /// When this broker last asked the controller to create `__consumer_offsets`.
    pub(super) offsets_topic_asked: Option<Millis>,
}

/// A metadata snapshot being fetched, chunk by chunk.
#[derive(Debug)]
struct SnapshotDownload {
    end_offset: i64,
    epoch: i32,
    bytes: Vec<u8>,
}

/// Whether a call reads the metadata (a Fetch or a FetchSnapshot): one at a time.
fn is_metadata_read(call: &Call) -> bool {
    matches!(call, Call::MetadataFetch | Call::SnapshotFetch)
}

impl Membership {
    /// The membership `controller.quorum.voters` asks for, if any; `previous_broker_epoch` is
    /// what the clean-shutdown marker said (-1: none).
    pub(super) fn of(
        config: &crate::config::BrokerConfig,
        previous_broker_epoch: i64,
    ) -> Option<Self> {
        let voters: Vec<BrokerId> = config
            .controller_quorum_voters
            .iter()
            .map(|voter| BrokerId(voter.id))
            .collect();
        (!voters.is_empty()).then(|| Membership::new(voters, previous_broker_epoch))
    }

    fn new(voters: Vec<BrokerId>, previous_broker_epoch: i64) -> Self {
        Membership {
            previous_broker_epoch,
            voters,
            current: 0,
            epoch: None,
            in_flight: BTreeMap::new(),
            next_heartbeat: Millis(0),
            retry_at: Millis(0),
            next_offset: 0,
            fenced: true,
            download: None,
            alter_retries: BTreeSet::new(),
            offsets_topic_asked: None,
        }
    }

    fn has(&self, wanted: impl Fn(&Call) -> bool) -> bool {
        self.in_flight.values().any(|(call, _, _)| wanted(call))
    }

    /// The voter requests go to now.
    fn controller(&self) -> BrokerId {
        self.voters[self.current]
    }

    /// Gives up on `voter`: if requests still go to it, the next ones go to the next voter.
    /// (Several requests in flight to one voter fail together; it is passed over once.)
    fn next_voter(&mut self, voter: BrokerId) {
        if self.controller() == voter {
            self.current = (self.current + 1) % self.voters.len();
        }
    }

    /// The oldest request's timeout. With one voter there is no other to try, and the answer
    /// comes on the same connection once the link heals: no timeout.
    fn next_timeout(&self) -> Option<Millis> {
        if self.voters.len() < 2 {
            return None;
        }
        self.in_flight
            .values()
            .map(|(_, sent, _)| sent.plus(CONTROLLER_REQUEST_TIMEOUT_MS))
            .min()
    }

    /// When the next registration, heartbeat or metadata fetch is due.
    pub(super) fn next_deadline(&self) -> Option<Millis> {
        if self.epoch.is_none() {
            return (!self.has(|call| matches!(call, Call::Registration))).then_some(self.retry_at);
        }
        let heartbeat =
            (!self.has(|call| matches!(call, Call::Heartbeat))).then_some(self.next_heartbeat);
        let fetch = (!self.has(is_metadata_read)).then_some(self.retry_at);
        let alter = (!self.alter_retries.is_empty()).then_some(self.retry_at);
        [heartbeat, fetch, alter, self.next_timeout()]
            .into_iter()
            .flatten()
            .min()
    }
}

impl<S: Storage> Broker<S> {
    /// This broker's registration epoch in its cluster, once registered.
    pub(super) fn broker_epoch(&self) -> Option<i64> {
        self.cluster
            .as_ref()
            .and_then(|membership| membership.epoch)
            .map(|epoch| epoch.0)
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

    /// Sends whatever is due: the registration, a heartbeat, the next metadata fetch.
    pub(super) fn on_cluster_tick(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        self.expire_controller_calls(now, out);
        let Some(membership) = &self.cluster else {
            return;
        };
        if membership
            .next_deadline()
            .is_none_or(|deadline| now < deadline)
        {
            return;
        }
        let Some(epoch) = membership.epoch else {
            let advertised = self.config.advertised();
            let listener = Listener::default()
                .with_name(StrBytes::from_static_str("PLAINTEXT"))
                .with_host(StrBytes::from_string(advertised.host))
                .with_port(advertised.port);
            let body = BrokerRegistrationRequest::default()
                .with_broker_id(kafka_protocol::messages::BrokerId(self.config.node_id))
                .with_cluster_id(StrBytes::from_string(self.cluster_id.clone()))
                .with_listeners(vec![listener])
                .with_previous_broker_epoch(membership.previous_broker_epoch);
            self.controller_call(
                now,
                Call::Registration,
                RequestKind::BrokerRegistration(body),
                REGISTRATION_VERSION,
                out,
            );
            return;
        };
        let heartbeat_due = !membership.has(|call| matches!(call, Call::Heartbeat))
            && now >= membership.next_heartbeat;
        let fetch_due = !membership.has(is_metadata_read) && now >= membership.retry_at;
        let download = membership
            .download
            .as_ref()
            .map(|download| (download.end_offset, download.epoch, download.bytes.len()));
        let next_offset = membership.next_offset;
        if heartbeat_due {
            let interval = self.config.broker_heartbeat_interval_ms as u64;
            self.cluster.as_mut().expect("checked").next_heartbeat = now.plus(interval);
            let body = BrokerHeartbeatRequest::default()
                .with_broker_id(kafka_protocol::messages::BrokerId(self.config.node_id))
                .with_broker_epoch(epoch.0)
                .with_current_metadata_offset(next_offset);
            self.controller_call(
                now,
                Call::Heartbeat,
                RequestKind::BrokerHeartbeat(body),
                0,
                out,
            );
        }
        if fetch_due {
            self.read_metadata(now, download, next_offset, out);
        }
        self.retry_alter_partitions(now, out);
    }

    /// Reads on: the next chunk of the snapshot being downloaded (`(end_offset, epoch,
    /// position)`), or else the metadata log from `next_offset`.
    fn read_metadata(
        &mut self,
        now: Millis,
        download: Option<(i64, i32, usize)>,
        next_offset: i64,
        out: &mut Vec<Output<S::File>>,
    ) {
        if let Some((end_offset, epoch, position)) = download {
            let wanted = PartitionSnapshot::default()
                .with_partition(0)
                .with_snapshot_id(
                    SnapshotId::default()
                        .with_end_offset(end_offset)
                        .with_epoch(epoch),
                )
                .with_position(position as i64);
            let body = FetchSnapshotRequest::default()
                .with_max_bytes(1 << 20)
                .with_topics(vec![TopicSnapshot::default()
                    .with_name(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
                    .with_partitions(vec![wanted])]);
            let body = RequestKind::FetchSnapshot(body);
            self.controller_call(now, Call::SnapshotFetch, body, 0, out);
        } else {
            let wanted = FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(next_offset)
                .with_partition_max_bytes(1 << 20);
            let body = FetchRequest::default()
                .with_max_wait_ms(METADATA_FETCH_WAIT_MS)
                .with_min_bytes(1)
                .with_max_bytes(1 << 20)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
                    .with_partitions(vec![wanted])]);
            self.controller_call(now, Call::MetadataFetch, RequestKind::Fetch(body), 12, out);
        }
    }

    /// Sends again the AlterPartition proposals that got no answer, once `retry_at` has come;
    /// a proposal the metadata has meanwhile settled (no longer pending) is dropped.
    fn retry_alter_partitions(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        let Some(membership) = self.cluster.as_mut() else {
            return;
        };
        if membership.alter_retries.is_empty() || now < membership.retry_at {
            return;
        }
        for topic_partition in std::mem::take(&mut membership.alter_retries) {
            let Some(partition) = self.replicas.get_mut(&topic_partition) else {
                continue;
            };
            let Some(proposed) = partition.pending_isr().map(<[BrokerId]>::to_vec) else {
                continue;
            };
            partition.set_pending_isr(None);
            if partition.is_leader() {
                self.propose_isr(now, &topic_partition, proposed, out);
            }
        }
    }

    /// Gives up on requests the controller left unanswered too long, as if they had failed.
    fn expire_controller_calls(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        let Some(membership) = self.cluster.as_mut() else {
            return;
        };
        if membership
            .next_timeout()
            .is_none_or(|timeout| now < timeout)
        {
            return;
        }
        let expired: Vec<PeerRequestId> = membership
            .in_flight
            .iter()
            .filter(|(_, (_, sent, _))| now >= sent.plus(CONTROLLER_REQUEST_TIMEOUT_MS))
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            let membership = self.cluster.as_mut().expect("checked");
            let (call, _, voter) = membership.in_flight.remove(&id).expect("listed above");
            let answer = CreateTopicsResponse::default();
            self.controller_call_failed(now, &call, voter, "no answer in time", answer, out);
        }
    }

    /// A request the controller did not answer: the next ones go to the next voter, after a
    /// pause; an AlterPartition is sent again, a client's CreateTopics gets `answer` (empty, or
    /// the controller's NOT_CONTROLLER, which the client retries).
    fn controller_call_failed(
        &mut self,
        now: Millis,
        call: &Call,
        voter: BrokerId,
        error: &str,
        answer: CreateTopicsResponse,
        out: &mut Vec<Output<S::File>>,
    ) {
        let membership = self.cluster.as_mut().expect("in a cluster");
        tracing::warn!(?call, %error, controller = voter.0, "controller request failed");
        membership.next_voter(voter);
        if matches!(call, Call::SnapshotFetch) {
            // The next voter may hold another snapshot: a Fetch there tells which.
            membership.download = None;
        }
        if let Call::AlterPartition(partitions) = &call {
            membership.alter_retries.extend(partitions.iter().cloned());
        }
        if let Call::CreateTopics(Some(reply_to)) = call {
            out.push(reply_to.respond(ResponseBody::message(ResponseKind::CreateTopics(answer))));
        }
        membership.retry_at = now.plus(RETRY_MS);
    }

    /// Whether a peer response answers one of the membership's calls; if so, handles it.
    pub(super) fn on_controller_response(
        &mut self,
        now: Millis,
        id: PeerRequestId,
        result: &Result<Box<ResponseKind>, String>,
        out: &mut Vec<Output<S::File>>,
    ) -> bool {
        let Some(membership) = self.cluster.as_mut() else {
            return false;
        };
        let Some((call, _, voter)) = membership.in_flight.remove(&id) else {
            return false;
        };
        let response = match result {
            Ok(response) if !is_not_controller(response) => response.as_ref(),
            Ok(response) => {
                // A client's CreateTopics hears NOT_CONTROLLER (retriable) and tries again.
                let answer = match response.as_ref() {
                    ResponseKind::CreateTopics(body) => body.clone(),
                    _ => CreateTopicsResponse::default(),
                };
                self.controller_call_failed(now, &call, voter, "NOT_CONTROLLER", answer, out);
                return true;
            }
            Err(error) => {
                let answer = CreateTopicsResponse::default();
                self.controller_call_failed(now, &call, voter, error, answer, out);
                return true;
            }
        };
        match (call, response) {
            (Call::Registration, ResponseKind::BrokerRegistration(body))
                if body.error_code == 0 =>
            {
                tracing::info!(epoch = body.broker_epoch, "registered with the controller");
                membership.epoch = Some(BrokerEpoch(body.broker_epoch));
                membership.next_heartbeat = now;
            }
            (Call::Heartbeat, ResponseKind::BrokerHeartbeat(body)) => {
                let error = ErrorCode::from_code(body.error_code);
                if matches!(
                    error,
                    ErrorCode::StaleBrokerEpoch | ErrorCode::BrokerIdNotRegistered
                ) {
                    tracing::warn!(?error, "registration lost: registering again");
                    membership.epoch = None;
                } else if membership.fenced != body.is_fenced {
                    tracing::info!(fenced = body.is_fenced, "fencing changed");
                    membership.fenced = body.is_fenced;
                }
            }
            (Call::MetadataFetch, ResponseKind::Fetch(body)) => {
                self.on_metadata_fetched(now, body, out);
            }
            (Call::SnapshotFetch, ResponseKind::FetchSnapshot(body)) => {
                self.on_snapshot_fetched(now, body, out);
            }
            (Call::AlterPartition(partitions), ResponseKind::AlterPartition(body)) => {
                self.on_alter_partition_answer(now, &partitions, body, out);
            }
            (Call::CreateTopics(reply_to), ResponseKind::CreateTopics(body)) => {
                if let Some(reply_to) = reply_to {
                    out.push(
                        reply_to.respond(ResponseBody::message(ResponseKind::CreateTopics(
                            body.clone(),
                        ))),
                    );
                }
            }
            (call, other) => {
                tracing::warn!(?call, response = ?other, "unexpected controller answer");
                membership.retry_at = now.plus(RETRY_MS);
            }
        }
        self.on_cluster_tick(now, out);
        true
    }

    /// Applies the metadata records of a fetch, then reconciles the partitions.
    fn on_metadata_fetched(
        &mut self,
        now: Millis,
        response: &kafka_protocol::messages::FetchResponse,
        out: &mut Vec<Output<S::File>>,
    ) {
        let membership = self.cluster.as_mut().expect("in a cluster");
        let data = response
            .responses
            .first()
            .and_then(|topic| topic.partitions.first());
        let Some(data) = data.filter(|data| data.error_code == 0) else {
            tracing::warn!(?response, "metadata fetch failed");
            membership.retry_at = now.plus(RETRY_MS);
            return;
        };
        if data.snapshot_id.end_offset >= 0 {
            // The controller's log starts past our offset: its snapshot comes first.
            tracing::info!(
                next_offset = membership.next_offset,
                end_offset = data.snapshot_id.end_offset,
                "fetching the metadata snapshot"
            );
            membership.download = Some(SnapshotDownload {
                end_offset: data.snapshot_id.end_offset,
                epoch: data.snapshot_id.epoch,
                bytes: Vec::new(),
            });
            return;
        }
        let bytes = data.records.clone().unwrap_or_default();
        let records = match decode_records(&bytes) {
            Ok(records) => records,
            Err(error) => {
                tracing::error!(%error, "undecodable metadata batch");
                membership.retry_at = now.plus(RETRY_MS);
                return;
            }
        };
        for record in records {
            if record.offset < membership.next_offset {
                continue;
            }
            let applied = Record::decode(record.value.as_deref().unwrap_or_default())
                .map_err(|error| error.to_string())
                .and_then(|decoded| self.metadata.apply(&decoded));
            if let Err(error) = applied {
                tracing::error!(offset = record.offset, %error, "metadata record does not apply");
                membership.retry_at = now.plus(RETRY_MS);
                break;
            }
            membership.next_offset = record.offset + 1;
        }
        self.reconcile(now, out);
    }

    /// Takes a chunk of the metadata snapshot; once it is whole, its image replaces ours and
    /// fetching goes on from its end offset. Any error drops the download: the next Fetch
    /// names the snapshot to fetch then.
    fn on_snapshot_fetched(
        &mut self,
        now: Millis,
        response: &FetchSnapshotResponse,
        out: &mut Vec<Output<S::File>>,
    ) {
        let membership = self.cluster.as_mut().expect("in a cluster");
        let Some(mut download) = membership.download.take() else {
            return;
        };
        let data = response
            .topics
            .first()
            .and_then(|topic| topic.partitions.first())
            .filter(|data| {
                response.error_code == 0
                    && data.error_code == 0
                    && data.snapshot_id.end_offset == download.end_offset
                    && data.snapshot_id.epoch == download.epoch
                    && data.position == download.bytes.len() as i64
            });
        let Some(data) = data else {
            tracing::warn!(?response, "metadata snapshot fetch failed");
            membership.retry_at = now.plus(RETRY_MS);
            return;
        };
        download.bytes.extend_from_slice(&data.unaligned_records);
        let size = data.size.max(0) as usize;
        let got = download.bytes.len();
        if got < size && !data.unaligned_records.is_empty() {
            membership.download = Some(download);
            return;
        }
        let image = decode_records(&bytes::Bytes::from(std::mem::take(&mut download.bytes)))
            .map_err(|error| error.to_string())
            .and_then(|records| {
                let decoded = records
                    .iter()
                    .map(|record| Record::decode(record.value.as_deref().unwrap_or_default()))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|error| error.to_string())?;
                ClusterImage::from_records(&decoded)
            });
        match image {
            Ok(image) if got == size => {
                tracing::info!(
                    end_offset = download.end_offset,
                    bytes = size,
                    "metadata snapshot fetched"
                );
                self.metadata.replace(image);
                membership.next_offset = download.end_offset;
                self.reconcile(now, out);
            }
            Ok(_) => {
                tracing::error!(size, got, "metadata snapshot cut short");
                membership.retry_at = now.plus(RETRY_MS);
            }
            Err(error) => {
                tracing::error!(%error, "metadata snapshot does not apply");
                membership.retry_at = now.plus(RETRY_MS);
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

    /// Proposes `new_isr` for a partition led here ([`AlterPartition::propose_isr`]).
    fn propose_isr(
        &mut self,
        now: Millis,
        topic_partition: &TopicPartition,
        new_isr: Vec<BrokerId>,
        out: &mut Vec<Output<S::File>>,
    ) {
        let node = self.node_id();
        let Some(membership) = self.cluster.as_mut() else {
            return;
        };
        let Some(partition) = self.replicas.get_mut(topic_partition) else {
            return;
        };
        let proposal = (topic_partition, new_isr);
        AlterPartition::<S>::propose_isr(
            membership,
            now,
            &mut self.peer_ids,
            &self.metadata,
            node,
            partition,
            proposal,
            out,
        );
    }

    /// The controller answered an AlterPartition: adopt the committed ISR, or drop the
    /// proposal (the metadata log will say what holds).
    fn on_alter_partition_answer(
        &mut self,
        now: Millis,
        partitions: &[TopicPartition],
        response: &kafka_protocol::messages::AlterPartitionResponse,
        out: &mut Vec<Output<S::File>>,
    ) {
        let answers = response
            .topics
            .iter()
            .flat_map(|topic| topic.partitions.iter());
        for (topic_partition, answer) in partitions.iter().zip(answers) {
            let Some(partition) = self.replicas.get_mut(topic_partition) else {
                continue;
            };
            partition.set_pending_isr(None);
            let error = ErrorCode::from_code(answer.error_code);
            if error != ErrorCode::None {
                tracing::info!(partition = %topic_partition, ?error, "AlterPartition refused");
                continue;
            }
            if partition.leader_epoch() != LeaderEpoch(answer.leader_epoch)
                || answer.partition_epoch <= partition.partition_epoch()
            {
                continue;
            }
            partition.set_isr(answer.isr.iter().map(|id| BrokerId(id.0)).collect());
            partition.set_partition_epoch(answer.partition_epoch);
            self.replicas
                .after_isr_change(now, topic_partition, &self.metadata, out);
        }
    }

    /// A client's CreateTopics goes to the controller; its answer is relayed.
    pub(super) fn forward_create_topics(
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
    pub(super) fn is_no_leader(leader: BrokerId) -> bool {
        leader == NO_LEADER
    }
}

impl Membership {
    /// Sends `request` (what it is for, its body and version) to the controller this broker
    /// talks to, as `id`, and remembers it until answered or expired.
    fn call<F>(
        &mut self,
        id: PeerRequestId,
        now: Millis,
        (call, body, api_version): (Call, RequestKind, i16),
        out: &mut Vec<Output<F>>,
    ) {
        let voter = self.controller();
        self.in_flight.insert(id, (call, now, voter));
        out.push(Output::PeerRequest {
            peer: voter,
            role: PeerRole::Controller,
            id,
            api_version,
            body: Box::new(body),
            timeout_ms: CONTROLLER_REQUEST_TIMEOUT_MS,
        });
    }
}

/// A leader in a cluster proposes ISR changes to the controller (AlterPartition); until the
/// answer comes, the partition's high watermark counts the maximal ISR.
impl<S: Storage> AlterPartition<S> for Membership {
    fn propose_isr(
        &mut self,
        now: Millis,
        peer_ids: &mut PeerRequestIds,
        metadata: &MetadataCache<S>,
        node: BrokerId,
        partition: &mut Partition<S>,
        (topic_partition, new_isr): (&TopicPartition, Vec<BrokerId>),
        out: &mut Vec<Output<S::File>>,
    ) {
        let Some(epoch) = self.epoch else {
            return;
        };
        let Some(topic_id) = metadata
            .image()
            .topic(&topic_partition.topic)
            .map(|topic| topic.topic_id)
        else {
            return;
        };
        if partition.pending_isr().is_some() {
            return;
        }
        tracing::info!(partition = %topic_partition, isr = ?partition.isr(), proposed = ?new_isr, "AlterPartition");
        let data = PartitionData::default()
            .with_partition_index(topic_partition.partition)
            .with_leader_epoch(partition.leader_epoch().0)
            .with_partition_epoch(partition.partition_epoch())
            .with_new_isr(
                new_isr
                    .iter()
                    .map(|id| kafka_protocol::messages::BrokerId(id.0))
                    .collect(),
            );
        partition.set_pending_isr(Some(new_isr));
        let body = AlterPartitionRequest::default()
            .with_broker_id(kafka_protocol::messages::BrokerId(node.0))
            .with_broker_epoch(epoch.0)
            .with_topics(vec![TopicData::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![data])]);
        let request = (
            Call::AlterPartition(vec![topic_partition.clone()]),
            RequestKind::AlterPartition(body),
            2,
        );
        self.call(peer_ids.next_id(), now, request, out);
    }
}

/// Whether a controller answered `NOT_CONTROLLER` (it is not, or no longer, the active one).
fn is_not_controller(response: &ResponseKind) -> bool {
    let code = ErrorCode::NotController.code();
    match response {
        ResponseKind::BrokerRegistration(body) => body.error_code == code,
        ResponseKind::BrokerHeartbeat(body) => body.error_code == code,
        ResponseKind::AlterPartition(body) => body.error_code == code,
        ResponseKind::Fetch(body) => body.error_code == code,
        ResponseKind::FetchSnapshot(body) => body.error_code == code,
        ResponseKind::CreateTopics(body) => {
            body.topics.iter().any(|topic| topic.error_code == code)
        }
        _ => false,
    }
}
