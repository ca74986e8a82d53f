#!/usr/bin/env python3
"""Kafka's Java client through a leader's kill -9 on a real seedlog cluster (issue 7's real-mode
run, documented in docs/OPERATIONS.md with its output).

Starts a controller and three brokers on loopback (free ports), creates a topic with three
replicas and min.insync.replicas=2 with Kafka 4.4's TopicCommand, then has the Java producer of
bench/conformance/java/Conformance.java send RECORDS records with acks=all. While it sends (once
the leader's log of partition 0 holds --kill-at bytes), the leader of partition 0 is killed with
SIGKILL; the producer fails over to the leader the
controller elects. Afterwards the Java consumer reads every partition back, and the script
checks that every acknowledged record is at its acknowledged offset. TopicCommand --describe
shows the leaders and ISRs before and after the kill.

    python3 scripts/java_failover.py [--records N] [--bin target/release/seedlog] [--combined]

With --combined the cluster is three combined nodes (process.roles=broker,controller, a Raft
quorum of three controllers), so the kill takes one of the controllers with the leader.

Needs java, javac and Maven (the jars come from bench/peers/kafka.sh). Exit status 0 only if
nothing acknowledged was lost.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from conformance.clients.java_client import JAVA_DIR, compile_program, kafka_classpath  # noqa: E402

TOPIC = "failover"
PARTITIONS = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"nothing listens on {port}")


def start_cluster(binary: Path, root: Path) -> tuple[dict[int, subprocess.Popen], str]:
    controller_port = free_port()
    voters = f"controller.quorum.voters=100@127.0.0.1:{controller_port}\n"
    nodes = {100: controller_port, **{node: free_port() for node in range(3)}}
    processes = {}
    for node, port in nodes.items():
        role = "process.roles=controller\n" if node == 100 else ""
        config = root / f"node-{node}.properties"
        config.write_text(
            f"{role}node.id={node}\nlisteners=PLAINTEXT://127.0.0.1:{port}\n"
            f"log.dirs={root / f'data-{node}'}\n{voters}"
        )
        log = open(root / f"node-{node}.log", "w")
        processes[node] = subprocess.Popen([str(binary), "broker", "--config", str(config)], stderr=log)
        wait_port(port)
    bootstrap = ",".join(f"127.0.0.1:{nodes[node]}" for node in range(3))
    return processes, bootstrap


def start_combined_cluster(binary: Path, root: Path) -> tuple[dict[int, subprocess.Popen], str]:
    """Three combined nodes (process.roles=broker,controller): each a broker and one of a Raft
    quorum of three controllers (each takes Raft messages on its controller port + 1)."""
    ports = {}
    while len(ports) < 3:
        broker, controller = free_port(), free_port()
        taken = {port for pair in ports.values() for port in (pair[0], pair[1], pair[1] + 1)}
        if not {broker, controller, controller + 1} & taken and broker != controller + 1:
            ports[len(ports)] = (broker, controller)
    voters = ",".join(f"{node}@127.0.0.1:{controller}" for node, (_, controller) in ports.items())
    processes = {}
    for node, (broker, controller) in ports.items():
        config = root / f"node-{node}.properties"
        config.write_text(
            f"process.roles=broker,controller\nnode.id={node}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}\n"
            f"controller.listener.names=CONTROLLER\ncontroller.quorum.voters={voters}\n"
            f"log.dirs={root / f'data-{node}'}\n"
        )
        log = open(root / f"node-{node}.log", "w")
        processes[node] = subprocess.Popen([str(binary), "broker", "--config", str(config)], stderr=log)
    for broker, _ in ports.values():
        wait_port(broker)
    bootstrap = ",".join(f"127.0.0.1:{broker}" for broker, _ in ports.values())
    return processes, bootstrap


def topic_command(classpath: str, bootstrap: str, *args: str) -> str:
    command = ["java", "-cp", classpath, "org.apache.kafka.tools.TopicCommand",
               "--bootstrap-server", bootstrap, *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"TopicCommand {args}: {proc.stderr[-1000:]}")
    return proc.stdout


def leaders(description: str) -> dict[int, int]:
    """Partition -> leader from TopicCommand --describe."""
    found = {}
    for line in description.splitlines():
        fields = dict(field.split(": ", 1) for field in line.strip().split("\t") if ": " in field)
        if "Partition" in fields and "Leader" in fields:
            found[int(fields["Partition"])] = int(fields["Leader"])
    return found


def log_bytes(partition_dir: Path) -> int:
    """Bytes in a partition's segment files (what the broker has appended so far)."""
    return sum(path.stat().st_size for path in partition_dir.glob("*.log")) if partition_dir.exists() else 0


def conformance(classes: Path, classpath: str, *args: str, stdin: str = "") -> list[str]:
    command = ["java", "-Xmx512m", f"-Dlog4j2.configurationFile={JAVA_DIR / 'log4j2.properties'}",
               "-cp", f"{classes}:{classpath}", "Conformance", *args]
    proc = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=600)
    lines = proc.stdout.splitlines()
    errors = [line for line in lines if line.startswith("ERROR ")]
    if proc.returncode != 0 or errors:
        raise SystemExit(f"Conformance {args[0]}: {errors[:1] or proc.stderr[-1000:]}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--bin", default=os.environ.get("SEEDLOG_BIN", "target/release/seedlog"))
    parser.add_argument("--kill-at", type=int, default=1 << 20,
                        help="kill once the leader's log of partition 0 holds this many bytes")
    parser.add_argument("--combined", action="store_true",
                        help="three combined nodes (process.roles=broker,controller) instead of "
                             "a controller and three brokers; the kill takes a controller too")
    args = parser.parse_args()
    binary = (REPO / args.bin).resolve()
    classpath = kafka_classpath()
    classes = compile_program(REPO / "bench" / ".cache" / "conformance-java", classpath)
    with tempfile.TemporaryDirectory(prefix="seedlog-java-failover-") as tmp:
        start = start_combined_cluster if args.combined else start_cluster
        processes, bootstrap = start(binary, Path(tmp))
        try:
            topic_command(classpath, bootstrap, "--create", "--topic", TOPIC, "--partitions",
                          str(PARTITIONS), "--replication-factor", "3", "--config",
                          "min.insync.replicas=2")
            time.sleep(2)
            before = topic_command(classpath, bootstrap, "--describe", "--topic", TOPIC)
            print(before, end="")
            victim = leaders(before)[0]
            stdin = "".join(f"{i % PARTITIONS}\tk{i}\tv{i}\n" for i in range(args.records))

            def kill_leader() -> None:
                # Mid-stream: once partition 0 holds acknowledged records, and well before the
                # last ones are sent.
                partition_dir = Path(tmp) / f"data-{victim}" / f"{TOPIC}-0"
                while log_bytes(partition_dir) < args.kill_at:
                    time.sleep(0.01)
                print(f"kill -9 broker {victim} (leader of {TOPIC}-0) with {log_bytes(partition_dir)} "
                      f"bytes in its log, {time.monotonic() - started:.1f} s into the send")
                processes[victim].send_signal(signal.SIGKILL)

            started = time.monotonic()
            killer = threading.Thread(target=kill_leader)
            killer.start()
            delivered = conformance(classes, classpath, "produce", bootstrap, TOPIC, "all", "false",
                                    stdin=stdin)
            killer.join()
            acked = {}
            for line in delivered:
                if line.startswith("DELIVERED\t"):
                    _, partition, offset, _key, value = line.split("\t")
                    acked[value] = (int(partition), int(offset))
            print(f"producer: {len(acked)} of {args.records} records acknowledged "
                  f"in {time.monotonic() - started:.1f} s")
            after = topic_command(classpath, bootstrap, "--describe", "--topic", TOPIC)
            print(after, end="")
            read = conformance(classes, classpath, "read", bootstrap, TOPIC, "read_uncommitted",
                               ",".join(str(p) for p in range(PARTITIONS)))
            found = {}
            for line in read:
                if line.startswith("REC\t"):
                    _, partition, offset, _key, value = line.split("\t")
                    found[(int(partition), int(offset))] = value
            missing = [value for value, place in acked.items() if found.get(place) != value]
            print(f"consumer: {len(found)} records read back; acknowledged records missing or "
                  f"moved: {len(missing)}{' e.g. ' + ', '.join(missing[:5]) if missing else ''}")
            return 1 if missing or not acked else 0
        finally:
            for process in processes.values():
                process.kill()
                process.wait()


if __name__ == "__main__":
    sys.exit(main())
