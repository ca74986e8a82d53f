"""Markdown rendering of perf results and the docs/BENCHMARKS.md region rewrite."""
from __future__ import annotations

from dataclasses import dataclass, field

from perf.tools import Stats

BEGIN = "<!-- peers:begin -->"
END = "<!-- peers:end -->"
HEADING = "## Peers: Apache Kafka 4.4, tansu and seedlog"
BROKERS = ("kafka", "tansu", "seedlog")
BROKER_NAMES = {"kafka": "Kafka 4.4", "tansu": "tansu", "seedlog": "seedlog"}


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
    value = getattr(cell.stats, metric)
    return None if value is None else float(value)


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
            row.append(fmt_num(rates[b]) if rates[b] is not None else short_status(by_key.get((b, key))))
        row += [ratio(rates["seedlog"], rates["kafka"]), ratio(rates["seedlog"], rates["tansu"])]
        is_produce = key.startswith("produce")
        for b in BROKERS:
            if not is_produce:
                row.append("n/a")
            else:
                row.append(fmt_num(p99s[b]) if p99s[b] is not None else short_status(by_key.get((b, key))))
        if is_produce:
            row += [ratio(p99s["seedlog"], p99s["kafka"]), ratio(p99s["seedlog"], p99s["tansu"])]
        else:
            row += ["n/a", "n/a"]
        rows.append(row)
    return table(headers, rows)


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
            rows.append([
                label, BROKER_NAMES[b], status.replace("|", "/"),
                fmt_num(s.records) if s else "–",
                fmt_num(s.records_per_sec) if s else "–",
                fmt_num(s.mb_per_sec, 1) if s else "–",
                fmt_num(s.avg_ms, 1) if s else "–",
                fmt_num(s.p50_ms) if s else "–",
                fmt_num(s.p95_ms) if s else "–",
                fmt_num(s.p99_ms) if s else "–",
                fmt_num(s.p999_ms) if s else "–",
                fmt_num(s.max_ms) if s else "–",
                fmt_num(c.broker_cpu_s, 1) if c.status == "ok" else "–",
                fmt_num(c.broker_peak_rss_mib) if c.status == "ok" else "–",
                fmt_num(c.client_cpu_s, 1) if c.status == "ok" else "–",
            ])
    return table(headers, rows, align_right_from=3)


def render_section(meta: Meta, cells: list[Cell]) -> str:
    out = [
        f"_Written by `{meta.command}` on {meta.date}. Do not edit by hand between the markers._",
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
            "`FAILED`: the run failed (see Details); `not run`: see below the details.",
            "", summary_table(cells), "", "### Details", "", details_table(cells), ""]
    out += not_run_lines(cells)
    if meta.commands:
        out += ["### Exact commands", "", "```"] + meta.commands + ["```", ""]
    return "\n".join(out)


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
