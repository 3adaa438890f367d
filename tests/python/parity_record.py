"""Records a run of onebit.torch.OnebitAdam (or Adam) for test_py_replay, the engine's own
optimizer fed the same gradients: run under mpirun -np N.

    parity_record.py OUT [--steps 300] [--kind onebit_adam|adam] [--device cpu|cuda]

A small torch model (linear layers, a layer norm, a 0-dim scalar) trains on data drawn from
(rank, step), with a cosine learning rate set through torch.optim.lr_scheduler, weight decay and
an auto freeze that comes inside the run (beta2 0.99). Writes to OUT:
  init.f32          the parameters every rank started from (rank 0's, broadcast)
  lrs.f64           the learning rate of each step
  rank-R.grads      each step's gradient of rank R as the engine received it (steps x d)
  rank-R.final      after the last step: params (d), m (d), v (d), worker error (D), server (C)
  meta.txt          d steps freeze_step D C
"""
import argparse
import ctypes
import math
import os
import struct

import torch

import onebit
import onebit.torch as obt

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--kind", default="onebit_adam")
ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
a = ap.parse_args()

def raw(t):
    """The bytes of a tensor (no numpy needed)."""
    t = t.detach().cpu().contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


w = onebit.init(device=a.device)
dev = torch.device(w.device)
torch.manual_seed(1234 + w.rank)  # every rank its own init: the optimizer must broadcast rank 0's


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(24, 48)
        self.norm = torch.nn.LayerNorm(48)
        self.l2 = torch.nn.Linear(48, 40)
        self.l3 = torch.nn.Linear(40, 5)
        self.temp = torch.nn.Parameter(torch.tensor(1.0))

    def forward(self, x):
        h = torch.relu(self.norm(self.l1(x)))
        return self.l3(torch.tanh(self.l2(h))) * self.temp


model = Net().to(dev)
kw = dict(lr=3e-3, betas=(0.9, 0.99), eps=1e-7, weight_decay=0.01, total_steps=a.steps,
          log_interval=50)
if a.kind == "onebit_adam":
    opt = obt.OnebitAdam(model.named_parameters(), block_size=64, **kw)
else:
    opt = obt.Adam(model.named_parameters(), **kw)
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / a.steps)) * 0.9 + 0.1)
os.makedirs(a.out, exist_ok=True)
if w.rank == 0:
    with open(os.path.join(a.out, "init.f32"), "wb") as f:
        f.write(raw(opt.flat_params))
lrs = []
with open(os.path.join(a.out, "rank-%d.grads" % w.rank), "wb") as gf:
    for step in range(a.steps):
        g = torch.Generator().manual_seed(1000 * step + w.rank)
        x = torch.randn(16, 24, generator=g).to(dev)
        y = torch.randint(0, 5, (16,), generator=g).to(dev)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if step % 7 == 3:  # gradients torch put elsewhere must be gathered too
            model.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
        lrs.append(opt.param_groups[0]["lr"])
        opt._gather_grads()
        gf.write(raw(opt._grad))
        opt.step(loss=loss, batch_size=16)
        opt.zero_grad()
        sched.step()
s = opt.stats()
with open(os.path.join(a.out, "rank-%d.final" % w.rank), "wb") as f:
    for which in ("exp_avg", "exp_avg_sq", "worker_error", "server_error"):
        if which == "exp_avg":
            f.write(raw(opt.flat_params))
        f.write(raw(opt.engine_state(which)))
if w.rank == 0:
    with open(os.path.join(a.out, "lrs.f64"), "wb") as f:
        f.write(struct.pack("<%dd" % len(lrs), *lrs))
    with open(os.path.join(a.out, "meta.txt"), "w") as f:
        f.write("%d %d %d %d %d\n" % (opt.flat_params.numel(), a.steps, s.freeze_step,
                                      opt.engine_state("worker_error").numel(),
                                      opt.engine_state("server_error").numel()))
    print("recorded %d steps of %d parameters on %s, freeze at step %d" %
          (a.steps, opt.flat_params.numel(), dev, s.freeze_step))
