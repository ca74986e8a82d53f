"""Broker process accounting from /proc: CPU seconds (all threads) and peak RSS.

Peak RSS is VmHWM. Before each measured phase the driver resets it to the current RSS by
writing "5" to /proc/PID/clear_refs (Linux >= 4.0, needs to own the process or be root), so
each phase reports its own peak; if the reset is refused, the peak since start is reported.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Sample:
    cpu_seconds: float
    hwm_kib: int | None
    rss_kib: int | None


def parse_stat_cpu(stat_text: str, ticks_per_second: int) -> float:
    """utime + stime of a /proc/PID/stat line, in seconds (the comm field may contain spaces)."""
    rest = stat_text[stat_text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    utime, stime = int(rest[11]), int(rest[12])
    return (utime + stime) / ticks_per_second


def parse_status_kib(status_text: str, key: str) -> int | None:
    for line in status_text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def sample(pid: int) -> Sample:
    proc = Path(f"/proc/{pid}")
    ticks = os.sysconf("SC_CLK_TCK")
    status = (proc / "status").read_text()
    return Sample(
        cpu_seconds=parse_stat_cpu((proc / "stat").read_text(), ticks),
        hwm_kib=parse_status_kib(status, "VmHWM"),
        rss_kib=parse_status_kib(status, "VmRSS"),
    )


def reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def loadavg() -> tuple[float, float, float]:
    one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    return float(one), float(five), float(fifteen)
