//! A client's view of the cluster (Kafka's `Metadata`): which topics it needs, how many
//! partitions each has and who leads them, and when to ask again.
//!
//! Sans-IO like the cores that own it: the core asks [`MetadataCache::wants_request`] when a
//! request slot is free, sends [`MetadataCache::request`], and feeds the answer to
//! [`MetadataCache::on_response`] (or [`MetadataCache::on_failure`]). A refresh is due when a
//! topic is wanted that the cache does not know, when the owner calls
//! [`MetadataCache::request_update`] (Kafka's clients do on NOT_LEADER_OR_FOLLOWER,
//! LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION and on a lost
//! connection), or when the answer is older than `metadata.max.age.ms`. Failed or partial
//! answers are asked again after `retry.backoff.ms`.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::protocol::ErrorCode;
use crate::types::Millis;

/// The errors after which Kafka's clients ask for metadata again: the leader moved or the
/// topic changed.
pub fn refreshes_metadata(error: ErrorCode) -> bool {
    matches!(
        error,
        ErrorCode::NotLeaderOrFollower
            | ErrorCode::LeaderNotAvailable
            | ErrorCode::FencedLeaderEpoch
            | ErrorCode::UnknownTopicOrPartition
    )
}

/// One partition as the last answer described it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Its leader's broker id (-1 when it has none).
    pub leader: i32,
    /// The leader's epoch (-1 when unknown).
    pub leader_epoch: i32,
}

/// KIP-320's rule for a client's metadata (Kafka's `Metadata.updateLatestMetadata`): an answer
/// that names an older leader epoch than the one already known comes from a broker that has not
/// caught up (or from a zombie leader that has not heard it was replaced); the newer leader is
/// kept for that partition.
fn keep_newer_leaders(known: &[PartitionInfo], answered: &mut [PartitionInfo]) {
    if known.len() != answered.len() {
        return; // the topic changed shape: the answer stands
    }
    for (old, new) in known.iter().zip(answered.iter_mut()) {
        if old.leader_epoch >= 0 && new.leader_epoch < old.leader_epoch {
            *new = *old;
        }
    }
}

/// What the last answer said about a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicState {
    /// Its partitions, by index.
    Known(Vec<PartitionInfo>),
    /// An error that asking again may cure (UNKNOWN_TOPIC_OR_PARTITION while it is being
    /// created, LEADER_NOT_AVAILABLE).
    Pending(ErrorCode),
    /// An error that asking again will not cure (an invalid name, say).
    Failed(ErrorCode),
}

/// The cache.
#[derive(Debug, Clone)]
pub struct MetadataCache {
    topics: BTreeMap<String, TopicState>,
    /// The brokers of the last answer: node id → `host:port`.
    brokers: BTreeMap<i32, String>,
    wanted: BTreeSet<String>,
    update_requested: bool,
    in_flight: bool,
    updated_at: Option<Millis>,
    not_before: Millis,
    max_age_ms: u64,
    retry_backoff_ms: u64,
    allow_auto_topic_creation: bool,
    /// Leader epochs learned outside metadata (a committed offset's), by topic and partition:
    /// Kafka's `Metadata.lastSeenLeaderEpochs`. Keyed by topic first so that a lookup on the
    /// fetch path borrows the name instead of allocating a key.
    last_seen_epochs: BTreeMap<String, BTreeMap<i32, i32>>,
}

impl MetadataCache {
    /// An empty cache.
    pub fn new(max_age_ms: u64, retry_backoff_ms: u64, allow_auto_topic_creation: bool) -> Self {
        MetadataCache {
            topics: BTreeMap::new(),
            brokers: BTreeMap::new(),
            wanted: BTreeSet::new(),
            update_requested: false,
            in_flight: false,
            updated_at: None,
            not_before: Millis(0),
            max_age_ms,
            retry_backoff_ms,
            allow_auto_topic_creation,
            last_seen_epochs: BTreeMap::new(),
        }
    }

    /// A leader epoch of `partition` learned outside metadata, such as a committed offset's
    /// (Kafka's `updateLastSeenEpochIfNewer`, KIP-320): while the cache names an older epoch,
    /// the partition's leader counts as unknown ([`leader`](Self::leader), Kafka's
    /// `partitionMetadataIfCurrent`) and a refresh is asked for, so nothing is fetched from a
    /// leader that was already replaced when the offset was committed.
    pub fn update_last_seen_epoch(&mut self, topic: &str, partition: i32, epoch: i32) {
        if epoch < 0 {
            return;
        }
        let seen = self
            .last_seen_epochs
            .entry(topic.to_owned())
            .or_default()
            .entry(partition)
            .or_insert(epoch);
        *seen = (*seen).max(epoch);
        if self.current(topic, partition).is_none() {
            self.update_requested = true;
        }
    }

    /// `partition` as the last answer described it, unless a newer leader epoch was seen
    /// elsewhere since.
    fn current(&self, topic: &str, partition: i32) -> Option<&PartitionInfo> {
        let info = self
            .partitions(topic)?
            .get(usize::try_from(partition).ok()?)?;
        match self
            .last_seen_epochs
            .get(topic)
            .and_then(|partitions| partitions.get(&partition))
        {
            Some(seen) if info.leader_epoch < *seen => None,
            _ => Some(info),
        }
    }

    /// Adds `topic` to what the cache keeps; an unknown topic makes a request due.
    pub fn want(&mut self, topic: &str) {
        // Called on every send: allocate only for a topic not wanted yet.
        if self.wanted.contains(topic) {
            return;
        }
        self.wanted.insert(topic.to_owned());
        if !self.topics.contains_key(topic) {
            self.update_requested = true;
        }
    }

    /// Asks for a refresh at the next chance (after the backoff, if an answer just failed).
    pub fn request_update(&mut self) {
        self.update_requested = true;
    }

    /// Whether a refresh has been asked for and not yet answered.
    pub fn update_requested(&self) -> bool {
        self.update_requested
    }

    /// What the last answer said about `topic`.
    pub fn topic(&self, topic: &str) -> Option<&TopicState> {
        self.topics.get(topic)
    }

    /// The partitions of `topic`, if known.
    pub fn partitions(&self, topic: &str) -> Option<&[PartitionInfo]> {
        match self.topics.get(topic) {
            Some(TopicState::Known(partitions)) => Some(partitions),
            _ => None,
        }
    }

    /// The address (`host:port`) of broker `node`, if the last answer named it.
    pub fn broker(&self, node: i32) -> Option<&str> {
        self.brokers.get(&node).map(String::as_str)
    }

    /// The broker at `address`, if the last answer named one there.
    pub fn broker_at(&self, address: &str) -> Option<i32> {
        self.brokers
            .iter()
            .find(|(_, at)| at.as_str() == address)
            .map(|(node, _)| *node)
    }

    /// The brokers the last answer named, by node id.
    pub fn brokers(&self) -> impl Iterator<Item = i32> + '_ {
        self.brokers.keys().copied()
    }

    /// The leader of `partition` of `topic`, if the cache knows one.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<i32> {
        let info = self.current(topic, partition)?;
        (info.leader >= 0).then_some(info.leader)
    }

    /// The epoch of `partition`'s leader, if the cache knows one.
    pub fn leader_epoch(&self, topic: &str, partition: i32) -> Option<i32> {
        let info = self.current(topic, partition)?;
        (info.leader >= 0 && info.leader_epoch >= 0).then_some(info.leader_epoch)
    }

    fn due_at(&self) -> Option<Millis> {
        if self.in_flight || self.wanted.is_empty() {
            return None;
        }
        let aged = self
            .updated_at
            .map_or(Millis(0), |at| at.plus(self.max_age_ms));
        let due = if self.update_requested {
            Millis(0)
        } else {
            aged
        };
        Some(due.max(self.not_before))
    }

    /// Whether a request should go out now.
    pub fn wants_request(&self, now: Millis) -> bool {
        self.due_at().is_some_and(|at| at <= now)
    }

    /// When a request will be due (for the owner's `next_deadline`).
    pub fn next_deadline(&self) -> Option<Millis> {
        self.due_at()
    }

    /// The request for every wanted topic; the cache now waits for its answer.
    pub fn request(&mut self) -> MetadataRequest {
        assert!(!self.in_flight, "one metadata request at a time");
        self.in_flight = true;
        self.update_requested = false;
        let topics = self
            .wanted
            .iter()
            .map(|topic| {
                MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(topic.clone()))))
            })
            .collect();
        MetadataRequest::default()
            .with_topics(Some(topics))
            .with_allow_auto_topic_creation(self.allow_auto_topic_creation)
    }

    /// Takes the answer to [`request`](Self::request). A topic still pending is asked again
    /// after the backoff.
    pub fn on_response(&mut self, now: Millis, response: &MetadataResponse) {
        assert!(self.in_flight, "a metadata answer without a request");
        self.in_flight = false;
        self.updated_at = Some(now);
        if !response.brokers.is_empty() {
            self.brokers = response
                .brokers
                .iter()
                .map(|broker| {
                    (
                        broker.node_id.0,
                        format!("{}:{}", broker.host.as_str(), broker.port),
                    )
                })
                .collect();
        }
        for topic in &response.topics {
            let Some(name) = topic.name.as_ref() else {
                continue;
            };
            let error = ErrorCode::from_code(topic.error_code);
            let state = match error {
                ErrorCode::None => {
                    let mut partitions = vec![
                        PartitionInfo {
                            leader: -1,
                            leader_epoch: -1,
                        };
                        topic.partitions.len()
                    ];
                    let mut complete = true;
                    for partition in &topic.partitions {
                        match usize::try_from(partition.partition_index)
                            .ok()
                            .and_then(|index| partitions.get_mut(index))
                        {
                            Some(slot) => {
                                *slot = PartitionInfo {
                                    leader: partition.leader_id.0,
                                    leader_epoch: partition.leader_epoch,
                                }
                            }
                            None => complete = false,
                        }
                    }
                    if let Some(TopicState::Known(known)) = self.topics.get(name.as_str()) {
                        keep_newer_leaders(known, &mut partitions);
                    }
                    if complete && !partitions.is_empty() {
                        TopicState::Known(partitions)
                    } else {
                        TopicState::Pending(ErrorCode::LeaderNotAvailable)
                    }
                }
                ErrorCode::UnknownTopicOrPartition | ErrorCode::LeaderNotAvailable => {
                    TopicState::Pending(error)
                }
                error => TopicState::Failed(error),
            };
            self.topics.insert(name.as_str().to_owned(), state);
        }
        let pending = self
            .wanted
            .iter()
            .any(|topic| !matches!(self.topics.get(topic), Some(TopicState::Known(_))));
        if pending {
            self.update_requested = true;
            self.not_before = now.plus(self.retry_backoff_ms);
        }
    }

    /// The request was lost (connection broken, timed out): ask again after the backoff.
    pub fn on_failure(&mut self, now: Millis) {
        self.in_flight = false;
        self.update_requested = true;
        self.not_before = now.plus(self.retry_backoff_ms);
    }

    /// Whether a request is awaiting its answer.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }
}

/// A metadata answer for tests: topic `topic` whose partition `i` is led by `leaders[i]` (-1:
/// none), naming brokers 0 (`b:9092`) and 1 (`c:9092`).
#[cfg(test)]
pub(crate) fn answer_led_by(topic: &str, leaders: &[i32]) -> MetadataResponse {
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::BrokerId;
    let partitions = leaders
        .iter()
        .enumerate()
        .map(|(index, leader)| {
            MetadataResponsePartition::default()
                .with_partition_index(index as i32)
                .with_leader_id(BrokerId(*leader))
        })
        .collect();
    let brokers = [(0, "b"), (1, "c")]
        .map(|(node, host)| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(node))
                .with_host(StrBytes::from_static_str(host))
                .with_port(9092)
        })
        .to_vec();
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_topics(vec![MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(topic.to_owned()))))
            .with_partitions(partitions)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_response::{
        MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::BrokerId;

    fn answer(topic: &str, error: ErrorCode, partitions: i32) -> MetadataResponse {
        let partitions = (0..partitions)
            .map(|index| {
                MetadataResponsePartition::default()
                    .with_partition_index(index)
                    .with_leader_id(BrokerId(0))
                    .with_leader_epoch(3)
            })
            .collect();
        MetadataResponse::default().with_topics(vec![MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(topic.to_owned()))))
            .with_error_code(error.code())
            .with_partitions(partitions)])
    }

    #[test]
    fn an_unknown_topic_is_asked_for_and_then_kept_until_it_ages() {
        let mut cache = MetadataCache::new(1_000, 100, true);
        assert!(!cache.wants_request(Millis(0)), "nothing wanted yet");
        cache.want("t");
        assert!(cache.wants_request(Millis(0)));
        let request = cache.request();
        assert_eq!(request.topics.as_ref().map(Vec::len), Some(1));
        assert!(request.allow_auto_topic_creation);
        assert!(!cache.wants_request(Millis(0)), "one request at a time");
        cache.on_response(Millis(5), &answer("t", ErrorCode::None, 3));
        assert_eq!(cache.partitions("t").map(<[_]>::len), Some(3));
        assert_eq!(cache.partitions("t").expect("known")[2].leader_epoch, 3);
        assert_eq!(
            cache.next_deadline(),
            Some(Millis(1_005)),
            "metadata.max.age.ms"
        );
        cache.request_update();
        assert!(cache.wants_request(Millis(6)), "an update was requested");
    }

    /// KIP-320: a broker that has not caught up (or a zombie leader) names an older leader
    /// epoch; the newer leader stays, and a newer epoch replaces it.
    #[test]
    fn an_answer_naming_an_older_leader_epoch_keeps_the_newer_leader() {
        let mut cache = MetadataCache::new(60_000, 100, true);
        cache.want("t");
        let mut epoch = |leader: i32, epoch: i32| {
            let mut answer = answer("t", ErrorCode::None, 1);
            answer.topics[0].partitions[0].leader_id = BrokerId(leader);
            answer.topics[0].partitions[0].leader_epoch = epoch;
            let _ = cache.request();
            cache.on_response(Millis(5), &answer);
            (cache.leader("t", 0), cache.leader_epoch("t", 0))
        };
        assert_eq!(epoch(1, 4), (Some(1), Some(4)));
        assert_eq!(
            epoch(0, 3),
            (Some(1), Some(4)),
            "the stale answer is ignored"
        );
        assert_eq!(epoch(2, 5), (Some(2), Some(5)));
    }

    #[test]
    fn a_leader_older_than_a_committed_offsets_epoch_is_not_used_until_a_refresh() {
        let mut cache = MetadataCache::new(60_000, 100, true);
        cache.want("t");
        let answered = |cache: &mut MetadataCache, leader: i32, epoch: i32| {
            let mut answer = answer("t", ErrorCode::None, 1);
            answer.topics[0].partitions[0].leader_id = BrokerId(leader);
            answer.topics[0].partitions[0].leader_epoch = epoch;
            let _ = cache.request();
            cache.on_response(Millis(5), &answer);
        };
        answered(&mut cache, 1, 0);
        assert_eq!(cache.leader("t", 0), Some(1));
        // A committed offset names epoch 1: broker 1, leader of epoch 0, was replaced.
        cache.update_last_seen_epoch("t", 0, 1);
        assert_eq!(cache.leader("t", 0), None, "the stale leader is not used");
        assert_eq!(cache.leader_epoch("t", 0), None);
        assert!(cache.update_requested(), "a refresh is asked for");
        answered(&mut cache, 3, 1);
        assert_eq!(cache.leader("t", 0), Some(3));
        assert_eq!(cache.leader_epoch("t", 0), Some(1));
        cache.update_last_seen_epoch("t", 0, 0);
        assert_eq!(
            cache.leader("t", 0),
            Some(3),
            "an older epoch changes nothing"
        );
    }

    #[test]
    fn a_pending_topic_is_asked_again_after_the_backoff_and_a_bad_one_fails() {
        let mut cache = MetadataCache::new(60_000, 100, true);
        cache.want("t");
        cache.request();
        cache.on_response(Millis(10), &answer("t", ErrorCode::LeaderNotAvailable, 0));
        assert_eq!(
            cache.topic("t"),
            Some(&TopicState::Pending(ErrorCode::LeaderNotAvailable))
        );
        assert!(!cache.wants_request(Millis(109)));
        assert!(cache.wants_request(Millis(110)));
        cache.request();
        cache.on_response(
            Millis(120),
            &answer("t", ErrorCode::InvalidTopicException, 0),
        );
        assert_eq!(
            cache.topic("t"),
            Some(&TopicState::Failed(ErrorCode::InvalidTopicException))
        );
        cache.on_failure(Millis(130));
        assert_eq!(cache.next_deadline(), Some(Millis(230)));
    }
}
