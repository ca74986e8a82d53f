//! ApiVersions: the advertised ranges (no feature tags, so v3+ answers end in an empty tag
//! buffer that even librdkafka 2.0 parses: feature tags break it, as tansu shows).

use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse, ResponseKind};

use crate::protocol::{api_versions, ErrorCode};

/// Kafka's rule for `client_software_name`/`_version` (v3+):
/// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
fn valid_software_field(text: &str) -> bool {
    let bytes = text.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|byte| byte.is_ascii_alphanumeric() || *byte == b'-' || *byte == b'.')
}

/// The answer to ApiVersions: it depends on nothing the broker holds.
pub(crate) fn on_api_versions_request(
    api_version: i16,
    request: &ApiVersionsRequest,
) -> ResponseKind {
    let mut response = ApiVersionsResponse::default().with_api_keys(api_versions::advertised());
    let software_ok = valid_software_field(&request.client_software_name)
        && valid_software_field(&request.client_software_version);
    if api_version >= 3 && !software_ok {
        response.error_code = ErrorCode::InvalidRequest.code();
    }
    ResponseKind::ApiVersions(response)
}

#[cfg(test)]
mod tests {
    use super::valid_software_field;

    #[test]
    fn client_software_fields_follow_kafkas_pattern() {
        assert!(valid_software_field("kafka-python"));
        assert!(valid_software_field("2.16.1"));
        assert!(valid_software_field("a"));
        assert!(!valid_software_field(""));
        assert!(!valid_software_field("-x"));
        assert!(!valid_software_field("x y"));
    }
}
