//! The only layer that touches tokio, sockets, files and clocks.

pub mod admin;
pub mod client;
pub mod clock;
pub mod consumer;
mod driver;
pub mod group;
pub mod metrics;
pub mod net;
mod peers;
pub mod producer;
pub mod quorum;
pub mod server;
pub mod storage;
