"""The conv and max-pool kernels' own paths, at 1 and 2 threads: the
(sample, group) items spread over the threads with their own im2col buffers
and weight-gradient accumulators, the pointwise (1x1) convolution that skips
im2col, the 2x2 stride-2 pooling kernel and the general pooling walk (with
its parallel split over planes).  Forwards against the numpy references of
test_ops_nn, the pooling backward and gather against a direct argmax
reference (first maximum in window order, a NaN counting as the maximum),
gradients by float64 central differences."""
import itertools
import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import pyautodiff as ad
from gradcheck import check_grad
from pyautodiff._lib import lib
from pyautodiff.tensor import _call
from test_ops_nn import np_conv2d, np_conv_transpose2d, np_pool2d

F = ad.nn.functional
rng = np.random.default_rng(12)


def rand(*shape):
    return rng.standard_normal(shape)


# ---- max pooling ---------------------------------------------------------------------------------
def np_argmax_windows(x, k, s, p, d):
    """(n, c, oh, ow) flat h*w indices of each window's first maximum (window
    order, a NaN wins), -1 for a window wholly in the padding."""
    n, c, h, w = x.shape
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    at = np.full((n, c, oh, ow), -1, np.int64)
    for b, ch, i, j in itertools.product(range(n), range(c), range(oh), range(ow)):
        best, m = -1, 0.0
        for ki, kj in itertools.product(range(k[0]), range(k[1])):
            r, q = i * s[0] - p[0] + ki * d[0], j * s[1] - p[1] + kj * d[1]
            if not (0 <= r < h and 0 <= q < w):
                continue
            v = x[b, ch, r, q]
            if best < 0 or v > m or (np.isnan(v) and not np.isnan(m)):
                best, m = r * w + q, v
        at[b, ch, i, j] = best
    return at


def special_values(x):
    """x with ties, -infs, NaNs and signed zeros planted."""
    x = x.copy()
    flat = x.reshape(-1)
    idx = rng.permutation(flat.size)
    flat[idx[:flat.size // 6]] = 1.5                     # ties
    flat[idx[flat.size // 6:flat.size // 6 + 9]] = -np.inf
    flat[idx[flat.size // 6 + 9:flat.size // 6 + 14]] = np.nan
    flat[idx[flat.size // 6 + 14:flat.size // 6 + 20]] = -0.0
    x[0, 0, :2, :2] = -np.inf                            # a whole window of -inf
    return x


# (kernel, stride, padding, dilation): the 2x2 stride-2 kernel on even and odd
# sizes, and the general walk with stride 1, 3, padding, dilation, a 1-wide kernel
POOL_CASES = [((2, 2), (2, 2), (0, 0), (1, 1)),
              ((3, 3), (2, 2), (1, 1), (1, 1)),
              ((2, 2), (1, 1), (0, 0), (1, 1)),
              ((3, 2), (3, 1), (1, 0), (1, 2)),
              ((2, 3), (1, 2), (0, 1), (2, 1)),
              ((1, 1), (2, 2), (0, 0), (1, 1))]
# the first is above the kernels' threshold for splitting over threads
POOL_SHAPES = [(3, 9, 33, 31), (2, 3, 8, 6), (1, 1, 5, 7), (2, 5, 18, 36)]


def pool_iargs(k, s, p, d):
    return tuple(k) + tuple(s) + tuple(p) + tuple(d)


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("shape", POOL_SHAPES)
@pytest.mark.parametrize("dtype", [ad.float32, ad.float64])
def test_max_pool_kernels(threads, case, shape, dtype):
    k, s, p, d = case
    x = special_values(rand(*shape)).astype(np.float32 if dtype == ad.float32 else np.float64)
    tx = ad.tensor(x, dtype=dtype)
    y = np.asarray(F.max_pool2d(tx, k, s, p, d))
    ref = np_pool2d(x.astype(np.float64), k, s, p, d)
    # np.max propagates a NaN as the kernel does; no window here is all padding
    np.testing.assert_array_equal(y, ref.astype(x.dtype))

    at = np_argmax_windows(x, k, s, p, d)
    n, c, h, w = shape
    gy = rand(*at.shape).astype(x.dtype)
    gx = np.zeros((n, c, h * w), x.dtype)
    flat_at, flat_gy = at.reshape(n, c, -1), gy.reshape(n, c, -1)
    for b, ch in itertools.product(range(n), range(c)):
        for a, g in zip(flat_at[b, ch], flat_gy[b, ch]):
            if a >= 0:
                gx[b, ch, a] += g
    got = np.asarray(_call(lib.AD_OP_MAX_POOL2D_BACKWARD, (tx, ad.tensor(gy, dtype=dtype)),
                           pool_iargs(k, s, p, d)))
    if all(kk <= ss for kk, ss in zip(k, s)):  # no overlap: each element is one gy or 0
        np.testing.assert_array_equal(got.reshape(n, c, -1), gx)
    else:  # overlapping windows add in another order
        np.testing.assert_allclose(got.reshape(n, c, -1), gx, rtol=1e-6, atol=1e-6)

    t = rand(*shape).astype(x.dtype)
    want = np.where(at >= 0, np.take_along_axis(t.reshape(n, c, -1),
                                                np.maximum(at, 0).reshape(n, c, -1),
                                                2).reshape(at.shape), 0)
    got = np.asarray(_call(lib.AD_OP_MAX_POOL2D_GATHER, (tx, ad.tensor(t, dtype=dtype)),
                           pool_iargs(k, s, p, d)))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", POOL_CASES[:4])
def test_max_pool_kernels_gradcheck(threads, case):
    k, s, p, d = case

    def spaced(*shape):  # no two values within the differences' step of each other
        return rng.permutation(np.prod(shape)).reshape(shape) * 0.01 - 0.5

    x = spaced(2, 2, 7, 6)  # odd height: the 2x2 kernel leaves a row unread
    check_grad(lambda a: F.max_pool2d(a, k, s, p, d), [x], eps=1e-4)
    # a transposed view of the input
    check_grad(lambda a: F.max_pool2d(a.transpose(2, 3), k, s, p, d),
               [spaced(2, 2, 6, 7)], eps=1e-4)


def run_elsewhere(code, data, **env):
    """stdout of `code` run by a new interpreter with `env` added to the
    environment, `data` pickled into the file named by sys.argv[1]."""
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "data.pkl")
        with open(f, "wb") as fh:
            pickle.dump(data, fh)
        return subprocess.run([sys.executable, "-c", code, f], capture_output=True, check=True,
                              env={**os.environ, **env}).stdout


POOL_2X2_SCRIPT = """
import pickle, sys, numpy as np, pyautodiff as ad
from pyautodiff._lib import lib
from pyautodiff.tensor import _call
x, t, gy = (ad.tensor(a) for a in pickle.load(open(sys.argv[1], "rb")))
ia = (2, 2, 2, 2, 0, 0, 1, 1)
for y in (ad.nn.functional.max_pool2d(x, 2), _call(lib.AD_OP_MAX_POOL2D_BACKWARD, (x, gy), ia),
          _call(lib.AD_OP_MAX_POOL2D_GATHER, (x, t), ia)):
    sys.stdout.buffer.write(np.ascontiguousarray(y).tobytes())
"""


def pool_2x2_operands(shape, dtype):
    """x drawn mostly from a few values (ties of equal and of signed zeros,
    +-inf) and NaNs of distinct payloads and both signs (which NaN a window
    gives is part of the rule), t random, gy random with -0s."""
    bits = np.uint32 if dtype == np.float32 else np.uint64
    quiet = np.array(np.nan, dtype).view(bits)
    x = rng.choice(np.array([0.0, -0.0, 1.5, -1.0, np.inf, -np.inf], dtype), size=shape)
    x = np.where(rng.random(shape) < 0.3, rand(*shape).astype(dtype), x)
    nans = rng.random(shape) < 0.04
    payload = (quiet | rng.integers(1, 1000, shape).astype(bits)
               | (rng.integers(0, 2, shape).astype(bits) << bits(8 * x.itemsize - 1)))
    x = np.where(nans, payload.view(dtype), x)
    n, c, h, w = shape
    gy = rand(n, c, h // 2, w // 2).astype(dtype)
    gy.reshape(-1)[::5] = -0.0
    return x, rand(*shape).astype(dtype), gy


# h even (the planes run as one tall plane) and odd, w even and odd; at both
# dtypes' vector widths (8 and 4 windows): whole vectors, tails that fit in
# the rows that follow, and tails that need masks (a tiny width, the last row)
@pytest.mark.parametrize("shape", [(2, 5, 18, 36), (3, 4, 9, 17), (2, 3, 6, 2), (1, 2, 4, 3),
                                   (3, 9, 33, 31), (1, 1, 2, 50)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_2x2_same_bits_at_every_level(threads, shape, dtype):
    """The 2x2 stride-2 pool's AVX2 kernel (any x86 level from AVX2 on) gives
    the portable C kernel's bits, NaN payloads and the zeros' signs included,
    forward, backward and gather."""
    ops = pool_2x2_operands(shape, dtype)
    ia = pool_iargs((2, 2), (2, 2), (0, 0), (1, 1))
    x, t, gy = (ad.tensor(a) for a in ops)
    here = b"".join(np.ascontiguousarray(y).tobytes() for y in (
        F.max_pool2d(x, 2), _call(lib.AD_OP_MAX_POOL2D_BACKWARD, (x, gy), ia),
        _call(lib.AD_OP_MAX_POOL2D_GATHER, (x, t), ia)))
    assert here == run_elsewhere(POOL_2X2_SCRIPT, ops, PYAUTODIFF_ISA="portable")
    # a -0 gradient reaches its argmax as +0, as the overlapping windows' sums give
    gx = np.asarray(_call(lib.AD_OP_MAX_POOL2D_BACKWARD, (x, gy), ia))
    assert not np.signbit(gx[gx == 0]).any()
    # and the values against numpy's window maxima
    ref = np_pool2d(ops[0], (2, 2), (2, 2), (0, 0), (1, 1)).astype(dtype)
    np.testing.assert_array_equal(np.frombuffer(here[:ref.nbytes], dtype).reshape(ref.shape), ref)


def test_max_pool_window_of_padding_only(threads):
    # padding 1, dilation 3: the one window sees only padding; it gives -inf
    # forward, no gradient and a 0 gather
    x = ad.tensor(rand(1, 2, 2, 2), dtype=ad.float64)
    ia = pool_iargs((2, 2), (3, 3), (1, 1), (3, 3))
    y = F.max_pool2d(x, 2, 3, 1, 3)
    np.testing.assert_array_equal(np.asarray(y), np.full((1, 2, 1, 1), -np.inf))
    g = _call(lib.AD_OP_MAX_POOL2D_BACKWARD, (x, ad.ones((1, 2, 1, 1), dtype=ad.float64)), ia)
    np.testing.assert_array_equal(np.asarray(g), np.zeros((1, 2, 2, 2)))
    t = _call(lib.AD_OP_MAX_POOL2D_GATHER, (x, x), ia)
    np.testing.assert_array_equal(np.asarray(t), np.zeros((1, 2, 1, 1)))


# ---- convolution --------------------------------------------------------------------------------
CONV_CASES = [dict(padding=1),                                  # the CNN's 3x3
              dict(stride=2, padding=(1, 0), dilation=(1, 2)),
              dict(groups=2, stride=(1, 2)),
              dict(),                                            # 1x1 when the kernel is 1x1
              dict(groups=3, padding=2, dilation=2)]


@pytest.mark.parametrize("kw", CONV_CASES)
@pytest.mark.parametrize("n", [1, 5])
@pytest.mark.parametrize("ksize", [(3, 3), (1, 1), (2, 3)])
def test_conv2d_batch_items(threads, kw, n, ksize):
    """n = 1 runs the items one by one with threaded GEMMs; n = 5 spreads
    them over the threads (5 * groups items, an uneven split)."""
    g = kw.get("groups", 1)
    c, o = 2 * g, 3 * g
    x, w = rand(n, c, 9, 8), rand(o, c // g, *ksize)
    d = kw.get("dilation", 1)
    d = (d, d) if isinstance(d, int) else d
    pad = kw.get("padding", 0)
    pad = (pad, pad) if isinstance(pad, int) else pad
    st = kw.get("stride", 1)
    st = (st, st) if isinstance(st, int) else st
    ref = np_conv2d(x, w, st, pad, d, g)
    for dt, tol in ((ad.float64, 1e-10), (ad.float32, 1e-4)):
        y = F.conv2d(ad.tensor(x, dtype=dt), ad.tensor(w, dtype=dt), **kw)
        np.testing.assert_allclose(np.asarray(y), ref, rtol=tol, atol=tol)
    # gradients of the input (conv_transpose2d) and the weight (the
    # accumulated per-thread sums) by finite differences, on a smaller input
    xs = x[:, :, :5, :6]
    check_grad(lambda a, k: F.conv2d(a, k, **kw), [xs, w])


@pytest.mark.parametrize("n,o", [(1, 4), (2, 4), (2, 1)])
@pytest.mark.parametrize("kw", [dict(padding=1), dict(stride=2, padding=(2, 1), dilation=(2, 1))])
def test_conv2d_forward_packs_a_large_im2col_in_blocks(threads, n, o, kw):
    """Where im2col would outgrow L2 the forward's GEMM packs its B straight
    from the image, a block at a time: 130 channels x 3 x 3 = 1170 rows of B
    take two or three passes over k, the later ones starting inside a
    channel's window, and 37 x 37 (19 x 37 strided) output pixels take
    column panels starting inside an output row; n = 1 splits the one
    product over the threads, o = 1 makes it one row."""
    x, w = rand(n, 130, 37, 37), rand(o, 130, 3, 3)
    ref = np_conv2d(x, w, **{k: (v, v) if isinstance(v, int) else v for k, v in kw.items()})
    for dt, tol in ((ad.float64, 1e-10), (ad.float32, 1e-3)):
        y = F.conv2d(ad.tensor(x, dtype=dt), ad.tensor(w, dtype=dt), **kw)
        np.testing.assert_allclose(np.asarray(y), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("n,o", [(1, 4), (3, 2)])
@pytest.mark.parametrize("kw", [dict(padding=(2, 0), dilation=(1, 2)), dict(padding=(0, 3)),
                                dict(padding=1, groups=2), dict(padding=(1, 2), dilation=2)])
def test_conv2d_forward_packs_a_padded_copy_at_stride_1(threads, n, o, kw):
    """At stride 1 the packer copies rows of a padded copy of the image over
    a wide grid of output columns, then gathers the output's: padding on one
    axis only, wider than the window's half, dilated along one axis or both,
    groups (each item its own channels and filters), 37 x 37 output pixels
    (column panels starting inside a wide row)."""
    x, w = rand(n, 130, 37, 37), rand(o, 130 // kw.get("groups", 1), 3, 3)
    pair = {k: (v, v) if isinstance(v, int) else v for k, v in kw.items() if k != "groups"}
    ref = np_conv2d(x, w, groups=kw.get("groups", 1), **pair)
    for dt, tol in ((ad.float64, 1e-10), (ad.float32, 1e-3)):
        y = F.conv2d(ad.tensor(x, dtype=dt), ad.tensor(w, dtype=dt), **kw)
        np.testing.assert_allclose(np.asarray(y), ref, rtol=tol, atol=tol)


def test_conv2d_forward_narrow_output_packs_from_the_image():
    """An output row of 8 pixels would be a quarter wider on the padded copy's
    grid: such a product keeps packing its runs straight from the image
    (1200 channels x 3 x 3 x 64 pixels: past L2 in float32)."""
    x, w = rand(2, 1200, 8, 8), rand(3, 1200, 3, 3)
    ref = np_conv2d(x, w, padding=(1, 1))
    y = F.conv2d(ad.tensor(x, dtype=ad.float32), ad.tensor(w, dtype=ad.float32), padding=1)
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("kw", [dict(padding=1), dict(padding=(0, 2), dilation=(1, 2)),
                                dict(padding=(2, 1), dilation=2, groups=2)])
def test_conv_transpose2d_at_stride_1_runs_as_a_conv2d(threads, n, kw):
    """At stride 1, where the matching conv2d packs a padded copy of its input,
    conv_transpose2d is that conv2d with the weight flipped and its channels
    swapped (padding dilation (k - 1) - padding: 0 up to the window's whole
    reach), not a GEMM and col2im."""
    g = kw.get("groups", 1)
    x, w = rand(n, 130, 37, 37), rand(130, 6 // g, 3, 3)
    pair = {k: (v, v) if isinstance(v, int) else v for k, v in kw.items() if k != "groups"}
    ref = np_conv_transpose2d(x, w, groups=g, **pair)
    for dt, tol in ((ad.float64, 1e-10), (ad.float32, 1e-3)):
        y = F.conv_transpose2d(ad.tensor(x, dtype=dt), ad.tensor(w, dtype=dt), **kw)
        np.testing.assert_allclose(np.asarray(y), ref, rtol=tol, atol=tol)


def np_conv2d_weight_grad(x, gy, kh, kw, padding, dilation, groups):
    """dW[o, c, i, j] = sum over n, y, x of gy[n, o, y, x] xpad[n, c, y + i dh, x + j dw]."""
    (ph, pw), (dh, dw) = padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    o, oh, ow = gy.shape[1:]
    cg, og = x.shape[1] // groups, o // groups
    dw_ = np.zeros((o, cg, kh, kw))
    for g, i, j in itertools.product(range(groups), range(kh), range(kw)):
        win = xp[:, g * cg:(g + 1) * cg, i * dh:i * dh + oh, j * dw:j * dw + ow]
        dw_[g * og:(g + 1) * og, :, i, j] = np.einsum("nohw,nchw->oc", gy[:, g * og:(g + 1) * og], win)
    return dw_


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("kw", [dict(padding=1), dict(padding=(0, 2), dilation=(1, 2)),
                                dict(padding=(2, 1), dilation=2, groups=2)])
def test_conv2d_weight_grad_at_stride_1_packs_a_padded_copy(threads, n, kw):
    """Past L2 at stride 1 the weight gradient's GEMM packs im2col transposed
    straight from a padded copy of the input (window offset-major columns,
    gathered back to the weight's order): 130 channels per group, so panels
    of 32, 16 or 8 columns straddle window offsets (packed element by
    element) as well as lying within one (the AVX2 transposing pack), the
    items' sums split over the threads."""
    g = kw.get("groups", 1)
    pad = kw.get("padding", 0)
    pad = (pad, pad) if isinstance(pad, int) else pad
    d = kw.get("dilation", 1)
    d = (d, d) if isinstance(d, int) else d
    x = rand(n, 130 * g, 37, 37)
    oh = 37 + 2 * pad[0] - 2 * d[0]
    ow = 37 + 2 * pad[1] - 2 * d[1]
    gy = rand(n, 2 * g, oh, ow)
    ref = np_conv2d_weight_grad(x, gy, 3, 3, pad, d, g)
    ia = (3, 3, 1, 1, pad[0], pad[1], d[0], d[1], g)
    for dt, tol in ((ad.float64, 1e-9), (ad.float32, 2e-3)):
        got = _call(lib.AD_OP_CONV2D_WEIGHT_GRAD, (ad.tensor(x, dtype=dt), ad.tensor(gy, dtype=dt)), ia)
        np.testing.assert_allclose(np.asarray(got), ref, rtol=tol, atol=tol)


def test_wide_paths_keep_non_finite_values_where_they_belong(threads):
    """The wide grid's extra columns read pixels wrapped in from the next row,
    and the transpose as a conv multiplies its weight by the padding's zeros:
    an inf there would make NaNs (0 * inf) in elements the gradient and the
    scatter leave finite.  The weight gradient zeroes those rows of its
    panels; a non-finite weight sends conv_transpose2d to the scatter."""
    x, gy = rand(1, 130, 37, 37), rand(1, 2, 37, 37)
    x[0, 0, 5, 0], x[0, 3, 36, 36], x[0, 7, 0, 20] = np.inf, -np.inf, np.nan
    ref = np_conv2d_weight_grad(x, gy, 3, 3, (1, 1), (1, 1), 1)
    assert np.isfinite(ref).sum() > 0 and not np.isfinite(ref).all()
    for dt in (ad.float64, ad.float32):
        got = _call(lib.AD_OP_CONV2D_WEIGHT_GRAD, (ad.tensor(x, dtype=dt), ad.tensor(gy, dtype=dt)),
                    (3, 3, 1, 1, 1, 1, 1, 1, 1))
        got = np.asarray(got)
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(ref))
        np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3)
    xt, w = rand(1, 130, 37, 37), rand(130, 3, 3, 3)
    w[0, 0, 0, 0] = np.inf
    ref = np_conv_transpose2d(xt, w, padding=(1, 1))
    for dt in (ad.float64, ad.float32):
        got = np.asarray(F.conv_transpose2d(ad.tensor(xt, dtype=dt), ad.tensor(w, dtype=dt), padding=1))
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(ref))
        np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("kw", [dict(padding=1), dict(padding=0), dict(padding=(2, 0)),
                                dict(padding=(0, 3)), dict(padding=1, groups=2)])
@pytest.mark.parametrize("hw", [(9, 9), (10, 13), (3, 4), (37, 37)])
def test_conv2d_winograd(threads, n, kw, hw):
    """A 3x3 kernel at stride 1 and dilation 1 with at least 16 channels in
    and out a group runs as Winograd F(2x2, 3x3): 2x2 output tiles from 4x4
    input tiles, odd output sizes leaving a last tile half outside, padding
    on one axis only and past the window's half, groups, 19 tiles a row (5
    tile rows a block, the last block short), and one item's blocks spread
    over the threads (n = 1 at 2 threads)."""
    g = kw.get("groups", 1)
    x, w = rand(n, 17 * g, *hw), rand(18 * g, 17, 3, 3)
    pair = {k: (v, v) if isinstance(v, int) else v for k, v in kw.items() if k != "groups"}
    ref = np_conv2d(x, w, groups=g, **pair)
    for dt, tol in ((ad.float64, 1e-12), (ad.float32, 1e-5)):
        y = np.asarray(F.conv2d(ad.tensor(x, dtype=dt), ad.tensor(w, dtype=dt), **kw))
        np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * np.abs(ref).max())


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("kw", [dict(padding=1), dict(padding=0), dict(padding=(2, 0)),
                                dict(padding=(0, 3)), dict(padding=1, groups=2)])
@pytest.mark.parametrize("hw", [(9, 9), (10, 13), (3, 4), (37, 37)])
def test_conv2d_weight_grad_winograd(threads, n, kw, hw):
    """The weight gradient of such a convolution sums, for each 4x4 position
    of the filters' transform, the transformed output gradient times the
    transformed input over the tiles (16 GEMMs a block), each slot its own
    sums, then G^T dU G: against numpy, with items spread over the threads
    (n = 3 at 2 threads) or one thread (n = 1 at 2 threads: the direct GEMM)."""
    g = kw.get("groups", 1)
    pad = kw.get("padding", 0)
    pad = (pad, pad) if isinstance(pad, int) else pad
    x = rand(n, 17 * g, *hw)
    gy = rand(n, 18 * g, hw[0] + 2 * pad[0] - 2, hw[1] + 2 * pad[1] - 2)
    ref = np_conv2d_weight_grad(x, gy, 3, 3, pad, (1, 1), g)
    for dt, tol in ((ad.float64, 1e-12), (ad.float32, 1e-5)):
        got = _call(lib.AD_OP_CONV2D_WEIGHT_GRAD, (ad.tensor(x, dtype=dt), ad.tensor(gy, dtype=dt)),
                    (3, 3, 1, 1, pad[0], pad[1], 1, 1, g))
        np.testing.assert_allclose(np.asarray(got), ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_conv2d_winograd_gradients_by_finite_differences():
    """conv2d's gradients (input through the transposed conv, weight through
    the position sums, both Winograd here) against float64 central
    differences."""
    check_grad(lambda a, b: F.conv2d(a, b, padding=1), [rand(2, 16, 5, 4), rand(16, 16, 3, 3)])


def test_conv2d_winograd_switch_and_non_finite_inputs(threads):
    """PYAUTODIFF_WINOGRAD=0 keeps the direct GEMM (other rounding, the same
    values); an inf or NaN in the input or the weight takes it too, since the
    transforms add and subtract it: an inf would come out NaN (inf - inf)
    where the direct sums give +-inf; so do values large enough to overflow
    in the transforms where the direct sums stay finite (1e38 in float32)."""
    x, w = rand(2, 16, 12, 12).astype(np.float32), rand(16, 16, 3, 3).astype(np.float32)
    wino = np.asarray(F.conv2d(ad.tensor(x), ad.tensor(w), padding=1))
    code = ("import pickle, sys, numpy as np, pyautodiff as ad; x, w = pickle.load(open("
            "sys.argv[1], 'rb')); sys.stdout.buffer.write(np.asarray(ad.nn.functional.conv2d("
            "ad.tensor(x), ad.tensor(w), padding=1)).tobytes())")
    out = run_elsewhere(code, (x, w), PYAUTODIFF_WINOGRAD="0")
    direct = np.frombuffer(out, np.float32).reshape(wino.shape)
    assert not np.array_equal(wino, direct)
    np.testing.assert_allclose(wino, direct, rtol=1e-5, atol=1e-5 * np.abs(direct).max())
    for where in ("x", "w"):
        for bad in (np.inf, np.nan):
            xb, wb = x.copy(), w.copy()
            if where == "x":
                xb[0, 3, 5, 2] = bad
            else:
                wb[0, 3, 1, 2] = bad
            with np.errstate(invalid="ignore"):
                ref = np_conv2d(xb.astype(np.float64), wb.astype(np.float64), padding=(1, 1))
            got = np.asarray(F.conv2d(ad.tensor(xb), ad.tensor(wb), padding=1))
            fin = np.isfinite(ref)
            np.testing.assert_array_equal(np.isfinite(got), fin)
            np.testing.assert_array_equal(got[~fin], ref[~fin])  # +-inf stay inf, NaN NaN
            assert fin.any()
    rng = np.random.default_rng(4)
    huge = (np.sign(rng.standard_normal(x.shape)) * 1e38).astype(np.float32)
    for xb, wb in ((np.full_like(x, 1e38), np.full_like(w, 1e-4)), (huge, w * 1e-3)):
        ref = np_conv2d(xb.astype(np.float64), wb.astype(np.float64), padding=(1, 1))
        got = np.asarray(F.conv2d(ad.tensor(xb), ad.tensor(wb), padding=1))
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    gyh = (rand(2, 16, 12, 12) * 1e-3).astype(np.float32)
    ref = np_conv2d_weight_grad(huge.astype(np.float64), gyh.astype(np.float64), 3, 3, (1, 1),
                                (1, 1), 1)
    got = np.asarray(_call(lib.AD_OP_CONV2D_WEIGHT_GRAD, (ad.tensor(huge), ad.tensor(gyh)),
                           (3, 3, 1, 1, 1, 1, 1, 1, 1)))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    # the weight gradient with an inf or NaN in the input or the output gradient
    gy = rand(2, 16, 12, 12).astype(np.float32)
    for where in ("x", "gy"):
        for bad in (np.inf, np.nan):
            xb, gb = x.copy(), gy.copy()
            (xb if where == "x" else gb)[1, 3, 5, 2] = bad
            with np.errstate(invalid="ignore"):
                ref = np_conv2d_weight_grad(xb.astype(np.float64), gb.astype(np.float64), 3, 3,
                                            (1, 1), (1, 1), 1)
            got = np.asarray(_call(lib.AD_OP_CONV2D_WEIGHT_GRAD, (ad.tensor(xb), ad.tensor(gb)),
                                   (3, 3, 1, 1, 1, 1, 1, 1, 1)))
            fin = np.isfinite(ref)
            np.testing.assert_array_equal(np.isfinite(got), fin)
            np.testing.assert_array_equal(got[~fin], ref[~fin])


@pytest.mark.parametrize("shape,g", [((2, 32, 48, 48), 1), ((3, 32, 7, 9), 1), ((2, 34, 5, 6), 2)])
@pytest.mark.parametrize("pad", [0, 1, (2, 1)])
def test_conv_transpose2d_at_stride_1_takes_winograd(threads, shape, g, pad):
    """conv_transpose2d at stride 1 (padding within the window's reach) runs
    as a conv2d with its weight flipped wherever that conv2d is a Winograd
    one (16 channels or more each way a group), past L2 or not."""
    x, w = rand(*shape), rand(shape[1], 16, 3, 3)
    pair = (pad, pad) if isinstance(pad, int) else pad
    ref = np_conv_transpose2d(x, w, padding=pair, groups=g)
    for dt, tol in ((ad.float64, 1e-12), (ad.float32, 1e-5)):
        y = np.asarray(F.conv_transpose2d(ad.tensor(x, dtype=dt), ad.tensor(w, dtype=dt),
                                          padding=pad, groups=g))
        np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * np.abs(ref).max())


@pytest.mark.parametrize("mask", [1, 2, 3])
def test_gemm_fallbacks_without_packing_buffers(threads, mask):
    """With the GEMM's packing buffers unobtainable (as when out of memory)
    every product takes its unpacked fallback, the forward's packed im2col
    read one element at a time: the same values."""
    x, w = rand(2, 30, 40, 40), rand(3, 30, 3, 3)  # im2col 270 x 1600 float64: 3.5 MB
    a, b = rand(70, 90), rand(90, 50)
    ref = np_conv2d(x, w, padding=(1, 1))
    lib.ad_testing_gemm_packbuf_fail(mask)
    try:
        y = F.conv2d(ad.tensor(x), ad.tensor(w), padding=1)
        p = ad.tensor(a) @ ad.tensor(b)
    finally:
        lib.ad_testing_gemm_packbuf_fail(0)
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(p), a @ b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kw", [dict(stride=2, padding=1, output_padding=1),
                                dict(dilation=2, padding=1, groups=2),
                                dict(groups=2)])
@pytest.mark.parametrize("ksize", [(1, 1), (3, 2)])
def test_conv_transpose2d_batch_items(threads, kw, ksize):
    # n = 4 samples: the items spread over the threads; a 1x1 kernel without stride
    # is pointwise (no im2col), with stride and output padding it is not
    g = kw.get("groups", 1)
    x, w = rand(4, 2 * g, 4, 5), rand(2 * g, 3, *ksize)
    check_grad(lambda a, k: F.conv_transpose2d(a, k, **kw), [x, w])
    y = F.conv_transpose2d(ad.tensor(x), ad.tensor(w), **kw)
    ys = [F.conv_transpose2d(ad.tensor(x[i:i + 1]), ad.tensor(w), **kw) for i in range(4)]
    np.testing.assert_allclose(np.asarray(y), np.concatenate([np.asarray(t) for t in ys]),
                               rtol=1e-5, atol=1e-5)


WGRAD_DOTS_SCRIPT = """
import pickle, sys, numpy as np, pyautodiff as ad
from pyautodiff._lib import lib
from pyautodiff.tensor import _call
out = []
for x, gy, ia in pickle.load(open(sys.argv[1], "rb")):
    out.append(np.asarray(_call(lib.AD_OP_CONV2D_WEIGHT_GRAD, (ad.tensor(x), ad.tensor(gy)), ia)))
sys.stdout.buffer.write(pickle.dumps(out))
"""


def wgrad_dots_cases():
    """Weight gradients whose product has at most 32 rows (outputs) and
    columns (channels x window): rows and columns off the kernel's 4 x 3
    blocks, pixels off its 16 lanes, groups, stride, dilation, 1 channel 5x5."""
    out = []
    for dt in (np.float32, np.float64):
        for n, c, o, h, w, kh, kw_, s, p, d, g in [
                (3, 1, 5, 9, 13, 3, 3, 1, 1, 1, 1), (2, 2, 16, 8, 8, 3, 3, 1, 1, 1, 1),
                (2, 3, 7, 11, 6, 2, 3, 1, 0, 1, 1), (2, 4, 6, 12, 10, 3, 3, 2, 1, 1, 2),
                (1, 1, 8, 20, 17, 5, 5, 1, 2, 1, 1), (2, 2, 32, 9, 9, 3, 3, 1, 2, 2, 1),
                (2, 3, 32, 33, 31, 3, 3, 1, 1, 1, 1)]:
            x = rand(n, c, h, w).astype(dt)
            oh = (h + 2 * p - d * (kh - 1) - 1) // s + 1
            ow = (w + 2 * p - d * (kw_ - 1) - 1) // s + 1
            gy = rand(n, o, oh, ow).astype(dt)
            out.append((x, gy, (kh, kw_, s, s, p, p, d, d, g)))
    return out


def test_conv2d_weight_grad_narrow_dots_same_bits_at_every_level():
    """A weight gradient with few outputs and a small window times channels
    (a network's first layer) runs as dot products (gemm_dots), whose sums
    are formed alike at every level: the same bits from the portable, AVX2
    and the machine's own kernels, and the float64 reference's values."""
    cases = wgrad_dots_cases()
    old = ad.get_num_threads()
    ad.set_num_threads(1)  # the batch's per-thread sums are added per slot count
    try:
        here = [np.asarray(_call(lib.AD_OP_CONV2D_WEIGHT_GRAD, (ad.tensor(x), ad.tensor(gy)), ia))
                for x, gy, ia in cases]
    finally:
        ad.set_num_threads(old)
    for (x, gy, ia), got in zip(cases, here):
        kh, kw_, s, _, p, _, d, _, g = ia
        if s == 1:
            ref = np_conv2d_weight_grad(x.astype(np.float64), gy.astype(np.float64), kh, kw_,
                                        (p, p), (d, d), g)
            tol = 1e-4 if x.dtype == np.float32 else 1e-11
            np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
    for isa in ("portable", "avx2"):
        out = run_elsewhere(WGRAD_DOTS_SCRIPT, cases, PYAUTODIFF_ISA=isa,
                            PYAUTODIFF_NUM_THREADS="1")
        for a, b in zip(here, pickle.loads(out)):
            assert a.tobytes() == b.tobytes(), isa


def test_conv2d_weight_grad_sums_the_batch(threads):
    """The weight gradient of a batch is the sum of the per-sample ones, and
    the same on every call (the per-thread sums are added in a fixed order)."""
    x, w = rand(7, 4, 10, 9), rand(6, 2, 3, 3)
    gy = rand(7, 6, 10, 9)
    xv, wv = ad.Var(x, dtype=ad.float64), ad.Var(w, dtype=ad.float64)
    out = F.conv2d(xv, wv, padding=1, groups=2)
    gw = np.asarray((out * ad.tensor(gy, dtype=ad.float64)).sum().backward()[wv])
    parts = 0
    for i in range(7):
        wi = ad.Var(w, dtype=ad.float64)
        o = F.conv2d(ad.tensor(x[i:i + 1], dtype=ad.float64), wi, padding=1, groups=2)
        parts = parts + np.asarray((o * ad.tensor(gy[i:i + 1], dtype=ad.float64)).sum()
                                   .backward()[wi])
    np.testing.assert_allclose(gw, parts, rtol=1e-10, atol=1e-10)
    x32, gy32 = ad.tensor(x, dtype=ad.float32), ad.tensor(gy, dtype=ad.float32)
    w32 = ad.Var(w, dtype=ad.float32)
    first = np.asarray((F.conv2d(x32, w32, padding=1, groups=2) * gy32).sum().backward()[w32])
    for _ in range(3):
        again = np.asarray((F.conv2d(x32, w32, padding=1, groups=2) * gy32).sum()
                           .backward()[w32])
        np.testing.assert_array_equal(again, first)


# ---- row-parallel layer_norm and class losses (nn.c) ---------------------------------------------
def test_layer_norm_and_class_losses_split_over_threads(threads):
    """Shapes above the threshold for splitting rows over the threads, against
    numpy; the reduced losses sum the rows in order, so 1 and 2 threads agree
    exactly."""
    x, w, b = rand(70, 3, 200), rand(3, 200), rand(3, 200)
    mean = x.mean((1, 2), keepdims=True)
    ref = (x - mean) / np.sqrt(x.var((1, 2), keepdims=True) + 1e-5) * w + b
    y = F.layer_norm(ad.tensor(x, dtype=ad.float64), (3, 200), ad.tensor(w, dtype=ad.float64),
                     ad.tensor(b, dtype=ad.float64))
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-10, atol=1e-10)
    logits, t = rand(3000, 17), rng.integers(0, 17, 3000)
    m = logits.max(1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(1)) + m[:, 0]
    ce = lse - logits[np.arange(3000), t]
    lt = ad.tensor(logits, dtype=ad.float64)
    np.testing.assert_allclose(np.asarray(F.cross_entropy(lt, t, reduction="none")), ce,
                               rtol=1e-12)
    np.testing.assert_allclose(F.cross_entropy(lt, t).item(), ce.mean(), rtol=1e-12)
    np.testing.assert_allclose(F.nll_loss(lt, t, reduction="sum").item(),
                               -logits[np.arange(3000), t].sum(), rtol=1e-12)
    l32 = ad.tensor(logits, dtype=ad.float32)
    old = ad.get_num_threads()
    try:
        ad.set_num_threads(1)
        one = F.cross_entropy(l32, t).item()
    finally:
        ad.set_num_threads(old)
    assert F.cross_entropy(l32, t).item() == one
