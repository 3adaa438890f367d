"""The binding: libonebit_py.so (engine/python/src/binding.h) loaded with ctypes.

Nothing here computes anything: each function declares one C function's signature, and
``call`` turns a failed status into an exception that carries the engine's message.
"""

import ctypes
import os
import re

ABI_VERSION = 4
_HERE = os.path.dirname(os.path.abspath(__file__))


class OnebitError(RuntimeError):
    """A failure the engine reported; ``code`` is its status (onebit/status.h)."""

    def __init__(self, message, code=-1):
        super().__init__(message)
        self.code = code


# The engine's status codes that mean "your input is wrong" rather than "something broke".
ERR_INVALID_ARG = -1
ERR_NOT_FOUND = -9
ERR_CORRUPT = -7

_LOCATION = re.compile(r" \([A-Za-z0-9_]+\.(c|cu):\d+\)")


def clean(msg):
    """The message without the engine's source locations (file.c:123), which are for us."""
    return _LOCATION.sub("", msg)


def _load():
    path = os.environ.get("ONEBIT_LIBRARY") or os.path.join(_HERE, "libonebit_py.so")
    if not os.path.exists(path):
        raise ImportError(
            "onebit: %s is missing: build the project (cmake --build build) and use "
            "build/python, or run scripts/install-python.sh" % path)
    # Open MPI loads its components with dlopen: they need libmpi's symbols global.
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    lib.obpy_abi_version.restype = ctypes.c_int
    if lib.obpy_abi_version() != ABI_VERSION:
        raise ImportError("onebit: %s has binding version %d, the package %d: rebuild" %
                          (path, lib.obpy_abi_version(), ABI_VERSION))
    return lib


lib = _load()

c_char_p, c_int, c_long, c_size_t, c_double, c_void_p = (ctypes.c_char_p, ctypes.c_int,
                                                        ctypes.c_long, ctypes.c_size_t,
                                                        ctypes.c_double, ctypes.c_void_p)
c_int_p = ctypes.POINTER(ctypes.c_int)
ERR = (c_char_p, c_size_t)


class Stats(ctypes.Structure):
    _fields_ = [("step", ctypes.c_int64), ("freeze_step", ctypes.c_int64),
                ("refit_end", ctypes.c_int64), ("bytes_sent", ctypes.c_int64),
                ("bytes_last_step", ctypes.c_int64), ("bytes_warmup", ctypes.c_int64),
                ("bytes_compression", ctypes.c_int64), ("phase", ctypes.c_int32),
                ("warm_start", ctypes.c_int32), ("freeze_ratio", ctypes.c_double)]


class CkptInfo(ctypes.Structure):
    _fields_ = [("seed", ctypes.c_uint64), ("lr", ctypes.c_double),
                ("train_loss", ctypes.c_double), ("wall_seconds", ctypes.c_double),
                ("loader_epoch", ctypes.c_uint64), ("loader_index", ctypes.c_uint64)]


def _sig(name, args, res=c_int):
    f = getattr(lib, name)
    f.argtypes = list(args)
    f.restype = res


_sig("obpy_cuda_built", [])
_sig("obpy_cuda_device_count", [])
_sig("obpy_version", [], c_char_p)
_sig("obpy_free", [c_void_p], None)
_sig("obpy_init", [c_int_p, c_int_p, c_int_p, c_int_p, *ERR])
_sig("obpy_finalize", [], None)
_sig("obpy_abort", [c_int], None)
_sig("obpy_comm_create", [ctypes.POINTER(c_void_p), c_char_p, c_int, *ERR])
_sig("obpy_comm_destroy", [c_void_p], None)
_sig("obpy_comm_bcast", [c_void_p, c_void_p, c_size_t, c_int, *ERR])
_sig("obpy_comm_sum", [c_void_p, ctypes.POINTER(c_double), c_int, *ERR])
_sig("obpy_comm_barrier", [c_void_p, *ERR])
_sig("obpy_optim_check", [c_char_p, c_long, c_char_p, c_size_t, *ERR])
_sig("obpy_optim_create", [ctypes.POINTER(c_void_p), c_char_p, c_long, c_void_p, c_void_p,
                           c_void_p, c_size_t, ctypes.POINTER(c_size_t), c_char_p,
                           ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64),
                           c_size_t, *ERR])
_sig("obpy_optim_destroy", [c_void_p], None)
_sig("obpy_optim_set_names", [c_void_p, c_char_p, c_size_t, *ERR])
_sig("obpy_optim_step", [c_void_p, c_void_p, c_double, c_void_p, *ERR])
_sig("obpy_optim_stats", [c_void_p, ctypes.POINTER(Stats)], None)
_sig("obpy_optim_exchange_note", [c_void_p], c_char_p)
_sig("obpy_optim_overlap_active", [c_void_p])
_sig("obpy_optim_backward_begin", [c_void_p, c_void_p], None)
_sig("obpy_optim_grad_ready", [c_void_p, c_size_t], None)
_sig("obpy_optim_health", [c_void_p, ctypes.POINTER(c_double), *ERR])
_sig("obpy_optim_read", [c_void_p, c_char_p, c_void_p, ctypes.POINTER(c_size_t), *ERR])
_sig("obpy_ckpt_save", [c_void_p, c_char_p, c_int, ctypes.POINTER(CkptInfo), c_char_p,
                        c_char_p, *ERR])
_sig("obpy_ckpt_load", [c_void_p, c_char_p, c_int_p, ctypes.POINTER(CkptInfo),
                        ctypes.POINTER(c_void_p), c_char_p, c_int_p, c_char_p, c_size_t, *ERR])
_sig("obpy_optim_rolled_back", [c_void_p, c_long, ctypes.POINTER(Stats), *ERR])
_sig("obpy_optim_rollbacks", [c_void_p], c_int)
_sig("obpy_ckpt_warm_start", [c_void_p, c_char_p, c_long, c_int, c_char_p, *ERR])
_sig("obpy_reporter_create", [c_char_p, c_char_p, ctypes.POINTER(c_void_p), *ERR])
_sig("obpy_reporter_destroy", [c_void_p], None)
_sig("obpy_report", [c_void_p, c_char_p, c_char_p, ctypes.POINTER(c_double), c_int, c_char_p,
                     c_char_p, c_char_p, c_size_t, c_int_p, *ERR])
# obpy_report's flags (binding.h).
REPORT_SENT, REPORT_CANCEL, REPORT_FIRST_FAILURE = 1, 2, 4

PATH_LEN = 4096
REPORT_FIELDS = ("step", "loss", "lr", "samples_per_s", "bytes_sent", "bytes_step",
                 "freeze_ratio", "worker_error_ratio", "server_error_ratio",
                 "zero_momentum_fraction", "world_size", "num_params", "eval_loss",
                 "eval_accuracy", "eval_count", "ckpt_failed", "freeze_step", "bytes_warmup",
                 "bytes_compression", "wall_seconds", "first_step", "last_checkpoint",
                 "stopped", "from_world_size", "to_step")


def call(fn, *args, error=OnebitError, buf=None):
    """Calls fn(*args, err, cap); raises `error` with the engine's message on failure. An
    invalid argument raises ValueError, a missing file FileNotFoundError. buf: the err buffer,
    for a caller that reads what a call that succeeded wrote there."""
    buf = buf if buf is not None else ctypes.create_string_buffer(1024)
    rc = fn(*args, buf, len(buf))
    if rc != 0:
        msg = clean(buf.value.decode("utf-8", "replace"))
        if rc == ERR_INVALID_ARG:
            raise ValueError(msg)
        if rc == ERR_NOT_FOUND:
            raise FileNotFoundError(msg)
        raise error(msg, rc)
    return rc


def enc(s):
    return s.encode("utf-8") if isinstance(s, str) else s
