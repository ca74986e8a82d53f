//! Kafka's compression codecs for the records of a RecordBatch v2 (attributes bits 0–2):
//! `compression.type` none (0), gzip (1), snappy (2), lz4 (3), zstd (4).
//!
//! What each codec's bytes are, as Kafka's Java client writes them
//! (`org.apache.kafka.common.compress`):
//! * gzip: one gzip stream (`GZIPOutputStream`);
//! * snappy: xerial's snappy-java framing (`SnappyOutputStream`): a 16-byte header (magic
//!   `\x82SNAPPY\0`, version 1, compatible version 1), then chunks of a big-endian length and a
//!   raw snappy block of at most 32 KiB. librdkafka writes one raw snappy block instead, which
//!   Kafka's reader accepts too (xerial's `SnappyInputStream` falls back to raw without the
//!   magic), so decompression takes both;
//! * lz4: the LZ4 frame format (`Lz4BlockOutputStream`: 64 KiB independent blocks, no block or
//!   content checksum, no content size);
//! * zstd: one zstd frame.
//!
//! Decompression stops at [`DECOMPRESSED_MAX`] bytes, so a small hostile batch cannot make the
//! broker or a consumer allocate without bound.

use std::io::{Read, Write};

/// The most bytes one batch's records may decompress to (a batch is at most `message.max.bytes`
/// compressed; Kafka sets no such bound, seedlog does against decompression bombs).
pub const DECOMPRESSED_MAX: usize = 256 * 1024 * 1024;

/// xerial snappy-java's stream header magic.
const SNAPPY_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// The header: magic, version 1, compatible version 1.
const SNAPPY_HEADER_BYTES: usize = 16;
/// `SnappyOutputStream`'s default block size.
const SNAPPY_BLOCK_BYTES: usize = 32 * 1024;

/// A compression codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// 0.
    None,
    /// 1.
    Gzip,
    /// 2.
    Snappy,
    /// 3.
    Lz4,
    /// 4.
    Zstd,
}

/// A compression or decompression failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompressionError {
    /// Attributes bits 0–2 hold 5, 6 or 7.
    #[error("Unknown compression type id: {0}")]
    UnknownCodec(i16),
    /// The bytes are not a valid stream of the codec.
    #[error("{codec:?} data is corrupt: {reason}")]
    Corrupt {
        /// The codec.
        codec: Codec,
        /// What the decoder said.
        reason: String,
    },
    /// The records would decompress past [`DECOMPRESSED_MAX`].
    #[error("{0:?} records decompress to more than {DECOMPRESSED_MAX} bytes")]
    TooLarge(Codec),
}

impl Codec {
    /// The codec of attributes bits 0–2 (Kafka's `CompressionType.forId`).
    pub fn from_id(id: i16) -> Result<Codec, CompressionError> {
        match id {
            0 => Ok(Codec::None),
            1 => Ok(Codec::Gzip),
            2 => Ok(Codec::Snappy),
            3 => Ok(Codec::Lz4),
            4 => Ok(Codec::Zstd),
            other => Err(CompressionError::UnknownCodec(other)),
        }
    }

    /// The id in attributes bits 0–2.
    pub fn id(self) -> i16 {
        match self {
            Codec::None => 0,
            Codec::Gzip => 1,
            Codec::Snappy => 2,
            Codec::Lz4 => 3,
            Codec::Zstd => 4,
        }
    }

    /// The codec named as `compression.type` spells it (`none`, `gzip`, `snappy`, `lz4`,
    /// `zstd`).
    pub fn from_name(name: &str) -> Option<Codec> {
        match name {
            "none" => Some(Codec::None),
            "gzip" => Some(Codec::Gzip),
            "snappy" => Some(Codec::Snappy),
            "lz4" => Some(Codec::Lz4),
            "zstd" => Some(Codec::Zstd),
            _ => None,
        }
    }

    /// The `compression.type` name.
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }

    fn corrupt(self, reason: impl std::fmt::Display) -> CompressionError {
        CompressionError::Corrupt {
            codec: self,
            reason: reason.to_string(),
        }
    }
}

/// `records` compressed with `codec`, as Kafka's Java client writes them.
pub fn compress(codec: Codec, records: &[u8]) -> Vec<u8> {
    let io = "compressing into memory cannot fail";
    match codec {
        Codec::None => records.to_vec(),
        Codec::Gzip => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(records).expect(io);
            encoder.finish().expect(io)
        }
        Codec::Snappy => {
            let mut out = Vec::with_capacity(SNAPPY_HEADER_BYTES + records.len() / 2);
            out.extend_from_slice(&SNAPPY_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut encoder = snap::raw::Encoder::new();
            for block in records.chunks(SNAPPY_BLOCK_BYTES) {
                let compressed = encoder.compress_vec(block).expect(io);
                out.extend_from_slice(&(compressed.len() as i32).to_be_bytes());
                out.extend_from_slice(&compressed);
            }
            out
        }
        Codec::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            encoder.write_all(records).expect(io);
            encoder.finish().expect(io)
        }
        Codec::Zstd => zstd::bulk::compress(records, 3).expect(io),
    }
}

/// Reads `reader` to its end, failing past [`DECOMPRESSED_MAX`].
fn read_bounded(codec: Codec, reader: impl Read) -> Result<Vec<u8>, CompressionError> {
    let mut out = Vec::new();
    reader
        .take(DECOMPRESSED_MAX as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|error| codec.corrupt(error))?;
    if out.len() > DECOMPRESSED_MAX {
        return Err(CompressionError::TooLarge(codec));
    }
    Ok(out)
}

/// The records `compressed` holds.
pub fn decompress(codec: Codec, compressed: &[u8]) -> Result<Vec<u8>, CompressionError> {
    match codec {
        Codec::None => Ok(compressed.to_vec()),
        Codec::Gzip => read_bounded(codec, flate2::read::GzDecoder::new(compressed)),
        Codec::Snappy => decompress_snappy(compressed),
        Codec::Lz4 => read_bounded(codec, lz4_flex::frame::FrameDecoder::new(compressed)),
        Codec::Zstd => {
            let decoder = zstd::stream::read::Decoder::new(compressed)
                .map_err(|error| codec.corrupt(error))?;
            read_bounded(codec, decoder)
        }
    }
}

/// xerial's framing when the magic is there, one raw block otherwise.
fn decompress_snappy(compressed: &[u8]) -> Result<Vec<u8>, CompressionError> {
    let codec = Codec::Snappy;
    let mut decoder = snap::raw::Decoder::new();
    let mut raw = |block: &[u8], out: &mut Vec<u8>| -> Result<(), CompressionError> {
        let length = snap::raw::decompress_len(block).map_err(|error| codec.corrupt(error))?;
        if out.len() + length > DECOMPRESSED_MAX {
            return Err(CompressionError::TooLarge(codec));
        }
        let start = out.len();
        out.resize(start + length, 0);
        decoder
            .decompress(block, &mut out[start..])
            .map_err(|error| codec.corrupt(error))?;
        Ok(())
    };
    let mut out = Vec::new();
    if !compressed.starts_with(&SNAPPY_MAGIC) {
        raw(compressed, &mut out)?;
        return Ok(out);
    }
    let mut rest = compressed
        .get(SNAPPY_HEADER_BYTES..)
        .ok_or_else(|| codec.corrupt("a truncated snappy-java header"))?;
    while !rest.is_empty() {
        let (length, after) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| codec.corrupt("a truncated chunk length"))?;
        let length = usize::try_from(i32::from_be_bytes(*length))
            .map_err(|_| codec.corrupt("a negative chunk length"))?;
        let block = after
            .get(..length)
            .ok_or_else(|| codec.corrupt("a chunk past the end of the data"))?;
        raw(block, &mut out)?;
        rest = &after[length..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Codec; 5] = [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ];

    fn sample() -> Vec<u8> {
        (0..100_000u32)
            .flat_map(|n| (n % 251).to_le_bytes())
            .collect()
    }

    #[test]
    fn every_codec_round_trips_and_names_itself() {
        for codec in ALL {
            let records = sample();
            let compressed = compress(codec, &records);
            assert_eq!(
                decompress(codec, &compressed).expect("valid"),
                records,
                "{codec:?}"
            );
            assert_eq!(Codec::from_id(codec.id()), Ok(codec));
            assert_eq!(Codec::from_name(codec.name()), Some(codec));
        }
        assert!(compress(Codec::Zstd, &sample()).len() < sample().len() / 4);
        assert_eq!(Codec::from_id(7), Err(CompressionError::UnknownCodec(7)));
    }

    #[test]
    fn snappy_is_written_with_xerials_framing_and_read_raw_too() {
        let records = sample();
        let framed = compress(Codec::Snappy, &records);
        assert!(framed.starts_with(&SNAPPY_MAGIC));
        assert_eq!(&framed[8..16], &[0, 0, 0, 1, 0, 0, 0, 1]);
        let raw = snap::raw::Encoder::new()
            .compress_vec(&records)
            .expect("raw");
        assert_eq!(decompress(Codec::Snappy, &raw).expect("raw block"), records);
    }

    #[test]
    fn corrupt_data_is_an_error_never_a_panic() {
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let mut compressed = compress(codec, &sample());
            let middle = compressed.len() / 2;
            compressed.truncate(middle);
            assert!(
                decompress(codec, &compressed).is_err(),
                "{codec:?} truncated"
            );
            assert!(
                decompress(codec, b"\x00\x01garbage").is_err(),
                "{codec:?} garbage"
            );
        }
    }

    #[test]
    fn a_decompression_bomb_stops_at_the_bound() {
        let zeros = vec![0u8; DECOMPRESSED_MAX + 1];
        let bomb = compress(Codec::Zstd, &zeros);
        assert!(bomb.len() < 1 << 20);
        assert_eq!(
            decompress(Codec::Zstd, &bomb),
            Err(CompressionError::TooLarge(Codec::Zstd))
        );
    }
}
