"""A minimal ClickHouse HTTP interface in front of chDB, for the compatibility test only.

chDB is the ClickHouse engine in-process, without a server. This adapter lets the product's
own Rust code (the `clickhouse` crate's client, with row validation on as against any
current server) send its statements to that engine. It implements the part of the HTTP
interface the crate uses, and refuses the rest loudly:

- POST with the statement in the body, or (for INSERT … FORMAT …) in the `query` URL
  parameter with the data as the body (chunked or not);
- `database` (the statement runs after `USE`), `default_format` (the output format unless
  the statement names one), any other parameter as a setting (`SET` before, reset after);
- `compress`/`decompress` (ClickHouse's LZ4 framing) are refused with an error;
- a failure answers 500 with `X-ClickHouse-Exception-Code` and chDB's own message
  ("Code: 57. DB::Exception: …"), as a server does.

An INSERT's data is written to a file and inserted with `INSERT … FROM INFILE … FORMAT …`,
so chDB parses exactly the bytes the client sent. The cluster DDL is rewritten for one
engine by `rewrite.single_engine` before it runs.

What it cannot show: anything of the real server's HTTP handler (compression, the
validation headers' negotiation, keep-alive, timeouts, progress headers, sessions).
"""

import os
import re
import tempfile
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rewrite import single_engine

# URL parameters that are not settings.
NOT_SETTINGS = {"query", "database", "default_format", "query_id", "session_id", "user", "password"}
REFUSED = {"compress", "decompress"}

INSERT_WITH_DATA = re.compile(r"^\s*(INSERT\s+INTO\s.*?)\s+FORMAT\s+(\w+)\s*$", re.S | re.I)
SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ChdbServer:
    """Serves `session` (a chdb.session.Session) on 127.0.0.1:`port` (0: any free port)."""

    def __init__(self, session, port=0, rewrite_cluster_ddl=True):
        self.session = session
        self.lock = threading.Lock()
        self.rewrite = rewrite_cluster_ddl
        self.tmpdir = tempfile.mkdtemp(prefix="chdb-http-")
        self.log = []  # (statement as run, output format, error or None), for the report
        handler = _handler(self)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def execute(self, params, body):
        """Runs one request; returns (status, headers, bytes)."""
        for p in params:
            if p in REFUSED and params[p] not in ("0", ""):
                return _error(
                    1,
                    f"Code: 1. The chDB adapter does not implement `{p}=1` (ClickHouse's LZ4 "
                    "framing): run the client with compression off.",
                )
        if "query" in params:
            sql, data = params["query"], body
        else:
            sql, data = body.decode("utf-8"), None
        settings = {k: v for k, v in params.items() if k not in NOT_SETTINGS and k not in REFUSED}
        for k in settings:
            if not SETTING_NAME.match(k):
                return _error(115, f"Code: 115. Unknown setting {k!r}")
        if self.rewrite:
            sql = single_engine(sql)
        path = None
        if data is not None:
            m = INSERT_WITH_DATA.match(sql)
            if not m:
                return _error(62, "Code: 62. The chDB adapter takes data only for INSERT … FORMAT …")
            fd, path = tempfile.mkstemp(dir=self.tmpdir, suffix=".data")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            sql = f"{m.group(1)} FROM INFILE '{path}' FORMAT {m.group(2)}"
        fmt = params.get("default_format", "TabSeparated")
        with self.lock:
            try:
                self.session.query(f"USE {_ident(params.get('database', 'default'))}")
                for k, v in settings.items():
                    self.session.query(f"SET {k} = {_literal(v)}")
                try:
                    out = self.session.query(sql, fmt).bytes()
                finally:
                    for k in settings:
                        self.session.query(f"SET {k} = DEFAULT")
                self.log.append((sql, fmt, None))
                return 200, {}, out
            except Exception as e:  # chDB raises its own error type with the server's text
                text = str(e).strip()
                self.log.append((sql, fmt, text))
                m = re.match(r"Code: (\d+)", text)
                return _error(int(m.group(1)) if m else 1000, text)
            finally:
                if path:
                    os.unlink(path)


def _ident(name):
    if not re.match(r"^[A-Za-z0-9_]+$", name):
        raise ValueError(f"database name {name!r}")
    return name


def _literal(v):
    return v if re.match(r"^-?[0-9]+$", v) else "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _error(code, text):
    return 500, {"X-ClickHouse-Exception-Code": str(code)}, (text + "\n").encode()


def _handler(server):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet: the test prints its own report
            pass

        def _body(self):
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return bytes(out)
                    out += self.rfile.read(size)
                    self.rfile.readline()
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n)

        def _serve(self):
            url = urllib.parse.urlsplit(self.path)
            params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
            body = self._body()
            status, headers, out = server.execute(params, body)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            try:
                self.wfile.write(out)
            except (BrokenPipeError, ConnectionResetError):
                # The client gave up on this request (e.g. a joined query failed first).
                self.close_connection = True

        do_POST = _serve
        do_GET = _serve

    return Handler
