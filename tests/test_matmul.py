"""matmul against numpy for both micro-kernels (SIMD and portable) and for 1
and 2 threads: odd shapes, primes, sizes that are no multiple of any block,
and transposed, sliced and broadcast operands straight from their strides."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import pyautodiff as ad
from pyautodiff._lib import ffi, lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(1, 1, 1), (1, 7, 1), (5, 1, 3), (2, 3, 2), (7, 13, 11), (17, 31, 29), (33, 65, 17),
          (64, 64, 64), (97, 101, 103), (130, 7, 257), (1, 300, 1), (300, 1, 300), (6, 512, 16),
          (145, 513, 33),
          # last column panel partial, at most half full (half-width kernels, masked stores)
          (128, 512, 10), (80, 80, 80), (100, 100, 100), (25, 40, 47), (12, 9, 48), (500, 3, 500),
          # matrix-vector products large enough to split their outputs over threads
          (1, 700, 700), (700, 700, 1), (1, 4097, 70), (4097, 70, 1)]


TOL = {np.float32: dict(rtol=1e-5, atol=1e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


def takes_dot(kernel, dt, m, n, k, b_rows_unit=False, b_cols_unit=True):
    """Whether a product of a row-major A goes to the dot kernel (matmul.c's
    dotn_batch): a SIMD level, 2 <= n <= 12, k >= 16, and m past the skinny
    kernel's rows (8; 24 at AVX-512 for a B past 256 KiB); B^T copied (B's
    columns not unit-stride) only for the level's DN_COPIED_* columns, and
    rows of B wider than 16 bytes only from k = 64 and unit-stride."""
    es = np.dtype(dt).itemsize
    skinny = 24 if kernel == "avx512" and k * n * es > 256 << 10 else 8
    if kernel not in ("avx2", "avx512") or not 2 <= n <= 12 or k < 16 or m <= skinny:
        return False
    if b_rows_unit:
        return True
    copied = ({2, 3, 4, 5, 6, 7, 9, 10, 11, 12} if dt == np.float32
              else {2, 3, 5, 6, 7, 9, 10, 11} if kernel == "avx2" else {2, 3, 9, 10, 11, 12})
    return n in copied and (n * es <= 16 or (k >= 64 and b_cols_unit))


def at_other_thread_count(threads, f):
    """f() run at the other thread count (1 <-> 2), as an array."""
    ad.set_num_threads(3 - threads)
    try:
        return np.asarray(f())
    finally:
        ad.set_num_threads(threads)


def check_linear_relu(x, w, bias, want, tol, what):
    """F.linear(x, w, bias, activation="relu") against numpy's x @ w.T + bias
    (want, before the ReLU), with the bits of the unfused relu(linear)."""
    import pyautodiff.nn.functional as F

    tb = ad.from_numpy(bias)
    lin = np.asarray(F.linear(x, w, tb, activation="relu"))
    np.testing.assert_allclose(lin, np.maximum(want + bias, 0), **tol, err_msg="linear " + what)
    assert lin.tobytes() == np.asarray(F.relu(F.linear(x, w, tb))).tobytes(), "linear " + what


def _check(a, b, dt):
    got = (a @ b).numpy().astype(np.float64)
    want = np.asarray(a).astype(np.float64) @ np.asarray(b).astype(np.float64)
    scale = np.abs(np.asarray(a)).astype(np.float64) @ np.abs(np.asarray(b)).astype(np.float64)
    tol = TOL[dt]
    assert np.all(np.abs(got - want) <= tol["atol"] + tol["rtol"] * np.maximum(scale, 1)), \
        f"max err {np.max(np.abs(got - want))}"


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_shapes(kernel, threads, dt, m, k, n):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(dt)
    b = rng.standard_normal((k, n)).astype(dt)
    _check(ad.from_numpy(a), ad.from_numpy(b), dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_layouts(kernel, threads, dt):
    rng = np.random.default_rng(7)
    a = ad.from_numpy(rng.standard_normal((70, 90)).astype(dt))
    b = ad.from_numpy(rng.standard_normal((90, 50)).astype(dt))
    w = ad.from_numpy(rng.standard_normal((50, 90)).astype(dt))
    _check(a, w.t(), dt)                       # x @ w.t()
    _check(a.t(), a, dt)                       # aT @ a (backward's lhsT @ grad)
    _check(a[::2, 1::3], b[1::3, ::-2], dt)    # sliced, negative step
    _check(a[:, :50], ad.from_numpy(np.ones((1, 1), dt)).broadcast_to((50, 40)), dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_batched_broadcast(kernel, threads, dt):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 4, 17, 9)).astype(dt)
    b = rng.standard_normal((1, 9, 23)).astype(dt)  # reused for every batch
    got = (ad.from_numpy(a) @ ad.from_numpy(b)).numpy()
    np.testing.assert_allclose(got, a @ b, **TOL[dt])
    a2 = rng.standard_normal((256, 32, 64)).astype(dt)
    b2 = rng.standard_normal((256, 64, 32)).astype(dt)
    np.testing.assert_allclose((ad.from_numpy(a2) @ ad.from_numpy(b2)).numpy(), a2 @ b2,
                               **TOL[dt])


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_batched_matrix_vector(kernel, threads, dt):
    """Batches of matrix-vector products split over their items, with B shared
    (broadcast) or per item, and a vector with a stride."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 1, 4096)).astype(dt)
    b = rng.standard_normal((4096, 64)).astype(dt)
    bs = rng.standard_normal((64, 4096, 64)).astype(dt)
    ta = ad.from_numpy(a)
    np.testing.assert_allclose((ta @ ad.from_numpy(b)).numpy(), a @ b, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose((ta @ ad.from_numpy(bs)).numpy(), a @ bs, rtol=1e-4, atol=1e-3)
    v = rng.standard_normal((8, 300, 2)).astype(dt)
    m = rng.standard_normal((8, 500, 300)).astype(dt)
    got = (ad.from_numpy(m) @ ad.from_numpy(v)[:, :, :1]).numpy()
    np.testing.assert_allclose(got, m @ v[:, :, :1], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_batches_in_reverse_order(kernel, threads, dt):
    """Batch dims with negative strides (flip): the items' offsets from the
    operands' first element are negative in the matrix-vector, skinny and
    packed paths (fuzz_abi: the offsets were scaled as size_t, a pointer
    wrap-around that UBSan reports)."""
    rng = np.random.default_rng(11)
    for m, k, n in [(1, 5, 7), (3, 5, 7), (8, 33, 20), (20, 9, 40), (5, 64, 1)]:
        a = rng.standard_normal((4, m, k)).astype(dt)
        b = rng.standard_normal((4, k, n)).astype(dt)
        v = rng.standard_normal((4, k)).astype(dt)
        ta, tb, tv = ad.from_numpy(a).flip(0), ad.from_numpy(b).flip(0), ad.from_numpy(v).flip(0)
        fa, fb, fv = a[::-1], b[::-1], v[::-1]
        np.testing.assert_allclose((ta @ tb).numpy(), fa @ fb, **TOL[dt])
        np.testing.assert_allclose((ta @ tv[:, :, None]).numpy(), fa @ fv[:, :, None], **TOL[dt])
        np.testing.assert_allclose((tv[:, None, :] @ tb).numpy(), fv[:, None, :] @ fb, **TOL[dt])
        np.testing.assert_allclose((ta @ ad.from_numpy(b[0])).numpy(), fa @ b[0], **TOL[dt])


# m around every level's MR (portable 4, AVX2 6, AVX-512 12) and its row
# tails; n around NR (8, 16, 32 for float32; half that for float64), with last
# micro-panels at most half full (half-width kernels) and more than half full.
DRIVER_M = [2, 3, 4, 5, 6, 7, 11, 12, 13, 19, 25]
DRIVER_N = [3, 4, 5, 8, 9, 12, 17, 24, 33, 48]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_driver_paths_on_every_kernel(kernel, threads, dt):
    """The GEMM driver's paths on every kernel level: batches of small
    products (small_batch: A and B read in place, one macro-kernel call per
    item, the partial last B panel packed per item; at the AVX-512 level one
    small-kernel call per item), row-tail kernels,
    half-width panels, a B shared over the batch, single products whose
    last rows take the tails.  Each level has the same family of kernels, so
    a machine without AVX-512 runs all of this too."""
    rng = np.random.default_rng(11)
    for m in DRIVER_M:
        for n in DRIVER_N:
            for k in (7, 40):
                a = rng.standard_normal((6, m, k)).astype(dt)
                b = rng.standard_normal((6, k, n)).astype(dt)
                ta, tb = ad.from_numpy(a), ad.from_numpy(b)
                np.testing.assert_allclose((ta @ tb).numpy(), a @ b, **TOL[dt],
                                           err_msg=f"batched {m}x{k} @ {k}x{n}")
                np.testing.assert_allclose((ta @ tb[0]).numpy(), a @ b[0], **TOL[dt],
                                           err_msg=f"shared B {m}x{k} @ {k}x{n}")
                # transposed operands: A packed, B through the transposing pack
                np.testing.assert_allclose((tb.transpose(1, 2) @ ta.transpose(1, 2)).numpy(),
                                           b.transpose(0, 2, 1) @ a.transpose(0, 2, 1),
                                           **TOL[dt], err_msg=f"transposed {m}x{k} @ {k}x{n}")
    for m, k, n in [(29, 70, 40), (101, 33, 20), (13, 300, 70), (250, 129, 9)]:
        a = rng.standard_normal((m, k)).astype(dt)
        b = rng.standard_normal((k, n)).astype(dt)
        _check(ad.from_numpy(a), ad.from_numpy(b), dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_transposing_pack_of_columns_a_power_of_two_apart(kernel, threads, dt):
    """The transposing pack (a unit-row-stride B into panels, a row-major A
    into the AVX2 level's 6-row or the AVX-512 level's 12-row ones) takes
    256 bytes of each column a pass where the columns are a multiple of 1 KiB
    apart (they share L1 sets), one register block a pass otherwise: k with
    and without a partial pass and a tail of single steps, both strides."""
    rng = np.random.default_rng(5)
    tol = TOL[dt] if dt == np.float64 else dict(rtol=1e-4, atol=5e-4)  # sums of 700 terms
    for stride in (1024, 768, 1000):  # float32 4 KiB and 3 KiB apart, then no shared sets
        big_b = rng.standard_normal((70, stride)).astype(dt)
        big_a = rng.standard_normal((40, stride)).astype(dt)
        for k in (700, 300, 75):
            bt = ad.from_numpy(big_b)[:, :k].T    # (k, 70): columns stride apart
            at = ad.from_numpy(big_a)[:, :k]      # (40, k): rows stride apart
            want = big_a[:, :k] @ big_b[:, :k].T
            np.testing.assert_allclose((at @ bt).numpy(), want, **tol,
                                       err_msg=f"stride {stride}, k {k}")
            np.testing.assert_allclose((bt.T @ at.T).numpy(), want.T, **tol,
                                       err_msg=f"transposed, stride {stride}, k {k}")


# Small products whose A and B are read in place (small_fits in
# gemm_dtype.h; at the AVX-512 level the small kernel, gemm_small_avx512.h):
# m around the row tiles (4 and 8 rows, a last tile of up to 6 / 12 rows
# taken whole, the AVX2 6-row and portable 4-row tiles; for n up to half a
# vector, rows in pairs, tiles of 8 pairs and a last one of up to 12, an odd
# last row), n around every vector count of a column panel (1-4 vectors of
# 16 float32 / 8 float64 lanes, the last one masked, and up to half a
# vector: the paired rows), k from 1 to past the paired rows' 128-column
# chunks.
SMALL_M = [2, 3, 5, 6, 7, 9, 11, 12, 13, 17, 24, 25, 33, 40, 70]
SMALL_N = [2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 70]
SMALL_K = (1, 5, 33, 70, 300)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_small_products_in_place(kernel, threads, dt):
    """Against numpy: single products and batches, contiguous, with rows of A
    and B further apart than their lengths (sliced), a B broadcast over the
    batch, and transposed operands; the in-place result has the bits of the
    same product with A packed (every other column of a wider A), unless the
    dot kernel takes it (its own order of sums), and the same bits at 1 and 2
    threads."""
    rng = np.random.default_rng(23)
    for t, m in enumerate(SMALL_M):
        for u, n in enumerate(SMALL_N):
            k = SMALL_K[(t + u) % len(SMALL_K)]
            tol = dict(TOL[dt], atol=TOL[dt]["atol"] * max(1, k // 64))  # sums of k terms
            a = rng.standard_normal((3, m, k + 3)).astype(dt)
            b = rng.standard_normal((3, k, n + 5)).astype(dt)
            ac, bc = np.ascontiguousarray(a[:, :, :k]), np.ascontiguousarray(b[:, :, :n])
            ta, tb = ad.from_numpy(a)[:, :, :k], ad.from_numpy(b)[:, :, :n]  # sliced rows
            tac, tbc = ad.from_numpy(ac), ad.from_numpy(bc)
            what = f"{m}x{k} @ {k}x{n}"
            want = ac @ bc
            got = np.asarray(tac @ tbc)
            np.testing.assert_allclose(got, want, **tol, err_msg="batched " + what)
            np.testing.assert_allclose(np.asarray(ta @ tb), want, **tol,
                                       err_msg="sliced " + what)
            np.testing.assert_allclose(np.asarray(tac[1] @ tbc[1]), want[1], **tol,
                                       err_msg="single " + what)
            np.testing.assert_allclose(np.asarray(ta @ tb[0]), ac @ bc[0], **tol,
                                       err_msg="broadcast B " + what)
            np.testing.assert_allclose(np.asarray(tbc.transpose(1, 2) @ tac.transpose(1, 2)),
                                       want.transpose(0, 2, 1), **tol,
                                       err_msg="transposed " + what)
            if m * n * k <= 8 * 8 * 8:
                continue  # GEMM_DIRECT_MAX_WORK: plain C loops, by any path
            if not takes_dot(kernel, dt, m, n, k):
                # A packed instead of read in place: the same FMA chain per element
                wide = np.zeros((3, m, 2 * k), dt)
                wide[:, :, ::2] = ac
                tap = ad.from_numpy(wide)[:, :, ::2]
                assert np.asarray(tap @ tbc).tobytes() == got.tobytes(), "packed A " + what
            ad.set_num_threads(3 - threads)
            try:
                other = np.asarray(tac @ tbc)
            finally:
                ad.set_num_threads(threads)
            assert other.tobytes() == got.tobytes(), "thread count " + what


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_small_batches_split_over_threads(kernel, dt):
    """Batches of small products split over threads, whole items per thread,
    from GEMM_BATCH_PAR_MIN (2^17) multiply-adds in all: just below, at and
    past it, the bits at 2 threads are those at 1, and numpy's within
    rounding."""
    rng = np.random.default_rng(31)
    old = ad.get_num_threads()
    try:
        for batch, m, k, n in ((3, 64, 32, 8), (8, 64, 32, 8), (32, 64, 32, 8),
                               (128, 8, 16, 8), (33, 16, 16, 16), (7, 64, 64, 33)):
            a = rng.standard_normal((batch, m, k)).astype(dt)
            b = rng.standard_normal((batch, k, n)).astype(dt)
            ta, tb = ad.from_numpy(a), ad.from_numpy(b)
            ad.set_num_threads(1)
            one = np.asarray(ta @ tb)
            ad.set_num_threads(2)
            two = np.asarray(ta @ tb)
            what = f"{batch} x ({m}x{k} @ {k}x{n})"
            np.testing.assert_allclose(one, a @ b, **TOL[dt], err_msg=what)
            assert one.tobytes() == two.tobytes(), what
    finally:
        ad.set_num_threads(old)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_large_b_feeding_few_row_tiles(kernel, threads, dt):
    """A row-major B past L2 feeding at most 4 row tiles (in all, over a
    batch sharing it) is read in place when a pass's micro-panel fits L1;
    against numpy, and the same bits as the same product with B packed (a
    column-major copy of B).  k stays within the AVX-512 level's kc (512 float64):
    past it, a row-major B of up to 24 rows takes the skinny kernel's one
    FMA chain over k, the packed GEMM a chain per pass."""
    rng = np.random.default_rng(41)
    for batch, m, k, n in ((1, 9, 512, 700), (1, 16, 300, 1031), (1, 24, 200, 517),
                           (1, 30, 128, 1500), (2, 7, 256, 600), (1, 50, 256, 600),
                           (1, 12, 500, 300)):  # k past AVX2's kc (336 on a 32 KiB L1)
        a = rng.standard_normal((batch, m, k)).astype(dt)
        b = rng.standard_normal((k, n)).astype(dt)
        ta, tb = ad.from_numpy(a), ad.from_numpy(b)
        tbp = ad.from_numpy(np.ascontiguousarray(b.T)).t()  # column-major: packed
        what = f"{batch} x ({m}x{k}) @ {k}x{n}"
        got = np.asarray(ta @ tb)
        tol = dict(TOL[dt], atol=TOL[dt]["atol"] * max(1, k // 64))
        np.testing.assert_allclose(got, a @ b, **tol, err_msg=what)
        assert np.asarray(ta @ tbp).tobytes() == got.tobytes(), what


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_narrow_products_of_any_height(kernel, threads, dt):
    """A row-major product at most one 512-bit vector wide (16 float32, 8
    float64 columns) goes to a whole-product kernel whatever its height (A
    read once in place; rows split over threads) and depth (the macro
    kernel's passes over k, the later ones added to C): against numpy, with
    the bits of the same product with A packed (every other column of a
    wider A: neither stride is 1) and of the other thread count, single,
    batched, with sliced rows of A; and through F.linear's epilogue (bias and
    ReLU) with a transposed weight.
    Depths past kc (AVX2 336 on a 32 KiB L1; AVX-512 1024 float32, 512
    float64) keep m above the skinny kernel's 24 rows (one chain over k)."""
    import pyautodiff.nn.functional as F

    rng = np.random.default_rng(43)
    for batch, m, k, n in ((1, 97, 64, 8), (1, 130, 33, 3), (1, 300, 200, 5), (1, 1000, 7, 2),
                           (1, 257, 100, 16), (1, 129, 250, 12), (3, 600, 120, 4),
                           (2, 200, 50, 7), (1, 2000, 64, 8), (1, 99, 9, 9),
                           (1, 100, 700, 8), (2, 64, 1500, 5), (1, 300, 2100, 16),
                           (1, 40, 1100, 3), (1, 33, 600, 2)):
        a = rng.standard_normal((batch, m, k + 2)).astype(dt)
        b = rng.standard_normal((k, n)).astype(dt)
        ta, tb = ad.from_numpy(a)[:, :, :k], ad.from_numpy(b)  # rows of A k + 2 apart
        ac = np.ascontiguousarray(a[:, :, :k])
        wide = np.zeros((batch, m, 2 * k), dt)
        wide[:, :, ::2] = ac
        tap = ad.from_numpy(wide)[:, :, ::2]
        what = f"{batch} x ({m}x{k}) @ {k}x{n}"
        tol = dict(TOL[dt], atol=TOL[dt]["atol"] * max(1, k // 64))
        got = np.asarray(ta @ tb)
        np.testing.assert_allclose(got, ac @ b, **tol, err_msg=what)
        if not takes_dot(kernel, dt, m, n, k):
            assert np.asarray(tap @ tb).tobytes() == got.tobytes(), "packed A " + what
        ad.set_num_threads(3 - threads)
        try:
            assert np.asarray(ta @ tb).tobytes() == got.tobytes(), "thread count " + what
        finally:
            ad.set_num_threads(threads)
        bias = rng.standard_normal(n).astype(dt)
        lin = F.linear(ta[0], tb.t(), ad.from_numpy(bias), activation="relu")
        np.testing.assert_allclose(np.asarray(lin), np.maximum(ac[0] @ b + bias, 0), **tol,
                                   err_msg="linear " + what)
        if not takes_dot(kernel, dt, m, n, k):
            assert np.asarray(lin).tobytes() == np.asarray(
                F.relu(F.linear(tap[0], tb.t(), ad.from_numpy(bias)))).tobytes(), "linear " + what


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_thin_products_with_column_major_a(kernel, threads, dt):
    """A product of a few columns (2 up to the level's limit: 8 float32 and 4
    float64 at AVX2, 24 at AVX-512) whose A has unit-stride columns (X^T G,
    the weight gradient of a matmul head) runs as the skinny product C^T =
    B^T A^T into a scratch transposed into C, A read in place: against numpy,
    bit for bit against that transposed product itself, where the skinny
    kernel takes it too (n <= 8), and at the other thread count; single,
    batched (B broadcast or not), A's columns further apart than m, B
    row-major, column-major and sliced; and through F.linear's epilogue with
    a transposed x."""
    thin_max = {"avx512": 24, "avx2": 8 if dt == np.float32 else 4}.get(kernel, 0)
    rng = np.random.default_rng(44)
    for batch, m, k, n in ((1, 9, 5, 2), (1, 512, 128, 4), (1, 300, 1, 3), (2, 77, 33, 8),
                           (1, 600, 700, 5), (3, 257, 64, 2), (1, 1000, 40, 12),
                           (1, 130, 300, 24), (2, 40, 1100, 16), (1, 2000, 3, 7)):
        at = rng.standard_normal((batch, k, m + 3)).astype(dt)  # A^T, rows m + 3 apart
        b = rng.standard_normal((batch, k, n)).astype(dt)
        ta = ad.from_numpy(at)[:, :, :m].transpose(1, 2)
        a = np.ascontiguousarray(at[:, :, :m].transpose(0, 2, 1))
        what = f"{batch} x ({m}x{k}) @ {k}x{n}"
        tol = dict(TOL[dt], atol=TOL[dt]["atol"] * max(1, k // 64))
        for name, tb in (("row-major B", ad.from_numpy(b)),
                         ("column-major B",
                          ad.from_numpy(np.ascontiguousarray(b.transpose(0, 2, 1))).transpose(1, 2)),
                         ("sliced B", ad.from_numpy(np.repeat(b, 2, axis=2))[:, :, ::2]),
                         ("B of wider rows", ad.from_numpy(np.concatenate([b, b], axis=2))[:, :, :n]),
                         ("broadcast B", ad.from_numpy(b[0]))):
            want = a @ (b[0] if name == "broadcast B" else b)
            got = np.asarray(ta @ tb)
            np.testing.assert_allclose(got, want, **tol, err_msg=f"{name} {what}")
            if n <= min(8, thin_max):
                assert np.asarray((tb.transpose(-1, -2) @ ta.transpose(1, 2)).transpose(-1, -2)
                                  ).tobytes() == got.tobytes(), f"{name} C^T {what}"
            other = at_other_thread_count(threads, lambda: ta @ tb)
            assert other.tobytes() == got.tobytes(), f"{name} threads {what}"
        check_linear_relu(ta[0], ad.from_numpy(np.ascontiguousarray(b[0].T)),
                          rng.standard_normal(n).astype(dt), a[0] @ b[0], tol, what)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_dot_products_of_few_columns(kernel, threads, dt):
    """A row-major A times a B of 2-4 columns (float64: 2), or 2-12 with B's
    columns unit-stride (x @ w.t(), a linear head), runs as dot products of
    A's rows with B^T's, B^T read in place or copied once: against numpy;
    the same bits whatever B's layout (in place, or copied from unit-stride
    rows, rows further apart than n or strided columns), wherever a row
    falls in the tiles (A from its second row on), at the other thread count,
    and through F.linear's epilogue (bias and ReLU, fused or not); single and
    batched, B broadcast or not, rows of A further apart than k, k with and
    without a tail of fewer than 8 (4) elements."""
    rng = np.random.default_rng(45)
    for batch, m, k, n in ((1, 9, 16, 2), (1, 512, 128, 4), (2, 77, 33, 3), (1, 300, 700, 12),
                           (3, 130, 64, 2), (1, 1000, 17, 10), (1, 41, 2100, 5),
                           (2, 600, 250, 8), (1, 2000, 40, 7), (1, 25, 100, 11)):
        a = rng.standard_normal((batch, m, k + 3)).astype(dt)
        b = rng.standard_normal((batch, k, n)).astype(dt)
        ta, ac = ad.from_numpy(a)[:, :, :k], np.ascontiguousarray(a[:, :, :k])
        what = f"{batch} x ({m}x{k}) @ {k}x{n}"
        tol = dict(TOL[dt], atol=TOL[dt]["atol"] * max(1, k // 64))
        cols = ad.from_numpy(np.ascontiguousarray(b.transpose(0, 2, 1))).transpose(1, 2)
        ref = None
        for name, tb in (("column-major B", cols), ("row-major B", ad.from_numpy(b)),
                         ("sliced B", ad.from_numpy(np.repeat(b, 2, axis=2))[:, :, ::2]),
                         ("broadcast B", cols[0])):
            want = ac @ (b[0] if name == "broadcast B" else b)
            got = np.asarray(ta @ tb)
            np.testing.assert_allclose(got, want, **tol, err_msg=f"{name} {what}")
            in_place = name in ("column-major B", "broadcast B")
            if not takes_dot(kernel, dt, m, n, k, b_rows_unit=in_place,
                             b_cols_unit=name != "sliced B"):
                continue
            if name == "broadcast B":
                assert got[0].tobytes() == ref[0].tobytes(), f"{name} {what}"
            elif ref is None:
                ref = got
            else:  # B^T copied: the same kernel, the same sums
                assert got.tobytes() == ref.tobytes(), f"{name} {what}"
            if takes_dot(kernel, dt, m - 1, n, k, b_rows_unit=in_place,
                         b_cols_unit=name != "sliced B"):
                # rows in other tile positions (and others left for single rows)
                assert np.asarray(ta[:, 1:] @ tb).tobytes() == got[:, 1:].tobytes(), \
                    f"{name} rows shifted {what}"
            other = at_other_thread_count(threads, lambda: ta @ tb)
            assert other.tobytes() == got.tobytes(), f"{name} threads {what}"
        check_linear_relu(ta[0], ad.from_numpy(np.ascontiguousarray(b[0].T)),
                          rng.standard_normal(n).astype(dt), ac[0] @ b[0], tol, what)


def test_gradients_through_both_kernels(kernel):
    from gradcheck import check_grad

    rng = np.random.default_rng(0)
    check_grad(lambda x, y: x @ y, [rng.standard_normal((5, 7)), rng.standard_normal((7, 3))])


def test_set_kernel_rejects_unknown():
    assert lib.ad_gemm_set_kernel(b"sse9") == lib.AD_ERR_VALUE
    assert "sse9" in ffi.string(lib.ad_last_error()).decode()
    assert lib.ad_gemm_set_kernel(b"auto") == lib.AD_OK


@pytest.mark.parametrize("var,value,want", [
    ("PYAUTODIFF_PORTABLE", "1", "portable"),
    ("PYAUTODIFF_ISA", "portable", "portable"),
    ("PYAUTODIFF_ISA", "avx2", None),  # avx2 unless the CPU has less
    ("PYAUTODIFF_ISA", "sse9", None),  # unknown: ignored
])
def test_env_var_caps_kernel(var, value, want):
    code = "import pyautodiff as ad; from pyautodiff._lib import ffi, lib; " \
           "print(ffi.string(lib.ad_gemm_kernel()).decode())"
    # the children start from no cap, whatever cap this run itself was given
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PYAUTODIFF_ISA", "PYAUTODIFF_PORTABLE", "PYAUTODIFF_GEMM_KERNEL")}
    clean["PYAUTODIFF_PORTABLE"] = "0"

    def kernel(**extra):
        out = subprocess.run([os.sys.executable, "-c", code],
                             env=dict(clean, PYTHONPATH=ROOT, **extra), capture_output=True,
                             text=True, timeout=60)
        return out.stdout.strip(), out.stderr

    best, _ = kernel()  # the CPU's own best level
    if want is None:
        order = ["portable", "avx2", "avx512"]
        want = best if value not in order else order[min(order.index(value), order.index(best))]
    got, err = kernel(**{var: value})
    assert got == want, err


def test_thread_count_api():
    old = ad.get_num_threads()
    try:
        ad.set_num_threads(1)
        assert ad.get_num_threads() == 1
        with pytest.raises(ValueError):
            ad.set_num_threads(0)
    finally:
        ad.set_num_threads(old)


AFFINITY_SCRIPT = r"""
import os, sys
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
import numpy as np
import pyautodiff as ad
print(ad.get_num_threads())
ad.set_num_threads(2)  # more threads than allowed CPUs: the pool must still finish
a = np.random.default_rng(0).standard_normal((300, 200)).astype(np.float32)
got = (ad.from_numpy(a) @ ad.from_numpy(a.T)).numpy()
np.testing.assert_allclose(got, a @ a.T, rtol=1e-4, atol=1e-3)
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux affinity API")
def test_default_threads_follow_affinity():
    """The default thread count is the CPUs this process may use (taskset,
    cpusets), and a pool with more threads than CPUs still completes."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("PYAUTODIFF_NUM_THREADS", None)
    r = subprocess.run([os.sys.executable, "-c", AFFINITY_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "ok"], r.stdout


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_c_gemm_check(tmp_path):
    """The kernel's own C test: every layout, both kernels, threads calling at once."""
    exe = str(tmp_path / "gemm_check")
    srcs = [os.path.join(ROOT, "native", "src", f) for f in
            ("gemm.c", "gemm_avx2.c", "gemm_avx512.c", "parallel.c", "cpu.c")]
    isa = {"gemm_avx2.c": ["-mavx2", "-mfma"],
           "gemm_avx512.c": ["-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mfma"]}
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    objs = []
    for s in srcs:
        o = str(tmp_path / (os.path.basename(s) + ".o"))
        subprocess.run(["gcc", "-O2", "-std=c11", "-pthread", "-I" + os.path.join(ROOT, "native",
                        "include"), *isa.get(os.path.basename(s), []), "-c", s, "-o", o],
                       check=True, env=env)
        objs.append(o)
    subprocess.run(["gcc", "-O2", "-std=c11", "-pthread", "-I" + os.path.join(ROOT, "native",
                    "include"), "-I" + os.path.join(ROOT, "native", "src"),
                    os.path.join(ROOT, "native", "tests", "gemm_check.c"), *objs, "-o", exe,
                    "-lm"], check=True, env=env)
    r = subprocess.run([exe], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
