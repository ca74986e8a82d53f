#!/usr/bin/env bash
# The mutation score of the core against the simulator suite (docs/VERIFICATION.md).
#
# cargo-mutants generates the mutants (`cargo mutants --list --json`, diffs included); this
# script tests each one itself, because the test that counts is the simulator, not `cargo test`:
# in a private copy of the tree it applies the mutant, builds the simulator (`--cfg madsim`), runs
# every scenario at its pinned seed and then a short sweep judged seed by seed (`run --per-seed`:
# a scenario's `min_fraction` rate is reported, not required, since three seeds cannot measure
# it), restores the file, and records:
#   caught    the suite failed (some scenario reported a violation or the run crashed)
#   missed    the suite passed: no scenario guards this line
#   unviable  the mutant does not compile
#   timeout   the suite ran longer than MUTANTS_TIMEOUT seconds (default 300)
# Before any mutant it runs the same suite on the unmutated tree (the baseline, as cargo-mutants
# does) and stops if that fails: a failing baseline would count every mutant as caught.
#
#   bash scripts/mutants.sh                       # the core: src/broker, src/client, src/log, src/storage
#   bash scripts/mutants.sh --file 'src/log/**' --file src/broker/replica_manager/partition.rs
#   bash scripts/mutants.sh --file src/types.rs --re 'TopicPartition'
#                                                 # only mutants whose name matches (cargo-mutants --re)
#   bash scripts/mutants.sh --shard 2/4           # the second quarter (for several sittings)
#   bash scripts/mutants.sh --workers 2           # two mutants at a time (one per core)
#   MUTANTS_SEEDS=0..3 bash scripts/mutants.sh    # the sweep per mutant (default 0..3)
#   bash scripts/mutants.sh --retest-missed --file src/broker/router/handlers/fetch.rs
#                                                 # after new scenarios or checks: test again only
#                                                 # what an earlier run missed in these files
#
# --retest-missed matches mutants by file, function and replacement, not by line (lines move
# as code changes): every mutant of the file that looks like an earlier missed one is tested
# again. The earlier missed lines of those files move to target/mutants/missed-before.tsv.
#
# Speed: the build is the cost. Each worker keeps its own tree and target dir
# (target/mutants/wN) and builds with opt-level 1, no debuginfo and incremental compilation, so
# a mutant recompiles in about 5 s instead of a minute; the first build of a worker takes a few
# minutes. About 10–20 s a mutant per worker here.
#
# Results: target/mutants/results.tsv (outcome, file:line: mutant), appended as it goes, so an
# interrupted run resumes where it stopped (delete a line to test that mutant again); the build
# errors of unviable mutants in target/mutants/unviable/N.log; a summary at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

files=()
res=()
shard=""
workers=1
retest_missed=false
while [[ $# -gt 0 ]]; do
  case $1 in
    --file) files+=("$2"); shift 2 ;;
    --re) res+=("$2"); shift 2 ;;
    --shard) shard=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --retest-missed) retest_missed=true; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ ${#files[@]} -eq 0 ]]; then
  files=('src/broker/**' 'src/client/**' 'src/log/**' 'src/storage/**')
fi
seeds=${MUTANTS_SEEDS:-0..3}
limit=${MUTANTS_TIMEOUT:-300}

if ! cargo mutants --version >/dev/null 2>&1; then
  echo "installing cargo-mutants (once)" >&2
  cargo install --locked cargo-mutants
fi

out=$root/target/mutants
mkdir -p "$out"
file_args=()
for file in "${files[@]}"; do file_args+=(--file "$file"); done
for re in "${res[@]}"; do file_args+=(--re "$re"); done
cargo mutants --list --json "${file_args[@]}" > "$out/mutants.json"

touch "$out/results.tsv"
# One mutant per line: file, name, diff (escaped); the shard and --retest-missed are taken here.
python3 - "$out/mutants.json" "$shard" "$retest_missed" "$out" > "$out/queue.tsv" <<'PY'
import json, re, sys
mutants = json.load(open(sys.argv[1]))
shard, retest, out = sys.argv[2], sys.argv[3] == "true", sys.argv[4]
if shard:
    k, n = map(int, shard.split("/"))
    mutants = [m for i, m in enumerate(mutants) if i % n == k - 1]
def key(name):  # file and description, without line:column
    return re.sub(r":\d+:\d+:", ":", name)
if retest:
    files = {m["file"] for m in mutants}
    kept, missed = [], []
    for line in open(f"{out}/results.tsv"):
        outcome, name = line.rstrip("\n").split("\t", 1)
        (missed if outcome == "missed" and name.split(":")[0] in files else kept).append(line)
    with open(f"{out}/missed-before.tsv", "a") as before:
        before.writelines(missed)
    open(f"{out}/results.tsv", "w").writelines(kept)
    wanted = {key(line.rstrip("\n").split("\t", 1)[1]) for line in open(f"{out}/missed-before.tsv")}
    mutants = [m for m in mutants if key(m["name"]) in wanted]
for m in mutants:
    diff = m["diff"].replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    print(f'{m["file"]}\t{m["name"]}\t{diff}')
PY
total=$(wc -l < "$out/queue.tsv")
echo "$total mutants, $workers worker(s); results in $out/results.tsv" >&2

# Each worker: a tree copied with its timestamps (so incremental builds stay valid), its own
# target dir, every `workers`-th mutant of the queue.
export RUSTFLAGS="--cfg madsim" CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_DEBUG=0 \
  CARGO_PROFILE_RELEASE_INCREMENTAL=true CARGO_PROFILE_RELEASE_CODEGEN_UNITS=64
prepare_tree() { # $1: the worker's directory
  rm -rf "$1/tree"
  mkdir -p "$1/tree"
  git ls-files -z --cached --others --exclude-standard src sim vendor scenarios Cargo.toml Cargo.lock .cargo \
    | xargs -0 cp -p --parents -t "$1/tree"
  # `cp -p` keeps the sources' times, which can be older than the target dir's last build (of a
  # mutant, in an earlier run): cargo would then call that build fresh. Touching the crates
  # this runner mutates makes their first build here compile what the tree says.
  find "$1/tree/src" "$1/tree/sim" -name '*.rs' -exec touch {} +
}
# The test that counts: every scenario at its pinned seed, then the sweep judged seed by seed
# (`--per-seed`: a sweep of a few seeds cannot measure a scenario's `min_fraction` rate).
suite() { # $1: the worker's directory, then extra `run` arguments
  local dir=$1
  shift
  (cd "$dir/tree" && timeout "$limit" "$dir/target/release/seedlog-sim" run scenarios "$@" \
    && timeout "$limit" "$dir/target/release/seedlog-sim" run scenarios --seeds "$seeds" --per-seed "$@")
}

# The baseline, as cargo-mutants runs one: the suite must pass without a mutant, or every
# mutant would count as caught.
base=$out/w1
prepare_tree "$base"
echo "baseline: building and running the suite without a mutant" >&2
if ! (cd "$base/tree" && CARGO_TARGET_DIR=$base/target cargo build --quiet --release -p seedlog-sim \
  >"$out/baseline.log" 2>&1); then
  echo "baseline: the unmutated tree does not build (see $out/baseline.log)" >&2
  exit 1
fi
if ! suite "$base" >>"$out/baseline.log" 2>&1; then
  echo "baseline: the suite fails without a mutant, so no mutant can be judged; what failed:" >&2
  grep -E '^(FAIL|   seed)' "$out/baseline.log" | sort -u >&2
  exit 1
fi
echo "baseline: the suite passes" >&2

worker() {
  local id=$1 dir=$out/w$1
  local tree=$dir/tree
  [[ $id -eq 1 ]] || prepare_tree "$dir"
  export CARGO_TARGET_DIR=$dir/target
  local jobs=()
  if [[ $workers -gt 1 ]]; then jobs=(--jobs 1); fi
  local index=0 file name diff outcome status
  while IFS=$'\t' read -r file name diff; do
    index=$((index + 1))
    if [[ $(( (index - 1) % workers )) -ne $((id - 1)) ]] || grep -qF -- "$name" "$out/results.tsv"; then
      continue
    fi
    printf '%b' "$diff" > "$dir/mutant.diff"
    cp -p "$tree/$file" "$dir/original"
    if ! (cd "$tree" && patch --quiet -p0 "$file" < "$dir/mutant.diff" >/dev/null); then
      outcome=unviable
    elif ! (cd "$tree" && cargo build --quiet --release -p seedlog-sim >"$dir/build.log" 2>&1); then
      outcome=unviable
      mkdir -p "$out/unviable"
      cp "$dir/build.log" "$out/unviable/$index.log" # why it did not build
    else
      set +e
      suite "$dir" "${jobs[@]}" >/dev/null 2>&1
      status=$?
      set -e
      case $status in
        0) outcome=missed ;;
        124) outcome=timeout ;;
        *) outcome=caught ;;
      esac
    fi
    cp "$dir/original" "$tree/$file" # a new time: the next build recompiles the restored file
    printf '%s\t%s\n' "$outcome" "$name" >> "$out/results.tsv"
    echo "[w$id $index/$total] $outcome  $name" >&2
  done < "$out/queue.tsv"
}

for id in $(seq 1 "$workers"); do
  worker "$id" &
done
wait

echo >&2
for outcome in caught missed unviable timeout; do
  printf '%-9s %s\n' "$outcome" "$(grep -c "^$outcome" "$out/results.tsv" || true)"
done
