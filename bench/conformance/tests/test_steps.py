"""The steps against an in-memory fake client: a correct fake passes everything, each injected
bug fails the step that is meant to catch it.

The fake broker behaves like Kafka 4.4 in the two ways issue 12 turned on:
- right after CreateTopics a partition first has no leader, then a leader in Metadata that does
  not serve it yet, then a ready leader (one stage per probe of the leader wait). A produce to a
  partition that is not ready fails (acks=1/all); with acks=0 it is dropped silently together with
  everything after it on that connection (Kafka closes the connection);
- an acks=0 producer returns once its requests are written; the broker reads them later (a few
  records per look at the end offsets), so a step that does not wait for them lets the next
  step's records overtake them.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import pytest

from conformance.broker_view import PartitionState, wait_for_end_offsets, wait_for_leaders
from conformance.clients.base import Client, TxnReport
from conformance.core import STEPS, Rec, Status
from conformance.gaps import GapList, parse_gaps
from conformance.steps import Context, run_steps

NOT_LEADER = "ListOffsets NOT_LEADER_OR_FOLLOWER"
READ_PER_LOOK = 7  # acks=0 records the fake broker reads from the socket per end-offset look


@dataclass
class Entry:
    rec: Rec
    state: str = "committed"  # or "aborted"


class NotReady(RuntimeError):
    """A produce reached a partition whose leader does not serve it yet."""


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeBroker:
    logs: dict[str, dict[int, list[Entry]]] = field(default_factory=dict)
    commits: dict[tuple[str, str, int], int] = field(default_factory=dict)
    probes: dict[str, int] = field(default_factory=dict)  # topic -> leader-wait probes so far
    unread: deque[tuple[str, Rec]] = field(default_factory=deque)  # acks=0 requests not read yet
    never_ready: bool = False
    unready_produces: int = 0  # produces that reached a partition whose leader was not ready
    clock: FakeClock = field(default_factory=FakeClock)

    def create(self, topic: str, partitions: int) -> None:
        if topic not in self.logs:
            self.logs[topic] = {p: [] for p in range(partitions)}
            self.probes[topic] = 0

    def state(self, topic: str, partition: int) -> PartitionState:
        """Partition p: no leader for p+1 probes, then a leader that does not serve it yet for
        one more probe (Kafka 4.4's window), then ready."""
        age = self.probes[topic] - partition
        if self.never_ready or age <= 1:
            return PartitionState(partition, -1)
        if age == 2:
            return PartitionState(partition, 0, NOT_LEADER)
        return PartitionState(partition, 0)

    def probe(self, topic: str) -> list[PartitionState]:
        self.probes[topic] += 1
        return [self.state(topic, p) for p in self.logs[topic]]

    def ready(self, topic: str, partition: int) -> bool:
        s = self.state(topic, partition)
        return s.leader >= 0 and s.problem is None

    def append(self, topic: str, rec: Rec, state: str = "committed") -> Rec:
        if not self.ready(topic, rec.partition):
            self.unready_produces += 1
            raise NotReady(f"NOT_LEADER_OR_FOLLOWER {topic}-{rec.partition}")
        log = self.logs[topic][rec.partition]
        stored = Rec(rec.partition, rec.key, rec.value, len(log))
        log.append(Entry(stored, state))
        return stored

    def read_unread(self, limit: int | None = None) -> None:
        """Read acks=0 requests off the socket; an error closes the connection (drops the rest)."""
        for _ in range(len(self.unread) if limit is None else min(limit, len(self.unread))):
            topic, rec = self.unread.popleft()
            try:
                self.append(topic, rec)
            except NotReady:
                self.unread.clear()
                return

    # --- the BrokerView the steps use ---
    def wait_for_leaders(self, topic: str, partitions: int) -> float:
        return wait_for_leaders(self.probe, topic, partitions, timeout=5.0, clock=self.clock, sleep=self.clock.sleep)

    def end_offsets(self, topic: str, partitions: int) -> dict[int, int]:
        return {p: len(self.logs[topic][p]) for p in range(partitions)}

    def wait_for_end_offsets(self, topic: str, want: dict[int, int]) -> tuple[dict[int, int], float]:
        def look() -> dict[int, int]:
            self.read_unread(READ_PER_LOOK)
            return self.end_offsets(topic, len(want))
        return wait_for_end_offsets(look, want, timeout=2.0, clock=self.clock, sleep=self.clock.sleep)


class NoWaitBroker(FakeBroker):
    """The same broker seen by a suite that does not wait (how issue 12 happened)."""

    def wait_for_leaders(self, topic: str, partitions: int) -> float:
        return 0.0

    def wait_for_end_offsets(self, topic: str, want: dict[int, int]) -> tuple[dict[int, int], float]:
        return self.end_offsets(topic, len(want)), 0.0


class FakeClient(Client):
    name = "fake"

    def __init__(self, bugs: set[str] | None = None, broker: FakeBroker | None = None) -> None:
        super().__init__("fake:0")
        self.broker = broker or FakeBroker()
        self.bugs = bugs or set()
        self.reordered: set[str] = set()

    def create_topic(self, topic: str, partitions: int) -> int:
        self.broker.create(topic, partitions)
        return 1 if "partitions" in self.bugs else partitions

    def produce(self, topic: str, records: list[Rec], acks: str, idempotent: bool) -> list[Rec]:
        if "no-idempotence" in self.bugs and idempotent:
            raise RuntimeError("UNSUPPORTED_VERSION InitProducerId")
        if acks == "0":
            return self._produce_unacknowledged(topic, records)
        out = []
        for i, r in enumerate(records):
            if "drop" in self.bugs and i == len(records) - 1:
                continue
            out.append(self.broker.append(topic, r))
            if "duplicate" in self.bugs and idempotent and i == 0:
                self.broker.append(topic, r)
        if "reorder" in self.bugs and topic not in self.reordered:
            self.reordered.add(topic)
            log = self.broker.logs[topic][0]
            if len(log) >= 2:
                log[0], log[1] = Entry(Rec(0, log[1].rec.key, log[1].rec.value, 0)), Entry(Rec(0, log[0].rec.key, log[0].rec.value, 1))
        return out

    def _produce_unacknowledged(self, topic: str, records: list[Rec]) -> list[Rec]:
        """acks=0: every record is written to the socket (one delivery report each, no offset);
        the broker reads them later."""
        for i, r in enumerate(records):
            if "lose-acks0" in self.bugs and i % 3 == 0:
                continue  # lost on the way, nobody is told
            self.broker.unread.append((topic, r))
            if "dup-acks0" in self.bugs and i == 0:
                self.broker.unread.append((topic, r))
        if "no-wait-acks0" not in self.bugs:
            self.broker.read_unread(READ_PER_LOOK)  # some of it is read at once, not all
        return [Rec(r.partition, r.key, r.value, None) for r in records]

    def read_partitions(self, topic: str, partitions: list[int], isolation: str = "read_uncommitted") -> list[Rec]:
        self.broker.read_unread()  # by now the broker has read everything it will ever read
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


def context(client: FakeClient, run_id: str = "t1", records: int = 30) -> Context:
    return Context(client, run_id, records, broker=client.broker)


def results_of(ctx: Context, steps: list[str] | None = None, gaps: GapList | None = None,
               broker: str | None = None) -> dict[str, tuple[Status, str]]:
    return {r.step: (r.status, r.detail) for r in run_steps(ctx, steps or list(STEPS), gaps or GapList(), broker)}


def run(bugs: set[str] | None = None, gaps: GapList | None = None, broker: str | None = None) -> dict[str, tuple[Status, str]]:
    return results_of(context(FakeClient(bugs)), gaps=gaps, broker=broker)


def test_correct_client_passes_every_step() -> None:
    client = FakeClient()
    results = results_of(context(client))
    assert list(results) == list(STEPS)
    assert all(status is Status.PASS for status, _ in results.values()), results
    assert "the end offsets showed all 30" in results["produce-acks-0"][1]
    assert "acks=0: 0 of 30 records lost" in results["read-assigned"][1]
    assert client.broker.unready_produces == 0


def test_every_topic_is_produced_to_only_once_its_leaders_serve_it() -> None:
    client = FakeClient()
    results = results_of(context(client))
    assert client.broker.unready_produces == 0
    # each topic was probed until its last partition (2) got past the NOT_LEADER window
    assert client.broker.probes and all(n >= 5 for n in client.broker.probes.values()), client.broker.probes
    assert "every partition's leader serving after" in results["create-topic"][1]


def test_without_waiting_the_acks0_records_of_issue_12_vanish() -> None:
    """Issue 12 on the fake: produce right after create, read back right after the acks=0
    producer returns. This is what the waits in the steps prevent (the tests above pass only
    because they are there)."""
    client = FakeClient(broker=NoWaitBroker())
    results = results_of(context(client), ["create-topic", "produce-acks-0", "produce-acks-1"])
    assert results["produce-acks-0"][0] is Status.PASS  # acks=0: the client cannot tell
    assert results["produce-acks-1"][0] is Status.FAIL  # NOT_LEADER_OR_FOLLOWER
    assert client.broker.unready_produces > 0


def test_without_the_end_offset_wait_the_next_step_overtakes_acks0_records() -> None:
    client = FakeClient(broker=NoWaitBroker())
    client.broker.probes = {}
    ctx = context(client)
    client.broker.create(ctx.topic("main"), 3)
    for _ in range(5):
        client.broker.probe(ctx.topic("main"))  # leaders ready: only the acks=0 read-back is racy
    results = results_of(ctx, ["create-topic", "produce-acks-0", "produce-acks-1", "read-assigned"])
    status, detail = results["read-assigned"]
    assert status is Status.FAIL and "wrong order" in detail, detail


def test_a_topic_whose_leaders_never_get_ready_fails_create_with_the_reason() -> None:
    client = FakeClient()
    client.broker.never_ready = True
    status, detail = results_of(context(client), ["create-topic"])["create-topic"]
    assert status is Status.FAIL
    assert detail.endswith("partitions without a ready leader: 0 (no leader), 1 (no leader), 2 (no leader)")


def test_lost_acks0_records_are_counted_not_failed() -> None:
    results = run({"lose-acks0"})
    status, detail = results["produce-acks-0"]
    assert status is Status.PASS, detail
    assert "after 2s the end offsets show 20: 10 lost (allowed: acks=0 acknowledges nothing)" in detail
    status, detail = results["read-assigned"]
    assert status is Status.PASS, detail
    assert "acks=0: 10 of 30 records lost (allowed: acks=0 acknowledges nothing)" in detail


def test_lost_acknowledged_records_still_fail() -> None:
    client = FakeClient()
    ctx = context(client)
    results_of(ctx, ["create-topic", "produce-acks-0", "produce-acks-1"])
    del client.broker.logs[ctx.topic("main")][1][-1]  # an acks=1 record disappears
    status, detail = results_of(ctx, ["read-assigned"])["read-assigned"]
    assert status is Status.FAIL
    assert "1 missing" in detail


@pytest.mark.parametrize("bug, failing", [
    ("partitions", "create-topic"),
    ("drop", "produce-acks-1"),
    ("reorder", "read-assigned"),
    ("dup-acks0", "read-assigned"),
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
    ctx = context(FakeClient(), "t2", 5)
    results = list(run_steps(ctx, ["read-assigned"], GapList(), None))
    assert results[0].status is Status.SKIP
