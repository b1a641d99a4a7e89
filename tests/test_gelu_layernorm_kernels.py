"""gelu_erf's and gelu's one-pass backwards and layer_norm's vectorised rows.

Without create_graph, d gelu_erf, d gelu (the tanh form) and layer_norm's backward (dx, dweight,
dbias) run as native passes: float32 through the SIMD kernels at AVX2 and
AVX-512, in double at the portable level and for float64.  Each level runs
in its own process (PYAUTODIFF_ISA is read once per process) and is checked
against float64 numpy references for every tail length, one row, rows with
NaN and inf, at 1 and 2 threads; AVX2 and AVX-512 agree bit for bit, and so
do 1 and 2 threads.  float64 gradients are checked against finite
differences here, and against the create_graph (recorded-ops) path."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import pyautodiff as ad
from gradcheck import check_grad, layouts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r"""
import math, pickle, sys
import numpy as np, pyautodiff as ad
from pyautodiff._lib import ffi, lib

def close(name, got, ref, rtol, atol):
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True, err_msg=name)

erf = np.vectorize(math.erf, otypes=[np.float64])
rng = np.random.default_rng(5)
out = []
specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 30.0, -30.0, 5.5, -5.5])
with np.errstate(all="ignore"):
    for n in (1, 7, 8, 9, 15, 16, 17, 33, 8191, 8192, 8193, 20000):
        x = (rng.standard_normal(n) * 3).astype(np.float32)
        if n >= 10:
            x[rng.choice(n, 10, replace=False)] = specials
        g = rng.standard_normal(n).astype(np.float32)
        xv = ad.Var(x)
        dx = np.asarray(((xv.gelu_erf()) * ad.from_numpy(g)).sum().backward()[xv])
        x64, g64 = x.astype(np.float64), g.astype(np.float64)
        ref = g64 * (0.5 * (1 + erf(x64 / math.sqrt(2)))
                     + x64 * np.exp(-0.5 * x64 * x64) / math.sqrt(2 * math.pi))
        close(f"gelu_erf grad n={n}", dx, ref, 1e-5, 3e-6 * np.abs(g64).max())
        # a sum's gradient: one value for every element (read once, not copied)
        d1 = np.asarray(xv.gelu_erf().sum().backward()[xv])
        close(f"gelu_erf grad of a sum n={n}", d1, ref / g64, 1e-5, 3e-6)
        out += [dx.tobytes(), d1.tobytes()]
        # gelu, the tanh form: 1 or 0 from |x| >= 10 on, inf included
        dx = np.asarray(((xv.gelu()) * ad.from_numpy(g)).sum().backward()[xv])
        t = np.tanh(0.7978845608028654 * (x64 + 0.044715 * x64 ** 3))
        d = 0.5 * (1 + t) + 0.5 * x64 * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x64 ** 2)
        d = np.where(np.abs(x64) >= 10, (x64 > 0).astype(np.float64), d)
        close(f"gelu grad n={n}", dx, g64 * d, 1e-5, 3e-6 * np.abs(g64).max())
        d1 = np.asarray(xv.gelu().sum().backward()[xv])
        close(f"gelu grad of a sum n={n}", d1, d, 1e-5, 3e-6)
        out += [dx.tobytes(), d1.tobytes()]

    for rows in (1, 3, 65, 130):
        for cols in (1, 5, 8, 16, 17, 128, 131):
            for affine in ("wb", "w", ""):
                x = (rng.standard_normal((rows, cols)) * 2 + 1).astype(np.float32)
                if rows >= 3:
                    x[1, cols // 2] = np.nan
                    x[2, 0] = np.inf
                g = rng.standard_normal((rows, cols)).astype(np.float32)
                w = rng.standard_normal(cols).astype(np.float32)
                b = rng.standard_normal(cols).astype(np.float32)
                xv, wv, bv = ad.Var(x), ad.Var(w), ad.Var(b)
                args = (wv if "w" in affine else None, bv if "b" in affine else None)
                y = ad.nn.layer_norm(xv, cols, *args, eps=1e-5)
                gr = (y * ad.from_numpy(g)).sum().backward()
                x64, g64, w64, b64 = (a.astype(np.float64) for a in (x, g, w, b))
                mu = x64.mean(1, keepdims=True)
                rstd = 1 / np.sqrt(((x64 - mu) ** 2).mean(1, keepdims=True) + 1e-5)
                xh = (x64 - mu) * rstd
                wr = w64 if "w" in affine else 1.0
                yr = xh * wr + (b64 if "b" in affine else 0.0)
                gw = g64 * wr
                dxr = rstd * (gw - gw.mean(1, keepdims=True) - xh * (gw * xh).mean(1, keepdims=True))
                tag = f"layer_norm rows={rows} cols={cols} {affine or 'plain'}"
                close(tag + " forward", np.asarray(y), yr, 1e-5, 1e-5 * max(1, np.abs(yr[np.isfinite(yr)]).max(initial=1)))
                dx = np.asarray(gr[xv])
                scale = np.nanmax(np.abs(np.where(np.isfinite(dxr), dxr, 0)), initial=1)
                close(tag + " dx", dx, dxr, 1e-4, 3e-5 * max(1, scale) * math.sqrt(cols))
                out += [np.asarray(y).tobytes(), dx.tobytes()]
                if "w" in affine:
                    dw = np.asarray(gr[wv])
                    close(tag + " dweight", dw, (g64 * xh).sum(0), 1e-4, 1e-4 * rows)
                    out.append(dw.tobytes())
                if "b" in affine:
                    db = np.asarray(gr[bv])
                    close(tag + " dbias", db, g64.sum(0), 1e-4, 1e-5 * rows)
                    out.append(db.tobytes())
    # rows whose deviations' squares overflow (float32 past 2^64, float64 past
    # 2^511) are summed again scaled: layer_norm of x * 2^e is layer_norm of x
    # (exactly: a power of two), and its gradient 2^-e times x's (both were 0)
    for dt, e in ((np.float32, 70), (np.float32, 120), (np.float64, 520), (np.float64, 1000)):
        for cols in (1, 5, 17, 131):
            x = rng.standard_normal((2, cols)).astype(dt)
            g = rng.standard_normal((2, cols)).astype(dt)
            big = x * dt(2.0) ** e
            assert np.isfinite(big).all()
            ys, dxs = [], []
            # eps is negligible at the big scale: x's reference takes none
            for a, eps in ((x, 0.0 if cols > 1 else 1e-5), (big, 1e-5)):
                xv = ad.Var(a)
                y = ad.nn.layer_norm(xv, cols, eps=eps)
                ys.append(np.asarray(y))
                dxs.append(np.asarray((y * ad.from_numpy(g)).sum().backward()[xv]))
            tag = f"layer_norm {np.dtype(dt).name} rows * 2^{e} cols={cols}"
            tol = 1e-5 if dt == np.float32 else 1e-12
            x64 = x.astype(np.float64)
            xh = (x64 - x64.mean(1, keepdims=True)) / x64.std(1, keepdims=True) if cols > 1 else 0 * x64
            close(tag + " forward", ys[1], xh, tol, tol)
            assert np.isfinite(dxs[1]).all() and (cols == 1 or np.abs(dxs[1]).max() > 0), tag
            close(tag + " dx", dxs[1] * dt(2.0) ** e, dxs[0], 1e-3 if dt == np.float32 else 1e-9,
                  1e-3 if dt == np.float32 else 1e-9)
            out += [ys[1].tobytes(), dxs[1].tobytes()]
pickle.dump((ffi.string(lib.ad_gemm_kernel()).decode(), out), sys.stdout.buffer)
"""


def _run(**env_extra):
    env = dict(os.environ, PYTHONPATH=ROOT, **env_extra)
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    return pickle.loads(r.stdout)


_RESULTS = {}


def _result(isa, nthreads):
    key = (isa, nthreads)
    if key not in _RESULTS:
        _RESULTS[key] = _run(PYAUTODIFF_ISA=isa, PYAUTODIFF_NUM_THREADS=nthreads)
    return _RESULTS[key]


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
@pytest.mark.parametrize("nthreads", ["1", "2"])
def test_kernels_match_float64(isa, nthreads):
    """float32 gelu_erf and gelu gradients and layer_norm forward / backward against
    float64 numpy at each ISA level (the script asserts)."""
    _result(isa, nthreads)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
def test_same_bits_any_thread_count(isa):
    """layer_norm's dweight / dbias are summed per block of rows and folded
    in block order: 2 threads give 1 thread's bits."""
    l1, a = _result(isa, "1")
    l2, b = _result(isa, "2")
    assert l1 == l2 and len(a) == len(b)
    for i, (p, q) in enumerate(zip(a, b)):
        assert p == q, f"output {i} differs between 1 and 2 threads ({l1})"


def test_same_bits_avx2_avx512():
    """The row kernels fold their sums in one order and the gelu_erf and
    gelu gradients work lane by lane: AVX2 and AVX-512 agree bit for bit."""
    la, a = _result("avx512", "1")
    lb, b = _result("avx2", "1")
    if la == lb:
        pytest.skip("this CPU lacks AVX-512")
    for i, (p, q) in enumerate(zip(a, b)):
        assert p == q, f"output {i} differs between AVX-512 and AVX2"


# ---- float64: finite differences, and the native pass against the recorded ops ---------
@pytest.mark.parametrize("name,base,make", layouts((3, 7)))
def test_gelu_erf_gradcheck(name, base, make):
    check_grad(lambda x: x.gelu_erf(), [base], make=lambda i, t: make(t))


@pytest.mark.parametrize("name,base,make", layouts((3, 7)))
def test_gelu_gradcheck(name, base, make):
    check_grad(lambda x: x.gelu(), [base], make=lambda i, t: make(t))


@pytest.mark.parametrize("shape,k", [((1, 9), 1), ((4, 5), 1), ((2, 3, 4), 2), ((70, 3), 1)])
@pytest.mark.parametrize("affine", ["wb", "w", "b", ""])
def test_layer_norm_gradcheck(shape, k, affine):
    rng = np.random.default_rng(3)
    ns = shape[len(shape) - k:]
    inputs = [rng.standard_normal(shape)]
    if "w" in affine:
        inputs.append(rng.standard_normal(ns))
    if "b" in affine:
        inputs.append(rng.standard_normal(ns))

    def f(x, *p):
        w = p[0] if "w" in affine else None
        b = p[-1] if "b" in affine else None
        return ad.nn.layer_norm(x, ns, w, b, eps=1e-5)
    check_grad(f, inputs)


@pytest.mark.parametrize("dtype", [ad.float32, ad.float64])
def test_native_backward_matches_recorded_ops(dtype):
    """The one-pass backward (create_graph off) equals the recorded formula
    (create_graph on) to rounding, for gelu_erf, gelu and layer_norm."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((37, 19)) * 2
    w, b = rng.standard_normal(19), rng.standard_normal(19)
    g = ad.tensor(rng.standard_normal((37, 19)), dtype=dtype)
    tol = 1e-12 if dtype == ad.float64 else 2e-5
    for f in (lambda xv, wv, bv: xv.gelu_erf(),
              lambda xv, wv, bv: xv.gelu(),
              lambda xv, wv, bv: ad.nn.layer_norm(xv, 19, wv, bv)):
        vs = [ad.Var(a, dtype=dtype) for a in (x, w, b)]
        loss = (f(*vs) * g).sum()
        plain = ad.grad(loss, vs, allow_unused=True)
        vs2 = [ad.Var(a, dtype=dtype) for a in (x, w, b)]
        loss2 = (f(*vs2) * g).sum()
        rec = ad.grad(loss2, vs2, allow_unused=True, create_graph=True)
        for p, q in zip(plain, rec):
            assert (p is None) == (q is None)
            if p is not None:
                np.testing.assert_allclose(np.asarray(p), np.asarray(q), rtol=tol, atol=tol)
