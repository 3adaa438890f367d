#!/bin/sh
# Open MPI launch agent (--mca plm_rsh_agent) for network namespaces playing hosts
# (bench/net/run.sh, tests/test_hosts_netns.sh): called like ssh, as
#   rsh-agent.sh [ssh options] HOST COMMAND...
# it runs COMMAND with /bin/sh in the network namespace that plays HOST
# (${OBNET_SUBNET}.(i+1) -> ${OBNET_PREFIX}i, bench/net/netns.sh) instead of logging in anywhere,
# with a host name of its own (a UTS namespace, named as the network namespace): Open MPI names
# its session directory and shared-memory segments after the host name, and hosts that share
# one name and one /dev/shm would write into each other's segments (ranks die of SIGSEGV).
# As with ssh, the words of COMMAND are joined with spaces and read by the shell (Open MPI
# quotes the daemon's arguments for that). Exit 255, ssh's own failure, when HOST is not one of
# the namespaces.
fail() {
  echo "rsh-agent: $*" >&2
  exit 255
}
# ssh options before the host; those of them that take a value take the next word too.
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    -[BbcDEeFIiJLlmOoPpQRSWw]) [ $# -ge 2 ] || fail "option $1 without its value"; shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || fail "usage: rsh-agent.sh [options] HOST COMMAND..."
host=$1
shift
prefix=${OBNET_PREFIX:-obnet}
subnet=${OBNET_SUBNET:-10.231.77}
last=${host#"$subnet".}
case "$last" in
  "$host" | "" | *[!0-9]* | 0*) fail "$host is not a host of $subnet.0/24" ;;
esac
[ "$last" -ge 1 ] && [ "$last" -le 253 ] || fail "$host is not a host of $subnet.0/24"
ns=$prefix$((last - 1))
[ -e "/run/netns/$ns" ] || fail "no network namespace $ns for $host"
# shellcheck disable=SC2016 # $0 and $1 belong to the inner shell
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$ns" "$*"
