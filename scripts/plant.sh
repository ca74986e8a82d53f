#!/usr/bin/env bash
# Plants a known bug into a copy of the tree and runs the simulator against it: the way to show
# that a scenario catches what it guards (docs/VERIFICATION.md). Each plant is a patch in
# scripts/plants/NAME.patch that brings back a bug seedlog once had, or one a checker must see.
#
#   bash scripts/plant.sh NAME run SCENARIO... --seeds 0..100     # any seedlog-sim arguments
#   bash scripts/plant.sh --list
#
# The copy lives in target/plant/tree (rebuilt from the working tree on every call) and builds
# into target/plant/target, so only the crates a plant touches recompile. The exit status is
# seedlog-sim's: a planted bug should make the scenario FAIL (exit 1).
#
# SEEDLOG_PLANT_DIR=DIR puts the copy and its build in DIR instead (two plants at once need two
# directories); SEEDLOG_PLANT_QUICK=1 builds without cross-crate LTO (about half the build
# time, a slower simulator: scripts/plant-speed.sh uses it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ ${1:-} == --list || $# -eq 0 ]]; then
  for patch in scripts/plants/*.patch; do
    name=$(basename "$patch" .patch)
    printf '%-40s %s\n' "$name" "$(sed -n 's/^# plant: //p' "$patch" | head -1)"
  done
  exit 0
fi

name=$1
shift
patch=scripts/plants/$name.patch
[[ -f $patch ]] || { echo "no plant '$name' (see --list)" >&2; exit 2; }

dir=${SEEDLOG_PLANT_DIR:-target/plant}
tree=$dir/tree
rm -rf "$tree"
mkdir -p "$tree"
git ls-files -z --cached --others --exclude-standard src sim vendor Cargo.toml Cargo.lock .cargo \
  | xargs -0 cp --parents --preserve=timestamps -t "$tree"
root=$PWD
(cd "$tree" && patch --quiet -p1 < "$root/$patch")
echo "== planted $name: $(sed -n 's/^# plant: //p' "$patch" | head -1)" >&2
quick=()
if [[ ${SEEDLOG_PLANT_QUICK:-} == 1 ]]; then
  quick=(env CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16)
fi
(cd "$tree" && "${quick[@]}" env RUSTFLAGS="--cfg madsim" CARGO_TARGET_DIR=../target \
  cargo build --quiet --release -p seedlog-sim)
"$dir/target/release/seedlog-sim" "$@"
