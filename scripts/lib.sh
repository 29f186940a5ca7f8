# shellcheck shell=bash
# The toolbox every script in scripts/ sources (scripts/README.md lists what each uses):
# the repository and stack folders, the pinned versions, messages, Debian packages, the
# stack's environment, services run in the background with a PID file, addresses,
# waiting for HTTP. One definition of each helper: a script that needs one sources this
# file instead of writing its own.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STACK_DIR=${RIVULET_STACK_DIR:-$ROOT/.stack}
# KAFKA_VERSION, ZOOKEEPER_VERSION and the uap-core pin: one place for every script.
# shellcheck source=versions.env
. "$ROOT/scripts/versions.env"

# --- messages: "[script] text" on stderr; die ends the script ---------------------------
log_tag=$(basename "$0")
log() { printf '[%s] %s\n' "$log_tag" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- Debian packages ---------------------------------------------------------------------
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=
apt_install() { # apt_install PACKAGE... — apt-get update (once a run), then install; log in logs/apt.log
  local apt_log=$STACK_DIR/logs/apt.log
  mkdir -p "$STACK_DIR/logs"
  if [ -z "$apt_updated" ]; then
    log "apt-get update"
    as_root apt-get update -qq >>"$apt_log" 2>&1 || die "apt-get update failed, see $apt_log"
    apt_updated=1
  fi
  log "installing Debian packages: $*"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
    >>"$apt_log" 2>&1 || die "apt-get install $* failed, see $apt_log"
}
need() { # need COMMAND DEBIAN-PACKAGE — installs the package unless the command is there
  command -v "$1" >/dev/null || apt_install "$2"
}

load_env() {
  set -a
  # shellcheck disable=SC1091
  . "$STACK_DIR/env"
  set +a
}

# detach PIDFILE|- LOGFILE CMD... — CMD in its own session, with nothing but /dev/null and
# LOGFILE as its files: an inherited pipe (a CI runner's output, say) held open by a
# daemon would keep the caller waiting. PIDFILE gets its PID; with -, CMD runs in the
# foreground (a program that daemonizes itself and writes its own PID file).
detach() {
  local pidfile=$1 logfile=$2; shift 2
  (
    for fd in /proc/$BASHPID/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
    if [ "$pidfile" = - ]; then exec "$@" </dev/null >>"$logfile" 2>&1; fi
    setsid "$@" </dev/null >>"$logfile" 2>&1 &
    echo $! >"$pidfile"
  ) 2>/dev/null
}

# start_service NAME LOGFILE CMD... — CMD detached; records $STACK_DIR/run/NAME.pid
start_service() {
  local name=$1 log=$2; shift 2
  mkdir -p "$STACK_DIR/run" "$(dirname "$log")"
  detach "$STACK_DIR/run/$name.pid" "$log" "$@"
}

# service_alive NAME: its PID file names a live process that is still a rivulet binary
# (not a PID the kernel has since given to another program).
service_alive() {
  local pidfile=$STACK_DIR/run/$1.pid pid cmdline
  [ -f "$pidfile" ] || return 1
  pid=$(<"$pidfile")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *rivulet-* ]]
}

stop_service() {
  local pidfile=$STACK_DIR/run/$1.pid pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if service_alive "$1"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

# addr_in_use HOST:PORT — something accepts connections there.
addr_in_use() {
  local host=${1%:*} port=${1##*:}
  (: <"/dev/tcp/$host/$port") 2>/dev/null
}

# require_free_addr SERVICE HOST:PORT VARIABLE — fails, saying which service cannot bind
# and which variable moves it, when another program already listens on the address.
require_free_addr() {
  local name=$1 addr=$2 var=$3 listing holder
  addr_in_use "$addr" || return 0
  # ss names the holder when it can see it (root, or the same user).
  listing=$(ss -Hltnp "sport = :${addr##*:}" 2>/dev/null) || listing=""
  holder=$(sed -n 's/.*users:(("\([^"]*\)",pid=\([0-9]*\).*/ by \1 (pid \2)/p' <<<"$listing")
  echo "$name cannot listen on $addr: the address is already in use${holder%%$'\n'*}." >&2
  echo "Stop that program, or move $name with $var, for example: $var=${addr%:*}:$(( ${addr##*:} + 10 )) ${RIVULET_CALLER:-scripts/$(basename "$0")}" >&2
  return 1
}

# wait_for [-i INTERVAL] SECONDS CMD... — CMD every INTERVAL seconds (0.3) until it
# succeeds; fails once SECONDS have passed.
wait_for() {
  local every=0.3
  if [ "$1" = -i ]; then every=$2; shift 2; fi
  local end=$((SECONDS + $1)); shift
  until "$@"; do
    [ $SECONDS -lt $end ] || return 1
    sleep "$every"
  done
}
wait_http() { wait_for "$2" curl -sf -o /dev/null "$1"; } # wait_http URL SECONDS

# --- tests: the one small framework of the test scripts ---------------------------------
# check DESCRIPTION CMD... runs CMD (a command or a function, in this shell) with its
# output kept aside, and prints "ok   - DESCRIPTION", or "FAIL - DESCRIPTION" and the last
# 20 lines of that output. ok/fail record a result decided otherwise. summary NAME prints
# "NAME: N passed, N failed" (the line CI reads) and fails when anything failed.
passed=0 failed=0 check_out=
ok() { passed=$((passed + 1)); echo "ok   - $1"; }
fail() { failed=$((failed + 1)); echo "FAIL - $1"; [ -z "${2:-}" ] || sed 's/^/       /' <<<"$2"; }
check() { # check DESCRIPTION CMD...
  local what=$1; shift
  [ -n "$check_out" ] || check_out=$(mktemp)
  if "$@" >"$check_out" 2>&1; then ok "$what"; else fail "$what" "$(tail -n 20 "$check_out")"; fi
}
summary() { # summary NAME
  rm -f "$check_out"; check_out=
  echo "$1: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
# step TITLE: a "=== TITLE (N s)" line, N the seconds since this file was sourced; a
# script sets step_prefix to name itself in each ("cluster: ", "sdk: ").
step_t0=$SECONDS step_prefix=
step() { printf '\n=== %s%s (%ss)\n' "$step_prefix" "$*" $((SECONDS - step_t0)); }
# timed_up MAX-SECONDS [--cluster|--single]: scripts/stack up, within MAX-SECONDS.
timed_up() {
  local t0=$SECONDS
  "$ROOT/scripts/stack" up ${2:+"$2"} || return 1
  echo "up took $((SECONDS - t0)) s"
  [ $((SECONDS - t0)) -le "$1" ]
}

# --- Kafka's own command-line tools, from the stack's jars ------------------------------
# (scripts/stack writes the tools' quiet log4j2 config when it starts a broker.)
kafka_tool() { # kafka_tool MAIN-CLASS ARGS...
  java -Xmx256m -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$STACK_DIR/kafka/log4j2-tools.properties" \
    -cp "$STACK_DIR/dist/kafka-$KAFKA_VERSION/*" "$@"
}
kafka_topics() { kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA_BROKERS" "$@"; }

# --- JSON: python3's json module, everywhere (python3 is on every machine; no sed on JSON)
# json_get KEY... — from the JSON document on stdin, the value at KEY, then at the next KEY
# inside it (a number indexes an array): a string as it is, anything else as JSON. Fails,
# naming the key, when one is missing. The whole input is read (no SIGPIPE for a writer).
json_get() {
  python3 -c '
import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1:]:
    try:
        v = v[int(k)] if isinstance(v, list) else v[k]
    except (KeyError, IndexError, ValueError, TypeError):
        sys.exit(f"json_get: no {k!r} in the JSON")
print(v if isinstance(v, str) else json.dumps(v))' "$@"
}
