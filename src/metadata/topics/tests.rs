use std::collections::BTreeSet;

use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::{BrokerId as WireBrokerId, TopicName};

use super::*;

/// A cluster of `active` brokers with some topics taken.
struct Cluster {
    active: Vec<BrokerId>,
    taken: BTreeSet<String>,
    next_id: u128,
}

impl TopicCreator for Cluster {
    fn is_taken(&self, name: &str) -> bool {
        self.taken.contains(name)
    }

    fn active_brokers(&self) -> Vec<BrokerId> {
        self.active.clone()
    }

    fn new_topic_id(&mut self) -> Uuid {
        self.next_id += 1;
        Uuid::from_u128(self.next_id)
    }

    fn first_replica(&mut self, active: usize) -> usize {
        1 % active
    }
}

fn cluster(brokers: i32) -> Cluster {
    Cluster {
        active: (0..brokers).map(BrokerId).collect(),
        taken: BTreeSet::from(["taken".to_owned()]),
        next_id: 0,
    }
}

fn topic(name: &str, partitions: i32, factor: i16) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_string(name.to_owned())))
        .with_num_partitions(partitions)
        .with_replication_factor(factor)
}

fn decide(topics: Vec<CreatableTopic>, names: Names, cluster: &mut Cluster) -> Decided {
    let body = CreateTopicsRequest::default().with_topics(topics);
    create_topics(7, &body, names, &BrokerConfig::default(), cluster)
}

fn codes(decided: &Decided) -> Vec<ErrorCode> {
    decided
        .response
        .topics
        .iter()
        .map(|result| ErrorCode::from_code(result.error_code))
        .collect()
}

#[test]
fn a_topic_is_a_topic_record_then_one_record_per_partition_round_robin() {
    let mut cluster = cluster(3);
    let decided = decide(vec![topic("orders", 2, 2)], Names::Client, &mut cluster);
    assert_eq!(codes(&decided), vec![ErrorCode::None]);
    assert_eq!(decided.created, vec!["orders".to_owned()]);
    let id = Uuid::from_u128(1);
    assert_eq!(decided.response.topics[0].topic_id, id);
    assert_eq!(decided.response.topics[0].num_partitions, 2);
    assert_eq!(decided.response.topics[0].replication_factor, 2);
    let replicas: Vec<Vec<BrokerId>> = decided
        .records
        .iter()
        .filter_map(|record| match record {
            Record::Partition {
                replicas,
                isr,
                leader,
                topic_id,
                ..
            } => {
                assert_eq!(topic_id, &id);
                assert_eq!(isr, replicas, "every replica starts in sync");
                assert_eq!(*leader, replicas[0], "led by the first replica");
                Some(replicas.clone())
            }
            _ => None,
        })
        .collect();
    assert!(matches!(&decided.records[0], Record::Topic { name, .. } if name == "orders"));
    assert_eq!(
        replicas,
        vec![
            vec![BrokerId(1), BrokerId(2)],
            vec![BrokerId(2), BrokerId(0)]
        ]
    );
}

#[test]
fn refusals_are_kafkas() {
    let mut cluster = cluster(1);
    let bad_config = topic("configured", 1, 1).with_configs(vec![CreatableTopicConfig::default()
        .with_name(StrBytes::from_static_str("cleanup.policy"))
        .with_value(Some(StrBytes::from_static_str("sometimes")))]);
    let decided = decide(
        vec![
            topic("twice", 1, 1),
            topic("twice", 1, 1),
            topic("taken", 1, 1),
            topic("a/b", 1, 1),
            topic("__internal", 1, 1),
            topic("none", 0, 1),
            topic("too-many", PARTITIONS_PER_TOPIC_MAX + 1, 1),
            topic("zero", 1, 0),
            topic("wide", 1, 2),
            bad_config,
            topic("fine", -1, -1),
        ],
        Names::Client,
        &mut cluster,
    );
    assert_eq!(
        codes(&decided),
        vec![
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidRequest,
            ErrorCode::TopicAlreadyExists,
            ErrorCode::InvalidTopicException,
            ErrorCode::InvalidTopicException,
            ErrorCode::InvalidPartitions,
            ErrorCode::InvalidPartitions,
            ErrorCode::InvalidReplicationFactor,
            ErrorCode::InvalidReplicationFactor,
            ErrorCode::InvalidConfig,
            ErrorCode::None,
        ]
    );
    let message = decided.response.topics[8].error_message.as_deref();
    assert!(
        message.is_some_and(|text| text.contains("only 1 broker(s) are registered")),
        "{message:?}"
    );
    assert_eq!(decided.created, vec!["fine".to_owned()]);
}

#[test]
fn internal_names_only_from_brokers_and_validate_only_writes_nothing() {
    let mut cluster = cluster(1);
    let decided = decide(
        vec![topic(OFFSETS_TOPIC, 3, 1)],
        Names::Internal,
        &mut cluster,
    );
    assert_eq!(codes(&decided), vec![ErrorCode::None]);
    assert_eq!(decided.records.len(), 4);
    let decided = decide(vec![topic("__other", 3, 1)], Names::Internal, &mut cluster);
    assert_eq!(codes(&decided), vec![ErrorCode::InvalidTopicException]);
    let body = CreateTopicsRequest::default()
        .with_topics(vec![topic("orders", 1, 1)])
        .with_validate_only(true);
    let decided = create_topics(
        7,
        &body,
        Names::Client,
        &BrokerConfig::default(),
        &mut cluster,
    );
    assert_eq!(codes(&decided), vec![ErrorCode::None]);
    assert!(decided.records.is_empty() && decided.created.is_empty());
}

#[test]
fn a_manual_assignment_names_distinct_active_brokers_in_order() {
    let assign = |partitions: &[&[i32]]| {
        let assignments = partitions
            .iter()
            .enumerate()
            .map(|(index, brokers)| {
                CreatableReplicaAssignment::default()
                    .with_partition_index(index as i32)
                    .with_broker_ids(brokers.iter().map(|id| WireBrokerId(*id)).collect())
            })
            .collect();
        topic("manual", -1, -1).with_assignments(assignments)
    };
    let mut cluster = cluster(3);
    let both = topic("both", 1, -1).with_assignments(assign(&[&[0]]).assignments);
    let decided = decide(vec![both], Names::Client, &mut cluster);
    assert_eq!(codes(&decided), vec![ErrorCode::InvalidRequest]);
    let decided = decide(
        vec![assign(&[&[2, 0], &[0, 1]])],
        Names::Client,
        &mut cluster,
    );
    assert_eq!(codes(&decided), vec![ErrorCode::None]);
    assert_eq!(decided.response.topics[0].replication_factor, 2);
    assert!(matches!(
        &decided.records[1],
        Record::Partition { replicas, leader, .. } if replicas == &[BrokerId(2), BrokerId(0)] && *leader == BrokerId(2)
    ));
    for (brokers, wrong) in [
        (&[&[0, 0][..]][..], "more than once"),
        (&[&[0, 7]], "broker 7, but no such broker"),
        (&[&[0, 1], &[2]], "not consistent"),
        (&[&[]], "empty replica list"),
    ] {
        let decided = decide(vec![assign(brokers)], Names::Client, &mut cluster);
        assert_eq!(codes(&decided), vec![ErrorCode::InvalidReplicaAssignment]);
        let message = decided.response.topics[0].error_message.as_deref();
        assert!(
            message.is_some_and(|text| text.contains(wrong)),
            "{message:?}"
        );
    }
}

#[test]
fn topic_names_follow_kafkas_rules() {
    assert!(validate_topic_name("orders.v2_x-1").is_ok());
    assert!(validate_topic_name("").is_err());
    assert!(validate_topic_name("..").is_err());
    assert!(validate_topic_name("a/b").is_err());
    assert!(validate_topic_name(&"x".repeat(250)).is_err());
    assert!(validate_topic_name(OFFSETS_TOPIC).is_err());
    assert!(validate_created_topic_name(OFFSETS_TOPIC).is_ok());
}
