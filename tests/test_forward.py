"""Forward values of every core op against numpy, for each dtype where the op
applies, on contiguous, transposed, sliced and broadcast inputs, with random
shapes (numpy default_rng with fixed seeds)."""
import zlib

import numpy as np
import pytest

import pyautodiff as ad

FLOATS = ["float32", "float64"]
INTS = ["int64", "int32", "uint8"]
NUMERIC = FLOATS + INTS
ALL = NUMERIC + ["bool"]
LAYOUTS = ["contiguous", "transposed", "sliced", "broadcast"]


def values(rng, shape, dtype, positive=False):
    """Random numpy values of a dtype (small ints so no overflow anywhere)."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in FLOATS:
        a = rng.standard_normal(shape)
        if positive:
            a = np.abs(a) + 0.1
        return a.astype(dtype)
    lo = 0 if (positive or dtype == "uint8") else -5
    return rng.integers(lo + (1 if positive else 0), 6, size=shape).astype(dtype)


def present(rng, shape, dtype, layout, positive=False):
    """(ad tensor, numpy array) with equal values; the ad tensor is a view of
    the given layout over a native base tensor."""
    shape = tuple(shape)
    if layout == "contiguous":
        a = values(rng, shape, dtype, positive)
        return ad.tensor(a, dtype=dtype), a
    if layout == "transposed":
        assert len(shape) >= 2
        a = values(rng, shape, dtype, positive)
        base = ad.tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2)), dtype=dtype)
        t = base.t()
        assert not t.is_contiguous or min(shape[-2:]) <= 1
        return t, a
    if layout == "sliced":
        a = values(rng, shape, dtype, positive)
        big = np.zeros(shape[:-1] + (2 * shape[-1],), dtype=dtype) if shape else None
        big[..., ::2] = a
        return ad.tensor(big, dtype=dtype)[..., ::2], a
    if layout == "broadcast":
        a0 = values(rng, (1,) + shape[1:], dtype, positive)
        t = ad.tensor(a0, dtype=dtype).broadcast_to(shape)
        return t, np.broadcast_to(a0, shape)
    raise AssertionError(layout)


def close(t, expected, dtype=None, rtol=None, atol=None):
    got = t.numpy()
    expected = np.asarray(expected)
    assert t.shape == expected.shape, (t.shape, expected.shape)
    dt = dtype or expected.dtype.name
    assert t.dtype == dt, (t.dtype, dt)
    if dt == "float32":
        np.testing.assert_allclose(got, expected, rtol=rtol or 1e-5, atol=atol or 1e-6)
    elif dt == "float64":
        np.testing.assert_allclose(got, expected, rtol=rtol or 1e-12, atol=atol or 1e-12)
    else:
        np.testing.assert_array_equal(got, expected)


def random_shape(rng, ndim, lo=1, hi=5):
    return tuple(int(x) for x in rng.integers(lo, hi, size=ndim))


# ---- elementwise binary -----------------------------------------------------------
BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary(op, dtype, layout):
    if op == "div" and dtype not in FLOATS:
        pytest.skip("div is float only (integer div is a DTypeError, see test_errors)")
    rng = np.random.default_rng(zlib.crc32(f"{op}{dtype}{layout}".encode()))
    f_ad, f_np = BINARY[op]
    for _ in range(3):
        shape = random_shape(rng, int(rng.integers(2, 4)))
        # div: both operands nonzero, so the reversed order is checked as well
        x, xn = present(rng, shape, dtype, layout, positive=(op == "div"))
        y, yn = present(rng, shape, dtype, "contiguous", positive=(op == "div"))
        close(f_ad(x, y), f_np(xn, yn).astype(dtype))
        close(f_ad(y, x), f_np(yn, xn).astype(dtype))


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("shapes", [((2, 3), (3,)), ((2, 1, 3), (4, 1)), ((1,), (2, 2)),
                                    ((), (2, 3)), ((3, 1), (1, 3)), ((0, 3), (1, 3))])
def test_binary_broadcasting(dtype, shapes):
    rng = np.random.default_rng(7)
    a, b = values(rng, shapes[0], dtype), values(rng, shapes[1], dtype, positive=True)
    for name, (f_ad, f_np) in BINARY.items():
        if name == "div" and dtype not in FLOATS:
            continue
        close(f_ad(ad.tensor(a, dtype=dtype), ad.tensor(b, dtype=dtype)),
              f_np(a, b).astype(dtype))


# ---- elementwise unary ----------------------------------------------------------------
UNARY = {
    "neg": (lambda t: -t, lambda a: -a, NUMERIC, False),
    "neg_method": (lambda t: t.neg(), lambda a: -a, NUMERIC, False),
    "exp": (lambda t: t.exp(), np.exp, FLOATS, False),
    "log": (lambda t: t.log(), np.log, FLOATS, True),
    "sqr": (lambda t: t.sqr(), np.square, NUMERIC, False),
    "sqrt": (lambda t: t.sqrt(), np.sqrt, FLOATS, True),
    "relu": (lambda t: t.relu(), lambda a: np.maximum(a, 0).astype(a.dtype), NUMERIC, False),
    "tanh": (lambda t: t.tanh(), np.tanh, FLOATS, False),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("op", list(UNARY))
def test_unary(op, dtype, layout):
    f_ad, f_np, dtypes, positive = UNARY[op]
    if dtype not in dtypes:
        pytest.skip(f"{op} does not apply to {dtype} (DTypeError, see test_errors)")
    if dtype == "uint8" and op.startswith("neg"):
        pytest.skip("negating uint8 wraps; covered by numpy semantics elsewhere")
    rng = np.random.default_rng(zlib.crc32(f"{op}{dtype}{layout}".encode()))
    for _ in range(3):
        shape = random_shape(rng, int(rng.integers(2, 4)))
        x, xn = present(rng, shape, dtype, layout, positive=positive)
        close(f_ad(x), f_np(xn).astype(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_zero_size_and_0d(dtype):
    for shape in [(), (0,), (2, 0, 3), (1,)]:
        a = np.full(shape, 0.5, dtype=dtype)
        t = ad.tensor(a, dtype=dtype)
        for name, (f_ad, f_np, _, _) in UNARY.items():
            close(f_ad(t), f_np(a).astype(dtype))


# ---- scalars on either side, pow ----------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_scalar_operands_float(dtype, layout):
    rng = np.random.default_rng(3)
    x, a = present(rng, (3, 4), dtype, layout, positive=True)
    cases = [
        (x * 0.5, a * 0.5), (0.5 * x, 0.5 * a), (x + 2, a + 2), (2 + x, 2 + a),
        (x - 1.5, a - 1.5), (1 - x, 1 - a), (x / 4, a / 4), (2 / x, 2 / a),
        (x ** 2, a ** 2), (x ** 0.5, a ** 0.5), (x ** -1.5, a ** -1.5), (x ** 3, a ** 3),
        (x.pow(2.5), a ** 2.5), (2 ** x, 2 ** a), (0.5 ** x, 0.5 ** a),
        (x ** 0, a ** 0), (x ** 1, a ** 1),
    ]
    for t, e in cases:
        close(t, np.asarray(e).astype(dtype))  # a Python scalar never changes the dtype


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_scalar_operands_int(dtype):
    a = np.array([[-3, 0, 2], [5, -1, 4]], dtype=dtype)
    x = ad.tensor(a, dtype=dtype)
    for t, e in [(x * 3, a * 3), (3 * x, 3 * a), (x + 2, a + 2), (2 + x, 2 + a),
                 (x - 1, a - 1), (1 - x, 1 - a), (x * -1, -a)]:
        close(t, e.astype(dtype))


def test_scalar_operands_uint8():
    a = np.array([0, 1, 7, 200], dtype=np.uint8)
    x = ad.tensor(a)
    assert x.dtype == ad.uint8
    close(x + 3, (a + 3).astype(np.uint8))
    close(x * 2, (a * 2).astype(np.uint8))  # wraps as numpy does
    close(10 - x[:3], (10 - a[:3]).astype(np.uint8))


# ---- reductions -----------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", NUMERIC)
def test_sum(dtype, layout):
    rng = np.random.default_rng(11)
    shape = (3, 4, 2) if layout != "transposed" else (2, 3, 4)
    x, a = present(rng, shape, dtype, layout)
    for dim in [None, 0, 1, 2, -1, (0, 2), (0, 1, 2), (-1, 0)]:
        for keepdim in (False, True):
            # integer sums accumulate in int64, as numpy does for int32 on Linux
            # (numpy gives uint64 for uint8; pyautodiff's one rule is int64)
            e = np.sum(a, axis=dim, keepdims=keepdim).astype(
                dtype if dtype in FLOATS else "int64")
            t = x.sum(dim, keepdim=keepdim)
            if dim is None and not keepdim:
                assert t.shape == ()
            # float64 at close()'s 1e-12: a sum of <= 24 terms is that exact
            close(t, e, rtol=1e-5 if dtype == "float32" else None)
    close(x.sum_all(), np.sum(a).astype(dtype if dtype in FLOATS else "int64"))


def x_bits(v):
    return np.asarray(v).tobytes()


def _lane_sum(x):
    """The float sums' order (reduce_kernels.h): blocks of 1024 elements of
    the first n - n % 32, each as 32 lanes adding their terms in order, the
    lanes folded pairwise (lane l += lane l + w, w = 16 .. 1) in the dtype, the
    block totals and then the last n % 32 elements added in float64."""
    total = np.float64(0)
    nv = len(x) // 32 * 32
    for b in range(0, nv, 1024):
        lane = np.zeros(32, x.dtype)
        for row in x[b:min(b + 1024, nv)].reshape(-1, 32):
            lane += row
        for w in (16, 8, 4, 2, 1):
            lane[:w] += lane[w:2 * w]
        total += np.float64(lane[0])
    for v in x[nv:]:
        total += np.float64(v)
    return x.dtype.type(total)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sum_order_bits(dtype):
    # a contiguous sum's bits are those of its documented order, at every ISA
    # level (the lanes are vectors of any width, folded as one array)
    rng = np.random.default_rng(12)
    for n in (1, 31, 32, 33, 95, 1024, 1056, 2048 + 31, 5000):
        a = (rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n)).astype(dtype)
        assert x_bits(ad.tensor(a).sum()) == x_bits(_lane_sum(a)), n
        # row sums (several rows per kernel call, reduce.c's run_rows): 9
        # rows are groups and a rest at both dtypes; contiguous and with a
        # row stride past the width
        m = np.stack([a, a[::-1].copy(), -a, a * 3, a[::-1] * 0.5, -7 * a, a, 2 * a, -a])
        wide = np.zeros((9, n + 5), dtype)
        wide[:, 2:2 + n] = m
        for t in (ad.tensor(m), ad.tensor(wide)[:, 2:2 + n]):
            got = t.sum(1).numpy()
            assert [x_bits(v) for v in got] == [x_bits(_lane_sum(r)) for r in m], n


@pytest.mark.parametrize("dtype", NUMERIC)
def test_reductions_over_broadcast_dims(dtype):
    # dims an expanded tensor repeats (stride 0) are left out of the walk:
    # max / min over them are the element, a sum the element times the count
    rng = np.random.default_rng(13)
    base = values(rng, (3, 1, 4, 1), dtype)
    x = ad.tensor(base, dtype=dtype).expand(3, 5, 4, 6)
    a = np.broadcast_to(base, (3, 5, 4, 6))
    wide = dtype if dtype in FLOATS else "int64"
    for dim in [None, 1, 3, (1, 3), (0, 1), (1, 2, 3), (0, 3), -1]:
        for keepdim in (False, True):
            close(x.sum(dim, keepdim=keepdim), np.sum(a, axis=dim, keepdims=keepdim).astype(wide),
                  rtol=1e-6 if dtype == "float32" else None)
            if dtype != "bool":
                close(x.max(dim, keepdim=keepdim), np.max(a, axis=dim, keepdims=keepdim))
                close(x.min(dim, keepdim=keepdim), np.min(a, axis=dim, keepdims=keepdim))
            if dtype in FLOATS:
                close(x.mean(dim, keepdim=keepdim), np.mean(a, axis=dim, keepdims=keepdim),
                      rtol=1e-6 if dtype == "float32" else None)
                close(x.prod(dim, keepdim=keepdim), np.prod(a, axis=dim, keepdims=keepdim),
                      rtol=1e-5 if dtype == "float32" else 1e-12)


def test_sum_over_broadcast_dims_rounds_once():
    # 2^24 copies of float32 0.1 sum to the exact product rounded once (the
    # walk added them one by one); int64 wraps as repeated addition; inf and
    # NaN stay; an empty broadcast sums to 0, not inf * 0
    t = ad.tensor(np.float32(0.1)).reshape(1, 1).expand(4096, 4096)
    assert t.sum().numpy() == np.float32(np.float64(np.float32(0.1)) * 4096 * 4096)
    assert (t.sum(0).numpy() == np.float32(np.float64(np.float32(0.1)) * 4096)).all()
    big = ad.tensor(np.array([2 ** 62], dtype=np.int64)).expand(5)
    assert big.sum().numpy() == np.full(5, 2 ** 62, np.int64).sum() == 2 ** 62  # 5 2^62 mod 2^64
    special = ad.tensor(np.array([[np.inf], [np.nan], [-np.inf]], dtype=np.float32)).expand(3, 7)
    got = special.sum(1).numpy()
    assert got[0] == np.inf and np.isnan(got[1]) and got[2] == -np.inf
    assert np.isnan(special.max(1).numpy()[1]) and special.min(1).numpy()[0] == np.inf
    empty = ad.tensor(np.array([np.inf], dtype=np.float32)).reshape(1, 1).expand(0, 3)
    close(empty.sum(0), np.zeros(3, np.float32))
    close(empty.sum(), np.float32(0))


def _serial_extreme(row, is_max, start):
    """reduce_dtype.h's rule: in index order, a greater (smaller) value or any
    NaN replaces the running one (so the last NaN wins, and of -0 / +0 the
    first one met stays)"""
    m = start
    for v in row:
        if (v > m if is_max else v < m) or v != v:
            m = v
    return m


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32"])
def test_max_min_rows_bit_for_bit(dtype):
    # the vectorised lanes of a contiguous row give the serial rule's bits:
    # rows around the 16 lanes, payload NaNs (the last one wins), rows of
    # signed zeros (the first one met wins); a transposed x (its rows
    # reduced through the output row) gives the same bits
    rng = np.random.default_rng(15)
    fl = dtype.startswith("float")
    for n in (1, 31, 32, 33, 47, 64, 100, 1000):
        a = (rng.standard_normal((6, n)) * 100).astype(dtype)
        if fl:
            ui = np.uint32 if dtype == "float32" else np.uint64
            nan = np.array([0x7fc00001, 0xffc00002] if dtype == "float32" else
                           [0x7ff8000000000001, 0xfff8000000000002], ui).view(dtype)
            a[1, n // 3] = nan[0]
            a[1, (2 * n) // 3] = nan[1]
            a[2] = np.where(rng.random(n) < 0.5, -0.0, 0.0)  # zeros, and negatives before them
            a[5] = np.where(rng.random(n) < 0.3, -np.abs(a[5]), np.where(rng.random(n) < 0.5,
                                                                            -0.0, 0.0))
            a[3] = -np.abs(a[3])
            a[4, -1] = np.inf
        for is_max in (True, False):
            start = (-np.inf if is_max else np.inf) if fl else (
                np.iinfo(dtype).min if is_max else np.iinfo(dtype).max)
            want = np.array([_serial_extreme(r, is_max, np.array(start, dtype)) for r in a], dtype)
            for t in (ad.tensor(a), ad.tensor(np.ascontiguousarray(a.T)).t()):
                got = (t.max(-1) if is_max else t.min(-1)).numpy()
                assert got.tobytes() == want.tobytes(), (n, is_max)


def test_transposed_sums_read_contiguous_runs():
    # a transposed x's sums take its unit-stride dim innermost (each output's
    # terms in another order): the values, at any thread count
    rng = np.random.default_rng(16)
    old = ad.get_num_threads()
    try:
        for threads in (1, 2):
            ad.set_num_threads(threads)
            a = rng.standard_normal((8, 300, 70)).astype("float32")
            x = ad.tensor(np.ascontiguousarray(a.transpose(0, 2, 1))).permute(0, 2, 1)
            for dim in (-1, 1, (1, 2), 0, (0, 2)):
                close(x.sum(dim), a.astype("float64").sum(axis=dim).astype("float32"), rtol=2e-5,
                      atol=2e-4)
                close(x.max(dim), a.max(axis=dim))
                close(x.mean(dim), a.astype("float64").mean(axis=dim).astype("float32"),
                      rtol=2e-5, atol=1e-5)
    finally:
        ad.set_num_threads(old)


@pytest.mark.parametrize("threads", [1, 2])
def test_reductions_of_permuted_inputs_walk_in_memory_order(threads):
    # x's dims are walked by its strides (the largest outermost) and, when the
    # kept dims then come out of index order, summed into a buffer of that
    # layout and copied into the output (reduce.c walk_order); planes of rows
    # summed into a contiguous row fold four rows a pass (fold_plane): every kind,
    # dtype, dim set and keepdim against numpy on permuted, flipped, sliced,
    # expanded and empty inputs
    import itertools
    import warnings
    rng = np.random.default_rng(24)
    old = ad.get_num_threads()
    ad.set_num_threads(threads)
    try:
        base = rng.standard_normal((24, 40, 36))
        views = [lambda t: t, lambda t: t[:, 3:, :30], lambda t: t.permute(2, 1, 0),
                 lambda t: t.permute(1, 2, 0),
                 lambda t: t.permute(2, 0, 1)[:, ::-1], lambda t: t[::2].permute(2, 1, 0),
                 lambda t: t[:1].permute(2, 0, 1), lambda t: t[:, :0].permute(2, 1, 0)]
        np_views = [lambda a: a, lambda a: a[:, 3:, :30], lambda a: a.transpose(2, 1, 0),
                    lambda a: a.transpose(1, 2, 0),
                    lambda a: a.transpose(2, 0, 1)[:, ::-1], lambda a: a[::2].transpose(2, 1, 0),
                    lambda a: a[:1].transpose(2, 0, 1), lambda a: a[:, :0].transpose(2, 1, 0)]
        for dt in ("float32", "float64", "int64", "int32", "uint8", "bool"):
            a0 = (base * 4).astype(dt) if dt != "bool" else base > 0
            if dt[0] == "f":  # products of a few hundred terms that stay finite
                a0 = (1 + base * 0.05).astype(dt)
            t0 = ad.tensor(a0)
            for view, np_view in zip(views, np_views):
                t, a = view(t0), np_view(a0)
                dims = [d for r in (1, 2) for d in itertools.combinations(range(3), r)]
                for dim, keep in itertools.product(dims, (False, True)):
                    for name in ("sum", "max", "min", "mean", "prod"):
                        if name in ("max", "min") and (a.size == 0 or dt == "bool"):
                            continue
                        if name == "mean" and dt[0] != "f" or name == "prod" and dt == "bool":
                            continue
                        got = getattr(t, name)(dim, keepdim=keep).numpy()
                        fn = {"max": np.max, "min": np.min, "sum": np.sum, "mean": np.mean,
                              "prod": np.prod}[name]
                        if dt[0] == "f":
                            with warnings.catch_warnings():  # the mean of nothing: NaN
                                warnings.simplefilter("ignore", RuntimeWarning)
                                want = fn(a.astype("float64"), axis=dim, keepdims=keep)
                            tol = 1e-4 if dt == "float32" else 1e-10
                            np.testing.assert_allclose(got, want, rtol=tol, atol=tol,
                                                       err_msg=f"{dt} {name}{dim}")
                        else:
                            want = fn(a, axis=dim, keepdims=keep)
                            if name in ("sum", "prod"):
                                want = want.astype("int64")
                            np.testing.assert_array_equal(got, want, err_msg=f"{dt} {name}{dim}")
        # a kept dim x is broadcast along (stride 0) goes outermost
        e = ad.tensor(base[:, :1]).expand(24, 40, 36).permute(2, 1, 0)
        close(e.sum(2), np.broadcast_to(base[:, :1], (24, 40, 36)).transpose(2, 1, 0).sum(2))
    finally:
        ad.set_num_threads(old)


def test_relu_keeps_nan():
    # relu(NaN) is NaN, as torch's and numpy's maximum(x, 0) (it was 0, which
    # hid a diverged activation): the op on every path (the quick call, the
    # threaded and streamed blocks, a transposed input) and the linear
    # layer's fused epilogue; -0 still gives +0
    F = ad.nn.functional
    for dt in ("float32", "float64"):
        for n in (5, 70001, 3_000_000):
            a = np.random.default_rng(n).standard_normal(n).astype(dt)
            a[::7] = np.nan
            a[1::7] = -0.0
            for t in (ad.tensor(a), ad.tensor(a[::-1].copy())[::-1]):
                got = t.relu().numpy()
                want = np.maximum(np.asarray(t.numpy()), 0)
                assert np.array_equal(got, want, equal_nan=True), (dt, n)
                assert not np.signbit(got).any()
        x = np.array([[np.nan, -1.0, 2.0], [1.0, np.nan, -3.0]], dtype=dt)
        w, b = np.eye(3, dtype=dt), np.array([0.5, -0.5, 1.0], dtype=dt)
        for bias in (ad.tensor(b), ad.tensor(b[:1]).expand(3), None):
            got = F.linear(ad.tensor(x), ad.tensor(w), bias, activation="relu").numpy()
            ref = np.maximum(x @ w.T + (0 if bias is None else bias.numpy()), 0)
            assert np.array_equal(got, ref, equal_nan=True), (dt, bias)
        assert np.isnan(F.linear(ad.tensor(x), ad.tensor(w), ad.tensor(b),
                                 activation="relu").numpy()[0, 0])
        assert np.array_equal(ad.tensor(x).t().relu().numpy(), np.maximum(x.T, 0),
                              equal_nan=True)


@pytest.mark.parametrize("threads", [1, 2])
def test_short_row_sums_keep_each_rows_order(threads):
    # rows of fewer than 32 elements are summed 32 rows at a time down the
    # columns of a transposed copy (reduce_kernels.h sum_short_rows): each
    # row's total is still its elements added in order in float64, the
    # one-row loop's bits; rows past the last group of 32, transposed and
    # strided rows, int64 exact
    old = ad.get_num_threads()
    ad.set_num_threads(threads)
    rng = np.random.default_rng(25)
    try:
        for n in (1, 3, 7, 8, 9, 28, 31):
            for rows in (31, 70, 3000):
                for dt in ("float32", "float64"):
                    a = (rng.standard_normal((rows, n)) * 10 ** rng.uniform(-3, 3, (rows, 1)))
                    a = a.astype(dt)
                    want = np.add.accumulate(a.astype("float64"), axis=1)[:, -1].astype(dt)
                    got = ad.tensor(a).sum(-1).numpy()
                    assert got.tobytes() == want.tobytes(), (n, rows, dt)
                    # rows a stride apart: x's walk folds rows into the output (the sums'
                    # order and precision of a sum over a matrix's first dim)
                    at = ad.tensor(np.ascontiguousarray(a.T)).t()
                    close(at.sum(-1), want, rtol=1e-5 if dt == "float32" else 1e-12,
                          atol=1e-5 * np.abs(a).sum(-1).max())
                    wide = ad.tensor(np.concatenate([a, a], 1))[:, :n]  # strided rows
                    assert wide.sum(-1).numpy().tobytes() == want.tobytes(), (n, rows, dt)
                ai = rng.integers(-2 ** 62, 2 ** 62, (rows, n))
                np.testing.assert_array_equal(ad.tensor(ai).sum(-1).numpy(), ai.sum(-1))
    finally:
        ad.set_num_threads(old)


def test_prod_is_one_walk_in_index_order():
    # blocks' partial products overflowed to inf in one and to 0 in another,
    # and inf * 0 made a NaN of a product of finite positive values; in one
    # walk it is numpy's inf, at any thread count
    a = np.concatenate([np.full(50000, 10.0), np.full(50000, 0.1)])
    old = ad.get_num_threads()
    try:
        for threads in (1, 2):
            ad.set_num_threads(threads)
            assert ad.tensor(a).prod().numpy() == np.inf
            assert ad.tensor(a[::-1].copy()).prod().numpy() == 0.0
            b = np.linspace(0.5, 1.5, 200001)
            close(ad.tensor(b).prod(), np.prod(b), rtol=1e-9)
    finally:
        ad.set_num_threads(old)


def test_zero_size_tensors_are_contiguous():
    # nothing to place: contiguous, as torch says (the strides of a 0 dim
    # read as 1 made ad.zeros(4, 0) non-contiguous, and the optimizers and
    # Var.set refused zero-size parameters)
    for shape in [(4, 0), (0, 3), (2, 0, 3), (0,)]:
        t = ad.zeros(*shape)
        assert t.is_contiguous, shape
        v = ad.Var.zeros(*shape)
        v.set(ad.ones(*shape))
        for opt in (ad.optim.SGD([v], lr=0.1), ad.optim.Adam([v], lr=0.1)):
            opt.step((v.sum() * 2).backward())
        assert v.shape == shape


@pytest.mark.parametrize("dtype", NUMERIC)
def test_copy_of_a_broadcast(dtype):
    # a stride-0 source copies as a fill, in every layout of the destination
    rng = np.random.default_rng(14)
    base = values(rng, (3, 1, 2), dtype)
    x = ad.tensor(base, dtype=dtype).expand(3, 1000, 2)
    want = np.broadcast_to(base, (3, 1000, 2))
    close(x.contiguous(), want)
    close(x.permute(1, 0, 2).contiguous(), want.transpose(1, 0, 2))
    one = ad.tensor(base[:1, :, :1], dtype=dtype).expand(40000, 3, 1)
    close(one.contiguous(), np.broadcast_to(base[:1, :, :1], (40000, 3, 1)))


def test_sum_bool_counts():
    a = np.array([[True, False, True], [True, True, False]])
    close(ad.tensor(a).sum(), np.int64(4))
    close(ad.tensor(a).sum(1), np.array([2, 2], dtype=np.int64))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_mean(dtype, layout):
    rng = np.random.default_rng(12)
    x, a = present(rng, (4, 3, 5), dtype, layout)
    for dim in [None, 0, 1, -1, (0, 2), (1, 2), (0, 1, 2)]:
        for keepdim in (False, True):
            close(x.mean(dim, keepdim=keepdim), np.mean(a, axis=dim, keepdims=keepdim))
    assert x.mean().shape == ()


def test_reductions_0d_and_empty():
    t = ad.tensor(3.5)
    assert t.shape == ()
    close(t.sum(), np.float32(3.5))
    close(t.mean(), np.float32(3.5))
    e = ad.zeros((0, 3))
    close(e.sum(), np.float32(0))
    close(e.sum(0), np.zeros(3, np.float32))
    close(e.sum(1), np.zeros(0, np.float32))
    close(e.sum(1, keepdim=True), np.zeros((0, 1), np.float32))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", NUMERIC)
def test_max_min(dtype, layout):
    rng = np.random.default_rng(13)
    x, a = present(rng, (4, 5, 3), dtype, layout)
    for dim in [0, 1, 2, -1]:
        for keepdim in (False, True):
            close(x.max(dim, keepdim=keepdim), np.max(a, axis=dim, keepdims=keepdim))
            close(x.min(dim, keepdim=keepdim), np.min(a, axis=dim, keepdims=keepdim))
    close(x.max(), np.max(a))
    close(x.min(), np.min(a))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", NUMERIC)
def test_argmax_argmin(dtype, layout):
    rng = np.random.default_rng(14)
    shape = (4, 6)
    # distinct values so the arg is unique
    base = rng.permutation(24).reshape(shape).astype(dtype)
    if layout == "broadcast":
        base = np.broadcast_to(base[:1], shape)
        x = ad.tensor(np.ascontiguousarray(base[:1]), dtype=dtype).broadcast_to(shape)
        a = base
    elif layout == "transposed":
        x, a = ad.tensor(np.ascontiguousarray(base.T), dtype=dtype).t(), base
    elif layout == "sliced":
        big = np.zeros((4, 12), dtype=dtype)
        big[:, ::2] = base
        x, a = ad.tensor(big, dtype=dtype)[:, ::2], base
    else:
        x, a = ad.tensor(base, dtype=dtype), base
    for dim in [0, 1, -1]:
        r = x.argmax(dim)
        close(r, np.argmax(a, axis=dim).astype(np.int64))
        assert not r.track_op
        close(x.argmin(dim), np.argmin(a, axis=dim).astype(np.int64))
    close(x.argmax(), np.int64(np.argmax(a)))
    close(x.argmin(), np.int64(np.argmin(a)))
    close(x.argmax(1, keepdim=True), np.argmax(a, axis=1, keepdims=True).astype(np.int64))


# ---- comparisons -----------------------------------------------------------------------------
CMPS = {
    "eq": (lambda a, b: a == b, np.equal), "ne": (lambda a, b: a != b, np.not_equal),
    "lt": (lambda a, b: a < b, np.less), "le": (lambda a, b: a <= b, np.less_equal),
    "gt": (lambda a, b: a > b, np.greater), "ge": (lambda a, b: a >= b, np.greater_equal),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ALL)
def test_comparisons(dtype, layout):
    rng = np.random.default_rng(15)
    x, a = present(rng, (3, 4), dtype, layout)
    y, b = present(rng, (4,), dtype, "contiguous")  # broadcast against a row
    for name, (f_ad, f_np) in CMPS.items():
        r = f_ad(x, y)
        close(r, f_np(a, b), dtype="bool")
        assert not r.track_op
        close(getattr(x, name)(y), f_np(a, b), dtype="bool")
    if dtype != "bool":
        for name, (f_ad, f_np) in CMPS.items():
            close(f_ad(x, 1), f_np(a, 1), dtype="bool")  # scalar on the right


def test_comparisons_from_var_untracked():
    w = ad.Var([1.0, 2.0, 3.0])
    for name, (f_ad, _) in CMPS.items():
        r = f_ad(w, ad.tensor([2.0, 2.0, 2.0]))
        assert r.dtype == ad.bool and not r.track_op and r.op is None


# ---- layout ops --------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ALL)
def test_reshape_family(dtype, layout):
    rng = np.random.default_rng(16)
    x, a = present(rng, (2, 3, 4), dtype, layout)
    close(x.reshape(6, 4), a.reshape(6, 4))
    close(x.reshape((4, -1)), a.reshape(4, -1))
    close(x.reshape(-1), a.reshape(-1))
    close(x.reshape(2, 1, 12), a.reshape(2, 1, 12))
    close(x.flatten(), a.reshape(-1))
    close(x.flatten(1), a.reshape(2, 12))
    close(x.flatten(0, 1), a.reshape(6, 4))
    close(x.unsqueeze(0), a[None])
    close(x.unsqueeze(-1), a[..., None])
    close(x.unsqueeze(1), a[:, None])
    u = x.unsqueeze(1).unsqueeze(-1)
    close(u.squeeze(), a)
    close(u.squeeze(1), a[..., None])
    close(u.squeeze(-1), a[:, None])
    close(x.squeeze(0), a)  # dim of size 2: unchanged
    c = x.contiguous()
    assert c.is_contiguous
    close(c, a)
    one = ad.tensor(values(rng, (1, 1), dtype), dtype=dtype)
    assert one.reshape(()).shape == ()
    assert one.squeeze().shape == ()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ALL)
def test_transpose_permute(dtype, layout):
    rng = np.random.default_rng(17)
    x, a = present(rng, (2, 3, 4), dtype, layout)
    close(x.transpose(0, 2), np.swapaxes(a, 0, 2))
    close(x.transpose(-1, 1), np.swapaxes(a, -1, 1))
    close(x.t(), np.swapaxes(a, -1, -2))
    close(x.t().t(), a)
    for perm in [(0, 1, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0), (-1, 0, 1)]:
        close(x.permute(*perm), np.transpose(a, perm))
        close(x.permute(perm), np.transpose(a, perm))
    m = ad.tensor(values(rng, (3, 5), dtype), dtype=dtype)
    close(m.t(), m.numpy().T)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ALL)
def test_narrow(dtype, layout):
    rng = np.random.default_rng(18)
    x, a = present(rng, (4, 6), dtype, layout)
    close(x.narrow(0, 1, 2), a[1:3])
    close(x.narrow(1, 0, 6), a)
    close(x.narrow(-1, 2, 3), a[:, 2:5])
    close(x.narrow(1, 3, 0), a[:, 3:3])
    close(x.narrow(0, -2, 2), a[-2:])


@pytest.mark.parametrize("dtype", ALL)
def test_broadcast_to(dtype):
    rng = np.random.default_rng(19)
    a = values(rng, (3, 1), dtype)
    x = ad.tensor(a, dtype=dtype)
    for shape in [(3, 4), (2, 3, 4), (3, 1), (1, 3, 5), (3, 0)]:
        close(x.broadcast_to(shape), np.broadcast_to(a, shape))
        close(x.broadcast_to(*shape), np.broadcast_to(a, shape))
    s = ad.tensor(values(rng, (), dtype), dtype=dtype)
    close(s.broadcast_to((2, 2)), np.broadcast_to(s.numpy(), (2, 2)))
    close(x.broadcast_to((2, 3, 4)).t(), np.swapaxes(np.broadcast_to(a, (2, 3, 4)), -1, -2))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ALL)
def test_basic_indexing(dtype, layout):
    rng = np.random.default_rng(20)
    x, a = present(rng, (4, 5, 6), dtype, layout)
    keys = [
        (slice(1, None), slice(None, None, 2)), 1, -1, (-1, -2), (slice(None, None, -1),),
        (slice(None), slice(None, None, -2)), (Ellipsis, 0), (Ellipsis, -1), None,
        (None, 1), (slice(1, 3), None, 2), (2, Ellipsis, slice(1, 5, 3)),
        (slice(-3, -1), slice(4, 0, -1)), (slice(10, 20),), (0, 0, 0), (-4, -5, -6),
        (slice(None, None, 3), 2, slice(-1, None, -2)), (Ellipsis,), (),
    ]
    for k in keys:
        close(x[k], a[k])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ALL)
def test_to_dtype(src, dst, layout):
    rng = np.random.default_rng(21)
    x, a = present(rng, (3, 4), src, layout, positive=(dst == "uint8"))
    if src in FLOATS and dst not in FLOATS and dst != "bool":
        a = np.trunc(a * 3)  # exact integers inside the target range
        x = ad.tensor(a, dtype=src)
        if layout == "transposed":
            x = ad.tensor(np.ascontiguousarray(a.T), dtype=src).t()
    r = x.to_dtype(dst)
    close(r, a.astype(dst))
    close(x.astype(getattr(np, dst) if dst != "bool" else np.bool_), a.astype(dst))


def test_to_dtype_names_and_default_dtypes():
    assert ad.tensor([1.0, 2.0]).dtype == ad.float32
    assert ad.tensor([1, 2]).dtype == ad.int64
    assert ad.tensor([True, False]).dtype == ad.bool
    # numpy scalars keep a dtype pyautodiff has (np.float64(0.1) used to give
    # float32, dropping the value's low bits); others convert as Python numbers
    for v, dt in [(np.float64(0.1), ad.float64), (np.float32(2), ad.float32),
                  (np.int32(3), ad.int32), (np.uint8(5), ad.uint8), (np.bool_(True), ad.bool),
                  (np.float16(1), ad.float32), (np.int16(2), ad.int64)]:
        assert ad.tensor(v).dtype == dt and ad.tensor(v).shape == () and ad.tensor(v).item() == v
    assert ad.tensor(np.float64(0.1)).item() == 0.1
    assert ad.Var(np.float64(0.1)).dtype == ad.float64
    assert ad.tensor(np.float64(0.1), dtype="float32").dtype == ad.float32
    t = ad.tensor([1.5, -2.5])
    for name in ["float64", np.float64, ad.float64, "int32", ad.int32]:
        r = t.to_dtype(name)
        assert r.dtype == name


# ---- matmul ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_2d(dtype, layout):
    rng = np.random.default_rng(22)
    for _ in range(4):
        m, k, n = (int(v) for v in rng.integers(1, 9, size=3))
        x, a = present(rng, (m, k), dtype, layout)
        y, b = present(rng, (k, n), dtype, layout)
        close(x @ y, a @ b, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-5)
        close(x.matmul(y), a @ b, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-5)
        close(ad.matmul(x, y), a @ b, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-5)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shapes", [((2, 2, 3), (1, 3, 2)), ((2, 2, 3), (3, 2)),
                                    ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                                    ((3,), (3, 2)), ((2, 3), (3,)), ((4,), (4,)),
                                    ((3,), (2, 3, 4)), ((2, 3, 4), (4,)),
                                    ((0, 3), (3, 2)), ((2, 0), (0, 3)), ((1, 1), (1, 1))])
def test_matmul_batched_and_1d(dtype, shapes):
    rng = np.random.default_rng(23)
    a, b = values(rng, shapes[0], dtype), values(rng, shapes[1], dtype)
    r = ad.tensor(a, dtype=dtype) @ ad.tensor(b, dtype=dtype)
    close(r, a @ b, rtol=1e-5, atol=1e-5)


def test_matmul_transposed_batched():
    rng = np.random.default_rng(24)
    a = rng.standard_normal((2, 4, 3))
    b = rng.standard_normal((1, 5, 4))
    x = ad.tensor(a, dtype="float64").t()  # (2, 3, 4) non-contiguous
    y = ad.tensor(b, dtype="float64").t()  # (1, 4, 5)
    close(x @ y, np.swapaxes(a, -1, -2) @ np.swapaxes(b, -1, -2))


# ---- random shapes via hypothesis (small budget) ---------------------------------------------------
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4,
                                                 max_side=4),
       seed=st.integers(0, 2**16))
def test_hypothesis_broadcast_binary(shapes, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shapes.input_shapes[0])
    b = rng.standard_normal(shapes.input_shapes[1])
    x, y = ad.tensor(a, dtype="float64"), ad.tensor(b, dtype="float64")
    close(x + y, a + b)
    close(x * y, a * b)
    close(x - y, a - b)
    close((x * y).sum(), np.sum(a * b), rtol=1e-10)


@settings(max_examples=25, deadline=None)
@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=5),
       seed=st.integers(0, 2**16), data=st.data())
def test_hypothesis_reduce(shape, seed, data):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    x = ad.tensor(a, dtype="float64")
    dims = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
    keep = data.draw(st.booleans())
    dim = tuple(dims) if dims else None
    close(x.sum(dim, keepdim=keep), np.sum(a, axis=dim, keepdims=keep))
    close(x.mean(dim, keepdim=keep), np.mean(a, axis=dim, keepdims=keep))
    d = dims[0] if dims else 0
    close(x.max(d, keepdim=keep), np.max(a, axis=d, keepdims=keep))
    close(x.min(d, keepdim=keep), np.min(a, axis=d, keepdims=keep))


@pytest.mark.parametrize("threads", [1, 2])
def test_float32_sums_of_repeated_inner_runs_add_in_double(threads):
    # a float32 sum whose outputs each take several inner reduced runs (a
    # sliced x's full sum, a sum over dims (0, 2)) adds the runs' totals in
    # double and rounds once (reduce.c run_wide), as one run does: rounded
    # after each run, x[:, :2].sum() of 0.1s was 6001.15 for 6000.0 at 30000
    # rows and 400089.5 at 2000000 (threads' blocks included)
    old = ad.get_num_threads()
    ad.set_num_threads(threads)
    try:
        v = np.float32(0.1)
        for n in (30000, 2_000_000):
            x = np.full((n, 3), v, np.float32)
            t = ad.tensor(x)[:, :2]
            for got, k in ((t.sum(), 2 * n), (t.mean(), 1), (t.permute(1, 0).sum((1, 0)), 2 * n),
                           (ad.tensor(x.reshape(n // 2, 2, 3)).sum((0, 2)), 3 * n // 2)):
                np.testing.assert_allclose(got.numpy(), float(v) * k, rtol=2e-7)
        rng = np.random.default_rng(3)
        a = rng.standard_normal((300, 5, 7, 9)).astype(np.float32)
        for dim in ((0, 2), (0, 3), (0, 1, 3), None):
            for t, b in ((ad.tensor(a), a), (ad.tensor(a)[:, :, :, 1::2], a[:, :, :, 1::2]),
                         (ad.tensor(a).permute(3, 1, 0, 2), a.transpose(3, 1, 0, 2))):
                want = b.astype(np.float64).sum(axis=dim)
                scale = np.abs(b).astype(np.float64).sum(axis=dim)  # sums of +-1s cancel
                assert (np.abs(t.sum(dim).numpy() - want) <= 2.5e-7 * scale).all(), dim
    finally:
        ad.set_num_threads(old)
