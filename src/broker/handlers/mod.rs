//! One file per request type, each an `impl Broker` block with `on_<api>_request`.

mod api_versions;
mod create_topics;
mod delete_records;
mod describe_configs;
mod fetch;
mod metadata;
mod produce;

pub(crate) use create_topics::{names_reserved_topic, reserved_topics_refused};
pub use produce::produce_rejection;
