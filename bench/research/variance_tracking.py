#!/usr/bin/env python3
"""Research harness: can 1-bit Adam keep Adam's variance after an early freeze without sending
gradients? (docs/research/variance-tracking.md)

Not the engine and not the front end: a numerical experiment in one process, on the models of
examples/pytorch/ (gpt.py's byte-level GPT, fmnist.py's MLP of bench/net) with N simulated
ranks, each on its own batches (the examples' batch streams), so that a run is cheap to repeat
for many seeds and settings before anything is built into the engine.

Adam's v is the EMA of the squared *averaged* gradient. Each rank can keep, from its own
gradient g_i alone, A_i = EMA_b2(g_i^2) and B_i = EMA_b2(u_i^2), u_i = the bias-corrected
EMA_b1(g_i). For gradients with mean mu and per-rank noise s^2 (stationary),
E[A_i] = mu^2 + s^2, E[B_i] = mu^2 + k s^2 with k = (1 - b1) / (1 + b1), and Adam's
E[v] = mu^2 + s^2 / N, so

    v_est = alpha mean_i A_i + beta mean_i B_i,  beta = (1 - 1/N) / (1 - k), alpha = 1 - beta

(clamped to at least mean_i A_i / N), one average over the ranks of two vectors: the cost of
one or two gradient exchanges every K steps instead of one every step.

  study   along an exact Adam trajectory (the N ranks' averaged gradients), how far v_est, the
          mean of the local A_i, and v frozen at steps 16, 100, 275 and 475 are from Adam's own
          v at a few steps: median |ln(estimate / v)|, share within 2x, median ratio.
  train   one whole run: adam (exact), frozen (1-bit Adam: Adam until --freeze, then error-
          compensated 1-bit momentum with worker and server errors, sign times the block's mean
          magnitude, blocks of 2048, and the adam_bound stabiliser, v frozen at the freeze) or
          track (the same, v re-estimated as v_est every --every compressed steps). Prints one
          TSV line: model, seed, mode, freeze, every, then step:eval_loss pairs, seconds.
          --exchange fp16/fp8 sums the Adam steps' gradients as the engine's exchange does
          (ring_sum: the engine's codes, its ring order, its rounding per hop); fp8m / fp8v
          take fp8's sum for m only / v only and the exact sum for the other; the environment
          variable RING_SHIFT (study only) starts chunk j's sum at rank j + RING_SHIFT (-1: at
          rank 0 for every chunk).

  python3 bench/research/variance_tracking.py study --model gpt --seed 1
  python3 bench/research/variance_tracking.py train --model gpt --seed 1 --mode track --freeze 75
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))


class Job:
    """The model, its data, batches, schedule and evaluation, as the examples define them."""

    def __init__(self, kind, seed, steps, hidden=(1024, 1024), activation="relu", batch=64):
        self.kind, self.seed, self.steps = kind, seed, steps
        torch.manual_seed(seed)
        a = argparse.Namespace(seed=seed)
        if kind == "gpt":  # bench/peers/program.sh's GPT_FLAGS, gpt.py's schedule
            import gpt as G
            a.batch_size, a.context, a.eval_batches = 4, 32, 128
            self.train_text, self.held = G.load_corpus()
            self.model = G.GPT(32, 2, 128, 4)
            self.lr0, self.warm, self.beta2 = 3e-3, 75, 0.999
            self.G = G
        else:  # bench/net/specs/mlp.yaml: 784-1024-1024-10, 64 a rank, 1e-3 x0.99 every 50
            import fmnist as M
            a.batch_size = batch
            self.X, self.Y, self.XT, self.YT = M.load_fashion_mnist(M.FASHION_MNIST)
            torch.manual_seed(seed)
            self.model = M.make_model("mlp", hidden, activation)
            self.lr0, self.warm, self.beta2 = 1e-3, 100, 0.99
            self.M = M
        self.args = a
        self.params = list(self.model.parameters())
        self.name = kind if kind == "gpt" else "mlp%s-%s-b%d" % (
            "x".join(map(str, hidden)) or "0", activation, batch)

    def lr(self, t):
        if t < self.warm:
            return self.lr0 * (t + 1) / self.warm
        if self.kind != "gpt":
            return self.lr0 * 0.99 ** ((t - self.warm) // 50)
        p = (t - self.warm) / max(1, self.steps - self.warm)
        return self.lr0 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))

    def grads(self, n, t):
        """(n, D): every rank's gradient at step t (the current parameters)."""
        out = []
        for r in range(n):
            self.model.zero_grad()
            if self.kind == "gpt":
                xb, yb = self.G.train_batch(self.train_text, self.args, r, t)
                loss = F.cross_entropy(self.model(xb).reshape(-1, 256), yb.reshape(-1))
            else:
                xb, yb = self.M.train_batch(self.X, self.Y, self.args, r, t)
                loss = F.cross_entropy(self.model(xb), yb)
            loss.backward()
            out.append(torch.cat([p.grad.reshape(-1) for p in self.params]))
        return torch.stack(out)

    def flat(self):
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def load(self, x):
        off = 0
        for p in self.params:
            p.data.copy_(x[off:off + p.numel()].view_as(p))
            off += p.numel()

    def evaluate(self):
        with torch.no_grad():
            if self.kind != "gpt":
                return F.cross_entropy(self.model(self.XT), self.YT).item()
            world = argparse.Namespace(rank=0, size=1)
            tot, cnt = 0.0, 0
            for xb, yb in self.G.eval_batches(self.held, self.args, world):
                tot += F.cross_entropy(self.model(xb).reshape(-1, 256), yb.reshape(-1),
                                       reduction="sum").item()
                cnt += yb.numel()
            return tot / cnt


class LocalMoments:
    """Every rank's A_i, u_i, B_i and the estimate of Adam's v from their means."""

    def __init__(self, n, d, b1, b2):
        self.n, self.b1, self.b2 = n, b1, b2
        k = (1 - b1) / (1 + b1)
        self.beta = (1 - 1 / n) / (1 - k)
        self.alpha = 1 - self.beta
        self.u, self.A, self.B = (torch.zeros(n, d) for _ in range(3))

    def update(self, g, s):
        self.u.mul_(self.b1).add_((1 - self.b1) * g)
        self.A.mul_(self.b2).add_((1 - self.b2) * g * g)
        uh = self.u / (1 - self.b1 ** s)
        self.B.mul_(self.b2).add_((1 - self.b2) * uh * uh)

    def mean_a(self, s):
        return self.A.mean(0) / (1 - self.b2 ** s)

    def estimate(self, s, clamp="mean"):
        """clamp "mean": on the means (this study's estimate); "rank": every rank's share
        clamped before the mean (what the engine's one exchange sums)."""
        c2 = 1 / (1 - self.b2 ** s)
        if clamp == "rank":
            a = self.A * c2
            return (self.alpha * a + self.beta * self.B * c2).maximum(a / self.n).mean(0)
        a, b = self.mean_a(s), self.B.mean(0) * c2
        return (self.alpha * a + self.beta * b).clamp_min(a / self.n)


# The gradients' exchange of onebit/f16sum.h: per block of 256 a shift bringing the block's
# largest |x| into [2^7, 2^8) (fp8, E4M3: 3 mantissa bits, subnormals from 2^-9) or [2^14, 2^15)
# (fp16: 10 bits, subnormals from 2^-24), each element rounded to nearest even.
CODES = {"fp8": (7, 3, -6), "fp16": (14, 10, -14), "fp8x": (7, 3, -126)}


def code_round(x, code, block=256):
    top, mant, emin = CODES[code]
    d = x.shape[-1]
    pad = (-d) % block
    xb = F.pad(x, (0, pad)).reshape(-1, block)
    mx = xb.abs().amax(1, keepdim=True)
    shift = torch.where(mx > 0, top - torch.floor(torch.log2(mx.clamp_min(1e-38))),
                        torch.zeros_like(mx))
    y = xb * torch.pow(2.0, shift)
    e = torch.floor(torch.log2(y.abs().clamp_min(1e-38))).clamp_min(emin)
    q = torch.pow(2.0, e - mant)
    y = torch.round(y / q) * q
    return (y * torch.pow(2.0, -shift)).reshape(-1)[:d]


RING_SHIFT = int(os.environ.get("RING_SHIFT", "0"))  # -1: every chunk from rank 0 (study only)


def ring_sum(g, code, block=256):
    """The sum over the ranks (rows of g) as the exchange forms it: the vector cut into N
    chunks (of whole blocks), chunk j summed in the ring's order j, j+1, ..., j-1, its first
    rank's values rounded, then each partial sum rounded after the next rank's are added."""
    if code == "fp32":
        return g.sum(0)
    n, d = g.shape
    C = -(-d // (n * block)) * block
    gp = F.pad(g, (0, n * C - d))
    out = torch.empty(n * C)
    for j in range(n):
        first = (j + RING_SHIFT) % n if RING_SHIFT >= 0 else 0
        s = code_round(gp[first, j * C:(j + 1) * C], code, block)
        for k in range(1, n):
            r = (first + k) % n
            s = code_round(s + gp[r, j * C:(j + 1) * C], code, block)
        out[j * C:(j + 1) * C] = s
    return out[:d]


def sign_code(c, block):
    """sign(c) times the mean |c| of each block (c: (..., multiple of block))."""
    cb = c.reshape(*c.shape[:-1], -1, block)
    s = cb.abs().mean(-1, keepdim=True)
    return (torch.where(cb >= 0, 1.0, -1.0) * s).reshape(c.shape)


def closeness(est, ref):
    ok = ref > 1e-30
    r = torch.log(est[ok].clamp_min(1e-38) / ref[ok])
    return (r.abs().median().item(), (r.abs() < math.log(2)).float().mean().item(),
            r.median().exp().item())


def study(job, n, b1):
    d = sum(p.numel() for p in job.params)
    b2 = job.beta2
    opt = torch.optim.AdamW(job.params, lr=job.lr0, betas=(b1, b2), eps=1e-8, weight_decay=0.0)
    lm = LocalMoments(n, d, b1, b2)
    v = torch.zeros(d)
    frozen = {}
    print("step\testimate\tmedian_abs_ln\twithin_2x\tmedian_ratio")
    for t in range(job.steps):
        s = t + 1
        g = job.grads(n, t)
        gbar = g.mean(0)
        off = 0
        for p in job.params:
            p.grad.copy_(gbar[off:off + p.numel()].view_as(p))
            off += p.numel()
        for grp in opt.param_groups:
            grp["lr"] = job.lr(t)
        opt.step()
        lm.update(g, s)
        v.mul_(b2).add_((1 - b2) * gbar * gbar)
        vh = v / (1 - b2 ** s)
        if s in (16, 100, 275, 475):
            frozen[s] = vh.clone()
        if s in (50, 100, 200, 300, 475, 700, 1000, 1400):
            rows = [("local_mean_A", lm.mean_a(s)), ("v_est", lm.estimate(s))]
            rows += [("frozen_%d" % f, vf) for f, vf in sorted(frozen.items())]
            for name, est in rows:
                print("%d\t%s\t%.3f\t%.2f\t%.2f" % ((s, name) + closeness(est, vh)), flush=True)


def train(job, n, b1, mode, T, K, block, eval_every, inflate=1.0, clamp="mean", code="fp32"):
    d = sum(p.numel() for p in job.params)
    dp = (d + block - 1) // block * block
    b2, eps = job.beta2, 1e-8
    bound = (1 - b1) / math.sqrt(1 - b2)  # adam_bound: the largest |m| / sqrt(v) Adam reaches
    x = job.flat()
    m, v, vf = torch.zeros(d), torch.zeros(d), None
    lm = LocalMoments(n, d, b1, b2) if mode == "track" else None
    ew, es = torch.zeros(n, dp), torch.zeros(dp)
    evals, t0 = [], time.time()
    for t in range(job.steps):
        s = t + 1
        g = job.grads(n, t)
        lr = job.lr(t)
        if lm:
            lm.update(g, s)
        if mode == "adam" or s <= T:
            # fp8m / fp8v: fp8's sum for m only / v only, the exact one for the other (where
            # the rounding noise of the warmup's exchange does its damage)
            gbar = ring_sum(g, code.rstrip("mv")) / n
            gm = gbar if code != "fp8v" else g.sum(0) / n
            gv = gbar if code != "fp8m" else g.sum(0) / n
            m.mul_(b1).add_((1 - b1) * gm)
            v.mul_(b2).add_((1 - b2) * gv * gv)
            mh, vh = m / (1 - b1 ** s), v / (1 - b2 ** s)
            x -= lr * mh / (vh.sqrt() + eps)
            if s == T and mode != "adam":
                vf, m = vh.clone(), mh.clone()
        else:
            if lm and (s - T) % K == 0:
                vf = lm.estimate(s, clamp) * inflate
            local = b1 * m + (1 - b1) * g  # every rank's momentum
            c = F.pad(local, (0, dp - d)) + ew
            q = sign_code(c, block)
            ew = c - q
            cs = q.mean(0) + es  # the servers' average, in one piece
            qs = sign_code(cs, block)
            es = cs - qs
            m = qs[:d].clone()
            x -= lr * m / torch.maximum(vf.sqrt() + eps, m.abs() / bound)
        job.load(x)
        if s % eval_every == 0 or s == job.steps:
            evals.append("%d:%.6f" % (s, job.evaluate()))
    name = mode if inflate == 1.0 else "%s-x%g" % (mode, inflate)
    name += "" if clamp == "mean" or mode != "track" else "-rankclamp"
    name += "" if code == "fp32" else "-" + code
    print("%s\t%d\t%s\t%d\t%d\t%s\t%.0f" % (job.name, job.seed, name, T, K, " ".join(evals),
                                            time.time() - t0), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("study", "train"))
    p.add_argument("--model", choices=("gpt", "mlp"), default="gpt")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--mode", choices=("adam", "frozen", "track"), default="track")
    p.add_argument("--freeze", type=int, default=75, help="the freeze step (frozen, track)")
    p.add_argument("--every", type=int, default=25, help="track: steps between estimates")
    p.add_argument("--inflate", type=float, default=1.0, help="track: v_est times this")
    p.add_argument("--clamp", choices=("mean", "rank"), default="mean",
                   help="track: clamp the means (this study) or every rank's share (the engine)")
    p.add_argument("--exchange", choices=("fp32", "fp16", "fp8", "fp8x", "fp8m", "fp8v"),
                   default="fp32",
                   help="the gradients' exchange of the Adam steps (the warmup), emulated")
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--block", type=int, default=2048)
    p.add_argument("--hidden", default="1024,1024", help="mlp: hidden widths ('' for none)")
    p.add_argument("--activation", choices=("relu", "gelu", "tanh"), default="relu")
    p.add_argument("--batch-size", type=int, default=64, help="mlp: examples a rank and step")
    a = p.parse_args()
    torch.set_num_threads(1)
    hidden = tuple(int(w) for w in a.hidden.split(",") if w)
    job = Job(a.model, a.seed, a.steps, hidden, a.activation, a.batch_size)
    if a.what == "study":
        study(job, a.ranks, 0.9)
    else:
        train(job, a.ranks, 0.9, a.mode, a.freeze, a.every, a.block, a.eval_every, a.inflate,
              a.clamp, a.exchange)


if __name__ == "__main__":
    main()
