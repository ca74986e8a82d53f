//! The Fetch response, encoded by hand into [`Chunk`]s so that record bytes can go from the
//! segment file to the socket with `sendfile(2)` instead of through a buffer.
//!
//! `records` is the last field of a partition (only tagged fields follow), so a response is a
//! sequence of small encoded pieces with file ranges in between. The encoding is proven
//! byte-identical to `kafka-protocol`'s for every supported version in the tests below.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use uuid::Uuid;

use super::codec::{encode_response_header, finish_frame, start_frame};

/// Where a partition's record bytes come from.
#[derive(Debug, Clone)]
pub enum RecordsSource<F> {
    /// No records (an empty, non-null records field).
    Empty,
    /// Bytes already in memory.
    Bytes(Bytes),
    /// `len` bytes of `file` starting at `position`: sent with sendfile in production.
    File {
        /// The segment file.
        file: F,
        /// Byte position in the file.
        position: u64,
        /// Number of bytes.
        len: u64,
    },
}

impl<F> RecordsSource<F> {
    fn len(&self) -> usize {
        match self {
            RecordsSource::Empty => 0,
            RecordsSource::Bytes(bytes) => bytes.len(),
            RecordsSource::File { len, .. } => *len as usize,
        }
    }
}

/// One partition of a Fetch response.
#[derive(Debug, Clone)]
#[allow(missing_docs)] // Kafka's field names
pub struct FetchPartitionResponse<F> {
    pub partition_index: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// KIP-320/595 (v12+, a tagged field): the follower's log diverges from the leader's; its
    /// last fetched epoch ends at this `(epoch, end_offset)` here.
    pub diverging_epoch: Option<(i32, i64)>,
    /// KIP-630 (v12+, tagged field 2): the fetch offset lies below the log start of a KRaft
    /// log; fetch this snapshot `(end_offset, epoch)` instead.
    pub snapshot_id: Option<(i64, i32)>,
    pub records: RecordsSource<F>,
}

/// One topic of a Fetch response.
#[derive(Debug, Clone)]
pub struct FetchTopicResponse<F> {
    /// Topic name (v4–v12).
    pub topic: String,
    /// Topic id (v13+).
    pub topic_id: Uuid,
    /// Partitions in request order.
    pub partitions: Vec<FetchPartitionResponse<F>>,
}

/// A whole Fetch response body.
#[derive(Debug, Clone)]
pub struct FetchResponseParts<F> {
    /// Top-level error (v7+), 0 when per-partition errors apply.
    pub error_code: i16,
    /// Fetch session id (v7+); seedlog is sessionless and answers 0.
    pub session_id: i32,
    /// Topics in request order.
    pub topics: Vec<FetchTopicResponse<F>>,
}

impl<F> FetchResponseParts<F> {
    /// Record bytes per topic (what Kafka's BytesOutPerSec counts), in response order.
    pub fn record_bytes_by_topic(&self) -> impl Iterator<Item = (&str, u64)> {
        self.topics.iter().map(|topic| {
            let bytes = topic
                .partitions
                .iter()
                .map(|partition| partition.records.len() as u64)
                .sum();
            (topic.topic.as_str(), bytes)
        })
    }
}

/// A piece of an encoded frame.
#[derive(Debug, Clone)]
pub enum Chunk<F> {
    /// Encoded bytes.
    Bytes(Bytes),
    /// A file range, written with sendfile in production and copied in simulation.
    File {
        /// The file.
        file: F,
        /// Byte position.
        position: u64,
        /// Length.
        len: u64,
    },
}

impl<F> Chunk<F> {
    /// Bytes this chunk puts on the wire.
    pub fn len(&self) -> usize {
        match self {
            Chunk::Bytes(bytes) => bytes.len(),
            Chunk::File { len, .. } => *len as usize,
        }
    }

    /// Whether the chunk is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

const FLEXIBLE_FROM: i16 = 12;
const TOPIC_IDS_FROM: i16 = 13;

fn put_unsigned_varint(buf: &mut BytesMut, mut value: u32) {
    while value >= 0x80 {
        buf.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

fn put_array_len(buf: &mut BytesMut, len: usize, flexible: bool) {
    if flexible {
        put_unsigned_varint(buf, len as u32 + 1);
    } else {
        buf.put_i32(len as i32);
    }
}

impl<F: Clone> FetchResponseParts<F> {
    /// Encodes the whole frame (size prefix, response header, body) for `api_version`.
    pub fn encode(&self, api_version: i16, correlation_id: i32) -> Vec<Chunk<F>> {
        assert!(
            (4..=16).contains(&api_version),
            "Fetch v{api_version} is not supported"
        );
        let mut encoder = Encoder {
            buf: start_frame(64),
            chunks: Vec::new(),
            api_version,
            flexible: api_version >= FLEXIBLE_FROM,
        };
        encode_response_header(&mut encoder.buf, ApiKey::Fetch, api_version, correlation_id);
        encoder.buf.put_i32(0); // throttle_time_ms
        if api_version >= 7 {
            encoder.buf.put_i16(self.error_code);
            encoder.buf.put_i32(self.session_id);
        }
        put_array_len(&mut encoder.buf, self.topics.len(), encoder.flexible);
        for topic in &self.topics {
            encoder.topic(topic);
        }
        encoder.tags(); // response tagged fields (no node_endpoints)
        encoder.finish()
    }
}

/// Writes the body into bytes and file chunks.
struct Encoder<F> {
    buf: BytesMut,
    chunks: Vec<Chunk<F>>,
    api_version: i16,
    flexible: bool,
}

impl<F: Clone> Encoder<F> {
    /// An empty tagged-field buffer (flexible versions only).
    fn tags(&mut self) {
        if self.flexible {
            self.buf.put_u8(0);
        }
    }

    fn topic(&mut self, topic: &FetchTopicResponse<F>) {
        if self.api_version >= TOPIC_IDS_FROM {
            self.buf.put_slice(topic.topic_id.as_bytes());
        } else if self.flexible {
            put_unsigned_varint(&mut self.buf, topic.topic.len() as u32 + 1);
            self.buf.put_slice(topic.topic.as_bytes());
        } else {
            self.buf.put_i16(topic.topic.len() as i16);
            self.buf.put_slice(topic.topic.as_bytes());
        }
        put_array_len(&mut self.buf, topic.partitions.len(), self.flexible);
        for partition in &topic.partitions {
            self.partition(partition);
        }
        self.tags();
    }

    fn partition(&mut self, partition: &FetchPartitionResponse<F>) {
        let buf = &mut self.buf;
        buf.put_i32(partition.partition_index);
        buf.put_i16(partition.error_code);
        buf.put_i64(partition.high_watermark);
        buf.put_i64(partition.last_stable_offset);
        if self.api_version >= 5 {
            buf.put_i64(partition.log_start_offset);
        }
        // aborted_transactions: null, as Kafka sends for read_uncommitted.
        if self.flexible {
            put_unsigned_varint(buf, 0);
        } else {
            buf.put_i32(-1);
        }
        if self.api_version >= 11 {
            buf.put_i32(-1); // preferred_read_replica
        }
        let records_len = partition.records.len();
        if self.flexible {
            put_unsigned_varint(buf, records_len as u32 + 1);
        } else {
            buf.put_i32(records_len as i32);
        }
        match &partition.records {
            RecordsSource::Empty => {}
            RecordsSource::Bytes(bytes) => buf.put_slice(bytes),
            RecordsSource::File {
                file,
                position,
                len,
            } => {
                let head = std::mem::take(buf).freeze();
                self.chunks.push(Chunk::Bytes(head));
                self.chunks.push(Chunk::File {
                    file: file.clone(),
                    position: *position,
                    len: *len,
                });
            }
        }
        if !self.flexible {
            return;
        }
        let buf = &mut self.buf;
        let count = u32::from(partition.diverging_epoch.is_some())
            + u32::from(partition.snapshot_id.is_some());
        put_unsigned_varint(buf, count);
        if let Some((epoch, end_offset)) = partition.diverging_epoch {
            // Tag 0: EpochEndOffset { epoch, end_offset, no tags }.
            put_unsigned_varint(buf, 0);
            put_unsigned_varint(buf, 13);
            buf.put_i32(epoch);
            buf.put_i64(end_offset);
            buf.put_u8(0);
        }
        if let Some((end_offset, epoch)) = partition.snapshot_id {
            // Tag 2: SnapshotId { end_offset, epoch, no tags }.
            put_unsigned_varint(buf, 2);
            put_unsigned_varint(buf, 13);
            buf.put_i64(end_offset);
            buf.put_i32(epoch);
            buf.put_u8(0);
        }
    }

    /// Closes the last bytes chunk and writes the size prefix.
    fn finish(mut self) -> Vec<Chunk<F>> {
        self.chunks.push(Chunk::Bytes(self.buf.freeze()));
        let total: usize = self.chunks.iter().map(Chunk::len).sum();
        let Chunk::Bytes(first) = &mut self.chunks[0] else {
            unreachable!("the frame starts with bytes")
        };
        let head = BytesMut::from(&first[..]);
        let trailing = total - head.len();
        *first = finish_frame(head, trailing).freeze();
        self.chunks
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::{FetchResponse, ResponseKind, TopicName};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::protocol::codec::encode_response;

    /// A "file" for the test: the bytes themselves.
    type TestFile = Bytes;

    fn flatten(chunks: &[Chunk<TestFile>]) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in chunks {
            match chunk {
                Chunk::Bytes(bytes) => out.extend_from_slice(bytes),
                Chunk::File {
                    file,
                    position,
                    len,
                } => {
                    out.extend_from_slice(&file[*position as usize..(*position + *len) as usize]);
                }
            }
        }
        out
    }

    fn ours(file: &Bytes, topic_id: Uuid) -> FetchResponseParts<TestFile> {
        let partition = |index, error, hw: i64, start: i64, records| FetchPartitionResponse {
            diverging_epoch: None,
            snapshot_id: None,
            partition_index: index,
            error_code: error,
            high_watermark: hw,
            last_stable_offset: hw,
            log_start_offset: start,
            records,
        };
        FetchResponseParts {
            error_code: 0,
            session_id: 0,
            topics: vec![FetchTopicResponse {
                topic: "orders".to_owned(),
                topic_id,
                partitions: vec![
                    partition(
                        0,
                        0,
                        10,
                        0,
                        RecordsSource::File {
                            file: file.clone(),
                            position: 4,
                            len: 16,
                        },
                    ),
                    partition(2, 1, -1, -1, RecordsSource::Empty),
                    partition(1, 0, 3, 1, RecordsSource::Bytes(Bytes::from_static(b"xyz"))),
                ],
            }],
        }
    }

    fn theirs(version: i16, topic_id: Uuid) -> FetchResponse {
        let partition = |index, error, hw, start, records: &[u8]| {
            PartitionData::default()
                .with_partition_index(index)
                .with_error_code(error)
                .with_high_watermark(hw)
                .with_last_stable_offset(hw)
                .with_log_start_offset(start)
                .with_aborted_transactions(None)
                .with_records(Some(Bytes::copy_from_slice(records)))
        };
        let mut topic = FetchableTopicResponse::default().with_partitions(vec![
            partition(0, 0, 10, 0, b"0123456789abcdef"),
            partition(2, 1, -1, -1, b""),
            partition(1, 0, 3, 1, b"xyz"),
        ]);
        if version >= TOPIC_IDS_FROM {
            topic = topic.with_topic_id(topic_id);
        } else {
            topic = topic.with_topic(TopicName(StrBytes::from_static_str("orders")));
        }
        FetchResponse::default().with_responses(vec![topic])
    }

    #[test]
    fn hand_encoding_is_byte_identical_to_kafka_protocol_for_every_version() {
        let file = Bytes::from_static(b"....0123456789abcdef....");
        let topic_id = Uuid::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788);
        for version in 4..=16 {
            let expected = encode_response(
                ApiKey::Fetch,
                version,
                77,
                &ResponseKind::Fetch(theirs(version, topic_id)),
            )
            .expect("encodes");
            let chunks = ours(&file, topic_id).encode(version, 77);
            assert_eq!(flatten(&chunks), expected.to_vec(), "Fetch v{version}");
            if version < 12 {
                continue;
            }
            // The tagged fields, alone and together.
            let mut tagged = theirs(version, topic_id);
            let parts = &mut tagged.responses[0].partitions;
            parts[0].snapshot_id.end_offset = 40;
            parts[0].snapshot_id.epoch = 3;
            parts[0].diverging_epoch.epoch = 2;
            parts[0].diverging_epoch.end_offset = 9;
            parts[1].snapshot_id.end_offset = 7;
            parts[1].snapshot_id.epoch = 1;
            let expected =
                encode_response(ApiKey::Fetch, version, 77, &ResponseKind::Fetch(tagged))
                    .expect("encodes");
            let mut mine = ours(&file, topic_id);
            mine.topics[0].partitions[0].snapshot_id = Some((40, 3));
            mine.topics[0].partitions[0].diverging_epoch = Some((2, 9));
            mine.topics[0].partitions[1].snapshot_id = Some((7, 1));
            let chunks = mine.encode(version, 77);
            assert_eq!(flatten(&chunks), expected.to_vec(), "Fetch v{version}");
            assert!(chunks
                .iter()
                .any(|chunk| matches!(chunk, Chunk::File { .. })));
        }
    }
}
