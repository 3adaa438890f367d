#!/usr/bin/env python3
"""Checks docker/kubernetes/ (kustomize layout) without a cluster:
- every YAML file parses (python3-yaml), every document has apiVersion, kind and metadata.name;
- every kustomization's resources and patches name files or directories that exist, and every
  file of the tree is used by some kustomization;
- the Role grants exactly what the Kubernetes launcher uses (MPIJobs, pods, pods/log, and
  create/get/delete on Secrets for each attempt's report credential);
- the API token is never in the tree: a secretGenerator reads it from base/token, a file the
  installer makes (ignored by git), and the StatefulSet reads it as a file;
- onebitd's StatefulSet: one replica, a claim template for its state, the checkpoint claim at
  the checkpoint directory, a gRPC readiness probe and an HTTP /healthz liveness probe on the
  ports it serves, resource requests, the token from the Secret;
- every onebitd flag in the manifests is one that `onebitd --help` lists;
- with kubectl installed: without base/token rendering fails naming it; with one, each overlay
  renders (`kubectl kustomize`) with its patches applied and the token in the Secret.
Exits non-zero on any mismatch.
usage: test_manifests.py SOURCE_DIR ONEBITD
"""
import base64
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    print("FAILED: python3-yaml is needed (apt-get install python3-yaml)")
    sys.exit(1)

SRC, ONEBITD = sys.argv[1], sys.argv[2]
ROOT = os.path.abspath(os.path.join(SRC, "docker", "kubernetes"))
failed = 0


def check(ok, what, detail=""):
    global failed
    print("[ %s ] %s%s" % ("PASSED" if ok else "FAILED", what, "" if ok else ": " + str(detail)))
    failed += 0 if ok else 1


docs = {}  # path -> [documents]
for d, _, files in os.walk(ROOT):
    for f in files:
        p = os.path.join(d, f)
        if p == os.path.join(ROOT, "base", "token"):  # the installer's token, never committed
            continue
        if not f.endswith((".yaml", ".yml")):
            check(False, "only YAML under docker/kubernetes", p)
            continue
        try:
            with open(p) as fh:
                docs[p] = [x for x in yaml.safe_load_all(fh) if x is not None]
        except yaml.YAMLError as e:
            check(False, "%s parses" % os.path.relpath(p, SRC), e)
check(len(docs) >= 10, "%d YAML files parse" % len(docs))

objects = []
for p, ds in docs.items():
    for x in ds:
        if not isinstance(x, dict):
            check(False, "%s: a mapping" % p)
            continue
        if os.path.basename(p) == "kustomization.yaml":
            continue
        ok = isinstance(x.get("apiVersion"), str) and isinstance(x.get("kind"), str) and \
            isinstance(x.get("metadata", {}).get("name"), str)
        if not ok:
            check(False, "%s: apiVersion, kind and metadata.name" % os.path.relpath(p, SRC), x)
        objects.append((p, x))

used = set()
for p, ds in docs.items():
    if os.path.basename(p) != "kustomization.yaml":
        continue
    k = ds[0]
    used.add(p)
    refs = list(k.get("resources", [])) + [x["path"] for x in k.get("patches", []) if "path" in x]
    missing = []
    for r in refs:
        t = os.path.normpath(os.path.join(os.path.dirname(p), r))
        if os.path.isdir(t):
            if not os.path.exists(os.path.join(t, "kustomization.yaml")):
                missing.append(r + " (no kustomization.yaml)")
        elif os.path.isfile(t):
            used.add(t)
        else:
            missing.append(r)
    check(not missing and refs, "%s references files that exist" % os.path.relpath(p, SRC), missing)
unused = sorted(os.path.relpath(p, SRC) for p in docs if p not in used)
check(not unused, "every manifest is used by a kustomization", unused)
overlays = sorted(os.listdir(os.path.join(ROOT, "overlays")))
check(overlays == ["cpu", "gpu"], "overlays for CPU and GPU workers", overlays)


def by_kind(kind, base_only=True):
    return [x for p, x in objects if x["kind"] == kind and (not base_only or "/base/" in p)]


role = by_kind("Role")
rules = sorted((tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"])))
               for r in role[0]["rules"]) if role else []
want = sorted([(("kubeflow.org",), ("mpijobs",), ("create", "delete", "get", "list", "watch")),
               (("",), ("pods",), ("delete", "get", "list", "watch")),
               (("",), ("pods/log",), ("get",)),
               (("",), ("secrets",), ("create", "delete", "get"))])
check(rules == want, "the Role allows exactly MPIJobs, pods, pods/log and Secrets (create, get, "
      "delete: no list, no watch, no update)", rules)
# The launcher's files: launcher_kubernetes.c and the k8s_* files beside it.
ksrc = os.path.join(SRC, "service", "src")
launcher = "".join(open(os.path.join(ksrc, f)).read() for f in sorted(os.listdir(ksrc))
                   if f == "launcher_kubernetes.c" or f.startswith("k8s_"))
check("/mpijobs" in launcher and "/pods" in launcher and "/log?" in launcher and
      "/secrets" in launcher and "configmaps" not in launcher and
      not re.search(r'"(PATCH|PUT)"', launcher),
      "the launcher uses only those resources, and never PATCH or PUT")
rb = by_kind("RoleBinding")
check(rb and rb[0]["roleRef"]["name"] == role[0]["metadata"]["name"] and
      rb[0]["subjects"][0]["name"] == "onebitd", "the RoleBinding gives the Role to onebitd's account")

sts = by_kind("StatefulSet")
check(len(sts) == 1, "onebitd is one StatefulSet")
s = sts[0]["spec"]
pod = s["template"]["spec"]
c = pod["containers"][0]
ports = {p["name"]: p["containerPort"] for p in c["ports"]}
check(s["replicas"] == 1 and pod.get("serviceAccountName") == "onebitd",
      "one replica, onebitd's service account")
check(c["readinessProbe"].get("grpc", {}).get("port") == ports.get("grpc") == 50051,
      "readiness: Kubernetes' gRPC probe (grpc.health.v1) on the gRPC port", c["readinessProbe"])
lp = c["livenessProbe"].get("httpGet", {})
check(lp.get("path") == "/healthz" and lp.get("port") in ("http", ports.get("http")),
      "liveness: GET /healthz on the REST port", c["livenessProbe"])
check(set(c["resources"]["requests"]) == {"cpu", "memory"}, "resource requests", c["resources"])
mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in pod["volumes"]}
tmpl = [t["metadata"]["name"] for t in s.get("volumeClaimTemplates", [])]
args = c["args"]
state_dir = [a.split("=", 1)[1] for a in args if a.startswith("--state-dir=")][0]
claim_arg = [a.split("=", 1)[1] for a in args if a.startswith("--k8s-checkpoint-claim=")][0]
check("state" in tmpl and mounts.get("state") == state_dir,
      "the SQLite store on the StatefulSet's own claim", (tmpl, mounts))
pvcs = {x["metadata"]["name"]: x for x in by_kind("PersistentVolumeClaim")}
check(claims.get("checkpoints") == claim_arg and claim_arg in pvcs and
      pvcs[claim_arg]["spec"]["accessModes"] == ["ReadWriteMany"] and
      mounts.get("checkpoints") == state_dir + "/checkpoints",
      "checkpoints on a ReadWriteMany claim at <state>/checkpoints, the claim given to the launcher",
      (claims, mounts, claim_arg))
env = {e["name"]: e for e in c["env"]}
base_k = docs[os.path.join(ROOT, "base", "kustomization.yaml")][0]
gen = base_k.get("secretGenerator", [])
check(not by_kind("Secret", base_only=False) and len(gen) == 1 and gen[0].get("files") == ["token"]
      and gen[0].get("options", {}).get("disableNameSuffixHash") is True,
      "no Secret (no token) in the tree: a secretGenerator makes onebitd-token from base/token", gen)
ignored = subprocess.run(["git", "-C", SRC, "check-ignore", "-q", "docker/kubernetes/base/token"])
check(ignored.returncode in (0, 128), "git ignores docker/kubernetes/base/token", ignored.returncode)
vols = {v["name"]: v for v in pod["volumes"]}
tok_vol = [n for n, v in vols.items() if v.get("secret", {}).get("secretName") == gen[0]["name"]]
tok_arg = [a.split("=", 1)[1] for a in args if a.startswith("--token-file=")]
check(tok_vol and tok_arg and mounts.get(tok_vol[0]) and
      tok_arg[0] == mounts[tok_vol[0]] + "/token" and "ONEBIT_TOKEN" not in env and
      vols[tok_vol[0]]["secret"].get("defaultMode") == 0o440,
      "onebitd reads the token from the Secret as a file (--token-file, mode 0440), not its "
      "environment", (tok_vol, tok_arg, mounts))
svc = [x for x in by_kind("Service") if x["spec"].get("clusterIP") != "None"][0]
check(sorted(p["port"] for p in svc["spec"]["ports"]) == [8080, 50051],
      "the Service exposes gRPC and REST", svc["spec"]["ports"])

helptext = subprocess.run([ONEBITD, "--help"], capture_output=True, text=True).stdout
flags = set()
for p, x in objects:
    if x["kind"] == "StatefulSet":
        for cont in x["spec"]["template"]["spec"]["containers"]:
            flags.update(a.split("=", 1)[0] for a in cont.get("args", []) if a.startswith("--"))
unknown = sorted(f for f in flags if not re.search(r"(^|\s)%s[\s=]" % re.escape(f), helptext))
check(flags and not unknown, "every onebitd flag in the manifests is one onebitd has", unknown)
gpu_args = [a for p, x in objects if "/gpu/" in p and x["kind"] == "StatefulSet"
            for a in x["spec"]["template"]["spec"]["containers"][0]["args"]]
check(any(a.startswith("--k8s-slots-per-worker=") for a in gpu_args),
      "the GPU overlay sets GPUs (slots) per worker")

# With kubectl (kustomize built in), each overlay renders, and the patches land where meant.
# Rendered from a copy of the tree, first without the token file, then with one.
kubectl = shutil.which("kubectl")
if not kubectl:
    print("[ SKIPPED ] rendering the overlays: no kubectl")
work = tempfile.mkdtemp()
copy = os.path.join(work, "kubernetes")
shutil.copytree(ROOT, copy, ignore=lambda d, names: ["token"] if d == os.path.join(ROOT, "base") else [])
if kubectl:
    r = subprocess.run([kubectl, "kustomize", os.path.join(copy, "overlays", "cpu")],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "base/token" in r.stderr and "no such file" in r.stderr,
          "without base/token, kubectl kustomize fails naming the file (no default token)",
          (r.returncode, r.stderr[-300:]))
TOKEN = "0123456789abcdef" * 4
with open(os.path.join(copy, "base", "token"), "w") as fh:
    fh.write(TOKEN + "\n")  # as `openssl rand -hex 32 > token` writes it
for ov, image, slots in (("cpu", "onebit/worker:", "1"), ("gpu", "onebit/worker-cuda:", "8")):
    if not kubectl:
        break
    r = subprocess.run([kubectl, "kustomize", os.path.join(copy, "overlays", ov)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        check(False, "kubectl kustomize overlays/%s" % ov, r.stderr[-300:])
        continue
    rendered = [x for x in yaml.safe_load_all(r.stdout) if x]
    kinds = sorted(x["kind"] for x in rendered)
    st = [x for x in rendered if x["kind"] == "StatefulSet"]
    c = st[0]["spec"]["template"]["spec"]["containers"][0] if st else {}
    env = {e["name"]: e for e in c.get("env", [])}
    secs = [x for x in rendered if x["kind"] == "Secret"]
    tok = base64.b64decode(secs[0].get("data", {}).get("token", "")).decode() if secs else ""
    check(len(secs) == 1 and secs[0]["metadata"]["name"] == "onebitd-token" and
          tok.strip() == TOKEN, "kubectl kustomize overlays/%s: Secret onebitd-token holds the "
          "file's token" % ov, secs)
    ok = (kinds == sorted(["Namespace", "ServiceAccount", "ServiceAccount", "Role", "RoleBinding",
                           "Secret", "PersistentVolumeClaim", "Service", "Service", "StatefulSet"])
          and all(x["metadata"].get("namespace") == "onebit" for x in rendered if x["kind"] != "Namespace")
          and env.get("ONEBIT_K8S_IMAGE", {}).get("value", "").startswith(image)
          and "--token-file=/etc/onebit/token/token" in c.get("args", [])
          and "--k8s-slots-per-worker=" + slots in c.get("args", [])
          and "--launcher=kubernetes" in c.get("args", [])
          and c.get("readinessProbe", {}).get("grpc", {}).get("port") == 50051)
    check(ok, "kubectl kustomize overlays/%s: every object in namespace onebit, the worker image %s..., "
          "%s slots per worker, the token and the probes kept" % (ov, image, slots),
          (kinds, env, c.get("args")))

shutil.rmtree(work, ignore_errors=True)
print("%d failed" % failed)
sys.exit(1 if failed else 0)
