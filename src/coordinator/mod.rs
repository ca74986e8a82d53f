//! Coordinators over internal topics, as Kafka 4 splits them (`coordinator-common`,
//! `group-coordinator`, `transaction-coordinator`): each a sans-IO state machine over the
//! partitions of a compacted internal topic that it loads, replays and writes, answering a
//! request once its write is committed.
//!
//! - [`transaction`]: the transaction coordinator's state per `transactional.id` (Kafka's
//!   `TransactionState` table and `TransactionMetadata` transitions). What drives it
//!   (`__transaction_state`, the transaction APIs, the markers) comes with issue 43's next steps.
//!
//! The group coordinator still lives in `broker::group`; it moves here with the common runtime
//! the two will share.

pub mod transaction;

/// Kafka's `String.hashCode` over UTF-16 code units.
fn java_string_hash(text: &str) -> i32 {
    text.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The partition of a coordinator's internal topic that `key` (a group id, a
/// `transactional.id`) belongs to, among `partitions` (Kafka's
/// `Utils.abs(key.hashCode) % partitionCount`).
pub fn partition_for(key: &str, partitions: i32) -> i32 {
    let hash = java_string_hash(key);
    let positive = if hash == i32::MIN { 0 } else { hash.abs() };
    positive % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from Java: `Math.abs("my-group".hashCode()) % 50` and friends.
    #[test]
    fn the_partition_of_a_key_is_kafkas() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        assert_eq!(partition_for("hello", 50), 99_162_322 % 50);
        assert_eq!(partition_for("anything", 1), 0);
    }
}
