//! Size-prefixed frames: `length i32 | payload`. Incomplete input is `Ok(None)`, never an error.

use bytes::{Buf, Bytes, BytesMut};

/// Bytes of the size prefix.
pub const FRAME_PREFIX_BYTES: usize = 4;

/// A frame that can never be valid: the connection must be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The size prefix is negative.
    #[error("negative frame size {0}")]
    NegativeSize(i32),
    /// The size prefix exceeds the limit (`socket.request.max.bytes` on the broker).
    #[error("frame of {size} bytes exceeds the limit of {max_bytes} bytes")]
    TooLarge {
        /// Announced size.
        size: usize,
        /// The limit.
        max_bytes: usize,
    },
}

/// Takes one complete frame payload off the front of `buffer`, if there is one.
///
/// The size is checked as soon as the 4-byte prefix is in, so an oversized frame is rejected
/// before any of its body is buffered. Nothing is reserved for the announced size: the caller
/// grows the buffer as bytes arrive ([`frame_bytes_missing`] tells how many are still due).
pub fn parse_frame(buffer: &mut BytesMut, max_bytes: usize) -> Result<Option<Bytes>, FrameError> {
    if buffer.len() < FRAME_PREFIX_BYTES {
        return Ok(None);
    }
    let size = i32::from_be_bytes(buffer[..FRAME_PREFIX_BYTES].try_into().expect("4 bytes"));
    let size = usize::try_from(size).map_err(|_| FrameError::NegativeSize(size))?;
    if size > max_bytes {
        return Err(FrameError::TooLarge { size, max_bytes });
    }
    if buffer.len() < FRAME_PREFIX_BYTES + size {
        return Ok(None);
    }
    buffer.advance(FRAME_PREFIX_BYTES);
    Ok(Some(buffer.split_to(size).freeze()))
}

/// Bytes still due before the frame at the front of `buffer` is whole (0 without a prefix yet).
pub fn frame_bytes_missing(buffer: &[u8]) -> usize {
    if buffer.len() < FRAME_PREFIX_BYTES {
        return 0;
    }
    let size = i32::from_be_bytes(buffer[..FRAME_PREFIX_BYTES].try_into().expect("4 bytes"));
    usize::try_from(size)
        .unwrap_or(0)
        .saturating_add(FRAME_PREFIX_BYTES)
        .saturating_sub(buffer.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_out_whole_and_in_order() {
        let mut buffer = BytesMut::new();
        assert_eq!(parse_frame(&mut buffer, 100), Ok(None));
        buffer.extend_from_slice(&[0, 0, 0, 3, b'a', b'b']);
        assert_eq!(parse_frame(&mut buffer, 100), Ok(None));
        buffer.extend_from_slice(&[b'c', 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            parse_frame(&mut buffer, 100),
            Ok(Some(Bytes::from_static(b"abc")))
        );
        assert_eq!(parse_frame(&mut buffer, 100), Ok(Some(Bytes::new())));
        assert_eq!(parse_frame(&mut buffer, 100), Ok(None));
        assert_eq!(buffer.len(), 2);
    }

    #[test]
    fn an_announced_size_reserves_nothing() {
        let mut buffer = BytesMut::from(&[0x06, 0x40, 0, 0, 1, 2][..]);
        assert_eq!(parse_frame(&mut buffer, 200 << 20), Ok(None));
        assert!(buffer.capacity() < 4096, "{} reserved", buffer.capacity());
        assert_eq!(frame_bytes_missing(&buffer), (100 << 20) - 2);
        assert_eq!(frame_bytes_missing(&[0, 0]), 0);
    }

    #[test]
    fn oversized_and_negative_frames_are_rejected_from_the_prefix_alone() {
        let mut buffer = BytesMut::from(&[0x7f, 0xff, 0xff, 0xff][..]);
        assert_eq!(
            parse_frame(&mut buffer, 1024),
            Err(FrameError::TooLarge {
                size: 0x7fff_ffff,
                max_bytes: 1024
            })
        );
        let mut buffer = BytesMut::from(&[0xff, 0xff, 0xff, 0xfe][..]);
        assert_eq!(
            parse_frame(&mut buffer, 1024),
            Err(FrameError::NegativeSize(-2))
        );
    }
}
