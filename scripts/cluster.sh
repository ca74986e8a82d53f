#!/usr/bin/env bash
# Starts a seedlog cluster on loopback: one controller (node 100, port 9093) and three brokers
# (nodes 0, 1, 2 on ports 9094, 9095, 9096), each with its own data directory under DIR
# (default: a new temporary directory). Runs in the foreground; Ctrl-C stops every node.
#
#   bash scripts/cluster.sh [DIR]
#   bootstrap.servers=127.0.0.1:9094,127.0.0.1:9095,127.0.0.1:9096
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-$(mktemp -d)}
bin=${SEEDLOG_BIN:-target/release/seedlog}
[[ -x $bin ]] || { echo "no $bin: run cargo build --release (or set SEEDLOG_BIN)" >&2; exit 1; }
voters="controller.quorum.voters=100@127.0.0.1:9093"
mkdir -p "$dir"
cat > "$dir/controller.properties" <<PROPERTIES
process.roles=controller
node.id=100
listeners=PLAINTEXT://127.0.0.1:9093
log.dirs=$dir/controller
$voters
PROPERTIES
for node in 0 1 2; do
  cat > "$dir/broker-$node.properties" <<PROPERTIES
node.id=$node
listeners=PLAINTEXT://127.0.0.1:$((9094 + node))
log.dirs=$dir/broker-$node
$voters
PROPERTIES
done
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' EXIT INT TERM
"$bin" broker --config "$dir/controller.properties" 2> "$dir/controller.log" & pids+=($!)
for node in 0 1 2; do
  "$bin" broker --config "$dir/broker-$node.properties" 2> "$dir/broker-$node.log" & pids+=($!)
done
echo "controller 127.0.0.1:9093, brokers 127.0.0.1:9094,127.0.0.1:9095,127.0.0.1:9096"
echo "configs and logs in $dir; Ctrl-C stops the cluster"
wait
