//! The transactions of one `__transaction_state` partition, as its coordinator holds them
//! (Kafka's `TransactionStateManager` per partition): loaded by replaying the partition's
//! records when this broker becomes its leader, the last record of each `transactional.id`
//! winning and a tombstone removing it. Transactions the log left in PrepareCommit or
//! PrepareAbort were decided but their markers may not all be written: loading hands them back
//! so that the new coordinator writes their markers again and completes them.

use std::collections::BTreeMap;

use super::metadata::TransactionMetadata;
use super::records::{decode_key, decode_value, RecordError};
use super::state::TransactionState;

/// The transactions of one partition, by `transactional.id`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TransactionCache {
    by_id: BTreeMap<String, TransactionMetadata>,
}

/// A partition's transactions once loaded, and those whose markers must be written again.
#[derive(Debug)]
pub struct Loaded {
    /// Every `transactional.id` the partition holds.
    pub cache: TransactionCache,
    /// The ids left in PrepareCommit or PrepareAbort, with that state.
    pub to_complete: Vec<(String, TransactionState)>,
}

impl TransactionCache {
    /// Replays a partition's records (key, value; `None`: a tombstone), oldest first.
    pub fn load<'a>(
        records: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> Result<Loaded, RecordError> {
        let mut by_id = BTreeMap::new();
        for (key, value) in records {
            let transactional_id = decode_key(key)?;
            match value {
                None => {
                    by_id.remove(&transactional_id);
                }
                Some(value) => {
                    let transit = decode_value(value)?;
                    let metadata = TransactionMetadata::loaded(&transactional_id, transit);
                    by_id.insert(transactional_id, metadata);
                }
            }
        }
        let to_complete = by_id
            .iter()
            .filter(|(_, metadata)| {
                matches!(
                    metadata.state(),
                    TransactionState::PrepareCommit | TransactionState::PrepareAbort
                )
            })
            .map(|(id, metadata)| (id.clone(), metadata.state()))
            .collect();
        Ok(Loaded {
            cache: TransactionCache { by_id },
            to_complete,
        })
    }

    /// The transaction of `transactional_id`, if the partition holds one.
    pub fn get(&self, transactional_id: &str) -> Option<&TransactionMetadata> {
        self.by_id.get(transactional_id)
    }

    /// The same, to change it.
    pub fn get_mut(&mut self, transactional_id: &str) -> Option<&mut TransactionMetadata> {
        self.by_id.get_mut(transactional_id)
    }

    /// Adds a new `transactional.id` (its first InitProducerId), unless one exists.
    pub fn get_or_insert(&mut self, metadata: TransactionMetadata) -> &mut TransactionMetadata {
        self.by_id
            .entry(metadata.transactional_id().to_owned())
            .or_insert(metadata)
    }

    /// Removes an expired `transactional.id` once its tombstone is durable.
    pub fn remove(&mut self, transactional_id: &str) -> Option<TransactionMetadata> {
        self.by_id.remove(transactional_id)
    }

    /// Every `transactional.id`, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &TransactionMetadata)> {
        self.by_id
            .iter()
            .map(|(id, metadata)| (id.as_str(), metadata))
    }

    /// The ids whose open transaction began more than its `transaction.timeout.ms` before
    /// `now_ms` (Kafka's `timedOutTransactions`), with no write pending.
    pub fn timed_out(&self, now_ms: i64) -> Vec<String> {
        self.iter()
            .filter(|(_, metadata)| {
                let current = metadata.current();
                metadata.state() == TransactionState::Ongoing
                    && metadata.pending().is_none()
                    && current.start_ms + i64::from(current.timeout_ms) < now_ms
            })
            .map(|(id, _)| id.to_owned())
            .collect()
    }

    /// The ids idle longer than `transactional.id.expiration.ms` (`expiration_ms`) with no
    /// transaction open and no write pending: their tombstones may be written (Kafka's
    /// `TransactionStateManager.removeExpiredTransactionalIds`).
    pub fn expired(&self, now_ms: i64, expiration_ms: i64) -> Vec<String> {
        self.iter()
            .filter(|(_, metadata)| {
                metadata.state().expiration_allowed()
                    && metadata.pending().is_none()
                    && metadata.current().last_update_ms + expiration_ms <= now_ms
            })
            .map(|(id, _)| id.to_owned())
            .collect()
    }

    /// How many ids the partition holds.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::transaction::metadata::{TransactionVersion, Transit};
    use crate::coordinator::transaction::records::{encode_key, encode_value};
    use crate::types::TopicPartition;

    /// `id`'s metadata carried to `state` (with partitions where the state has them).
    fn record(id: &str, state: TransactionState, epoch: i16) -> (Vec<u8>, Option<Vec<u8>>) {
        let metadata = TransactionMetadata::new(id, 7, 60_000, 0, TransactionVersion::V1);
        let mut transit: Transit = metadata.current().clone();
        transit.state = state;
        transit.producer_epoch = epoch;
        if state != TransactionState::Empty {
            transit.partitions = [TopicPartition::new("orders", 0)].into_iter().collect();
            transit.start_ms = 5;
        }
        (encode_key(id), Some(encode_value(&transit)))
    }

    fn load(records: &[(Vec<u8>, Option<Vec<u8>>)]) -> Loaded {
        TransactionCache::load(
            records
                .iter()
                .map(|(key, value)| (key.as_slice(), value.as_deref())),
        )
        .expect("the records decode")
    }

    #[test]
    fn the_last_record_of_an_id_wins_and_a_tombstone_removes_it() {
        let loaded = load(&[
            record("a", TransactionState::Empty, 0),
            record("b", TransactionState::Ongoing, 0),
            record("a", TransactionState::Ongoing, 1),
            record("b", TransactionState::Empty, 1),
            (encode_key("b"), None),
        ]);
        assert_eq!(loaded.cache.len(), 1);
        let a = loaded.cache.get("a").expect("a is loaded");
        assert_eq!(
            (a.state(), a.current().producer_epoch),
            (TransactionState::Ongoing, 1)
        );
        assert_eq!(a.pending(), None);
        assert!(loaded.cache.get("b").is_none());
        assert!(loaded.to_complete.is_empty());
    }

    #[test]
    fn decided_transactions_are_handed_back_to_complete() {
        let loaded = load(&[
            record("commit-me", TransactionState::PrepareCommit, 0),
            record("abort-me", TransactionState::PrepareAbort, 2),
            record("done", TransactionState::CompleteCommit, 0),
        ]);
        assert_eq!(
            loaded.to_complete,
            [
                ("abort-me".to_owned(), TransactionState::PrepareAbort),
                ("commit-me".to_owned(), TransactionState::PrepareCommit),
            ]
        );
        let mut cache = loaded.cache;
        let metadata = cache.get_mut("commit-me").expect("loaded");
        let complete = metadata
            .prepare_complete(9)
            .expect("its markers are written");
        metadata.complete(complete).expect("durable");
        assert_eq!(metadata.state(), TransactionState::CompleteCommit);
    }

    #[test]
    fn an_open_transaction_times_out_and_an_idle_id_expires() {
        let loaded = load(&[
            record("open", TransactionState::Ongoing, 0),
            record("idle", TransactionState::CompleteCommit, 0),
        ]);
        let cache = loaded.cache;
        // Both began at 5 (start_ms) with a 60 s timeout; last updated at 0.
        assert!(
            cache.timed_out(60_005).is_empty(),
            "not past the timeout yet"
        );
        assert_eq!(cache.timed_out(60_006), ["open"]);
        assert_eq!(cache.expired(999, 1_000), Vec::<String>::new());
        assert_eq!(
            cache.expired(1_000, 1_000),
            ["idle"],
            "an open one never expires"
        );
    }

    #[test]
    fn a_damaged_record_fails_the_load() {
        let mut records = vec![record("a", TransactionState::Empty, 0)];
        records.push((vec![0, 0, 0], Some(vec![0, 1])));
        let loaded = TransactionCache::load(
            records
                .iter()
                .map(|(key, value)| (key.as_slice(), value.as_deref())),
        );
        assert!(loaded.is_err());
    }
}
