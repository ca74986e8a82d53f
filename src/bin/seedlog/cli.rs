//! The real-world command line (not built for the simulator).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use seedlog::client::producer::ProducerRecord;
use seedlog::config::broker::ProcessRole;
use seedlog::config::{
    apply_properties, parse_properties, BrokerConfig, Configurable, ConsumerConfig, ProducerConfig,
};
use seedlog::runtime::admin::{create_topics, metadata, partition_count, NewTopic};
use seedlog::runtime::client::ClientConnection;
use seedlog::runtime::consumer::{Consumer, ConsumerRecord};
use seedlog::runtime::producer::Producer;
use seedlog::runtime::server::{
    run_broker, run_combined, run_controller, ServerOptions, COMBINED_CONTROLLER_DIRECTORY,
};
use seedlog::runtime::storage::FileStorage;
use seedlog::types::TopicPartition;
use std::sync::Arc;
use tokio::sync::Notify;

#[derive(Parser)]
#[command(
    name = "seedlog",
    version,
    about = "A Kafka-compatible broker that also runs under a deterministic simulator"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker from a server.properties-style file.
    Broker {
        /// Config file (`node.id`, `listeners`, `log.dirs`, `log.flush.interval.messages`, ...).
        #[arg(long)]
        config: PathBuf,
    },
    /// Create or list topics.
    Topics {
        #[command(subcommand)]
        action: TopicsAction,
    },
    /// List consumer groups, or describe one with its committed offsets and lag
    /// (kafka-consumer-groups --list / --describe).
    Groups {
        #[command(subcommand)]
        action: crate::groups::GroupsAction,
    },
    /// Send each line of stdin as a record value (`key<TAB>value` with --keyed).
    Produce {
        #[arg(long, default_value = "localhost:9092")]
        bootstrap_server: String,
        #[arg(long)]
        topic: String,
        /// Fixed partition; default: murmur2 of the key, or round-robin for unkeyed lines.
        #[arg(long)]
        partition: Option<i32>,
        /// Lines are `key<TAB>value`.
        #[arg(long)]
        keyed: bool,
        /// Producer configs as key=value (e.g. acks=1). Idempotent by default, as Kafka's
        /// console producer (turned off silently by acks=0 or 1 unless set explicitly).
        #[arg(long = "producer-property", value_name = "KEY=VALUE")]
        properties: Vec<String>,
    },
    /// Measure the seedlog producer or consumer (kafka-producer-perf-test and
    /// kafka-consumer-perf-test's options and output).
    Perf {
        #[command(subcommand)]
        action: crate::perf::PerfAction,
    },
    /// Print record values (one per line) from assigned partitions.
    Consume {
        #[arg(long, default_value = "localhost:9092")]
        bootstrap_server: String,
        #[arg(long)]
        topic: String,
        /// Only this partition (default: all).
        #[arg(long)]
        partition: Option<i32>,
        /// Start at the log start offset instead of the end.
        #[arg(long)]
        from_beginning: bool,
        /// Stop after this many records.
        #[arg(long)]
        max_messages: Option<usize>,
        /// Stop after this long without a record.
        #[arg(long, default_value_t = 5000)]
        timeout_ms: u64,
        /// Prefix each value with `partition:offset<TAB>`.
        #[arg(long)]
        print_offsets: bool,
        /// Consume as a member of this consumer group: start at the group's committed offsets
        /// (`--from-beginning` applies where none is committed) and commit after each poll is
        /// printed, and on exit (kafka-console-consumer's `--group`).
        #[arg(long, conflicts_with = "partition")]
        group: Option<String>,
        /// Consumer configs as key=value (kafka-console-consumer's `--consumer-property`).
        #[arg(long = "consumer-property", value_name = "KEY=VALUE")]
        consumer_properties: Vec<String>,
    },
}

#[derive(Subcommand)]
enum TopicsAction {
    /// Create a topic.
    Create {
        #[arg(long, default_value = "localhost:9092")]
        bootstrap_server: String,
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        #[arg(long, default_value_t = 1)]
        replication_factor: i16,
        /// Topic configs as key=value.
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// List topics with their partition counts.
    List {
        #[arg(long, default_value = "localhost:9092")]
        bootstrap_server: String,
    },
}

pub(crate) const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn key_values(pairs: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    pairs
        .iter()
        .map(|pair| {
            let (key, value) = pair
                .split_once('=')
                .with_context(|| format!("expected KEY=VALUE, got '{pair}'"))?;
            Ok((key.trim().to_owned(), value.trim().to_owned()))
        })
        .collect()
}

fn init_logging() {
    let level = std::env::var("SEEDLOG_LOG")
        .ok()
        .and_then(|level| level.parse().ok())
        .unwrap_or(tracing::Level::INFO);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(ansi)
        .init();
}

pub(crate) async fn main() -> anyhow::Result<()> {
    init_logging();
    match Cli::parse().command {
        Command::Broker { config } => broker(config).await,
        Command::Topics {
            action:
                TopicsAction::Create {
                    bootstrap_server,
                    topic,
                    partitions,
                    replication_factor,
                    configs,
                },
        } => {
            let mut connection =
                ClientConnection::connect(&bootstrap_server, "seedlog-cli").await?;
            let new_topic = NewTopic {
                name: topic.clone(),
                partitions,
                replication_factor,
                configs: key_values(&configs)?,
            };
            for (name, outcome) in
                create_topics(&mut connection, &[new_topic], ADMIN_TIMEOUT).await?
            {
                outcome.with_context(|| format!("creating {name}"))?;
                println!("Created topic {name}.");
            }
            Ok(())
        }
        Command::Topics {
            action: TopicsAction::List { bootstrap_server },
        } => list_topics(&bootstrap_server).await,
        Command::Produce {
            bootstrap_server,
            topic,
            partition,
            keyed,
            properties,
        } => produce(bootstrap_server, topic, partition, keyed, &properties).await,
        Command::Perf { action } => crate::perf::run(action).await,
        Command::Groups { action } => crate::groups::run(action).await,
        Command::Consume {
            bootstrap_server,
            topic,
            partition,
            from_beginning,
            max_messages,
            timeout_ms,
            print_offsets,
            group,
            consumer_properties,
        } => {
            let args = ConsumeArgs {
                bootstrap_server,
                topic,
                partition,
                from_beginning,
                max_messages,
                timeout_ms,
                print_offsets,
                properties: consumer_properties,
            };
            match group {
                Some(group) => crate::groups::consume(args, &group).await,
                None => consume(args).await,
            }
        }
    }
}

async fn list_topics(bootstrap_server: &str) -> anyhow::Result<()> {
    let mut connection = ClientConnection::connect(bootstrap_server, "seedlog-cli").await?;
    for topic in metadata(&mut connection, None, ADMIN_TIMEOUT).await?.topics {
        let name = topic.name.map(|name| name.to_string()).unwrap_or_default();
        println!("{name}\tpartitions={}", topic.partitions.len());
    }
    Ok(())
}

async fn broker(path: PathBuf) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut config = BrokerConfig::default();
    let properties = parse_properties(&text).with_context(|| format!("{}", path.display()))?;
    apply_properties(&mut config, &properties).with_context(|| format!("{}", path.display()))?;
    for (key, why) in &config.without_effect {
        tracing::warn!(key = %key, "set, but changes nothing: {why}");
    }
    let storage = FileStorage::new(&config.log_dirs)
        .with_context(|| format!("opening log.dirs={}", config.log_dirs))?;
    let seed = madsim::rand::random::<u64>();
    let shutdown = Arc::new(Notify::new());
    tokio::spawn(notify_on_signal(shutdown.clone()));
    let options = ServerOptions {
        seed,
        faults: None,
        observer: None,
        shutdown: Some(shutdown),
        wall_clock_offset_ms: 0,
    };
    match config.process_role {
        ProcessRole::Broker => Box::pin(run_broker(config, storage, options)).await?,
        ProcessRole::Controller => Box::pin(run_controller(config, storage, options)).await?,
        ProcessRole::Combined => {
            let directory = Path::new(&config.log_dirs).join(COMBINED_CONTROLLER_DIRECTORY);
            let controller_storage = FileStorage::new(&directory)
                .with_context(|| format!("opening {}", directory.display()))?;
            Box::pin(run_combined(config, storage, controller_storage, options)).await?
        }
    }
    Ok(())
}

/// The name of the next SIGTERM or SIGINT to arrive.
async fn next_signal(
    terminate: &mut tokio::signal::unix::Signal,
    interrupt: &mut tokio::signal::unix::Signal,
) -> &'static str {
    tokio::select! {
        biased;
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    }
}

/// Asks for a clean shutdown on the first SIGTERM or SIGINT; a second one exits at once.
async fn notify_on_signal(shutdown: Arc<Notify>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot install signal handlers: SIGTERM will kill the broker uncleanly");
        return;
    };
    let first = next_signal(&mut terminate, &mut interrupt).await;
    tracing::info!(
        signal = first,
        "shutting down cleanly (send it again to exit at once)"
    );
    shutdown.notify_one();
    let second = next_signal(&mut terminate, &mut interrupt).await;
    tracing::warn!(signal = second, "exiting without a clean shutdown");
    std::process::exit(130);
}

async fn produce(
    bootstrap: String,
    topic: String,
    partition: Option<i32>,
    keyed: bool,
    properties: &[String],
) -> anyhow::Result<()> {
    let mut config = ProducerConfig::default();
    let mut pairs = vec![("bootstrap.servers".to_owned(), bootstrap.clone())];
    pairs.extend(key_values(properties)?);
    config.apply(
        pairs
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str())),
    )?;
    let producer = Producer::start(config)?;
    let mut deliveries = Vec::new();
    let stdin = std::io::stdin();
    for (index, line) in stdin.lock().lines().enumerate() {
        let line = line?;
        let (key, value) = match (keyed, line.split_once('\t')) {
            (true, Some((key, value))) => (
                Some(Bytes::from(key.to_owned())),
                Bytes::from(value.to_owned()),
            ),
            (true, None) => bail!("line {}: expected key<TAB>value", index + 1),
            (false, _) => (None, Bytes::from(line)),
        };
        // No partition given: the producer's partitioner picks (murmur2 of the key, or the
        // sticky partition), as kafka-console-producer's does.
        let record = ProducerRecord {
            topic: topic.clone(),
            partition,
            key,
            value: Some(value),
            timestamp_ms: wall_clock_ms(),
        };
        deliveries.push(producer.send(record).await);
    }
    let mut failed = 0;
    let total = deliveries.len();
    for delivery in deliveries {
        if let Err(error) = delivery.wait().await {
            failed += 1;
            eprintln!("send failed: {error}");
        }
    }
    producer.close().await;
    eprintln!("{} records sent, {failed} failed", total - failed);
    if failed > 0 {
        bail!("{failed} of {total} records failed");
    }
    Ok(())
}

pub(crate) struct ConsumeArgs {
    pub(crate) bootstrap_server: String,
    pub(crate) topic: String,
    partition: Option<i32>,
    from_beginning: bool,
    max_messages: Option<usize>,
    pub(crate) timeout_ms: u64,
    print_offsets: bool,
    properties: Vec<String>,
}

impl ConsumeArgs {
    /// The consumer's config: the flags, then `--consumer-property` entries over them.
    pub(crate) fn config(&self) -> anyhow::Result<ConsumerConfig> {
        let mut config = ConsumerConfig::default();
        let reset = if self.from_beginning {
            "earliest"
        } else {
            "latest"
        };
        config.apply([
            ("bootstrap.servers", self.bootstrap_server.as_str()),
            ("auto.offset.reset", reset),
        ])?;
        for (key, value) in key_values(&self.properties)? {
            config
                .set(&key, &value)
                .with_context(|| format!("--consumer-property {key}={value}"))?;
        }
        Ok(config)
    }
}

async fn consume(args: ConsumeArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    let partitions: Vec<TopicPartition> = if let Some(partition) = args.partition {
        vec![TopicPartition::new(args.topic.as_str(), partition)]
    } else {
        let mut connection =
            ClientConnection::connect(&args.bootstrap_server, "seedlog-cli").await?;
        let count = partition_count(&mut connection, &args.topic, ADMIN_TIMEOUT).await?;
        (0..count)
            .map(|partition| TopicPartition::new(args.topic.as_str(), partition))
            .collect()
    };
    let mut consumer = Consumer::new(config)?;
    consumer.assign(&partitions);
    let mut printed = 0;
    let idle = Duration::from_millis(args.timeout_ms);
    let mut idle_deadline = tokio::time::Instant::now() + idle;
    loop {
        let remaining = idle_deadline.saturating_duration_since(tokio::time::Instant::now());
        let polled = consumer.poll(remaining).await?;
        for error in &polled.errors {
            eprintln!("{}: {:?}: {}", error.partition, error.error, error.message);
        }
        if polled.records.is_empty() {
            if tokio::time::Instant::now() >= idle_deadline {
                break;
            }
            continue;
        }
        idle_deadline = tokio::time::Instant::now() + idle;
        if print_records(&polled.records, &args, &mut printed)? {
            return Ok(());
        }
    }
    Ok(())
}

/// Prints records; returns whether `--max-messages` was reached.
pub(crate) fn print_records(
    records: &[ConsumerRecord],
    args: &ConsumeArgs,
    printed: &mut usize,
) -> anyhow::Result<bool> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for record in records {
        let value = record
            .value
            .as_deref()
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        if args.print_offsets {
            writeln!(
                out,
                "{}:{}\t{value}",
                record.topic_partition.partition, record.offset
            )?;
        } else {
            writeln!(out, "{value}")?;
        }
        *printed += 1;
        if args.max_messages.is_some_and(|max| *printed >= max) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// CreateTime for a record from the command line: the wall clock, as kafka-console-producer
/// stamps it.
pub(crate) fn wall_clock_ms() -> i64 {
    seedlog::runtime::clock::wall_clock_ms()
}
