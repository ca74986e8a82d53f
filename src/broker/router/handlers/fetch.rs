//! Fetch: whole batches from the fetch offset up to the high watermark, as file ranges (sent
//! with sendfile in production). A fetch with less than `min.bytes` available waits in the
//! purgatory until data arrives or `max.wait.ms` passes. Sessionless: `session_id` is 0.
//!
//! A fetch from a follower (`replica_id` set, or `replica_state` from v15) reads up to the log
//! end instead, and its fetch offsets tell the leader how far each follower has come (see
//! `replica_manager::replication`). Only the leader serves fetches. The reads themselves are the
//! `ReplicaManager`'s (`replica_manager/fetch.rs`); here the parking and the follower bookkeeping.

use kafka_protocol::messages::{FetchRequest, RequestKind};

use crate::broker::replica_manager::fetch::fetching_replica;
use crate::broker::replica_manager::purgatory::DelayedFetch;
use crate::broker::{Broker, Output, ReplyTo, ResponseBody};
use crate::protocol::codec::Request;
use crate::protocol::fetch_response::FetchResponseParts;
use crate::storage::Storage;
use crate::types::{Millis, TopicPartition};

impl<S: Storage> Broker<S> {
    pub(in crate::broker) fn on_fetch_request(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        request: Request,
        out: &mut Vec<Output<S::File>>,
    ) {
        let RequestKind::Fetch(body) = request.body else {
            unreachable!("routed by api key")
        };
        let (parts, bytes) = self.read_for_fetch(request.api_version, &body);
        if let Some(replica) = fetching_replica(request.api_version, &body) {
            let fetched: Vec<(TopicPartition, i64)> = parts
                .topics
                .iter()
                .zip(&body.topics)
                .flat_map(|(topic, requested)| {
                    topic
                        .partitions
                        .iter()
                        .zip(&requested.partitions)
                        .filter(|(answer, _)| {
                            // A diverging follower's fetch offset is not its log end here.
                            answer.error_code == 0 && answer.diverging_epoch.is_none()
                        })
                        .map(|(answer, wanted)| {
                            let partition =
                                TopicPartition::new(topic.topic.as_str(), answer.partition_index);
                            (partition, wanted.fetch_offset)
                        })
                })
                .collect();
            let (replicas, mut link) = self.replica_manager();
            replicas.on_follower_fetched(now, replica, &fetched, &mut link, out);
        }
        let has_error = parts
            .topics
            .iter()
            .flat_map(|topic| &topic.partitions)
            .any(|partition| partition.error_code != 0);
        let ready = body.max_wait_ms <= 0
            || bytes >= body.min_bytes.max(1) as usize
            || has_error
            || body.topics.is_empty();
        if ready {
            out.push(reply_to.respond(ResponseBody::Fetch(parts)));
        } else {
            let watched = parts
                .topics
                .iter()
                .flat_map(|topic| {
                    topic.partitions.iter().map(|partition| {
                        TopicPartition::new(topic.topic.as_str(), partition.partition_index)
                    })
                })
                .collect();
            self.replicas.purgatory.fetches.push(DelayedFetch {
                reply_to,
                deadline: now.plus(body.max_wait_ms as u64),
                request: body,
                watched,
            });
        }
    }

    /// Reads what a fetch would return now, and how many record bytes that is (the
    /// [`ReplicaManager`](crate::broker::replica_manager::ReplicaManager)'s read over the
    /// topics this broker serves).
    pub(in crate::broker) fn read_for_fetch(
        &self,
        api_version: i16,
        body: &FetchRequest,
    ) -> (FetchResponseParts<S::File>, usize) {
        self.replicas.read_served(api_version, body, &self.metadata)
    }
}
