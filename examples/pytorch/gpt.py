"""A byte-level GPT trained with 1-bit Adam on Debian's fortunes, data-parallel over MPI ranks.

    mpirun -np 4 python3 examples/pytorch/gpt.py --steps 200
    python3 examples/pytorch/gpt.py --optimizer torch-adam        # single-process reference
    mpirun -np 4 python3 examples/pytorch/gpt.py --optimizer ddp-fp16   # PyTorch DDP, to compare

The model is a small decoder-only transformer (token and position embeddings, pre-LayerNorm
blocks with causal self-attention and a GELU MLP, an output head tied to the token embedding).
The optimizer is the engine's (onebit.torch.OnebitAdam, BinSGDM or Adam): it averages the
gradients over the ranks itself, so there is no DistributedDataParallel wrapper. The ddp-*
optimizers are what a user would run instead: torch.optim.AdamW under DistributedDataParallel
over gloo (plain fp32, the fp16 compression hook, or the PowerSGD hook), the same program and
schedule otherwise; gloo meets at MASTER_ADDR:MASTER_PORT (default 127.0.0.1:29500).

--target-loss stops the run at its first evaluation at or below that loss and prints the step
and the seconds of training it took (evaluations and checkpoints left out): the time to target
that bench/peers/program.sh compares.

Every rank draws its own batches from (seed, rank, step), so a resumed run sees exactly the
batches it would have seen: a checkpoint stores nothing about the data but the step.

Progress goes to stdout on rank 0 as JSON lines (ONEBIT_PROGRESS=json, the default, what onebitd
reads), as text for people (ONEBIT_PROGRESS=text) or not at all (off); the last line is
"final eval loss X".
"""

import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import onebit
import onebit.torch

FORTUNES = "/usr/share/games/fortunes"
ENGINE_OPTIMIZERS = ("onebit", "binsgdm", "adam")
DDP_OPTIMIZERS = ("ddp-fp32", "ddp-fp16", "ddp-powersgd")
OPTIMIZERS = ENGINE_OPTIMIZERS + ("torch-adam",) + DDP_OPTIMIZERS


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=600, help="optimizer steps in all (default 600)")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per rank and step")
    p.add_argument("--context", type=int, default=64, help="bytes a sequence holds")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (cosine decay)")
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="onebit",
                   help="onebit: onebit.torch.OnebitAdam; binsgdm: onebit.torch.BinSGDM; adam: "
                        "onebit.torch.Adam (the engine's Adam, fp32 allreduce); torch-adam: "
                        "torch.optim.AdamW, one process only; ddp-fp32, ddp-fp16, "
                        "ddp-powersgd: torch.optim.AdamW under DistributedDataParallel (gloo)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="onebit/binsgdm/adam: another optimizer setting of the job spec, its "
                        "value in JSON (e.g. refresh_steps=16, gradient_exchange=\"fp8\"); "
                        "repeatable")
    p.add_argument("--powersgd-rank", type=int, default=1,
                   help="ddp-powersgd: the rank of its low-rank approximation")
    p.add_argument("--powersgd-start", type=int, default=10,
                   help="ddp-powersgd: the first step it compresses (fp32 allreduce before)")
    p.add_argument("--target-loss", type=float, default=None,
                   help="stop at the first evaluation at or below this eval loss")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-interval", type=int, default=200)
    p.add_argument("--eval-batches", type=int, default=16,
                   help="the eval set: this many batches of --batch-size windows, spread over "
                        "the held-out text and shared out among the ranks")
    p.add_argument("--checkpoint-dir", default=os.environ.get("ONEBIT_CHECKPOINT_DIR"),
                   help="resume from and save to this directory (default "
                        "$ONEBIT_CHECKPOINT_DIR; none: no checkpoints)")
    p.add_argument("--checkpoint-interval", type=int, default=0, help="0: only at the end")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--bf16", action="store_true",
                   help="forward and backward under torch.autocast in bfloat16 (fp32 weights)")
    p.add_argument("--freeze-step", default="auto",
                   help="onebit: 'auto' or the step after which the variance is frozen")
    p.add_argument("--gradient-exchange", choices=("fp32", "fp16", "fp8"), default=None,
                   help="onebit/adam: how the gradients of the Adam steps cross the network "
                        "(default: the optimizer's, fp8 for onebit, fp32 for adam)")
    args = p.parse_args()
    if args.freeze_step != "auto":
        args.freeze_step = int(args.freeze_step)
    options = {}
    for kv in args.option:
        key, eq, value = kv.partition("=")
        if not eq or not key:
            p.error("--option %r: expected KEY=VALUE" % kv)
        try:
            options[key] = json.loads(value)
        except ValueError:
            p.error("--option %s: the value is not JSON: %r" % (key, value))
    if options and args.optimizer not in ENGINE_OPTIMIZERS:
        p.error("--option: only for the engine's optimizers (%s)" % ", ".join(ENGINE_OPTIMIZERS))
    args.option = options
    if args.d_model % args.heads:
        p.error("--d-model must be a multiple of --heads")
    return args


# --- data ------------------------------------------------------------------------------------

def load_corpus(path=FORTUNES):
    """The plain-text fortune files (not the .dat indexes nor the .u8 links), concatenated in
    sorted order; the last 10% is held out for evaluation. Returns two uint8 tensors."""
    names = sorted(n for n in os.listdir(path)
                   if not n.endswith((".dat", ".u8")) and not n.startswith(".")
                   and os.path.isfile(os.path.join(path, n)))
    if not names:
        raise SystemExit("no text in %s: install Debian's fortunes package" % path)
    data = b"".join(open(os.path.join(path, n), "rb").read() for n in names)
    text = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    cut = int(len(text) * 0.9)
    return text[:cut], text[cut:]


def batch_generator(seed, rank, step):
    """The random stream of one rank's batch at one step: a function of (seed, rank, step)
    only, so that a resumed run draws the same batches."""
    return torch.Generator().manual_seed((seed * 1_000_003 + rank) * 1_000_000_007 + step)


def windows(text, starts, context):
    """Inputs and targets: for each start, text[start : start+context] and the bytes after."""
    idx = starts[:, None] + torch.arange(context + 1)
    seq = text[idx].long()
    return seq[:, :-1], seq[:, 1:]


def train_batch(text, args, rank, step):
    g = batch_generator(args.seed, rank, step)
    starts = torch.randint(0, len(text) - args.context - 1, (args.batch_size,), generator=g)
    return windows(text, starts, args.context)


def eval_batches(text, args, world):
    """This rank's share of the eval set: eval_batches * batch_size windows at evenly spaced
    places in the held-out text (the same set at every evaluation, whatever the world size)."""
    n = args.eval_batches * args.batch_size
    span = len(text) - args.context - 1
    starts = torch.tensor([i * span // n for i in range(n)])[world.rank::world.size]
    for chunk in starts.split(args.batch_size):
        yield windows(text, chunk, args.context)


# --- model -----------------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, heads, T, head_dim)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):  # torch 2.x
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.x: the masked softmax written out
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(future, float("-inf")).softmax(dim=-1)
            y = att @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, context, layers, d_model, heads, vocab=256):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        # The output head is the token embedding itself (tied: one parameter, no copy).
        return F.linear(self.ln_f(x), self.tok.weight)


# --- optimizer -------------------------------------------------------------------------------

class TorchAdam(torch.optim.AdamW):
    """torch's own AdamW (the single-process reference, and the optimizer of the ddp-* runs),
    with the engine optimizers' step(loss=, batch_size=), report_eval and finish so that the
    training loop and its reports are the same. The engine's Adam has the same update
    (decoupled weight decay, bias correction). bytes_per_step: what each rank sends a step
    (DDP's allreduce), for the summary's bytes_sent."""

    def __init__(self, params, log_interval=10, bytes_per_step=0, **kw):
        super().__init__(params, **kw)
        self.steps_done, self.log_interval = 0, log_interval
        self.bytes_per_step = bytes_per_step
        self.t0, self.last_loss = time.monotonic(), float("nan")

    def step(self, loss=None, batch_size=None):
        super().step()
        self.steps_done += 1
        if loss is not None:
            self.last_loss = loss.item() if torch.is_tensor(loss) else float(loss)
            if self.steps_done % self.log_interval == 0:
                onebit.report("step", phase="warmup", step=self.steps_done, loss=self.last_loss,
                              lr=self.param_groups[0]["lr"],
                              bytes_sent=self.steps_done * self.bytes_per_step,
                              bytes_step=self.bytes_per_step)

    def report_eval(self, eval_loss, eval_accuracy=float("nan"), eval_count=0):
        onebit.report("eval", step=self.steps_done, eval_loss=eval_loss,
                      eval_accuracy=eval_accuracy, eval_count=eval_count)

    def finish(self, eval_loss=float("nan"), eval_accuracy=float("nan"), first_step=1,
               last_checkpoint=-1):
        onebit.report("summary", step=self.steps_done, loss=self.last_loss, eval_loss=eval_loss,
                      eval_accuracy=eval_accuracy, freeze_step=-1, first_step=first_step,
                      last_checkpoint=last_checkpoint, wall_seconds=time.monotonic() - self.t0,
                      bytes_sent=self.steps_done * self.bytes_per_step,
                      num_params=sum(p.numel() for p in self.param_groups[0]["params"]))


def make_optimizer(args, model, world, warmup):
    common = dict(lr=args.lr, weight_decay=args.weight_decay)
    if args.optimizer == "onebit":
        # bias_correction=True: the warmup steps are Adam's (the engine's default for 1-bit
        # Adam is the paper's uncorrected warmup, whose first steps are up to 1/sqrt(1-beta2^t)
        # times larger; on this model it ended ~8% behind Adam even without a freeze).
        kw = dict(dict(freeze_step=args.freeze_step, gradient_exchange=args.gradient_exchange,
                       bias_correction=True), **args.option)
        return onebit.torch.OnebitAdam(model.named_parameters(), total_steps=args.steps,
                                       lr_warmup_steps=warmup, betas=(0.9, args.beta2),
                                       **common, **kw)
    if args.optimizer == "binsgdm":
        return onebit.torch.BinSGDM(model.named_parameters(), total_steps=args.steps,
                                    beta=0.9, seed=args.seed, **common, **args.option)
    if args.optimizer == "adam":
        kw = dict(dict(gradient_exchange=args.gradient_exchange), **args.option)
        return onebit.torch.Adam(model.named_parameters(), total_steps=args.steps,
                                 betas=(0.9, args.beta2), **common, **kw)
    if args.optimizer == "torch-adam" and world.size > 1:
        raise SystemExit("--optimizer torch-adam is the single-process reference: run it "
                         "without mpirun (or with -np 1), or use ddp-fp32")
    # torch-adam and the ddp-* runs. DDP's ring allreduce sends 2 (n-1)/n of the gradient's
    # bytes from each rank: 4 a parameter in fp32, 2 with the fp16 hook.
    per_param = {"ddp-fp32": 4, "ddp-fp16": 2}.get(args.optimizer, 0)
    nparams = sum(p.numel() for p in model.parameters())
    sent = 2 * (world.size - 1) * per_param * nparams // max(1, world.size)
    return TorchAdam(model.parameters(), betas=(0.9, args.beta2), bytes_per_step=sent, **common)


def wrap_ddp(args, model, world, device):
    """The model under DistributedDataParallel over gloo, with the variant's comm hook; the
    process group's rank and size are the MPI world's."""
    import datetime
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group("gloo", rank=world.rank, world_size=world.size,
                            timeout=datetime.timedelta(seconds=600))
    net = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    if args.optimizer == "ddp-fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        net.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.optimizer == "ddp-powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=args.powersgd_rank,
            start_powerSGD_iter=max(2, args.powersgd_start), use_error_feedback=True,
            warm_start=True, random_seed=args.seed)
        net.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return net


def load_checkpoint(directory, model, opt):
    """The step to continue after (0: a fresh start)."""
    if isinstance(opt, TorchAdam):
        path = os.path.join(directory, "torch-adam.pt")
        if not os.path.exists(path):
            return 0
        state = torch.load(path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        opt.steps_done = state["step"]
        return state["step"]
    info = onebit.torch.load(directory, model, opt)
    return info["step"] if info else 0


def save_checkpoint(directory, model, opt, step, world):
    if isinstance(opt, TorchAdam):
        if world.rank != 0:  # one copy: DDP keeps every rank's model and AdamW state equal
            return
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, "torch-adam.pt")
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step},
                   path + ".tmp")
        os.replace(path + ".tmp", path)  # a kill while saving leaves the previous one
    else:
        onebit.torch.save(directory, model, opt)


# --- training --------------------------------------------------------------------------------

def main():
    args = parse_args()
    # SIGTERM stops the engine's optimizers at a step every rank agrees on (onebit.Stopped);
    # torch's own runs leave it as it is: they end at once, as any PyTorch program.
    world = onebit.init(device=args.device,
                        stop_signals=args.optimizer not in ("torch-adam",) + DDP_OPTIMIZERS)
    if world.size > 1 and world.device == "cpu":
        torch.set_num_threads(1)  # several ranks share the machine's cores
    device = torch.device(world.device)
    if args.bf16 and device.type == "cpu" and not hasattr(torch, "autocast"):
        raise SystemExit("--bf16 on CPU needs torch.autocast (torch >= 1.10)")
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.bf16)

    train_text, eval_text = load_corpus()
    torch.manual_seed(args.seed)  # the same initial model everywhere (rank 0's is broadcast)
    model = GPT(args.context, args.layers, args.d_model, args.heads).to(device)

    warmup = max(1, min(100, args.steps // 20))

    def lr_factor(step):  # linear warmup, then cosine down to a tenth of the peak
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, args.steps - warmup)
        return 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress)))

    opt = make_optimizer(args, model, world, warmup)
    net = wrap_ddp(args, model, world, device) if args.optimizer in DDP_OPTIMIZERS else model
    start = 0
    if args.checkpoint_dir:
        start = load_checkpoint(args.checkpoint_dir, model, opt)

    def schedule(first):  # the LR schedule of a run that continues after step `first`
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(first + s))

    # Built after the resume so that it starts at the step the run continues from.
    sched = schedule(start)

    @torch.no_grad()
    def evaluate():
        model.eval()
        total, count = 0.0, 0
        for x, y in eval_batches(eval_text, args, world):
            x, y = x.to(device), y.to(device)
            with autocast:
                logits = model(x)
            total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(),
                                     reduction="sum").item()
            count += y.numel()
        model.train()
        total, count = world.sum([total, count])  # over every rank: the whole eval set
        return total / count, int(count)

    eval_loss = float("nan")
    last_saved = -1
    train_s, reached = 0.0, None  # seconds in training steps; (step, seconds) at the target
    compress_s, compress_n = 0.0, 0  # of which in 1-bit steps (the engine's compression phase)
    step = start
    while step < args.steps:
        t0 = time.perf_counter()
        x, y = (t.to(device) for t in train_batch(train_text, args, world.rank, step))
        with autocast:
            logits = net(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        loss.backward()
        compressed = hasattr(opt, "stats") and opt.stats().phase == 1
        try:
            opt.step(loss=loss, batch_size=args.batch_size)
        except onebit.Stopped:
            # SIGTERM (a cancel, a deadline, onebitd's shutdown): every rank stops after this
            # step; saved, a restart loses nothing.
            if args.checkpoint_dir:
                save_checkpoint(args.checkpoint_dir, model, opt, step + 1, world)
            raise
        except onebit.Diverged:
            # The loss stopped being finite (on some rank: every rank raises at the same step).
            # Back to the newest checkpoint, 1-bit Adam re-estimating its variance, as
            # onebit-worker does; with no checkpoint or no rollback left, the run ends (exit 3).
            if not args.checkpoint_dir:
                raise
            step = onebit.torch.roll_back(args.checkpoint_dir, model, opt)["step"]
            opt.zero_grad()
            sched = schedule(step)
            continue
        opt.zero_grad()
        sched.step()
        dt = time.perf_counter() - t0
        train_s += dt
        if compressed:
            compress_s, compress_n = compress_s + dt, compress_n + 1

        step += 1
        done = step
        if done % args.eval_interval == 0 or done == args.steps:
            eval_loss, eval_count = evaluate()
            opt.report_eval(eval_loss, eval_count=eval_count)
            # The eval loss is summed over every rank: all of them stop at the same step.
            if args.target_loss is not None and eval_loss <= args.target_loss:
                reached = (done, train_s)
        if args.checkpoint_dir and (done == args.steps or reached or (
                args.checkpoint_interval and done % args.checkpoint_interval == 0)):
            save_checkpoint(args.checkpoint_dir, model, opt, done, world)
            last_saved = done
        if reached:
            break

    if start >= args.steps:  # resumed at or past the end: evaluate what was restored
        eval_loss, _ = evaluate()
    opt.finish(eval_loss=eval_loss, first_step=start + 1, last_checkpoint=last_saved)
    if world.rank == 0:
        steps_run = (reached[0] if reached else args.steps) - start
        print("training time %.3f s over %d steps (evaluations and checkpoints left out); "
              "%.3f s in %d 1-bit steps" % (train_s, steps_run, compress_s, compress_n),
              flush=True)
        if args.target_loss is not None:
            print("target eval loss %.6f " % args.target_loss + (
                "reached at step %d after %.3f s of training" % reached if reached
                else "not reached in %d steps" % args.steps), flush=True)
        print("final eval loss %.6f" % eval_loss, flush=True)


if __name__ == "__main__":
    main()
