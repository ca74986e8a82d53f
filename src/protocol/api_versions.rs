//! The APIs and version ranges seedlog implements and advertises.
//!
//! Only implemented keys are advertised (never GetTelemetrySubscriptions, which librdkafka would
//! poll). The ranges cover the maximum of every client measured (kafka-python 3.x, librdkafka 2.x,
//! the Java client; the test below lists what each sends) and never go below Kafka 4.x's minimum
//! versions.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::ApiKey;

/// One supported API: key and inclusive version range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SupportedApi {
    /// The API key.
    pub key: ApiKey,
    /// Lowest supported version.
    pub min_version: i16,
    /// Highest supported version.
    pub max_version: i16,
}

const fn api(key: ApiKey, min_version: i16, max_version: i16) -> SupportedApi {
    SupportedApi {
        key,
        min_version,
        max_version,
    }
}

/// Every API seedlog answers, in key order.
pub const SUPPORTED_APIS: [SupportedApi; 20] = [
    api(ApiKey::Produce, 3, 10), // v3+: RecordBatch v2 only; v9+ flexible
    api(ApiKey::Fetch, 4, 16),   // v4+: RecordBatch v2; v12+ flexible; v13+ topic ids
    api(ApiKey::ListOffsets, 1, 9),
    api(ApiKey::Metadata, 0, 12),
    api(ApiKey::ApiVersions, 0, 4),
    api(ApiKey::CreateTopics, 2, 7),
    api(ApiKey::DeleteRecords, 0, 2),        // v2 flexible
    api(ApiKey::InitProducerId, 0, 5),       // v2 flexible; idempotent producers only
    api(ApiKey::OffsetForLeaderEpoch, 2, 4), // v4 flexible
    api(ApiKey::DescribeConfigs, 1, 4),      // v4 flexible; topic resources only
    api(ApiKey::FindCoordinator, 0, 6),      // v3 flexible; v4+ batched keys; groups only
    api(ApiKey::JoinGroup, 0, 9),            // v6 flexible; v4+ MEMBER_ID_REQUIRED (KIP-394)
    api(ApiKey::SyncGroup, 0, 5),            // v4 flexible
    api(ApiKey::Heartbeat, 0, 4),            // v4 flexible
    api(ApiKey::LeaveGroup, 0, 5),           // v4 flexible; v3+ batched members
    api(ApiKey::OffsetCommit, 2, 9),         // v8 flexible (Kafka 4 dropped v0-1)
    api(ApiKey::OffsetFetch, 1, 9),          // v6 flexible; v8+ batched groups
    api(ApiKey::DescribeGroups, 0, 5),       // v5 flexible
    api(ApiKey::ListGroups, 0, 5),           // v3 flexible; v4 state filter; v5 type filter
    api(ApiKey::DeleteGroups, 0, 2),         // v2 flexible
];

/// What a controller answers: brokers register, heartbeat, change ISRs, forward topic
/// creation, and fetch the metadata log and its snapshot.
pub const CONTROLLER_APIS: [SupportedApi; 7] = [
    api(ApiKey::Fetch, 12, 16),
    api(ApiKey::FetchSnapshot, 0, 1),
    api(ApiKey::ApiVersions, 0, 4),
    api(ApiKey::CreateTopics, 2, 7),
    api(ApiKey::AlterPartition, 2, 3),
    api(ApiKey::BrokerRegistration, 0, 4),
    api(ApiKey::BrokerHeartbeat, 0, 1),
];

/// The supported range for `key`, if seedlog implements it.
pub fn supported(key: ApiKey) -> Option<SupportedApi> {
    SUPPORTED_APIS.iter().copied().find(|api| api.key == key)
}

/// The `api_keys` array of an ApiVersions response.
pub fn advertised() -> Vec<ApiVersion> {
    SUPPORTED_APIS
        .iter()
        .map(|api| {
            ApiVersion::default()
                .with_api_key(api.key as i16)
                .with_min_version(api.min_version)
                .with_max_version(api.max_version)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advertised_range_lies_within_what_the_codec_can_encode() {
        for api in SUPPORTED_APIS {
            let valid = api.key.valid_versions();
            assert!(api.min_version <= api.max_version, "{:?}", api.key);
            assert!(valid.min <= api.min_version, "{:?} min", api.key);
            assert!(api.max_version <= valid.max, "{:?} max", api.key);
        }
    }

    #[test]
    fn the_ranges_cover_the_versions_real_clients_send() {
        // The versions each client was measured sending: (API, kcat, confluent-kafka,
        // kafka-python).
        let sent = [
            (ApiKey::Produce, [7, 10, 9]),
            (ApiKey::Fetch, [11, 16, 12]),
            (ApiKey::ListOffsets, [2, 7, 9]),
            (ApiKey::Metadata, [4, 12, 12]),
            (ApiKey::ApiVersions, [3, 3, 4]),
        ];
        for (key, versions) in sent {
            let api = supported(key).expect("supported");
            for version in versions {
                assert!(
                    (api.min_version..=api.max_version).contains(&version),
                    "{key:?} v{version}"
                );
            }
        }
    }
}
