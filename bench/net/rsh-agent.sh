#!/bin/sh
# Open MPI launch agent (--mca plm_rsh_agent) for bench/net/run.sh: called like ssh, as
#   rsh-agent.sh [options] HOST COMMAND...
# it runs COMMAND in the network namespace that plays HOST (${OBNET_SUBNET}.(i+1) -> ${OBNET_PREFIX}i)
# instead of logging in anywhere.
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;
    *) break ;;
  esac
done
host=$1
shift
prefix=${OBNET_PREFIX:-obnet}
subnet=${OBNET_SUBNET:-10.231.77}
case "$host" in
  "$subnet".*) ;;
  *) echo "rsh-agent: $host is not a host of $subnet.0/24" >&2; exit 255 ;;
esac
last=${host##*.}
exec ip netns exec "$prefix$((last - 1))" /bin/sh -c "$*"
