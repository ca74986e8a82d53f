//! `seedlog perf produce` and `seedlog perf consume`: the seedlog clients measured the way
//! Kafka's `kafka-producer-perf-test` and `kafka-consumer-perf-test` measure theirs, with their
//! options and their output lines, so the same parsers read both.

use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Subcommand;
use seedlog::client::producer::ProducerRecord;
use seedlog::config::{Configurable, ConsumerConfig, ProducerConfig};
use seedlog::runtime::admin::partition_count;
use seedlog::runtime::client::ClientConnection;
use seedlog::runtime::consumer::Consumer;
use seedlog::runtime::producer::Producer;
use seedlog::types::TopicPartition;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::cli::{key_values, wall_clock_ms, ADMIN_TIMEOUT};

/// The two benchmarks.
#[derive(Subcommand)]
pub(crate) enum PerfAction {
    /// Produce `--num-records` records of `--record-size` bytes and report throughput and
    /// latency (kafka-producer-perf-test's options and output).
    Produce {
        #[arg(long, default_value = "localhost:9092")]
        bootstrap_server: String,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        num_records: u64,
        #[arg(long, default_value_t = 100)]
        record_size: usize,
        /// Records per second at most; -1: as fast as possible.
        #[arg(long, allow_hyphen_values = true)]
        throughput: f64,
        /// Producer configs as key=value (acks, linger.ms, batch.size, enable.idempotence, ...).
        #[arg(long = "producer-props", value_name = "KEY=VALUE", num_args = 1..)]
        producer_props: Vec<String>,
    },
    /// Read `--messages` records from every partition of `--topic`, from the beginning, and
    /// report throughput (kafka-consumer-perf-test's output).
    Consume {
        #[arg(long, default_value = "localhost:9092")]
        bootstrap_server: String,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        messages: u64,
        /// Give up after this long without a record.
        #[arg(long, default_value_t = 10_000)]
        timeout: u64,
        /// Consumer configs as key=value.
        #[arg(long = "consumer-props", value_name = "KEY=VALUE", num_args = 1..)]
        consumer_props: Vec<String>,
    },
}

pub(crate) async fn run(action: PerfAction) -> anyhow::Result<()> {
    match action {
        PerfAction::Produce {
            bootstrap_server,
            topic,
            num_records,
            record_size,
            throughput,
            producer_props,
        } => {
            let mut config = ProducerConfig::default();
            let mut pairs = vec![("bootstrap.servers".to_owned(), bootstrap_server)];
            pairs.extend(key_values(&producer_props)?);
            config.apply(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
            let shape = Shape {
                topic,
                records: num_records,
                record_size,
                throughput,
            };
            produce(config, &shape).await
        }
        PerfAction::Consume {
            bootstrap_server,
            topic,
            messages,
            timeout,
            consumer_props,
        } => {
            consume(
                &bootstrap_server,
                &topic,
                messages,
                timeout,
                &consumer_props,
            )
            .await
        }
    }
}

struct Shape {
    topic: String,
    records: u64,
    record_size: usize,
    throughput: f64,
}

/// Latencies of one reporting window, or of the whole run.
#[derive(Default)]
struct Window {
    count: u64,
    bytes: u64,
    latency_sum_ms: f64,
    latency_max_ms: f64,
}

impl Window {
    fn add(&mut self, bytes: usize, latency_ms: f64) {
        self.count += 1;
        self.bytes += bytes as u64;
        self.latency_sum_ms += latency_ms;
        self.latency_max_ms = self.latency_max_ms.max(latency_ms);
    }

    /// `N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency` over
    /// `elapsed` (ProducerPerformance's window line; the summary adds percentiles).
    fn line(&self, elapsed: Duration, precision: usize) -> String {
        let seconds = elapsed.as_secs_f64().max(1e-9);
        let avg = self.latency_sum_ms / self.count.max(1) as f64;
        format!(
            "{} records sent, {:.p$} records/sec ({:.2} MB/sec), {:.p$} ms avg latency, {:.p$} ms max latency",
            self.count,
            self.count as f64 / seconds,
            self.bytes as f64 / 1024.0 / 1024.0 / seconds,
            avg,
            self.latency_max_ms,
            p = precision,
        )
    }
}

/// What the latency task measured.
struct Timed {
    total: Window,
    elapsed: Duration,
    latencies_ms: Vec<u32>,
    failures: u64,
}

/// A task that takes the deliveries in send order, times each from its send to its completion,
/// and prints ProducerPerformance's 5-second window lines.
fn spawn_timer(
    record_size: usize,
    mut completed: mpsc::Receiver<(Instant, seedlog::runtime::producer::Delivery)>,
) -> JoinHandle<Timed> {
    tokio::spawn(async move {
        let start = Instant::now();
        let (mut total, mut window) = (Window::default(), Window::default());
        let mut window_start = start;
        let mut latencies_ms: Vec<u32> = Vec::new();
        let mut failures = 0u64;
        while let Some((sent, delivery)) = completed.recv().await {
            let outcome = delivery.wait().await;
            let latency_ms = sent.elapsed().as_secs_f64() * 1000.0;
            if let Err(error) = outcome {
                failures += 1;
                if failures <= 10 {
                    eprintln!("send failed: {error}");
                }
                continue;
            }
            total.add(record_size, latency_ms);
            window.add(record_size, latency_ms);
            latencies_ms.push(latency_ms as u32);
            if window_start.elapsed() >= Duration::from_secs(5) {
                println!("{}.", window.line(window_start.elapsed(), 1));
                window = Window::default();
                window_start = Instant::now();
            }
        }
        Timed {
            total,
            elapsed: start.elapsed(),
            latencies_ms,
            failures,
        }
    })
}

/// Sends as fast as `--throughput` allows (Kafka's `ThroughputThrottler`: never ahead of
/// `index / throughput` seconds), then prints the summary line with percentiles.
async fn produce(config: ProducerConfig, shape: &Shape) -> anyhow::Result<()> {
    let producer = Producer::start(config)?;
    let payload = Bytes::from(
        (0..shape.record_size)
            .map(|index| b'A' + (index % 26) as u8)
            .collect::<Vec<u8>>(),
    );
    let (deliveries, completed) = mpsc::channel(100_000);
    let timer = spawn_timer(shape.record_size, completed);
    let start = Instant::now();
    for index in 0..shape.records {
        if shape.throughput > 0.0 {
            let due = start + Duration::from_secs_f64(index as f64 / shape.throughput);
            tokio::time::sleep_until(due).await;
        }
        let record = ProducerRecord {
            topic: shape.topic.clone(),
            partition: None,
            key: None,
            value: Some(payload.clone()),
            timestamp_ms: wall_clock_ms(),
        };
        let sent = Instant::now();
        let delivery = producer.send(record).await;
        if deliveries.send((sent, delivery)).await.is_err() {
            bail!("the latency task stopped");
        }
    }
    drop(deliveries);
    let mut timed = timer.await.context("latency task")?;
    producer.close().await;
    timed.latencies_ms.sort_unstable();
    let sorted = &timed.latencies_ms;
    let percentile = |fraction: f64| -> u32 {
        let index = (sorted.len() as f64 * fraction) as usize;
        sorted
            .get(index.min(sorted.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{}, {} ms 50th, {} ms 95th, {} ms 99th, {} ms 99.9th.",
        timed.total.line(timed.elapsed, 2),
        percentile(0.5),
        percentile(0.95),
        percentile(0.99),
        percentile(0.999),
    );
    if timed.failures > 0 {
        bail!("{} of {} records failed", timed.failures, shape.records);
    }
    Ok(())
}

/// Reads every partition from the beginning until `messages` records arrived; prints
/// kafka-consumer-perf-test's header and line (no group, so no rebalance time).
async fn consume(
    bootstrap: &str,
    topic: &str,
    messages: u64,
    timeout_ms: u64,
    props: &[String],
) -> anyhow::Result<()> {
    let mut config = ConsumerConfig::default();
    let mut pairs = vec![
        ("bootstrap.servers".to_owned(), bootstrap.to_owned()),
        ("auto.offset.reset".to_owned(), "earliest".to_owned()),
    ];
    pairs.extend(key_values(props)?);
    config.apply(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    let mut connection = ClientConnection::connect(bootstrap, "seedlog-perf").await?;
    let count = partition_count(&mut connection, topic, ADMIN_TIMEOUT).await?;
    let partitions: Vec<TopicPartition> = (0..count)
        .map(|partition| TopicPartition::new(topic, partition))
        .collect();
    let mut consumer = Consumer::new(config)?;
    consumer.assign(&partitions);
    let start_wall = wall_clock_ms();
    let start = Instant::now();
    let (mut records, mut bytes) = (0u64, 0u64);
    let idle = Duration::from_millis(timeout_ms);
    let mut last = Instant::now();
    while records < messages {
        let polled = consumer.poll(idle).await?;
        if polled.records.is_empty() {
            if last.elapsed() >= idle {
                bail!("only {records} of {messages} records arrived within {timeout_ms} ms of the last");
            }
            continue;
        }
        last = Instant::now();
        for record in &polled.records {
            records += 1;
            bytes += record.value.as_ref().map_or(0, Bytes::len) as u64;
        }
    }
    let seconds = start.elapsed().as_secs_f64().max(1e-9);
    let megabytes = bytes as f64 / 1024.0 / 1024.0;
    println!("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec");
    let fetch_ms = (seconds * 1000.0) as u64;
    println!(
        "{start_wall}, {}, {megabytes:.4}, {:.4}, {records}, {:.4}, 0, {fetch_ms}, {:.4}, {:.4}",
        wall_clock_ms(),
        megabytes / seconds,
        records as f64 / seconds,
        megabytes / seconds,
        records as f64 / seconds,
    );
    Ok(())
}
