"""Shared types of the conformance suite: records, step results, output lines, exit status."""
from __future__ import annotations

import enum
import json
from dataclasses import dataclass

CLIENTS = ("kafka-python", "confluent-kafka", "java", "kcat")
STEPS = (
    "create-topic",
    "produce-acks-0",
    "produce-acks-1",
    "produce-acks-all",
    "read-assigned",
    "group-consume",
    "idempotent",
    "transaction",
)
STEP_DESCRIPTIONS = {
    "create-topic": "create a topic with 3 partitions; the client's own metadata must show 3 partitions; "
                    "then the suite waits until every partition has a leader that serves it (Metadata "
                    "leader >= 0 and ListOffsets answered by that leader), as before every produce",
    "produce-acks-0": "produce N records with acks=0 to explicit partitions (i mod 3) until the client's "
                      "queue is empty (flush: one delivery report per record, no error, no offsets: acks=0 "
                      "acknowledges nothing); then wait until the broker's end offsets show them (at most "
                      "10 s, no fixed sleep) and report how many are missing: acks=0 may lose records",
    "produce-acks-1": "produce N records with acks=1; one successful delivery report per record, to the "
                      "partition asked for, offsets increasing in send order",
    "produce-acks-all": "produce N records with acks=all; as acks=1",
    "read-assigned": "assign all 3 partitions, read from the beginning to the end offset; every record "
                     "of the acks=1/all steps present once, keys/values intact, per-partition order kept; "
                     "acks=0 records may be lost (acks=0 promises nothing): the count lost is reported, "
                     "the ones present must be intact, once, in order",
    "group-consume": "subscribe with a new group, consume N records, commit, close; produce 3 more; "
                     "a new consumer in the same group gets exactly those 3 (resumes at the commit)",
    "idempotent": "enable.idempotence=true, acks=all: N records delivered once, read back in order",
    "transaction": "consume-transform-produce: a read_committed group consumer reads the input, a "
                   "transactional producer writes the output and sendOffsetsToTransaction, commits; a "
                   "second transaction is aborted; read_committed sees exactly the committed records, "
                   "read_uncommitted also the aborted ones; the group resumes after the committed offsets",
}


class Status(enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Rec:
    """A record as produced or observed. `offset` is None when the client does not report it."""

    partition: int
    key: str
    value: str
    offset: int | None = None

    def content(self) -> tuple[int, str, str]:
        return (self.partition, self.key, self.value)


@dataclass(frozen=True)
class StepResult:
    client: str
    step: str
    status: Status
    detail: str
    seconds: float = 0.0

    def line(self) -> str:
        """Exactly one line, e.g. 'PASS kafka-python produce-acks-all 3000 records'."""
        detail = " ".join(self.detail.split())  # never more than one line
        return f"{self.status.value} {self.client} {self.step} {detail}".rstrip()

    def to_dict(self) -> dict[str, object]:
        return {"client": self.client, "step": self.step, "status": self.status.value,
                "detail": self.detail, "seconds": round(self.seconds, 2)}


def exit_code(results: list[StepResult]) -> int:
    """Non-zero iff any step FAILed (SKIPs are allowed)."""
    return 1 if any(r.status is Status.FAIL for r in results) else 0


def summary_line(results: list[StepResult]) -> str:
    counts = {s: sum(1 for r in results if r.status is s) for s in Status}
    return (f"{counts[Status.PASS]} passed, {counts[Status.FAIL]} failed, "
            f"{counts[Status.SKIP]} skipped")


def parse_step_line(line: str) -> StepResult:
    """Inverse of StepResult.line (used to read results back)."""
    parts = line.split(" ", 3)
    if len(parts) < 3 or parts[0] not in Status.__members__:
        raise ValueError(f"not a step line: {line!r}")
    return StepResult(parts[1], parts[2], Status(parts[0]), parts[3] if len(parts) > 3 else "")


def parse_record_lines(text: str, tag: str = "REC") -> list[Rec]:
    """Lines 'TAG partition offset key value' (tab-separated) as written by Conformance.java."""
    out = []
    for line in text.splitlines():
        if not line.startswith(tag + "\t"):
            continue
        fields = line.split("\t")
        if len(fields) != 5:
            raise ValueError(f"bad {tag} line: {line!r}")
        _, partition, offset, key, value = fields
        off = int(offset)
        out.append(Rec(int(partition), key, value, None if off < 0 else off))
    return out


def parse_kcat_json(text: str) -> list[Rec]:
    """kcat -J consumer output: one JSON object per line (other lines are ignored)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        obj = json.loads(line)
        out.append(Rec(int(obj["partition"]), obj.get("key") or "", obj.get("payload") or "", int(obj["offset"])))
    return out


class NotSupported(Exception):
    """The client has no API for this action (reported as part of the step detail)."""
