"""PyTorch front end: the engine's optimizers as torch.optim.Optimizer, and its checkpoints.

OnebitAdam IS the engine's onebit_adam (libonebit's ob_optim): at construction the parameters
are copied into one flat fp32 buffer and become views into it, their gradients views into a
second one, so each step hands the engine two pointers. Everything the job spec's optimizer
has (the warmup and its auto freeze, the stabiliser, the error-compensated 1-bit compressed
allreduce, fp16/fp8 gradient exchanges, variance refreshes) is reached without a second
implementation; no DDP wrapper is needed (nor allowed: it would average the gradients a second
time). CPU tensors cross MPI, CUDA tensors NCCL, with the engine's CUDA kernels running after the
work of the caller's current stream.
"""

import contextlib
import json
import math
import os
import signal
import time
import weakref

import torch

import onebit
from onebit import _lib

__all__ = ["OnebitAdam", "Adam", "BinSGDM", "SoftSign", "save", "load", "warm_start",
           "roll_back"]

# ob_optim_stats.warm_start after a rollback (onebit/optim.h, ob_warm_state).
_WARM_REWARM, _WARM_DELAYED = 4, 5


def _signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "signal %d" % signum

# Keyword arguments that map one to one onto the job spec's optimizer fields.
_ONEBIT_FIELDS = ("compression", "freeze_threshold", "freeze_min_steps", "freeze_max_fraction",
                  "block_size", "scale", "precondition", "stabilizer", "stability_bound",
                  "frozen_step_ratio", "refresh_steps", "track_variance", "track_factor")
_COMMON_FIELDS = ("eps", "weight_decay", "bias_correction", "gradient_exchange", "bucket_mb",
                  "overlap")
# A run whose length is not given: the validator needs some steps, and any large count will do
# (the binding lifts the latest freeze for such a run).
_UNKNOWN_STEPS = 1 << 40


class _EngineOptimizer(torch.optim.Optimizer):
    """The engine's optimizer of `kind` ("adam", "onebit_adam", "binsgdm" or "softsign") over
    `params`."""

    def __init__(self, kind, params, lr, betas, total_steps, lr_warmup_steps, log_interval,
                 names, options, seed=None):
        if not isinstance(lr, (int, float)) or not lr >= 0.0:
            raise ValueError("lr: expected a number >= 0, got %r" % (lr,))
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
            raise ValueError("betas: expected a pair (beta1, beta2), got %r" % (betas,))
        if total_steps is not None and (not isinstance(total_steps, int) or total_steps < 1):
            raise ValueError("total_steps: expected a positive integer, got %r" % (total_steps,))
        if not isinstance(log_interval, int) or log_interval < 1:
            raise ValueError("log_interval: expected a positive integer, got %r" % (log_interval,))
        params, names = _named(params, names)
        super().__init__(params, dict(lr=float(lr), betas=tuple(betas)))
        if len(self.param_groups) != 1:
            raise ValueError("%s takes one parameter group: the engine steps one flat buffer "
                             "with one learning rate and weight decay" % type(self).__name__)
        plist = self.param_groups[0]["params"]
        self._world = onebit.world()
        self._device = _check_params(plist, names)
        optim = {"type": kind, "beta1": float(betas[0])}
        if betas[1] is not None:  # BinSGDM and SoftSign have one beta
            optim["beta2"] = float(betas[1])
        optim.update({k: v for k, v in options.items() if v is not None})
        self._spec = {"model": {"type": "softmax"}, "data": {"type": "synthetic_classification"},
                      "optimizer": optim, "batch_size": 1,
                      "steps": total_steps if total_steps else _UNKNOWN_STEPS,
                      "lr": {"peak": float(lr), "warmup_steps": int(lr_warmup_steps)}}
        if seed is not None:
            self._spec["seed"] = seed
        self._total_steps = total_steps or 0
        self._log_interval = log_interval
        self._handle = None
        self._hooks, self._armed, self._sync = [], False, True
        self.overlapped_steps = 0  # steps whose exchange began during the backward pass
        self._build(plist, names)
        if options.get("overlap"):
            self._hook_backward(plist)
        self._loss_sum, self._loss_n = None, 0
        self._t_window, self._samples = time.monotonic(), 0
        self._t_start = time.monotonic()
        self._samples_total = 0.0  # every rank's, summed at each report
        self._last_loss = float("nan")
        self._frozen_reported = self.stats().freeze_step >= 0
        onebit._handles.add(self)
        onebit.report("start", world_size=self._world.size, num_params=self._d,
                      text=self._start_spec())

    # --- construction --------------------------------------------------------------------

    def _build(self, plist, names):
        numels = [p.numel() for p in plist]
        offsets = [0]
        for n in numels[:-1]:
            offsets.append(offsets[-1] + n)
        d = sum(numels)
        self._d = d
        flat = torch.empty(d, dtype=torch.float32, device=self._device)
        grad = torch.zeros(d, dtype=torch.float32, device=self._device)
        with torch.no_grad():
            for p, o, n in zip(plist, offsets, numels):
                flat[o:o + n].copy_(p.reshape(-1))
        self._flat, self._grad = flat, grad
        self._gptr = grad.data_ptr()
        self._views = [(o, n, p.shape) for p, o, n in zip(plist, offsets, numels)]
        self._names = list(names)
        self._attach(plist)
        w = self._world
        if self._device.type == "cuda":
            self._comm = w.device_comm(self._device.index)
            torch.cuda.current_stream(self._device).synchronize()
        else:
            self._comm = w.ctrl()
        # Every rank starts from rank 0's parameters, as the engine's jobs do.
        _lib.call(_lib.lib.obpy_comm_bcast, self._comm, flat.data_ptr(), 4 * d, 0)
        n = len(plist)
        offs = (_lib.c_size_t * n)(*offsets)
        ndims = (_lib.ctypes.c_uint32 * n)(*[max(1, p.dim()) for p in plist])
        dims = [s for p in plist for s in (list(p.shape) if p.dim() else [1])]
        dimarr = (_lib.ctypes.c_uint64 * max(1, len(dims)))(*dims)
        h = _lib.c_void_p()
        _lib.call(_lib.lib.obpy_optim_create, _lib.ctypes.byref(h), self._spec_bytes(),
                  self._total_steps, self._comm, w.ctrl(), flat.data_ptr(), d, offs,
                  _names_blob(names), ndims, dimarr, n)
        self._handle = h.value
        if self.exchange_note:  # ranks_per_node="auto": what it found, as the worker says it
            onebit.report("notice", text="optimizer.ranks_per_node auto: " + self.exchange_note)

    def _hook_backward(self, plist):
        """optimizer.overlap: a hook on every parameter's gradient accumulation reports the
        tensor final to the engine, whose thread exchanges each bucket once its tensors are.
        torch >= 2.1 has post-accumulate hooks; before it, the parameter's AccumulateGrad node
        takes a hook that runs after it. Where MPI allows no second thread the engine
        exchanges after the backward pass, and a notice says so."""
        if not _lib.lib.obpy_optim_overlap_active(self._handle):
            onebit.report("notice", text="optimizer.overlap: MPI gives no second thread "
                          "(MPI_THREAD_SERIALIZED): the buckets are exchanged after the "
                          "backward pass")
            return
        me = weakref.ref(self)  # the hooks must not keep the optimizer alive

        def ready(i):
            o = me()
            if o is not None:
                o._grad_ready(i)
        self._reported = bytearray(len(plist))
        for i, p in enumerate(plist):
            if not p.requires_grad:
                continue
            if hasattr(p, "register_post_accumulate_grad_hook"):
                self._hooks.append(p.register_post_accumulate_grad_hook(
                    lambda _p, i=i: ready(i)))
            else:
                with torch.enable_grad():
                    node = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hooks.append((node, node.register_hook(lambda *_, i=i: ready(i))))

    def _grad_ready(self, i):
        """Parameter i's gradient is final for this backward pass: into its view of the flat
        buffer if torch put it elsewhere, then reported (the first report arms the
        exchange)."""
        if not self._sync:
            return
        if self._reported[i]:
            raise RuntimeError(
                "%s(overlap=True): parameter '%s' got a second gradient before step(): its "
                "first was already being exchanged. Accumulate over several backward passes "
                "inside `with optimizer.no_sync():`, all but the last" %
                (type(self).__name__, self._names[i]))
        self._gather_grad(self._ptrs[i])
        if not self._armed:
            _lib.lib.obpy_optim_backward_begin(self._handle, self._gptr)
            self._armed = True
        self._reported[i] = 1
        _lib.lib.obpy_optim_grad_ready(self._handle, i)

    @contextlib.contextmanager
    def no_sync(self):
        """With overlap=True: backward passes inside accumulate gradients without exchanging
        them; the next one outside starts the exchange (as DistributedDataParallel.no_sync).
        Without the overlap the exchange runs in step() and this changes nothing."""
        if self._armed:
            raise RuntimeError("%s.no_sync(): a backward pass since the last step() is being "
                               "exchanged; enter no_sync() before it" % type(self).__name__)
        self._sync = False
        try:
            yield
        finally:
            self._sync = True

    def _idle(self, what):
        """Refuses `what` between a backward pass that armed the overlapped exchange and the
        step: the engine's thread reads the gradients and writes the optimizer's state."""
        if self._armed:
            raise RuntimeError("%s(overlap=True): %s between backward() and step(): the "
                               "gradients are being exchanged; call step() first" %
                               (type(self).__name__, what))

    def _attach(self, plist):
        """Points every parameter and its gradient at its view of the flat buffers, and keeps
        where each view starts, for the checks of every step."""
        for p, (o, n, shape) in zip(plist, self._views):
            p.data = self._flat[o:o + n].view(shape)
            p.grad = self._grad[o:o + n].view(shape)
        fb, gb = self._flat.data_ptr(), self._grad.data_ptr()
        self._ptrs = [(p, fb + 4 * o, gb + 4 * o, o, n, shape, i)
                      for i, (p, (o, n, shape)) in enumerate(zip(plist, self._views))]

    def _spec_bytes(self):
        return json.dumps(self._spec).encode()

    def _start_spec(self):
        canon = _lib.ctypes.create_string_buffer(1 << 16)
        _lib.call(_lib.lib.obpy_optim_check, self._spec_bytes(), self._total_steps, canon,
                  len(canon))
        return canon.value.decode()

    def add_param_group(self, group):
        if getattr(self, "_handle", None) is not None:
            raise RuntimeError("%s: parameters cannot be added after construction (the engine's "
                               "buffer is laid out once); build a new optimizer" %
                               type(self).__name__)
        super().add_param_group(group)

    def state_dict(self):
        raise RuntimeError("%s keeps its state in the engine: save it with "
                           "onebit.torch.save(dir, model, optimizer) and restore it with "
                           "onebit.torch.load" % type(self).__name__)

    def load_state_dict(self, state_dict):
        self.state_dict()

    # --- stepping ------------------------------------------------------------------------

    def zero_grad(self, set_to_none=None):
        """Zeroes the flat gradient buffer in place; the gradients stay views into it (so
        set_to_none does not apply)."""
        self._idle("zero_grad()")
        self._grad.zero_()
        for p, _, gp, o, n, shape, _ in self._ptrs:
            g = p.grad
            if g is None or g.data_ptr() != gp:
                p.grad = self._grad[o:o + n].view(shape)

    def _gather_grads(self):
        """Makes the flat gradient hold every parameter's gradient: a gradient torch put in a
        tensor of its own (after model.zero_grad() set it to None) is copied in and the view put
        back, a missing one counts as zero. A parameter whose data is no longer its view of the
        flat buffer is refused. A few attribute reads per tensor when nothing moved."""
        for ptr in self._ptrs:
            p, xp, gp, i = ptr[0], ptr[1], ptr[2], ptr[6]
            if p.data_ptr() != xp:
                raise RuntimeError("parameter '%s' was replaced after %s was built (its data "
                                   "must stay the engine's view); copy values in with "
                                   "p.data.copy_(...) instead" % (self._names[i],
                                                                  type(self).__name__))
            g = p.grad
            if g is None or g.data_ptr() != gp:
                self._gather_grad(ptr)

    def _gather_grad(self, ptr):
        """One parameter's gradient into its view of the flat buffer (zero when it has none),
        and the view put back as its .grad; nothing when it is the view already."""
        p, _, gp, o, n, shape, i = ptr
        g = p.grad
        if g is not None and g.data_ptr() == gp:
            return
        view = self._grad[o:o + n]
        if g is None:
            view.zero_()
        else:
            if g.is_sparse:
                raise RuntimeError("parameter '%s' has a sparse gradient: not supported" %
                                   self._names[i])
            view.copy_(g.reshape(-1))
        p.grad = view.view(shape)

    @torch.no_grad()
    def step(self, closure=None, loss=None, batch_size=None):
        """One step of the engine's optimizer with the gradients of every parameter (views into
        the flat buffer). loss (a number or a 0-dim tensor, this rank's) feeds the progress
        reports every log_interval steps; batch_size (this rank's) their samples/s. Returns the
        closure's loss, or loss."""
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._gather_grads()
        lr = float(self.param_groups[0]["lr"])
        stream = None
        if self._device.type == "cuda":
            stream = torch.cuda.current_stream(self._device).cuda_stream
        try:
            _lib.call(_lib.lib.obpy_optim_step, self._handle, self._gptr, lr, stream)
        finally:
            if self._armed:
                self._armed = False
                self._reported[:] = bytes(len(self._reported))
                self.overlapped_steps += 1
        after = self.stats()
        onebit._note_step(after.step)
        if loss is not None:
            val = loss.detach().float().reshape(()) if torch.is_tensor(loss) else float(loss)
            self._loss_sum = val if self._loss_sum is None else self._loss_sum + val
            self._loss_n += 1
        if batch_size:
            self._samples += int(batch_size)
        if after.freeze_step >= 0 and not self._frozen_reported:
            self._frozen_reported = True
            onebit.report("freeze", step=after.freeze_step, freeze_ratio=after.freeze_ratio)
        if after.step % self._log_interval == 0 or after.step == self._total_steps:
            self._log(after, lr)
        return loss

    def _log(self, s, lr):
        """A step report, as the worker's: the mean loss over the ranks and the steps since the
        last one, samples/s over every rank, the traffic, the compression health. Collective:
        every rank reaches the same steps. A loss that is not finite ends the run."""
        loss = float("nan")
        n = self._loss_n
        local = float(self._loss_sum) if self._loss_sum is not None else 0.0
        # With the loss: the stop signals the ranks received, so that all stop at this step.
        sums = self._world.sum([local / n if n else 0.0, 1.0 if n else 0.0,
                                0.0 if (not n or math.isfinite(local)) else 1.0,
                                float(self._samples), float(onebit._stop_signal)])
        if sums[1] > 0:
            loss = sums[0] / sums[1]
        now = time.monotonic()
        sps = sums[3] / max(now - self._t_window, 1e-9)
        self._samples_total += sums[3]
        self._loss_sum, self._loss_n, self._samples = None, 0, 0
        if sums[2] > 0:
            raise onebit.Diverged("the loss is not finite on %d rank(s) at step %d" %
                                  (int(sums[2]), s.step), 3)
        health = (_lib.c_double * 3)()
        _lib.call(_lib.lib.obpy_optim_health, self._handle, health)
        if sums[1] > 0:
            self._last_loss = loss
            onebit.report("step", phase=_phase(s), step=s.step, loss=loss, lr=lr,
                          samples_per_s=sps, bytes_sent=s.bytes_sent,
                          bytes_step=s.bytes_last_step, freeze_ratio=s.freeze_ratio,
                          worker_error_ratio=health[0], server_error_ratio=health[1],
                          zero_momentum_fraction=health[2])
        self._t_window = time.monotonic()
        if sums[4] > 0:
            # Every rank takes the same sum: every rank raises here, after the same step.
            name = _signal_name(onebit._stop_signal) if onebit._stop_signal else \
                "a stop signal to another rank"
            onebit.report("notice", step=s.step,
                          text="stop requested (%s): stopping after step %d" % (name, s.step))
            raise onebit.Stopped(s.step, name)

    def report_eval(self, eval_loss, eval_accuracy=float("nan"), eval_count=0):
        """Reports an evaluation at the current step (values over every rank: the caller's)."""
        onebit.report("eval", step=self.stats().step, eval_loss=eval_loss,
                      eval_accuracy=eval_accuracy, eval_count=eval_count)

    def finish(self, eval_loss=float("nan"), eval_accuracy=float("nan"), first_step=1,
               last_checkpoint=-1):
        """Reports the run's summary line, as onebit-worker's last: samples/s over the whole
        run (every rank, as the step reports counted them). Collective."""
        self._idle("finish()")
        s = self.stats()
        wall = time.monotonic() - self._t_start
        samples = self._samples_total + self._world.sum([float(self._samples)])[0]
        onebit.report("summary", phase=_phase(s), step=s.step, loss=self._last_loss,
                      samples_per_s=samples / max(wall, 1e-9),
                      eval_loss=eval_loss, eval_accuracy=eval_accuracy,
                      bytes_sent=s.bytes_sent, bytes_warmup=s.bytes_warmup,
                      bytes_compression=s.bytes_compression, freeze_step=s.freeze_step,
                      wall_seconds=wall, num_params=self._d,
                      first_step=first_step, last_checkpoint=last_checkpoint)

    # --- inspection ----------------------------------------------------------------------

    def stats(self):
        """The engine's counters: step, phase (0 warmup, 1 compression), freeze_step (-1:
        none), freeze_ratio, bytes_sent, bytes_last_step, bytes_warmup, bytes_compression."""
        s = _lib.Stats()
        _lib.lib.obpy_optim_stats(self._handle, _lib.ctypes.byref(s))
        return s

    @property
    def exchange_note(self):
        """With ranks_per_node="auto": the exchange's shape it chose and why ("2 nodes of 2
        ranks (MPI_COMM_TYPE_SHARED): hierarchical, ranks_per_node 2", "...: flat"); else ""."""
        return _lib.lib.obpy_optim_exchange_note(self._handle).decode()

    @property
    def flat_params(self):
        """The flat fp32 parameter buffer (every parameter is a view into it)."""
        return self._flat

    def engine_state(self, which):
        """A copy (CPU tensor) of the engine's "exp_avg", "exp_avg_sq", "worker_error" or
        "server_error"."""
        self._idle("engine_state()")
        n = _lib.c_size_t()
        _lib.call(_lib.lib.obpy_optim_read, self._handle, _lib.enc(which), None,
                  _lib.ctypes.byref(n))
        out = torch.empty(n.value, dtype=torch.float32)
        if n.value:
            _lib.call(_lib.lib.obpy_optim_read, self._handle, _lib.enc(which), out.data_ptr(),
                      _lib.ctypes.byref(n))
        return out

    def _close(self):
        for h in self._hooks:
            (h[1] if isinstance(h, tuple) else h).remove()
        self._hooks = []
        if self._handle is not None:
            _lib.lib.obpy_optim_destroy(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self._close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass


class OnebitAdam(_EngineOptimizer):
    """1-bit Adam (Tang et al., 2021) as the engine runs it: Adam steps with an fp32 (or
    gradient_exchange fp16/fp8) allreduce of the gradients until the variance is frozen
    (freeze_step "auto" or a step), then only the error-compensated 1-bit momentum crosses
    the network. Defaults and validation are the job spec's (docs: README "Job spec"): with
    lr_warmup_steps >= 75 the variance is tracked (track_variance 25, frozen at the warmup's
    end) unless track_variance=0, whatever the model (a job spec's MLP is frozen at step 8 by
    default; here that takes freeze_step=8, track_factor=1.25); total_steps (optional) bounds
    the auto freeze as a spec's steps do."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=None, weight_decay=None,
                 bias_correction=None, freeze_step="auto", stabilizer=None,
                 gradient_exchange=None, compression=None, total_steps=None, lr_warmup_steps=0,
                 log_interval=10, names=None, freeze_threshold=None, freeze_min_steps=None,
                 freeze_max_fraction=None, block_size=None, scale=None, precondition=None,
                 stability_bound=None, frozen_step_ratio=None, refresh_steps=None,
                 bucket_mb=None, ranks_per_node=None, overlap=None, track_variance=None,
                 track_factor=None):
        opts = dict(eps=eps, weight_decay=weight_decay, bias_correction=bias_correction,
                    ranks_per_node=ranks_per_node, overlap=overlap,
                    track_variance=track_variance, track_factor=track_factor,
                    gradient_exchange=gradient_exchange, bucket_mb=bucket_mb,
                    compression=compression, freeze_threshold=freeze_threshold,
                    freeze_min_steps=freeze_min_steps, freeze_max_fraction=freeze_max_fraction,
                    block_size=block_size, scale=scale, precondition=precondition,
                    stabilizer=stabilizer, stability_bound=stability_bound,
                    frozen_step_ratio=frozen_step_ratio, refresh_steps=refresh_steps,
                    # Always named. The spec's model is only a placeholder, and a job spec's
                    # MLP default (frozen at step 8) is not for a model the binding cannot see.
                    freeze_step="auto" if freeze_step is None else freeze_step)
        super().__init__("onebit_adam", params, lr, betas, total_steps, lr_warmup_steps,
                         log_interval, names, opts)


class Adam(_EngineOptimizer):
    """The engine's Adam with its gradient exchange (fp32 ring allreduce, or fp16/fp8), for
    comparisons with OnebitAdam on the same communicators. Bias correction on by default."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=None, weight_decay=None,
                 bias_correction=None, gradient_exchange=None, total_steps=None,
                 log_interval=10, names=None, bucket_mb=None, overlap=None):
        opts = dict(eps=eps, weight_decay=weight_decay, bias_correction=bias_correction,
                    gradient_exchange=gradient_exchange, bucket_mb=bucket_mb, overlap=overlap)
        super().__init__("adam", params, lr, betas, total_steps, 0, log_interval, names, opts)


class BinSGDM(_EngineOptimizer):
    """BinSGDM (Gao et al.) as the engine runs it: no warmup; every rank keeps m and
    b = EMA |g| with the same beta, and from the first step only m / (b + eps), quantised to
    +-1 stochastically and without bias with worker and server error feedback, crosses the
    network (one bit an element each way). Every rank then steps x -= lr (u + wd x) with the
    server's +-1 average u, so lr is the size of every coordinate's step: start from the lr
    Adam would take. The draws come from `seed` and the step: a resumed run draws as the
    uninterrupted one did. max_denominator_step T0: b a running maximum after step T0."""

    def __init__(self, params, lr=1e-3, beta=0.9, eps=None, weight_decay=None,
                 max_denominator_step=None, block_size=None, total_steps=None, log_interval=10,
                 names=None, bucket_mb=None, seed=1, ranks_per_node=None, overlap=None):
        if not isinstance(seed, int) or seed < 0:
            raise ValueError("seed: expected an integer >= 0, got %r" % (seed,))
        opts = dict(eps=eps, weight_decay=weight_decay, bucket_mb=bucket_mb,
                    block_size=block_size, max_denominator_step=max_denominator_step,
                    ranks_per_node=ranks_per_node, overlap=overlap)
        super().__init__("binsgdm", params, lr, (beta, None), total_steps, 0, log_interval,
                         names, opts, seed=seed)


class SoftSign(_EngineOptimizer):
    """SoftSignSGD, BinSGDM unquantised: the gradients averaged as Adam's (gradient_exchange),
    then m, b = EMA g, EMA |g| and x -= lr (m / (b + eps) + wd x). For comparisons."""

    def __init__(self, params, lr=1e-3, beta=0.9, eps=None, weight_decay=None,
                 gradient_exchange=None, total_steps=None, log_interval=10, names=None,
                 bucket_mb=None, overlap=None):
        opts = dict(eps=eps, weight_decay=weight_decay, gradient_exchange=gradient_exchange,
                    bucket_mb=bucket_mb, overlap=overlap)
        super().__init__("softsign", params, lr, (beta, None), total_steps, 0, log_interval,
                         names, opts)


def _phase(s):
    return "compression" if s.phase == 1 else "warmup"


def _named(params, names):
    """The parameters and their names: from (name, tensor) pairs, from `names`, or param.K."""
    if isinstance(params, torch.Tensor):
        raise TypeError("params: an iterable of tensors (or of (name, tensor) pairs), not a "
                        "tensor")
    items = list(params)
    if items and isinstance(items[0], tuple) and len(items[0]) == 2 and \
            isinstance(items[0][0], str):
        if names is not None:
            raise ValueError("names: given twice (named parameters and names=)")
        names = [n for n, _ in items]
        items = [p for _, p in items]
    if items and isinstance(items[0], dict):
        if len(items) > 1:
            return items, names  # refused with its message once the groups exist
        items = list(items[0]["params"])
    if names is None:
        names = ["param.%d" % i for i in range(len(items))]
    names = list(names)
    if len(names) != len(items):
        raise ValueError("names: %d names for %d parameters" % (len(names), len(items)))
    return items, names


def _check_params(plist, names):
    """Every parameter fp32, dense, contiguous, on one device, none sharing memory."""
    if not plist:
        raise ValueError("params: no parameters")
    dev = plist[0].device
    seen = {}
    for p, name in zip(plist, names):
        if not isinstance(p, torch.Tensor):
            raise TypeError("parameter '%s': not a tensor (%s)" % (name, type(p).__name__))
        if p.dtype != torch.float32:
            raise TypeError("parameter '%s' is %s: the engine keeps fp32 parameters and "
                            "state (train in bf16/fp16 with torch.autocast)" % (name, p.dtype))
        if p.is_sparse or not p.is_contiguous():
            raise ValueError("parameter '%s' is not a dense contiguous tensor" % name)
        if p.device != dev:
            raise ValueError("parameters on two devices: '%s' on %s, '%s' on %s" %
                             (names[0], dev, name, p.device))
        if dev.type not in ("cpu", "cuda"):
            raise ValueError("parameter '%s' is on %s: cpu or cuda" % (name, dev))
        start = p.data_ptr()
        for s0, (e0, other) in seen.items():
            if start < e0 and s0 < start + 4 * p.numel():
                raise ValueError("parameters '%s' and '%s' share memory: each must be a "
                                 "tensor of its own (tie weights by using one parameter)" %
                                 (other, name))
        if p.numel():
            seen[start] = (start + 4 * p.numel(), name)
    return dev


def _names_blob(names):
    for n in names:
        if not isinstance(n, str) or not n or "\0" in n:
            raise ValueError("parameter name %r: a non-empty string" % (n,))
    return b"".join(n.encode() + b"\0" for n in names)


# --- checkpoints -----------------------------------------------------------------------------

def _job_dir(path):
    path = path or os.environ.get("ONEBIT_CHECKPOINT_DIR")
    if not path:
        raise ValueError("checkpoint directory: none given and ONEBIT_CHECKPOINT_DIR is unset")
    return os.fspath(path)


def _model_names(model, optimizer):
    """The names of the optimizer's parameters in the model (all of them must be there)."""
    by_id = {id(p): n for n, p in model.named_parameters()}
    names = []
    for i, p in enumerate(optimizer.param_groups[0]["params"]):
        if id(p) not in by_id:
            raise ValueError("parameter %d of the optimizer is not a parameter of the model" % i)
        names.append(by_id[id(p)])
    return names


def _adopt_names(model, optimizer):
    """Names the checkpoints' tensors after the model's parameters."""
    names = _model_names(model, optimizer)
    if names != optimizer._names:
        _lib.call(_lib.lib.obpy_optim_set_names, optimizer._handle, _names_blob(names),
                  len(names))
        optimizer._names = names


def _buffers(model):
    """The model's persistent buffers (batch-norm statistics, ...; those of its state_dict, not
    the ones registered with persistent=False) as exact JSON: floats through Python's float
    (float32 and float64 round-trip), integers as integers."""
    out = {}
    keep = set(model.state_dict(keep_vars=True).keys())
    for name, b in model.named_buffers():
        if b is None or name not in keep:
            continue
        t = b.detach().cpu()
        vals = t.reshape(-1).tolist()
        out[name] = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                     "values": vals}
    return out


def _load_buffers(model, saved):
    own = dict(model.named_buffers())
    for name, rec in saved.items():
        if name not in own or own[name] is None:
            raise ValueError("checkpoint: buffer '%s' is not in the model" % name)
        b = own[name]
        if list(b.shape) != rec["shape"]:
            raise ValueError("checkpoint: buffer '%s' has shape %s, the model's %s" %
                             (name, rec["shape"], list(b.shape)))
        b.copy_(torch.tensor(rec["values"], dtype=b.dtype).reshape(b.shape))


def save(dir=None, model=None, optimizer=None, step=None, extra=None, keep=3, seed=0,
         data_position=(0, 0)):
    """Writes the engine's checkpoint of `optimizer` (its parameters, m, v, v_Tw, every rank's
    error buffers, the freeze state; named after the model's parameters) and the model's
    buffers under dir (default: $ONEBIT_CHECKPOINT_DIR, which onebitd sets), then keeps the
    newest `keep`. extra: a JSON-serialisable dict stored with it (your own counters, a data
    position). Collective: every rank calls it. Returns the checkpoint's directory."""
    if not isinstance(optimizer, _EngineOptimizer):
        raise TypeError("optimizer: an onebit.torch optimizer")
    optimizer._idle("onebit.torch.save()")
    s = optimizer.stats()
    if step is not None and step != s.step:
        raise ValueError("step %d: the optimizer has taken %d steps (the checkpoint is of "
                         "the optimizer's step)" % (step, s.step))
    if extra is not None and not isinstance(extra, dict):
        raise TypeError("extra: a dict")
    payload = {"user": extra or {}}
    if model is not None:
        _adopt_names(model, optimizer)
        payload["buffers"] = _buffers(model)
    if optimizer._device.type == "cuda":
        torch.cuda.current_stream(optimizer._device).synchronize()
    info = _lib.CkptInfo(seed=int(seed), lr=float(optimizer.param_groups[0]["lr"]),
                         train_loss=optimizer._last_loss,
                         wall_seconds=time.monotonic() - optimizer._t_start,
                         loader_epoch=int(data_position[0]), loader_index=int(data_position[1]))
    path = _lib.ctypes.create_string_buffer(_lib.PATH_LEN)
    job_dir = _job_dir(dir)
    t0 = time.monotonic()
    _lib.call(_lib.lib.obpy_ckpt_save, optimizer._handle, _lib.enc(job_dir), int(keep),
              _lib.ctypes.byref(info), json.dumps(payload).encode(), path)
    onebit.report("checkpoint", step=s.step, text=path.value.decode())
    del t0
    return path.value.decode()


def load(dir=None, model=None, optimizer=None):
    """Restores the newest checkpoint of dir (default $ONEBIT_CHECKPOINT_DIR) that verifies
    (or dir itself, a step-NNNNNNNN directory) into the optimizer and the model's buffers;
    damaged checkpoints are passed over with a notice. Returns None when there is none, else
    {"step", "path", "extra", "from_world_size", "data_position"}. Resuming at the same world
    size on the same device is bit-exact; on another world size the error buffers are
    re-sharded. Collective."""
    if not isinstance(optimizer, _EngineOptimizer):
        raise TypeError("optimizer: an onebit.torch optimizer")
    optimizer._idle("onebit.torch.load()")
    if model is not None:
        _adopt_names(model, optimizer)
    found = _lib.c_int()
    info = _lib.CkptInfo()
    extra = _lib.c_void_p()
    path = _lib.ctypes.create_string_buffer(_lib.PATH_LEN)
    fws = _lib.c_int()
    notes = _lib.ctypes.create_string_buffer(1 << 14)
    if optimizer._device.type == "cuda":
        torch.cuda.current_stream(optimizer._device).synchronize()
    try:
        _lib.call(_lib.lib.obpy_ckpt_load, optimizer._handle, _lib.enc(_job_dir(dir)),
                  _lib.ctypes.byref(found), _lib.ctypes.byref(info), _lib.ctypes.byref(extra),
                  path, _lib.ctypes.byref(fws), notes, len(notes))
    finally:
        for line in notes.value.decode(errors="replace").splitlines():
            onebit.report("notice", text=line)
    if not found.value:
        return None
    try:
        payload = json.loads(_lib.ctypes.string_at(extra.value).decode())
    finally:
        _lib.lib.obpy_free(extra.value)
    if model is not None and payload.get("buffers"):
        with torch.no_grad():
            _load_buffers(model, payload["buffers"])
    s = optimizer.stats()
    onebit._run_step = s.step
    optimizer._frozen_reported = s.freeze_step >= 0
    optimizer._last_loss = info.train_loss
    onebit.report("resume", phase=_phase(s), step=s.step, text=path.value.decode(),
                  from_world_size=fws.value)
    return {"step": s.step, "path": path.value.decode(), "extra": payload.get("user", {}),
            "from_world_size": fws.value,
            "data_position": (info.loader_epoch, info.loader_index)}


def roll_back(dir=None, model=None, optimizer=None, max_rollbacks=2):
    """What onebit-worker does when a run diverges (a job spec's checkpoint.rollbacks), for a
    loop that caught onebit.Diverged: restores the newest checkpoint of dir that verifies, as
    load() does, and then keeps the run off the path that diverged. OnebitAdam re-estimates its
    frozen variance by Adam steps (ceil(Delta / 2) of them) before freezing again; one rolled
    back into its warmup freezes only after the step that diverged. Other optimizers go on from
    the checkpoint as they were. The traffic counters keep what was sent. Returns load()'s
    dict: continue after its "step" (the data position is the caller's, as for a resume).
    Raises onebit.Diverged when max_rollbacks were taken already (by this run and the runs
    its checkpoints come from) or when there is no checkpoint. Collective: every rank calls it
    (a Diverged from step() is raised on every rank at the same step)."""
    if not isinstance(optimizer, _EngineOptimizer):
        raise TypeError("optimizer: an onebit.torch optimizer")
    optimizer._idle("onebit.torch.roll_back()")
    if not isinstance(max_rollbacks, int) or isinstance(max_rollbacks, bool) or \
            not 0 <= max_rollbacks <= 100:
        raise ValueError("max_rollbacks: an integer in 0..100, got %r" % (max_rollbacks,))
    before = optimizer.stats()
    bad = before.step
    taken = _lib.lib.obpy_optim_rollbacks(optimizer._handle)
    if taken >= max_rollbacks:
        raise onebit.Diverged("step %d: the run diverged and no rollback is left (%d taken, "
                              "max_rollbacks %d)" % (bad, taken, max_rollbacks), 3)
    info = load(dir, model, optimizer)
    if info is None:
        raise onebit.Diverged("step %d: the run diverged and there is no checkpoint to roll "
                              "back to in %s" % (bad, _job_dir(dir)), 3)
    _lib.call(_lib.lib.obpy_optim_rolled_back, optimizer._handle, bad,
              _lib.ctypes.byref(before))
    s = optimizer.stats()
    optimizer._loss_sum, optimizer._loss_n, optimizer._samples = None, 0, 0
    optimizer._t_window = time.monotonic()
    # Back in the warmup: the next freeze is reported again.
    optimizer._frozen_reported = s.freeze_step >= 0
    n = _lib.lib.obpy_optim_rollbacks(optimizer._handle)
    if s.warm_start == _WARM_REWARM:
        how = "v is re-estimated by Adam until step %d, then frozen again" % s.refit_end
    elif s.warm_start == _WARM_DELAYED:
        how = "still in the warmup; v is frozen again at step %d" % s.refit_end
    else:
        how = "going on from it"
    onebit.report("rewarm", step=bad, to_step=info["step"], text2=info["path"],
                  text="diverged at step %d: rolled back to %s (rollback %d of at most %d); %s"
                  % (bad, info["path"], n, max_rollbacks, how))
    return info


def warm_start(source, optimizer, refit_steps="auto", params=False, model=None):
    """Starts a fresh OnebitAdam's compression phase from the frozen variance v_Tw of another
    run's checkpoint (a checkpoint, or a job directory: its newest valid one), re-estimated over
    refit_steps Adam steps ("auto": ceil(Delta / 5)) or taken as is (0), as a job spec's
    warm_start does; params=True also takes its parameters. Returns what was done."""
    if not isinstance(optimizer, OnebitAdam):
        raise TypeError("optimizer: an onebit.torch.OnebitAdam")
    optimizer._idle("onebit.torch.warm_start()")
    if refit_steps == "auto":
        refit = -1
    elif isinstance(refit_steps, int) and 0 <= refit_steps <= 1000000:
        refit = refit_steps
    else:
        raise ValueError("refit_steps: \"auto\" or an integer in [0, 1000000], got %r" %
                         (refit_steps,))
    if model is not None:
        _adopt_names(model, optimizer)
    out = _lib.ctypes.create_string_buffer(512)
    _lib.call(_lib.lib.obpy_ckpt_warm_start, optimizer._handle, _lib.enc(os.fspath(source)),
              refit, 1 if params else 0, out)
    what = out.value.decode()
    onebit.report("warm_start", text=what, text2="taken" if refit == 0 else "refit")
    return what
