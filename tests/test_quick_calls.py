"""The quick calls (pyautodiff.h, ABI 1.5): ad_binary_quick, ad_unary_quick,
ad_scalar_quick and ad_tensor_release_quick.  They must give the ordinary
call's result to the bit, record the same node, decline (NULL / 0, nothing
changed) everything else, and hold up under threads.  The Tensor operators
take them first, so the rest of the suite covers them too; these tests pin
down what they accept and what they leave to the ordinary path."""
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
    ]
    big = ad.ones(1 << 18)  # the pool's and the GIL's business: ordinary path
    cases += [(lib.ad_binary_quick, add, big, big), (lib.ad_unary_quick, exp, big),
              (lib.ad_scalar_quick, lib.AD_OP_MUL_SCALAR, big, 2.0)]
    n = ad.live_tensors()
    for fn, op, *args in cases:
        assert fn(op, *(x._h for x in args[:2] if isinstance(x, ad.Tensor)),
                  *(x for x in args if not isinstance(x, ad.Tensor))) == ffi.NULL, (fn, op)
    assert ad.live_tensors() == n
    assert lib.ad_binary_quick(add, ffi.NULL, a._h) == ffi.NULL
    assert lib.ad_unary_quick(exp, ffi.NULL) == ffi.NULL
    assert lib.ad_scalar_quick(lib.AD_OP_ADD_SCALAR, ffi.NULL, 1.0) == ffi.NULL
    assert lib.ad_tensor_release_quick(ffi.NULL) == 1


def test_declines_in_anomaly_mode_and_under_the_failure_hook():
    v = ad.Var(sample("float32", (3,), 1))
    with ad.detect_anomaly():
        assert lib.ad_binary_quick(lib.AD_OP_MUL, v._h, v._h) == ffi.NULL
        assert (v * v).op == "mul"  # the ordinary path records the site
    lib.ad_testing_fail_alloc_after(1)
    try:
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
    saved = ad.memory_stats()["saved_bytes"]
    x = v * v  # its node keeps v for backward
    assert ad.memory_stats()["saved_bytes"] > saved
    del x  # the quick release takes the node's saved bytes back too
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
