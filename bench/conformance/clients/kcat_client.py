"""kcat (Debian's kcat 1.7.1, librdkafka 2.0.2) conformance client.

kcat has no admin API: topics are created with bench/peers/kwire.py (CreateTopics v2) and the
step checks that kcat's own metadata (-L) shows them. kcat has no sendOffsetsToTransaction, so
its transaction step covers commit, abort and read_committed only (TxnReport.offsets_in_txn=False).
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import time

from conformance.clients.base import ACTION_TIMEOUT, Client, TxnReport
from conformance.core import Rec, parse_kcat_json
from peers import kwire

DELIVERED = re.compile(r"Message delivered to partition (\d+) \(offset (-?\d+)\)")
# kcat reads stdin with stdio in 4096-byte blocks: records only reach the broker once a block is
# full (or at EOF). To abort a transaction kcat must be signalled while blocked on an empty
# buffer, so the aborted input is padded to whole 4096-byte blocks of 128-byte lines.
ABORT_LINE = 128
STDIN_BLOCK = 4096


def kcat_line(r: Rec) -> str:
    return f"{r.key}\t{r.value}\n"


def pad_for_abort(records: list[Rec]) -> list[Rec]:
    """Records whose kcat lines are exactly ABORT_LINE bytes, padded to a whole STDIN_BLOCK."""
    per_block = STDIN_BLOCK // ABORT_LINE
    count = -(-len(records) // per_block) * per_block if records else 0
    base = records[0] if records else Rec(0, "k", "")
    out = []
    for i in range(count):
        src = records[i] if i < len(records) else Rec(base.partition, f"kpad{i}", "pad")
        head = len(src.key) + 1 + len(src.value) + 1
        if head > ABORT_LINE:
            raise ValueError(f"record too long for a {ABORT_LINE}-byte kcat line: {src}")
        out.append(Rec(src.partition, src.key, src.value + "." * (ABORT_LINE - head)))
    return out


def parse_deliveries(stderr: str, records: list[Rec]) -> list[Rec]:
    """kcat -vvv prints one delivery line per record, in produce order for one partition."""
    found = [(int(p), int(o)) for p, o in DELIVERED.findall(stderr)]
    return [Rec(p, r.key, r.value, o if o >= 0 else None) for r, (p, o) in zip(records, found)]


class KcatClient(Client):
    name = "kcat"

    def _kcat(self, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["kcat", "-b", self.bootstrap, "-m", "30", *args], input=stdin,
                              capture_output=True, text=True, timeout=ACTION_TIMEOUT + 30)
        if proc.returncode != 0:
            raise RuntimeError(f"kcat {' '.join(args[:2])} exit {proc.returncode}: "
                               + (proc.stderr.strip().splitlines() or [""])[-1])
        return proc

    def create_topic(self, topic: str, partitions: int) -> int:
        error, message = kwire.create_topic(self.bootstrap, topic, partitions)
        if error not in (0, 36):
            raise RuntimeError(f"CreateTopics error {error}: {message}")
        deadline = time.monotonic() + 30
        count = 0
        while time.monotonic() < deadline:
            md = json.loads(self._kcat(["-L", "-J", "-t", topic]).stdout)
            for t in md.get("topics", []):
                if t.get("topic") == topic and not t.get("error"):
                    count = len(t.get("partitions", []))
            if count >= partitions:
                break
            time.sleep(0.3)
        return count

    def produce(self, topic: str, records: list[Rec], acks: str, idempotent: bool) -> list[Rec]:
        # kcat -P exits only after its queue is empty (it polls until librdkafka's out queue is
        # drained; with acks=0 a message is reported delivered once written to the socket). The
        # step checks one delivery line per record, so nothing here needs a sleep.
        delivered: list[Rec] = []
        for partition in sorted({r.partition for r in records}):
            part = [r for r in records if r.partition == partition]
            proc = self._kcat(["-P", "-t", topic, "-p", str(partition), "-K", "\t", "-v", "-v", "-v",
                               "-X", f"acks={acks}", "-X", f"enable.idempotence={str(idempotent).lower()}"],
                              "".join(kcat_line(r) for r in part))
            if "ERROR" in proc.stderr or "Delivery failed" in proc.stderr:
                raise RuntimeError(proc.stderr.strip().splitlines()[-1])
            delivered += parse_deliveries(proc.stderr, part)
        return delivered

    def read_partitions(self, topic: str, partitions: list[int], isolation: str = "read_uncommitted") -> list[Rec]:
        out: list[Rec] = []
        for p in partitions:
            proc = self._kcat(["-C", "-t", topic, "-p", str(p), "-o", "beginning", "-e", "-J", "-q",
                               "-X", f"isolation.level={isolation}"])
            out += parse_kcat_json(proc.stdout)
        return out

    def group_consume(self, topic: str, group: str, expected: int) -> list[Rec]:
        # -G: balanced consumer; -e: exit once every assigned partition is at its end. Offsets are
        # stored per message and committed by the consumer close (enable.auto.commit default).
        proc = self._kcat(["-G", group, "-e", "-J", "-q", "-X", "auto.offset.reset=earliest", topic])
        return parse_kcat_json(proc.stdout)

    def transaction(self, input_topic: str, output_topic: str, group: str, txn_id: str,
                    expected_input: int, abort_records: list[Rec]) -> TxnReport:
        md = kwire.metadata(self.bootstrap)
        consumed = self.read_partitions(input_topic, list(range(md.topics.get(input_topic, 0))),
                                        "read_committed")
        for partition in sorted({r.partition for r in consumed}):
            lines = "".join(f"{r.key}\tT:{r.value}\n" for r in consumed if r.partition == partition)
            self._kcat(["-P", "-t", output_topic, "-p", str(partition), "-K", "\t", "-q",
                        "-X", f"transactional.id={txn_id}-p{partition}"], lines)  # EOF: commit
        aborted = pad_for_abort(abort_records)
        partition = aborted[0].partition if aborted else 0
        proc = subprocess.Popen(["kcat", "-b", self.bootstrap, "-m", "30", "-P", "-t", output_topic, "-p",
                                 str(partition), "-K", "\t", "-X", f"transactional.id={txn_id}-abort"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdin is not None and proc.stderr is not None
            proc.stdin.write("".join(kcat_line(r) for r in aborted))
            proc.stdin.flush()
            time.sleep(3)  # the records reach the broker inside the open transaction
            proc.send_signal(signal.SIGINT)  # kcat aborts the transaction on a termination signal
            time.sleep(0.5)
            proc.stdin.close()
            proc.wait(ACTION_TIMEOUT)
            err = proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if "Aborting transaction" not in err or proc.returncode != 0:
            raise RuntimeError(f"kcat abort: exit {proc.returncode}: {err.strip()[-300:]}")
        return TxnReport(consumed=consumed, offsets_in_txn=False, aborted=aborted,
                         note="kcat: commit via EOF, abort via SIGINT; no sendOffsetsToTransaction")
