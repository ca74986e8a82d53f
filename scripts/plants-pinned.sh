#!/usr/bin/env bash
# Checks that every scenario pinned to a plant's seed still catches that plant there: a scenario
# with a `# plant-pinned: NAME` line must FAIL at its pinned seed with NAME planted.
# A change that moves the simulated schedules can move a plant's window off the pinned seed
# without any test noticing (the scenario still passes unplanted), so run this after such a
# change (it builds each plant, about two minutes each; not part of CI). Exit status 1 if any
# pinned seed stopped catching its plant; it then sweeps 0..N (PLANT_SWEEP, default 200) for the
# seeds that do.
#
#   bash scripts/plants-pinned.sh            # every pinned scenario
#   bash scripts/plants-pinned.sh NAME...    # only these plants
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

sweep=${PLANT_SWEEP:-200}
stale=0
checked=0
while read -r plant scenario; do
  if (($# > 0)) && [[ ! " $* " == *" $plant "* ]]; then
    continue
  fi
  checked=$((checked + 1))
  seed=$(sed -n 's/^seed = \([0-9]*\)$/\1/p' "$scenario" | head -1)
  if bash scripts/plant.sh "$plant" run "$scenario" >/dev/null 2>&1; then
    stale=$((stale + 1))
    echo "STALE $plant: $scenario passes at its pinned seed $seed with the plant"
    bash scripts/plant.sh "$plant" run "$scenario" --seeds "0..$sweep" 2>/dev/null \
      | grep -E "^(PASS|FAIL) .*seeds as expected|first failure" | sort -u | sed 's/^/      /'
  else
    echo "ok    $plant: $scenario fails at its pinned seed $seed"
  fi
done < <(grep -rl "^# plant-pinned: " scenarios --include='*.toml' | sort | while read -r file; do
  plant=$(sed -n 's/^# plant-pinned: \([a-z0-9-]*\).*/\1/p' "$file" | head -1)
  if [[ -f scripts/plants/$plant.patch ]]; then
    echo "$plant $file"
  else
    echo "no plant '$plant' for $file" >&2
  fi
done)
echo "$checked pinned scenarios checked, $stale stale"
((stale == 0))
