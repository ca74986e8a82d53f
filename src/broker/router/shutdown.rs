//! A clean shutdown: snapshot every log's producer state at its end and flush every log,
//! checkpoint the recovery points (now the log ends), then write the clean-shutdown marker, the
//! way Kafka's `LogManager.shutdown` does. The next start finds the marker, deletes it durably
//! before serving, and trusts the logs: the active segment is walked by batch headers instead of
//! being recovered (no CRC checks, no rewrite), and the producer state is read from the
//! snapshot at the log end.
//!
//! The marker is written only when every flush and checkpoint succeeded and no partition is
//! offline; otherwise the broker stops without it and the next start recovers as after a crash.
//! The shell stops reading requests before it sends [`Input::Shutdown`]; a request that still
//! arrives is answered as usual.

use crate::storage::{Storage, StorageFile};
use crate::types::{Millis, TopicPartition};

use crate::broker::checkpoint::CheckpointKind;
use crate::broker::flushes::FlushTarget;
use crate::broker::{Broker, Output};
use crate::log::FlushSync;

/// The marker's file name at the root of the data directory (Kafka's name).
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";

/// The marker's text: Kafka's JSON (`CleanShutdownFileHandler`), with the broker epoch of a
/// broker in a cluster, which its next registration reports as `PreviousBrokerEpoch`.
fn clean_shutdown_text(broker_epoch: Option<i64>) -> String {
    match broker_epoch {
        Some(epoch) => format!("{{\"version\":0,\"brokerEpoch\":{epoch}}}\n"),
        None => "{\"version\":0}\n".to_owned(),
    }
}

/// The broker epoch a marker's text holds, if it holds one.
fn marker_broker_epoch(text: &str) -> Option<i64> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    value.get("brokerEpoch")?.as_i64()
}

/// Where a shutdown is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::broker) enum Closing {
    /// Waiting for the flushes of every log (and any checkpoint under way).
    Flushing,
    /// Waiting for the recovery-point checkpoint that records the log ends.
    Checkpointing,
    /// Waiting for the marker's fsync (file, then directory).
    Marking,
    /// Done; [`Output::Stopped`] was sent.
    Stopped,
    /// A storage failure stopped the broker at once; [`Output::Halt`] was sent.
    Halted,
}

impl<S: Storage> Broker<S> {
    /// Starts a clean shutdown.
    pub(in crate::broker) fn on_shutdown(&mut self, now: Millis, out: &mut Vec<Output<S::File>>) {
        if self.closing.is_some() {
            return;
        }
        tracing::info!("shutting down: flushing every log");
        self.closing = Some(Closing::Flushing);
        self.take_producer_snapshots();
        let partitions: Vec<TopicPartition> = self
            .replicas
            .iter()
            .filter(|(_, partition)| partition.offline().is_none())
            .map(|(topic_partition, _)| topic_partition.clone())
            .collect();
        for topic_partition in partitions {
            self.flush_partition(now, &topic_partition, out);
        }
        self.advance_shutdown(now, out);
    }

    /// Snapshots every online log's producer state at its end, as Kafka's `UnifiedLog.close`
    /// does, so the next start reads it instead of walking headers; the flushes that follow
    /// sync the files. A snapshot that cannot be written is only a longer walk next time.
    fn take_producer_snapshots(&mut self) {
        for (topic_partition, partition) in self.replicas.iter_mut() {
            if partition.offline().is_some() {
                continue;
            }
            if let Err(error) = partition.log_mut().maybe_take_snapshot() {
                tracing::warn!(%topic_partition, %error, "cannot snapshot the producer state");
            }
        }
    }

    /// Moves a shutdown on once nothing is in flight (called after every flush completion).
    pub(in crate::broker) fn advance_shutdown(
        &mut self,
        now: Millis,
        out: &mut Vec<Output<S::File>>,
    ) {
        let Some(stage) = self.closing else {
            return;
        };
        if !self.flushes.is_empty() {
            return;
        }
        match stage {
            Closing::Flushing => {
                self.closing = Some(Closing::Checkpointing);
                let points = self.recovery_points();
                self.maybe_write_checkpoint(now, CheckpointKind::RecoveryPoints, points, out);
                self.advance_shutdown(now, out);
            }
            Closing::Checkpointing => self.write_marker(out),
            Closing::Marking => self.stop(true, out),
            Closing::Stopped | Closing::Halted => {}
        }
    }

    /// Why the marker must not be written, if it must not.
    fn unclean_reason(&self) -> Option<String> {
        if let Some((topic_partition, partition)) = self
            .replicas
            .iter()
            .find(|(_, partition)| partition.offline().is_some())
        {
            return Some(format!(
                "{topic_partition} is offline: {}",
                partition.offline().unwrap_or_default()
            ));
        }
        let points = self.recovery_points();
        if points != self.checkpoint.written {
            return Some("the recovery-point checkpoint could not be written".to_owned());
        }
        self.replicas
            .iter()
            .find(|(_, partition)| {
                partition.log().recovery_point() < partition.log().log_end_offset()
            })
            .map(|(topic_partition, _)| format!("{topic_partition} was not flushed to its end"))
    }

    fn write_marker(&mut self, out: &mut Vec<Output<S::File>>) {
        if let Some(reason) = self.unclean_reason() {
            tracing::error!(%reason, "stopping without the clean-shutdown marker");
            self.stop(false, out);
            return;
        }
        let text = clean_shutdown_text(self.broker_epoch());
        let written = self.storage.open(CLEAN_SHUTDOWN_FILE).and_then(|file| {
            file.set_len(0)?;
            file.write_all_at(text.as_bytes(), 0)?;
            Ok(file)
        });
        match written {
            Ok(file) => {
                self.closing = Some(Closing::Marking);
                let sync = FlushSync {
                    files: vec![file],
                    directories: vec![String::new()],
                };
                self.start_flush(FlushTarget::CleanShutdownMarker, sync, out);
            }
            Err(error) => {
                tracing::error!(%error, "cannot write {CLEAN_SHUTDOWN_FILE}");
                self.stop(false, out);
            }
        }
    }

    /// The marker's fsync finished.
    pub(in crate::broker) fn on_marker_synced(
        &mut self,
        now: Millis,
        result: Result<(), String>,
        out: &mut Vec<Output<S::File>>,
    ) {
        match result {
            Ok(()) => self.advance_shutdown(now, out),
            Err(error) => {
                // A marker that may not be on disk is harmless only if it is absent: remove it.
                tracing::error!(%error, "fsync of {CLEAN_SHUTDOWN_FILE} failed");
                let _ = self.storage.remove(CLEAN_SHUTDOWN_FILE);
                self.stop(false, out);
            }
        }
    }

    fn stop(&mut self, clean: bool, out: &mut Vec<Output<S::File>>) {
        self.closing = Some(Closing::Stopped);
        out.push(Output::Stopped { clean });
    }

    /// Whether the data directory holds a clean-shutdown marker, and the broker epoch it
    /// holds; a marker is removed once read (the caller syncs the root directory before
    /// serving, so a crash after start-up cannot find a stale marker).
    pub(in crate::broker) fn take_clean_shutdown_marker(
        storage: &S,
    ) -> Result<(bool, Option<i64>), crate::log::LogError> {
        let present = storage
            .list(CLEAN_SHUTDOWN_FILE)?
            .iter()
            .any(|name| name == CLEAN_SHUTDOWN_FILE);
        if !present {
            return Ok((false, None));
        }
        let text = storage.open(CLEAN_SHUTDOWN_FILE)?.read_all()?;
        let epoch = marker_broker_epoch(&String::from_utf8_lossy(&text));
        storage.remove(CLEAN_SHUTDOWN_FILE)?;
        Ok((true, epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's `.kafka_cleanshutdown` (`{"version":0,"brokerEpoch":N}`): a broker in a cluster
    /// writes its epoch, which its next registration sends as `PreviousBrokerEpoch`; a marker
    /// without one (a broker that is its own controller, or an older seedlog's) reads as none.
    #[test]
    fn the_clean_shutdown_marker_carries_the_broker_epoch() {
        let text = clean_shutdown_text(Some(42));
        assert_eq!(text, "{\"version\":0,\"brokerEpoch\":42}\n");
        assert_eq!(marker_broker_epoch(&text), Some(42));
        assert_eq!(marker_broker_epoch(&clean_shutdown_text(None)), None);
        assert_eq!(marker_broker_epoch("not json"), None);
    }
}
