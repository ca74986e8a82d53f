//! Connections and request memory stay bounded: idle connections and frames announced but never
//! sent cost little, `max.connections.per.ip` and `connections.max.idle.ms` close connections,
//! and `queued.max.request.bytes` stops reading sockets until buffered requests finish.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::broker_process::{temp_dir, BrokerProcess};
use super::real_tcp::{consume_all, create, produce};

/// An ApiVersions v0 request frame.
fn api_versions_frame() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&18i16.to_be_bytes()); // ApiVersions
    body.extend_from_slice(&0i16.to_be_bytes()); // v0
    body.extend_from_slice(&7i32.to_be_bytes()); // correlation id
    body.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// Whether `stream` gets an answer to ApiVersions within `wait`.
fn answers_within(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).expect("timeout");
    stream.write_all(&api_versions_frame()).expect("write");
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).is_ok()
}

/// Whether the broker closed `stream` (a read returns end of file) within `wait`.
fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).expect("timeout");
    let mut byte = [0u8; 1];
    matches!(stream.read(&mut byte), Ok(0))
        || matches!(stream.read(&mut byte), Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset)
}

/// RSS the broker may grow by while the hostile connections are open.
const RSS_GROWTH_BOUND_KIB: u64 = 64 * 1024;
/// Virtual memory it may grow by: untouched reservations do not show in RSS, so this is what
/// catches a buffer reserved for an announced size (100 × 100 MiB).
const VIRTUAL_GROWTH_BOUND_KIB: u64 = 2 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_and_announced_frames_keep_memory_bounded_and_others_served() {
    let dir = temp_dir("limits-memory");
    let broker = BrokerProcess::start(&dir, &[], &[]);
    create(&broker.address, "t", 1, &[]).await;
    produce(&broker.address, "t", 1, "all", "warm", 10).await;
    let before = broker.rss_kib();
    let virtual_before = broker.virtual_kib();

    let idle: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(&broker.address).expect("connect"))
        .collect();
    let mut announced: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(&broker.address).expect("connect"))
        .collect();
    for stream in &mut announced {
        // A 100 MiB frame (socket.request.max.bytes allows it), then nothing.
        stream
            .write_all(&(100i32 << 20).to_be_bytes())
            .expect("write");
        stream.write_all(&[0, 18, 0, 0]).expect("write");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = broker.rss_kib();
    let virtual_during = broker.virtual_kib();
    assert!(
        virtual_during < virtual_before + VIRTUAL_GROWTH_BOUND_KIB,
        "virtual memory grew from {virtual_before} KiB to {virtual_during} KiB"
    );
    assert!(
        during < before + RSS_GROWTH_BOUND_KIB,
        "RSS grew from {before} KiB to {during} KiB with 1,100 hostile connections"
    );
    // Others are served meanwhile.
    let sent = produce(&broker.address, "t", 1, "all", "more", 50).await;
    let read = consume_all(&broker.address, "t", 1, 10 + sent.len()).await;
    assert_eq!(read.values().map(Vec::len).sum::<usize>(), 10 + sent.len());
    drop((idle, announced));
    println!(
        "RSS before {before} KiB, with 1,100 hostile connections {during} KiB; \
         virtual {virtual_before} KiB, then {virtual_during} KiB"
    );
}

#[test]
fn a_connection_beyond_max_connections_per_ip_is_closed_at_once() {
    let dir = temp_dir("limits-per-ip");
    let broker = BrokerProcess::start(&dir, &["max.connections.per.ip=3"], &[]);
    // The readiness probe's connection counts until the broker has seen it close.
    std::thread::sleep(Duration::from_millis(500));
    let mut open: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(&broker.address).expect("connect"))
        .collect();
    for stream in &mut open {
        assert!(answers_within(stream, Duration::from_secs(5)));
    }
    let mut fourth = TcpStream::connect(&broker.address).expect("the kernel accepts");
    assert!(
        closed_within(&mut fourth, Duration::from_secs(5)),
        "the fourth is closed"
    );
    drop(open.pop());
    std::thread::sleep(Duration::from_millis(200));
    let mut again = TcpStream::connect(&broker.address).expect("connect");
    assert!(
        answers_within(&mut again, Duration::from_secs(5)),
        "a slot came free"
    );
    assert!(broker.stop().contains("max.connections.per.ip reached"));
}

#[test]
fn a_connection_that_sends_nothing_for_connections_max_idle_ms_is_closed() {
    let dir = temp_dir("limits-idle");
    let broker = BrokerProcess::start(&dir, &["connections.max.idle.ms=300"], &[]);
    let mut busy = TcpStream::connect(&broker.address).expect("connect");
    let mut idle = TcpStream::connect(&broker.address).expect("connect");
    for _ in 0..5 {
        assert!(answers_within(&mut busy, Duration::from_secs(5)));
        let mut rest = vec![0u8; 4096];
        let _ = busy.read(&mut rest);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        closed_within(&mut idle, Duration::from_secs(5)),
        "the idle one is closed"
    );
    assert!(
        answers_within(&mut busy, Duration::from_secs(5)),
        "the busy one is not"
    );
}

#[test]
fn queued_max_request_bytes_stops_reading_until_buffered_requests_finish() {
    let dir = temp_dir("limits-queued");
    let broker = BrokerProcess::start(
        &dir,
        &[
            "socket.request.max.bytes=1048576",
            "queued.max.request.bytes=1048576",
        ],
        &[],
    );
    // One connection buffers most of the bound: a 1,000,000-byte frame, 990,000 bytes in.
    let mut hog = TcpStream::connect(&broker.address).expect("connect");
    hog.write_all(&1_000_000i32.to_be_bytes()).expect("write");
    hog.write_all(&vec![0u8; 990_000]).expect("write");
    std::thread::sleep(Duration::from_millis(300));
    let mut other = TcpStream::connect(&broker.address).expect("connect");
    assert!(
        !answers_within(&mut other, Duration::from_millis(700)),
        "no room to read another request"
    );
    drop(hog);
    other
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut size = [0u8; 4];
    other
        .read_exact(&mut size)
        .expect("answered once the memory is free");
}
