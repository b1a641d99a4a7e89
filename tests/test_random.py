"""rand, randn and dropout against a numpy model of their counter-based draws
(draw c of seed s is splitmix64's mix(s + c * golden)), their distributions,
and their independence from the thread count, the ISA level and the length."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import pyautodiff as ad
import pyautodiff.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
U64 = np.uint64


def draws(seed, c):
    """splitmix64's output for counters c (numpy uint64 arithmetic wraps)."""
    with np.errstate(over="ignore"):
        z = U64(seed) + np.asarray(c, dtype=U64) * U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
    return z ^ (z >> U64(31))


def uniform_model(seed, n, dtype):
    z = draws(seed, np.arange(1, n + 1, dtype=U64))
    if dtype == np.float32:
        return (z >> U64(40)).astype(np.float32) * np.float32(2.0 ** -24)
    return (z >> U64(11)).astype(np.float64) * 2.0 ** -53


def normal_model(seed, n, f32=False):
    """Box-Muller in float64 numpy: pair p from draws 2p + 1 (u) and 2p + 2 (v);
    block b of 32 elements holds pairs 16b..16b+15's cosines, then their sines.
    float64: u and v of 53 bits; f32: the float32 kernel's u (31 bits, rounded
    to a float32 as it does) and v (24 bits)."""
    blocks = -(-n // 32)
    p = np.arange(16 * blocks, dtype=U64)
    zu, zv = draws(seed, 2 * p + U64(1)), draws(seed, 2 * p + U64(2))
    if f32:
        u = (((zu >> U64(33)).astype(np.float32) + np.float32(0.5)) * np.float32(2.0 ** -31)
             ).astype(np.float64)
        v = (zv >> U64(40)).astype(np.float64) * 2.0 ** -24
    else:
        u = ((zu >> U64(11)).astype(np.float64) + 0.5) * 2.0 ** -53
        v = (zv >> U64(11)).astype(np.float64) * 2.0 ** -53
    r, t = np.sqrt(-2.0 * np.log(u)), 2 * np.pi * v
    out = np.stack([(r * np.cos(t)).reshape(blocks, 16), (r * np.sin(t)).reshape(blocks, 16)], 1)
    return out.reshape(-1)[:n]


def normal_cdf(x):
    return 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def ks(sorted_x, cdf):
    n = len(sorted_x)
    c = cdf(sorted_x)
    i = np.arange(1, n + 1)
    return max(np.max(i / n - c), np.max(c - (i - 1) / n))


# lengths around the kernels' edges: a part block of 32, the 16-block batches
# of the float32 draws, the 8192-element chunks the threads share
LENGTHS = [1, 2, 15, 16, 17, 31, 33, 511, 512, 513, 8191, 8193, 70001]


@pytest.mark.parametrize("n", LENGTHS)
def test_rand_is_the_model(n, threads):
    for seed in (0, 12345, 2 ** 64 - 1):
        np.testing.assert_array_equal(ad.rand(n, seed=seed).numpy(),
                                      uniform_model(seed, n, np.float32))
        np.testing.assert_array_equal(ad.rand(n, seed=seed, dtype=ad.float64).numpy(),
                                      uniform_model(seed, n, np.float64))


@pytest.mark.parametrize("n", LENGTHS)
def test_randn_is_the_model(n, threads):
    for seed in (0, 777):
        np.testing.assert_allclose(ad.randn(n, seed=seed, dtype=ad.float64).numpy(),
                                   normal_model(seed, n), rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(ad.randn(n, seed=seed).numpy(), normal_model(seed, n, f32=True),
                                   rtol=2e-6, atol=2e-6)


def seed_of_first_draw(z):
    """the seed whose draw 1 is z: splitmix64's mix inverted (its xor-shifts
    and odd multiplications are bijections of the 64-bit words)"""
    m = 2 ** 64

    def unshift(y, k):
        x = y
        for _ in range(64 // k + 1):
            x = y ^ (x >> k)
        return x

    z = unshift(z, 31) * pow(0x94D049BB133111EB, -1, m) % m
    z = unshift(z, 27) * pow(0xBF58476D1CE4E5B9, -1, m) % m
    return (unshift(z, 30) - 0x9E3779B97F4A7C15) % m


def test_rand_stays_below_one():
    # a float32 rounded from the 53-bit uniform would be 1.0 for the top 2^-25
    # of draws; the float32 takes the top 24 bits instead
    seed = seed_of_first_draw(2 ** 64 - 1)
    assert draws(seed, [1])[0] == U64(2 ** 64 - 1)
    assert ad.rand(1, seed=seed).numpy()[0] == np.float32(1 - 2 ** -24)
    assert ad.rand(1, seed=seed, dtype=ad.float64).numpy()[0] == 1 - 2 ** -53
    assert ad.rand(1, seed=seed_of_first_draw(0)).numpy()[0] == 0.0
    # randn's u is never 0: the largest magnitude comes out finite
    for dt in (ad.float32, ad.float64):
        assert np.isfinite(ad.randn(2, seed=seed_of_first_draw(0), dtype=dt).numpy()).all()
    x = ad.rand(1 << 20, seed=5).numpy()
    assert x.min() >= 0 and x.max() < 1 and x.dtype == np.float32


@pytest.mark.parametrize("dtype", [ad.float32, ad.float64])
def test_randn_distribution(dtype):
    n = 1 << 18
    x = ad.randn(n, seed=2024, dtype=dtype).numpy().astype(np.float64)
    # mean, variance, kurtosis within about 5 standard errors
    assert abs(x.mean()) < 5 / math.sqrt(n)
    assert abs(x.var() - 1) < 5 * math.sqrt(2 / n)
    assert abs(np.mean(x ** 4) - 3) < 5 * math.sqrt(96 / n)
    # Kolmogorov-Smirnov against the normal CDF (0.1% level: 1.95 / sqrt(n))
    assert ks(np.sort(x), normal_cdf) < 1.95 / math.sqrt(n)
    # both halves of a pair (a block's cosine and sine) are uncorrelated, as
    # are neighbours and the pairs' radii
    b = x.reshape(-1, 2, 16)
    for a, c in ((b[:, 0], b[:, 1]), (x[:-1], x[1:]), (b[:, 0] ** 2 + b[:, 1] ** 2, None)):
        if c is None:  # r^2 = -2 log u is exponential with mean 2
            assert abs(a.mean() - 2) < 5 * 2 / math.sqrt(a.size)
            continue
        assert abs(np.corrcoef(a.ravel(), c.ravel())[0, 1]) < 5 / math.sqrt(a.size)
    # the tails: P(|z| > 3) = 0.0027
    assert abs(np.mean(np.abs(x) > 3) - 0.0026998) < 5 * math.sqrt(0.0027 / n)


@pytest.mark.parametrize("dtype", [ad.float32, ad.float64])
def test_rand_distribution(dtype):
    n = 1 << 18
    x = ad.rand(n, seed=99, dtype=dtype).numpy().astype(np.float64)
    assert ks(np.sort(x), lambda v: v) < 1.95 / math.sqrt(n)
    assert abs(np.corrcoef(x[:-1], x[1:])[0, 1]) < 5 / math.sqrt(n)


def test_randn_prefix_does_not_depend_on_the_length():
    full = ad.randn(1000, seed=3).numpy()
    for n in (1, 17, 32, 33, 999):
        np.testing.assert_array_equal(ad.randn(n, seed=3).numpy(), full[:n])
    full = ad.randn(1000, seed=3, dtype=ad.float64).numpy()
    np.testing.assert_array_equal(ad.randn(45, seed=3, dtype=ad.float64).numpy(), full[:45])


@pytest.mark.parametrize("dtype", [ad.float32, ad.float64])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_dropout_is_the_model(dtype, p, threads):
    n = 40000
    x = ad.randn(n, seed=1, dtype=dtype)
    seed = 4242
    keep = (draws(seed, np.arange(1, n + 1, dtype=U64)) >> U64(11)).astype(np.float64) \
        * 2.0 ** -53 >= p
    scale = 1 / (1 - p) if p < 1 else 0.0
    xn = x.numpy()
    want = np.where(keep, (xn.astype(np.float64) * scale).astype(xn.dtype), 0).astype(xn.dtype)
    got = F.dropout(x, p, training=True, seed=seed).numpy()
    np.testing.assert_array_equal(got, want)
    if 0 < p < 1:
        assert abs(keep.mean() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)


def test_dropout_drops_non_finite_values_to_zero():
    x = ad.tensor([np.nan, np.inf, -np.inf, 1.0] * 64)
    y = F.dropout(x, 0.5, training=True, seed=8).numpy()
    keep = (draws(8, np.arange(1, 257, dtype=U64)) >> U64(11)) >= U64(2 ** 52)
    assert np.all(y[~keep] == 0) and not np.signbit(y[~keep]).any()
    np.testing.assert_array_equal(y[keep], (x.numpy() * 2)[keep])


def test_dropout_gradient_takes_the_same_mask(threads):
    x = ad.Var(ad.randn(5000, seed=2))
    y = F.dropout(x, 0.3, training=True, seed=11)
    g = y.sum().backward()[x].numpy()
    kept = y.numpy() != 0
    np.testing.assert_allclose(g[kept], np.float32(1 / 0.7))
    assert np.all(g[~kept] == 0)


SCRIPT = """
import numpy as np, pyautodiff as ad, pyautodiff.nn.functional as F, sys
from pyautodiff._lib import ffi, lib
ad.set_num_threads(2)
out = [ad.randn(70001, seed=9).numpy(), ad.rand(70001, seed=9).numpy(),
       ad.randn(70001, seed=9, dtype=ad.float64).numpy(),
       F.dropout(ad.ones(70001), 0.25, training=True, seed=9).numpy()]
np.savez(sys.argv[1], *out)
print(ffi.string(lib.ad_gemm_kernel()).decode())
"""


def test_same_values_at_every_isa_level(tmp_path):
    """float32 randn at AVX2 gives the AVX-512 level's bits (the same
    operations); the portable level's libm calls may differ in the last bits;
    rand, dropout and float64 randn are the same at every level."""
    got = {}
    for level in ("avx512", "avx2", "portable"):
        path = str(tmp_path / f"{level}.npz")
        r = subprocess.run([sys.executable, "-c", SCRIPT, path], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=ROOT, PYAUTODIFF_ISA=level),
                           timeout=120)
        assert r.returncode == 0, r.stderr
        data = np.load(path)
        got[r.stdout.strip()] = [data[f"arr_{i}"] for i in range(4)]
    ref = got.pop("portable")
    for level, arrays in got.items():
        np.testing.assert_allclose(arrays[0], ref[0], rtol=1e-5, atol=1e-5)
        for a, b in zip(arrays[1:], ref[1:]):
            np.testing.assert_array_equal(a, b)
    if len(got) == 2:
        np.testing.assert_array_equal(got["avx512"][0], got["avx2"][0])
