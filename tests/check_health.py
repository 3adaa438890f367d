#!/usr/bin/env python3
"""Recomputes the compression-health numbers of every logged step from the checkpoint of the
same step, independently of the worker (numpy, float64, straight from the HDF5 files), and
compares them with what the worker's step events say.

  ||e_worker||/||m|| = sqrt(sum_r ||worker_error_r||^2 / (N ||m||^2))
  ||e_server||/||m|| = sqrt(sum_r ||server_error_r||^2) / ||m||
  zero fraction      = #(m == 0) / d

usage: check_health.py EVENTS_JSONL JOB_DIR [--zeros]
--zeros: the model has coordinates whose momentum stays exactly 0 (a language model's embedding
rows of bytes the data never holds), so the fraction must be above 0 in the compression phase.
Exits 1 on any mismatch or broken invariant."""
import glob
import json
import math
import os
import sys

import h5py
import numpy as np


def fail(msg):
    print("check_health: " + msg)
    sys.exit(1)


def from_checkpoint(d):
    with h5py.File(os.path.join(d, "state.h5"), "r") as f:
        m = f["/optim/exp_avg"][()].astype(np.float64)
        n = int(f.attrs["world_size"])
        freeze = int(f.attrs["freeze_step"])
    we = se = 0.0
    for r in range(n):
        with h5py.File(os.path.join(d, "rank-%05d.h5" % r), "r") as f:
            we += float(np.sum(f["/optim/worker_error"][()].astype(np.float64) ** 2))
            se += float(np.sum(f["/optim/server_error"][()].astype(np.float64) ** 2))
    mm = float(np.sum(m * m))
    return math.sqrt(we / (n * mm)), math.sqrt(se / mm), float(np.mean(m == 0.0)), freeze


def close(a, b):
    return abs(a - b) <= 1e-7 + 2e-6 * abs(b)  # float sums, 7 significant digits in JSON


def main():
    events = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    steps = [e for e in events if e.get("event") == "step"]
    if not steps:
        fail("no step events")
    want_zeros = "--zeros" in sys.argv[3:]
    compared = compressing = 0
    for e in steps:
        w, s, z = e["worker_error_ratio"], e["server_error_ratio"], e["zero_momentum_fraction"]
        if None in (w, s, z):
            fail(f"step {e['step']}: health missing: {e}")
        if not (0.0 <= z <= 1.0):
            fail(f"step {e['step']}: zero-momentum fraction {z}")
        d = os.path.join(sys.argv[2], "step-%08d" % e["step"])
        if not os.path.isdir(d):
            continue
        cw, cs, cz, freeze = from_checkpoint(d)
        if not (close(w, cw) and close(s, cs) and close(z, cz)):
            fail(f"step {e['step']}: reported ({w}, {s}, {z}), from the checkpoint ({cw}, {cs}, {cz})")
        compared += 1
        if freeze < 0 or e["step"] == freeze:  # warmup, or the freeze step itself: no errors yet
            if w != 0.0 or s != 0.0:
                fail(f"step {e['step']} (freeze step {freeze}): error ratios {w}, {s} before compressing")
        else:  # compressed steps: errors exist, of the momentum's order
            compressing += 1
            if not (0.01 < w < 100.0 and 0.01 < s < 100.0):
                fail(f"step {e['step']}: implausible error ratios {w}, {s}")
            if want_zeros and not (0.0 < z < 1.0):
                fail(f"step {e['step']}: zero-momentum fraction {z}, expected some zeros")
    if compared < 4 or compressing < 2:
        fail(f"only {compared} steps compared, {compressing} in the compression phase")
    zeros = steps[-1]["zero_momentum_fraction"]
    print(f"check_health: {compared} logged steps match their checkpoints ({compressing} compressing,"
          f" last zero-momentum fraction {zeros:.4f})")


main()
