"""Perf tool command lines and output parsers.

Two clients run the same workloads:
  java     Kafka's own org.apache.kafka.tools.ProducerPerformance / ConsumerPerformance (kafka-tools 4.4.0)
  rdkafka  bench/perf/rdk_perf.py (confluent-kafka, i.e. librdkafka), same summary line format,
           and its C twins bench/perf/rdk_produce.c and rdk_consume.c
  seedlog  `seedlog perf produce|consume` (the seedlog clients; Kafka's perf tools' output format)
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

JAVA_TOOL_HEAP = "-Xmx512m"
CONSUMER_GROUP_TIMEOUT_MS = 60000  # ConsumerPerformance --timeout: tansu's first join takes ~20 s (G5)

PRODUCER_LINE = re.compile(
    r"(?P<records>\d+) records sent, (?P<rps>[\d.]+) records/sec \((?P<mbps>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+|NaN|nan) ms avg latency, (?P<max>[\d.]+|NaN|nan) ms max latency, "
    r"(?P<p50>[\d.]+|nan) ms 50th, (?P<p95>[\d.]+|nan) ms 95th, (?P<p99>[\d.]+|nan) ms 99th, "
    r"(?P<p999>[\d.]+|nan) ms 99.9th"
)
RDK_CONSUMER_LINE = re.compile(
    r"(?P<records>\d+) records consumed, (?P<rps>[\d.]+|nan) records/sec \((?P<mbps>[\d.]+|nan) MB/sec\), "
    r"(?P<elapsed>\d+) ms elapsed"
)


class ParseError(ValueError):
    """A perf tool's output did not contain the expected summary."""


@dataclass
class Stats:
    """One measured phase. Latencies in ms; None where the tool does not report them."""

    records: int
    records_per_sec: float
    mb_per_sec: float
    avg_ms: float | None = None
    max_ms: float | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    elapsed_ms: float | None = None
    rebalance_ms: float | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _num(text: str) -> float | None:
    value = float(text)
    return None if math.isnan(value) else value


def parse_producer_summary(output: str) -> Stats:
    """The last ProducerPerformance-style summary line (the final one, not the 5 s windows)."""
    matches = list(PRODUCER_LINE.finditer(output))  # the 5 s window lines have no percentiles
    if not matches:
        raise ParseError("no producer summary line")
    m = matches[-1]
    return Stats(
        records=int(m["records"]),
        records_per_sec=float(m["rps"]),
        mb_per_sec=float(m["mbps"]),
        avg_ms=_num(m["avg"]),
        max_ms=_num(m["max"]),
        p50_ms=_num(m["p50"]),
        p95_ms=_num(m["p95"]),
        p99_ms=_num(m["p99"]),
        p999_ms=_num(m["p999"]),
    )


def parse_consumer_performance(output: str) -> Stats:
    """ConsumerPerformance's CSV summary. Throughput is the fetch.* columns (rebalance excluded)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("start.time"):
            header = [h.strip() for h in line.split(",")]
            # the data row is the next line with as many fields (a WARNING line may come first)
            rows = [[v.strip() for v in x.split(",")] for x in lines[i + 1 :]]
            values = next((r for r in rows if len(r) == len(header)), None)
            if values is None:
                raise ParseError(f"no ConsumerPerformance row with the header's {len(header)} fields")
            row = dict(zip(header, values))
            try:
                return Stats(
                    records=int(row["data.consumed.in.nMsg"]),
                    records_per_sec=float(row["fetch.nMsg.sec"]),
                    mb_per_sec=float(row["fetch.MB.sec"]),
                    elapsed_ms=float(row["fetch.time.ms"]),
                    rebalance_ms=float(row["rebalance.time.ms"]),
                )
            except (KeyError, ValueError) as e:
                raise ParseError(f"ConsumerPerformance row: {e}") from e
    raise ParseError("no ConsumerPerformance header")


def parse_rdk_consume(output: str) -> Stats:
    m = None
    for m in RDK_CONSUMER_LINE.finditer(output):
        pass
    if m is None:
        raise ParseError("no rdk_perf consume line")
    return Stats(
        records=int(m["records"]),
        records_per_sec=float(m["rps"]),
        mb_per_sec=float(m["mbps"]),
        elapsed_ms=float(m["elapsed"]),
    )


@dataclass(frozen=True)
class Workload:
    """One cell row of the perf table."""

    op: str  # "produce" | "consume"
    client: str  # "java" | "rdkafka"
    partitions: int
    acks: str | None  # "1" | "all" for produce
    idempotent_default: bool = False  # Java producer with its defaults (idempotence on)
    # librdkafka consumer with fetch.queue.backoff.ms=10: its default (1,000 ms) idles a consumer
    # whose local queue filled, which penalises the faster broker (docs/BENCHMARKS.md).
    short_queue_backoff: bool = False
    compression: str | None = None  # librdkafka producer's compression.type (None: none)
    # librdkafka driven from C (bench/perf/rdk_consume.c, rdk_produce.c) instead of Python: the
    # Python loops make an object or a call per record and cap both brokers here.
    native: bool = False

    @property
    def key(self) -> str:
        parts = [self.op, self.client, f"p{self.partitions}"]
        if self.acks:
            parts.append(f"acks{self.acks}")
        if self.compression:
            parts.append(self.compression)
        if self.idempotent_default:
            parts.append("idem")
        if self.short_queue_backoff:
            parts.append("qb10")
        if self.native:
            parts.append("c")
        return "-".join(parts)

    @property
    def label(self) -> str:
        tool = {
            ("produce", "java"): "ProducerPerformance",
            ("consume", "java"): "ConsumerPerformance (group)",
            ("produce", "rdkafka"): "librdkafka producer",
            ("consume", "rdkafka"): "librdkafka consumer (assign)",
            ("produce", "seedlog"): "seedlog perf produce",
            ("consume", "seedlog"): "seedlog perf consume (assign)",
        }[(self.op, self.client)]
        if self.native:
            tool = tool.replace("librdkafka consumer", "librdkafka consumer in C").replace(
                "librdkafka producer", "librdkafka producer in C")
        text = f"{self.op} · {tool} · {self.partitions}p"
        if self.acks:
            text += f" · acks={self.acks}"
        if self.idempotent_default:
            text += " · Java defaults (idempotent)"
        if self.short_queue_backoff:
            text += " · fetch.queue.backoff.ms=10"
        if self.compression:
            text += f" · {self.compression}"
        return text

    @property
    def gap_key(self) -> str:
        """Key in gaps.toml's perf section (e.g. "consume-java")."""
        return f"{self.op}-{self.client}" + ("-idempotent" if self.idempotent_default else "")


def seedlog_bin() -> str:
    """The seedlog binary the clients run from: SEEDLOG_BIN, else the release build."""
    import os

    return os.environ.get("SEEDLOG_BIN") or str(Path(__file__).resolve().parents[2] / "target/release/seedlog")


def rdk_bin(name: str) -> Path:
    """bench/perf/NAME.c (rdk_consume, rdk_produce, both including rdk_common.h), compiled once
    into bench/.cache (rebuilt when either file is newer; needs
    librdkafka's headers: Debian's librdkafka-dev); an OSError says why it could not be built."""
    import shutil
    import subprocess

    src = Path(__file__).resolve().parent / f"{name}.c"
    header = src.with_name("rdk_common.h")
    out = Path(__file__).resolve().parents[1] / ".cache" / name
    if out.exists() and out.stat().st_mtime >= max(src.stat().st_mtime, header.stat().st_mtime):
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise OSError(f"no C compiler for bench/perf/{name}.c")
    out.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([cc, "-O2", "-o", str(out), str(src), "-lrdkafka"], capture_output=True, text=True)
    if r.returncode != 0:
        raise OSError(f"building {name} (apt-get install librdkafka-dev?): {r.stderr.strip()[:200]}")
    return out


def java_cmd(jars: Path, main_class: str, args: list[str]) -> list[str]:
    return ["java", JAVA_TOOL_HEAP, "-cp", f"{jars}/*", main_class, *args]


def produce_cmd(w: Workload, bootstrap: str, topic: str, records: int, record_size: int,
                jars: Path, python: Path, rdk_perf: Path) -> list[str]:
    assert w.op == "produce" and w.acks is not None
    if w.client == "java":
        props = [f"acks={w.acks}"]
        if not w.idempotent_default:
            props.append("enable.idempotence=false")
        return java_cmd(jars, "org.apache.kafka.tools.ProducerPerformance", [
            "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
            "--record-size", str(record_size), "--throughput", "-1", "--command-property", *props,
        ])
    if w.client == "seedlog":
        # enable.idempotence=false: the plain path, as the Java and librdkafka rows measure it
        return [seedlog_bin(), "perf", "produce", "--bootstrap-server", bootstrap, "--topic", topic,
                "--num-records", str(records), "--record-size", str(record_size), "--throughput", "-1",
                "--producer-props", f"acks={w.acks}", "enable.idempotence=false"]
    extra = ["-X", f"compression.type={w.compression}"] if w.compression else []
    if w.native:
        return [str(rdk_bin("rdk_produce")), "--bootstrap", bootstrap, "--topic", topic,
                "--num-records", str(records), "--record-size", str(record_size), "--acks", w.acks, *extra]
    return [str(python), str(rdk_perf), "produce", "--bootstrap", bootstrap, "--topic", topic,
            "--num-records", str(records), "--record-size", str(record_size), "--acks", w.acks, *extra]


def consume_cmd(w: Workload, bootstrap: str, topic: str, records: int, group: str,
                jars: Path, python: Path, rdk_perf: Path) -> list[str]:
    assert w.op == "consume"
    if w.client == "java":
        return java_cmd(jars, "org.apache.kafka.tools.ConsumerPerformance", [
            "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
            "--timeout", str(CONSUMER_GROUP_TIMEOUT_MS), "--group", group,
        ])
    if w.client == "seedlog":
        return [seedlog_bin(), "perf", "consume", "--bootstrap-server", bootstrap, "--topic", topic,
                "--messages", str(records)]
    extra = ["-X", "fetch.queue.backoff.ms=10"] if w.short_queue_backoff else []
    if w.native:
        return [str(rdk_bin("rdk_consume")), "--bootstrap", bootstrap, "--topic", topic, "--num-records", str(records),
                *extra]
    return [str(python), str(rdk_perf), "consume", "--bootstrap", bootstrap, "--topic", topic,
            "--num-records", str(records), *extra]


def parse_output(w: Workload, output: str) -> Stats:
    if w.op == "produce":
        return parse_producer_summary(output)
    if w.client in ("java", "seedlog"):
        return parse_consumer_performance(output)
    return parse_rdk_consume(output)
