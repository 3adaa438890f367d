#!/usr/bin/env bash
# onebitd --launcher hosts across machines, played by network namespaces as in bench/net/: two
# namespaces joined by a bridge (bench/net/netns.sh, links unshaped), mpirun in the root
# namespace reaching them through bench/net/rsh-agent.sh (--ssh-agent), Open MPI over TCP on
# the namespaces' subnet (--mpi-net), the ranks reporting to the coordinator across the bridge
# (--report-addr), state and checkpoints on the file system every namespace shares. Each
# namespace also holds an interface with the same address in all of them, as docker0 is on
# real machines: Open MPI left to pick interfaces itself hangs on it.
#
# Four ranks, two per host: a job to SUCCEEDED with every rank seen in the namespace of its
# host, a cancel (SIGUSR1 through mpirun to the remote ranks, which checkpoint) and a rank
# SIGKILLed in the second namespace (the job resumes from its checkpoint). Needs root and
# `ip netns`; exits 77 (skipped) without them.
# usage: test_hosts_netns.sh ONEBITD OBRPC ONEBITCTL EXAMPLES_DIR
set -u
ONEBITD=$1
OBRPC=$2
CTL=$3
EXAMPLES=$4
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
AGENT=$ROOT/bench/net/rsh-agent.sh

skip() {
  echo "SKIPPED: $*"
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root to make network namespaces (ip netns)"
command -v ip > /dev/null || skip "no 'ip' (iproute2)"
# Names of this run only: a bridge and namespaces of another run (or of bench/net) are never ours.
# The prefix ends in a letter so that obnet_down's pattern (PREFIX then digits) matches nothing
# of a run whose pid starts with ours.
OBNET_PREFIX=obt$$x
probe=${OBNET_PREFIX}p
if ! { ip netns add "$probe" && ip link add "${probe}b" type bridge &&
  ip link add "${probe}v" type veth peer name "${probe}w"; } 2> /dev/null; then
  ip netns del "$probe" 2> /dev/null
  ip link del "${probe}b" 2> /dev/null
  skip "network namespaces, bridges or veth pairs cannot be made here"
fi
ip link del "${probe}v"
ip link del "${probe}b"
ip netns del "$probe"
# A /24 nothing on this machine uses yet.
OBNET_SUBNET=""
for k in $(seq 0 99); do
  s=10.231.$((100 + ($$ + k) % 100))
  ip -4 route show | grep -q "^$s\.0/24" || { OBNET_SUBNET=$s; break; }
done
[ -n "$OBNET_SUBNET" ] || { echo "no free /24 in 10.231.100-199.0"; exit 1; }
export OBNET_PREFIX OBNET_SUBNET # read by the agent, through onebitd and mpirun

. "$HERE/daemon_harness.sh"
# shellcheck source=bench/net/netns.sh
. "$ROOT/bench/net/netns.sh"
# Namespaces and bridges of earlier runs that were killed outright (no trap runs on SIGKILL, as
# from a test timeout): those whose test process is gone.
for old in $({ ip netns list; ip -br link; } | grep -o '^obt[0-9]*x' | sort -u); do
  pid=${old#obt}
  pid=${pid%x}
  grep -qs test_hosts_netns "/proc/$pid/cmdline" || (OBNET_PREFIX=$old && obnet_down)
done
# The test ends itself (and its trap removes the namespaces) before ctest's timeout would kill it.
(sleep 240 && echo "test_hosts_netns: still running after 240 s, stopping" && kill -TERM $$) &
WATCHDOG=$!
trap 'pkill -P "$WATCHDOG"; kill "$WATCHDOG" 2> /dev/null; cleanup; obnet_down' EXIT
trap 'exit 130' INT TERM
obnet_up 2 || exit 1
NS0=$(obnet_ns 0)
NS1=$(obnet_ns 1)
IP0=$(obnet_ip 0)
IP1=$(obnet_ip 1)
BRIDGE_IP=$OBNET_SUBNET.254
for ns in "$NS0" "$NS1"; do
  ip -n "$ns" link add decoy type veth peer name decoy-peer
  ip -n "$ns" addr add 172.31.250.1/24 dev decoy
  ip -n "$ns" link set decoy up
  ip -n "$ns" link set decoy-peer up
done

ctl() { "$CTL" --server "$GRPC" "$@"; }
tx() { ip netns exec "$1" cat /sys/class/net/eth0/statistics/tx_bytes; }
# "RANK NAMESPACE" for each running rank of job $1 (namespace empty: the root one).
rank_places() {
  local p r ns
  for p in $(procs_of "$1" onebit-worker); do
    r=$(tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    # A rank that exits between the two reads has no namespace to name (identify fails); the
    # root namespace is a success with no name.
    ns=$(ip netns identify "$p" 2> /dev/null) || continue
    [ -n "$r" ] && echo "$r $ns"
  done
}
# Processes named onebit-worker or orted left in namespace $1.
leftovers() {
  local p
  for p in $(ip netns pids "$1" 2> /dev/null); do
    case "$(cat "/proc/$p/comm" 2> /dev/null)" in onebit-worker | orted) echo "$p" ;; esac
  done
}
wait_step() { # ID STEP SECONDS
  for _ in $(seq $(($3 * 10))); do
    [ "$(get "$1" | jq '.progress.step // 0')" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

# onebitd serves gRPC on the bridge, where the ranks' reports arrive from the namespaces. The
# report address must name the port, so one is picked that is free now (another run may take it
# before onebitd binds it: then another).
# Open MPI: TCP between the hosts (the tests' environment allows only shared memory otherwise).
export OMPI_MCA_btl=self,vader,tcp
for _ in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 20000))
  ss -Hltn "sport = :$port" | grep -q . && continue
  rm -f "$TMP/ready"
  "$ONEBITD" --launcher hosts --hosts "$IP0:2,$IP1:2" --ssh-agent "$AGENT" \
    --mpi-net "$OBNET_SUBNET.0/24" --grpc "$BRIDGE_IP:$port" --report-addr "$BRIDGE_IP:$port" \
    --allow-plaintext --rest 127.0.0.1:0 --state-dir "$TMP/var" --ready-file "$TMP/ready" \
    --insecure-no-auth --backoff 0.2 --cancel-grace 20 >> "$TMP/onebitd.log" 2>&1 &
  PID=$!
  for _ in $(seq 100); do
    [ -s "$TMP/ready" ] && break
    kill -0 "$PID" 2> /dev/null || break
    sleep 0.05
  done
  [ -s "$TMP/ready" ] && break
  kill -KILL "$PID" 2> /dev/null
  wait "$PID" 2> /dev/null
  PID=""
done
[ -s "$TMP/ready" ] || { echo "onebitd did not start"; cat "$TMP/onebitd.log"; exit 1; }
GRPC=$BRIDGE_IP:$(sed -n 's/^grpc=//p' "$TMP/ready")
REST=127.0.0.1:$(sed -n 's/^rest=//p' "$TMP/ready")
check "the hostfile names both hosts with 2 slots each" '[ "$(cat "$TMP/var/hostfile")" = "$(printf "%s slots=2\n%s slots=2" "$IP0" "$IP1")" ]' "$(cat "$TMP/var/hostfile")"

sed 's/^steps: 200/steps: 1500/' "$EXAMPLES/synthetic-mlp-onebit.yaml" > "$TMP/job.yaml"
sed 's/^steps: 1500/steps: 1000000/' "$TMP/job.yaml" > "$TMP/endless.yaml"
printf 'checkpoint: {interval: 0}\n' >> "$TMP/endless.yaml"
sed 's/^steps: 1500/steps: 3000/' "$TMP/job.yaml" > "$TMP/restart.yaml"
printf 'checkpoint: {interval: 250}\n' >> "$TMP/restart.yaml"

# --- a job to SUCCEEDED, its ranks in the namespaces of their hosts ---------------------------------
tx0=$(tx "$NS0")
tx1=$(tx "$NS1")
a=$(rpc submit "$TMP/job.yaml" 4 0 2> /dev/null | jq -r .id)
: > "$TMP/places"
for _ in $(seq 900); do
  rank_places "$a" >> "$TMP/places"
  case $(get "$a" | jq -r .state) in SUCCEEDED | FAILED | CANCELLED) break ;; esac
  sleep 0.1
done
j=$(get "$a")
check "a 4-rank job across two hosts runs to SUCCEEDED" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ "$(echo "$j" | jq .progress.step)" = 1500 ]' "$j $(tail -5 "$TMP/var/jobs/$a/worker.log")"
places=$(sort -u "$TMP/places" | paste -sd,)
check "ranks 0 and 1 ran in $NS0, ranks 2 and 3 in $NS1, none in the root namespace" '[ "$places" = "0 $NS0,1 $NS0,2 $NS1,3 $NS1" ]' "seen: '$places'"
d0=$(($(tx "$NS0") - tx0))
d1=$(($(tx "$NS1") - tx1))
check "the hosts exchanged the gradients over their links (eth0 sent > 200 kB each)" '[ "$d0" -gt 200000 ] && [ "$d1" -gt 200000 ]' "sent: $d0 and $d1 bytes"
check "rank 0 reported across the bridge to the coordinator" 'curl -s "http://$REST/metrics" | grep -q "^onebit_worker_reports_total [1-9]" && ! grep -q -- "--report:" "$TMP/var/jobs/$a/worker.log"' "$(curl -s "http://$REST/metrics" | grep reports_total) $(grep -- --report: "$TMP/var/jobs/$a/worker.log")"
check "the log is tagged by rank" 'grep -q "^\[1,0\]<stdout>:{\"event\":\"summary\"" "$TMP/var/jobs/$a/worker.log"' "$(tail -3 "$TMP/var/jobs/$a/worker.log")"
check "nothing of the job is left on either host" '[ -z "$(leftovers "$NS0")$(leftovers "$NS1")" ]' "$(ip netns pids "$NS0") $(ip netns pids "$NS1")"

# --- cancel: SIGUSR1 through mpirun reaches the ranks on both hosts, which checkpoint -----------
c=$(rpc submit "$TMP/endless.yaml" 4 0 2> /dev/null | jq -r .id)
wait_step "$c" 100 60
places=$(rank_places "$c" | sort | paste -sd,)
check "cancel: the job runs on both hosts" '[ "$places" = "0 $NS0,1 $NS0,2 $NS1,3 $NS1" ]' "seen: '$places' $(get "$c")"
ctl cancel "$c" > "$TMP/cancel.out" 2>&1
wait_state "$c" CANCELLED 30
check "cancel: onebitctl cancel ends the job CANCELLED" '[ "$(get "$c" | jq -r .state)" = CANCELLED ] && grep -q "$c cancelling" "$TMP/cancel.out"' "$(cat "$TMP/cancel.out") $(get "$c")"
ck=$(ls -d "$TMP/var/checkpoints/$c"/step-* 2> /dev/null | tail -1)
check "cancel: every rank wrote its part of the final checkpoint" '[ -n "$ck" ] && [ "$(ls "$ck" | grep -c "^rank-0000[0-3]\.h5$")" = 4 ] && grep -q "Forwarding signal 10" "$TMP/var/jobs/$c/worker.log"' "'$ck': $(ls "$ck" 2>&1); $(tail -3 "$TMP/var/jobs/$c/worker.log")"
sleep 0.5
check "cancel: no onebit-worker (or orted) is left in either namespace" '[ -z "$(leftovers "$NS0")$(leftovers "$NS1")" ] && [ -z "$(procs_of "$c" onebit-worker)$(procs_of "$c" mpirun)" ]' "$(ip netns pids "$NS0") $(ip netns pids "$NS1")"

# --- a rank on the second host SIGKILLed: the job resumes from its checkpoint ---------------------
b=$(rpc submit "$TMP/restart.yaml" 4 2 2> /dev/null | jq -r .id)
wait_step "$b" 600 60
victim=""
for p in $(procs_of "$b" onebit-worker); do
  [ "$(ip netns identify "$p" 2> /dev/null)" = "$NS1" ] && victim=$p
done
check "found a rank of the job in $NS1" '[ -n "$victim" ]' "$(rank_places "$b")"
[ -n "$victim" ] && kill -KILL "$victim"
wait_state "$b" SUCCEEDED 90
j=$(get "$b")
check "killed rank: the job restarts from its checkpoint and succeeds" '[ "$(echo "$j" | jq -r .state)" = SUCCEEDED ] && [ "$(echo "$j" | jq .restarts)" = 1 ] && [ "$(echo "$j" | jq .attempts[1].start_step)" -ge 500 ] && [ "$(echo "$j" | jq .progress.step)" = 3000 ]' "$j"
check "killed rank: the first attempt failed with the workers" 'echo "$j" | jq -r .attempts[0].exit_reason | grep -q "workers failed"' "$(echo "$j" | jq -c .attempts)"
check "killed rank: nothing is left in either namespace" '[ -z "$(leftovers "$NS0")$(leftovers "$NS1")" ]' "$(ip netns pids "$NS0") $(ip netns pids "$NS1")"

kill -TERM "$PID"
wait "$PID" 2> /dev/null
PID=""
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
