#!/usr/bin/env bash
# Black-box tests of onebitctl: the real binary against a real onebitd (free ports, temporary
# state directory) running real onebit-worker jobs under mpirun, over gRPC and over REST;
# outputs and exit codes, the failure cases included.
# usage: test_onebitctl.sh ONEBITCTL ONEBITD EXAMPLES_DIR
set -u
CTL=$1
ONEBITD=$2
EXAMPLES=$3
. "$(dirname "$0")/daemon_harness.sh"

# start NAME [onebitd options]: the harness's launch_daemon with its state in $TMP/NAME; sets
# GRPC and REST (a URL). Several run at once: the harness ends them all at exit (every process
# under $TMP).
start() {
  local name=$1
  shift
  local auth=
  [ -n "${ONEBIT_TOKEN:-}" ] || auth=--insecure-no-auth # the token's tests set one
  mkdir -p "$TMP/$name"
  launch_daemon "$TMP/$name" --backoff 0.2 --cancel-grace 10 $auth "$@"
  REST=http://$REST
}
# ctl OUT ARGS...: stdout to OUT, stderr to OUT.err; returns onebitctl's status
ctl() {
  local out=$1
  shift
  timeout 300 "$CTL" "$@" > "$out" 2> "$out.err"
}

cat > "$TMP/job.yaml" << 'EOF'
name: ctl-test
model: {type: mlp, hidden: [32]}
data: {type: synthetic_classification, n_train: 2048, n_eval: 512, input_dim: 16, num_classes: 4}
optimizer: {type: onebit_adam, beta2: 0.99, freeze_step: 40, block_size: 64}
batch_size: 16
steps: 150
log_interval: 10
eval: {interval: 50}
checkpoint: {interval: 50}
EOF

start main

# --- help on every verb, with examples --------------------------------------------------------
allhelp=1
for v in submit status list watch cancel logs checkpoints inspect; do
  "$CTL" "$v" --help > "$TMP/h" 2>&1 && grep -q "^usage: onebitctl $v" "$TMP/h" && grep -q "Example" "$TMP/h" || allhelp=0
done
"$CTL" --help > "$TMP/h" 2>&1 && grep -q "Verbs:" "$TMP/h" || allhelp=0
if [ $allhelp = 1 ]; then ok "--help on every verb, with examples"; else bad "--help" "$(cat "$TMP/h")"; fi

# --- submit and watch over gRPC: the id, the plain progress lines, the summary, exit 0 ---------
ctl "$TMP/s1" --server "$GRPC" submit -f "$TMP/job.yaml" --np 2 --watch; rc=$?
ID1=$(head -1 "$TMP/s1")
if [ $rc -eq 0 ] && [[ "$ID1" == job-* ]] && grep -q "step 150/150 compression" "$TMP/s1" &&
   grep -q "freeze .*variance frozen at step 40" "$TMP/s1" && grep -q "SUCCEEDED after 150/150 steps; final train loss [0-9.]*; eval loss [0-9.]*, accuracy [0-9.]*" "$TMP/s1" &&
   grep -q "communication: .* sent per rank, .* with an fp32 allreduce (.*x less)" "$TMP/s1"; then
  ok "gRPC: submit --watch follows $ID1 to SUCCEEDED, exit 0"
else bad "gRPC submit --watch" "rc=$rc $(tail -5 "$TMP/s1") $(cat "$TMP/s1.err")"; fi

# --- the same over REST ------------------------------------------------------------------------
ctl "$TMP/s2" --rest "$REST" submit -f "$TMP/job.yaml" --np 2; rc=$?
ID2=$(cat "$TMP/s2")
ctl "$TMP/w2" --rest "$REST" watch "$ID2"; rc2=$?
if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && grep -q "SUCCEEDED after 150/150 steps" "$TMP/w2"; then
  ok "REST: submit, then watch $ID2 to SUCCEEDED"
else bad "REST submit/watch" "rc=$rc/$rc2 $(cat "$TMP/s2.err" "$TMP/w2.err")"; fi

# --- status, as a table and as JSON, over both transports -------------------------------------
ctl "$TMP/st" --server "$GRPC" status "$ID1"; rc=$?
if [ $rc -eq 0 ] && grep -q "^State: *SUCCEEDED" "$TMP/st" && grep -q "^Progress: *150/150 steps (100%), compression phase (variance frozen at step 40)" "$TMP/st" &&
   grep -q "^Checkpoint: *step 150" "$TMP/st" &&
   grep -Eq "^Compression: error/momentum norm worker [0-9.]+, server [0-9.]+; momentum exactly 0 at [0-9.]+% of coordinates$" "$TMP/st"; then
  ok "status table"; else bad "status table" "$(cat "$TMP/st" "$TMP/st.err")"; fi
ctl "$TMP/sj" --rest "$REST" status "$ID1" -o json; rc=$?
ctl "$TMP/sg" --server "$GRPC" -o json status "$ID1"
if [ $rc -eq 0 ] && [ "$(jq -r .state "$TMP/sj")" = JOB_STATE_SUCCEEDED ] && [ "$(jq -r .progress.step "$TMP/sj")" = 150 ] &&
   [ "$(jq -S 'del(.updatedUnixMs)' "$TMP/sj")" = "$(jq -S 'del(.updatedUnixMs)' "$TMP/sg")" ] &&
   jq -e '.progress.workerErrorRatio > 0.01 and .progress.workerErrorRatio < 100 and .progress.serverErrorRatio > 0.01 and .progress.zeroMomentumFraction >= 0' "$TMP/sj" > /dev/null; then
  ok "status -o json: the same document over REST and gRPC, with the compression health"
else bad "status json" "$(head -c 300 "$TMP/sj") / $(head -c 300 "$TMP/sg")"; fi

# --- list, filtered, as JSON --------------------------------------------------------------------
ctl "$TMP/l" --server "$GRPC" list; rc=$?
ctl "$TMP/lj" --rest "$REST" list --state SUCCEEDED -o json
ctl "$TMP/lr" --server "$GRPC" list --state running
if [ $rc -eq 0 ] && grep -q "^ID  *NAME  *STATE" "$TMP/l" && grep -q "^$ID1 .*ctl-test .*SUCCEEDED .*150/150" "$TMP/l" &&
   [ "$(jq '.jobs | length' "$TMP/lj")" = 2 ] && grep -q "no jobs in state running" "$TMP/lr"; then
  ok "list: table, --state filter, JSON"
else bad "list" "$(cat "$TMP/l" "$TMP/lj" "$TMP/lr" "$TMP/l.err")"; fi

# --- checkpoints and inspect ----------------------------------------------------------------------
ctl "$TMP/c" --rest "$REST" checkpoints "$ID1"; rc=$?
CK=$(jq -r '.checkpoints[0].path' <("$CTL" --server "$GRPC" checkpoints "$ID1" -o json))
if [ $rc -eq 0 ] && grep -q "^150 *compression *40 *2 " "$TMP/c" && [ -d "$CK" ]; then ok "checkpoints: newest first ($CK)"
else bad "checkpoints" "$(cat "$TMP/c" "$TMP/c.err")"; fi
# A warm start from that checkpoint: status says what it did with the borrowed variance.
sed -e 's/^name: ctl-test/name: ctl-warm/' -e 's/^steps: 150/steps: 60/' "$TMP/job.yaml" > "$TMP/warm.yaml"
echo "warm_start: {from: $CK}" >> "$TMP/warm.yaml"
ctl "$TMP/ws" --server "$GRPC" submit -f "$TMP/warm.yaml" --np 2 --watch; rc=$?
IDW=$(head -1 "$TMP/ws")
ctl "$TMP/wst" --server "$GRPC" status "$IDW"
ctl "$TMP/wsj" --rest "$REST" status "$IDW" -o json
# The job's seed is the source's: the borrowed v fits its first gradients as it fitted the
# source's, so the refit ends at step 1.
if [ $rc -eq 0 ] && grep -Eq "^Warm start: *fits: frozen at step 1 \([0-9.]+% of coordinates off\)$" "$TMP/wst" &&
   grep -q "^Progress: .*(variance frozen at step 1)" "$TMP/wst" &&
   [ "$(jq -r .progress.warmStart "$TMP/wsj")" = "$(sed -n 's/^Warm start: *//p' "$TMP/wst")" ] &&
   grep -q "warm start check passed" "$TMP/ws"; then
  ok "warm start: the job's events and status say what it did with the borrowed variance"
else bad "warm start status" "rc=$rc $(cat "$TMP/wst" "$TMP/ws.err"; tail -5 "$TMP/ws")"; fi
ctl "$TMP/i" inspect "$CK"; rc=$?
if [ $rc -eq 0 ] && grep -q "^Step: *150" "$TMP/i" && grep -q "^Freeze step: *40" "$TMP/i" &&
   grep -q "^World size: *2" "$TMP/i" && grep -q "^Verifies: *yes" "$TMP/i"; then ok "inspect a checkpoint"
else bad "inspect" "$(cat "$TMP/i" "$TMP/i.err")"; fi
ctl "$TMP/ij" inspect "$CK" -o json; rc=$?
if [ $rc -eq 0 ] && [ "$(jq -r '[.step, .freezeStep, .worldSize, .verifies] | join(" ")' "$TMP/ij")" = "150 40 2 true" ]; then
  ok "inspect -o json"; else bad "inspect json" "$(cat "$TMP/ij")"; fi
cp -r "$CK" "$TMP/broken" && truncate -s 2000 "$TMP/broken/rank-00001.h5"
ctl "$TMP/ib" inspect "$TMP/broken"; rc=$?
if [ $rc -eq 1 ] && grep -q "^Verifies: .*rank-00001.h5" "$TMP/ib"; then ok "inspect: a damaged checkpoint does not verify, exit 1"
else bad "inspect damaged" "rc=$rc $(cat "$TMP/ib")"; fi

# --- logs: every rank tagged, one rank, JSON lines of rank 0 --------------------------------------
ctl "$TMP/lg" --server "$GRPC" logs "$ID1"; rc=$?
ctl "$TMP/lg0" --rest "$REST" logs "$ID1" --rank 0; rc0=$?
ctl "$TMP/lg1" --server "$GRPC" logs "$ID1" --rank 1; rc1=$?
if [ $rc -eq 0 ] && [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && grep -q '^\[[0-9]*,0\]<stdout>:{"event":"summary"' "$TMP/lg" &&
   [ "$(jq -r 'select(.event=="summary") | .steps' "$TMP/lg0")" = 150 ] && ! grep -q '"event"' "$TMP/lg1" &&
   [ "$(grep -c '^{"event":"step"' "$TMP/lg0")" = 15 ]; then
  ok "logs: tagged lines, --rank 0 gives rank 0's JSON lines (gRPC and REST)"
else bad "logs" "rc=$rc/$rc0/$rc1 $(head -3 "$TMP/lg") $(head -3 "$TMP/lg0") $(cat "$TMP/lg.err")"; fi
# -f follows (the job has ended: everything, then exit 0), wherever it stands; submit's -f is a file.
ctl "$TMP/lgf" --server "$GRPC" logs "$ID1" -f; rcf=$?
ctl "$TMP/lgf2" --rest "$REST" logs -f "$ID1" --rank 0; rcf2=$?
if [ $rcf -eq 0 ] && [ $rcf2 -eq 0 ] && cmp -s "$TMP/lg" "$TMP/lgf" && cmp -s "$TMP/lg0" "$TMP/lgf2"; then
  ok "logs -f: the whole log of an ended job, either side of the id"
else bad "logs -f" "rc=$rcf/$rcf2 $(cat "$TMP/lgf.err" "$TMP/lgf2.err")"; fi
ctl "$TMP/lgx" --server "$GRPC" logs job-424242; rc=$?
if [ $rc -eq 1 ] && grep -q "job-424242" "$TMP/lgx.err"; then ok "logs of an unknown job: exit 1"; else bad "logs unknown" "rc=$rc"; fi

# --- a terminal gets a live progress bar ----------------------------------------------------------
if command -v script > /dev/null; then
  script -qec "$CTL --server $GRPC submit -f $TMP/job.yaml --np 2 --watch" /dev/null > "$TMP/tty" 2>&1; rc=$?
  if [ $rc -eq 0 ] && tr '\r' '\n' < "$TMP/tty" | grep -q '^job-[0-9]* RUNNING \[#*-*\] [0-9]*/150'; then
    ok "watch on a terminal: progress bar"
  else bad "progress bar" "rc=$rc $(tr '\r' '\n' < "$TMP/tty" | tail -3)"; fi
fi

# --- submit from flags ------------------------------------------------------------------------------
ctl "$TMP/f" --server "$GRPC" submit --model softmax --data synthetic_classification \
  --optimizer onebit_adam --steps 60 --batch-size 8 --freeze-step 20 --lr 1e-3 --name from-flags --np 1 --watch; rc=$?
if [ $rc -eq 0 ] && grep -q "SUCCEEDED after 60/60" "$TMP/f"; then ok "submit from flags"
else bad "submit from flags" "rc=$rc $(cat "$TMP/f.err")"; fi

# BinSGDM: 1 bit from the first step, in the compression phase throughout.
ctl "$TMP/fb" --server "$GRPC" submit --model softmax --data synthetic_classification \
  --optimizer binsgdm --steps 60 --batch-size 8 --lr 1e-3 --name binsgdm-flags --np 2 --watch; rc=$?
IDB=$(grep -o 'job-[0-9]*' "$TMP/fb" | head -1)
ctl "$TMP/fbs" --server "$GRPC" status "$IDB" -o json; rc2=$?
if [ $rc -eq 0 ] && grep -q "SUCCEEDED after 60/60" "$TMP/fb" && [ $rc2 -eq 0 ] &&
   [ "$(jq -r '.progress.phase' "$TMP/fbs")" = compression ]; then
  ok "submit --optimizer binsgdm: SUCCEEDED, compression phase from the start"
else bad "submit binsgdm" "rc=$rc/$rc2 $(cat "$TMP/fb.err") $(jq -c .progress "$TMP/fbs")"; fi

# --- compression health of a running job in /metrics, as status shows it ----------------------------
sed 's/^steps: 150/steps: 100000000/; s/^eval: .*//; s/^checkpoint: .*//' "$TMP/job.yaml" > "$TMP/health.yaml"
IDH=$("$CTL" --server "$GRPC" submit -f "$TMP/health.yaml" --np 2)
for _ in $(seq 300); do
  "$CTL" --server "$GRPC" status "$IDH" -o json > "$TMP/hj" 2> /dev/null
  jq -e '.progress.phase == "compression" and .progress.workerErrorRatio > 0' "$TMP/hj" > /dev/null 2>&1 && break
  sleep 0.1
done
curl -s "$REST/metrics" > "$TMP/metrics"
ctl "$TMP/hs" --server "$GRPC" status "$IDH"
mw=$(sed -n "s/^onebit_job_worker_error_ratio{job=\"$IDH\"} //p" "$TMP/metrics")
ms=$(sed -n "s/^onebit_job_server_error_ratio{job=\"$IDH\"} //p" "$TMP/metrics")
mz=$(sed -n "s/^onebit_job_zero_momentum_fraction{job=\"$IDH\"} //p" "$TMP/metrics")
if [ -n "$mw" ] && [ -n "$ms" ] && [ -n "$mz" ] &&
   awk -v w="$mw" -v s="$ms" 'BEGIN { exit !(w > 0.01 && w < 100 && s > 0.01 && s < 100) }' &&
   grep -q "^# TYPE onebit_job_worker_error_ratio gauge" "$TMP/metrics" &&
   grep -Eq "^Compression: error/momentum norm worker [0-9.]+, server [0-9.]+; momentum exactly 0 at [0-9.]+% of coordinates$" "$TMP/hs"; then
  ok "compression health of a running job: /metrics (worker $mw, server $ms, zero $mz) and status"
else bad "compression health in /metrics" "$(cat "$TMP/hj"; grep onebit_job_ "$TMP/metrics")"; fi
"$CTL" --server "$GRPC" cancel "$IDH" > /dev/null 2>&1

# --- cancel a running job: CANCELLED, watch exits 1 ---------------------------------------------------
sed 's/^steps: 150/steps: 100000000/; s/^log_interval: 10/log_interval: 2000/; s/^eval: .*//' "$TMP/job.yaml" > "$TMP/long.yaml"
ID3=$("$CTL" --server "$GRPC" submit -f "$TMP/long.yaml" --np 2)
for _ in $(seq 200); do
  [ "$("$CTL" --server "$GRPC" status "$ID3" -o json | jq -r .progress.step)" != 0 ] && break
  sleep 0.1
done
ctl "$TMP/x" --rest "$REST" cancel "$ID3"; rc=$?
ctl "$TMP/xw" --server "$GRPC" watch "$ID3"; rcw=$?
if [ $rc -eq 0 ] && grep -q "$ID3 cancelling" "$TMP/x" && [ $rcw -eq 1 ] && grep -q "$ID3 CANCELLED" "$TMP/xw"; then
  ok "cancel: the job ends CANCELLED; watch exits 1"
else bad "cancel" "rc=$rc/$rcw $(cat "$TMP/x" "$TMP/x.err"; tail -3 "$TMP/xw")"; fi
ctl "$TMP/x2" --server "$GRPC" cancel "$ID3"; rc=$?
if [ $rc -eq 1 ] && grep -q "already CANCELLED" "$TMP/x2.err"; then ok "cancel of a finished job: exit 1 with the reason"
else bad "second cancel" "rc=$rc $(cat "$TMP/x2.err")"; fi
ctl "$TMP/r1" --server "$GRPC" submit -f "$TMP/job.yaml" --np 2 --request-id "nightly-2026-11-23"; rc=$?
ctl "$TMP/r2" --rest "$REST" submit -f "$TMP/job.yaml" --np 2 --request-id "nightly-2026-11-23"; rc2=$?
if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ -s "$TMP/r1" ] && cmp -s "$TMP/r1" "$TMP/r2"; then
  ok "submit --request-id: a retry answers the same job (gRPC, then REST)"
else bad "request id" "rc=$rc/$rc2 $(cat "$TMP/r1" "$TMP/r2" "$TMP/r1.err" "$TMP/r2.err")"; fi
ctl "$TMP/r3" --server "$GRPC" cancel "$(cat "$TMP/r1")" > /dev/null 2>&1
ctl "$TMP/lb1" --server "$GRPC" submit -f "$TMP/job.yaml" --np 1 --label team=nlp --label run=7; rc=$?
ctl "$TMP/lb2" --server "$GRPC" list --label team=nlp -o json; rc2=$?
ctl "$TMP/lb3" --rest "$REST" list --label run=7 --label team=nlp -o json; rc3=$?
ctl "$TMP/lb4" --rest "$REST" list --label team=vision; rc4=$?
ctl "$TMP/lb5" --server "$GRPC" status "$(cat "$TMP/lb1")"; rc5=$?
if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ $rc4 -eq 0 ] && [ $rc5 -eq 0 ] &&
   [ "$(jq -r '[.jobs[].id] | join(" ")' "$TMP/lb2")" = "$(cat "$TMP/lb1")" ] &&
   [ "$(jq -c '[.jobs[] | [.id, .labels]]' "$TMP/lb2")" = "$(jq -c '[.jobs[] | [.id, .labels]]' "$TMP/lb3")" ] &&
   grep -q "^no jobs" "$TMP/lb4" && grep -q "^Labels: *run=7,team=nlp$" "$TMP/lb5"; then
  ok "labels: submit --label, list --label selects (gRPC and REST), status shows them"
else bad "labels" "rc=$rc/$rc2/$rc3/$rc4/$rc5 $(cat "$TMP/lb2" "$TMP/lb4" "$TMP/lb1.err" "$TMP/lb2.err" "$TMP/lb3.err")"; fi
ctl "$TMP/r3" --server "$GRPC" cancel "$(cat "$TMP/lb1")" > /dev/null 2>&1
ctl "$TMP/dl1" --server "$GRPC" submit -f "$TMP/long.yaml" --np 1 --deadline 1h30m; rc=$?
ctl "$TMP/dl2" --server "$GRPC" status "$(cat "$TMP/dl1")"; rc2=$?
ctl "$TMP/dl3" --rest "$REST" status "$(cat "$TMP/dl1")" -o json; rc3=$?
ctl "$TMP/dl4" --rest "$REST" submit -f "$TMP/job.yaml" --deadline 90; rc4=$?
if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ $rc4 -eq 1 ] &&
   grep -q "^Deadline: *1h30m after the first start" "$TMP/dl2" &&
   [ "$(jq -r .deadlineMs "$TMP/dl3")" = 5400000 ] &&
   grep -q "^onebitctl: deadline: '90': expected a unit (d, h, m or s) after 90$" "$TMP/dl4.err"; then
  ok "submit --deadline: status shows it (gRPC, REST); a bad one is refused naming the field"
else bad "deadline" "rc=$rc/$rc2/$rc3/$rc4 $(cat "$TMP/dl2" "$TMP/dl1.err" "$TMP/dl4.err")"; fi
ctl "$TMP/r3" --server "$GRPC" cancel "$(cat "$TMP/dl1")" > /dev/null 2>&1
ctl "$TMP/v1" --server "$GRPC" version; rc=$?
ctl "$TMP/v2" --rest "$REST" version; rc2=$?
if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && grep -qE "^onebitctl [0-9]+\.[0-9]+\.[0-9]+$" "$TMP/v1" &&
   grep -q "^onebitd $(sed -n 's/^onebitctl //p' "$TMP/v1") (api onebit.v1) at $GRPC$" "$TMP/v1" &&
   grep -q "(api onebit.v1) at $REST$" "$TMP/v2"; then ok "version: the client's and the server's, both transports"
else bad "version" "rc=$rc/$rc2 $(cat "$TMP/v1" "$TMP/v2" "$TMP/v1.err")"; fi
ctl "$TMP/d1" --server "$GRPC" delete "$ID3" --keep-checkpoints; rc=$?
ctl "$TMP/d2" --rest "$REST" status "$ID3"; rc2=$?
if [ $rc -eq 0 ] && grep -q "$ID3 deleted; its checkpoints are kept" "$TMP/d1" && [ $rc2 -eq 1 ] &&
   [ -n "$(ls -d "$TMP"/main/checkpoints/"$ID3"/step-* 2>/dev/null)" ]; then
  ok "delete --keep-checkpoints: the job is gone, its checkpoints stay"
else bad "delete" "rc=$rc/$rc2 $(cat "$TMP/d1" "$TMP/d1.err")"; fi

# --- a job that fails: watch exits 1 and says why ----------------------------------------------------
# An empty directory under the service's data root (STATE/data): accepted, fails when it runs.
mkdir -p "$TMP/main/data/nodata"
printf 'model: {type: mlp}\ndata: {type: idx, path: %s/main/data/nodata}\noptimizer: {type: adam}\nbatch_size: 8\nsteps: 5\n' "$TMP" > "$TMP/nodata.yaml"
ctl "$TMP/fail" --rest "$REST" submit -f "$TMP/nodata.yaml" --np 1 --max-restarts 0 --watch; rc=$?
# It fails before its first step: no "after 0/0 steps", no zero traffic (both printed before).
if [ $rc -eq 1 ] && grep -q "FAILED before its first step" "$TMP/fail" && grep -q "^reason: " "$TMP/fail" &&
   ! grep -q "after 0/\|^communication: 0 B" "$TMP/fail"; then ok "a failing job: watch exits 1 with the reason"
else bad "failing job" "rc=$rc $(tail -3 "$TMP/fail") $(cat "$TMP/fail.err")"; fi

# --- data outside the service's roots: refused at submit, nothing created --------------------------
printf 'model: {type: mlp}\ndata: {type: idx, path: /etc}\noptimizer: {type: adam}\nbatch_size: 8\nsteps: 5\n' > "$TMP/etc.yaml"
ctl "$TMP/etc" --rest "$REST" submit -f "$TMP/etc.yaml" --np 1; rc=$?
if [ $rc -eq 1 ] && grep -q "spec: data.path: '/etc' is outside the roots this service reads from" "$TMP/etc.err"; then ok "data outside the roots: refused with the reason"
else bad "data outside the roots" "rc=$rc $(cat "$TMP/etc.err")"; fi

# --- what users get wrong ---------------------------------------------------------------------------
sed 's/beta2: 0.99/betta2: 0.99/' "$TMP/job.yaml" > "$TMP/typo.yaml"
for t in "--server $GRPC" "--rest $REST"; do
  ctl "$TMP/e1" $t submit -f "$TMP/typo.yaml"; rc=$?
  if [ $rc -eq 1 ] && grep -q "optimizer.betta2: unknown field" "$TMP/e1.err" && [ ! -s "$TMP/e1" ]; then ok "invalid spec refused (${t%% *})"
  else bad "invalid spec (${t%% *})" "rc=$rc $(cat "$TMP/e1.err")"; fi
  ctl "$TMP/e2" $t status job-999999; rc=$?
  if [ $rc -eq 1 ] && grep -q "job-999999" "$TMP/e2.err"; then ok "unknown job: exit 1 (${t%% *})"
  else bad "unknown job (${t%% *})" "rc=$rc $(cat "$TMP/e2.err")"; fi
done
ctl "$TMP/e3" --server 127.0.0.1:1 list; rc=$?
ctl "$TMP/e4" --rest http://127.0.0.1:1 list; rc2=$?
if [ $rc -eq 3 ] && [ $rc2 -eq 3 ] && grep -q "cannot reach onebitd at 127.0.0.1:1" "$TMP/e3.err" &&
   grep -q "cannot reach onebitd at http://127.0.0.1:1" "$TMP/e4.err"; then ok "server unreachable: exit 3 with a hint"
else bad "unreachable" "rc=$rc/$rc2 $(cat "$TMP/e3.err" "$TMP/e4.err")"; fi
ONEBIT_SERVER=127.0.0.1:1 ctl "$TMP/e5" list; rc=$?
if [ $rc -eq 3 ] && grep -q "127.0.0.1:1" "$TMP/e5.err"; then ok "ONEBIT_SERVER is used"; else bad "ONEBIT_SERVER" "rc=$rc"; fi
usage_ok=1
for args in "frobnicate" "list --bogus" "status" "submit" "list --state NOPE" "-o yaml list" "submit -f $TMP/none.yaml" "submit -f $TMP/job.yaml --model mlp"; do
  ctl "$TMP/e6" --server "$GRPC" $args; rc=$?
  [ $rc -eq 2 ] && [ -s "$TMP/e6.err" ] || { usage_ok=0; echo "  '$args' -> rc=$rc $(cat "$TMP/e6.err")"; }
done
if [ $usage_ok = 1 ]; then ok "bad usage: exit 2 with a message"; else bad "bad usage" "see above"; fi

# --- a service with a token ---------------------------------------------------------------------------
ONEBIT_TOKEN=s3cret start secured
ctl "$TMP/t1" --server "$GRPC" list; rc=$?
ctl "$TMP/t2" --rest "$REST" list; rc2=$?
ctl "$TMP/t3" --server "$GRPC" --token s3cret list; rc3=$?
ONEBIT_TOKEN=s3cret ctl "$TMP/t4" --rest "$REST" list; rc4=$?
if [ $rc -eq 1 ] && [ $rc2 -eq 1 ] && [ $rc3 -eq 0 ] && [ $rc4 -eq 0 ] && grep -qi "token" "$TMP/t1.err" && grep -qi "token" "$TMP/t2.err"; then
  ok "token: refused without it, accepted with --token or ONEBIT_TOKEN (both transports)"
else bad "token" "rc=$rc/$rc2/$rc3/$rc4 $(cat "$TMP/t1.err" "$TMP/t2.err" "$TMP/t3.err")"; fi

# --- the token onebitd makes by default, found where it lives --------------------------------------
mkdir -p "$TMP/auto"
launch_daemon "$TMP/auto"
REST=http://$REST
ctl "$TMP/a1" --server "$GRPC" list; rc=$?
ONEBIT_STATE_DIR="$TMP/auto" ctl "$TMP/a2" --server "$GRPC" list; rc2=$?
ctl "$TMP/a3" --rest "$REST" --token-file "$TMP/auto/token" list; rc3=$?
ONEBIT_TOKEN_FILE="$TMP/auto/token" ctl "$TMP/a4" --rest "$REST" list; rc4=$?
if [ $rc -eq 1 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ $rc4 -eq 0 ]; then
  ok "the default token: found through ONEBIT_STATE_DIR, --token-file or ONEBIT_TOKEN_FILE"
else bad "default token" "rc=$rc/$rc2/$rc3/$rc4 $(cat "$TMP/a1.err" "$TMP/a2.err" "$TMP/a3.err")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
