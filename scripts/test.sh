#!/usr/bin/env bash
# Runs every test of seedlog (the README's test command):
#   lint      cargo fmt --check; clippy -D warnings in the real and the simulator build
#   layering  no tokio, files, clocks, OS randomness or threads in the core outside runtime/;
#             no file imports from a layer above its own, no new import cycle (scripts/layers.py)
#   plants    every planted bug in scripts/plants still applies (git apply --check)
#   real      cargo test: unit tests, black-box tests on loopback (kill -9, sendfile, bad frames)
#   sim       cargo sim test: every scenario at its pinned seed, a short sweep, a replay check
#   sweep     every scenario over seeds ${SEEDLOG_SWEEP:-20..60}, verdicts per scenario
#   determinism  seeds ${SEEDLOG_DETERMINISM:-0..20} run twice, histories byte-compared (and
#             judged, so each scenario's verdicts cover seeds 0..60 in all; the sweep was 0..100
#             until 2026-12-03, when it alone took 9 of the 30 minutes CI may use here)
#   explore   seeds ${SEEDLOG_EXPLORE_SEEDS:-0..200} of every [explore] space, one per family
#             (scripts/explore.sh ci; faults drawn per seed; a failure writes a failure file
#             under target/sim-failures/; `scripts/explore.sh nightly` runs 5,000 seeds of each)
#   clients   kafka-python and kcat against the real broker; the client conformance suite; a
#             simulator timeline page rendered in headless Chromium (tests/python/test_timeline.py,
#             after sim-build: it runs target/sim/release/seedlog-sim)
# Sets up .venv (pip) on first use. Every step runs; the exit status is non-zero if any failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SIM_ENV=(env RUSTFLAGS="--cfg madsim" CARGO_TARGET_DIR=target/sim)
passed=0
failed=0
failures=()

step() {
  local name=$1
  shift
  echo
  echo "== $name: $*"
  local started=$SECONDS
  if "$@"; then
    passed=$((passed + 1))
    echo "-- PASS $name ($((SECONDS - started)) s)"
  else
    failed=$((failed + 1))
    failures+=("$name")
    echo "-- FAIL $name ($((SECONDS - started)) s)"
  fi
}

python_env() {
  if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv || return 1
  fi
  .venv/bin/pip install --quiet --disable-pip-version-check \
    -r tests/python/requirements.txt -r bench/requirements.txt
}

layering() {
  # The core (everything in src/ but runtime/ and bin/) never touches tokio, files, clocks, OS
  # randomness or threads: that is what makes it run unchanged under the simulator.
  local hits
  hits=$(grep -rnE 'tokio::|std::fs|Instant::now|SystemTime::now|thread_rng|std::thread' \
           --include='*.rs' src | grep -vE '^src/(runtime|bin)/' | grep -vE '^\S+:[0-9]+:\s*//')
  if [[ -n $hits ]]; then
    echo "core code reaches outside the runtime layer:"
    echo "$hits"
    return 1
  fi
  # select! must be biased (unbiased select is not deterministic across runs in one process).
  local unbiased
  unbiased=$(grep -rn 'select!' --include='*.rs' src sim | grep -vE '^\S+:[0-9]+:\s*//' |
    while IFS=: read -r file line _; do
      sed -n "${line},$((line + 2))p" "$file" | grep -q biased || echo "$file:$line"
    done)
  if [[ -n $unbiased ]]; then
    echo "select! without biased;: $unbiased"
    return 1
  fi
  # tokio's watch channel wakes its waiters through notify shards picked at random (a counter
  # shared by the whole process), so two runs of one seed in one process diverge.
  local watch
  watch=$(grep -rnE 'sync::watch|watch::(channel|Sender|Receiver)' --include='*.rs' src sim |
    grep -vE '^\S+:[0-9]+:\s*//')
  if [[ -n $watch ]]; then
    echo "tokio::sync::watch is not deterministic under the simulator: $watch"
    return 1
  fi
  # runtime > controller > broker > client > config, log, metadata > protocol, storage > types:
  # imports only go down, and no cycle among files but those scripts/layers.py lists.
  python3 scripts/layers.py
}

sim_cli() {
  target/sim/release/seedlog-sim "$@"
}

plants_apply() {
  # Every planted bug (scripts/plants/*.patch, docs/VERIFICATION.md) must still apply to the
  # tree: a plant that stopped applying silently guards nothing.
  local plant stale=()
  for plant in scripts/plants/*.patch; do
    git apply --check "$plant" 2>/dev/null || stale+=("$plant")
  done
  if ((${#stale[@]} > 0)); then
    echo "plants that no longer apply (regenerate them): ${stale[*]}"
    return 1
  fi
  echo "$(ls scripts/plants/*.patch | wc -l) plants apply"
}

step python-env python_env
step fmt cargo fmt --all --check
step clippy cargo clippy --workspace --all-targets -- -D warnings
step clippy-sim "${SIM_ENV[@]}" cargo clippy --workspace --all-targets -- -D warnings
step layering layering
step plants-apply plants_apply
step docs-summaries python3 scripts/summaries.py --check
step real-tests cargo test --workspace
step sim-tests "${SIM_ENV[@]}" cargo test --release -p seedlog-sim
step sim-build "${SIM_ENV[@]}" cargo build --release -p seedlog-sim
step sweep sim_cli run scenarios --seeds "${SEEDLOG_SWEEP:-20..60}"
step determinism sim_cli run scenarios --seeds "${SEEDLOG_DETERMINISM:-0..20}" --check-determinism
step explore bash scripts/explore.sh ci
step kafka-python-kcat env SEEDLOG_BIN=target/debug/seedlog .venv/bin/python -m pytest -q -p no:warnings tests/python
step conformance env SEEDLOG_BIN=target/debug/seedlog bash bench/conformance/ci.sh

echo
if ((failed > 0)); then
  echo "failed steps: ${failures[*]}"
fi
echo "steps: $passed passed, $failed failed"
((failed == 0))
