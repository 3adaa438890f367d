#!/usr/bin/env bash
# onebitd --launcher slurm against a real one-machine Slurm cluster started here: munged with a
# key and socket of its own, slurmctld and slurmd on free ports with private state and spool
# directories (proctrack/linuxproc, task/none, no cgroups, a node of 4 CPUs), all under this
# test's temporary directory. Then, with the real onebit-worker (2 ranks, srun --mpi=pmix):
#   - a job runs as one Slurm batch job to SUCCEEDED, its log (srun's "0: " tags) served;
#   - a rank SIGKILLed mid-run: the batch job FAILS, the job resumes from its checkpoint in a new
#     batch job and ends SUCCEEDED with restarts=1;
#   - a cancel: scancel --signal=TERM, the ranks checkpoint, the job ends CANCELLED;
#   - onebitd SIGKILLed mid-run and started again: it re-attaches to the same Slurm job (same
#     id, one attempt) and the job ends SUCCEEDED.
# The cluster gets three tries, each on fresh ports below the ephemeral range; a failed try and a
# stuck job print the daemons' logs, and every Slurm call and wait is bounded by the clock.
# Without the Slurm and munge programs the test fails, unless ONEBIT_SKIP_SLURM=1 (exit 77).
# usage: test_slurm.sh ONEBITD OBRPC EXAMPLES_DIR
set -u
ONEBITD=$1
OBRPC=$2
EXAMPLES=$3

missing=""
for p in munged slurmctld slurmd sbatch srun squeue scancel; do
  command -v "$p" > /dev/null || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "${ONEBIT_SKIP_SLURM:-0}" = 1 ]; then
    echo "SKIPPED: no$missing (ONEBIT_SKIP_SLURM=1)"
    exit 77
  fi
  echo "FAILED: Slurm is not installed (missing:$missing). Install it with scripts/install-deps.sh" \
       "(slurmctld slurmd slurm-client munge), or set ONEBIT_SKIP_SLURM=1 to skip this test."
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "FAILED: the test cluster runs its daemons as root (SlurmUser=root); run as root or set ONEBIT_SKIP_SLURM=1"
  exit 1
fi

. "$(dirname "$0")/daemon_harness.sh"
S=$TMP/slurm
stop_cluster() {
  for f in "$S/slurmd.pid" "$S/slurmctld.pid" "$S/munged.pid"; do
    [ -s "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null
  done
  sleep 0.5
  for f in "$S/slurmd.pid" "$S/slurmctld.pid" "$S/munged.pid"; do
    [ -s "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
  done
}
trap 'stop_cluster; cleanup' EXIT

# Slurm's clients retry an unreachable controller for about 10 s per call, so every call here
# runs under a time limit and every wait is bounded by the clock, not by a count of calls.
sl() { timeout 15 "$@"; }
# A TCP port nobody listens on, below the kernel's range of ephemeral ports: an outgoing
# connection of another test cannot take it between this check and the daemon's bind.
read -r EPH_LO _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || EPH_LO=32768
free_port() { # [PORT_TO_AVOID]
  local lo=10000 hi=$((EPH_LO - 1)) p
  [ "$hi" -gt $((lo + 1000)) ] || { lo=61000; hi=64999; }
  while :; do
    p=$((lo + RANDOM % (hi - lo + 1)))
    [ "$p" != "${1:-}" ] || continue
    ss -Htln "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return; }
  done
}
cluster_logs() { # the daemons' own account, for a failure's message
  echo "--- sinfo:"; sl sinfo -N -l 2>&1 | tail -5
  echo "--- squeue:"; sl squeue --states=all -l 2>&1 | tail -10
  for f in slurmctld slurmd munged; do
    echo "--- $f.log:"; tail -15 "$S/log/$f.log" 2>/dev/null
  done
}

# --- the cluster ------------------------------------------------------------------------------
mkdir -p "$S/munge" "$S/log"
chmod 0700 "$S/munge"
head -c 1024 /dev/urandom > "$S/munge/munge.key"
chmod 0400 "$S/munge/munge.key"
sl munged -f --key-file="$S/munge/munge.key" --socket="$S/munge/munge.sock" \
  --pid-file="$S/munged.pid" --log-file="$S/log/munged.log" --seed-file="$S/munge/seed" ||
  { echo "FAILED: munged did not start"; cat "$S/log/munged.log"; exit 1; }
NODE=$(hostname -s)
write_conf() {
  cat > "$S/slurm.conf" << EOF
ClusterName=onebittest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge/munge.sock
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerParameters=sched_interval=1
MinJobAge=600
KillWait=5
InactiveLimit=0
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=test Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  # PMIx's per-step client directories (spmix_appdir_<uid>_<job>.<step>, /tmp by default) in
  # this cluster's own directory: job ids start at 1 in every test cluster, and a directory a
  # step left behind in /tmp would stop that step of a later cluster from launching.
  mkdir -p "$S/pmix"
  echo "PMIxCliTmpDirBase=$S/pmix" > "$S/mpi.conf"
}
export SLURM_CONF=$S/slurm.conf
# One try: fresh ports, state and spool; slurmctld and slurmd started; the node idle within 45 s.
start_cluster() {
  rm -rf "$S/state" "$S/spool"
  mkdir -p "$S/state" "$S/spool"
  CTLD_PORT=$(free_port)
  SLURMD_PORT=$(free_port "$CTLD_PORT")
  write_conf
  sl slurmctld -f "$SLURM_CONF" -i || { WHY="slurmctld did not start"; return 1; }
  sl slurmd -f "$SLURM_CONF" || { WHY="slurmd did not start"; return 1; }
  local end=$((SECONDS + 45))
  while [ "$SECONDS" -lt "$end" ]; do
    sl sinfo -h -o %t 2>/dev/null | grep -qx idle && return 0
    for d in slurmctld slurmd; do
      [ -s "$S/$d.pid" ] && ! kill -0 "$(cat "$S/$d.pid")" 2>/dev/null &&
        { WHY="$d exited"; return 1; }
    done
    sleep 0.2
  done
  WHY="the Slurm node was not idle within 45 s"
  return 1
}
stop_daemons() { # slurmd and slurmctld, not munged
  for f in "$S/slurmd.pid" "$S/slurmctld.pid"; do
    [ -s "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
    rm -f "$f"
  done
}
for try in 1 2 3; do
  start_cluster && break
  echo "cluster start $try of 3 failed: $WHY (ports $CTLD_PORT, $SLURMD_PORT)"
  cluster_logs
  stop_daemons
  [ "$try" = 3 ] && { echo "FAILED: the one-machine Slurm cluster did not come up in 3 tries"; exit 1; }
  mv "$S/log" "$S/log.$try"
  mkdir -p "$S/log"
done
ok "a one-machine Slurm cluster is up (slurmctld :$CTLD_PORT, slurmd :$SLURMD_PORT)"

# --- onebitd with the Slurm launcher --------------------------------------------------------------
start_slurm_daemon() {
  rm -f "$TMP/ready"
  "$ONEBITD" --launcher slurm --slurm-poll 0.2 --grpc 127.0.0.1:0 --rest 127.0.0.1:0 \
    --state-dir "$TMP/var" --ready-file "$TMP/ready" --insecure-no-auth --slots 4 \
    --backoff 0.2 --cancel-grace 20 >> "$TMP/onebitd.log" 2>&1 &
  PID=$!
  for _ in $(seq 100); do [ -s "$TMP/ready" ] && break; sleep 0.05; done
  GRPC=127.0.0.1:$(sed -n 's/^grpc=//p' "$TMP/ready")
  REST=127.0.0.1:$(sed -n 's/^rest=//p' "$TMP/ready")
}
wait_step() { # ID STEP SECONDS: until the job has passed STEP
  local end=$((SECONDS + $3))
  while [ "$SECONDS" -lt "$end" ]; do
    [ "$(get "$1" | jq '.progress.step // 0')" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
wait_final() { # ID SECONDS
  local end=$((SECONDS + $2))
  while [ "$SECONDS" -lt "$end" ]; do
    case $(get "$1" | jq -r .state) in SUCCEEDED|FAILED|CANCELLED) return 0 ;; esac
    sleep 0.1
  done
  return 1
}
# A job that never gets where a part needs it leaves nothing for the later parts to check: stop
# here with the coordinator's, the job's and the cluster's account.
stuck() { # ID WHAT
  bad "$2" "job $1 did not get there in time: $(get "$1" | jq -c '{state, progress, attempts}')"
  echo "--- onebitd.log:"; tail -15 "$TMP/onebitd.log"
  echo "--- worker.log:"; tail -10 "$TMP/var/jobs/$1/worker.log" 2>/dev/null
  cluster_logs
  echo "$passed passed, $failed failed"
  exit 1
}
slurm_state() { sl squeue -h --states=all -j "$1" -O State 2>/dev/null | tr -d ' '; }
ranks_of() { procs_of "$1" onebit-worker; }

start_slurm_daemon
[ -n "$GRPC" ] || { echo "onebitd did not start"; cat "$TMP/onebitd.log"; exit 1; }

sed 's/^steps: 200/steps: 1500/; s/^log_interval: 10/log_interval: 20/' "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/job.yaml"
printf 'checkpoint: {interval: 250, keep: 10}\n' >> "$TMP/job.yaml"
sed 's/^steps: 1500/steps: 1000000/; s/^checkpoint: .*/checkpoint: {interval: 0}/' "$TMP/job.yaml" > "$TMP/endless.yaml"

# --- 1. a 2-rank job to SUCCEEDED -----------------------------------------------------------------
a=$(rpc submit "$TMP/job.yaml" 2 2 2>/dev/null | jq -r .id)
wait_final "$a" 90 || stuck "$a" "a 2-rank job ends"
j=$(get "$a")
ida=$(echo "$j" | jq -r '.attempts[0].external_id')
check "a 2-rank job runs as a Slurm batch job to SUCCEEDED" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ "$(echo "$j" | jq .restarts)" = 0 ]' "$j $(tail -5 "$TMP/var/jobs/$a/worker.log")"
check "its attempt carries the Slurm job id, which Slurm reports COMPLETED" '[[ "$ida" =~ ^[0-9]+$ ]] && [ "$(slurm_state "$ida")" = COMPLETED ]' "id=$ida state=$(slurm_state "$ida")"
check "the Slurm job ran under the attempt's name" '[ "$(sl squeue -h --states=all -j "$ida" -O Name | tr -d " ")" = "onebit-$a-1" ]'
check "its final step is recorded" '[ "$(echo "$j" | jq .progress.step)" = 1500 ] && [ -d "$TMP/var/checkpoints/$a/step-00001500" ]' "$(echo "$j" | jq -c .progress)"
check "the workers' log holds rank 0's progress lines, tagged by srun" 'grep -q "^0: {\"event\":\"summary\"" "$TMP/var/jobs/$a/worker.log"' "$(tail -3 "$TMP/var/jobs/$a/worker.log")"
logs=$(curl -s "http://$REST/v1/jobs/$a/logs?maxBytes=1048576" | jq -r .data | base64 -d 2>/dev/null)
check "GetJobLogs serves the Slurm job's output" 'echo "$logs" | grep -q "\"event\":\"summary\""' "$(echo "$logs" | tail -3)"

# --- 2. a rank SIGKILLed: a new batch job resumes from the checkpoint ---------------------------
b=$(rpc submit "$TMP/job.yaml" 2 2 2>/dev/null | jq -r .id)
wait_step "$b" 600 90 || stuck "$b" "a job reaches step 600"
victim=$(ranks_of "$b" | tail -1)
check "found a rank of the Slurm job to kill" '[ -n "$victim" ]' "$(pgrep -af onebit-worker)"
kill -KILL "$victim"
wait_final "$b" 120 || stuck "$b" "killed rank: the job ends"
j=$(get "$b")
id1=$(echo "$j" | jq -r '.attempts[0].external_id')
id2=$(echo "$j" | jq -r '.attempts[1].external_id')
check "killed rank: the job resumes from its checkpoint and ends SUCCEEDED with restarts=1" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ "$(echo "$j" | jq .restarts)" = 1 ] && [ "$(echo "$j" | jq .attempts[1].start_step)" -ge 250 ]' "$j"
check "killed rank: the first batch job FAILED, the second is another one and COMPLETED" '[ "$(slurm_state "$id1")" = FAILED ] && [ "$id2" != "$id1" ] && [ "$(slurm_state "$id2")" = COMPLETED ]' "ids $id1 $id2: $(slurm_state "$id1") $(slurm_state "$id2")"
check "killed rank: the attempt's reason names the failure" '[ "$(echo "$j" | jq .attempts[0].exit_code)" != 0 ] && echo "$j" | jq -r .attempts[0].exit_reason | grep -q "workers failed"' "$(echo "$j" | jq -c .attempts)"

# --- 3. cancel: SIGTERM through scancel, a final checkpoint, CANCELLED ---------------------------
c=$(rpc submit "$TMP/endless.yaml" 2 2 2>/dev/null | jq -r .id)
wait_step "$c" 100 90 || stuck "$c" "an endless job reaches step 100"
idc=$(get "$c" | jq -r '.attempts[0].external_id')
rpc cancel "$c" > /dev/null 2>&1
wait_final "$c" 60 || stuck "$c" "cancel: the job ends"
j=$(get "$c")
check "cancel: the job ends CANCELLED" '[ "$(echo "$j" | jq -r .state)" = CANCELLED ]' "$j"
check "cancel: the ranks caught SIGTERM and checkpointed (no kill needed)" '[ "$(ls "$TMP/var/checkpoints/$c" 2>/dev/null | grep -c "^step-")" -ge 1 ] && [ "$(slurm_state "$idc")" = COMPLETED ]' "$(ls "$TMP/var/checkpoints/$c" 2>&1) slurm=$(slurm_state "$idc")"
check "cancel: nothing of it is left running" '[ -z "$(ranks_of "$c")" ]' "$(ranks_of "$c")"

# --- 4. onebitd SIGKILLed mid-run: the restarted one re-attaches to the same Slurm job ----------
d=$(rpc submit "$TMP/job.yaml" 2 2 2>/dev/null | jq -r .id)
wait_step "$d" 300 90 || stuck "$d" "a job reaches step 300"
before=$(get "$d" | jq -r '.attempts[0].external_id')
kill -KILL "$PID"; wait "$PID" 2>/dev/null
check "coordinator killed: the Slurm job runs on without it" '[ "$(slurm_state "$before")" = RUNNING ]' "$(slurm_state "$before")"
sleep 1
start_slurm_daemon
wait_final "$d" 120 || stuck "$d" "coordinator restarted: the job ends"
j=$(get "$d")
check "coordinator restarted: the job ends SUCCEEDED" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ]' "$j"
check "coordinator restarted: it re-attached to the same Slurm job (one attempt, same id)" '[ "$(echo "$j" | jq ".attempts | length")" = 1 ] && [ "$(echo "$j" | jq -r .attempts[0].external_id)" = "$before" ] && [ "$(echo "$j" | jq .restarts)" = 0 ]' "before=$before $(echo "$j" | jq -c .attempts)"
events=$(curl -s -N --max-time 10 "http://$REST/v1/jobs/$d/events")
check "coordinator restarted: the re-attach is in the job's history" 'echo "$events" | grep -q "re-attached to Slurm job $before"' "$(echo "$events" | grep -o "\"message\":\"[^\"]*\"" | tail -8)"
check "coordinator restarted: that Slurm job COMPLETED, no other was submitted" '[ "$(slurm_state "$before")" = COMPLETED ] && [ "$(sl squeue -h --states=all --name="onebit-$d-2" -O JobID | wc -l)" = 0 ]'

kill -TERM "$PID"; wait "$PID" 2>/dev/null; PID=""
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
