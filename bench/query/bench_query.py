#!/usr/bin/env python3
"""The Stats API's benchmark: `scripts/bench query` (BENCHMARKS.md, "Stats API").

    bench_query.py generate   a site's year of events into BENCH_QUERY_DB (generate.sql),
                              unless the database already holds this generator's events
    bench_query.py measure    the daily rollup computed (`rivulet-admin rollup`, timed), then
                              the suite: each question asked of the Stats API (SUITE, through
                              `rivulet-admin serve` on this database) and as the baseline's
                              straight scan of `events` (suite.sql), each cold once and warm
                              BENCH_QUERY_RUNS times, the two alternating; then the
                              dashboard's first paint for Last 12 months (first_paint.mjs,
                              Chromium), as the rollup holds the year and again with its
                              last day read from `events` as a live site's today is;
                              JSON on stdout
    bench_query.py all        generate, then measure

The database must exist with the product's schema (`CLICKHOUSE_DB=… rivulet-admin
migrate`, which scripts/bench does first). Environment: CLICKHOUSE_URL, CLICKHOUSE_USER,
CLICKHOUSE_PASSWORD, REDIS_URL (the stack's .stack/env); ADMIN_BIN (the rivulet-admin to
serve with); BENCH_QUERY_EVENTS (10,000,000); BENCH_QUERY_DB (rivulet_bench_query_10m: the
events in millions); BENCH_QUERY_SEED (1); BENCH_QUERY_RUNS (10 warm runs of each query
on each path); BENCH_QUERY_BASELINE_RUNS (as many, of the baseline: its scans take a
minute each at 100M events, and it is there for the ratio, not for a target).

Timing: wall milliseconds at the client. For the API that includes HTTP, the key check and
every statement the engine sends (a comparison is a second one). "Cold" runs after SYSTEM
DROP MARK CACHE and DROP UNCOMPRESSED CACHE, and the kernel's page cache dropped when the
process may (root).
"""

import hashlib
import concurrent.futures
import json
import math
import os
import pathlib
import re
import secrets
import socket
import string
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
EVENTS = int(os.environ.get("BENCH_QUERY_EVENTS", "10000000"))
DB = os.environ.get("BENCH_QUERY_DB", f"rivulet_bench_query_{EVENTS // 1_000_000}m")
SEED = int(os.environ.get("BENCH_QUERY_SEED", "1"))
RUNS = int(os.environ.get("BENCH_QUERY_RUNS", "10"))
BASELINE_RUNS = min(RUNS, int(os.environ.get("BENCH_QUERY_BASELINE_RUNS", str(RUNS))))
# The benchmark's site, found or made in the database by site() (ids are not per database).
SITE = None
DOMAIN = "bench-query.example"
ADMIN_ADDR = "127.0.0.1:27904"
# The year: 2025-11-27 00:00 UTC to 2026-11-27 00:00 UTC.
T0 = 1764201600
SPAN = 365 * 86400
TZ = "Europe/Berlin"
# The ranges, as local dates, end excluded (the site's last full day is 2026-11-26).
RANGES = {
    "Y_FROM": "2025-11-27", "Y_TO": "2026-11-27",
    "PY_FROM": "2024-11-27", "PY_TO": "2025-11-27",
    "M_FROM": "2026-10-28", "M_TO": "2026-11-27",
    "PM_FROM": "2026-09-28", "PM_TO": "2026-10-28",
    "W_FROM": "2026-11-20", "W_TO": "2026-11-27",
}
# The same ranges as the API takes them: two ISO dates, both included.
YEAR = ["2025-11-27", "2026-11-26"]
MONTH = ["2026-10-28", "2026-11-26"]
WEEK = ["2026-11-20", "2026-11-26"]
VISIT = ["visitors", "visits", "bounce_rate", "visit_duration"]
TWO_FILTERS = [["is", "visit:country", ["DE"]], ["is", "visit:browser", ["Chrome"]]]
PREVIOUS = {"comparisons": {"mode": "previous_period"}}


def breakdown(dimension, metrics, date_range=MONTH, filters=None):
    q = {"metrics": metrics, "date_range": date_range, "dimensions": [dimension],
         "pagination": {"limit": 100}}
    if filters:
        q["filters"] = filters
    return q


# The questions a dashboard asks, as Stats API requests; each name is a query of
# suite.sql, the baseline asking the same question of `events` directly.
SUITE = {
    "overview_12m": {"metrics": ["visitors", "visits", "pageviews", "views_per_visit", "bounce_rate", "visit_duration"],
                     "date_range": YEAR, "include": PREVIOUS},
    "overview_30d": {"metrics": ["visitors", "visits", "pageviews", "views_per_visit", "bounce_rate", "visit_duration"],
                     "date_range": MONTH, "include": PREVIOUS},
    "timeseries_12m": {"metrics": ["visitors", "pageviews", "visits", "bounce_rate", "visit_duration"],
                       "date_range": YEAR, "dimensions": ["time:day"]},
    "hourly_7d": {"metrics": ["visitors", "pageviews", "visits"], "date_range": WEEK, "dimensions": ["time:hour"]},
    "pages_30d": breakdown("event:page", ["visitors", "pageviews"]),
    "pages_30d_filtered": breakdown("event:page", ["visitors", "pageviews"], filters=TWO_FILTERS),
    "entry_pages_30d": breakdown("visit:entry_page", VISIT),
    "entry_pages_30d_filtered": breakdown("visit:entry_page", VISIT, filters=TWO_FILTERS),
    "sources_30d": breakdown("visit:source", VISIT),
    "sources_30d_filtered": breakdown("visit:source", VISIT, filters=TWO_FILTERS),
    "countries_30d": breakdown("visit:country", ["visitors", "visits"]),
    "countries_30d_filtered": breakdown("visit:country", ["visitors", "visits"], filters=TWO_FILTERS),
    "devices_30d": breakdown("visit:device", ["visitors", "visits"]),
    "devices_30d_filtered": breakdown("visit:device", ["visitors", "visits"], filters=TWO_FILTERS),
    "props_30d": breakdown("event:props:plan", ["visitors", "events"],
                           filters=[["is", "event:name", ["signup"]]]),
}


def log(msg):
    print(f"[bench query] {msg}", file=sys.stderr, flush=True)


class ClickHouse:
    """SQL over the HTTP interface; the password travels in a header, never in a URL."""

    def __init__(self):
        self.url = os.environ["CLICKHOUSE_URL"].rstrip("/") + "/"
        self.headers = {
            "X-ClickHouse-User": os.environ.get("CLICKHOUSE_USER", "default"),
            "X-ClickHouse-Key": os.environ.get("CLICKHOUSE_PASSWORD", ""),
        }

    def query(self, sql, settings=None, timeout=7200):
        params = urllib.parse.urlencode(settings or {})
        req = urllib.request.Request(self.url + ("?" + params if params else ""), data=sql.encode(),
                                     headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"ClickHouse: {e.read().decode()[:2000]}\n--- in:\n{sql[:3000]}") from None

    def value(self, sql):
        return self.query(sql).strip()


def template(path):
    return string.Template(path.read_text())


def baseline_queries():
    """The `-- query: NAME` blocks of suite.sql, filled in."""
    text = template(HERE / "suite.sql").substitute(DB=DB, SITE=SITE, TZ=TZ, **RANGES)
    blocks = re.split(r"^-- query: (\S+)\n", text, flags=re.M)
    return {name: body.strip().rstrip(";").strip() for name, body in zip(blocks[1::2], blocks[2::2])}


def generator_params():
    pages = round(2000 * (EVENTS / 1e7) ** 0.4)
    returning = max(1000, EVENTS // 100)
    return {"DB": DB, "SITE": SITE, "SEED": SEED, "T0": T0, "SPAN": SPAN, "PAGES": pages,
            "RETURNING": returning}


def generate(ch):
    """Writes the site's year into events, in time-ordered slices, two at a time."""
    gen = template(HERE / "generate.sql")
    params = generator_params()
    # What the rows depend on: the statement (its comments aside), the parameters, the size.
    statement = "\n".join(l for l in gen.template.splitlines() if not l.lstrip().startswith("--"))
    fingerprint = hashlib.sha256((statement + json.dumps(params, sort_keys=True) + str(EVENTS)).encode()).hexdigest()[:16]
    ch.query(f"CREATE TABLE IF NOT EXISTS {DB}.bench_query_meta (name String, value String) ENGINE = TinyLog")
    have = ch.value(f"SELECT any(value) FROM {DB}.bench_query_meta WHERE name = 'generator'")
    count = int(ch.value(f"SELECT count() FROM {DB}.events"))
    if have == fingerprint and count > 0:
        log(f"{DB}.events already holds this generator's {count:,} rows ({fingerprint})")
        return
    ch.query(f"TRUNCATE TABLE {DB}.events")
    ch.query(f"TRUNCATE TABLE {DB}.bench_query_meta")
    # How many events a drawn session makes (thinning, lengths, duplicates): a 1 % sample
    # of a trial draw, as the generator would write it.
    trial = 10_000_000
    sample = gen.substitute(params, SESSIONS=trial, FIRST=0, COUNT=trial, SAMPLE="s % 100 = 0")
    inner = sample[sample.index("    FROM\n    (\n") + len("    FROM\n"):sample.index("    ARRAY JOIN idx AS i")]
    # (`max(s)` keeps `s` in the subquery: 18.16 prunes a column that only a lambda uses.)
    per_draw = int(ch.value(f"SELECT sum(length(idx)), max(s) FROM {inner}").split()[0]) / (trial / 100)
    sessions = math.ceil(EVENTS / per_draw)
    slices = max(2, round(EVENTS / 1_000_000))
    step = math.ceil(sessions / slices)
    log(f"generating ~{EVENTS:,} events: {sessions:,} sessions drawn ({per_draw:.3f} events each), {slices} slices")
    t0 = time.time()

    def run(k):
        first = k * step
        sql = gen.substitute(params, SESSIONS=sessions, FIRST=first, COUNT=min(step, sessions - first), SAMPLE="1")
        ch.query(sql, {"max_threads": 1})
        return k

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for done, _ in enumerate(pool.map(run, range(slices)), 1):
            if done % 10 == 0 or done == slices:
                log(f"  {done}/{slices} slices, {time.time() - t0:.0f} s")
    seconds = time.time() - t0
    count = int(ch.value(f"SELECT count() FROM {DB}.events"))
    ch.query(f"INSERT INTO {DB}.bench_query_meta VALUES ('generator', '{fingerprint}'), "
             f"('seconds', '{seconds:.1f}'), ('rows', '{count}')")
    log(f"generated {count:,} rows in {seconds:.0f} s ({count / seconds:,.0f} rows/s)")


def admin(*args):
    """rivulet-admin on the benchmark's database; its JSON answer."""
    env = dict(os.environ, CLICKHOUSE_DB=DB)
    out = subprocess.run([os.environ["ADMIN_BIN"], *args], env=env, check=True, capture_output=True, text=True)
    return out.stdout


def site():
    """The benchmark's site in this database (made on the first run), in its time zone."""
    found = [x["site_id"] for x in json.loads(admin("sites", "list")) if DOMAIN in x.get("domains", [])]
    site_id = found[0] if found else \
        json.loads(admin("sites", "create", "--domain", DOMAIN, "--name", "Query benchmark"))["site_id"]
    admin("sites", "update", str(site_id), "--timezone", TZ)
    return site_id


def stats_key():
    """A fresh stats:read key for the site."""
    return json.loads(admin("keys", "create", "--site", str(SITE), "--scope", "stats:read"))["api_key"]


def serve():
    """`rivulet-admin serve` on the benchmark's database, without a rate limit and with a
    query time a baseline-sized answer fits in."""
    token = secrets.token_hex(32)
    env = dict(os.environ, CLICKHOUSE_DB=DB, ADMIN_ADDR=ADMIN_ADDR, ADMIN_TOKEN=token,
               STATS_RATE_LIMIT_PER_MINUTE="0", STATS_MAX_EXECUTION_SECS="600", LOG_LEVEL="warn")
    proc = subprocess.Popen([os.environ["ADMIN_BIN"], "serve"], env=env, stdout=subprocess.DEVNULL)
    host, port = ADMIN_ADDR.split(":")
    for _ in range(300):
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return proc, token
        except OSError:
            if proc.poll() is not None:
                sys.exit(f"rivulet-admin serve exited with {proc.returncode}")
            time.sleep(0.1)
    proc.kill()
    sys.exit(f"rivulet-admin serve did not listen on {ADMIN_ADDR} in 30 s")


def ask(key, body):
    """One Stats API query: wall milliseconds and the number of result rows."""
    req = urllib.request.Request(f"http://{ADMIN_ADDR}/api/v2/query", data=json.dumps(dict(body, site_id=SITE)).encode(),
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                                 method="POST")
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=900) as r:
            answer = json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"the Stats API answered {e.code}: {e.read().decode()[:2000]}\n--- to {body}") from None
    return (time.perf_counter() - t) * 1000, len(answer["results"])


def scan(ch, sql):
    t = time.perf_counter()
    out = ch.query(sql)
    return (time.perf_counter() - t) * 1000, len(out.splitlines())


def drop_caches(ch):
    """Cold: ClickHouse's mark and uncompressed caches, and the kernel's page cache when
    this process may drop it (root); returns whether the page cache was dropped."""
    ch.query("SYSTEM DROP MARK CACHE")
    ch.query("SYSTEM DROP UNCOMPRESSED CACHE")
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def pct(xs, p):
    """The nearest-rank percentile."""
    xs = sorted(xs)
    return xs[max(0, math.ceil(p / 100 * len(xs)) - 1)]


def target_ms(name):
    """The targets (ms, p95 warm): at 10M events every query 250; at 100M every query
    1,000 and the 12-month overview 250."""
    if EVENTS <= 10_000_000:
        return 250
    return 250 if name == "overview_12m" else 1000


# The first paint's target (ms) is set for the 10M-event site; a larger one is measured
# without one.
FIRST_PAINT_TARGET_MS = 1500 if EVENTS <= 10_000_000 else None


def dashboard_first_paint(ch, token):
    """The dashboard's Overview for Last 12 months in Chromium (first_paint.mjs): first
    contentful paint, cold (ClickHouse's caches dropped) and warm; the target is 1.5 s at 10M
    events."""
    drop_caches(ch)
    env = dict(os.environ, ADMIN_URL=f"http://{ADMIN_ADDR}", ADMIN_TOKEN=token, SITE_ID=str(SITE))
    out = subprocess.run(["node", str(HERE / "first_paint.mjs")], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        # A card that could not be filled (its query failed) fails the page's check.
        error = next((l for l in out.stderr.splitlines() if "card" in l or "Error" in l), out.stderr[-300:])
        log(f"dashboard, Last 12 months: FAILED: {error}")
        return {"target_ms": FIRST_PAINT_TARGET_MS, "meets_target": False, "error": error.strip()[:300]}
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["target_ms"] = FIRST_PAINT_TARGET_MS
    slowest = max(r["cold"]["first_paint_ms"], r["warm_first_paint_max_ms"])
    r["meets_target"] = None if FIRST_PAINT_TARGET_MS is None else slowest <= FIRST_PAINT_TARGET_MS
    log(f"dashboard, Last 12 months: first paint cold {r['cold']['first_paint_ms']:,.0f} ms, "
        f"warm p50 {r['warm_first_paint_p50_ms']:,.0f} ms: "
        f"{ {True: 'met', False: 'MISSED', None: 'no target at this size'}[r['meets_target']] }")
    return r


def live_day_first_paint(ch, token):
    """The first paint again as a live site's dashboard reads it early in its day: the
    last day with events stamped as just written (as today's hours are), so that the
    days its visits and UTC hours reach are stale, and every question reads those from
    `events` and the days before from the rollup. (The job computes a day once its visits
    are over, six hours after its end: until then yesterday is read from `events` with
    today.) Then the job computes them again."""
    last = ch.value(f"SELECT toString(toDate(max(timestamp), '{TZ}')) FROM {DB}.events "
                    f"WHERE site_id = {SITE}").strip()
    ch.query(f"INSERT INTO {DB}.stats_touched (site_id, hour, touched_at) "
             f"SELECT {SITE}, toStartOfHour(timestamp), now() FROM {DB}.events "
             f"WHERE site_id = {SITE} AND toDate(timestamp, '{TZ}') = toDate('{last}') "
             f"GROUP BY toStartOfHour(timestamp)")
    try:
        # A margin no stamp is past: the job computes nothing and counts the stale days.
        waiting = json.loads(admin("rollup", "--site", str(SITE), "--margin-secs", "100000000"))
        r = dashboard_first_paint(ch, token)
        r["stamped_day"] = last
        r["days_read_from_events"] = waiting["days_waiting"]
        log(f"dashboard, Last 12 months, {last} stamped as just written: "
            f"{waiting['days_waiting']} days read from events")
        return r
    finally:
        rollup()


def disk(ch, tables=("events",)):
    """The tables' bytes on disk (active parts) and their rows."""
    names = ", ".join(f"'{t}'" for t in tables)
    row = ch.value(f"SELECT sum(bytes), sum(rows) FROM system.parts WHERE database = '{DB}' "
                   f"AND table IN ({names}) AND active").split()
    return int(row[0]), int(row[1])


def rollup():
    """The days of the site's daily rollup that need computing (`rivulet-admin rollup`,
    as after an import: nothing else writes here; every day on a new database), timed."""
    t0 = time.time()
    run = json.loads(admin("rollup", "--site", str(SITE), "--margin-secs", "0"))
    # The days whose last insert was this very second wait for the next one.
    time.sleep(1.5)
    again = json.loads(admin("rollup", "--site", str(SITE), "--margin-secs", "0"))
    run["days_computed"] += again["days_computed"]
    run["visit_days_filled"] += again["visit_days_filled"]
    run["rows_written"] += again["rows_written"]
    run["seconds"] = round(time.time() - t0 - 1.5, 1)
    log(f"rollup: {run['days_computed']} days computed, {run['visit_days_filled']} days' visits filled in, "
        f"{run['rows_written']:,} rows, {run['seconds']} s")
    return run


def measure(ch):
    base = baseline_queries()
    missing = sorted(set(SUITE) ^ set(base))
    if missing:
        sys.exit(f"suite.sql and SUITE name different queries: {missing}")
    computed = rollup()
    key = stats_key()
    server, token = serve()
    out, page_cache = [], None
    try:
        for name, body in SUITE.items():
            r = {"query": name, "target_p95_ms": target_ms(name), "request": body}
            paths = {"baseline": lambda: scan(ch, base[name]), "api": lambda: ask(key, body)}
            # A path that fails (a 503 from the API, an error from ClickHouse) is recorded
            # with its error and not run again: a failure is a result too.
            for path, run in paths.items():
                page_cache = drop_caches(ch)
                try:
                    ms, rows = run()
                    r[path] = {"cold_ms": round(ms, 1), "rows": rows}
                except RuntimeError as e:
                    r[path] = {"error": str(e).splitlines()[0][:300]}
            runs = {p: [] for p in paths if "error" not in r[p]}
            for i in range(RUNS):
                for path in (("baseline", "api") if i % 2 == 0 else ("api", "baseline")):
                    if path in runs and (path == "api" or i < BASELINE_RUNS):
                        runs[path].append(paths[path]()[0])
            for path, xs in runs.items():
                r[path].update({"runs": len(xs), "p50_ms": round(pct(xs, 50), 1), "p95_ms": round(pct(xs, 95), 1)})
            if len(runs) == 2:
                r["api_over_baseline_p50"] = round(r["api"]["p50_ms"] / r["baseline"]["p50_ms"], 2)
            r["meets_target"] = "p95_ms" in r["api"] and r["api"]["p95_ms"] <= r["target_p95_ms"]
            shown = {p: (f"p50 {r[p]['p50_ms']:,.0f} ms p95 {r[p]['p95_ms']:,.0f} (cold {r[p]['cold_ms']:,.0f})"
                         if "p50_ms" in r[p] else f"FAILED: {r[p]['error']}") for p in paths}
            log(f"{name}: API {shown['api']}; baseline {shown['baseline']}; target {r['target_p95_ms']} ms: "
                f"{'met' if r['meets_target'] else 'MISSED'}; load {os.getloadavg()[0]:.1f}")
            out.append(r)
        first_paint = dashboard_first_paint(ch, token)
        first_paint["live_day"] = live_day_first_paint(ch, token)
    finally:
        server.terminate()
        server.wait()
    size, rows = disk(ch)
    rollup_size, rollup_rows = disk(ch, ("stats_total_days", "stats_breakdown_days", "stats_visit_days",
                                         "stats_touched"))
    visits_size, _ = disk(ch, ("stats_visit_days",))
    return {
        "events": rows,
        "database": DB,
        "disk_bytes_per_million_events": round(size / max(rows, 1) * 1e6),
        # What the read side adds: the rollup and its stamps.
        "rollup_disk_bytes_per_million_events": round(rollup_size / max(rows, 1) * 1e6),
        "rollup_rows": rollup_rows,
        # Of which the rollup's visits (for the questions filtered by visit attributes).
        "rollup_visits_disk_bytes_per_million_events": round(visits_size / max(rows, 1) * 1e6),
        "rollup": computed,
        "warm_runs": RUNS,
        "baseline_warm_runs": BASELINE_RUNS,
        "page_cache_dropped_for_cold_runs": page_cache,
        "queries": out,
        "queries_meeting_target": sum(r["meets_target"] for r in out),
        "dashboard": first_paint,
        "clickhouse_version": ch.value("SELECT version()"),
    }


def main():
    global SITE
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    ch = ClickHouse()
    SITE = site()
    if what in ("generate", "all"):
        generate(ch)
    if what in ("measure", "all"):
        json.dump(measure(ch), sys.stdout, indent=1)
        print()
    if what not in ("generate", "measure", "all"):
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
