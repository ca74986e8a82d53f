//! The requests the router still answers itself: one file per request type, named
//! `on_<api>_request` (an `impl Broker` block, or a free function when the answer needs nothing
//! the broker holds).

mod api_versions;
mod create_topics;
mod delete_records;
mod describe_configs;
mod fetch;
mod metadata;
mod produce;

pub(crate) use api_versions::on_api_versions_request;
pub use produce::produce_rejection;
