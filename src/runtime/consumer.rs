//! The async consumer: assigned partitions only (consumer groups come later). `poll` resets
//! unknown positions with ListOffsets (`auto.offset.reset`), fetches, and returns records. Like
//! Kafka's consumer it rides out connection failures until its timeout, returning no records.

use std::time::Duration;

use kafka_protocol::messages::{RequestKind, ResponseKind};

use crate::client::consumer::{ConsumerRecord, SubscriptionState};
use crate::config::{AutoOffsetReset, ConfigError, ConsumerConfig};
use crate::protocol::record_batch::BatchError;
use crate::protocol::ErrorCode;
use crate::runtime::admin::list_offsets;
use crate::runtime::client::{ClientConnection, ClientError};
use crate::types::TopicPartition;

/// Why `poll` failed (network trouble is not an error: poll retries until its timeout).
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// `auto.offset.reset=none` and a partition has no position.
    #[error("no offset for {0} and auto.offset.reset=none")]
    NoOffsetForPartition(TopicPartition),
    /// A fetched batch failed its CRC or did not parse.
    #[error("corrupt record batch: {0}")]
    Corrupt(#[from] BatchError),
}

/// A consumer of assigned partitions.
#[derive(Debug)]
pub struct Consumer {
    config: ConsumerConfig,
    state: SubscriptionState,
    connection: Option<ClientConnection>,
    bootstrap: String,
}

/// The simple wait between failed attempts inside one `poll`.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

impl Consumer {
    /// A consumer for a validated config.
    pub fn new(config: ConsumerConfig) -> Result<Consumer, ConfigError> {
        let bootstrap = crate::config::first_bootstrap_server(&config.bootstrap_servers)?;
        Ok(Consumer {
            config,
            state: SubscriptionState::default(),
            connection: None,
            bootstrap,
        })
    }

    /// Replaces the assignment.
    pub fn assign(&mut self, partitions: &[TopicPartition]) {
        self.state.assign(partitions);
    }

    /// Sets the next offset of an assigned partition.
    pub fn seek(&mut self, partition: &TopicPartition, offset: i64) {
        self.state.seek(partition, offset);
    }

    /// The next offset of a partition, if known.
    pub fn position(&self, partition: &TopicPartition) -> Option<i64> {
        self.state.position(partition)
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.config.request_timeout_ms)
    }

    async fn connection(&mut self) -> Result<&mut ClientConnection, ClientError> {
        if self.connection.is_none() {
            self.connection =
                Some(ClientConnection::connect(&self.bootstrap, &self.config.client_id).await?);
        }
        Ok(self.connection.as_mut().expect("just connected"))
    }

    /// Log end (`-1`) or log start (`-2`) offsets of `partitions`.
    pub async fn list_offsets(
        &mut self,
        partitions: &[TopicPartition],
        timestamp: i64,
    ) -> Result<Vec<(TopicPartition, i64)>, ClientError> {
        let timeout = self.request_timeout();
        let isolation = self.config.isolation_level.wire_value();
        let result = list_offsets(
            self.connection().await?,
            partitions,
            timestamp,
            isolation,
            timeout,
        )
        .await;
        let offsets = match result {
            Ok(offsets) => offsets,
            Err(error) => {
                self.connection = None;
                return Err(error);
            }
        };
        offsets
            .into_iter()
            .map(|(partition, outcome)| match outcome {
                Ok(offset) => Ok((partition, offset)),
                Err(error) => Err(ClientError::Kafka {
                    error,
                    message: format!("ListOffsets {partition}"),
                }),
            })
            .collect()
    }

    async fn reset_positions(&mut self) -> Result<(), ConsumerError> {
        let needing = self.state.needing_reset();
        if needing.is_empty() {
            return Ok(());
        }
        let timestamp = match self.config.auto_offset_reset {
            AutoOffsetReset::Earliest => -2,
            AutoOffsetReset::Latest => -1,
            AutoOffsetReset::None => {
                return Err(ConsumerError::NoOffsetForPartition(needing[0].clone()))
            }
        };
        match self.list_offsets(&needing, timestamp).await {
            Ok(offsets) => {
                for (partition, offset) in offsets {
                    if offset >= 0 {
                        self.state.seek(&partition, offset);
                    }
                }
            }
            Err(error) => tracing::debug!(%error, "offset reset failed; retrying"),
        }
        Ok(())
    }

    /// Fetches records from the assigned partitions, waiting up to `timeout` for some.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ConsumerError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            self.reset_positions().await?;
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            let max_wait_ms = (remaining.as_millis() as i32).min(self.config.fetch_max_wait_ms);
            let request = self.state.fetch_request(&self.config, max_wait_ms);
            if request.topics.is_empty() {
                tokio::time::sleep(RETRY_PAUSE.min(remaining)).await;
            } else {
                match self.fetch(request, max_wait_ms).await {
                    Ok(records) if !records.is_empty() => return Ok(records),
                    Ok(_) => {}
                    Err(FetchFailure::Consumer(error)) => return Err(error),
                    Err(FetchFailure::Retry(reason)) => {
                        tracing::debug!(%reason, "fetch failed; retrying");
                        tokio::time::sleep(RETRY_PAUSE.min(remaining)).await;
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Vec::new());
            }
        }
    }

    async fn fetch(
        &mut self,
        request: kafka_protocol::messages::FetchRequest,
        max_wait_ms: i32,
    ) -> Result<Vec<ConsumerRecord>, FetchFailure> {
        let timeout = self.request_timeout() + Duration::from_millis(max_wait_ms.max(0) as u64);
        let connection = self
            .connection()
            .await
            .map_err(|error| FetchFailure::Retry(error.to_string()))?;
        let response = match connection
            .call_within(timeout, RequestKind::Fetch(request))
            .await
        {
            Ok(ResponseKind::Fetch(response)) => response,
            Ok(_) => {
                self.connection = None;
                return Err(FetchFailure::Retry(
                    "Fetch answered with another API".into(),
                ));
            }
            Err(error) => {
                self.connection = None;
                return Err(FetchFailure::Retry(error.to_string()));
            }
        };
        if response.error_code != 0 {
            return Err(FetchFailure::Retry(format!(
                "fetch error {:?}",
                ErrorCode::from_code(response.error_code)
            )));
        }
        let outcome = self
            .state
            .on_fetch_response(&response)
            .map_err(|error| FetchFailure::Consumer(error.into()))?;
        for (partition, error) in &outcome.errors {
            tracing::debug!(%partition, ?error, "fetch partition error");
        }
        for partition in &outcome.resets {
            tracing::info!(%partition, "offset out of range: resetting per auto.offset.reset");
        }
        Ok(outcome.records)
    }
}

enum FetchFailure {
    Retry(String),
    Consumer(ConsumerError),
}
