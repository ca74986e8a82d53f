//! What the broker knows of the cluster's metadata (Kafka's `KRaftMetadataCache`): one
//! [`ClusterImage`], built from the quorum's records ([`crate::metadata::records`]) whichever
//! way they come.
//!
//! - In a cluster the broker fetches them from the controller quorum (`cluster.rs`).
//! - A broker that is its own controller (no `controller.quorum.voters`) appends them to its own
//!   metadata log, `__cluster_metadata-0`, and applies them once an fsync covers them, so a
//!   crash can never leave acknowledged data in a topic that recovery does not know. It decides
//!   them as a controller does ([`crate::metadata::topics`]); its first creation also registers
//!   it, so the image names the leader of every partition it holds.
//!
//! Each topic's effective config ([`TopicConfig`]) is worked out once, when the topic arrives.

use std::collections::{BTreeMap, BTreeSet};

use rand_chacha::ChaCha8Rng;
use uuid::Uuid;

use crate::config::{BrokerConfig, TopicConfig};
use crate::log::PartitionLog;
use crate::metadata::image::{ClusterImage, TopicImage};
use crate::metadata::records::Record;
use crate::metadata::topics::TopicCreator;
use crate::node_io::{FlushId, ReplyTo};
use crate::storage::Storage;
use crate::types::{BrokerEpoch, BrokerId};
use kafka_protocol::messages::CreateTopicsResponse;

/// A CreateTopics response waiting for its records in this broker's own metadata log to be
/// durable (the topics exist from then on).
#[derive(Debug)]
pub(super) struct DelayedCreateTopics {
    pub(super) reply_to: ReplyTo,
    pub(super) response: CreateTopicsResponse,
    pub(super) flush_id: FlushId,
}

/// A topic as the broker reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TopicMetadata {
    /// Name.
    pub(super) name: String,
    /// Id (Fetch v13+ addresses topics by id).
    pub(super) topic_id: Uuid,
    /// Partition count.
    pub(super) partitions: i32,
    /// Effective config.
    pub(super) config: TopicConfig,
}

/// The image, the topics' configs, and the broker's own metadata log.
#[derive(Debug)]
pub(super) struct MetadataCache<S: Storage> {
    /// What the records applied so far say.
    image: ClusterImage,
    /// Each topic's effective config, by topic id (a topic whose configs do not parse has none,
    /// and the broker does not serve it).
    configs: BTreeMap<Uuid, TopicConfig>,
    /// Topics asked for (created, auto-created or forwarded) and not yet in the image.
    pub(super) creating: BTreeSet<String>,
    /// The broker's own metadata log: written only when the broker is its own controller.
    pub(super) log: PartitionLog<S>,
    /// This broker's registration is appended to its own log and not yet durable.
    registering: bool,
}

impl<S: Storage> MetadataCache<S> {
    /// A cache over a recovered metadata log, with an empty image (replay fills it).
    pub(super) fn new(log: PartitionLog<S>) -> Self {
        MetadataCache {
            image: ClusterImage::default(),
            configs: BTreeMap::new(),
            creating: BTreeSet::new(),
            log,
            registering: false,
        }
    }

    /// The image.
    pub(super) fn image(&self) -> &ClusterImage {
        &self.image
    }

    /// Applies one record to the image (its topic's config comes with [`Self::configure`]).
    pub(super) fn apply(&mut self, record: &Record) -> Result<(), String> {
        self.image.apply(record)?;
        match record {
            Record::Topic { name, .. } => {
                self.creating.remove(name);
            }
            Record::RegisterBroker { .. } => self.registering = false,
            _ => {}
        }
        Ok(())
    }

    /// Takes a whole image (a metadata snapshot) in place of the current one.
    pub(super) fn replace(&mut self, image: ClusterImage) {
        self.configs
            .retain(|topic_id, _| image.topic_by_id(*topic_id).is_some());
        for topic in image.topics() {
            self.creating.remove(&topic.name);
        }
        self.image = image;
    }

    /// Works out the config of every topic that has none yet; returns the topics whose configs
    /// do not parse, with why.
    pub(super) fn configure(&mut self, broker: &BrokerConfig) -> Vec<(String, String)> {
        let mut failed = Vec::new();
        for topic in self.image.topics() {
            if self.configs.contains_key(&topic.topic_id) {
                continue;
            }
            match TopicConfig::with_overrides(broker, &topic.configs) {
                Ok(config) => {
                    self.configs.insert(topic.topic_id, config);
                }
                Err(error) => failed.push((topic.name.clone(), error.to_string())),
            }
        }
        failed
    }

    fn view(&self, topic: &TopicImage) -> Option<TopicMetadata> {
        let config = self.configs.get(&topic.topic_id)?;
        Some(TopicMetadata {
            name: topic.name.clone(),
            topic_id: topic.topic_id,
            partitions: topic.partitions.len() as i32,
            config: config.clone(),
        })
    }

    /// A topic by name.
    pub(super) fn topic(&self, name: &str) -> Option<TopicMetadata> {
        self.view(self.image.topic(name)?)
    }

    /// A topic by id.
    pub(super) fn topic_by_id(&self, topic_id: Uuid) -> Option<TopicMetadata> {
        self.view(self.image.topic_by_id(topic_id)?)
    }

    /// A topic the broker serves (it has a config), by name, as the image has it.
    pub(super) fn served(&self, name: &str) -> Option<&TopicImage> {
        self.image
            .topic(name)
            .filter(|topic| self.configs.contains_key(&topic.topic_id))
    }

    /// A topic the broker serves, by id, as the image has it.
    pub(super) fn served_by_id(&self, topic_id: Uuid) -> Option<&TopicImage> {
        self.image
            .topic_by_id(topic_id)
            .filter(|topic| self.configs.contains_key(&topic.topic_id))
    }

    /// A topic's partition count, if the broker serves it.
    pub(super) fn partition_count(&self, name: &str) -> Option<i32> {
        let topic = self.image.topic(name)?;
        self.configs
            .contains_key(&topic.topic_id)
            .then_some(topic.partitions.len() as i32)
    }

    /// A topic's effective config, if the broker serves it.
    pub(super) fn config(&self, name: &str) -> Option<&TopicConfig> {
        self.configs.get(&self.image.topic(name)?.topic_id)
    }

    /// Every topic the broker serves, by id.
    pub(super) fn topics(&self) -> Vec<TopicMetadata> {
        self.image
            .topics()
            .filter_map(|topic| self.view(topic))
            .collect()
    }

    /// The records that register `node` on its own log (at the log's end offset, its broker
    /// epoch, as Kafka's controller numbers epochs), unless it is registered or registering.
    pub(super) fn own_registration(
        &mut self,
        node: BrokerId,
        host: &str,
        port: i32,
    ) -> Vec<Record> {
        if self.registering || self.image.broker(node).is_some() {
            return Vec::new();
        }
        self.registering = true;
        let epoch = BrokerEpoch(self.log.log_end_offset());
        vec![
            Record::RegisterBroker {
                broker: node,
                epoch,
                host: host.to_owned(),
                port,
            },
            Record::UnfenceBroker {
                broker: node,
                epoch,
            },
        ]
    }

    /// Forgets the records of an append that failed: their topics and registration are not
    /// being created any more.
    pub(super) fn append_failed(&mut self, records: &[Record]) {
        for record in records {
            match record {
                Record::Topic { name, .. } => {
                    self.creating.remove(name);
                }
                Record::RegisterBroker { .. } => self.registering = false,
                _ => {}
            }
        }
    }

    /// The log's invariants, and that every topic being created is not yet in the image; the
    /// image's own invariants too when the broker writes it (a cluster's broker may have applied
    /// part of a controller decision).
    pub(super) fn check_invariants(&self, own_controller: bool) {
        self.log.check_invariants();
        if own_controller {
            self.image.check_invariants();
        }
        debug_assert!(
            self.creating
                .iter()
                .all(|name| self.image.topic(name).is_none()),
            "a topic being created is not yet in the image"
        );
    }
}

/// A broker that is its own controller, creating topics over its image: the only active broker
/// is itself.
pub(super) struct OwnController<'a, S: Storage> {
    /// The cache.
    pub(super) cache: &'a MetadataCache<S>,
    /// The broker's random source (topic ids).
    pub(super) rng: &'a mut ChaCha8Rng,
    /// The broker.
    pub(super) node: BrokerId,
}

impl<S: Storage> TopicCreator for OwnController<'_, S> {
    fn is_taken(&self, name: &str) -> bool {
        self.cache.image.topic(name).is_some() || self.cache.creating.contains(name)
    }

    fn active_brokers(&self) -> Vec<BrokerId> {
        vec![self.node]
    }

    fn new_topic_id(&mut self) -> Uuid {
        self.cache.image.new_topic_id(self.rng)
    }

    fn first_replica(&mut self, _active: usize) -> usize {
        0
    }
}
