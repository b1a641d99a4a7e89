"""The elementwise kernels' large-array path and the softmax row kernels.

Outputs whose operands outgrow the last-level cache are computed in chunks
and written with non-temporal stores; PYAUTODIFF_STREAM_BYTES=0 makes every
output of 4 KiB or more take that path (and every whole-tensor copy, a clone
or data copied in), so a subprocess checks it bit for bit against the
ordinary path at every ISA level.  Contiguous softmax / log_softmax
/ logsumexp lanes run whole in the SIMD row kernel: checked against float64
numpy for every tail length, with non-finite elements, at 1 and 2 threads, and
AVX2 against AVX-512 bit for bit."""
import math
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import pyautodiff as ad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STREAM_SCRIPT = r"""
import pickle, sys
import numpy as np, pyautodiff as ad
from pyautodiff._lib import ffi, lib
rng = np.random.default_rng(11)
outs = []
# below, at and past a 4 KiB chunk; a ragged tail; past the threads' threshold (2 blocks)
for n in (1023, 1024, 4096, 70001, 300001):
    for dt in (np.float32, np.float64, np.int32):
        big = (rng.standard_normal(n + 40) * 50).astype(dt)
        other = (rng.standard_normal(n + 40) * 50).astype(dt)
        t, u = ad.from_numpy(big), ad.from_numpy(other)
        for off in (0, 1, 3):  # output blocks are 64-aligned; views move the inputs
            a, b = t[off:off + n], u[5:5 + n]
            outs += [a + b, a * b, a - b, -a, a * 2, a + u[:1], (a > b)]
            for c in (a.clone(), ad.from_numpy(big[off:off + n])):  # whole-tensor copies
                assert np.array_equal(c.numpy(), big[off:off + n]), (n, dt, off)
            if dt != np.int32:
                outs += [a / b, a.exp(), a.tanh(), a.sigmoid(), a.gelu_erf(), a.sqrt()]
        m = t[: (n // 8) * 8].reshape(n // 8, 8)
        outs += [m + u[:8], m.t() + m.t()]  # broadcast row; strided output walk
with np.errstate(all="ignore"):
    data = [o.numpy().tobytes() for o in outs]
pickle.dump((ffi.string(lib.ad_gemm_kernel()).decode(), data), sys.stdout.buffer)
"""


def _run(script, **env_extra):
    env = dict(os.environ, PYTHONPATH=ROOT, **env_extra)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return pickle.loads(r.stdout)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
@pytest.mark.parametrize("nthreads", ["1", "2"])
def test_streamed_outputs_same_bits(isa, nthreads):
    """Streamed (non-temporal) outputs equal the cached path's, for every
    layout, dtype, alignment and tail, at each ISA level and thread count."""
    env = {"PYAUTODIFF_ISA": isa, "PYAUTODIFF_NUM_THREADS": nthreads}
    level, plain = _run(STREAM_SCRIPT, **env)
    level2, streamed = _run(STREAM_SCRIPT, PYAUTODIFF_STREAM_BYTES="0", **env)
    assert level == level2
    assert len(plain) == len(streamed)
    for i, (p, s) in enumerate(zip(plain, streamed)):
        assert p == s, f"output {i} differs when streamed ({level})"


def test_streamed_outputs_match_numpy():
    """The streamed path in this process's ISA level against numpy."""
    script = r"""
import pickle, sys
import numpy as np, pyautodiff as ad
rng = np.random.default_rng(2)
a = rng.standard_normal(100_003).astype(np.float32)
b = rng.standard_normal(100_003).astype(np.float32)
t, u = ad.from_numpy(a), ad.from_numpy(b)
ad.set_num_threads(2)  # the copies split into blocks over the threads
pickle.dump([(t + u).numpy(), (t * u).numpy(), t[1:].exp().numpy(), (t[2:] - u[:-2]).numpy(),
             t[3:].clone().numpy(), ad.from_numpy(b[1:]).numpy()],
            sys.stdout.buffer)
"""
    got = _run(script, PYAUTODIFF_STREAM_BYTES="0")
    rng = np.random.default_rng(2)
    a = rng.standard_normal(100_003).astype(np.float32)
    b = rng.standard_normal(100_003).astype(np.float32)
    np.testing.assert_array_equal(got[0], a + b)
    np.testing.assert_array_equal(got[1], a * b)
    np.testing.assert_allclose(got[2], np.exp(a[1:].astype(np.float64)), rtol=2e-7)
    np.testing.assert_array_equal(got[3], a[2:] - b[:-2])
    np.testing.assert_array_equal(got[4], a[3:])
    np.testing.assert_array_equal(got[5], b[1:])


# ---- softmax rows ----------------------------------------------------------------------
def _ulps(got, want):
    w32 = want.astype(np.float32)
    return np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(w32)).astype(np.float64)


def _lanes():
    """Lanes of every length up to 40 (each tail of an 8- and a 16-lane step),
    and long ones, with dominant, tied, huge and tiny entries."""
    rng = np.random.default_rng(9)
    rows = [(rng.standard_normal(n) * 5).astype(np.float32) for n in range(1, 41)]
    rows += [(rng.standard_normal(n) * 20).astype(np.float32) for n in (1000, 4099)]
    r = (rng.standard_normal(37) * 3).astype(np.float32)
    r[11] = 95.0  # the others' terms underflow to 0 or denormals
    rows.append(r)
    rows.append(np.full(19, -7.25, np.float32))  # all equal: 1/19 each
    rows.append(np.array([3e38, -3e38, 1e-45, 0.0, -0.0], np.float32))  # x - m overflows
    r = (rng.standard_normal(33) * 3).astype(np.float32)
    r[[2, 30]] = -np.inf  # finite max: those terms are 0
    rows.append(r)
    # causal-mask rows (-inf above the diagonal) and masked_fill(-1e9) rows: terms that
    # round to 0 are never computed (no underflow), mixed in one vector with live ones
    s = (rng.standard_normal((64, 64)) * 2).astype(np.float32)
    for i in (0, 1, 7, 15, 16, 17, 40, 63):
        rows.append(np.where(np.arange(64) <= i, s[i], np.float32(-np.inf)).astype(np.float32))
        rows.append(np.where(np.arange(64) <= i, s[i], np.float32(-1e9)).astype(np.float32))
    # x - max around the flush bound (-104) and in the denormal window
    rows.append(np.concatenate([[0.0], -np.linspace(80, 110, 47)]).astype(np.float32))
    return rows


def _softmax64(x):
    e = np.exp(x - x.max())
    return e / e.sum()


@pytest.mark.parametrize("mode", ["softmax", "log_softmax", "logsumexp"])
def test_softmax_rows_ulps(threads, mode):
    for x in _lanes():
        # the same lane as one row of a batch large enough to be split over threads
        batch = np.tile(x, (max(2, 40_000 // x.size), 1))
        with np.errstate(all="ignore"):
            got = getattr(ad.from_numpy(batch), mode)(1).numpy()
            xd = x.astype(np.float64)
            lse = xd.max() + np.log(np.exp(xd - xd.max()).sum())
        for row in (got[0], got[-1]):
            if mode == "softmax":
                ref = _softmax64(xd)
                normal = ref >= np.finfo(np.float32).tiny
                assert _ulps(row[normal], ref[normal]).max() <= 4, x.size
                np.testing.assert_allclose(row[~normal], ref[~normal], rtol=0,
                                           atol=4 * 2.0 ** -149)
            elif mode == "log_softmax":
                ref = xd - lse
                with np.errstate(all="ignore"):
                    ref32 = ref.astype(np.float32)  # -6e38 is -inf in float32
                fin = np.isfinite(ref32)
                np.testing.assert_array_equal(row[~fin], ref32[~fin])
                scale = np.maximum(np.abs(ref[fin]), np.abs(xd[fin] - xd.max()))
                err = np.abs(row[fin] - ref[fin]) / np.spacing(scale.astype(np.float32))
                assert err.max() <= 4, x.size
            else:
                assert _ulps(np.array([row]), np.array([lse])).max() <= 4, x.size
        np.testing.assert_array_equal(got[0], got[-1])


def test_softmax_rows_nonfinite():
    """NaN anywhere in a lane gives NaN (the row kernel); an infinite maximum
    leaves the lane to the double loop (inf minus inf is NaN, -inf rows)."""
    x = np.zeros((6, 21), np.float32)
    x[0, 5] = np.nan
    x[1, 20] = np.nan  # in the tail
    x[2, 3] = np.inf
    x[3, :] = -np.inf
    x[4, 7] = -np.inf
    with np.errstate(all="ignore"):
        sm = ad.from_numpy(x).softmax(1).numpy()
        ls = ad.from_numpy(x).log_softmax(1).numpy()
        lse = ad.from_numpy(x).logsumexp(1).numpy()
    assert np.isnan(sm[0]).all() and np.isnan(sm[1]).all()
    assert np.isnan(ls[0]).all() and np.isnan(lse[:2]).all()
    assert lse[2] == np.inf and lse[3] == -np.inf
    assert sm[4, 7] == 0 and ls[4, 7] == -np.inf
    np.testing.assert_allclose(sm[4, :7], 1 / 20, rtol=1e-6)
    np.testing.assert_allclose(sm[5], 1 / 21, rtol=1e-6)


ACT_GRAD_SCRIPT = r"""
import pickle, sys
import numpy as np, pyautodiff as ad
from pyautodiff._lib import ffi, lib
rng = np.random.default_rng(5)
x = np.concatenate([rng.standard_normal(40_013) * 4, np.linspace(-25, 25, 1001),
                    [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 88.0, -88.0]])
x = x.astype(np.float32)
g = rng.standard_normal(x.size).astype(np.float32)
g[:5] = [np.inf, np.nan, -np.inf, 0.0, -0.0]
g[-9:] = rng.standard_normal(9)
bad = []
for name in ("relu", "tanh", "sigmoid", "silu"):
    for form in ("g", "one value", "strided g"):
        v = ad.Var(x)
        if form == "g":
            G = ad.from_numpy(g)
        elif form == "strided g":
            G = ad.from_numpy(np.stack([g, -g], 1))[:, 0]
        f = ((lambda: (getattr(v, name)() * G).sum()) if form != "one value"
             else (lambda: getattr(v, name)().sum()))
        with np.errstate(all="ignore"):
            (a,) = ad.grad(f(), [v])
            (b,) = ad.grad(f(), [v], create_graph=True)
        a, b = a.numpy(), b.numpy()
        if not (np.array_equal(a, b, equal_nan=True)
                and np.array_equal(np.signbit(a), np.signbit(b))):
            bad.append((name, form))
pickle.dump((ffi.string(lib.ad_gemm_kernel()).decode(), bad), sys.stdout.buffer)
"""


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
@pytest.mark.parametrize("nthreads", ["1", "2"])
def test_activation_grads_one_pass_same_bits(isa, nthreads):
    """relu's, tanh's, sigmoid's and silu's float32 gradient in one pass (no
    create_graph) has the recorded formula's bits (create_graph), inf / NaN
    in x and g included, for a contiguous, a strided and a one-value g, at
    each ISA level (the portable one records the formula) and thread count."""
    level, bad = _run(ACT_GRAD_SCRIPT, PYAUTODIFF_ISA=isa, PYAUTODIFF_NUM_THREADS=nthreads)
    if level != isa:
        pytest.skip(f"this CPU lacks {isa}")
    assert not bad, bad


def test_softmax_rows_signed_zero_max():
    """A zero maximum's sign (the lanes folded by a tree of max) never shows:
    the rows with every -0.0 made +0.0 give the same bits."""
    rows = np.zeros((4, 35), np.float32) - 1.5
    rows[0, [0, 20]] = [-0.0, 0.0]
    rows[1, [3, 19, 34]] = [0.0, -0.0, -0.0]
    rows[2, :] = -0.0
    rows[3, 16] = -0.0
    plus = rows + np.float32(0.0)  # -0.0 + 0.0 is +0.0
    assert np.signbit(rows).sum() > np.signbit(plus).sum() > 0
    for mode in ("softmax", "log_softmax", "logsumexp"):
        a = getattr(ad.from_numpy(rows), mode)(1).numpy()
        b = getattr(ad.from_numpy(plus), mode)(1).numpy()
        assert a.tobytes() == b.tobytes(), mode


def _softmax_grads(mode, x, g):
    """The one-pass gradient of sum(mode(x, 1) g) (no create_graph) and the
    recorded formula's (create_graph), and y = mode(x, 1)."""
    v = ad.Var(x)
    G = ad.from_numpy(g)
    with np.errstate(all="ignore"):
        (d,) = ad.grad((getattr(v, mode)(1) * G).sum(), [v])
        (dc,) = ad.grad((getattr(v, mode)(1) * G).sum(), [v], create_graph=True)
        y = getattr(ad.from_numpy(x), mode)(1).numpy()
    return d.numpy(), dc.numpy(), y


@pytest.mark.parametrize("mode", ["softmax", "log_softmax"])
def test_softmax_grad_rows(threads, mode):
    """softmax's and log_softmax's one-pass gradient, every lane of _lanes as a
    row of a batch split over threads: dx = y (g - sum(g y)) or g - e^y sum(g)
    from the float32 y in double, rounded once (within an ulp; log_softmax's
    e^y carries the exp map's ulp), and close to the recorded formula."""
    rng = np.random.default_rng(12)
    for x in _lanes():
        batch = np.tile(x, (max(2, 40_000 // x.size), 1))
        g = rng.standard_normal(batch.shape).astype(np.float32)
        g[-1] = g[0]  # the last row repeats the first: the same bits
        d, dc, y = _softmax_grads(mode, batch, g)
        yd, gd = y.astype(np.float64), g.astype(np.float64)
        with np.errstate(all="ignore"):
            if mode == "softmax":
                ref = yd * (gd - (gd * yd).sum(1, keepdims=True))
                slack = np.zeros_like(ref)
            else:
                e = np.exp(yd)
                ref = gd - e * gd.sum(1, keepdims=True)
                slack = 2 * np.spacing(e.astype(np.float32)) * np.abs(gd.sum(1, keepdims=True))
        tol = np.spacing(np.abs(ref).astype(np.float32)) + slack + 1e-12 * np.abs(gd).max()
        assert (np.abs(d - ref) <= tol).all(), x.size
        np.testing.assert_allclose(d, dc, rtol=1e-4, atol=1e-5 * np.abs(g).max())
        np.testing.assert_array_equal(d[0], d[-1])


def test_softmax_grad_nonfinite():
    """inf / NaN in the gradient or the input reach dx as in the recorded
    formula: a NaN or inf g makes its row's sum non-finite."""
    x = np.random.default_rng(3).standard_normal((6, 37)).astype(np.float32)
    g = np.random.default_rng(4).standard_normal((6, 37)).astype(np.float32)
    g[0, 3], g[1, 36], g[2, 5] = np.nan, np.inf, -np.inf
    x[3, 7] = -np.inf  # softmax 0, log_softmax -inf there
    x[4, :] = -np.inf  # an all -inf row: NaN outputs
    x[5, 9] = np.nan
    for mode in ("softmax", "log_softmax"):
        d, dc, _ = _softmax_grads(mode, x, g)
        np.testing.assert_array_equal(np.isnan(d), np.isnan(dc))
        np.testing.assert_array_equal(np.isinf(d), np.isinf(dc))
        fin = np.isfinite(d)
        np.testing.assert_allclose(d[fin], dc[fin], rtol=1e-4, atol=1e-5)
        assert np.isnan(d[0]).all() and np.isfinite(d[3]).all()


SOFTMAX_SCRIPT = r"""
import pickle, sys
import numpy as np, pyautodiff as ad
from pyautodiff._lib import ffi, lib
rng = np.random.default_rng(4)
outs = []
for n in list(range(1, 34)) + [1000, 4099]:
    x = ad.from_numpy((rng.standard_normal((3, n)) * 9).astype(np.float32))
    outs += [x.softmax(1), x.log_softmax(1), x.logsumexp(1)]
m = (rng.standard_normal((70, 70)) * 3).astype(np.float32)
m[np.triu_indices(70, 1)] = -np.inf  # causal mask
m[5, :] = -np.linspace(0, 120, 70)  # terms through the denormal window and the flush bound
x = ad.from_numpy(m)
outs += [x.softmax(1), x.log_softmax(1), x.logsumexp(1)]
# lanes side by side along dim 0, a vector of them at a time (cols_softmax):
# the causal mask's columns, NaN and inf lanes, ragged groups
m[3, 7] = np.nan
m[:, 11] = np.nan
m[9, 20] = np.inf
for x in (ad.from_numpy(m), ad.from_numpy(m[:, :37]), ad.from_numpy(m[:13, :5])):
    outs += [x.softmax(0), x.log_softmax(0), x.logsumexp(0)]
for shape in ((12, 40), (2, 10, 9, 31)):  # and their gradients
    v = ad.Var((rng.standard_normal(shape) * 3).astype(np.float32))
    g = ad.from_numpy(rng.standard_normal(shape).astype(np.float32))
    d = 0 if len(shape) == 2 else 1
    outs += [ad.grad((v.softmax(d) * g).sum(), [v])[0],
             ad.grad((v.log_softmax(d) * g).sum(), [v])[0]]
for n in (1, 7, 16, 33, 1000):  # the one-pass gradients
    v = ad.Var((rng.standard_normal((3, n)) * 9).astype(np.float32))
    g = ad.from_numpy(rng.standard_normal((3, n)).astype(np.float32))
    outs += [ad.grad((v.softmax(1) * g).sum(), [v])[0],
             ad.grad((v.log_softmax(1) * g).sum(), [v])[0]]
    # g - sum(g y) cancels for a constant g: dx shows the sum's last bits
    outs += [ad.grad(v.softmax(1).sum(), [v])[0], ad.grad(v.log_softmax(1).sum(), [v])[0]]
pickle.dump((ffi.string(lib.ad_gemm_kernel()).decode(),
             [o.numpy().tobytes() for o in outs]), sys.stdout.buffer)
"""


def test_softmax_rows_same_bits_avx2_avx512():
    """The row kernel's partial sums are folded in one order at both levels."""
    outs = {}
    for isa in ("avx512", "avx2"):
        level, data = _run(SOFTMAX_SCRIPT, PYAUTODIFF_ISA=isa)
        if level == isa:
            outs[isa] = data
    if len(outs) < 2:
        pytest.skip("this CPU lacks AVX-512 (or AVX2)")
    for i, (a, b) in enumerate(zip(outs["avx512"], outs["avx2"])):
        assert a == b, f"softmax output {i} differs between AVX-512 and AVX2"


# ---- float32 exp / tanh / sigmoid / silu maps: ulp sweeps at every ISA level -------------
# Each level runs in its own process (PYAUTODIFF_ISA caps the level the elementwise tables
# are picked for, once per process).  The inputs: every 4093rd float32 bit pattern (all
# exponents, denormals, inf, NaN), dense steps over the ranges where the algorithms change
# (the exp clamp and its denormal results, tanh's saturation, sigmoid's tails), and edge
# values.  Reference: numpy float64.
MAP_SCRIPT = r"""
import pickle, sys
import numpy as np, pyautodiff as ad
from pyautodiff._lib import ffi, lib
bits = np.arange(0, 2 ** 32, 4093, dtype=np.uint64).astype(np.uint32)
f = np.finfo(np.float32)
x = np.concatenate([
    bits.view(np.float32),
    np.linspace(-105, 90, 400_001),           # exp: clamp bounds, denormal results, overflow
    np.linspace(-1, 1, 200_001),              # tanh / sigmoid near 0, the expm1 side
    np.linspace(-12, 12, 200_001),            # tanh saturation (1.0f from 9.01), sigmoid tails
    np.geomspace(1e-45, 1, 100_000), -np.geomspace(1e-45, 1, 100_000),
    [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, f.tiny, -f.tiny, f.smallest_subnormal,
     -f.smallest_subnormal, f.max, -f.max, 88.72283, 88.722839, 88.7229, -87.33655, -103.97208, 9.1, -9.1,
     -103.972, -104.0, 89.0, 9.01, -9.01, 10.0, -10.0, 0.625, -0.625, 0.34657359, -0.34657359],
]).astype(np.float32)
t = ad.from_numpy(x)
with np.errstate(all="ignore"):
    outs = {name: getattr(t, name)().numpy() for name in ("exp", "tanh", "sigmoid", "silu")}
pickle.dump((ffi.string(lib.ad_gemm_kernel()).decode(), x, outs), sys.stdout.buffer)
"""

_MAP_RESULTS = {}


def _maps_at(isa):
    """(x, {op: output}) at an ISA level, or skip when the CPU lacks it."""
    if isa not in _MAP_RESULTS:
        _MAP_RESULTS[isa] = _run(MAP_SCRIPT, PYAUTODIFF_ISA=isa)
    level, x, outs = _MAP_RESULTS[isa]
    if level != isa:
        pytest.skip(f"this CPU has no {isa} level")
    return x, outs


def _ref(name, x):
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if name == "exp":
            return np.exp(x)
        if name == "tanh":
            return np.tanh(x)
        sig = np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x)))
        return sig if name == "sigmoid" else x * sig


# the SIMD maps' measured maxima over every third float32 bit pattern (AVX-512 = AVX2 bit
# for bit): exp 0.59 (0.58 on this sweep), tanh 1.95, sigmoid 2.40 ulp.  The portable level is
# libm's expf / tanhf (glibc's tanhf: 2.08 ulp on this sweep).
ULP_BOUND = {"exp": 0.65, "tanh": 2.0, "sigmoid": 2.5}
ULP_BOUND_LIBM = {"exp": 1.0, "tanh": 2.5, "sigmoid": 2.5}


def _spacing(w32):
    """float32 ulp of |w| as float64 (float32's largest value has the step of its binade)"""
    below_max = np.nextafter(np.finfo(np.float32).max, np.float32(0))
    return np.spacing(np.minimum(np.abs(w32), below_max)).astype(np.float64)


def _normal_mask(name, x):
    want = _ref(name, x)
    with np.errstate(over="ignore"):
        w32 = want.astype(np.float32)
    return np.isfinite(w32) & ~np.isnan(want) & (np.abs(want) >= np.finfo(np.float32).tiny)


def _map_errors(name, x, got):
    """(ulp errors of the normal results, absolute errors of the others in units of the
    smallest denormal); asserts the non-finite results and the zero signs."""
    want = _ref(name, x)
    with np.errstate(over="ignore"):
        want32 = want.astype(np.float32)
    got64 = got.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)

    inf = np.isinf(want32)
    np.testing.assert_array_equal(got[inf], want32[inf], err_msg=name)
    fin = ~np.isnan(want) & ~inf
    zero = fin & (want == 0)
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), err_msg=name)
    normal = _normal_mask(name, x)
    ulps = np.abs(got64[normal] - want[normal]) / _spacing(want32[normal])
    sub = fin & ~normal
    return ulps, np.abs(got64[sub] - want[sub]) / 2.0 ** -149


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid"])
def test_map_ulps(isa, name):
    """exp within 1 ulp, tanh within 2, sigmoid within 2.5 of float64 over a dense sweep of
    the float32 range; denormal results within one denormal step; inf, NaN and the sign of
    zero exact (tanh(-0) = -0, exp(-inf) = 0, sigmoid(-inf) = 0, sigmoid(inf) = 1)."""
    x, outs = _maps_at(isa)
    ulps, sub = _map_errors(name, x, outs[name])
    assert ulps.size > 1_000_000
    worst = int(np.flatnonzero(_normal_mask(name, x))[np.argmax(ulps)])
    bound = (ULP_BOUND_LIBM if isa == "portable" else ULP_BOUND)[name]
    assert ulps.max() <= bound, (name, isa, ulps.max(), x[worst])
    assert sub.size == 0 or sub.max() <= 1.0, (name, isa, sub.max())
    got = outs[name]
    special = {"exp": {-np.inf: 0.0, np.inf: np.inf, 0.0: 1.0},
               "tanh": {-np.inf: -1.0, np.inf: 1.0, 10.0: 1.0, 9.1: 1.0, -9.1: -1.0},
               "sigmoid": {-np.inf: 0.0, np.inf: 1.0, 0.0: 0.5, -200.0: 0.0}}[name]
    for v, want in special.items():
        idx = np.flatnonzero(x == np.float32(v))
        if idx.size:
            assert (got[idx] == want).all(), (name, v, got[idx])
    if name == "tanh":
        z = np.flatnonzero((x == 0) & np.signbit(x))
        assert np.signbit(got[z]).all()  # tanh(-0) = -0


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
def test_silu_ulps(isa):
    """silu = x sigmoid(x) from the same e^-|x|: within 3 ulp wherever e^x is normal (below
    x = -87.3, x e^x is formed from a denormal e^x and keeps fewer digits)."""
    x, outs = _maps_at(isa)
    keep = x > -87
    ulps, _ = _map_errors("silu", x[keep], outs["silu"][keep])
    assert ulps.size > 1_000_000 and ulps.max() <= 3.0, ulps.max()


def test_maps_same_bits_avx2_avx512():
    """The SIMD maps do the same operations in the same order at both levels (V_LDEXP is
    scalef at AVX-512 and two exact power-of-two factors at AVX2): the same bits for
    every input of the sweep, NaN payloads and signs included."""
    _, a = _maps_at("avx512")
    _, b = _maps_at("avx2")
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name


# ---- the flushed lanes: results known without computing them ------------------------------
# An Intel core takes a microcode assist for every instruction with an underflowing lane, so
# the maps give the lanes whose result is known (exp of x <= -104, e^-|x| where 1 + e^-|x|
# is 1, erf's and gelu_erf's flat tails) that result without computing e^x there.  A lane's
# result must not depend on its neighbours: each input is mapped once in a vector of its own
# value and once mixed with ordinary inputs, at both SIMD levels.
FLUSH_SCRIPT = r"""
import pickle, sys
import numpy as np, pyautodiff as ad
from pyautodiff._lib import ffi, lib
edges = [-104.0, -103.97208, -87.33655, -17.0, 4.0, 3.92, 7.0, 7.5, -14.25, -14.218779,
         -13.2, 9.9, 10.5, 16.6, 20.0, -20.0, -104.5, 104.0,
         9.0, -9.986398, 1e30]  # gelu's fast bound, its e^w reaching 87 (w raised to -17 first)
x = [np.float32(-np.inf), np.float32(np.inf), np.float32(np.nan), np.float32(-200.0)]
for e in edges:
    v = np.float32(e)
    for k in range(-3, 4):  # the neighbouring floats
        x.append(np.nextafter(v, np.float32(np.inf if k > 0 else -np.inf)) if k else v)
        for _ in range(abs(k) - 1):
            x[-1] = np.nextafter(x[-1], np.float32(np.inf if k > 0 else -np.inf))
x = np.array(x, np.float32)
x = np.concatenate([x, -x])
rng = np.random.default_rng(6)
mixed = rng.standard_normal(16 * x.size).astype(np.float32)
mixed[5::16] = x  # each edge in a vector of ordinary values, at lane 5 (and 13 at AVX2)
alone = np.repeat(x, 16)  # each edge in a vector of its own
outs = {}
with np.errstate(all="ignore"):
    for name in ("exp", "tanh", "sigmoid", "silu", "gelu", "erf", "gelu_erf"):
        outs[name] = (getattr(ad.from_numpy(mixed), name)().numpy()[5::16],
                      getattr(ad.from_numpy(alone), name)().numpy()[::16])
    v, w = ad.Var(mixed), ad.Var(alone)
    outs["gelu_erf_grad"] = (v.gelu_erf().sum().backward()[v].numpy()[5::16],
                             w.gelu_erf().sum().backward()[w].numpy()[::16])
    outs["gelu_grad"] = (v.gelu().sum().backward()[v].numpy()[5::16],
                         w.gelu().sum().backward()[w].numpy()[::16])
pickle.dump((ffi.string(lib.ad_gemm_kernel()).decode(), x, outs), sys.stdout.buffer)
"""


def test_flushed_lanes():
    outs = {}
    for isa in ("avx512", "avx2"):
        level, x, o = _run(FLUSH_SCRIPT, PYAUTODIFF_ISA=isa)
        if level == isa:
            outs[isa] = o
    if not outs:
        pytest.skip("no SIMD level on this CPU")
    for isa, o in outs.items():
        for name, (mixed, alone) in o.items():
            assert mixed.tobytes() == alone.tobytes(), (isa, name, x[mixed != alone])
        exp, sig, silu = o["exp"][0], o["sigmoid"][0], o["silu"][0]
        gelu, erf, ge = o["gelu"][0], o["erf"][0], o["gelu_erf"][0]
        with np.errstate(all="ignore"):
            assert (exp[x <= -104] == 0).all() and not np.signbit(exp[x <= -104]).any()
            mid = (x > -104) & (x < 88)
            np.testing.assert_allclose(exp[mid], np.exp(x[mid].astype(np.float64)),
                                       rtol=2e-7, atol=2.0 ** -149)
            big = x >= 20
            assert (sig[big] == 1).all() and (silu[big] == x[big]).all()
            assert (sig[x <= -104] == 0).all() and (silu[(x <= -104) & (x > -np.inf)] == 0).all()
            assert (gelu[x >= 10] == x[x >= 10]).all()
            assert (erf[x >= 4] == 1).all() and (erf[x <= -4] == -1).all()
            assert (ge[x >= 7.5] == x[x >= 7.5]).all()
            low = (x <= -14.25) & (x > -np.inf)
            assert (ge[low] == 0).all() and np.signbit(ge[low]).all()  # -0
            assert np.isnan(ge[x == -np.inf]).all() and np.isnan(ge[np.isnan(x)]).all()
            g = o["gelu_erf_grad"][0]
            fin = np.isfinite(x)  # x phi(x) is inf * 0 at +-inf: NaN
            assert (g[fin & (x >= 7)] == 1).all() and (g[fin & (x <= -14.5)] == 0).all()
            g = o["gelu_grad"][0]
            assert (g[x >= 10] == 1).all() and (g[x <= -10] == 0).all() and np.isnan(g[np.isnan(x)]).all()
    if len(outs) == 2:
        for name in outs["avx512"]:
            for a, b in zip(outs["avx512"][name], outs["avx2"][name]):
                assert a.tobytes() == b.tobytes(), name


# The n-d iterator (strided.c nditer_run): one dim, rows (its own loop) and
# the odometer past that, for 2, 3 and 4 operands (a unary map, a binary op,
# where), with transposed, sliced and broadcast operands, large enough that
# 2 threads cut the rows into slices that start mid-array; a transposed
# operand takes tiles (16 x 64, or 128 x 16 for a row of a multiple of 1 KiB:
# "pow2"), cut at ragged edges. numpy gives every value exactly (add, exp at
# one level and where are elementwise, one rounding).
@pytest.mark.parametrize("shape", [(70001,), (4099, 64), (300, 7, 65), (3, 5, 7, 1111),
                                   (520, 256)],
                         ids=["1d", "rows", "3d", "4d", "pow2"])
def test_nditer_layouts(shape, threads):
    rng = np.random.default_rng(len(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    row = rng.standard_normal(shape[-1]).astype(np.float32)
    col = rng.standard_normal(shape[:-1] + (1,)).astype(np.float32)
    cond = rng.standard_normal(shape) > 0
    full = np.ascontiguousarray(a[..., ::-1])
    ta, tf = ad.from_numpy(a), ad.from_numpy(full)
    cases = [
        (ta + ad.from_numpy(row), a + row),                 # broadcast row
        (ta * ad.from_numpy(col), a * col),                 # broadcast column
        (tf[..., ::2] - ta[..., ::2], full[..., ::2] - a[..., ::2]),  # strided slices
        (ad.where(ad.from_numpy(cond), ta, ad.from_numpy(row)), np.where(cond, a, row)),
    ]
    if len(shape) > 1:
        at = np.swapaxes(a, 0, -1)
        tt = ta.transpose(0, -1)
        cases.append((tt + ad.from_numpy(at), at + at))  # transposed
        cases.append((tt.exp(), None))
        # both operands transposed, one flipped (negative steps) in both dims
        cases.append((tt[::-1, ..., ::-1] * tt, at[::-1, ..., ::-1] * at))
        ct = np.swapaxes(cond, 0, -1)  # where of transposed operands (4 of them)
        cases.append((ad.where(ad.from_numpy(cond).transpose(0, -1), tt, tt[::-1]),
                      np.where(ct, at, at[::-1])))
        # a transposed bool converted (1-byte reads, 8-byte writes), a comparison
        cases.append((ad.from_numpy(cond).transpose(0, -1).to_dtype("float64"),
                      ct.astype(np.float64)))
        cases.append((tt > tt[::-1], at > at[::-1]))
    for got, want in cases:
        if want is None:  # the map over a transposed view, against the contiguous map
            want = ad.from_numpy(np.ascontiguousarray(np.swapaxes(a, 0, -1))).exp().numpy()
        np.testing.assert_array_equal(got.numpy(), want)


# Lanes side by side along dim 0 run a vector of lanes at a time (lanes.c
# lanes_cols, simd_math.h cols_softmax); lanes whose maximum is not finite, or
# whose softmax sum is NaN, go back to the row kernel: every lane the bits of
# the contiguous lane, NaN payloads included, ragged groups, 1 and 2 threads.
@pytest.mark.parametrize("shape", [(12, 40), (3, 17), (1, 9), (33, 5)])
def test_side_by_side_lanes_special_values_same_bits(shape, threads):
    rng = np.random.default_rng(shape[1])
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    cols = shape[1]
    x[:, 3 % cols] = np.nan                  # an all-NaN lane: maximum -inf
    x[0, 5 % cols] = np.nan                  # a NaN among finite values
    x[:, 7 % cols] = -np.inf                 # an all -inf lane
    x[-1, 8 % cols] = np.inf                 # an inf maximum
    x[0, 2 % cols] = -np.inf                 # a -inf term
    x[:, 6 % cols] = -np.linspace(0, 120, shape[0])  # terms down to the denormals
    t, tc = ad.from_numpy(x), ad.from_numpy(np.ascontiguousarray(x.T))
    for name in ("softmax", "log_softmax", "logsumexp"):
        got = getattr(t, name)(0).numpy()
        want = getattr(tc, name)(1).numpy()
        want = want.T if want.ndim == 2 else want
        np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint32),
                                      np.ascontiguousarray(want).view(np.uint32), err_msg=name)


# Their gradients (nn.c smg_units, simd_math.h cols_softmax_grad): float32
# lanes side by side (an NCHW tensor's channels, dim 0 of a matrix) get the
# contiguous lane's gradient bits, ragged groups and blocks, 1 and 2 threads.
@pytest.mark.parametrize("shape,dim", [((12, 40), 0), ((3, 300), 0), ((2, 10, 9, 31), 1),
                                       ((33, 5), 0)])
def test_side_by_side_lane_gradients_same_bits(shape, dim, threads):
    rng = np.random.default_rng(len(shape) + shape[-1])
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    moved = lambda a: np.ascontiguousarray(np.moveaxis(a, dim, -1))
    for name in ("softmax", "log_softmax"):
        v, vc = ad.Var(x), ad.Var(moved(x))
        got = ad.grad((getattr(v, name)(dim) * ad.from_numpy(g)).sum(), [v])[0].numpy()
        want = ad.grad((getattr(vc, name)(-1) * ad.from_numpy(moved(g))).sum(), [vc])[0].numpy()
        np.testing.assert_array_equal(moved(got).view(np.uint32), want.view(np.uint32),
                                      err_msg=name)
        # against float64
        xd = x.astype(np.float64)
        e = np.exp(xd - xd.max(dim, keepdims=True))
        sm = e / e.sum(dim, keepdims=True)
        ref = (sm * (g - (g * sm).sum(dim, keepdims=True)) if name == "softmax" else
               g - sm * g.sum(dim, keepdims=True))
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-6)


# cumsum over dim 0 (lanes.c: whole rows of a strip of 64 lanes at a time,
# lanes_dtype.h cumsum_cols) and its gradient (the reversed sums): each lane
# summed in double in order, as numpy's float64 cumsum, ragged strips, lanes a
# step of -1 apart, 1 and 2 threads.
@pytest.mark.parametrize("shape", [(5, 1), (300, 63), (300, 65), (4096, 130), (2, 1000)])
def test_cumsum_over_dim0(shape, threads):
    rng = np.random.default_rng(shape[1])
    for dt in (np.float32, np.float64):
        x = rng.standard_normal(shape).astype(dt)
        g = rng.standard_normal(shape).astype(dt)
        want = np.cumsum(x.astype(np.float64), 0).astype(dt)
        np.testing.assert_array_equal(ad.from_numpy(x).cumsum(0).numpy(), want)
        np.testing.assert_array_equal(ad.from_numpy(x)[:, ::-1].cumsum(0).numpy(), want[:, ::-1])
        v = ad.Var(x)
        dx = ad.grad((v.cumsum(0) * ad.from_numpy(g)).sum(), [v])[0].numpy()
        rev = np.cumsum(g[::-1].astype(np.float64), 0)[::-1].astype(dt)
        np.testing.assert_array_equal(dx, rev)


# Copies of transposed planes (strided.c copy_plane: register blocks of 8 x 8
# 4-byte or 4 x 4 8-byte elements at AVX2 and above, the tiled row walk
# otherwise): every bit kept (NaN payloads, -0, denormals: random bit
# patterns), ragged edges of blocks and tiles, sliced, offset, reversed,
# broadcast and batched sources, every dtype; at each ISA level in a
# subprocess and at 1 and 2 threads here.
def check_transposed_copies():
    rng = np.random.default_rng(11)
    bits = {np.float32: np.uint32, np.int32: np.uint32, np.float64: np.uint64,
            np.int64: np.uint64}
    for dt in (np.float32, np.int32, np.float64, np.int64, np.uint8, np.bool_):
        for shape in ((8, 8), (9, 17), (16, 128), (17, 129), (133, 261), (1000, 37),
                      (2, 300, 40)):
            if dt in bits:
                raw = rng.integers(0, np.iinfo(bits[dt]).max, shape, dtype=bits[dt],
                                   endpoint=True)
                x = raw.view(dt)
            else:
                x = rng.integers(0, 2 if dt == np.bool_ else 256, shape).astype(dt)
            t = ad.from_numpy(x)
            views = [(t.transpose(-2, -1), np.swapaxes(x, -2, -1)),
                     (t[..., ::-1, :].transpose(-2, -1), np.swapaxes(x[..., ::-1, :], -2, -1)),
                     (t[..., ::3, 1:].transpose(-2, -1), np.swapaxes(x[..., ::3, 1:], -2, -1)),
                     (t[..., 1:, ::2].transpose(-2, -1), np.swapaxes(x[..., 1:, ::2], -2, -1)),
                     (t.transpose(-2, -1)[::-1], np.swapaxes(x, -2, -1)[::-1])]
            if len(shape) == 3:
                views.append((t.permute(2, 1, 0), x.transpose(2, 1, 0)))
                views.append((t.permute(1, 2, 0), x.transpose(1, 2, 0)))
            col = ad.from_numpy(np.ascontiguousarray(x[..., :1]))  # (.., n, 1)
            views.append((col.expand(*shape), np.broadcast_to(x[..., :1], shape)))
            for got, want in views:
                g = got.contiguous().numpy()
                assert g.shape == want.shape and g.dtype == want.dtype
                if dt in bits:
                    g, want = g.view(bits[dt]), np.ascontiguousarray(want).view(bits[dt])
                np.testing.assert_array_equal(g, want, err_msg=f"{dt.__name__} {shape}")


def test_transposed_copies(threads):
    check_transposed_copies()


@pytest.mark.parametrize("isa", ["avx2", "portable"])
def test_transposed_copies_each_level(isa):
    script = ("import sys, pickle; sys.path.insert(0, %r); import test_ew_kernels as t; "
              "t.check_transposed_copies(); sys.stdout.buffer.write(pickle.dumps(1))"
              % os.path.dirname(os.path.abspath(__file__)))
    assert _run(script, PYAUTODIFF_ISA=isa, PYAUTODIFF_NUM_THREADS="2") == 1


# Lanes side by side but strided along the dim (lanes.c lane_inner: softmax
# over dim 0, an NCHW log_softmax over channels) run in groups through a
# buffer as contiguous lanes: the same bits as the contiguous lanes of the
# moved-axis copy, for every op of the family, a ragged last group (37 and
# 1001 lanes), empty lanes, a full buffer (2048: groups of 2), lanes a step
# of -1 apart, a reduction's one output a lane, a transposed input whose
# output lanes are rows, and both float dtypes (int64 for cumsum), at 1 and 2
# threads; lanes too long to group (5000): float32 softmax family over dim 0
# in the column kernel, bit for bit at any length; the others keep the
# strided exp path, which sums as the row kernel does: bit for bit too.
@pytest.mark.parametrize("length", [0, 1, 7, 64, 300, 2048, 5000])
def test_strided_lanes_same_bits_as_contiguous(length, threads):
    rng = np.random.default_rng(length)
    for dt in (np.float32, np.float64, np.int64):
        for lanes in ((37, 1001) if length < 2048 else (37,)):
            if dt == np.int64:
                x = rng.integers(-1000, 1000, (length, lanes)).astype(dt)
            else:
                x = (rng.standard_normal((length, lanes)) * 4).astype(dt)
            t = ad.from_numpy(x)
            tc = ad.from_numpy(np.ascontiguousarray(x.T))  # the lanes contiguous
            ops = [("cumsum", lambda u, d: u.cumsum(d))]
            if dt != np.int64:
                ops += [("softmax", lambda u, d: u.softmax(d)),
                        ("log_softmax", lambda u, d: u.log_softmax(d)),
                        ("logsumexp", lambda u, d: u.logsumexp(d))]
            for name, f in ops:
                want = f(tc, 1).numpy()
                got = f(t, 0).numpy()  # lanes along dim 0, side by side (any length)
                np.testing.assert_array_equal(got, want.T if want.ndim == 2 else want, name)
                got_t = f(t.t(), 1).numpy()  # a transposed input: output lanes are rows
                np.testing.assert_array_equal(got_t, want, name)
                flip = f(ad.from_numpy(np.ascontiguousarray(x[:, ::-1])), 0).numpy()
                np.testing.assert_array_equal(f(t[:, ::-1], 0).numpy(), flip, name)  # lanes a step of -1 apart
            if dt == np.float64 and length:  # and right: float64 numpy
                ref = np.exp(x - x.max(0)) / np.exp(x - x.max(0)).sum(0)
                np.testing.assert_allclose(t.softmax(0).numpy(), ref, rtol=1e-12, atol=1e-300)


MSE_SCRIPT = r"""
import pickle, sys
import numpy as np, pyautodiff as ad
from pyautodiff._lib import ffi, lib
rng = np.random.default_rng(5)
outs = []
# every tail of the 16 accumulators, past one 16384-element chunk, past the threads' split
for n in (1, 15, 16, 17, 31, 16384 + 7, 300001):
    for dt in (np.float32, np.float64):
        x, y = (rng.standard_normal((2, n)) * 3).astype(dt)
        for red in ("sum", "mean", "none"):
            outs.append(ad.nn.functional.mse_loss(ad.tensor(x), ad.tensor(y), reduction=red)
                        .numpy().tobytes())
pickle.dump((ffi.string(lib.ad_gemm_kernel()).decode(), outs), sys.stdout.buffer)
"""


def test_mse_loss_same_bits_on_every_isa():
    """mse_loss's pass (sixteen double accumulators, the x86 levels widening
    floats by their own instruction, the portable level by the generic
    conversion) gives the same bits at every level and thread count, and its
    sum is the float64 sum of the squares to a few ulps."""
    runs = {(isa, th): _run(MSE_SCRIPT, PYAUTODIFF_ISA=isa, PYAUTODIFF_NUM_THREADS=th)[1]
            for isa in ("avx512", "avx2", "portable") for th in ("1", "2")}
    first = runs[("portable", "1")]
    for key, outs in runs.items():
        assert outs == first, f"mse_loss bits differ at {key}"
    rng = np.random.default_rng(5)
    for n in (17, 300001):
        x, y = (rng.standard_normal((2, n)) * 3).astype(np.float64)
        got = ad.nn.functional.mse_loss(ad.tensor(x), ad.tensor(y), reduction="sum").item()
        want = math.fsum((x - y) ** 2)
        assert abs(got - want) <= 8 * np.spacing(want)


@pytest.mark.parametrize("threads", [1, 2])
def test_transposed_inputs_same_bits_as_contiguous(threads):
    """Elementwise ops read a transposed input (contiguous down the rows) a
    tile at a time through a buffer (strided.c run_planes): the results are
    those of the same ops on the contiguous tensor, bit for bit, for 4- and
    8-byte dtypes, tiles of both shapes (a power-of-two width takes 128 x 16)
    and edges off the 8 x 8 register blocks; at 2 threads, planes cut across
    their rows in whole tiles (1000 rows) and in fewer rows than two tiles
    (40), at the cheap ops' and the polynomials' block sizes; 4-d permutes
    whose contiguous dim is not next to the last one (strided.c
    move_to_plane)."""
    old = ad.get_num_threads()
    ad.set_num_threads(threads)
    try:
        rng = np.random.default_rng(21)
        for shape, perm in [((3, 37, 70), None), ((2, 256, 40), None), ((1, 9, 300), None),
                            ((130, 17), None), ((1000, 300), None), ((40, 3000), None),
                            ((9, 13, 20, 70), (3, 2, 1, 0)), ((3, 40, 9, 70), (0, 3, 1, 2)),
                            ((5, 7, 33, 19), (2, 3, 0, 1))]:
            for dt in (np.float32, np.float64, np.int32, np.int64):
                base = (rng.standard_normal(shape) * 10).astype(dt)
                if perm is None:  # the last two dims swapped
                    perm = tuple(range(len(shape) - 2)) + (len(shape) - 1, len(shape) - 2)
                inv = tuple(int(i) for i in np.argsort(perm))
                x = ad.tensor(np.ascontiguousarray(base.transpose(perm))).permute(inv)
                xc = ad.tensor(base)
                y = ad.tensor((rng.standard_normal(shape) * 10).astype(dt))
                ops = [lambda t: -t, lambda t: t.relu(), lambda t: t + y, lambda t: y * t,
                       lambda t: t * 3, lambda t: t - t.contiguous(), lambda t: t + t,
                       lambda t: ad.where(t > 0, t, y), lambda t: t.to_dtype(ad.float64)]
                if np.dtype(dt).kind == "f":
                    ops += [lambda t: t.exp(), lambda t: t.tanh(), lambda t: t.abs().sqrt(),
                            lambda t: t.sigmoid()]
                for op in ops:
                    got, want = op(x), op(xc)
                    assert got.numpy().tobytes() == want.numpy().tobytes(), (shape, dt)
                    np.testing.assert_array_equal(got.numpy(), want.numpy())
    finally:
        ad.set_num_threads(old)


@pytest.mark.parametrize("threads", [1, 2])
def test_unary_ops_of_a_broadcast_input_run_once_per_element(threads):
    """A unary or scalar op of an expanded tensor (stride 0 along a dim of
    extent > 1) runs on the distinct elements and broadcasts the result
    (elementwise.c run_unary_broadcast): the contiguous tensor's bits, for
    repeats inside, outside and on both sides of the kept dims, a 0-d source,
    every dtype the op takes, and a graph whose gradient sums the repeats."""
    old = ad.get_num_threads()
    ad.set_num_threads(threads)
    try:
        rng = np.random.default_rng(23)
        cases = [((5, 1, 3), (5, 4, 3)), ((1, 70), (600, 70)), ((600, 1), (600, 70)),
                 ((1, 1), (3, 4)), ((2, 1, 1, 33), (2, 5, 40, 33)), ((), (9, 9))]
        for src, shape in cases:
            for dt in (np.float32, np.float64, np.int32, np.int64, np.uint8):
                base = np.asarray(np.abs(rng.standard_normal(src)) * 5).astype(dt)
                x = ad.tensor(base).expand(*shape)
                xc = ad.tensor(np.ascontiguousarray(np.broadcast_to(base, shape)))
                ops = [lambda t: -t, lambda t: t.abs(), lambda t: t * 3, lambda t: t + 2]
                if np.dtype(dt).kind == "f":
                    ops += [lambda t: t.exp(), lambda t: t.tanh(), lambda t: t.sqrt(),
                            lambda t: t.sigmoid(), lambda t: t.gelu_erf(), lambda t: t ** 2.5,
                            lambda t: t.relu()]
                for op in ops:
                    got, want = op(x), op(xc)
                    assert got.shape == want.shape and got.dtype == want.dtype
                    assert got.numpy().tobytes() == want.numpy().tobytes(), (src, shape, dt)
        v = ad.Var(rng.standard_normal((4, 1)))
        g = v.expand(4, 5).tanh().sum().backward()[v]
        np.testing.assert_allclose(g.numpy(), 5 * (1 - np.tanh(v.numpy()) ** 2), rtol=1e-12)
    finally:
        ad.set_num_threads(old)


def test_lanes_of_a_transposed_tensor_run_on_a_copy():
    """softmax, log_softmax, logsumexp and cumsum along any dim of a
    transposed or permuted tensor (its last dim a stride apart) run on a
    contiguous copy from 4096 elements on, below on the strided lanes: either
    way the contiguous tensor's bits."""
    rng = np.random.default_rng(22)
    F = ad.nn.functional
    for shape, perm in [((4, 40, 33), None), ((3, 5, 7), None), ((200, 64), None),
                        ((4, 9, 12, 20), (0, 2, 3, 1)), ((5, 6, 7, 30), (3, 2, 1, 0))]:
        for dt in (np.float32, np.float64):
            a = rng.standard_normal(shape).astype(dt)
            if perm is None:
                perm = tuple(range(len(shape) - 2)) + (len(shape) - 1, len(shape) - 2)
            inv = tuple(int(i) for i in np.argsort(perm))
            x = ad.tensor(np.ascontiguousarray(a.transpose(perm))).permute(inv)
            xc = ad.tensor(a)
            for d in range(-1, -len(shape) - 1, -1):
                for op in (lambda t: F.softmax(t, d), lambda t: F.log_softmax(t, d),
                           lambda t: t.logsumexp(d), lambda t: t.cumsum(d)):
                    assert op(x).numpy().tobytes() == op(xc).numpy().tobytes(), (shape, dt, d)


def test_strided_lanes_not_side_by_side_same_bits_as_contiguous(threads):
    """float32 lanes a stride apart whose neighbours are not side by side (a
    sliced last dim) and contiguous lanes whose output is strided (a permuted
    input's unit-stride dim) take lanes.c's strided exp path: its terms
    e^d (1 + dl) in one FMA and its sum in the row kernel's 16 partials, so
    the contiguous lanes' bits (with e + e dl rounded twice and 8 partials,
    about 1 in 4000 elements of softmax / log_softmax was an ulp off)."""
    rng = np.random.default_rng(40)
    F = ad.nn.functional
    for _ in range(12):
        base = (rng.standard_normal((4, 64, 10)) * rng.choice([1, 10, 100])).astype(np.float32)
        views = [(ad.tensor(base)[:, :, 2::3], base[:, :, 2::3]),
                 (ad.tensor(np.ascontiguousarray(base.transpose(1, 2, 0))).permute(2, 0, 1),
                  base)]
        for x, a in views:
            for d in range(3):
                xc = ad.tensor(np.ascontiguousarray(np.moveaxis(a, d, -1)))
                for op in (lambda t, k: F.softmax(t, k), lambda t, k: F.log_softmax(t, k)):
                    want = np.moveaxis(op(xc, -1).numpy(), -1, d)
                    assert op(x, d).numpy().tobytes() == np.ascontiguousarray(want).tobytes(), d
                want = xc.logsumexp(-1).numpy()
                assert x.logsumexp(d).numpy().tobytes() == want.tobytes(), d
