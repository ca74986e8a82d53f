from pathlib import Path

from conformance import compat
from conformance.core import Status, StepResult


def r(client: str, step: str, status: Status, detail: str = "") -> StepResult:
    return StepResult(client, step, status, detail)


def test_cell() -> None:
    assert compat.cell(None) == "–"
    assert compat.cell(r("a", "b", Status.SKIP, "expected gap: x")) == "gap"
    assert compat.cell(r("a", "b", Status.SKIP, "client not installed")) == "SKIP"
    assert compat.cell(r("a", "b", Status.FAIL, "x")) == "FAIL"


def test_merge_replaces_same_step_and_orders() -> None:
    old = [r("java", "idempotent", Status.FAIL), r("kcat", "create-topic", Status.PASS)]
    new = [r("java", "idempotent", Status.PASS), r("kafka-python", "transaction", Status.PASS)]
    merged = compat.merge(old, new)
    assert [(x.client, x.step, x.status) for x in merged] == [
        ("kafka-python", "transaction", Status.PASS),
        ("java", "idempotent", Status.PASS),
        ("kcat", "create-topic", Status.PASS),
    ]


def test_save_render_region(tmp_path: Path) -> None:
    compat.save("seedlog", [r("kafka-python", "create-topic", Status.PASS),
                            r("kafka-python", "group-consume", Status.SKIP, "expected gap: no groups"),
                            r("kcat", "create-topic", Status.FAIL, "boom")], {"date": "D", "target": "seedlog"}, tmp_path)
    text = compat.render(tmp_path)
    assert "| create-topic | PASS | – | – | FAIL |" in text
    assert "| group-consume | gap | – | – | – |" in text
    assert "`kcat` `create-topic`: FAIL — boom" in text
    assert "- gap (kafka-python/group-consume): no groups" in text
    assert "### Apache Kafka 4.4\n\nNot run yet." in text
    doc = compat.replace_region("# C\n\nintro\n", text)
    assert doc.startswith("# C\n\nintro\n\n" + compat.BEGIN)
    again = compat.replace_region(doc + "\ntail\n", "new")
    assert f"{compat.BEGIN}\nnew\n{compat.END}" in again and again.endswith("tail\n") and "PASS" not in again
