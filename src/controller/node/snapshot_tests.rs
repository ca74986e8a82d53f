//! A Raft-mode node and metadata snapshots: its copy of the log starts at each snapshot, a
//! fetch below that start names the snapshot, and FetchSnapshot serves it in chunks.

use kafka_protocol::messages::fetch_snapshot_request::{
    PartitionSnapshot, SnapshotId, TopicSnapshot,
};
use kafka_protocol::messages::{FetchSnapshotRequest, FetchSnapshotResponse};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::TopicName;

use super::tests::{
    active_raft_node, committed, proposal, quorum, raft_node, registration, request,
};
use super::*;
use crate::metadata::image::ClusterImage;
use crate::protocol::record_batch::decode_records;
use crate::storage::memory::{MemoryFile, MemoryStorage};
use crate::storage::StorageFile;

/// The one response body to `body`.
fn answer(
    node: &mut ControllerNode<MemoryStorage>,
    version: i16,
    body: RequestKind,
) -> ResponseBody<MemoryFile> {
    let request = Request {
        api_key: crate::protocol::codec::RequestApiKey::api_key(&body),
        api_version: version,
        correlation_id: 1,
        client_id: None,
        client_host: None,
        body,
    };
    let out = super::tests::request(node, request);
    out.into_iter()
        .find_map(|output| match output {
            Output::Respond { response, .. } => Some(response.body),
            _ => None,
        })
        .expect("an answer")
}

/// A Fetch of `__cluster_metadata-0` from `offset`: (snapshot id, record count).
fn fetch(node: &mut ControllerNode<MemoryStorage>, offset: i64) -> (Option<(i64, i32)>, usize) {
    let body = FetchRequest::default().with_topics(vec![FetchTopic::default()
        .with_topic(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
        .with_partitions(vec![FetchPartition::default()
            .with_partition(0)
            .with_fetch_offset(offset)
            .with_partition_max_bytes(1 << 20)])]);
    let ResponseBody::Fetch(parts) = answer(node, 12, RequestKind::Fetch(body)) else {
        panic!("a fetch response")
    };
    let partition = &parts.topics[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    let count = match &partition.records {
        RecordsSource::File {
            file,
            position,
            len,
        } => {
            let mut bytes = vec![0; *len as usize];
            file.read_exact_at(&mut bytes, *position).expect("read");
            decode_records(&bytes.into()).expect("valid").len()
        }
        _ => 0,
    };
    (partition.snapshot_id, count)
}

fn fetch_snapshot(
    node: &mut ControllerNode<MemoryStorage>,
    id: (i64, i32),
    position: i64,
    max_bytes: i32,
) -> FetchSnapshotResponse {
    let wanted = PartitionSnapshot::default()
        .with_partition(0)
        .with_snapshot_id(SnapshotId::default().with_end_offset(id.0).with_epoch(id.1))
        .with_position(position);
    let body = FetchSnapshotRequest::default()
        .with_max_bytes(max_bytes)
        .with_topics(vec![TopicSnapshot::default()
            .with_name(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
            .with_partitions(vec![wanted])]);
    let ResponseBody::Message(message) = answer(node, 0, RequestKind::FetchSnapshot(body)) else {
        panic!("a message")
    };
    let ResponseKind::FetchSnapshot(body) = *message else {
        panic!("a FetchSnapshot answer")
    };
    body
}

/// The whole snapshot `id`, fetched `chunk` bytes at a time, as the image it builds.
fn download(node: &mut ControllerNode<MemoryStorage>, id: (i64, i32), chunk: i32) -> ClusterImage {
    let mut bytes = Vec::new();
    loop {
        let answer = fetch_snapshot(node, id, bytes.len() as i64, chunk);
        let part = &answer.topics[0].partitions[0];
        assert_eq!(part.error_code, 0);
        assert_eq!(part.position, bytes.len() as i64);
        assert!(part.unaligned_records.len() <= chunk as usize);
        bytes.extend_from_slice(&part.unaligned_records);
        if bytes.len() as i64 == part.size {
            break;
        }
    }
    let records: Vec<Record> = decode_records(&bytes.into())
        .expect("valid")
        .iter()
        .map(|record| Record::decode(record.value.as_deref().expect("value")).expect("a record"))
        .collect();
    ClusterImage::from_records(&records).expect("applies")
}

/// A node leading term 2 with brokers 1 and 2 registered: two committed records.
fn leader_with_two_brokers() -> ControllerNode<MemoryStorage> {
    let mut node = active_raft_node(2);
    for broker in [1, 2] {
        let out = request(&mut node, registration(broker));
        quorum(&mut node, committed(2, proposal(&out)));
    }
    assert_eq!(node.committed(), 2);
    node
}

#[test]
fn a_snapshot_starts_the_log_copy_and_a_fetch_below_it_names_the_snapshot() {
    let mut node = leader_with_two_brokers();
    assert_eq!(fetch(&mut node, 0), (None, 2));
    let records = node.controller().image().to_records();
    quorum(
        &mut node,
        QuorumInput::Snapshot {
            term: 2,
            end_offset: 1,
            records: records[..1].to_vec(),
        },
    );
    assert_eq!(node.log.log_start_offset(), 0, "the first keeps the log");
    assert_eq!(fetch(&mut node, 0), (None, 2));
    quorum(
        &mut node,
        QuorumInput::Snapshot {
            term: 2,
            end_offset: 2,
            records,
        },
    );
    assert_eq!(
        node.log.log_start_offset(),
        1,
        "the copy keeps what follows the previous"
    );
    assert_eq!(
        fetch(&mut node, 0),
        (Some((2, 2)), 0),
        "below the start: the latest"
    );
    assert_eq!(fetch(&mut node, 1), (None, 1), "at the start: the log");
    assert_eq!(fetch(&mut node, 2), (None, 0));

    let image = download(&mut node, (2, 2), 7);
    assert_eq!(&image, node.controller().image());
    assert_eq!(
        &download(&mut node, (2, 2), 1 << 20),
        node.controller().image()
    );

    let stale = fetch_snapshot(&mut node, (2, 1), 0, 100);
    assert_eq!(
        stale.topics[0].partitions[0].error_code,
        ErrorCode::SnapshotNotFound.code()
    );
    let past = fetch_snapshot(&mut node, (2, 2), 1 << 20, 100);
    assert_eq!(
        past.topics[0].partitions[0].error_code,
        ErrorCode::PositionOutOfRange.code()
    );

    // The controller rebuilt from the snapshot and the log after it decides as before.
    let out = request(&mut node, registration(3));
    quorum(&mut node, committed(2, proposal(&out)));
    assert_eq!(fetch(&mut node, 2), (None, 1));
    assert_eq!(fetch(&mut node, 1), (None, 2));
    let seed = node.raft.as_ref().expect("Raft").seed;
    let before = node.controller().image().clone();
    node.rebuild_controller(seed);
    assert_eq!(node.controller().image(), &before);
}

#[test]
fn a_follower_that_installs_a_snapshot_starts_over_at_its_end_with_its_image() {
    let leader = leader_with_two_brokers();
    let records = leader.controller().image().to_records();
    let mut follower = raft_node();
    quorum(
        &mut follower,
        QuorumInput::Leader {
            leader: Some(7),
            term: 2,
        },
    );
    quorum(
        &mut follower,
        QuorumInput::Snapshot {
            term: 2,
            end_offset: 2,
            records,
        },
    );
    assert_eq!(follower.committed(), 2);
    assert_eq!(follower.log.log_start_offset(), 2);
    assert_eq!(follower.controller().image(), leader.controller().image());
    // A broker registered in the snapshot unfences once it has read up to the snapshot's end.
    assert_eq!(follower.registered_at.get(&BrokerId(1)), Some(&2));
    // Later entries extend the copy from there.
    let other = Record::RegisterBroker {
        broker: BrokerId(5),
        epoch: BrokerEpoch(9),
        host: "h".to_owned(),
        port: 1,
    };
    quorum(&mut follower, committed(2, vec![other]));
    assert_eq!(follower.committed(), 3);
    assert!(follower.controller().image().broker(BrokerId(5)).is_some());
    // An older snapshot changes nothing.
    quorum(
        &mut follower,
        QuorumInput::Snapshot {
            term: 2,
            end_offset: 1,
            records: Vec::new(),
        },
    );
    assert_eq!(follower.log.log_start_offset(), 2);
}
