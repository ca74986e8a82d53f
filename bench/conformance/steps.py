"""The conformance steps: each drives a Client and verifies what it reports (verify.py)."""
from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from conformance.broker_view import BrokerView
from conformance.clients.base import Client
from conformance.core import STEPS, Rec, Status, StepResult
from conformance.gaps import GapList
from conformance.verify import (
    check_contains,
    check_deliveries,
    check_partition_order,
    check_same_records,
    content_set,
    lost_records,
    make_records,
    transformed,
)

PARTITIONS = 3
TXN_INPUT = 60
TXN_ABORTED = 32
RESUME_EXTRA = 3


@dataclass
class Context:
    client: Client
    run_id: str
    records: int
    broker: BrokerView  # asked directly (leaders, end offsets), whatever the client
    main_topic: str | None = None
    produced: list[Rec] = field(default_factory=list)  # records of passed produce steps, in order
    unacknowledged: list[Rec] = field(default_factory=list)  # the acks=0 ones among them
    leaders_ready: dict[str, float] = field(default_factory=dict)  # topic -> seconds its wait took

    def topic(self, suffix: str) -> str:
        return f"conf-{self.run_id}-{self.client.name}-{suffix}"


Outcome = tuple[Status, str]


class StepFailed(Exception):
    """A verification failed: the message is the FAIL reason."""


def require(problems: list[str], what: str = "") -> None:
    if problems:
        raise StepFailed((what + ": " if what else "") + "; ".join(problems[:2]))


def create_checked(ctx: Context, topic: str) -> None:
    seen = ctx.client.create_topic(topic, PARTITIONS)
    if seen != PARTITIONS:
        raise StepFailed(f"{topic}: client metadata shows {seen} partitions, expected {PARTITIONS}")
    ensure_leaders(ctx, topic)


def ensure_leaders(ctx: Context, topic: str) -> float:
    """Before anything produces to `topic`: wait (once per topic) until every partition has a
    leader that serves it. Every client's produce goes through here (create_checked and
    produce_checked), so no client writes to a partition whose leader is not ready yet."""
    if topic not in ctx.leaders_ready:
        ctx.leaders_ready[topic] = ctx.broker.wait_for_leaders(topic, PARTITIONS)
    return ctx.leaders_ready[topic]


def main_topic(ctx: Context) -> str:
    if ctx.main_topic is None:
        topic = ctx.topic("main")
        create_checked(ctx, topic)
        ctx.main_topic = topic
    return ctx.main_topic


def produce_checked(ctx: Context, topic: str, records: list[Rec], acks: str = "all", idempotent: bool = False) -> None:
    """Produce and check the delivery reports. The client returns once its queue is empty (every
    record has its delivery report: for acks=0 that means written to the socket, no response)."""
    ensure_leaders(ctx, topic)
    delivered = ctx.client.produce(topic, records, acks, idempotent)
    require(check_deliveries(records, delivered, ctx.client.reports_offsets and acks != "0"), "produce")


def step_create_topic(ctx: Context) -> Outcome:
    topic = ctx.topic("main")
    create_checked(ctx, topic)
    ctx.main_topic = topic
    return Status.PASS, (f"{topic} with {PARTITIONS} partitions; every partition's leader serving "
                         f"after {ctx.leaders_ready[topic]:.2f}s")


def step_produce(acks: str) -> Callable[[Context], Outcome]:
    def run(ctx: Context) -> Outcome:
        topic = main_topic(ctx)
        records = make_records(f"{ctx.run_id}-acks{acks}", ctx.records, PARTITIONS)
        before = ctx.broker.end_offsets(topic, PARTITIONS) if acks == "0" else {}
        produce_checked(ctx, topic, records, acks)
        ctx.produced += records
        if acks == "0":
            ctx.unacknowledged += records
            return Status.PASS, settle_unacknowledged(ctx, topic, records, before)
        note = "" if ctx.client.reports_offsets else " (no offsets reported)"
        return Status.PASS, f"{len(records)} records{note}"
    return run


def settle_unacknowledged(ctx: Context, topic: str, records: list[Rec], before: dict[int, int]) -> str:
    """After an acks=0 produce: the client's queue is empty, but the broker may still be reading
    the requests (no response says when it is done). Wait until the end offsets show every record,
    so that the next step's records cannot overtake them, or until the wait times out: acks=0
    promises nothing, so a shortfall is reported, not failed (read-assigned checks the content)."""
    want = {p: before.get(p, 0) for p in range(PARTITIONS)}
    for r in records:
        want[r.partition] += 1
    ends, waited = ctx.broker.wait_for_end_offsets(topic, want)
    stored = sum(max(0, min(ends.get(p, 0), n) - before.get(p, 0)) for p, n in want.items())
    head = f"{len(records)} records handed over, none acknowledged (acks=0: no response, no offsets)"
    if stored == len(records):
        return f"{head}; the end offsets showed all {stored} after {waited:.2f}s"
    return (f"{head}; after {waited:.0f}s the end offsets show {stored}: {len(records) - stored} lost "
            "(allowed: acks=0 acknowledges nothing)")


def step_read_assigned(ctx: Context) -> Outcome:
    if not ctx.produced:
        return Status.SKIP, "no records: no produce step passed"
    observed = ctx.client.read_partitions(main_topic(ctx), list(range(PARTITIONS)))
    # acks=0 promises nothing: a record of that step may be lost without anyone being told, so a
    # missing one is counted and reported, not failed. Every record present (acks=0 or not) must be
    # intact, once and in order, and every acknowledged (acks=1/all) record must be present.
    may_lose = content_set(ctx.unacknowledged)
    require(check_partition_order(ctx.produced, observed, may_lose=may_lose), "read")
    detail = f"{len(observed)} records, content and per-partition order intact"
    if ctx.unacknowledged:
        lost = len(lost_records(ctx.produced, observed, may_lose))
        detail += (f"; acks=0: {lost} of {len(ctx.unacknowledged)} records lost "
                   "(allowed: acks=0 acknowledges nothing)")
    return Status.PASS, detail


def step_group_consume(ctx: Context) -> Outcome:
    topic = ctx.topic("group")
    create_checked(ctx, topic)
    first = make_records(f"{ctx.run_id}-group", ctx.records, PARTITIONS)
    produce_checked(ctx, topic, first)
    group = ctx.topic("g")
    require(check_same_records(first, ctx.client.group_consume(topic, group, len(first))), "first consumer")
    extra = make_records(f"{ctx.run_id}-group", RESUME_EXTRA, PARTITIONS, start=ctx.records)
    produce_checked(ctx, topic, extra)
    require(check_same_records(extra, ctx.client.group_consume(topic, group, len(extra))),
            "after commit the group must resume with only the new records")
    return Status.PASS, f"{len(first)} records committed; the group resumed with exactly the {len(extra)} new ones"


def step_idempotent(ctx: Context) -> Outcome:
    topic = ctx.topic("idem")
    create_checked(ctx, topic)
    records = make_records(f"{ctx.run_id}-idem", ctx.records, PARTITIONS)
    produce_checked(ctx, topic, records, "all", idempotent=True)
    require(check_partition_order(records, ctx.client.read_partitions(topic, list(range(PARTITIONS)))), "read back")
    return Status.PASS, f"{len(records)} records, each once, in order"


def step_transaction(ctx: Context) -> Outcome:
    t_in, t_out = ctx.topic("txin"), ctx.topic("txout")
    create_checked(ctx, t_in)
    create_checked(ctx, t_out)
    inputs = make_records(f"{ctx.run_id}-txin", TXN_INPUT, PARTITIONS)
    produce_checked(ctx, t_in, inputs)
    abort = make_records(f"{ctx.run_id}-txabort", TXN_ABORTED, partitions=1)
    group = ctx.topic("txg")
    report = ctx.client.transaction(t_in, t_out, group, ctx.topic("txid"), len(inputs), abort)
    aborted = report.aborted if report.aborted is not None else abort
    require(check_same_records(inputs, report.consumed), "consumed input")
    partitions = list(range(PARTITIONS))
    committed_view = ctx.client.read_partitions(t_out, partitions, "read_committed")
    require(check_same_records(transformed(inputs), committed_view), "read_committed output")
    uncommitted_view = ctx.client.read_partitions(t_out, partitions, "read_uncommitted")
    require(check_contains(uncommitted_view, aborted, "aborted") + check_contains(
        uncommitted_view, transformed(inputs), "committed"), "read_uncommitted output")
    detail = (f"{len(inputs)} records consumed and written in a committed transaction; "
              f"{len(aborted)} aborted records hidden by read_committed")
    if report.offsets_in_txn:
        extra = make_records(f"{ctx.run_id}-txin", RESUME_EXTRA, PARTITIONS, start=TXN_INPUT)
        produce_checked(ctx, t_in, extra)
        require(check_same_records(extra, ctx.client.group_consume(t_in, group, len(extra))),
                "offsets sent to the transaction: the group must resume after them")
        detail += "; sendOffsetsToTransaction committed the group's offsets"
    else:
        detail += f"; {report.note}"
    return Status.PASS, detail


STEP_FUNCS: dict[str, Callable[[Context], Outcome]] = {
    "create-topic": step_create_topic,
    "produce-acks-0": step_produce("0"),
    "produce-acks-1": step_produce("1"),
    "produce-acks-all": step_produce("all"),
    "read-assigned": step_read_assigned,
    "group-consume": step_group_consume,
    "idempotent": step_idempotent,
    "transaction": step_transaction,
}
assert tuple(STEP_FUNCS) == STEPS


def first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


def run_steps(ctx: Context, steps: list[str], gaps: GapList, broker: str | None) -> Iterator[StepResult]:
    """Run the selected steps in suite order; expected gaps are SKIPped without running."""
    for step in STEPS:
        if step not in steps:
            continue
        reason = gaps.reason(broker, ctx.client.name, step)
        if reason:
            yield StepResult(ctx.client.name, step, Status.SKIP, f"expected gap: {reason}")
            continue
        start = time.monotonic()
        try:
            status, detail = STEP_FUNCS[step](ctx)
        except StepFailed as e:
            status, detail = Status.FAIL, str(e)
        except Exception as e:  # a client or broker error fails the step, not the suite
            status, detail = Status.FAIL, f"{type(e).__name__}: {first_line(e)}"
            traceback.print_exc(limit=3)  # to stderr; the step line stays one line
        yield StepResult(ctx.client.name, step, status, detail, time.monotonic() - start)
