"""Make bench/ importable (tests import `conformance`, `perf`, `peers` as the scripts do)."""
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2]
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
