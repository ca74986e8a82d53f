from conformance.core import Rec
from conformance.verify import (
    by_partition,
    check_contains,
    check_deliveries,
    check_partition_order,
    check_same_records,
    make_records,
    transformed,
)


def with_offsets(records: list[Rec]) -> list[Rec]:
    next_offset: dict[int, int] = {}
    out = []
    for r in records:
        off = next_offset.get(r.partition, 0)
        next_offset[r.partition] = off + 1
        out.append(Rec(r.partition, r.key, r.value, off))
    return out


def test_make_records_round_robin() -> None:
    recs = make_records("t", 7, 3)
    assert [r.partition for r in recs] == [0, 1, 2, 0, 1, 2, 0]
    assert recs[4] == Rec(1, "k4", "t:4")
    assert make_records("t", 2, 3, start=5)[0] == Rec(2, "k5", "t:5")


def test_deliveries_ok() -> None:
    sent = make_records("t", 30)
    assert check_deliveries(sent, with_offsets(sent)) == []


def test_deliveries_missing_and_duplicate() -> None:
    sent = make_records("t", 30)
    delivered = with_offsets(sent)
    assert "without a successful delivery report" in check_deliveries(sent, delivered[:-1])[0]
    assert "duplicate" in check_deliveries(sent, delivered + delivered[:1])[0]


def test_deliveries_offsets_must_increase_in_send_order() -> None:
    sent = make_records("t", 6)
    delivered = with_offsets(sent)
    # swap the offsets of the two partition-0 records
    a, b = delivered[0], delivered[3]
    delivered[0], delivered[3] = Rec(a.partition, a.key, a.value, b.offset), Rec(b.partition, b.key, b.value, a.offset)
    assert check_deliveries(sent, delivered) == ["partition 0: offsets not increasing in send order"]
    assert check_deliveries(sent, delivered, offsets_reported=False) == []


def test_deliveries_without_offset_fail_when_offsets_expected() -> None:
    sent = make_records("t", 3)
    delivered = [Rec(r.partition, r.key, r.value, None) for r in sent]
    assert check_deliveries(sent, delivered) != []
    assert check_deliveries(sent, delivered, offsets_reported=False) == []


def test_partition_order_ok_across_interleaving() -> None:
    expected = make_records("a", 9) + make_records("b", 9)
    observed = with_offsets(expected)
    # a consumer may return partitions in any interleaving
    observed = sorted(observed, key=lambda r: (-r.partition, r.offset))
    assert check_partition_order(expected, observed) == []


def test_partition_order_detects_reorder() -> None:
    expected = make_records("a", 9)
    observed = with_offsets(expected)
    p0 = [r for r in observed if r.partition == 0]
    swapped = [Rec(0, p0[1].key, p0[1].value, 0), Rec(0, p0[0].key, p0[0].value, 1)]
    observed = swapped + [r for r in observed if r not in p0[:2]]
    problems = check_partition_order(expected, observed)
    assert len(problems) == 1 and "wrong order from index 0" in problems[0]


def test_partition_order_detects_missing_and_extra() -> None:
    expected = make_records("a", 9)
    observed = with_offsets(expected)
    assert "1 missing" in check_partition_order(expected, observed[:-1])[0]
    extra = observed + [Rec(1, "kx", "x", 99)]
    assert "1 unexpected" in check_partition_order(expected, extra)[0]


def test_partition_order_detects_wrong_partition() -> None:
    expected = make_records("a", 3)
    observed = [Rec(0, r.key, r.value, i) for i, r in enumerate(expected)]
    assert len(check_partition_order(expected, observed)) == 3


def test_consecutive_offsets_checked_unless_disabled() -> None:
    expected = make_records("a", 6)
    observed = with_offsets(expected)
    observed[3] = Rec(observed[3].partition, observed[3].key, observed[3].value, 5)  # partition 0: 0, 5
    assert check_partition_order(expected, observed) == ["partition 0: offsets not consecutive"]
    assert check_same_records(expected, observed) == []


def test_contains_and_transformed() -> None:
    base = make_records("a", 4)
    out = transformed(base)
    assert out[0].value == "T:a:0" and out[0].partition == base[0].partition
    assert check_contains(out + base, base, "aborted") == []
    assert check_contains(out, base, "aborted") == ["4 aborted records missing"]


def test_by_partition() -> None:
    assert sorted(by_partition(make_records("a", 5))) == [0, 1, 2]
