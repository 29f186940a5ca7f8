"""Posts oversized bodies to a running ingest with Python's urllib, and prints one JSON
line per case: the status and body it read, or the error it got instead. Used by
tests/tests/ingest_bad_input.rs.
    python3 tests/clients/oversize-urllib.py http://127.0.0.1:PORT SIZE [SIZE...]
"""
import json
import sys
import time
import urllib.error
import urllib.request

base, sizes = sys.argv[1], [int(s) for s in sys.argv[2:]]
for size in sizes:
    body = b'{"site_id":1,"pathname":"' + b"x" * (size - 28) + b'"}'
    for path in ("/api/track", "/api/track/batch"):
        result = {"path": path, "size": size, "client": "urllib"}
        started = time.monotonic()
        req = urllib.request.Request(base + path, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                result["status"], result["body"] = resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            result["status"], result["body"] = e.code, e.read().decode()
        except Exception as e:  # the failure this test exists to catch: EPIPE, ECONNRESET
            result["error"] = repr(e)
        result["ms"] = round((time.monotonic() - started) * 1000)
        print(json.dumps(result), flush=True)
