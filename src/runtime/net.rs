//! The connection seam (`Conn`): length-prefixed frames in, response chunks out.
//!
//! One request at a time per connection, as Kafka does (its processor mutes a channel until
//! the response is sent), so responses leave in request order. File chunks of a Fetch response
//! go out with `sendfile(2)` in production and are copied in simulation (madsim's TCP has no
//! file descriptors). The optional [`ConnectionFaults`] hook is how the simulator drops a
//! request, drops a response after the broker applied the request (a dropped ack), or resets a
//! connection in the middle of a response frame; production passes `None`.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use crate::protocol::fetch_response::Chunk;
use crate::protocol::frame::{frame_bytes_missing, parse_frame, FrameError, FRAME_PREFIX_BYTES};
use crate::runtime::storage::DurableFile;

/// What the fault hook decides for one request or response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// Deliver normally.
    Pass,
    /// Close the connection instead (for a response: after the broker applied the request).
    Drop,
    /// Write the first half of the response frame, then close (a reset mid-frame).
    Truncate,
    /// Answer the request with this Kafka error without applying it (what a leader change
    /// does to a produce in flight). Only for Produce; other APIs close instead.
    Reject(crate::protocol::ErrorCode),
}

/// Network faults injected per connection (simulation only).
pub trait ConnectionFaults: Send + Sync {
    /// Called for each decoded request before the broker sees it.
    fn on_request(&self, api_key: ApiKey) -> FaultAction;
    /// Called for each response after the broker produced it.
    fn on_response(&self, api_key: ApiKey) -> FaultAction;
}

/// Why a connection ended abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The socket failed.
    #[error("io: {0}")]
    Io(#[from] io::Error),
    /// The peer sent an invalid frame.
    #[error("bad frame: {0}")]
    Frame(#[from] FrameError),
    /// The peer closed in the middle of a frame.
    #[error("connection closed mid-frame with {0} bytes buffered")]
    ClosedMidFrame(usize),
}

/// A framed TCP connection.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    buffer: BytesMut,
    limits: ReadLimits,
    /// Bytes of `memory` this connection holds: its buffer's unread bytes and the frame it
    /// handed out last (until the next read: one request at a time per connection).
    held: usize,
    /// Of `held`, the bytes of the frame handed out last.
    handed_out: usize,
}

/// Bounds on how a connection reads.
#[derive(Debug, Clone, Default)]
pub struct ReadLimits {
    /// Request bytes buffered across every connection sharing it (`queued.max.request.bytes`):
    /// a read waits for room before it takes bytes off the socket. `None`: no bound.
    pub memory: Option<Arc<Semaphore>>,
    /// Close the connection when no byte arrives for this long (`connections.max.idle.ms`).
    pub idle: Option<Duration>,
}

/// The error text of a read that waited longer than [`ReadLimits::idle`].
const IDLE_MESSAGE: &str = "idle for connections.max.idle.ms";

const READ_CHUNK_BYTES: usize = 64 * 1024;

impl Connection {
    /// Wraps a connected stream.
    pub fn new(stream: TcpStream) -> Connection {
        Connection::with_limits(stream, ReadLimits::default())
    }

    /// Wraps a connected stream whose reads obey `limits`.
    pub fn with_limits(stream: TcpStream, limits: ReadLimits) -> Connection {
        Connection {
            stream,
            buffer: BytesMut::with_capacity(READ_CHUNK_BYTES),
            limits,
            held: 0,
            handed_out: 0,
        }
    }

    /// Reads the next frame payload. `Ok(None)` on a clean close between frames. Cancel-safe:
    /// bytes already read stay buffered.
    ///
    /// The buffer grows as bytes arrive, never by the size a prefix announces, so a peer that
    /// announces a large frame and sends nothing costs one read chunk. Reading the next frame
    /// means the previous one is answered: its bytes go back to the shared memory.
    pub async fn read_frame(&mut self, max_bytes: usize) -> Result<Option<Bytes>, ConnectionError> {
        let done = std::mem::take(&mut self.handed_out);
        self.give_back(done);
        loop {
            if let Some(frame) = parse_frame(&mut self.buffer, max_bytes)? {
                self.handed_out = frame.len() + FRAME_PREFIX_BYTES;
                return Ok(Some(frame));
            }
            let want = self.make_room();
            let read = self.read_some(want).await?;
            if read == 0 {
                return self.closed();
            }
        }
    }

    /// [`read_frame`](Self::read_frame) as a poll, for a connection without [`ReadLimits`] (a
    /// client's): a client waiting on several connections polls each in place instead of
    /// building a future per connection for every wait. Cancel-safe in the same way.
    pub fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
        max_bytes: usize,
    ) -> Poll<Result<Option<Bytes>, ConnectionError>> {
        debug_assert!(
            self.limits.memory.is_none() && self.limits.idle.is_none(),
            "poll_frame reads without limits"
        );
        loop {
            if let Some(frame) = parse_frame(&mut self.buffer, max_bytes)? {
                return Poll::Ready(Ok(Some(frame)));
            }
            let want = self.make_room();
            let mut limited = (&mut self.buffer).limit(want);
            let read = std::pin::pin!(self.stream.read_buf(&mut limited));
            match read.poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error.into())),
                Poll::Ready(Ok(0)) => return Poll::Ready(self.closed()),
                Poll::Ready(Ok(_)) => {}
            }
        }
    }

    /// How many bytes the next read may take (the rest of the frame being read, at most a read
    /// chunk or the bytes already buffered), with room reserved for them.
    fn make_room(&mut self) -> usize {
        let missing = frame_bytes_missing(&self.buffer);
        let want = if missing == 0 {
            READ_CHUNK_BYTES
        } else {
            missing.min(READ_CHUNK_BYTES.max(self.buffer.len()))
        };
        if self.buffer.capacity() - self.buffer.len() < want {
            self.buffer.reserve(want);
        }
        want
    }

    /// What a read of 0 bytes (the peer closed) means: a clean close between frames, or one
    /// in the middle of a frame.
    fn closed(&self) -> Result<Option<Bytes>, ConnectionError> {
        if self.buffer.is_empty() {
            Ok(None)
        } else {
            Err(ConnectionError::ClosedMidFrame(self.buffer.len()))
        }
    }

    /// Reads at most `want` bytes into the buffer, first taking room for them from the shared
    /// memory (waiting for it: back-pressure), and giving back what the read did not use.
    /// Permits a cancelled read took stay held and count towards the next read.
    async fn read_some(&mut self, want: usize) -> Result<usize, ConnectionError> {
        if let Some(memory) = &self.limits.memory {
            let spare = self.held - (self.buffer.len() + self.handed_out);
            let permits = u32::try_from(want.saturating_sub(spare)).unwrap_or(u32::MAX);
            memory
                .acquire_many(permits)
                .await
                .map_err(|_| io::Error::other("request memory closed"))?
                .forget();
            self.held += permits as usize;
        }
        let mut limited = (&mut self.buffer).limit(want);
        let read = match self.limits.idle {
            Some(idle) => tokio::time::timeout(idle, self.stream.read_buf(&mut limited))
                .await
                .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, IDLE_MESSAGE))),
            None => self.stream.read_buf(&mut limited).await,
        };
        if self.limits.memory.is_some() {
            let unused = self.held - (self.buffer.len() + self.handed_out);
            self.give_back(unused);
        }
        Ok(read?)
    }

    fn give_back(&mut self, bytes: usize) {
        if let Some(memory) = &self.limits.memory {
            let bytes = bytes.min(self.held);
            self.held -= bytes;
            memory.add_permits(bytes);
        }
    }

    /// Writes one whole frame and flushes it.
    pub async fn write_frame(&mut self, frame: &[u8]) -> io::Result<()> {
        self.stream.write_all(frame).await?;
        self.stream.flush().await
    }

    /// Writes a response made of chunks: bytes directly, file ranges with sendfile (production)
    /// or by copying (simulation). Then flushes (madsim delivers only on flush).
    ///
    /// In production a response that mixes byte chunks and file ranges is written corked
    /// (`TCP_CORK`): the small partition headers between the sendfile ranges then share full
    /// segments with the records instead of leaving as segments of their own (with
    /// `TCP_NODELAY` each would wake the reader for a few dozen bytes). Uncorking sends the rest.
    pub async fn write_chunks<F: DurableFile>(&mut self, chunks: &[Chunk<F>]) -> io::Result<()> {
        #[cfg(not(madsim))]
        if chunks.len() > 1 && chunks.iter().any(|c| matches!(c, Chunk::File { .. })) {
            // Best effort: a socket that refuses the option is written uncorked.
            let corked = rustix::net::sockopt::set_tcp_cork(&self.stream, true).is_ok();
            let written = self.write_chunks_plain(chunks).await;
            if corked {
                rustix::net::sockopt::set_tcp_cork(&self.stream, false)?;
            }
            return written;
        }
        self.write_chunks_plain(chunks).await
    }

    async fn write_chunks_plain<F: DurableFile>(&mut self, chunks: &[Chunk<F>]) -> io::Result<()> {
        for chunk in chunks {
            match chunk {
                Chunk::Bytes(bytes) => self.stream.write_all(bytes).await?,
                Chunk::File {
                    file,
                    position,
                    len,
                } => self.send_file(file, *position, *len).await?,
            }
        }
        self.stream.flush().await
    }

    /// Writes the first `len` bytes of a response, flushes, and gives up (fault injection).
    pub async fn write_truncated<F: DurableFile>(&mut self, chunks: &[Chunk<F>]) -> io::Result<()> {
        let total: usize = chunks.iter().map(Chunk::len).sum();
        let mut remaining = total / 2;
        for chunk in chunks {
            if remaining == 0 {
                break;
            }
            let bytes = chunk_bytes(chunk)?;
            let take = remaining.min(bytes.len());
            self.stream.write_all(&bytes[..take]).await?;
            remaining -= take;
        }
        self.stream.flush().await
    }

    async fn send_file<F: DurableFile>(
        &mut self,
        file: &F,
        position: u64,
        len: u64,
    ) -> io::Result<()> {
        #[cfg(not(madsim))]
        if let Some(os_file) = file.os_file() {
            return sendfile_all(&self.stream, os_file, position, len).await;
        }
        let mut buffer = vec![0; READ_CHUNK_BYTES.min(len as usize)];
        let mut done = 0;
        while done < len {
            let take = (len - done).min(buffer.len() as u64) as usize;
            file.read_exact_at(&mut buffer[..take], position + done)?;
            self.stream.write_all(&buffer[..take]).await?;
            done += take as u64;
        }
        Ok(())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let held = self.held;
        self.give_back(held);
    }
}

fn chunk_bytes<F: DurableFile>(chunk: &Chunk<F>) -> io::Result<Bytes> {
    match chunk {
        Chunk::Bytes(bytes) => Ok(bytes.clone()),
        Chunk::File {
            file,
            position,
            len,
        } => {
            let mut buffer = vec![0; *len as usize];
            file.read_exact_at(&mut buffer, *position)?;
            Ok(buffer.into())
        }
    }
}

/// `sendfile(2)` the whole range from `file` to the socket, waiting for writability.
#[cfg(not(madsim))]
async fn sendfile_all(
    stream: &TcpStream,
    file: &std::fs::File,
    mut position: u64,
    len: u64,
) -> io::Result<()> {
    let end = position + len;
    while position < end {
        stream.writable().await?;
        let remaining = (end - position) as usize;
        let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
            rustix::fs::sendfile(stream, file, Some(&mut position), remaining)
                .map_err(io::Error::from)
        });
        match sent {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "segment file shorter than the fetch range",
                ))
            }
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}
