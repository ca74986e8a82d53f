#!/usr/bin/env bash
# Starts a seedlog cluster on loopback and runs it in the foreground; Ctrl-C stops every node.
# Three brokers (nodes 0, 1, 2 on ports 9094, 9095, 9096) and the controllers: by default one
# (node 100, port 9093, its metadata log local: a quorum of one); with CONTROLLERS=3 a Raft
# quorum of three (nodes 100, 101, 102 on ports 9193, 9195, 9197; each takes Raft messages on
# its port + 1). Each node has its own data directory under DIR (default: a new temporary one).
#
# With COMBINED=1, three combined nodes instead (process.roles=broker,controller): node N
# (0, 1, 2) serves its broker on 9N92 and its controller on 9N93 (Raft on 9N94), and the three
# controllers are a Raft quorum.
#
#   bash scripts/cluster.sh [DIR]
#   CONTROLLERS=3 bash scripts/cluster.sh [DIR]
#   bootstrap.servers=127.0.0.1:9094,127.0.0.1:9095,127.0.0.1:9096
#   COMBINED=1 bash scripts/cluster.sh [DIR]
#   bootstrap.servers=127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-$(mktemp -d)}
bin=${SEEDLOG_BIN:-target/release/seedlog}
controllers=${CONTROLLERS:-1}
[[ -x $bin ]] || { echo "no $bin: run cargo build --release (or set SEEDLOG_BIN)" >&2; exit 1; }
mkdir -p "$dir"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' EXIT INT TERM
if [[ ${COMBINED:-0} == 1 ]]; then
  voters="controller.quorum.voters=0@127.0.0.1:9093,1@127.0.0.1:9193,2@127.0.0.1:9293"
  for node in 0 1 2; do
    cat > "$dir/node-$node.properties" <<PROPERTIES
process.roles=broker,controller
node.id=$node
listeners=PLAINTEXT://127.0.0.1:9${node}92,CONTROLLER://127.0.0.1:9${node}93
controller.listener.names=CONTROLLER
log.dirs=$dir/node-$node
$voters
PROPERTIES
    "$bin" broker --config "$dir/node-$node.properties" 2> "$dir/node-$node.log" & pids+=($!)
  done
  echo "combined nodes (broker and controller each): $voters"
  echo "brokers 127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292"
  echo "configs and logs in $dir; Ctrl-C stops the cluster"
  wait
  exit
fi
declare -A controller_port
if [[ $controllers == 1 ]]; then
  controller_port[100]=9093
else
  for ((index = 0; index < controllers; index++)); do
    controller_port[$((100 + index))]=$((9193 + 2 * index))
  done
fi
voters=""
for node in $(printf '%s\n' "${!controller_port[@]}" | sort -n); do
  voters+="${voters:+,}$node@127.0.0.1:${controller_port[$node]}"
done
voters="controller.quorum.voters=$voters"
for node in "${!controller_port[@]}"; do
  cat > "$dir/controller-$node.properties" <<PROPERTIES
process.roles=controller
node.id=$node
listeners=PLAINTEXT://127.0.0.1:${controller_port[$node]}
log.dirs=$dir/controller-$node
$voters
PROPERTIES
done
for node in 0 1 2; do
  cat > "$dir/broker-$node.properties" <<PROPERTIES
node.id=$node
listeners=PLAINTEXT://127.0.0.1:$((9094 + node))
log.dirs=$dir/broker-$node
$voters
PROPERTIES
done
for node in "${!controller_port[@]}"; do
  "$bin" broker --config "$dir/controller-$node.properties" 2> "$dir/controller-$node.log" & pids+=($!)
done
for node in 0 1 2; do
  "$bin" broker --config "$dir/broker-$node.properties" 2> "$dir/broker-$node.log" & pids+=($!)
done
echo "controllers: $voters"
echo "brokers 127.0.0.1:9094,127.0.0.1:9095,127.0.0.1:9096"
echo "configs and logs in $dir; Ctrl-C stops the cluster"
wait
