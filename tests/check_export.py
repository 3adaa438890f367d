#!/usr/bin/env python3
"""Reads a checkpoint with h5py and its npz / safetensors exports with numpy alone, and checks
that every named tensor is exactly its slice of the flat buffers (bit for bit), that the index
covers the buffer, and that the exports hold nothing else.

usage: check_export.py STATE_H5 NPZ SAFETENSORS OPTIM(0|1)
Exits 1 on any mismatch, printing what differed."""
import json
import struct
import sys

import h5py
import numpy as np


def fail(msg):
    print("check_export: " + msg)
    sys.exit(1)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    if n % 8 != 0 or 8 + n > len(raw):
        fail(f"safetensors header size {n} (file of {len(raw)} bytes)")
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    meta = header.pop("__metadata__", {})
    out, spans = {}, []
    for name, e in header.items():
        if e["dtype"] != "F32":
            fail(f"{name}: dtype {e['dtype']}")
        b, end = e["data_offsets"]
        shape = tuple(e["shape"])
        if end - b != 4 * int(np.prod(shape)):
            fail(f"{name}: offsets {b}..{end} for shape {shape}")
        out[name] = np.frombuffer(data[b:end], dtype="<f4").reshape(shape)
        spans.append((b, end))
    spans.sort()
    pos = 0
    for b, end in spans:  # contiguous, no holes, covering the data (the spec requires it)
        if b != pos:
            fail(f"safetensors data has a hole or overlap at {pos}")
        pos = end
    if pos != len(data):
        fail(f"safetensors data of {len(data)} bytes, tensors cover {pos}")
    return out, meta


def main():
    state, npz_path, st_path, optim = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    with h5py.File(state, "r") as f:
        flat = {
            "": f["/model/params"][()],
            "exp_avg.": f["/optim/exp_avg"][()],
            "exp_avg_sq.": f["/optim/exp_avg_sq"][()],
        }
        index = f["/model/tensors"][()]
        step = int(f.attrs["step"])
    d = flat[""].shape[0]
    want = {}
    pos = 0
    for row in index:
        name = row["name"].decode()
        shape = tuple(int(x) for x in row["shape"][: row["ndim"]])
        off = int(row["offset"])
        if off != pos:
            fail(f"h5py: {name} at {off}, expected {pos}")
        n = int(np.prod(shape))
        pos += n
        for prefix in ("", "exp_avg.", "exp_avg_sq.") if optim else ("",):
            want[prefix + name] = flat[prefix][off : off + n].reshape(shape)
    if pos != d or len(index) < 2:
        fail(f"h5py: the index covers {pos} of {d} elements in {len(index)} tensors")

    npz = np.load(npz_path)
    got_st, meta = read_safetensors(st_path)
    if meta.get("step") != str(step):
        fail(f"safetensors metadata {meta}, checkpoint step {step}")
    for label, got in (("npz", {k: npz[k] for k in npz.files}), ("safetensors", got_st)):
        if sorted(got) != sorted(want):
            fail(f"{label}: names {sorted(got)}, expected {sorted(want)}")
        for name, w in want.items():
            g = got[name]
            if g.dtype != np.float32 or g.shape != w.shape:
                fail(f"{label}: {name} is {g.dtype} {g.shape}, expected float32 {w.shape}")
            if g.tobytes() != w.tobytes():
                fail(f"{label}: {name} differs from its slice of the checkpoint")
    print(f"check_export: {len(want)} tensors match ({d} parameters, step {step})")


main()
