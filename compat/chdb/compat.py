"""Rivulet's SQL and row formats on a current ClickHouse (chDB) and on 18.16: the
compatibility test. compat/README.md says what it proves and what it does not;
scripts/test-chdb installs chDB and runs it.

    python compat.py --bin target/debug/chdb_compat --admin-bin target/debug/rivulet-admin \
        --reference-url http://127.0.0.1:18123 --workdir .stack/chdb-compat

Steps (each prints its checks; any failure fails the run):
 1. `chdb_compat manifest`: every statement, from the Rust schema module itself.
 2. Every DDL statement, single node and cluster (the cluster's rewritten by
    rewrite.single_engine), portable and LowCardinality variant, on chDB, twice each
    (idempotent, but for ADD COLUMN, whose second run must answer the "already exists"
    migrate skips); a single node and a cluster end up with the same columns.
 3. The product's own code loads the same dataset into chDB (through chdb_http, the
    client's row validation on) as a single node, as a cluster and into tables with the
    portable types, and into the 18.16 server (validation off, as there in production),
    reading it back field by field; migrate chose each server's variant.
 4. The rows in chDB, read by chDB itself, against the dataset, field by field.
 5. Every statement of queries::ALL, with every set of binds, on 18.16 and on the three
    chDB databases: the same names and types of columns and the same rows, in the same order
    (sorted, for a statement without ORDER BY).
 6. The Stats API's statements (`manifest["stats"]`: rivulet_stats's plans of a fixed
    list of v2 requests, inlined), on 18.16 and on the three chDB databases, read as the
    product reads them (JSONEachRow, with their settings): the same rows, numbers equal
    as the response shows them; every statement must find rows in the dataset.
 7. `rivulet-admin migrate` and `rivulet-admin serve` (its JSON API: sites, keys, each
    site's Overview) on chDB, through the adapter, and on 18.16: the same answers.
"""

import argparse
import calendar
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

# Text output of DateTime values depends on the engine's time zone; 18.16 runs in UTC.
os.environ["TZ"] = "UTC"

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chdb  # noqa: E402
from chdb import session as chdb_session  # noqa: E402

from chdb_http import ChdbServer  # noqa: E402
from rewrite import single_engine  # noqa: E402

# Statements whose answer differs between engines by design, and what is compared instead.
EXPECTED_DIFFERENT = {
    "server_version": "the version itself: only the column's name and type are compared",
}


class Report:
    def __init__(self):
        self.passed = 0
        self.failed = []

    def ok(self, what):
        self.passed += 1
        print(f"  ok   {what}")

    def fail(self, what, detail=""):
        self.failed.append(what)
        print(f"  FAIL {what}" + (f"\n       {detail}" if detail else ""))

    def check(self, cond, what, detail=""):
        (self.ok if cond else self.fail)(what, *([detail] if not cond else []))


class Reference:
    """The 18.16 server, over its HTTP interface, as the stack's ClickHouse user
    (CLICKHOUSE_USER and CLICKHOUSE_PASSWORD of .stack/env, sent as headers)."""

    def __init__(self, url):
        self.url = url.rstrip("/")
        self.headers = {"X-ClickHouse-User": os.environ.get("CLICKHOUSE_USER") or "default",
                        "X-ClickHouse-Key": os.environ.get("CLICKHOUSE_PASSWORD", "")}

    def query(self, sql, database=None, fmt=None):
        return self.query_with(sql, database, fmt, {})

    def query_with(self, sql, database=None, fmt=None, settings=None):
        """`query`, with ClickHouse settings as URL parameters (as the client sends them)."""
        params = dict(settings or {})
        if database:
            params["database"] = database
        if fmt:
            params["default_format"] = fmt
        req = urllib.request.Request(
            f"{self.url}/?{urllib.parse.urlencode(params)}", data=sql.encode(), method="POST",
            headers=self.headers,
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            raise RuntimeError(e.read().decode(errors="replace").strip()) from None


# How the engines print a value differently in text formats, though it is the same value
# (the product reads RowBinary, where it is the same bytes): counted for the report.
TEXT_ONLY_DIFFERENCES = {}


def normalize(result):
    """A JSONCompact answer as (columns, rows), values compared as the product reads them:
    64-bit integers (quoted or not, by engine) as numbers; DateTime (and a non-null
    Nullable(DateTime)) as epoch seconds (18.16 prints the zero DateTime as
    0000-00-00 00:00:00, current servers as 1970-01-01 00:00:00); a LowCardinality(T)
    column as T (the client reads both alike, and RowBinary carries the same bytes)."""
    doc = json.loads(result)
    meta = []
    for c in doc["meta"]:
        typ = c["type"]
        if typ.startswith("LowCardinality(") and typ.endswith(")"):
            TEXT_ONLY_DIFFERENCES["LowCardinality result column"] = TEXT_ONLY_DIFFERENCES.get("LowCardinality result column", 0) + 1
            typ = typ[len("LowCardinality("):-1]
        meta.append((c["name"], typ))
    rows = []
    for row in doc["data"]:
        out = []
        for (name, typ), v in zip(meta, row):
            if typ in ("UInt64", "Int64") and isinstance(v, str):
                v = int(v)
            elif typ in ("DateTime", "Nullable(DateTime)") and v is not None:
                if v in ZERO_DATETIME:
                    TEXT_ONLY_DIFFERENCES[v] = TEXT_ONLY_DIFFERENCES.get(v, 0) + 1
                    v = 0
                else:
                    v = calendar.timegm(time.strptime(v, "%Y-%m-%d %H:%M:%S"))
            out.append(v)
        rows.append(out)
    return meta, rows


ZERO_DATETIME = ("0000-00-00 00:00:00", "1970-01-01 00:00:00")


# Statements whose every answer on this dataset is a row of zeros, and why that is all
# they can find here: compared all the same, and a row suffices.
ZEROS_BY_DESIGN = {
    "mutations_unfinished": "counts mutations not finished; the test starts none (one "
                            "finishes when its server gets to it, so no two servers would agree)",
}


def _found(name, answer):
    """Whether an answer found something: a row, and, but for ZEROS_BY_DESIGN, a value in
    it other than 0, '' or null (an aggregate of no rows answers a row of those)."""
    _, rows = answer
    if name in ZEROS_BY_DESIGN:
        return bool(rows)
    return any(v not in (0, "", None, []) for row in rows for v in row)


def _sorted(answer):
    meta, rows = answer
    return meta, sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


def differences(a, b, limit=5):
    """What differs between two normalized answers (empty: the same)."""
    (ma, ra), (mb, rb) = a, b
    out = []
    if ma != mb:
        out.append(f"columns {ma} != {mb}")
    if len(ra) != len(rb):
        out.append(f"{len(ra)} rows != {len(rb)} rows")
    for i, (x, y) in enumerate(zip(ra, rb)):
        if x != y:
            out.append(f"row {i}: {x} != {y}")
            if len(out) >= limit:
                break
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the chdb_compat binary")
    ap.add_argument("--admin-bin", required=True, help="the rivulet-admin binary")
    ap.add_argument("--reference-url", required=True, help="the 18.16 server's HTTP URL")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    rep = Report()
    t0 = time.monotonic()

    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    now = int(time.time())
    manifest = json.loads(subprocess.run([args.bin, "manifest", str(now)], check=True, capture_output=True).stdout)
    sess = chdb_session.Session(os.path.join(args.workdir, "chdb"))
    version = sess.query("SELECT version()", "TSV").bytes().decode().strip()
    ref = Reference(args.reference_url)
    ref_version = ref.query("SELECT version()").decode().strip()
    print(f"current engine: chDB {chdb.__version__}, ClickHouse {version}; reference: ClickHouse {ref_version}")
    rep.check(int(version.split(".")[0]) >= 22, f"chDB runs a current ClickHouse ({version})")
    tz = sess.query("SELECT timezone()", "TSV").bytes().decode().strip()
    rep.check(tz in ("UTC", "Etc/UTC"), f"chDB's time zone is UTC ({tz})")

    print(f"\n[2] DDL, both variants, single node and cluster, on ClickHouse {version}")
    for variant, topos in manifest["ddl"].items():
        ddl_dbs = {topo: f"compat_ddl_{variant}_{topo}" for topo in topos}
        for topo, db in ddl_dbs.items():
            for n, stmt in enumerate(topos[topo]):
                sql = stmt.replace("{db}", db)
                if topo == "cluster":
                    sql = single_engine(sql)
                for attempt in ("", " (again)"):
                    what = f"{variant} {topo} DDL #{n}{attempt}: {_first_line(stmt)}"
                    # `ADD COLUMN IF NOT EXISTS` is a syntax error on 18.16, so the
                    # product's ALTERs are plain `ADD COLUMN`, and a second run (a
                    # concurrent or repeated migrate) answers that the column exists,
                    # which migrate skips (`clickhouse_versions::is_duplicate_column`:
                    # code 15, "already exists"). That answer is what is checked again.
                    duplicate_column = attempt and " ADD COLUMN " in stmt
                    try:
                        sess.query(sql)
                        rep.check(not duplicate_column, what, "a second ADD COLUMN succeeded: want 'already exists'")
                    except Exception as e:
                        if duplicate_column:
                            msg = str(e)
                            rep.check("Code: 15." in msg and "already exists" in msg,
                                      what + " → the column exists (DUPLICATE_COLUMN), which migrate skips",
                                      f"{e}\n       SQL: {sql}")
                        else:
                            rep.fail(what, f"{e}\n       SQL: {sql}")
        for table in manifest["insert_tables"]:
            d = [_describe(sess, f"{db}.{table}") for db in ddl_dbs.values()]
            rep.check(d[0] == d[1] and d[0], f"{variant} {table}: the same columns on a single node and a cluster", f"{d}")
        ev = _describe(sess, f"{ddl_dbs['single']}.events")
        want = [(c["name"], c["type"]) for c in manifest["events_columns"][variant]]
        rep.check(ev == want, f"{variant} events has exactly schema::events::columns({variant})", f"{ev} != {want}")

    print("\n[3] the product's code writes the dataset and reads it back")
    # An install whose tables were created with the portable types (by 18.16, or by a
    # Rivulet from before the variants) and whose server is now current.
    for stmt in manifest["ddl"]["portable"]["single"]:
        sess.query(stmt.replace("{db}", "rivulet_compat_portable"))
    srv = ChdbServer(sess).start()
    try:
        loads = [(srv.url, db, cluster) for db, (cluster, _) in CHDB_DBS(manifest).items()]
        ref.query("DROP DATABASE IF EXISTS rivulet_compat")
        loads.append((ref.url, "rivulet_compat", None))
        for url, db, cluster in loads:
            cmd = [args.bin, "load", url, db, str(now)] + ([cluster] if cluster else [])
            p = subprocess.run(cmd, capture_output=True, text=True)
            sys.stdout.write(p.stdout)
            what = f"load {db}{' as cluster ' + cluster if cluster else ''} into {url}"
            rep.check(p.returncode == 0, what, p.stderr.strip())
        # `migrate` chose each new table's types from the server's version.
        for db, (_, variant) in CHDB_DBS(manifest).items():
            want = [(c["name"], c["type"]) for c in manifest["events_columns"][variant]]
            got = _describe(sess, f"{db}.events")
            rep.check(got == want, f"{db}.events on {version}: the {variant} types", f"{got}")
        got = [tuple(line.split("\t")[:2]) for line in
               ref.query("DESCRIBE TABLE rivulet_compat.events").decode().splitlines()]
        want = [(c["name"], c["type"]) for c in manifest["events_columns"]["portable"]]
        rep.check(got == want, f"rivulet_compat.events on {ref_version}: the portable types", f"{got}")
    except BaseException:
        srv.stop()
        raise
    # What went through the adapter shows which paths of the client were taken.
    served = list(srv.log)
    # rivulet_compat_portable's tables were made above, unrecorded, so its migrate runs
    # every migration again: each `ADD COLUMN` is answered that the column exists, which
    # migrate skips (`clickhouse_versions::is_duplicate_column`; the load passed). Those
    # answers, and only those, are expected: one per ADD COLUMN of the DDL.
    skipped = [(q, e) for q, _, e in served if e and _column_exists(q, e, "rivulet_compat_portable")]
    errors = [(q, e) for q, _, e in served if e and (q, e) not in skipped]
    rep.check(not errors, f"the chDB adapter ran {len(served)} statements without an error",
              "; ".join(f"{e} ({_first_line(q)})" for q, e in errors[:3]))
    adds = sum(" ADD COLUMN " in stmt for stmt in manifest["ddl"]["portable"]["single"])
    rep.check(len(skipped) == adds,
              f"rivulet_compat_portable: migrate's {len(skipped)} ADD COLUMN of existing columns answered "
              f"'already exists' (code 15), which it skips ({adds} in the DDL)",
              "; ".join(f"{e} ({_first_line(q)})" for q, e in skipped[:3]))
    admin_from = len(srv.log)
    kinds = {
        "DESCRIBE TABLE (the crate fetches the schema to validate rows)": lambda q, f: q.startswith("DESCRIBE TABLE"),
        "INSERT … FORMAT RowBinaryWithNamesAndTypes (registry rows, validated)":
            lambda q, f: q.startswith("INSERT") and q.endswith("FORMAT RowBinaryWithNamesAndTypes"),
        "INSERT … FORMAT RowBinary (the enricher's events)":
            lambda q, f: q.startswith("INSERT INTO events") and q.endswith("FORMAT RowBinary"),
        "SELECT read as RowBinaryWithNamesAndTypes (types checked by the client)":
            lambda q, f: q.startswith("SELECT") and f == "RowBinaryWithNamesAndTypes",
    }
    for what, test in kinds.items():
        n = sum(1 for q, f, _ in served if test(q.lstrip(), f))
        rep.check(n > 0, f"through the adapter: {n} × {what}")

    print("\n[4] the rows in chDB, read by chDB, field by field")
    for db in CHDB_DBS(manifest):
        for table in manifest["insert_tables"]:
            _compare_table(sess, rep, db, table, manifest["expected"].get(table), manifest)

    print(f"\n[5] every statement of queries::ALL ({len(manifest['queries'])}) on {ref_version} and {version}")
    nonempty = 0
    for q in manifest["queries"]:
        runs_with_rows = 0
        for run in q["runs"]:
            answers = {}
            try:
                answers["18.16"] = normalize(ref.query(run["sql"].replace("{db}", "rivulet_compat"),
                                                       "rivulet_compat", "JSONCompact"))
                for db in CHDB_DBS(manifest):
                    sess.query(f"USE {db}")
                    answers[db] = normalize(sess.query(run["sql"].replace("{db}", db), "JSONCompact").bytes())
            except Exception as e:
                rep.fail(f"{q['name']} {run['binds']}", f"{e}\n       SQL: {run['sql']}")
                continue
            ref_answer = answers.pop("18.16")
            for db, answer in answers.items():
                if q["name"] in EXPECTED_DIFFERENT:
                    d = differences((ref_answer[0], []), (answer[0], []))
                elif "ORDER BY" not in q["sql"]:
                    # No ORDER BY: SQL gives the rows in no order (a server reads parts
                    # in parallel), and the product does not rely on one; the same rows
                    # are compared, sorted.
                    d = differences(_sorted(ref_answer), _sorted(answer))
                else:
                    d = differences(ref_answer, answer)
                label = f"{q['name']} {run['binds']} on {db}: {len(answer[1])} rows"
                rep.check(not d, label, "; ".join(d) + f"\n       SQL: {run['sql']}")
            if _found(q["name"], ref_answer):
                runs_with_rows += 1
        # A comparison of empty answers alone proves nothing: the dataset must give every
        # statement rows for at least one of its bind sets (an aggregate's row of zeros
        # does not count, see _found).
        rep.check(runs_with_rows > 0, f"{q['name']}: the dataset gives rows for {runs_with_rows} of {len(q['runs'])} bind sets",
                  "add rows to compat/src/lib.rs that this statement finds")
        nonempty += runs_with_rows

    print(f"\n[6] the Stats API's statements ({len(manifest['stats'])}) on {ref_version} and {version}")
    _stats(rep, ref, srv, manifest)

    print("\n[7] rivulet-admin on chDB (through the adapter) and on 18.16")
    admin_from = len(srv.log)
    targets = {
        "18.16": (ref.url, "rivulet_compat", None),
        "chDB": (srv.url, "rivulet_compat", None),
        "chDB cluster": (srv.url, "rivulet_compat_cluster", manifest["cluster_name"]),
        "chDB portable": (srv.url, "rivulet_compat_portable", None),
    }
    try:
        _admin(args, rep, targets, args.workdir, manifest)
    finally:
        srv.stop()
    errors = [(q, e) for q, _, e in srv.log[admin_from:] if e]
    rep.check(not errors, "the chDB adapter answered every statement of rivulet-admin",
              "; ".join(f"{e} ({_first_line(q)})" for q, e in errors[:3]))

    # The comparison itself can fail: two different answers are told apart.
    a = normalize(ref.query("SELECT 1 AS x, 'a' AS y", fmt="JSONCompact"))
    b = normalize(sess.query("SELECT 1 AS x, 'b' AS y", "JSONCompact").bytes())
    rep.check(bool(differences(a, b)), "the comparison tells different answers apart")
    rep.check(bool(_stats_differences([["/", 1.0]], [["/", 1.02]])) and bool(_stats_differences([["/"]], [["/a"]]))
              and bool(_stats_differences([[1.0]], [])) and not _stats_differences([[33.333333]], [[33.3333331]]),
              "the Stats API's comparison tells different numbers (to 2 decimals), labels and row counts apart")

    print("  (read alike, shown differently: " + ", ".join(f"{k!r} {n} times" for k, n in sorted(TEXT_ONLY_DIFFERENCES.items()))
          + "; zero DateTimes compared as epoch seconds, LowCardinality(String) as String)")
    sess.close()
    print(f"\ncompatibility test done in {time.monotonic() - t0:.1f} s: ClickHouse {ref_version} and {version}")
    print(f"compat: {rep.passed} passed, {len(rep.failed)} failed")
    if rep.failed:
        print("failed:\n  " + "\n  ".join(rep.failed))
        sys.exit(1)


def _stats(rep, ref, srv, manifest):
    """Each Stats API statement on 18.16 and on every chDB database: the same rows (in
    order for the main statement, whose ORDER BY ties on nothing; sorted for the others),
    and rows found. Run as the product runs them: the statement's settings as the
    request's parameters (through the adapter on chDB: `SET` before, reset after), read
    as JSONEachRow."""
    for st in manifest["stats"]:
        params = dict(st["settings"])
        answers = {}
        try:
            answers["18.16"] = _stats_rows(st, ref.query_with(st["sql"], "rivulet_compat", "JSONEachRow", params))
        except Exception as e:
            rep.fail(f"stats {st['name']} on 18.16: {e}", f"SQL: {st['sql']}")
            continue
        for db in CHDB_DBS(manifest):
            status, _, out = srv.execute({"database": db, "default_format": "JSONEachRow", **params},
                                         st["sql"].encode())
            if status != 200:
                rep.fail(f"stats {st['name']} on {db}: {out.decode(errors='replace').strip()[:400]}",
                         f"18.16 answered {len(answers['18.16'])} rows\n       SQL: {st['sql']}")
                continue
            answers[db] = _stats_rows(st, out)
        ref_rows = answers.pop("18.16")
        for db, rows in answers.items():
            a, b = (ref_rows, rows) if st["ordered"] else (_stats_sorted(ref_rows), _stats_sorted(rows))
            d = _stats_differences(a, b)
            rep.check(not d, f"stats {st['name']} on {db}: {len(rows)} rows equal to 18.16's",
                      "; ".join(d) + f"\n       SQL: {st['sql']}")
        # An answer of nothing (no row, or an aggregate's row of zeros and nulls) cannot
        # tell two engines apart: the dataset must give every statement rows.
        found = any(v not in (0, "", None) for row in ref_rows for v in row)
        rep.check(found, f"stats {st['name']}: the dataset gives it {len(ref_rows)} rows, not all empty",
                  f"pick a request that finds the dataset's events (compat/src/stats.rs)\n       SQL: {st['sql']}")


def _stats_rows(st, body):
    """JSONEachRow as the product's decode_rows reads it: each row the statement's
    columns in order; a dimension (d0, d1, …) as text, a metric as a number (64-bit
    integers come quoted from 18.16) or None."""
    rows = []
    for line in body.decode().splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        if list(obj) != st["columns"]:
            raise RuntimeError(f"columns {list(obj)}, want {st['columns']}")
        row = []
        for c in st["columns"]:
            v = obj[c]
            if not (c[:1] == "d" and c[1:].isdigit()) and v is not None:
                v = float(v)
            row.append(v)
        rows.append(row)
    return rows


def _stats_sorted(rows):
    return sorted(rows, key=lambda r: json.dumps([round(v, 2) if isinstance(v, float) else v for v in r]))


def _stats_same(x, y):
    """Numbers as the response shows them: equal within a relative 1e-9, or equal rounded
    to 2 decimals (the response rounds ratios; `round` itself breaks ties by version)."""
    if isinstance(x, float) and isinstance(y, float):
        return abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y)) or round(x, 2) == round(y, 2)
    return x == y


def _stats_differences(a, b, limit=5):
    out = []
    if len(a) != len(b):
        out.append(f"{len(a)} rows on 18.16 != {len(b)} rows")
    for i, (x, y) in enumerate(zip(a, b)):
        if len(x) != len(y) or not all(_stats_same(u, v) for u, v in zip(x, y)):
            out.append(f"row {i}: 18.16 {x} != {y}")
            if len(out) >= limit:
                break
    return out


def _admin_env(url, db, cluster, extra=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("CLICKHOUSE_CLUSTER", "CLICKHOUSE_VALIDATION", "CLICKHOUSE_COMPRESSION")}
    # Row validation as in production (`auto`: on for the current engine); LZ4 off, which the
    # adapter does not speak.
    env.update(CLICKHOUSE_URL=url, CLICKHOUSE_DB=db, CLICKHOUSE_COMPRESSION="none", RUST_LOG="warn")
    if cluster:
        env["CLICKHOUSE_CLUSTER"] = cluster
    env.update(extra or {})
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url, token):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _admin(args, rep, targets, workdir, manifest):
    """`rivulet-admin migrate`, then `rivulet-admin serve` against each target, its JSON
    API read page by page; every target must answer what 18.16 answers."""
    token = os.urandom(24).hex()
    # The Overview's window moves on the hour: the three servers' answers must be read
    # within one hour, so wait if the next one is less than a minute away.
    to_next_hour = 3600 - time.time() % 3600
    if to_next_hour < 60:
        time.sleep(to_next_hour + 1)
    # /_readiness: the admin's ClickHouse probe (SELECT 1, read as the client reads it).
    paths = ["/_readiness", "/api/sites"]
    for site in [1, 2, 3, 4, 999]:
        paths += [f"/api/sites/{site}", f"/api/sites/{site}/keys", f"/api/sites/{site}/overview"]
    answers = {}
    for name, (url, db, cluster) in targets.items():
        p = subprocess.run([args.admin_bin, "migrate"], env=_admin_env(url, db, cluster),
                           capture_output=True, text=True)
        out = p.stdout.strip()
        every = [m["version"] for m in manifest["migrations"]]
        rep.check(p.returncode == 0 and json.loads(out or "{}").get("schema_versions") == every,
                  f"{name}: rivulet-admin migrate ({out})", p.stderr.strip())
        port = _free_port()
        log_path = os.path.join(workdir, f"admin-{name.replace(' ', '-')}.log")
        with open(log_path, "w") as log:
            proc = subprocess.Popen([args.admin_bin, "serve"], stdout=log, stderr=subprocess.STDOUT,
                                    env=_admin_env(url, db, cluster, {"ADMIN_TOKEN": token,
                                                                      "ADMIN_ADDR": f"127.0.0.1:{port}"}))
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    _get(base + "/api/sites", token)
                    break
                except (urllib.error.URLError, ConnectionError):
                    if time.monotonic() > deadline or proc.poll() is not None:
                        rep.fail(f"{name}: rivulet-admin serve did not answer", open(log_path).read()[-2000:])
                        return
                    time.sleep(0.2)
            answers[name] = {path: _get(base + path, token) for path in paths}
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    ref = answers.pop("18.16")
    for name, got in answers.items():
        for path in paths:
            a, b = ref[path], got[path]
            label = f"{name}: GET {path} → {b[0]}"
            rep.check(a == b, label, f"18.16 answered {json.dumps(a)[:600]}\n       {name} answered {json.dumps(b)[:600]}")
    overview = ref["/api/sites/1/overview"]
    filled = overview[0] == 200 and overview[1]["totals"]["pageviews"] > 0 and overview[1]["latest_events"]
    rep.check(bool(filled), "the Overview compared is not empty (site 1 has events in its window)",
              json.dumps(overview)[:300])


def CHDB_DBS(manifest):
    """The chDB databases the product loads: name → (cluster or None, variant of events)."""
    return {
        "rivulet_compat": (None, "low_cardinality"),
        "rivulet_compat_cluster": (manifest["cluster_name"], "low_cardinality"),
        "rivulet_compat_portable": (None, "portable"),
    }


def _column_exists(sql, error, db):
    """An `ALTER TABLE db.… ADD COLUMN` answered that the column exists (DUPLICATE_COLUMN)."""
    return (sql.lstrip().startswith(f"ALTER TABLE {db}.") and " ADD COLUMN " in sql
            and "Code: 15." in error and "already exists" in error)


def _first_line(sql):
    line = " ".join(sql.split())
    return line[:90] + ("…" if len(line) > 90 else "")


def _describe(sess, table):
    rows = sess.query(f"DESCRIBE TABLE {table}", "JSONCompact").bytes()
    return [(r[0], r[1]) for r in json.loads(rows)["data"]]


# The key that identifies a row of each insert table (several versions of a registry row
# are kept until a merge; redelivered events are identical rows).
ROW_KEYS = {
    "events": ("event_id",),
    "sites": ("site_id", "version"),
    "api_keys": ("key_id", "version"),
    "schema_migrations": ("version",),
    "secrets": ("name", "value"),
    "person_claims": ("site_id", "anonymous_id", "user_id", "rank"),
    "person_trait_values": ("site_id", "user_id", "name", "trusted", "received_at_ms"),
    "erasure_requests": ("request_id", "version"),
    "erasure_ledger": ("site_id", "id_kind", "id", "request_id"),
    "retention_runs": ("site_id", "ran_at"),
}
# ReplacingMergeTree(version) tables whose versions of a row go in separate inserts: a
# merge may already have removed older versions; the latest of each id must be there.
# Table → (the columns of the id, the version column).
VERSIONED = {
    "sites": (("site_id",), "version"),
    "api_keys": (("key_id",), "version"),
    # The strongest claim of each (anonymous id, user) has the highest rank.
    "person_claims": (("site_id", "anonymous_id", "user_id"), "rank"),
    "person_trait_values": (("site_id", "user_id", "name", "trusted"), "received_at_ms"),
    "erasure_requests": (("request_id",), "version"),
    "retention_runs": (("site_id",), "ran_at"),
}


def _compare_table(sess, rep, db, table, expected, manifest):
    label = f"{db}.{table}"
    if expected is None or table not in ROW_KEYS:
        rep.fail(f"{label}: no expected rows", "a new insert table: add it to chdb_compat's expected_rows and ROW_KEYS")
        return
    cols = _describe(sess, f"{db}.{table}")
    # Epoch seconds and the UUID's canonical text, as the Rust side's JSON has them.
    select = ", ".join(
        f"toUInt32({n}) AS {n}" if t in ("DateTime", "Nullable(DateTime)")
        else f"toString({n}) AS {n}" if t == "UUID" else n
        for n, t in cols
    )
    out = sess.query(
        f"SELECT {select} FROM {db}.{table} SETTINGS output_format_json_quote_64bit_integers = 0",
        "JSONEachRow",
    ).bytes()
    got = [json.loads(line) for line in out.decode().splitlines() if line]
    problems = []
    if table == "secrets":
        # The key cache's MAC key, which migrate made with a random value: once, 64 hex
        # digits, made during this run. The other rows are the dataset's.
        made = [r for r in got if r["name"] == manifest["key_cache_mac_secret"]]
        got = [r for r in got if r["name"] != manifest["key_cache_mac_secret"]]
        now = time.time()
        if len(made) != 1 or not all(len(r["value"]) == 64 and all(ch in "0123456789abcdef" for ch in r["value"])
                                     and now - 3600 < r["created_at"] <= now + 5 for r in made):
            problems.append(f"migrate's {manifest['key_cache_mac_secret']}: {made}")
    key = ROW_KEYS[table]
    got_by = {}
    for r in got:
        got_by.setdefault(tuple(r[k] for k in key), []).append(r)
    want_by = {}
    for r in expected:
        want_by.setdefault(tuple(r[k] for k in key), []).append(r)
    required = set(want_by)
    if table in VERSIONED:
        id_columns, version = VERSIONED[table]
        newest = {}
        for r in expected:
            i = tuple(r[c] for c in id_columns)
            if i not in newest or newest[i][version] < r[version]:
                newest[i] = r
        required = {tuple(r[k] for k in key) for r in newest.values()}
    if not required <= set(got_by) <= set(want_by):
        problems.append(f"missing {sorted(required - set(got_by))[:3]}, "
                        f"never written {sorted(set(got_by) - set(want_by))[:3]}")
    fields = 0
    for k, wants in want_by.items():
        for g in got_by.get(k, []):
            w = wants[0]
            for name in w:
                fields += 1
                if name not in g or g[name] != w[name]:
                    problems.append(f"{k} {name}: chDB has {g.get(name)!r}, written {w[name]!r}")
            # Columns the product does not write (none today) would show here.
            extra = set(g) - set(w) - ({"applied_at"} if table == "schema_migrations" else set())
            if extra:
                problems.append(f"{k}: columns not in the written row: {sorted(extra)}")
        if len(got_by.get(k, [])) > len(wants):
            problems.append(f"{k}: {len(got_by[k])} copies, written {len(wants)}")
    if table == "schema_migrations":
        now = time.time()
        for r in got:
            if not now - 3600 < r["applied_at"] <= now + 5:
                problems.append(f"version {r['version']}: applied_at {r['applied_at']} is not the time of this run")
    rep.check(not problems, f"{label}: {len(got)} rows, {fields} fields equal to what was written",
              "\n       ".join(problems[:10]))


if __name__ == "__main__":
    main()
