#!/usr/bin/env bash
# seedlog, single node, data on disk:
#   seedlog.sh start PORT DATADIR   write DATADIR/seedlog.properties, start
#                                   `seedlog broker --config FILE`, wait until it answers, print PID
#   seedlog.sh stop DATADIR         SIGTERM, wait up to 30 s (then SIGKILL)
#   seedlog.sh wait PORT [SECONDS]
#   seedlog.sh bin                  print the binary's path
# Env: SEEDLOG_BIN (default: target/release/seedlog in the repo). Build it with
#      cargo build --release --bin seedlog
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

seedlog_bin() {
  local b="${SEEDLOG_BIN:-$REPO_DIR/target/release/seedlog}"
  [[ $b = /* ]] || b="$REPO_DIR/$b"
  [[ -x $b ]] || die "seedlog binary not found at $b (cargo build --release --bin seedlog, or set SEEDLOG_BIN)"
  echo "$b"
}

start() { # PORT DATADIR
  local port=$1 datadir bin
  mkdir -p "$2"; datadir="$(cd "$2" && pwd)"
  bin="$(seedlog_bin)"
  check_port_free "$port"
  mkdir -p "$datadir/data"
  cat >"$datadir/seedlog.properties" <<PROPS
node.id=0
listeners=PLAINTEXT://127.0.0.1:$port
log.dirs=$datadir/data
offsets.topic.num.partitions=3
group.initial.rebalance.delay.ms=0
PROPS
  launch "$datadir" "$bin" broker --config "$datadir/seedlog.properties"
  local pid; pid="$(cat "$datadir/broker.pid")"
  if ! wait_ready "$port" 30 "$pid"; then
    tail -20 "$datadir/broker.log" >&2 || true
    stop_pid "$pid" 5 TERM
    die "seedlog did not start"
  fi
  echo "$pid"
}

case "${1:-}" in
  bin) seedlog_bin ;;
  start) [[ $# -eq 3 ]] || die "usage: start PORT DATADIR"; start "$2" "$3" ;;
  stop) [[ $# -eq 2 ]] || die "usage: stop DATADIR"; stop_from_datadir "$2" 30 TERM ;;
  wait) wait_ready "$2" "${3:-30}" ;;
  *) die "usage: seedlog.sh bin|start PORT DATADIR|stop DATADIR|wait PORT [SECONDS]" ;;
esac
