"""Optional differential test against PyTorch (float64) for the indexing,
joining and neural-network ops: forward values and input gradients.  Skipped
when torch is not installed (it is never a dependency)."""
import numpy as np
import pytest

import pyautodiff as ad

torch = pytest.importorskip("torch")
tF = torch.nn.functional
F = ad.nn
rng = np.random.default_rng(5)


def both(*arrays):
    """(pyautodiff Vars, torch leaf tensors) holding the same float64 values."""
    return ([ad.Var(a, dtype=ad.float64) for a in arrays],
            [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays])


def compare(f_ad, f_torch, *arrays, atol=1e-10):
    ours, theirs = both(*arrays)
    y, ty = f_ad(*ours), f_torch(*theirs)
    np.testing.assert_allclose(np.asarray(y), ty.detach().numpy(), atol=atol, rtol=1e-9)
    w = rng.uniform(0.5, 1.5, size=ty.shape)
    g = (y * ad.tensor(w, dtype=ad.float64)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    for v, t in zip(ours, theirs):
        expect = t.grad.numpy() if t.grad is not None else np.zeros(t.shape)
        got = np.asarray(g[v]) if v in g else np.zeros(v.shape)
        np.testing.assert_allclose(got, expect, atol=atol, rtol=1e-9)


def r(*shape):
    return rng.standard_normal(shape)


def test_joining():
    compare(lambda a, b: ad.cat([a, b, a], 1), lambda a, b: torch.cat([a, b, a], 1), r(2, 3),
            r(2, 2))
    compare(lambda a, b: ad.stack([a, b], -1), lambda a, b: torch.stack([a, b], -1), r(2, 3),
            r(2, 3))
    compare(lambda a: a.flip((0, 1)), lambda a: a.flip((0, 1)), r(3, 4))
    compare(lambda a: a.repeat(2, 1, 3), lambda a: a.repeat(2, 1, 3), r(2, 3))
    compare(lambda a: F.pad(a, (1, 2, -1, 0), value=0.5), lambda a: tF.pad(a, (1, 2, -1, 0),
                                                                          value=0.5), r(3, 4))
    compare(lambda a: a.chunk(3, 1)[2] * 2, lambda a: a.chunk(3, 1)[2] * 2, r(2, 7))


def test_indexing():
    idx = np.array([2, 0, 2, 2])
    ti = torch.tensor(idx)
    compare(lambda a: a.index_select(0, idx), lambda a: a.index_select(0, ti), r(3, 4))
    compare(lambda a: a[idx], lambda a: a[ti], r(3, 4))
    compare(lambda a: a[:, [1, 1, 0]], lambda a: a[:, [1, 1, 0]], r(3, 4))
    compare(lambda a: a[[0, 2], [3, 3]], lambda a: a[[0, 2], [3, 3]], r(3, 4))
    g = np.array([[0, 2, 2, 1], [2, 2, 0, 0]])
    tg = torch.tensor(g)
    compare(lambda a: a.gather(0, g), lambda a: a.gather(0, tg), r(3, 4))
    compare(lambda a, s: a.scatter_add(0, g, s), lambda a, s: a.scatter_add(0, tg, s), r(3, 4),
            r(2, 4))
    compare(lambda w: F.embedding(idx, w), lambda w: tF.embedding(ti, w), r(3, 5))


def test_losses_and_norm():
    t = np.array([1, 0, 3])
    tt = torch.tensor(t)
    for red in ("mean", "sum", "none"):
        compare(lambda a: F.cross_entropy(a, t, reduction=red),
                lambda a: tF.cross_entropy(a, tt, reduction=red), r(3, 4))
        compare(lambda a: F.nll_loss(a, t, reduction=red),
                lambda a: tF.nll_loss(a, tt, reduction=red), r(3, 4))
        compare(lambda a, b: F.mse_loss(a, b, reduction=red),
                lambda a, b: tF.mse_loss(a, b, reduction=red), r(3, 4), r(3, 4))
    compare(lambda a, w, b: F.layer_norm(a, (4,), w, b),
            lambda a, w, b: tF.layer_norm(a, (4,), w, b), r(3, 4), r(4), r(4))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=2, groups=2)])
def test_conv(kw):
    compare(lambda x, w, b: F.conv2d(x, w, b, **kw), lambda x, w, b: tF.conv2d(x, w, b, **kw),
            r(2, 4, 6, 5), r(4, 2 if kw.get("groups") else 4, 3, 2), r(4), atol=1e-9)
    compare(lambda x, w: F.conv1d(x, w, **kw), lambda x, w: tF.conv1d(x, w, **kw),
            r(2, 4, 9), r(2, 2 if kw.get("groups") else 4, 3), atol=1e-9)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1),
                                dict(groups=2, dilation=2)])
def test_conv_transpose(kw):
    compare(lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
            lambda x, w, b: tF.conv_transpose2d(x, w, b, **kw), r(2, 4, 3, 4), r(4, 3, 2, 3),
            r(3 * kw.get("groups", 1)), atol=1e-9)


@pytest.mark.parametrize("k,s,p", [(2, None, 0), (3, 1, 1), ((3, 2), (2, 1), (1, 0))])
def test_pools(k, s, p):
    x = rng.permutation(2 * 2 * 6 * 5).reshape(2, 2, 6, 5) / 7.0
    compare(lambda a: F.max_pool2d(a, k, s, p), lambda a: tF.max_pool2d(a, k, s, p), x)
    for cip in (True, False):
        compare(lambda a: F.avg_pool2d(a, k, s, p, count_include_pad=cip),
                lambda a: tF.avg_pool2d(a, k, s, p, count_include_pad=cip), x)


def test_more_shapes():
    t3 = rng.integers(0, 3, (2, 4))
    compare(lambda a: F.cross_entropy(a, t3), lambda a: tF.cross_entropy(a, torch.tensor(t3)),
            r(2, 3, 4))
    compare(lambda a: F.cross_entropy(a * 100, t3[0], reduction="sum"),
            lambda a: tF.cross_entropy(a * 100, torch.tensor(t3[0]), reduction="sum"), r(4, 3),
            atol=1e-8)
    compare(lambda a, w: F.layer_norm(a, (2, 3), w, eps=1e-3),
            lambda a, w: tF.layer_norm(a, (2, 3), w, eps=1e-3), r(2, 2, 3), r(2, 3))
    mask = np.array([[True, False, True, True], [False, False, True, False]])
    compare(lambda a: a[mask], lambda a: a[torch.tensor(mask)], r(2, 4))
    compare(lambda a: a[1, [0, 2]], lambda a: a[1, [0, 2]], r(3, 4))
    compare(lambda a: a.split([1, 3], 1)[1], lambda a: a.split([1, 3], 1)[1], r(2, 4))
    g = np.array([[1, 1, 1], [0, 0, 2]])
    compare(lambda a, s: a.scatter_add(1, g, s), lambda a, s: a.scatter_add(1, torch.tensor(g),
                                                                              s), r(2, 4), r(2, 3))


def test_conv_pool_extras():
    # non-contiguous operands
    compare(lambda x, w: F.conv2d(x.transpose(2, 3), w, stride=(2, 1), padding=(0, 1)),
            lambda x, w: tF.conv2d(x.transpose(2, 3), w, stride=(2, 1), padding=(0, 1)),
            r(1, 2, 5, 6), r(3, 2, 2, 3), atol=1e-9)
    compare(lambda x, w: F.conv_transpose2d(x, w, stride=3, padding=1, output_padding=2),
            lambda x, w: tF.conv_transpose2d(x, w, stride=3, padding=1, output_padding=2),
            r(1, 2, 3, 2), r(2, 3, 3, 2), atol=1e-9)
    x = rng.permutation(2 * 7 * 7).reshape(1, 2, 7, 7) / 3.0
    compare(lambda a: F.max_pool2d(a, 3, 2, 1, dilation=2),
            lambda a: tF.max_pool2d(a, 3, 2, 1, dilation=2), x)
    compare(lambda a: F.avg_pool2d(a, 3, 2, 1, divisor_override=4),
            lambda a: tF.avg_pool2d(a, 3, 2, 1, divisor_override=4), x)
    compare(lambda a: F.max_pool1d(a, 3, 1, 1), lambda a: tF.max_pool1d(a, 3, 1, 1), x[0])
    compare(lambda a: F.avg_pool1d(a, 2), lambda a: tF.avg_pool1d(a, 2), x[0])
    compare(lambda x_, w: F.conv_transpose1d(x_, w, stride=2),
            lambda x_, w: tF.conv_transpose1d(x_, w, stride=2), r(1, 2, 4), r(2, 3, 3), atol=1e-9)
