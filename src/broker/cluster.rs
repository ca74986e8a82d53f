//! A broker in a cluster (`controller.quorum.voters` set): its side of the controller protocol
//! (Kafka's `BrokerLifecycleManager`, `BrokerMetadataListener` and `AlterPartitionManager`).
//!
//! - It registers (BrokerRegistration) for a broker epoch, then heartbeats every
//!   `broker.heartbeat.interval.ms` with the metadata offset it has applied; the controller
//!   unfences it once that offset passes its registration.
//! - It follows the metadata log with long-polling Fetches of `__cluster_metadata-0`, applies the
//!   records to its [`ClusterImage`] (or, when the controller's log starts past its offset,
//!   fetches the controller's snapshot with FetchSnapshot and takes its image); the router then
//!   reconciles the replicas with the image (`router/metadata_publisher.rs`).
//! - As a leader it asks the controller to change ISRs (AlterPartition) instead of changing them
//!   itself; until the answer comes the high watermark counts the maximal ISR.
//! - CreateTopics from clients is forwarded to the controller and its answer relayed.
//!
//! [`Membership`] owns this state and is reached through typed calls: `on_tick`,
//! `on_response` (which says what the broker does next: an [`Answered`]), `call`, and the
//! [`AlterPartition`] the replica manager proposes ISR changes through.
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
    AlterPartitionRequest, AlterPartitionResponse, BrokerHeartbeatRequest,
    BrokerRegistrationRequest, CreateTopicsResponse, FetchRequest, FetchSnapshotRequest,
    FetchSnapshotResponse, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::config::BrokerConfig;
use crate::metadata::image::ClusterImage;
use crate::metadata::records::Record;
use crate::metadata::METADATA_TOPIC;
use crate::protocol::record_batch::decode_records;
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::{BrokerEpoch, BrokerId, Millis, TopicPartition};

use super::metadata_cache::MetadataCache;
use super::partition::Partition;
use super::replica_manager::AlterPartition;
use super::{Output, PeerRequestId, PeerRole, ReplyTo, ResponseBody};
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
pub(super) enum Call {
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

/// What the broker does after a peer response ([`Membership::on_response`]).
pub(super) enum Answered<'r> {
    /// It answers none of the membership's calls.
    NotOurs,
    /// The call failed: the next ones go to the next voter, after a pause.
    Failed,
    /// Taken. The broker reconciles its partitions with the image if `reconcile`, adopts the
    /// AlterPartition answer in `alter` for those partitions, then ticks the membership.
    Handled {
        reconcile: bool,
        alter: Option<(Vec<TopicPartition>, &'r AlterPartitionResponse)>,
    },
}

impl Membership {
    /// This broker's registration epoch in its cluster, once registered.
    pub(super) fn broker_epoch(&self) -> Option<i64> {
        self.epoch.map(|epoch| epoch.0)
    }

    /// Sends whatever is due: the registration, a heartbeat, the next metadata fetch.
    /// Returns whether it is registered and due: AlterPartition proposals that got no answer
    /// may go again ([`Membership::take_alter_retries`]).
    pub(super) fn on_tick<F>(
        &mut self,
        now: Millis,
        (config, cluster_id): (&BrokerConfig, &str),
        peer_ids: &mut PeerRequestIds,
        out: &mut Vec<Output<F>>,
    ) -> bool {
        self.expire_calls(now, out);
        if self.next_deadline().is_none_or(|deadline| now < deadline) {
            return false;
        }
        let membership = &*self;
        let Some(epoch) = membership.epoch else {
            let advertised = config.advertised();
            let listener = Listener::default()
                .with_name(StrBytes::from_static_str("PLAINTEXT"))
                .with_host(StrBytes::from_string(advertised.host))
                .with_port(advertised.port);
            let body = BrokerRegistrationRequest::default()
                .with_broker_id(kafka_protocol::messages::BrokerId(config.node_id))
                .with_cluster_id(StrBytes::from_string(cluster_id.to_owned()))
                .with_listeners(vec![listener])
                .with_previous_broker_epoch(membership.previous_broker_epoch);
            let request = (
                Call::Registration,
                RequestKind::BrokerRegistration(body),
                REGISTRATION_VERSION,
            );
            self.call(peer_ids.next_id(), now, request, out);
            return false;
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
            let interval = config.broker_heartbeat_interval_ms as u64;
            self.next_heartbeat = now.plus(interval);
            let body = BrokerHeartbeatRequest::default()
                .with_broker_id(kafka_protocol::messages::BrokerId(config.node_id))
                .with_broker_epoch(epoch.0)
                .with_current_metadata_offset(next_offset);
            let request = (Call::Heartbeat, RequestKind::BrokerHeartbeat(body), 0);
            self.call(peer_ids.next_id(), now, request, out);
        }
        if fetch_due {
            self.read_metadata(now, (download, next_offset), peer_ids, out);
        }
        true
    }

    /// Reads on: the next chunk of the snapshot being downloaded (`(end_offset, epoch,
    /// position)`), or else the metadata log from `next_offset`.
    fn read_metadata<F>(
        &mut self,
        now: Millis,
        (download, next_offset): (Option<(i64, i32, usize)>, i64),
        peer_ids: &mut PeerRequestIds,
        out: &mut Vec<Output<F>>,
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
            self.call(peer_ids.next_id(), now, (Call::SnapshotFetch, body, 0), out);
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
            let request = (Call::MetadataFetch, RequestKind::Fetch(body), 12);
            self.call(peer_ids.next_id(), now, request, out);
        }
    }

    /// The partitions whose AlterPartition got no answer, once `retry_at` has come: their
    /// proposals go again.
    pub(super) fn take_alter_retries(&mut self, now: Millis) -> BTreeSet<TopicPartition> {
        if self.alter_retries.is_empty() || now < self.retry_at {
            return BTreeSet::new();
        }
        std::mem::take(&mut self.alter_retries)
    }

    /// Gives up on requests the controller left unanswered too long, as if they had failed.
    fn expire_calls<F>(&mut self, now: Millis, out: &mut Vec<Output<F>>) {
        let membership = &mut *self;
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
            let (call, _, voter) = self.in_flight.remove(&id).expect("listed above");
            let answer = CreateTopicsResponse::default();
            self.call_failed(now, (&call, voter), "no answer in time", answer, out);
        }
    }

    /// A request the controller did not answer: the next ones go to the next voter, after a
    /// pause; an AlterPartition is sent again, a client's CreateTopics gets `answer` (empty, or
    /// the controller's NOT_CONTROLLER, which the client retries).
    fn call_failed<F>(
        &mut self,
        now: Millis,
        (call, voter): (&Call, BrokerId),
        error: &str,
        answer: CreateTopicsResponse,
        out: &mut Vec<Output<F>>,
    ) {
        let membership = self;
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

    /// Takes a peer response if it answers one of the membership's calls: metadata records
    /// apply to `metadata`; what the broker must do next is the [`Answered`].
    pub(super) fn on_response<'r, S: Storage>(
        &mut self,
        now: Millis,
        id: PeerRequestId,
        result: &'r Result<Box<ResponseKind>, String>,
        metadata: &mut MetadataCache<S>,
        out: &mut Vec<Output<S::File>>,
    ) -> Answered<'r> {
        let membership = self;
        let Some((call, _, voter)) = membership.in_flight.remove(&id) else {
            return Answered::NotOurs;
        };
        let response = match result {
            Ok(response) if !is_not_controller(response) => response.as_ref(),
            Ok(response) => {
                // A client's CreateTopics hears NOT_CONTROLLER (retriable) and tries again.
                let answer = match response.as_ref() {
                    ResponseKind::CreateTopics(body) => body.clone(),
                    _ => CreateTopicsResponse::default(),
                };
                membership.call_failed(now, (&call, voter), "NOT_CONTROLLER", answer, out);
                return Answered::Failed;
            }
            Err(error) => {
                let answer = CreateTopicsResponse::default();
                membership.call_failed(now, (&call, voter), error, answer, out);
                return Answered::Failed;
            }
        };
        let mut reconcile = false;
        let mut alter = None;
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
                reconcile = membership.on_metadata_fetched(now, body, metadata);
            }
            (Call::SnapshotFetch, ResponseKind::FetchSnapshot(body)) => {
                reconcile = membership.on_snapshot_fetched(now, body, metadata);
            }
            (Call::AlterPartition(partitions), ResponseKind::AlterPartition(body)) => {
                alter = Some((partitions, body));
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
        Answered::Handled { reconcile, alter }
    }

    /// Applies the metadata records of a fetch to `metadata`. Returns whether the broker must
    /// reconcile its partitions with the image.
    fn on_metadata_fetched<S: Storage>(
        &mut self,
        now: Millis,
        response: &kafka_protocol::messages::FetchResponse,
        metadata: &mut MetadataCache<S>,
    ) -> bool {
        let membership = self;
        let data = response
            .responses
            .first()
            .and_then(|topic| topic.partitions.first());
        let Some(data) = data.filter(|data| data.error_code == 0) else {
            tracing::warn!(?response, "metadata fetch failed");
            membership.retry_at = now.plus(RETRY_MS);
            return false;
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
            return false;
        }
        let bytes = data.records.clone().unwrap_or_default();
        let records = match decode_records(&bytes) {
            Ok(records) => records,
            Err(error) => {
                tracing::error!(%error, "undecodable metadata batch");
                membership.retry_at = now.plus(RETRY_MS);
                return false;
            }
        };
        for record in records {
            if record.offset < membership.next_offset {
                continue;
            }
            let applied = Record::decode(record.value.as_deref().unwrap_or_default())
                .map_err(|error| error.to_string())
                .and_then(|decoded| metadata.apply(&decoded));
            if let Err(error) = applied {
                tracing::error!(offset = record.offset, %error, "metadata record does not apply");
                membership.retry_at = now.plus(RETRY_MS);
                break;
            }
            membership.next_offset = record.offset + 1;
        }
        true
    }

    /// Takes a chunk of the metadata snapshot; once it is whole, its image replaces the one in
    /// `metadata` and fetching goes on from its end offset. Any error drops the download: the
    /// next Fetch names the snapshot to fetch then. Returns whether the broker must reconcile
    /// its partitions with the image.
    fn on_snapshot_fetched<S: Storage>(
        &mut self,
        now: Millis,
        response: &FetchSnapshotResponse,
        metadata: &mut MetadataCache<S>,
    ) -> bool {
        let membership = self;
        let Some(mut download) = membership.download.take() else {
            return false;
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
            return false;
        };
        download.bytes.extend_from_slice(&data.unaligned_records);
        let size = data.size.max(0) as usize;
        let got = download.bytes.len();
        if got < size && !data.unaligned_records.is_empty() {
            membership.download = Some(download);
            return false;
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
                metadata.replace(image);
                membership.next_offset = download.end_offset;
                true
            }
            Ok(_) => {
                tracing::error!(size, got, "metadata snapshot cut short");
                membership.retry_at = now.plus(RETRY_MS);
                false
            }
            Err(error) => {
                tracing::error!(%error, "metadata snapshot does not apply");
                membership.retry_at = now.plus(RETRY_MS);
                false
            }
        }
    }
}

impl Membership {
    /// Sends `request` (what it is for, its body and version) to the controller this broker
    /// talks to, as `id`, and remembers it until answered or expired.
    pub(super) fn call<F>(
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
