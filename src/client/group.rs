//! The consumer's side of Kafka's classic group protocol that needs no IO: the `consumer`
//! protocol's subscription and assignment encodings (`ConsumerProtocolSubscription` and
//! `ConsumerProtocolAssignment` v0), Kafka's `RangeAssignor`, and what each coordinator error
//! asks the member to do. The async member that talks to the coordinator is
//! `runtime::group`.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes};

use crate::protocol::ErrorCode;
use crate::types::TopicPartition;

/// The protocol type of Kafka consumers.
pub const PROTOCOL_TYPE: &str = "consumer";
/// The assignors the seedlog consumer offers (`partition.assignment.strategy`), each under the
/// protocol name Kafka's assignor announces in JoinGroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    /// Kafka's `RangeAssignor`: consecutive ranges of each topic's partitions.
    Range,
    /// Kafka's `RoundRobinAssignor`: every subscribed partition dealt out in turn.
    RoundRobin,
}

impl Assignor {
    /// The protocol name in JoinGroup (Kafka's `name()` of the assignor).
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
        }
    }

    /// The assignor a config entry names: Kafka's protocol name or its class name.
    pub fn parse(entry: &str) -> Option<Assignor> {
        match entry.trim() {
            "range" | "org.apache.kafka.clients.consumer.RangeAssignor" => Some(Assignor::Range),
            "roundrobin" | "org.apache.kafka.clients.consumer.RoundRobinAssignor" => {
                Some(Assignor::RoundRobin)
            }
            _ => None,
        }
    }

    /// The assignor a JoinGroup answer chose, by its protocol name.
    pub fn by_name(name: &str) -> Option<Assignor> {
        [Assignor::Range, Assignor::RoundRobin]
            .into_iter()
            .find(|assignor| assignor.name() == name)
    }

    /// Every member's partitions, as this assignor deals them.
    pub fn assign(
        self,
        subscriptions: &BTreeMap<String, Vec<String>>,
        partition_counts: &BTreeMap<String, i32>,
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        match self {
            Assignor::Range => range_assign(subscriptions, partition_counts),
            Assignor::RoundRobin => round_robin_assign(subscriptions, partition_counts),
        }
    }
}

/// A subscription (v0): the topics, no user data.
pub fn encode_subscription(topics: &[String]) -> Bytes {
    let mut out = Vec::new();
    out.put_i16(0);
    out.put_i32(topics.len() as i32);
    for topic in topics {
        out.put_i16(topic.len() as i16);
        out.put_slice(topic.as_bytes());
    }
    out.put_i32(-1);
    out.into()
}

/// The topics of a subscription (any version: later fields are ignored); `None` if short.
pub fn decode_subscription(mut bytes: &[u8]) -> Option<Vec<String>> {
    if bytes.len() < 6 {
        return None;
    }
    bytes.get_i16();
    let count = bytes.get_i32();
    let mut topics = Vec::new();
    for _ in 0..count.max(0) {
        if bytes.len() < 2 {
            return None;
        }
        let len = usize::try_from(bytes.get_i16()).ok()?;
        if bytes.len() < len {
            return None;
        }
        topics.push(String::from_utf8(bytes[..len].to_vec()).ok()?);
        bytes = &bytes[len..];
    }
    Some(topics)
}

/// Partition indexes grouped by topic, as the group requests list them.
pub fn by_topic(partitions: &[TopicPartition]) -> BTreeMap<&str, Vec<i32>> {
    let mut grouped: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for partition in partitions {
        grouped
            .entry(&partition.topic)
            .or_default()
            .push(partition.partition);
    }
    grouped
}

/// An assignment (v0): partitions grouped by topic, no user data.
pub fn encode_assignment(partitions: &[TopicPartition]) -> Bytes {
    let by_topic = by_topic(partitions);
    let mut out = Vec::new();
    out.put_i16(0);
    out.put_i32(by_topic.len() as i32);
    for (topic, indexes) in by_topic {
        out.put_i16(topic.len() as i16);
        out.put_slice(topic.as_bytes());
        out.put_i32(indexes.len() as i32);
        for index in indexes {
            out.put_i32(index);
        }
    }
    out.put_i32(-1);
    out.into()
}

/// The partitions of a consumer protocol assignment (`ConsumerProtocolAssignment` v0–v3:
/// version, then topics with their partitions); `None` if it does not parse.
pub fn decode_assignment(bytes: &[u8]) -> Option<Vec<TopicPartition>> {
    fn take<const N: usize>(bytes: &mut &[u8]) -> Option<[u8; N]> {
        let (head, rest) = bytes.split_first_chunk::<N>()?;
        *bytes = rest;
        Some(*head)
    }
    let mut cursor = bytes;
    if cursor.is_empty() {
        return Some(Vec::new());
    }
    let _version = i16::from_be_bytes(take(&mut cursor)?);
    let topics = i32::from_be_bytes(take(&mut cursor)?);
    let mut partitions = Vec::new();
    for _ in 0..topics.max(0) {
        let len = i16::from_be_bytes(take(&mut cursor)?);
        let len = usize::try_from(len).ok()?;
        if cursor.len() < len {
            return None;
        }
        let (name, rest) = cursor.split_at(len);
        cursor = rest;
        let name = String::from_utf8(name.to_vec()).ok()?;
        let count = i32::from_be_bytes(take(&mut cursor)?);
        for _ in 0..count.max(0) {
            let index = i32::from_be_bytes(take(&mut cursor)?);
            partitions.push(TopicPartition::new(name.clone(), index));
        }
    }
    Some(partitions)
}

/// Every member with no partitions yet: where each assignor starts.
fn nothing_assigned(
    subscriptions: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    subscriptions
        .keys()
        .map(|member| (member.clone(), Vec::new()))
        .collect()
}

/// Kafka's `RangeAssignor`: for each topic, the members subscribed to it in member-id order
/// take consecutive ranges of its partitions, the first `partitions % members` one more.
pub fn range_assign(
    subscriptions: &BTreeMap<String, Vec<String>>,
    partition_counts: &BTreeMap<String, i32>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let mut assignment = nothing_assigned(subscriptions);
    for (topic, count) in partition_counts {
        let members: Vec<&String> = subscriptions
            .iter()
            .filter(|(_, topics)| topics.contains(topic))
            .map(|(member, _)| member)
            .collect();
        if members.is_empty() {
            continue;
        }
        let per_member = *count / members.len() as i32;
        let extra = *count % members.len() as i32;
        let mut next = 0;
        for (index, member) in members.into_iter().enumerate() {
            let take = per_member + i32::from((index as i32) < extra);
            let partitions = assignment
                .get_mut(member)
                .expect("every member has an entry");
            partitions.extend((next..next + take).map(|p| TopicPartition::new(topic.clone(), p)));
            next += take;
        }
    }
    assignment
}

/// Kafka's `RoundRobinAssignor`: the partitions of every subscribed topic, topics in name order
/// and partitions ascending, go one each to the members in member-id order, round and round; a
/// member not subscribed to a partition's topic is passed over for it.
pub fn round_robin_assign(
    subscriptions: &BTreeMap<String, Vec<String>>,
    partition_counts: &BTreeMap<String, i32>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let mut assignment = nothing_assigned(subscriptions);
    let members: Vec<&String> = subscriptions.keys().collect();
    let mut next = 0;
    for (topic, count) in partition_counts {
        if !subscriptions.values().any(|topics| topics.contains(topic)) {
            continue;
        }
        for partition in 0..*count {
            while !subscriptions[members[next % members.len()]].contains(topic) {
                next += 1;
            }
            let member = members[next % members.len()];
            next += 1;
            assignment
                .get_mut(member)
                .expect("every member has an entry")
                .push(TopicPartition::new(topic.clone(), partition));
        }
    }
    assignment
}

/// What a coordinator error asks of the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Find the coordinator again (it moved or is not ready), then retry.
    Rediscover,
    /// Join again in the current member id (a rebalance is under way or the generation moved).
    Rejoin,
    /// Join again as a new member (this member id is gone).
    RejoinAsNew,
    /// Retry after a pause.
    Retry,
    /// Give up: the error is the application's (or a bug).
    Fatal,
}

/// Kafka's `AbstractCoordinator` handling of each group error.
pub fn recovery(error: ErrorCode) -> Recovery {
    match error {
        ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable => Recovery::Rediscover,
        ErrorCode::RebalanceInProgress | ErrorCode::IllegalGeneration => Recovery::Rejoin,
        ErrorCode::UnknownMemberId => Recovery::RejoinAsNew,
        ErrorCode::CoordinatorLoadInProgress
        | ErrorCode::RequestTimedOut
        | ErrorCode::NetworkException => Recovery::Retry,
        _ => Recovery::Fatal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_deals_in_turn_and_passes_over_unsubscribed_members() {
        let subscriptions = BTreeMap::from([
            ("a".to_owned(), vec!["t1".to_owned(), "t2".to_owned()]),
            ("b".to_owned(), vec!["t1".to_owned()]),
            ("c".to_owned(), vec!["t1".to_owned(), "t2".to_owned()]),
        ]);
        let counts = BTreeMap::from([("t1".to_owned(), 4), ("t2".to_owned(), 3)]);
        let assigned = round_robin_assign(&subscriptions, &counts);
        let names = |member: &str| -> Vec<String> {
            assigned[member].iter().map(ToString::to_string).collect()
        };
        // t1-0 a, t1-1 b, t1-2 c, t1-3 a; then t2 skips b: t2-0 c, t2-1 a, t2-2 c.
        assert_eq!(names("a"), ["t1-0", "t1-3", "t2-1"]);
        assert_eq!(names("b"), ["t1-1"]);
        assert_eq!(names("c"), ["t1-2", "t2-0", "t2-2"]);
        assert_eq!(Assignor::parse(" roundrobin"), Some(Assignor::RoundRobin));
        assert_eq!(
            Assignor::parse("org.apache.kafka.clients.consumer.RangeAssignor"),
            Some(Assignor::Range)
        );
        assert_eq!(Assignor::parse("cooperative-sticky"), None);
        assert_eq!(Assignor::by_name("roundrobin"), Some(Assignor::RoundRobin));
    }

    #[test]
    fn range_gives_the_first_members_one_more_and_skips_unsubscribed_topics() {
        let subscriptions = BTreeMap::from([
            ("a".to_owned(), vec!["t".to_owned(), "u".to_owned()]),
            ("b".to_owned(), vec!["t".to_owned()]),
        ]);
        let counts = BTreeMap::from([("t".to_owned(), 3), ("u".to_owned(), 2)]);
        let assigned = range_assign(&subscriptions, &counts);
        let tp = |topic: &str, partition| TopicPartition::new(topic, partition);
        assert_eq!(
            assigned["a"],
            [tp("t", 0), tp("t", 1), tp("u", 0), tp("u", 1)]
        );
        assert_eq!(assigned["b"], [tp("t", 2)]);
    }

    #[test]
    fn more_members_than_partitions_leaves_some_without() {
        let subscriptions: BTreeMap<String, Vec<String>> = ["a", "b", "c"]
            .into_iter()
            .map(|member| (member.to_owned(), vec!["t".to_owned()]))
            .collect();
        let assigned = range_assign(&subscriptions, &BTreeMap::from([("t".to_owned(), 2)]));
        assert_eq!(assigned["a"].len() + assigned["b"].len(), 2);
        assert!(assigned["c"].is_empty());
    }

    #[test]
    fn a_consumer_assignment_decodes_and_a_short_one_is_refused() {
        let mut bytes = vec![
            0, 1, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3,
        ];
        bytes.extend([0, 0, 0, 0]); // user data, ignored
        assert_eq!(
            decode_assignment(&bytes),
            Some(vec![
                TopicPartition::new("t", 0),
                TopicPartition::new("t", 3)
            ])
        );
        assert_eq!(decode_assignment(&bytes[..12]), None);
        assert_eq!(decode_assignment(&[]), Some(Vec::new()));
    }

    #[test]
    fn the_encodings_round_trip() {
        let topics = vec!["t".to_owned(), "u".to_owned()];
        assert_eq!(
            decode_subscription(&encode_subscription(&topics)),
            Some(topics)
        );
        let partitions = vec![TopicPartition::new("t", 0), TopicPartition::new("t", 2)];
        let bytes = encode_assignment(&partitions);
        assert_eq!(decode_assignment(&bytes), Some(partitions));
    }
}
