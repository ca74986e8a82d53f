//! The log cleaner (Kafka's `LogCleaner` with one cleaner thread, `log.cleaner.threads=1`):
//! every `log.cleaner.backoff.ms` it looks at each online log whose `cleanup.policy` includes
//! `compact`, picks the dirtiest one whose dirty ratio exceeds `min.cleanable.dirty.ratio` (or
//! one holding tombstones whose delete horizon has passed), and cleans it up to its first
//! uncleanable offset, bounded by the active segment, the high watermark and the recovery point
//! (never unflushed data). A clean that rewrote something is followed at once by the next
//! check, as Kafka's cleaner thread goes on while logs need it; otherwise the cleaner backs off.
//!
//! The clean's steps (`.cleaned` fsync, rename to `.swap` and directory fsync, rename over the
//! segment and directory fsync) run as flushes, one after the other; see
//! `log::partition_log::cleaning`. Where a log was cleaned up to (Kafka's
//! `cleaner-offset-checkpoint`) is kept in memory only: after a restart every log counts as
//! wholly dirty, so its first check cleans it again (more work, never less safety).

use std::collections::BTreeMap;

use crate::config::TopicConfig;
use crate::log::cleaner::{CleanStats, CleanerConfig};
use crate::log::{CleanStage, FlushSync};
use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

use crate::broker::replica_manager::ReplicaManager;

/// What the cleaner remembers of one log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Progress {
    /// The first offset no clean has covered yet.
    first_dirty: i64,
    /// The earliest delete horizon of a tombstone a clean kept.
    next_delete_horizon: Option<i64>,
}

/// A clean under way.
#[derive(Debug, Clone, PartialEq, Eq)]
struct InFlight {
    topic_partition: TopicPartition,
    end: i64,
    stats: CleanStats,
}

/// The cleaner's state.
#[derive(Debug)]
pub(in crate::broker) struct LogCleaner {
    enabled: bool,
    backoff_ms: u64,
    next_due: Millis,
    in_flight: Option<InFlight>,
    progress: BTreeMap<TopicPartition, Progress>,
    /// Cleans that rewrote at least one segment, since start.
    cleans: u64,
}

impl LogCleaner {
    pub(in crate::broker) fn new(config: &crate::config::BrokerConfig, now: Millis) -> LogCleaner {
        let backoff_ms = config.cleaner.backoff_ms.max(0) as u64;
        LogCleaner {
            enabled: config.cleaner.enable,
            backoff_ms,
            next_due: now.plus(backoff_ms),
            in_flight: None,
            progress: BTreeMap::new(),
            cleans: 0,
        }
    }

    /// When the cleaner next looks for a log to clean (never while a clean is under way).
    pub(in crate::broker) fn next_deadline(&self) -> Option<Millis> {
        (self.enabled && self.in_flight.is_none()).then_some(self.next_due)
    }

    fn rest(&mut self, now: Millis) {
        self.next_due = now.plus(self.backoff_ms.max(1));
    }

    /// How many cleans rewrote segments since the broker started.
    pub(in crate::broker) fn cleans(&self) -> u64 {
        self.cleans
    }

    /// The cleaner's check, if due: starts a clean of the dirtiest log that needs one, and
    /// returns its first step, a sync for the router to run as a flush (`config_of`: a served
    /// topic's config).
    pub(in crate::broker) fn on_tick<'a, S: Storage>(
        &mut self,
        now: Millis,
        wall_clock_ms: i64,
        replicas: &mut ReplicaManager<S>,
        config_of: impl Fn(&str) -> Option<&'a TopicConfig>,
    ) -> Option<(TopicPartition, FlushSync<S::File>)> {
        let due = self.next_deadline().is_some_and(|deadline| deadline <= now);
        if !due {
            return None;
        }
        let Some((topic_partition, end, config)) =
            self.dirtiest_log(wall_clock_ms, replicas, config_of)
        else {
            self.rest(now);
            return None;
        };
        let partition = replicas.get_mut(&topic_partition).expect("chosen above");
        match partition.log_mut().start_clean(end, &config) {
            Ok((stats, Some(sync))) => {
                self.in_flight = Some(InFlight {
                    topic_partition: topic_partition.clone(),
                    end,
                    stats,
                });
                Some((topic_partition, sync))
            }
            Ok((stats, None)) => {
                // Nothing to rewrite: the range is clean.
                self.clean_finished(now, &topic_partition, end, stats, false);
                None
            }
            Err(error) => {
                tracing::warn!(%topic_partition, %error, "log cleaner failed");
                self.rest(now);
                None
            }
        }
    }

    /// The online compacted log with the highest dirty ratio among those that need a clean
    /// (Kafka's `LogCleanerManager.grabFilthiestCompactedLog`): the partition, its first
    /// uncleanable offset and the clean's settings.
    fn dirtiest_log<'a, S: Storage>(
        &self,
        now_ms: i64,
        replicas: &ReplicaManager<S>,
        config_of: impl Fn(&str) -> Option<&'a TopicConfig>,
    ) -> Option<(TopicPartition, i64, CleanerConfig)> {
        let mut dirtiest: Option<(f64, TopicPartition, i64, CleanerConfig)> = None;
        for (topic_partition, partition) in replicas.iter() {
            let Some(topic_config) = config_of(&topic_partition.topic) else {
                continue;
            };
            if !topic_config.cleanup_policy.compact
                || partition.offline().is_some()
                || partition.log().clean_stage().is_some()
            {
                continue;
            }
            let config = CleanerConfig {
                now_ms,
                delete_retention_ms: topic_config.delete_retention_ms,
                min_compaction_lag_ms: topic_config.min_compaction_lag_ms,
            };
            let limit = partition
                .high_watermark()
                .min(partition.log().recovery_point());
            let end = match partition.log().first_uncleanable_offset(limit, &config) {
                Ok(end) => end,
                Err(error) => {
                    tracing::warn!(%topic_partition, %error, "log cleaner cannot read the log");
                    continue;
                }
            };
            let progress = self.progress.get(topic_partition);
            let first_dirty = progress
                .map_or(0, |progress| progress.first_dirty)
                .max(partition.log().log_start_offset());
            let (dirty, total) = partition.log().cleanable_bytes(first_dirty, end);
            let ratio = if total == 0 {
                0.0
            } else {
                dirty as f64 / total as f64
            };
            let horizon_passed = progress
                .and_then(|progress| progress.next_delete_horizon)
                .is_some_and(|horizon| horizon <= now_ms);
            let needed = total > 0
                && ((dirty > 0 && ratio > topic_config.min_cleanable_dirty_ratio.0)
                    || horizon_passed);
            let dirtier = dirtiest.as_ref().is_none_or(|(best, ..)| ratio > *best);
            if needed && dirtier {
                dirtiest = Some((ratio, topic_partition.clone(), end, config));
            }
        }
        dirtiest.map(|(_, topic_partition, end, config)| (topic_partition, end, config))
    }

    /// A step of the clean under way finished: returns the next step's sync, or finishes.
    pub(in crate::broker) fn on_step_done<S: Storage>(
        &mut self,
        now: Millis,
        topic_partition: TopicPartition,
        result: Result<(), String>,
        replicas: &mut ReplicaManager<S>,
    ) -> Option<(TopicPartition, FlushSync<S::File>)> {
        let in_flight = self
            .in_flight
            .take()
            .expect("a clean step completes a clean under way");
        assert_eq!(in_flight.topic_partition, topic_partition);
        let Some(partition) = replicas.get_mut(&topic_partition) else {
            self.rest(now);
            return None;
        };
        if partition.offline().is_some() {
            let _ = partition
                .log_mut()
                .clean_step_done(Err("the partition went offline".to_owned()));
            self.rest(now);
            return None;
        }
        let last_step = partition.log().clean_stage() == Some(CleanStage::Replaced);
        match partition.log_mut().clean_step_done(result) {
            Ok(Some(sync)) => {
                self.in_flight = Some(in_flight);
                return Some((topic_partition, sync));
            }
            Ok(None) if last_step => {
                self.clean_finished(now, &topic_partition, in_flight.end, in_flight.stats, true);
            }
            Ok(None) => {
                tracing::info!(%topic_partition, "log cleaner: clean aborted by a truncation or a deletion");
                self.rest(now);
            }
            Err(error) => {
                tracing::warn!(%topic_partition, %error, "log cleaner: clean failed");
                self.rest(now);
            }
        }
        None
    }

    fn clean_finished(
        &mut self,
        now: Millis,
        topic_partition: &TopicPartition,
        end: i64,
        stats: CleanStats,
        rewrote: bool,
    ) {
        self.progress.insert(
            topic_partition.clone(),
            Progress {
                first_dirty: end,
                next_delete_horizon: stats.next_delete_horizon,
            },
        );
        if rewrote {
            self.cleans += 1;
            tracing::info!(
                %topic_partition,
                cleaned_up_to = end,
                segments = stats.segments_rewritten,
                records_removed = stats.records_removed,
                tombstones_removed = stats.tombstones_removed,
                bytes_before = stats.bytes_before,
                bytes_after = stats.bytes_after,
                cleans = self.cleans,
                "log cleaner cleaned a log"
            );
            // Looks for the next log at once: more may be waiting.
            self.next_due = now;
        } else {
            self.rest(now);
        }
    }
}
