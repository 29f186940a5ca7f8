# Shared by scripts/dev and scripts/test: load the stack's environment, run a service
# in the background with a PID file, wait for an HTTP endpoint.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STACK_DIR=${RIVULET_STACK_DIR:-$ROOT/.stack}

load_env() {
  set -a
  # shellcheck disable=SC1091
  . "$STACK_DIR/env"
  set +a
}

# start_service NAME LOGFILE CMD... — records .stack/run/NAME.pid
start_service() {
  local name=$1 log=$2; shift 2
  mkdir -p "$STACK_DIR/run" "$(dirname "$log")"
  (
    for fd in $(ls /proc/$BASHPID/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
    setsid "$@" </dev/null >>"$log" 2>&1 &
    echo $! >"$STACK_DIR/run/$name.pid"
  ) 2>/dev/null
}

stop_service() {
  local pidfile=$STACK_DIR/run/$1.pid pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

wait_http() { # wait_http URL SECONDS
  local end=$((SECONDS + $2))
  until curl -sf -o /dev/null "$1"; do
    [ $SECONDS -lt $end ] || return 1
    sleep 0.3
  done
}
