#!/usr/bin/env bash
# onebitd --launcher kubernetes against a stand-in API server (tests/k8s_standin.py: HTTPS with a
# CA made here by openssl, a bearer token, the real MPIJob v2beta1 and Pod JSON, chunked watch
# streams, resourceVersions, 404/409/410). No Kubernetes runs here and no worker runs in this
# test: the stand-in plays the MPI Operator and the test moves MPIJobs and pods through states.
#   - the MPIJob onebitd creates (labels, backoffLimit 0, WaitForWorkersReady, slots, volumes,
#     the mpirun command line), a launcher log line copied to worker.log, success;
#   - the report credential in a Secret of its own (owned by the MPIJob, labelled, read through a
#     secretKeyRef; the MPIJob carries no token), deleted when the attempt ends; a Secret of that
#     name left by an earlier start is replaced, one of another job's ends the attempt (409);
#   - each worker pod's log copied too, "[worker I] " before its lines, up to its size limit;
#   - a watch that falls silent: dropped after --k8s-watch-idle, relisted, a change seen;
#   - deleting a job removes its spec copies and queues the deletion of its MPIJobs and Secrets;
#   - a worker that dies (exit 137): the attempt's reason names the pod, a second MPIJob resumes;
#   - an OOMKilled worker: FAILED without a retry, the reason says OOMKilled;
#   - unschedulable pods: a notice, then the attempt ends after --k8s-pending-timeout;
#   - cancel: a graceful (foreground) delete, the job CANCELLED once the MPIJob is gone;
#   - onebitd SIGKILLed and started again: it re-attaches to the same MPIJob (no new one);
#   - the API server going away and coming back (watch reconnect), and 410 Gone (relist);
#   - hostile lines on the watch streams; a name taken by another job's MPIJob (409);
#   - device: cuda (GPU limits per worker pod), the Restarting condition, a cancel whose pods
#     outlast the grace (then deleted at once); a kubeconfig with an exec plugin refused;
#   - program jobs: one whose program is on the checkpoint volume becomes an MPIJob like any
#     other (onebit-worker execs it); uploaded programs are refused at submit over REST, gRPC and
#     onebitctl, and with --k8s-image-python no so are Python programs (not a /bin/sh one).
# usage: test_kubernetes_standin.sh ONEBITD OBRPC EXAMPLES_DIR STANDIN ONEBITCTL
set -u
ONEBITD=$1
OBRPC=$2
EXAMPLES=$3
STANDIN=$4
ONEBITCTL=$5
for p in python3 openssl curl jq; do
  command -v "$p" > /dev/null || { echo "FAILED: $p is needed"; exit 1; }
done
. "$(dirname "$0")/daemon_harness.sh"
SPID=""
trap '[ -n "$SPID" ] && kill "$SPID" 2>/dev/null; cleanup' EXIT

# --- a CA, the server's certificate, the token, the stand-in, a kubeconfig ---------------------
K=$TMP/k8s
mkdir -p "$K"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=standin-ca" \
  -keyout "$K/ca.key" -out "$K/ca.crt" 2> /dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$K/srv.key" -out "$K/srv.csr" 2> /dev/null
printf 'subjectAltName=IP:127.0.0.1\n' > "$K/ext"
openssl x509 -req -in "$K/srv.csr" -CA "$K/ca.crt" -CAkey "$K/ca.key" -CAcreateserial -days 1 \
  -extfile "$K/ext" -out "$K/srv.crt" 2> /dev/null
TOKEN=standin-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
python3 "$STANDIN" --cert "$K/srv.crt" --key "$K/srv.key" --token "$TOKEN" \
  --port-file "$K/port" --ctl-port-file "$K/ctl" --grace 1 > "$K/standin.log" 2>&1 &
SPID=$!
for _ in $(seq 100); do [ -s "$K/ctl" ] && break; sleep 0.05; done
APORT=$(cat "$K/port" 2>/dev/null)
CTL=http://127.0.0.1:$(cat "$K/ctl" 2>/dev/null)/ctl
[ -n "$APORT" ] || { echo "FAILED: the stand-in did not start"; cat "$K/standin.log"; exit 1; }
cat > "$K/kubeconfig" << EOF
apiVersion: v1
kind: Config
current-context: standin
clusters:
- name: standin
  cluster:
    server: https://127.0.0.1:$APORT
    certificate-authority-data: $(base64 -w0 < "$K/ca.crt")
contexts:
- name: standin
  context: {cluster: standin, user: onebitd, namespace: training}
users:
- name: onebitd
  user:
    token: $TOKEN
EOF
ctl() { curl -s -X POST "$CTL/$1" -d "${2:-{\}}"; }
state() { curl -s "$CTL/state"; }
api() { curl -s --cacert "$K/ca.crt" -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$APORT$1"; }
check "the stand-in answers over TLS with the token only" '[ "$(api /api/v1/namespaces/training/pods | jq -r .kind)" = PodList ] && [ "$(curl -s --cacert "$K/ca.crt" -o /dev/null -w "%{http_code}" "https://127.0.0.1:$APORT/api/v1/namespaces/training/pods")" = 401 ]'

start_k8s_daemon() {
  rm -f "$TMP/ready"
  "$ONEBITD" --launcher kubernetes --kubeconfig "$K/kubeconfig" --k8s-image registry.example/onebit/worker:1.0 \
    --k8s-checkpoint-claim onebit-checkpoints --k8s-pending-timeout 2 --k8s-cpu 2 --k8s-memory 3Gi \
    --grpc 127.0.0.1:0 --rest 127.0.0.1:0 --report-addr onebitd.training.svc:50051 \
    --state-dir "$TMP/var" --ready-file "$TMP/ready" --insecure-no-auth --slots 8 \
    --backoff 0.2 --cancel-grace 20 --k8s-watch-idle 3 --k8s-worker-log-max 4096 \
    "$@" >> "$TMP/onebitd.log" 2>&1 &
  PID=$!
  for _ in $(seq 100); do [ -s "$TMP/ready" ] && break; sleep 0.05; done
  GRPC=127.0.0.1:$(sed -n 's/^grpc=//p' "$TMP/ready")
  REST=127.0.0.1:$(sed -n 's/^rest=//p' "$TMP/ready")
}
wait_for() { # SECONDS COMMAND...: until COMMAND succeeds
  local n=$(($1 * 10)); shift
  for _ in $(seq $n); do eval "$@" && return 0; sleep 0.1; done
  return 1
}
jstate() { get "$1" | jq -r .state; }
mpijob() { state | jq -c --arg n "$1" '.mpijobs[$n]'; }
secret() { state | jq -c --arg n "$1" '.secrets[$n]'; }
events() { curl -s -N --max-time 3 "http://$REST/v1/jobs/$1/events" | grep -o '"message":"[^"]*"'; }
submit() { rpc submit "$TMP/job.yaml" "$1" "${2:-2}" 2>/dev/null | jq -r .id; }
# The MPIJob onebit-<job>-<attempt> Succeeded, as its workers would leave it: the checkpoint of the
# job's last step on the volume first (exit 0 without it is a failed attempt).
succeed() { # MPIJOB
  local job=${1#onebit-}
  "$FAKE_CKPT_WRITER" "$TMP/var/checkpoints/${job%-*}" "$(jq -r .steps "$TMP/var/jobs/${job%-*}/spec.json")" &&
    ctl succeed "{\"name\":\"$1\"}" > /dev/null
}

start_k8s_daemon
[ -s "$TMP/ready" ] || { echo "FAILED: onebitd did not start"; cat "$TMP/onebitd.log"; exit 1; }
cp "$EXAMPLES/synthetic-mlp-onebit.yaml" "$TMP/job.yaml"

# --- 1. the MPIJob, a log line, success ---------------------------------------------------------
a=$(submit 2)
n1=onebit-$a-1
wait_for 10 '[ "$(mpijob "$n1")" != null ]'
m=$(mpijob "$n1")
check "an attempt becomes MPIJob $n1 in the context's namespace" '[ "$(echo "$m" | jq -r .metadata.namespace)" = training ] && [ "$(echo "$m" | jq -r .apiVersion)" = kubeflow.org/v2beta1 ]' "$m"
check "its labels tie it to the job and the attempt" '[ "$(echo "$m" | jq -r ".metadata.labels[\"onebit.dev/job-id\"]")" = "$a" ] && [ "$(echo "$m" | jq -r ".metadata.labels[\"onebit.dev/attempt\"]")" = 1 ] && [ "$(echo "$m" | jq -r ".metadata.labels[\"app.kubernetes.io/managed-by\"]")" = onebitd ]' "$(echo "$m" | jq -c .metadata.labels)"
check "backoffLimit 0, WaitForWorkersReady, cleanPodPolicy Running, 2 workers of 1 slot" '[ "$(echo "$m" | jq -c "[.spec.runPolicy.backoffLimit, .spec.launcherCreationPolicy, .spec.runPolicy.cleanPodPolicy, .spec.mpiReplicaSpecs.Worker.replicas, .spec.slotsPerWorker, .spec.mpiReplicaSpecs.Launcher.replicas]")" = "[0,\"WaitForWorkersReady\",\"Running\",2,1,1]" ]' "$(echo "$m" | jq -c .spec.runPolicy)"
L=$(echo "$m" | jq -c '.spec.mpiReplicaSpecs.Launcher.template.spec.containers[0]')
W=$(echo "$m" | jq -c '.spec.mpiReplicaSpecs.Worker.template.spec.containers[0]')
spec_copy=$(echo "$L" | jq -r '.args | index("--spec") as $i | .[$i+1]')
check "the launcher runs mpirun -np 2 onebit-worker with the job's arguments, no shell" '[ "$(echo "$L" | jq -r ".command[0]")" = mpirun ] && echo "$L" | jq -e ".args[0:2] == [\"-np\",\"2\"] and (.args | index(\"onebit-worker\")) and (.args | index(\"--report\")) and (.args | index(\"--resume\") | not)" > /dev/null' "$L"
check "the spec is shared on the checkpoint volume, identical to the job's" 'cmp -s "$spec_copy" "$TMP/var/jobs/$a/spec.json" && [[ "$spec_copy" == "$TMP/var/checkpoints/"* ]]' "$spec_copy"
WS=$(echo "$m" | jq -c '.spec.mpiReplicaSpecs.Worker.template.spec')
check "the workers mount the attempt's Secret read-only (0440), the launcher does not" '[ "$(echo "$WS" | jq -c ".volumes[] | select(.name==\"report-credential\") | .secret")" = "{\"secretName\":\"$n1-report\",\"defaultMode\":288,\"items\":[{\"key\":\"token\",\"path\":\"token\"}]}" ] && [ "$(echo "$W" | jq -c ".volumeMounts[] | select(.name==\"report-credential\")")" = "{\"name\":\"report-credential\",\"mountPath\":\"/var/run/onebit/report\",\"readOnly\":true}" ] && ! echo "$m" | jq -e ".spec.mpiReplicaSpecs.Launcher.template.spec.volumes[]? | select(.name==\"report-credential\")" > /dev/null' "$WS"
check "the credential is in no environment: the launcher passes only its path (-x ONEBIT_REPORT_TOKEN_FILE)" '[ "$(echo "$L" | jq -c "[.env[] | select(.name | startswith(\"ONEBIT_REPORT\"))]")" = "[{\"name\":\"ONEBIT_REPORT_TOKEN_FILE\",\"value\":\"/var/run/onebit/report/token\"}]" ] && echo "$L" | jq -e "(.args | index(\"ONEBIT_REPORT_TOKEN_FILE\")) and (.args | index(\"ONEBIT_REPORT_TOKEN\") | not)" > /dev/null && ! echo "$m" | grep -q secretKeyRef' "$(echo "$L" | jq -c .env)"
wait_for 10 '[ "$(state | jq -c --arg n "$n1-report" ".secrets[\$n]")" != null ]'
sec=$(state | jq -c --arg n "$n1-report" '.secrets[$n]')
rtok=$(echo "$sec" | jq -r .data.token | base64 -d 2>/dev/null)
check "the Secret $n1-report holds the attempt's credential (64 hex digits), not the admin token" '[[ "$rtok" =~ ^[0-9a-f]{64}$ ]] && [ "$rtok" != "$TOKEN" ] && [ "$(echo "$sec" | jq -r .type)" = Opaque ]' "$sec"
check "the Secret is labelled for the job and the attempt and owned by the MPIJob (its uid)" '[ "$(echo "$sec" | jq -r ".metadata.labels[\"onebit.dev/job-id\"]")" = "$a" ] && [ "$(echo "$sec" | jq -r ".metadata.labels[\"onebit.dev/attempt\"]")" = 1 ] && [ "$(echo "$sec" | jq -r ".metadata.labels[\"app.kubernetes.io/managed-by\"]")" = onebitd ] && [ "$(echo "$sec" | jq -c ".metadata.ownerReferences | map([.apiVersion, .kind, .name, .uid])")" = "[[\"kubeflow.org/v2beta1\",\"MPIJob\",\"$n1\",\"$(mpijob "$n1" | jq -r .metadata.uid)\"]]" ]' "$sec"
check "the MPIJob as stored holds no credential" '[ -n "$rtok" ] && ! mpijob "$n1" | grep -q "$rtok" && ! mpijob "$n1" | grep -q "$(echo "$sec" | jq -r .data.token)"'
check "mpirun tags every rank's line (--tag-output)" 'echo "$L" | jq -e ".args | index(\"--tag-output\")" > /dev/null' "$L"
check "workers: the image, the requests, the checkpoint claim at the checkpoint dir, no GPU" '[ "$(echo "$W" | jq -r .image)" = registry.example/onebit/worker:1.0 ] && [ "$(echo "$W" | jq -c .resources)" = "{\"requests\":{\"cpu\":\"2\",\"memory\":\"3Gi\"}}" ] && [ "$(echo "$W" | jq -r .volumeMounts[0].mountPath)" = "$TMP/var/checkpoints" ] && [ "$(echo "$m" | jq -r .spec.mpiReplicaSpecs.Worker.template.spec.volumes[0].persistentVolumeClaim.claimName)" = onebit-checkpoints ]' "$W"
check "pods run as non-root" '[ "$(echo "$m" | jq .spec.mpiReplicaSpecs.Worker.template.spec.securityContext.runAsNonRoot)" = true ]'
ctl log "{\"name\":\"$n1\",\"text\":\"hello from the launcher pod\"}" > /dev/null
check "the launcher pod's log reaches the job's worker.log" 'wait_for 10 "grep -q \"^hello from the launcher pod$\" \"$TMP/var/jobs/$a/worker.log\""' "$(cat "$TMP/var/jobs/$a/worker.log")"
ctl log "{\"name\":\"$n1\",\"index\":0,\"text\":\"sshd on worker zero\"}" > /dev/null
ctl log "{\"name\":\"$n1\",\"index\":1,\"text\":\"sshd on worker one\"}" > /dev/null
check "each worker pod's log reaches worker.log, its lines prefixed with its replica index" 'wait_for 10 "grep -q \"^\[worker 0\] sshd on worker zero$\" \"$TMP/var/jobs/$a/worker.log\" && grep -q \"^\[worker 1\] sshd on worker one$\" \"$TMP/var/jobs/$a/worker.log\""' "$(cat "$TMP/var/jobs/$a/worker.log")"
big=$(python3 -c 'import json; print(json.dumps(["line %03d " % i + "x" * 90 for i in range(60)]))')
ctl log "{\"name\":\"$n1\",\"index\":1,\"text\":$big}" > /dev/null
check "a worker pod's log is copied up to --k8s-worker-log-max, then a line says so" 'wait_for 10 "grep -q \"^\[worker 1\] onebitd: pod $n1-worker-1 wrote more than 4096 bytes of log\" \"$TMP/var/jobs/$a/worker.log\"" && grep -q "^\[worker 1\] line 000 x" "$TMP/var/jobs/$a/worker.log" && ! grep -q "line 059" "$TMP/var/jobs/$a/worker.log" && [ "$(grep -c "^\[worker 1\]" "$TMP/var/jobs/$a/worker.log")" -lt 45 ]' "$(grep -c . "$TMP/var/jobs/$a/worker.log")"
logs=$(curl -s "http://$REST/v1/jobs/$a/logs?maxBytes=65536" | jq -r .data | base64 -d 2>/dev/null)
check "GetJobLogs serves the launcher's and the workers' lines" 'echo "$logs" | grep -q "^hello from the launcher pod$" && echo "$logs" | grep -q "^\[worker 0\] sshd on worker zero$"' "$logs"
succeed "$n1"
wait_for 15 '[ "$(jstate "$a")" = SUCCEEDED ]'
j=$(get "$a")
check "MPIJob Succeeded: the job SUCCEEDED, its attempt carries the MPIJob's name" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ "$(echo "$j" | jq -r .attempts[0].external_id)" = "$n1" ] && [ "$(echo "$j" | jq .restarts)" = 0 ]' "$j"
check "the log line was copied once (over reconnects of the idle stream)" '[ "$(grep -c "hello from the launcher pod" "$TMP/var/jobs/$a/worker.log")" = 1 ] && [ "$(grep -c "sshd on worker zero" "$TMP/var/jobs/$a/worker.log")" = 1 ]'
check "the attempt ended: its Secret is deleted" 'wait_for 10 "[ \"\$(secret $n1-report)\" = null ]" && state | jq -r ".deletes[]" | grep -q "/secrets/$n1-report$"' "$(state | jq -c .deletes)"
[ -s "$spec_copy" ] || echo "note: the spec copy is missing before the delete"
del=$(curl -s -X DELETE "http://$REST/v1/jobs/$a")
check "DELETE /v1/jobs/$a: its spec copies on the checkpoint volume are removed" '[ ! -e "$spec_copy" ] && ! ls "$TMP/var/checkpoints/.onebit-specs/" | grep -q "^onebit-$a-"' "$del $(ls "$TMP/var/checkpoints/.onebit-specs/")"
check "DELETE /v1/jobs/$a: its ended MPIJob is deleted too" 'wait_for 10 "[ \"\$(mpijob $n1)\" = null ]" && state | jq -r ".deletes[]" | grep -q "mpijobs/$n1?propagationPolicy=Background$"' "$(state | jq -c .deletes)"

# --- 2. a worker dies: the reason names the pod; a second MPIJob resumes -------------------------
b=$(submit 2 2)
wait_for 10 '[ "$(mpijob "onebit-$b-1")" != null ]'
sleep 0.5
ctl fail_worker "{\"name\":\"onebit-$b-1\",\"index\":1,\"exit_code\":137}" > /dev/null
wait_for 15 '[ "$(mpijob "onebit-$b-2")" != null ]'
j=$(get "$b")
check "failed worker: the attempt's reason names the pod and its exit code" 'echo "$j" | jq -r .attempts[0].exit_reason | grep -q "worker pod onebit-$b-1-worker-1 exited with code 137.*MPIJob onebit-$b-1 failed"' "$(echo "$j" | jq -c .attempts)"
m2=$(mpijob "onebit-$b-2")
check "failed worker: attempt 2 is a new MPIJob that resumes" 'echo "$m2" | jq -e ".spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].args | index(\"--resume\")" > /dev/null && [ "$(echo "$m2" | jq -r ".metadata.labels[\"onebit.dev/attempt\"]")" = 2 ]' "$m2"
sleep 0.5
succeed "onebit-$b-2"
wait_for 15 '[ "$(jstate "$b")" = SUCCEEDED ]'
check "failed worker: the job ends SUCCEEDED with restarts=1" '[ "$(jstate "$b")" = SUCCEEDED ] && [ "$(get "$b" | jq .restarts)" = 1 ]' "$(get "$b")"

# --- 3. OOMKilled: not retried ------------------------------------------------------------------
c=$(submit 2 3)
wait_for 10 '[ "$(mpijob "onebit-$c-1")" != null ]'
sleep 0.5
ctl fail_worker "{\"name\":\"onebit-$c-1\",\"index\":0,\"exit_code\":137,\"reason\":\"OOMKilled\"}" > /dev/null
wait_for 15 '[ "$(jstate "$c")" = FAILED ]'
j=$(get "$c")
check "OOMKilled: FAILED at once (no restart), the message says OOMKilled and what to do" '[ "$(echo "$j" | jq -r .state)" = FAILED ] && [ "$(echo "$j" | jq .restarts)" = 0 ] && echo "$j" | jq -r .message | grep -q "onebit-$c-1-worker-0 was OOMKilled.*memory"' "$j"

# --- 4. unschedulable: a notice, then the attempt ends ------------------------------------------
ctl mode '{"on_create":"unschedulable"}' > /dev/null
d=$(submit 2 0)
wait_for 15 '[ "$(jstate "$d")" = FAILED ]'
j=$(get "$d")
ev=$(events "$d")
ctl mode '{"on_create":"run"}' > /dev/null
check "unschedulable: a notice while it waits" 'echo "$ev" | grep -q "pod onebit-$d-1-worker-[01] cannot be scheduled: 0/3 nodes are available: 3 Insufficient cpu"' "$ev"
check "unschedulable: after the pending timeout the attempt ends with that reason" '[ "$(echo "$j" | jq -r .state)" = FAILED ] && echo "$j" | jq -r .attempts[0].exit_reason | grep -q "cannot be scheduled.*(for [0-9]* s)"' "$j"
check "unschedulable: its MPIJob is deleted" 'wait_for 5 "[ \"\$(mpijob onebit-$d-1)\" = null ]"' "$(state | jq -c .deletes)"

# --- 5. cancel: a graceful delete -----------------------------------------------------------------
e=$(submit 2)
wait_for 10 '[ "$(mpijob "onebit-$e-1")" != null ]'
sleep 0.5
rpc cancel "$e" > /dev/null 2>&1
wait_for 15 '[ "$(jstate "$e")" = CANCELLED ]'
dels=$(state | jq -r '.deletes[]' | grep "mpijobs/onebit-$e-1")
check "cancel: the job ends CANCELLED" '[ "$(jstate "$e")" = CANCELLED ]' "$(get "$e")"
check "cancel: one graceful delete (foreground, the pods' own grace period), no kill" '[ "$(echo "$dels" | wc -l)" = 1 ] && echo "$dels" | grep -q "propagationPolicy=Foreground" && ! echo "$dels" | grep -q "gracePeriodSeconds=0"' "$dels"
check "cancel: the attempt's Secret is deleted" 'wait_for 10 "[ \"\$(secret onebit-$e-1-report)\" = null ]" && state | jq -r ".deletes[]" | grep -q "/secrets/onebit-$e-1-report$"' "$(state | jq -c '.deletes | map(select(test("secrets")))')"
check "cancel: the pods' grace period is the cancel grace" '[ "$(state | jq ".mpijobs | length")" -ge 0 ] && [ "$(echo "$m" | jq .spec.mpiReplicaSpecs.Worker.template.spec.terminationGracePeriodSeconds)" = 20 ]'

# --- 6. onebitd killed and started again: it re-attaches ------------------------------------------
f=$(submit 2)
wait_for 10 '[ "$(mpijob "onebit-$f-1")" != null ]'
sleep 0.5
created_before=$(state | jq '.created | length')
kill -KILL "$PID"; wait "$PID" 2>/dev/null
ctl log "{\"name\":\"onebit-$f-1\",\"text\":\"written while no coordinator ran\"}" > /dev/null
start_k8s_daemon
wait_for 10 'events "$f" | grep -q "re-attached to MPIJob onebit-$f-1"'
check "restart: re-attached to MPIJob onebit-$f-1 by its labels" 'events "$f" | grep -q "coordinator restarted; re-attached to MPIJob onebit-$f-1 (attempt 1)"' "$(events "$f")"
succeed "onebit-$f-1"
wait_for 15 '[ "$(jstate "$f")" = SUCCEEDED ]'
j=$(get "$f")
check "restart: the same MPIJob ends the job SUCCEEDED, no other was created" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ "$(echo "$j" | jq ".attempts | length")" = 1 ] && [ "$(state | jq ".created | length")" = "$created_before" ]' "$j $(state | jq -c .created)"
check "restart: the launcher's log is followed again" 'grep -q "written while no coordinator ran" "$TMP/var/jobs/$f/worker.log"' "$(cat "$TMP/var/jobs/$f/worker.log")"

# --- 7. the API server goes away and comes back ------------------------------------------------
g=$(submit 2)
wait_for 10 '[ "$(mpijob "onebit-$g-1")" != null ]'
sleep 0.5
lists_before=$(state | jq '.requests["LIST mpijobs"] // 0')
ctl down > /dev/null
succeed "onebit-$g-1"   # while nobody can watch
sleep 2
check "API server away: the job stays RUNNING and says why" '[ "$(jstate "$g")" = RUNNING ] && events "$g" | grep -q "cannot be watched"' "$(get "$g" | jq -c .state) $(events "$g" | tail -3)"
t0=$(date +%s%N)
g2=$(submit 2)
wait_for 5 '[ "$(jstate "$g2")" = RUNNING ]'
t1=$(date +%s%N)
check "API server away: a submit is answered at once and its attempt waits for the MPIJob" '[ "$(jstate "$g2")" = RUNNING ] && [ $(((t1 - t0) / 1000000)) -lt 3000 ] && [ "$(get "$g2" | jq -r .attempts[0].external_id)" = "onebit-$g2-1" ]' "$(((t1 - t0) / 1000000)) ms $(get "$g2" | jq -c .attempts)"
ctl up > /dev/null
wait_for 20 '[ "$(jstate "$g")" = SUCCEEDED ]'
check "API server back: the MPIJob submitted meanwhile is created" 'wait_for 10 "[ \"\$(mpijob onebit-$g2-1)\" != null ]"' "$(state | jq -c .created)"
sleep 0.5
succeed "onebit-$g2-1"
wait_for 15 '[ "$(jstate "$g2")" = SUCCEEDED ]'
check "API server back: the watch reconnects, relists and sees the MPIJob Succeeded" '[ "$(jstate "$g")" = SUCCEEDED ] && [ "$(state | jq ".requests[\"LIST mpijobs\"]")" -gt "$lists_before" ]' "$(get "$g" | jq -c .state)"

# --- 8. 410 Gone: relist --------------------------------------------------------------------------
h=$(submit 2)
wait_for 10 '[ "$(mpijob "onebit-$h-1")" != null ]'
sleep 0.5
gone_before=$(state | jq .gone_sent)
lists_before=$(state | jq '.requests["LIST mpijobs"] // 0')
ctl compact > /dev/null
succeed "onebit-$h-1"
wait_for 20 '[ "$(jstate "$h")" = SUCCEEDED ]'
check "410 Gone on a watch: onebitd relists and the job ends SUCCEEDED" '[ "$(jstate "$h")" = SUCCEEDED ] && [ "$(state | jq .gone_sent)" -gt "$gone_before" ] && [ "$(state | jq ".requests[\"LIST mpijobs\"]")" -gt "$lists_before" ]' "gone $(state | jq .gone_sent) lists $(state | jq -c .requests)"

# --- 9. hostile input ---------------------------------------------------------------------------------
i=$(submit 2)
wait_for 10 '[ "$(mpijob "onebit-$i-1")" != null ]'
sleep 0.5
ctl garbage > /dev/null
sleep 1
succeed "onebit-$i-1"
wait_for 20 '[ "$(jstate "$i")" = SUCCEEDED ]'
check "non-JSON, mistyped and 5 MiB watch events are dropped; onebitd carries on" 'kill -0 $PID && [ "$(jstate "$i")" = SUCCEEDED ]' "$(get "$i" | jq -c .state)"
# --- 10. the name is taken by an MPIJob that is not this attempt's: 409, then the attempt ends -----
next=$(printf 'job-%06d' $((10#${i#job-} + 1)))
ctl precreate "{\"name\":\"onebit-$next-1\"}" > /dev/null
k=$(submit 2 0)
wait_for 15 '[ "$(jstate "$k")" = FAILED ]'
check "409 AlreadyExists for another job's MPIJob: the attempt ends saying so, the MPIJob is left alone" '[ "$k" = "$next" ] && get "$k" | jq -r .message | grep -q "an MPIJob named onebit-$k-1 exists already and is not this attempt.s (labels: job job-elsewhere" && [ "$(mpijob "onebit-$k-1" | jq -r ".metadata.labels[\"onebit.dev/job-id\"]")" = job-elsewhere ]' "$k $(get "$k" | jq -r .message)"

# --- 10b. the Secret's name is taken: 409 ----------------------------------------------------------
s1=$(printf 'job-%06d' $((10#${k#job-} + 1)))
ctl precreate_secret "{\"name\":\"onebit-$s1-1-report\",\"job\":\"$s1\",\"attempt\":1,\"token\":\"left-by-an-earlier-start\"}" > /dev/null
s1b=$(submit 2)
# Until the new Secret is there (between the delete and the create there is none) and the attempt
# runs: a slow build (ASan) can be seen in that gap.
wait_for 30 '[[ "$(secret "onebit-$s1-1-report" | jq -r .data.token | base64 -d 2> /dev/null)" =~ ^[0-9a-f]{64}$ ]] && [ "$(jstate "$s1")" = RUNNING ]'
sec=$(secret "onebit-$s1-1-report")
check "409 on a Secret of this attempt left by an earlier start: deleted and made again with this start's credential" '[ "$s1b" = "$s1" ] && [[ "$(echo "$sec" | jq -r .data.token | base64 -d)" =~ ^[0-9a-f]{64}$ ]] && [ "$(echo "$sec" | jq -r ".metadata.ownerReferences[0].name")" = "onebit-$s1-1" ] && [ "$(jstate "$s1")" = RUNNING ] && state | jq -r ".deletes[]" | grep -q "/secrets/onebit-$s1-1-report$"' "$s1b $sec $(get "$s1" | jq -c .message)"
sleep 0.5
succeed "onebit-$s1-1"
wait_for 15 '[ "$(jstate "$s1")" = SUCCEEDED ]'
s2=$(printf 'job-%06d' $((10#${s1#job-} + 1)))
ctl precreate_secret "{\"name\":\"onebit-$s2-1-report\",\"job\":\"job-elsewhere\",\"attempt\":1,\"token\":\"someone-elses\"}" > /dev/null
s2b=$(submit 2 0)
wait_for 15 '[ "$(jstate "$s2")" = FAILED ]'
check "409 on another job's Secret: the attempt ends saying so, its MPIJob goes, the Secret is left alone" '[ "$s2b" = "$s2" ] && get "$s2" | jq -r .message | grep -q "a Secret named onebit-$s2-1-report exists already and is not this attempt.s" && [ "$(secret "onebit-$s2-1-report" | jq -r .data.token | base64 -d)" = someone-elses ] && wait_for 10 "[ \"\$(mpijob onebit-$s2-1)\" = null ]"' "$s2b $(get "$s2" | jq -c .message)"

# --- 10c. a watch that falls silent ------------------------------------------------------------------
q=$(submit 2)
wait_for 10 '[ "$(mpijob "onebit-$q-1")" != null ]'
sleep 0.5
lists_before=$(state | jq '.requests["LIST mpijobs"] // 0')
ctl silence '{"on":true}' > /dev/null
sleep 0.5
t0=$(date +%s%N)
succeed "onebit-$q-1"   # while every watch says nothing
wait_for 20 '[ "$(jstate "$q")" = SUCCEEDED ]'
t1=$(date +%s%N)
silent=$(state | jq .silent_watches)
ctl silence '{"on":false}' > /dev/null
check "a silent watch is dropped after --k8s-watch-idle 3, relisted, and the change made meanwhile seen" '[ "$(jstate "$q")" = SUCCEEDED ] && [ $(((t1 - t0) / 1000000)) -lt 10000 ] && [ "$silent" -ge 1 ] && [ "$(state | jq ".requests[\"LIST mpijobs\"]")" -gt "$lists_before" ]' "$(((t1 - t0) / 1000000)) ms, silent watches $silent, $(get "$q" | jq -c .state)"
w=$(state | jq -r '[.requests | to_entries[] | select(.key | startswith("WATCH"))] | map(.value) | add')
kill -TERM "$PID"; wait "$PID" 2>/dev/null; PID=""

# --- 11. GPUs, Restarting, and a cancel whose pods ignore SIGTERM ---------------------------------
start_k8s_daemon --k8s-slots-per-worker 2 --cancel-grace 2
printf 'device: cuda\n' >> "$TMP/job.yaml"
ctl mode '{"on_create":"slow_delete"}' > /dev/null
g4=$(rpc submit "$TMP/job.yaml" 4 0 2>/dev/null | jq -r .id)
wait_for 10 '[ "$(mpijob "onebit-$g4-1")" != null ]'
m=$(mpijob "onebit-$g4-1")
check "device: cuda: 4 ranks in 2 worker pods of 2 slots, each with nvidia.com/gpu: 2" '[ "$(echo "$m" | jq -c "[.spec.slotsPerWorker, .spec.mpiReplicaSpecs.Worker.replicas, .spec.mpiReplicaSpecs.Worker.template.spec.containers[0].resources.limits[\"nvidia.com/gpu\"]]")" = "[2,2,\"2\"]" ]' "$(echo "$m" | jq -c .spec.mpiReplicaSpecs.Worker.template.spec.containers[0].resources) $(get "$g4" | jq -r .message)"
sleep 0.5
ctl restarting "{\"name\":\"onebit-$g4-1\"}" > /dev/null
check "the MPIJob's Restarting condition is told as an event" 'wait_for 5 "events $g4 | grep -q \"MPIJob onebit-$g4-1 is restarting pods\""' "$(events "$g4" | tail -3)"
rpc cancel "$g4" > /dev/null 2>&1
wait_for 15 '[ "$(jstate "$g4")" = CANCELLED ]'
dels=$(state | jq -r '.deletes[]' | grep "onebit-$g4-1")
check "pods that outlast the grace: a graceful delete, then the MPIJob and its pods deleted at once; CANCELLED" '[ "$(jstate "$g4")" = CANCELLED ] && echo "$dels" | grep -q "mpijobs/onebit-$g4-1?propagationPolicy=Foreground$" && echo "$dels" | grep -q "mpijobs/onebit-$g4-1?propagationPolicy=Background&gracePeriodSeconds=0" && echo "$dels" | grep -q "pods/onebit-$g4-1-launcher-[a-z0-9]*?gracePeriodSeconds=0" && [ "$(mpijob "onebit-$g4-1")" = null ]' "$(jstate "$g4") $dels"
ctl mode '{"on_create":"run"}' > /dev/null
kill -TERM "$PID"; wait "$PID" 2>/dev/null; PID=""

# --- 12. program jobs ----------------------------------------------------------------------------
# The program lies where onebitd (its --data-root check) and the pods (the checkpoint claim,
# mounted at the same path) both see it.
PD=$TMP/var/checkpoints/programs
mkdir -p "$PD"
printf 'import onebit\nprint("hello")\n' > "$PD/train.py"
start_k8s_daemon --data-root "$PD"
post() { curl -s -o "$TMP/resp" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "@$1" "http://$REST/v1/jobs"; }
printf '{"spec":{"program":{"entrypoint":"train.py","workdir":"%s","args":["--steps","3"]},"steps":3},"worldSize":2}' "$PD" > "$TMP/prog.json"
code=$(post "$TMP/prog.json")
pj=$(jq -r .id "$TMP/resp" 2>/dev/null)
check "a program job on the checkpoint volume (REST): accepted" '[ "$code" = 200 ] && [[ "$pj" == job-* ]]' "$code $(head -c 400 "$TMP/resp")"
wait_for 10 '[ "$(mpijob "onebit-$pj-1")" != null ]'
m=$(mpijob "onebit-$pj-1")
L=$(echo "$m" | jq -c '.spec.mpiReplicaSpecs.Launcher.template.spec.containers[0]')
pcopy=$(echo "$L" | jq -r '.args | index("--spec") as $i | .[$i+1]')
check "its MPIJob runs onebit-worker on the job's spec, with the job id, checkpoint dir and report address" 'echo "$L" | jq -e --arg id "$pj" --arg ck "$TMP/var/checkpoints" "(.args | index(\"onebit-worker\")) and (.args | index(\"--job-id\") as \$i | .[\$i+1] == \$id) and (.args | index(\"--checkpoint-dir\") as \$i | .[\$i+1] == \$ck) and (.args | index(\"--report\"))" > /dev/null' "$L"
check "the spec copy on the volume names the program where the pods see it (pinned workdir and entrypoint)" '[ "$(jq -c "[.program.workdir, .program.entrypoint, .program.args, .program.interpreter]" "$pcopy")" = "[\"$PD\",\"$PD/train.py\",[\"--steps\",\"3\"],\"python3\"]" ] && [[ "$pcopy" == "$TMP/var/checkpoints/"* ]] && [ "$(echo "$m" | jq -r .spec.mpiReplicaSpecs.Worker.template.spec.containers[0].volumeMounts[0].mountPath)" = "$TMP/var/checkpoints" ]' "$(cat "$pcopy" 2>&1)"
check "the launcher forwards the report credential's file to the program's ranks (-x ONEBIT_REPORT_TOKEN_FILE)" 'echo "$L" | jq -e "(.args | index(\"ONEBIT_REPORT_TOKEN_FILE\")) and ([.env[] | select(.name == \"ONEBIT_REPORT_TOKEN_FILE\")] | length == 1)" > /dev/null' "$L"
ctl succeed "{\"name\":\"onebit-$pj-1\"}" > /dev/null # a program's checkpoints are its own
check "the program job succeeds with its MPIJob" 'wait_for 15 "[ \"\$(jstate $pj)\" = SUCCEEDED ]"' "$(get "$pj" | jq -c "[.state, .message]")"
UPMSG="program jobs with uploaded files cannot run on the kubernetes launcher: its pods mount only the checkpoint volume"
njobs=$(curl -s "http://$REST/v1/jobs" | jq '.jobs | length')
printf '{"spec":{"program":{"entrypoint":"run.py"}},"files":[{"path":"run.py","data":""}]}' > "$TMP/up.json"
code=$(post "$TMP/up.json")
check "an uploaded program (REST): 400, naming the launcher and what to do" '[ "$code" = 400 ] && grep -q "$UPMSG" "$TMP/resp" && grep -q "name it with program.workdir" "$TMP/resp"' "$code $(head -c 600 "$TMP/resp")"
rpc raw /onebit.v1.JobService/SubmitJob "$(submit_pb '{"program":{"entrypoint":"run.py"}}' run.py)" > /dev/null 2> "$TMP/err"; rc=$?
check "an uploaded program (gRPC): INVALID_ARGUMENT with the reason" '[ $rc -eq 3 ] && grep -q "$UPMSG" "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
out=$("$ONEBITCTL" --server "$GRPC" submit --program "$PD/train.py" --np 1 2>&1); rc=$?
check "onebitctl submit --program (an upload): refused, the reason shown" '[ $rc -ne 0 ] && echo "$out" | grep -q "$UPMSG"' "rc=$rc $out"
check "nothing is left staged, no job made of the refusals" '[ -z "$(ls -A "$TMP/var/uploads" 2>/dev/null)" ] && [ "$(curl -s "http://$REST/v1/jobs" | jq ".jobs | length")" = "$njobs" ]' "$(ls -A "$TMP/var/uploads") $njobs"
kill -TERM "$PID"; wait "$PID" 2>/dev/null; PID=""

start_k8s_daemon --data-root "$PD" --k8s-image-python no
NOPY="the kubernetes launcher's worker image registry.example/onebit/worker:1.0 has no Python (onebitd --k8s-image-python no), so it cannot run program.interpreter 'python3'"
code=$(post "$TMP/prog.json")
check "--k8s-image-python no: a Python program job (REST): 400, naming the image and the flag" '[ "$code" = 400 ] && grep -qF "$NOPY" "$TMP/resp"' "$code $(head -c 600 "$TMP/resp")"
rpc raw /onebit.v1.JobService/SubmitJob "$(submit_pb "{\"program\":{\"entrypoint\":\"train.py\",\"workdir\":\"$PD\"}}")" > /dev/null 2> "$TMP/err"; rc=$?
check "--k8s-image-python no: a Python program job (gRPC): INVALID_ARGUMENT with the reason" '[ $rc -eq 3 ] && grep -qF "$NOPY" "$TMP/err"' "rc=$rc $(cat "$TMP/err")"
out=$("$ONEBITCTL" --server "$GRPC" submit --program "$PD/train.py" --no-upload --np 1 2>&1); rc=$?
check "--k8s-image-python no: onebitctl submit --no-upload refused, the reason shown" '[ $rc -ne 0 ] && echo "$out" | grep -qF "$NOPY"' "rc=$rc $out"
printf 'echo hi\n' > "$PD/run.sh"
printf '{"spec":{"program":{"entrypoint":"run.sh","workdir":"%s","interpreter":"/bin/sh"}},"worldSize":1}' "$PD" > "$TMP/sh.json"
code=$(post "$TMP/sh.json")
sj=$(jq -r .id "$TMP/resp" 2>/dev/null)
check "--k8s-image-python no: a program run by /bin/sh is accepted and becomes an MPIJob" '[ "$code" = 200 ] && wait_for 10 "[ \"\$(mpijob onebit-$sj-1)\" != null ]"' "$code $(head -c 400 "$TMP/resp")"
b=$(submit 1)
check "--k8s-image-python no: a built-in job is accepted and becomes an MPIJob" 'wait_for 10 "[ \"\$(mpijob onebit-$b-1)\" != null ]"' "$b"
kill -TERM "$PID"; wait "$PID" 2>/dev/null; PID=""
out=$("$ONEBITD" --launcher kubernetes --kubeconfig "$K/kubeconfig" --k8s-image x --k8s-image-python maybe --state-dir "$TMP/var2" 2>&1); rc=$?
check "--k8s-image-python maybe: a usage error" '[ $rc -eq 2 ] && echo "$out" | grep -q "k8s-image-python: expected yes or no"' "rc=$rc $out"
out=$("$ONEBITD" --k8s-image-python no --state-dir "$TMP/var2" 2>&1); rc=$?
check "--k8s-image-python without --launcher kubernetes: a usage error" '[ $rc -eq 2 ] && echo "$out" | grep -q "k8s-\* options are for --launcher kubernetes"' "rc=$rc $out"

sed 's/    token: .*/    exec: {command: get-token, apiVersion: client.authentication.k8s.io\/v1}/' "$K/kubeconfig" > "$K/exec.kubeconfig"
out=$("$ONEBITD" --launcher kubernetes --kubeconfig "$K/exec.kubeconfig" --k8s-image x --state-dir "$TMP/var2" --insecure-no-auth --grpc 127.0.0.1:0 --rest 127.0.0.1:0 2>&1); rc=$?
check "a kubeconfig with an exec plugin is refused, naming it" '[ $rc -ne 0 ] && echo "$out" | grep -q "exec is not supported"' "rc=$rc $out"
out=$("$ONEBITD" --launcher kubernetes --kubeconfig "$K/kubeconfig" --state-dir "$TMP/var2" 2>&1); rc=$?
check "--launcher kubernetes without --k8s-image: a usage error" '[ $rc -eq 2 ] && echo "$out" | grep -q "needs --k8s-image"' "rc=$rc $out"

echo "$passed passed, $failed failed"
if [ "$failed" -ne 0 ]; then
  echo "--- onebitd's log (end)"; tail -40 "$TMP/onebitd.log"
  echo "--- the stand-in's log (end)"; tail -40 "$K/standin.log"
fi
[ "$failed" -eq 0 ]
