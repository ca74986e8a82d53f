//! The metrics endpoint answers `GET /metrics` in the Prometheus text format with the documented
//! Kafka-named metrics (docs/OPERATIONS.md), and the values follow what clients did.

use std::io::{Read, Write};
use std::net::TcpStream;

use super::broker_process::{free_port, temp_dir, BrokerProcess};
use super::real_tcp::{consume_all, create, produce};

fn http_get(address: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).expect("connect to the metrics listener");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n").expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    response
}

/// The whole-number value of the sample whose line starts with `series` (name and labels).
fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{series}: not a whole number"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_serves_kafka_named_metrics_that_follow_the_traffic() {
    let dir = temp_dir("metrics");
    let metrics_address = format!("127.0.0.1:{}", free_port());
    let listener_line = format!("metrics.listener={metrics_address}");
    let broker = BrokerProcess::start(&dir, &[&listener_line], &[]);
    create(&broker.address, "m", 2, &[("flush.messages", "1")]).await;
    produce(&broker.address, "m", 2, "all", "v", 50).await;
    consume_all(&broker.address, "m", 2, 50).await;

    let response = http_get(&metrics_address, "/metrics");
    let (head, text) = response.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    let messages_in = sample(
        text,
        "kafka_server_brokertopicmetrics_messagesin_total{topic=\"m\"}",
    );
    assert_eq!(messages_in, 50);
    let bytes_in = sample(
        text,
        "kafka_server_brokertopicmetrics_bytesin_total{topic=\"m\"}",
    );
    let bytes_out = sample(
        text,
        "kafka_server_brokertopicmetrics_bytesout_total{topic=\"m\"}",
    );
    assert!(bytes_in > 50 * 3, "{bytes_in}");
    assert!(
        bytes_out >= bytes_in,
        "everything was read back once: {bytes_out} < {bytes_in}"
    );
    let produces = sample(
        text,
        "kafka_network_requestmetrics_requests_total{request=\"Produce\"}",
    );
    assert!(produces >= 1);
    assert!(text.contains("kafka_network_requestmetrics_totaltimems_bucket{le="));
    assert_eq!(
        sample(
            text,
            "kafka_network_requestmetrics_totaltimems_count{request=\"Produce\"}"
        ),
        produces
    );
    partition_metrics(text);

    let missing = http_get(&metrics_address, "/other");
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
}

/// The per-partition and broker-wide gauges after 50 records into two partitions.
fn partition_metrics(text: &str) {
    let end_0 = sample(
        text,
        "kafka_log_log_logendoffset{topic=\"m\",partition=\"0\"}",
    );
    let end_1 = sample(
        text,
        "kafka_log_log_logendoffset{topic=\"m\",partition=\"1\"}",
    );
    assert_eq!(end_0 + end_1, 50);
    assert_eq!(
        sample(
            text,
            "seedlog_partition_high_watermark{topic=\"m\",partition=\"0\"}"
        ),
        end_0
    );
    assert_eq!(
        sample(
            text,
            "kafka_log_log_logstartoffset{topic=\"m\",partition=\"0\"}"
        ),
        0
    );
    assert!(sample(text, "kafka_log_log_size{topic=\"m\",partition=\"0\"}") > 0);
    assert_eq!(
        sample(text, "kafka_server_replicamanager_partitioncount"),
        2
    );
    assert_eq!(
        sample(text, "kafka_server_replicamanager_offlinereplicacount"),
        0
    );
    assert!(sample(text, "kafka_log_logflushstats_logflushrateandtimems_count") >= 1);
    assert_eq!(
        sample(
            text,
            "kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation=\"Produce\"}"
        ),
        0
    );
    assert!(text.contains("kafka_server_socketservermetrics_connection_count"));
}
