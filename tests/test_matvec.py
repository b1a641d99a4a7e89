"""Matrix-vector products (matmul.c's matvec path: m == 1 or n == 1 in any
layout the dot or axpy form reads, batched, split over threads) and numpy's
1-d operand rules in the native matmul, forward against numpy and backward by
float64 central differences."""
import os
import subprocess
import sys

import numpy as np
import pytest

import pyautodiff as ad
from gradcheck import check_grad, layouts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _views(shape, rng):
    """(name, numpy value, tensor) for a 2-d shape in four layouts"""
    out = []
    for name, base, make in layouts(shape, rng):
        t = make(ad.tensor(base))
        out.append((name, np.asarray(t), t))
    return out


@pytest.mark.parametrize("m,k,n", [(300, 70, 1), (1, 70, 300), (1, 5, 1), (37, 3, 1),
                                   (1, 3, 37), (600, 300, 1), (1, 300, 600)])
def test_matrix_vector_every_layout(m, k, n, threads):
    """600 x 300 (180000 elements) is split over the threads; the others not"""
    rng = np.random.default_rng(0)
    for an, a, ta in _views((m, k), rng):
        for bn, b, tb in _views((k, n), rng):
            for dt in (ad.float32, ad.float64):
                got = np.asarray(ta.to_dtype(dt) @ tb.to_dtype(dt))
                tol = 1e-4 if dt == ad.float32 else 1e-12
                np.testing.assert_allclose(got, a @ b, rtol=tol, atol=tol,
                                           err_msg=f"a {an}, b {bn}, {dt}")


@pytest.mark.parametrize("sa,sb", [((32, 64, 32), (32, 32, 1)), ((32, 1, 32), (32, 32, 64)),
                                   ((5, 64, 32), (32, 1)), ((64, 32), (7, 32, 1)),
                                   ((3, 1, 40, 20), (4, 20, 1)), ((300, 2, 400), (400, 1))])
def test_batched_matrix_vector(sa, sb, threads):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    for dt, tol in ((np.float32, 1e-4), (np.float64, 1e-12)):
        got = ad.from_numpy(a.astype(dt)) @ ad.from_numpy(b.astype(dt))
        np.testing.assert_allclose(np.asarray(got), a @ b, rtol=tol, atol=tol)


@pytest.mark.parametrize("sa,sb", [((5,), (5,)), ((3, 5), (5,)), ((5,), (5, 4)),
                                   ((2, 3, 5), (5,)), ((5,), (2, 5, 4)), ((1, 5), (5,)),
                                   ((5,), (5, 1)), ((2, 1, 3, 5), (4, 5, 1))])
def test_one_dim_operands_follow_numpy(sa, sb):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    y = ad.tensor(a) @ ad.tensor(b)
    ref = a @ b
    assert y.shape == ref.shape
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-12, atol=1e-12)
    check_grad(lambda x, w: x @ w, [a, b])


def test_one_dim_gradients_every_layout():
    rng = np.random.default_rng(3)
    v = rng.standard_normal(4)
    for name, base, make in layouts((3, 4), rng):
        check_grad(lambda m, x: m @ x, [base, v], make=lambda i, t: make(t) if i == 0 else t)
        check_grad(lambda x, m: x @ m, [v[:3], base],
                   make=lambda i, t: make(t) if i == 1 else t)
    # a sliced and a broadcast vector
    check_grad(lambda m, x: m @ x[::2], [rng.standard_normal((3, 4)), rng.standard_normal(8)])
    check_grad(lambda m, x: m @ x.broadcast_to((4,)),
               [rng.standard_normal((3, 4)), rng.standard_normal(1)])


def test_vector_dot_and_errors():
    a, b = np.arange(3.0), np.arange(3.0, 6.0)
    y = ad.tensor(a) @ ad.tensor(b)
    assert y.shape == () and y.item() == a @ b
    with pytest.raises(ad.ShapeError, match="inner dims differ"):
        ad.tensor(a) @ ad.tensor(np.ones(4))
    with pytest.raises(ad.ShapeError, match="matmul"):
        ad.tensor(np.ones((2, 3))) @ ad.tensor(np.ones(2))
    with pytest.raises(ad.ShapeError, match="0-d"):
        ad.tensor(1.0) @ ad.tensor(np.ones(2))


def test_create_graph_through_one_dim_matmul():
    rng = np.random.default_rng(4)
    m = ad.Var(rng.standard_normal((3, 4)))
    x = ad.Var(rng.standard_normal(4))
    (gx,) = ad.grad(((m @ x) ** 2).sum(), [x], create_graph=True)
    (gm,) = ad.grad(gx.sum(), [m])
    mn, xn = np.asarray(m), np.asarray(x)
    # gx = 2 m^T (m x); d sum(gx) / dm = 2 (x 1^T m^T... ) by finite differences
    eps, num = 1e-6, np.zeros_like(mn)
    for i in range(3):
        for j in range(4):
            for sgn in (1, -1):
                mm = mn.copy()
                mm[i, j] += sgn * eps
                num[i, j] += sgn * (2 * mm.T @ (mm @ xn)).sum() / (2 * eps)
    np.testing.assert_allclose(np.asarray(gm), num, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dt,tol", [(ad.float32, 1e-5), (ad.float64, 1e-13)])
def test_matrix_vector_kernel_edges(kernel, threads, dt, tol):
    """Every level's kernels: k around the vector widths (masked tails), m
    around the 8-row groups, the dot form (rows of M) and the axpy form
    (columns of M), single and batched; each row's sum has the same bits
    whether it ran in a group of rows or alone."""
    rng = np.random.default_rng(5)
    npd = np.float32 if dt == ad.float32 else np.float64
    for k in (1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 70):
        for m in (1, 3, 7, 8, 9, 16, 17, 37):
            a = rng.standard_normal((m, k)).astype(npd)
            x = rng.standard_normal(k).astype(npd)
            ref = a.astype(np.float64) @ x.astype(np.float64)
            scale = np.abs(a).astype(np.float64) @ np.abs(x).astype(np.float64) + 1
            ta, tx = ad.from_numpy(a), ad.from_numpy(x)
            dot = np.asarray(ta @ tx)                        # dot form
            axpy = np.asarray(tx @ ad.from_numpy(a.T.copy()))  # axpy form (1 x k @ k x m)
            colmaj = np.asarray(ad.from_numpy(a.T.copy()).t() @ tx)  # axpy, M^T's rows
            for name, got in (("dot", dot), ("axpy", axpy), ("colmajor", colmaj)):
                assert np.all(np.abs(got - ref) <= tol * scale), (name, m, k)
            for i in range(m):  # one row alone: the same bits as in its group
                assert np.asarray(ta[i:i + 1] @ tx).tobytes() == dot[i:i + 1].tobytes(), (m, k, i)
            # a batch of them
            b = rng.standard_normal((5, m, k)).astype(npd)
            xb = rng.standard_normal((5, k, 1)).astype(npd)
            got = np.asarray(ad.from_numpy(b) @ ad.from_numpy(xb))
            ref = b.astype(np.float64) @ xb.astype(np.float64)
            scale = np.abs(b).astype(np.float64) @ np.abs(xb).astype(np.float64) + 1
            assert np.all(np.abs(got - ref) <= tol * scale), (m, k)


def test_matrix_vector_same_bits_at_any_thread_count(kernel):
    """A product split over threads (600 x 300 is) has the bits of the one-thread result."""
    rng = np.random.default_rng(6)
    old = ad.get_num_threads()
    try:
        for dt in (np.float32, np.float64):
            a = ad.from_numpy(rng.standard_normal((600, 301)).astype(dt))
            x = ad.from_numpy(rng.standard_normal(301).astype(dt))
            b = ad.from_numpy(rng.standard_normal((301, 601)).astype(dt))
            outs = []
            for t in (1, 2):
                ad.set_num_threads(t)
                outs.append([np.asarray(a @ x).tobytes(), np.asarray(x @ b).tobytes()])
            assert outs[0] == outs[1]
    finally:
        ad.set_num_threads(old)


def _skinny_views(a, rng):
    """(name, tensor) views of a 2-d array: contiguous, transposed (column
    stride 1), sliced (row stride past its width), column-sliced (column
    stride 2) and row-broadcast (row stride 0, rows equal to a's first)"""
    r, c = a.shape
    wide = np.zeros((r, c + 7), a.dtype)
    wide[:, 3:3 + c] = a
    twice = np.repeat(a, 2, axis=1)
    return [("contiguous", ad.from_numpy(a)),
            ("transposed", ad.from_numpy(np.ascontiguousarray(a.T)).t()),
            ("sliced", ad.from_numpy(wide)[:, 3:3 + c]),
            ("column-sliced", ad.from_numpy(twice)[:, ::2]),
            ("row-broadcast", ad.from_numpy(a[:1].copy()).broadcast_to((r, c)))]


@pytest.mark.parametrize("dt,tol", [(ad.float32, 1e-5), (ad.float64, 1e-13)])
def test_skinny_products(kernel, threads, dt, tol):
    """2..8 rows of A times a B with unit-stride rows (matmul.c's skinny
    kernel at the SIMD levels, the GEMM elsewhere; 1 and 9 rows are its
    neighbours), and at the AVX-512 level 9..24 rows times a B past 256 KiB
    (the tall form; 25 rows its neighbour): n around the vector widths and
    tiles, k across the 16-row blocks of a B out of cache and the tall form's
    512-row blocks, A and B in every layout, against float64. Where the
    skinny kernel runs each element is one FMA chain over k, so a row alone
    (the axpy form) and a column slice give the same bits."""
    rng = np.random.default_rng(7)
    npd = np.float32 if dt == ad.float32 else np.float64
    for m, k, n in [(2, 5, 7), (3, 1, 33), (4, 17, 65), (5, 33, 16), (6, 16, 100), (7, 9, 15),
                    (8, 70, 257), (1, 20, 40), (9, 20, 40), (8, 300, 600), (3, 1000, 131),
                    (2, 64, 2049), (9, 600, 300), (12, 1100, 1000), (17, 230, 607),
                    (24, 1030, 130), (25, 300, 600)]:
        a = rng.standard_normal((m, k)).astype(npd)
        b = rng.standard_normal((k, n)).astype(npd)
        for an, ta in _skinny_views(a, rng):
            for bn, tb in _skinny_views(b, rng):
                av, bv = np.asarray(ta).astype(np.float64), np.asarray(tb).astype(np.float64)
                got = np.asarray(ta @ tb)
                ref, scale = av @ bv, np.abs(av) @ np.abs(bv) + 1
                assert got.shape == (m, n)
                assert np.all(np.abs(got - ref) <= tol * scale), (m, k, n, an, bn)
                gemm = m > 8 and (m > 24 or kernel != "avx512" or k * n * b.itemsize <= 1 << 18)
                if kernel == "portable" or gemm or bn in ("transposed", "column-sliced"):
                    continue
                for i in {0, m - 1}:  # a row alone: the axpy form, the same FMA chain
                    assert np.asarray(ta[i] @ tb).tobytes() == got[i].tobytes(), (m, k, n, i)
                j0, j1 = n // 3, n // 3 + (n + 1) // 2  # other tiles, masks and splits
                assert np.asarray(ta @ tb[:, j0:j1]).tobytes() == \
                    np.ascontiguousarray(got[:, j0:j1]).tobytes(), (m, k, n, an, bn)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_skinny_batched_and_thread_bits(kernel, dt):
    """Batches of skinny products (each item, or whole items per thread) and
    one split over threads by columns: the bits of the one-thread result."""
    rng = np.random.default_rng(8)
    cases = [((3, 4, 50), (3, 50, 300)),   # a batch of 3, each item split
             ((8, 200), (6, 200, 130)),    # A broadcast over 6 items, items per thread
             ((2, 1, 5, 64), (3, 64, 96)),  # broadcast batch dims
             ((8, 300), (300, 1100)),       # one product, its columns split
             ((3, 12, 300), (3, 300, 400)),  # the tall form (AVX-512): items per thread
             ((20, 1100), (1100, 1000))]     # the tall form, 16-row blocks, columns split
    old = ad.get_num_threads()
    try:
        for sa, sb in cases:
            a, b = rng.standard_normal(sa).astype(dt), rng.standard_normal(sb).astype(dt)
            ta, tb = ad.from_numpy(a), ad.from_numpy(b)
            outs = []
            for t in (1, 2):
                ad.set_num_threads(t)
                outs.append(np.asarray(ta @ tb))
            ref = a.astype(np.float64) @ b.astype(np.float64)
            scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64) + 1
            tol = 1e-5 if dt == np.float32 else 1e-13
            assert np.all(np.abs(outs[0] - ref) <= tol * scale), (sa, sb)
            assert outs[0].tobytes() == outs[1].tobytes(), (sa, sb)
    finally:
        ad.set_num_threads(old)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_axpy_form_past_cache_same_bits(kernel, dt):
    """x @ B for a B past AXPY_FAR (16 MiB: passes of 16 rows at AVX-512 at
    1 thread where L1D holds 48 KiB, of 8 at 2 or beside less) has the bits of the same product on column slices of
    B (small: passes of 8 rows), at 1 and 2 threads; k and n leave remainders
    of every pass."""
    rng = np.random.default_rng(9)
    k, n = 4100, (1030 if dt == np.float32 else 515)
    b = rng.standard_normal((k, n)).astype(dt)
    x = rng.standard_normal(k).astype(dt)
    tb, tx = ad.from_numpy(b), ad.from_numpy(x)
    old = ad.get_num_threads()
    try:
        outs = []
        for t in (1, 2):
            ad.set_num_threads(t)
            outs.append(np.asarray(tx @ tb))
    finally:
        ad.set_num_threads(old)
    ref = x.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(x).astype(np.float64) @ np.abs(b).astype(np.float64) + 1
    tol = 1e-5 if dt == np.float32 else 1e-13
    assert np.all(np.abs(outs[0] - ref) <= tol * scale)
    assert outs[0].tobytes() == outs[1].tobytes()
    if kernel != "portable":
        j0, j1 = 5, 5 + n // 4
        assert np.asarray(tx @ tb[:, j0:j1]).tobytes() == outs[0][j0:j1].tobytes()
    # passes of 16 rows run where L1D holds 48 KiB (Zen 5); a 32 KiB one
    # (Zen 4) keeps 8: the other machine's choice, in a process told its L1D
    script = (
        "import sys, numpy as np, pyautodiff as ad\n"
        "from pyautodiff._lib import lib\n"
        f"assert lib.ad_gemm_set_kernel(b'{kernel}') == lib.AD_OK\n"
        "ad.set_num_threads(1)\n"
        "rng = np.random.default_rng(9)\n"
        f"b = rng.standard_normal(({k}, {n})).astype(np.{np.dtype(dt).name})\n"
        f"x = rng.standard_normal({k}).astype(np.{np.dtype(dt).name})\n"
        "sys.stdout.buffer.write(np.asarray(ad.from_numpy(x) @ ad.from_numpy(b)).tobytes())\n")
    for kib in ("32", "48"):
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300,
                           env=dict(os.environ, PYAUTODIFF_L1D_KIB=kib, PYTHONPATH=ROOT))
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        assert r.stdout == outs[0].tobytes(), f"L1D {kib} KiB"
