"""A byte-level GPT trained with 1-bit Adam on Debian's fortunes, data-parallel over MPI ranks.

    mpirun -np 4 python3 examples/pytorch/gpt.py --steps 200
    python3 examples/pytorch/gpt.py --optimizer torch-adam        # single-process reference

The model is a small decoder-only transformer (token and position embeddings, pre-LayerNorm
blocks with causal self-attention and a GELU MLP, an output head tied to the token embedding).
The optimizer is the engine's (onebit.torch.OnebitAdam or onebit.torch.Adam): it averages the
gradients over the ranks itself, so there is no DistributedDataParallel wrapper.

Every rank draws its own batches from (seed, rank, step), so a resumed run sees exactly the
batches it would have seen: a checkpoint stores nothing about the data but the step.

Progress goes to stdout on rank 0 as JSON lines (ONEBIT_PROGRESS=json, the default, what onebitd
reads), as text for people (ONEBIT_PROGRESS=text) or not at all (off); the last line is
"final eval loss X".
"""

import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import onebit
import onebit.torch

FORTUNES = "/usr/share/games/fortunes"


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
    p.add_argument("--optimizer", choices=("onebit", "adam", "torch-adam"), default="onebit",
                   help="onebit: onebit.torch.OnebitAdam; adam: onebit.torch.Adam (the engine's "
                        "Adam, fp32 allreduce); torch-adam: torch.optim.AdamW, one process only")
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
                   help="onebit/adam: how the gradients of the Adam steps cross the network")
    args = p.parse_args()
    if args.freeze_step != "auto":
        args.freeze_step = int(args.freeze_step)
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
    """torch's own AdamW, the single-process reference, with the engine optimizers' step(loss=,
    batch_size=), report_eval and finish so that the training loop and its reports are the
    same. The engine's Adam has the same update (decoupled weight decay, bias correction)."""

    def __init__(self, params, log_interval=10, **kw):
        super().__init__(params, **kw)
        self.steps_done, self.log_interval = 0, log_interval
        self.t0, self.last_loss = time.monotonic(), float("nan")

    def step(self, loss=None, batch_size=None):
        super().step()
        self.steps_done += 1
        if loss is not None:
            self.last_loss = loss.item() if torch.is_tensor(loss) else float(loss)
            if self.steps_done % self.log_interval == 0:
                onebit.report("step", phase="warmup", step=self.steps_done, loss=self.last_loss,
                              lr=self.param_groups[0]["lr"])

    def report_eval(self, eval_loss, eval_accuracy=float("nan"), eval_count=0):
        onebit.report("eval", step=self.steps_done, eval_loss=eval_loss,
                      eval_accuracy=eval_accuracy, eval_count=eval_count)

    def finish(self, eval_loss=float("nan"), eval_accuracy=float("nan"), first_step=1,
               last_checkpoint=-1):
        onebit.report("summary", step=self.steps_done, loss=self.last_loss, eval_loss=eval_loss,
                      eval_accuracy=eval_accuracy, freeze_step=-1, first_step=first_step,
                      last_checkpoint=last_checkpoint, wall_seconds=time.monotonic() - self.t0,
                      num_params=sum(p.numel() for p in self.param_groups[0]["params"]))


def make_optimizer(args, model, world, warmup):
    common = dict(lr=args.lr, betas=(0.9, args.beta2), weight_decay=args.weight_decay)
    if args.optimizer == "onebit":
        # bias_correction=True: the warmup steps are Adam's (the engine's default for 1-bit
        # Adam is the paper's uncorrected warmup, whose first steps are up to 1/sqrt(1-beta2^t)
        # times larger; on this model it ended ~8% behind Adam even without a freeze).
        return onebit.torch.OnebitAdam(model.named_parameters(), total_steps=args.steps,
                                       lr_warmup_steps=warmup, freeze_step=args.freeze_step,
                                       gradient_exchange=args.gradient_exchange,
                                       bias_correction=True, **common)
    if args.optimizer == "adam":
        return onebit.torch.Adam(model.named_parameters(), total_steps=args.steps,
                                 gradient_exchange=args.gradient_exchange, **common)
    if world.size > 1:
        raise SystemExit("--optimizer torch-adam is the single-process reference: run it "
                         "without mpirun (or with -np 1)")
    return TorchAdam(model.parameters(), **common)


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


def save_checkpoint(directory, model, opt, step):
    if isinstance(opt, TorchAdam):
        os.makedirs(directory, exist_ok=True)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step},
                   os.path.join(directory, "torch-adam.pt"))
    else:
        onebit.torch.save(directory, model, opt)


# --- training --------------------------------------------------------------------------------

def main():
    args = parse_args()
    world = onebit.init(device=args.device)
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
    start = 0
    if args.checkpoint_dir:
        start = load_checkpoint(args.checkpoint_dir, model, opt)
    # Built after the resume so that it starts at the step the run continues from.
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(start + s))

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
    for step in range(start, args.steps):
        x, y = (t.to(device) for t in train_batch(train_text, args, world.rank, step))
        with autocast:
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        loss.backward()
        opt.step(loss=loss, batch_size=args.batch_size)
        opt.zero_grad()
        sched.step()

        done = step + 1
        if done % args.eval_interval == 0 or done == args.steps:
            eval_loss, eval_count = evaluate()
            opt.report_eval(eval_loss, eval_count=eval_count)
        if args.checkpoint_dir and (done == args.steps or (
                args.checkpoint_interval and done % args.checkpoint_interval == 0)):
            save_checkpoint(args.checkpoint_dir, model, opt, done)
            last_saved = done

    if start >= args.steps:  # resumed at or past the end: evaluate what was restored
        eval_loss, _ = evaluate()
    opt.finish(eval_loss=eval_loss, first_step=start + 1, last_checkpoint=last_saved)
    if world.rank == 0:
        print("final eval loss %.6f" % eval_loss, flush=True)


if __name__ == "__main__":
    main()
