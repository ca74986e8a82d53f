//! seedlog's deterministic simulator: scenario files, the seed harness (madsim runtime plus a
//! disk plugin), scripted faults, the operation history, and the checkers.
//!
//! Everything that drives madsim is compiled only under `--cfg madsim` (`cargo sim ...`); the
//! scenario loader, history and checkers are plain code and are tested in both worlds.

pub mod checker;
#[cfg(madsim)]
pub mod clock;
pub mod cluster_monitor;
#[cfg(madsim)]
pub mod connection_faults;
#[cfg(madsim)]
pub mod disk;
pub mod explore;
pub mod export;
#[cfg(madsim)]
#[allow(
    clippy::disallowed_methods,
    reason = "simulated time: under madsim tokio::time::Instant is std's, intercepted"
)]
pub mod harness;
pub mod history;
pub mod scenario;
pub mod shrink;
pub mod summary;
pub mod timeline;
pub mod verdict;
#[cfg(madsim)]
#[allow(
    clippy::disallowed_methods,
    reason = "simulated time: under madsim tokio::time::Instant is std's, intercepted"
)]
pub mod workload;
