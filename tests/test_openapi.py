#!/usr/bin/env python3
"""docs/openapi.json against the REST server it describes.

usage: test_openapi.py REST_SERVER_C OPENAPI_JSON ONEBITD

The routes of the server are read from its one route table (`routes[]`, in one of the rest_*.c
files beside REST_SERVER_C) and must be exactly the operations of the document (method and
path); the query parameters each route's row names (the only ones the server lets through) must
be exactly those the document names for that operation, and those its handler reads. The document must be OpenAPI 3.0 with
every $ref resolving (and pass openapi-spec-validator where that is installed). Then the real
onebitd is asked: GET /v1/openapi.json must serve the document byte for byte, every documented
operation must reach a handler (an unknown job id is answered "no job with id", never "no such
resource"), every other method on a documented path must be 405, and an undocumented path 404.
Exits non-zero on any mismatch."""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SRC, DOC, ONEBITD = sys.argv[1:4]
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
failures = 0


def check(name, cond, detail=""):
    global failures
    if cond:
        print(f"[ PASSED ] {name}")
    else:
        failures += 1
        print(f"[ FAILED ] {name}: {detail}")


src = "".join(open(f).read() for f in sorted(glob.glob(os.path.join(os.path.dirname(SRC),
                                                                    "rest_*.c"))))
table = re.search(r"\broutes\[\]\s*=\s*\{(.*?)\n\};", src, re.S)
check("the REST server has its route table", table is not None)
rows = re.findall(r'\{\s*"([A-Z]+)",\s*"([^"]+)",\s*(\w+),\s*"([^"]*)"\s*\}', table.group(1))
server_routes = {(m, p) for m, p, _, _ in rows}
check("the route table is not empty", len(server_routes) >= 10, server_routes)

raw = open(DOC, "rb").read()
doc = json.loads(raw)
check("OpenAPI 3.0", str(doc.get("openapi", "")).startswith("3.0."), doc.get("openapi"))
doc_routes = {(m.upper(), p) for p, item in doc["paths"].items() for m in item if m in METHODS}
check("every route of the server is documented", not server_routes - doc_routes,
      sorted(server_routes - doc_routes))
check("every documented route is the server's", not doc_routes - server_routes,
      sorted(doc_routes - server_routes))


def reads(text):
    """The query parameters code reads by name."""
    return set(re.findall(r'query_int\(ex,\s*"(\w+)"', text)) | \
        set(re.findall(r'\b(?:ob__rest_)?arg\(ex,\s*"(\w+)"', text))


for m, p, fn, params in rows:
    body = re.search(r"^(?:static )?enum MHD_Result " + fn + r"\(.*?^\}", src, re.S | re.M)
    check(f"{m} {p}: its handler {fn} is found", body is not None)
    got = reads(body.group(0)) if body else set()
    check(f"{m} {p}: the parameters its handler reads are those of its row",
          got == set(params.split()), f"handler: {sorted(got)}, row: {sorted(params.split())}")
    op = doc["paths"].get(p, {})
    documented = {x["name"] for o in (op, op.get(m.lower(), {})) for x in o.get("parameters", [])
                  if x.get("in") == "query"}
    check(f"{m} {p}: the query parameters it takes are those documented",
          documented == set(params.split()),
          f"server only: {sorted(set(params.split()) - documented)}, "
          f"document only: {sorted(documented - set(params.split()))}")
server_params = reads(src)
doc_params = {p["name"] for item in doc["paths"].values()
              for o in [item] + [item[m] for m in item if m in METHODS]
              for p in o.get("parameters", []) if p.get("in") == "query"}
check("the query parameters the server reads are those documented", server_params == doc_params,
      f"server only: {sorted(server_params - doc_params)}, "
      f"document only: {sorted(doc_params - server_params)}")


def refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def resolve(ref):
    node = doc
    for part in ref.lstrip("#/").split("/"):
        node = node[part]
    return node


bad = []
for r in refs(doc):
    try:
        resolve(r)
    except (KeyError, TypeError):
        bad.append(r)
check("every $ref resolves", not bad, bad)
for p, item in doc["paths"].items():
    for m in item:
        if m in METHODS:
            o = item[m]
            check(f"{m.upper()} {p}: operationId and a 200 answer",
                  o.get("operationId") and "200" in o.get("responses", {}))
try:
    from openapi_spec_validator import validate_spec
except ImportError:
    print("[ SKIPPED ] openapi-spec-validator is not installed: structural checks only")
else:
    try:
        validate_spec(doc)
        ok = True
    except Exception as e:  # the validator's own error types differ between versions
        ok = False
        print(e)
    check("openapi-spec-validator accepts it", ok)

# The real server.
tmp = tempfile.mkdtemp()
token = "openapi-test-token-0123456789"
with open(os.path.join(tmp, "token"), "w") as f:
    f.write(token + "\n")
os.chmod(os.path.join(tmp, "token"), 0o600)
ready = os.path.join(tmp, "ready")
log = open(os.path.join(tmp, "onebitd.log"), "w")
daemon = subprocess.Popen([ONEBITD, "--grpc", "127.0.0.1:0", "--rest", "127.0.0.1:0",
                           "--state-dir", os.path.join(tmp, "state"), "--ready-file", ready,
                           "--token-file", os.path.join(tmp, "token")],
                          stdout=log, stderr=subprocess.STDOUT)


def call(method, path, body=None):
    req = urllib.request.Request(f"http://{rest}{path}", method=method, data=body)
    req.add_header("Authorization", f"Bearer {token}")
    if body is not None or method == "POST":
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


try:
    for _ in range(200):
        if os.path.exists(ready) and os.path.getsize(ready) > 0:
            break
        time.sleep(0.05)
    ports = dict(line.split("=", 1) for line in open(ready).read().split())
    rest = f"127.0.0.1:{ports['rest']}"
    status, body = call("GET", "/v1/openapi.json")
    check("GET /v1/openapi.json serves the document", status == 200 and body == raw, status)

    for method, path in sorted(doc_routes):
        url = path.replace("{id}", "job-999999")
        status, body = call(method, url, b"{}" if method == "POST" else None)
        text = body.decode(errors="replace")
        reached = "no such resource" not in text and status != 405
        if "{id}" in path:
            reached = reached and status == 404 and "no job with id 'job-999999'" in text
        check(f"{method} {path} reaches its handler", reached, f"{status} {text[:200]}")
        for other in ("GET", "POST", "DELETE", "PUT", "PATCH"):
            if (other, path) in doc_routes:
                continue
            status, body = call(other, url, b"{}" if other in ("POST", "PUT", "PATCH") else None)
            check(f"{other} {path} is 405", status == 405, f"{status} {body[:200]}")
    status, body = call("GET", "/v1/undocumented")
    check("an undocumented path is 404", status == 404 and b"no such resource" in body, status)
    check("onebitd still running", daemon.poll() is None)
finally:
    daemon.terminate()
    try:
        daemon.wait(timeout=10)
    except subprocess.TimeoutExpired:
        daemon.kill()
    subprocess.run(["rm", "-rf", tmp])
print(f"{'FAILED' if failures else 'ok'}: {failures} failure(s)")
sys.exit(1 if failures else 0)
