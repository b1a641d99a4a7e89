"""GEMM packing and blocking paths on every kernel level: a row-major A packed
into MR-tall micro-panels by the transposing pack (6 rows at the AVX2 level:
two 4 / 2-row register blocks plus the k tail copied element by element), a
transposed A and a row-major B packed by runs of fixed width, and products
larger than every block size (kc, mc, nc come from the CPU's cache sizes at
the AVX2 level, so they differ between machines; these shapes cross them on
any machine with caches up to 48 KiB L1 / 1 MiB L2)."""
import numpy as np
import pytest

import pyautodiff as ad


TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


def _check(a, b, dt):
    """a @ b against float64 numpy, relative to the size of the terms."""
    got = (ad.from_numpy(a) @ ad.from_numpy(b)).numpy().astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    scale = np.abs(a64) @ np.abs(b64)
    tol = TOL[dt]
    err = np.abs(got - want) - (tol["atol"] + tol["rtol"] * np.maximum(scale, 1))
    assert np.all(err <= 0), f"{a.shape} @ {b.shape}: max err {np.max(np.abs(got - want))}"


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_row_major_a_packed_every_k_tail(kernel, threads, dt):
    # n = 150 feeds more micro-panels than an A read in place may serve, so A
    # is packed; k runs through every remainder of the 8 (float) / 4 (double)
    # column blocks of the transposing pack, and m through whole panels and
    # row tails of every level's MR (4, 6, 12)
    rng = np.random.default_rng(17)
    for m in (6, 12, 13, 30):
        for k in list(range(1, 18)) + [40, 515]:
            a = rng.standard_normal((m, k)).astype(dt)
            b = rng.standard_normal((k, 150)).astype(dt)
            _check(a, b, dt)
            # the same A through a strided view: rows further apart than k
            wide = rng.standard_normal((m, k + 5)).astype(dt)
            _check(wide[:, 2:k + 2], b, dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_unit_stride_runs(kernel, threads, dt):
    # a transposed A (unit row stride: MR-wide runs) and a row-major B
    # (NR-wide runs), with partial last panels in both
    rng = np.random.default_rng(23)
    for m, k, n in [(70, 33, 90), (13, 300, 200), (128, 129, 130)]:
        at = rng.standard_normal((k, m)).astype(dt)
        b = rng.standard_normal((k, n)).astype(dt)
        _check(at.T, b, dt)
        _check(at.T, np.asfortranarray(b), dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_larger_than_every_block(kernel, dt):
    rng = np.random.default_rng(29)
    m, k, n = 301, 1030, 2100 if dt == np.float32 else 1100
    a = rng.standard_normal((m, k)).astype(dt)
    b = rng.standard_normal((k, n)).astype(dt)
    _check(a, b, dt)
    _check(np.asfortranarray(a), b, dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_transposed_a_packed_row_by_row(kernel, threads, dt):
    # a unit-row-stride A (a transposed operand) is packed a group of 8
    # MR-tall panels at a time at the AVX2 level: m crosses whole groups, a
    # partial group and a row tail (MR = 6 there); k runs through the
    # remainders of the 4-way unrolled k loop and past kc (accumulation); the
    # buffer rows are further apart than m (a sliced transposed view)
    rng = np.random.default_rng(31)
    for m in (6, 48, 49, 53, 102, 150):
        for k in (1, 2, 3, 5, 7, 64, 1100):
            n = 150
            buf = rng.standard_normal((k, m + 7)).astype(dt)
            b = rng.standard_normal((k, n)).astype(dt)
            _check(buf[:, :m].T, b, dt)
            _check(buf[:, 3:m + 3].T, b, dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_row_major_b_packed_row_by_row(kernel, threads, dt):
    # a row-major B is packed a row at a time, a group of NR-wide micro-panels
    # at once (NR = 8 / 16 / 32 floats, 8 / 8 / 16 doubles at the portable,
    # AVX2 and AVX-512 levels; groups of 8 panels at the AVX2 level, 32
    # elsewhere): n runs through 1 .. 17, around whole panels and around whole
    # groups of every level (AVX2: 64 doubles, 128 floats; and nc at AVX-512,
    # 1024), with a partial last panel packed alone; m is past the rows for
    # which B is read in place; k crosses the AVX2 level's kc on machines with
    # L1 up to 48 KiB; B's rows may be further apart than n (a sliced view)
    rng = np.random.default_rng(37)
    ns = list(range(1, 18)) + [31, 32, 33, 63, 64, 65, 127, 128, 129, 135, 255, 256, 257, 263,
                               511, 512, 513, 1023, 1025]
    for n in ns:
        for m, k in ((200, 3), (200, 530), (7, 40)):
            if n > 300 and k > 100 and dt == np.float64:
                k = 300
            a = rng.standard_normal((m, k)).astype(dt)
            buf = rng.standard_normal((k, n + 9)).astype(dt)
            _check(a, buf[:, :n], dt)
            _check(a, buf[:, 5:n + 5], dt)
    # a batch sharing one packed B (broadcast over the items)
    a = rng.standard_normal((3, 40, 70)).astype(dt)
    b = rng.standard_normal((70, 520)).astype(dt)
    got = (ad.from_numpy(a) @ ad.from_numpy(b)).numpy()
    np.testing.assert_allclose(got, a @ b, **TOL[dt])
