"""ad.nn.functional against torch.nn.functional (float64, tight tolerances):
forward values and the gradients of every floating input, for the functions
of ad.nn.functional and their options.  Skipped when torch is not installed."""
import numpy as np
import pytest

import pyautodiff as ad
import pyautodiff.nn.functional as F

torch = pytest.importorskip("torch")
tF = torch.nn.functional
rng = np.random.default_rng(12)


def r(*shape):
    return rng.standard_normal(shape)


def compare(f_ad, f_torch, *arrays, atol=1e-12, rtol=1e-10, const=()):
    """Same float64 values through both; forward and the gradient of
    sum(y * w) for random w must agree.  const: indices of inputs passed as
    plain (untracked) tensors, for arguments torch does not differentiate."""
    ours = [ad.tensor(a, dtype=ad.float64) if i in const else ad.Var(a, dtype=ad.float64)
            for i, a in enumerate(arrays)]
    theirs = [torch.tensor(a, dtype=torch.float64, requires_grad=i not in const)
              for i, a in enumerate(arrays)]
    y, ty = f_ad(*ours), f_torch(*theirs)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(np.asarray(y), ty.detach().numpy(), atol=atol, rtol=rtol)
    w = rng.uniform(0.5, 1.5, size=ty.shape)
    g = (y * ad.tensor(w, dtype=ad.float64)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    for i, (v, t) in enumerate(zip(ours, theirs)):
        if i in const:
            continue
        expect = t.grad.numpy() if t.grad is not None else np.zeros(t.shape)
        got = np.asarray(g[v]) if v in g else np.zeros(v.shape)
        np.testing.assert_allclose(got, expect, atol=atol, rtol=rtol,
                                   err_msg=f"gradient of input {i}")


def test_activations():
    x = r(3, 5) * 3
    for name in ("relu", "silu", "tanh", "sigmoid"):
        compare(getattr(F, name), getattr(tF, name), x)
    for approx in ("none", "tanh"):
        compare(lambda a: F.gelu(a, approximate=approx),
                lambda a: tF.gelu(a, approximate=approx), x)
    for dim in (0, 1, -1):
        compare(lambda a: F.softmax(a, dim), lambda a: tF.softmax(a, dim), x)
        compare(lambda a: F.log_softmax(a, dim=dim), lambda a: tF.log_softmax(a, dim=dim), x)


def test_one_hot():
    t = np.array([[0, 3], [2, 2]])
    for nc in (-1, 4, 6):
        ours = F.one_hot(ad.tensor(t), nc)
        theirs = tF.one_hot(torch.tensor(t), nc)
        assert ours.dtype == ad.int64
        np.testing.assert_array_equal(np.asarray(ours), theirs.numpy())


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pads", [((2, 5), (2, 3)), ((2, 3, 5), (4, 0)),
                                        ((2, 3, 5), (-1, 2)), ((3, 4, 5), (1, 2, 3, 0)),
                                        ((1, 2, 4, 5), (2, 1, 0, 3)),
                                        ((2, 3, 3, 4), (1, 1, 2, 2, 0, 1)),
                                        ((1, 2, 3, 3, 4), (1, 0, 2, 1, 1, 2))])
def test_pad_modes(mode, shape, pads):
    compare(lambda a: F.pad(a, pads, mode=mode), lambda a: tF.pad(a, pads, mode=mode), r(*shape))


def test_pad_constant_default_value():
    compare(lambda a: F.pad(a, (1, 2)), lambda a: tF.pad(a, (1, 2)), r(2, 3))


@pytest.mark.parametrize("red", ["mean", "sum", "none"])
def test_cross_entropy_options(red):
    x = r(6, 4)
    t = np.array([1, 0, 3, -100, 2, 1])
    w = np.array([0.5, 2.0, 1.0, 1.5])
    tt, tw = torch.tensor(t), torch.tensor(w)
    for kw in (dict(), dict(weight=True), dict(label_smoothing=0.2),
               dict(weight=True, label_smoothing=0.3)):
        kw_ad = dict(kw, weight=ad.tensor(w, dtype=ad.float64)) if "weight" in kw else kw
        kw_t = dict(kw, weight=tw) if "weight" in kw else kw
        compare(lambda a: F.cross_entropy(a, t, reduction=red, **kw_ad),
                lambda a: tF.cross_entropy(a, tt, reduction=red, **kw_t), x)
        compare(lambda a: F.cross_entropy(a, t[[0, 1, 2, 4]], reduction=red, **kw_ad),
                lambda a: tF.cross_entropy(a, tt[[0, 1, 2, 4]], reduction=red, **kw_t),
                x[[0, 1, 2, 4]])
        # another ignore_index, which a real class may carry
        compare(lambda a: F.cross_entropy(a, np.abs(t) % 4, ignore_index=1, reduction=red,
                                          **kw_ad),
                lambda a: tF.cross_entropy(a, torch.tensor(np.abs(t) % 4), ignore_index=1,
                                           reduction=red, **kw_t), x)
    # (N, C, d1, d2) with weights and ignored positions
    x4 = r(2, 3, 2, 3)
    t4 = rng.integers(0, 3, (2, 2, 3))
    t4[0, 1, 2] = -100
    compare(lambda a: F.cross_entropy(a, t4, weight=ad.tensor(w[:3], dtype=ad.float64),
                                      reduction=red, label_smoothing=0.1),
            lambda a: tF.cross_entropy(a, torch.tensor(t4), weight=tw[:3], reduction=red,
                                       label_smoothing=0.1), x4)
    # (C,) input with a 0-d target
    compare(lambda a: F.cross_entropy(a, 2, weight=ad.tensor(w, dtype=ad.float64),
                                      reduction=red, label_smoothing=0.1),
            lambda a: tF.cross_entropy(a, torch.tensor(2), weight=tw, reduction=red,
                                       label_smoothing=0.1), r(4))


@pytest.mark.parametrize("red", ["mean", "sum", "none"])
def test_cross_entropy_probability_targets(red):
    w = np.array([0.5, 2.0, 1.0])
    for shape in ((5, 3), (2, 3, 4), (3,)):
        p = rng.uniform(0, 1, shape)
        p /= p.sum(0 if len(shape) == 1 else 1, keepdims=True)
        for ls in (0.0, 0.25):
            compare(lambda a, b: F.cross_entropy(a, b, reduction=red, label_smoothing=ls),
                    lambda a, b: tF.cross_entropy(a, b, reduction=red, label_smoothing=ls),
                    r(*shape), p)
            compare(lambda a, b: F.cross_entropy(a, b, ad.tensor(w, dtype=ad.float64),
                                                 reduction=red, label_smoothing=ls),
                    lambda a, b: tF.cross_entropy(a, b, torch.tensor(w), reduction=red,
                                                  label_smoothing=ls), r(*shape), p)


@pytest.mark.parametrize("red", ["mean", "sum", "none"])
def test_nll_loss_options(red):
    x = r(5, 4)
    t = np.array([1, -100, 3, 0, 3])
    w = np.array([0.5, 2.0, 1.0, 1.5])
    compare(lambda a: F.nll_loss(a, t, ad.tensor(w, dtype=ad.float64), reduction=red),
            lambda a: tF.nll_loss(a, torch.tensor(t), torch.tensor(w), reduction=red), x)
    compare(lambda a: F.nll_loss(a, t, reduction=red),
            lambda a: tF.nll_loss(a, torch.tensor(t), reduction=red), x)
    compare(lambda a: F.nll_loss(a, np.where(t < 0, 0, t), ignore_index=3,
                                 weight=ad.tensor(w, dtype=ad.float64), reduction=red),
            lambda a: tF.nll_loss(a, torch.tensor(np.where(t < 0, 0, t)), ignore_index=3,
                                  weight=torch.tensor(w), reduction=red), x)


def test_all_targets_ignored_is_nan_like_torch():
    x = r(2, 3)
    ours = F.cross_entropy(ad.tensor(x, dtype=ad.float64), [-100, -100]).item()
    theirs = tF.cross_entropy(torch.tensor(x), torch.tensor([-100, -100])).item()
    assert np.isnan(ours) and np.isnan(theirs)


@pytest.mark.parametrize("red", ["mean", "sum", "none"])
def test_binary_cross_entropy_with_logits(red):
    x = r(4, 3) * 4
    x[0, 0], x[1, 1] = 60.0, -60.0  # far tails: the stable form stays finite
    t = rng.uniform(0, 1, (4, 3))
    w, pw = rng.uniform(0.5, 2, (4, 3)), rng.uniform(0.5, 3, (3,))
    compare(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction=red),
            lambda a, b: tF.binary_cross_entropy_with_logits(a, b, reduction=red), x, t)
    compare(lambda a, b, c, d: F.binary_cross_entropy_with_logits(a, b, c, reduction=red,
                                                                  pos_weight=d),
            lambda a, b, c, d: tF.binary_cross_entropy_with_logits(a, b, c, reduction=red,
                                                                   pos_weight=d), x, t, w, pw,
            const=(2, 3))


@pytest.mark.parametrize("beta", [1.0, 0.5, 0.0])
@pytest.mark.parametrize("red", ["mean", "sum", "none"])
def test_smooth_l1_loss(red, beta):
    x, y = r(4, 5), r(4, 5)
    compare(lambda a, b: F.smooth_l1_loss(a, b, reduction=red, beta=beta),
            lambda a, b: tF.smooth_l1_loss(a, b, reduction=red, beta=beta), x, y)


def test_legacy_size_average_reduce():
    x, y = r(3, 4), r(3, 4)
    with pytest.warns(UserWarning):
        ours = F.mse_loss(ad.tensor(x, dtype=ad.float64), ad.tensor(y, dtype=ad.float64),
                          size_average=False)
    with pytest.warns(UserWarning):
        theirs = tF.mse_loss(torch.tensor(x), torch.tensor(y), size_average=False)
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-12)


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 3)])
def test_batch_norm_training_and_running_stats(shape):
    x = r(*shape) * 2 + 1
    c = shape[1]
    rm0, rv0 = r(c), rng.uniform(0.5, 2, c)
    rm, rv = ad.Var(rm0, dtype=ad.float64), ad.Var(rv0, dtype=ad.float64)
    trm, trv = torch.tensor(rm0), torch.tensor(rv0)
    compare(lambda a, w, b: F.batch_norm(a, rm, rv, w, b, training=True, momentum=0.3),
            lambda a, w, b: tF.batch_norm(a, trm, trv, w, b, training=True, momentum=0.3),
            x, r(c), r(c))
    # compare() ran the forward once on each side: one update each
    np.testing.assert_allclose(np.asarray(rm), trm.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(rv), trv.numpy(), rtol=1e-12, atol=1e-14)
    compare(lambda a: F.batch_norm(a, None, None, training=True, eps=1e-3),
            lambda a: tF.batch_norm(a, None, None, training=True, eps=1e-3), x)


def test_batch_norm_eval():
    x = r(4, 3, 5)
    rm, rv = r(3), rng.uniform(0.5, 2, 3)
    compare(lambda a, w, b: F.batch_norm(a, ad.tensor(rm, dtype=ad.float64),
                                         ad.tensor(rv, dtype=ad.float64), w, b),
            lambda a, w, b: tF.batch_norm(a, torch.tensor(rm), torch.tensor(rv), w, b),
            x, r(3), r(3))
    compare(lambda a: F.batch_norm(a, ad.tensor(rm, dtype=ad.float64),
                                   ad.tensor(rv, dtype=ad.float64), eps=0.1),
            lambda a: tF.batch_norm(a, torch.tensor(rm), torch.tensor(rv), eps=0.1), x)


@pytest.mark.parametrize("case", ["plain", "causal", "bool", "float", "dead_rows", "scale",
                                  "rect_causal", "gqa"])
def test_scaled_dot_product_attention(case):
    q, k, v = r(2, 2, 4, 3), r(2, 2, 5, 3), r(2, 2, 5, 2)
    kw = {}
    mask_args = ()
    if case == "causal":
        k, v = r(2, 2, 4, 3), r(2, 2, 4, 2)
        kw = dict(is_causal=True)
    elif case == "rect_causal":
        kw = dict(is_causal=True)
    elif case == "scale":
        kw = dict(scale=0.3)
    elif case == "bool":
        m = rng.uniform(size=(4, 5)) < 0.6
        m[:, 0] = True
        kw = dict(attn_mask=m)
    elif case == "dead_rows":
        m = rng.uniform(size=(2, 1, 4, 5)) < 0.6
        m[0, 0, 1] = False
        m[1, 0, 3] = False
        kw = dict(attn_mask=m)
    elif case == "gqa":
        q = r(2, 4, 4, 3)
        kw = dict(enable_gqa=True)
    if case == "float":
        mask_args = (r(2, 1, 4, 5),)
    if "attn_mask" in kw:
        tkw = dict(kw, attn_mask=torch.tensor(kw["attn_mask"]))
    else:
        tkw = kw
    compare(lambda a, b, c, *m: F.scaled_dot_product_attention(a, b, c, *m, **kw),
            lambda a, b, c, *m: tF.scaled_dot_product_attention(a, b, c, *m, **tkw),
            q, k, v, *mask_args)


POOL2D = [dict(kernel_size=3, stride=2), dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1)),
          dict(kernel_size=2, stride=2, padding=1), dict(kernel_size=3, stride=3, padding=1),
          dict(kernel_size=(4, 3), stride=(3, 2), padding=(2, 1))]


@pytest.mark.parametrize("kw", POOL2D)
def test_pool2d_ceil_mode(kw):
    x = r(2, 2, 7, 6)
    for ceil in (False, True):
        compare(lambda a: F.max_pool2d(a, ceil_mode=ceil, **kw),
                lambda a: tF.max_pool2d(a, ceil_mode=ceil, **kw), x)
        compare(lambda a: F.max_pool2d(a, dilation=2, ceil_mode=ceil, **kw),
                lambda a: tF.max_pool2d(a, dilation=2, ceil_mode=ceil, **kw), x)
        for cip in (True, False):
            compare(lambda a: F.avg_pool2d(a, ceil_mode=ceil, count_include_pad=cip, **kw),
                    lambda a: tF.avg_pool2d(a, ceil_mode=ceil, count_include_pad=cip, **kw), x)
        compare(lambda a: F.avg_pool2d(a, ceil_mode=ceil, divisor_override=5, **kw),
                lambda a: tF.avg_pool2d(a, ceil_mode=ceil, divisor_override=5, **kw), x)


@pytest.mark.parametrize("kw", [dict(kernel_size=3, stride=2), dict(kernel_size=2, padding=1),
                                dict(kernel_size=4, stride=3, padding=2),
                                dict(kernel_size=(3,), stride=(2,), padding=(1,))])
def test_pool1d_ceil_mode(kw):
    x = r(2, 3, 8)
    for ceil in (False, True):
        compare(lambda a: F.max_pool1d(a, ceil_mode=ceil, **kw),
                lambda a: tF.max_pool1d(a, ceil_mode=ceil, **kw), x)
        for cip in (True, False):
            compare(lambda a: F.avg_pool1d(a, ceil_mode=ceil, count_include_pad=cip, **kw),
                    lambda a: tF.avg_pool1d(a, ceil_mode=ceil, count_include_pad=cip, **kw), x)


def test_1d_tuple_arguments_raise_like_torch():
    x, w = ad.zeros((1, 2, 8)), ad.zeros((3, 2, 2))
    with pytest.raises(RuntimeError):
        tF.conv1d(torch.zeros(1, 2, 8), torch.zeros(3, 2, 2), stride=(2, 5))
    with pytest.raises(ad.InvalidArgumentError, match=r"conv1d.*stride"):
        F.conv1d(x, w, stride=(2, 5))


def test_conv_padding_same_and_1d():
    compare(lambda a, w: F.conv1d(a, w, padding="same", dilation=2),
            lambda a, w: tF.conv1d(a, w, padding="same", dilation=2), r(2, 2, 7), r(3, 2, 4))
    compare(lambda a, w, b: F.conv1d(a, w, b, stride=(2,), padding=(1,)),
            lambda a, w, b: tF.conv1d(a, w, b, stride=(2,), padding=(1,)), r(2, 2, 7),
            r(3, 2, 3), r(3))
    compare(lambda a, w: F.conv_transpose1d(a, w, stride=2, padding=1, output_padding=1),
            lambda a, w: tF.conv_transpose1d(a, w, stride=2, padding=1, output_padding=1),
            r(2, 2, 5), r(2, 3, 3))


def test_embedding_options():
    idx = np.array([[0, 2, 1], [2, 2, 3]])
    ti = torch.tensor(idx)
    compare(lambda w: F.embedding(idx, w, padding_idx=2),
            lambda w: tF.embedding(ti, w, padding_idx=2), r(4, 3))
    compare(lambda w: F.embedding(ad.tensor(idx), w, padding_idx=-1),
            lambda w: tF.embedding(ti, w, padding_idx=-1), r(4, 3))
    w0 = r(4, 3) * 2
    for p in (2.0, 1.0):
        ours, theirs = ad.Var(w0, dtype=ad.float64), torch.tensor(w0)
        y = F.embedding(idx, ours, max_norm=1.5, norm_type=p)
        ty = tF.embedding(ti, theirs, max_norm=1.5, norm_type=p)
        np.testing.assert_allclose(np.asarray(y), ty.numpy(), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(ours), theirs.numpy(), rtol=1e-12)  # in place


def test_dropout_signature():
    x = ad.ones((4, 5))
    assert F.dropout(x, 0.5, True, False, seed=3).tolist() == F.dropout(x, 0.5, seed=3).tolist()
    assert F.dropout(x, 0.5, False) is x


def _window_in_padding(size, kw):
    """Whether some max-pooling window has no element inside the input."""
    for i, n in enumerate(size):
        k, s, p, d = (kw[a][i] for a in ("kernel_size", "stride", "padding", "dilation"))
        t = torch.nn.functional.max_pool1d(torch.zeros(1, 1, n), k, s, p, d,
                                           kw["ceil_mode"]).shape[-1]
        for o in range(t):
            pos = o * s - p + d * np.arange(k)
            if not ((pos >= 0) & (pos < n)).any():
                return True
    return False


def test_pooling_random_configurations():
    """Random sizes, kernels, strides, paddings, dilations, ceil_mode and
    count_include_pad: where torch computes, values and gradients agree; where
    torch refuses, so do we (with an ad.Error)."""
    pr = np.random.default_rng(77)
    agreed = 0
    for _ in range(150):
        nd = int(pr.integers(1, 3))
        size = tuple(int(v) for v in pr.integers(1, 8, nd))
        kw = dict(kernel_size=tuple(int(v) for v in pr.integers(1, 5, nd)),
                  stride=tuple(int(v) for v in pr.integers(1, 4, nd)),
                  padding=tuple(int(v) for v in pr.integers(0, 3, nd)),
                  ceil_mode=bool(pr.integers(0, 2)))
        kind = ("max", "avg")[int(pr.integers(0, 2))]
        if kind == "max":
            kw["dilation"] = tuple(int(v) for v in pr.integers(1, 3, nd))
        else:
            kw["count_include_pad"] = bool(pr.integers(0, 2))
        name = f"{kind}_pool{nd}d"
        x = pr.standard_normal((2, 2) + size)
        try:
            getattr(tF, name)(torch.tensor(x), **kw)
        except RuntimeError:
            with pytest.raises(ad.Error, match=name):
                getattr(F, name)(ad.tensor(x, dtype=ad.float64), **kw)
            continue
        if kind == "max" and _window_in_padding(size, kw):
            # torch's backward writes out of bounds for a window that sees only padding
            # (heap corruption, torch 2.13): forward values only
            y = getattr(F, name)(ad.tensor(x, dtype=ad.float64), **kw)
            ty = getattr(tF, name)(torch.tensor(x), **kw)
            np.testing.assert_array_equal(np.asarray(y), ty.numpy())
            continue
        compare(lambda a: getattr(F, name)(a, **kw), lambda a: getattr(tF, name)(a, **kw), x)
        agreed += 1
    assert agreed > 40  # the draw covers computing configurations, not only refusals


def _wraps_twice(shape, pads):
    """Circular padding wider than the dim left after the negative amounts crop."""
    for i in range(len(pads) // 2):
        n = shape[len(shape) - 1 - i]
        lo, hi = pads[2 * i], pads[2 * i + 1]
        m = n - max(-lo, 0) - max(-hi, 0)
        if m <= 0 or lo > m or hi > m:
            return True
    return False


def test_pad_random_configurations():
    """Random shapes and amounts (negative included) in every mode: values and
    gradients agree with torch where it computes; where it refuses, so do we."""
    pr = np.random.default_rng(78)
    agreed = 0
    for _ in range(120):
        mode = ("reflect", "replicate", "circular", "constant")[int(pr.integers(0, 4))]
        k = int(pr.integers(1, 4))
        nd = k + int(pr.integers(1, 3))
        shape = tuple(int(v) for v in pr.integers(1, 5, nd))
        pads = tuple(int(v) for v in pr.integers(-2, 4, 2 * k))
        x = pr.standard_normal(shape)
        if mode != "constant" and any(shape[len(shape) - 1 - i] + pads[2 * i] + pads[2 * i + 1]
                                      <= 0 for i in range(k)):
            # an empty result: torch refuses it for one padded dim, returns it for two; we
            # refuse it always
            with pytest.raises(ad.InvalidArgumentError, match="pad: "):
                F.pad(ad.tensor(x, dtype=ad.float64), pads, mode=mode)
            continue
        if mode == "circular" and _wraps_twice(shape, pads):
            # torch 2.13 returns uninitialised memory for some of these; we refuse all
            with pytest.raises(ad.InvalidArgumentError, match="pad: circular padding"):
                F.pad(ad.tensor(x, dtype=ad.float64), pads, mode=mode)
            continue
        try:
            tF.pad(torch.tensor(x), pads, mode=mode)
        except (RuntimeError, NotImplementedError, ValueError):
            with pytest.raises(ad.Error, match="pad"):
                F.pad(ad.tensor(x, dtype=ad.float64), pads, mode=mode)
            continue
        compare(lambda a: F.pad(a, pads, mode=mode), lambda a: tF.pad(a, pads, mode=mode), x)
        agreed += 1
    assert agreed > 30


def test_cross_entropy_random_configurations():
    pr = np.random.default_rng(79)
    for _ in range(60):
        n, c = int(pr.integers(1, 5)), int(pr.integers(1, 5))
        extra = tuple(int(v) for v in pr.integers(1, 3, int(pr.integers(0, 2))))
        x = pr.standard_normal((n, c) + extra)
        red = ("mean", "sum", "none")[int(pr.integers(0, 3))]
        ls = (0.0, 0.3)[int(pr.integers(0, 2))]
        w = pr.uniform(0.5, 2, c) if pr.integers(0, 2) else None
        kw = dict(reduction=red, label_smoothing=ls)
        if pr.integers(0, 3) == 0:  # probabilities
            p = pr.dirichlet(np.ones(c), int(np.prod((n,) + extra)))
            p = np.moveaxis(p.reshape((n,) + extra + (c,)), -1, 1)
            compare(lambda a, b: F.cross_entropy(a, b, None if w is None else ad.tensor(w),
                                                 **kw),
                    lambda a, b: tF.cross_entropy(a, b, None if w is None else torch.tensor(w),
                                                  **kw), x, p)
            continue
        t = pr.integers(0, c, (n,) + extra)
        ignore = int(pr.integers(0, c)) if pr.integers(0, 2) else -100
        t[pr.uniform(size=t.shape) < 0.2] = ignore
        if (t == ignore).all() and red == "mean":
            continue  # 0/0 on both sides: NaN, checked in its own test
        compare(lambda a: F.cross_entropy(a, t, None if w is None else ad.tensor(w),
                                          ignore_index=ignore, **kw),
                lambda a: tF.cross_entropy(a, torch.tensor(t),
                                           None if w is None else torch.tensor(w),
                                           ignore_index=ignore, **kw), x)


@pytest.mark.parametrize("size", [1, 2, (3, None), (5, 7), (4, 9), (None, 1)])
def test_adaptive_avg_pool2d(size):
    compare(lambda a: F.adaptive_avg_pool2d(a, size), lambda a: tF.adaptive_avg_pool2d(a, size),
            r(2, 3, 8, 9))
    compare(lambda a: F.adaptive_avg_pool2d(a, size), lambda a: tF.adaptive_avg_pool2d(a, size),
            r(3, 7, 5))
