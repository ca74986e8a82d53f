#!/usr/bin/env bash
# The mutation score of the core against the simulator suite (docs/VERIFICATION.md).
#
# cargo-mutants generates the mutants (`cargo mutants --list --json`, diffs included); this
# script tests each one itself, because the test that counts is the simulator, not `cargo test`:
# it copies the tree to target/mutants/tree, applies the mutant, builds the simulator
# (`--cfg madsim`, target dir target/mutants/target, so only the mutated crate recompiles),
# runs every scenario at its pinned seed plus a short sweep, and records the outcome:
#   caught    the suite failed (some scenario reported a violation or the run crashed)
#   missed    the suite passed: no scenario guards this line
#   unviable  the mutant does not compile
#   timeout   the suite ran longer than MUTANTS_TIMEOUT seconds (default 300)
#
#   bash scripts/mutants.sh                         # every mutant of the core, one after another
#   bash scripts/mutants.sh --shard 2/4             # the second quarter (for several sittings)
#   bash scripts/mutants.sh --file src/broker/log   # only files under a path (repeatable)
#   MUTANTS_SEEDS=0..3 bash scripts/mutants.sh ...  # the sweep per mutant (default 0..3)
#
# Results: target/mutants/results.tsv (outcome, file:line, mutant), appended as it goes, so an
# interrupted run resumes where it stopped; a summary at the end. About 40 s a mutant here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

files=()
shard=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --file) files+=("$2"); shift 2 ;;
    --shard) shard=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ ${#files[@]} -eq 0 ]]; then
  files=(src/broker src/client src/runtime/memory_storage.rs)
fi
seeds=${MUTANTS_SEEDS:-0..3}
limit=${MUTANTS_TIMEOUT:-300}

if ! cargo mutants --version >/dev/null 2>&1; then
  echo "installing cargo-mutants (once)" >&2
  cargo install --locked cargo-mutants
fi

out=target/mutants
mkdir -p "$out"
file_args=()
for file in "${files[@]}"; do file_args+=(--file "$file"); done
cargo mutants --list --json "${file_args[@]}" > "$out/mutants.json"

python3 - "$out/mutants.json" "$shard" > "$out/queue.tsv" <<'EOF'
import json, sys
mutants = json.load(open(sys.argv[1]))
shard = sys.argv[2]
if shard:
    k, n = map(int, shard.split("/"))
    mutants = [m for i, m in enumerate(mutants) if i % n == k - 1]
for i, m in enumerate(mutants):
    name = m.get("name") or f'{m["file"]}: {m["function"]["function_name"] if m.get("function") else ""}'
    diff = m["diff"].replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    print(f'{m["file"]}\t{name}\t{diff}')
EOF
total=$(wc -l < "$out/queue.tsv")
touch "$out/results.tsv"
echo "$total mutants; results in $out/results.tsv" >&2

tree=$out/tree
refresh_tree() {
  rm -rf "$tree"
  mkdir -p "$tree"
  git ls-files -z --cached --others --exclude-standard src sim vendor scenarios Cargo.toml Cargo.lock .cargo \
    | xargs -0 cp --parents -t "$tree"
}

index=0
while IFS=$'\t' read -r file name diff; do
  index=$((index + 1))
  if grep -qF -- "$name" "$out/results.tsv"; then
    continue
  fi
  refresh_tree
  printf '%b' "$diff" > "$out/mutant.diff"
  outcome=missed
  if ! (cd "$tree" && patch --quiet -p0 "$file" < "../mutant.diff" >/dev/null); then
    outcome=unviable
  elif ! (cd "$tree" && RUSTFLAGS="--cfg madsim" CARGO_TARGET_DIR=../target \
      cargo build --quiet --release -p seedlog-sim >/dev/null 2>&1); then
    outcome=unviable
  else
    set +e
    (cd "$tree" && timeout "$limit" ../target/release/seedlog-sim run scenarios >/dev/null 2>&1 \
      && timeout "$limit" ../target/release/seedlog-sim run scenarios --seeds "$seeds" >/dev/null 2>&1)
    status=$?
    set -e
    case $status in
      0) outcome=missed ;;
      124) outcome=timeout ;;
      *) outcome=caught ;;
    esac
  fi
  printf '%s\t%s\n' "$outcome" "$name" >> "$out/results.tsv"
  echo "[$index/$total] $outcome  $name" >&2
done < "$out/queue.tsv"

echo >&2
for outcome in caught missed unviable timeout; do
  printf '%-9s %s\n' "$outcome" "$(grep -c "^$outcome" "$out/results.tsv" || true)"
done
