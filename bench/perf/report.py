"""Markdown rendering of perf results and the docs/BENCHMARKS.md region rewrite."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field, fields, replace
from typing import Any

from perf.tools import Stats

BEGIN = "<!-- peers:begin -->"
END = "<!-- peers:end -->"
HEADING = "## Peers: Apache Kafka 4.4, tansu and seedlog"
BROKERS = ("kafka", "tansu", "seedlog")
BROKER_NAMES = {"kafka": "Kafka 4.4", "tansu": "tansu", "seedlog": "seedlog"}
CELL_METRICS = ("broker_cpu_s", "broker_peak_rss_mib", "client_cpu_s")  # measured by the driver, not the tool
METRICS = tuple(f.name for f in fields(Stats)) + CELL_METRICS


@dataclass
class Cell:
    """One workload on one broker."""

    broker: str
    workload: str  # Workload.key
    label: str  # Workload.label
    status: str  # "ok" | "gap" | "failed" | "not run"
    stats: Stats | None = None
    broker_cpu_s: float | None = None
    broker_peak_rss_mib: float | None = None
    client_cpu_s: float | None = None
    command: str = ""
    note: str = ""
    round: int = 1  # which round of --repeat measured it
    spread: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric -> (min, max) over the rounds

    def to_dict(self) -> dict[str, object]:
        d = dict(self.__dict__)
        d["stats"] = self.stats.to_dict() if self.stats else None
        return d


@dataclass
class Meta:
    date: str
    machine: str
    load_before: str
    records: int
    record_size: int
    command: str
    versions: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    commit: str = ""  # git rev-parse --short HEAD, "+dirty" if tracked files had changes
    repeat: int = 1  # rounds: each broker measured that many times


def fmt_num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or denominator is None or denominator == 0:
        return "–"
    return f"{numerator / denominator:.2f}×"


def cell_value(cell: Cell | None, metric: str) -> float | None:
    if cell is None or cell.status != "ok" or cell.stats is None:
        return None
    return metric_value(cell, metric)


def metric_value(cell: Cell, metric: str) -> float | None:
    value = getattr(cell if metric in CELL_METRICS else cell.stats, metric)
    return None if value is None else float(value)


def fmt_metric(cell: Cell, metric: str, digits: int = 0) -> str:
    """The cell's value (the median over the rounds), then `(min–max)` if several rounds were measured."""
    text = fmt_num(metric_value(cell, metric), digits)
    if metric in cell.spread and text != "–":
        low, high = cell.spread[metric]
        text += f" ({fmt_num(low, digits)}–{fmt_num(high, digits)})"
    return text


def aggregate(cells: list[Cell]) -> list[Cell]:
    """One cell per (broker, workload), in first-seen order, combining the rounds of --repeat."""
    rounds: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        rounds.setdefault((c.broker, c.workload), []).append(c)
    return [combine(runs) for runs in rounds.values()]


def combine(runs: list[Cell]) -> Cell:
    """The rounds of one cell: each metric's median over the ok rounds, its (min, max) in `spread`."""
    if len(runs) == 1:
        return runs[0]
    ok = [c for c in runs if c.status == "ok" and c.stats is not None]
    note = combined_note(runs, ok)
    if len(ok) < 2:
        return replace(ok[0] if ok else runs[0], note=note)
    medians: dict[str, Any] = {}
    spread: dict[str, tuple[float, float]] = {}
    for metric in METRICS:
        medians[metric], low_high = median_spread([metric_value(c, metric) for c in ok])
        if low_high:
            spread[metric] = low_high
    stats = Stats(**{f.name: medians[f.name] for f in fields(Stats)})
    stats.records = int(stats.records)
    return replace(ok[0], stats=stats, spread=spread, note=note, **{m: medians[m] for m in CELL_METRICS})


def median_spread(values: list[float | None]) -> tuple[float | None, tuple[float, float] | None]:
    """Median and (min, max) of the values present; (None, None) if no round reported one."""
    present = [v for v in values if v is not None]
    if not present:
        return None, None
    return statistics.median(present), (min(present), max(present))


def combined_note(runs: list[Cell], ok: list[Cell]) -> str:
    """The rounds' notes: the one they share, else each round's; says how many rounds the median has."""
    status = "ok" if ok else runs[0].status  # the combined cell's
    texts = [c.note if c.status == status else f"{c.status}: {c.note}" for c in runs]
    note = texts[0] if len(set(texts)) == 1 else "; ".join(f"round {c.round}: {t}" for c, t in zip(runs, texts) if t)
    if ok and len(ok) < len(runs):
        note = f"median of {len(ok)} of {len(runs)} rounds; {note}"
    return note


def short_status(cell: Cell | None) -> str:
    if cell is None:
        return "not run"
    if cell.status == "gap":
        return "gap"
    if cell.status == "failed":
        return "FAILED"
    return cell.status


def table(headers: list[str], rows: list[list[str]], align_right_from: int = 1) -> str:
    sep = ["---" if i < align_right_from else "---:" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def index(cells: list[Cell]) -> tuple[list[tuple[str, str]], dict[tuple[str, str], Cell]]:
    """Workloads in first-seen order, and (broker, workload) -> cell."""
    order: list[tuple[str, str]] = []
    by_key: dict[tuple[str, str], Cell] = {}
    for c in cells:
        if (c.workload, c.label) not in order:
            order.append((c.workload, c.label))
        by_key[(c.broker, c.workload)] = c
    return order, by_key


def summary_table(cells: list[Cell]) -> str:
    """Records/s and p99 per workload, with seedlog ÷ Kafka and seedlog ÷ tansu ratios."""
    order, by_key = index(cells)
    headers = ["workload"]
    headers += [f"{BROKER_NAMES[b]} rec/s" for b in BROKERS]
    headers += ["seedlog ÷ Kafka", "seedlog ÷ tansu"]
    headers += [f"{BROKER_NAMES[b]} p99 ms" for b in BROKERS]
    headers += ["p99 seedlog ÷ Kafka", "p99 seedlog ÷ tansu"]
    rows = []
    for key, label in order:
        row = [label]
        rates = {b: cell_value(by_key.get((b, key)), "records_per_sec") for b in BROKERS}
        p99s = {b: cell_value(by_key.get((b, key)), "p99_ms") for b in BROKERS}
        for b in BROKERS:
            c = by_key.get((b, key))
            row.append(fmt_metric(c, "records_per_sec") if c and rates[b] is not None else short_status(c))
        row += [ratio(rates["seedlog"], rates["kafka"]), ratio(rates["seedlog"], rates["tansu"])]
        is_produce = key.startswith("produce")
        for b in BROKERS:
            if not is_produce:
                row.append("n/a")
            else:
                c = by_key.get((b, key))
                row.append(fmt_metric(c, "p99_ms") if c and p99s[b] is not None else short_status(c))
        if is_produce:
            row += [ratio(p99s["seedlog"], p99s["kafka"]), ratio(p99s["seedlog"], p99s["tansu"])]
        else:
            row += ["n/a", "n/a"]
        rows.append(row)
    return table(headers, rows)


# The details columns after the records count: (metric, decimals).
DETAIL_METRICS = [("records_per_sec", 0), ("mb_per_sec", 1), ("avg_ms", 1), ("p50_ms", 0), ("p95_ms", 0),
                  ("p99_ms", 0), ("p999_ms", 0), ("max_ms", 0), ("broker_cpu_s", 1), ("broker_peak_rss_mib", 0),
                  ("client_cpu_s", 1)]


def details_table(cells: list[Cell]) -> str:
    headers = ["workload", "broker", "status", "records", "rec/s", "MB/s", "avg ms", "p50", "p95", "p99",
               "p99.9", "max ms", "broker CPU s", "broker peak RSS MiB", "client CPU s"]
    rows = []
    order, by_key = index(cells)
    for key, label in order:
        for b in BROKERS:
            c = by_key.get((b, key))
            if c is None or c.status == "not run":  # listed once under the table instead
                continue
            s = c.stats if c.status == "ok" else None
            status = c.status if not c.note else f"{c.status}: {c.note}"
            rows.append([label, BROKER_NAMES[b], status.replace("|", "/"), fmt_num(s.records) if s else "–"]
                        + [fmt_metric(c, m, d) if s else "–" for m, d in DETAIL_METRICS])
    return table(headers, rows, align_right_from=3)


def render_section(meta: Meta, cells: list[Cell]) -> str:
    out = [
        written_line(meta),
        "",
        f"- **Machine:** {meta.machine}",
        f"- **Load average before the run (1/5/15 min):** {meta.load_before}",
        f"- **Shape:** {meta.records:,} records of {meta.record_size:,} bytes per produce workload, "
        "`--throughput -1`; consume reads the acks=all topic back.",
    ]
    if meta.versions:
        out.append("- **Versions:** " + "; ".join(f"{k} {v}" for k, v in meta.versions.items()))
    out += [f"- {n}" for n in meta.notes]
    out += ["", "### Summary", "",
            "Records per second (higher is better) and producer p99 latency in ms (lower is better). "
            "A ratio above 1× means seedlog is faster (rec/s) or slower (p99). `gap`: that broker cannot "
            "serve that tool yet (the reason is in Details; the list is bench/conformance/gaps.toml); "
            "`FAILED`: the run failed (see Details); `not run`: see below the details." + spread_sentence(meta),
            "", summary_table(cells), "", "### Details", "", details_table(cells), ""]
    out += not_run_lines(cells)
    if meta.commands:
        out += ["### Exact commands", "", "```"] + meta.commands + ["```", ""]
    return "\n".join(out)


def written_line(meta: Meta) -> str:
    at = f" at commit `{meta.commit}`" if meta.commit else ""
    rounds = "1 round" if meta.repeat == 1 else f"{meta.repeat} rounds per broker (median, min–max)"
    return f"_Written by `{meta.command}` on {meta.date}{at}, {rounds}. Do not edit by hand between the markers._"


def spread_sentence(meta: Meta) -> str:
    if meta.repeat == 1:
        return ""
    return (f" Each cell is the median of {meta.repeat} rounds with the min–max in parentheses; "
            "the ratios are ratios of the medians.")


def not_run_lines(cells: list[Cell]) -> list[str]:
    """Each broker's distinct not-run reasons, once."""
    lines: list[str] = []
    for b in BROKERS:
        reasons = sorted({c.note for c in cells if c.broker == b and c.status == "not run"})
        lines += [f"- **{BROKER_NAMES[b]} not run:** {r or 'no reason given'}" for r in reasons]
    return lines + [""] if lines else []


def replace_region(document: str, region: str) -> str:
    """Put `region` between the peers markers, appending heading and markers if absent."""
    block = f"{BEGIN}\n{region.rstrip()}\n{END}"
    if BEGIN in document and END in document and document.index(BEGIN) < document.index(END):
        head, rest = document.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        return head + block + tail
    if not document.strip():
        document = "# Benchmarks\n"
    if HEADING not in document:
        return document.rstrip("\n") + f"\n\n{HEADING}\n\n{block}\n"
    head, tail = document.split(HEADING, 1)
    return head + HEADING + "\n\n" + block + "\n" + tail
