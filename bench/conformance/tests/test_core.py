import pytest

from conformance.core import (
    STEP_DESCRIPTIONS,
    STEPS,
    Rec,
    Status,
    StepResult,
    exit_code,
    parse_kcat_json,
    parse_record_lines,
    parse_step_line,
    summary_line,
)


def test_line_is_one_line() -> None:
    r = StepResult("kafka-python", "produce-acks-all", Status.FAIL, "boom\nsecond line\tx")
    assert r.line() == "FAIL kafka-python produce-acks-all boom second line x"
    assert "\n" not in r.line()


def test_line_round_trip() -> None:
    r = StepResult("kcat", "read-assigned", Status.SKIP, "expected gap: no groups")
    back = parse_step_line(r.line())
    assert (back.client, back.step, back.status, back.detail) == ("kcat", "read-assigned", Status.SKIP,
                                                                  "expected gap: no groups")


@pytest.mark.parametrize("line", ["", "# comment", "OK x y", "PASS onlyclient"])
def test_parse_step_line_rejects(line: str) -> None:
    with pytest.raises(ValueError):
        parse_step_line(line)


def test_exit_code_only_fail_counts() -> None:
    ok = StepResult("a", "s", Status.PASS, "")
    skip = StepResult("a", "s", Status.SKIP, "")
    fail = StepResult("a", "s", Status.FAIL, "")
    assert exit_code([ok, skip]) == 0
    assert exit_code([ok, skip, fail]) == 1
    assert exit_code([]) == 0
    assert summary_line([ok, skip, fail, ok]) == "2 passed, 1 failed, 1 skipped"


def test_parse_record_lines() -> None:
    text = "noise\nREC\t2\t17\tk1\tv:1\nDELIVERED\t0\t-1\tk2\tv2\nREC\t0\t0\t\t\n"
    assert parse_record_lines(text) == [Rec(2, "k1", "v:1", 17), Rec(0, "", "", 0)]
    assert parse_record_lines(text, "DELIVERED") == [Rec(0, "k2", "v2", None)]
    with pytest.raises(ValueError):
        parse_record_lines("REC\t1\t2\tonly-key\n")


def test_parse_kcat_json() -> None:
    text = ('% Reached end\n{"topic":"t","partition":1,"offset":4,"tstype":"create","ts":1,"broker":1,'
            '"key":"k4","payload":"v4"}\n{"topic":"t","partition":0,"offset":0,"key":null,"payload":null}\n')
    assert parse_kcat_json(text) == [Rec(1, "k4", "v4", 4), Rec(0, "", "", 0)]


def test_every_step_is_described() -> None:
    assert set(STEP_DESCRIPTIONS) == set(STEPS)
