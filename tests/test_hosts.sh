#!/usr/bin/env bash
# onebitd --launcher hosts with the real onebit-worker, on this machine only: the host list
# "<hostname>:4" names this machine, which Open MPI runs without a remote agent, so the
# generated hostfile, the strict --hosts and --mpi-net validation and the cancel through mpirun
# (SIGUSR1, forwarded to every rank) are tested; ranks on other hosts, reached through
# --ssh-agent, are in test_hosts_netns.sh.
# usage: test_hosts.sh ONEBITD OBRPC EXAMPLES_DIR
set -u
ONEBITD=$1
OBRPC=$2
EXAMPLES=$3
. "$(dirname "$0")/daemon_harness.sh"

# --- bad --hosts lists are refused before anything starts ---------------------------------------
for h in "" "a" "a:0" "a:4,a:4" "a;b:4" "a:4," "-a:2" "a:99999"; do
  out=$("$ONEBITD" --launcher hosts --hosts "$h" --state-dir "$TMP/bad" --insecure-no-auth 2>&1); rc=$?
  check "--hosts '$h' is refused with exit 2" '[ $rc -eq 2 ] && echo "$out" | grep -q -- "--hosts"' "rc=$rc $out"
done
for n in "" "eth0;reboot" "10.0.0.0/33" "eth0,,lo" "-eth0"; do
  out=$("$ONEBITD" --launcher hosts --hosts a:4 --mpi-net "$n" --state-dir "$TMP/bad" --insecure-no-auth 2>&1); rc=$?
  check "--mpi-net '$n' is refused with exit 2" '[ $rc -eq 2 ] && echo "$out" | grep -q -- "--mpi-net"' "rc=$rc $out"
done
out=$("$ONEBITD" --mpi-net 10.0.0.0/24 --state-dir "$TMP/bad" --insecure-no-auth 2>&1); rc=$?
check "--mpi-net without --launcher hosts is refused" '[ $rc -eq 2 ] && echo "$out" | grep -q "are for --launcher hosts"' "rc=$rc $out"
out=$("$ONEBITD" --launcher hosts --state-dir "$TMP/bad" --insecure-no-auth 2>&1); rc=$?
check "--launcher hosts without --hosts is refused" '[ $rc -eq 2 ]' "rc=$rc $out"
out=$("$ONEBITD" --launcher nope --state-dir "$TMP/bad" --insecure-no-auth 2>&1); rc=$?
check "an unknown launcher is refused" '[ $rc -eq 2 ] && echo "$out" | grep -q "local, hosts, slurm or kubernetes"' "rc=$rc $out"

me=$(hostname -s)
# mpirun through a wrapper that records its arguments (exec: signals reach mpirun itself).
printf '#!/bin/sh\necho "$*" >> "%s/mpirun-args"\nexec mpirun "$@"\n' "$TMP" > "$TMP/mpirun"
chmod +x "$TMP/mpirun"
rm -f "$TMP/ready"
# ONEBIT_RANKS_PER_NODE: the placement for ranks_per_node "auto", handed to every rank (-x).
ONEBIT_RANKS_PER_NODE=2 "$ONEBITD" --launcher hosts --hosts "$me:4" --ssh-agent "false" --mpi-net 127.0.0.0/8 \
  --mpirun "$TMP/mpirun" --grpc 127.0.0.1:0 \
  --rest 127.0.0.1:0 --state-dir "$TMP/var" --ready-file "$TMP/ready" --insecure-no-auth \
  --backoff 0.2 --cancel-grace 20 >> "$TMP/onebitd.log" 2>&1 &
PID=$!
for _ in $(seq 100); do [ -s "$TMP/ready" ] && break; sleep 0.05; done
GRPC=127.0.0.1:$(sed -n 's/^grpc=//p' "$TMP/ready")
[ -n "$GRPC" ] || { echo "onebitd did not start"; cat "$TMP/onebitd.log"; exit 1; }
check "the hostfile lists the host and its slots" '[ "$(cat "$TMP/var/hostfile")" = "$me slots=4" ]' "$(cat "$TMP/var/hostfile" 2>&1)"
check "--slots defaults to the hosts' slots" 'grep -q "4 slots" "$TMP/onebitd.log"' "$(cat "$TMP/onebitd.log")"

sed 's/^steps: 200/steps: 400/' "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/job.yaml"
sed 's/^steps: 400/steps: 1000000/' "$TMP/job.yaml" > "$TMP/endless.yaml"
printf 'checkpoint: {interval: 0}\n' >> "$TMP/endless.yaml"
a=$(rpc submit "$TMP/job.yaml" 2 0 2>/dev/null | jq -r .id)
wait_state "$a" SUCCEEDED 60
check "a 2-rank job runs through the hostfile to SUCCEEDED" '[ "$(get "$a" | jq -r .state)" = SUCCEEDED ]' "$(get "$a") $(tail -5 "$TMP/var/jobs/$a/worker.log")"
check "mpirun was started with the hostfile, the remote agent and the network" 'grep -qF -- "--hostfile $TMP/var/hostfile --mca plm_rsh_agent false --mca btl_tcp_if_include 127.0.0.0/8 --mca oob_tcp_if_include 127.0.0.0/8" "$TMP/mpirun-args"' "$(cat "$TMP/mpirun-args" 2>&1)"

check "mpirun hands ONEBIT_RANKS_PER_NODE to the ranks" 'grep -qF -- "--mca oob_tcp_if_include 127.0.0.0/8 -x ONEBIT_RANKS_PER_NODE" "$TMP/mpirun-args"' "$(cat "$TMP/mpirun-args" 2>&1)"
sed 's/^  block_size: 256$/  block_size: 256\n  ranks_per_node: auto/' "$TMP/job.yaml" > "$TMP/auto.yaml"
h=$(rpc submit "$TMP/auto.yaml" 4 0 2>/dev/null | jq -r .id)
wait_state "$h" SUCCEEDED 60
check "ranks_per_node auto: 2 nodes of 2 ranks from ONEBIT_RANKS_PER_NODE, hierarchical" '[ "$(get "$h" | jq -r .state)" = SUCCEEDED ] && grep -qF "optimizer.ranks_per_node auto: 2 nodes of 2 ranks (ONEBIT_RANKS_PER_NODE): hierarchical, ranks_per_node 2" "$TMP/var/jobs/$h/worker.log"' "$(get "$h") $(tail -5 "$TMP/var/jobs/$h/worker.log")"

c=$(rpc submit "$TMP/endless.yaml" 2 0 2>/dev/null | jq -r .id)
for _ in $(seq 300); do [ "$(get "$c" | jq '.progress.step // 0')" -ge 50 ] && break; sleep 0.1; done
rpc cancel "$c" > /dev/null 2>&1
wait_state "$c" CANCELLED 30
check "cancel: the job ends CANCELLED" '[ "$(get "$c" | jq -r .state)" = CANCELLED ]' "$(get "$c")"
check "cancel: SIGUSR1 through mpirun let the ranks checkpoint" '[ "$(ls "$TMP/var/checkpoints/$c" 2>/dev/null | grep -c "^step-")" -ge 1 ] && grep -q "Forwarding signal 10" "$TMP/var/jobs/$c/worker.log"' "$(ls "$TMP/var/checkpoints/$c" 2>&1); $(tail -3 "$TMP/var/jobs/$c/worker.log")"
check "cancel: nothing of it is left running" '[ -z "$(procs_of "$c" onebit-worker)" ] && [ -z "$(procs_of "$c" mpirun)" ]'

kill -TERM "$PID"; wait "$PID" 2>/dev/null; PID=""
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
