#!/usr/bin/env bash
# How fast `explore` finds each planted bug (docs/VERIFICATION.md, "How fast explore finds a
# plant"): builds the plant (scripts/plant.sh, without cross-crate LTO), then explores the space
# scripts/plant-spaces.tsv names for it, one seed at a time (--jobs 1), from three starting
# seeds, until the first failing seed; prints the CPU seconds each start took and their median.
#
#   bash scripts/plant-speed.sh [--budget SECONDS] [--starts "0 1000000 2000000"] [PLANT...]
#
# No plant named: every plant in scripts/plant-spaces.tsv. --budget (default 600: the goal of
# ten core-minutes) bounds each start in CPU seconds (ulimit -t); a start that finds nothing
# within it counts as not found, and the remaining starts of that plant are skipped. One line per plant,
# tab-separated, also appended to target/plant-speed.tsv:
#   plant  space  cpu-seconds-per-start  median  found/starts
# The failing seeds' scenario files go to target/plant-speed-failures/PLANT/START/ (to shrink
# and pin as regressions). SEEDLOG_PLANT_DIR picks the build directory (default target/plant-speed), so two copies of
# this script can run side by side on different plants.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

budget=600
starts="0 1000000 2000000"
while [[ ${1:-} == --* ]]; do
  case $1 in
    --budget) budget=${2:?--budget SECONDS}; shift 2 ;;
    --starts) starts=${2:?--starts \"S1 S2 S3\"}; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
plants=("$@")
if ((${#plants[@]} == 0)); then
  mapfile -t plants < <(grep -v '^#' scripts/plant-spaces.tsv | cut -f1)
fi
export SEEDLOG_PLANT_DIR=${SEEDLOG_PLANT_DIR:-target/plant-speed}
export SEEDLOG_PLANT_QUICK=1
sim=$SEEDLOG_PLANT_DIR/target/release/seedlog-sim
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

for plant in "${plants[@]}"; do
  space=$(awk -F'\t' -v p="$plant" '$1 == p { print $2 }' scripts/plant-spaces.tsv)
  if [[ -z $space ]]; then
    echo "no space for plant '$plant' in scripts/plant-spaces.tsv" >&2
    exit 2
  fi
  if ! bash scripts/plant.sh "$plant" --help > /dev/null 2> "$scratch/build.log"; then
    echo "plant '$plant' did not build:" >&2
    cat "$scratch/build.log" >&2
    exit 2
  fi
  cpus=()
  found=0
  tried=0
  for start in $starts; do
    tried=$((tried + 1))
    out=target/plant-speed-failures/$plant/$start
    rm -rf "$out"
    # The budget is CPU time (ulimit -t), so a loaded machine does not cut a start short.
    (ulimit -t "$budget"
      exec /usr/bin/time -f '%U %S' -o "$scratch/time" \
        "$sim" explore "scenarios/$space" --seeds "$start..$((start + 100000000))" --jobs 1 \
        --out "$out") > "$scratch/explore.log" 2>&1
    status=$?
    cpu=$(awk 'END { printf "%.0f", $1 + $2 }' "$scratch/time")
    if ((status == 1)) && compgen -G "$out/*.toml" > /dev/null; then
      found=$((found + 1))
      cpus+=("$cpu")
    else
      cpus+=(">$cpu")
      break
    fi
  done
  if ((found == tried)); then
    median=$(printf '%s\n' "${cpus[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  else
    median="not found"
  fi
  line=$(printf '%s\t%s\t%s\t%s\t%s/%s' "$plant" "$space" "${cpus[*]}" "$median" "$found" "$tried")
  echo "$line"
  echo "$line" >> target/plant-speed.tsv
done
