"""Neural-network ops: mse_loss, cross_entropy, nll_loss, layer_norm,
dropout, conv1d/conv2d/conv_transpose2d, max_pool2d, avg_pool2d.  Forward
against numpy references written here, gradients by the float64
central-difference check (tiny shapes: the check is O(elements))."""
import itertools

import numpy as np
import pytest

import pyautodiff as ad
from faults import sweep_alloc_failures
from gradcheck import check_grad, layouts

rng = np.random.default_rng(0)
F = ad.nn


def rand(*shape):
    return rng.standard_normal(shape)


def lay(mk):
    return lambda i, t: mk(t) if i == 0 else t


LAYOUT_IDS = lambda v: v if isinstance(v, str) else ""  # noqa: E731


# ---- numpy references ------------------------------------------------------------------------
def np_conv2d(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    y = np.zeros((n, o, oh, ow))
    og = o // groups
    for b, oc, i, j in itertools.product(range(n), range(o), range(oh), range(ow)):
        g = oc // og
        patch = xp[b, g * cg:(g + 1) * cg,
                   i * stride[0]:i * stride[0] + dilation[0] * (kh - 1) + 1:dilation[0],
                   j * stride[1]:j * stride[1] + dilation[1] * (kw - 1) + 1:dilation[1]]
        y[b, oc, i, j] = (patch * w[oc]).sum()
    return y


def np_conv_transpose2d(x, w, stride=(1, 1), padding=(0, 0), output_padding=(0, 0), groups=1,
                        dilation=(1, 1)):
    n, cin, h, wd = x.shape
    _, coutg, kh, kw = w.shape
    cing = cin // groups
    oh = (h - 1) * stride[0] + dilation[0] * (kh - 1) + 1 + output_padding[0]
    ow = (wd - 1) * stride[1] + dilation[1] * (kw - 1) + 1 + output_padding[1]
    y = np.zeros((n, coutg * groups, oh, ow))
    for g, ki, kj in itertools.product(range(groups), range(kh), range(kw)):
        # every input pixel (i, j) adds to output pixel (i s + ki d, j s + kj d)
        cs = slice(g * cing, (g + 1) * cing)
        part = np.einsum("bchw,cd->bdhw", x[:, cs], w[cs, :, ki, kj])
        y[:, g * coutg:(g + 1) * coutg,
          ki * dilation[0]:ki * dilation[0] + (h - 1) * stride[0] + 1:stride[0],
          kj * dilation[1]:kj * dilation[1] + (wd - 1) * stride[1] + 1:stride[1]] += part
    return y[:, :, padding[0]:oh - padding[0], padding[1]:ow - padding[1]]


def np_pool2d(x, k, s, p, d=(1, 1), kind="max", count_include_pad=True):
    n, c, h, w = x.shape
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    y = np.zeros((n, c, oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        vals, count = [], 0
        for ki, kj in itertools.product(range(k[0]), range(k[1])):
            r, q = i * s[0] - p[0] + ki * d[0], j * s[1] - p[1] + kj * d[1]
            if 0 <= r < h and 0 <= q < w:
                vals.append(x[:, :, r, q])
            count += 1
        v = np.stack(vals)
        if kind == "max":
            y[:, :, i, j] = v.max(0)
        else:
            y[:, :, i, j] = v.sum(0) / (count if count_include_pad else len(vals))
    return y


# ---- losses -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name,base,mk", layouts((3, 4)), ids=LAYOUT_IDS)
def test_mse_loss(name, base, mk):
    t = rand(3, 4)
    a = mk(ad.tensor(base, dtype=ad.float64))
    d = np.asarray(a) - t
    for red, ref in (("mean", (d ** 2).mean()), ("sum", (d ** 2).sum()), ("none", d ** 2)):
        np.testing.assert_allclose(np.asarray(F.mse_loss(a, ad.tensor(t, dtype=ad.float64),
                                                         reduction=red)), ref)
        check_grad(lambda x, y: F.mse_loss(x, y, reduction=red), [base, t], make=lay(mk))
    check_grad(lambda x: F.mse_loss(x, x * 2), [base], make=lay(mk))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mse_loss_long_inputs_any_thread_count(dtype):
    """Lengths around the 8-lane blocks and the 16384-element chunks the
    threads share: the float64 sum of the exact squares (float32 inputs are
    differenced in double), the same bits at 1 and 2 threads."""
    old = ad.get_num_threads()
    try:
        for n in (1, 7, 8, 9, 16383, 16384, 16385, 100003):
            a, b = rand(n).astype(dtype), rand(n).astype(dtype)
            d = a.astype(np.float64) - b
            got = {}
            for threads in (1, 2):
                ad.set_num_threads(threads)
                x, y = ad.from_numpy(a), ad.from_numpy(b)
                got[threads] = [F.mse_loss(x, y, reduction=r).numpy() for r in ("sum", "mean", "none")]
            for one, two in zip(got[1], got[2]):
                np.testing.assert_array_equal(one, two)
            s, m, none = got[1]
            np.testing.assert_allclose(s, (d * d).sum(), rtol=1e-6 if dtype == np.float32 else 1e-12)
            np.testing.assert_allclose(m, (d * d).mean(), rtol=1e-6 if dtype == np.float32 else 1e-12)
            np.testing.assert_array_equal(none, (d * d).astype(dtype))
    finally:
        ad.set_num_threads(old)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mse_loss_one_pass_gradient(dtype):
    """The reduced losses' gradient in one native pass (no create_graph):
    2 (x - y) g / count (mean) or 2 (x - y) g (sum) on any layout, lengths
    around the 16384-element chunks the threads share, the same bits at 1 and
    2 threads; the target's gradient is its negation, and a scaled loss
    scales it."""
    old = ad.get_num_threads()
    tol = dict(rtol=1e-6, atol=0) if dtype == np.float32 else dict(rtol=1e-13, atol=0)
    try:
        for n in (1, 7, 16383, 16385, 40000):
            a, b = rand(n).astype(dtype), rand(n).astype(dtype)
            d = a.astype(np.float64) - b
            for red, scale in (("mean", 2.0 / n), ("sum", 2.0)):
                got = {}
                for threads in (1, 2):
                    ad.set_num_threads(threads)
                    x, y = ad.Var(a), ad.Var(b)
                    g = (F.mse_loss(x, y, reduction=red) * 3.0).backward()
                    got[threads] = g[x].numpy(), g[y].numpy()
                np.testing.assert_array_equal(got[1][0], got[2][0])
                np.testing.assert_allclose(got[1][0], 3.0 * scale * d, **tol)
                np.testing.assert_array_equal(got[1][1], -got[1][0])
        # a transposed input and a broadcast target (expanded to its shape)
        a = rand(6, 5).astype(dtype)
        x = ad.Var(np.ascontiguousarray(a.T))
        y = ad.from_numpy(rand(1, 6).astype(dtype))
        g = F.mse_loss(x.t(), y.t().expand(6, 5)).backward()
        want = 2.0 * (a - np.asarray(y.t().expand(6, 5))) / a.size
        np.testing.assert_allclose(g[x].numpy(), want.T, **tol)
    finally:
        ad.set_num_threads(old)


def np_cross_entropy(x, t):
    m = x.max(1, keepdims=True)
    lse = np.log(np.exp(x - m).sum(1)) + m[:, 0]
    return lse - x[np.arange(len(t)), t]


@pytest.mark.parametrize("name,base,mk", layouts((4, 3)), ids=LAYOUT_IDS)
def test_cross_entropy(name, base, mk):
    t = np.array([2, 0, 2, 1])
    a = mk(ad.tensor(base, dtype=ad.float64))
    ref = np_cross_entropy(np.asarray(a), t)
    np.testing.assert_allclose(np.asarray(F.cross_entropy(a, t, reduction="none")), ref)
    np.testing.assert_allclose(F.cross_entropy(a, t).item(), ref.mean())
    np.testing.assert_allclose(F.cross_entropy(a, ad.tensor(t), reduction="sum").item(),
                               ref.sum())
    for red in ("mean", "sum", "none"):
        check_grad(lambda x: F.cross_entropy(x, t, reduction=red), [base], make=lay(mk))


def test_cross_entropy_stable_and_shapes():
    x = np.array([[1000.0, 0.0, -1000.0], [-1e4, -1e4, -1e4 + 1]])
    y = F.cross_entropy(ad.tensor(x, dtype=ad.float64), [0, 2], reduction="none")
    np.testing.assert_allclose(np.asarray(y), [0.0, np.log(2 * np.exp(-1) + 1)], atol=1e-12)
    check_grad(lambda a: F.cross_entropy(a, [0, 2]), [x / 10])
    x32 = F.cross_entropy(ad.tensor(x, dtype=ad.float32), [1, 1])
    assert np.isfinite(x32.item()) and x32.dtype == ad.float32
    # (C,) with a 0-d target; (N, C, d) with (N, d) targets
    v = rand(5)
    np.testing.assert_allclose(F.cross_entropy(ad.tensor(v, dtype=ad.float64), 3).item(),
                               np_cross_entropy(v[None], [3])[0])
    x3, t3 = rand(2, 3, 4), rng.integers(0, 3, (2, 4))
    ref = np_cross_entropy(x3.transpose(0, 2, 1).reshape(-1, 3), t3.reshape(-1)).reshape(2, 4)
    np.testing.assert_allclose(
        np.asarray(F.cross_entropy(ad.tensor(x3, dtype=ad.float64), t3, reduction="none")), ref)
    check_grad(lambda a: F.cross_entropy(a, t3), [x3])
    check_grad(lambda a: F.cross_entropy(a, [1]), [rand(1, 1) * 0 + rand(1, 2)])
    assert F.cross_entropy(ad.zeros((0, 3)), ad.tensor([], dtype=ad.int64),
                           reduction="sum").item() == 0.0


def test_nll_loss_and_same_tensor_twice():
    x, t = rand(4, 3), np.array([1, 1, 0, 2])
    ref = -x[np.arange(4), t]
    a = ad.tensor(x, dtype=ad.float64)
    np.testing.assert_allclose(np.asarray(F.nll_loss(a, t, reduction="none")), ref)
    np.testing.assert_allclose(F.nll_loss(a, t).item(), ref.mean())
    for red in ("mean", "sum", "none"):
        check_grad(lambda y: F.nll_loss(y, t, reduction=red), [x])
    # used twice: nll of x and cross entropy of x feed one loss
    check_grad(lambda y: F.nll_loss(y, t) + F.cross_entropy(y * 2, t, reduction="sum"), [x])


def test_loss_errors():
    x = ad.zeros((2, 3))
    with pytest.raises(IndexError, match=r"cross_entropy.*target 3.*\(2, 3\)"):
        F.cross_entropy(x, [0, 3])
    with pytest.raises(IndexError, match=r"nll_loss.*-1"):
        F.nll_loss(x, [-1, 0])
    with pytest.raises(ad.ShapeError, match="cross_entropy"):
        F.cross_entropy(x, [0, 1, 2])
    with pytest.raises(ad.DTypeError, match="cross_entropy"):
        F.cross_entropy(x, ad.tensor([0.0, 1.0]))
    with pytest.raises(ad.DTypeError, match="cross_entropy"):
        F.cross_entropy(ad.zeros((2, 3), dtype=ad.int64), [0, 1])
    with pytest.raises(ad.ShapeError, match="mse_loss"):
        F.mse_loss(x, ad.zeros((3, 2)))
    with pytest.raises(ad.DTypeError, match="mse_loss"):
        F.mse_loss(x, ad.zeros((2, 3), dtype=ad.float64))
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(x, x, reduction="avg")


# ---- layer_norm / dropout ---------------------------------------------------------------------------
def np_layer_norm(x, k, w=None, b=None, eps=1e-5):
    axes = tuple(range(x.ndim - k, x.ndim))
    mu = x.mean(axes, keepdims=True)
    var = x.var(axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


@pytest.mark.parametrize("name,base,mk", layouts((3, 4)), ids=LAYOUT_IDS)
def test_layer_norm(name, base, mk):
    w, b = rand(4), rand(4)
    a = mk(ad.tensor(base, dtype=ad.float64))
    y = F.layer_norm(a, 4, ad.tensor(w, dtype=ad.float64), ad.tensor(b, dtype=ad.float64))
    np.testing.assert_allclose(np.asarray(y), np_layer_norm(np.asarray(a), 1, w, b), rtol=1e-10)
    check_grad(lambda x, w_, b_: F.layer_norm(x, (4,), w_, b_), [base, w, b], make=lay(mk))
    check_grad(lambda x: F.layer_norm(x, (4,)), [base], make=lay(mk))


def test_layer_norm_shapes():
    x, w = rand(2, 2, 3), rand(2, 3)
    y = F.layer_norm(ad.tensor(x, dtype=ad.float64), (2, 3), ad.tensor(w, dtype=ad.float64))
    np.testing.assert_allclose(np.asarray(y), np_layer_norm(x, 2, w), rtol=1e-10)
    check_grad(lambda a, w_: F.layer_norm(a, (2, 3), w_, eps=1e-3), [x, w])
    check_grad(lambda a, b_: F.layer_norm(a, (3,), None, b_), [x, rand(3)])
    check_grad(lambda a: F.layer_norm(a, (3,)) * a, [rand(1, 3)])
    assert F.layer_norm(ad.zeros((0, 3)), 3).shape == (0, 3)
    with pytest.raises(ad.ShapeError, match="layer_norm"):
        F.layer_norm(ad.zeros((2, 3)), (2,))
    with pytest.raises(ad.ShapeError, match="layer_norm"):
        F.layer_norm(ad.zeros((2, 3)), 3, ad.zeros(2))


def test_dropout():
    x = ad.ones((200, 50), dtype=ad.float64)
    y = F.dropout(x, 0.3, seed=7)
    a = np.asarray(y)
    assert set(np.unique(a)) <= {0.0, 1 / 0.7}
    assert abs((a == 0).mean() - 0.3) < 0.02
    np.testing.assert_array_equal(a, np.asarray(F.dropout(x, 0.3, seed=7)))
    assert not np.array_equal(a, np.asarray(F.dropout(x, 0.3, seed=8)))
    assert F.dropout(x, 0.3, training=False) is x
    assert np.asarray(F.dropout(x, 1.0, seed=1)).sum() == 0
    v = ad.Var(rand(3, 4))
    out = F.dropout(v.t(), 0.5, seed=3)
    g = (out * 2).sum().backward()[v]
    mask = (np.asarray(out) != 0).T
    np.testing.assert_allclose(np.asarray(g), mask * 4.0)
    for name, base, mk in layouts((3, 4)):
        check_grad(lambda t: F.dropout(t, 0.4, seed=11), [base], make=lay(mk))
    with pytest.raises(ValueError, match="dropout"):
        F.dropout(x, 1.5)
    with pytest.raises(ad.DTypeError, match="dropout"):
        F.dropout(ad.ones(3, dtype=ad.int64), 0.5, seed=1)


# ---- convolution ---------------------------------------------------------------------------------------
CONV_CASES = [
    dict(),
    dict(stride=2),
    dict(padding=1),
    dict(padding=(1, 0), stride=(1, 2)),
    dict(dilation=2, padding=1),
    dict(groups=2),
    dict(groups=2, stride=2, padding=1, dilation=(1, 2)),
]


def _norm(kw):
    p = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    return dict(stride=p(kw.get("stride", 1)), padding=p(kw.get("padding", 0)),
                dilation=p(kw.get("dilation", 1)), groups=kw.get("groups", 1))


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv2d(case):
    kw = CONV_CASES[case]
    g = kw.get("groups", 1)
    x, w, b = rand(2, 4, 5, 6), rand(4, 4 // g, 2, 3), rand(4)
    ref = np_conv2d(x, w, **_norm(kw)) + b[None, :, None, None]
    for dt, tol in ((ad.float64, 1e-10), (ad.float32, 1e-4)):
        y = F.conv2d(ad.tensor(x, dtype=dt), ad.tensor(w, dtype=dt), ad.tensor(b, dtype=dt), **kw)
        np.testing.assert_allclose(np.asarray(y), ref, rtol=tol, atol=tol)
    # width 5: every case keeps an output width > 1 (stride (1, 2) included)
    xs, ws = x[:1, :, :4, :5], w[:2]
    assert F.conv2d(ad.tensor(xs), ad.tensor(ws), **kw).shape[-1] > 1
    check_grad(lambda a, k, c: F.conv2d(a, k, c, **kw), [xs, ws, b[:2]])


@pytest.mark.parametrize("name,base,mk", layouts((1, 2, 4, 3)), ids=LAYOUT_IDS)
def test_conv2d_layouts(name, base, mk):
    w = rand(2, 2, 2, 2)
    check_grad(lambda a, k: F.conv2d(a, k, padding=1, stride=2), [base, w], make=lay(mk))
    # the weight in a transposed layout, and the same tensor used twice
    check_grad(lambda a, k: F.conv2d(a, k.t()) + F.conv2d(a, k), [base, w], make=lay(mk))


def test_conv2d_small_and_unbatched():
    check_grad(lambda a, k: F.conv2d(a, k), [rand(1, 1, 1, 1), rand(1, 1, 1, 1)])
    y = F.conv2d(ad.zeros((0, 2, 3, 3)), ad.zeros((3, 2, 2, 2)))
    assert y.shape == (0, 3, 2, 2)
    x, w = rand(2, 4, 4), rand(3, 2, 3, 3)
    np.testing.assert_allclose(np.asarray(F.conv2d(ad.tensor(x, dtype=ad.float64),
                                                   ad.tensor(w, dtype=ad.float64), padding=1)),
                               np_conv2d(x[None], w, padding=(1, 1))[0], rtol=1e-10)
    y = F.conv2d(ad.tensor(x), ad.tensor(w), padding="same")
    assert y.shape == (3, 4, 4)


def test_conv1d():
    x, w, b = rand(2, 3, 7), rand(4, 3, 3), rand(4)
    ref = np_conv2d(x[:, :, None], w[:, :, None], (1, 2), (0, 1), (1, 2))[:, :, 0] + b[:, None]
    y = F.conv1d(ad.tensor(x, dtype=ad.float64), ad.tensor(w, dtype=ad.float64),
                 ad.tensor(b, dtype=ad.float64), stride=2, padding=1, dilation=2)
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-10)
    check_grad(lambda a, k, c: F.conv1d(a, k, c, stride=2, padding=1), [x[:1], w[:2], b[:2]])


CONVT_CASES = [
    dict(),
    dict(stride=2),
    dict(stride=2, padding=1, output_padding=1),
    dict(groups=2, dilation=2),
    dict(stride=(2, 1), padding=(0, 1), groups=2),
    # output padding of the stride or more, below the dilation (torch's rule)
    dict(dilation=2, output_padding=1),
    dict(stride=(1, 2), dilation=(3, 3), padding=(1, 0), output_padding=(2, 1)),
    dict(dilation=3, padding=1, output_padding=2, groups=2),
]


@pytest.mark.parametrize("case", range(len(CONVT_CASES)))
def test_conv_transpose2d(case):
    kw = CONVT_CASES[case]
    g = kw.get("groups", 1)
    p = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    nkw = dict(stride=p(kw.get("stride", 1)), padding=p(kw.get("padding", 0)),
               output_padding=p(kw.get("output_padding", 0)), groups=g,
               dilation=p(kw.get("dilation", 1)))
    x, w, b = rand(2, 4, 3, 3), rand(4, 6 // g, 2, 2), rand(6 // g * g)
    ref = np_conv_transpose2d(x, w, **nkw) + b[None, :, None, None]
    y = F.conv_transpose2d(ad.tensor(x, dtype=ad.float64), ad.tensor(w, dtype=ad.float64),
                           ad.tensor(b, dtype=ad.float64), **kw)
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-10, atol=1e-12)
    cout_g = w.shape[1] if g == 2 else 2  # keep the check small
    check_grad(lambda a, k, c: F.conv_transpose2d(a, k, c, **kw),
               [x[:1, :, :2], w[:, :cout_g], b[:cout_g * g]])


def test_conv_errors():
    x = ad.zeros((1, 3, 4, 4))
    with pytest.raises(ad.ShapeError, match=r"conv2d.*\(2, 2, 3, 3\)"):
        F.conv2d(x, ad.zeros((2, 2, 3, 3)))
    with pytest.raises(ad.ShapeError, match="conv2d"):
        F.conv2d(x, ad.zeros((2, 3, 5, 5)))
    with pytest.raises(ad.ShapeError, match="conv2d.*groups"):
        F.conv2d(x, ad.zeros((2, 1, 3, 3)), groups=2)
    with pytest.raises(ad.DTypeError, match="conv2d"):
        F.conv2d(x, ad.zeros((2, 3, 3, 3), dtype=ad.float64))
    with pytest.raises(ValueError, match="conv2d.*stride"):
        F.conv2d(x, ad.zeros((2, 3, 3, 3)), stride=0)
    with pytest.raises(ad.ShapeError, match="conv2d"):
        F.conv2d(ad.zeros((3, 4)), ad.zeros((2, 3, 3, 3)))
    with pytest.raises(ValueError, match="conv_transpose2d.*output padding"):
        F.conv_transpose2d(x, ad.zeros((3, 2, 2, 2)), stride=1, output_padding=1)


# ---- pooling ------------------------------------------------------------------------------------------------
POOL_CASES = [((2, 2), None, (0, 0)), ((3, 3), (1, 1), (1, 1)), ((3, 2), (2, 1), (1, 0)),
              ((2, 3), (1, 2), (0, 1))]


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_max_pool2d(case):
    k, s, p = POOL_CASES[case]
    x = rng.permutation(2 * 2 * 5 * 6).reshape(2, 2, 5, 6) / 7.0  # distinct: no ties
    ref = np_pool2d(x, k, s or k, p)
    y = F.max_pool2d(ad.tensor(x, dtype=ad.float64), k, s, p)
    np.testing.assert_array_equal(np.asarray(y), ref)
    check_grad(lambda a: F.max_pool2d(a, k, s, p), [x[:1, :1]], eps=1e-4)


def test_max_pool2d_dilation_layouts_and_ties():
    x = rng.permutation(50).reshape(1, 2, 5, 5) / 3.0
    y = F.max_pool2d(ad.tensor(x, dtype=ad.float64), 2, 1, 1, dilation=2)
    np.testing.assert_array_equal(np.asarray(y), np_pool2d(x, (2, 2), (1, 1), (1, 1), (2, 2)))
    for name, base, mk in layouts((1, 1, 4, 4)):
        if name == "broadcast":
            continue  # broadcast copies tie everywhere: no unique maximum
        b = rng.permutation(base.size).reshape(base.shape) / 5.0
        check_grad(lambda a: F.max_pool2d(a, 2, 1), [b], make=lay(mk), eps=1e-4)
    # ties: the first maximum of each window takes the gradient
    v = ad.Var(np.ones((1, 1, 2, 3)))
    g = F.max_pool2d(v, 2, 1).sum().backward()[v]
    assert np.asarray(g).tolist() == [[[[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]]]
    with pytest.raises(ValueError, match="max_pool2d"):
        F.max_pool2d(ad.zeros((1, 1, 4, 4)), 2, padding=2)
    with pytest.raises(ad.ShapeError, match="max_pool2d"):
        F.max_pool2d(ad.zeros((1, 1, 2, 2)), 3)


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_avg_pool2d(case):
    k, s, p = POOL_CASES[case]
    x = rand(2, 3, 5, 6)
    for cip in (True, False):
        ref = np_pool2d(x, k, s or k, p, kind="avg", count_include_pad=cip)
        y = F.avg_pool2d(ad.tensor(x, dtype=ad.float64), k, s, p, count_include_pad=cip)
        np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-10)
        check_grad(lambda a: F.avg_pool2d(a, k, s, p, count_include_pad=cip), [x[:1, :2]])


def test_pool_1d_and_unbatched():
    x = rand(2, 7)
    y = F.max_pool1d(ad.tensor(x, dtype=ad.float64), 3, 2)
    np.testing.assert_array_equal(np.asarray(y), np_pool2d(x[None, :, None], (1, 3), (1, 2),
                                                           (0, 0))[0, :, 0])
    y = F.avg_pool1d(ad.tensor(x, dtype=ad.float64), 2)
    np.testing.assert_allclose(np.asarray(y), x[:, :6].reshape(2, 3, 2).mean(-1))
    for name, base, mk in layouts((2, 4, 4)):
        check_grad(lambda a: F.avg_pool2d(a, 2, 1), [base], make=lay(mk))


# ---- allocation failures ----------------------------------------------------------------------------------
def _all_ops_once():
    """Forward and backward through every op of this family; returns the
    gradients as numpy arrays."""
    x = ad.Var(np.linspace(-1, 1, 2 * 2 * 4 * 4).reshape(2, 2, 4, 4))
    w = ad.Var(np.linspace(-0.5, 0.5, 3 * 2 * 2 * 2).reshape(3, 2, 2, 2))
    h = F.conv2d(x, w, padding=1)
    h = F.max_pool2d(h, 2, 1) + F.avg_pool2d(h, 2, 1)
    h = F.conv_transpose2d(h, w, stride=2)
    h = F.layer_norm(h, h.shape[-1:])
    h = F.dropout(h, 0.25, seed=3)
    flat = ad.cat([h.flatten(1), F.pad(h.flatten(1), (1, 1))], 1)
    flat = flat.index_select(1, [0, 0, 5]) + flat.gather(1, np.zeros((2, 3), np.int64))
    flat = flat.scatter_add(1, [[1, 1, 0], [2, 2, 2]], flat * 2)
    loss = F.cross_entropy(flat, [0, 2]) + F.nll_loss(flat, [1, 1]) + F.mse_loss(
        flat, ad.zeros_like(flat)) + flat[[0, 0]].sum()
    g = loss.backward()
    return [np.array(g[x]), np.array(g[w])]


def test_allocation_failures_leak_nothing():
    sweep_alloc_failures(_all_ops_once, min_failures=50)
