#!/usr/bin/env bash
# CI entry point for the bench (needs neither Maven nor Kafka):
#   1. the suite's own unit tests (pytest bench/conformance/tests);
#   2. the conformance suite against a freshly started seedlog broker, with the clients that
#      install from PyPI/apt (kafka-python, confluent-kafka, and kcat if installed); the steps
#      listed for seedlog in bench/conformance/gaps.toml are reported as SKIP (expected gap).
# Env: SEEDLOG_BIN (default target/release/seedlog), CONFORMANCE_CLIENTS (override the list),
#      CONFORMANCE_RECORDS (records per produce step, default 1000).
# The venv is the repo's .venv (created with bench/requirements.txt if missing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

PY="$(python3 bench/benchenv.py)"
"$PY" -m pytest -q bench/conformance/tests

export SEEDLOG_BIN="${SEEDLOG_BIN:-target/release/seedlog}"
if [[ ! -x $SEEDLOG_BIN ]]; then
  echo "ci.sh: seedlog binary $SEEDLOG_BIN not found (cargo build --release --bin seedlog, or set SEEDLOG_BIN)" >&2
  exit 1
fi
clients="kafka-python,confluent-kafka"
if command -v kcat >/dev/null; then clients+=",kcat"; fi
"$PY" bench/conformance/run.py --broker seedlog --no-save \
  --clients "${CONFORMANCE_CLIENTS:-$clients}" --records "${CONFORMANCE_RECORDS:-1000}"
