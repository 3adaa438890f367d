#!/usr/bin/env bash
# A program job killed mid-run resumes bit-exactly: train_small.py on NP ranks uninterrupted,
# then the same run with one rank SIGKILLed twice (before and after the freeze) and restarted
# each time from its newest checkpoint; the final parameters must be the same bytes. Then a rank
# sent SIGTERM: every rank stops at the same logged step, checkpoints it and exits 0, and the
# resumed run continues from that step (not from the last interval's) to the same bytes.
#   test_resume.sh PYTHON PYTHONPATH NP
set -u
py=$1 pypath=$2 np=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
check() { if eval "$2"; then passed=$((passed + 1)); echo "[ PASSED ] $1"; else
  failed=$((failed + 1)); echo "[ FAILED ] $1"; fi; }
run() { # DIR OUT [KILL] [TERM]
  TRAIN_SMALL_KILL=${3:-0 -1} TRAIN_SMALL_TERM=${4:-0 -1} mpirun -np "$np" --oversubscribe \
    -x PYTHONPATH="$pypath" -x ONEBIT_PROGRESS=off -x TRAIN_SMALL_KILL -x TRAIN_SMALL_TERM \
    "$py" "$here/train_small.py" --dir "$1" --out "$2" >>"$work/log" 2>&1
}
run "$work/a" "$work/a.f32"
check "uninterrupted run" "[ -s $work/a.f32 ]"
run "$work/b" "$work/b.f32" "35 $((np - 1))"
check "rank $((np - 1)) killed after step 35 (in the warmup) ends the run" "[ ! -e $work/b.f32 ]"
rm -f "$work/b/.killed"
run "$work/b" "$work/b.f32" "90 0"
check "rank 0 killed after step 90 (resumed from 25, frozen at 40) ends the run" "[ ! -e $work/b.f32 ]"
run "$work/b" "$work/b.f32"
check "the resumed run finishes from step 75" "grep -q 'from step 75' $work/log"
check "final parameters identical to the uninterrupted run's" "cmp -s $work/a.f32 $work/b.f32"

# SIGTERM to the last rank after step 52 (checkpoints every 25): the ranks agree at the next
# logged step (60), save there and exit 0.
run "$work/c" "$work/c.f32" "0 -1" "52 $((np - 1))"
rc=$?
check "SIGTERM to rank $((np - 1)): every rank exits 0" "[ $rc -eq 0 ] && [ ! -e $work/c.f32 ]"
check "stopped after step 60 and saved there" \
  "grep -q 'stopped after step 60 (a stop signal to another rank): saved' $work/log && [ -d $work/c/step-00000060 ]"
run "$work/c" "$work/c.f32"
check "the run resumes from the stop's checkpoint (step 60)" \
  "grep -q 'done: 120 steps from step 60' $work/log"
check "final parameters identical to the uninterrupted run's" "cmp -s $work/a.f32 $work/c.f32"
[ "$failed" -eq 0 ] || tail -30 "$work/log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
