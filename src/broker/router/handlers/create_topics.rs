//! CreateTopics, and every topic the broker creates itself (auto-creation, `__consumer_offsets`):
//! one path. In a cluster the request goes to the controller and its answer is relayed. A broker
//! that is its own controller decides it with the controller's code
//! ([`crate::metadata::topics::create_topics`]), appends the records to its own metadata log, and
//! answers once they are durable (the topics exist from then on).

use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::metadata_cache::{DelayedCreateTopics, OwnController};
use crate::broker::{Broker, FlushId, Output, ReplyTo, ResponseBody};
use crate::metadata::topics::{self, validate_topic_name, Decided, Names};
use crate::protocol::codec::Request;
use crate::protocol::ErrorCode;
use crate::storage::Storage;
use crate::types::Millis;

/// Whether a client's CreateTopics names a topic reserved for internal use (`__` prefix).
fn names_reserved_topic(body: &CreateTopicsRequest) -> bool {
    body.topics
        .iter()
        .any(|topic| topic.name.as_str().starts_with("__"))
}

/// A client's CreateTopics that names a reserved topic, answered by the broker instead of
/// being forwarded (the controller takes reserved names from brokers only): each reserved
/// topic INVALID_TOPIC_EXCEPTION, the others INVALID_REQUEST.
fn reserved_topics_refused(api_version: i16, body: &CreateTopicsRequest) -> ResponseKind {
    let mut response = CreateTopicsResponse::default();
    for topic in &body.topics {
        let (error, message) = match validate_topic_name(topic.name.as_str()) {
            Err(message) => (ErrorCode::InvalidTopicException, message),
            Ok(()) => (
                ErrorCode::InvalidRequest,
                "not created: the request also names a reserved topic".to_owned(),
            ),
        };
        let mut result = CreatableTopicResult::default()
            .with_name(topic.name.clone())
            .with_error_code(error.code())
            .with_error_message(None);
        if api_version >= 1 {
            result.error_message = Some(StrBytes::from_string(message));
        }
        response.topics.push(result);
    }
    ResponseKind::CreateTopics(response)
}

impl<S: Storage> Broker<S> {
    pub(in crate::broker) fn on_create_topics_request(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        request: Request,
        out: &mut Vec<Output<S::File>>,
    ) {
        let RequestKind::CreateTopics(body) = request.body else {
            unreachable!("routed by api key")
        };
        if self.cluster.is_some() && names_reserved_topic(&body) {
            let response = reserved_topics_refused(request.api_version, &body);
            out.push(reply_to.respond(ResponseBody::message(response)));
            return;
        }
        self.create_topics(
            now,
            Some(reply_to),
            request.api_version,
            body,
            Names::Client,
            out,
        );
    }

    /// Creates topics: through the controller in a cluster (`None`: its answer is relayed to
    /// `reply_to` when it comes), else in this broker's own metadata log. There the answer is
    /// known at once and returned; `reply_to` hears it once the records are durable.
    pub(in crate::broker) fn create_topics(
        &mut self,
        now: Millis,
        reply_to: Option<ReplyTo>,
        api_version: i16,
        body: CreateTopicsRequest,
        names: Names,
        out: &mut Vec<Output<S::File>>,
    ) -> Option<CreateTopicsResponse> {
        if self.cluster.is_some() {
            let body = RequestKind::CreateTopics(body);
            self.forward_create_topics(now, reply_to, api_version, body, out);
            return None;
        }
        let node = self.node_id();
        let mut creator = OwnController {
            cache: &self.metadata,
            rng: &mut self.rng,
            node,
        };
        let Decided {
            mut response,
            records,
            created,
        } = topics::create_topics(api_version, &body, names, &self.config, &mut creator);
        let answer = |response: &CreateTopicsResponse| {
            ResponseBody::message(ResponseKind::CreateTopics(response.clone()))
        };
        if records.is_empty() {
            if let Some(reply_to) = reply_to {
                out.push(reply_to.respond(answer(&response)));
            }
            return Some(response);
        }
        let advertised = self.config.advertised();
        let mut appended =
            self.metadata
                .own_registration(node, &advertised.host, i32::from(advertised.port));
        appended.extend(records);
        self.metadata.creating.extend(created);
        match self.append_metadata(now, &appended, out) {
            Ok(flush_id) => {
                if let Some(reply_to) = reply_to {
                    self.creations.push(DelayedCreateTopics {
                        reply_to,
                        response: response.clone(),
                        flush_id,
                    });
                }
            }
            Err(error) => {
                tracing::error!(%error, "cannot append topic records");
                self.metadata.append_failed(&appended);
                for result in response
                    .topics
                    .iter_mut()
                    .filter(|result| result.error_code == 0)
                {
                    result.error_code = ErrorCode::KafkaStorageError.code();
                }
                if let Some(reply_to) = reply_to {
                    out.push(reply_to.respond(answer(&response)));
                }
            }
        }
        Some(response)
    }

    /// Answers the CreateTopics whose records `flush_id` made durable.
    pub(in crate::broker) fn complete_topic_creations(
        &mut self,
        flush_id: FlushId,
        out: &mut Vec<Output<S::File>>,
    ) {
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.creations)
            .into_iter()
            .partition(|delayed| delayed.flush_id == flush_id);
        self.creations = waiting;
        for delayed in ready {
            out.push(
                delayed
                    .reply_to
                    .respond(ResponseBody::message(ResponseKind::CreateTopics(
                        delayed.response,
                    ))),
            );
        }
    }
}
