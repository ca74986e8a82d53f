//! The only layer that touches tokio, sockets, files and clocks.

pub mod memory_storage;
pub mod storage;
