"""pyautodiff: reverse-mode automatic differentiation with a native C engine.

    import pyautodiff as ad
    w = ad.Var.randn(3, 2, seed=0)
    x = ad.tensor([[1.0, 2.0, 3.0]])
    loss = (x @ w).relu().sum()
    grads = loss.backward()
    grads[w]
"""
from .errors import (ArgumentTypeError, DTypeError, Error, GraphError, InternalError,
                     InvalidArgumentError, OutOfBoundsError, OutOfMemoryError, OutOfRangeError,
                     ShapeError)
from .dtypes import DType, bool_, float32, float64, int32, int64, uint8
from .tensor import (Tensor, Var, arange, eye, from_numpy, full, full_like, matmul, ones,
                     ones_like, rand, randn, tensor, zeros, zeros_like)
from .tensor import manual_seed, maximum, minimum, where
from .indexing import (cat, chunk, flip, gather, index_add, index_select, scatter_add,
                       split, stack)
from . import nn
from .grad import GradStore, enable_grad, grad, is_grad_enabled, no_grad
from .anomaly import detect_anomaly, is_anomaly_enabled
from . import optim
from . import distributed  # mpi4py is imported only by distributed.init()
from .interop import from_dlpack
from .io import load, save
from ._lib import lib as _lib
from .memory import memory_stats, reset_peak_memory
from .function import Function, FunctionCtx
from .checkpoint import checkpoint

bool = bool_  # noqa: A001 - ad.bool is the dtype, as in DESIGN.md

__version__ = "0.1.0"


def set_num_threads(n):
    """Threads used by the native kernels (GEMM and large elementwise ops)."""
    from ._lib import raise_status

    st = _lib.ad_set_num_threads(int(n))
    if st:
        raise_status(st)


def get_num_threads():
    return _lib.ad_get_num_threads()


def live_tensors():
    """Native tensors alive in this process (a leak check for tests)."""
    return _lib.ad_live_tensors()


def live_bytes():
    """Bytes of native tensor data alive in this process."""
    return _lib.ad_live_bytes()
