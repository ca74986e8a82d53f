"""Expected-gap list (gaps.toml): which steps a broker is known not to pass yet, and why."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_GAPS = Path(__file__).resolve().parent / "gaps.toml"


@dataclass
class GapList:
    """broker -> {"CLIENT/STEP" or "perf/WORKLOAD": reason}."""

    entries: dict[str, dict[str, str]] = field(default_factory=dict)

    def reason(self, broker: str | None, client: str, step: str) -> str | None:
        """The reason `step` of `client` is an expected gap on `broker`, or None."""
        if broker is None:
            return None
        table = self.entries.get(broker, {})
        for key in (f"{client}/{step}", f"*/{step}", f"{client}/*", "*/*"):
            if key in table:
                return table[key]
        return None

    def perf_gap(self, broker: str, workload: str) -> str | None:
        return self.entries.get(broker, {}).get(f"perf/{workload}")


def parse_gaps(text: str) -> GapList:
    data = tomllib.loads(text)
    entries: dict[str, dict[str, str]] = {}
    for broker, table in data.items():
        if not isinstance(table, dict):
            raise ValueError(f"gaps: [{broker}] must be a table")
        for key, reason in table.items():
            if not isinstance(reason, str) or "/" not in key:
                raise ValueError(f"gaps: [{broker}] {key!r} must be \"CLIENT/STEP\" = \"reason\"")
        entries[broker] = dict(table)
    return GapList(entries)


def load_gaps(path: Path = DEFAULT_GAPS) -> GapList:
    return parse_gaps(path.read_text())
