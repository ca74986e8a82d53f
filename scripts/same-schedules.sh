#!/usr/bin/env bash
# A pure restructuring changes no schedule: runs every scenario at seeds 0..20 (or SEEDS) with
# the simulator built from BASE and with the one built from the working tree, and compares the
# history hashes scenario by scenario (docs/VERIFICATION.md, "Restructurings that move code").
#
#   bash scripts/same-schedules.sh BASE [SEEDS]
#
# BASE is built in a worktree under target/same-schedules/ (its own target dir, kept between
# calls); the working tree's simulator is target/sim's. Exit 0 when every scenario's set of
# history hashes is the same; otherwise the scenarios that differ.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

base=${1:?usage: same-schedules.sh BASE [SEEDS]}
seeds=${2:-0..20}
work=target/same-schedules
mkdir -p "$work"
commit=$(git rev-parse --verify "$base^{commit}")
tree=$work/tree
git worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
git worktree add --quiet --detach "$tree" "$commit"
trap 'git worktree remove --force "$tree" 2>/dev/null || true' EXIT

echo "== building the simulator at ${commit:0:12} and at the working tree" >&2
(cd "$tree" && RUSTFLAGS="--cfg madsim" CARGO_TARGET_DIR=../target \
  cargo build --quiet --release -p seedlog-sim)
RUSTFLAGS="--cfg madsim" CARGO_TARGET_DIR=target/sim cargo build --quiet --release -p seedlog-sim

echo "== seeds $seeds of every scenario, twice" >&2
"$work/target/release/seedlog-sim" run scenarios --seeds "$seeds" \
  --summary "$work/base.json" > "$work/base.log" 2>&1 || true
target/sim/release/seedlog-sim run scenarios --seeds "$seeds" \
  --summary "$work/head.json" > "$work/head.log" 2>&1 || true

python3 - "$work/base.json" "$work/head.json" <<'EOF'
import json
import sys

base, head = (json.load(open(path)) for path in sys.argv[1:3])
hashes = lambda summary: {s["path"]: s["hashes"] for s in summary["scenarios"]}
a, b = hashes(base), hashes(head)
differ = sorted(path for path in a.keys() | b.keys() if a.get(path) != b.get(path))
histories = sum(len(v) for v in a.values())
for path in differ:
    print(f"differs: {path}")
print(
    f"{len(a)} scenarios, {histories} distinct histories at {base['commit']}; "
    f"{len(differ)} scenarios differ at {head['commit']}"
)
sys.exit(1 if differ else 0)
EOF
