"""pyautodiff: reverse-mode automatic differentiation with a native C engine.

The whole engine (tensors, the graph, backward, the kernels) is C behind a
small stable ABI; this package is a thin layer of Python handles over it,
with PyTorch's names and semantics wherever they make sense.

    import pyautodiff as ad
    w = ad.Var.randn(3, 2, seed=0)          # a leaf to differentiate
    x = ad.tensor([[1.0, 2.0, 3.0]])        # a constant
    loss = (x @ w).relu().sum()
    grads = loss.backward()                 # a GradStore, not .grad fields
    grads[w]                                # d loss / d w, shape (3, 2)

Where to look:

- Tensor, Var, creation (tensor, zeros, randn, arange, from_numpy, ...) and
  dtypes (float32, float64, int64, int32, uint8, bool).
- GradStore, grad, no_grad, enable_grad, detect_anomaly: differentiation.
- cat, stack, split, gather, where, ...: joining and indexing.
- pyautodiff.nn: Module, the layers, nn.functional, nn.init, nn.utils.
- pyautodiff.optim: SGD, Adam, AdamW, RMSprop and optim.lr_scheduler.
- save, load (safetensors), from_dlpack, from_numpy: files and interop.
- pyautodiff.distributed: data-parallel training over MPI.
- Error and its subclasses: every failure, with the op, shapes and dtypes.

`python tools/apiref.py` prints a one-page index of all of it.
"""
import sys as _sys

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
from ._lib import lib as _lib, raise_status as _raise_status
from .memory import memory_stats, reset_peak_memory
from .function import Function, FunctionCtx
from .checkpoint import checkpoint, checkpointing, get_checkpointing
from .tensor import _link_upper

# The Tensor methods whose work lives in these modules reach them through this
# link (tensor.py cannot import them: they import it).  By module object, from
# sys.modules: the package's own `grad` and `tensor` attributes are functions.
_link_upper(*(_sys.modules[__name__ + "." + _m]
              for _m in ("indexing", "grad", "interop", "io", "memory")))
del _link_upper

__all__ = [
    # errors
    "Error", "ArgumentTypeError", "DTypeError", "GraphError", "InternalError",
    "InvalidArgumentError", "OutOfBoundsError", "OutOfMemoryError", "OutOfRangeError",
    "ShapeError",
    # dtypes (ad.bool is the alias of bool_, kept out of star-imports so as not to
    # shadow the builtin)
    "DType", "bool_", "float32", "float64", "int32", "int64", "uint8",
    # tensors and creation
    "Tensor", "Var", "tensor", "from_numpy", "from_dlpack", "zeros", "ones", "full",
    "zeros_like", "ones_like", "full_like", "arange", "eye", "rand", "randn", "manual_seed",
    # functions
    "matmul", "maximum", "minimum", "where",
    "cat", "stack", "split", "chunk", "flip", "gather", "index_add", "index_select",
    "scatter_add",
    # differentiation
    "GradStore", "grad", "no_grad", "enable_grad", "is_grad_enabled", "detect_anomaly",
    "is_anomaly_enabled",
    "Function", "FunctionCtx", "checkpoint", "checkpointing", "get_checkpointing",
    # memory
    "memory_stats", "reset_peak_memory",
    # files
    "save", "load",
    # subpackages
    "nn", "optim", "distributed",
    # runtime
    "set_num_threads", "get_num_threads", "live_tensors", "live_bytes",
]

bool = bool_  # noqa: A001 - ad.bool is the dtype, as torch.bool is

__version__ = "0.1.0"


def set_num_threads(n: int) -> None:
    """Sets the number of threads the native kernels (GEMM and large
    elementwise ops) use.  Raises InvalidArgumentError for n < 1."""
    st = _lib.ad_set_num_threads(int(n))
    if st:
        _raise_status(st)


def get_num_threads() -> int:
    """Threads the native kernels use (set_num_threads, else the default)."""
    return _lib.ad_get_num_threads()


def live_tensors() -> int:
    """Native tensors alive in this process (a leak check for tests)."""
    return _lib.ad_live_tensors()


def live_bytes() -> int:
    """Bytes of native tensor data alive in this process."""
    return _lib.ad_live_bytes()
