#!/usr/bin/env bash
# The hierarchical 1-bit exchange against the flat one on 2 "nodes" of 2 ranks: two network
# namespaces as hosts (bench/net/netns.sh), two ranks in each talking over shared memory (the
# node's fast links, unshaped), TCP between the hosts shaped with tc to each rate. bench_car
# times the compressed allreduce flat (--ranks-per-node 0) and hierarchical (2), with 1-bit
# Adam's signs and scales (l1) and BinSGDM's unit signs, on model-sized vectors, and the
# fp32 ring allreduce beside them; and, for the node's own links, the fp32 ring of 2 ranks on one
# host (row "intra"). Every JSON line goes to OUT/car-RATE-D-SCALE-MODE.json (a log, not kept);
# the summary OUT/hier.tsv is copied to docs/scale/hier-2x2.tsv, which docs/scale/model.py reads.
#
# usage: sudo bash bench/net/hier.sh [--rates "50m 200m 1g unshaped"] [--d "1863690 8000000"]
#                                    [--iters K] [--out DIR] [--cleanup]
# Needs root (ip netns, tc) and Open MPI. Environment: BUILD_DIR (default build-net).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
RATES="50m 200m 1g unshaped"
SIZES="1863690 8000000"
ITERS=10
OUT=$ROOT/var/scale-hier
usage() {
  sed -n 's/^# usage: //p; s/^#        //p' "$0" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --rates) RATES=$2; shift 2 ;;
    --d) SIZES=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --cleanup) source bench/net/netns.sh; obnet_down; exit 0 ;;
    *) usage ;;
  esac
done
BUILD=${BUILD_DIR:-build-net}
echo "== build ($BUILD)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DONEBIT_CUDA=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target bench_car >/dev/null
mkdir -p "$OUT"
CAR=$ROOT/$BUILD/bin/bench_car

# shellcheck source=bench/net/netns.sh
source bench/net/netns.sh
MPIRUN_PID=""
obnet_up 2
trap '[ -z "$MPIRUN_PID" ] || kill "$MPIRUN_PID" 2>/dev/null; wait; obnet_down' EXIT
trap 'exit 130' INT TERM
HOSTFILE=$OUT/hosts
for i in 0 1; do echo "$(obnet_ip "$i") slots=2"; done > "$HOSTFILE"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OBNET_PREFIX OBNET_SUBNET
# Ranks 0, 1 on host 0 and 2, 3 on host 1 (by slot): shared memory inside a host, TCP between.
netrun() {
  local rc=0
  obnet_mpirun_args "$HOSTFILE"
  mpirun "${OBNET_MPIRUN_ARGS[@]}" -np 4 --map-by slot --mca btl vader,tcp,self "$@" &
  MPIRUN_PID=$!
  wait "$MPIRUN_PID" || rc=$?
  MPIRUN_PID=""
  return "$rc"
}

printf 'rate\td\tscale\tranks_per_node\tcar_s\tcar_min_s\tcar_bytes\tfp32_s\tcompress_s\talltoall_s\tserver_s\tallgather_s\tdecode_s\n' > "$OUT/hier.tsv"
for rate in $RATES; do
  obnet_shape "$rate"
  for d in $SIZES; do
    for scale in l1 unit; do
      for m in 0 2; do
        name=car-$rate-$d-$scale-m$m
        echo "== $name"
        skip=""
        [ "$m" = 2 ] && skip=--skip-fp32 # the fp32 ring is the same collective either way
        netrun "$CAR" --d "$d" --iters "$ITERS" --warmup 2 --format json --scale "$scale" \
          --ranks-per-node "$m" $skip > "$OUT/$name.json" 2> "$OUT/$name.err" < /dev/null
        jq -r --arg rate "$rate" '[$rate, .d, .scale, .ranks_per_node, .car_s, .car_min_s,
          .car_bytes, .fp32_s, .compress_s, .alltoall_s, .server_s, .allgather_s, .decode_s]
          | @tsv' "$OUT/$name.json" | tee -a "$OUT/hier.tsv"
      done
    done
  done
done
# The node's own links alone: 2 ranks, shared memory, no namespaces.
d0=${SIZES%% *}
mpirun -np 2 --mca btl vader,self "$CAR" --d "$d0" --iters "$ITERS" --warmup 2 --format json \
  > "$OUT/intra.json" 2> "$OUT/intra.err" < /dev/null
jq -r '["intra", .d, "l1", 1, 0, 0, 0, .fp32_s, 0, 0, 0, 0, 0] | @tsv' "$OUT/intra.json" |
  tee -a "$OUT/hier.tsv"
cp "$OUT/hier.tsv" docs/scale/hier-2x2.tsv
echo "summary: docs/scale/hier-2x2.tsv"
