//! The router's own code, besides `broker/mod.rs` (which holds `Broker` and its dispatch): the
//! only other place with `impl Broker` blocks. Each file carries what one component's work
//! means for the others, or a part of the broker's life:
//!
//! - `startup` and `shutdown`: opening the data directory and every log; the clean-shutdown
//!   marker and stopping;
//! - `flush`: ticks, and a finished fsync handed to the component its target names; the
//!   checkpoint files' writes; retention's new log starts;
//! - `metadata_publisher`: the membership's ticks and answers, and the image published to the
//!   replicas (Kafka's `BrokerMetadataPublisher`);
//! - `group_log`: the broker as the group coordinator's `OffsetsLog`;
//! - `handlers/`: the requests the router answers itself, one file per API (Kafka's
//!   `KafkaApis`), each handing the work to the components.

pub(in crate::broker) mod flush;
pub(in crate::broker) mod group_log;
pub(in crate::broker) mod handlers;
pub(in crate::broker) mod metadata_publisher;
pub(in crate::broker) mod shutdown;
pub(in crate::broker) mod startup;
