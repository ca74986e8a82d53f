//! Kafka request/response codec over the `kafka-protocol` crate's generated types.
//!
//! Broker side: [`decode_request`] turns a frame payload into a [`Request`], answering the
//! KIP-511 case (ApiVersions at an unknown version) with [`Decoded::UnsupportedApiVersions`];
//! every other problem is a [`CodecError`], on which the connection is closed with the reason
//! logged, as Kafka does. Client side: [`encode_request`] and [`decode_response`].

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, RequestHeader, RequestKind, ResponseHeader, ResponseKind,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::api_versions::{self, SupportedApi};
use super::error_code::ErrorCode;
use super::frame::FRAME_PREFIX_BYTES;

/// A decoded request.
#[derive(Debug, Clone)]
pub struct Request {
    /// API key from the header.
    pub api_key: ApiKey,
    /// API version from the header.
    pub api_version: i16,
    /// Echoed in the response header.
    pub correlation_id: i32,
    /// `client.id` of the sender, if any.
    pub client_id: Option<String>,
    /// The sender's address as Kafka shows it (`/127.0.0.1`): set by the connection layer,
    /// which knows the peer (the decoder does not), shared by every request of a connection.
    pub client_host: Option<std::sync::Arc<str>>,
    /// The typed body.
    pub body: RequestKind,
}

/// What the broker does with a frame.
#[derive(Debug, Clone)]
pub enum Decoded {
    /// A supported request (boxed: the generated enum is large).
    Request(Box<Request>),
    /// An ApiVersions request at a version seedlog does not know: answer with a v0-format body
    /// carrying `UNSUPPORTED_VERSION` and the supported ranges (KIP-511), so the client retries.
    UnsupportedApiVersions {
        /// Echoed in the response header.
        correlation_id: i32,
        /// The version the client tried.
        api_version: i16,
    },
}

/// A frame that cannot be served. The broker closes the connection and logs this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Not even `api_key`, `api_version` and `correlation_id`.
    #[error("frame of {0} bytes is shorter than a request header")]
    ShortHeader(usize),
    /// Not a Kafka API key.
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    /// A Kafka API that seedlog does not implement yet.
    #[error("{0:?} (key {k}) is not implemented by seedlog", k = *.0 as i16)]
    UnsupportedApi(ApiKey),
    /// A version outside the advertised range.
    #[error("{api:?} v{version} is not supported (supported v{min}..=v{max})")]
    UnsupportedVersion {
        /// The API.
        api: ApiKey,
        /// Requested version.
        version: i16,
        /// Lowest supported.
        min: i16,
        /// Highest supported.
        max: i16,
    },
    /// The header or body does not decode.
    #[error("malformed {api:?} v{version}: {reason}")]
    Malformed {
        /// The API.
        api: ApiKey,
        /// Its version.
        version: i16,
        /// What the decoder said.
        reason: String,
    },
    /// A response could not be encoded (a bug or a field not valid in that version).
    #[error("cannot encode {api:?} v{version}: {reason}")]
    Encode {
        /// The API.
        api: ApiKey,
        /// Its version.
        version: i16,
        /// What the encoder said.
        reason: String,
    },
}

/// Decodes one request frame (without its size prefix) for a broker.
pub fn decode_request(frame: Bytes) -> Result<Decoded, CodecError> {
    decode_request_for(frame, &api_versions::SUPPORTED_APIS)
}

/// Decodes one request frame for a listener that answers `apis` (a broker's or a
/// controller's).
pub fn decode_request_for(frame: Bytes, apis: &[SupportedApi]) -> Result<Decoded, CodecError> {
    const HEADER_FIXED_BYTES: usize = 8;
    if frame.len() < HEADER_FIXED_BYTES {
        return Err(CodecError::ShortHeader(frame.len()));
    }
    let key_raw = i16::from_be_bytes([frame[0], frame[1]]);
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key = ApiKey::try_from(key_raw).map_err(|()| CodecError::UnknownApiKey(key_raw))?;
    let supported = apis
        .iter()
        .copied()
        .find(|api| api.key == api_key)
        .ok_or(CodecError::UnsupportedApi(api_key))?;
    if !(supported.min_version..=supported.max_version).contains(&api_version) {
        if api_key == ApiKey::ApiVersions {
            return Ok(Decoded::UnsupportedApiVersions {
                correlation_id,
                api_version,
            });
        }
        return Err(CodecError::UnsupportedVersion {
            api: api_key,
            version: api_version,
            min: supported.min_version,
            max: supported.max_version,
        });
    }
    let malformed = |reason: String| CodecError::Malformed {
        api: api_key,
        version: api_version,
        reason,
    };
    let mut body = frame;
    let header = RequestHeader::decode(&mut body, api_key.request_header_version(api_version))
        .map_err(|error| malformed(error.to_string()))?;
    let body = RequestKind::decode(api_key, &mut body, api_version)
        .map_err(|error| malformed(format!("{error:#}")))?;
    Ok(Decoded::Request(Box::new(Request {
        api_key,
        api_version,
        correlation_id,
        client_id: header.client_id.map(|id| id.to_string()),
        client_host: None,
        body,
    })))
}

/// Reserves the size prefix at the start of a new frame buffer.
pub fn start_frame(capacity: usize) -> BytesMut {
    let mut frame = BytesMut::with_capacity(FRAME_PREFIX_BYTES + capacity);
    frame.put_i32(0);
    frame
}

/// Writes the size prefix reserved by [`start_frame`], given the bytes that follow the frame
/// buffer (file chunks sent separately), and returns the frame.
pub fn finish_frame(mut frame: BytesMut, trailing_bytes: usize) -> BytesMut {
    let size = frame.len() - FRAME_PREFIX_BYTES + trailing_bytes;
    let size = i32::try_from(size).expect("response frames stay below 2 GiB");
    frame[..FRAME_PREFIX_BYTES].copy_from_slice(&size.to_be_bytes());
    frame
}

/// Encodes a response header for `api_key` at `api_version` into `frame`.
pub fn encode_response_header(
    frame: &mut BytesMut,
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
) {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    header
        .encode(frame, api_key.response_header_version(api_version))
        .expect("a response header always encodes");
}

/// Encodes a whole response frame, size prefix included.
pub fn encode_response(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<BytesMut, CodecError> {
    let mut frame = start_frame(256);
    encode_response_header(&mut frame, api_key, api_version, correlation_id);
    body.encode(&mut frame, api_version)
        .map_err(|error| CodecError::Encode {
            api: api_key,
            version: api_version,
            reason: error.to_string(),
        })?;
    Ok(finish_frame(frame, 0))
}

/// The KIP-511 answer to an ApiVersions request at an unknown version: a v0 body with
/// `UNSUPPORTED_VERSION` and every supported range.
pub fn encode_api_versions_fallback(correlation_id: i32) -> BytesMut {
    let body = ApiVersionsResponse::default()
        .with_error_code(ErrorCode::UnsupportedVersion.code())
        .with_api_keys(api_versions::advertised());
    encode_response(
        ApiKey::ApiVersions,
        0,
        correlation_id,
        &ResponseKind::ApiVersions(body),
    )
    .expect("ApiVersions v0 always encodes")
}

/// Client side: encodes a request frame, size prefix included.
pub fn encode_request(
    api_version: i16,
    correlation_id: i32,
    client_id: &str,
    body: &RequestKind,
) -> Result<BytesMut, CodecError> {
    let api_key = body.api_key();
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(api_version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_owned())));
    let encode_error = |reason: String| CodecError::Encode {
        api: api_key,
        version: api_version,
        reason,
    };
    let mut frame = start_frame(256);
    header
        .encode(&mut frame, api_key.request_header_version(api_version))
        .map_err(|error| encode_error(error.to_string()))?;
    body.encode(&mut frame, api_version)
        .map_err(|error| encode_error(format!("{error:#}")))?;
    Ok(finish_frame(frame, 0))
}

/// Client side: decodes a response frame (without its size prefix) for the request it answers.
/// Returns the correlation id and the body.
pub fn decode_response(
    frame: Bytes,
    api_key: ApiKey,
    api_version: i16,
) -> Result<(i32, ResponseKind), CodecError> {
    let malformed = |reason: String| CodecError::Malformed {
        api: api_key,
        version: api_version,
        reason,
    };
    let mut body = frame;
    let header = ResponseHeader::decode(&mut body, api_key.response_header_version(api_version))
        .map_err(|error| malformed(error.to_string()))?;
    let response = ResponseKind::decode(api_key, &mut body, api_version)
        .map_err(|error| malformed(format!("{error:#}")))?;
    Ok((header.correlation_id, response))
}

/// The API key of a request body.
pub trait RequestApiKey {
    /// The key.
    fn api_key(&self) -> ApiKey;
}

impl RequestApiKey for RequestKind {
    fn api_key(&self) -> ApiKey {
        match self {
            RequestKind::Produce(_) => ApiKey::Produce,
            RequestKind::Fetch(_) => ApiKey::Fetch,
            RequestKind::ListOffsets(_) => ApiKey::ListOffsets,
            RequestKind::Metadata(_) => ApiKey::Metadata,
            RequestKind::ApiVersions(_) => ApiKey::ApiVersions,
            RequestKind::CreateTopics(_) => ApiKey::CreateTopics,
            RequestKind::DeleteRecords(_) => ApiKey::DeleteRecords,
            RequestKind::InitProducerId(_) => ApiKey::InitProducerId,
            RequestKind::BrokerRegistration(_) => ApiKey::BrokerRegistration,
            RequestKind::BrokerHeartbeat(_) => ApiKey::BrokerHeartbeat,
            RequestKind::AlterPartition(_) => ApiKey::AlterPartition,
            RequestKind::FetchSnapshot(_) => ApiKey::FetchSnapshot,
            RequestKind::OffsetForLeaderEpoch(_) => ApiKey::OffsetForLeaderEpoch,
            RequestKind::DescribeConfigs(_) => ApiKey::DescribeConfigs,
            RequestKind::FindCoordinator(_) => ApiKey::FindCoordinator,
            RequestKind::JoinGroup(_) => ApiKey::JoinGroup,
            RequestKind::SyncGroup(_) => ApiKey::SyncGroup,
            RequestKind::Heartbeat(_) => ApiKey::Heartbeat,
            RequestKind::LeaveGroup(_) => ApiKey::LeaveGroup,
            RequestKind::OffsetCommit(_) => ApiKey::OffsetCommit,
            RequestKind::OffsetFetch(_) => ApiKey::OffsetFetch,
            RequestKind::DescribeGroups(_) => ApiKey::DescribeGroups,
            RequestKind::ListGroups(_) => ApiKey::ListGroups,
            RequestKind::DeleteGroups(_) => ApiKey::DeleteGroups,
            other => panic!("seedlog never sends {other:?}"),
        }
    }
}
