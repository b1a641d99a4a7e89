"""The quick calls (pyautodiff.h, ABI 1.5 and 1.8): ad_binary_quick,
ad_unary_quick, ad_scalar_quick, ad_reduce_quick and ad_tensor_release_quick.  They must give the ordinary
call's result to the bit, record the same node, decline (NULL / 0, nothing
changed) everything else, and hold up under threads.  The Tensor operators
take them first, so the rest of the suite covers them too; these tests pin
down what they accept and what they leave to the ordinary path."""
import inspect
import os
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest

import pyautodiff as ad
from pyautodiff._lib import ffi, lib

from pyautodiff.tensor import _wrap

from gradcheck import check_grad, layouts

DTYPES = ["float32", "float64", "int64", "int32", "uint8", "bool"]


def ordinary(op, *ts, s=None):
    """The ordinary call's result, as a numpy array (or its error status)."""
    out = ffi.new("ad_tensor **")
    if s is not None:
        st = lib.ad_scalar_op(op, ts[0]._h, s, out)
    elif len(ts) == 1:
        st = lib.ad_unary(op, ts[0]._h, out)
    else:
        st = lib.ad_binary(op, ts[0]._h, ts[1]._h, out)
    if st:
        return st
    t = _wrap(out[0])
    return t.numpy().copy()


def quick(fn, op, *args):
    """A quick call's result as a numpy array, or None when it declined."""
    h = fn(op, *(a._h if isinstance(a, ad.Tensor) else a for a in args))
    if h == ffi.NULL:
        return None
    t = _wrap(h)
    return t.numpy().copy()


def bits(a):
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def ops_of(family, n_in, n_fargs=0):
    from pyautodiff._ops import OPS
    return [i for i in OPS.values()
            if i.family == family and i.n_inputs == n_in and i.n_fargs == n_fargs
            and not i.n_iargs]


def sample(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "uint8":
        return rng.integers(1, 9, shape).astype(np.uint8)
    if dtype.startswith("int"):
        return rng.integers(-9, 9, shape).astype(dtype)
    return (rng.random(shape) * 2 + 0.25).astype(dtype)  # positive: log, sqrt


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (1,), (7,), (4, 4), (3, 1, 5), (1000,), (0, 3)])
def test_binary_and_compare_match_the_ordinary_call(dtype, shape):
    a = ad.from_numpy(sample(dtype, shape, 1))
    b = ad.from_numpy(sample(dtype, shape, 2))
    infos = ops_of(lib.AD_FAMILY_BINARY, 2) + ops_of(lib.AD_FAMILY_COMPARE, 2)
    assert infos
    for info in infos:
        want = ordinary(info.kind, a, b)
        got = quick(lib.ad_binary_quick, info.kind, a, b)
        if isinstance(want, int):  # the ordinary call fails: the quick one declines
            assert got is None, info.name
            continue
        if got is None and 0 in shape:  # empty: the ordinary path's
            continue
        assert got is not None, (info.name, dtype, shape)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(bits(got), bits(want), err_msg=info.name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (5,), (4, 4), (1000,), (2, 0)])
def test_unary_and_scalar_match_the_ordinary_call(dtype, shape):
    x = ad.from_numpy(sample(dtype, shape, 3))
    for info in ops_of(lib.AD_FAMILY_UNARY, 1):
        want = ordinary(info.kind, x)
        got = quick(lib.ad_unary_quick, info.kind, x)
        if isinstance(want, int):
            assert got is None, info.name
            continue
        if got is None and 0 in shape:
            continue
        assert got is not None, (info.name, dtype, shape)
        np.testing.assert_array_equal(bits(got), bits(want), err_msg=info.name)
    for info in ops_of(lib.AD_FAMILY_SCALAR, 1, 1):
        for s in (2.0, -0.5, 3.0):
            want = ordinary(info.kind, x, s=s)
            got = quick(lib.ad_scalar_quick, info.kind, x, s)
            if isinstance(want, int) or dtype not in ("float32", "float64"):
                # integer tensors always take the ordinary path (its scalar checks)
                assert got is None, info.name
                continue
            if got is None and 0 in shape:
                continue
            assert got is not None, (info.name, dtype, shape)
            np.testing.assert_array_equal(bits(got), bits(want),
                                          err_msg=info.name)


REDUCTIONS = ("SUM", "MEAN", "PROD", "MAX", "MIN")


def ordinary_reduce(op, t):
    """ad_op_call's reduction over every dim (iargs {keepdim 0}), as numpy."""
    out = ffi.new("ad_tensor **")
    inp = ffi.new("ad_tensor *[1]", [t._h])
    st = lib.ad_op_call(op, inp, 1, ffi.new("int64_t[1]", [0]), 1, ffi.NULL, 0, out)
    return st if st else _wrap(out[0]).numpy().copy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (1,), (7,), (4, 4), (3, 1, 5), (1000,), (0, 3),
                                   (65535,), (65536,), (3, 8)])
def test_reductions_match_the_ordinary_call(dtype, shape):
    x = sample(dtype, shape, 4)
    if dtype.startswith("float") and x.size >= 8:  # NaN, infinities and -0 in the mix
        x.reshape(-1)[:4] = [-0.0, np.inf, -np.inf, np.nan][:4]
    t = ad.from_numpy(x)
    views = [t] + ([t.t()] if len(shape) == 2 else [])
    for name in REDUCTIONS:
        op = getattr(lib, "AD_OP_" + name)
        for v in views:
            want = ordinary_reduce(op, v)
            got = quick(lib.ad_reduce_quick, op, v)
            # (a view of no element is contiguous too: the quick call takes it)
            takes = ((v is t or x.size == 0) and len(shape) > 0 and x.size < 65536 and
                     (dtype in ("float32", "float64") or
                      (dtype == "int64" and name != "MEAN") or
                      (name in ("MAX", "MIN") and dtype != "bool")) and
                     not (name in ("MAX", "MIN") and x.size == 0))
            if not takes:
                assert got is None, (name, dtype, shape)
                continue
            assert got is not None and not isinstance(want, int), (name, dtype, shape)
            assert got.shape == () and got.dtype == want.dtype
            np.testing.assert_array_equal(bits(got), bits(want), err_msg=name)
    # the methods with no arguments take it (fast methods or Python), with the
    # same result and node as with dim given
    if x.size and shape and dtype.startswith("float"):
        v = ad.Var(x)
        for name in ("sum", "mean", "max", "min", "prod"):
            y = getattr(v, name)()
            yd = getattr(v, name)(dim=tuple(range(len(shape))))
            np.testing.assert_array_equal(bits(y.numpy()), bits(yd.numpy()), err_msg=name)
            assert y.op == name and y.track_op
            g, gd = y.backward()[v], yd.backward()[v]
            np.testing.assert_array_equal(bits(g.numpy()), bits(gd.numpy()), err_msg=name)


def test_per_op_quick_calls_are_the_generic_ones():
    # bindings/build_cffi.py makes lib._ad_uq_<name>(x) for every unary op
    # without float arguments and lib._ad_bq_<name>(a, b) for every binary
    # and comparison op, from ops.def: one per registry row, each the generic
    # quick call of its own op (same bits, the same declines)
    unary = ops_of(lib.AD_FAMILY_UNARY, 1)
    binary = ops_of(lib.AD_FAMILY_BINARY, 2) + ops_of(lib.AD_FAMILY_COMPARE, 2)
    assert {n[7:] for n in dir(lib) if n.startswith("_ad_uq_")} == {i.name for i in unary}
    assert {n[7:] for n in dir(lib) if n.startswith("_ad_bq_")} == {i.name for i in binary}
    n = ad.live_tensors()
    for dtype in ("float32", "float64", "int32", "bool"):
        a = ad.from_numpy(sample(dtype, (4, 6), 1))
        b = ad.from_numpy(sample(dtype, (4, 6), 2))
        pairs = [(a, b), (a, ad.from_numpy(sample(dtype, (6,), 3))), (a[:, ::2], a[:, 1::2])]
        for info in unary:
            for x in (a, a.t()):
                got = quick(lambda _, h: getattr(lib, "_ad_uq_" + info.name)(h), 0, x)
                want = quick(lib.ad_unary_quick, info.kind, x)
                assert (got is None) == (want is None), (info.name, dtype)
                if got is not None:
                    np.testing.assert_array_equal(bits(got), bits(want), err_msg=info.name)
        for info in binary:
            for x, y in pairs:
                got = quick(lambda _, g, h: getattr(lib, "_ad_bq_" + info.name)(g, h), 0, x, y)
                want = quick(lib.ad_binary_quick, info.kind, x, y)
                assert (got is None) == (want is None), (info.name, dtype)
                if got is not None:
                    assert got.dtype == want.dtype, info.name
                    np.testing.assert_array_equal(bits(got), bits(want), err_msg=info.name)
    del a, b, pairs, x, y
    assert ad.live_tensors() == n
    # the generated methods and the operators hold their op's own call
    for name, fn in (("exp", ad.Tensor.exp), ("tanh", ad.Tensor.tanh)):
        assert getattr(lib, "_ad_uq_" + name) in [c.cell_contents for c in fn.__closure__]
    for name, fn in (("add", ad.Tensor.__add__), ("sub", ad.Tensor.__rsub__),
                     ("mul", ad.Tensor.__mul__), ("div", ad.Tensor.__truediv__)):
        assert getattr(lib, "_ad_bq_" + name) in [c.cell_contents for c in fn.__closure__]


def test_declines_what_the_ordinary_path_handles():
    a = ad.from_numpy(sample("float32", (4, 6), 1))
    add, exp = lib.AD_OP_ADD, lib.AD_OP_EXP
    cases = [
        (lib.ad_binary_quick, add, a, ad.from_numpy(sample("float32", (6,), 2))),  # broadcast
        (lib.ad_binary_quick, add, a, ad.from_numpy(sample("float32", (6, 4), 2))),  # same numel
        (lib.ad_binary_quick, add, a, ad.from_numpy(sample("float64", (4, 6), 2))),  # dtypes
        (lib.ad_binary_quick, add, a, a.t().contiguous().t()),  # not contiguous
        (lib.ad_binary_quick, add, a[:, ::2], a[:, 1::2]),  # strided views
        (lib.ad_binary_quick, lib.AD_OP_MATMUL, a, a),  # not elementwise
        (lib.ad_binary_quick, exp, a, a),  # unary kind
        (lib.ad_binary_quick, 0, a, a),
        (lib.ad_binary_quick, 10 ** 6, a, a),
        (lib.ad_unary_quick, add, a),
        (lib.ad_unary_quick, exp, a.t()),
        (lib.ad_unary_quick, lib.AD_OP_SUM, a),
        (lib.ad_scalar_quick, exp, a, 1.0),
        (lib.ad_scalar_quick, lib.AD_OP_ADD_SCALAR, ad.ones(3, dtype=ad.int64), 1.0),
        (lib.ad_reduce_quick, lib.AD_OP_SUM, a.t()),  # not contiguous
        (lib.ad_reduce_quick, lib.AD_OP_SUM, a[:, ::2]),
        (lib.ad_reduce_quick, exp, a),  # not a reduction over every dim
        (lib.ad_reduce_quick, lib.AD_OP_LOGSUMEXP, a),
        (lib.ad_reduce_quick, lib.AD_OP_ARGMAX, a),
        (lib.ad_reduce_quick, lib.AD_OP_SUM, ad.ones(3, dtype=ad.int32)),  # sums in int64
        (lib.ad_reduce_quick, lib.AD_OP_MEAN, ad.ones(3, dtype=ad.int64)),  # an error
        (lib.ad_reduce_quick, lib.AD_OP_MAX, ad.ones((0, 3))),  # no identity: an error
        (lib.ad_reduce_quick, lib.AD_OP_SUM, ad.tensor(2.0)),  # 0-d
    ]
    big = ad.ones(1 << 18)  # the pool's and the GIL's business: ordinary path
    cases += [(lib.ad_binary_quick, add, big, big), (lib.ad_unary_quick, exp, big),
              (lib.ad_scalar_quick, lib.AD_OP_MUL_SCALAR, big, 2.0),
              (lib.ad_reduce_quick, lib.AD_OP_SUM, ad.ones(1 << 16))]  # blocked sums
    n = ad.live_tensors()
    for fn, op, *args in cases:
        assert fn(op, *(x._h for x in args[:2] if isinstance(x, ad.Tensor)),
                  *(x for x in args if not isinstance(x, ad.Tensor))) == ffi.NULL, (fn, op)
    assert ad.live_tensors() == n
    assert lib.ad_binary_quick(add, ffi.NULL, a._h) == ffi.NULL
    assert lib.ad_unary_quick(exp, ffi.NULL) == ffi.NULL
    assert lib.ad_scalar_quick(lib.AD_OP_ADD_SCALAR, ffi.NULL, 1.0) == ffi.NULL
    assert lib.ad_reduce_quick(lib.AD_OP_SUM, ffi.NULL) == ffi.NULL
    assert lib.ad_tensor_release_quick(ffi.NULL) == 1


def test_declines_in_anomaly_mode_and_under_the_failure_hook():
    v = ad.Var(sample("float32", (3,), 1))
    with ad.detect_anomaly():
        assert lib.ad_binary_quick(lib.AD_OP_MUL, v._h, v._h) == ffi.NULL
        assert (v * v).op == "mul"  # the ordinary path records the site
    with ad.detect_anomaly():
        assert lib.ad_reduce_quick(lib.AD_OP_SUM, v._h) == ffi.NULL
        assert v.sum().op == "sum"
    lib.ad_testing_fail_alloc_after(1)
    try:
        assert lib.ad_reduce_quick(lib.AD_OP_SUM, v._h) == ffi.NULL
        assert lib.ad_unary_quick(lib.AD_OP_EXP, v._h) == ffi.NULL
        with pytest.raises(ad.OutOfMemoryError):  # the failure lands in the ordinary path
            v.exp()
    finally:
        lib.ad_testing_fail_alloc_after(0)


def test_errors_of_the_operators_are_unchanged():
    a, b = ad.ones((2, 3)), ad.ones((4, 3))
    with pytest.raises(ad.ShapeError, match=r"add: .*\(2, 3\).*\(4, 3\)"):
        a + b
    with pytest.raises(ad.DTypeError, match="mul: dtype mismatch"):
        a * ad.ones((2, 3), dtype=ad.float64)
    with pytest.raises(ad.OutOfBoundsError, match="out of bounds for uint8"):
        ad.ones(3, dtype=ad.uint8) + 300
    with pytest.raises(ad.OutOfBoundsError, match="out of the float64 range"):
        a + 10 ** 400
    assert (ad.tensor([1, 2]) + 2 ** 60).tolist() == [1 + 2 ** 60, 2 + 2 ** 60]  # exact int64
    assert (ad.tensor([1.5]) - 2).tolist() == [-0.5]
    assert (2.0 - ad.tensor([1.5])).tolist() == [0.5]
    assert (3 / ad.tensor([2.0], dtype=ad.float64)).tolist() == [1.5]


@pytest.mark.parametrize("name,base,make", layouts((3, 4)), ids=lambda x: x
                         if isinstance(x, str) else "")
def test_gradients_through_the_quick_path(name, base, make):
    # contiguous operands go through the quick calls, the views through the
    # ordinary ones: both must give the same float64 gradients
    other = np.random.default_rng(2).standard_normal((3, 4)) + 3.0

    def f(x, y):
        z = (x * y + x / y - 2.0 * y).exp() * 0.01 + (x - 1.5).tanh()
        return z * z

    check_grad(f, [base, other], make=lambda i, t: make(t) if i == 0 else t)


def test_tracked_quick_call_records_the_same_node():
    v = ad.Var(sample("float32", (4, 4), 1))
    c = ad.from_numpy(sample("float32", (4, 4), 2))
    y = _wrap(lib.ad_binary_quick(lib.AD_OP_MUL, v._h, c._h))
    assert y.op == "mul" and y.track_op
    g = y.sum().backward()[v]
    np.testing.assert_array_equal(g.numpy(), c.numpy())
    with ad.no_grad():
        z = _wrap(lib.ad_unary_quick(lib.AD_OP_EXP, v._h))
        assert z.op is None and not z.track_op


def test_release_quick_leaves_nodes_and_external_memory_to_release():
    n = ad.live_tensors()
    x = ad.ones(3)
    lib.ad_tensor_retain(x._h)
    assert lib.ad_tensor_release_quick(x._h) == 1  # not the last reference
    h = x._h
    lib.ad_tensor_retain(h)
    x.__del__()
    assert ad.live_tensors() == n + 1
    assert lib.ad_tensor_release_quick(h) == 1  # the last one of a plain tensor: freed
    assert ad.live_tensors() == n
    v = ad.Var([1.0, 2.0])
    u = v * 3.0
    hu = u._h
    lib.ad_tensor_retain(hu)
    u.__del__()
    assert lib.ad_tensor_release_quick(hu) == 1  # a node whose input (v) lives on
    assert ad.live_tensors() == n + 1
    w = (v * 3.0) * 2.0  # w's node holds the last reference of v * 3.0, itself a node
    hw = w._h
    lib.ad_tensor_retain(hw)
    w.__del__()
    assert lib.ad_tensor_release_quick(hw) == 0  # a graph would come down: declined
    assert ad.live_tensors() == n + 3  # nothing changed
    lib.ad_tensor_release(hw)
    assert ad.live_tensors() == n + 1
    saved = ad.memory_stats()["saved_var_bytes"]
    x = v * v  # its node keeps v for backward
    assert ad.memory_stats()["saved_var_bytes"] > saved
    del x  # the quick release takes the node's saved bytes back too
    assert ad.memory_stats()["saved_var_bytes"] == saved
    saved = ad.memory_stats()["saved_bytes"]
    x = (v * 1.0).exp()  # its node keeps its output
    assert ad.memory_stats()["saved_bytes"] > saved
    del x
    assert ad.memory_stats()["saved_bytes"] == saved
    arr = np.ones(3, np.float32)
    e = ad.from_numpy(arr, copy=False)  # over numpy's memory
    he = e._h
    lib.ad_tensor_retain(he)
    e.__del__()
    assert lib.ad_tensor_release_quick(he) == 0  # its release callback is ad_tensor_release's
    assert ad.live_tensors() == n + 2
    lib.ad_tensor_release(he)
    del v
    assert ad.live_tensors() == n


def test_threads_share_operands_and_results():
    a = ad.from_numpy(sample("float32", (1000,), 1))
    b = ad.from_numpy(sample("float32", (1000,), 2))
    v = ad.Var(sample("float32", (1000,), 3))
    want = (a.numpy() * b.numpy() + 1.0).astype(np.float32)
    errors = []

    def work():
        try:
            for _ in range(300):
                y = a * b + 1.0
                z = (v * y).exp()
                if not np.array_equal(y.numpy(), want):
                    errors.append("wrong result")
                del y, z
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


# ---- the size bounds (elementwise.c: quick_size) ------------------------------------
# memory-bound ops up to QUICK_MAX_NUMEL (1 << 17) elements, the costlier ones
# below QUICK_MAX_WORK / cost (1 << 18 over 16 for the float32 SIMD maps, over
# 64 for a libm call per element); with more than one thread also below the
# pool's threshold ITER_PAR_MIN / cost (1 << 16 over the cost), from where the
# ordinary call splits the work; the same bits as the ordinary call on both
# sides of each bound, at 1 and 2 threads
SIMD = ffi.string(lib.ad_reduce_kernel()).decode() != "portable"  # float32 exp a SIMD map
QUICK_MAX_NUMEL, QUICK_MAX_WORK, ITER_PAR_MIN = 1 << 17, 1 << 18, 1 << 16


@pytest.mark.parametrize("op,dtype,cost", [
    ("ADD", "float32", 1), ("MUL", "float64", 1), ("EXP", "float32", 16 if SIMD else 64),
    ("EXP", "float64", 64), ("MUL_SCALAR", "float32", 1)])
def test_size_bounds_and_bits_on_both_sides(op, dtype, cost, threads):
    kind = getattr(lib, "AD_OP_" + op)
    last = min(QUICK_MAX_NUMEL, QUICK_MAX_WORK // cost - 1)  # the largest size taken
    if threads > 1:
        last = min(last, ITER_PAR_MIN // cost - 1)
    for n in (last - 1, last, last + 1):
        x = ad.from_numpy(sample(dtype, (n,), 1))
        y = ad.from_numpy(sample(dtype, (n,), 2))
        if op in ("ADD", "MUL"):
            fn, args, want = lib.ad_binary_quick, (x, y), ordinary(kind, x, y)
        elif op == "EXP":
            fn, args, want = lib.ad_unary_quick, (x,), ordinary(kind, x)
        else:
            fn, args, want = lib.ad_scalar_quick, (x, 0.75), ordinary(kind, x, s=0.75)
        got = quick(fn, kind, *args)
        assert (got is not None) == (n <= last), (op, dtype, n, threads)
        if got is not None:
            np.testing.assert_array_equal(bits(got), bits(want))


# ---- storages with inline data and the per-thread free lists (alloc.c) -----------
# float32 sizes around the bounds: 228 and 229 elements (an allocation of
# 1024 and of 1088 bytes: two of ad_small_alloc's 64-byte classes), 1024
# (4096 bytes, the last inline size), 1025 (data in its own block); float64
# and uint8 sizes in between
SMALL_SIZES = [("float32", n) for n in (64, 65, 228, 229, 230, 245, 246, 1000, 1023, 1024, 1025)]
SMALL_SIZES += [("float64", n) for n in (114, 115, 300, 512, 513)]
SMALL_SIZES += [("uint8", n) for n in (911, 912, 913, 4095, 4096, 4097)]


def test_inline_storages_of_every_class_live_side_by_side():
    # many live tensors of each class at once, freed in a shuffled order and
    # taken again: a block handed out twice or of a smaller class than asked
    # would show as wrong values
    rng = np.random.default_rng(0)
    n0, b0 = ad.live_tensors(), ad.live_bytes()
    for rnd in range(3):
        live = []
        for dtype, n in SMALL_SIZES:
            x = ad.from_numpy(sample(dtype, (n,), rnd))
            for k in range(12):  # more than a class keeps (SMALL_KEEP = 8)
                y = x + x if dtype != "uint8" else x * x
                live.append((y, (x.numpy() + x.numpy()) if dtype != "uint8"
                             else x.numpy() * x.numpy()))
        for i in rng.permutation(len(live)):
            y, want = live[i]
            np.testing.assert_array_equal(y.numpy(), want)
        for i in rng.permutation(len(live))[: len(live) // 2]:
            live[i] = None
        for item in live:
            if item is not None:
                np.testing.assert_array_equal(item[0].numpy(), item[1])
        del live, x, y, item
    assert ad.live_tensors() == n0 and ad.live_bytes() == b0


def test_tensor_headers_of_every_rank_live_side_by_side():
    # a tensor's header (48 bytes and 16 a dim) comes from the free lists too,
    # one class per 64 bytes: views of every rank up to 16 held at once,
    # half of them freed in a shuffled order and made again, keep their own
    # shapes, strides and values (a header from a smaller class would not)
    rng = np.random.default_rng(1)
    n0 = ad.live_tensors()
    x = ad.from_numpy(sample("float32", (6,), 0))
    shapes = [(1,) * (nd - 1) + (6,) for nd in range(1, 17)] + [(2, 3), (3, 1, 2)]
    live = [(x.reshape(shape), shape) for shape in shapes for _ in range(10)]
    for rnd in range(3):
        for i in rng.permutation(len(live))[: len(live) // 2]:
            live[i] = (x.reshape(live[i][1]), live[i][1])
        for t, shape in live:
            assert t.shape == shape and t.ndim == len(shape)
            assert t.strides == tuple(int(np.prod(shape[d + 1:])) for d in range(len(shape)))
            np.testing.assert_array_equal(t.numpy().reshape(-1), x.numpy())
    del live, t, x
    assert ad.live_tensors() == n0


def test_inline_storages_freed_by_another_thread_and_at_thread_exit():
    # blocks move between threads' lists (a tensor made in one thread and
    # released in another), and a thread's lists are freed when it ends
    n0, b0 = ad.live_tensors(), ad.live_bytes()
    made, errors = [], []
    x = ad.from_numpy(sample("float32", (1000,), 1))
    want = x.numpy() * 3.0

    def produce():
        for _ in range(50):
            made.append(x * 3.0)

    def consume():
        try:
            for _ in range(50):
                y = x * 3.0  # taken from this thread's lists once it has freed some
                if not np.array_equal(y.numpy(), want):
                    errors.append("wrong values")
                del y
            while made:
                t = made.pop()
                if not np.array_equal(t.numpy(), want):
                    errors.append("wrong values")
                del t
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))
    for _ in range(3):
        p = threading.Thread(target=produce)
        p.start()
        p.join()
        c = threading.Thread(target=consume)
        c.start()
        c.join()
    assert not errors and not made
    del x
    assert ad.live_tensors() == n0 and ad.live_bytes() == b0


def test_failure_hook_reaches_the_free_lists():
    x = ad.from_numpy(sample("float32", (1000,), 1))
    for _ in range(3):  # this thread's list of the class now holds blocks
        x + x
    lib.ad_testing_fail_alloc_after(2)  # the tensor header, then the storage
    try:
        with pytest.raises(ad.OutOfMemoryError):
            x + x
    finally:
        lib.ad_testing_fail_alloc_after(0)
    np.testing.assert_array_equal((x + x).numpy(), x.numpy() * 2)


# ---- the C forms of the hottest methods (tensor.py's _FAST_METHODS) ----------------
_T = sys.modules["pyautodiff.tensor"]  # (ad.tensor is the function)
FAST = {name: row for cls, name, *row in _T._FAST_METHODS if cls is ad.Tensor}
ONE_ARG = (0, 7, 8)  # the kinds called with self alone: unary ops, shape, item
PYTHON_METHODS = os.environ.get("PYAUTODIFF_PYTHON_METHODS", "") not in ("", "0")


def fast_form(name):
    """The method as installed (a property's getter for the shape row)."""
    m = vars(ad.Tensor)[name]
    return m.fget if isinstance(m, property) else m


def python_form(name):
    m = fast_form(name)
    return m if PYTHON_METHODS else m.__wrapped__


def outcome(fn, *args, **kw):
    """(dtype, shape, bits) of a call's result, or (error class, message)."""
    try:
        r = fn(*args, **kw)
    except Exception as e:
        return type(e), str(e)
    if not isinstance(r, ad.Tensor):
        return "not a tensor", r
    if r.numel() > 1 << 24:  # a broadcast view (expand(2**53)): its layout, not its bits
        return type(r), r.dtype, r.shape, r.strides
    return type(r), r.dtype, r.shape, bits(r.numpy()).tobytes()


def test_fast_methods_are_installed_and_read_as_the_python_methods():
    assert {"__add__", "__rtruediv__", "__neg__", "exp", "tanh", "relu"} <= set(FAST)
    for name in FAST:
        m = fast_form(name)
        if PYTHON_METHODS:
            assert inspect.isfunction(m), name
            continue
        assert lib._ad_install_fast_methods() == 0  # installed at import: a no-op now
        f = m.__wrapped__
        assert inspect.isfunction(f) and f.__name__ == name, name
        assert m.__doc__ == f.__doc__ and m.__qualname__ == f.__qualname__ == "Tensor." + name
        assert m.__module__ == f.__module__ and m.__annotations__ == f.__annotations__
        assert inspect.signature(m) == inspect.signature(f)
        if isinstance(vars(ad.Tensor)[name], property):  # the property's doc is the getter's
            assert vars(ad.Tensor)[name].__doc__ == f.__doc__
            continue
        t = ad.tensor([1.0])
        assert inspect.signature(getattr(t, name)) == inspect.signature(f.__get__(t))
        assert pickle.loads(pickle.dumps(m)) is m
        assert ad.Var.__dict__.get(name) is None  # Var inherits them


# operands of every kind the methods take: what the quick calls do, and what
# they decline (other shapes, dtypes and layouts, tracked operands, numpy
# scalars, ints past 2**53, bools, lists, wrong types)
def _operands():
    f32 = ad.from_numpy(sample("float32", (4, 4), 1))
    yield from [
        ad.from_numpy(sample("float32", (4, 4), 2)), ad.from_numpy(sample("float32", (4,), 3)),
        ad.from_numpy(sample("float64", (4, 4), 4)), ad.from_numpy(sample("int64", (4, 4), 5)),
        f32.T, ad.Var(sample("float32", (4, 4), 6)), 2.5, -3, 2 ** 53, 2 ** 53 + 1, 2 ** 70,
        True, np.float32(1.5), np.int64(7), [1.0, 2.0, 3.0, 4.0], "text", None, float("nan"),
    ]


SELVES = [("float32", (4, 4)), ("float64", (4, 4)), ("int64", (4, 4)), ("bool", (4, 4)),
          ("float32", ()), ("float32", (1000,)), ("float32", (200000,))]


@pytest.mark.parametrize("dtype, shape", SELVES)
def test_fast_methods_give_the_python_methods_results_and_errors(dtype, shape):
    n = ad.live_tensors()
    selves = [ad.from_numpy(sample(dtype, shape, 7))]
    if shape == (4, 4):
        selves.append(ad.Var(sample("float32", shape, 8)) if dtype == "float32" else selves[0].T)
    for x in selves:
        for name, (kind, *_) in FAST.items():
            m, f = fast_form(name), python_form(name)
            if kind in ONE_ARG:
                assert outcome(m, x) == outcome(f, x), name
                continue
            for o in _operands():
                if shape == (200000,) and isinstance(o, ad.Tensor):
                    continue  # the shapes differ: both raise (checked at (4, 4))
                got, want = outcome(m, x, o), outcome(f, x, o)
                if got != want:
                    pytest.fail(f"{name}({dtype}{shape}, {o!r}): {got[:2]} vs {want[:2]}")
    del x, selves
    assert ad.live_tensors() == n


def test_fast_methods_hand_everything_else_to_the_python_methods():
    x = ad.from_numpy(sample("float32", (3,), 1))
    for name, (kind, *_) in FAST.items():
        m, f = fast_form(name), python_form(name)
        calls = [(), (1,), (1, 2)] if kind in ONE_ARG else [(), (1, x), (x,), (x, x, x)]
        for args in calls:  # a self that is no tensor, wrong argument counts
            assert outcome(m, *args) == outcome(f, *args), (name, args)
        if kind == 1:  # keywords go to the Python method
            assert outcome(m, x, o=x) == outcome(f, x, o=x)
    # released tensors, as self or as the other operand: their slot still holds
    # the freed handle, which no method may reach (AddressSanitizer caught it)
    released = [ad.from_numpy(sample("float32", (3,), i)) for i in range(20)]
    released.append(ad.Var([1.0, 2.0, 3.0]))
    layout = {3: [()], 4: [(0, 0)], 5: [(3,), ((3,),)], 6: [(0,), (slice(1, None),)]}
    for t in released:
        t.__del__()
        for name, (kind, *_) in FAST.items():
            m = fast_form(name)
            calls = ([(t,)] if kind in ONE_ARG else [(t, *a) for a in layout[kind]] if kind in layout
                     else [(t, x), (x, t)] if name == "__matmul__"  # a number: no operand
                     else [(t, x), (x, t), (t, 2.0)])
            for args in calls:
                with pytest.raises(_T._ReleasedError):
                    m(*args)

    class Sub(ad.Tensor):  # results are Tensors, as from the Python methods
        __slots__ = ()

    s = Sub([1.0, 2.0, 3.0])
    for r in (s + x, x * s, s.exp(), -s, 2.0 - s, s / 2):
        assert type(r) is ad.Tensor
    w = ad.Var([1.0, 2.0, 3.0])  # tracked: recorded as before
    g = ((w * x + 1.0) / 2.0 - w.exp()).sum().backward()
    np.testing.assert_allclose(g[w].numpy(), x.numpy() / 2 - np.exp([1.0, 2.0, 3.0]), rtol=1e-6)


def test_fast_methods_keep_reference_counts():
    x, y = ad.from_numpy(sample("float32", (8,), 1)), ad.from_numpy(sample("float32", (8,), 2))
    before = (sys.getrefcount(x), sys.getrefcount(y), sys.getrefcount(x._h), ad.live_tensors())
    for _ in range(1000):
        x + y, x * 2.0, 3 - x, x.exp(), -x, x + [1.0] * 8
        with pytest.raises(ad.ShapeError):
            x + ad.zeros(3)
    assert (sys.getrefcount(x), sys.getrefcount(y), sys.getrefcount(x._h),
            ad.live_tensors()) == before


def test_python_methods_path_passes_the_quick_call_tests():
    # the Python methods stay the reference: this file passes with them alone
    env = dict(os.environ, PYAUTODIFF_PYTHON_METHODS="1")
    if PYTHON_METHODS:
        pytest.skip("running on the Python methods already")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-k", "not python_methods_path", os.path.abspath(__file__)],
                       env=env, capture_output=True, text=True, timeout=600,
                       cwd=os.path.dirname(os.path.abspath(__file__)))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


LAYOUT_CALLS = (  # (method, arguments), each also through the Python method
    ("t", ()), ("transpose", (0, 1)), ("transpose", (-1, 0)), ("transpose", (1, 1)),
    ("reshape", (-1,)), ("reshape", ((2, -1),)), ("reshape", ([3, 2, 2],)), ("reshape", (12, 1)),
    ("reshape", ((),)), ("view", (4, 3)), ("permute", (1, 0)), ("permute", ((1, 0),)),
    ("__getitem__", (0,)), ("__getitem__", (-1,)), ("__getitem__", (slice(1, None),)),
    ("__getitem__", (slice(None, None, -2),)), ("__getitem__", (slice(5, 2),)),
    ("__getitem__", (slice(None),)), ("__getitem__", ((slice(None), 1),)),
    ("__getitem__", ((1, slice(1, 3)),)), ("__getitem__", ((-1, -1),)),
    ("__getitem__", ((slice(None, None, -1), slice(None)),)), ("__getitem__", ((2,),)),
    ("reshape", ((4, 1, 3),)), ("reshape", ((1, 4, 3, 1),)), ("reshape", (1, 12)),
    # what the quick forms decline: errors, numpy ints, bools, tuples, other keys
    ("t", (1,)), ("transpose", (0, 2)), ("transpose", (0, np.int64(1))), ("reshape", (5,)),
    ("reshape", (2, "a")), ("reshape", (2**63,)), ("permute", (0, 0)), ("permute", (0,)),
    ("__getitem__", (4,)), ("__getitem__", (-5,)), ("__getitem__", (np.int64(1),)),
    ("__getitem__", (True,)), ("__getitem__", ((1, 2, 0),)), ("__getitem__", (slice(0, 4, 0),)),
    ("__getitem__", (None,)), ("__getitem__", ([0, 2],)), ("__getitem__", (2**70,)),
    ("__getitem__", ((None, 1),)), ("__getitem__", ((Ellipsis, 1),)), ("__getitem__", ((),)),
    ("__getitem__", ((1, [0, 1]),)), ("__getitem__", ((0, 3),)),
    ("__getitem__", ((slice(None), None),)), ("__getitem__", ((None, None, 1),)),
    ("__getitem__", ((1, None),)), ("__getitem__", ((None, slice(1, 3), None, 0, None),)),
    ("__getitem__", ((slice(0, 0), None),)), ("__getitem__", ((None,) * 17,)),
    ("__getitem__", ((0, 0, 0),)), ("__getitem__", ((None, 0, 0, 0),)),
    ("expand", (4, 3)), ("expand", ((2, 4, 3),)), ("expand", ([1, 4, 3],)),
    ("broadcast_to", (2, 4, 3)), ("broadcast_to", ((4, 3),)), ("expand", (0, 4, 3)),
    # expand's -1 and broadcasting errors: the Python method
    ("expand", (-1, 3)), ("expand", (2, -1, -1)), ("expand", (-1, 4, 3)), ("expand", (5, 3)),
    ("broadcast_to", (3,)), ("broadcast_to", (4, -1)), ("broadcast_to", ((4, "a"),)),
)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "1-d", "0-d"])
def test_layout_fast_methods_give_the_python_methods_views(layout):
    """t(), transpose, reshape / view, permute, broadcast_to / expand and
    t[key] for ints, slices and None in C (ad_view_quick) give the Python methods'
    results, errors included,
    and the same recorded gradients; a reshape of a strided tensor that is
    more than dropping or adding dims of size 1 (it may copy) goes to the
    Python method; t[:] is t itself."""
    base = sample("float32", (4, 3), 2)
    x = {"contiguous": lambda: ad.from_numpy(base), "transposed": lambda: ad.from_numpy(base.T.copy()).t(),
         "1-d": lambda: ad.from_numpy(base.ravel()), "0-d": lambda: ad.tensor(2.5)}[layout]()
    for name, args in LAYOUT_CALLS:
        m, f = vars(ad.Tensor)[name], python_form(name)
        got, want = outcome(m, x, *args), outcome(f, x, *args)
        assert got == want, (layout, name, args, got[:2], want[:2])
        if not isinstance(got[0], type) or not issubclass(got[0], Exception):
            r = m(x, *args)
            assert np.asarray(r).strides == np.asarray(f(x, *args)).strides, (name, args)
    assert x[:] is x if x.ndim else True
    w = ad.Var(base)  # tracked: the same nodes and gradients as the Python methods
    for form in (lambda n: vars(ad.Tensor)[n], python_form):
        y = (form("t")(w) * 2.0).sum() + form("__getitem__")(w, 1).sum() + \
            form("reshape")(w, (2, 6))[1].sum() + form("__getitem__")(w, slice(None, None, 2)).sum() + \
            form("__getitem__")(form("t")(w), (1, slice(1, None))).sum()
        g = y.backward()[w].numpy()
        want = np.full((4, 3), 2.0, np.float32)
        want[1] += 1
        want[2:] += 1
        want[::2] += 1
        want[1:, 1] += 1
        np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "uint8", "bool"])
def test_shape_and_item_read_as_numpy(dtype):
    """The shape property and item() in C give numpy's tuple and Python
    scalar, of numpy's type, for every dtype, rank and view offset (16 dims
    the most); item() of more than one element raises as the Python method."""
    big = sample(dtype, (3, 4), 9)
    tb = ad.from_numpy(big)
    for i, j in ((0, 0), (2, 3), (1, 2)):
        for t, want in ((tb[i, j], big[i, j]), (tb.t()[j, i], big[i, j]),
                        (tb[i:i + 1, j:j + 1], big[i:i + 1, j:j + 1])):
            got = t.item()
            assert type(got) is type(want.item()) and got == want.item(), (dtype, i, j)
            assert fast_form("item")(t) == python_form("item")(t)
    for shape in [(), (1,), (1, 1, 1), (3, 4), (2, 1, 3, 1), (1,) * 16, (0, 5)]:
        t = ad.from_numpy(sample(dtype, shape, 3))
        assert type(t.shape) is tuple and t.shape == shape
        assert python_form("shape")(t) == shape and t.T.shape == shape[::-1]
        if len(shape) and np.prod(shape) != 1:
            assert outcome(fast_form("item"), t) == outcome(python_form("item"), t)
            with pytest.raises(ad.InvalidArgumentError, match="item: only a tensor with one"):
                t.item()


def python_calls(fn):
    """The code objects of the Python functions fn() calls."""
    seen = set()

    def prof(frame, event, arg):
        if event == "call":
            seen.add(frame.f_code)

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def _call_cases():
    """(op, inputs, iargs, fargs) for tensor._call: valid calls, errors, and
    what its C form hands to the Python function (cffi arrays, bools and
    numpy ints as arguments, subclasses, too many inputs)."""
    x = ad.from_numpy(sample("float32", (4, 3), 1))
    y = ad.from_numpy(sample("float32", (4, 3), 2))
    i = ad.tensor([0, 2, 1, 0])
    w = ad.Var(sample("float32", (4, 3), 3))
    L = lib
    return [
        (L.AD_OP_SOFTMAX, (x,), (1,), ()), (L.AD_OP_SOFTMAX, [w], [-1], []),
        (L.AD_OP_SOFTMAX, (x,), (2,), ()), (L.AD_OP_SOFTMAX, (x,), (), ()),
        (L.AD_OP_SUM, (x,), (0, 1), ()), (L.AD_OP_SUM, (w,), (1, 0), ()),
        (L.AD_OP_CAT, [x, y, w], [0, 4, 4, 4], ()), (L.AD_OP_CAT, (x, y), (1, 3, 3), ()),
        (L.AD_OP_CAT, (x, ad.ones(5)), (0, 4, 5), ()), (L.AD_OP_CAT, (x,) * 9, (0,) + (4,) * 9, ()),
        (L.AD_OP_RESHAPE, (x,), (3, 4), ()), (L.AD_OP_RESHAPE, (x.t(),), [12], ()),
        (L.AD_OP_RESHAPE, (x,), (5, -1), ()), (L.AD_OP_WHERE, (x > y, x, w), (), ()),
        (L.AD_OP_CROSS_ENTROPY, (x, i), (1,), ()), (L.AD_OP_CROSS_ENTROPY, (x, i + 5), (1,), ()),
        (L.AD_OP_ADD_SCALAR, (x,), (), (2.5,)), (L.AD_OP_ADD_SCALAR, (x,), (), [3]),
        (L.AD_OP_ADD_SCALAR, (x,), (), (2 ** 2000,)), (L.AD_OP_ADD_SCALAR, (x,), (), ("a",)),
        (L.AD_OP_SOFTMAX, (x,), (True,), ()), (L.AD_OP_SOFTMAX, (x,), (np.int64(1),), ()),
        (L.AD_OP_SOFTMAX, (x,), (2 ** 70,), ()), (L.AD_OP_SOFTMAX, (x,), ffi.new("int64_t[1]", [1]), ()),
        (L.AD_OP_SOFTMAX, (np.ones(3),), (0,), ()), (L.AD_OP_SOFTMAX, x, (0,), ()),
        (L.AD_OP_MATMUL, (x, y.t()), (), ()), (L.AD_OP_MATMUL, (x, y), (), ()),
        (10 ** 6, (x,), (), ()), (-1, (x,), (), ()), (2 ** 40, (x,), (), ()),
        (L.AD_OP_LAYER_NORM, (x,), (1,), (1e-5,)),
    ]


def test_call_in_c_gives_the_python_functions_results_and_errors():
    """tensor._call, the entry of every op without a quick form, converts its
    arguments in C: the Python function's results (bits, recorded nodes,
    gradients) and errors, whatever it declines going to that function."""
    fast = _T._call
    slow = fast if PYTHON_METHODS else fast.__wrapped__
    if not PYTHON_METHODS:
        assert inspect.isfunction(slow) and slow.__name__ == "_call"
        assert ad.nn.functional._call is fast and ad.indexing._call is fast
    n = ad.live_tensors()
    for case in _call_cases():
        got, want = outcome(fast, *case), outcome(slow, *case)
        assert got == want, (case, got[:2], want[:2])
    if not PYTHON_METHODS:  # a valid call, or a failing one, runs no Python frame of _call
        x = ad.from_numpy(sample("float32", (4, 3), 1))
        assert slow.__code__ not in python_calls(lambda: fast(lib.AD_OP_SUM, (x,), (0, 1)))
        assert slow.__code__ not in python_calls(lambda: fast(lib.AD_OP_SOFTMAX, (x,), (1,)))
        assert slow.__code__ not in python_calls(lambda: outcome(fast, lib.AD_OP_SOFTMAX, (x,), (5,)))
        assert slow.__code__ in python_calls(lambda: fast(lib.AD_OP_SOFTMAX, (x,), (np.int64(1),)))
        del x
    w = ad.Var(sample("float32", (4, 3), 4))
    for f in (fast, slow):  # tracked: the same nodes and gradients
        y = f(lib.AD_OP_SOFTMAX, (w * 2.0,), (1,)) * ad.from_numpy(sample("float32", (4, 3), 5))
        g = f(lib.AD_OP_SUM, (y,), (0,)).backward()[w].numpy().copy()
        if f is fast:
            first = g
    assert bits(first).tobytes() == bits(g).tobytes()
    del w, y, case
    assert ad.live_tensors() == n


def test_ordinary_calls_in_c_raise_once():
    """When a fast method's quick call declines, it makes the Python method's
    ordinary call itself and raises that call's error: a failure is not met
    twice (the allocation-failure hook fails one allocation only)."""
    big = ad.from_numpy(sample("float32", (300000,), 1))
    other = ad.from_numpy(sample("float32", (300000,), 2))
    if not PYTHON_METHODS:  # past the quick calls' sizes: no Python frame of the methods
        for name, call in (("exp", lambda: big.exp()), ("__add__", lambda: big + other),
                           ("__mul__", lambda: big * 2.0), ("__rsub__", lambda: 2.0 - big)):
            assert python_form(name).__code__ not in python_calls(call), name
    for call in (lambda: big.exp(), lambda: big + other, lambda: big * 2.0, lambda: 2.0 - big,
                 lambda: big.softmax(0), lambda: ad.cat([big, other])):
        lib.ad_testing_fail_alloc_after(1)
        try:
            with pytest.raises(ad.OutOfMemoryError):
                call()
        finally:
            lib.ad_testing_fail_alloc_after(0)
        call()  # and then it works


# ---- the buffer protocol of Tensor and Var (bindings/build_cffi.py, _ad_install_buffer) ----
class _PyBuffer(__import__("ctypes").Structure):
    import ctypes as _c
    _fields_ = [("buf", _c.c_void_p), ("obj", _c.py_object), ("len", _c.c_ssize_t),
                ("itemsize", _c.c_ssize_t), ("readonly", _c.c_int), ("ndim", _c.c_int),
                ("format", _c.c_char_p), ("shape", _c.POINTER(_c.c_ssize_t)),
                ("strides", _c.POINTER(_c.c_ssize_t)), ("suboffsets", _c.c_void_p),
                ("internal", _c.c_void_p)]


def _get_buffer(obj, flags):
    """PyObject_GetBuffer(obj, flags) as a C consumer makes it: (ndim, shape,
    strides, format, itemsize, len, readonly), the view released; or the
    exception it raised."""
    import ctypes
    api = ctypes.pythonapi
    api.PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
    api.PyBuffer_Release.argtypes = [ctypes.POINTER(_PyBuffer)]
    view = _PyBuffer()
    try:
        api.PyObject_GetBuffer(obj, ctypes.byref(view), flags)
    except Exception as e:  # noqa: BLE001 - the exporter's error, as raised
        return e
    try:
        nd = view.ndim
        return (nd, tuple(view.shape[:nd]) if view.shape else None,
                tuple(view.strides[:nd]) if view.strides else None, view.format,
                view.itemsize, view.len, view.readonly, view.buf)
    finally:
        api.PyBuffer_Release(ctypes.byref(view))


def _buffer_layouts():
    base = ad.from_numpy(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    yield "contiguous", base
    yield "transposed", base.permute(2, 1, 0)
    yield "sliced", base[:, 1:, ::2]
    yield "reversed", base[:, ::-1]
    yield "broadcast", ad.from_numpy(np.arange(4.0)).broadcast_to((3, 4))
    yield "0-d", ad.tensor(2.5)
    yield "empty", ad.zeros((0, 3))
    for dt in DTYPES:
        yield dt, ad.from_numpy(sample(dt, (2, 5), 3)).t()


@pytest.mark.parametrize("name", [n for n, _ in _buffer_layouts()])
def test_numpy_view_matches_the_array_interface(name):
    # np.asarray(t) and t.numpy() (the buffer, or _ArrayView without it) read
    # the tensor's memory in place with _ArrayView's dtype, shape and strides
    t = dict(_buffer_layouts())[name]
    ref = np.asarray(_T._ArrayView(t))
    for a in (np.asarray(t), t.numpy(), np.array(t, copy=False)):
        assert (a.dtype, a.shape, a.strides) == (ref.dtype, ref.shape, ref.strides)
        assert a.dtype == np.dtype(t.dtype.name) and a.dtype.char == np.dtype(t.dtype.name).char
        assert a.__array_interface__["data"] == ref.__array_interface__["data"]
        assert not a.flags.writeable
        assert bits(a).tolist() == bits(ref).tolist() and a.tolist() == t.tolist()
    copied = np.array(t)
    assert copied.flags.writeable and not np.shares_memory(copied, ref) or not ref.size
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float64), ref.astype(np.float64))


def test_numpy_view_keeps_the_tensor_alive_and_sees_var_writes():
    v = ad.Var(np.arange(6.0).reshape(2, 3))
    before = (sys.getrefcount(v), ad.live_tensors())
    arrays = [np.asarray(v), v.numpy(), v.t().numpy()]
    del arrays
    assert (sys.getrefcount(v), ad.live_tensors()) == before
    a, at = np.asarray(v), np.asarray(v.t())
    v.set(ad.tensor(np.full((2, 3), 7.0)))
    assert a.tolist() == [[7.0] * 3] * 2 and at.tolist() == [[7.0] * 2] * 3
    t = ad.tensor([1.0, 2.0, 3.0]) * 2.0
    a = np.asarray(t[::2])
    del t
    import gc
    gc.collect()
    assert a.tolist() == [2.0, 6.0]


@pytest.mark.skipif(PYTHON_METHODS, reason="the buffer slots are installed with the C methods")
def test_buffer_requests_a_c_consumer_makes():
    import ctypes
    ND, STRIDES, FORMAT, WRITABLE = 0x8, 0x18, 0x4, 0x1
    C_CONTIG, F_CONTIG, ANY_CONTIG = 0x38, 0x58, 0x98
    x = ad.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    got = _get_buffer(x, STRIDES | FORMAT)
    assert got[:7] == (2, (2, 3), (12, 4), b"f", 4, 24, 1)
    assert got[7] == np.asarray(x).__array_interface__["data"][0]
    assert _get_buffer(x, 0)[:7] == (1, None, None, None, 4, 24, 1)  # PyBUF_SIMPLE: bytes
    assert _get_buffer(x, ND)[:3] == (2, (2, 3), None)
    assert _get_buffer(x, C_CONTIG)[1:3] == ((2, 3), (12, 4))
    xt = x.t()
    assert _get_buffer(xt, F_CONTIG)[1:3] == ((3, 2), (4, 12))
    assert _get_buffer(xt, ANY_CONTIG)[1:3] == ((3, 2), (4, 12))
    for obj, flags, words in ((x, STRIDES | WRITABLE, "read-only"), (xt, C_CONTIG, "C-contiguous"),
                              (xt, ND, "no strides"), (xt, 0, "no strides"),
                              (x, F_CONTIG, "Fortran-contiguous"),
                              (x[:, ::2], ANY_CONTIG, "not contiguous")):
        e = _get_buffer(obj, flags)
        assert isinstance(e, BufferError) and words in str(e), (flags, e)
    # a 1-row view is both; size-0 and size-1 dims take any stride
    assert _get_buffer(x[:1], C_CONTIG)[1] == (1, 3) and _get_buffer(x[:1].t(), C_CONTIG)[1] == (3, 1)
    assert _get_buffer(ad.zeros((0, 3)).t(), C_CONTIG)[5] == 0
    for empty in (ad.zeros((3, 0)).t(), ad.zeros((2, 0, 3))[:, :, ::2]):  # strides never matter
        for flags in (C_CONTIG, F_CONTIG, ND, 0):
            assert _get_buffer(empty, flags)[5] == 0, (empty.shape, flags)
    m = memoryview(xt)
    assert (m.format, m.shape, m.strides, m.readonly) == ("f", (3, 2), (4, 12), True)
    assert bytes(xt) == np.ascontiguousarray(np.asarray(xt)).tobytes()
    with pytest.raises(TypeError):
        (ctypes.c_char * 24).from_buffer(x)  # a writable export is refused
    for dt, fmt in zip(DTYPES, ("f", "d", "l", "i", "B", "?")):
        assert memoryview(ad.from_numpy(sample(dt, (3,), 1))).format == fmt
    refs = sys.getrefcount(x)
    for _ in range(100):
        _get_buffer(x, STRIDES | FORMAT), _get_buffer(xt, C_CONTIG)
    assert sys.getrefcount(x) == refs


@pytest.mark.skipif(PYTHON_METHODS, reason="the buffer slots are installed with the C methods")
def test_buffer_of_subclasses_and_released_tensors():
    class Sub(ad.Tensor):
        pass

    s = Sub([1.0, 2.0])
    assert memoryview(s).tolist() == [1.0, 2.0] and np.asarray(s).base.obj is s
    v = ad.Var([3.0])
    assert memoryview(v).tolist() == [3.0]
    for t in (ad.tensor([1.0]), Sub([1.0]), ad.Var([1.0])):
        t.__del__()
        with pytest.raises(ad.GraphError, match="released"):  # never a read of its memory
            memoryview(t)
    blank = ad.Tensor.__new__(ad.Tensor)  # never initialised: no handle
    for call in (lambda: np.asarray(blank), blank.numpy, blank.tolist):
        with pytest.raises(AttributeError, match="_h"):
            call()


@pytest.mark.skipif(PYTHON_METHODS, reason="the buffer slots are installed with the C methods")
def test_buffer_views_hold_the_native_tensor():
    """A view holds its own reference to the native tensor: an explicit
    __del__ or a second __init__ under a live view leaves the memory it reads
    alive, and the reference ends with the last view (the released class
    still releases the view)."""
    import gc

    class Sub(ad.Tensor):
        pass

    for make in (lambda: ad.tensor([1.0, 2.0]), lambda: Sub([1.0, 2.0]),
                 lambda: ad.Var([1.0, 2.0]), lambda: ad.tensor([[1.0], [2.0]]).t()):
        gc.collect()
        live = ad.live_tensors()
        t = make()
        m, a = memoryview(t), np.asarray(t)
        t.__del__()
        assert ad.live_tensors() == live + 1
        assert m.tolist() in ([1.0, 2.0], [[1.0, 2.0]]) and a.tolist() == m.tolist()
        m.release()
        del a
        assert ad.live_tensors() == live  # the views' reference ended with them
        del t
    t = ad.tensor([1.0, 2.0])
    a = np.asarray(t)
    t.__init__([5.0, 6.0, 7.0])  # frees the handle the view was taken from
    assert a.tolist() == [1.0, 2.0] and t.tolist() == [5.0, 6.0, 7.0]


# ---- from_numpy's C form (kind 10): the copy of a writable C-contiguous ndarray ----------
class _Sub(np.ndarray):
    pass


def _from_numpy_inputs():
    for dt in DTYPES:
        yield dt, sample(dt, (3, 4), 2)
    yield "0-d", np.array(2.5, np.float32)
    yield "1 element", np.array([7], np.int64)
    yield "int64 as q", np.arange(5, dtype=np.longlong)
    yield "large", np.arange(1 << 15, dtype=np.float64)  # past the lock's 64 KiB
    yield "transposed", sample("float32", (3, 4), 3).T
    yield "sliced", sample("float64", (6,), 3)[::2]
    yield "read-only", np.frombuffer(np.arange(4, dtype=np.float32).tobytes(), np.float32)
    yield "big-endian", np.arange(3, dtype=">f4")
    yield "float16", np.arange(3, dtype=np.float16)
    yield "uint64", np.arange(3, dtype=np.uint64)
    yield "empty", np.zeros((0, 3), np.float32)
    yield "subclass", np.arange(4.0).view(_Sub)
    yield "list", [1.0, 2.0]
    yield "object", np.array([object()], dtype=object)


@pytest.mark.parametrize("name", [n for n, _ in _from_numpy_inputs()])
def test_from_numpy_fast_form_is_the_python_function(name):
    a = dict(_from_numpy_inputs())[name]
    fast = vars(_T)["from_numpy"]
    slow = getattr(fast, "__wrapped__", fast)
    if not PYTHON_METHODS:
        assert fast is not slow and ad.from_numpy is fast
    got = []
    for f in (fast, slow):
        try:
            t = f(a)
        except Exception as e:  # noqa: BLE001 - both must raise alike
            got.append((type(e), str(e)))
            continue
        arr = np.asarray(a)
        shared = arr.size > 0 and np.shares_memory(t.numpy(), arr)
        got.append((t.dtype, t.shape, bits(t.numpy()).tobytes(), shared))
    assert got[0] == got[1]
    if name in DTYPES:  # copied: the array's later writes do not reach the tensor
        t = fast(a)
        before = t.tolist()
        a.reshape(-1)[0] = a.reshape(-1)[1]
        assert t.tolist() == before and got[0][3] is False


def test_from_numpy_fast_form_keeps_counts_and_takes_keywords():
    a = sample("float32", (4, 4), 1)
    fast = vars(_T)["from_numpy"]
    before = (sys.getrefcount(a), ad.live_tensors())
    for _ in range(200):
        fast(a)
    assert (sys.getrefcount(a), ad.live_tensors()) == before
    # keywords go to the Python function
    assert fast(a, dtype=ad.float64).dtype == ad.float64
    t = fast(a, copy=False)
    assert np.shares_memory(t.numpy(), a)
    del t
    with pytest.raises(TypeError):
        fast()
    with pytest.raises(TypeError):
        fast(a, None, None)  # copy is keyword-only, as in the Python function
    # a failed copy raises as the Python path's _result raises it
    for n in (1, 2):  # the tensor header, then the storage
        lib.ad_testing_fail_alloc_after(n)
        try:
            with pytest.raises(ad.OutOfMemoryError):
                fast(a)
        finally:
            lib.ad_testing_fail_alloc_after(0)
    assert (sys.getrefcount(a), ad.live_tensors()) == before


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_comparisons_with_numbers_at_ties(dtype):
    # the C comparisons make the number a 0-d tensor of the float tensor's
    # dtype, as _full_like_scalar does: ties, signed zeros, NaN, inf and a
    # number that rounds in float32 must compare as numpy's weak scalars do
    x = np.array([1.0, 2.0, 3.0, np.nan, -0.0, np.inf, 0.1, 2.0 ** 53], dtype)
    t = ad.from_numpy(x)
    numbers = [2.0, 2, 0.0, -0.0, float("nan"), float("inf"), -float("inf"), 0.1, 2.5, 3,
               2 ** 53, 2 ** 53 + 1, 1e300 if dtype == "float64" else 1e30]
    for name, sym in _T._COMPARISON_SYMBOL.items():
        dunder = f"__{name}__"
        m, f = fast_form(dunder), python_form(dunder)
        for s in numbers:
            got, want = m(t, s).numpy(), f(t, s).numpy()
            with np.errstate(over="ignore"):
                ref = getattr(np, {"eq": "equal", "ne": "not_equal", "lt": "less",
                                   "le": "less_equal", "gt": "greater",
                                   "ge": "greater_equal"}[name])(x, np.dtype(dtype).type(s))
            assert got.dtype == np.bool_ and got.tolist() == want.tolist() == ref.tolist(), \
                (dunder, s)
