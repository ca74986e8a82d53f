"""Pure checks of what a client reported against what the suite expected.

Every function returns a list of problems; an empty list means the check passed. The messages
are short because the first one becomes the FAIL line's reason.
"""
from __future__ import annotations

from collections import Counter, defaultdict

from conformance.core import Rec


def make_records(tag: str, count: int, partitions: int = 3, start: int = 0) -> list[Rec]:
    """Deterministic records spread round-robin over explicit partitions."""
    return [Rec(i % partitions, f"k{i}", f"{tag}:{i}") for i in range(start, start + count)]


def by_partition(records: list[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = defaultdict(list)
    for r in records:
        out[r.partition].append(r)
    return dict(out)


def check_deliveries(sent: list[Rec], delivered: list[Rec], offsets_reported: bool = True) -> list[str]:
    """Each sent record delivered exactly once, to the partition asked for; with offsets, the
    offsets of one partition are distinct and strictly increasing in send order."""
    problems: list[str] = []
    want = Counter(r.content() for r in sent)
    got = Counter(r.content() for r in delivered)
    missing = want - got
    extra = got - want
    if missing:
        problems.append(f"{sum(missing.values())} of {len(sent)} records without a successful delivery report")
    if extra:
        problems.append(f"{sum(extra.values())} unexpected or duplicate delivery reports")
    if not offsets_reported or problems:
        return problems
    order = {r.content(): i for i, r in enumerate(sent)}
    for partition, recs in sorted(by_partition(delivered).items()):
        if any(r.offset is None or r.offset < 0 for r in recs):
            problems.append(f"partition {partition}: delivery report without an offset")
            continue
        in_send_order = sorted(recs, key=lambda r: order[r.content()])
        offsets = [r.offset for r in in_send_order]
        if any(b <= a for a, b in zip(offsets, offsets[1:])):  # type: ignore[operator]
            problems.append(f"partition {partition}: offsets not increasing in send order")
    return problems


def content_set(records: list[Rec]) -> frozenset[tuple[int, str, str]]:
    return frozenset(r.content() for r in records)


def lost_records(expected: list[Rec], observed: list[Rec], may_lose: frozenset[tuple[int, str, str]]) -> list[Rec]:
    """The records of `may_lose` (by content) that were expected but not observed at all."""
    seen = content_set(observed)
    return [r for r in expected if r.content() in may_lose and r.content() not in seen]


def check_partition_order(expected: list[Rec], observed: list[Rec], consecutive_offsets: bool = True,
                          may_lose: frozenset[tuple[int, str, str]] = frozenset()) -> list[str]:
    """Observed records equal the expected ones partition by partition, in the same order.

    `expected` is in produce order (a partition's records keep their relative order). With
    `consecutive_offsets`, each partition's observed offsets must increase by exactly 1 (true
    for a log with no transaction markers or aborted batches). Records in `may_lose` (acks=0:
    never acknowledged) may be missing; the ones present must still be intact, once, in order.
    Count the missing ones with lost_records.
    """
    problems: list[str] = []
    lost = content_set(lost_records(expected, observed, may_lose))
    want = by_partition([r for r in expected if r.content() not in lost])
    got = by_partition(observed)
    for partition in sorted(set(want) | set(got)):
        w = [(r.key, r.value) for r in want.get(partition, [])]
        g = [(r.key, r.value) for r in got.get(partition, [])]
        if w == g:
            if consecutive_offsets:
                offsets = [r.offset for r in got.get(partition, [])]
                if None not in offsets and any(b != a + 1 for a, b in zip(offsets, offsets[1:])):  # type: ignore[operator]
                    problems.append(f"partition {partition}: offsets not consecutive")
            continue
        problems.append(describe_mismatch(partition, w, g))
    return problems


def describe_mismatch(partition: int, want: list[tuple[str, str]], got: list[tuple[str, str]]) -> str:
    if Counter(want) == Counter(got):
        first = next(i for i, (a, b) in enumerate(zip(want, got)) if a != b)
        return f"partition {partition}: same records, wrong order from index {first} ({got[first][1]!r} where {want[first][1]!r} expected)"
    missing = Counter(want) - Counter(got)
    extra = Counter(got) - Counter(want)
    parts = [f"partition {partition}: expected {len(want)} records, read {len(got)}"]
    if missing:
        parts.append(f"{sum(missing.values())} missing (e.g. {next(iter(missing))[1]!r})")
    if extra:
        parts.append(f"{sum(extra.values())} unexpected (e.g. {next(iter(extra))[1]!r})")
    return ", ".join(parts)


def check_same_records(expected: list[Rec], observed: list[Rec]) -> list[str]:
    """Same records per partition in the same order; offsets not checked (e.g. group reads)."""
    return check_partition_order(expected, observed, consecutive_offsets=False)


def check_contains(superset: list[Rec], required: list[Rec], label: str) -> list[str]:
    missing = Counter(r.content() for r in required) - Counter(r.content() for r in superset)
    if missing:
        return [f"{sum(missing.values())} {label} records missing"]
    return []


def transformed(records: list[Rec], prefix: str = "T:") -> list[Rec]:
    """The transaction step's output for its input records."""
    return [Rec(r.partition, r.key, prefix + r.value) for r in records]
