//! Raft messages between controllers: one TCP connection per peer, one request at a time, each
//! frame `[u32 length][JSON]`. It runs on the simulated network under madsim (so partitions and
//! clogs cut it like any other link) and on real TCP otherwise. A controller listens for it on
//! its controller listener's port plus one ([`raft_address`]).

use std::io;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::types::MetadataRaft;

/// Frames larger than this are refused (a snapshot chunk is far smaller).
const MAX_FRAME: u32 = 64 << 20;

/// Where a controller whose listener is `host:port` takes Raft messages.
pub(crate) fn raft_address(host: &str, port: u16) -> String {
    format!("{host}:{}", port.wrapping_add(1))
}

#[derive(Debug, Serialize, Deserialize)]
enum RaftRequest {
    AppendEntries(AppendEntriesRequest<MetadataRaft>),
    Vote(VoteRequest<u64>),
    InstallSnapshot(InstallSnapshotRequest<MetadataRaft>),
}

#[derive(Debug, Serialize, Deserialize)]
enum RaftResponse {
    AppendEntries(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    InstallSnapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
}

async fn write_frame<T: Serialize>(stream: &mut TcpStream, message: &T) -> io::Result<()> {
    let payload = serde_json::to_vec(message).map_err(io::Error::other)?;
    let mut frame = Vec::with_capacity(payload.len() + 4);
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&payload);
    stream.write_all(&frame).await?;
    // madsim's stream sends on flush only.
    stream.flush().await
}

async fn read_frame<T: for<'de> Deserialize<'de>>(stream: &mut TcpStream) -> io::Result<T> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await?;
    let size = u32::from_be_bytes(header);
    if size > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("raft frame of {size} bytes (at most {MAX_FRAME})"),
        ));
    }
    let mut payload = vec![0u8; size as usize];
    stream.read_exact(&mut payload).await?;
    serde_json::from_slice(&payload)
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))
}

/// Takes Raft messages for `raft` on `listener` until the process ends.
pub(crate) async fn serve(listener: TcpListener, raft: Raft<MetadataRaft>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let raft = raft.clone();
        tokio::spawn(async move {
            if let Err(error) = serve_connection(stream, raft).await {
                tracing::debug!(%error, "raft connection closed");
            }
        });
    }
}

async fn serve_connection(mut stream: TcpStream, raft: Raft<MetadataRaft>) -> io::Result<()> {
    loop {
        let request: RaftRequest = read_frame(&mut stream).await?;
        let response = match request {
            RaftRequest::AppendEntries(rpc) => {
                RaftResponse::AppendEntries(raft.append_entries(rpc).await)
            }
            RaftRequest::Vote(rpc) => RaftResponse::Vote(raft.vote(rpc).await),
            RaftRequest::InstallSnapshot(rpc) => {
                RaftResponse::InstallSnapshot(raft.install_snapshot(rpc).await)
            }
        };
        write_frame(&mut stream, &response).await?;
    }
}

/// Makes a [`PeerClient`] per peer.
#[derive(Debug, Default)]
pub(crate) struct Network;

impl RaftNetworkFactory<MetadataRaft> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            address: node.addr.clone(),
            stream: tokio::sync::Mutex::new(None),
        }
    }
}

/// The connection to one peer, made again after any failure.
#[derive(Debug)]
pub(crate) struct PeerClient {
    target: u64,
    address: String,
    /// In a mutex only to be `Sync` (madsim's stream is not); calls on a client never overlap.
    stream: tokio::sync::Mutex<Option<TcpStream>>,
}

/// Why a call got no answer.
enum CallError {
    /// Could not connect: back off.
    Unreachable(io::Error),
    /// The connection failed or the answer did not come in time.
    Network(io::Error),
}

impl PeerClient {
    async fn call(
        &mut self,
        request: RaftRequest,
        ttl: Duration,
    ) -> Result<RaftResponse, CallError> {
        let address = self.address.clone();
        let slot = self.stream.get_mut();
        let exchange = async {
            if slot.is_none() {
                let stream = TcpStream::connect(&address)
                    .await
                    .map_err(CallError::Unreachable)?;
                *slot = Some(stream);
            }
            let stream = slot.as_mut().expect("connected above");
            write_frame(stream, &request)
                .await
                .map_err(CallError::Network)?;
            read_frame(stream).await.map_err(CallError::Network)
        };
        let result = match tokio::time::timeout(ttl, exchange).await {
            Ok(result) => result,
            Err(_) => Err(CallError::Network(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer from {} in {ttl:?}", self.address),
            ))),
        };
        if result.is_err() {
            *self.stream.get_mut() = None;
        }
        result
    }

    fn failed<E: std::error::Error>(
        error: CallError,
    ) -> RPCError<u64, BasicNode, RaftError<u64, E>> {
        match error {
            CallError::Unreachable(error) => RPCError::Unreachable(Unreachable::new(&error)),
            CallError::Network(error) => RPCError::Network(NetworkError::new(&error)),
        }
    }

    fn unexpected<E: std::error::Error>(
        &self,
        response: &RaftResponse,
    ) -> RPCError<u64, BasicNode, RaftError<u64, E>> {
        let error = io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected answer from {}: {response:?}", self.address),
        );
        RPCError::Network(NetworkError::new(&error))
    }
}

impl RaftNetwork<MetadataRaft> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<MetadataRaft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let response = self
            .call(RaftRequest::AppendEntries(rpc), option.hard_ttl())
            .await
            .map_err(Self::failed)?;
        match response {
            RaftResponse::AppendEntries(Ok(answer)) => Ok(answer),
            RaftResponse::AppendEntries(Err(error)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, error)))
            }
            other => Err(self.unexpected(&other)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<MetadataRaft>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        let response = self
            .call(RaftRequest::InstallSnapshot(rpc), option.hard_ttl())
            .await
            .map_err(Self::failed)?;
        match response {
            RaftResponse::InstallSnapshot(Ok(answer)) => Ok(answer),
            RaftResponse::InstallSnapshot(Err(error)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, error)))
            }
            other => Err(self.unexpected(&other)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let response = self
            .call(RaftRequest::Vote(rpc), option.hard_ttl())
            .await
            .map_err(Self::failed)?;
        match response {
            RaftResponse::Vote(Ok(answer)) => Ok(answer),
            RaftResponse::Vote(Err(error)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, error)))
            }
            other => Err(self.unexpected(&other)),
        }
    }
}
