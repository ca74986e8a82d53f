#!/usr/bin/env bash
# Every [explore] space of the suite (each scenario file with an [explore] table; one per
# family, docs/SIMULATION.md "Exploration"), explored with the release simulator.
#
#   bash scripts/explore.sh ci                    # CI's budget: seeds 0..200 of each space
#   bash scripts/explore.sh nightly               # 5,000 seeds of each space (about 50 core-minutes here)
#   bash scripts/explore.sh nightly --shard K/N   # shard K (from 0) of N of the nightly sweep
#   bash scripts/explore.sh merge                 # adds up the shards' summaries, judges them
#
# SEEDLOG_EXPLORE_SEEDS overrides the range (A..B) of either mode. Each space writes its
# summary to target/explore/SPACE[-shard-K-of-N].json and its failing seeds, as self-contained
# scenario files, to target/sim-failures/; a failing seed fails the script (exit 1). Split the
# nightly sweep over machines with any engine that runs N copies of a command with an index:
# a CI matrix or a Kubernetes Indexed Job (docs/SIMULATION.md has both), then `merge` the
# summaries gathered in target/explore/.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode=${1:-ci}
shift || true
shard=""
if [[ ${1:-} == --shard ]]; then
  shard=${2:?--shard K/N}
fi
sim=target/sim/release/seedlog-sim
spaces=$(grep -rl '^\[explore\]' scenarios --include='*.toml' | sort)
mkdir -p target/explore

if [[ $mode == merge ]]; then
  status=0
  for space in $spaces; do
    name=$(basename "$space" .toml)
    mapfile -t files < <(ls target/explore/"$name"-shard-*.json 2>/dev/null)
    if ((${#files[@]} == 0)); then
      echo "no shard summaries of $space in target/explore" >&2
      status=1
      continue
    fi
    "$sim" merge "${files[@]}" --output "target/explore/$name.json" || status=1
  done
  exit $status
fi

case $mode in
  ci) seeds=${SEEDLOG_EXPLORE_SEEDS:-0..200} ;;
  nightly) seeds=${SEEDLOG_EXPLORE_SEEDS:-0..5000} ;;
  *)
    echo "usage: scripts/explore.sh ci|nightly [--shard K/N] | merge" >&2
    exit 2
    ;;
esac

status=0
for space in $spaces; do
  name=$(basename "$space" .toml)
  summary=target/explore/$name.json
  arguments=(explore "$space" --seeds "$seeds" --keep-going)
  if [[ -n $shard ]]; then
    summary=target/explore/$name-shard-${shard%/*}-of-${shard#*/}.json
    arguments+=(--shard "$shard")
  fi
  "$sim" "${arguments[@]}" --summary "$summary" || status=1
done
exit $status
