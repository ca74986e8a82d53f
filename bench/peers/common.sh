# Shared helpers for the peer scripts (sourced, not run). Every peer script exposes:
#   start PORT DATADIR   start the broker on 127.0.0.1:PORT with its files in DATADIR, wait
#                        until it answers Metadata, print its PID (the broker process itself)
#   stop DATADIR         stop the broker whose PID is in DATADIR/broker.pid and wait for it
#   wait PORT [SECONDS]  wait until 127.0.0.1:PORT answers Metadata
# The broker's output goes to DATADIR/broker.log.

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_DIR="$(cd "$BENCH_DIR/.." && pwd)"
CACHE_DIR="${SEEDLOG_BENCH_CACHE:-$BENCH_DIR/.cache}"

die() { echo "$(basename "$0"): $*" >&2; exit 1; }

# The venv holding the bench's Python packages (repo-level .venv, see bench/README.md).
venv_dir() { echo "${SEEDLOG_BENCH_VENV:-$REPO_DIR/.venv}"; }

wait_ready() { # PORT SECONDS [PID]
  local port=$1 secs=$2 pid=${3:-}
  local deadline=$((SECONDS + secs))
  while ((SECONDS < deadline)); do
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
      echo "broker process $pid exited during startup" >&2
      return 1
    fi
    if python3 "$BENCH_DIR/peers/kwire.py" ready "127.0.0.1:$port" --timeout 2 >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.3
  done
  echo "broker on 127.0.0.1:$port not ready after ${secs}s" >&2
  return 1
}

check_port_free() { # PORT
  if python3 - "$1" <<'PY'
import socket, sys
s = socket.socket()
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
sys.exit(0)
PY
  then die "127.0.0.1:$1 is already in use"; fi
}

# stop_pid PID GRACE_SECONDS SIGNAL: send SIGNAL, wait up to GRACE seconds, then SIGKILL.
stop_pid() {
  local pid=$1 grace=$2 sig=$3
  kill -0 "$pid" 2>/dev/null || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + grace))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null && [[ $sig != KILL ]]; then
    echo "pid $pid still alive after SIG$sig + ${grace}s: SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  deadline=$((SECONDS + 10))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  ! kill -0 "$pid" 2>/dev/null || { echo "pid $pid did not exit" >&2; return 1; }
}

stop_from_datadir() { # DATADIR GRACE SIGNAL
  local pidfile="$1/broker.pid"
  [[ -f $pidfile ]] || die "no $pidfile"
  stop_pid "$(cat "$pidfile")" "$2" "$3"
  rm -f "$pidfile"
}

# Start "$@" in the background with output to DATADIR/broker.log; the started command's PID is
# recorded in DATADIR/broker.pid (nohup execs, so $! is the broker process itself).
launch() { # DATADIR CMD...
  local datadir=$1; shift
  nohup "$@" >"$datadir/broker.log" 2>&1 </dev/null &
  echo $! >"$datadir/broker.pid"
}
