"""Accuracy of the float32 SIMD erf / gelu_erf maps against float64 libm
(math.erf, math.erfc), in ulps of the float32 result, on every layout and at
1 and 2 threads; pow_scalar's fast exponents against numpy.power; the float32
softmax family on the SIMD exp/log against a float64 numpy reference.
(The AVX2 = AVX-512 bit identity of the maps is test_fastpaths'
test_kernels_same_bits_on_every_isa.)"""
import math

import numpy as np
import pytest

import pyautodiff as ad
from test_fastpaths import special_inputs

_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def erf_inputs():
    rng = np.random.default_rng(3)
    return np.concatenate([
        special_inputs()[::4],
        np.linspace(-16, 16, 100_001),  # both branch points, the tail to underflow
        rng.standard_normal(50_000) * 2,
        np.linspace(0.85, 0.95, 2001), np.linspace(-1.35, -0.65, 2001),
        np.linspace(-15, -13, 2001),  # gelu_erf's denormal results
    ]).astype(np.float32)


def ulps(got, want):
    """|got - want| in ulps of want rounded to float32 (want float64)."""
    w32 = want.astype(np.float32)
    return np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(w32)).astype(np.float64)


def gelu_erf_ref(x):
    return 0.5 * x * _erfc(-x / math.sqrt(2))


# (function, float64 reference, max ulps where the result is a normal float32)
CASES = {"erf": (_erf, 2.0), "gelu_erf": (gelu_erf_ref, 8.0)}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_erf_family_ulps(threads, name, layout):
    ref, bound = CASES[name]
    x = erf_inputs()
    t = ad.from_numpy(x) if layout == "contiguous" else ad.from_numpy(np.repeat(x, 3))[::3]
    with np.errstate(all="ignore"):
        got = getattr(t, name)().numpy()
        want = ref(x.astype(np.float64))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))  # -0 included
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    normal = np.abs(want) >= np.finfo(np.float32).tiny
    err = ulps(got[normal & ~inf], want[normal & ~inf])
    assert err.max() <= bound, (name, err.max(), x[normal & ~inf][err.argmax()])
    # denormal results: e^(-z^2) is rounded into the denormal range before the
    # last factors (x/2 up to 7.4), so a few units of the smallest denormal
    sub = ok & ~normal
    np.testing.assert_allclose(got[sub], want[sub], rtol=0, atol=8 * 2.0 ** -149)


def test_gelu_erf_polynomial_range():
    """x dense in [-2, 2.6] and toward 0: the polynomial's lanes (x / sqrt 2
    in [-0.9, 1.2)) within 3.2 ulps, the erfc form's beside them within 5.5
    (the polynomial pushed further into the negative x, where 1 + erf
    cancels, reaches 7 ulps; the erfc form at x / sqrt 2 in [-0.9, -0.5),
    where it served before, 4.3)."""
    tiny = np.geomspace(1e-30, 0.1, 20_001)
    x = np.concatenate([np.linspace(-2, 2.6, 1_000_001), tiny, -tiny]).astype(np.float32)
    got = ad.from_numpy(x).gelu_erf().numpy()
    want = gelu_erf_ref(x.astype(np.float64))
    normal = np.abs(want) >= np.finfo(np.float32).tiny
    x, err = x[normal], ulps(got[normal], want[normal])
    mid = (x >= -0.9 * math.sqrt(2)) & (x < 1.2 * math.sqrt(2))
    assert err[mid].max() <= 3.2, x[mid][err[mid].argmax()]
    assert err[~mid].max() <= 5.5, x[~mid][err[~mid].argmax()]


def test_erf_float64_stays_libm():
    x = np.linspace(-6, 6, 10_001)
    np.testing.assert_array_equal(ad.from_numpy(x).erf().numpy(), _erf(x))


def test_gelu_erf_gradient_uses_fast_maps():
    """d gelu_erf = Phi + x phi through the float32 erf / exp maps: close to
    the float64 derivative."""
    x = np.linspace(-8, 8, 4001).astype(np.float32)
    t = ad.Var(x, dtype=ad.float32)
    g = t.gelu_erf().sum().backward()[t].numpy()
    xd = x.astype(np.float64)
    want = 0.5 * _erfc(-xd / math.sqrt(2)) + xd * np.exp(-xd * xd / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(g, want, rtol=2e-6, atol=1e-7)


# ---- pow_scalar's fast exponents -----------------------------------------------------
def pow_inputs(dtype):
    rng = np.random.default_rng(5)
    fi = np.finfo(dtype)
    x = np.concatenate([rng.standard_normal(20_001) * 3, rng.uniform(-1e3, 1e3, 5000),
                        np.geomspace(fi.tiny, fi.max / 4, 2000), -np.geomspace(fi.tiny, fi.max / 4, 2000),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, fi.smallest_subnormal,
                         -fi.smallest_subnormal, fi.max, -fi.max]])
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("e", [0.0, 1.0, 2.0, 3.0, -1.0, 0.5, 2.5, -2.0])
def test_pow_scalar_fast_paths(threads, dtype, e):
    """x ** e: exact like pow for 0, 1, 2, -1, 0.5 (sqrt with C pow's +0 for -0
    and +inf for -inf, where numpy.power takes sqrt's -0 and nan), within 1 ulp
    for 3; other exponents stay pow (numpy's may differ by an ulp)."""
    x = pow_inputs(dtype)
    with np.errstate(all="ignore"):
        want = np.power(x, dtype(e))
    if e == 0.5:
        want[x == -np.inf] = np.inf
        want[x == 0] = 0.0
    with np.errstate(all="ignore"):
        got = (ad.from_numpy(x) ** e).numpy()
        got_strided = (ad.from_numpy(np.repeat(x, 2))[::2] ** e).numpy()
    np.testing.assert_array_equal(got, got_strided)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want)
    np.testing.assert_array_equal(got[~fin], want[~fin])
    np.testing.assert_array_equal(np.signbit(got[fin]), np.signbit(want[fin]))
    with np.errstate(over="ignore"):  # spacing of float max
        err = np.abs(got[fin].astype(np.float64) - want[fin]) / np.spacing(np.abs(want[fin]))
    assert err.max() <= (0.0 if e in (0.0, 1.0, 2.0, -1.0, 0.5) else 1.0)


# ---- the softmax family on the SIMD exp ---------------------------------------------
def _softmax64(a, ax):
    e = np.exp(a - a.max(ax, keepdims=True))
    return e / e.sum(ax, keepdims=True)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_softmax_family_float32_ulps(axis, layout):
    """float32 softmax / log_softmax / logsumexp (SIMD exp per lane, odd lane
    lengths for the block tails) within a few ulps of float64 numpy."""
    rng = np.random.default_rng(7)
    base = (rng.standard_normal((37, 1100)) * 6).astype(np.float32)
    base[3, :] = 0.0  # equal elements: uniform softmax
    base[5, 7] = 80.0  # one dominant element: e^(x - m) underflows for the rest
    if layout == "contiguous":
        x, t = base, ad.from_numpy(base)
    elif layout == "transposed":
        x, t = base, ad.from_numpy(np.ascontiguousarray(base.T)).t()
    else:
        big = np.repeat(base, 2, axis=1)
        x, t = big[:, ::2], ad.from_numpy(big)[:, ::2]
    xd = x.astype(np.float64)
    ref = _softmax64(xd, axis)
    got = t.softmax(axis).numpy()
    tiny = np.finfo(np.float32).tiny
    normal = ref >= tiny
    assert ulps(got[normal], ref[normal]).max() <= 4
    np.testing.assert_allclose(got[~normal], ref[~normal], rtol=0, atol=4 * 2.0 ** -149)
    lref = xd - xd.max(axis, keepdims=True) - np.log(
        np.exp(xd - xd.max(axis, keepdims=True)).sum(axis, keepdims=True))
    # log_softmax: x - lse, whose float64 error is below float32's; a few
    # ulps of the result, or of the max-shifted input where x - lse cancels
    lgot = t.log_softmax(axis).numpy().astype(np.float64)
    scale = np.maximum(np.abs(lref), np.abs(xd - xd.max(axis, keepdims=True)))
    assert (np.abs(lgot - lref) / np.spacing(scale.astype(np.float32))).max() <= 4
    lse_ref = xd.max(axis) + np.log(np.exp(xd - xd.max(axis, keepdims=True)).sum(axis))
    lse = t.logsumexp(axis).numpy()
    assert ulps(lse, lse_ref).max() <= 4


def test_softmax_float32_nonfinite_lanes():
    """Lanes with inf, -inf, NaN keep the double loop's answers."""
    x = np.array([[0.0, -np.inf, 1.0], [np.inf, 1.0, 2.0], [np.nan, 1.0, 2.0],
                  [-np.inf, -np.inf, -np.inf]], np.float32)
    with np.errstate(all="ignore"):
        sm = ad.from_numpy(x).softmax(1).numpy()
        lse = ad.from_numpy(x).logsumexp(1).numpy()
    e = np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum()
    np.testing.assert_allclose(sm[0], [e[0], 0.0, e[1]], rtol=1e-6)
    assert np.isnan(sm[2]).all()
    assert lse[1] == np.inf and np.isnan(lse[2]) and lse[3] == -np.inf
    np.testing.assert_allclose(lse[0], np.log(np.exp(0.0) + np.exp(1.0)), rtol=1e-6)


def test_softmax_lane_with_inf_is_nan_as_torch():
    """A lane whose maximum is +inf is NaN everywhere in softmax and
    log_softmax (x - max is NaN at the inf, so is the sum), as torch's; the
    double loop gave [0, nan, 0] for [1, inf, 2] (log_softmax [-inf, nan,
    -inf]).  Every path: a contiguous lane, lanes side by side (the column
    kernel hands such a lane back), strided lanes, a transposed copy; and
    logsumexp stays inf."""
    row = [1.0, np.inf, 2.0, -np.inf]
    for dt in (np.float32, np.float64):
        x = np.array([row, [0.0, 1.0, 2.0, 3.0]], dt)
        big = np.tile(x, (1, 1100))  # 4400-long lanes: past the copy threshold transposed
        for t, d in ((ad.from_numpy(x), 1), (ad.from_numpy(np.ascontiguousarray(x.T)), 0),
                     (ad.from_numpy(np.tile(x.T, (1, 40))), 0),
                     (ad.from_numpy(np.ascontiguousarray(big.T)).t(), 1),
                     (ad.from_numpy(np.repeat(x, 3, 1))[:, ::3], 1)):
            with np.errstate(all="ignore"):
                for name in ("softmax", "log_softmax"):
                    y = getattr(t, name)(d).numpy()
                    y = y if d == 1 else y.T
                    inf_lane = np.arange(len(y)) % 2 == 0  # x's first row (tiled: every other)
                    assert (np.isnan(y).all(1) == inf_lane).all(), (name, t.strides)
                    assert not np.isnan(y[~inf_lane]).any(), (name, t.strides)
                lse = t.logsumexp(d).numpy()
                assert (lse[::2] == np.inf).all() and np.isfinite(lse[1::2]).all()


@pytest.mark.parametrize("op", ["gelu_erf", "erf"])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 16, 17, 511, 512, 513, 1040, 5000])
def test_gelu_erf_blocked_contiguous_same_bits(threads, n, op):
    """A contiguous gelu_erf or erf gathers a block's erfc-form lanes first (AVX-512 by
    compress / expand, AVX2 by a lane permutation): each lane gives the bits of the
    one-vector-at-a-time strided path, whatever its neighbours (all polynomial lanes,
    all erfc lanes, mixed, flat tails, NaN, -0)."""
    rng = np.random.default_rng(n)
    parts = [rng.standard_normal(n) * s for s in (0.3, 1.0, 4.0)]
    edge = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, -14.25, 7.5, -0.7071068, 1.2727922,
                     -30.0, 30.0], np.float32)
    mixed = rng.standard_normal(n).astype(np.float32)
    mixed[rng.integers(0, n, max(1, n // 7))] = edge[rng.integers(0, edge.size, max(1, n // 7))]
    for x in parts + [mixed]:
        x = x.astype(np.float32)
        got = getattr(ad.from_numpy(x), op)().numpy()
        strided = getattr(ad.from_numpy(np.repeat(x, 2))[::2], op)().numpy()
        assert got.tobytes() == strided.tobytes()
