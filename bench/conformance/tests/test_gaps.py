import pytest

from conformance.core import STEPS
from conformance.gaps import load_gaps, parse_gaps

SAMPLE = '''
[seedlog]
"*/group-consume" = "no groups"
"kcat/idempotent" = "kcat only"
"perf/consume-java" = "needs groups"
[tansu]
"kcat/*" = "G1"
[kafka]
'''


def test_wildcards() -> None:
    gaps = parse_gaps(SAMPLE)
    assert gaps.reason("seedlog", "java", "group-consume") == "no groups"
    assert gaps.reason("seedlog", "kcat", "idempotent") == "kcat only"
    assert gaps.reason("seedlog", "java", "idempotent") is None
    assert gaps.reason("tansu", "kcat", "create-topic") == "G1"
    assert gaps.reason("tansu", "java", "create-topic") is None
    assert gaps.reason("kafka", "kcat", "transaction") is None
    assert gaps.reason(None, "kcat", "transaction") is None
    assert gaps.perf_gap("seedlog", "consume-java") == "needs groups"
    assert gaps.perf_gap("kafka", "consume-java") is None


@pytest.mark.parametrize("text", ['[seedlog]\n"nostep" = "x"\n', '[seedlog]\n"a/b" = 3\n', 'top = "x"\n'])
def test_invalid(text: str) -> None:
    with pytest.raises(ValueError):
        parse_gaps(text)


def test_shipped_list() -> None:
    gaps = load_gaps()
    for step in STEPS:  # the reference broker has no gaps
        assert gaps.reason("kafka", "kafka-python", step) is None
    assert gaps.reason("seedlog", "kafka-python", "transaction")
    assert gaps.reason("seedlog", "kafka-python", "group-consume") is None
    assert gaps.reason("seedlog", "kafka-python", "produce-acks-all") is None
    for key, _ in gaps.entries["seedlog"].items():
        client, step = key.split("/")
        assert step in STEPS or client == "perf" or step == "*"
