"""optimizer.overlap through the front end, under mpirun: for OnebitAdam (across its freeze),
Adam and BinSGDM, a run whose exchange starts in the backward pass (overlap=True, hooks on the
gradients' accumulation) must end with the same bits as the same run exchanging in step() with
the same buckets: parameters, m, v and both error buffers, on every rank. The runs include
gradients torch puts in tensors of its own (model.zero_grad(set_to_none=True)), accumulation
over two backward passes (no_sync() for the first) and a parameter no backward pass reaches.
Exits non-zero on any difference.

    mpirun -np 2 python3 tests/python/overlap_check.py [--steps 40]
"""
import argparse
import contextlib
import sys

import torch

import onebit
import onebit.torch as obt

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=40)
a = ap.parse_args()
w = onebit.init()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(24, 64)
        self.l2 = torch.nn.Linear(64, 64)
        self.l3 = torch.nn.Linear(64, 5)
        self.unused = torch.nn.Parameter(torch.ones(7))  # never in the graph

    def forward(self, x):
        return self.l3(torch.tanh(self.l2(torch.relu(self.l1(x)))))


def make(kind, model, overlap):
    # 4 KiB buckets: several of this model's 10,000 parameters each
    kw = dict(bucket_mb=0.004, overlap=overlap, total_steps=a.steps, log_interval=a.steps)
    if kind == "onebit_adam":
        return obt.OnebitAdam(model.named_parameters(), lr=3e-3, betas=(0.9, 0.99),
                              freeze_step=12, block_size=32, **kw)
    if kind == "adam":
        return obt.Adam(model.named_parameters(), lr=3e-3, **kw)
    return obt.BinSGDM(model.named_parameters(), lr=1e-3, block_size=32, **kw)


def run(kind, overlap):
    torch.manual_seed(5)
    model = Net()
    opt = make(kind, model, overlap)
    for step in range(a.steps):
        g = torch.Generator().manual_seed(100 * step + w.rank)
        if step % 5 == 2:
            model.zero_grad(set_to_none=True)
        passes = 2 if step % 4 == 1 else 1
        for k in range(passes):
            x = torch.randn(8, 24, generator=g)
            y = torch.randint(0, 5, (8,), generator=g)
            with opt.no_sync() if k < passes - 1 else contextlib.nullcontext():
                torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    state = [opt.flat_params.clone()] + [opt.engine_state(s) for s in
                                         ("exp_avg", "exp_avg_sq", "worker_error",
                                          "server_error")]
    return state, opt.overlapped_steps, opt.stats().freeze_step


def bits(t):
    return t.contiguous().view(torch.int32)


failed = 0
for kind in ("onebit_adam", "adam", "binsgdm"):
    after, n_after, freeze_a = run(kind, False)
    during, n_during, freeze_b = run(kind, True)
    names = ("parameters", "m", "v", "worker error", "server error")
    diff = [n for n, x, y in zip(names, after, during)
            if x.shape != y.shape or not torch.equal(bits(x), bits(y))]
    if diff or n_after != 0 or n_during != a.steps or freeze_a != freeze_b:
        failed += 1
        print("rank %d %s: differ in %s; overlapped steps %d and %d of %d; freeze %d and %d" %
              (w.rank, kind, diff or "nothing", n_after, n_during, a.steps, freeze_a, freeze_b),
              flush=True)
    elif w.rank == 0:
        print("%s: %d steps on %d ranks, every one overlapped, the same bits as exchanging "
              "in step()" % (kind, a.steps, w.size), flush=True)
sys.exit(1 if failed else 0)
