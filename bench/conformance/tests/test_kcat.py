from conformance.clients.kcat_client import ABORT_LINE, STDIN_BLOCK, kcat_line, pad_for_abort, parse_deliveries
from conformance.core import Rec
from conformance.verify import make_records


def test_pad_for_abort_fills_whole_blocks() -> None:
    recs = make_records("run-txabort", 32, partitions=1)
    padded = pad_for_abort(recs)
    assert len(padded) == 32
    assert all(len(kcat_line(r)) == ABORT_LINE for r in padded)
    assert sum(len(kcat_line(r)) for r in padded) % STDIN_BLOCK == 0
    assert all(p.value.startswith(r.value) and p.key == r.key for p, r in zip(padded, recs))


def test_pad_for_abort_rounds_up_with_filler() -> None:
    padded = pad_for_abort(make_records("x", 5, partitions=1))
    assert len(padded) == STDIN_BLOCK // ABORT_LINE
    assert padded[5].key == "kpad5" and padded[5].partition == 0


def test_parse_deliveries() -> None:
    recs = [Rec(2, "k0", "a"), Rec(2, "k1", "b")]
    err = ("% Message delivered to partition 2 (offset 7) on broker 1\n"
           "% Enable message offset reporting\n% Message delivered to partition 2 (offset 8) on broker 1\n")
    assert parse_deliveries(err, recs) == [Rec(2, "k0", "a", 7), Rec(2, "k1", "b", 8)]
    acks0 = "% Message delivered to partition 2 (offset -1) on broker -1\n"
    assert parse_deliveries(acks0, recs[:1]) == [Rec(2, "k0", "a", None)]
    assert parse_deliveries("", recs) == []
