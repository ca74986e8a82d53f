//! Producer configs, with Kafka's defaults and `ProducerConfig.java`'s validation rules.

use std::str::FromStr;

use super::{parse_at_least, parse_bool, ConfigError, Configurable};

/// `acks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: fire and forget; the broker sends no response.
    None,
    /// `acks=1`: the leader's append is enough.
    Leader,
    /// `acks=all` (or `-1`): every in-sync replica, and at least `min.insync.replicas`.
    All,
}

impl Acks {
    /// The value of the Produce request's `acks` field.
    pub fn wire_value(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }

    /// The meaning of a Produce request's `acks` field; `None` for anything but -1, 0 and 1
    /// (the broker answers INVALID_REQUIRED_ACKS).
    pub fn from_wire(acks: i16) -> Option<Acks> {
        match acks {
            -1 => Some(Acks::All),
            0 => Some(Acks::None),
            1 => Some(Acks::Leader),
            _ => None,
        }
    }
}

impl FromStr for Acks {
    type Err = ConfigError;
    fn from_str(value: &str) -> Result<Acks, ConfigError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            _ => Err(ConfigError::invalid(
                "acks",
                value,
                "expected one of 0, 1, all, -1",
            )),
        }
    }
}

/// Producer configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerConfig {
    /// `bootstrap.servers`: `host:port` list.
    pub bootstrap_servers: Vec<String>,
    /// `client.id`.
    pub client_id: String,
    /// `acks` (default `all`).
    pub acks: Acks,
    /// `enable.idempotence` (default true; turned off silently when not set explicitly and the
    /// other settings conflict, as Kafka does).
    pub enable_idempotence: bool,
    /// Whether `enable.idempotence` was set explicitly.
    pub enable_idempotence_explicit: bool,
    /// `max.in.flight.requests.per.connection` (default 5).
    pub max_in_flight_requests_per_connection: u32,
    /// `retries` (default `Integer.MAX_VALUE`).
    pub retries: i32,
    /// `delivery.timeout.ms` (default 120000): upper bound on reporting success or failure.
    pub delivery_timeout_ms: u64,
    /// `request.timeout.ms` (default 30000).
    pub request_timeout_ms: u64,
    /// `retry.backoff.ms` (default 100): the wait before a batch's first retry.
    pub retry_backoff_ms: u64,
    /// `retry.backoff.max.ms` (default 1000): each further retry waits twice as long, with 20%
    /// jitter, up to this (KIP-580).
    pub retry_backoff_max_ms: u64,
    /// `linger.ms` (default 5, Kafka 4.0).
    pub linger_ms: u64,
    /// `batch.size` (default 16384).
    pub batch_size: u32,
    /// `max.request.size` (default 1048576): the largest request, hence the largest record.
    pub max_request_size: u32,
    /// `max.block.ms` (default 60000): how long a send waits for its topic's metadata, or for
    /// room in `buffer.memory`.
    pub max_block_ms: u64,
    /// `buffer.memory` (default 33554432): the most bytes of records the producer holds (sent
    /// but not answered, or waiting to be sent); a send beyond it waits up to `max.block.ms`.
    pub buffer_memory: u64,
    /// `metadata.max.age.ms` (default 300000): metadata older than this is asked for again.
    pub metadata_max_age_ms: u64,
    /// `partitioner.ignore.keys` (default false): partition keyed records like unkeyed ones.
    pub partitioner_ignore_keys: bool,
    /// `compression.type` (default `none`): the codec of every batch's records.
    pub compression_type: crate::protocol::compression::Codec,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            bootstrap_servers: Vec::new(),
            client_id: "seedlog-producer".to_owned(),
            acks: Acks::All,
            enable_idempotence: true,
            enable_idempotence_explicit: false,
            max_in_flight_requests_per_connection: 5,
            retries: i32::MAX,
            delivery_timeout_ms: 120_000,
            request_timeout_ms: 30_000,
            retry_backoff_ms: 100,
            retry_backoff_max_ms: 1_000,
            linger_ms: 5,
            batch_size: 16_384,
            max_request_size: 1_048_576,
            max_block_ms: 60_000,
            buffer_memory: 33_554_432,
            metadata_max_age_ms: 300_000,
            partitioner_ignore_keys: false,
            compression_type: crate::protocol::compression::Codec::None,
        }
    }
}

impl Configurable for ProducerConfig {
    fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        match key {
            "bootstrap.servers" => self.bootstrap_servers = super::parse_servers(value),
            "client.id" => self.client_id = value.to_owned(),
            "acks" => self.acks = value.parse()?,
            "enable.idempotence" => {
                self.enable_idempotence = parse_bool(key, value)?;
                self.enable_idempotence_explicit = true;
            }
            "max.in.flight.requests.per.connection" => {
                self.max_in_flight_requests_per_connection = parse_at_least(key, value, 1)?;
            }
            "retries" => self.retries = parse_at_least(key, value, 0)?,
            "delivery.timeout.ms" => self.delivery_timeout_ms = parse_at_least(key, value, 0)?,
            "request.timeout.ms" => self.request_timeout_ms = parse_at_least(key, value, 0)?,
            "retry.backoff.ms" => self.retry_backoff_ms = parse_at_least(key, value, 0)?,
            "retry.backoff.max.ms" => self.retry_backoff_max_ms = parse_at_least(key, value, 0)?,
            "linger.ms" => self.linger_ms = parse_at_least(key, value, 0)?,
            "batch.size" => self.batch_size = parse_at_least(key, value, 0)?,
            "max.request.size" => self.max_request_size = parse_at_least(key, value, 0)?,
            "max.block.ms" => self.max_block_ms = parse_at_least(key, value, 0)?,
            "buffer.memory" => self.buffer_memory = parse_at_least(key, value, 0)?,
            "metadata.max.age.ms" => self.metadata_max_age_ms = parse_at_least(key, value, 0)?,
            "partitioner.ignore.keys" => self.partitioner_ignore_keys = parse_bool(key, value)?,
            "transactional.id" => {
                return Err(ConfigError::not_implemented(
                    key,
                    "transactions come with a later issue",
                ));
            }
            "compression.type" => {
                self.compression_type = crate::protocol::compression::Codec::from_name(
                    &value.trim().to_ascii_lowercase(),
                )
                .ok_or_else(|| {
                    ConfigError::invalid(
                        key,
                        value,
                        "expected one of none, gzip, snappy, lz4, zstd",
                    )
                })?;
            }
            "partitioner.class" => {
                return Err(ConfigError::not_implemented(key, ""));
            }
            _ => return Err(ConfigError::unknown(key)),
        }
        Ok(())
    }

    /// Kafka's `ProducerConfig` rules: explicit idempotence needs acks=all, retries > 0 and at
    /// most 5 requests in flight; implicit idempotence is turned off when they do not hold.
    fn validate(&mut self) -> Result<(), ConfigError> {
        let idempotence_conflict = if self.acks != Acks::All {
            Some("Must set acks to all in order to use the idempotent producer. Otherwise we cannot guarantee idempotence.")
        } else if self.retries == 0 {
            Some("Must set retries to non-zero when using the idempotent producer.")
        } else if self.max_in_flight_requests_per_connection > 5 {
            Some("Must set max.in.flight.requests.per.connection to at most 5 when using the idempotent producer.")
        } else {
            None
        };
        if let Some(message) = idempotence_conflict {
            if self.enable_idempotence && self.enable_idempotence_explicit {
                return Err(ConfigError::Conflict(message.to_owned()));
            }
            self.enable_idempotence = false;
        }
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms {
            return Err(ConfigError::Conflict(
                "delivery.timeout.ms should be equal to or larger than linger.ms + request.timeout.ms".to_owned(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configured(pairs: &[(&str, &str)]) -> Result<ProducerConfig, ConfigError> {
        let mut config = ProducerConfig::default();
        config.apply(pairs.iter().copied())?;
        Ok(config)
    }

    #[test]
    fn defaults_are_kafkas() {
        let config = configured(&[]).expect("valid");
        assert_eq!(config.acks, Acks::All);
        assert!(config.enable_idempotence);
        assert_eq!(config.max_in_flight_requests_per_connection, 5);
        assert_eq!(config.retries, i32::MAX);
        assert_eq!(config.delivery_timeout_ms, 120_000);
    }

    #[test]
    fn explicit_idempotence_with_acks_1_is_rejected_with_kafkas_message() {
        let error =
            configured(&[("acks", "1"), ("enable.idempotence", "true")]).expect_err("conflict");
        assert!(error.to_string().starts_with("Must set acks to all"));
        let error = configured(&[
            ("max.in.flight.requests.per.connection", "6"),
            ("enable.idempotence", "true"),
        ])
        .expect_err("conflict");
        assert!(error.to_string().contains("at most 5"));
    }

    #[test]
    fn implicit_idempotence_is_dropped_when_settings_conflict() {
        let config = configured(&[("acks", "1")]).expect("valid");
        assert!(!config.enable_idempotence);
        assert_eq!(
            configured(&[("acks", "-1")]).expect("valid").acks,
            Acks::All
        );
        assert!(configured(&[("acks", "2")]).is_err());
    }

    #[test]
    fn delivery_timeout_must_cover_linger_plus_request_timeout() {
        assert!(configured(&[
            ("delivery.timeout.ms", "1000"),
            ("request.timeout.ms", "999"),
            ("linger.ms", "5")
        ])
        .is_err());
        assert!(configured(&[
            ("delivery.timeout.ms", "1004"),
            ("request.timeout.ms", "999"),
            ("linger.ms", "5")
        ])
        .is_ok());
    }
}
