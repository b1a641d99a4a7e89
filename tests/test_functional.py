"""ad.nn.functional: forward values against numpy
references, float64 central-difference gradient checks of every new
function and option, and the error paths (ad.Error subclasses naming the
function, the argument, the shapes and the dtypes)."""
import math

import numpy as np
import pytest

import pyautodiff as ad
import pyautodiff.nn.functional as F
from gradcheck import check_grad, layouts

rng = np.random.default_rng(2012)
LAYOUT_IDS = ["contiguous", "transposed", "sliced", "broadcast"]


def rand(*shape):
    return rng.standard_normal(shape)


def t64(a):
    return ad.tensor(np.asarray(a, dtype=np.float64), dtype=ad.float64)


def lay(mk):
    return lambda i, t: mk(t) if i == 0 else t


def distinct(*shape):
    """Values far apart (no ties), for max-pool gradient checks."""
    return rng.permutation(int(np.prod(shape))).reshape(shape) / 7.0


# ---- the home of every function ----------------------------------------------------------
def test_nn_names_are_aliases_of_functional():
    assert ad.nn.functional is F
    for name in ("conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "cross_entropy",
                 "nll_loss", "mse_loss", "pad", "max_pool1d", "max_pool2d", "avg_pool1d",
                 "avg_pool2d", "layer_norm", "dropout", "embedding", "linear"):
        assert getattr(ad.nn, name) is getattr(F, name), name


# ---- activations -------------------------------------------------------------------------
def np_gelu_erf(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def np_gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


ACTS = {
    "relu": (lambda a: F.relu(a), lambda x: np.maximum(x, 0)),
    "gelu": (lambda a: F.gelu(a), np_gelu_erf),
    "gelu_tanh": (lambda a: F.gelu(a, approximate="tanh"), np_gelu_tanh),
    "silu": (lambda a: F.silu(a), lambda x: x / (1 + np.exp(-x))),
    "tanh": (lambda a: F.tanh(a), np.tanh),
    "sigmoid": (lambda a: F.sigmoid(a), lambda x: 1 / (1 + np.exp(-x))),
    "softmax": (lambda a: F.softmax(a, 1),
                lambda x: np.exp(x) / np.exp(x).sum(1, keepdims=True)),
    "log_softmax": (lambda a: F.log_softmax(a, dim=0),
                    lambda x: x - np.log(np.exp(x).sum(0, keepdims=True))),
}


@pytest.mark.parametrize("name", sorted(ACTS))
@pytest.mark.parametrize("lname,base,mk", layouts((3, 4)), ids=LAYOUT_IDS)
def test_activations(name, lname, base, mk):
    f, ref = ACTS[name]
    x = mk(t64(base * 2))
    np.testing.assert_allclose(np.asarray(f(x)), ref(np.asarray(x)), rtol=1e-12, atol=1e-14)
    b = base * 2
    if name == "relu":
        b = np.where(np.abs(b) < 1e-3, 0.5, b)  # away from the kink
    check_grad(f, [b], make=lay(mk))


def test_activation_options():
    x = t64(rand(2, 3))
    assert F.relu(x, inplace=True).tolist() == F.relu(x).tolist()
    np.testing.assert_allclose(np.asarray(F.softmax(x, 1, dtype=ad.float32)),
                               np.asarray(F.softmax(x, 1)), rtol=1e-6)
    assert F.softmax(x, 1, dtype=ad.float32).dtype == ad.float32
    with pytest.warns(UserWarning, match="softmax"):
        y = F.softmax(x)  # PyTorch's implicit choice: dim 1 of a 2-d input
    np.testing.assert_allclose(np.asarray(y), np.asarray(F.softmax(x, 1)))
    with pytest.raises(ad.InvalidArgumentError, match=r"gelu.*approximate.*'fast'"):
        F.gelu(x, approximate="fast")
    with pytest.raises(ad.InvalidArgumentError, match=r"relu: input must be a Tensor.*list"):
        F.relu([1.0, 2.0])
    with pytest.raises(ad.InvalidArgumentError, match=r"softmax: dim must be an int"):
        F.softmax(x, 1.5)


# ---- one_hot -----------------------------------------------------------------------------
def test_one_hot():
    t = np.array([[0, 3, 1], [2, 2, 0]])
    y = F.one_hot(ad.tensor(t))
    assert y.dtype == ad.int64 and y.shape == (2, 3, 4)
    np.testing.assert_array_equal(np.asarray(y), np.eye(4, dtype=np.int64)[t])
    np.testing.assert_array_equal(np.asarray(F.one_hot(ad.tensor(t, dtype=ad.int32), 6)),
                                  np.eye(6, dtype=np.int64)[t])
    assert F.one_hot(ad.tensor([], dtype=ad.int64), 3).shape == (0, 3)
    assert F.one_hot(ad.tensor(2), 3).tolist() == [0, 0, 1]
    assert F.one_hot([1, 0]).tolist() == [[0, 1], [1, 0]]


def test_one_hot_errors():
    with pytest.raises(ad.OutOfRangeError, match=r"one_hot: class value 3 .*num_classes=3"):
        F.one_hot(ad.tensor([0, 3]), 3)
    with pytest.raises(ad.OutOfRangeError, match="one_hot.*non-negative.*-1"):
        F.one_hot(ad.tensor([0, -1]))
    with pytest.raises(ad.DTypeError, match=r"one_hot.*float32 \(2,\)"):
        F.one_hot(ad.tensor([0.0, 1.0]))
    with pytest.raises(ad.InvalidArgumentError, match="one_hot.*empty"):
        F.one_hot(ad.tensor([], dtype=ad.int64))
    with pytest.raises(ad.InvalidArgumentError, match="one_hot: num_classes"):
        F.one_hot(ad.tensor([0]), -2)


# ---- pad -----------------------------------------------------------------------------------
NP_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@pytest.mark.parametrize("mode", sorted(NP_MODE))
@pytest.mark.parametrize("shape,pads", [((2, 5), (2, 3)), ((2, 3, 4), (3, 0)),
                                        ((3, 4, 5), (1, 2, 3, 0)),
                                        ((1, 2, 4, 5), (2, 1, 0, 3)),
                                        ((2, 3, 3, 4), (1, 1, 2, 2, 0, 1))])
def test_pad_modes_forward(mode, shape, pads):
    x = rand(*shape)
    width = [(0, 0)] * x.ndim
    for i in range(len(pads) // 2):
        width[x.ndim - 1 - i] = (pads[2 * i], pads[2 * i + 1])
    ref = np.pad(x, width, mode=NP_MODE[mode])
    np.testing.assert_array_equal(np.asarray(F.pad(t64(x), pads, mode=mode)), ref)


@pytest.mark.parametrize("mode", sorted(NP_MODE))
@pytest.mark.parametrize("lname,base,mk", layouts((2, 3, 4)), ids=LAYOUT_IDS)
def test_pad_modes_grad(mode, lname, base, mk):
    check_grad(lambda a: F.pad(a, (2, 3, 1, 2), mode=mode), [base], make=lay(mk))
    check_grad(lambda a: F.pad(a, (-1, 2), mode=mode), [base], make=lay(mk))


def test_pad_errors():
    x = ad.zeros((2, 3, 4))
    with pytest.raises(ad.InvalidArgumentError, match=r"pad: reflect padding \(4, 0\).*dim 2"):
        F.pad(x, (4, 0), mode="reflect")
    with pytest.raises(ad.InvalidArgumentError, match=r"pad: mode 'replicate'.*2 pad values.*"
                                                      r"float32 \(4,\)"):
        F.pad(ad.zeros(4), (1, 1), mode="replicate")
    with pytest.raises(ad.InvalidArgumentError, match="pad: mode 'reflect'.*8 pad values"):
        F.pad(x, (1,) * 8, mode="reflect")
    with pytest.raises(ad.InvalidArgumentError, match="pad: circular padding"):
        F.pad(x, (5, 0), mode="circular")
    with pytest.raises(ad.InvalidArgumentError, match="pad: mode must be one of"):
        F.pad(x, (1, 1), mode="symmetric")
    with pytest.raises(ad.InvalidArgumentError, match="pad: mode 'reflect' takes no value"):
        F.pad(x, (1, 1), mode="reflect", value=2.0)
    with pytest.raises(ad.InvalidArgumentError, match="pad: pad must have an even length"):
        F.pad(x, (1, 1, 1), mode="reflect")
    with pytest.raises(ad.InvalidArgumentError, match="pad: pad must be an int"):
        F.pad(x, (1.5, 1))
    with pytest.raises(ad.InvalidArgumentError, match="pad: pad .* 64 bits"):
        F.pad(x, (2 ** 63, 0))
    with pytest.raises(ad.InvalidArgumentError, match="pad.*leaves no elements"):
        F.pad(x, (-2, -2), mode="replicate")
    # a dim too long for its source positions: the library's error naming pad,
    # not numpy's bare MemoryError (2^53 bytes: past any address space, so no
    # overcommit setting lets the allocation through)
    huge = ad.zeros((1, 1), dtype=ad.float64).expand(2, 2 ** 50)
    for mode in ("reflect", "replicate", "circular"):
        with pytest.raises(ad.OutOfMemoryError, match=rf"pad: out of memory .* dim 1 of input "
                                                      rf"float64 \(2, {2 ** 50}\)"):
            F.pad(huge, (1, 1), mode=mode)


# ---- cross_entropy / nll_loss with options ----------------------------------------------------
def np_ce(x, t, w=None, ignore=-100, red="mean", ls=0.0, logits=True):
    """PyTorch's class-index cross entropy, written out for (N, C)."""
    logp = x - np.log(np.exp(x).sum(1, keepdims=True)) if logits else x
    n, c = x.shape
    w = np.ones(c) if w is None else w
    valid = t != ignore
    ts = np.where(valid, t, 0)
    wi = w[ts] * valid
    nll = -logp[np.arange(n), ts] * wi
    smooth = -(logp * w).sum(1) * valid
    if red == "none":
        return (1 - ls) * nll + ls / c * smooth
    if red == "sum":
        return (1 - ls) * nll.sum() + ls / c * smooth.sum()
    return ((1 - ls) * nll.sum() + ls / c * smooth.sum()) / wi.sum()


CE_OPTS = [dict(), dict(weight=True), dict(ignore=True), dict(ls=0.2),
           dict(weight=True, ignore=True, ls=0.3)]


@pytest.mark.parametrize("opts", CE_OPTS, ids=lambda o: "-".join(o) or "plain")
@pytest.mark.parametrize("red", ["mean", "sum", "none"])
def test_cross_entropy_options(opts, red):
    x = rand(5, 4)
    t = np.array([1, 0, 3, 2, 1])
    if opts.get("ignore"):
        t[2] = -100
    w = np.array([0.5, 2.0, 1.0, 1.5]) if opts.get("weight") else None
    ls = opts.get("ls", 0.0)
    kw = dict(reduction=red, label_smoothing=ls, weight=None if w is None else t64(w))
    y = F.cross_entropy(t64(x), t, **kw)
    np.testing.assert_allclose(np.asarray(y), np_ce(x, t, w, red=red, ls=ls), rtol=1e-12)
    check_grad(lambda a: F.cross_entropy(a, t, **kw), [x])
    if w is not None:  # the weights are differentiable too
        check_grad(lambda a, b: F.cross_entropy(a, t, b, reduction=red, label_smoothing=ls),
                   [x, w])


@pytest.mark.parametrize("red", ["mean", "sum", "none"])
def test_nll_loss_options(red):
    x = np.log(rng.dirichlet(np.ones(4), 5))
    t = np.array([1, 0, 3, 2, 1])
    w = np.array([0.5, 2.0, 1.0, 1.5])
    for ignore in (-100, 1):
        y = F.nll_loss(t64(x), t, t64(w), ignore_index=ignore, reduction=red)
        np.testing.assert_allclose(np.asarray(y), np_ce(x, t, w, ignore, red, logits=False),
                                   rtol=1e-12)
        check_grad(lambda a: F.nll_loss(a, t, t64(w), ignore_index=ignore, reduction=red), [x])


def test_cross_entropy_ignore_index_dims_and_layouts():
    x = rand(2, 3, 4)
    t = rng.integers(0, 3, (2, 4))
    t[1, 2] = -100
    ref = np_ce(x.transpose(0, 2, 1).reshape(-1, 3), t.reshape(-1), red="none").reshape(2, 4)
    y = F.cross_entropy(t64(x), t, reduction="none")
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-12)
    assert y.tolist()[1][2] == 0.0
    check_grad(lambda a: F.cross_entropy(a, t, label_smoothing=0.1), [x])
    for lname, base, mk in layouts((4, 3)):
        tt = np.array([2, -100, 0, 1])
        check_grad(lambda a: F.cross_entropy(a, tt, weight=t64([1.0, 2.0, 3.0]),
                                             label_smoothing=0.2), [base], make=lay(mk))
    # everything ignored: the weighted mean is 0/0, as PyTorch, and the
    # gradients are torch's zeros (0/0's NaN would spoil the whole step), with
    # a weight, label smoothing or positions too
    assert np.isnan(F.cross_entropy(t64(rand(2, 3)), [-100, -100]).item())
    for kw, shape, tgt in (({}, (2, 3), [-100, -100]),
                           (dict(weight=t64([1.0, 2.0, 3.0]), label_smoothing=0.1), (2, 3),
                            [-100, -100]),
                           ({}, (2, 3, 2), [[-100, -100], [-100, -100]])):
        for f in (F.cross_entropy, F.nll_loss)[:1 if "label_smoothing" in kw else 2]:
            v = ad.Var(rand(*shape))
            loss = f(v, tgt, **kw)
            assert np.isnan(loss.item())
            assert np.asarray(loss.backward()[v]).tolist() == np.zeros(shape).tolist()
    assert F.cross_entropy(t64(rand(2, 3)), [-100, -100], reduction="sum").item() == 0.0


def np_ce_prob(x, p, w=None, red="mean", ls=0.0, cdim=1):
    c = x.shape[cdim]
    logp = x - np.log(np.exp(x).sum(cdim, keepdims=True))
    p = p * (1 - ls) + ls / c
    if w is not None:
        shape = [1] * x.ndim
        shape[cdim] = c
        p = p * w.reshape(shape)
    per = -(logp * p).sum(cdim)
    return per if red == "none" else per.sum() if red == "sum" else per.sum() / (x.size // c)


@pytest.mark.parametrize("red", ["mean", "sum", "none"])
def test_cross_entropy_probability_targets(red):
    w = np.array([0.5, 2.0, 1.0])
    for shape in ((4, 3), (2, 3, 2)):
        x = rand(*shape)
        p = rng.dirichlet(np.ones(3), int(np.prod(shape)) // 3).reshape(
            (shape[0],) + shape[2:] + (3,))
        p = np.moveaxis(p, -1, 1)
        for ls in (0.0, 0.2):
            y = F.cross_entropy(t64(x), t64(p), t64(w), reduction=red, label_smoothing=ls)
            np.testing.assert_allclose(np.asarray(y), np_ce_prob(x, p, w, red, ls), rtol=1e-12)
            # gradients of both the logits and the target probabilities
            check_grad(lambda a, b: F.cross_entropy(a, b, reduction=red, label_smoothing=ls),
                       [x, p])
    # numpy float targets of the input's shape are probabilities as well
    x, p = rand(2, 3), rng.dirichlet(np.ones(3), 2)
    np.testing.assert_allclose(F.cross_entropy(t64(x), p).item(), np_ce_prob(x, p), rtol=1e-12)
    # (C,) input with a (C,) probability target
    np.testing.assert_allclose(F.cross_entropy(t64(x[0]), t64(p[0])).item(),
                               np_ce_prob(x[:1], p[:1]), rtol=1e-12)


def test_class_loss_errors():
    x = ad.zeros((2, 3))
    with pytest.raises(ad.OutOfRangeError, match=r"cross_entropy: target 5 .*3 classes.*\(2, 3\)"):
        F.cross_entropy(x, [5, -100])
    with pytest.raises(ad.OutOfRangeError, match=r"nll_loss: target -1"):
        F.nll_loss(x, [0, -1], weight=ad.ones(3))
    with pytest.raises(ad.ShapeError, match=r"cross_entropy: weight must have shape \(3,\).*"
                                            r"float32 \(2,\)"):
        F.cross_entropy(x, [0, 1], weight=ad.ones(2))
    with pytest.raises(ad.DTypeError, match="cross_entropy: weight float64"):
        F.cross_entropy(x, [0, 1], weight=ad.ones(3, dtype=ad.float64))
    with pytest.raises(ad.InvalidArgumentError, match="cross_entropy: label_smoothing"):
        F.cross_entropy(x, [0, 1], label_smoothing=1.5)
    with pytest.raises(ad.InvalidArgumentError, match="cross_entropy: ignore_index=0 .*probab"):
        F.cross_entropy(x, ad.zeros((2, 3)), ignore_index=0)
    with pytest.raises(ad.DTypeError, match=r"cross_entropy: target float32 \(3,\)"):
        F.cross_entropy(x, ad.zeros(3))
    with pytest.raises(ad.DTypeError, match=r"nll_loss: target float32 \(2, 3\)"):
        F.nll_loss(x, ad.zeros((2, 3)))  # no probability targets for nll_loss
    with pytest.raises(ad.ShapeError, match=r"cross_entropy: target int64 \(3,\) .*\(2,\)"):
        F.cross_entropy(x, [0, 1, 2], weight=ad.ones(3))
    with pytest.raises(ad.InvalidArgumentError, match="cross_entropy: ignore_index must be"):
        F.cross_entropy(x, [0, 1], ignore_index=0.5)
    with pytest.raises(ad.InvalidArgumentError, match="reduction"):
        F.cross_entropy(x, [0, 1], reduction="avg")


# ---- binary_cross_entropy_with_logits / smooth_l1_loss ------------------------------------------
def np_bce_logits(x, t, w=None, pw=None):
    s = 1 / (1 + np.exp(-x))
    pw = 1.0 if pw is None else pw
    loss = -(pw * t * np.log(s) + (1 - t) * np.log(1 - s))
    return loss * (1.0 if w is None else w)


@pytest.mark.parametrize("red", ["mean", "sum", "none"])
def test_binary_cross_entropy_with_logits(red):
    x, t = rand(3, 4) * 2, rng.uniform(0, 1, (3, 4))
    w, pw = rng.uniform(0.5, 2, (3, 4)), rng.uniform(0.5, 3, 4)
    agg = {"none": lambda a: a, "sum": np.sum, "mean": np.mean}[red]
    y = F.binary_cross_entropy_with_logits(t64(x), t64(t), t64(w), reduction=red,
                                           pos_weight=t64(pw))
    np.testing.assert_allclose(np.asarray(y), agg(np_bce_logits(x, t, w, pw)), rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(F.binary_cross_entropy_with_logits(t64(x), t, reduction=red)),
        agg(np_bce_logits(x, t)), rtol=1e-12)
    check_grad(lambda a, b, c, d: F.binary_cross_entropy_with_logits(a, b, c, reduction=red,
                                                                     pos_weight=d),
               [x, t, w, pw])
    for lname, base, mk in layouts((3, 4)):
        check_grad(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction=red),
                   [base, t], make=lay(mk))


def test_binary_cross_entropy_with_logits_is_stable():
    x = t64([1000.0, -1000.0, 0.0])
    y = F.binary_cross_entropy_with_logits(x, t64([1.0, 0.0, 1.0]), reduction="none")
    np.testing.assert_allclose(np.asarray(y), [0.0, 0.0, math.log(2)], atol=1e-15)
    y = F.binary_cross_entropy_with_logits(x, t64([0.0, 1.0, 0.0]), reduction="none")
    np.testing.assert_allclose(np.asarray(y), [1000.0, 1000.0, math.log(2)], rtol=1e-15)
    v = ad.Var([1000.0, -1000.0], dtype=ad.float64)
    g = F.binary_cross_entropy_with_logits(v, t64([0.0, 1.0]), reduction="sum").backward()[v]
    np.testing.assert_allclose(np.asarray(g), [1.0, -1.0])


@pytest.mark.parametrize("beta", [1.0, 0.3, 0.0])
@pytest.mark.parametrize("red", ["mean", "sum", "none"])
def test_smooth_l1_loss(red, beta):
    x, t = rand(4, 5), rand(4, 5)
    d = x - t
    d = np.where(np.abs(np.abs(d) - beta) < 1e-3, d + 0.01, d)  # away from the seam
    x = t + d
    ad_ = np.abs(d)
    ref = np.where(ad_ < beta, 0.5 * d * d / max(beta, 1e-300), ad_ - 0.5 * beta)
    agg = {"none": lambda a: a, "sum": np.sum, "mean": np.mean}[red]
    y = F.smooth_l1_loss(t64(x), t64(t), reduction=red, beta=beta)
    np.testing.assert_allclose(np.asarray(y), agg(ref), rtol=1e-12)
    check_grad(lambda a, b: F.smooth_l1_loss(a, b, reduction=red, beta=beta), [x, t])
    # an infinite difference: the loss is inf and its gradient +-1 (torch's),
    # not the square branch's unselected 0 * inf
    v = ad.Var(np.array([np.inf, -np.inf, 0.2 * beta, 3.0]))
    g = F.smooth_l1_loss(v, ad.zeros(4, dtype="float64"), reduction="sum", beta=beta)
    assert g.item() == np.inf
    want = [1.0, -1.0, 0.2 if beta else 0.0, 1.0]
    np.testing.assert_allclose(g.backward()[v].numpy(), want, rtol=1e-12)


def test_pointwise_loss_errors():
    x = ad.zeros((2, 3))
    fn = "binary_cross_entropy_with_logits"
    with pytest.raises(ad.ShapeError, match=fn + r": target float32 \(3,\).*\(2, 3\)"):
        F.binary_cross_entropy_with_logits(x, ad.zeros(3))
    with pytest.raises(ad.DTypeError, match=fn + ": target float64"):
        F.binary_cross_entropy_with_logits(x, ad.zeros((2, 3), dtype=ad.float64))
    with pytest.raises(ad.DTypeError, match=fn + r": input must be float.*int64"):
        F.binary_cross_entropy_with_logits(ad.zeros((2, 3), dtype=ad.int64), x)
    with pytest.raises(ad.ShapeError, match=fn + ": weight/pos_weight must broadcast"):
        F.binary_cross_entropy_with_logits(x, x, weight=ad.ones((4, 2, 3)))
    with pytest.raises(ad.InvalidArgumentError, match="smooth_l1_loss: beta must be >= 0"):
        F.smooth_l1_loss(x, x, beta=-1.0)
    with pytest.raises(ad.ShapeError, match=r"smooth_l1_loss: target float32 \(1, 3\)"):
        F.smooth_l1_loss(x, ad.zeros((1, 3)))
    with pytest.warns(UserWarning, match="size_average"):
        y = F.smooth_l1_loss(t64([1.0, 3.0]), t64([0.0, 0.0]), reduce=False)
    assert y.tolist() == [0.5, 2.5]


# ---- batch_norm ------------------------------------------------------------------------------
def np_bn_train(x, w=None, b=None, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mu, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if w is not None:
        y = y * w.reshape(shape)
    if b is not None:
        y = y + b.reshape(shape)
    return y


@pytest.mark.parametrize("shape", [(5, 3), (3, 2, 4), (2, 3, 2, 3)])
def test_batch_norm_training(shape):
    x = rand(*shape) * 3 + 2
    c = shape[1]
    w, b = rand(c), rand(c)
    rm, rv = ad.Var(np.zeros(c)), ad.Var(np.ones(c))
    v0 = rm.version
    y = F.batch_norm(t64(x), rm, rv, t64(w), t64(b), training=True, momentum=0.25)
    np.testing.assert_allclose(np.asarray(y), np_bn_train(x, w, b), rtol=1e-10, atol=1e-12)
    axes = (0,) + tuple(range(2, x.ndim))
    np.testing.assert_allclose(np.asarray(rm), 0.25 * x.mean(axes), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(rv), 0.75 + 0.25 * x.var(axes, ddof=1), rtol=1e-12)
    assert rm.version > v0  # updated in place
    check_grad(lambda a, g, h: F.batch_norm(a, None, None, g, h, training=True), [x, w, b])
    # the running statistics are buffers: nothing flows into them
    xv = ad.Var(x)
    grads = F.batch_norm(xv, rm, rv, training=True).sum().backward()
    assert rm not in grads and rv not in grads


@pytest.mark.parametrize("lname,base,mk", layouts((4, 3)), ids=LAYOUT_IDS)
def test_batch_norm_layouts(lname, base, mk):
    x = mk(t64(base))
    np.testing.assert_allclose(np.asarray(F.batch_norm(x, None, None, training=True)),
                               np_bn_train(np.asarray(x)), rtol=1e-10, atol=1e-12)
    if lname != "broadcast":  # a broadcast batch has zero variance: 1/sqrt(eps) scale
        check_grad(lambda a: F.batch_norm(a, None, None, training=True), [base],
                   make=lay(mk))


def test_batch_norm_eval():
    x = rand(4, 3, 2)
    rm, rv, w, b = rand(3), rng.uniform(0.5, 2, 3), rand(3), rand(3)
    shape = (1, 3, 1)
    ref = (x - rm.reshape(shape)) / np.sqrt(rv.reshape(shape) + 1e-5) * w.reshape(
        shape) + b.reshape(shape)
    for stats in ((t64(rm), t64(rv)), (ad.Var(rm), ad.Var(rv))):
        y = F.batch_norm(t64(x), *stats, t64(w), t64(b))
        np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-12, atol=1e-14)
    rmv = ad.Var(rm)
    grads = F.batch_norm(ad.Var(x), rmv, t64(rv)).sum().backward()
    assert rmv not in grads and rmv.tolist() == rm.tolist()  # eval: no update, no gradient
    check_grad(lambda a, g, h: F.batch_norm(a, t64(rm), t64(rv), g, h, eps=0.1), [x, w, b])


def test_batch_norm_errors():
    x = ad.zeros((4, 3))
    with pytest.raises(ad.InvalidArgumentError, match="batch_norm: training=True updates "
                                                      "running_mean in place.*Var"):
        F.batch_norm(x, ad.zeros(3), ad.ones(3), training=True)
    with pytest.raises(ad.InvalidArgumentError, match="batch_norm: running_mean and "
                                                      "running_var are required"):
        F.batch_norm(x, None, None)
    with pytest.raises(ad.InvalidArgumentError, match=r"batch_norm: .*more than 1 value per "
                                                      r"channel.*\(1, 3\)"):
        F.batch_norm(ad.zeros((1, 3)), None, None, training=True)
    with pytest.raises(ad.ShapeError, match=r"batch_norm: running_var must have shape \(3,\)"):
        F.batch_norm(x, ad.zeros(3), ad.ones(4))
    with pytest.raises(ad.ShapeError, match=r"batch_norm: input must be \(N, C, ...\)"):
        F.batch_norm(ad.zeros(3), ad.zeros(3), ad.ones(3))
    with pytest.raises(ad.DTypeError, match="batch_norm: weight float64"):
        F.batch_norm(x, ad.zeros(3), ad.ones(3), ad.ones(3, dtype=ad.float64))
    with pytest.raises(ad.DTypeError, match="batch_norm: input must be float"):
        F.batch_norm(ad.zeros((4, 3), dtype=ad.int64), None, None, training=True)


# ---- scaled_dot_product_attention ---------------------------------------------------------------
def np_sdpa(q, k, v, bias=None, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if bias is not None:
        s = s + bias
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m)
    den = e.sum(-1, keepdims=True)
    p = np.where(den > 0, e / np.where(den > 0, den, 1), 0)
    return p @ v


def sdpa_case(case):
    q, k, v = rand(2, 3, 2), rand(2, 4, 2), rand(2, 4, 3)
    kw, bias = {}, None
    if case == "causal":
        kw = dict(is_causal=True)
        bias = np.where(np.tri(3, 4, dtype=bool), 0.0, -np.inf)
    elif case == "bool":
        m = np.array([[True, False, True, True], [False, True, False, True],
                      [True, True, True, False]])
        kw, bias = dict(attn_mask=m), np.where(m, 0.0, -np.inf)
    elif case == "dead_row":
        m = np.ones((2, 3, 4), bool)
        m[1, 2] = False
        kw, bias = dict(attn_mask=ad.tensor(m, dtype=ad.bool)), np.where(m, 0.0, -np.inf)
    elif case == "scale":
        kw = dict(scale=0.7)
    return q, k, v, kw, bias


@pytest.mark.parametrize("case", ["plain", "causal", "bool", "dead_row", "scale"])
def test_sdpa(case):
    q, k, v, kw, bias = sdpa_case(case)
    y = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), **kw)
    ref = np_sdpa(q, k, v, bias, kw.get("scale"))
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-12, atol=1e-14)
    if case == "dead_row":
        assert np.asarray(y)[1, 2].tolist() == [0.0, 0.0, 0.0]
    check_grad(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, **kw), [q, k, v])


def test_sdpa_float_mask_and_layouts():
    q, k, v = rand(2, 3, 2), rand(2, 4, 2), rand(2, 4, 3)
    m = rand(3, 4)
    m[1, 1] = -np.inf
    y = F.scaled_dot_product_attention(t64(q), t64(k), t64(v), t64(m))
    np.testing.assert_allclose(np.asarray(y), np_sdpa(q, k, v, m), rtol=1e-12)
    mf = np.where(np.isfinite(m), m, -5.0)  # finite for the difference quotients
    check_grad(lambda a, b, c, d: F.scaled_dot_product_attention(a, b, c, d), [q, k, v, mf])
    for lname, base, mk in layouts((2, 3, 2)):
        check_grad(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True),
                   [base, rand(2, 4, 2), v], make=lay(mk))


def test_sdpa_dropout_and_gqa():
    q, k, v = t64(rand(1, 4, 3, 2)), t64(rand(1, 2, 5, 2)), t64(rand(1, 2, 5, 3))
    y = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    rep = [0, 0, 1, 1]
    np.testing.assert_allclose(np.asarray(y), np_sdpa(np.asarray(q), np.asarray(k)[:, rep],
                                                      np.asarray(v)[:, rep]), rtol=1e-12)
    q1, k1, v1 = q[:, :2], k, v
    yd = F.scaled_dot_product_attention(q1, k1, v1, dropout_p=0.5)
    assert yd.shape == (1, 2, 3, 3) and np.isfinite(np.asarray(yd)).all()
    assert F.scaled_dot_product_attention(q1, k1, v1, dropout_p=0.0).tolist() == \
        F.scaled_dot_product_attention(q1, k1, v1).tolist()


def test_sdpa_errors():
    fn = "scaled_dot_product_attention"
    q, k, v = ad.zeros((2, 3, 4)), ad.zeros((2, 5, 4)), ad.zeros((2, 5, 6))
    with pytest.raises(ad.InvalidArgumentError, match=fn + ": pass either attn_mask or "
                                                           "is_causal"):
        F.scaled_dot_product_attention(q, k, v, np.ones((3, 5), bool), is_causal=True)
    with pytest.raises(ad.ShapeError, match=fn + r".*\(2, 3, 4\).*\(2, 5, 3\)"):
        F.scaled_dot_product_attention(q, ad.zeros((2, 5, 3)), v)
    with pytest.raises(ad.ShapeError, match=fn + r": attn_mask bool \(4, 5\)"):
        F.scaled_dot_product_attention(q, k, v, np.ones((4, 5), bool))
    with pytest.raises(ad.DTypeError, match=fn + ": key float64"):
        F.scaled_dot_product_attention(q, ad.zeros((2, 5, 4), dtype=ad.float64), v)
    with pytest.raises(ad.DTypeError, match=fn + r": attn_mask must be bool.*int64"):
        F.scaled_dot_product_attention(q, k, v, ad.zeros((3, 5), dtype=ad.int64))
    with pytest.raises(ad.InvalidArgumentError, match=fn + ": dropout_p"):
        F.scaled_dot_product_attention(q, k, v, dropout_p=2.0)
    with pytest.raises(ad.ShapeError, match=fn + ": enable_gqa"):
        F.scaled_dot_product_attention(ad.zeros((1, 3, 2, 4)), ad.zeros((1, 2, 5, 4)),
                                       ad.zeros((1, 2, 5, 4)), enable_gqa=True)
    with pytest.raises(ad.InvalidArgumentError, match=fn + ": query must be a Tensor"):
        F.scaled_dot_product_attention(np.zeros((3, 4)), k, v)


# ---- pooling with ceil_mode ------------------------------------------------------------------
def np_pool(x, k, s, p, d=(1, 1), ceil=False, kind="max", cip=True, div=None):
    """PyTorch's pooling written out window by window over (N, C, H, W)."""
    h, w = x.shape[2:]
    outs = []
    for n, ki, si, pi, di in zip((h, w), k, s, p, d):
        room = n + 2 * pi - di * (ki - 1) - 1
        o = (-(-room // si) if ceil else room // si) + 1
        if ceil and (o - 1) * si >= n + pi:
            o -= 1
        outs.append(o)
    y = np.zeros(x.shape[:2] + tuple(outs))
    for i in range(outs[0]):
        for j in range(outs[1]):
            rows = i * s[0] - p[0] + np.arange(k[0]) * d[0]
            cols = j * s[1] - p[1] + np.arange(k[1]) * d[1]
            rr, cc = rows[(rows >= 0) & (rows < h)], cols[(cols >= 0) & (cols < w)]
            win = x[:, :, rr][:, :, :, cc]
            if kind == "max":
                y[:, :, i, j] = win.max((2, 3))
                continue
            if div is not None:
                dv = div
            elif cip:
                hs, ws = i * s[0] - p[0], j * s[1] - p[1]
                dv = (min(hs + k[0], h + p[0]) - hs) * (min(ws + k[1], w + p[1]) - ws)
            else:
                dv = len(rr) * len(cc)
            y[:, :, i, j] = win.sum((2, 3)) / dv
    return y


POOLS = [((3, 3), (2, 2), (0, 0)), ((2, 2), (2, 2), (1, 1)), ((3, 2), (2, 3), (1, 1)),
         ((3, 3), (3, 3), (1, 1)), ((4, 3), (3, 2), (2, 1))]


@pytest.mark.parametrize("case", range(len(POOLS)))
def test_max_pool2d_ceil_mode(case):
    k, s, p = POOLS[case]
    x = distinct(2, 2, 7, 6)
    for ceil in (False, True):
        y = F.max_pool2d(t64(x), k, s, p, ceil_mode=ceil)
        np.testing.assert_array_equal(np.asarray(y), np_pool(x, k, s, p, ceil=ceil))
        y = F.max_pool2d(t64(x), k, s, p, dilation=(2, 1), ceil_mode=ceil)
        np.testing.assert_array_equal(np.asarray(y), np_pool(x, k, s, p, (2, 1), ceil=ceil))
    check_grad(lambda a: F.max_pool2d(a, k, s, p, ceil_mode=True), [x[:1, :1]], eps=1e-4)


@pytest.mark.parametrize("case", range(len(POOLS)))
def test_avg_pool2d_ceil_mode(case):
    k, s, p = POOLS[case]
    x = rand(2, 2, 7, 6)
    for ceil in (False, True):
        for cip in (True, False):
            y = F.avg_pool2d(t64(x), k, s, p, ceil_mode=ceil, count_include_pad=cip)
            np.testing.assert_allclose(np.asarray(y),
                                       np_pool(x, k, s, p, ceil=ceil, kind="avg", cip=cip),
                                       rtol=1e-12, atol=1e-14)
        y = F.avg_pool2d(t64(x), k, s, p, ceil_mode=ceil, divisor_override=3)
        np.testing.assert_allclose(np.asarray(y), np_pool(x, k, s, p, ceil=ceil, kind="avg",
                                                          div=3), rtol=1e-12, atol=1e-14)
    for cip in (True, False):
        check_grad(lambda a: F.avg_pool2d(a, k, s, p, ceil_mode=True, count_include_pad=cip),
                   [x[:1, :1]])
    check_grad(lambda a: F.avg_pool2d(a, k, s, p, ceil_mode=True, divisor_override=2),
               [x[:1, :1]])


def test_pool1d_ceil_mode_and_layouts():
    x = distinct(2, 3, 8)
    y = F.max_pool1d(t64(x), 3, 2, 1, ceil_mode=True)
    np.testing.assert_array_equal(
        np.asarray(y), np_pool(x[:, :, None], (1, 3), (1, 2), (0, 1), ceil=True)[:, :, 0])
    for cip in (True, False):
        y = F.avg_pool1d(t64(x), (3,), (2,), (1,), ceil_mode=True, count_include_pad=cip)
        np.testing.assert_allclose(np.asarray(y), np_pool(
            x[:, :, None], (1, 3), (1, 2), (0, 1), ceil=True, kind="avg", cip=cip)[:, :, 0],
            rtol=1e-12)
    check_grad(lambda a: F.max_pool1d(a, 3, 2, 1, ceil_mode=True), [x[:1]], eps=1e-4)
    check_grad(lambda a: F.avg_pool1d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False),
               [x[:1]])
    for lname, base, mk in layouts((1, 5, 5)):
        check_grad(lambda a: F.avg_pool2d(a, 2, 2, 1, ceil_mode=True, count_include_pad=False),
                   [base], make=lay(mk))
        if lname != "broadcast":  # broadcast copies tie: no unique maximum
            b = rng.permutation(base.size).reshape(base.shape) / 5.0
            check_grad(lambda a: F.max_pool2d(a, 2, 2, 1, ceil_mode=True), [b], make=lay(mk),
                       eps=1e-4)


def test_pool_unbatched_ceil_mode():
    x = rand(2, 5, 5)
    y = F.avg_pool2d(t64(x), 2, ceil_mode=True)
    assert y.shape == (2, 3, 3)
    np.testing.assert_allclose(np.asarray(y), np_pool(x[None], (2, 2), (2, 2), (0, 0),
                                                      ceil=True, kind="avg")[0], rtol=1e-12)


# ---- argument errors (issue 10: nothing silently dropped, no plain TypeError) ----------------
@pytest.mark.parametrize("fn,args", [
    ("conv1d", lambda: (ad.zeros((1, 2, 8)), ad.zeros((3, 2, 2)))),
    ("conv_transpose1d", lambda: (ad.zeros((1, 2, 8)), ad.zeros((2, 3, 2)))),
    ("max_pool1d", lambda: (ad.zeros((1, 2, 8)), 2)),
    ("avg_pool1d", lambda: (ad.zeros((1, 2, 8)), 2)),
])
def test_1d_functions_reject_longer_tuples(fn, args):
    f = getattr(F, fn)
    with pytest.raises(ad.InvalidArgumentError, match=fn + r": stride must be an int or a "
                                                           r"tuple of 1 ints, got \(2, 5\)"):
        f(*args(), stride=(2, 5))
    with pytest.raises(ad.InvalidArgumentError, match=fn + ": padding .*1 ints"):
        f(*args(), padding=(0, 1))
    if fn.startswith("conv"):
        with pytest.raises(ad.InvalidArgumentError, match=fn + ": dilation"):
            f(*args(), dilation=[1, 2])
    else:
        with pytest.raises(ad.InvalidArgumentError, match=fn + ": kernel_size"):
            f(args()[0], (2, 2))


@pytest.mark.parametrize("fn", ["conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d",
                                "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d"])
@pytest.mark.parametrize("arg", ["stride", "padding"])
def test_non_int_and_huge_arguments(fn, arg):
    nd = 1 if fn.endswith("1d") else 2
    x = ad.zeros((1, 2) + (6,) * nd)
    if fn.startswith("conv_transpose"):
        first = (x, ad.zeros((2, 3) + (2,) * nd))
    elif fn.startswith("conv"):
        first = (x, ad.zeros((3, 2) + (2,) * nd))
    else:
        first = (x, 2)
    f = getattr(F, fn)
    for bad in (1.5, "2", None if arg == "padding" else 2.0):
        if bad is None:
            continue
        with pytest.raises(ad.InvalidArgumentError, match=f"{fn}: {arg} must be an int"):
            f(*first, **{arg: bad})
    for huge in (2 ** 63, 2 ** 64 + 1, -(2 ** 63) - 1):
        with pytest.raises(ad.InvalidArgumentError, match=f"{fn}: {arg} .*64 bits"):
            f(*first, **{arg: huge})
    # in range for int64, but beyond any sensible size: still a clean error
    with pytest.raises(ad.Error, match=fn):
        f(*first, **{arg: 2 ** 63 - 1})


def test_size_overflow_names_the_argument():
    x = ad.zeros((1, 1, 4, 4))
    with pytest.raises(ad.InvalidArgumentError, match="max_pool2d: padding .*too large"):
        F.max_pool2d(x, 3, padding=2 ** 63 - 1)
    with pytest.raises(ad.InvalidArgumentError, match="max_pool2d: padding .*at most half"):
        F.max_pool2d(x, 3, padding=2)
    with pytest.raises(ad.InvalidArgumentError, match="conv2d: dilation .*too large"):
        F.conv2d(x, ad.zeros((1, 1, 3, 3)), dilation=2 ** 62)
    with pytest.raises(ad.ShapeError, match=r"conv2d: kernel size 3 with dilation 1073741823 "
                                            r"spans"):
        F.conv2d(x, ad.zeros((1, 1, 3, 3)), dilation=2 ** 30 - 1)
    with pytest.raises(ad.InvalidArgumentError, match="conv_transpose2d: stride .*too large"):
        F.conv_transpose2d(x, ad.zeros((1, 1, 2, 2)), stride=2 ** 61)
    with pytest.raises(ad.InvalidArgumentError, match="conv2d: padding .*too large"):
        F.conv2d(x, ad.zeros((1, 1, 3, 3)), padding=2 ** 62)
    with pytest.raises(ad.InvalidArgumentError, match="max_pool2d: kernel_size .*too large"):
        F.max_pool2d(x, 2 ** 40)


def test_conv_and_pool_errors_name_shapes():
    x = ad.zeros((1, 3, 6))
    with pytest.raises(ad.ShapeError, match=r"conv1d: input float32 \(1, 3, 6\) has 3 channels"
                                            r".*\(4, 2, 2\)"):
        F.conv1d(x, ad.zeros((4, 2, 2)))
    with pytest.raises(ad.ShapeError, match=r"conv1d: weight must be 3-d.*\(4, 3\)"):
        F.conv1d(x, ad.zeros((4, 3)))
    with pytest.raises(ad.ShapeError, match=r"conv1d: bias must have shape \(4,\)"):
        F.conv1d(x, ad.zeros((4, 3, 2)), ad.zeros(3))
    with pytest.raises(ad.InvalidArgumentError, match="conv1d: stride must be positive"):
        F.conv1d(x, ad.zeros((4, 3, 2)), stride=0)
    with pytest.raises(ad.InvalidArgumentError, match="conv1d: padding='same' needs stride 1"):
        F.conv1d(x, ad.zeros((4, 3, 2)), stride=2, padding="same")
    with pytest.raises(ad.InvalidArgumentError, match="conv_transpose1d: output padding 2"):
        F.conv_transpose1d(x, ad.zeros((3, 2, 2)), stride=2, output_padding=2)
    with pytest.raises(ad.ShapeError, match=r"max_pool1d: kernel size 7 .*\(1, 3, 6\)"):
        F.max_pool1d(x, 7)
    with pytest.raises(ad.ShapeError, match=r"avg_pool1d: input must be 2-d or 3-d"):
        F.avg_pool1d(ad.zeros(6), 2)
    with pytest.raises(ad.DTypeError, match=r"max_pool1d: input must be float.*int64"):
        F.max_pool1d(ad.zeros((1, 3, 6), dtype=ad.int64), 2)
    with pytest.raises(ad.InvalidArgumentError, match="avg_pool2d: divisor_override must not"):
        F.avg_pool2d(ad.zeros((1, 1, 4, 4)), 2, divisor_override=0)


# ---- allocation failures ---------------------------------------------------------------------
def _composed_once():
    """Forward and backward through every composed function of this module;
    the running statistics are fresh each run, so every run computes the
    same values."""
    x = ad.Var(np.linspace(-1, 1, 2 * 3 * 5 * 5).reshape(2, 3, 5, 5))
    w = ad.Var(np.linspace(0.5, 1.5, 3))
    rm, rv = ad.Var(np.zeros(3)), ad.Var(np.ones(3))
    h = F.batch_norm(x, rm, rv, w, None, training=True)
    h = F.pad(h, (1, 2, 0, 1), mode="reflect") + 0.0 * F.pad(h, (1, 2, 0, 1), mode="circular")
    h = F.max_pool2d(h, 3, 2, 1, ceil_mode=True) + F.avg_pool2d(h, 2, 2, 1, ceil_mode=True,
                                                               count_include_pad=False)
    q = h.flatten(2)
    a = F.scaled_dot_product_attention(q, q, q, attn_mask=np.tri(3, 3, dtype=bool) == 0)
    logits = a.flatten(1)
    loss = (F.cross_entropy(logits, [1, -100], weight=ad.ones(logits.shape[1], dtype=ad.float64),
                            label_smoothing=0.1)
            + F.binary_cross_entropy_with_logits(logits, ad.zeros_like(logits),
                                                 pos_weight=ad.full_like(logits, 2.0))
            + F.smooth_l1_loss(logits, ad.ones_like(logits), beta=0.5))
    g = loss.backward()
    return [np.array(g[x]), np.array(g[w]), np.array(rm), np.array(rv)]


def test_allocation_failures_leak_nothing():
    from faults import sweep_alloc_failures

    sweep_alloc_failures(_composed_once, min_failures=50)


def test_embedding_options_and_errors():
    w = rand(4, 3)
    idx = np.array([[0, 2], [2, 3]])
    y = F.embedding(idx, t64(w), padding_idx=2)
    np.testing.assert_array_equal(np.asarray(y), w[idx])
    v = ad.Var(w)
    g = (F.embedding(idx, v, padding_idx=2) * t64(rand(2, 2, 3))).sum().backward()[v]
    assert np.asarray(g)[2].tolist() == [0.0, 0.0, 0.0] and np.asarray(g)[3].any()
    big = ad.Var(np.array([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]]))
    F.embedding([0, 1], big, max_norm=1.0)
    np.testing.assert_allclose(np.asarray(big), [[0.6, 0.8], [0.3, 0.4], [6.0, 8.0]], rtol=1e-6)
    with pytest.raises(ad.InvalidArgumentError, match="embedding: max_norm .* must be a Var"):
        F.embedding([0], t64(w), max_norm=1.0)
    with pytest.raises(ad.InvalidArgumentError, match="embedding: padding_idx 4"):
        F.embedding([0], t64(w), padding_idx=4)
    # negative ids are out of range, as in torch and nn.Embedding (they wrapped,
    # and -1 reached the padding row's gradient past padding_idx=3)
    for bad in ([-1, 3], [0, 4]):
        with pytest.raises(ad.OutOfRangeError, match=rf"embedding: input .* holds index "
                                                     rf"{bad[0] if bad[0] < 0 else 4}"):
            F.embedding(bad, v, padding_idx=3)
    with pytest.raises(ad.InvalidArgumentError, match="embedding: scale_grad_by_freq"):
        F.embedding([0], t64(w), scale_grad_by_freq=True)
    with pytest.raises(ad.DTypeError, match=r"embedding: input must hold integer.*float32"):
        F.embedding(ad.zeros(2), t64(w))
    with pytest.raises(ad.ShapeError, match=r"embedding: weight must be 2-d.*\(4,\)"):
        F.embedding([0], ad.zeros(4))
    with pytest.raises(ad.InvalidArgumentError, match="dropout: inplace must be a bool"):
        F.dropout(ad.ones(3), 0.5, True, 7)
    with pytest.raises(ad.InvalidArgumentError, match="dropout: seed must be an int"):
        F.dropout(ad.ones(3), 0.5, seed=1.5)


def test_sdpa_empty():
    y = F.scaled_dot_product_attention(ad.ones((2, 3, 4)), ad.ones((2, 0, 4)),
                                       ad.ones((2, 0, 5)))
    assert y.shape == (2, 3, 5) and not np.asarray(y).any()
    y = F.scaled_dot_product_attention(ad.ones((2, 0, 4)), ad.ones((2, 3, 4)),
                                       ad.ones((2, 3, 5)), is_causal=True)
    assert y.shape == (2, 0, 5)


def test_number_and_shape_arguments_raise_ad_errors():
    x = ad.zeros((2, 3))
    with pytest.raises(ad.InvalidArgumentError, match="pad: value must be a number.*str"):
        F.pad(x, (1, 1), value="a")
    with pytest.raises(ad.InvalidArgumentError, match="dropout: p must be a number"):
        F.dropout(x, p="0.5")
    with pytest.raises(ad.InvalidArgumentError, match="batch_norm: eps must be a number"):
        F.batch_norm(x, None, None, training=True, eps=None)
    with pytest.raises(ad.InvalidArgumentError, match="batch_norm: momentum .* too large"):
        F.batch_norm(x, None, None, training=True, momentum=10 ** 400)
    with pytest.raises(ad.InvalidArgumentError, match="smooth_l1_loss: beta must be a number"):
        F.smooth_l1_loss(x, x, beta=[1.0])
    with pytest.raises(ad.InvalidArgumentError, match="scaled_dot_product_attention: scale"):
        F.scaled_dot_product_attention(x, x, x, scale="1")
    with pytest.raises(ad.InvalidArgumentError, match="layer_norm: normalized_shape must be an "
                                                      "int"):
        F.layer_norm(x, 3.5)
    with pytest.raises(ad.InvalidArgumentError, match="layer_norm: normalized_shape .*64 bits"):
        F.layer_norm(x, (2 ** 64,))
    with pytest.raises(ad.ShapeError, match=r"layer_norm: weight float32 \(4,\) .*\(3,\)"):
        F.layer_norm(x, 3, weight=ad.ones(4))
    with pytest.raises(ad.ShapeError, match=r"layer_norm: normalized_shape \(2,\) .*\(2, 3\)"):
        F.layer_norm(x, 2)
    with pytest.raises(ad.ShapeError, match=r"linear: input float32 \(2, 3\) .*weight float32 "
                                            r"\(4, 5\)"):
        F.linear(x, ad.zeros((4, 5)))
    with pytest.raises(ad.ShapeError, match=r"linear: bias float32 \(3,\) must have shape "
                                            r"\(4,\)"):
        F.linear(x, ad.zeros((4, 3)), ad.zeros(3))
    a, w, b = rand(2, 3), rand(4, 3), rand(4)
    np.testing.assert_allclose(np.asarray(F.linear(t64(a), t64(w), t64(b))), a @ w.T + b,
                               rtol=1e-12)


def test_pool_edges():
    # ceil_mode lets a window overhang a too-small input (PyTorch's rule)
    x = rand(1, 2, 2)
    y = F.avg_pool1d(t64(x), 3, 3, ceil_mode=True)
    np.testing.assert_allclose(np.asarray(y), x.mean(-1, keepdims=True), rtol=1e-12)
    y = F.max_pool1d(t64(x), 3, 3, ceil_mode=True)
    np.testing.assert_array_equal(np.asarray(y), x.max(-1, keepdims=True))
    check_grad(lambda a: F.avg_pool1d(a, 3, 3, ceil_mode=True), [x])
    with pytest.raises(ad.ShapeError, match="avg_pool1d: kernel size 3"):
        F.avg_pool1d(t64(x), 3, 3)
    # a max window that sees only padding gives -inf and passes no gradient
    v = ad.Var(distinct(1, 1, 1, 4))
    y = F.max_pool2d(v, (2, 3), (1, 3), (1, 1), dilation=(2, 2))
    assert np.isneginf(np.asarray(y)).all()
    g = y.backward(grad=ad.ones_like(y)).get(v)
    assert g is None or not np.asarray(g).any()
    # only the batch may be empty
    assert F.max_pool2d(ad.zeros((0, 2, 4, 4)), 2).shape == (0, 2, 2, 2)
    assert F.avg_pool1d(ad.zeros((0, 2, 4)), 2, ceil_mode=True).shape == (0, 2, 2)
    for f, shape in ((F.max_pool2d, (2, 0, 4, 4)), (F.avg_pool2d, (2, 2, 0, 4)),
                     (F.max_pool1d, (2, 0)), (F.avg_pool1d, (2, 2, 0))):
        with pytest.raises(ad.ShapeError, match=f.__name__ + r": input float32 .* empty"):
            f(ad.zeros(shape), 2)


def test_pad_constant_cannot_crop_past_the_input():
    with pytest.raises(ad.ShapeError, match=r"pad: padding \(-2, 2\) crops more than "
                                                      r"dim 0 of input float32 \(1,\)"):
        F.pad(ad.tensor([5.0]), (-2, 2))
    assert F.pad(ad.tensor([5.0, 6.0, 7.0]), (-2, 2)).tolist() == [7.0, 0.0, 0.0]
    assert F.pad(ad.tensor([5.0]), (-1, 2), value=1.0).tolist() == [1.0, 1.0]


# ---- adaptive_avg_pool2d --------------------------------------------------------------------
def np_adaptive_avg(x, oh, ow):
    h, w = x.shape[-2:]
    y = np.empty(x.shape[:-2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            r0, r1 = (i * h) // oh, -((-(i + 1) * h) // oh)
            c0, c1 = (j * w) // ow, -((-(j + 1) * w) // ow)
            y[..., i, j] = x[..., r0:r1, c0:c1].mean((-2, -1))
    return y


@pytest.mark.parametrize("size", [1, 3, (2, 4), (3, None), (None, 5), (7, 9), (4, 3)])
def test_adaptive_avg_pool2d(size):
    # every branch: the full mean, an even split (avg_pool2d), uneven bins (matrix products)
    x = rand(2, 3, 7, 6)
    oh, ow = (size, size) if isinstance(size, int) else size
    oh, ow = oh or 7, ow or 6
    y = F.adaptive_avg_pool2d(t64(x), size)
    assert y.shape == (2, 3, oh, ow)
    np.testing.assert_allclose(np.asarray(y), np_adaptive_avg(x, oh, ow), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(F.adaptive_avg_pool2d(t64(x[0]), size)),
                               np_adaptive_avg(x[0], oh, ow), rtol=1e-12, atol=1e-14)
    check_grad(lambda a: F.adaptive_avg_pool2d(a, size), [x[:1, :2]])
    y32 = F.adaptive_avg_pool2d(ad.tensor(x.astype(np.float32)), size)
    assert y32.dtype == ad.float32
    # the layer is the function
    np.testing.assert_array_equal(np.asarray(ad.nn.AdaptiveAvgPool2d(size)(t64(x))),
                                  np.asarray(y))


def test_adaptive_avg_pool2d_errors():
    fn = "adaptive_avg_pool2d"
    with pytest.raises(ad.ShapeError, match=fn + r": input must be .*\(5, 5\)"):
        F.adaptive_avg_pool2d(ad.zeros((5, 5)), 2)
    with pytest.raises(ad.ShapeError, match=fn + r": input float32 \(1, 2, 0, 5\) has an empty"):
        F.adaptive_avg_pool2d(ad.zeros((1, 2, 0, 5)), 2)
    with pytest.raises(ad.InvalidArgumentError, match=fn + ": output_size must be an int or a "
                                                           "pair"):
        F.adaptive_avg_pool2d(ad.zeros((1, 2, 4, 5)), (1, 2, 3))
    with pytest.raises(ad.InvalidArgumentError, match=fn + ": output_size"):
        F.adaptive_avg_pool2d(ad.zeros((1, 2, 4, 5)), 0)
    with pytest.raises(ad.InvalidArgumentError, match=fn + ": output_size"):
        F.adaptive_avg_pool2d(ad.zeros((1, 2, 4, 5)), 2.5)
    with pytest.raises(ad.OutOfMemoryError, match=fn + r": output size 1073741824 .*\(1073741824, "
                                                       r"5\) averaging matrix"):
        F.adaptive_avg_pool2d(ad.zeros((1, 2, 4, 5)), 2 ** 30)
    with pytest.raises(ad.DTypeError, match=fn):
        F.adaptive_avg_pool2d(ad.zeros((1, 2, 4, 5), dtype=ad.int64), 2)


def test_conv_transpose_refuses_an_empty_spatial_dim():
    # as PyTorch; the native kernel alone would give a (1, 3, 0, 0) output
    for shape in ((1, 2, 0, 5), (1, 2, 4, 0), (2, 0, 5)):
        with pytest.raises(ad.ShapeError, match=r"conv_transpose2d: input float32 .* has an empty "
                                                r"spatial dim"):
            F.conv_transpose2d(ad.zeros(shape), ad.zeros((2, 3, 3, 3)))
    with pytest.raises(ad.ShapeError, match="conv_transpose1d: input float32 .* has an empty"):
        F.conv_transpose1d(ad.zeros((1, 2, 0)), ad.zeros((2, 3, 3)))
    assert F.conv_transpose2d(ad.zeros((0, 2, 4, 5)), ad.zeros((2, 3, 3, 3))).shape == (0, 3, 6, 7)
    # padding that leaves exactly no output rows is an error too (as torch and
    # nn.ConvTranspose2d; it gave a (1, 1, 0, 0) tensor)
    with pytest.raises(ad.ShapeError, match="padding 1 leaves no output height"):
        F.conv_transpose2d(ad.ones((1, 1, 1, 2)), ad.ones((1, 1, 2, 1)), padding=1)
    with pytest.raises(ad.ShapeError, match="conv_transpose1d: .*leaves no output width"):
        F.conv_transpose1d(ad.ones((1, 1, 1)), ad.ones((1, 1, 2)), padding=1)
    assert F.conv_transpose2d(ad.ones((1, 1, 2, 3)), ad.ones((1, 1, 2, 2)),
                              padding=1).shape == (1, 1, 1, 2)
