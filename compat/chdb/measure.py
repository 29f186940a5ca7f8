"""What ClickHouse 26.x features would give Rivulet's `events` table, measured on chDB.

    python measure.py --bin target/debug/chdb_compat --workdir DIR [--rows 1000000] [--days 30]

Loads the same realistic events (`chdb_compat events`: the enricher's encoder, the
compatibility test's generator) into variants of `events` and reports, for each, the size
on disk after a final merge and the time of the Overview's statements:

  base          the portable DDL (what Rivulet creates on 18.16)
  lowcard       the LowCardinality variant (what Rivulet creates on servers from 22.x)
  datetime64    DateTime64(3) for timestamp and received_at
  ttl           base with `TTL timestamp + INTERVAL 13 MONTH` (retention)

Not part of CI (scripts/test-chdb measure runs it); docs/clickhouse-versions.md has the
figures and what was decided from them.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import time

os.environ["TZ"] = "UTC"
from chdb import session as chdb_session  # noqa: E402

# The dataset's fixed "now" (rivulet_compat::FIXED_NOW) and the Overview's window then.
FIXED_NOW = 1_767_225_600
WINDOW_START = FIXED_NOW // 3600 * 3600 - 23 * 3600


def variants(base_ddl, lc):
    dt64 = re.sub(r"(\n\s+(timestamp|received_at)) DateTime([,\n])", r"\1 DateTime64(3)\3", base_ddl)
    ttl = base_ddl + "\nTTL timestamp + INTERVAL 13 MONTH"
    out = {"base": base_ddl, "lowcard": lc, "datetime64": dt64, "ttl": ttl}
    assert dt64.count("DateTime64(3)") == 2, dt64
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    data = os.path.abspath(os.path.join(args.workdir, "events.bin"))
    t = time.monotonic()
    print(subprocess.run([args.bin, "events", data, str(args.rows), str(args.days)],
                         check=True, capture_output=True, text=True).stdout.strip(),
          f"generated in {time.monotonic() - t:.1f} s ({os.path.getsize(data) / 1e6:.0f} MB RowBinary)")
    manifest = json.loads(subprocess.run([args.bin, "manifest", str(FIXED_NOW)], check=True,
                                         capture_output=True).stdout)

    def events_ddl(variant):
        return next(s for s in manifest["ddl"][variant]["single"]
                    if s.startswith("CREATE TABLE IF NOT EXISTS {db}.events "))
    base = events_ddl("portable")
    lc_columns = [c["name"] for c in manifest["events_columns"]["low_cardinality"]
                  if c["type"].startswith("LowCardinality")]
    structure = ", ".join(f"{c['name']} {c['type']}" for c in manifest["events_columns"]["portable"])
    sess = chdb_session.Session(os.path.join(args.workdir, "chdb"))
    version = sess.query("SELECT version()", "TSV").bytes().decode().strip()
    sess.query("CREATE DATABASE m")
    ddls = variants(base.replace("{db}", "m"), events_ddl("low_cardinality").replace("{db}", "m"))
    # The codec is set on every table: left to itself, chDB compresses a part that a merge
    # wrote with ZSTD(3) and one an insert wrote with LZ4, which would compare codecs, not
    # schemas. LZ4 is a stock server's default; ZSTD(3) is what chDB merges use.
    codecs = {"lz4": "LZ4", "zstd": "ZSTD(3)"}
    sess.query(f"CREATE TABLE m.staging ({structure}) ENGINE = Memory")
    t = time.monotonic()
    sess.query(f"INSERT INTO m.staging SELECT * FROM file('{data}', 'RowBinary', '{structure}')")
    print(f"read the RowBinary file in {time.monotonic() - t:.1f} s")
    tables = {}
    for name, ddl in ddls.items():
        for tag, codec in codecs.items():
            table = f"{name}_{tag}"
            tables[table] = (name, tag)
            ttl_at = ddl.find("\nTTL ")
            body = ddl if ttl_at < 0 else ddl[:ttl_at]
            tail = "" if ttl_at < 0 else ddl[ttl_at:]
            sess.query(body.replace("m.events ", f"m.{table} ", 1) + tail
                       + f"\nSETTINGS default_compression_codec = '{codec}'")
            sess.query(f"INSERT INTO m.{table} SELECT * FROM m.staging")
            sess.query(f"OPTIMIZE TABLE m.{table} FINAL")
    sess.query("DROP TABLE m.staging")

    def one(sql):
        return sess.query(sql, "TSV").bytes().decode().strip()

    queries = [q for q in manifest["queries"] if q["name"].startswith("overview_")]
    # The dashboard's case (site 1, its 24-hour window) and the whole table for site 1.
    windows = {"24 h": WINDOW_START, f"{args.days} d": 0}
    timed = [t for t, (_, tag) in tables.items() if tag == "lz4"]
    samples = {}
    for _ in range(args.repeat + 1):  # the first round warms the caches and is dropped
        for table in timed:
            for w, since in windows.items():
                for q in queries:
                    run = next(r for r in q["runs"] if r["binds"] == [1, since])
                    sql = run["sql"].replace("FROM events", f"FROM m.{table}")
                    # CPU time of this process (the engine runs in it; no merges are running
                    # after OPTIMIZE FINAL): steadier than wall time on a shared machine.
                    t = time.process_time()
                    sess.query(sql, "Null")
                    samples.setdefault((table, w, q["name"]), []).append(time.process_time() - t)
    print(f"\nClickHouse {version} (chDB), {one('SELECT count() FROM m.base_lz4')} rows over {args.days} days, "
          "one part each (OPTIMIZE FINAL)")
    print(f"{'variant':<12}{'LZ4 MB':>10}{'ZSTD(3) MB':>12}{'uncompressed MB':>17}"
          + "".join(f"{'Overview ' + w + ' CPU ms':>22}" for w in windows))
    for name in ddls:
        size = {}
        for tag in codecs:
            size[tag], uncomp = map(int, one(
                "SELECT sum(bytes_on_disk), sum(data_uncompressed_bytes) FROM system.parts "
                f"WHERE active AND database = 'm' AND table = '{name}_{tag}'").split("\t"))
        ms = {w: 1000 * sum(statistics.median(samples[(f"{name}_lz4", w, q["name"])][1:]) for q in queries)
              for w in windows}
        print(f"{name:<12}{size['lz4'] / 1e6:>10.1f}{size['zstd'] / 1e6:>12.1f}{uncomp / 1e6:>17.1f}"
              + "".join(f"{ms[w]:>22.1f}" for w in windows))
    print("\ncompressed bytes per column with LZ4 (MB), base → lowcard:")
    cols = {}
    for name in ("base", "lowcard"):
        for line in one(f"SELECT name, data_compressed_bytes FROM system.columns WHERE database = 'm' "
                        f"AND table = '{name}_lz4'").splitlines():
            c, b = line.split("\t")
            cols.setdefault(c, {})[name] = int(b)
    for c in lc_columns:
        print(f"  {c:<26}{cols[c]['base'] / 1e6:>8.2f} → {cols[c]['lowcard'] / 1e6:>6.2f}")
    print("\ntimestamp + received_at with LZ4 (MB), base → datetime64:", end=" ")
    dt = {n: sum(int(x) for x in one(
        f"SELECT data_compressed_bytes FROM system.columns WHERE database = 'm' AND table = '{n}_lz4' "
        "AND name IN ('timestamp', 'received_at')").split()) for n in ("base", "datetime64")}
    print(f"{dt['base'] / 1e6:.2f} → {dt['datetime64'] / 1e6:.2f}")
    sess.close()


if __name__ == "__main__":
    main()
