# Network namespaces as hosts, for bench/net/run.sh (sourced, needs root).
#
# obnet_up N builds N "hosts": namespaces ${OBNET_PREFIX}0..N-1, each with one interface eth0
# (address ${OBNET_SUBNET}.(i+1)/24) joined by a veth pair to a bridge ${OBNET_PREFIX}br in the
# root namespace (address ${OBNET_SUBNET}.254, where mpirun runs). obnet_shape RATE limits every
# host's link to RATE in both directions with a token bucket (tbf) on each end of its veth pair:
# egress of eth0 is the host's upload, egress of the bridge-side end its download, as for a host
# with a RATE full-duplex NIC on a non-blocking switch. obnet_down removes everything.
OBNET_PREFIX=${OBNET_PREFIX:-obnet}
OBNET_SUBNET=${OBNET_SUBNET:-10.231.77}
OBNET_HOSTS=0

obnet_ns() { echo "${OBNET_PREFIX}$1"; }
obnet_ip() { echo "${OBNET_SUBNET}.$(($1 + 1))"; }

obnet_up() {
  local n=$1 i ns
  if ip link show "${OBNET_PREFIX}br" >/dev/null 2>&1 || ip netns list | grep -q "^${OBNET_PREFIX}[0-9]"; then
    echo "netns: ${OBNET_PREFIX}* already exists (a run in progress, or one that was killed):" \
         "remove it with: bash bench/net/run.sh --cleanup" >&2
    return 1
  fi
  OBNET_HOSTS=$n
  ip link add "${OBNET_PREFIX}br" type bridge
  ip addr add "${OBNET_SUBNET}.254/24" dev "${OBNET_PREFIX}br"
  ip link set "${OBNET_PREFIX}br" up
  for ((i = 0; i < n; i++)); do
    ns=$(obnet_ns "$i")
    ip netns add "$ns"
    ip link add "${OBNET_PREFIX}h$i" type veth peer name "${OBNET_PREFIX}n$i"
    ip link set "${OBNET_PREFIX}n$i" netns "$ns"
    ip -n "$ns" link set "${OBNET_PREFIX}n$i" name eth0
    ip -n "$ns" addr add "$(obnet_ip "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip link set "${OBNET_PREFIX}h$i" master "${OBNET_PREFIX}br"
    ip link set "${OBNET_PREFIX}h$i" up
  done
}

# The bucket holds 1 ms of traffic at the rate (at least two full-size frames), so no message
# crosses faster than the rate by more than 1 ms: a bigger bucket would let the small messages
# of the compressed allreduce through at the veth's own speed. tbf splits larger (GSO) packets.
# Queues: on the host's own egress (eth0) the queue is long (16 MB) because a real NIC does not
# drop what the host hands it, it pushes back (TCP small queues keep each socket's share small);
# a short queue there makes TCP lose packets it has not even sent. On the switch side (the
# bridge's port towards the host) the queue holds OBNET_QUEUE_MS of traffic (default 50 ms, a
# modest switch buffer): where several senders meet one receiver (alltoall), packets are lost as
# on a real switch.
obnet_tbf() { # dev rate_bits_per_s limit_bytes [netns]
  local dev=$1 bps=$2 limit=$3 ns=${4:-}
  local burst=$((bps / 8 / 1000))
  ((burst < 3028)) && burst=3028
  ((limit < 65536)) && limit=65536
  if [ -n "$ns" ]; then
    ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "${bps}bit" burst "$burst" limit "$limit"
  else
    tc qdisc replace dev "$dev" root tbf rate "${bps}bit" burst "$burst" limit "$limit"
  fi
}

# RATE: bits per second with an optional k/m/g suffix (50m, 1g), or "unshaped".
obnet_shape() {
  local rate=$1 i bps
  for ((i = 0; i < OBNET_HOSTS; i++)); do
    ip netns exec "$(obnet_ns "$i")" tc qdisc del dev eth0 root 2>/dev/null || true
    tc qdisc del dev "${OBNET_PREFIX}h$i" root 2>/dev/null || true
  done
  [ "$rate" = unshaped ] && return 0
  bps=$(obnet_bps "$rate")
  for ((i = 0; i < OBNET_HOSTS; i++)); do
    obnet_tbf eth0 "$bps" $((16 << 20)) "$(obnet_ns "$i")"
    obnet_tbf "${OBNET_PREFIX}h$i" "$bps" $((bps / 8 * ${OBNET_QUEUE_MS:-50} / 1000))
  done
}

obnet_bps() {
  case "$1" in
    *g) echo $((${1%g} * 1000000000)) ;;
    *m) echo $((${1%m} * 1000000)) ;;
    *k) echo $((${1%k} * 1000)) ;;
    *) echo "$1" ;;
  esac
}

# obnet_mpirun_args HOSTFILE: sets the array OBNET_MPIRUN_ARGS, the mpirun options that put ranks
# on the hosts of HOSTFILE: the launch agent that enters their namespaces (rsh-agent.sh) and MPI's
# TCP traffic and out-of-band channel kept on their subnet. The caller adds its btl list.
obnet_mpirun_args() {
  OBNET_MPIRUN_ARGS=(--hostfile "$1"
    --mca plm_rsh_agent "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/rsh-agent.sh"
    --mca btl_tcp_if_include "$OBNET_SUBNET.0/24" --mca oob_tcp_if_include "$OBNET_SUBNET.0/24")
}

# Bytes sent by every host's eth0 so far, one number per host.
obnet_tx_bytes() {
  local i
  for ((i = 0; i < OBNET_HOSTS; i++)); do
    ip netns exec "$(obnet_ns "$i")" cat /sys/class/net/eth0/statistics/tx_bytes
  done | paste -sd' '
}

# Removes every namespace and link of ours, also those of a run that was killed.
obnet_down() {
  local ns dev
  for ns in $(ip netns list | awk '{print $1}' | grep "^${OBNET_PREFIX}[0-9][0-9]*$" || true); do
    ip netns pids "$ns" 2>/dev/null | while read -r pid; do kill "$pid" 2>/dev/null || true; done
    ip netns del "$ns"
  done
  ip link del "${OBNET_PREFIX}br" 2>/dev/null || true
  # a namespace that lost its name while still in use keeps its veth pair: delete our end
  for dev in $(ip -br link | awk '{ sub(/@.*/, "", $1); print $1 }' | grep "^${OBNET_PREFIX}h[0-9][0-9]*$" || true); do
    ip link del "$dev" 2>/dev/null || true
  done
  # veth ends disappear with their namespace, asynchronously
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    ip -br link | grep -q "^${OBNET_PREFIX}" || break
    sleep 0.5
  done
  OBNET_HOSTS=0
}
