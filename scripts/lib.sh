# shellcheck shell=bash
# The toolbox every script in scripts/ sources (scripts/README.md lists the helpers and
# the scripts): the repository and stack folders, the pinned versions, messages, Debian
# packages, the stack's environment, services run in the background with a PID file,
# addresses, waiting, the test framework, Kafka's tools, JSON, and Redis and ClickHouse
# clients that keep passwords off command lines. One definition of each helper: a script
# that needs one sources this file instead of writing its own.

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

load_env() { # load_env [FILE] — exports the stack's env, or another file of the stack folder (demo.env)
  set -a
  # shellcheck disable=SC1090
  . "$STACK_DIR/${1:-env}"
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
    # The PID file is written once the child runs the command (its command line names
    # it), not in the moment after the fork when it is still this shell: a check in that
    # moment (service_alive reads the command line) would take a starting service for
    # one that had exited. At most 5 s; a child that exits at once is written as it is.
    local pid=$! cmdline
    for _ in $(seq 1 500); do
      cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || break
      [[ $cmdline == *"$1"* ]] && break
      sleep 0.01
    done
    echo "$pid" >"$pidfile"
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
# step TITLE: a "=== TITLE (N s, G GB free)" line, N the seconds since this file was
# sourced and G the free disk under the repository (a full disk fails a step far from its
# cause: an export, a broker, a link); a script sets step_prefix to name itself in each
# ("cluster: ", "sdk: ").
step_t0=$SECONDS step_prefix=
free_gb() { df -Pk "$ROOT" | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }'; }
step() { printf '\n=== %s%s (%ss, %s GB free)\n' "$step_prefix" "$*" $((SECONDS - step_t0)) "$(free_gb)"; }
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

# --- Redis and ClickHouse as clients: a password never on a command line ------------------
# (ps shows every process's arguments to every user; the environment and pipes it does not.)
# redis_cli ARGS... — redis-cli against REDIS_URL (redis://[:PASSWORD@]HOST:PORT/), the
# password passed in REDISCLI_AUTH.
redis_cli() {
  local rest=${REDIS_URL#redis://} pw=''
  rest=${rest%%/*}
  if [[ $rest == *@* ]]; then pw=${rest%@*} rest=${rest##*@}; pw=${pw#*:}; fi
  if [ -n "$pw" ]; then REDISCLI_AUTH=$pw redis-cli -h "${rest%:*}" -p "${rest##*:}" "$@"
  else env -u REDISCLI_AUTH redis-cli -h "${rest%:*}" -p "${rest##*:}" "$@"; fi
}
# ch_sql URL SQL [CURL-ARGS...] — SQL over ClickHouse's HTTP interface as CLICKHOUSE_USER
# with CLICKHOUSE_PASSWORD, sent as X-ClickHouse-User/X-ClickHouse-Key headers from a curl
# config read through a pipe. The answer on stdout; an error answer is printed too, and
# fails. 30 s at most unless CURL-ARGS say otherwise.
ch_sql() {
  local url=$1 sql=$2; shift 2
  curl -sS --fail-with-body --max-time 30 \
    -K <(printf 'header = "X-ClickHouse-User: %s"\nheader = "X-ClickHouse-Key: %s"\n' \
      "${CLICKHOUSE_USER:-default}" "${CLICKHOUSE_PASSWORD:-}") \
    "$@" --data-binary "$sql" "$url"
}

# --- the stack's passwords, checked (test-stack, test-stack-cluster) -----------------------
# password_checks: with the stack's env loaded (load_env), Redis and ClickHouse refuse
# clients without the passwords, and Rivulet's own clients get through with them.
password_checks() {
  check "Redis refuses a client without the password (NOAUTH)" redis_refuses_anonymous
  check "Redis answers with the password of .stack/env (REDISCLI_AUTH)" redis_answers
  check "ClickHouse refuses rivulet without its password, or with a wrong one (native and HTTP)" ch_refuses_rivulet
  check "clickhouse-client as rivulet with the password answers" ch_client_answers
  check "rivulet-admin migrate and sites create work with .stack/env" admin_works
  check "ClickHouse's default user reads nothing of Rivulet's and writes nothing" ch_default_is_a_probe
  check "no password in the stack's logs, nor on any process's command line" passwords_unseen
}
stack_ch_tcp_port() { # the first ClickHouse node's native port, from the stack's topology file
  local key=RIVULET_CLICKHOUSE_TCP_PORT
  [ "$RIVULET_TOPOLOGY" = single ] || key=RIVULET_CLUSTER_CLICKHOUSE_TCP_PORTS
  sed -n "s/^$key=\([0-9]*\).*/\1/p" "$STACK_DIR/topology"
}
redis_refuses_anonymous() {
  local out; out=$(REDIS_URL=${REDIS_URL/:\/\/:*@/://} redis_cli ping 2>&1)
  echo "without the password: $out"
  [[ $out == NOAUTH* ]]
}
redis_answers() { [ "$(redis_cli ping)" = PONG ]; }
ch_refuses_rivulet() {
  local out port; port=$(stack_ch_tcp_port)
  if out=$(clickhouse-client --port "$port" --user rivulet -q 'SELECT 1' 2>&1); then echo "answered: $out"; return 1; fi
  echo "clickhouse-client --user rivulet: $out"
  grep -q 'Password required for user rivulet' <<<"$out" || return 1
  if out=$(CLICKHOUSE_PASSWORD='' ch_sql "$CLICKHOUSE_URL" 'SELECT 1' 2>/dev/null); then echo "answered: $out"; return 1; fi
  echo "HTTP, no password: $out"
  grep -q 'Password required for user rivulet' <<<"$out" || return 1
  if out=$(CLICKHOUSE_PASSWORD=wrong ch_sql "$CLICKHOUSE_URL" 'SELECT 1' 2>/dev/null); then echo "answered: $out"; return 1; fi
  echo "HTTP, a wrong password: $out"
  grep -q 'Wrong password for user rivulet' <<<"$out"
}
# The password in a client config read through a pipe, not on the command line.
ch_client_answers() {
  [ "$(clickhouse-client --port "$(stack_ch_tcp_port)" -q 'SELECT 1' --config-file \
    <(printf '<config><user>%s</user><password>%s</password></config>\n' "$CLICKHOUSE_USER" "$CLICKHOUSE_PASSWORD"))" = 1 ]
}
admin_works() {
  (cd "$ROOT" && cargo build -q --locked -p rivulet-admin) || return 1
  "$ROOT/target/debug/rivulet-admin" migrate || return 1
  "$ROOT/target/debug/rivulet-admin" sites create --domain "password-check-$$.example" | json_get site_id
}
ch_default_is_a_probe() {
  local out
  if out=$(CLICKHOUSE_USER=default CLICKHOUSE_PASSWORD='' ch_sql "$CLICKHOUSE_URL" "SELECT count() FROM $CLICKHOUSE_DB.sites" 2>/dev/null); then
    echo "default read $CLICKHOUSE_DB.sites: $out"; return 1
  fi
  echo "default, SELECT from $CLICKHOUSE_DB: $out"
  grep -q "Access denied to database $CLICKHOUSE_DB" <<<"$out" || return 1
  if out=$(CLICKHOUSE_USER=default CLICKHOUSE_PASSWORD='' ch_sql "$CLICKHOUSE_URL" "CREATE DATABASE default_probe_check" 2>/dev/null); then
    echo "default created a database"; return 1
  fi
  echo "default, CREATE DATABASE: $out"
  grep -q 'readonly mode' <<<"$out" || return 1
  out=$(CLICKHOUSE_USER=default CLICKHOUSE_PASSWORD='' ch_sql "$CLICKHOUSE_URL" 'SELECT version()') || return 1
  echo "default, SELECT version(): $out"
}
passwords_unseen() {
  local found
  if found=$(grep -rlIF -f <(cat "$STACK_DIR"/secrets/*) "$STACK_DIR/logs"); then echo "a password is in: $found"; return 1; fi
  # (Only the processes' ids and names are shown, never the command line that matched.)
  found=$(ps -eo pid=,args= | grep -F -f <(cat "$STACK_DIR"/secrets/*) | awk '{print $1}')
  if [ -n "$found" ]; then
    echo "a password is on the command line of: $(ps -o pid=,comm= -p "$(paste -sd, <<<"$found")" | tr '\n' ' ')"; return 1
  fi
  echo "$(find "$STACK_DIR/logs" -type f | wc -l) log files and $(ps -e --no-headers | wc -l) processes looked at"
}
# redacted FILE — an env file with the values of *PASSWORD= and the password of a
# redis:// URL replaced by <password>: to show it in a test's output.
redacted() { sed -E 's/(PASSWORD=|redis:\/\/[^:@\/]*:)[^@[:space:]]+/\1<password>/' "$1"; }

# --- measured results: results/<name>.json, shown by BENCHMARKS.md and RELIABILITY.md -----
# write_results NAME COMMAND FIGURES-JSON-FILE — wraps the figures with when, from which
# commit and on what host they were measured, into results/NAME.json; scripts/results
# then renders them into the docs. The commit gets "+changes" when the checkout differs
# from it, but for results/ and Markdown: the docs a previous run regenerated (or any
# prose) change nothing that is measured.
write_results() {
  local name=$1 command=$2 figures=$3 commit
  commit=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD -- . ':!results' ':!*.md' 2>/dev/null || commit="$commit+changes"
  mkdir -p "$ROOT/results"
  python3 - "$name" "$command" "$figures" "$commit" "${RESULTS_OF:-$commit}" >"$ROOT/results/$name.json" <<'PY'
import json, os, sys, datetime, platform
name, command, figures, commit, of = sys.argv[1:6]
mem = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal:"))
print(json.dumps({
    "name": name,
    "command": command,
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "commit": commit,
    "measured_build": of,
    "host": {"cpus": os.cpu_count(), "memory_gib": round(mem / 1048576, 1),
             "kernel": platform.release(), "load_average": [round(x, 2) for x in os.getloadavg()]},
    "figures": json.load(open(figures)),
}, indent=2, ensure_ascii=False))
PY
  log "wrote results/$name.json"
}
