"""onebit.torch in one process: the job spec's validation and messages, hostile arguments,
checkpoints (bit-exact continuation, buffers, fallback past a damaged checkpoint, mismatches
refused without touching the optimizer, onebit-ckpt reading them) and warm start.

    PYTHONPATH=build/python python3 tests/python/test_frontend.py BUILD_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

import onebit
import onebit.torch as obt

BUILD = sys.argv.pop(1) if len(sys.argv) > 1 else "build"
WORKER = os.path.join(BUILD, "bin", "onebit-worker")
CKPT = os.path.join(BUILD, "bin", "onebit-ckpt")


class Net(torch.nn.Module):
    def __init__(self, width=32, norm=False):
        super().__init__()
        self.l1 = torch.nn.Linear(12, width)
        self.bn = torch.nn.BatchNorm1d(width) if norm else None
        self.l2 = torch.nn.Linear(width, 3)

    def forward(self, x):
        h = self.l1(x)
        if self.bn is not None:
            h = self.bn(h)
        return self.l2(torch.relu(h))


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 12, generator=g)
    return x, (x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 1).long()


def train(model, opt, first, last):
    for step in range(first, last):
        x, y = batch(step)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step(loss=loss)
        opt.zero_grad()


def fresh(seed=0, norm=False, **kw):
    torch.manual_seed(seed)
    model = Net(norm=norm)
    args = dict(lr=1e-2, betas=(0.9, 0.99), freeze_step=10, block_size=32)
    args.update(kw)
    return model, obt.OnebitAdam(model.named_parameters(), **args)


def state(model, opt):
    return [p.detach().clone() for p in model.parameters()] + \
        [opt.engine_state(w) for w in ("exp_avg", "exp_avg_sq", "worker_error",
                                        "server_error")] + \
        [b.detach().clone() for b in model.buffers()]


def same_bits(a, b):
    return len(a) == len(b) and all(
        x.shape == y.shape and torch.equal(x.view(-1).view(torch.int32) if x.is_floating_point()
                                           else x, y.view(-1).view(torch.int32)
                                           if y.is_floating_point() else y)
        for x, y in zip(a, b))


def spec_message(optimizer_yaml):
    """The message onebit-worker --check gives for a spec with this optimizer section."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("model: {type: softmax}\ndata: {type: synthetic_classification}\n"
                "batch_size: 8\nsteps: 100\noptimizer: %s\n" % optimizer_yaml)
    try:
        r = subprocess.run([WORKER, "--spec", f.name, "--check"], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    assert r.returncode == 2, r
    return r.stderr


class Validation(unittest.TestCase):
    cases = [  # (keyword arguments, the same in a job spec's optimizer section)
        (dict(stabilizer="adam_bond"), "{type: onebit_adam, stabilizer: adam_bond}",
         "optimizer.stabilizer"),
        (dict(betas=(0.9, 1.5)), "{type: onebit_adam, beta2: 1.5}", "optimizer.beta2"),
        (dict(block_size=33), "{type: onebit_adam, block_size: 33}", "optimizer.block_size"),
        (dict(gradient_exchange="fp4"), "{type: onebit_adam, gradient_exchange: fp4}",
         "optimizer.gradient_exchange"),
        (dict(eps=-1.0), "{type: onebit_adam, eps: -1.0}", "optimizer.eps"),
        (dict(freeze_step=0), "{type: onebit_adam, freeze_step: 0}", "optimizer.freeze_step"),
        (dict(track_variance=-2), "{type: onebit_adam, track_variance: -2}",
         "optimizer.track_variance"),
        (dict(track_variance=5, refresh_steps=3),
         "{type: onebit_adam, track_variance: 5, refresh_steps: 3}", "optimizer.track_variance"),
    ]

    def test_same_messages_as_a_job_spec(self):
        for kw, yaml, field in self.cases:
            with self.subTest(kw=kw):
                model = Net()
                with self.assertRaises(ValueError) as cm:
                    obt.OnebitAdam(model.parameters(), **kw)
                msg = str(cm.exception)
                self.assertTrue(msg.startswith(field), msg)
                self.assertNotRegex(msg, r"\.c:\d+", "no source locations for users")
                self.assertIn(msg, spec_message(yaml))

    def test_defaults_are_the_spec_defaults(self):
        model, opt = fresh(freeze_step="auto", block_size=None)
        opt2 = obt.OnebitAdam(Net().parameters())
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write("model: {type: softmax}\ndata: {type: synthetic_classification}\n"
                    "batch_size: 8\nsteps: 100\noptimizer: {type: onebit_adam}\n")
            f.flush()
            out = subprocess.run([WORKER, "--spec", f.name, "--check"], capture_output=True,
                                 text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        worker = json.loads(out.stdout)["optimizer"]
        mine = json.loads(opt2._start_spec())["optimizer"]
        for k in ("beta1", "beta2", "eps", "bias_correction", "stabilizer", "block_size",
                  "freeze_threshold", "gradient_exchange", "scale", "frozen_step_ratio"):
            self.assertEqual(mine[k], worker[k], k)

    def test_no_mlp_default_for_a_pytorch_model(self):
        # The binding's spec names a softmax model only as a placeholder. A job spec's MLP
        # default (ob_optim_default_mlp_tracking, frozen at step 8) must not reach a model
        # the binding cannot see, whether freeze_step is left alone or given as None.
        for fs in ("auto", None):
            with self.subTest(freeze_step=fs):
                opt = obt.OnebitAdam(Net().parameters(), lr_warmup_steps=100, freeze_step=fs)
                o = json.loads(opt._start_spec())["optimizer"]
                self.assertEqual((o["freeze_step"], o["track_variance"], o["track_factor"]),
                                 ("auto", 25, 0))

    def test_python_level_arguments(self):
        with self.assertRaisesRegex(ValueError, "betas"):
            obt.OnebitAdam(Net().parameters(), betas=0.9)
        with self.assertRaisesRegex(ValueError, "total_steps"):
            obt.OnebitAdam(Net().parameters(), total_steps=0)
        with self.assertRaisesRegex(ValueError, "lr"):
            obt.OnebitAdam(Net().parameters(), lr=float("nan"))
        with self.assertRaises(TypeError):
            obt.OnebitAdam(Net().parameters(), betta2=0.9)


class BadInput(unittest.TestCase):
    def test_dtypes(self):
        for dt in (torch.float64, torch.bfloat16, torch.float16):
            with self.assertRaisesRegex(TypeError, "fp32"):
                obt.OnebitAdam([torch.nn.Parameter(torch.zeros(4, dtype=dt))])

    def test_non_contiguous(self):
        p = torch.nn.Parameter(torch.zeros(4, 6).t())
        with self.assertRaisesRegex(ValueError, "contiguous"):
            obt.OnebitAdam([p])

    def test_shared_memory(self):
        base = torch.zeros(10)
        a = torch.nn.Parameter(base[:6])
        b = torch.nn.Parameter(base[4:])
        with self.assertRaisesRegex(ValueError, "share memory"):
            obt.OnebitAdam([a, b], names=["a", "b"])

    def test_two_devices(self):
        with self.assertRaisesRegex(ValueError, "two devices"):
            obt.OnebitAdam([torch.nn.Parameter(torch.zeros(3)),
                            torch.nn.Parameter(torch.zeros(3, device="meta"))])

    def test_groups_and_late_parameters(self):
        m = Net()
        with self.assertRaisesRegex(ValueError, "one parameter group"):
            obt.OnebitAdam([{"params": m.l1.parameters()}, {"params": m.l2.parameters(),
                                                             "lr": 0.1}])
        opt = obt.OnebitAdam(m.parameters())
        with self.assertRaisesRegex(RuntimeError, "after construction"):
            opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})
        with self.assertRaisesRegex(RuntimeError, "onebit.torch.save"):
            opt.state_dict()
        with self.assertRaisesRegex(ValueError, "empty parameter list|no parameters"):
            obt.OnebitAdam([])

    def test_replaced_parameter(self):
        m, opt = fresh()
        m.l1.weight.data = torch.zeros_like(m.l1.weight)
        x, y = batch(0)
        torch.nn.functional.cross_entropy(m(x), y).backward()
        with self.assertRaisesRegex(RuntimeError, "replaced"):
            opt.step()

    def test_bad_names(self):
        with self.assertRaisesRegex(ValueError, "names"):
            obt.OnebitAdam(Net().parameters(), names=["a"])
        with self.assertRaises(ValueError):
            obt.OnebitAdam([("bad name!", torch.nn.Parameter(torch.zeros(2)))])


class Stepping(unittest.TestCase):
    def test_views_and_gradients(self):
        m, opt = fresh()
        flat = opt.flat_params
        for p in m.parameters():
            self.assertEqual(p.untyped_storage().data_ptr() if hasattr(p, "untyped_storage")
                             else p.storage().data_ptr(), flat.storage().data_ptr())
        train(m, opt, 0, 25)
        s = opt.stats()
        self.assertEqual((s.step, s.freeze_step, s.phase), (25, 10, 1))
        # the flat buffer is what the model computes with
        self.assertTrue(torch.equal(torch.cat([p.detach().reshape(-1) for p in m.parameters()]),
                                    flat))

    def test_diverged(self):
        m, opt = fresh(log_interval=5)
        with self.assertRaises(onebit.Diverged):
            for _ in range(5):
                x, y = batch(0)
                torch.nn.functional.cross_entropy(m(x), y).backward()
                opt.step(loss=float("nan"))
                opt.zero_grad()


class InTempDir(unittest.TestCase):
    """Each test with a checkpoint directory of its own, self.dir, removed after it."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)


class Checkpoints(InTempDir):
    def test_continuation_is_bit_exact(self):
        m, opt = fresh(norm=True)
        train(m, opt, 0, 20)
        path = obt.save(self.dir, m, opt, extra={"note": "x", "epoch": 3})
        self.assertTrue(path.endswith("step-00000020"))
        train(m, opt, 20, 40)
        want = state(m, opt)
        m2, opt2 = fresh(seed=99, norm=True)
        got = obt.load(self.dir, m2, opt2)
        self.assertEqual(got["step"], 20)
        self.assertEqual(got["extra"], {"note": "x", "epoch": 3})
        self.assertEqual(opt2.stats().freeze_step, 10)
        train(m2, opt2, 20, 40)
        self.assertTrue(same_bits(want, state(m2, opt2)))

    def test_tracked_variance_continuation_is_bit_exact(self):
        # Frozen at 10, v estimated at 15, 20, 25, ...: saved at 22, between two estimates, the
        # continuation needs every rank's statistics from the checkpoint.
        m, opt = fresh(track_variance=5)
        train(m, opt, 0, 22)
        obt.save(self.dir, m, opt)
        v_saved = opt.engine_state("exp_avg_sq")
        train(m, opt, 22, 40)
        want = state(m, opt)
        self.assertFalse(torch.equal(v_saved, opt.engine_state("exp_avg_sq")))  # re-estimated
        m2, opt2 = fresh(seed=99, track_variance=5)
        self.assertEqual(obt.load(self.dir, m2, opt2)["step"], 22)
        train(m2, opt2, 22, 40)
        self.assertTrue(same_bits(want, state(m2, opt2)))

    def test_binsgdm_continuation_is_bit_exact(self):
        def make(seed):
            torch.manual_seed(seed)
            model = Net()
            return model, obt.BinSGDM(model.named_parameters(), lr=3e-3, block_size=32, seed=5)
        m, opt = make(0)
        self.assertEqual(opt.stats().freeze_step, 0)  # 1 bit from the first step
        x, y = batch(1000)
        before = torch.nn.functional.cross_entropy(m(x), y).item()
        train(m, opt, 0, 20)
        obt.save(self.dir, m, opt)
        train(m, opt, 20, 40)
        want = state(m, opt)
        self.assertLess(torch.nn.functional.cross_entropy(m(x), y).item(), before)
        m2, opt2 = make(99)
        self.assertEqual(obt.load(self.dir, m2, opt2)["step"], 20)
        train(m2, opt2, 20, 40)
        self.assertTrue(same_bits(want, state(m2, opt2)))
        # Another seed draws other signs: the continuation differs.
        torch.manual_seed(99)
        m3 = Net()
        opt3 = obt.BinSGDM(m3.named_parameters(), lr=3e-3, block_size=32, seed=6)
        obt.load(self.dir, m3, opt3)
        train(m3, opt3, 20, 40)
        self.assertFalse(same_bits(want, state(m3, opt3)))

    def test_hierarchical_needs_whole_nodes(self):
        # ranks_per_node reaches the engine's hierarchical exchange: on this one-rank world
        # 2 ranks a node cannot divide the ranks, and the engine says so.
        with self.assertRaisesRegex(ValueError, "ranks_per_node 2: must divide the 1 ranks"):
            obt.BinSGDM(Net().named_parameters(), lr=1e-3, ranks_per_node=2)

    def test_ranks_per_node_auto(self):
        # "auto" finds where the ranks run: one rank here, so the flat exchange, and it says so
        # (the same bits as ranks_per_node=0); an integer has no note; a bad value the spec's
        # message.
        def run(rpn):
            torch.manual_seed(5)
            m = Net()
            opt = obt.BinSGDM(m.named_parameters(), lr=3e-3, block_size=32, ranks_per_node=rpn)
            train(m, opt, 0, 10)
            return opt, state(m, opt)
        auto, want = run("auto")
        self.assertRegex(auto.exchange_note, r"^a world of one rank \(\S+\): flat$")
        flat, got = run(0)
        self.assertEqual(flat.exchange_note, "")
        self.assertTrue(same_bits(want, got))
        with self.assertRaisesRegex(ValueError, 'optimizer.ranks_per_node: expected "auto"'):
            obt.OnebitAdam(Net().named_parameters(), ranks_per_node="some")

    def test_softsign_trains(self):
        torch.manual_seed(0)
        m = Net()
        opt = obt.SoftSign(m.named_parameters(), lr=3e-3)
        x, y = batch(1000)
        before = torch.nn.functional.cross_entropy(m(x), y).item()
        train(m, opt, 0, 40)
        self.assertLess(torch.nn.functional.cross_entropy(m(x), y).item(), before)
        with self.assertRaisesRegex(ValueError, "gradient_exchange: expected one of"):
            obt.SoftSign(Net().named_parameters(), lr=1e-3, gradient_exchange="fp4")

    def test_only_persistent_buffers(self):
        m, opt = fresh(norm=True)
        m.register_buffer("mask", torch.ones(64, 64), persistent=False)
        train(m, opt, 0, 3)
        path = obt.save(self.dir, m, opt)
        r = subprocess.run([CKPT, "info", path], capture_output=True, text=True)
        self.assertIn('"bn.running_mean"', r.stdout)
        self.assertNotIn('"mask"', r.stdout)

    def test_onebit_ckpt_reads_it(self):
        m, opt = fresh()
        train(m, opt, 0, 12)
        path = obt.save(self.dir, m, opt)
        r = subprocess.run([CKPT, "verify", path], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = subprocess.run([CKPT, "tensors", path], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in ("l1.weight", "l1.bias", "l2.weight", "l2.bias"):
            self.assertIn(name, r.stdout)

    def test_fallback_past_a_damaged_checkpoint(self):
        m, opt = fresh()
        train(m, opt, 0, 12)
        obt.save(self.dir, m, opt)
        train(m, opt, 12, 14)
        newest = obt.save(self.dir, m, opt)
        state_h5 = os.path.join(newest, "state.h5")
        with open(state_h5, "r+b") as f:
            size = f.seek(0, 2)
            f.seek(size // 2)
            byte = f.read(1)[0]
            f.seek(size // 2)
            f.write(bytes([byte ^ 0xFF]))
        m2, opt2 = fresh(seed=5)
        self.assertEqual(obt.load(self.dir, m2, opt2)["step"], 12)

    def test_mismatches_change_nothing(self):
        m, opt = fresh()
        train(m, opt, 0, 12)
        obt.save(self.dir, m, opt)
        torch.manual_seed(3)
        wide = Net(width=40)
        opt_w = obt.OnebitAdam(wide.named_parameters(), lr=1e-2, betas=(0.9, 0.99),
                               freeze_step=10, block_size=32)
        before = state(wide, opt_w)
        with self.assertRaisesRegex(ValueError, "parameters"):
            obt.load(self.dir, wide, opt_w)
        self.assertTrue(same_bits(before, state(wide, opt_w)))
        m3, opt3 = fresh(seed=4, betas=(0.9, 0.999))
        before = state(m3, opt3)
        with self.assertRaisesRegex(ValueError, "another optimizer"):
            obt.load(self.dir, m3, opt3)
        self.assertTrue(same_bits(before, state(m3, opt3)))

    def test_nothing_to_load(self):
        m, opt = fresh()
        self.assertIsNone(obt.load(os.path.join(self.dir, "none"), m, opt))

    def test_warm_start(self):
        m, opt = fresh()
        train(m, opt, 0, 15)
        obt.save(self.dir, m, opt)
        m2, opt2 = fresh(seed=7, freeze_step="auto")
        what = obt.warm_start(self.dir, opt2, refit_steps=0, model=m2)
        self.assertIn("taken as is", what)
        self.assertEqual(opt2.stats().phase, 1)
        train(m2, opt2, 0, 5)
        self.assertEqual(opt2.stats().freeze_step, 0)
        m3, opt3 = fresh(seed=7)
        with self.assertRaises(FileNotFoundError):
            obt.warm_start(os.path.join(self.dir, "none"), opt3)



def diverge(model, opt, step):
    """Steps whose reported loss is NaN until the next logged step raises onebit.Diverged."""
    for k in range(20):
        x, y = batch(step + k)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        try:
            opt.step(loss=float("nan"))
        finally:
            opt.zero_grad()
    raise AssertionError("no onebit.Diverged in 20 steps")


class Rollback(InTempDir):
    def test_after_the_freeze_v_is_re_estimated(self):
        m, opt = fresh(log_interval=5)  # beta2 0.99: Delta 100, a refit of 50 steps
        train(m, opt, 0, 20)
        obt.save(self.dir, m, opt)
        saved = state(m, opt)
        train(m, opt, 20, 24)
        with self.assertRaises(onebit.Diverged):
            diverge(m, opt, 24)
        sent = opt.stats().bytes_sent
        info = obt.roll_back(self.dir, m, opt)
        self.assertEqual(info["step"], 20)
        now = state(m, opt)
        # parameters, m and v are the checkpoint's; both error buffers start again from zero
        k = len(list(m.parameters())) + 2
        self.assertTrue(same_bits(saved[:k], now[:k]))
        self.assertGreater(float(saved[k].abs().max()), 0.0)
        for e in now[k:k + 2]:
            self.assertEqual(float(e.abs().max()), 0.0)
        s = opt.stats()
        self.assertEqual((s.step, s.phase, s.warm_start, s.refit_end), (20, 0, 4, 70))
        self.assertEqual(s.bytes_sent, sent)  # what crossed the network stays counted
        train(m, opt, 20, 69)
        self.assertEqual(opt.stats().phase, 0)  # Adam steps until the refit's end
        train(m, opt, 69, 75)
        s = opt.stats()
        self.assertEqual((s.phase, s.freeze_step), (1, 70))

    def test_into_the_warmup_the_freeze_moves(self):
        m, opt = fresh(log_interval=5, freeze_step=30)
        train(m, opt, 0, 10)
        obt.save(self.dir, m, opt)
        train(m, opt, 10, 14)
        with self.assertRaises(onebit.Diverged):
            diverge(m, opt, 14)
        self.assertEqual(obt.roll_back(self.dir, m, opt)["step"], 10)
        s = opt.stats()
        # past the step that diverged (15) by the refit's length, not at 30 again
        self.assertEqual((s.phase, s.warm_start, s.refit_end), (0, 5, 65))
        train(m, opt, 10, 60)
        self.assertEqual(opt.stats().freeze_step, -1)

    def test_the_count_survives_checkpoints(self):
        m, opt = fresh(log_interval=5)
        train(m, opt, 0, 20)
        obt.save(self.dir, m, opt)
        with self.assertRaises(onebit.Diverged):
            diverge(m, opt, 20)
        obt.roll_back(self.dir, m, opt, max_rollbacks=2)
        train(m, opt, 20, 30)
        obt.save(self.dir, m, opt)
        # a new process resumes from step 30: one rollback taken, one left of 2
        m2, opt2 = fresh(seed=5, log_interval=5)
        obt.load(self.dir, m2, opt2)
        with self.assertRaises(onebit.Diverged):
            diverge(m2, opt2, 30)
        self.assertEqual(obt.roll_back(self.dir, m2, opt2, max_rollbacks=2)["step"], 30)
        with self.assertRaises(onebit.Diverged):
            diverge(m2, opt2, 30)
        with self.assertRaisesRegex(onebit.Diverged, "no rollback is left .2 taken"):
            obt.roll_back(self.dir, m2, opt2, max_rollbacks=2)

    def test_nothing_to_roll_back_to(self):
        m, opt = fresh(log_interval=5)
        train(m, opt, 0, 4)
        with self.assertRaises(onebit.Diverged):
            diverge(m, opt, 4)
        before = state(m, opt)
        with self.assertRaisesRegex(onebit.Diverged, "no checkpoint to roll back to"):
            obt.roll_back(self.dir, m, opt)
        self.assertTrue(same_bits(before, state(m, opt)))
        with self.assertRaises(ValueError):
            obt.roll_back(self.dir, m, opt, max_rollbacks=-1)

    def test_adam_goes_on_from_the_checkpoint(self):
        torch.manual_seed(0)
        m = Net()
        opt = obt.Adam(m.named_parameters(), lr=1e-2, log_interval=5)
        train(m, opt, 0, 10)
        obt.save(self.dir, m, opt)
        saved = state(m, opt)
        train(m, opt, 10, 14)
        with self.assertRaises(onebit.Diverged):
            diverge(m, opt, 14)
        self.assertEqual(obt.roll_back(self.dir, m, opt)["step"], 10)
        self.assertTrue(same_bits(saved, state(m, opt)))

    def test_the_rewarm_report(self):
        line = json.loads(onebit.report_line("rewarm", step=24, to_step=20, text="rolled back",
                                             text2="/ck/step-00000020"))
        self.assertEqual((line["event"], line["step"], line["to_step"], line["path"],
                          line["message"]), ("rewarm", 24, 20, "/ck/step-00000020",
                                             "rolled back"))


class Reports(unittest.TestCase):
    """rank 0's reports under onebitd (ONEBIT_REPORT_ADDR): test_program_jobs.sh checks that a
    running coordinator receives them and that a cancel in its answer stops the ranks; here, a
    coordinator that cannot be reached."""

    def test_an_unreachable_coordinator_warns_once_and_the_lines_go_on(self):
        code = ("import onebit\n"
                "for i in range(3): onebit.report('step', 'warmup', step=i, loss=1.0)\n"
                "assert onebit.stop_requested() is None\n")
        env = dict(os.environ, ONEBIT_REPORT_ADDR="127.0.0.1:1", ONEBIT_JOB_ID="job-000001",
                   ONEBIT_REPORT_TOKEN="x" * 64, ONEBIT_PROGRESS="json")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([json.loads(x)["step"] for x in r.stdout.splitlines()], [0, 1, 2])
        self.assertEqual(r.stderr.count("onebit: warning: ONEBIT_REPORT_ADDR:"), 1, r.stderr)
        self.assertIn("progress stays in the log", r.stderr)


class MpiSettings(unittest.TestCase):
    """onebit.init() starts MPI with onebit-worker's transport settings (onebit/comm.h,
    ob_comm_mpi_env_defaults): Open MPI's TCP eager limit at 2 MiB, where nothing set one."""

    CODE = ("import ctypes, onebit\n"
            "onebit.init()\n"
            "getenv = ctypes.CDLL(None).getenv\n"
            "getenv.restype = ctypes.c_char_p\n"
            "print(getenv(b'OMPI_MCA_btl_tcp_eager_limit').decode(),"
            " getenv(b'OMPI_MCA_btl_tcp_rndv_eager_limit').decode())\n")

    def run_init(self, **env):
        base = {k: v for k, v in os.environ.items() if "eager_limit" not in k}
        r = subprocess.run([sys.executable, "-c", self.CODE], env=dict(base, **env),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.split()

    def test_the_eager_limit_is_raised(self):
        self.assertEqual(self.run_init(), ["2097152", "2097152"])

    def test_a_limit_the_user_set_is_kept(self):
        self.assertEqual(self.run_init(OMPI_MCA_btl_tcp_eager_limit="131072"),
                         ["131072", "2097152"])


class Overlap(InTempDir):
    """overlap=True: the exchange starts in the backward pass, so the gradients and the state
    belong to it until step(). (tests/python/overlap_check.py: the same bits on 2 ranks.)"""

    def backward(self, model, step=0):
        x, y = batch(step)
        torch.nn.functional.cross_entropy(model(x), y).backward()

    def test_a_second_backward_pass_needs_no_sync(self):
        model, opt = fresh(overlap=True)
        self.backward(model)
        with self.assertRaisesRegex(RuntimeError, r"second gradient before step\(\).*no_sync"):
            self.backward(model, 1)

    def test_nothing_touches_the_exchange_before_step(self):
        model, opt = fresh(overlap=True)
        self.backward(model)
        calls = {"zero_grad()": opt.zero_grad,
                 "engine_state()": lambda: opt.engine_state("exp_avg"),
                 "onebit.torch.save()": lambda: obt.save(self.dir, model, opt),
                 "finish()": opt.finish}
        for name, call in calls.items():
            with self.assertRaisesRegex(RuntimeError,
                                        re.escape(name + " between backward() and step()")):
                call()
        with self.assertRaisesRegex(RuntimeError, re.escape("enter no_sync() before it")):
            with opt.no_sync():
                pass
        opt.step()
        opt.zero_grad()
        self.assertEqual(opt.overlapped_steps, 1)
        with opt.no_sync():  # accumulating: no exchange armed
            self.backward(model, 1)
        self.backward(model, 2)
        opt.step()
        self.assertEqual(opt.overlapped_steps, 2)


if __name__ == "__main__":
    onebit.init(device="cpu")
    os.environ.setdefault("ONEBIT_PROGRESS", "off")
    unittest.main(verbosity=2)
