//! The request decoder never panics, never aborts, and never allocates by what a hostile frame
//! claims: arbitrary bytes, arbitrary bodies behind valid headers of every supported API and
//! version, and the exact frames of the upstream OOM reports (kafka-protocol-rs #152/#200).

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use seedlog::protocol::api_versions::SUPPORTED_APIS;
use seedlog::protocol::codec::{decode_request, CodecError, Decoded};

/// A request header (v1, or v2 with an empty tag buffer) followed by `body`.
fn frame(api_key: i16, api_version: i16, flexible_header: bool, body: &[u8]) -> Bytes {
    let mut frame = BytesMut::new();
    frame.put_i16(api_key);
    frame.put_i16(api_version);
    frame.put_i32(42); // correlation id
    frame.put_i16(-1); // null client id
    if flexible_header {
        frame.put_u8(0);
    }
    frame.extend_from_slice(body);
    frame.freeze()
}

fn flexible_header(api_key: i16, api_version: i16) -> bool {
    let key = kafka_protocol::messages::ApiKey::try_from(api_key).expect("known key");
    key.request_header_version(api_version) >= 2
}

#[test]
fn the_metadata_body_from_the_upstream_report_is_rejected_without_allocating() {
    // The fuzzer's body: a Metadata v0 topic array claiming 0x033c0c00 = 54,266,880 entries
    // (3.6 GiB of `Vec` capacity before the fix), behind a valid header.
    let result = decode_request(frame(3, 0, false, &[0x03, 0x3c, 0x0c, 0x00, 0xb6]));
    let Err(CodecError::Malformed { reason, .. }) = result else {
        panic!("must be malformed: {result:?}")
    };
    assert!(reason.contains("Array length 54266880 exceeds"), "{reason}");
}

#[test]
fn huge_array_counts_are_malformed_for_every_api_and_version() {
    for api in SUPPORTED_APIS {
        for version in api.min_version..=api.max_version {
            let flexible = flexible_header(api.key as i16, version);
            // i32::MAX as an array count (classic int32, or compact varint in flexible
            // versions), at the early positions where each API's first arrays and strings sit.
            let huge: &[u8] = if flexible {
                &[0xff, 0xff, 0xff, 0xff, 0x07]
            } else {
                &[0x7f, 0xff, 0xff, 0xff]
            };
            for padding in [0, 1, 2, 4, 6, 8] {
                let mut body = vec![0; padding];
                body.extend_from_slice(huge);
                // Rejected, or the hostile bytes were not read as a count: what decoded is small.
                if let Ok(decoded) = decode_request(frame(api.key as i16, version, flexible, &body))
                {
                    let size = format!("{decoded:?}").len();
                    assert!(
                        size < 10_000,
                        "{:?} v{version} decoded {body:?} into {size} bytes of request",
                        api.key
                    );
                }
            }
        }
    }
}

#[test]
fn unknown_keys_unsupported_versions_and_short_frames_are_errors_and_api_versions_falls_back() {
    assert_eq!(
        decode_request(Bytes::from_static(b"\x00\x01")).expect_err("short"),
        CodecError::ShortHeader(2)
    );
    assert!(matches!(
        decode_request(frame(999, 0, false, &[])),
        Err(CodecError::UnknownApiKey(999))
    ));
    assert!(matches!(
        decode_request(frame(0, 2, false, &[])),
        Err(CodecError::UnsupportedVersion { .. })
    ));
    assert!(
        matches!(
            decode_request(frame(26, 1, false, &[])),
            Err(CodecError::UnsupportedApi(_))
        ),
        "EndTxn is not implemented yet"
    );
    let fallback = decode_request(frame(18, 99, true, &[])).expect("KIP-511 fallback");
    assert!(matches!(
        fallback,
        Decoded::UnsupportedApiVersions {
            correlation_id: 42,
            api_version: 99
        }
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_request(Bytes::from(bytes));
    }

    #[test]
    fn arbitrary_bodies_behind_valid_headers_never_panic(
        api in 0..SUPPORTED_APIS.len(),
        version_offset in 0i16..20,
        body in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let api = SUPPORTED_APIS[api];
        let version = api.min_version + version_offset % (api.max_version - api.min_version + 1);
        let flexible = flexible_header(api.key as i16, version);
        let _ = decode_request(frame(api.key as i16, version, flexible, &body));
    }
}
