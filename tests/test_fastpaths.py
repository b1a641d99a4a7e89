"""Correctness of the elementwise and reduction fast paths: threads above the
size threshold (1 and 2 threads), vector loops with odd tails, strided and
broadcast layouts, the float32 exp/tanh approximations, the large-buffer
cache and its huge-page advice, and the portable kernels
(PYAUTODIFF_PORTABLE=1, in a subprocess).
No timings here: speed is tools/bench.py's business."""
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import pyautodiff as ad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIG = (1 << 18) + 77  # above the thread threshold, not a multiple of any vector width


def f32(*shape, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def layouts(a):
    """(numpy array, tensor) pairs of one value in several layouts."""
    t = ad.from_numpy(np.ascontiguousarray(a))
    out = [(a, t)]
    if a.ndim == 2:
        tt = ad.from_numpy(np.ascontiguousarray(a.T))
        out.append((a, tt.t()))  # transposed view
    big = np.repeat(a, 2, axis=-1)
    tb = ad.from_numpy(big)
    out.append((big[..., ::2], tb[..., ::2]))  # strided view
    return out


# ---- elementwise -------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 7, 8, 15, 16, 17, 1000, BIG, 3 * BIG + 5])
def test_binary_unary_contiguous(threads, n):
    a, b = f32(n, seed=1), f32(n, seed=2)
    ta, tb = ad.from_numpy(a), ad.from_numpy(b)
    np.testing.assert_array_equal((ta + tb).numpy(), a + b)
    np.testing.assert_array_equal((ta * tb).numpy(), a * b)
    np.testing.assert_array_equal(ta.relu().numpy(), np.maximum(a, 0))
    np.testing.assert_allclose(ta.exp().numpy(), np.exp(a.astype(np.float64)), rtol=2e-7)
    np.testing.assert_allclose(ta.tanh().numpy(), np.tanh(a.astype(np.float64)), rtol=2e-7,
                               atol=1e-45)


def test_elementwise_bit_identical_across_threads():
    a = f32(5, BIG, seed=3)
    b = f32(BIG, seed=4)
    old = ad.get_num_threads()
    results = []
    try:
        for n in (1, 2, 3):
            ad.set_num_threads(n)
            ta, tb = ad.from_numpy(a), ad.from_numpy(b)
            results.append([r.numpy().copy() for r in
                            (ta + tb, ta.exp(), ta.tanh(), ta.t().exp(), ta[:, ::3].tanh(),
                             (ta * 2.0).sigmoid())])
    finally:
        ad.set_num_threads(old)
    for r in results[1:]:
        for x, y in zip(results[0], r):
            assert x.tobytes() == y.tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "uint8"])
def test_large_binary_all_dtypes(threads, dtype):
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((300, 301)) * 50).astype(dtype)
    b = (rng.standard_normal((300, 301)) * 50).astype(dtype)
    ta, tb = ad.from_numpy(a), ad.from_numpy(b)
    np.testing.assert_array_equal((ta + tb).numpy(), a + b)
    np.testing.assert_array_equal((ta > tb).numpy(), a > b)
    np.testing.assert_array_equal(ad.where(ta > tb, ta, tb).numpy(), np.where(a > b, a, b))


def test_strided_and_broadcast_large(threads):
    a = f32(1025, 257, seed=6)
    v = f32(257, seed=7)
    c = f32(1025, 1, seed=8)
    for na, ta in layouts(a):
        tv, tc = ad.from_numpy(v), ad.from_numpy(c)
        np.testing.assert_array_equal((ta + tv).numpy(), na + v)
        np.testing.assert_array_equal((tc * ta).numpy(), c * na)
        np.testing.assert_array_equal((ta - tc).numpy(), na - c)
        np.testing.assert_allclose(ta.exp().numpy(), np.exp(na.astype(np.float64)), rtol=2e-7)
        np.testing.assert_allclose(ta.tanh().numpy(), np.tanh(na.astype(np.float64)),
                                   rtol=2e-7, atol=1e-45)
        np.testing.assert_array_equal(ta.contiguous().numpy(), na)
    # a 3-d broadcast whose outer dim is the broadcast one
    x = f32(1, 300, 300, seed=9)
    y = f32(4, 1, 300, seed=10)
    np.testing.assert_array_equal((ad.from_numpy(x) + ad.from_numpy(y)).numpy(), x + y)


def test_float64_large(threads):
    a = f32(BIG, seed=11).astype(np.float64)
    t = ad.from_numpy(a)
    np.testing.assert_allclose(t.exp().numpy(), np.exp(a), rtol=1e-15)
    np.testing.assert_allclose(t.tanh().numpy(), np.tanh(a), rtol=1e-15)
    np.testing.assert_array_equal((t * t).numpy(), a * a)


# ---- exp / tanh accuracy -----------------------------------------------------------------
def special_inputs():
    rng = np.random.default_rng(12)
    parts = [
        np.linspace(-100, 100, 200_003),
        rng.uniform(-110, 110, 50_000),
        rng.uniform(-1, 1, 50_000),
        rng.uniform(-1e-3, 1e-3, 10_000),
        np.linspace(-104, -87, 20_001),  # exp's denormal results
        np.linspace(88, 89, 1001),  # exp's overflow edge
        np.linspace(0.6, 0.65, 1001),  # tanh's branch point
        np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40,
                  1.1754942e-38, -1.1754942e-38, 3.4e38, -3.4e38, 88.72283, 88.7229,
                  -87.33655, -103.97, 0.625, -0.625, 9.01, -9.01, 1e-20, -1e-20]),
    ]
    return np.concatenate(parts).astype(np.float32)


def check_accuracy(fn, ref, x):
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        got = fn(ad.from_numpy(x)).numpy().astype(np.float64)
        want = ref(x.astype(np.float64))
        want32 = want.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want32)
    np.testing.assert_array_equal(got[~fin & ~np.isnan(want)], want32[~fin & ~np.isnan(want)])
    # ~1.5 ulp for normal results; half the smallest denormal step below them
    np.testing.assert_allclose(got[fin], want[fin], rtol=2e-7, atol=2.0 ** -149)
    zero = x == 0
    np.testing.assert_array_equal(np.signbit(got[zero & (ref is np.tanh)]),
                                  np.signbit(x[zero & (ref is np.tanh)]))


@pytest.mark.parametrize("name", ["exp", "tanh", "log"])
def test_exp_tanh_accuracy(threads, name):
    check_accuracy(getattr(ad.Tensor, name), getattr(np, name), special_inputs())


GELU_C = np.sqrt(2 / np.pi)
LOGISTIC = {  # float64 references; gelu as x sigmoid(2u), free of 1 + tanh(u)'s cancellation
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), 2e-7, 2.0 ** -149),
    # x e^x for x < -87: a denormal e^x carries few digits
    "silu": (lambda x: x / (1 + np.exp(-x)), 2.5e-7, 1e-42),
    # e^(-2u) magnifies the ~2 ulp error of u by |2u|: ~1e-5 relative where gelu(x) ~ 1e-30
    "gelu": (lambda x: x / (1 + np.exp(-2 * GELU_C * (x + 0.044715 * x ** 3))), 1e-5, 1e-30),
}


@pytest.mark.parametrize("name", sorted(LOGISTIC))
def test_logistic_family_accuracy(threads, name):
    """float32 sigmoid / silu / gelu run on the SIMD exp, sigmoid and silu from
    e^-|x| (denormal results, no overflow)."""
    ref, rtol, atol = LOGISTIC[name]
    x = special_inputs()
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        got = getattr(ad.from_numpy(x), name)().numpy().astype(np.float64)
        want = ref(x.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want.astype(np.float32))
    np.testing.assert_array_equal(got[~fin & ~np.isnan(want)],
                                  want[~fin & ~np.isnan(want)].astype(np.float32))
    np.testing.assert_allclose(got[fin], want[fin], rtol=rtol, atol=atol)


ISA_SCRIPT = r"""
import pickle, sys
import numpy as np, pyautodiff as ad
sys.path.insert(0, sys.argv[1])
from test_fastpaths import special_inputs
x = special_inputs()
t, u = ad.from_numpy(x), ad.from_numpy(np.roll(x, 7))
with np.errstate(all="ignore"):
    maps = [getattr(t, n)() for n in ("exp", "tanh", "sigmoid", "silu", "gelu", "log", "erf",
                                      "gelu_erf")]
with np.errstate(all="ignore"):
    kernels = [t + u, t - u, t * u, t / u, ad.maximum(t, u), ad.minimum(t, u), t.sqrt(), t.relu(),
               t.abs(), -t, t * 1.5, 2.0 - t, t / 3.0, t.clamp(-1.0, 2.0), t.floor(), t.sqr(),
               t.recip(), (t > u).to_dtype(ad.float32), t[:-1:3] + u[1::3], t + u[:1]]
    ints = ad.from_numpy((x[np.isfinite(x)] * 1000).astype(np.int64) % 1000003)
    kernels += [ints * ints + ints, -ints, ints.clamp(-5, 7)]
# narrow products (n <= 12), short and tall, single and batched: at most 8
# float32 (4 float64) columns take the AVX-512 level's paired rows at 512
# bits, AVX2's narrow kernel at 256 bits and at the AVX2 level; 12 float32
# columns the AVX-512 small kernel at both widths and the AVX2 macro-kernel;
# 3 float32 and 2 float64 columns of a deeper product AVX2's dot kernel at
# both levels (the portable level has no FMA)
rng, products = np.random.default_rng(5), []
for shape, n, dt in (((64, 32), 8, np.float32), ((37, 100), 5, np.float32),
                     ((300, 200), 3, np.float32), ((4, 64, 32), 8, np.float32),
                     ((130, 64), 12, np.float32), ((50, 70), 4, np.float64),
                     ((301, 33), 2, np.float64), ((3, 40, 9), 3, np.float64)):
    a = rng.standard_normal(shape).astype(dt)
    b = rng.standard_normal(shape[:-2] + (shape[-1], n)).astype(dt)
    products.append(ad.from_numpy(a) @ ad.from_numpy(b))
from pyautodiff._lib import ffi, lib
pickle.dump((ffi.string(lib.ad_gemm_kernel()).decode(), ffi.string(lib.ad_ew_kernel()).decode(),
             [k.numpy().tobytes() for k in maps], [k.numpy().tobytes() for k in kernels],
             [p.numpy().tobytes() for p in products]), sys.stdout.buffer)
"""


def _isa_run(script, **env_extra):
    env = dict(os.environ, PYTHONPATH=ROOT, **env_extra)
    for k in ("PYAUTODIFF_ISA", "PYAUTODIFF_PORTABLE", "PYAUTODIFF_VEC_BITS"):
        if k not in env_extra:
            env.pop(k, None)
    r = subprocess.run([sys.executable, "-c", script, os.path.dirname(__file__)],
                       env=env, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return pickle.loads(r.stdout)


def test_kernels_same_bits_on_every_isa():
    """Every ISA level gives the same bits: the float32 SIMD maps at AVX2 and
    AVX-512 (same algorithm, same operation order), and the elementwise
    kernel tables at all three levels (compiled from one source, no FMA
    contraction in ISO C), the AVX-512 level's in 512-bit vectors and in the
    AVX2 tables' 256-bit ones (PYAUTODIFF_VEC_BITS), and narrow matrix
    products (one FMA chain over k per element in every kernel: at the
    AVX-512 level the paired rows at 512 bits, AVX2's narrow kernel at 256).
    PYAUTODIFF_ISA caps the level in a subprocess."""
    outs = {}
    for name, isa, bits, ew_want in (("avx512", "avx512", "512", "avx512"),
                                     ("avx512/256", "avx512", "256", "avx2"),
                                     ("avx2", "avx2", "512", "avx2"),
                                     ("portable", "portable", "512", "portable")):
        level, ew, maps, kernels, products = _isa_run(ISA_SCRIPT, PYAUTODIFF_ISA=isa,
                                                      PYAUTODIFF_VEC_BITS=bits)
        if level == isa:  # PYAUTODIFF_ISA only caps: a level this CPU lacks is left out
            assert ew == ew_want, f"{name}: elementwise tables {ew}"
            outs[name] = maps, kernels, products
    # every comparison between the levels this CPU has runs (an AVX2-only
    # machine still compares AVX2 with portable)
    levels = [n for n in ("avx512", "avx512/256", "avx2", "portable") if n in outs]
    if len(levels) < 2:
        pytest.skip("this CPU has only the portable level")
    if "avx512" in outs and "avx2" in outs:
        for i, (a, b) in enumerate(zip(outs["avx512"][0], outs["avx2"][0])):
            assert a == b, f"float32 map {i} differs between AVX-512 and AVX2"
    for lo, hi in zip(levels[1:], levels):
        for i, (a, b) in enumerate(zip(outs[hi][1], outs[lo][1])):
            assert a == b, f"kernel {i}: {hi} and {lo} differ"
        for i, (a, b) in enumerate(zip(outs[hi][2], outs[lo][2])):
            assert a == b or lo == "portable", f"product {i}: {hi} and {lo} differ"


def _cpuinfo():
    """(vendor, family) of the first CPU in /proc/cpuinfo, or None."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return None
    info = dict(line.split(":", 1) for line in text.split("\n\n")[0].splitlines() if ":" in line)
    info = {k.strip(): v.strip() for k, v in info.items()}
    if "vendor_id" not in info or "cpu family" not in info:
        return None
    return info["vendor_id"], int(info["cpu family"])


def test_elementwise_vector_width_default():
    """By default the AVX-512 level runs the compiler-vectorised elementwise
    kernels in 256-bit vectors on AMD's family 19h (Zen 4, which splits
    512-bit ops), in 512-bit ones on every other AVX-512 CPU; the other levels
    keep their own tables."""
    cpu = _cpuinfo()
    if cpu is None:
        pytest.skip("no /proc/cpuinfo with vendor and family")
    vendor, family = cpu
    for isa in ("avx512", "avx2", "portable"):
        level, ew, _, _, _ = _isa_run(ISA_SCRIPT, PYAUTODIFF_ISA=isa)
        if level != isa:
            continue
        zen4 = isa == "avx512" and vendor == "AuthenticAMD" and family == 0x19
        assert ew == ("avx2" if zen4 else isa), (isa, vendor, family, ew)


@pytest.mark.parametrize("name", ["exp", "tanh", "log"])
def test_exp_tanh_accuracy_strided(name):
    x = special_inputs()
    big = np.repeat(x, 3)
    t = ad.from_numpy(big)[::3]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        want = getattr(np, name)(x.astype(np.float64))
        got = getattr(t, name)().numpy().astype(np.float64)
        fin = np.isfinite(want.astype(np.float32))
    np.testing.assert_allclose(got[fin], want[fin], rtol=2e-7, atol=2.0 ** -149)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


# ---- reductions --------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(BIG,), (1024, 1024), (3, 90001), (90001, 3), (2, 257, 129)])
def test_reductions_large(threads, shape):
    a = f32(*shape, seed=13)
    a64 = a.astype(np.float64)
    for na, ta in layouts(a):
        n64 = na.astype(np.float64)
        np.testing.assert_allclose(ta.sum().numpy(), n64.sum(), rtol=1e-5,
                                   atol=1e-6 * np.abs(n64).sum())
        for d in range(a.ndim):
            np.testing.assert_allclose(ta.sum(d).numpy(), n64.sum(d), rtol=1e-5,
                                       atol=1e-5 * np.abs(n64).sum(d).max())
            np.testing.assert_array_equal(ta.max(d).numpy(), na.max(d))
            np.testing.assert_array_equal(ta.argmin(d).numpy(), na.argmin(d))
        np.testing.assert_array_equal(ta.max().numpy(), na.max())
        np.testing.assert_array_equal(ta.min().numpy(), na.min())
        np.testing.assert_allclose(ta.mean().numpy(), n64.mean(), rtol=1e-5, atol=1e-6)
    ti = ad.from_numpy((a64 * 100).astype(np.int64))
    np.testing.assert_array_equal(ti.sum().numpy(), (a64 * 100).astype(np.int64).sum())


def test_full_reduction_deterministic_and_nan():
    a = f32(BIG * 3, seed=14)
    t = ad.from_numpy(a)
    old = ad.get_num_threads()
    try:
        first = None
        for n in (1, 2, 4):  # blocks are fixed by the shape: same bits for any count
            ad.set_num_threads(n)
            for _ in range(3):
                got = [t.sum().numpy().tobytes(), t.reshape(3, -1).sum(0).numpy().tobytes(),
                       t.reshape(-1, 3).sum(0).numpy().tobytes(), t.max().numpy().tobytes()]
                first = first or got
                assert got == first
        ad.set_num_threads(2)
        b = a.copy()
        b[-5] = np.nan
        assert np.isnan(ad.from_numpy(b).max().numpy())
        assert np.isnan(ad.from_numpy(b).sum().numpy())
        c = a.copy()
        c[BIG + 3] = 1000.0
        assert ad.from_numpy(c).max().numpy() == 1000.0
        assert ad.from_numpy(c).argmax().numpy() == BIG + 3
    finally:
        ad.set_num_threads(old)


def test_large_backward(threads):
    a = f32(600, 500, seed=15, scale=1.0)
    x = ad.Var(a)
    g = (x.exp() * x.tanh()).sum().backward()[x].numpy()
    a64 = a.astype(np.float64)
    want = np.exp(a64) * (np.tanh(a64) + 1 - np.tanh(a64) ** 2)
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


# ---- the large-buffer cache ----------------------------------------------------------------
def test_buffer_cache_reuse_values_and_live_bytes(threads):
    n = 1_000_003  # ~4 MB: a cached size class
    base = ad.live_bytes()
    a, b = f32(n, seed=16), f32(n, seed=17)
    ta, tb = ad.from_numpy(a), ad.from_numpy(b)
    held = ad.live_bytes()
    assert held == base + 8 * n
    for i in range(5):
        y = ta + tb if i % 2 == 0 else ta * tb
        assert ad.live_bytes() == held + 4 * n
        np.testing.assert_array_equal(y.numpy(), a + b if i % 2 == 0 else a * b)
        z = ad.zeros((n,), dtype="float32")  # a reused block must still come back zeroed
        assert not z.numpy().any()
        del y, z
        assert ad.live_bytes() == held
    # a slightly smaller request shares the size class; a larger one does not break it
    for m in (n - 1000, n, n + 100_000, 3 * n):
        t = ad.from_numpy(a[: min(m, n)]) if m <= n else ad.zeros((m,), dtype="float32")
        assert ad.live_bytes() == held + 4 * m  # a cached block counts as its request
        s = t * 2.0
        np.testing.assert_array_equal(s.numpy()[:10], (t.numpy() * 2)[:10])
        del t, s
    del ta, tb
    assert ad.live_bytes() == base


def test_buffer_cache_many_sizes_no_leak():
    base = ad.live_bytes()
    keep = []
    for k in range(40):
        n = 70_000 + 9973 * k
        t = ad.zeros((n,), dtype="float64") + 1.5
        keep.append(t)
        if k % 3 == 0:
            keep.pop(0)
    for t in keep:
        assert float(t.numpy()[-1]) == 1.5
    del keep, t
    assert ad.live_bytes() == base


def test_buffer_cache_respects_failure_injection():
    from faults import sweep_alloc_failures
    n = 1 << 20
    a = ad.from_numpy(f32(n, seed=18))
    (a + a).numpy()  # leaves a block of this class in the cache
    # every allocation of the op fails in turn, the cached data block's included
    assert sweep_alloc_failures(lambda: [(a + a).numpy().copy(), a[::2].exp().numpy().copy()]) >= 4
    m = ad.from_numpy(f32(1000, 300, seed=19))  # sum over the first dim: partial rows
    assert sweep_alloc_failures(lambda: [m.sum(0).numpy().copy()]) >= 3


HUGE_SCRIPT = r"""
import json, numpy as np, pyautodiff as ad
from pyautodiff._lib import ffi, lib
out = {}
for name, n in (("large", 3 << 20), ("small", 1 << 18)):  # 12 MiB and 1 MiB of float32
    t = ad.from_numpy(np.full(n, 1.5, np.float32))
    addr = int(ffi.cast("uintptr_t", lib.ad_tensor_data(t._h)))
    eligible = None
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "THPeligible:":
                eligible = int(line.split()[1])
    assert float((t * 2.0).numpy()[-1]) == 3.0
    out[name] = {"aligned": addr % (2 << 20) == 0, "eligible": eligible}
print(json.dumps(out))
"""


def _thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return None


@pytest.mark.parametrize("setting", ["default", "0"])
def test_large_blocks_are_advised_huge_pages(setting):
    # a fresh data block of 4 MiB or more is 2 MiB-aligned and advised
    # MADV_HUGEPAGE (alloc.c), unless PYAUTODIFF_HUGEPAGES=0; with the
    # kernel's THP in "madvise" mode only the advice makes its mapping eligible
    env = dict(os.environ)
    env.pop("PYAUTODIFF_HUGEPAGES", None)
    if setting != "default":
        env["PYAUTODIFF_HUGEPAGES"] = setting
    r = subprocess.run([sys.executable, "-c", HUGE_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    on = setting == "default"
    if "asan" not in env.get("LD_PRELOAD", ""):  # ASan's allocator aligns its own way
        assert got["large"]["aligned"] == on
    if _thp_mode() == "madvise" and got["large"]["eligible"] is not None:
        assert got["large"]["eligible"] == int(on)
        assert got["small"]["eligible"] == 0


# ---- the portable kernels ----------------------------------------------------------------
PORTABLE_SCRIPT = r"""
import numpy as np, pyautodiff as ad
rng = np.random.default_rng(0)
x = np.concatenate([rng.uniform(-100, 100, 300001), [np.inf, -np.inf, np.nan, 0.0, -0.0]])
x = x.astype(np.float32)
for threads in (1, 2):
    ad.set_num_threads(threads)
    t = ad.from_numpy(x)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for name in ("exp", "tanh"):
            got = getattr(t, name)().numpy().astype(np.float64)
            want = getattr(np, name)(x.astype(np.float64))
            fin = np.isfinite(want.astype(np.float32))
            np.testing.assert_allclose(got[fin], want[fin], rtol=2e-7, atol=2.0 ** -149)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    a = x[:300001]
    np.testing.assert_array_equal((t[:300001] + t[:300001]).numpy(), a + a)
    # float32 sum: each lane adds 32 terms, 5 pairwise levels fold the lanes, the
    # 1024-blocks add up in double, one final rounding: |error| <= 37 u sum|a|
    # (u = 2**-24; measured: below 0.07 u sum|a|)
    err = abs(float(t[:300001].sum().numpy()) - a.astype(np.float64).sum())
    assert err <= 37 * 2.0 ** -24 * np.abs(a).astype(np.float64).sum(), err
print("ok")
"""


def test_portable_kernels_subprocess():
    env = dict(os.environ, PYAUTODIFF_PORTABLE="1", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", PORTABLE_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
