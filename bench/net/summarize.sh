#!/usr/bin/env bash
# The summaries bench/net/report.sh builds its table and plot from, taken from the raw logs of
# bench/net/run.sh (which calls this after a sweep). The raw logs are not committed: a sweep
# writes them under var/bandwidth/logs/ (git-ignored); the TSVs below are.
#
# usage: bench/net/summarize.sh LOGS OUT   (e.g. var/bandwidth/logs docs/bandwidth)
#   OUT/params.tsv  the sweep's settings (name, value): SETUP, MEAS, FREEZE, REPEATS, RATES,
#                   MODELS, SWEEP_SECONDS, from LOGS/params (kept as it is where LOGS has none:
#                   a --car-only or --car-ab run)
#   OUT/runs.tsv    one row per onebit-worker run (LOGS/NAME.jsonl): num_params; the run's median
#                   step time [s] over steps SETUP < step (t_all), SETUP < step <= FREEZE (t_warm)
#                   and FREEZE + 1 < step (t_comp); bytes_step at steps SETUP + 1 and FREEZE + 2;
#                   the summary's freeze_step, steps, wall_seconds, bytes_sent; wire/counted
#   OUT/car.tsv     one row per bench_car run (LOGS/car-*.json, carab-*.json): its result line
# A run's row replaces the row of the same name; the rows of runs LOGS does not have stay (a sweep
# may be run in parts, as the raw logs of earlier parts once stayed in one directory).
#
# Step time of a step event: world size x batch / samples_per_s. A median is written as the
# report has always computed it (awk's %.6g), so the report's figures do not change.
set -euo pipefail
[ $# -eq 2 ] || { sed -n 's/^# usage: //p' "$0" >&2; exit 2; }
LOGS=$1
OUT=$2
if [ -f "$LOGS/params" ]; then
  # shellcheck disable=SC1090,SC1091
  source "$LOGS/params"
elif [ -f "$OUT/params.tsv" ]; then
  while IFS=$'\t' read -r k v; do
    case "$k" in SETUP | FREEZE) printf -v "$k" '%s' "$v" ;; esac
  done < "$OUT/params.tsv"
else
  echo "summarize: no $LOGS/params: run bench/net/run.sh first" >&2
  exit 2
fi
NRANKS=4
mkdir -p "$OUT"
# merge NEW OUT/TSV.tsv: NEW's rows, and those of the old file whose name NEW lacks, by name
merge() {
  local old=$OUT/$2.tsv
  {
    head -n1 "$1"
    { tail -n +2 "$1"
      [ ! -f "$old" ] || awk -F'\t' 'NR == FNR { if (FNR > 1) n[$1] = 1; next } FNR > 1 && !($1 in n)' "$1" "$old"
    } | LC_ALL=C sort -t$'\t' -k1,1
  } > "$old.new"
  mv "$old.new" "$old"
}
NEW=$(mktemp -d)
trap 'rm -rf "$NEW"' EXIT

# median of the numbers on stdin ("nan" if none)
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# steptimes FILE LO HI: seconds of each step with LO < step <= HI
steptimes() {
  jq -r --argjson lo "$2" --argjson hi "$3" '
    if .event == "start" then "B \(.spec.batch_size) \(.world_size)"
    elif .event == "step" and .step > $lo and .step <= $hi then "S \(.samples_per_s)" else empty end' "$1" |
    awk '$1 == "B" { n = $2 * $3 } $1 == "S" { print n / $2 }'
}
run_median() { steptimes "$@" | median; }
summary() { jq -r "select(.event==\"summary\") | .$2 // empty" "$1" 2>/dev/null | head -n1; }
bytes_step() { # FILE STEP: bytes_step of that step event
  jq -r --argjson s "$2" 'select(.event=="step" and .step == $s) | .bytes_step' "$1" 2>/dev/null | head -n1
}
# wire/counted: bytes on the hosts' interfaces over the optimizer's counted bytes, per rank
wire_ratio() {
  local f=$1 counted
  counted=$(summary "$f.jsonl" bytes_sent)
  [ -f "$f.wire" ] && [ -n "$counted" ] || { echo nan; return; }
  awk -v c="$counted" -v n="$NRANKS" '{ s = 0; for (i = 1; i <= n; i++) s += $(n + i) - $i; printf "%.3f\n", s / n / c }' "$f.wire"
}

if [ -f "$LOGS/params" ]; then
  printf 'name\tvalue\n' > "$OUT/params.tsv"
  for k in SETUP MEAS FREEZE REPEATS RATES MODELS SWEEP_SECONDS; do printf '%s\t%s\n' "$k" "${!k}"; done >> "$OUT/params.tsv"
fi

{
  printf 'name\tnum_params\tt_all\tt_warm\tt_comp\tbytes_setup\tbytes_comp\tfreeze_step\tsteps\twall_seconds\tbytes_sent\twire\n'
  for f in "$LOGS"/*.jsonl; do
    [ -f "$f" ] || continue
    b=${f%.jsonl}
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(basename "$b")" \
      "$(jq -r 'select(.event=="start") | .num_params' "$f" | head -n1)" \
      "$(run_median "$f" "$SETUP" 100000)" "$(run_median "$f" "$SETUP" "$FREEZE")" \
      "$(run_median "$f" $((FREEZE + 2)) 100000)" \
      "$(bytes_step "$f" $((SETUP + 1)))" "$(bytes_step "$f" $((FREEZE + 2)))" \
      "$(summary "$f" freeze_step)" "$(summary "$f" steps)" "$(summary "$f" wall_seconds)" \
      "$(summary "$f" bytes_sent)" "$(wire_ratio "$b")"
  done
} > "$NEW/runs.tsv"
merge "$NEW/runs.tsv" runs

# the result line of a bench_car log (Open MPI may print a warning after it), as TSV
CAR_KEYS=(bench ranks d padded block iters fp32_s fp32_min_s fp32_max_s fp32_bytes fp32_bytes_theory
  fp32_link_mbit car_s car_min_s car_max_s car_bytes car_bytes_theory car_link_mbit speedup compress_s
  alltoall_s server_s allgather_s decode_s)
{
  printf 'name'; printf '\t%s' "${CAR_KEYS[@]}"; printf '\n'
  for f in "$LOGS"/car-*.json "$LOGS"/carab-*.json; do
    [ -f "$f" ] || continue
    line=$(grep -m1 '^{"bench"' "$f") || continue
    printf '%s\t%s\n' "$(basename "${f%.json}")" \
      "$(jq -r "[$(printf '.%s,' "${CAR_KEYS[@]}" | sed 's/,$//')] | @tsv" <<< "$line")"
  done
} > "$NEW/car.tsv"
merge "$NEW/car.tsv" car
echo "summarize: wrote $OUT/params.tsv, runs.tsv, car.tsv from $LOGS"
