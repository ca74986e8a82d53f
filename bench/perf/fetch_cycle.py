#!/usr/bin/env python3
"""Where a librdkafka consumer's fetch cycle goes, seen from the broker's socket syscalls.

  python3 bench/perf/fetch_cycle.py                          seedlog and Kafka 4.4, 1 and 6 partitions
  python3 bench/perf/fetch_cycle.py --brokers seedlog --partitions 6 --rounds 5
  python3 bench/perf/fetch_cycle.py --partitions 6 -X fetch.max.bytes=1048576

For each broker and partition count: start the broker alone, write the records with
`rdk_produce --acks all` (1,000,000 of 1,024 bytes by default), read them back `--rounds` times
with `rdk_consume` (the untraced rate), then once more while `perf trace` records the broker's
socket syscalls. librdkafka has one Fetch in flight per broker and sends the next one only once
it has taken in the previous response, so each fetch on the consumer's connection is a cycle of
three stages:

  broker   from the request read to the response's first byte written (the broker's own time)
  send     from the first byte written to the last (the header writes and the sendfile calls)
  client   from the last byte written to the next request read (the client receives and parses
           the response and sends its next Fetch; the broker's wake-up on that request)

Each stage is printed as a median with p10-p90 over the fetches that carried records. The trace
slows every syscall (Kafka writes in 256 KiB pieces, so it makes more of them), so the stages show
the shape of a cycle, not its untraced length; the untraced rate is printed beside them. Needs
`perf` (linux-perf, run as root) and librdkafka-dev.
"""
from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peers import control, kwire  # noqa: E402
from perf import report, tools  # noqa: E402

SYSCALLS = "read,readv,recvfrom,recvmsg,write,writev,sendto,sendmsg,sendfile"
READS = {"read", "readv", "recvfrom", "recvmsg"}
WRITES = {"write", "writev", "sendto", "sendmsg", "sendfile"}
# A finished syscall in `perf trace` output: "  521.254 ( 0.554 ms): comm/tid name(args) = ret".
# Calls that blocked print as two lines ("... [continued]: name()") and are left out: the socket
# calls here do not block (both brokers use non-blocking sockets).
LINE = re.compile(
    r"^\s*(?P<ts>\d+\.\d+) \(\s*(?P<dur>\d+\.\d+) ms\): (?P<thread>.+?)/\d+ "
    r"(?P<name>\w+)\((?P<args>.*)\)\s+= (?P<ret>-?\d+)"
)
FD = re.compile(r"\b(?:fd|out_fd): (?P<fd>\d+)")
DATA_BYTES = 1024  # a response that carries at least this much is a fetch with records


@dataclass(frozen=True)
class Call:
    """One finished socket syscall: start and end in ms (trace clock), its fd and byte count."""

    start: float
    end: float
    name: str
    fd: int
    nbytes: int

    @property
    def writes(self) -> bool:
        return self.name in WRITES


@dataclass(frozen=True)
class Cycle:
    """One request and its response on the consumer's connection, and the gap to the next one."""

    broker_ms: float
    send_ms: float
    client_ms: float | None  # None for the last response (no request followed it)
    nbytes: int

    @property
    def total_ms(self) -> float:
        return self.broker_ms + self.send_ms + (self.client_ms or 0.0)


def parse_trace(text: str) -> list[Call]:
    """The finished read and write syscalls of a `perf trace` output, in start order."""
    calls = []
    for line in text.splitlines():
        m = LINE.match(line)
        if not m or m["name"] not in READS | WRITES:
            continue
        fd = FD.search(m["args"])
        ret = int(m["ret"])
        if fd is None or ret <= 0:
            continue
        start = float(m["ts"])
        calls.append(Call(start, start + float(m["dur"]), m["name"], int(fd["fd"]), ret))
    calls.sort(key=lambda c: c.start)
    return calls


def busiest_connection(calls: list[Call]) -> int | None:
    """The fd the most bytes were written to: the consumer's connection."""
    written: dict[int, int] = {}
    for c in calls:
        if c.writes:
            written[c.fd] = written.get(c.fd, 0) + c.nbytes
    return max(written, key=lambda fd: written[fd]) if written else None


def cycles(calls: list[Call], fd: int) -> list[Cycle]:
    """Splits one connection's calls into request (reads) / response (writes) exchanges."""
    runs: list[list[Call]] = []
    for c in (c for c in calls if c.fd == fd):
        if runs and runs[-1][0].writes == c.writes:
            runs[-1].append(c)
        else:
            runs.append([c])
    out = []
    for i, run in enumerate(runs):
        if not run[0].writes or i == 0:
            continue
        request = runs[i - 1]
        following = runs[i + 1] if i + 1 < len(runs) else None
        out.append(Cycle(
            broker_ms=run[0].start - request[-1].end,
            send_ms=run[-1].end - run[0].start,
            client_ms=following[0].start - run[-1].end if following else None,
            nbytes=sum(c.nbytes for c in run),
        ))
    return out


def spread(values: list[float]) -> str:
    """'median (p10–p90)' in ms."""
    if not values:
        return "-"
    s = sorted(values)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return f"{statistics.median(s):.2f} ({pick(0.1):.2f}–{pick(0.9):.2f})"


def untraced(rates: list[float]) -> str:
    """The untraced rounds as the peers table shows a cell: median (min–max)."""
    median, low_high = report.median_spread(list(rates))
    if median is None or low_high is None:
        return "-"
    return f"{report.fmt_num(median)} ({report.fmt_num(low_high[0])}–{report.fmt_num(low_high[1])})"


def summarize(found: list[Cycle]) -> dict[str, str]:
    data = [c for c in found if c.nbytes >= DATA_BYTES]
    full = [c for c in data if c.client_ms is not None]
    return {
        "fetches": str(len(data)),
        "MB per fetch": f"{statistics.median(c.nbytes for c in data) / 1e6:.2f}" if data else "-",
        "broker ms": spread([c.broker_ms for c in data]),
        "send ms": spread([c.send_ms for c in data]),
        "client ms": spread([c.client_ms for c in full if c.client_ms is not None]),
        "cycle ms": spread([c.total_ms for c in full]),
        # What any broker that sends the same bytes pays too: the kernel's and the client's time.
        "send+client ms per MB": spread([(c.send_ms + (c.client_ms or 0.0)) / (c.nbytes / 1e6) for c in full]),
        "broker share": f"{100 * statistics.median(c.broker_ms / c.total_ms for c in full):.0f}%" if full else "-",
    }


def consume(bootstrap: str, topic: str, records: int, config: list[str]) -> float:
    extra = [arg for item in config for arg in ("-X", item)]
    out = subprocess.run([str(tools.rdk_bin("rdk_consume")), "--bootstrap", bootstrap, "--topic", topic,
                          "--num-records", str(records), *extra], capture_output=True, text=True, timeout=300)
    stats = tools.parse_rdk_consume(out.stdout + out.stderr)
    return stats.records_per_sec or 0.0


def measure(broker: str, partitions: int, records: int, rounds: int, config: list[str],
            workdir: Path) -> dict[str, str]:
    topic = f"cycle-{partitions}p"
    with control.Peer(broker, workdir / broker) as peer:
        assert peer.pid is not None
        error, message = kwire.create_topic(peer.bootstrap, topic, partitions)
        if error:
            raise RuntimeError(f"{broker}: create topic: {message}")
        time.sleep(1)
        subprocess.run([str(tools.rdk_bin("rdk_produce")), "--bootstrap", peer.bootstrap, "--topic", topic,
                        "--num-records", str(records), "--record-size", "1024", "--acks", "all"],
                       check=True, capture_output=True, timeout=300)
        rates = [consume(peer.bootstrap, topic, records, config) for _ in range(rounds)]
        trace_file = workdir / f"{broker}-{partitions}.trace"
        tracer = subprocess.Popen(["perf", "trace", "-o", str(trace_file), "-p", str(peer.pid), "-e", SYSCALLS],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2)  # perf trace attaches to every thread before the consumer connects
        traced = consume(peer.bootstrap, topic, records, config)
        time.sleep(0.5)
        tracer.terminate()
        tracer.wait(timeout=30)
    calls = parse_trace(trace_file.read_text(errors="replace"))
    fd = busiest_connection(calls)
    row = {"broker": broker, "partitions": str(partitions),
           "untraced rec/s": untraced(rates),
           "traced rec/s": f"{traced:,.0f}"}
    row.update(summarize(cycles(calls, fd)) if fd is not None else {})
    return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", default="seedlog,kafka")
    ap.add_argument("--partitions", default="1,6")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3, help="untraced consume runs before the traced one")
    ap.add_argument("-X", dest="config", action="append", default=[], metavar="KEY=VALUE",
                    help="a librdkafka consumer setting for every consume run (repeatable)")
    args = ap.parse_args(argv)
    if shutil.which("perf") is None:
        print("fetch_cycle: needs perf (apt-get install linux-perf)", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="fetch-cycle-") as tmp:
        for partitions in (int(p) for p in args.partitions.split(",")):
            for broker in args.brokers.split(","):
                rows.append(measure(broker, partitions, args.records, args.rounds, args.config, Path(tmp)))
                print(rows[-1], file=sys.stderr)
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row.get(c, "-") for c in columns) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
