#!/usr/bin/env python3
"""PyTorch DistributedDataParallel, the peer onebit is measured against (bench/peers/run.sh).

The same two models as bench/net/specs/ (an MLP on Fashion-MNIST and a byte-level GPT-2-style
transformer on the fortunes corpus), the same initialisation scales, data, batch per rank,
optimizer (Adam, beta 0.9/0.99, eps 1e-8, bias correction) and learning-rate schedule
(linear warmup then step decay), trained with DDP over gloo in one of these variants:

  fp32       plain DDP (default 25 MB buckets, allreduce overlapped with the backward pass)
  fp16       DDP + the fp16 compression hook (gradients cast to half for the allreduce)
  powersgdR  DDP + the PowerSGD hook of rank R (error feedback, warm start), its start
             iteration given by --start-iter (the 1-bit run's freeze step)

Prints JSON lines on rank 0: a start line, one "step" line per step (time of forward, backward
with its communication and the optimizer step; the loss), one "eval" line every --eval-interval
steps (mean cross-entropy over the whole held-out split, as onebit-worker's eval event), and a
summary. With --target the run stops at the first eval at or below the target loss.

Environment (set by run.sh): MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, GLOO_SOCKET_IFNAME.
With --single: one process, no DDP, for the compute check (samples/s of the same step).
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

FASHION = "/usr/share/datasets/fashion-mnist"
FORTUNES = "/usr/share/games/fortunes"


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# ---- data -------------------------------------------------------------------------------------

def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find_idx(root, stem):
    for name in (stem + "-ubyte.gz", stem + "-ubyte", stem + ".gz", stem):
        p = os.path.join(root, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{root}: no {stem}[-ubyte][.gz]")


class Fashion:
    """Pixels standardised with the train split's mean and deviation of pixel/255, as the
    worker's `normalize: standardize`."""

    def __init__(self, root=FASHION):
        xtr = read_idx(find_idx(root, "train-images-idx3"))
        self.ytr = torch.from_numpy(read_idx(find_idx(root, "train-labels-idx1")).astype(np.int64))
        xte = read_idx(find_idx(root, "t10k-images-idx3"))
        self.yte = torch.from_numpy(read_idx(find_idx(root, "t10k-labels-idx1")).astype(np.int64))
        hist = np.bincount(xtr.reshape(-1), minlength=256).astype(np.float64)
        v = np.arange(256) / 255.0
        mean = (hist * v).sum() / hist.sum()
        std = math.sqrt((hist * (v - mean) ** 2).sum() / hist.sum())
        lut = ((v - mean) / std).astype(np.float32)
        self.xtr = torch.from_numpy(lut[xtr.reshape(len(xtr), -1)])
        self.xte = torch.from_numpy(lut[xte.reshape(len(xte), -1)])

    def sampler(self, rank, world, batch, seed):
        """Rank `rank` draws from its shard of the train split, reshuffled every epoch."""
        idx = np.arange(rank, len(self.ytr), world)
        rng = np.random.default_rng(seed * 1000003 + rank)
        while True:
            perm = rng.permutation(idx)
            for i in range(0, len(perm) - batch + 1, batch):
                sel = torch.from_numpy(perm[i:i + batch])
                yield self.xtr[sel], self.ytr[sel]

    def eval_batches(self, size=1000, max_examples=0):
        idx = torch.arange(len(self.yte))
        if 0 < max_examples < len(self.yte):
            idx = torch.tensor([j * len(self.yte) // max_examples for j in range(max_examples)])
        for i in range(0, len(idx), size):
            sel = idx[i:i + size]
            yield self.xte[sel], self.yte[sel]


def fortunes_bytes(root=FORTUNES):
    """The corpus as the worker reads it: names sorted bytewise, hidden names and symbolic
    links skipped, files with a NUL in their first 4096 bytes skipped."""
    out = bytearray()

    def walk(d):
        for name in sorted(os.listdir(d), key=os.fsencode):
            if name.startswith("."):
                continue
            p = os.path.join(d, name)
            if os.path.islink(p):
                continue
            if os.path.isdir(p):
                walk(p)
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    data = f.read()
                if b"\0" in data[:4096]:
                    continue
                out.extend(data)

    walk(root)
    return bytes(out)


class Text:
    """Train/eval split in chunks of 4096 bytes, a tenth of them held out (the worker's
    Bresenham rule); eval windows of T+1 bytes every T bytes."""

    def __init__(self, context, eval_fraction=0.1, chunk=4096):
        data = fortunes_bytes()
        tr, ev = bytearray(), bytearray()
        n = (len(data) + chunk - 1) // chunk
        for i in range(n):
            part = data[i * chunk:(i + 1) * chunk]
            if math.floor((i + 1) * eval_fraction) > math.floor(i * eval_fraction):
                ev.extend(part)
            else:
                tr.extend(part)
        self.tr = torch.frombuffer(bytearray(tr), dtype=torch.uint8).long()
        self.ev = torch.frombuffer(bytearray(ev), dtype=torch.uint8).long()
        self.T = context

    def sampler(self, rank, world, batch, seed):
        g = torch.Generator().manual_seed(seed * 1000003 + rank)
        hi = len(self.tr) - self.T - 1
        while True:
            starts = torch.randint(0, hi, (batch,), generator=g)
            rows = torch.stack([self.tr[s:s + self.T + 1] for s in starts.tolist()])
            yield rows[:, :-1], rows[:, 1:]

    def eval_batches(self, size=256, max_examples=0):
        """Every eval window, or max_examples of them spread evenly (window j*W//N of W, as the
        worker's eval.max_examples)."""
        T = self.T
        nwin = (len(self.ev) - 1) // T
        ks = list(range(nwin))
        if 0 < max_examples < nwin:
            ks = [j * nwin // max_examples for j in range(max_examples)]
        for i in range(0, len(ks), size):
            rows = torch.stack([self.ev[k * T:k * T + T + 1] for k in ks[i:i + size]])
            yield rows[:, :-1], rows[:, 1:]


# ---- models -----------------------------------------------------------------------------------

class MLP(nn.Module):
    """784-H1-...-10 with ReLU; He initialisation, output layer N(0, 0.1/sqrt(fan_in)), zero
    biases: the worker's `type: mlp`."""

    def __init__(self, hidden, inputs=784, classes=10):
        super().__init__()
        dims = [inputs] + list(hidden)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out = nn.Linear(dims[-1], classes)
        with torch.no_grad():
            for lin in self.hidden:
                lin.weight.normal_(0.0, math.sqrt(2.0 / lin.in_features))
                lin.bias.zero_()
            self.out.weight.normal_(0.0, 0.1 / math.sqrt(self.out.in_features))
            self.out.bias.zero_()

    def forward(self, x):
        for lin in self.hidden:
            x = F.relu(lin(x))
        return self.out(x)


class Block(nn.Module):
    def __init__(self, C, nh, res_std):
        super().__init__()
        self.nh = nh
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)
        with torch.no_grad():
            for lin, std in ((self.qkv, 0.02), (self.proj, res_std), (self.fc, 0.02),
                             (self.fcproj, res_std)):
                lin.weight.normal_(0.0, std)
                lin.bias.zero_()

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        hs = C // self.nh
        q, k, v = (t.view(B, T, self.nh, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Transformer(nn.Module):
    """Decoder-only byte transformer, pre-LN GPT-2 blocks, tied output, the worker's
    `type: transformer` (std 0.02, residual projections 0.02/sqrt(2L))."""

    def __init__(self, layers, heads, d_model, context, vocab=256):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(context, d_model)
        res_std = 0.02 / math.sqrt(2 * layers)
        self.blocks = nn.ModuleList(Block(d_model, heads, res_std) for _ in range(layers))
        self.lnf = nn.LayerNorm(d_model, eps=1e-5)
        with torch.no_grad():
            self.wte.weight.normal_(0.0, 0.02)
            self.wpe.weight.normal_(0.0, 0.02)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        return self.lnf(x) @ self.wte.weight.t()


def loss_of(model_kind, logits, y):
    if model_kind == "transformer":
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return F.cross_entropy(logits, y)


def lr_at(t, peak, warmup, rate, every):
    """The worker's warmup_step_decay at step t (1-based)."""
    if t <= warmup:
        return peak * t / warmup
    return peak * rate ** ((t - warmup) // every)


# ---- the run ----------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=["mlp", "transformer"], required=True)
    ap.add_argument("--variant", default="fp32")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--eval-interval", type=int, default=0)
    ap.add_argument("--eval-max", type=int, default=0,
                    help="evaluate on this many examples/windows, spread evenly (0: all)")
    ap.add_argument("--target", type=float, default=None, help="stop at this eval loss")
    ap.add_argument("--start-iter", type=int, default=1, help="PowerSGD's first compressed step")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--single", action="store_true", help="one process, no DDP (compute check)")
    ap.add_argument("--gloo-threads", type=int, default=0,
                    help="a process group with this many gloo threads (0: the default group)")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    ap.add_argument("--batched", action="store_true", help="batched_powerSGD_hook")
    ap.add_argument("--peak-lr", type=float, default=1e-3)
    a = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    if a.model == "mlp":
        data, model, batch = Fashion(), MLP([1024, 1024]), 64
        sched = (a.peak_lr, 100, 0.99, 50)
    else:
        data, model, batch = Text(32), Transformer(2, 4, 256, 32), 4
        sched = (a.peak_lr, 100, 0.99, 25)
    nparams = sum(p.numel() for p in model.parameters())

    rank, world = 0, 1
    net = model
    if not a.single:
        dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=600))
        rank, world = dist.get_rank(), dist.get_world_size()
        pg = None
        if a.gloo_threads:
            # A process group of its own with a set number of gloo threads (the default group
            # has 2, which run concurrent collectives in a different order on different ranks).
            o = dist.ProcessGroupGloo._Options()
            o._devices = [dist.ProcessGroupGloo.create_device(
                interface=os.environ.get("GLOO_SOCKET_IFNAME", "lo"))]
            o._threads = a.gloo_threads
            o._timeout = __import__("datetime").timedelta(seconds=600)
            store = dist.PrefixStore("peers", dist.distributed_c10d._get_default_store())
            pg = dist.ProcessGroupGloo(store, rank, world, o)
        net = nn.parallel.DistributedDataParallel(
            model, process_group=pg, bucket_cap_mb=a.bucket_mb)
        v = a.variant
        if v == "fp16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            net.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif v.startswith("powersgd"):
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
            state = ps.PowerSGDState(process_group=pg, matrix_approximation_rank=int(v[8:]),
                                     start_powerSGD_iter=max(2, a.start_iter),
                                     use_error_feedback=True, warm_start=True,
                                     random_seed=a.seed)
            hook = ps.batched_powerSGD_hook if a.batched else ps.powerSGD_hook
            net.register_comm_hook(state, hook)
        elif v != "fp32":
            raise SystemExit(f"unknown variant {v}")
    opt = torch.optim.Adam(model.parameters(), lr=sched[0], betas=(0.9, 0.99), eps=1e-8)
    batches = data.sampler(rank, world, batch, a.seed)
    if rank == 0:
        emit({"event": "start", "system": "ddp-" + a.variant if not a.single else "torch-single",
              "world_size": world, "num_params": nparams, "model": a.model,
              "batch_size": batch, "torch": torch.__version__})

    train_s = 0.0
    reached = None
    t_run = time.perf_counter()
    for t in range(1, a.steps + 1):
        x, y = next(batches)
        for g in opt.param_groups:
            g["lr"] = lr_at(t, *sched)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(a.model, net(x), y)
        loss.backward()
        opt.step()
        lv = loss.item()
        dt = time.perf_counter() - t0
        train_s += dt
        if rank == 0:
            emit({"event": "step", "step": t, "loss": lv, "step_s": dt, "train_s": train_s})
        if not math.isfinite(lv):
            if rank == 0:
                emit({"event": "diverged", "step": t})
            break
        if a.eval_interval and (t % a.eval_interval == 0 or t == a.steps):
            with torch.no_grad():
                tot, cnt = 0.0, 0
                for ex, ey in data.eval_batches(max_examples=a.eval_max):
                    lo = model(ex)
                    n = ey.numel()
                    tot += loss_of(a.model, lo, ey).item() * n
                    cnt += n
            ev = tot / cnt
            if rank == 0:
                emit({"event": "eval", "step": t, "eval_loss": ev, "train_s": train_s})
            if a.target is not None and ev <= a.target and reached is None:
                reached = (t, train_s)
                break
    if rank == 0:
        emit({"event": "summary", "steps": t, "train_s": train_s,
              "wall_s": time.perf_counter() - t_run,
              "target_step": reached[0] if reached else None,
              "target_train_s": reached[1] if reached else None})
    if not a.single:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
