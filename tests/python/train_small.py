"""A small program for the front end's tests (test_resume.sh, test_program_jobs.sh): an MLP on
synthetic data with onebit.torch.OnebitAdam, batches drawn from (seed, rank, step), a checkpoint
every --interval steps under --dir (default $ONEBIT_CHECKPOINT_DIR, which onebitd sets),
resuming from the newest one there. With TRAIN_SMALL_KILL="STEP RANK" that rank SIGKILLs itself
after STEP (a crash, no checkpoint; once: a marker in --dir remembers); TRAIN_SMALL_TERM="STEP
RANK": that rank sends itself SIGTERM after STEP (once, as KILL): the ranks stop together at a
logged step, save a checkpoint there and exit 0 (onebit.Stopped); --raise-at STEP raises
ValueError before that step (every rank). Writes the final parameters to --out when given. --step-seconds S: a pause after each
step (pacing for tests that act while it runs; it changes no number). TRAIN_SMALL_IGNORE_TERM=1:
the ranks ignore SIGTERM (set before onebit.init, which then leaves it alone), so that only the
cancel in onebitd's answer to a progress report can stop them.
"""
import argparse
import ctypes
import os
import signal
import time

import torch

import onebit
import onebit.torch as obt

ap = argparse.ArgumentParser()
ap.add_argument("--dir", default=os.environ.get("ONEBIT_CHECKPOINT_DIR"))
ap.add_argument("--out")
ap.add_argument("--raise-at", type=int, default=-1)
ap.add_argument("--steps", type=int, default=120)
ap.add_argument("--interval", type=int, default=25)
ap.add_argument("--step-seconds", type=float, default=0.0)
a = ap.parse_args()
kill = [int(v) for v in os.environ.get("TRAIN_SMALL_KILL", "0 -1").split()]
term = [int(v) for v in os.environ.get("TRAIN_SMALL_TERM", "0 -1").split()]
torch.set_num_threads(1)
if os.environ.get("TRAIN_SMALL_IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
w = onebit.init(device="cpu")
torch.manual_seed(7)
model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.GELU(), torch.nn.Linear(64, 64),
                            torch.nn.GELU(), torch.nn.Linear(64, 4))
opt = obt.OnebitAdam(model.parameters(), lr=2e-3, betas=(0.9, 0.95), total_steps=a.steps,
                     block_size=128)
got = obt.load(a.dir, model, opt)
first = got["step"] if got else 0
for step in range(first, a.steps):
    if step == a.raise_at:
        raise ValueError("boom at step %d" % step)
    g = torch.Generator().manual_seed(100003 * step + w.rank)
    x = torch.randn(32, 20, generator=g)
    y = (x[:, :4].argmax(dim=1) + (x[:, 4] > 1).long()) % 4
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    try:
        opt.step(loss=loss, batch_size=32)
    except onebit.Stopped as stop:
        obt.save(a.dir, model, opt)  # the step is done: nothing after the last checkpoint lost
        if w.rank == 0:
            print("%s: saved" % stop, flush=True)
        raise
    opt.zero_grad()
    if (step + 1) % a.interval == 0:
        obt.save(a.dir, model, opt)
    for what, sig in ((kill, signal.SIGKILL), (term, signal.SIGTERM)):
        if step + 1 == what[0] and w.rank == what[1]:
            marker = os.path.join(a.dir, ".killed")  # once per job, as a crash would be
            if not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), sig)
    if a.step_seconds > 0:
        time.sleep(a.step_seconds)
s = opt.stats()
opt.finish()
if w.rank == 0 and a.out:
    with open(a.out, "wb") as f:
        f.write(ctypes.string_at(opt.flat_params.data_ptr(), 4 * opt.flat_params.numel()))
    print("done: %d steps from step %d, freeze at %d" % (s.step, first, s.freeze_step))
