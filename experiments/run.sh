#!/usr/bin/env bash
# The paper's comparisons on our own runs: for the Fashion-MNIST MLP and the byte-level
# transformer, train adam, onebit_adam (auto freeze), onebit_adam compressing the preconditioned
# momentum (precondition: true), onebit_adam with compression off (frozen v, fp32 momentum) and
# naive 1-bit, each with 4 ranks, the same seed and the same steps; then write
# the table (docs/experiments/results.md) and the loss curves (docs/experiments/*.svg, *.png).
# The runs' raw logs go to var/experiments/logs/ (git-ignored; LOGS_DIR moves them); the table
# and the curves are built from the summaries taken from them, which are committed:
#   docs/experiments/summary.tsv  one row per run: its summary event (final_train_loss,
#                                 eval_loss, eval_accuracy, freeze_step, bytes_sent,
#                                 wall_seconds), or for a run without one the reason its stderr
#                                 gives and its last logged step
#   docs/experiments/curves.tsv   the train loss of every step event and the eval loss of every
#                                 eval event, per run
# A run's rows replace those of the same run; the rows of runs not in the logs stay.
#
# usage: experiments/run.sh [--ranks N] [--only mlp|transformer|extras] [--skip-runs]
#   --only extras runs only the MLP seeds and ablations (a few minutes)
#   --skip-runs   rebuild table and plots from the TSVs in docs/experiments/ (after raw logs
#                 changed by hand: LOGS_DIR=DIR experiments/run.sh --skip-runs --summarize)
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS=4
ONLY=""
SKIP_RUNS=0
SUMMARIZE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) RANKS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --skip-runs) SKIP_RUNS=1; shift ;;
    --summarize) SUMMARIZE=1; shift ;;
    *) echo "usage: $0 [--ranks N] [--only mlp|transformer|extras] [--skip-runs [--summarize]]" >&2; exit 2 ;;
  esac
done

TOOLS="jq gnuplot"
[ "$SKIP_RUNS" -eq 1 ] || TOOLS="$TOOLS mpirun"
for tool in $TOOLS; do
  command -v "$tool" >/dev/null || { echo "experiments: '$tool' not found (scripts/install-deps.sh installs it)" >&2; exit 2; }
done

OUT=docs/experiments
LOGS=${LOGS_DIR:-var/experiments/logs}
WORKLOADS="mlp transformer"
case "$ONLY" in
  "") ;;
  mlp|transformer) WORKLOADS=$ONLY ;;
  extras) WORKLOADS="" ;;
  *) echo "experiments: --only takes mlp, transformer or extras" >&2; exit 2 ;;
esac
VARIANTS="adam onebit onebit_pre onebit_fp32 naive"
# name:base spec:sed expression
EXTRAS="mlp-adam-seed2:mlp-adam:s/^seed: 1/seed: 2/
mlp-onebit_pre-seed2:mlp-onebit_pre:s/^seed: 1/seed: 2/
mlp-adam-seed3:mlp-adam:s/^seed: 1/seed: 3/
mlp-onebit_pre-seed3:mlp-onebit_pre:s/^seed: 1/seed: 3/
mlp-onebit_pre-block256:mlp-onebit_pre:s/^  precondition: true/  precondition: true\n  block_size: 256/
mlp-onebit_pre-freeze600:mlp-onebit_pre:s/^  freeze_step: auto/  freeze_step: 600/"

if [ "$SKIP_RUNS" -eq 0 ]; then
  mkdir -p "$LOGS"
  BUILD=${BUILD_DIR:-build-experiments}
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DONEBIT_CUDA=OFF >/dev/null
  cmake --build "$BUILD" -j "$(nproc)" --target onebit-worker >/dev/null
  if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1
  for w in $WORKLOADS; do
    for v in $VARIANTS; do
      echo "== $w / $v ($RANKS ranks)"
      # A diverging run ends with a non-zero status and its reason on stderr: keep both.
      if ! mpirun --oversubscribe -np "$RANKS" "$BUILD/bin/onebit-worker" \
        --spec "experiments/specs/$w-$v.yaml" > "$LOGS/$w-$v.jsonl" 2> "$LOGS/$w-$v.err"; then
        echo "   failed: $(grep -m1 'failed' "$LOGS/$w-$v.err" || tail -n1 "$LOGS/$w-$v.err")"
      fi
      jq -r 'select(.event=="summary") | "   eval loss \(.eval_loss), accuracy \(.eval_accuracy), freeze \(.freeze_step), \(.bytes_sent) bytes, \(.wall_seconds|floor) s"' \
        "$LOGS/$w-$v.jsonl"
    done
  done

  # MLP extras: two more seeds of adam and onebit_pre (how much of a gap is seed noise), and
  # onebit_pre with smaller blocks or a later freeze. Specs are derived from the committed ones.
  if [ -z "$ONLY" ] || [ "$ONLY" = extras ]; then
    while IFS= read -r x; do
      IFS=: read -r name base expr <<< "$x"
      sed -e "$expr" -e "s/^name: .*/name: $name/" "experiments/specs/$base.yaml" > "$LOGS/$name.yaml"
      echo "== extra $name ($RANKS ranks)"
      mpirun --oversubscribe -np "$RANKS" "$BUILD/bin/onebit-worker" --spec "$LOGS/$name.yaml" \
        > "$LOGS/$name.jsonl" 2> "$LOGS/$name.err" < /dev/null || echo "   failed"
    done <<< "$EXTRAS"
  fi
fi

# The summaries, from the raw logs (after runs, or with --summarize).
if [ "$SKIP_RUNS" -eq 0 ] || [ "$SUMMARIZE" -eq 1 ]; then
  NEW=$(mktemp -d)
  printf 'run\tsummary\tfinal_train_loss\teval_loss\teval_accuracy\tfreeze_step\tbytes_sent\twall_seconds\tfailed\tlast_step\n' > "$NEW/summary.tsv"
  printf 'run\tevent\tstep\tloss\n' > "$NEW/curves.tsv"
  for f in "$LOGS"/*.jsonl; do
    [ -f "$f" ] || continue
    run=$(basename "$f" .jsonl)
    if jq -e 'select(.event=="summary")' "$f" >/dev/null; then
      jq -r --arg run "$run" 'select(.event=="summary") |
        [$run, 1, .final_train_loss, .eval_loss, .eval_accuracy, .freeze_step, .bytes_sent, .wall_seconds, "", ""] | @tsv' "$f"
    else
      why=$(grep -m1 -o 'training failed: .*' "$LOGS/$run.err" 2>/dev/null | sed 's/ (.*//' || true)
      last=$(jq -r 'select(.event=="step") | .step' "$f" | tail -n1)
      printf '%s\t0\t\t\t\t\t\t\t%s\t%s\n' "$run" "$why" "$last"
    fi >> "$NEW/summary.tsv"
    jq -r --arg run "$run" 'select(.event=="step" or .event=="eval") |
      [$run, .event, .step, (if .event == "step" then .loss else .eval_loss end)] | @tsv' "$f" >> "$NEW/curves.tsv"
  done
  for t in summary curves; do
    # the new rows, and the old rows of the runs the logs lack, by run (a curve in step order)
    { head -n1 "$NEW/$t.tsv"
      { tail -n +2 "$NEW/$t.tsv"
        [ ! -f "$OUT/$t.tsv" ] || awk -F'\t' 'NR == FNR { if (FNR > 1) n[$1] = 1; next } FNR > 1 && !($1 in n)' "$NEW/$t.tsv" "$OUT/$t.tsv"
      } | LC_ALL=C sort -t$'\t' -s -k1,1 -k2,2 -k3,3n
    } > "$NEW/$t.merged"
    mv "$NEW/$t.merged" "$OUT/$t.tsv"
  done
  rm -rf "$NEW"
fi
for t in summary curves; do
  [ -f "$OUT/$t.tsv" ] || { echo "experiments: no $OUT/$t.tsv: run experiments/run.sh first" >&2; exit 2; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# cell RUN COLUMN: that column of the run's row of summary.tsv (empty if none)
cell() {
  awk -F'\t' -v n="$1" -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next }
    $1 == n { print $k; exit }' "$OUT/summary.tsv"
}
# summary RUN: the run's summary event, as the JSON object it logged
summary() {
  awk -F'\t' -v n="$1" 'NR == 1 { for (i = 3; i <= 8; i++) h[i] = $i; next }
    $1 == n { s = "{\"event\":\"summary\""; for (i = 3; i <= 8; i++) s = s ",\"" h[i] "\":" ($i == "" ? "null" : $i)
              print s "}"; exit }' "$OUT/summary.tsv"
}

label() {
  case "$1" in
    adam) echo "Adam (fp32 allreduce)" ;;
    onebit) echo "1-bit Adam" ;;
    onebit_pre) echo "1-bit Adam, preconditioned compression" ;;
    onebit_fp32) echo "1-bit Adam, compression off" ;;
    naive) echo "naive 1-bit (compressed gradient, no freeze)" ;;
  esac
}

# Table
{
  echo "# 1-bit Adam against its baselines, on our runs"
  echo
  echo "Generated by \`experiments/run.sh\` from the summaries of its logs in \`docs/experiments/\` ($RANKS ranks,"
  echo "specs in \`experiments/specs/\`). Bytes are those one rank's optimizer sent (measured by the"
  echo "communicator's counters). Eval loss: mean cross-entropy per example (MLP) or per byte"
  echo "(transformer, nats; bits/byte = nats / ln 2)."
  for w in mlp transformer; do
    [ -n "$(cell "$w-adam" run)" ] || continue
    adam_eval=$(cell "$w-adam" eval_loss)
    adam_bytes=$(cell "$w-adam" bytes_sent)
    echo
    echo "## $w"
    echo
    echo "| variant | final train loss | eval loss | vs adam | eval accuracy | freeze step | bytes sent / rank | vs adam | wall s |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for v in $VARIANTS; do
      [ -n "$(cell "$w-$v" run)" ] || continue
      if [ "$(cell "$w-$v" summary)" != 1 ]; then
        why=$(cell "$w-$v" failed)
        last=$(cell "$w-$v" last_step)
        echo "| $(label "$v") | diverged: ${why:-no summary} (last logged step ${last:-none}) | | | | | | | |"
        continue
      fi
      jq -r --arg name "$(label "$v")" --argjson ae "$adam_eval" --argjson ab "$adam_bytes" \
        'select(.event=="summary") |
         "| \($name) | \(.final_train_loss*10000|round/10000) | \(.eval_loss*10000|round/10000) | \(((.eval_loss/$ae - 1)*1000|round)/10)% | \(.eval_accuracy*10000|round/10000) | \(.freeze_step // "—") | \(.bytes_sent) | \((.bytes_sent/$ab*1000|round)/1000)x | \(.wall_seconds*10|round/10) |"' <<< "$(summary "$w-$v")"
    done
  done
  if [ -n "$(cell mlp-adam-seed2 run)" ]; then
    ev() { cell "$1" eval_loss; }
    echo
    echo "## mlp: seeds and ablations of onebit_adam with precondition"
    echo
    echo "| run | adam eval loss | onebit_pre eval loss | difference |"
    echo "|---|---|---|---|"
    for sd in 1 2 3; do
      suffix=""; [ "$sd" = 1 ] || suffix="-seed$sd"
      a=$(ev "mlp-adam$suffix"); b=$(ev "mlp-onebit_pre$suffix")
      [ -n "$a" ] && [ -n "$b" ] && awk -v s="$sd" -v a="$a" -v b="$b" \
        'BEGIN { printf "| seed %s | %.4f | %.4f | %+.1f%% |\n", s, a, b, (b / a - 1) * 100 }'
    done
    a1=$(ev mlp-adam); a2=$(ev mlp-adam-seed2); a3=$(ev mlp-adam-seed3)
    b1=$(ev mlp-onebit_pre); b2=$(ev mlp-onebit_pre-seed2); b3=$(ev mlp-onebit_pre-seed3)
    awk -v a="$a1 $a2 $a3" -v b="$b1 $b2 $b3" 'BEGIN { n = split(a, x); split(b, y);
      for (i = 1; i <= n; i++) { sa += x[i]; sb += y[i] }
      printf "| mean of %d seeds | %.4f | %.4f | %+.1f%% |\n", n, sa / n, sb / n, (sb / sa - 1) * 100 }'
    for ab in block256 freeze600; do
      b=$(ev "mlp-onebit_pre-$ab")
      [ -n "$b" ] && awk -v n="$ab" -v a="$a1" -v b="$b" \
        'BEGIN { printf "| seed 1, onebit_pre %s | %.4f | %.4f | %+.1f%% |\n", n, a, b, (b / a - 1) * 100 }'
    done
  fi
} > "$OUT/results.md"

# Curves: train loss per logged step and eval loss, one plot per workload.
for w in mlp transformer; do
  [ -n "$(cell "$w-adam" run)" ] || continue
  for v in $VARIANTS; do
    [ -n "$(cell "$w-$v" run)" ] || continue
    for e in step:train eval:eval; do
      awk -F'\t' -v n="$w-$v" -v e="${e%:*}" '$1 == n && $2 == e { print $3, $4 }' "$OUT/curves.tsv" > "$TMP/$w-$v.${e#*:}.dat"
    done
    # gnuplot needs a point; a run that diverged before its first evaluation gets a blank line
    [ -s "$TMP/$w-$v.eval.dat" ] || echo "0 NaN" > "$TMP/$w-$v.eval.dat"
  done
  for fmt in svg png; do
    if [ "$fmt" = svg ]; then term="svg size 900,420 dynamic"; else term="pngcairo size 900,420"; fi
    gnuplot <<GP
set terminal $term
set output "$OUT/$w-loss.$fmt"
set termoption noenhanced
set multiplot layout 1,2 title "$w: $RANKS ranks, same seed and steps"
set xlabel "step"; set ylabel "train loss (log scale)"; set grid; set key top right
set logscale y
plot for [v in "$VARIANTS"] "$TMP/$w-".v.".train.dat" using 1:2 with lines title v
unset logscale y
set ylabel "eval loss"
plot for [v in "$VARIANTS"] "$TMP/$w-".v.".eval.dat" using 1:2 with linespoints title v
unset multiplot
GP
  done
done
echo "experiments: wrote $OUT/results.md and the plots in $OUT/"
