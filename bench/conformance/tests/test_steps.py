"""The steps against an in-memory fake client: a correct fake passes everything, each injected
bug fails the step that is meant to catch it."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from conformance.clients.base import Client, TxnReport
from conformance.core import STEPS, Rec, Status
from conformance.gaps import GapList, parse_gaps
from conformance.steps import Context, run_steps


@dataclass
class Entry:
    rec: Rec
    state: str = "committed"  # or "aborted"


@dataclass
class FakeBroker:
    logs: dict[str, dict[int, list[Entry]]] = field(default_factory=dict)
    commits: dict[tuple[str, str, int], int] = field(default_factory=dict)

    def append(self, topic: str, rec: Rec, state: str = "committed") -> Rec:
        log = self.logs[topic][rec.partition]
        stored = Rec(rec.partition, rec.key, rec.value, len(log))
        log.append(Entry(stored, state))
        return stored


class FakeClient(Client):
    name = "fake"

    def __init__(self, bugs: set[str] | None = None) -> None:
        super().__init__("fake:0")
        self.broker = FakeBroker()
        self.bugs = bugs or set()

    def create_topic(self, topic: str, partitions: int) -> int:
        self.broker.logs.setdefault(topic, {p: [] for p in range(partitions)})
        return 1 if "partitions" in self.bugs else partitions

    def produce(self, topic: str, records: list[Rec], acks: str, idempotent: bool) -> list[Rec]:
        if "no-idempotence" in self.bugs and idempotent:
            raise RuntimeError("UNSUPPORTED_VERSION InitProducerId")
        out = []
        for i, r in enumerate(records):
            if "drop" in self.bugs and i == len(records) - 1:
                continue
            out.append(self.broker.append(topic, r))
            if "duplicate" in self.bugs and idempotent and i == 0:
                self.broker.append(topic, r)
        if "reorder" in self.bugs:
            log = self.broker.logs[topic][0]
            if len(log) >= 2:
                log[0], log[1] = Entry(Rec(0, log[1].rec.key, log[1].rec.value, 0)), Entry(Rec(0, log[0].rec.key, log[0].rec.value, 1))
        return [Rec(r.partition, r.key, r.value, None if acks == "0" else r.offset) for r in out]

    def read_partitions(self, topic: str, partitions: list[int], isolation: str = "read_uncommitted") -> list[Rec]:
        return [e.rec for p in partitions for e in self.broker.logs[topic][p]
                if isolation == "read_uncommitted" or e.state == "committed"]

    def _consume(self, topic: str, group: str, commit: bool) -> list[Rec]:
        out = []
        for p, log in self.broker.logs[topic].items():
            start = self.broker.commits.get((group, topic, p), 0)
            out += [e.rec for e in log[start:]]
            if commit:
                self.broker.commits[(group, topic, p)] = len(log)
        return out

    def group_consume(self, topic: str, group: str, expected: int) -> list[Rec]:
        return self._consume(topic, group, commit="no-commit" not in self.bugs)

    def transaction(self, input_topic: str, output_topic: str, group: str, txn_id: str,
                    expected_input: int, abort_records: list[Rec]) -> TxnReport:
        consumed = self._consume(input_topic, group, commit="txn-offsets" not in self.bugs)
        for r in consumed:
            self.broker.append(output_topic, Rec(r.partition, r.key, "T:" + r.value))
        state = "committed" if "abort-visible" in self.bugs else "aborted"
        for r in abort_records:
            self.broker.append(output_topic, r, state)
        return TxnReport(consumed=consumed)


def run(bugs: set[str] | None = None, gaps: GapList | None = None, broker: str | None = None) -> dict[str, tuple[Status, str]]:
    ctx = Context(FakeClient(bugs), "t1", 30)
    return {r.step: (r.status, r.detail) for r in run_steps(ctx, list(STEPS), gaps or GapList(), broker)}


def test_correct_client_passes_every_step() -> None:
    results = run()
    assert list(results) == list(STEPS)
    assert all(status is Status.PASS for status, _ in results.values()), results


@pytest.mark.parametrize("bug, failing", [
    ("partitions", "create-topic"),
    ("drop", "produce-acks-1"),
    ("reorder", "read-assigned"),
    ("no-commit", "group-consume"),
    ("duplicate", "idempotent"),
    ("no-idempotence", "idempotent"),
    ("txn-offsets", "transaction"),
    ("abort-visible", "transaction"),
])
def test_each_bug_fails_its_step(bug: str, failing: str) -> None:
    status, detail = run({bug})[failing]
    assert status is Status.FAIL, detail
    assert "\n" not in detail


def test_expected_gaps_are_skipped_not_run() -> None:
    gaps = parse_gaps('[seedlog]\n"*/idempotent" = "no InitProducerId"\n')
    results = run({"no-idempotence"}, gaps, "seedlog")
    assert results["idempotent"] == (Status.SKIP, "expected gap: no InitProducerId")
    assert all(s is Status.PASS for step, (s, _) in results.items() if step != "idempotent")
    assert run({"no-idempotence"}, gaps, "kafka")["idempotent"][0] is Status.FAIL


def test_read_assigned_skips_without_produce() -> None:
    ctx = Context(FakeClient(), "t2", 5)
    results = list(run_steps(ctx, ["read-assigned"], GapList(), None))
    assert results[0].status is Status.SKIP
