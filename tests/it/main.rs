//! Black-box tests of the real broker, in one test binary (mini-redis style): the `seedlog`
//! binary on loopback with real files, driven by seedlog's client and by raw sockets.
#![cfg(not(madsim))]

mod broker_process;
mod config_errors;
mod decoder_hardening;
mod idempotence;
mod lifecycle;
mod limits;
mod log_dir_failure;
mod metrics;
mod perf_tool;
mod produce_validation;
mod real_tcp;
mod recovery;
mod retention;
mod sendfile;
