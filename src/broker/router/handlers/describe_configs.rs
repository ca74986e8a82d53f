//! DescribeConfigs (API 32, v1–4): a topic's effective configuration, as `kafka-configs.sh
//! --describe`, `kafka-topics.sh --describe` and `AdminClient.describeConfigs` ask for it. Each
//! entry says where its value comes from: the topic's own override (`TOPIC_CONFIG`) or the
//! broker-wide default (`DEFAULT_CONFIG`). Only topic resources are described; any other
//! resource type is answered INVALID_REQUEST with a message, never silently empty.

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;
use crate::config::topic::{ConfigType, DescribedConfig};
use crate::protocol::ErrorCode;
use crate::storage::Storage;

/// `ConfigResource.Type.TOPIC`.
const TOPIC: i8 = 2;
/// `DescribeConfigsResponse.ConfigSource.TOPIC_CONFIG`.
const TOPIC_CONFIG: i8 = 1;
/// `DescribeConfigsResponse.ConfigSource.DEFAULT_CONFIG`.
const DEFAULT_CONFIG: i8 = 5;

/// Kafka's wire value of a config type (`DescribeConfigsResponse.ConfigType`).
fn wire_type(config_type: ConfigType) -> i8 {
    match config_type {
        ConfigType::Boolean => 1,
        ConfigType::Int => 3,
        ConfigType::Long => 5,
        ConfigType::Double => 6,
        ConfigType::List => 7,
        ConfigType::String => 2,
    }
}

fn entry(described: DescribedConfig, include_synonyms: bool) -> DescribeConfigsResourceResult {
    let source = if described.overridden {
        TOPIC_CONFIG
    } else {
        DEFAULT_CONFIG
    };
    let name = StrBytes::from_static_str(described.name);
    let value = Some(StrBytes::from_string(described.value));
    let synonyms = if include_synonyms {
        vec![DescribeConfigsSynonym::default()
            .with_name(name.clone())
            .with_value(value.clone())
            .with_source(source)]
    } else {
        Vec::new()
    };
    DescribeConfigsResourceResult::default()
        .with_name(name)
        .with_value(value)
        .with_read_only(false)
        .with_config_source(source)
        .with_is_sensitive(false)
        .with_synonyms(synonyms)
        .with_config_type(wire_type(described.config_type))
}

impl<S: Storage> Broker<S> {
    pub(in crate::broker) fn on_describe_configs_request(
        &self,
        request: &DescribeConfigsRequest,
    ) -> ResponseKind {
        let mut response = DescribeConfigsResponse::default();
        for resource in &request.resources {
            let mut result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let outcome = if resource.resource_type == TOPIC {
                self.metadata
                    .config(resource.resource_name.as_str())
                    .map(crate::config::TopicConfig::described)
                    .ok_or_else(|| {
                        let name = resource.resource_name.as_str();
                        (
                            ErrorCode::UnknownTopicOrPartition,
                            format!("Topic {name} does not exist"),
                        )
                    })
            } else {
                Err((
                    ErrorCode::InvalidRequest,
                    format!(
                        "seedlog describes topic configs only, not resource type {}",
                        resource.resource_type
                    ),
                ))
            };
            match outcome {
                Ok(described) => {
                    let wanted = resource.configuration_keys.as_ref();
                    result.configs = described
                        .into_iter()
                        .filter(|config| {
                            wanted.is_none_or(|keys| {
                                keys.iter().any(|key| key.as_str() == config.name)
                            })
                        })
                        .map(|config| entry(config, request.include_synonyms))
                        .collect();
                }
                Err((error, message)) => {
                    result.error_code = error.code();
                    result.error_message = Some(StrBytes::from_string(message));
                }
            }
            response.results.push(result);
        }
        ResponseKind::DescribeConfigs(response)
    }
}
