"""The optimizer's share of a training step: the char-level GPT of examples/pytorch/gpt.py in
bf16 autocast (on a GPU; fp32 on the CPU), one rank, stepped by torch.optim.Adam (fused where
torch has it), onebit.torch.Adam and onebit.torch.OnebitAdam (before and after its freeze).
Each step is timed in two parts with the device synchronised between them: forward + backward,
and the optimizer's step (zero_grad included). Prints one line per optimizer with the median
milliseconds of each part, the optimizer's share of the step and its ratio to torch's.

    mpirun -np 1 python3 bench/python/optim_share.py [--device cuda] [--layers 6 --d-model 512]
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "pytorch"))
import onebit  # noqa: E402
import onebit.torch as obt  # noqa: E402
from gpt import GPT  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument("--layers", type=int, default=6)
ap.add_argument("--d-model", type=int, default=512)
ap.add_argument("--heads", type=int, default=8)
ap.add_argument("--context", type=int, default=256)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--steps", type=int, default=80)
ap.add_argument("--skip", type=int, default=10, help="first steps of each phase not timed")
ap.add_argument("--profile", action="store_true",
                help="also list the device kernels of 5 optimizer steps at the end of each run "
                     "(torch.profiler; a GPU only)")
a = ap.parse_args()

world = onebit.init(device=a.device)
dev = torch.device(world.device)
cuda = dev.type == "cuda"
sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)


def run(name, make_opt, freeze=None):
    torch.manual_seed(0)
    model = GPT(a.context, a.layers, a.d_model, a.heads).to(dev)
    opt = make_opt(model)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (a.batch, a.context + 1), generator=g).to(dev)
    fb, st = {0: [], 1: []}, {0: [], 1: []}
    for step in range(a.steps):
        phase = 1 if freeze is not None and step >= freeze else 0
        sync()
        t0 = time.perf_counter()
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(x[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 256),
                                                     x[:, 1:].reshape(-1))
        loss.backward()
        sync()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        sync()
        t2 = time.perf_counter()
        first = freeze if phase else 0
        if step >= first + a.skip:
            fb[phase].append(t1 - t0)
            st[phase].append(t2 - t1)
    if a.profile and cuda:
        profile_steps(name, model, opt, x)
    out = []
    for phase in (0, 1):
        if st[phase]:
            f, o = statistics.median(fb[phase]) * 1e3, statistics.median(st[phase]) * 1e3
            out.append((name + (" (compression)" if phase else ""), f, o, o / (f + o)))
    return out, sum(p.numel() for p in model.parameters())


def profile_steps(name, model, opt, x):
    """Five optimizer steps on one gradient under torch.profiler: the device time of each kernel
    (the engine's own among them), for rank 0."""
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).float().reshape(-1, 256),
                                                 x[:, 1:].reshape(-1))
    loss.backward()
    sync()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(5):
            opt.step()
        sync()
    if world.rank != 0:
        return
    print("# %s: device kernels of 5 optimizer steps" % name)
    for key in ("device_time_total", "cuda_time_total"):  # the name in torch 2.x, then 1.x
        try:
            print(prof.key_averages().table(sort_by=key, row_limit=14))
            return
        except (KeyError, AttributeError, ValueError):
            continue


def torch_adam(m):
    kw = {"fused": True} if cuda and "fused" in torch.optim.Adam.__init__.__code__.co_varnames \
        else {}
    return torch.optim.Adam(m.parameters(), lr=3e-4, **kw)


os.environ.setdefault("ONEBIT_PROGRESS", "off")
rows, n = run("torch.optim.Adam" + (" fused" if cuda else ""), torch_adam)
rows += run("onebit.torch.Adam", lambda m: obt.Adam(m.parameters(), lr=3e-4))[0]
half = a.steps // 2
rows += run("onebit.torch.OnebitAdam", lambda m: obt.OnebitAdam(
    m.parameters(), lr=3e-4, freeze_step=half), freeze=half)[0]
if world.rank == 0:
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    print("# %s, torch %s, GPT %d layers d_model %d context %d batch %d (%d parameters), %s" %
          (name, torch.__version__, a.layers, a.d_model, a.context, a.batch, n,
           "bf16 autocast" if cuda else "fp32"))
    print("optimizer\tfwd+bwd_ms\toptim_ms\toptim_share\tshare_vs_torch")
    base = rows[0][3]
    for r in rows:
        print("%s\t%.3f\t%.3f\t%.3f\t%.2f" % (r[0], r[1], r[2], r[3], r[3] / base))
