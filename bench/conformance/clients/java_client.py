"""Java kafka-clients 4.4 conformance client: runs java/Conformance.java, one JVM per action.

The program is compiled with javac against the jars bench/peers/kafka.sh resolves (cached in
bench/.cache/conformance-java). It prints tab-separated result lines that this module parses.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from conformance.clients.base import ACTION_TIMEOUT, Client, TxnReport
from conformance.core import Rec, parse_record_lines

JAVA_DIR = Path(__file__).resolve().parents[1] / "java"
BENCH_DIR = Path(__file__).resolve().parents[2]


def kafka_classpath() -> str:
    proc = subprocess.run(["bash", str(BENCH_DIR / "peers" / "kafka.sh"), "classpath"],
                          capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def compile_program(out_dir: Path, classpath: str) -> Path:
    """javac Conformance.java into out_dir unless the class is newer than the source."""
    source = JAVA_DIR / "Conformance.java"
    target = out_dir / "Conformance.class"
    if target.exists() and target.stat().st_mtime >= source.stat().st_mtime:
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["javac", "-cp", classpath, "-d", str(out_dir), str(source)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"javac failed: {proc.stderr[-2000:]}")
    return out_dir


def records_stdin(records: list[Rec]) -> str:
    return "".join(f"{r.partition}\t{r.key}\t{r.value}\n" for r in records)


class JavaClient(Client):
    name = "java"

    def __init__(self, bootstrap: str, cache_dir: Path) -> None:
        super().__init__(bootstrap)
        jars = kafka_classpath()
        classes = compile_program(cache_dir / "conformance-java", jars)
        self.command = ["java", "-Xmx256m", f"-Dlog4j2.configurationFile={JAVA_DIR / 'log4j2.properties'}",
                        "-cp", f"{classes}:{jars}", "Conformance"]

    def _run(self, args: list[str], stdin: str = "") -> str:
        proc = subprocess.run(self.command + args, input=stdin, capture_output=True, text=True,
                              timeout=ACTION_TIMEOUT * 2 + 30)
        errors = [line[6:] for line in proc.stdout.splitlines() if line.startswith("ERROR ")]
        if proc.returncode != 0 or errors:
            reason = errors[0] if errors else (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
            raise RuntimeError(reason)
        return proc.stdout

    def create_topic(self, topic: str, partitions: int) -> int:
        out = self._run(["create-topic", self.bootstrap, topic, str(partitions)])
        for line in out.splitlines():
            if line.startswith("PARTITIONS "):
                return int(line.split()[1])
        raise RuntimeError("no PARTITIONS line")

    def produce(self, topic: str, records: list[Rec], acks: str, idempotent: bool) -> list[Rec]:
        out = self._run(["produce", self.bootstrap, topic, acks, str(idempotent).lower()], records_stdin(records))
        return parse_record_lines(out, "DELIVERED")

    def read_partitions(self, topic: str, partitions: list[int], isolation: str = "read_uncommitted") -> list[Rec]:
        out = self._run(["read", self.bootstrap, topic, isolation, ",".join(map(str, partitions))])
        return parse_record_lines(out)

    def group_consume(self, topic: str, group: str, expected: int) -> list[Rec]:
        return parse_record_lines(self._run(["group-consume", self.bootstrap, topic, group, str(expected)]))

    def transaction(self, input_topic: str, output_topic: str, group: str, txn_id: str,
                    expected_input: int, abort_records: list[Rec]) -> TxnReport:
        out = self._run(["transaction", self.bootstrap, input_topic, output_topic, group, txn_id,
                         str(expected_input)], records_stdin(abort_records))
        return TxnReport(consumed=parse_record_lines(out, "CONSUMED"))
