"""cross_entropy / nll_loss on the vector row kernels.

float32 rows with a finite maximum run whole in simd_math.h's row_lse (forward) and
row_softmax_scaled (backward, one native pass); the others (float64, the portable level,
rows whose maximum is inf or all -inf) in double loops.  Checked against float64 numpy
for row lengths around the 8- and 16-lane steps, with -inf logits, against the composed
create_graph formula, at 1 and 2 threads, and AVX2 against AVX-512 bit for bit; the
Python options (weight, ignore_index, label_smoothing) on top of the native rows."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import pyautodiff as ad
import pyautodiff.nn.functional as F
from gradcheck import check_grad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENGTHS = [1, 7, 15, 16, 17, 33, 96, 1000]


def _case(c, n=37, seed=0, neg_inf=False):
    rng = np.random.default_rng(seed + c)
    x = rng.standard_normal((n, c)) * 4
    t = rng.integers(0, c, n)
    if neg_inf and c > 1:
        mask = rng.random((n, c)) < 0.3
        mask[np.arange(n), t] = False  # the target's logit stays finite
        x[mask] = -np.inf
    return x, t


def _ref(x, t, red):
    """loss and d loss / d x in float64 (g = 1)"""
    m = x.max(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        lse = m[:, 0] + np.log(np.exp(x - m).sum(1))
        p = np.exp(x - lse[:, None])
    rows = np.arange(x.shape[0])
    loss = lse - x[rows, t]
    g = p.copy()
    g[rows, t] -= 1
    if red == "mean":
        return loss.mean(), g / x.shape[0]
    if red == "sum":
        return loss.sum(), g
    return loss, g


@pytest.mark.parametrize("c", LENGTHS)
@pytest.mark.parametrize("red", ["none", "mean", "sum"])
@pytest.mark.parametrize("neg_inf", [False, True])
def test_rows_float32(threads, c, red, neg_inf):
    x, t = _case(c, n=700, neg_inf=neg_inf)
    x32 = x.astype(np.float32)
    v = ad.Var(x32)
    ti = ad.tensor(t, dtype="int64")
    loss = F.cross_entropy(v, ti, reduction=red)
    g = (loss.sum() if red == "none" else loss).backward()[v].numpy()
    want, gwant = _ref(x32.astype(np.float64), t, red)
    np.testing.assert_allclose(loss.numpy(), want, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(g, gwant, rtol=1e-5, atol=1e-7 / (700 if red == "mean" else 1))
    assert (g[np.isneginf(x32)] == 0).all()
    # nll_loss on the same rows' log-probabilities: -onehot g
    lp = ad.Var(x32)
    nl = F.nll_loss(lp, ti, reduction=red)
    gn = (nl.sum() if red == "none" else nl).backward()[lp].numpy()
    gnw = np.zeros_like(x32)
    gnw[np.arange(700), t] = -1 / (700 if red == "mean" else 1)
    np.testing.assert_array_equal(gn, gnw.astype(np.float32))


def test_same_bits_any_thread_count():
    x, t = _case(96, n=3000, neg_inf=True)
    outs = []
    for n in (1, 2):
        old = ad.get_num_threads()
        ad.set_num_threads(n)
        try:
            v = ad.Var(x.astype(np.float32))
            loss = F.cross_entropy(v, ad.tensor(t, dtype="int64"), reduction="none")
            outs.append((loss.numpy().tobytes(), loss.sum().backward()[v].numpy().tobytes()))
        finally:
            ad.set_num_threads(old)
    assert outs[0] == outs[1]


@pytest.mark.parametrize("c", [1, 15, 17, 96])
@pytest.mark.parametrize("red", ["none", "mean", "sum"])
def test_gradcheck_float64(c, red):
    x, t = _case(c, n=5)
    ti = ad.tensor(t, dtype="int64")
    check_grad(lambda a: F.cross_entropy(a, ti, reduction=red), [x])
    check_grad(lambda a: F.nll_loss(a, ti, reduction=red), [x])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_native_grad_matches_composed_formula(dtype):
    """The one-pass native gradient against the recorded formula create_graph uses."""
    x, t = _case(17, n=50, neg_inf=True)
    ti = ad.tensor(t, dtype="int64")
    for red in ("none", "mean", "sum"):
        for fn in (F.cross_entropy, F.nll_loss):
            v = ad.Var(x.astype(dtype))
            loss = fn(v, ti, reduction=red)
            s = loss.sum() if red == "none" else loss
            fast = s.backward()[v].numpy()
            v2 = ad.Var(x.astype(dtype))
            loss2 = fn(v2, ti, reduction=red)
            s2 = loss2.sum() if red == "none" else loss2
            slow = s2.backward(create_graph=True)[v2].numpy()
            tol = 1e-6 if dtype == "float32" else 1e-13
            np.testing.assert_allclose(fast, slow, rtol=tol, atol=tol)


def test_nonfinite_rows():
    """NaN anywhere gives NaN; a row of -inf gives NaN (-inf - -inf), an inf logit inf or
    NaN; the gradient of such rows is NaN, the finite rows' unaffected."""
    x = np.zeros((5, 20), np.float32)
    x[0, 3] = np.nan
    x[1, :] = -np.inf
    x[2, 19] = np.inf  # not the target: inf loss
    x[3, 0] = np.inf  # the target: inf - inf
    t = np.zeros(5, np.int64)
    t[2] = 1
    v = ad.Var(x)
    with np.errstate(all="ignore"):
        loss = F.cross_entropy(v, ad.tensor(t, dtype="int64"), reduction="none")
        g = loss.sum().backward()[v].numpy()
    out = loss.numpy()
    assert np.isnan(out[0]) and np.isnan(out[1]) and out[2] == np.inf and np.isnan(out[3])
    np.testing.assert_allclose(out[4], np.log(20), rtol=1e-6)
    assert np.isnan(g[:4]).all()
    np.testing.assert_allclose(g[4], np.where(np.arange(20) == 0, 1 / 20 - 1, 1 / 20), rtol=1e-6)


def test_options_on_the_vector_rows():
    """weight, ignore_index, label_smoothing and probability targets compose the native
    rows; against torch when installed, else float64 numpy."""
    torch = pytest.importorskip("torch")
    tF = torch.nn.functional
    for c in (1, 16, 17, 96, 1000):
        x, t = _case(c, n=40, neg_inf=False)
        t[::7] = -100
        w = np.random.default_rng(c).random(c) + 0.5
        for kw in ({}, {"ignore_index": -100}, {"weight": w}, {"label_smoothing": 0.1},
                   {"weight": w, "label_smoothing": 0.2}):
            tk = {k: (torch.tensor(v, dtype=torch.float32) if k == "weight" else v)
                  for k, v in kw.items()}
            ak = {k: (ad.tensor(v.astype(np.float32)) if k == "weight" else v)
                  for k, v in kw.items()}
            for red in ("none", "mean", "sum"):
                v = ad.Var(x.astype(np.float32))
                loss = F.cross_entropy(v, ad.tensor(t, dtype="int64"), reduction=red, **ak)
                g = (loss.sum() if red == "none" else loss).backward()[v].numpy()
                X = torch.tensor(x.astype(np.float32), requires_grad=True)
                L = tF.cross_entropy(X, torch.tensor(t), reduction=red, **tk)
                (L.sum() if red == "none" else L).backward()
                np.testing.assert_allclose(loss.numpy(), L.detach().numpy(), rtol=1e-5,
                                           atol=1e-5, err_msg=str((c, kw, red)))
                np.testing.assert_allclose(g, X.grad.numpy(), rtol=1e-4, atol=1e-6,
                                           err_msg=str((c, kw, red)))
        # probability targets (log_softmax rows)
        p = np.random.default_rng(1).random((40, c)).astype(np.float32)
        p /= p.sum(1, keepdims=True)
        v = ad.Var(x.astype(np.float32))
        loss = F.cross_entropy(v, ad.tensor(p), label_smoothing=0.05)
        g = loss.backward()[v].numpy()
        X = torch.tensor(x.astype(np.float32), requires_grad=True)
        L = tF.cross_entropy(X, torch.tensor(p), label_smoothing=0.05)
        L.backward()
        np.testing.assert_allclose(loss.numpy(), L.detach().numpy(), rtol=1e-5)
        np.testing.assert_allclose(g, X.grad.numpy(), rtol=1e-4, atol=1e-7)


ISA_SCRIPT = r"""
import pickle, sys
import numpy as np, pyautodiff as ad
import pyautodiff.nn.functional as F
from pyautodiff._lib import ffi, lib
rng = np.random.default_rng(8)
outs = []
for c in (1, 7, 15, 16, 17, 33, 96, 1000):
    x = (rng.standard_normal((50, c)) * 6).astype(np.float32)
    x[rng.random((50, c)) < 0.2] = -np.inf
    x[:, 0] = 1.0
    t = ad.tensor(np.zeros(50, np.int64), dtype="int64")
    for red in ("none", "mean", "sum"):
        v = ad.Var(x)
        loss = F.cross_entropy(v, t, reduction=red)
        g = (loss.sum() if red == "none" else loss).backward()[v]
        outs += [loss.numpy().tobytes(), g.numpy().tobytes()]
pickle.dump((ffi.string(lib.ad_gemm_kernel()).decode(), outs), sys.stdout.buffer)
"""


def test_same_bits_avx2_avx512_close_portable():
    outs = {}
    for isa in ("avx512", "avx2", "portable"):
        env = dict(os.environ, PYTHONPATH=ROOT, PYAUTODIFF_ISA=isa)
        r = subprocess.run([sys.executable, "-c", ISA_SCRIPT], env=env, capture_output=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        level, data = pickle.loads(r.stdout)
        if level == isa:
            outs[isa] = data
    if "avx512" in outs and "avx2" in outs:
        assert outs["avx512"] == outs["avx2"]
    simd = outs.get("avx512", outs.get("avx2"))
    if simd is None or "portable" not in outs:
        pytest.skip("needs a SIMD level and the portable one")
    for a, b in zip(simd, outs["portable"]):
        np.testing.assert_allclose(np.frombuffer(a, np.float32), np.frombuffer(b, np.float32),
                                   rtol=2e-6, atol=1e-8)
