#!/usr/bin/env python3
"""Hostile-argument fuzzer of the public Python API, one argument at a time.

    python tests/fuzz_args.py                 # every case, in child processes
    python tests/fuzz_args.py --list          # the API table and the case count
    python tests/fuzz_args.py --cases 100:200 # a range, in this process (debugging)
    PYAUTODIFF_FUZZ_ARGS_SAMPLE=5 python tests/fuzz_args.py   # every 5th case only
    PYAUTODIFF_FUZZ_ARGS_COMBOS=400 python tests/fuzz_args.py # more random mixes

tests/fuzz_ops.py runs random programs; this one is systematic: for every entry
of API (a pyautodiff function, a Tensor or Var method or operator, an
nn.functional function, an nn module's constructor or forward, an optimizer, a
scheduler, an initialiser, GradStore, save/load, interop, a custom Function)
it first makes the call with valid arguments, then replaces ONE argument at a
time by each hostile value: wrong types (None, str, a float where an int goes,
numpy scalars, numpy arrays of object, complex and bool dtypes, ragged and
mixed lists), huge ints (2**31, 2**63, -2**63, 2**64), negative and
out-of-range numbers, NaN and inf, and, where a tensor goes, a tensor of each
dtype and layout (0-d, empty, zero-size dims, transposed, stepped, flipped,
broadcast with zero strides, a Var, a view of a Var, a tracked value).  Then
a few scenarios: in-place writes to Vars and their views inside a recorded
graph, custom Functions whose backward returns garbage.

Each case runs in a child process (in batches, restarted after a crash) under
a faulthandler watchdog, so a segfault, an abort or a hang is attributed to
the case.  An outcome is classified:
  crash    the child died (signal, abort, sanitizer report): the worst
  hang     the watchdog fired (PYAUTODIFF_FUZZ_ARGS_TIMEOUT s, default 20)
  bare     an exception that is not an ad.Error escaped from pyautodiff's own
           code without a `raise` of pyautodiff's: a builtin or numpy failing
           inside the library (IndexError, AttributeError, ZeroDivisionError
           ...), which names neither the op nor the argument
  wrong    a scenario's check of a value failed (AssertionError)
  internal ad.InternalError (a bug by definition)
  leak     the native live-tensor count did not come back after the case
Deliberate non-ad.Error exceptions (a `raise TypeError("op: ...")` in the
library) and Python's or numpy's own protocol errors (bool() of an array,
a bad format spec) are counted but not failures.  The run fails when any
case is crash, hang, wrong, bare, internal or leak; the last line is
`fuzz_args: N cases, C crash, H hang, W wrong, B bare, I internal, L leak`.
Under the sanitizer build (see .ci/run for LD_PRELOAD and ASAN_OPTIONS; add
max_allocation_size_mb=3000 so that huge sizes fail instead of paging) a
memory error is a crash of its case.
"""
import faulthandler
import gc
import json
import linecache
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import pyautodiff as ad  # noqa: E402
import pyautodiff.nn.functional as F  # noqa: E402
from pyautodiff import nn  # noqa: E402

PKG = os.path.join(ROOT, "pyautodiff") + os.sep
SAVE_PATH = "api.safetensors"  # in the child's scratch directory
TIMEOUT = float(os.environ.get("PYAUTODIFF_FUZZ_ARGS_TIMEOUT", "20"))
BATCH = 4000


# ---- hostile values ------------------------------------------------------------------------
class Weird:
    """An object that supports nothing."""

    def __repr__(self):
        return "<Weird>"


class BadIndex:
    """__index__ raises: a user type that claims to be an int and fails."""

    def __index__(self):
        raise RuntimeError("BadIndex.__index__")

    def __repr__(self):
        return "<BadIndex>"


class BadLen:
    """A sequence whose __len__ lies."""

    def __len__(self):
        return 3

    def __getitem__(self, i):
        raise IndexError(i) if i >= 1 else None
        return 1

    def __iter__(self):
        return iter((1,))

    def __repr__(self):
        return "<BadLen>"


def hostile_values():
    """(label, factory): each call of factory makes a fresh value (iterators,
    Vars and arrays are not shared between cases)."""
    H = [
        ("None", lambda: None), ("str", lambda: "abc"), ("emptystr", lambda: ""),
        ("bytes", lambda: b"\x01"),
        ("float1.5", lambda: 1.5), ("float2.0", lambda: 2.0), ("nan", lambda: float("nan")),
        ("inf", lambda: float("inf")), ("-inf", lambda: -float("inf")),
        ("-0.0", lambda: -0.0), ("1e308", lambda: 1e308),
        ("complex", lambda: 1 + 2j), ("True", lambda: True), ("False", lambda: False),
        ("0", lambda: 0), ("-1", lambda: -1), ("-2", lambda: -2), ("-100", lambda: -100),
        ("2**31", lambda: 2 ** 31), ("-2**31-1", lambda: -2 ** 31 - 1),
        ("2**62", lambda: 2 ** 62), ("2**63", lambda: 2 ** 63), ("-2**63", lambda: -2 ** 63),
        ("2**63-1", lambda: 2 ** 63 - 1), ("2**64", lambda: 2 ** 64),
        ("-2**64", lambda: -2 ** 64), ("10**30", lambda: 10 ** 30),
        ("np.int64(2)", lambda: np.int64(2)), ("np.int8(-1)", lambda: np.int8(-1)),
        ("np.uint64(2**63)", lambda: np.uint64(2 ** 63)),
        ("np.float32(1.5)", lambda: np.float32(1.5)),
        ("np.float64(nan)", lambda: np.float64("nan")),
        ("np.bool_", lambda: np.bool_(True)), ("np.complex64", lambda: np.complex64(1j)),
        ("np.0d", lambda: np.array(2)), ("np.0d.f", lambda: np.array(2.5)),
        ("np.f32", lambda: np.ones((2, 3), np.float32)),
        ("np.i64", lambda: np.arange(3)), ("np.bool", lambda: np.array([True, False])),
        ("np.obj", lambda: np.array([1, "a", None], dtype=object)),
        ("np.obj2", lambda: np.array([[1.0, 2.0], [3.0, 4.0]], dtype=object)),
        ("np.complex", lambda: np.ones((2, 3), np.complex64)),
        ("np.f16", lambda: np.ones((2, 3), np.float16)),
        ("np.u16", lambda: np.ones(3, np.uint16)), ("np.i8", lambda: np.ones(3, np.int8)),
        ("np.str", lambda: np.array(["a", "b"])),
        ("np.dt64", lambda: np.array(["2020-01-01"], dtype="datetime64[D]")),
        ("np.struct", lambda: np.zeros(2, dtype=[("a", "f4"), ("b", "i4")])),
        ("np.empty", lambda: np.zeros((0, 3), np.float32)),
        ("np.big", lambda: np.zeros((1,) * 33, np.float32) if np.__version__ >= "2" else None),
        ("np.noncontig", lambda: np.arange(12.0).reshape(3, 4)[:, ::2]),
        ("np.negstride", lambda: np.arange(6.0)[::-1]),
        ("np.zerostride", lambda: np.broadcast_to(np.arange(3.0), (4, 3))),
        ("np.unaligned", lambda: np.frombuffer(b"\0" * 17, np.float64, 2, 1)),
        ("np.bigendian", lambda: np.arange(4, dtype=">f4")),
        ("[]", lambda: []), ("()", lambda: ()), ("[[]]", lambda: [[]]),
        ("[1,2]", lambda: [1, 2]), ("(2,3)", lambda: (2, 3)), ("[-1]", lambda: [-1]),
        ("[1.5]", lambda: [1.5]), ("[nan]", lambda: [float("nan")]),
        ("[None]", lambda: [None]), ("ragged", lambda: [[1, 2], [3]]),
        ("ragged3", lambda: [[[1]], [2]]), ("mixed", lambda: [1, "a"]),
        ("mixedT", lambda: [1, ad.ones(2)]), ("[2**63]", lambda: [2 ** 63]),
        ("[2**62,2**62]", lambda: [2 ** 62, 2 ** 62]), ("(0,-1)", lambda: (0, -1)),
        ("[True,False]", lambda: [True, False]), ("[1j]", lambda: [1j]),
        ("deep", lambda: [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]),
        ("deep40", lambda: _nest(40)),
        ("range", lambda: range(3)), ("gen", lambda: (i for i in range(2))),
        ("dict", lambda: {"a": 1}), ("set", lambda: {1, 2}), ("object", Weird),
        ("BadIndex", BadIndex), ("BadLen", BadLen), ("slice", lambda: slice(None)),
        ("Ellipsis", lambda: Ellipsis), ("type", lambda: float), ("lambda", lambda: (lambda: 1)),
        ("np.dtype", lambda: np.dtype("complex128")), ("dtype", lambda: ad.int64),
    ]
    return H


def _nest(n):
    v = 1.0
    for _ in range(n):
        v = [v]
    return v


def tensor_variants():
    """(label, factory) of tensors of every dtype and layout."""
    def f32(*s):
        return ad.arange(int(np.prod(s)) if s else 1, dtype=ad.float32).reshape(s) * 0.25 - 1

    V = [
        ("f32", lambda: f32(2, 3)), ("f64", lambda: f32(2, 3).double()),
        ("i64", lambda: ad.arange(6).reshape(2, 3)), ("i32", lambda: ad.arange(6, dtype=ad.int32)
                                                      .reshape(2, 3)),
        ("u8", lambda: ad.arange(6, dtype=ad.uint8).reshape(2, 3)),
        ("bool", lambda: (ad.arange(6).reshape(2, 3) > 2)),
        ("0d", lambda: ad.tensor(1.5)), ("0d.i64", lambda: ad.tensor(3)),
        ("empty", lambda: ad.zeros((0, 3))), ("empty0", lambda: ad.zeros((0,))),
        ("empty.mid", lambda: ad.zeros((2, 0, 3))), ("1d", lambda: f32(6)),
        ("4d", lambda: f32(1, 2, 3, 4)), ("3d", lambda: f32(2, 3, 4)),
        ("T", lambda: f32(3, 2).T), ("step", lambda: f32(4, 3)[::2]),
        ("flip", lambda: f32(2, 3).flip(1)), ("flip0", lambda: f32(2, 3).flip(0)),
        ("expand", lambda: f32(1, 3).expand(2, 3)), ("expand0", lambda: ad.tensor(2.0)
                                                     .broadcast_to((2, 3))),
        ("expand.i64", lambda: ad.tensor([1, 0, 2]).broadcast_to((2, 3))),
        ("Var", lambda: ad.Var(f32(2, 3))), ("Var64", lambda: ad.Var(f32(2, 3).double())),
        ("Var.view", lambda: ad.Var(f32(2, 3)).T), ("Var.slice", lambda: ad.Var(f32(4, 3))[1:3]),
        ("tracked", lambda: ad.Var(f32(2, 3)) * 2), ("Var0d", lambda: ad.Var(ad.tensor(2.0))),
        ("Var.empty", lambda: ad.Var.zeros(0, 3)),
        ("nan", lambda: ad.full((2, 3), float("nan"))),
        ("inf", lambda: ad.full((2, 3), float("inf"))),
        ("big.i64", lambda: ad.tensor([[2 ** 62, -2 ** 63, 2 ** 63 - 1], [-1, 0, 2 ** 31]])),
        ("neg.i64", lambda: ad.full((2, 3), -7, ad.int64)),
        ("dlpack", lambda: ad.from_dlpack(np.arange(6.0, dtype=np.float32).reshape(2, 3))),
        ("numpy.ro", lambda: ad.from_numpy(np.arange(6.0, dtype=np.float32).reshape(2, 3))),
    ]
    return V


# ---- the API table ---------------------------------------------------------------------------
def t23():
    return ad.arange(6, dtype=ad.float32).reshape(2, 3) * 0.5 - 1


def idx(*v):
    return ad.tensor(list(v))


def _var(*s):
    return ad.Var.randn(*s, seed=1)


def opt_of(cls, **kw):
    def make():
        return cls([_var(2, 3)], **kw)
    return make


def _gs():
    v = _var(2, 3)
    g = (v * v).sum().backward()
    return g, v


def _fn_times(k, backward=None):
    """A Function whose forward is x * k and whose backward is `backward`
    (ctx, gy) -> gradient, by default gy * k."""
    class Times(ad.Function):
        @staticmethod
        def forward(ctx, x):
            return x * k

    Times.backward = staticmethod(backward or (lambda ctx, gy: gy * k))
    return Times


def api():
    """[(name, fn_factory, args_factory, kwargs)]: fn_factory() gives the
    callable (a bound method of a fresh object), args_factory() the valid
    positional arguments, kwargs the valid keyword arguments (their values are
    replaced too)."""
    E = []

    def add(name, fn, args=lambda: (), **kw):
        E.append((name, fn, args, kw))

    def tm(name, *args, self=t23, **kw):
        """Tensor method: self is replaced too (by tensor variants)."""
        add("Tensor." + name, lambda: getattr(ad.Tensor, name), lambda: (self(),) + tuple(
            a() if callable(a) else a for a in args), **kw)

    # --- creation
    add("ad.zeros", lambda: ad.zeros, lambda: ((2, 3),), dtype=ad.float32)
    add("ad.zeros*", lambda: ad.zeros, lambda: (2, 3))
    add("ad.ones", lambda: ad.ones, lambda: ((2, 3),), dtype=ad.int32)
    add("ad.rand", lambda: ad.rand, lambda: ((2, 3),), seed=1, dtype=ad.float64)
    add("ad.randn", lambda: ad.randn, lambda: ((2, 3),), seed=1, dtype=ad.float32)
    add("ad.full", lambda: ad.full, lambda: ((2, 3), 1.5, ad.float32))
    add("ad.full_like", lambda: ad.full_like, lambda: (t23(), 2, ad.int64))
    add("ad.zeros_like", lambda: ad.zeros_like, lambda: (t23(), ad.float64))
    add("ad.ones_like", lambda: ad.ones_like, lambda: (t23(),))
    add("ad.arange", lambda: ad.arange, lambda: (0, 5, 1, ad.float32))
    add("ad.eye", lambda: ad.eye, lambda: (3, 2, ad.float64))
    add("ad.tensor", lambda: ad.tensor, lambda: ([[1.0, 2.0]], ad.float32))
    add("ad.Tensor", lambda: ad.Tensor, lambda: ([[1, 2]], ad.int64))
    add("ad.Var", lambda: ad.Var, lambda: ([[1.0, 2.0]], ad.float32))
    add("ad.from_numpy", lambda: ad.from_numpy, lambda: (np.ones((2, 3), np.float32), None),
        copy=None)
    add("ad.from_dlpack", lambda: ad.from_dlpack, lambda: (np.ones((2, 3), np.float32),),
        copy=None)
    add("Var.zeros", lambda: ad.Var.zeros, lambda: ((2, 3),), dtype=ad.float32)
    add("Var.ones", lambda: ad.Var.ones, lambda: (2, 3), dtype=ad.float64)
    add("Var.rand", lambda: ad.Var.rand, lambda: ((2, 3),), seed=2, dtype=ad.float32)
    add("Var.randn", lambda: ad.Var.randn, lambda: ((2, 3),), seed=2, dtype=ad.float32, std=0.5)
    add("Var.from_tensor", lambda: ad.Var.from_tensor, lambda: (t23(),))
    add("ad.manual_seed", lambda: ad.manual_seed, lambda: (3,))

    # --- module-level ops
    add("ad.cat", lambda: ad.cat, lambda: ([t23(), t23()], 1))
    add("ad.stack", lambda: ad.stack, lambda: ([t23(), t23()], -1))
    add("ad.split", lambda: ad.split, lambda: (t23(), [1, 2], 1))
    add("ad.chunk", lambda: ad.chunk, lambda: (t23(), 2, 1))
    add("ad.flip", lambda: ad.flip, lambda: (t23(), (0, 1)))
    add("ad.gather", lambda: ad.gather, lambda: (t23(), 1, ad.tensor([[0, 2], [1, 1]])))
    add("ad.index_select", lambda: ad.index_select, lambda: (t23(), 1, idx(2, 0)))
    add("ad.index_add", lambda: ad.index_add, lambda: (t23(), 0, idx(1, 1), ad.ones((2, 3))))
    add("ad.scatter_add", lambda: ad.scatter_add,
        lambda: (t23(), 1, ad.tensor([[0, 2], [1, 1]]), ad.ones((2, 2))))
    add("ad.matmul", lambda: ad.matmul, lambda: (t23(), t23().T))
    add("ad.maximum", lambda: ad.maximum, lambda: (t23(), 0.5))
    add("ad.minimum", lambda: ad.minimum, lambda: (t23(), t23()))
    add("ad.where", lambda: ad.where, lambda: (t23() > 0, t23(), 0.0))
    add("ad.grad", lambda: ad.grad, lambda: (lambda v: ((v * v).sum(), [v]))(_var(2, 3)),
        grad_outputs=None, create_graph=False, allow_unused=False)
    add("ad.checkpoint", lambda: ad.checkpoint, lambda: (lambda x: x * 2, _var(2, 3)))
    add("ad.checkpointing", lambda: (lambda *a: ad.checkpointing(*a).__enter__()),
        lambda: ("balanced",))

    # --- Tensor methods (self replaced by every tensor variant)
    for n in ("abs", "ceil", "clone", "contiguous", "cos", "detach", "dim", "double", "erf",
              "exp", "expm1", "float", "floor", "gelu", "gelu_erf", "log", "log1p", "neg",
              "numel", "numpy", "recip", "relu", "round", "sigmoid", "sign", "silu", "sin",
              "softplus", "sorted_nodes", "sqr", "sqrt", "sum_all", "t", "tanh", "to_dot",
              "tolist", "item", "__neg__", "__abs__", "__len__", "__bool__", "__float__",
              "__int__", "__index__", "__repr__", "__hash__", "__reduce__", "__dlpack_device__"):
        tm(n)
    for n in ("add", "sub", "mul", "div", "pow", "eq", "ne", "lt", "le", "gt", "ge", "maximum",
              "minimum", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__pow__", "__rpow__", "__eq__", "__lt__",
              "__floordiv__", "__mod__", "__and__", "__or__", "__xor__"):
        if hasattr(ad.Tensor, n):
            tm(n, t23)
    tm("matmul", lambda: t23().T)
    tm("__matmul__", lambda: t23().T)
    tm("__rmatmul__", lambda: t23().T)
    for n in ("sum", "mean", "max", "min", "prod", "argmax", "argmin"):
        tm(n, 1, keepdim=True)
    tm("logsumexp", -1, keepdim=False)
    tm("var", 1, correction=1, keepdim=False)
    tm("std", (0, 1), correction=0, keepdim=True)
    for n in ("softmax", "log_softmax", "cumsum", "unsqueeze"):
        tm(n, 1)
    tm("size", 1)
    tm("reshape", (3, 2))
    tm("reshape", 3, 2)
    tm("view", (6,))
    tm("permute", (1, 0))
    tm("permute", 1, 0)
    tm("transpose", 0, 1)
    tm("narrow", 1, 1, 2)
    tm("broadcast_to", (4, 2, 3))
    tm("expand", 4, 2, 3)
    tm("expand", (2, -1))
    tm("repeat", 2, 1)
    tm("squeeze", 0, self=lambda: ad.ones((1, 3)))
    tm("flatten", 0, -1)
    tm("flip", (0,))
    tm("to_dtype", ad.float64)
    tm("astype", "int32")
    tm("clamp", -0.5, 0.5)
    tm("elu", 1.0)
    tm("split", 1, 1)
    tm("chunk", 2, 0)
    tm("index_select", 0, lambda: idx(1, 0, 1))
    tm("gather", 1, lambda: ad.tensor([[0, 2], [1, 1]]))
    tm("index_add", 1, lambda: idx(0, 0), lambda: ad.ones((2, 2)))
    tm("scatter_add", 0, lambda: ad.tensor([[0, 1, 1]]), lambda: ad.ones((1, 3)))
    tm("__getitem__", (slice(None), 1))
    tm("__getitem__", lambda: idx(1, 0))
    tm("__getitem__", lambda: [True, False])
    tm("__array__", np.float64, copy=None)
    tm("__dlpack__", stream=None, max_version=(1, 0), dl_device=None, copy=None)
    tm("__format__", ".3f", self=lambda: ad.tensor(1.5))
    tm("__deepcopy__", {})
    tm("__setitem__", 0, 1.0)  # a Tensor: always TypeError naming Var.set
    tm("backward", self=lambda: (_var(2, 3) * 2).sum(), grad=None, retain=(),
       create_graph=False)
    tm("backward", self=lambda: _var(2, 3) * 2, grad=lambda: ad.ones((2, 3)))

    # --- Var methods (self is a Var)
    def vm(name, *args, self=lambda: _var(2, 3), **kw):
        add("Var." + name, lambda: getattr(ad.Var, name), lambda: (self(),) + tuple(
            a() if callable(a) else a for a in args), **kw)

    vm("set", lambda: ad.ones((2, 3)))
    vm("set", 2.0)
    vm("__setitem__", 0, lambda: ad.ones(3))
    vm("__setitem__", (slice(None), 1), 2.0)
    vm("__setitem__", lambda: idx(1, 0), 2.0)
    vm("__setitem__", lambda: t23() > 0, 0.0)
    for n in ("__iadd__", "__isub__", "__imul__", "__itruediv__"):
        vm(n, lambda: ad.ones(3))
    vm("__ipow__", 2)
    vm("__imatmul__", lambda: ad.ones((3, 3)))
    vm("as_tensor")
    vm("as_detached_tensor")

    # --- nn.functional
    x4 = lambda: ad.randn(2, 3, 5, 5, seed=3)  # noqa: E731
    x3 = lambda: ad.randn(2, 3, 7, seed=3)  # noqa: E731
    lg = lambda: ad.randn(4, 5, seed=4)  # noqa: E731
    add("F.conv2d", lambda: F.conv2d, lambda: (x4(), ad.randn(4, 3, 3, 3, seed=5),
                                               ad.zeros(4), 1, 1, 1, 1))
    add("F.conv2d.g", lambda: F.conv2d,
        lambda: (x4().narrow(1, 0, 2), ad.randn(4, 1, 2, 2, seed=5)),
        stride=(2, 1), padding=(0, 1), dilation=(1, 2), groups=2)
    add("F.conv1d", lambda: F.conv1d, lambda: (x3(), ad.randn(4, 3, 3, seed=5), None, 2, 1, 1, 1))
    add("F.conv_transpose2d", lambda: F.conv_transpose2d,
        lambda: (x4(), ad.randn(3, 2, 3, 3, seed=5), ad.zeros(2), 2, 1, 1, 1, 1))
    add("F.conv_transpose1d", lambda: F.conv_transpose1d,
        lambda: (x3(), ad.randn(3, 2, 3, seed=5), None, 2, 0, 1, 1, 1))
    add("F.max_pool2d", lambda: F.max_pool2d, lambda: (x4(), 2, 2, 1, 1, True))
    add("F.avg_pool2d", lambda: F.avg_pool2d, lambda: (x4(), 3, 2, 1, True, False, 2))
    add("F.max_pool1d", lambda: F.max_pool1d, lambda: (x3(), 3, 2, 1, 1, False))
    add("F.avg_pool1d", lambda: F.avg_pool1d, lambda: (x3(), 2, 1, 0, False, True))
    add("F.adaptive_avg_pool2d", lambda: F.adaptive_avg_pool2d, lambda: (x4(), (2, 3)))
    add("F.batch_norm", lambda: F.batch_norm,
        lambda: (x4(), ad.Var.zeros(3), ad.Var.ones(3), ad.ones(3), ad.zeros(3), True, 0.1,
                 1e-5))
    add("F.batch_norm.eval", lambda: F.batch_norm,
        lambda: (x4(), ad.zeros(3), ad.ones(3)), training=False)
    add("F.layer_norm", lambda: F.layer_norm, lambda: (x4(), (5, 5), ad.ones((5, 5)),
                                                       ad.zeros((5, 5)), 1e-5))
    add("F.linear", lambda: F.linear, lambda: (lg(), ad.randn(3, 5, seed=1), ad.zeros(3)),
        activation=None)
    add("F.linear.act", lambda: F.linear, lambda: (lg(), ad.randn(3, 5, seed=1)),
        activation="relu")
    add("F.embedding", lambda: F.embedding, lambda: (idx(0, 3, 1), ad.randn(4, 2, seed=1), 0,
                                                     None, 2.0, False, False))
    add("F.one_hot", lambda: F.one_hot, lambda: (idx(0, 3, 1), 5))
    add("F.pad", lambda: F.pad, lambda: (x4(), (1, 2, 0, 1), "constant", 0.5))
    add("F.pad.reflect", lambda: F.pad, lambda: (x4(), (1, 2), "reflect"))
    add("F.pad.circular", lambda: F.pad, lambda: (x4(), (1, 2, 2, 1), "circular"))
    add("F.pad.replicate", lambda: F.pad, lambda: (x3(), (3, 2), "replicate"))
    add("F.dropout", lambda: F.dropout, lambda: (lg(), 0.3, True, False), seed=1)
    add("F.gelu", lambda: F.gelu, lambda: (lg(), "tanh"))
    add("F.softmax", lambda: F.softmax, lambda: (lg(), 1), dtype=None)
    add("F.log_softmax", lambda: F.log_softmax, lambda: (lg(), -1), dtype=None)
    for n in ("relu", "silu"):
        add("F." + n, (lambda n: lambda: getattr(F, n))(n), lambda: (lg(), False))
    for n in ("sigmoid", "tanh"):
        add("F." + n, (lambda n: lambda: getattr(F, n))(n), lambda: (lg(),))
    add("F.cross_entropy", lambda: F.cross_entropy,
        lambda: (lg(), idx(0, 4, 2, 1), ad.ones(5)), ignore_index=2, reduction="mean",
        label_smoothing=0.1)
    add("F.cross_entropy.prob", lambda: F.cross_entropy,
        lambda: (lg(), lg().softmax(1)), reduction="sum")
    add("F.nll_loss", lambda: F.nll_loss, lambda: (lg().log_softmax(1), idx(0, 4, 2, 1),
                                                   ad.ones(5)), ignore_index=-100,
        reduction="none")
    add("F.mse_loss", lambda: F.mse_loss, lambda: (lg(), lg() * 2), reduction="sum")
    add("F.smooth_l1_loss", lambda: F.smooth_l1_loss, lambda: (lg(), lg() * 2),
        reduction="mean", beta=0.5)
    add("F.bce_logits", lambda: F.binary_cross_entropy_with_logits,
        lambda: (lg(), lg().sigmoid(), ad.ones(5)), reduction="mean", pos_weight=None)
    add("F.sdpa", lambda: F.scaled_dot_product_attention,
        lambda: (ad.randn(2, 3, 4, seed=1), ad.randn(2, 5, 4, seed=2), ad.randn(2, 5, 6, seed=3),
                 None, 0.0, False, None))
    add("F.sdpa.mask", lambda: F.scaled_dot_product_attention,
        lambda: (ad.randn(2, 3, 4, seed=1), ad.randn(2, 5, 4, seed=2), ad.randn(2, 5, 6, seed=3),
                 ad.ones((3, 5)) > 0), dropout_p=0.1, is_causal=False, scale=0.5)

    # --- nn modules: constructor, then forward
    def mod(name, cls, cargs, fwd_args, **ckw):
        add(f"nn.{name}()", lambda: cls, lambda: cargs, **ckw)
        add(f"nn.{name}.forward", lambda: (lambda *a, **k: cls(*cargs, **ckw)(*a, **k)),
            fwd_args)

    mod("Linear", nn.Linear, (5, 3), lambda: (lg(),), bias=True, dtype=None)
    mod("Conv1d", nn.Conv1d, (3, 4, 3), lambda: (x3(),), stride=1, padding="same", dilation=1,
        groups=1, padding_mode="zeros")
    mod("Conv2d", nn.Conv2d, (3, 6, (3, 2)), lambda: (x4(),), stride=2, padding=1,
        groups=3, padding_mode="zeros")
    mod("ConvTranspose2d", nn.ConvTranspose2d, (3, 2, 3), lambda: (x4(),), stride=2,
        output_padding=1)
    mod("Embedding", nn.Embedding, (6, 3), lambda: (idx(0, 5, 1),), padding_idx=1)
    mod("LayerNorm", nn.LayerNorm, ((5,),), lambda: (lg(),), eps=1e-5, elementwise_affine=True)
    mod("BatchNorm1d", nn.BatchNorm1d, (5,), lambda: (lg(),), eps=1e-5, momentum=0.1)
    mod("BatchNorm2d", nn.BatchNorm2d, (3,), lambda: (x4(),), momentum=None,
        track_running_stats=True)
    mod("Dropout", nn.Dropout, (0.5,), lambda: (lg(),))
    mod("MaxPool2d", nn.MaxPool2d, (2,), lambda: (x4(),), stride=1, padding=1, ceil_mode=True)
    mod("AvgPool2d", nn.AvgPool2d, (3,), lambda: (x4(),), stride=2, padding=1)
    mod("AdaptiveAvgPool2d", nn.AdaptiveAvgPool2d, ((2, None),), lambda: (x4(),))
    mod("Flatten", nn.Flatten, (1, -1), lambda: (x4(),))
    mod("Softmax", nn.Softmax, (1,), lambda: (lg(),))
    mod("LogSoftmax", nn.LogSoftmax, (1,), lambda: (lg(),))
    mod("GELU", nn.GELU, ("tanh",), lambda: (lg(),))
    mod("MultiheadAttention", nn.MultiheadAttention, (4, 2),
        lambda: (ad.randn(3, 2, 4, seed=1), ad.randn(5, 2, 4, seed=2), ad.randn(5, 2, 4, seed=3)),
        dropout=0.0, batch_first=False, kdim=None, vdim=None)
    mod("LSTM", nn.LSTM, (3, 4), lambda: (ad.randn(5, 2, 3, seed=1),), num_layers=2,
        batch_first=False, bidirectional=True, proj_size=0)
    mod("Sequential", nn.Sequential, (nn.Linear(5, 3), nn.ReLU()), lambda: (lg(),))
    add("nn.ModuleList()", lambda: nn.ModuleList, lambda: ([nn.ReLU()],))
    add("nn.ModuleDict()", lambda: nn.ModuleDict, lambda: ({"a": nn.ReLU()},))
    add("Module.load_state_dict", lambda: (lambda sd, strict=True: nn.Linear(2, 3)
                                           .load_state_dict(sd, strict)),
        lambda: ({"weight": ad.ones((3, 2)), "bias": ad.zeros(3)},))
    add("Module.state_dict[]", lambda: (lambda k, v: nn.Linear(2, 3).load_state_dict(
        {"weight": ad.ones((3, 2)), "bias": ad.zeros(3), k: v}, strict=False)),
        lambda: ("bias", ad.zeros(3)))
    add("Module.to_dtype", lambda: (lambda d: nn.Linear(2, 3).to_dtype(d)), lambda: (ad.float64,))
    add("Module.__setattr__", lambda: (lambda n, v: setattr(nn.Linear(2, 3), n, v)),
        lambda: ("weight", ad.Var.zeros(3, 2)))

    # --- optimizers, schedulers, init, utils
    add("optim.SGD", lambda: ad.optim.SGD, lambda: ([_var(2, 3)], 0.1, 0.9, 0.1, 0.01, True),
        maximize=False)
    add("optim.Adam", lambda: ad.optim.Adam, lambda: ([_var(2, 3)], 0.1, (0.9, 0.99), 1e-8, 0.1,
                                                      True), maximize=False)
    add("optim.AdamW", lambda: ad.optim.AdamW, lambda: ([_var(2, 3)], 0.1, (0.9, 0.99), 1e-8,
                                                        0.1, False))
    add("optim.RMSprop", lambda: ad.optim.RMSprop, lambda: ([_var(2, 3)], 0.1, 0.9, 1e-8, 0.1,
                                                            0.5, True))

    def step_with(cls, **kw):
        def fn(v, g):
            o = cls([v], **kw)
            s = ad.GradStore()
            s.insert(v, g)
            o.step(s)
            o.step(s)
            return o.state_dict()
        return fn

    for cls, kw in ((ad.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
                    (ad.optim.Adam, dict(lr=0.1, amsgrad=True)),
                    (ad.optim.AdamW, dict(lr=0.1)),
                    (ad.optim.RMSprop, dict(lr=0.1, centered=True, momentum=0.5))):
        add(f"optim.{cls.__name__}.step", (lambda c, k: lambda: step_with(c, **k))(cls, kw),
            lambda: (_var(2, 3), ad.ones((2, 3))))
    add("optim.step(store)", lambda: (lambda s: ad.optim.SGD([_var(2, 3)], lr=0.1).step(s)),
        lambda: (ad.GradStore(),))
    add("optim.param_groups.lr", lambda: (lambda lr: (lambda o: (o.param_groups[0].__setitem__(
        "lr", lr), o.step(_gs()[0])))(ad.optim.Adam([_var(2, 3)]))), lambda: (0.1,))
    add("optim.load_state_dict", lambda: (lambda sd: ad.optim.Adam([_var(2, 3)])
                                          .load_state_dict(sd)),
        lambda: (ad.optim.Adam([_var(2, 3)]).state_dict(),))
    add("optim.add_param_group", lambda: (lambda g: ad.optim.SGD([_var(2, 3)], lr=0.1)
                                          .add_param_group(g)),
        lambda: ({"params": [_var(3)], "lr": 0.2},))
    add("optim.backward_step", lambda: (lambda loss: ad.optim.SGD([_var(2, 3)], lr=0.1)
                                        .backward_step(loss)),
        lambda: ((_var(2, 3) * 2).sum(),))
    S = ad.optim.lr_scheduler

    def sch(cls, *args, **kw):
        add(f"sched.{cls.__name__}", (lambda c: lambda: (lambda *a, **k: [
            s.step() for s in [c(ad.optim.SGD([_var(2)], lr=0.1), *a, **k)] for _ in range(4)]))(
            cls), lambda: args, **kw)

    sch(S.StepLR, 2, 0.5)
    sch(S.MultiStepLR, [1, 3], 0.5)
    sch(S.ExponentialLR, 0.9)
    sch(S.CosineAnnealingLR, 3, 0.001)
    sch(S.LambdaLR, lambda e: 0.5 ** e)
    sch(S.LinearLR, 0.5, 1.0, 3)
    sch(S.OneCycleLR, 0.5, 10, anneal_strategy="linear", pct_start=0.3, div_factor=25.0)
    I = nn.init  # noqa: E741
    for n, args in (("uniform_", (-1, 1)), ("normal_", (0, 2)), ("constant_", (3,)),
                    ("ones_", ()), ("zeros_", ()), ("xavier_uniform_", (1.0,)),
                    ("xavier_normal_", (1.0,)), ("kaiming_uniform_", (0, "fan_in", "relu")),
                    ("kaiming_normal_", (0, "fan_out", "leaky_relu")),
                    ("trunc_normal_", (0, 1, -2, 2))):
        add("init." + n, (lambda n: lambda: getattr(I, n))(n),
            (lambda a: lambda: (_var(3, 4),) + a)(args))
    add("init.calculate_gain", lambda: I.calculate_gain, lambda: ("leaky_relu", 0.2))
    add("utils.clip_grad_norm_", lambda: nn.utils.clip_grad_norm_,
        lambda: (_gs()[0], 1.0, 2.0, False))
    add("utils.clip_grad_value_", lambda: nn.utils.clip_grad_value_, lambda: (_gs()[0], 0.1))

    # --- GradStore
    add("GradStore.__getitem__", lambda: (lambda k: _gs()[0][k]), lambda: (_var(2),))
    add("GradStore.get", lambda: (lambda k, d=None: _gs()[0].get(k, d)), lambda: (_var(2), None))
    add("GradStore.__contains__", lambda: (lambda k: k in _gs()[0]), lambda: (_var(2),))
    add("GradStore.insert", lambda: (lambda k, g: ad.GradStore().insert(k, g)),
        lambda: (_var(2, 3), ad.ones((2, 3))))
    add("GradStore.insert+get", lambda: (lambda k, g: (lambda s: (s.insert(k, g), s[k]))(
        _gs()[0])), lambda: (_var(2, 3), ad.ones((2, 3))))
    add("GradStore.remove", lambda: (lambda k: _gs()[0].remove(k)), lambda: (_var(2),))
    add("GradStore.extend", lambda: (lambda o: _gs()[0].extend(o)), lambda: (_gs()[0],))

    # --- files
    path = SAVE_PATH
    add("ad.save", lambda: ad.save, lambda: ({"a": t23(), "b": idx(1, 2)}, path, {"k": "v"}))
    add("ad.load", lambda: (lambda p: ad.load(p)), lambda: (path,))

    # --- custom Function
    add("Function.apply", lambda: (lambda *a: _fn_times(2).apply(*a)), lambda: (_var(2, 3),))

    def custom_bw(ret):
        """A Function whose backward returns `ret` (or ret(gy))."""
        class Bad(ad.Function):
            @staticmethod
            def forward(ctx, x, y):
                return x * y

            @staticmethod
            def backward(ctx, gy):
                return ret(gy) if callable(ret) and not isinstance(ret, (type, ad.Tensor)) \
                    else ret
        return Bad

    add("Function.backward_returns", lambda: (lambda r: custom_bw(r).apply(
        _var(2, 3), ad.ones((2, 3))).sum().backward()), lambda: (lambda gy: (gy, None),))

    def custom_fw(ret):
        class BadF(ad.Function):
            @staticmethod
            def forward(ctx, x):
                return ret

            @staticmethod
            def backward(ctx, gy):
                return gy
        return BadF

    add("Function.forward_returns", lambda: (lambda r: custom_fw(r).apply(_var(2, 3))),
        lambda: (ad.ones((2, 3)),))

    def save_fn(*saved):
        class Sv(ad.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(*saved)
                return x * 1

            @staticmethod
            def backward(ctx, gy):
                ctx.saved_tensors
                return gy
        return Sv.apply(_var(2)).sum().backward()

    add("Function.save_for_backward", lambda: save_fn, lambda: (ad.ones(2),))
    return E


# ---- scenarios: in-place writes into recorded graphs ----------------------------------------
def scenarios():
    """Named callables, each a short program that must end in a value or an
    ad.Error (never a crash, never a wrong silent result: each checks what it
    can)."""
    S = []

    def sc(f):
        S.append((f.__name__, f))
        return f

    @sc
    def set_var_after_view_recorded():
        v = ad.Var(ad.arange(6.0).reshape(2, 3))
        y = (v.T[1:] * v.T[1:]).sum()
        v.set(ad.zeros((2, 3)))
        y.backward()

    @sc
    def setitem_var_after_slice_recorded():
        v = ad.Var(ad.arange(6.0))
        y = (v[::2] ** 2).sum()
        v[1] = 5.0
        y.backward()

    @sc
    def iadd_var_used_by_exp():
        v = ad.Var(ad.arange(3.0))
        y = v.exp().sum()
        v += 1
        y.backward()

    @sc
    def setitem_flip_view_of_var():
        v = ad.Var(ad.arange(4.0))
        f = v.flip(0)
        y = (f * f).sum()
        v[0:2] = ad.tensor([9.0, 9.0])
        y.backward()

    @sc
    def set_from_own_view():
        v = ad.Var(ad.arange(6.0).reshape(2, 3))
        v.set(v.T.T)

    @sc
    def set_from_own_flip():
        v = ad.Var(ad.arange(4.0))
        v.set(v.flip(0))

    @sc
    def set_from_dlpack_alias():
        v = ad.Var(ad.arange(4.0))
        v.set(ad.from_dlpack(v).flip(0))
        assert v.tolist() in ([3.0, 2.0, 1.0, 0.0],), v.tolist()

    @sc
    def setitem_from_own_alias():
        v = ad.Var(ad.arange(4.0))
        v[1:] = v[:3]
        assert v.tolist() == [0.0, 0.0, 1.0, 2.0], v.tolist()

    @sc
    def setitem_from_dlpack_alias_overlap():
        v = ad.Var(ad.arange(4.0))
        v[1:] = ad.from_dlpack(v)[:3]
        assert v.tolist() == [0.0, 0.0, 1.0, 2.0], v.tolist()

    @sc
    def isub_self():
        v = ad.Var(ad.arange(4.0))
        v -= v
        assert v.tolist() == [0.0] * 4

    @sc
    def imatmul_self():
        v = ad.Var(ad.arange(4.0).reshape(2, 2))
        v @= v
        assert v.tolist() == [[2.0, 3.0], [6.0, 11.0]], v.tolist()

    @sc
    def imatmul_changes_shape():
        v = ad.Var(ad.arange(6.0).reshape(2, 3))
        v @= ad.ones((3, 4))

    @sc
    def iadd_broadcast_grows():
        v = ad.Var(ad.arange(3.0))
        v += ad.ones((2, 3))

    @sc
    def idiv_int_into_float_var():
        v = ad.Var(ad.arange(3.0))
        v /= ad.tensor([1, 2, 3])

    @sc
    def setitem_bool_mask_wrong_shape():
        v = ad.Var(ad.arange(6.0).reshape(2, 3))
        v[ad.tensor([True, False, True])] = 1.0

    @sc
    def setitem_int_tensor_dups():
        v = ad.Var(ad.arange(4.0))
        v[ad.tensor([1, 1, 1])] = ad.tensor([1.0, 2.0, 3.0])

    @sc
    def setitem_huge_index():
        v = ad.Var(ad.arange(4.0))
        v[ad.tensor([2 ** 62])] = 1.0

    @sc
    def setitem_negative_index_tensor():
        v = ad.Var(ad.arange(4.0))
        v[ad.tensor([-1, -4])] = 7.0
        assert v.tolist() == [7.0, 1.0, 2.0, 7.0], v.tolist()

    @sc
    def setitem_out_of_range_negative():
        v = ad.Var(ad.arange(4.0))
        v[ad.tensor([-5])] = 7.0

    @sc
    def var_of_expanded():
        v = ad.Var(ad.ones((1, 3)).expand(4, 3))
        v[0, 0] = 5.0
        assert v.tolist()[1][0] == 1.0

    @sc
    def backward_twice_after_set():
        v = ad.Var(ad.ones(3))
        y = (v * v).sum()
        y.backward()
        v.set(ad.zeros(3))
        y.backward()

    @sc
    def optimizer_on_view_of_var():
        v = ad.Var(ad.ones((2, 3)))
        ad.optim.SGD([v.T], lr=0.1)

    @sc
    def optimizer_duplicate_var():
        v = ad.Var(ad.ones(3))
        o = ad.optim.Adam([v, v], lr=0.1)
        o.step((v * v).sum().backward())

    @sc
    def optimizer_int_grad():
        v = ad.Var(ad.ones(3))
        s = ad.GradStore()
        s.insert(v, ad.tensor([1, 2, 3]))
        ad.optim.SGD([v], lr=0.1).step(s)

    @sc
    def optimizer_grad_aliases_var():
        v = ad.Var(ad.arange(4.0))
        s = ad.GradStore()
        s.insert(v, ad.from_dlpack(v).flip(0))
        ad.optim.Adam([v], lr=0.1).step(s)

    @sc
    def grad_of_int_tensor():
        ad.grad((ad.arange(3) * 2).sum(), [ad.arange(3)])

    @sc
    def grad_inputs_views():
        v = ad.Var(ad.ones(3))
        h = v * 2
        ad.grad(h.sum(), [h[1:], v.T])

    @sc
    def backward_grad_noncontig():
        v = ad.Var(ad.ones((2, 3)))
        g = (v * 2).backward(grad=ad.ones((3, 2)).T)
        assert g[v].tolist() == [[2.0] * 3] * 2

    @sc
    def backward_grad_expanded():
        v = ad.Var(ad.ones((2, 3)))
        g = (v * 2).backward(grad=ad.tensor(1.0).broadcast_to((2, 3)))
        assert g[v].tolist() == [[2.0] * 3] * 2

    @sc
    def backward_grad_int():
        v = ad.Var(ad.ones((2, 3)))
        (v * 2).backward(grad=ad.ones((2, 3), dtype=ad.int64))

    @sc
    def store_insert_view_key():
        v = ad.Var(ad.ones((2, 3)))
        s = ad.GradStore()
        s.insert(v.T, ad.ones((3, 2)))
        s[v]

    @sc
    def store_extend_mismatch():
        v = ad.Var(ad.ones((2, 3)))
        s1, s2 = ad.GradStore(), ad.GradStore()
        s1.insert(v, ad.ones((2, 3)))
        s2.insert(v, ad.ones((3,)))
        s1.extend(s2)

    @sc
    def store_extend_dtype_mismatch():
        v = ad.Var(ad.ones((2, 3)))
        s1, s2 = ad.GradStore(), ad.GradStore()
        s1.insert(v, ad.ones((2, 3)))
        s2.insert(v, ad.ones((2, 3), dtype=ad.float64))
        s1.extend(s2)

    @sc
    def store_extend_self():
        v = ad.Var(ad.ones((2, 3)))
        s = (v * v).sum().backward()
        s.extend(s)
        assert s[v].tolist() == [[4.0] * 3] * 2, s[v].tolist()

    @sc
    def clip_grad_norm_mixed():
        a, b = ad.Var(ad.ones(3)), ad.Var(ad.ones(3, dtype=ad.float64))
        s = ad.GradStore()
        s.insert(a, ad.ones(3))
        s.insert(b, ad.ones(3, dtype=ad.float64))
        nn.utils.clip_grad_norm_(s, 1.0)

    @sc
    def clip_grad_norm_inf_norm_type():
        v = ad.Var(ad.ones(3))
        s = (v * v).sum().backward()
        nn.utils.clip_grad_norm_(s, 1.0, norm_type=float("inf"))
        nn.utils.clip_grad_norm_(s, 1.0, norm_type=0.0)
        nn.utils.clip_grad_norm_(s, 1.0, norm_type=-1.0)

    @sc
    def load_state_dict_noncontig():
        m = nn.Linear(2, 3)
        m.load_state_dict({"weight": ad.ones((2, 3)).T, "bias": ad.zeros(6)[::2]})
        assert m.weight.tolist() == [[1.0, 1.0]] * 3

    @sc
    def load_state_dict_numpy_object():
        m = nn.Linear(2, 3)
        m.load_state_dict({"weight": np.ones((3, 2), dtype=object), "bias": np.zeros(3)})

    @sc
    def save_noncontig_and_empty():
        p = "scenario.safetensors"  # in the child's scratch directory
        ad.save({"a": ad.arange(12.0).reshape(3, 4).T[::2], "b": ad.zeros((0, 3)),
                 "c": ad.tensor(1.0).broadcast_to((2, 2)), "d": ad.arange(4.0).flip(0),
                 "e": ad.tensor(True)}, p)
        d = ad.load(p)
        assert d["a"].tolist() == ad.arange(12.0).reshape(3, 4).T[::2].tolist()
        assert d["d"].tolist() == [3.0, 2.0, 1.0, 0.0]
        os.unlink(p)

    @sc
    def save_bad_keys():
        p = "scenario.safetensors"  # in the child's scratch directory
        for k in ("", "__metadata__", 3, None, "a" * 100000):
            try:
                ad.save({k: ad.ones(2)}, p)
            except ad.Error:
                pass

    @sc
    def save_bad_metadata():
        p = "scenario.safetensors"  # in the child's scratch directory
        for m in ({"a": 1}, {1: "a"}, "x", [("a", "b")], {"a": None}):
            try:
                ad.save({"x": ad.ones(2)}, p, m)
            except ad.Error:
                pass

    @sc
    def checkpoint_writes_var():
        v = ad.Var(ad.ones(3))

        def block(x):
            v.set(x)
            return x * 2
        ad.checkpoint(block, ad.Var(ad.ones(3))).sum().backward()

    @sc
    def checkpoint_returns_non_tensor():
        ad.checkpoint(lambda x: 3, ad.Var(ad.ones(3)))

    @sc
    def checkpoint_returns_tuple():
        r = ad.checkpoint(lambda x: (x * 2, x * 3), ad.Var(ad.ones(3)))
        (r[0] + r[1]).sum().backward() if isinstance(r, tuple) else r.sum().backward()

    @sc
    def checkpoint_non_tensor_arg():
        ad.checkpoint(lambda x, y: x * y, ad.Var(ad.ones(3)), 2.0)

    @sc
    def function_saves_input_then_set():
        class M(ad.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * 2

            @staticmethod
            def backward(ctx, gy):
                (x,) = ctx.saved_tensors
                return gy * x
        v = ad.Var(ad.ones(3))
        y = M.apply(v).sum()
        v.set(ad.zeros(3))
        y.backward()

    @sc
    def function_backward_returns_view_of_var():
        v = ad.Var(ad.ones((2, 3)))
        M = _fn_times(2, lambda ctx, gy: v.T.T)
        g = M.apply(v).sum().backward()
        assert g[v].tolist() == [[1.0] * 3] * 2, g[v].tolist()
        v.set(ad.zeros((2, 3)))  # g[v] is the view backward returned: it follows v

    @sc
    def function_backward_returns_expanded():
        v = ad.Var(ad.ones((2, 3)))
        M = _fn_times(2, lambda ctx, gy: ad.tensor(2.0).broadcast_to((2, 3)))
        g = (M.apply(v) * v).sum().backward()
        assert g[v].tolist() == [[4.0] * 3] * 2, g[v].tolist()

    @sc
    def function_backward_raises_base_exception():
        def backward(ctx, gy):
            raise SystemExit(3)
        M = _fn_times(2, backward)
        try:
            M.apply(ad.Var(ad.ones(3))).sum().backward()
        except SystemExit:
            pass

    @sc
    def function_backward_create_graph():
        class M(ad.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, gy):
                (x,) = ctx.saved_tensors
                return gy * 2 * x
        v = ad.Var(ad.ones(3))
        (g,) = ad.grad(M.apply(v).sum(), [v], create_graph=True)
        g.sum().backward()

    @sc
    def function_apply_kwargs():
        class M(ad.Function):
            @staticmethod
            def forward(ctx, x, scale=2.0):
                return x * scale

            @staticmethod
            def backward(ctx, gy):
                return gy
        M.apply(ad.Var(ad.ones(3)), scale=3.0)

    @sc
    def function_nested_apply_in_backward():
        In = _fn_times(3)

        def backward(ctx, gy):
            w = ad.Var(ad.ones(3))
            In.apply(w).sum().backward()
            return gy * 2
        Out = _fn_times(2, backward)
        g = Out.apply(v := ad.Var(ad.ones(3))).sum().backward()
        assert g[v].tolist() == [2.0] * 3

    @sc
    def dlpack_export_var_then_set():
        v = ad.Var(ad.arange(3.0))
        a = np.from_dlpack(v)
        v.set(ad.zeros(3))
        a.sum()

    @sc
    def from_numpy_shared_then_mutated():
        a = np.arange(3.0)
        t = ad.from_numpy(a, copy=False)
        y = ad.Var(ad.ones(3)) * t
        a[:] = 5
        y.sum().backward()

    @sc
    def numpy_of_expanded_write():
        a = ad.tensor(1.0).broadcast_to((3, 3)).numpy()
        try:
            a[0, 0] = 2
        except ValueError:  # read-only, numpy's own error
            pass

    @sc
    def tensor_from_huge_list():
        ad.tensor([[1.0] * 3] * 2 + [[1.0] * 2])

    @sc
    def tensor_from_generator_nested():
        ad.tensor([(x for x in range(3))])

    @sc
    def tensor_of_tensors_mixed_dtype():
        ad.tensor([ad.ones(2), ad.ones(2, dtype=ad.int64)])

    @sc
    def tensor_of_tensors_ragged():
        ad.tensor([ad.ones(2), ad.ones(3)])

    @sc
    def stack_many_empty():
        ad.stack([ad.zeros((0,))] * 1000, 0)

    @sc
    def cat_mixed_dtypes_and_views():
        ad.cat([ad.ones((2, 3)), ad.ones((3, 2)).T, ad.ones((2, 3), dtype=ad.float64)], 0)

    @sc
    def cat_zero_dim():
        ad.cat([ad.tensor(1.0), ad.tensor(2.0)], 0)

    @sc
    def deep_graph_release():
        x = ad.Var(ad.ones(2))
        y = x
        for _ in range(20000):
            y = y * 1.0
        del y

    @sc
    def pickle_noncontig_and_var_view():
        import pickle
        for t in (ad.ones((3, 2)).T, ad.Var(ad.ones((2, 3)))[:, ::2], ad.arange(4.0).flip(0),
                  ad.tensor(1.0).broadcast_to((2, 2)), ad.zeros((0, 2))):
            u = pickle.loads(pickle.dumps(t))
            assert u.tolist() == t.tolist()

    @sc
    def pickle_forged_state():
        import pickle
        b = pickle.dumps(ad.ones((2, 3)))
        for bad in (b.replace(b"float32", b"float99"),):
            try:
                pickle.loads(bad)
            except (ad.Error, pickle.UnpicklingError):
                pass

    @sc
    def tensor_setstate_forged():
        t = ad.ones(2)
        red = t.__reduce__()
        fn, args = red[0], red[1]
        for a in ((b"\x00" * 3, "float32", (2,)), (b"\x00" * 8, "float32", (-2,)),
                  (b"\x00" * 8, "float32", (2 ** 62, 2 ** 62)), (b"", "nope", ()),
                  (None,), ()):
            try:
                fn(*a)
            except (ad.Error, TypeError):
                pass
        del args

    return S


# ---- running ---------------------------------------------------------------------------------
# (entry, slot) -> hostile labels not tried: LSTM(num_layers=2**31) builds
# that many layers one by one (as PyTorch's does) and would only end, after
# hours, in a MemoryError
SKIP = {("nn.LSTM()", ("kw", "num_layers")): {"2**31", "2**62", "2**63", "2**63-1", "2**64",
                                              "10**30", "np.uint64(2**63)"}}


# random multi-argument cases per entry (PYAUTODIFF_FUZZ_ARGS_COMBOS=N for more)
COMBOS = int(os.environ.get("PYAUTODIFF_FUZZ_ARGS_COMBOS", "40"))


def build_cases():
    """The case list: (entry index, param slot, value kind, value index).
    slot -1 means the valid call; value kind 'h' (hostile), 't' (tensor
    variant); slot 'self' is positional 0 of Tensor/Var methods."""
    E = api()
    H = hostile_values()
    V = tensor_variants()
    cases = []
    for ei, (name, fn, args, kw) in enumerate(E):
        cases.append(("api", ei, None, None, None))
        try:
            a = args()
        except Exception as e:  # the table itself is wrong
            raise RuntimeError(f"{name}: valid args failed: {e!r}")
        slots = [("pos", i) for i in range(len(a))] + [("kw", k) for k in kw]
        method = name.startswith(("Tensor.", "Var."))
        for slot in slots:
            # a method's self is always a tensor (t.abs() cannot have t None):
            # only the tensor variants go there
            for hi in range(len(H) if not (method and slot == ("pos", 0)) else 0):
                if H[hi][0] not in SKIP.get((name, slot), ()):
                    cases.append(("api", ei, slot, "h", hi))
            for vi in range(len(V)):
                if name.startswith("Var.") and slot == ("pos", 0) and \
                        V[vi][0] not in ("Var", "Var64", "Var0d", "Var.empty"):
                    continue  # a Var method's self is a Var (not a view of one)
                cases.append(("api", ei, slot, "t", vi))
        # an extra positional argument and an unknown keyword
        cases.append(("api", ei, ("pos", len(a)), "h", 0))
        cases.append(("api", ei, ("kw", "bogus_kw"), "h", 1))
        # then several arguments at once, mostly tensors of mixed dtypes and
        # layouts (self included): combinations one at a time never makes
        for seed in range(COMBOS):
            cases.append(("combo", ei, None, None, seed))
    for si in range(len(scenarios())):
        cases.append(("sc", si, None, None, None))
    return cases


def describe(case, E=None, H=None, V=None):
    kind, ei, slot, vk, vi = case
    if kind == "sc":
        return f"scenario {scenarios()[ei][0]}"
    E = E or api()
    name = E[ei][0]
    if kind == "combo":
        return f"{name} combo {vi}: " + ", ".join(
            f"{s[0]}[{s[1]}] = {lab}" for s, lab, _ in _combo(E[ei], vi, H or hostile_values(),
                                                               V or tensor_variants()))
    if slot is None:
        return f"{name} (valid)"
    if vk == "h":
        lab = (H or hostile_values())[vi][0]
    else:
        lab = "tensor:" + (V or tensor_variants())[vi][0]
    return f"{name} {slot[0]}[{slot[1]}] = {lab}"


# Python's and numpy's own protocol errors, the same as the builtins and
# PyTorch raise for these arguments: not the library's to rename
PROTOCOL = ("truth value of an array with more than one element is ambiguous",
            "truth value of an empty array is ambiguous", "as a data type",
            "to a NumPy dtype", "format()", "Invalid format specifier",
            "Cannot construct a dtype", "Cannot compare structured",
            "DLPack only supports",  # np.from_dlpack's BufferError, the protocol's own
            "No such file or directory",  # open()'s OSError for a path ("" included)
            "positional argument", "unexpected keyword argument",
            "expected str, bytes or os.PathLike object", "not understood",
            "strings are not allowed for 'copy' keyword")
# t.__array__(dtype) is numpy's protocol: numpy parses its dtype argument,
# with its own errors for every odd value (a tuple, a dict, a list)
NUMPY_PROTOCOL = {"Tensor.__array__"}


def classify(e):
    """('bare', site) when e is a non-ad.Error escaping pyautodiff's code not
    from one of its own `raise` statements, ('raised', site) for a deliberate
    one, ('user', site) when it comes from outside the package (the user's
    callback, numpy on a user's object)."""
    tb = traceback.extract_tb(e.__traceback__)
    inner = tb[-1] if tb else None
    pk = [f for f in tb if f.filename.startswith(PKG)]
    if inner is None:
        return "user", "?"
    site = f"{os.path.relpath(inner.filename, ROOT)}:{inner.lineno}"
    if not inner.filename.startswith(PKG):
        if inner.filename == os.path.abspath(__file__):
            return "user", site  # the fuzzer's own hostile object raised
        if any(p in str(e) for p in PROTOCOL):
            return "protocol", site
        # numpy or the stdlib raising while called by pyautodiff is bare too,
        # unless the frame above is the fuzzer's own lambda
        if pk and tb.index(pk[-1]) > 0:
            return "bare", site + " via " + f"{os.path.relpath(pk[-1].filename, ROOT)}:" \
                f"{pk[-1].lineno}"
        return "user", site
    line = linecache.getline(inner.filename, inner.lineno).strip()
    if line.startswith("raise") or "raise " in line:
        return "raised", site
    if any(p in str(e) for p in PROTOCOL):
        return "protocol", site
    return "bare", site


RESULT = [None]


def _summary(r):
    if isinstance(r, ad.Tensor):
        return f"{type(r).__name__} {r.dtype.name} {r.shape}"
    if isinstance(r, (list, tuple)):
        return f"{type(r).__name__}[{len(r)}] " + " ".join(_summary(x) for x in r[:3])
    return type(r).__name__ + " " + repr(r)[:60]


def _combo(entry, seed, H, V):
    """The replacements of combo case `seed`: [(slot, label, factory)]."""
    import random
    name, fn, args, kw = entry
    r = random.Random(seed * 7919 + len(name))
    n = len(args())
    slots = [("pos", i) for i in range(n)] + [("kw", k) for k in kw]
    out = []
    for s in slots:
        if r.random() < 0.5:
            continue
        method_self = s == ("pos", 0) and name.startswith(("Tensor.", "Var."))
        if r.random() < 0.75 or method_self:
            lab, f = r.choice([v for v in V if not name.startswith("Var.") or s != ("pos", 0)
                               or v[0] in ("Var", "Var64", "Var0d", "Var.empty")])
            out.append((s, "tensor:" + lab, f))
        else:
            lab, f = r.choice(H)
            if lab not in SKIP.get((name, s), ()):
                out.append((s, lab, f))
    return out


def run_case(case, E, H, V, SC):
    kind, ei, slot, vk, vi = case
    if kind == "sc":
        SC[ei][1]()
        return "ok"
    name, fn, args, kw = E[ei]
    f = fn()
    a = list(args())
    k = dict(kw)
    k = {key: (val() if callable(val) and not isinstance(val, (type, ad.DType)) and
                key not in ("lr_lambda",) and not hasattr(val, "apply") else val)
         for key, val in k.items()}
    if kind == "combo":
        for s, _, make in _combo(E[ei], vi, H, V):
            if s[0] == "pos":
                a[s[1]] = make()
            else:
                k[s[1]] = make()
    elif slot is not None:
        val = H[vi][1]() if vk == "h" else V[vi][1]()
        if slot[0] == "pos":
            if slot[1] < len(a):
                a[slot[1]] = val
            else:
                a.append(val)
        else:
            k[slot[1]] = val
    r = f(*a, **k)
    if slot is not None and vk == "h":
        RESULT[0] = _summary(r)
    if isinstance(r, ad.Tensor):  # touch it: a view with garbage strides shows now
        r.numpy().sum() if r.numel() < 10 ** 6 else None
    elif isinstance(r, (list, tuple)):
        for x in r[:4]:
            if isinstance(x, ad.Tensor) and x.numel() < 10 ** 6:
                x.numpy().sum()
    return "ok"


def child(lo, hi, out_path, progress_path):
    faulthandler.enable()
    cwd = os.path.join(os.path.dirname(os.path.abspath(out_path)), "cwd")
    os.makedirs(cwd, exist_ok=True)
    os.chdir(cwd)  # ad.save("abc") writes here
    import resource
    if not os.environ.get("LD_PRELOAD"):  # ASan reserves terabytes of address space
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    E, H, V, SC = api(), hostile_values(), tensor_variants(), scenarios()
    cases = build_cases()
    prog = os.open(progress_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    sample = int(os.environ.get("PYAUTODIFF_FUZZ_ARGS_SAMPLE", "1"))
    with open(out_path, "a") as out:
        for i in range(lo, min(hi, len(cases))):
            if i % sample:
                continue
            os.pwrite(prog, f"{i:10d}\n".encode(), 0)
            faulthandler.dump_traceback_later(TIMEOUT, exit=True)
            rec = {"i": i}
            RESULT[0] = None
            live0 = ad.live_tensors()
            try:
                rec["r"] = run_case(cases[i], E, H, V, SC)
                if RESULT[0] is not None:
                    rec["res"] = RESULT[0]
            except AssertionError as e:  # a scenario's check of a value
                rec.update(r="wrong", exc="AssertionError", msg=str(e)[:300],
                           tb=traceback.format_exc()[-1500:])
            except ad.InternalError as e:
                rec.update(r="internal", exc=type(e).__name__, msg=str(e)[:300],
                           site=classify(e)[1])
            except ad.Error as e:
                rec.update(r="aderror", exc=type(e).__name__, msg=str(e)[:300])
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as e:
                c, site = classify(e)
                if c == "bare" and E[cases[i][1]][0] in NUMPY_PROTOCOL and \
                        isinstance(e, (TypeError, ValueError)):
                    c = "protocol"
                rec.update(r=c, exc=type(e).__name__, msg=str(e)[:300], site=site)
                if c == "bare":
                    rec["tb"] = traceback.format_exc()[-1500:]
            finally:
                faulthandler.cancel_dump_traceback_later()
            if ad.live_tensors() != live0:
                gc.collect()
                if ad.live_tensors() > live0:  # a case must leave nothing alive
                    rec["leak"] = ad.live_tensors() - live0
                    live0 = ad.live_tensors()
            out.write(json.dumps(rec) + "\n")
            out.flush()
    os.close(prog)
    os.chdir(ROOT)
    shutil.rmtree(cwd, ignore_errors=True)


def parent(lo, hi, workdir):
    """Runs cases [lo, hi) in children, restarting after each death."""
    os.makedirs(workdir, exist_ok=True)
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        # the children's cap on a single allocation under ASan, where they set
        # no RLIMIT_AS (it reserves terabytes): ad.rand(2**31) would otherwise
        # fill 8 GiB for real and outlast the watchdog (allocator_may_return_null
        # then makes it the OutOfMemoryError it is in the release build)
        opts = os.environ.get("ASAN_OPTIONS", "")
        if "max_allocation_size_mb" not in opts:
            os.environ["ASAN_OPTIONS"] = (opts + ":" if opts else "") + \
                "max_allocation_size_mb=3000:allocator_may_return_null=1"
    out_path = os.path.join(workdir, "results.jsonl")
    deaths = []
    i = lo
    n = 0
    while i < hi:
        end = min(i + BATCH, hi)
        prog = os.path.join(workdir, f"progress.{n}")
        err = os.path.join(workdir, f"stderr.{n}")
        n += 1
        with open(err, "w") as ef:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                f"{i}:{end}", out_path, prog], stderr=ef, stdout=ef)
        if p.returncode == 0:
            i = end
            continue
        try:
            last = int(open(prog).read().strip())
        except (OSError, ValueError):
            last = i
        log = open(err).read()
        kind = "hang" if "Timeout (" in log else "crash"
        deaths.append({"i": last, "r": kind, "rc": p.returncode, "log": log[-6000:]})
        print(f"fuzz_args: {kind} (rc {p.returncode}) at case {last}: "
              f"{describe(build_cases()[last])}", flush=True)
        i = last + 1
    return out_path, deaths


def report(out_path, deaths):
    E, H, V = api(), hostile_values(), tensor_variants()
    cases = build_cases()
    counts = {}
    sigs = {}
    for line in open(out_path):
        rec = json.loads(line)
        counts[rec["r"]] = counts.get(rec["r"], 0) + 1
        if rec.get("leak"):
            counts["leak"] = counts.get("leak", 0) + 1
            name = describe(cases[rec["i"]], E, H, V)
            sigs.setdefault(("leak", name.split(" ")[0], rec["r"], rec.get("exc")),
                            (name, f"{rec['leak']} tensors left alive", ""))
        if rec["r"] in ("bare", "internal", "wrong"):
            name = describe(cases[rec["i"]], E, H, V)
            sig = (rec["r"], name.split(" ")[0], rec["exc"], rec.get("site"))
            sigs.setdefault(sig, (name, rec["msg"], rec.get("tb", "")))
    for d in deaths:
        counts[d["r"]] = counts.get(d["r"], 0) + 1
        sigs[(d["r"], describe(cases[d["i"]], E, H, V), d["rc"], "")] = (
            describe(cases[d["i"]], E, H, V), d["log"][-3000:], "")
    for sig, (name, msg, tb) in sorted(sigs.items(), key=lambda kv: str(kv[0])):
        print(f"fuzz_args: {sig[0]}: {name}: {sig[2]} at {sig[3]}: {msg[:300]}")
    tot = sum(counts.values())
    print("fuzz_args: outcomes " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    bad = {k: counts.get(k, 0) for k in ("crash", "hang", "wrong", "bare", "internal", "leak")}
    tot -= counts.get("leak", 0)
    print(f"fuzz_args: {tot} cases, {bad['crash']} crash, {bad['hang']} hang, "
          f"{bad['wrong']} wrong, {bad['bare']} bare, {bad['internal']} internal, "
          f"{bad['leak']} leak", flush=True)
    return 1 if any(bad.values()) else 0


def main(argv):
    if argv[:1] == ["--child"]:
        lo, hi = map(int, argv[1].split(":"))
        child(lo, hi, argv[2], argv[3])
        return 0
    cases = build_cases()
    if argv[:1] == ["--list"]:
        for ei, e in enumerate(api()):
            print(ei, e[0])
        print(f"{len(cases)} cases")
        return 0
    lo, hi = 0, len(cases)
    if argv[:1] == ["--cases"]:
        lo, hi = map(int, argv[1].split(":"))
        E, H, V, SC = api(), hostile_values(), tensor_variants(), scenarios()
        os.chdir(tempfile.mkdtemp(prefix="fuzz_args."))  # what ad.save writes stays there
        for i in range(lo, hi):
            print(i, describe(cases[i], E, H, V), flush=True)
            try:
                print("  ->", run_case(cases[i], E, H, V, SC))
            except BaseException as e:
                print("  ->", type(e).__name__, str(e)[:200], classify(e))
        return 0
    if argv[:1] == ["--range"]:
        lo, hi = map(int, argv[1].split(":"))
    given = os.environ.get("PYAUTODIFF_FUZZ_ARGS_DIR")
    workdir = given or tempfile.mkdtemp(prefix="fuzz_args.")
    t0 = time.time()
    out_path, deaths = parent(lo, hi, workdir)
    rc = report(out_path, deaths)
    if rc == 0 and not given:
        shutil.rmtree(workdir, ignore_errors=True)
        workdir = "(removed)"
    print(f"fuzz_args: {time.time() - t0:.0f} s, results in {workdir}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
