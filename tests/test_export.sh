#!/usr/bin/env bash
# Named tensors of checkpoints, black-box: a tiny job trained by the real onebit-worker, its
# checkpoint read with h5py through the tensor index, exported to npz and safetensors by
# onebit-ckpt and read back with numpy (np.load, and the safetensors header parsed with json),
# every tensor compared with its slice of the flat buffers; then a hostile index (offsets past
# the buffer) that onebit-ckpt verify and export must refuse.
# usage: test_export.sh WORKER CKPT_TOOL MPIEXEC
set -u
WORKER=$1
CKPT=$2
MPIEXEC=$3
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "[ PASSED ] $1"; }
bad() { failed=$((failed + 1)); echo "[ FAILED ] $1: $2"; }

# A Python with h5py and numpy (python3-h5py, python3-numpy): the one on PATH, else Debian's.
PY=
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import h5py, numpy' 2> /dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
  echo "[ FAILED ] no python3 with h5py and numpy (scripts/install-deps.sh installs them)"
  exit 1
fi

train() { # NAME MODEL_JSON DATA_JSON
  printf '{"name": "job", "model": %s, "data": %s,
  "optimizer": {"type": "onebit_adam", "freeze_step": 10, "block_size": 32},
  "batch_size": 8, "steps": 20, "seed": 5, "log_interval": 10,
  "checkpoint": {"interval": 0}}\n' "$2" "$3" > "$TMP/$1.json"
  timeout 300 "$MPIEXEC" --oversubscribe -np 2 "$WORKER" --spec "$TMP/$1.json" \
    --checkpoint-dir "$TMP/$1" > "$TMP/$1.jsonl" 2> "$TMP/$1.err"
}

for model in mlp transformer; do
  if [ $model = mlp ]; then
    train mlp '{"type": "mlp", "hidden": [24, 12]}' \
      '{"type": "synthetic_classification", "n_train": 512, "n_eval": 128, "input_dim": 20, "num_classes": 5}'
  else
    train transformer '{"type": "transformer", "layers": 2, "heads": 2, "d_model": 16, "context": 16, "tied_output": false}' \
      '{"type": "synthetic_text", "train_bytes": 8192, "eval_bytes": 1024, "alphabet": 16}'
  fi
  rc=$?
  CK="$TMP/$model/job/step-00000020"
  rm -f "$TMP/c.out"
  if [ $rc -eq 0 ] && [ -f "$CK/state.h5" ]; then ok "$model: trained, checkpoint at step 20"
  else bad "$model: training" "rc=$rc $(tail -3 "$TMP/$model.err")"; continue; fi

  if "$CKPT" verify "$CK" > "$TMP/v.out" 2>&1 && grep -q 'ok (step 20' "$TMP/v.out"; then
    ok "$model: onebit-ckpt verify: $(cat "$TMP/v.out")"
  else bad "$model: verify" "$(cat "$TMP/v.out")"; fi

  # Parameters only, then with the optimizer state; the job directory and the state file
  # name the same checkpoint as its directory does.
  if "$CKPT" export "$TMP/$model/job" --format npz -o "$TMP/$model.npz" > "$TMP/e.out" 2>&1 &&
     "$CKPT" export "$CK/state.h5" --format safetensors -o "$TMP/$model.safetensors" >> "$TMP/e.out" 2>&1 &&
     "$PY" "$HERE/check_export.py" "$CK/state.h5" "$TMP/$model.npz" "$TMP/$model.safetensors" 0 > "$TMP/c.out" 2>&1; then
    ok "$model: npz and safetensors read back with numpy: $(cat "$TMP/c.out")"
  else bad "$model: export" "$(cat "$TMP/e.out" "$TMP/c.out")"; fi
  if "$CKPT" export "$CK" --format npz --optim -o "$TMP/$model-o.npz" > "$TMP/e.out" 2>&1 &&
     "$CKPT" export "$CK" --optim --format safetensors -o "$TMP/$model-o.safetensors" >> "$TMP/e.out" 2>&1 &&
     "$PY" "$HERE/check_export.py" "$CK/state.h5" "$TMP/$model-o.npz" "$TMP/$model-o.safetensors" 1 > "$TMP/c.out" 2>&1; then
    ok "$model: --optim exports exp_avg.* and exp_avg_sq.*: $(cat "$TMP/c.out")"
  else bad "$model: export --optim" "$(cat "$TMP/e.out" "$TMP/c.out")"; fi
done

# The zip is one numpy's zipfile accepts as sound (every CRC checked).
if "$PY" -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); sys.exit(z.testzip() is not None)' \
     "$TMP/mlp-o.npz"; then ok "npz: every entry's CRC verifies"
else bad "npz CRCs" "zipfile.testzip failed"; fi

# --- a hostile index: offsets moved past the buffer, written with valid checksums ------------
cp -r "$TMP/mlp/job/step-00000020" "$TMP/hostile"
"$PY" - "$TMP/hostile/state.h5" <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    idx = f["/model/tensors"][()]
    idx["offset"][1] = 1 << 40
    del f["/model/tensors"]
    f.create_dataset("/model/tensors", data=idx)
PYEOF
"$CKPT" verify "$TMP/hostile" > "$TMP/h.out" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q "/model/tensors: tensor 'layer0.bias' starts at 1099511627776, expected 480" "$TMP/h.out"; then
  ok "hostile index: verify refuses it ($(grep -o "tensor 'layer0.bias'.*)" "$TMP/h.out" | head -1))"
else bad "hostile index: verify" "rc=$rc $(cat "$TMP/h.out")"; fi
"$CKPT" export "$TMP/hostile" --format npz -o "$TMP/h.npz" > "$TMP/h.out" 2>&1; rc=$?
if [ $rc -eq 1 ] && [ ! -e "$TMP/h.npz" ] && [ ! -e "$TMP/h.npz.tmp" ] &&
   grep -q "starts at 1099511627776" "$TMP/h.out"; then ok "hostile index: export refuses it, writes nothing"
else bad "hostile index: export" "rc=$rc $(cat "$TMP/h.out")"; fi
# Bad usage is status 2.
"$CKPT" export "$TMP/mlp" --format csv -o "$TMP/x" > /dev/null 2>&1; rc=$?
if [ $rc -eq 2 ]; then ok "unknown format: status 2"; else bad "unknown format" "rc=$rc"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
