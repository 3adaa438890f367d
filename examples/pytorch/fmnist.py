"""An MLP (or a small CNN) on Fashion-MNIST trained with 1-bit Adam, data-parallel over MPI ranks.

    mpirun -np 4 python3 examples/pytorch/fmnist.py
    mpirun -np 4 python3 examples/pytorch/fmnist.py --model cnn --steps 500
    python3 examples/pytorch/fmnist.py --optimizer torch-adam      # single-process reference
    mpirun -np 4 python3 examples/pytorch/fmnist.py --hidden 512,256 --activation tanh \
        --steps 1500 --schedule step --warmup-steps 100 --no-bias-correction   # as robustness.sh

The images come from the IDX files of Debian's dataset-fashion-mnist package (gzip'd or not),
standardised with the training set's per-pixel mean and standard deviation. The optimizer is
the engine's (onebit.torch.OnebitAdam or onebit.torch.Adam): it averages the gradients over the
ranks itself, so there is no DistributedDataParallel wrapper.

Every rank draws its own batches from (seed, rank, step), so a resumed run sees exactly the
batches it would have seen: a checkpoint stores nothing about the data but the step.

Progress goes to stdout on rank 0 as JSON lines (ONEBIT_PROGRESS=json, the default), as text
(ONEBIT_PROGRESS=text) or not at all (off); the last line is "final eval loss X accuracy Y".
"""

import argparse
import gzip
import math
import os
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import onebit
import onebit.torch

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp",
                   help="mlp: 784-HIDDEN-10; cnn: two 3x3 conv + pool layers, a linear")
    p.add_argument("--hidden", default="256,128",
                   help="mlp: the hidden layers' widths, comma-separated")
    p.add_argument("--activation", choices=("relu", "gelu", "tanh"), default="relu",
                   help="mlp: the hidden layers' activation (gelu: the tanh approximation, "
                        "as the engine's)")
    p.add_argument("--steps", type=int, default=1000, help="optimizer steps in all")
    p.add_argument("--batch-size", type=int, default=64, help="images per rank and step")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--schedule", choices=("cosine", "step"), default="cosine",
                   help="after the linear warmup: cosine: down to a tenth of the peak; step: "
                        "x0.99 every 50 steps (the engine's warmup_step_decay as the robustness "
                        "suite sets it)")
    p.add_argument("--warmup-steps", type=int, default=None,
                   help="linear warmup of the learning rate (default: steps/20, at most 100)")
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--no-bias-correction", dest="bias_correction", action="store_false",
                   help="onebit/adam: no bias correction (the engine's default for 1-bit Adam; "
                        "the robustness suite's setting for both)")
    p.add_argument("--optimizer", choices=("onebit", "adam", "torch-adam"), default="onebit",
                   help="onebit: onebit.torch.OnebitAdam; adam: onebit.torch.Adam (the engine's "
                        "Adam, fp32 allreduce); torch-adam: torch.optim.AdamW, one process only")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-interval", type=int, default=500)
    p.add_argument("--eval-batches", type=int, default=0,
                   help="evaluate on this many batches of the test set (0: all 10000 images), "
                        "shared out among the ranks")
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
    p.add_argument("--data", default=FASHION_MNIST, help="directory of the four IDX files")
    args = p.parse_args()
    if args.freeze_step != "auto":
        args.freeze_step = int(args.freeze_step)
    args.hidden = [int(w) for w in args.hidden.split(",")]
    if args.warmup_steps is None:
        args.warmup_steps = max(1, min(100, args.steps // 20))
    return args


# --- data ------------------------------------------------------------------------------------

def read_idx(directory, stem):
    """An IDX file (stem or stem.gz) as a uint8 tensor of its shape."""
    path = os.path.join(directory, stem)
    if os.path.exists(path):
        raw = open(path, "rb").read()
    elif os.path.exists(path + ".gz"):
        raw = gzip.open(path + ".gz", "rb").read()
    else:
        raise SystemExit("%s(.gz) is missing: install Debian's dataset-fashion-mnist" % path)
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:  # 0x08: unsigned bytes
        raise SystemExit("%s: not an IDX file of unsigned bytes" % path)
    shape = struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim])
    body = bytearray(raw[4 + 4 * ndim:])
    if len(body) != math.prod(shape):
        raise SystemExit("%s: %d bytes of data for shape %s" % (path, len(body), shape))
    return torch.frombuffer(body, dtype=torch.uint8).reshape(shape)


def load_fashion_mnist(directory):
    """(train images, train labels, test images, test labels): images as float32 (N, 784)
    standardised per pixel with the training set's statistics, labels as int64."""
    xs = [read_idx(directory, "%s-images-idx3-ubyte" % s).flatten(1).float()
          for s in ("train", "t10k")]
    ys = [read_idx(directory, "%s-labels-idx1-ubyte" % s).long() for s in ("train", "t10k")]
    mean, std = xs[0].mean(0), xs[0].std(0)
    std[std == 0] = 1.0  # pixels that are always 0 stay 0
    xs = [(x - mean) / std for x in xs]
    return xs[0], ys[0], xs[1], ys[1]


def batch_generator(seed, rank, step):
    """The random stream of one rank's batch at one step: a function of (seed, rank, step)
    only, so that a resumed run draws the same batches."""
    return torch.Generator().manual_seed((seed * 1_000_003 + rank) * 1_000_000_007 + step)


def train_batch(x, y, args, rank, step):
    idx = torch.randint(0, len(x), (args.batch_size,), generator=batch_generator(args.seed, rank,
                                                                                  step))
    return x[idx], y[idx]


# --- models ----------------------------------------------------------------------------------

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh,
               "gelu": lambda: nn.GELU(approximate="tanh")}


def make_model(kind, hidden=(256, 128), activation="relu"):
    if kind == "mlp":
        layers, width = [], 784
        for h in hidden:
            layers += [nn.Linear(width, h), ACTIVATIONS[activation]()]
            width = h
        return nn.Sequential(*layers, nn.Linear(width, 10))
    return nn.Sequential(nn.Unflatten(1, (1, 28, 28)),
                         nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 14x14
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 7x7
                         nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


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
        # bias_correction=True by default: the warmup steps are Adam's (the engine's default
        # for 1-bit Adam is the paper's uncorrected warmup, with larger first steps).
        return onebit.torch.OnebitAdam(model.named_parameters(), total_steps=args.steps,
                                       lr_warmup_steps=warmup, freeze_step=args.freeze_step,
                                       gradient_exchange=args.gradient_exchange,
                                       bias_correction=args.bias_correction, **common)
    if args.optimizer == "adam":
        return onebit.torch.Adam(model.named_parameters(), total_steps=args.steps,
                                 gradient_exchange=args.gradient_exchange,
                                 bias_correction=args.bias_correction, **common)
    if world.size > 1:
        raise SystemExit("--optimizer torch-adam is the single-process reference: run it "
                         "without mpirun (or with -np 1)")
    if not args.bias_correction:
        raise SystemExit("--no-bias-correction: torch's AdamW always corrects")
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
    # SIGTERM stops the engine's optimizers at a step every rank agrees on (onebit.Stopped);
    # torch's own run leaves it as it is: it ends at once, as any PyTorch program.
    world = onebit.init(device=args.device, stop_signals=args.optimizer != "torch-adam")
    if world.size > 1 and world.device == "cpu":
        torch.set_num_threads(1)  # several ranks share the machine's cores
    device = torch.device(world.device)
    if args.bf16 and device.type == "cpu" and not hasattr(torch, "autocast"):
        raise SystemExit("--bf16 on CPU needs torch.autocast (torch >= 1.10)")
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.bf16)

    train_x, train_y, test_x, test_y = load_fashion_mnist(args.data)
    torch.manual_seed(args.seed)  # the same initial model everywhere (rank 0's is broadcast)
    model = make_model(args.model, args.hidden, args.activation).to(device)

    warmup = args.warmup_steps

    def lr_factor(step):  # linear warmup, then cosine down to a tenth of the peak
        if step < warmup:
            return (step + 1) / warmup
        if args.schedule == "step":  # the engine's ob_lr_at, its t being step + 1
            return 0.99 ** ((step + 1 - warmup) // 50)
        progress = (step - warmup) / max(1, args.steps - warmup)
        return 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress)))

    opt = make_optimizer(args, model, world, warmup)
    start = 0
    if args.checkpoint_dir:
        start = load_checkpoint(args.checkpoint_dir, model, opt)

    def schedule(first):  # the LR schedule of a run that continues after step `first`
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(first + s))

    # Built after the resume so that it starts at the step the run continues from.
    sched = schedule(start)

    # This rank's share of the test set (the first eval_batches * batch_size images, or all).
    n_eval = args.eval_batches * args.batch_size if args.eval_batches else len(test_x)
    my_x, my_y = test_x[:n_eval][world.rank::world.size], test_y[:n_eval][world.rank::world.size]

    @torch.no_grad()
    def evaluate():
        """Mean loss and accuracy over the whole eval set (every rank's share)."""
        model.eval()
        total, correct = 0.0, 0
        for x, y in zip(my_x.split(1024), my_y.split(1024)):
            x, y = x.to(device), y.to(device)
            with autocast:
                logits = model(x)
            total += F.cross_entropy(logits.float(), y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
        model.train()
        total, correct, count = world.sum([total, correct, len(my_y)])
        return total / count, correct / count, int(count)

    eval_loss, eval_acc = float("nan"), float("nan")
    last_saved = -1
    step = start
    while step < args.steps:
        x, y = (t.to(device) for t in train_batch(train_x, train_y, args, world.rank, step))
        with autocast:
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        try:
            opt.step(loss=loss, batch_size=args.batch_size)
        except onebit.Stopped:
            # SIGTERM (a cancel, a deadline, onebitd's shutdown): every rank stops after this
            # step; saved, a restart loses nothing.
            if args.checkpoint_dir:
                save_checkpoint(args.checkpoint_dir, model, opt, step + 1)
            raise
        except onebit.Diverged:
            # The loss stopped being finite: back to the newest checkpoint, 1-bit Adam
            # re-estimating its variance, as onebit-worker does (no checkpoint or no rollback
            # left: the run ends, exit 3).
            if not args.checkpoint_dir:
                raise
            step = onebit.torch.roll_back(args.checkpoint_dir, model, opt)["step"]
            opt.zero_grad()
            sched = schedule(step)
            continue
        opt.zero_grad()
        sched.step()

        step += 1
        done = step
        if done % args.eval_interval == 0 or done == args.steps:
            eval_loss, eval_acc, n = evaluate()
            opt.report_eval(eval_loss, eval_accuracy=eval_acc, eval_count=n)
        if args.checkpoint_dir and (done == args.steps or (
                args.checkpoint_interval and done % args.checkpoint_interval == 0)):
            save_checkpoint(args.checkpoint_dir, model, opt, done)
            last_saved = done

    if start >= args.steps:  # resumed at or past the end: evaluate what was restored
        eval_loss, eval_acc, _ = evaluate()
    opt.finish(eval_loss=eval_loss, eval_accuracy=eval_acc, first_step=start + 1,
               last_checkpoint=last_saved)
    if world.rank == 0:
        print("final eval loss %.6f accuracy %.4f" % (eval_loss, eval_acc), flush=True)


if __name__ == "__main__":
    main()
