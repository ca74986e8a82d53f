//! A partition's transactions (the partition side of Kafka's transactions): which producers
//! have a transaction open and from which offset (`ProducerStateManager.ongoingTxns`), the first
//! unstable offset that bounds the last stable offset (LSO), what a transaction marker completes
//! (`CompletedTxn`), and the aborted-transaction index of a segment (`.txnindex`, Kafka's
//! `TransactionIndex` of `AbortedTxn` entries) that a `read_committed` fetch reads to learn which
//! producers' records to drop.
//!
//! Nothing here reads or writes a file or a log: the partition log feeds it batches and markers
//! and stores what it returns. It is not wired into the log yet (issue 43).

use std::collections::BTreeMap;

/// One aborted transaction as a segment's `.txnindex` records it (Kafka's `AbortedTxn`, 34
/// bytes: version 0, producer id, first offset, last offset, last stable offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer that aborted.
    pub producer_id: i64,
    /// The transaction's first offset in this partition.
    pub first_offset: i64,
    /// The offset of its ABORT marker.
    pub last_offset: i64,
    /// The LSO once the marker was written: where a reader may stop looking for it.
    pub last_stable_offset: i64,
}

/// Bytes of one index entry.
pub const ABORTED_TXN_BYTES: usize = 34;

impl AbortedTxn {
    /// The entry's bytes.
    pub fn encode(&self) -> [u8; ABORTED_TXN_BYTES] {
        let mut out = [0u8; ABORTED_TXN_BYTES];
        // version 0 in out[0..2]
        out[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        out[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        out[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        out[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        out
    }

    /// An entry from its bytes.
    pub fn decode(bytes: &[u8; ABORTED_TXN_BYTES]) -> Result<AbortedTxn, String> {
        let version = i16::from_be_bytes([bytes[0], bytes[1]]);
        if version != 0 {
            return Err(format!(
                "aborted-transaction entry version {version}, only 0 exists"
            ));
        }
        let long = |at: usize| {
            let mut field = [0u8; 8];
            field.copy_from_slice(&bytes[at..at + 8]);
            i64::from_be_bytes(field)
        };
        Ok(AbortedTxn {
            producer_id: long(2),
            first_offset: long(10),
            last_offset: long(18),
            last_stable_offset: long(26),
        })
    }
}

/// A transaction a marker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    /// Its producer.
    pub producer_id: i64,
    /// Its first offset in this partition.
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    /// Whether it was aborted.
    pub aborted: bool,
}

/// The transactions open in a partition: for each producer with one, its first offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OngoingTransactions {
    first_offset_by_producer: BTreeMap<i64, i64>,
}

impl OngoingTransactions {
    /// A transactional batch of `producer_id` starting at `first_offset` was appended: it opens
    /// the producer's transaction here unless one is open.
    pub fn on_transactional_batch(&mut self, producer_id: i64, first_offset: i64) {
        self.first_offset_by_producer
            .entry(producer_id)
            .or_insert(first_offset);
    }

    /// A marker of `producer_id` was appended at `marker_offset`: it ends the producer's open
    /// transaction, if one is open (a marker with none is a retry, or ends a transaction that
    /// never reached this partition).
    pub fn on_marker(
        &mut self,
        producer_id: i64,
        marker_offset: i64,
        aborted: bool,
    ) -> Option<CompletedTxn> {
        let first_offset = self.first_offset_by_producer.remove(&producer_id)?;
        Some(CompletedTxn {
            producer_id,
            first_offset,
            last_offset: marker_offset,
            aborted,
        })
    }

    /// The first offset of the oldest open transaction: no record at or past it is stable.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.first_offset_by_producer.values().copied().min()
    }

    /// The LSO once `completed`'s marker is written (Kafka's `lastStableOffset(completedTxn)`):
    /// the oldest other open transaction's first offset, or just past the marker.
    pub fn last_stable_offset_after(&self, completed: &CompletedTxn) -> i64 {
        self.first_offset_by_producer
            .iter()
            .filter(|(producer, _)| **producer != completed.producer_id)
            .map(|(_, first)| *first)
            .min()
            .unwrap_or(completed.last_offset + 1)
    }

    /// The partition's LSO: the first unstable offset, or the high watermark if lower.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        self.first_unstable_offset()
            .map_or(high_watermark, |first| first.min(high_watermark))
    }

    /// The log was cut at `offset`: transactions that began at or past it are gone.
    pub fn truncate_to(&mut self, offset: i64) {
        self.first_offset_by_producer
            .retain(|_, first| *first < offset);
    }

    /// Whether no transaction is open.
    pub fn is_empty(&self) -> bool {
        self.first_offset_by_producer.is_empty()
    }
}

/// A segment's aborted transactions, in marker order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransactionIndex {
    entries: Vec<AbortedTxn>,
}

impl TransactionIndex {
    /// Records an aborted transaction; markers are appended in offset order.
    pub fn append(&mut self, entry: AbortedTxn) {
        if let Some(last) = self.entries.last() {
            assert!(
                entry.last_offset > last.last_offset,
                "aborted transactions are indexed in marker order"
            );
        }
        self.entries.push(entry);
    }

    /// The aborted transactions a `read_committed` fetch of `[fetch_offset, upper_bound)` must
    /// know of: those whose marker is at or past the fetch offset and that began below the
    /// bound (Kafka's `TransactionIndex.collectAbortedTxns`).
    pub fn collect_aborted(&self, fetch_offset: i64, upper_bound: i64) -> Vec<AbortedTxn> {
        self.entries
            .iter()
            .filter(|entry| entry.last_offset >= fetch_offset && entry.first_offset < upper_bound)
            .copied()
            .collect()
    }

    /// The log was cut at `offset`: entries whose marker was at or past it are gone.
    pub fn truncate_to(&mut self, offset: i64) {
        self.entries.retain(|entry| entry.last_offset < offset);
    }

    /// The index file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        self.entries.iter().flat_map(AbortedTxn::encode).collect()
    }

    /// An index from its file's bytes. A torn last entry (a crash mid-write) or entries out of
    /// order are an error, as in Kafka's sanity check: the index is then rebuilt from the log.
    pub fn decode(bytes: &[u8]) -> Result<TransactionIndex, String> {
        let torn = bytes.len() % ABORTED_TXN_BYTES;
        if torn != 0 {
            return Err(format!(
                "a torn aborted-transaction entry: {torn} bytes past the last whole one"
            ));
        }
        let mut index = TransactionIndex::default();
        for chunk in bytes.chunks_exact(ABORTED_TXN_BYTES) {
            let entry = AbortedTxn::decode(chunk.try_into().expect("exact chunks"))?;
            if index
                .entries
                .last()
                .is_some_and(|last| entry.last_offset <= last.last_offset)
            {
                return Err(format!(
                    "aborted-transaction entries out of order at offset {}",
                    entry.last_offset
                ));
            }
            index.entries.push(entry);
        }
        Ok(index)
    }

    /// Every entry, in marker order.
    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_kafkas_34_bytes_and_round_trips() {
        let entry = AbortedTxn {
            producer_id: 7,
            first_offset: 10,
            last_offset: 20,
            last_stable_offset: 21,
        };
        let bytes = entry.encode();
        assert_eq!(&bytes[0..2], &[0, 0], "version 0");
        assert_eq!(&bytes[2..10], &7i64.to_be_bytes());
        assert_eq!(AbortedTxn::decode(&bytes), Ok(entry));
        let mut later = bytes;
        later[1] = 1;
        assert!(AbortedTxn::decode(&later).is_err());
    }

    /// Two producers interleave in one partition: 1 opens at 0, 2 at 3, 1 commits at 5, 2
    /// aborts at 8.
    #[test]
    fn the_lso_waits_for_the_oldest_open_transaction() {
        let mut ongoing = OngoingTransactions::default();
        ongoing.on_transactional_batch(1, 0);
        ongoing.on_transactional_batch(1, 2); // more of the same transaction
        ongoing.on_transactional_batch(2, 3);
        assert_eq!(ongoing.first_unstable_offset(), Some(0));
        assert_eq!(ongoing.last_stable_offset(6), 0);
        let commit = ongoing
            .on_marker(1, 5, false)
            .expect("1's transaction ends");
        assert_eq!((commit.first_offset, commit.last_offset), (0, 5));
        assert_eq!(
            ongoing.last_stable_offset_after(&commit),
            3,
            "2's transaction is still open"
        );
        assert_eq!(ongoing.last_stable_offset(6), 3);
        let abort = ongoing.on_marker(2, 8, true).expect("2's transaction ends");
        assert!(abort.aborted);
        assert_eq!(ongoing.last_stable_offset_after(&abort), 9);
        assert_eq!(
            ongoing.last_stable_offset(9),
            9,
            "nothing open: the high watermark"
        );
        assert_eq!(
            ongoing.on_marker(2, 10, true),
            None,
            "a retried marker completes nothing"
        );
    }

    #[test]
    fn a_truncation_forgets_transactions_it_cut() {
        let mut ongoing = OngoingTransactions::default();
        ongoing.on_transactional_batch(1, 0);
        ongoing.on_transactional_batch(2, 4);
        ongoing.truncate_to(4);
        assert_eq!(ongoing.first_unstable_offset(), Some(0));
        ongoing.truncate_to(0);
        assert!(ongoing.is_empty());
    }

    fn aborted(producer_id: i64, first_offset: i64, last_offset: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id,
            first_offset,
            last_offset,
            last_stable_offset: last_offset + 1,
        }
    }

    #[test]
    fn a_fetch_learns_of_the_aborted_transactions_it_overlaps() {
        let mut index = TransactionIndex::default();
        index.append(aborted(1, 0, 4));
        index.append(aborted(2, 3, 9));
        index.append(aborted(3, 12, 15));
        let producers = |fetch: i64, bound: i64| -> Vec<i64> {
            index
                .collect_aborted(fetch, bound)
                .iter()
                .map(|entry| entry.producer_id)
                .collect()
        };
        assert_eq!(producers(0, 20), [1, 2, 3]);
        assert_eq!(
            producers(5, 12),
            [2],
            "1 ended before, 3 begins at the bound"
        );
        assert_eq!(producers(10, 11), Vec::<i64>::new());
        index.truncate_to(9);
        assert_eq!(index.entries(), &[aborted(1, 0, 4)]);
    }

    #[test]
    fn the_index_file_round_trips_and_refuses_disorder() {
        let mut index = TransactionIndex::default();
        index.append(aborted(1, 0, 4));
        index.append(aborted(2, 3, 9));
        let bytes = index.encode();
        assert_eq!(bytes.len(), 2 * ABORTED_TXN_BYTES);
        assert_eq!(TransactionIndex::decode(&bytes), Ok(index.clone()));
        let torn = &bytes[..bytes.len() - 5];
        assert!(TransactionIndex::decode(torn).is_err(), "a torn last entry");
        let swapped = [&bytes[ABORTED_TXN_BYTES..], &bytes[..ABORTED_TXN_BYTES]].concat();
        assert!(TransactionIndex::decode(&swapped).is_err());
    }

    #[test]
    #[should_panic(expected = "marker order")]
    fn markers_are_indexed_in_order() {
        let mut index = TransactionIndex::default();
        index.append(aborted(1, 0, 9));
        index.append(aborted(2, 3, 4));
    }
}
