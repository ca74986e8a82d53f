//! The consumer's side of Kafka's classic group protocol that needs no IO: the `consumer`
//! protocol's subscription and assignment encodings (`ConsumerProtocolSubscription` v1 with the
//! owned partitions, `ConsumerProtocolAssignment` v0), Kafka's `RangeAssignor`,
//! `RoundRobinAssignor` and `CooperativeStickyAssignor` (KIP-429), and what each coordinator
//! error asks the member to do. The async member that talks to the coordinator is
//! `runtime::group`.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, BufMut, Bytes};

use crate::protocol::ErrorCode;
use crate::types::TopicPartition;

/// The protocol type of Kafka consumers.
pub const PROTOCOL_TYPE: &str = "consumer";
pub use crate::config::consumer::Assignor;

/// How each assignor deals the partitions (the names and the config parsing live with the
/// consumer's config).
impl Assignor {
    /// Every member's partitions, as this assignor deals them.
    pub fn assign(
        self,
        subscriptions: &BTreeMap<String, Subscription>,
        partition_counts: &BTreeMap<String, i32>,
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let topics = || {
            subscriptions
                .iter()
                .map(|(member, subscription)| (member.clone(), subscription.topics.clone()))
                .collect()
        };
        match self {
            Assignor::Range => range_assign(&topics(), partition_counts),
            Assignor::RoundRobin => round_robin_assign(&topics(), partition_counts),
            Assignor::CooperativeSticky => {
                cooperative_sticky_assign(subscriptions, partition_counts)
            }
        }
    }
}

/// A member's subscription as the group leader reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    /// The topics it subscribes to.
    pub topics: Vec<String>,
    /// The partitions it owns going into the rebalance (v1+; cooperative members only: an eager
    /// member gives up everything before it rejoins).
    pub owned: Vec<TopicPartition>,
}

/// A subscription (v1): the topics, no user data, and the partitions the member owns.
pub fn encode_subscription(topics: &[String], owned: &[TopicPartition]) -> Bytes {
    let mut out = Vec::new();
    out.put_i16(1);
    out.put_i32(topics.len() as i32);
    for topic in topics {
        out.put_i16(topic.len() as i16);
        out.put_slice(topic.as_bytes());
    }
    out.put_i32(-1);
    put_partitions(&mut out, owned);
    out.into()
}

/// Partitions grouped by topic (`TopicPartition` arrays of the consumer protocol).
fn put_partitions(out: &mut Vec<u8>, partitions: &[TopicPartition]) {
    let by_topic = by_topic(partitions);
    out.put_i32(by_topic.len() as i32);
    for (topic, indexes) in by_topic {
        out.put_i16(topic.len() as i16);
        out.put_slice(topic.as_bytes());
        out.put_i32(indexes.len() as i32);
        for index in indexes {
            out.put_i32(index);
        }
    }
}

/// A whole subscription (`ConsumerProtocolSubscription` v0–v3: topics, user data, then from
/// v1 the owned partitions; later fields are ignored); `None` if it does not parse.
pub fn decode_full_subscription(bytes: &[u8]) -> Option<Subscription> {
    let mut reader = Reader(bytes);
    let version = reader.i16()?;
    let topics = (0..reader.i32()?.max(0))
        .map(|_| reader.string())
        .collect::<Option<Vec<String>>>()?;
    let mut subscription = Subscription {
        topics,
        owned: Vec::new(),
    };
    if version < 1 || reader.0.is_empty() {
        return Some(subscription);
    }
    let user_data = reader.i32()?;
    if user_data > 0 {
        reader.skip(user_data as usize)?;
    }
    for _ in 0..reader.i32()?.max(0) {
        let topic = reader.string()?;
        for _ in 0..reader.i32()?.max(0) {
            subscription
                .owned
                .push(TopicPartition::new(topic.as_str(), reader.i32()?));
        }
    }
    Some(subscription)
}

/// A cursor over big-endian protocol fields.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    fn i16(&mut self) -> Option<i16> {
        self.take().map(i16::from_be_bytes)
    }

    fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_be_bytes)
    }

    fn skip(&mut self, len: usize) -> Option<()> {
        self.0 = self.0.get(len..)?;
        Some(())
    }

    fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.i16()?).ok()?;
        let bytes = self.0.get(..len)?;
        self.0 = &self.0[len..];
        String::from_utf8(bytes.to_vec()).ok()
    }
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
            partitions.push(TopicPartition::new(name.as_str(), index));
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
            partitions.extend((next..next + take).map(|p| TopicPartition::new(topic.as_str(), p)));
            next += take;
        }
    }
    assignment
}

/// Kafka's `CooperativeStickyAssignor`, in two steps.
///
/// First a sticky, balanced assignment: each member keeps the partitions it owns (those still
/// subscribed and claimed by no other member), the rest go one by one to the eligible member
/// with the fewest, and partitions move from the most loaded member to an eligible one with at
/// least two fewer until no such move is left (the counts then differ by at most one among
/// members with the same subscription).
///
/// Then the cooperative adjustment (KIP-429): a partition that this assignment gives to a member
/// other than the one that owns it now is left out of this round. The owner sees it missing,
/// revokes it and rejoins, and the follow-up rebalance hands it over, so no partition ever has
/// two owners at once.
pub fn cooperative_sticky_assign(
    subscriptions: &BTreeMap<String, Subscription>,
    partition_counts: &BTreeMap<String, i32>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let eligible = |member: &str, partition: &TopicPartition| {
        subscriptions[member]
            .topics
            .iter()
            .any(|topic| **topic == *partition.topic)
    };
    let all: BTreeSet<TopicPartition> = partition_counts
        .iter()
        .filter(|(topic, _)| {
            subscriptions
                .values()
                .any(|subscription| subscription.topics.contains(*topic))
        })
        .flat_map(|(topic, count)| (0..*count).map(|p| TopicPartition::new(topic.as_str(), p)))
        .collect();
    let owner = current_owners(subscriptions);
    let mut assignment: Sticky = subscriptions
        .keys()
        .map(|member| (member.clone(), BTreeSet::new()))
        .collect();
    for (partition, member) in &owner {
        if all.contains(*partition) && eligible(member, partition) {
            assignment
                .get_mut(*member)
                .expect("every member has an entry")
                .insert((*partition).clone());
        }
    }
    let taken: BTreeSet<TopicPartition> = assignment.values().flatten().cloned().collect();
    for partition in all.difference(&taken) {
        let least = assignment
            .iter()
            .filter(|(member, _)| eligible(member, partition))
            .min_by_key(|(member, partitions)| (partitions.len(), (*member).clone()))
            .map(|(member, _)| member.clone());
        if let Some(member) = least {
            assignment
                .get_mut(&member)
                .expect("found above")
                .insert(partition.clone());
        }
    }
    balance(&mut assignment, &eligible, &owner);
    assignment
        .into_iter()
        .map(|(member, partitions)| {
            let kept = partitions
                .into_iter()
                .filter(|partition| {
                    owner
                        .get(partition)
                        .is_none_or(|current| *current == member.as_str())
                })
                .collect();
            (member, kept)
        })
        .collect()
}

/// A sticky assignment being built: each member's partitions.
type Sticky = BTreeMap<String, BTreeSet<TopicPartition>>;

/// Who owns each partition going into the rebalance: a partition two members claim belongs to
/// neither.
fn current_owners(
    subscriptions: &BTreeMap<String, Subscription>,
) -> BTreeMap<&TopicPartition, &str> {
    let mut claims: BTreeMap<&TopicPartition, Vec<&str>> = BTreeMap::new();
    for (member, subscription) in subscriptions {
        for partition in &subscription.owned {
            claims.entry(partition).or_default().push(member);
        }
    }
    claims
        .into_iter()
        .filter(|(_, members)| members.len() == 1)
        .map(|(partition, members)| (partition, members[0]))
        .collect()
}

/// Moves partitions from a member to an eligible one with at least two fewer until no such
/// move is left; a partition a member was just given moves before one it owns (stickiness).
/// Each move lowers the sum of squared counts, so this ends.
fn balance(
    assignment: &mut Sticky,
    eligible: &dyn Fn(&str, &TopicPartition) -> bool,
    owner: &BTreeMap<&TopicPartition, &str>,
) {
    loop {
        let moved = assignment.iter().find_map(|(from, partitions)| {
            let (given, kept): (Vec<_>, Vec<_>) = partitions
                .iter()
                .partition(|partition| owner.get(partition) != Some(&from.as_str()));
            given.into_iter().chain(kept).find_map(|partition| {
                assignment
                    .iter()
                    .filter(|(to, theirs)| {
                        eligible(to, partition) && theirs.len() + 1 < partitions.len()
                    })
                    .min_by_key(|(to, theirs)| (theirs.len(), (*to).clone()))
                    .map(|(to, _)| (from.clone(), to.clone(), partition.clone()))
            })
        });
        let Some((from, to, partition)) = moved else {
            break;
        };
        assignment
            .get_mut(&from)
            .expect("a member")
            .remove(&partition);
        assignment.get_mut(&to).expect("a member").insert(partition);
    }
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
                .push(TopicPartition::new(topic.as_str(), partition));
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
        assert_eq!(
            Assignor::parse("cooperative-sticky"),
            Some(Assignor::CooperativeSticky)
        );
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
            decode_subscription(&encode_subscription(&topics, &[])),
            Some(topics)
        );
        let partitions = vec![TopicPartition::new("t", 0), TopicPartition::new("t", 2)];
        let bytes = encode_assignment(&partitions);
        assert_eq!(decode_assignment(&bytes), Some(partitions));
    }

    fn subscription(topics: &[&str], owned: &[(&str, i32)]) -> Subscription {
        Subscription {
            topics: topics.iter().map(|topic| (*topic).to_owned()).collect(),
            owned: owned
                .iter()
                .map(|(topic, partition)| TopicPartition::new(*topic, *partition))
                .collect(),
        }
    }

    fn names(assigned: &BTreeMap<String, Vec<TopicPartition>>, member: &str) -> Vec<String> {
        assigned[member].iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_subscription_round_trips_with_its_owned_partitions() {
        let owned = [TopicPartition::new("t", 2), TopicPartition::new("t", 0)];
        let bytes = encode_subscription(&["t".to_owned(), "u".to_owned()], &owned);
        let decoded = decode_full_subscription(&bytes).expect("decodes");
        assert_eq!(decoded.topics, ["t", "u"]);
        assert_eq!(decoded.owned, owned);
        assert_eq!(decode_subscription(&bytes).expect("topics"), ["t", "u"]);
        assert_eq!(decode_full_subscription(&bytes[..bytes.len() - 2]), None);
    }

    #[test]
    fn cooperative_sticky_hands_a_partition_over_in_two_rebalances_and_never_to_two_owners() {
        let counts = BTreeMap::from([("t".to_owned(), 4)]);
        // a owned everything; b joins. First round: a keeps half, the other half is revoked
        // (given to nobody yet).
        let first = BTreeMap::from([
            (
                "a".to_owned(),
                subscription(&["t"], &[("t", 0), ("t", 1), ("t", 2), ("t", 3)]),
            ),
            ("b".to_owned(), subscription(&["t"], &[])),
        ]);
        let assigned = Assignor::CooperativeSticky.assign(&first, &counts);
        assert_eq!(names(&assigned, "a"), ["t-2", "t-3"]);
        assert!(
            assigned["b"].is_empty(),
            "nothing moves in the round that revokes it"
        );
        // a rejoins owning what it kept: b gets the rest.
        let second = BTreeMap::from([
            ("a".to_owned(), subscription(&["t"], &[("t", 2), ("t", 3)])),
            ("b".to_owned(), subscription(&["t"], &[])),
        ]);
        let assigned = Assignor::CooperativeSticky.assign(&second, &counts);
        assert_eq!(names(&assigned, "a"), ["t-2", "t-3"], "sticky");
        assert_eq!(names(&assigned, "b"), ["t-0", "t-1"]);
        // A third member: each keeps what it can; one partition is revoked from each side as
        // needed, none assigned twice.
        let third = BTreeMap::from([
            ("a".to_owned(), subscription(&["t"], &[("t", 0), ("t", 1)])),
            ("b".to_owned(), subscription(&["t"], &[("t", 2), ("t", 3)])),
            ("c".to_owned(), subscription(&["t"], &[])),
        ]);
        let assigned = Assignor::CooperativeSticky.assign(&third, &counts);
        let total: usize = assigned.values().map(Vec::len).sum();
        assert_eq!(total, 3, "one partition is being revoked");
        assert!(assigned["c"].is_empty());
        assert_eq!(assigned["a"].len() + assigned["b"].len(), 3);
    }

    #[test]
    fn cooperative_sticky_drops_disputed_and_unsubscribed_claims_and_balances_the_rest() {
        let counts = BTreeMap::from([("t".to_owned(), 3), ("u".to_owned(), 1)]);
        let subscriptions = BTreeMap::from([
            ("a".to_owned(), subscription(&["t"], &[("t", 0), ("u", 0)])),
            ("b".to_owned(), subscription(&["t", "u"], &[("t", 0)])),
            ("c".to_owned(), subscription(&["t"], &[("t", 2)])),
        ]);
        let assigned = Assignor::CooperativeSticky.assign(&subscriptions, &counts);
        // t-0 is claimed twice: nobody owns it, so it can go at once. u-0 is a's, but a no
        // longer subscribes to u: only b may have it, once a has given it up (next round).
        assert_eq!(names(&assigned, "c"), ["t-2"], "c keeps what it owns");
        assert!(assigned
            .values()
            .flatten()
            .all(|partition| &*partition.topic == "t"));
        let total: usize = assigned.values().map(Vec::len).sum();
        assert_eq!(total, 3, "every partition of t, none of u yet");
        let counts: Vec<usize> = assigned.values().map(Vec::len).collect();
        let spread = counts.iter().max().zip(counts.iter().min());
        assert!(
            spread.is_some_and(|(max, min)| max - min <= 1),
            "{counts:?}"
        );
    }
}
