//! Start-up: `meta.properties`, the metadata log, stray files, recovery of every partition log,
//! and the sync that makes what recovery kept durable before the broker serves.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::{BrokerConfig, TopicConfig};
use crate::log::{FlushSync, LogConfig, LogError, LogRead, PartitionLog, RecoveryReport};
use crate::protocol::record_batch::{decode_records, split_batches};
use crate::storage::{Storage, StorageFile};
use crate::types::{BrokerId, Millis, TopicPartition};

use crate::broker::checkpoint::{self, CheckpointKind, CheckpointWriter, RecoveryPoints};
use crate::broker::flushes::Flushes;
use crate::broker::metadata_cache::{MetadataCache, TopicMetadata};
use crate::broker::partition::Partition;
use crate::broker::producer_ids::ProducerIdManager;
use crate::broker::replica_manager::ReplicaManager;
use crate::broker::{Broker, BrokerError, BrokerEvent, StartupReport};
use crate::metadata::records::Record;
use crate::metadata::{COMBINED_CONTROLLER_DIRECTORY, METADATA_LOG_DIRECTORY};
use crate::node_io::PeerRequestIds;

const META_PROPERTIES: &str = "meta.properties";

/// The metadata log's settings: an fsync per append, never rolled by time.
pub(crate) fn metadata_log_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1 << 30,
        index_interval_bytes: 4096,
        flush_messages: 1,
        flush_ms: None,
        segment_ms: i64::MAX,
        compacted: false,
    }
}

pub(in crate::broker) fn log_config(config: &TopicConfig) -> LogConfig {
    LogConfig {
        segment_bytes: config.segment_bytes as u64,
        index_interval_bytes: config.index_interval_bytes as u64,
        flush_messages: config.flush_messages,
        flush_ms: config.flush_ms.map(|ms| ms as u64),
        segment_ms: config.segment_ms,
        compacted: config.cleanup_policy.compact,
    }
}

/// Kafka-style cluster id: 16 random bytes, URL-safe base64 without padding (22 characters).
fn new_cluster_id(rng: &mut ChaCha8Rng) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bits = (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64());
    (0..22)
        .map(|index| ALPHABET[((bits >> (index * 6)) & 0x3f) as usize] as char)
        .collect()
}

impl<F> StartupReport<F> {
    fn empty(clean_shutdown: bool) -> Self {
        StartupReport {
            cluster_id: String::new(),
            topics: 0,
            partitions: 0,
            recovery: RecoveryReport::default(),
            stray_files_removed: 0,
            to_sync: FlushSync {
                files: Vec::new(),
                // The marker's removal must be durable before the broker serves.
                directories: if clean_shutdown {
                    vec![String::new()]
                } else {
                    Vec::new()
                },
            },
            events: Vec::new(),
            clean_shutdown,
        }
    }
}

impl<S: Storage> Broker<S> {
    /// Opens (and recovers) the broker's metadata log; corruption there stops the start-up.
    fn open_metadata_log(
        storage: &S,
        recovery_points: &RecoveryPoints,
        now: Millis,
        report: &mut StartupReport<S::File>,
    ) -> Result<PartitionLog<S>, BrokerError> {
        let metadata_partition =
            TopicPartition::parse(METADATA_LOG_DIRECTORY).expect("a partition directory name");
        let (metadata_log, recovery) = PartitionLog::open_with(
            storage.clone(),
            METADATA_LOG_DIRECTORY,
            metadata_log_config(),
            recovery_points
                .get(&metadata_partition)
                .copied()
                .unwrap_or(0),
            report.clean_shutdown,
            now,
        )?;
        if let Some(corruption) = &recovery.corruption {
            // Without its metadata the broker cannot know its topics: Kafka refuses to start.
            return Err(BrokerError::DataDirectory(format!(
                "{METADATA_LOG_DIRECTORY}: {corruption}"
            )));
        }
        add_recovery(&mut report.recovery, &recovery);
        Ok(metadata_log)
    }

    /// Opens the data directory: reads or writes `meta.properties`, replays the metadata log,
    /// deletes stray partition files, and recovers every partition log.
    pub fn open(
        config: BrokerConfig,
        storage: S,
        seed: u64,
        now: Millis,
    ) -> Result<(Self, StartupReport<S::File>), BrokerError> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (clean_shutdown, marker_epoch) = Self::take_clean_shutdown_marker(&storage)?;
        let mut report = StartupReport::empty(clean_shutdown);
        let cluster_id = Self::load_meta_properties(&config, &storage, &mut rng, &mut report)?;
        let recovery_points = Self::load_checkpoint(&storage, CheckpointKind::RecoveryPoints)?;
        let log_starts = Self::load_checkpoint(&storage, CheckpointKind::LogStarts)?;
        let high_watermarks = Self::load_checkpoint(&storage, CheckpointKind::HighWatermarks)?;
        let producer_id_block = Self::load_checkpoint(&storage, CheckpointKind::ProducerIds)?;
        let producer_ids = ProducerIdManager::loaded(config.node_id, now, producer_id_block);
        let metadata_log = Self::open_metadata_log(&storage, &recovery_points, now, &mut report)?;
        let retention_check = now.plus(config.groups.offsets_retention_check_interval_ms);
        let groups =
            crate::broker::group::GroupCoordinator::new(config.groups.clone(), retention_check);
        let interval_ms = config.log_flush_offset_checkpoint_interval_ms as u64;
        let high_watermark_interval_ms =
            config.replication.high_watermark_checkpoint_interval_ms as u64;
        let config_retention_check_interval_ms = config.log_retention_check_interval_ms as u64;
        let mut broker = Broker {
            cleaner: crate::broker::log_manager::LogCleaner::new(&config, now),
            config,
            storage,
            cluster_id: cluster_id.clone(),
            rng,
            metadata: MetadataCache::new(metadata_log),
            replicas: ReplicaManager::default(),
            flushes: Flushes::default(),
            checkpoint: CheckpointWriter::new(interval_ms, now, recovery_points.clone()),
            log_starts: CheckpointWriter::new(
                config_retention_check_interval_ms,
                now,
                log_starts.clone(),
            ),
            high_watermarks: CheckpointWriter::new(
                high_watermark_interval_ms,
                now,
                high_watermarks,
            ),
            producer_ids,
            wall_clock_at_zero: 0,
            creations: Vec::new(),
            closing: None,
            clean_start: clean_shutdown,
            topic_counts: crate::broker::metrics::TopicStats::default(),
            requested_starts: RecoveryPoints::new(),
            cluster: None,
            peer_ids: PeerRequestIds::default(),
            groups,
        };
        broker.cluster =
            crate::broker::cluster::Membership::of(&broker.config, marker_epoch.unwrap_or(-1));
        broker.replay_metadata()?;
        if broker.cluster.is_none() {
            // In a cluster the topics come from the controller after start-up: nothing on disk
            // is a stray yet.
            report.stray_files_removed = broker.remove_stray_files()?;
        }
        report.topics = broker.open_partitions(&recovery_points, &log_starts, now, &mut report)?;
        broker.clean_start = false; // partitions created from now on are new
        broker.sync_recovered_logs(now, &mut report);
        report.cluster_id = cluster_id;
        report.partitions = broker.replicas.len();
        broker.check_invariants();
        Ok((broker, report))
    }

    /// Opens (and recovers) every partition of every known topic; returns the number of topics.
    fn open_partitions(
        &mut self,
        recovery_points: &RecoveryPoints,
        log_starts: &RecoveryPoints,
        now: Millis,
        report: &mut StartupReport<S::File>,
    ) -> Result<usize, BrokerError> {
        let topics: Vec<TopicMetadata> = self.metadata.topics();
        for topic in &topics {
            for partition in 0..topic.partitions {
                let topic_partition = TopicPartition::new(topic.name.as_str(), partition);
                let recovery_point = recovery_points.get(&topic_partition).copied().unwrap_or(0);
                let recovery = self.open_partition(topic, partition, recovery_point, now)?;
                add_recovery(&mut report.recovery, &recovery);
                // Segments retention deleted come back if a crash lost their removal: delete
                // them again (the checkpointed start is durable, their removal was not).
                if let Some(start) = log_starts.get(&topic_partition) {
                    crate::broker::log_manager::delete_below(
                        &mut self.replicas,
                        &topic_partition,
                        *start,
                    );
                }
                let opened = self.replicas.get(&topic_partition).expect("just opened");
                report.events.extend(opened.recovered_events(&recovery));
            }
        }
        Ok(topics.len())
    }

    /// Everything recovery kept past the recovery points goes into the start-up sync; the
    /// driver completes it before serving, so the logs are durable to their ends (and the high
    /// watermarks can start there).
    fn sync_recovered_logs(&mut self, now: Millis, report: &mut StartupReport<S::File>) {
        let mut add = |sync: FlushSync<S::File>| {
            report.to_sync.files.extend(sync.files);
            for directory in sync.directories {
                if !report.to_sync.directories.contains(&directory) {
                    report.to_sync.directories.push(directory);
                }
            }
        };
        if let Some((sync, mark)) = self.metadata.log.start_flush(now) {
            add(sync);
            self.metadata.log.flush_completed(mark);
        }
        for (topic_partition, partition) in self.replicas.iter_mut() {
            if partition.offline().is_some() {
                continue;
            }
            if let Some((sync, mark)) = partition.log_mut().start_flush(now) {
                add(sync);
                partition.on_flush_completed(mark);
            }
            partition.maybe_advance_high_watermark();
            report.events.push(BrokerEvent::HighWatermark {
                partition: topic_partition.clone(),
                offset: partition.high_watermark(),
            });
        }
    }

    /// The offsets of a checkpoint file (none without the file: recover everything, keep every
    /// segment).
    fn load_checkpoint(storage: &S, kind: CheckpointKind) -> Result<RecoveryPoints, BrokerError> {
        let name = kind.file();
        let names = storage.list(name).map_err(LogError::from)?;
        if !names.iter().any(|listed| listed == name) {
            return Ok(RecoveryPoints::new());
        }
        let bytes = storage
            .open(name)
            .and_then(|file| file.read_all())
            .map_err(LogError::from)?;
        checkpoint::parse(&String::from_utf8_lossy(&bytes))
            .map_err(|error| BrokerError::DataDirectory(format!("{name}: {error}")))
    }

    fn load_meta_properties(
        config: &BrokerConfig,
        storage: &S,
        rng: &mut ChaCha8Rng,
        report: &mut StartupReport<S::File>,
    ) -> Result<String, BrokerError> {
        let file = storage.open(META_PROPERTIES).map_err(LogError::from)?;
        let len = file.len().map_err(LogError::from)?;
        if len == 0 {
            let cluster_id = new_cluster_id(rng);
            let text = format!(
                "#seedlog meta.properties\nversion=1\ncluster.id={cluster_id}\nnode.id={}\n",
                config.node_id
            );
            file.write_all_at(text.as_bytes(), 0)
                .map_err(LogError::from)?;
            report.to_sync.files.push(file);
            report.to_sync.directories.push(String::new());
            return Ok(cluster_id);
        }
        let mut bytes = vec![0; len as usize];
        file.read_exact_at(&mut bytes, 0).map_err(LogError::from)?;
        let text = String::from_utf8_lossy(&bytes);
        let properties = crate::config::parse_properties(&text)
            .map_err(|error| BrokerError::DataDirectory(format!("{META_PROPERTIES}: {error}")))?;
        let value = |key: &str| {
            properties
                .iter()
                .find(|property| property.key == key)
                .map(|property| property.value.clone())
        };
        let stored_node = value("node.id").unwrap_or_default();
        if stored_node != config.node_id.to_string() {
            return Err(BrokerError::DataDirectory(format!(
                "Stored node id {stored_node} doesn't match previous node id {} in {META_PROPERTIES}",
                config.node_id
            )));
        }
        value("cluster.id").ok_or_else(|| {
            BrokerError::DataDirectory(format!("{META_PROPERTIES} has no cluster.id"))
        })
    }

    /// Applies the records of the broker's own metadata log, and works out each topic's config
    /// (a topic whose configs no longer parse stops the start-up: its data must not become a
    /// stray).
    fn replay_metadata(&mut self) -> Result<(), BrokerError> {
        for record in self.read_metadata_records()? {
            self.metadata.apply(&record).map_err(|error| {
                BrokerError::DataDirectory(format!("{METADATA_LOG_DIRECTORY}: {error}"))
            })?;
        }
        if let Some((name, error)) = self.metadata.configure(&self.config).into_iter().next() {
            return Err(BrokerError::DataDirectory(format!(
                "{METADATA_LOG_DIRECTORY}: topic {name}: {error}"
            )));
        }
        Ok(())
    }

    /// The records of the broker's own metadata log. A log written by seedlog before the one
    /// metadata path (JSON topic records) is refused: this version reads only the quorum's
    /// records, and guessing would lose topics.
    fn read_metadata_records(&self) -> Result<Vec<Record>, BrokerError> {
        let log = &self.metadata.log;
        read_log_records(log, log.log_start_offset())?
            .iter()
            .map(|record| {
                let value = record.value.as_deref().unwrap_or_default();
                if value.first() == Some(&b'{') {
                    return Err(BrokerError::DataDirectory(format!(
                        "{METADATA_LOG_DIRECTORY}: record {} is a JSON topic record, the format of \
                         seedlog before one metadata path; this version reads only the \
                         controller's binary records. Start it on an empty log.dirs (and create \
                         the topics again), or go on with the older version (see \
                         docs/OPERATIONS.md, \"Upgrading a single broker\")",
                        record.offset
                    )));
                }
                Record::decode(value).map_err(|error| {
                    BrokerError::DataDirectory(format!(
                        "{METADATA_LOG_DIRECTORY}: record {}: {error}",
                        record.offset
                    ))
                })
            })
            .collect()
    }

    fn remove_stray_files(&self) -> Result<usize, BrokerError> {
        let mut removed = 0;
        for name in self.storage.list("").map_err(LogError::from)? {
            let Some((directory, _)) = name.split_once('/') else {
                continue;
            };
            let known = directory == METADATA_LOG_DIRECTORY
                || directory == COMBINED_CONTROLLER_DIRECTORY
                || TopicPartition::parse(directory).is_some_and(|partition| {
                    self.metadata
                        .partition_count(&partition.topic)
                        .is_some_and(|count| partition.partition < count)
                });
            if !known {
                self.storage.remove(&name).map_err(LogError::from)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    pub(in crate::broker) fn open_partition(
        &mut self,
        topic: &TopicMetadata,
        partition: i32,
        recovery_point: i64,
        now: Millis,
    ) -> Result<RecoveryReport, LogError> {
        let topic_partition = TopicPartition::new(topic.name.as_str(), partition);
        let (log, recovery) = PartitionLog::open_with(
            self.storage.clone(),
            &topic_partition.to_string(),
            log_config(&topic.config),
            recovery_point,
            self.clean_start,
            now,
        )?;
        let mut replica = Partition::new_local_leader(
            topic_partition.clone(),
            log,
            BrokerId(self.config.node_id),
        );
        if let Some(corruption) = &recovery.corruption {
            replica.go_offline(format!("corrupt log: {corruption}"));
        }
        self.replicas.insert(replica);
        Ok(recovery)
    }
}

/// Every record of a metadata log from `offset` on (the broker's own, or a controller's).
pub(crate) fn read_log_records<S: Storage>(
    log: &PartitionLog<S>,
    mut offset: i64,
) -> Result<Vec<crate::protocol::record_batch::Record>, BrokerError> {
    let mut records = Vec::new();
    let end = log.log_end_offset();
    while offset < end {
        let LogRead::Records {
            file,
            position,
            len,
        } = log.read(offset, end, 1 << 20)?
        else {
            break;
        };
        let mut bytes = vec![0; len as usize];
        file.read_exact_at(&mut bytes, position)
            .map_err(LogError::from)?;
        let bytes = bytes::Bytes::from(bytes);
        let batches =
            split_batches(&bytes).map_err(|error| BrokerError::DataDirectory(error.to_string()))?;
        let decoded = decode_records(&bytes)
            .map_err(|error| BrokerError::DataDirectory(error.to_string()))?;
        // The batch's last offset, not its last record's: a compacted batch may have lost its
        // last records, or all of them.
        if let Some((header, _)) = batches.last() {
            offset = header.last_offset() + 1;
        }
        records.extend(decoded);
    }
    Ok(records)
}

fn add_recovery(total: &mut RecoveryReport, one: &RecoveryReport) {
    total.segments += one.segments;
    total.unscanned_segments += one.unscanned_segments;
    total.batches += one.batches;
    total.truncated_bytes += one.truncated_bytes;
    total.deleted_segments += one.deleted_segments;
    if total.corruption.is_none() {
        total.corruption.clone_from(&one.corruption);
    }
}
