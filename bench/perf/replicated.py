#!/usr/bin/env python3
"""Replicated produce, side by side: a three-node seedlog cluster (one controller node and three
brokers) against a three-node Apache Kafka 4.4 cluster (KRaft, combined mode), on this machine,
with the same client (librdkafka through bench/perf/rdk_perf.py) and the same workload: a topic
with replication factor 3 and min.insync.replicas=2, acks=all, RECORDS records of SIZE bytes.

The clusters run one after the other, alternating (A B A B ...) for --repeat rounds, each round
on fresh data directories; the table gives the median of each cell with its min-max, and the
ratio of the medians. Ratios, not absolute figures, carry from run to run on a shared machine.

  $(python3 bench/benchenv.py) bench/perf/replicated.py [--records N] [--repeat R]
      [--partitions 1,6] [--no-write]

Needs target/release/seedlog (cargo build --release) and the Kafka 4.4 jars
(bash bench/peers/kafka.sh jars, resolved from Maven Central on first use).
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import benchenv  # noqa: E402

REPO = benchenv.REPO_DIR
KAFKA = benchenv.PEERS_DIR / "kafka.sh"
RDK_PERF = Path(__file__).resolve().parent / "rdk_perf.py"
SECTION = "## Replicated produce (RF 3, acks=all)"


def free_port_run(count: int) -> int:
    """A port p with p .. p + count - 1 all free."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count >= 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sock.bind(("127.0.0.1", port))
                sockets.append(sock)
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError("no run of free ports")


def wait_port(port: int, seconds: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"process for port {port} exited")
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after {seconds} s")


class Cluster:
    """Three broker processes (and, for seedlog, a controller) on loopback."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.root = root
        self.procs: list[subprocess.Popen] = []
        self.bootstrap = ""

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start_seedlog(root: Path) -> Cluster:
    cluster = Cluster("seedlog", root)
    binary = REPO / "target" / "release" / "seedlog"
    if not binary.exists():
        raise SystemExit("no target/release/seedlog: cargo build --release")
    base = free_port_run(4)
    controller_port, broker_ports = base, [base + 1, base + 2, base + 3]
    voters = f"controller.quorum.voters=100@127.0.0.1:{controller_port}\n"
    nodes = [(100, controller_port, "process.roles=controller\n")] + [
        (index, port, "") for index, port in enumerate(broker_ports)
    ]
    for node, port, extra in nodes:
        directory = root / f"node-{node}"
        directory.mkdir(parents=True)
        config = directory / "server.properties"
        config.write_text(
            f"node.id={node}\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={directory / 'data'}\n"
            + voters + extra
        )
        log = (directory / "node.log").open("w")
        proc = subprocess.Popen([str(binary), "broker", "--config", str(config)],
                                stdout=subprocess.DEVNULL, stderr=log)
        cluster.procs.append(proc)
        wait_port(port, 30, proc)
    cluster.bootstrap = ",".join(f"127.0.0.1:{port}" for port in broker_ports)
    return cluster


def kafka_jars() -> str:
    return subprocess.run(["bash", str(KAFKA), "jars"], check=True, capture_output=True,
                          text=True).stdout.strip().splitlines()[-1]


def start_kafka(root: Path, jars: str) -> Cluster:
    cluster = Cluster("kafka", root)
    base = free_port_run(6)
    ports = [(base + 2 * index, base + 2 * index + 1) for index in range(3)]
    voters = ",".join(f"{index + 1}@127.0.0.1:{cport}" for index, (_, cport) in enumerate(ports))
    java = ["java", "-Xmx1g", "-Xms1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
            "-Djava.awt.headless=true", "-cp", f"{jars}/*"]
    cluster_id = subprocess.run(java + ["kafka.tools.StorageTool", "random-uuid"], check=True,
                                capture_output=True, text=True).stdout.strip().splitlines()[-1]
    for index, (port, cport) in enumerate(ports):
        node = index + 1
        directory = root / f"node-{node}"
        directory.mkdir(parents=True)
        (directory / "log4j2.properties").write_text(
            "status = warn\nappender.file.type = File\nappender.file.name = FILE\n"
            f"appender.file.fileName = {directory}/server.log\n"
            "appender.file.layout.type = PatternLayout\n"
            "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = INFO\nrootLogger.appenderRef.file.ref = FILE\n")
        config = directory / "server.properties"
        config.write_text(f"""process.roles=broker,controller
node.id={node}
controller.quorum.voters={voters}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={directory / 'data'}
num.partitions=1
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
group.initial.rebalance.delay.ms=0
""")
        log4j = f"-Dlog4j2.configurationFile={directory / 'log4j2.properties'}"
        subprocess.run(java[:1] + [log4j] + java[1:] + ["kafka.tools.StorageTool", "format", "-t",
                       cluster_id, "-c", str(config)], check=True, capture_output=True)
        log = (directory / "node.log").open("w")
        proc = subprocess.Popen(java[:1] + [log4j] + java[1:] + ["kafka.Kafka", str(config)],
                                stdout=log, stderr=subprocess.STDOUT)
        cluster.procs.append(proc)
    for proc, (port, _) in zip(cluster.procs, ports):
        wait_port(port, 120, proc)
    cluster.bootstrap = ",".join(f"127.0.0.1:{port}" for port, _ in ports)
    return cluster


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while True:
        futures = admin.create_topics([NewTopic(topic, partitions, 3,
                                                config={"min.insync.replicas": "2"})])
        try:
            futures[topic].result(timeout=30)
            break
        except Exception as error:  # brokers still registering
            if "TOPIC_ALREADY_EXISTS" in str(error):
                break  # an earlier attempt that timed out here created it
            if time.monotonic() > deadline:
                raise RuntimeError(f"create {topic}: {error}") from error
            time.sleep(1)
    # Until every partition has a leader with a full ISR.
    while time.monotonic() < deadline:
        metadata = admin.list_topics(topic, timeout=10).topics[topic]
        parts = metadata.partitions.values()
        if len(parts) == partitions and all(p.leader >= 0 and len(p.isrs) == 3 for p in parts):
            return
        time.sleep(0.5)
    raise RuntimeError(f"{topic}: no full ISR")


@dataclass
class Result:
    records_per_sec: float
    mb_per_sec: float
    p50_ms: float
    p99_ms: float


def produce(bootstrap: str, topic: str, records: int, size: int, log: Path) -> Result:
    cmd = [sys.executable, str(RDK_PERF), "produce", "--bootstrap", bootstrap, "--topic", topic,
           "--num-records", str(records), "--record-size", str(size), "--acks", "all"]
    with log.open("w") as out:
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=out, text=True, timeout=1800)
    line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    found = re.search(r"([\d.]+) records/sec \(([\d.]+) MB/sec\).*?([\d.]+) ms 50th.*?([\d.]+) ms 99th",
                      line)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"producer failed ({done.returncode}): {line!r}, see {log}")
    return Result(*(float(value) for value in found.groups()))


@dataclass
class Cell:
    results: list[Result] = field(default_factory=list)

    def median(self, attr: str) -> float:
        return statistics.median(getattr(result, attr) for result in self.results)

    def spread(self, attr: str, fmt: str) -> str:
        values = [getattr(result, attr) for result in self.results]
        med = fmt.format(statistics.median(values))
        if len(values) == 1:
            return med
        return f"{med} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def run(args: argparse.Namespace) -> dict[tuple[str, int], Cell]:
    jars = kafka_jars()
    cells: dict[tuple[str, int], Cell] = {}
    warmup = max(1000, args.records // 10)
    for round_ in range(args.repeat):
        order = ["seedlog", "kafka"] if round_ % 2 == 0 else ["kafka", "seedlog"]
        for name in order:
            with tempfile.TemporaryDirectory(prefix=f"replicated-{name}-") as tmp:
                root = Path(tmp)
                cluster = start_seedlog(root) if name == "seedlog" else start_kafka(root, jars)
                try:
                    for partitions in args.partitions:
                        topic = f"perf-{partitions}p"
                        create_topic(cluster.bootstrap, topic, partitions)
                        produce(cluster.bootstrap, topic, warmup, args.record_size,
                                root / f"warmup-{partitions}.log")
                        result = produce(cluster.bootstrap, topic, args.records, args.record_size,
                                         root / f"produce-{partitions}.log")
                        cells.setdefault((name, partitions), Cell()).results.append(result)
                        print(f"round {round_ + 1} {name} {partitions}p: {result.records_per_sec:,.0f} "
                              f"records/s, p99 {result.p99_ms:.0f} ms", flush=True)
                finally:
                    cluster.stop()
    return cells


def table(args: argparse.Namespace, cells: dict[tuple[str, int], Cell]) -> list[str]:
    lines = [
        "| partitions | seedlog records/s | Kafka 4.4 records/s | ratio | seedlog p99 ms | Kafka p99 ms |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for partitions in args.partitions:
        ours, theirs = cells[("seedlog", partitions)], cells[("kafka", partitions)]
        ratio = ours.median("records_per_sec") / theirs.median("records_per_sec")
        lines.append(
            f"| {partitions} | {ours.spread('records_per_sec', '{:,.0f}')} | "
            f"{theirs.spread('records_per_sec', '{:,.0f}')} | {ratio:.2f}× | "
            f"{ours.spread('p99_ms', '{:.0f}')} | {theirs.spread('p99_ms', '{:.0f}')} |")
    return lines


def commit() -> str:
    rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True,
                         text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           capture_output=True, text=True).stdout.strip()
    return rev + ("+dirty" if dirty else "")


def write(args: argparse.Namespace, lines: list[str]) -> None:
    path = REPO / "docs" / "BENCHMARKS.md"
    text = path.read_text()
    body = [
        SECTION,
        "",
        f"Measured at `{commit()}` on {time.strftime('%Y-%m-%d')} with `bench/perf/replicated.py "
        f"--records {args.records} --repeat {args.repeat} --partitions "
        f"{','.join(map(str, args.partitions))}`: a topic with replication factor 3 and "
        "`min.insync.replicas=2`, librdkafka (confluent-kafka) producing "
        f"{args.records:,} records of {args.record_size} bytes with acks=all after a "
        f"{max(1000, args.records // 10):,}-record warm-up. seedlog: one controller node and three "
        "brokers (release build, Kafka's default flush policy); Kafka 4.4: three nodes in KRaft "
        "combined mode, `-Xmx1g` each. The clusters ran one after the other, alternating, on "
        "fresh data directories, all on this two-core machine. Each cell: median (min–max) over "
        "the rounds; the ratio is of the medians.",
        "",
        *lines,
        "",
    ]
    if SECTION in text:
        start = text.index(SECTION)
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + "\n".join(body) + (text[end + 1:] if end >= 0 else "")
    else:
        text = text.rstrip() + "\n\n" + "\n".join(body)
    path.write_text(text)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", default="1,6")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    args.partitions = [int(value) for value in args.partitions.split(",")]
    cells = run(args)
    lines = table(args, cells)
    print("\n".join(lines))
    if not args.no_write:
        write(args, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
