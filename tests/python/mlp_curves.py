"""torch's own MLP trained the way onebit-worker trains its built-in one: run under mpirun -np N
on what py_engine_export wrote for N ranks (the engine's initial parameters, each rank's batches,
the spec with its defaults filled in).

    mlp_curves.py EXPORT OUT.tsv [--steps K] [--check ENGINE.jsonl]

The model is nn.Linear layers with the spec's activation between them, named as the engine's
tensors and loaded from its initial parameters; the loss is torch's cross-entropy, the mean over
the rank's batch; the optimizer is onebit.torch.OnebitAdam (or Adam) with the spec's optimizer
fields, stepped at the spec's learning rate for each step (onebit/schedule.h). Only the forward
and backward passes are torch's, on torch's BLAS: what differs from the engine's run is their
rounding. Rank 0 writes OUT.tsv: `step<TAB>loss` per step (the mean over the ranks, as the
worker's step reports), then `eval<TAB>step<TAB>loss` at the spec's eval interval and after the
last step (over every rank's share of the eval split, as the worker's evaluation).

--check: compare with onebit-worker's progress lines (ENGINE.jsonl, the same spec and ranks) and
exit 1 unless the optimizer froze after the same step and the curves agree where rounding alone
cannot part them (test_py_mlp_curves): the first loss to the worker's printed digits (two units
of the 7th: relative 2e-6), every loss up to the freeze within 1e-5 (measured: under 1e-6,
bench/python/RESULTS-mlp-curves.md), and, since after the freeze 1-bit signs make rounding grow,
the later losses and the last eval loss within 1e-2 (measured after 300 compressed steps: under
7e-3).
"""
import argparse
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

import onebit
import onebit.torch as obt

ap = argparse.ArgumentParser()
ap.add_argument("export")
ap.add_argument("out")
ap.add_argument("--steps", type=int, default=0, help="stop after K steps (0: the spec's)")
ap.add_argument("--check", metavar="ENGINE.jsonl", help="compare with the worker's run")
a = ap.parse_args()

torch.set_num_threads(1)
w = onebit.init(device="cpu")
spec = json.load(open(os.path.join(a.export, "spec.json")))
d, input_dim, num_classes, batch, spec_steps, eval_interval = (
    int(v) for v in open(os.path.join(a.export, "meta.txt")).read().split())
steps = a.steps or spec_steps
mspec = spec["model"]
if mspec["type"] not in ("softmax", "mlp"):
    raise SystemExit("mlp_curves.py: model.type %s: only softmax and mlp" % mspec["type"])
ACT = {"relu": torch.relu, "tanh": torch.tanh,
       "gelu": lambda x: F.gelu(x, approximate="tanh")}


class MLP(torch.nn.Module):
    """The engine's classifier (model_mlp.c): layer<i> = Linear(fan_in, hidden[i]) and the
    activation, then output = Linear(fan_in, num_classes); softmax is the loss's."""

    def __init__(self, hidden, act):
        super().__init__()
        self.hidden = list(hidden) if mspec["type"] == "mlp" else []
        fan = input_dim
        for i, h in enumerate(self.hidden):
            setattr(self, "layer%d" % i, torch.nn.Linear(fan, h))
            fan = h
        self.output = torch.nn.Linear(fan, num_classes)
        self.act = ACT[act]

    def forward(self, x):
        for i in range(len(self.hidden)):
            x = self.act(getattr(self, "layer%d" % i)(x))
        return self.output(x)


model = MLP(mspec.get("hidden", []), mspec.get("activation", "relu"))
flat = np.fromfile(os.path.join(a.export, "params.f32"), dtype=np.float32)
table = {}
for line in open(os.path.join(a.export, "tensors.txt")):
    f = line.split()
    table[f[0]] = (int(f[1]), int(f[2]))
names = [n for n, _ in model.named_parameters()]
if sorted(names) != sorted(table) or flat.size != d:
    raise SystemExit("mlp_curves.py: torch's tensors %s are not the engine's %s" % (names, table))
with torch.no_grad():
    for n, p in model.named_parameters():
        off, numel = table[n]
        p.copy_(torch.from_numpy(flat[off:off + numel].copy()).view(p.shape))

# The spec's optimizer fields, as OnebitAdam's keyword arguments (the same names and defaults).
o = dict(spec["optimizer"])
kind = o.pop("type")
betas = (o.pop("beta1"), o.pop("beta2"))
if o.pop("overlap", False):
    raise SystemExit("mlp_curves.py: optimizer.overlap has no torch hook: leave it off")
lr = spec["lr"]
cls = {"onebit_adam": obt.OnebitAdam, "adam": obt.Adam}.get(kind)
if cls is None:
    raise SystemExit("mlp_curves.py: optimizer.type %s: only onebit_adam and adam" % kind)
kw = dict(lr=lr["peak"], betas=betas, total_steps=spec_steps, log_interval=max(1, spec_steps))
if cls is obt.Adam:  # a spec's adam carries the 1-bit fields too, at their defaults
    o = {k: v for k, v in o.items() if k in ("eps", "weight_decay", "bias_correction",
                                             "gradient_exchange", "bucket_mb")}
else:
    kw["lr_warmup_steps"] = lr["warmup_steps"]
opt = cls(model.named_parameters(), **kw, **o)


def lr_at(t):
    """onebit/schedule.h's ob_lr_at: the learning rate of step t (from 1)."""
    peak, warm = lr["peak"], lr["warmup_steps"]
    t = max(t, 1)
    if t <= warm:
        return peak * t / warm
    after = t - warm
    if lr["schedule"] == "warmup_step_decay":
        return peak * math.pow(lr["decay_rate"], after // lr["decay_every"])
    if lr["schedule"] == "cosine":
        p = min(after / (spec_steps - warm), 1.0)
        return lr["min_lr"] + (lr["peak"] - lr["min_lr"]) * 0.5 * (1.0 + math.cos(math.pi * p))
    return peak


def shard(name):
    x = np.fromfile(os.path.join(a.export, "rank-%d.%s.x" % (w.rank, name)), dtype=np.float32)
    y = np.fromfile(os.path.join(a.export, "rank-%d.%s.y" % (w.rank, name)), dtype=np.int32)
    return torch.from_numpy(x.reshape(-1, input_dim)), torch.from_numpy(y.astype(np.int64))


tx, ty = shard("train")
ex, ey = shard("eval")
if tx.shape[0] < steps * batch:
    raise SystemExit("mlp_curves.py: the export has %d batches, not %d" % (tx.shape[0] // batch,
                                                                         steps))


@torch.no_grad()
def evaluate():
    s = F.cross_entropy(model(ex), ey, reduction="sum").item() if len(ey) else 0.0
    tot = w.sum([s, float(len(ey))])
    return tot[0] / tot[1] if tot[1] > 0 else float("nan")


losses, evals = [], []
for step in range(1, steps + 1):
    x, y = tx[(step - 1) * batch:step * batch], ty[(step - 1) * batch:step * batch]
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.param_groups[0]["lr"] = lr_at(step)
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
    if (eval_interval > 0 and step % eval_interval == 0) or step == steps:
        evals.append((step, evaluate()))
means = []  # onebit's sum takes up to 16 values a call
for i in range(0, len(losses), 16):
    means += [v / w.size for v in w.sum(losses[i:i + 16])]
if w.rank == 0:
    with open(a.out, "w") as f:
        for step, v in enumerate(means, 1):
            f.write("%d\t%.9g\n" % (step, v))
        for step, v in evals:
            f.write("eval\t%d\t%.9g\n" % (step, v))


def r7(x):
    """As the worker prints a loss ("%.7g")."""
    return float("%.7g" % x)


def check(path):
    e, ee, freeze = {}, {}, None
    for line in open(path):
        if line.startswith("{"):
            ev = json.loads(line)
            if ev["event"] == "step":
                e[ev["step"]] = ev["loss"]
            elif ev["event"] == "eval":
                ee[ev["step"]] = ev["eval_loss"]
            elif ev["event"] == "freeze":
                freeze = ev["step"]
    bad = []

    def within(what, got, want, tol):
        r = abs(r7(got) - want) / abs(want)
        if not r <= tol:
            bad.append("%s: torch %.9g, engine %.7g: relative %.2e > %g" % (what, got, want, r,
                                                                             tol))
        return r

    if freeze is None or sorted(e) != list(range(1, steps + 1)) or steps not in ee:
        bad.append("%s: want a freeze, a step line each step (log_interval 1) and an eval at "
                   "step %d" % (path, steps))
    else:
        within("step 1", means[0], e[1], 2e-6)
        worst = [0.0, 0.0]
        for s in range(1, steps + 1):
            late = s > freeze
            worst[late] = max(worst[late], within("step %d" % s, means[s - 1], e[s],
                                                  1e-2 if late else 1e-5))
        within("eval loss at step %d" % steps, dict(evals)[steps], ee[steps], 1e-2)
        if opt.stats().freeze_step != freeze:
            bad.append("freeze after step %d, the worker's after step %d" %
                       (opt.stats().freeze_step, freeze))
        print("mlp_curves.py: %d ranks, freeze after step %d: relative difference up to it "
              "%.1e, after it %.1e" % (w.size, freeze, worst[0], worst[1]))
    for b in bad[:10]:
        print("mlp_curves.py: mismatch: " + b)
    return not bad


if a.check and w.rank == 0 and not check(a.check):
    raise SystemExit(1)
