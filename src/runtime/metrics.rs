//! The metrics endpoint (`metrics.listener`): `GET /metrics` answers in the OpenMetrics text
//! format (which Prometheus scrapes), with Kafka's metric names as the Prometheus JMX exporter spells them
//! (`kafka_<domain>_<type>_<name>`). The shell counts requests, their latency, bytes out,
//! fsyncs and connections; the core's [`BrokerMetrics`] snapshot (taken by the driver between
//! two inputs) gives bytes in, partitions and the purgatory. Off unless configured, so the
//! simulator never pays for it.

use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::broker::metrics::{BrokerMetrics, PartitionMetrics};

/// Labels of a per-API metric: `request="Produce"`.
type RequestLabels = [(&'static str, &'static str); 1];
/// Labels of a per-topic metric: `topic="payments"`.
type TopicLabels = [(&'static str, String); 1];
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn millisecond_buckets() -> Histogram {
    // 0.05 ms to about 1.6 s.
    Histogram::new(exponential_buckets(0.05, 2.0, 16))
}

/// What the shell counts. Cloning shares the counters.
#[derive(Clone, Debug)]
pub struct ShellMetrics {
    requests: Family<RequestLabels, Counter>,
    request_time_ms: Histograms<RequestLabels>,
    bytes_out: Family<TopicLabels, Counter>,
    flush_time_ms: Histogram,
    connections: Gauge,
}

impl Default for ShellMetrics {
    fn default() -> Self {
        ShellMetrics {
            requests: Family::default(),
            request_time_ms: Family::new_with_constructor(millisecond_buckets),
            bytes_out: Family::default(),
            flush_time_ms: millisecond_buckets(),
            connections: Gauge::default(),
        }
    }
}

/// Kafka's name of an API, as its request metrics label it.
fn api_name(api_key: ApiKey) -> &'static str {
    match api_key {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "Fetch",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::DeleteRecords => "DeleteRecords",
        ApiKey::InitProducerId => "InitProducerId",
        _ => "Other",
    }
}

impl ShellMetrics {
    /// One request answered (or given no response) after `elapsed`.
    pub fn request_done(&self, api_key: ApiKey, elapsed: Duration) {
        let labels = [("request", api_name(api_key))];
        self.requests.get_or_create(&labels).inc();
        self.request_time_ms
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64() * 1000.0);
    }

    /// Record bytes a fetch response sent from `topic`.
    pub fn bytes_out(&self, topic: &str, bytes: u64) {
        if bytes > 0 {
            self.bytes_out
                .get_or_create(&[("topic", topic.to_owned())])
                .inc_by(bytes);
        }
    }

    /// One fsync batch (files, then directories) took `elapsed`.
    pub fn flush_done(&self, elapsed: Duration) {
        self.flush_time_ms.observe(elapsed.as_secs_f64() * 1000.0);
    }

    /// A connection opened (`+1`) or closed (`-1`).
    pub fn connection(&self, delta: i64) {
        self.connections.inc_by(delta);
    }

    /// The text exposition of these and the core's snapshot.
    pub fn render(&self, core: &BrokerMetrics) -> String {
        let mut registry = Registry::default();
        self.register(&mut registry);
        register_core(&mut registry, core);
        let mut text = String::new();
        encode(&mut text, &registry).expect("writing to a String cannot fail");
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "kafka_network_requestmetrics_requests",
            "Requests answered, by API",
            self.requests.clone(),
        );
        registry.register(
            "kafka_network_requestmetrics_totaltimems",
            "Time from a request read to its response written, in milliseconds",
            self.request_time_ms.clone(),
        );
        registry.register(
            "kafka_server_brokertopicmetrics_bytesout",
            "Record bytes sent by fetch responses, by topic",
            self.bytes_out.clone(),
        );
        registry.register(
            "kafka_log_logflushstats_logflushrateandtimems",
            "Time of each fsync (its files, then its directories), in milliseconds",
            self.flush_time_ms.clone(),
        );
        registry.register(
            "kafka_server_socketservermetrics_connection_count",
            "Open client connections",
            self.connections.clone(),
        );
    }
}

fn gauge(value: i64) -> Gauge {
    let gauge = Gauge::default();
    gauge.set(value);
    gauge
}

fn register_core(registry: &mut Registry, core: &BrokerMetrics) {
    let bytes_in = Family::<TopicLabels, Counter>::default();
    let messages_in = Family::<TopicLabels, Counter>::default();
    for (topic, counts) in &core.topics {
        let labels = [("topic", topic.clone())];
        bytes_in.get_or_create(&labels).inc_by(counts.bytes_in);
        messages_in
            .get_or_create(&labels)
            .inc_by(counts.messages_in);
    }
    registry.register(
        "kafka_server_brokertopicmetrics_bytesin",
        "Record bytes appended, by topic",
        bytes_in,
    );
    registry.register(
        "kafka_server_brokertopicmetrics_messagesin",
        "Records appended, by topic",
        messages_in,
    );
    let purgatory = Family::<[(&'static str, &'static str); 1], Gauge>::default();
    purgatory
        .get_or_create(&[("delayedOperation", "Produce")])
        .set(core.delayed_produces as i64);
    purgatory
        .get_or_create(&[("delayedOperation", "Fetch")])
        .set(core.delayed_fetches as i64);
    registry.register(
        "kafka_server_delayedoperationpurgatory_purgatorysize",
        "Requests waiting in the purgatory",
        purgatory,
    );
    let offline = core.partitions.iter().filter(|p| p.offline).count();
    registry.register(
        "kafka_server_replicamanager_partitioncount",
        "Partitions on this broker",
        gauge(core.partitions.len() as i64),
    );
    registry.register(
        "kafka_server_replicamanager_offlinereplicacount",
        "Partitions offline after a failed fsync or corruption",
        gauge(offline as i64),
    );
    registry.register(
        "kafka_server_replicamanager_underreplicatedpartitions",
        "Partitions this broker leads with fewer in-sync replicas than replicas",
        gauge(
            core.partitions
                .iter()
                .filter(|p| p.under_replicated)
                .count() as i64,
        ),
    );
    register_partitions(registry, core);
}

/// A per-partition gauge: its name, its help, and how to read it from a partition.
type PartitionGauge = (&'static str, &'static str, fn(&PartitionMetrics) -> i64);

fn register_partitions(registry: &mut Registry, core: &BrokerMetrics) {
    type PartitionLabels = [(&'static str, String); 2];
    let families: [PartitionGauge; 6] = [
        (
            "kafka_log_log_size",
            "Bytes of the partition's segments",
            |p| p.size_bytes as i64,
        ),
        (
            "kafka_log_log_numlogsegments",
            "Segments of the partition",
            |p| p.segments as i64,
        ),
        ("kafka_log_log_logstartoffset", "Log start offset", |p| {
            p.log_start_offset
        }),
        ("kafka_log_log_logendoffset", "Log end offset", |p| {
            p.log_end_offset
        }),
        ("seedlog_partition_high_watermark", "High watermark", |p| {
            p.high_watermark
        }),
        (
            "kafka_cluster_partition_underreplicated",
            "1 if this broker leads the partition with fewer in-sync replicas than replicas",
            |p| i64::from(p.under_replicated),
        ),
    ];
    for (name, help, value) in families {
        let family = Family::<PartitionLabels, Gauge>::default();
        for partition in &core.partitions {
            let labels = [
                ("topic", partition.topic.clone()),
                ("partition", partition.partition.to_string()),
            ];
            family.get_or_create(&labels).set(value(partition));
        }
        registry.register(name, help, family);
    }
}

/// How the endpoint asks the driver for a snapshot.
pub type SnapshotRequest = oneshot::Sender<BrokerMetrics>;

/// Serves `GET /metrics` on `listener` until the process ends.
pub async fn serve(
    listener: TcpListener,
    metrics: ShellMetrics,
    snapshots: mpsc::Sender<SnapshotRequest>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let metrics = metrics.clone();
        let snapshots = snapshots.clone();
        tokio::spawn(async move {
            if let Err(error) = answer(stream, &metrics, &snapshots).await {
                tracing::debug!(%error, "metrics request failed");
            }
        });
    }
}

/// The largest request head read.
const REQUEST_HEAD_MAX_BYTES: usize = 8 * 1024;

async fn answer(
    mut stream: TcpStream,
    metrics: &ShellMetrics,
    snapshots: &mpsc::Sender<SnapshotRequest>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
            .await
            .map_err(|_| std::io::Error::other("request head timed out"))??;
        if read == 0 || head.len() + read > REQUEST_HEAD_MAX_BYTES {
            return Ok(());
        }
        head.extend_from_slice(&buffer[..read]);
    }
    let first_line = head.split(|byte| *byte == b'\r').next().unwrap_or_default();
    let (status, body) = match first_line
        .split(|byte| *byte == b' ')
        .take(2)
        .collect::<Vec<_>>()[..]
    {
        [b"GET", b"/metrics"] => {
            let (reply, snapshot) = oneshot::channel();
            let core = match snapshots.send(reply).await {
                Ok(()) => snapshot.await.unwrap_or_default(),
                Err(_) => BrokerMetrics::default(),
            };
            ("200 OK", metrics.render(&core))
        }
        _ => ("404 Not Found", "try GET /metrics\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::metrics::PartitionMetrics;

    fn partition(index: i32, under_replicated: bool) -> PartitionMetrics {
        PartitionMetrics {
            topic: "orders".to_owned(),
            partition: index,
            size_bytes: 0,
            segments: 1,
            log_start_offset: 0,
            log_end_offset: 0,
            high_watermark: 0,
            offline: false,
            under_replicated,
        }
    }

    #[test]
    fn under_replicated_partitions_are_counted_from_the_snapshot() {
        let core = BrokerMetrics {
            partitions: vec![partition(0, true), partition(1, false), partition(2, true)],
            ..BrokerMetrics::default()
        };
        let text = ShellMetrics::default().render(&core);
        assert!(
            text.contains("\nkafka_server_replicamanager_underreplicatedpartitions 2\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "\nkafka_cluster_partition_underreplicated{topic=\"orders\",partition=\"0\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "\nkafka_cluster_partition_underreplicated{topic=\"orders\",partition=\"1\"} 0\n"
            ),
            "{text}"
        );
    }
}
