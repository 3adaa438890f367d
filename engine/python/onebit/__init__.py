"""onebit: the 1-bit Adam engine for your own PyTorch models.

    import onebit, onebit.torch
    world = onebit.init()                      # rank, size, device from mpirun / onebitd
    opt = onebit.torch.OnebitAdam(model.parameters(), lr=1e-3, total_steps=5000)
    for step in range(...):
        loss = model(x).loss(); loss.backward()
        opt.step(loss=loss); opt.zero_grad()

The optimizer is the engine's own (libonebit's ob_optim over one flat fp32 buffer the
parameters are views into), its exchanges the engine's communicators (MPI on CPU tensors, NCCL
on CUDA tensors), its checkpoints the engine's HDF5 files and its progress the report lines
onebit-worker prints. See engine/python/README.md.
"""

import atexit
import json
import math
import os
import signal
import sys
import threading
import traceback
import weakref

from . import _lib
from ._lib import OnebitError

__all__ = ["init", "World", "OnebitError", "Diverged", "Stopped", "stop_requested", "report",
           "version", "cuda_built"]


class Diverged(OnebitError):
    """The training loss stopped being finite (onebit-worker exits 3 for this)."""


class Stopped(SystemExit):
    """Raised by an optimizer's step() on every rank at the same step after a stop was asked:
    SIGTERM or SIGUSR1 to any rank, what onebitd sends on a cancel, at a deadline, on its own
    shutdown and before a pod is deleted. The step is done: save a checkpoint and leave, as
    onebit-worker does (`except onebit.Stopped: onebit.torch.save(...); raise`). Uncaught, the
    process exits 0 (it is a SystemExit) with what was saved before. `step`: the step done."""

    def __init__(self, step, signal_name):
        super().__init__(0)
        self.step, self.signal_name = step, signal_name

    def __str__(self):
        return "stopped after step %d (%s)" % (self.step, self.signal_name)


def version():
    return _lib.lib.obpy_version().decode()


def cuda_built():
    """True when the engine was built with its CUDA kernels and the NCCL communicator."""
    return bool(_lib.lib.obpy_cuda_built())


class World:
    """This process's place in the job: rank and size over every rank, its rank and the
    number of ranks on its node, and the device it should train on ("cuda:K" with
    K = local_rank modulo the node's GPUs when CUDA is asked for, else "cpu")."""

    def __init__(self, rank, size, local_rank, local_size, device):
        self.rank, self.size = rank, size
        self.local_rank, self.local_size = local_rank, local_size
        self.device = device
        self._ctrl = None
        self._device_comms = {}

    def __repr__(self):
        return "World(rank=%d, size=%d, local_rank=%d, device=%r)" % (
            self.rank, self.size, self.local_rank, self.device)

    def ctrl(self):
        """The host communicator over every rank (MPI): small sums, checkpoints, reports."""
        if self._ctrl is None:
            h = _lib.c_void_p()
            _lib.call(_lib.lib.obpy_comm_create, _lib.ctypes.byref(h), b"mpi", 0)
            self._ctrl = h.value
            _handles.add(self)
        return self._ctrl

    def device_comm(self, index):
        """The NCCL communicator on CUDA device `index` (created once per device)."""
        if index not in self._device_comms:
            if not cuda_built():
                raise OnebitError("onebit was built without CUDA: CUDA tensors cannot be "
                                  "exchanged (rebuild where nvcc and NCCL are present)")
            h = _lib.c_void_p()
            _lib.call(_lib.lib.obpy_comm_create, _lib.ctypes.byref(h), b"nccl", int(index))
            self._device_comms[index] = h.value
            _handles.add(self)
        return self._device_comms[index]

    def sum(self, values):
        """Sums a few floats over the ranks (every rank must call it)."""
        arr = (_lib.c_double * len(values))(*values)
        _lib.call(_lib.lib.obpy_comm_sum, self.ctrl(), arr, len(values))
        return list(arr)

    def barrier(self):
        _lib.call(_lib.lib.obpy_comm_barrier, self.ctrl())

    def _close(self):
        for h in self._device_comms.values():
            _lib.lib.obpy_comm_destroy(h)
        self._device_comms.clear()
        if self._ctrl is not None:
            _lib.lib.obpy_comm_destroy(self._ctrl)
            self._ctrl = None


_world = None
# Everything holding engine handles, closed before MPI is finalised at exit.
_handles = weakref.WeakSet()
# Optimizer steps taken in this process, and the step the run stands at (a resumed run's too):
# what a failure is judged by.
_steps_in_process = 0
_run_step = 0
# The stop signal this rank received (0: none): the optimizers agree on it over the ranks.
_stop_signal = 0

# The exit statuses of a program that fails (onebit-worker's, which onebitd judges): 1 a restart
# may mend it; 3 the training diverged; 6 it fails the same way on every attempt.
EXIT_RETRY, EXIT_DIVERGED, EXIT_PROGRAM = 1, 3, 6
FAILURE_FILE = ".onebit-failure"


def _note_step(step):
    global _steps_in_process, _run_step
    _steps_in_process += 1
    _run_step = step


def _classify(exc_type, last):
    """The exit status of an uncaught exception, and why: a divergence; an exception of the
    program before its first step (nothing a restart changes); the same exception at the same
    step as the attempt before (recorded in $ONEBIT_CHECKPOINT_DIR); else worth a restart."""
    if issubclass(exc_type, Diverged):
        return EXIT_DIVERGED, "diverged at step %d" % _run_step
    engine = issubclass(exc_type, OnebitError)  # a communicator or a file: may be transient
    if _steps_in_process == 0 and not engine:
        return EXIT_PROGRAM, "before its first step"
    where = "at step %d" % _run_step
    ck = os.environ.get("ONEBIT_CHECKPOINT_DIR")
    if not ck:
        return EXIT_RETRY, where
    # The attempt: the launcher's name for this run of the ranks (every rank of an attempt
    # shares it, the next attempt has another), so that two ranks of one attempt failing alike
    # do not count as two attempts.
    attempt = os.environ.get("PMIX_NAMESPACE") or os.environ.get("OMPI_MCA_orte_hnp_uri") or \
        str(os.getppid())
    path = os.path.join(ck, FAILURE_FILE)
    mark = "%d\t%s" % (_run_step, last)
    try:
        with open(path) as f:
            before_attempt, _, before = f.read().partition("\n")
        if before == mark and before_attempt != attempt:
            return EXIT_PROGRAM, where + ", as on the attempt before"
    except OSError:
        pass
    try:
        os.makedirs(ck, exist_ok=True)
        tmp = "%s.%d" % (path, os.getpid())
        with open(tmp, "w") as f:
            f.write(attempt + "\n" + mark)
        os.replace(tmp, path)
    except OSError:
        pass
    return EXIT_RETRY, where


def _on_stop_signal(signum, frame):
    """The first SIGTERM/SIGUSR1 asks for a stop at the next step every rank agrees on; a
    second one ends the process at once, as the signal's default would have."""
    global _stop_signal
    if _stop_signal:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _stop_signal = signum


def _install_stop_signals():
    """Takes SIGTERM and SIGUSR1 where the program left them at their default (a handler of
    its own stays), from the main thread only (Python's rule)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _on_stop_signal)


def stop_requested():
    """The signal (signal.Signals) this rank was asked to stop by, or None. The optimizers
    raise Stopped once the ranks agree; a loop without an engine optimizer can poll this."""
    return signal.Signals(_stop_signal) if _stop_signal else None


def _excepthook(exc_type, exc, tb):
    """An uncaught exception ends every rank with a status the coordinator can judge (the other
    ranks would wait in a collective forever), its last line the reason."""
    sys.__excepthook__(exc_type, exc, tb)
    if issubclass(exc_type, (KeyboardInterrupt, SystemExit)):
        return
    last = "".join(traceback.format_exception_only(exc_type, exc)).strip().splitlines()[-1]
    code, when = _classify(exc_type, last)
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "the program"
    sys.stderr.write("onebit: %s failed %s: %s\n" % (script, when, last[:400]))
    sys.stderr.flush()
    sys.stdout.flush()
    if _world is not None and _world.size > 1:
        _lib.lib.obpy_abort(code)
    os._exit(code)


def init(device=None, stop_signals=True):
    """Initialises the job's process: MPI (as mpirun or onebitd started it; a lone process is a
    world of one) and the device. device: None (CUDA when torch has it, else CPU), "cpu" or
    "cuda". stop_signals: take SIGTERM and SIGUSR1 so that the engine's optimizers stop every
    rank at one step (onebit.Stopped); False leaves them alone (a loop that steps no engine
    optimizer would not see them). Returns the World; calling it again returns the same one."""
    global _world
    if _world is not None:
        return _world
    r, n, lr, ln = (_lib.c_int() for _ in range(4))
    _lib.call(_lib.lib.obpy_init, *(_lib.ctypes.byref(v) for v in (r, n, lr, ln)))
    dev = "cpu"
    want = device if device is not None else os.environ.get("ONEBIT_DEVICE")
    if want not in (None, "cpu", "cuda"):
        raise ValueError("device: cpu or cuda, got %r" % (want,))
    if want != "cpu":
        count = _lib.lib.obpy_cuda_device_count()
        if count > 0:
            dev = "cuda:%d" % (lr.value % count)
        elif want == "cuda":
            raise OnebitError("device cuda: no usable CUDA device (or onebit was built without "
                              "CUDA)")
    _world = World(r.value, n.value, lr.value, ln.value, dev)
    atexit.register(_shutdown)
    sys.excepthook = _excepthook
    if stop_signals:
        _install_stop_signals()
    return _world


def world():
    """The World of init(), initialising with the defaults when it was not called."""
    return _world if _world is not None else init()


def _shutdown():
    global _reporter
    for h in list(_handles):
        h._close()
    if _reporter:
        _lib.lib.obpy_reporter_destroy(_reporter)
    _reporter = False
    sys.stdout.flush()
    _lib.lib.obpy_finalize()


# --- progress reports ------------------------------------------------------------------------

def _format():
    f = os.environ.get("ONEBIT_PROGRESS", "json")
    if f not in ("json", "text", "off"):
        raise ValueError("ONEBIT_PROGRESS: json, text or off, got %r" % f)
    return f


def _report(reporter, kind, phase, text, text2, fields, line):
    """One report through the engine's writer: its JSON line (when `line`) and, with a
    reporter, its ReportProgress call. Returns the line (or None) and obpy_report's flags."""
    nums = [0.0] * len(_lib.REPORT_FIELDS)
    for k, v in fields.items():
        try:
            nums[_lib.REPORT_FIELDS.index(k)] = float("nan") if v is None else float(v)
        except ValueError:
            raise TypeError("report: unknown field %r" % k) from None
    arr = (_lib.c_double * len(nums))(*nums)
    out = _lib.ctypes.create_string_buffer(1 << 16 if kind != "start" else 1 << 21) \
        if line else None
    flags = _lib.ctypes.c_int(0)
    err = _lib.ctypes.create_string_buffer(1024)
    _lib.call(_lib.lib.obpy_report, reporter, _lib.enc(kind), _lib.enc(phase), arr, len(nums),
              _lib.enc(text) if text is not None else None,
              _lib.enc(text2) if text2 is not None else None, out,
              len(out) if out is not None else 0, _lib.ctypes.byref(flags), buf=err)
    if flags.value & _lib.REPORT_FIRST_FAILURE:
        _warn_unreported(err.value.decode(errors="replace"))
    return (out.value.decode() if out is not None else None), flags.value


def report_line(kind, phase="", text=None, text2=None, **fields):
    """The JSON line onebit-worker prints for this event (onebit/report.h), built by the same
    C writer. Unknown field names raise TypeError."""
    return _report(None, kind, phase, text, text2, fields, True)[0]


# Rank 0's reporter to onebitd's WorkerService: None until the first report, False where there
# is none (no ONEBIT_REPORT_ADDR, or it could not be created).
_reporter = None


def _warn_unreported(why):
    """Said once: the reports cannot reach onebitd, which then reads the printed lines."""
    sys.stderr.write("onebit: warning: ONEBIT_REPORT_ADDR: %s (continuing; progress stays in "
                     "the log)\n" % why)


def _get_reporter():
    """A program run by onebitd sends its reports to the coordinator as onebit-worker does
    (ONEBIT_REPORT_ADDR and ONEBIT_JOB_ID from the launcher, the attempt's credential in
    ONEBIT_REPORT_TOKEN or ONEBIT_REPORT_TOKEN_FILE): they reach onebitd where it cannot read
    the ranks' output (Kubernetes, Slurm), and its answer carries a cancel."""
    global _reporter
    if _reporter is None:
        _reporter = False
        addr, job = os.environ.get("ONEBIT_REPORT_ADDR"), os.environ.get("ONEBIT_JOB_ID")
        if addr and job:
            h = _lib.c_void_p()
            try:
                _lib.call(_lib.lib.obpy_reporter_create, _lib.enc(addr), _lib.enc(job),
                          _lib.ctypes.byref(h))
                _reporter = h
            except (OnebitError, ValueError) as e:
                _warn_unreported(e)
    return _reporter or None


def _text_line(kind, phase, text, f):
    g = f.get
    if kind == "step":
        s = "step %6d %-11s loss %8.4g  lr %.3e  %9.0f samples/s  sent %9.3f MB" % (
            g("step", 0), phase, g("loss", float("nan")), g("lr", 0.0),
            g("samples_per_s", 0.0), g("bytes_sent", 0) / 1e6)
        if phase == "compression" and g("worker_error_ratio") is not None and \
                not math.isnan(g("worker_error_ratio")):
            s += "  error/|m| worker %.3g server %.3g" % (g("worker_error_ratio"),
                                                         g("server_error_ratio"))
        return s
    if kind == "freeze":
        return "freeze @ %d: variance frozen, compression phase begins" % g("step", 0)
    if kind == "eval":
        return "eval @ %d: loss %.4f, accuracy %.4f (%d)" % (
            g("step", 0), g("eval_loss", 0.0), g("eval_accuracy", 0.0), g("eval_count", 0))
    if kind == "checkpoint":
        return "checkpoint @ %d: %s" % (g("step", 0), text)
    if kind == "resume":
        return "resume: continuing after step %d from %s" % (g("step", 0), text)
    if kind == "summary":
        return "summary: %d steps, final train loss %.6g, eval loss %.6g, %.3f MB sent" % (
            g("step", 0), g("loss", float("nan")), g("eval_loss", float("nan")),
            g("bytes_sent", 0) / 1e6)
    return "%s: %s" % (kind, text or "")


def report(kind, phase="", text=None, text2=None, **fields):
    """Prints a progress report on rank 0 as onebit-worker does (ONEBIT_PROGRESS=json, the
    default and what onebitd reads; text for people; off), so that a program run by onebitd
    shows in onebitctl, the dashboard and /metrics; under onebitd it also sends it over
    WorkerService, and a cancel in the answer asks for a stop as SIGTERM does. Only rank 0
    reports; call it on every rank."""
    global _stop_signal
    w = world()
    fmt = _format()
    if w.rank != 0:
        return
    line, flags = _report(_get_reporter(), kind, phase, text, text2, fields, fmt == "json")
    if flags & _lib.REPORT_CANCEL and not _stop_signal:
        _stop_signal = signal.SIGTERM
    if fmt == "off":
        return
    sys.stdout.write((line if fmt == "json" else _text_line(kind, phase, text, fields)) + "\n")
    sys.stdout.flush()


def spec_json(obj):
    return json.dumps(obj, separators=(",", ":"), sort_keys=False)
