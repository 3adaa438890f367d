#!/usr/bin/env python3
"""A stand-in Kubernetes API server for testing onebitd's Kubernetes launcher.

It speaks the wire protocol of the endpoints the launcher uses, over HTTPS with a bearer token:
  /apis/kubeflow.org/v2beta1/namespaces/NS/mpijobs        GET (list, ?watch=1), POST
  /apis/kubeflow.org/v2beta1/namespaces/NS/mpijobs/NAME   GET, DELETE
  /api/v1/namespaces/NS/pods                              GET (list, ?watch=1)
  /api/v1/namespaces/NS/pods/NAME                         DELETE
  /api/v1/namespaces/NS/pods/NAME/log                     GET (?container, follow, timestamps,
                                                          sinceTime)
  /api/v1/namespaces/NS/secrets                           POST (a list is 403: the Role has no
                                                          "list" on Secrets)
  /api/v1/namespaces/NS/secrets/NAME                      GET, DELETE
with JSON bodies shaped like the real kubeflow.org/v2beta1 MPIJob and core/v1 Pod, list
resourceVersions, watch streams as chunked newline-delimited events, 401/404/409/422 Status
answers and "410 Gone" ERROR events for a resourceVersion older than the compacted history.
Secrets are core/v1 objects with base64 data (stringData is folded into data as the real server
does); the garbage collector is not modelled (ownerReferences are kept, not acted on).

It stands in for the MPI Operator too: a created MPIJob gets a launcher pod and its worker pods,
which the test moves through states over a plain-HTTP control port on 127.0.0.1:
  POST /ctl/mode {"on_create": "run"|"unschedulable"|"image_pull"|"pending"|"slow_delete"}
                                       (slow_delete: as run, but graceful deletes never end)
  POST /ctl/succeed {"name"}           launcher exits 0, MPIJob Succeeded
  POST /ctl/fail_worker {"name", "index", "exit_code", "reason"}  worker dies, MPIJob Failed
  POST /ctl/log {"name", "text", ["index"]}  a line of the launcher pod's log, or with index of
                                       worker pod <name>-worker-<index>'s
  POST /ctl/silence {"on"}             open and new watches send nothing and never end (a stream
                                       that died without the connection saying so)
  POST /ctl/precreate_secret {"name", "job", "attempt", "token"}  a Secret made by someone else
  POST /ctl/down, /ctl/up              the API server goes away (streams cut) and comes back
  POST /ctl/compact                    history compacted: old resourceVersions get 410
  POST /ctl/garbage                    hostile lines on every open watch stream
  POST /ctl/precreate {"name"}         an MPIJob of that name labelled for another job
  GET  /ctl/state                      MPIJobs, pods and a count of requests, as JSON
usage: k8s_standin.py --cert C --key K --token T --port-file F --ctl-port-file G [--grace S]
"""
import argparse
import base64
import copy
import datetime
import json
import socket
import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Condition()
STATE = {
    "rv": 100,
    "compacted": 0,
    "mpijobs": {},  # name -> object
    "pods": {},  # name -> object
    "secrets": {},  # name -> object
    "silent": False,
    "events": [],  # (rv, kind, type, object)
    "logs": {},  # pod -> [(ts, text)]
    "mode": "run",
    "requests": {},  # "METHOD kind" -> count
    "deletes": [],  # [path?query]
    "gone_sent": 0,
    "garbage": 0,
    "epoch": 0,  # bumped when streams must end (down, compact)
    "created": [],  # names, in order of creation
}
ARGS = None


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ts_nano():
    t = time.time_ns()
    s = datetime.datetime.fromtimestamp(t // 10**9, datetime.timezone.utc)
    return s.strftime("%Y-%m-%dT%H:%M:%S") + ".%09dZ" % (t % 10**9)


def bump(kind, etype, obj):
    """Records a change (LOCK held): a new resourceVersion and a watch event."""
    STATE["rv"] += 1
    obj["metadata"]["resourceVersion"] = str(STATE["rv"])
    STATE["events"].append((STATE["rv"], kind, etype, copy.deepcopy(obj)))
    LOCK.notify_all()


def status_obj(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def selector_match(sel, labels):
    if not sel:
        return True
    for term in sel.split(","):
        if "=" not in term:
            return False
        k, v = term.split("=", 1)
        if labels.get(k) != v:
            return False
    return True


# ---- the operator's part ----------------------------------------------------------------------

def set_condition(job, ctype, status="True", reason="", message=""):
    conds = job.setdefault("status", {}).setdefault("conditions", [])
    for c in conds:
        if c["type"] == ctype:
            c.update(status=status, reason=reason, message=message, lastTransitionTime=now_rfc3339())
            return
    conds.append({"type": ctype, "status": status, "reason": reason, "message": message,
                  "lastUpdateTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()})


def make_pod(job, role, index):
    name = job["metadata"]["name"]
    spec = job["spec"]["mpiReplicaSpecs"]["Launcher" if role == "launcher" else "Worker"]
    tmpl = spec["template"]
    labels = dict(tmpl.get("metadata", {}).get("labels", {}))
    labels.update({"training.kubeflow.org/job-name": name, "training.kubeflow.org/job-role": role,
                   "training.kubeflow.org/operator-name": "mpi-operator"})
    pname = "%s-launcher-x7k2q" % name if role == "launcher" else "%s-worker-%d" % (name, index)
    if role == "worker":
        labels["training.kubeflow.org/replica-index"] = str(index)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": pname, "namespace": job["metadata"]["namespace"], "labels": labels,
                        "uid": "uid-" + pname, "creationTimestamp": now_rfc3339(),
                        "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                                             "name": name, "controller": True}]},
           "spec": copy.deepcopy(tmpl["spec"]),
           "status": {"phase": "Pending", "conditions": [], "containerStatuses": [
               {"name": tmpl["spec"]["containers"][0]["name"], "ready": False, "restartCount": 0,
                "image": tmpl["spec"]["containers"][0]["image"],
                "state": {"waiting": {"reason": "ContainerCreating"}}}]}}
    return pod


def pod_running(pod):
    pod["status"]["phase"] = "Running"
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"},
                                   {"type": "Ready", "status": "True"}]
    pod["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": now_rfc3339()}}
    pod["status"]["containerStatuses"][0]["ready"] = True


def pod_terminated(pod, code, reason):
    pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
    pod["status"]["containerStatuses"][0]["state"] = {"terminated": {
        "exitCode": code, "reason": reason, "startedAt": now_rfc3339(), "finishedAt": now_rfc3339()}}
    pod["status"]["containerStatuses"][0]["ready"] = False


def pods_of(name):
    return [p for p in STATE["pods"].values()
            if p["metadata"]["labels"].get("training.kubeflow.org/job-name") == name]


def operate_created(job):
    """What the operator does with a new MPIJob (LOCK held)."""
    name = job["metadata"]["name"]
    set_condition(job, "Created", reason="MPIJobCreated", message="MPIJob default/%s is created." % name)
    bump("mpijobs", "MODIFIED", job)
    workers = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    mode = STATE["mode"]
    for i in range(workers):
        pod = make_pod(job, "worker", i)
        if mode in ("run", "slow_delete"):
            pod_running(pod)
        elif mode == "unschedulable":
            pod["status"]["conditions"] = [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes "
                           "are available: 3 No preemption victims found for incoming pod."}]
        elif mode == "image_pull":
            pod["status"]["containerStatuses"][0]["state"] = {"waiting": {
                "reason": "ImagePullBackOff",
                "message": 'Back-off pulling image "%s"' % pod["spec"]["containers"][0]["image"]}}
        STATE["pods"][pod["metadata"]["name"]] = pod
        bump("pods", "ADDED", pod)
    if mode in ("run", "slow_delete"):
        # WaitForWorkersReady: the launcher once the workers are ready.
        pod = make_pod(job, "launcher", 0)
        pod_running(pod)
        STATE["pods"][pod["metadata"]["name"]] = pod
        bump("pods", "ADDED", pod)
        set_condition(job, "Running", reason="MPIJobRunning",
                      message="MPIJob default/%s is running." % name)
        bump("mpijobs", "MODIFIED", job)


def remove_job(name):
    """Deletes an MPIJob and its pods (LOCK held)."""
    for p in pods_of(name):
        del STATE["pods"][p["metadata"]["name"]]
        bump("pods", "DELETED", p)
    job = STATE["mpijobs"].pop(name, None)
    if job:
        bump("mpijobs", "DELETED", job)


def graceful_delete(name):
    time.sleep(ARGS.grace)
    with LOCK:
        if STATE["mode"] == "slow_delete":  # the pods ignore SIGTERM: only a kill ends them
            return
        job = STATE["mpijobs"].get(name)
        if not job:
            return
        # The ranks caught SIGTERM, checkpointed and exited 0: mpirun exits 0.
        for p in pods_of(name):
            if p["metadata"]["labels"].get("training.kubeflow.org/job-role") == "launcher" and \
                    p["status"]["phase"] == "Running":
                pod_terminated(p, 0, "Completed")
                bump("pods", "MODIFIED", p)
        remove_job(name)


# ---- HTTPS API --------------------------------------------------------------------------------

class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def handle_one_request(self):
        # A kept-alive connection of a server that went away (ctl down) answers nothing more,
        # as a real API server that is gone would not: the client must reconnect.
        if Servers.api is not self.server:
            self.close_connection = True
            return
        super().handle_one_request()

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def authorized(self):
        if self.headers.get("Authorization") == "Bearer " + ARGS.token:
            return True
        self.send_json(401, status_obj(401, "Unauthorized", "Unauthorized"))
        return False

    def route(self):
        u = urllib.parse.urlsplit(self.path)
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(u.query).items()}
        parts = u.path.strip("/").split("/")
        if parts[:5] == ["apis", "kubeflow.org", "v2beta1", "namespaces", parts[4] if len(parts) > 4 else ""] \
                and len(parts) >= 6 and parts[5] == "mpijobs":
            return "mpijobs", parts[4], parts[6] if len(parts) > 6 else None, \
                parts[7] if len(parts) > 7 else None, q
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5 and \
                parts[4] in ("pods", "secrets"):
            return parts[4], parts[3], parts[5] if len(parts) > 5 else None, \
                parts[6] if len(parts) > 6 else None, q
        return None, None, None, None, q

    def count(self, key):
        with LOCK:
            STATE["requests"][key] = STATE["requests"].get(key, 0) + 1

    def do_GET(self):
        if not self.authorized():
            return
        kind, ns, name, sub, q = self.route()
        if not kind:
            return self.send_json(404, status_obj(404, "NotFound", "the server could not find the requested resource"))
        if kind == "pods" and name and sub == "log":
            self.count("GET log")
            return self.stream_log(name, q)
        if name:
            self.count("GET %s/name" % kind)
            with LOCK:
                obj = STATE[kind].get(name)
                obj = copy.deepcopy(obj) if obj else None
            if not obj:
                return self.send_json(404, status_obj(404, "NotFound", '%s "%s" not found' % (kind, name)))
            return self.send_json(200, obj)
        if kind == "secrets":
            return self.send_json(403, status_obj(
                403, "Forbidden", 'secrets is forbidden: User "system:serviceaccount:onebit:onebitd" '
                                  'cannot list resource "secrets" in API group ""'))
        if q.get("watch") in ("1", "true"):
            self.count("WATCH %s" % kind)
            return self.watch(kind, q)
        self.count("LIST %s" % kind)
        with LOCK:
            items = [copy.deepcopy(o) for o in STATE[kind].values()
                     if selector_match(q.get("labelSelector", ""), o["metadata"].get("labels", {}))]
            rv = STATE["rv"]
        self.send_json(200, {"kind": "MPIJobList" if kind == "mpijobs" else "PodList",
                             "apiVersion": "kubeflow.org/v2beta1" if kind == "mpijobs" else "v1",
                             "metadata": {"resourceVersion": str(rv)}, "items": items})

    def watch(self, kind, q):
        since = int(q.get("resourceVersion") or 0)
        sel = q.get("labelSelector", "")
        deadline = time.time() + min(int(q.get("timeoutSeconds") or 300), 300)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with LOCK:
            epoch = STATE["epoch"]
            if since < STATE["compacted"]:
                STATE["gone_sent"] += 1
                ev = {"type": "ERROR", "object": status_obj(
                    410, "Expired", "too old resource version: %d (%d)" % (since, STATE["compacted"]))}
                gone = True
            else:
                gone = False
        try:
            if gone:
                self.chunk(json.dumps(ev).encode() + b"\n")
                self.chunk(b"")
                return
            garbage_seen = STATE["garbage"]
            silenced = False
            while True:
                with LOCK:
                    # A stream of a server that went away (ctl down) ends, even one that began
                    # as it went.
                    if STATE["epoch"] != epoch or Servers.api is not self.server:
                        break
                    if STATE["silent"]:  # says nothing, and does not end at timeoutSeconds
                        if not silenced:
                            STATE["silent_watches"] = STATE.get("silent_watches", 0) + 1
                            silenced = True
                        LOCK.wait(0.5)
                        continue
                    if time.time() >= deadline:
                        break
                    out = [(rv, t, o) for rv, k, t, o in STATE["events"] if k == kind and rv > since
                           and selector_match(sel, o["metadata"].get("labels", {}))]
                    newest = STATE["rv"]
                    garbage = STATE["garbage"] != garbage_seen
                    garbage_seen = STATE["garbage"]
                    if not out and not garbage:
                        LOCK.wait(0.5)
                        continue
                if garbage:
                    self.chunk(b"this is not JSON\n")
                    self.chunk(b'{"type":"MODIFIED","object":"a string"}\n')
                    self.chunk(b'{"type":"MODIFIED","object":{"metadata":{"name":7,"labels":[]},"status":{"conditions":"x"}}}\n')
                    self.chunk(b'{"type": "ADDED", "object": {"metadata": {"name": "' + b"x" * (5 << 20) + b'"}}}\n')
                for rv, t, o in out:
                    self.chunk(json.dumps({"type": t, "object": o}).encode() + b"\n")
                since = max(since, newest)
            self.chunk(b"")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass
        self.close_connection = True

    def stream_log(self, pod, q):
        follow = q.get("follow") in ("1", "true")
        stamps = q.get("timestamps") in ("1", "true")
        since = q.get("sinceTime", "")
        with LOCK:
            if pod not in STATE["pods"]:
                return self.send_json(404, status_obj(404, "NotFound", 'pods "%s" not found' % pod))
            names = [c["name"] for c in STATE["pods"][pod]["spec"]["containers"]]
            epoch = STATE["epoch"]
        if q.get("container") and q["container"] not in names:
            return self.send_json(400, status_obj(
                400, "BadRequest", "container %s is not valid for pod %s" % (q["container"], pod)))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        try:
            while True:
                with LOCK:
                    lines = STATE["logs"].get(pod, [])[sent:]
                    p = STATE["pods"].get(pod)
                    over = (not p or p["status"]["phase"] in ("Succeeded", "Failed")
                            or STATE["epoch"] != epoch or Servers.api is not self.server)
                for ts, text in lines:
                    sent += 1
                    if since and ts[:19] + "Z" < since:
                        continue
                    self.chunk(((ts + " ") if stamps else "").encode() + text.encode() + b"\n")
                if over or not follow:
                    break
                if not lines:
                    with LOCK:
                        LOCK.wait(0.5)
            self.chunk(b"")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass

    def do_POST(self):
        if not self.authorized():
            return
        kind, ns, name, sub, q = self.route()
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        if kind == "secrets" and not name:
            return self.create_secret(ns, body)
        if kind != "mpijobs" or name:
            return self.send_json(405, status_obj(405, "MethodNotAllowed", "not here"))
        self.count("POST mpijobs")
        try:
            job = json.loads(body)
            jname = job["metadata"]["name"]
            assert job["apiVersion"] == "kubeflow.org/v2beta1" and job["kind"] == "MPIJob"
            assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] >= 1
        except Exception as e:  # noqa: BLE001 - the answer says what was wrong
            return self.send_json(422, status_obj(422, "Invalid", "MPIJob is invalid: %s" % e))
        with LOCK:
            if jname in STATE["mpijobs"]:
                return self.send_json(409, status_obj(409, "AlreadyExists",
                                                      'mpijobs.kubeflow.org "%s" already exists' % jname))
            job["metadata"].update(namespace=ns, uid="uid-" + jname, creationTimestamp=now_rfc3339(),
                                   generation=1)
            job["status"] = {}
            STATE["mpijobs"][jname] = job
            STATE["created"].append(jname)
            bump("mpijobs", "ADDED", job)
            out = copy.deepcopy(job)
            operate_created(job)
        self.send_json(201, out)

    def create_secret(self, ns, body):
        self.count("POST secrets")
        try:
            sec = json.loads(body)
            sname = sec["metadata"]["name"]
            assert sec["apiVersion"] == "v1" and sec["kind"] == "Secret"
            assert isinstance(sname, str) and 0 < len(sname) <= 253
            for k, v in sec.get("stringData", {}).items():
                sec.setdefault("data", {})[k] = base64.b64encode(v.encode()).decode()
            sec.pop("stringData", None)
            for v in sec.get("data", {}).values():
                base64.b64decode(v, validate=True)
            for o in sec["metadata"].get("ownerReferences", []):
                assert o["apiVersion"] and o["kind"] and o["name"] and o["uid"]
        except Exception as e:  # noqa: BLE001 - the answer says what was wrong
            return self.send_json(422, status_obj(422, "Invalid", "Secret is invalid: %r" % e))
        with LOCK:
            if sname in STATE["secrets"]:
                return self.send_json(409, status_obj(409, "AlreadyExists",
                                                      'secrets "%s" already exists' % sname))
            sec["metadata"].update(namespace=ns, uid="uid-secret-" + sname,
                                   creationTimestamp=now_rfc3339())
            STATE["rv"] += 1
            sec["metadata"]["resourceVersion"] = str(STATE["rv"])
            STATE["secrets"][sname] = sec
            out = copy.deepcopy(sec)
        self.send_json(201, out)

    def do_DELETE(self):
        if not self.authorized():
            return
        kind, ns, name, sub, q = self.route()
        self.count("DELETE %s" % kind)
        with LOCK:
            STATE["deletes"].append(self.path)
            obj = STATE.get(kind, {}).get(name) if kind else None
            if not obj:
                return self.send_json(404, status_obj(404, "NotFound", '%s "%s" not found' % (kind, name)))
            grace = q.get("gracePeriodSeconds")
            if kind == "secrets":
                del STATE["secrets"][name]
                return self.send_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                            "status": "Success", "details": {"name": name,
                                                                             "kind": "secrets"}})
            if kind == "pods":
                del STATE["pods"][name]
                bump("pods", "DELETED", obj)
                return self.send_json(200, obj)
            if grace == "0":
                remove_job(name)
            elif not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = now_rfc3339()
                if q.get("propagationPolicy") == "Foreground":
                    obj["metadata"]["finalizers"] = ["foregroundDeletion"]
                bump("mpijobs", "MODIFIED", obj)
                threading.Thread(target=graceful_delete, args=(name,), daemon=True).start()
            out = copy.deepcopy(obj)
        self.send_json(200, out)


# ---- control ----------------------------------------------------------------------------------

class Servers:
    api = None
    thread = None


class TlsServer(ThreadingHTTPServer):
    """TLS whose handshake runs in the connection's own thread, under a time limit: a client
    that connects and says nothing cannot hold up accept() for the others."""
    daemon_threads = True
    ctx = None

    def finish_request(self, request, client_address):
        try:
            request.settimeout(5)
            tls = self.ctx.wrap_socket(request, server_side=True)
            tls.settimeout(None)
        except (ssl.SSLError, OSError):
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            try:
                tls.close()
            except OSError:
                pass


def start_api(port):
    srv = TlsServer(("127.0.0.1", port), Api)
    srv.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    srv.ctx.load_cert_chain(ARGS.cert, ARGS.key)
    Servers.api = srv
    Servers.thread = threading.Thread(target=srv.serve_forever, daemon=True)
    Servers.thread.start()
    return srv.server_address[1]


class Ctl(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with LOCK:
            st = {"mpijobs": STATE["mpijobs"], "pods": STATE["pods"], "requests": STATE["requests"],
                  "deletes": STATE["deletes"], "gone_sent": STATE["gone_sent"], "rv": STATE["rv"],
                  "created": STATE["created"], "secrets": STATE["secrets"],
                  "silent_watches": STATE.get("silent_watches", 0)}
            body = json.loads(json.dumps(st))
        self.reply(200, body)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        arg = json.loads(self.rfile.read(n) or b"{}")
        cmd = self.path.rsplit("/", 1)[-1]
        try:
            result = self.run_command(cmd, arg)
        except KeyError as e:
            return self.reply(404, {"error": "no such object: %s" % e})
        self.reply(200, result or {})

    def run_command(self, cmd, arg):
        if cmd == "down":
            srv = Servers.api
            with LOCK:
                STATE["epoch"] += 1
                LOCK.notify_all()
            Servers.api = None
            srv.shutdown()
            srv.server_close()
            return {}
        if cmd == "up":
            start_api(ARGS.port)
            return {}
        with LOCK:
            if cmd == "mode":
                STATE["mode"] = arg["on_create"]
            elif cmd == "compact":
                STATE["compacted"] = STATE["rv"] + 1
                STATE["events"] = []
                STATE["rv"] += 5
                STATE["epoch"] += 1
                LOCK.notify_all()
            elif cmd == "restarting":
                job = STATE["mpijobs"][arg["name"]]
                set_condition(job, "Restarting", reason="MPIJobRestarting",
                              message="a worker pod is being restarted")
                bump("mpijobs", "MODIFIED", job)
            elif cmd == "precreate":  # an MPIJob of that name that is someone else's
                job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                       "metadata": {"name": arg["name"], "namespace": "training",
                                    "labels": {"app.kubernetes.io/managed-by": "onebitd",
                                               "onebit.dev/job-id": "job-elsewhere",
                                               "onebit.dev/attempt": "1"}},
                       "spec": {"mpiReplicaSpecs": {}}, "status": {}}
                STATE["mpijobs"][arg["name"]] = job
                bump("mpijobs", "ADDED", job)
            elif cmd == "garbage":
                STATE["garbage"] += 1
                LOCK.notify_all()
            elif cmd == "log":
                if "index" in arg:
                    pname = "%s-worker-%d" % (arg["name"], arg["index"])
                    if pname not in STATE["pods"]:
                        raise KeyError(pname)
                else:
                    pname = [p for p in pods_of(arg["name"]) if p["metadata"]["labels"][
                        "training.kubeflow.org/job-role"] == "launcher"][0]["metadata"]["name"]
                for text in arg["text"] if isinstance(arg["text"], list) else [arg["text"]]:
                    STATE["logs"].setdefault(pname, []).append((ts_nano(), text))
                LOCK.notify_all()
            elif cmd == "silence":
                STATE["silent"] = bool(arg["on"])
                LOCK.notify_all()
            elif cmd == "precreate_secret":
                sec = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                       "metadata": {"name": arg["name"], "namespace": "training",
                                    "uid": "uid-secret-" + arg["name"],
                                    "labels": {"app.kubernetes.io/managed-by": "onebitd",
                                               "onebit.dev/job-id": arg["job"],
                                               "onebit.dev/attempt": str(arg["attempt"])}},
                       "data": {"token": base64.b64encode(arg["token"].encode()).decode()}}
                STATE["rv"] += 1
                sec["metadata"]["resourceVersion"] = str(STATE["rv"])
                STATE["secrets"][arg["name"]] = sec
            elif cmd == "succeed":
                job = STATE["mpijobs"][arg["name"]]
                for p in pods_of(arg["name"]):
                    if p["metadata"]["labels"]["training.kubeflow.org/job-role"] == "launcher":
                        pod_terminated(p, 0, "Completed")
                        bump("pods", "MODIFIED", p)
                for p in pods_of(arg["name"]):  # cleanPodPolicy: Running
                    if p["status"]["phase"] == "Running":
                        del STATE["pods"][p["metadata"]["name"]]
                        bump("pods", "DELETED", p)
                set_condition(job, "Running", status="False", reason="MPIJobSucceeded")
                set_condition(job, "Succeeded", reason="MPIJobSucceeded",
                              message="MPIJob default/%s successfully completed." % arg["name"])
                job["status"]["completionTime"] = now_rfc3339()
                bump("mpijobs", "MODIFIED", job)
            elif cmd == "fail_worker":
                job = STATE["mpijobs"][arg["name"]]
                code, reason = arg.get("exit_code", 137), arg.get("reason", "Error")
                w = STATE["pods"]["%s-worker-%d" % (arg["name"], arg.get("index", 0))]
                pod_terminated(w, code, reason)
                bump("pods", "MODIFIED", w)
                for p in pods_of(arg["name"]):
                    if p["metadata"]["labels"]["training.kubeflow.org/job-role"] == "launcher":
                        pod_terminated(p, arg.get("launcher_exit_code", code), "Error")
                        bump("pods", "MODIFIED", p)
                set_condition(job, "Running", status="False", reason="MPIJobFailed")
                set_condition(job, "Failed", reason="BackoffLimitExceeded",
                              message="Job has reached the specified backoff limit")
                bump("mpijobs", "MODIFIED", job)
            else:
                raise KeyError(cmd)
        return {}


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--ctl-port-file", required=True)
    ap.add_argument("--grace", type=float, default=1.0)
    ARGS = ap.parse_args()
    ARGS.port = start_api(0)
    ctl = ThreadingHTTPServer(("127.0.0.1", 0), Ctl)
    ctl.daemon_threads = True
    for path, port in ((ARGS.port_file, ARGS.port), (ARGS.ctl_port_file, ctl.server_address[1])):
        with open(path + ".tmp", "w") as f:
            f.write("%d\n" % port)
        import os
        os.rename(path + ".tmp", path)
    ctl.serve_forever()


if __name__ == "__main__":
    socket.setdefaulttimeout(None)
    main()
