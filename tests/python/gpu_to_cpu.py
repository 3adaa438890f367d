"""A checkpoint written by onebit.torch on a GPU resumes on the CPU (scripts/gpu-check.sh):

    mpirun -np 1 python3 gpu_to_cpu.py DIR save   # on cuda: 30 steps (frozen at 10), saved
    mpirun -np 1 python3 gpu_to_cpu.py DIR load   # on the CPU: loaded, the same bits, 10 more

The saving process also writes the state it saved (parameters, m, v, both error buffers) to
DIR/gpu.state; the loading one compares what it loaded with it, byte for byte, then trains on.
"""
import ctypes
import math
import os
import sys

import torch

import onebit
import onebit.torch as obt

out, phase = sys.argv[1], sys.argv[2]
world = onebit.init(device="cuda" if phase == "save" else "cpu")
dev = torch.device(world.device)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)).to(dev)
opt = obt.OnebitAdam(model.named_parameters(), lr=1e-2, betas=(0.9, 0.99), freeze_step=10,
                     block_size=64)


def raw():
    parts = [opt.flat_params.detach().cpu()] + [opt.engine_state(w) for w in (
        "exp_avg", "exp_avg_sq", "worker_error", "server_error")]
    return b"".join(ctypes.string_at(t.data_ptr(), 4 * t.numel()) for t in parts)


def train(first, last):
    loss = None
    for step in range(first, last):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(32, 16, generator=g).to(dev)
        loss = torch.nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long().to(dev))
        loss.backward()
        opt.step(loss=loss)
        opt.zero_grad()
    return float(loss)


if phase == "save":
    train(0, 30)
    obt.save(out, model, opt)
    with open(os.path.join(out, "gpu.state"), "wb") as f:
        f.write(raw())
    print("saved on %s: step %d, frozen at %d" % (dev, opt.stats().step, opt.stats().freeze_step))
else:
    got = obt.load(out, model, opt)
    assert got and got["step"] == 30, got
    with open(os.path.join(out, "gpu.state"), "rb") as f:
        want = f.read()
    if raw() != want:
        sys.exit("the state loaded on the CPU differs from the state the GPU saved")
    loss = train(30, 40)
    if not math.isfinite(loss) or opt.stats().step != 40:
        sys.exit("training on from the GPU checkpoint failed: loss %r" % loss)
    print("loaded on the CPU: the same bytes; 10 more steps, loss %.4f" % loss)
