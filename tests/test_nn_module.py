"""ad.nn.Module semantics (registration, names, buffers, modes, state dicts,
dtype conversion, containers, repr, copying), ad.nn.init and
ad.nn.utils.clip_grad_norm_."""
import copy
import math
import pickle

import numpy as np
import pytest

import pyautodiff as ad

nn = ad.nn


class Block(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.fc = nn.Linear(n, 4)
        self.scale = ad.Var.ones(4)
        self.register_buffer("steps", ad.zeros((), dtype=ad.int64))
        self.register_buffer("cache", ad.zeros(2), persistent=False)
        self.act = nn.ReLU()
        self.note = "plain attribute"

    def forward(self, x):
        return self.act(self.fc(x)) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block(4)])
        self.head = nn.Linear(4, 2, bias=False)
        self.shared = self.layers[0]  # the same module twice: its parameters appear once

    def forward(self, x):
        for m in self.layers:
            x = m(x)
        return self.head(x)


def test_registration_order_and_names():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    # as PyTorch: a module's own parameters, then its children's
    assert names == ["layers.0.scale", "layers.0.fc.weight", "layers.0.fc.bias",
                     "layers.1.scale", "layers.1.fc.weight", "layers.1.fc.bias", "head.weight"]
    assert len(list(net.parameters())) == 7
    assert [n for n, _ in net.named_children()] == ["layers", "head", "shared"]
    assert len(list(net.children())) == 3  # shared is layers[0], not the ModuleList
    assert [n for n, _ in net.named_modules()] == [
        "", "layers", "layers.0", "layers.0.fc", "layers.0.act", "layers.1", "layers.1.fc",
        "layers.1.act", "head"]
    assert [n for n, _ in net.named_buffers()] == ["layers.0.steps", "layers.0.cache",
                                                   "layers.1.steps", "layers.1.cache"]
    assert list(net.state_dict()) == [
        "layers.0.scale", "layers.0.steps", "layers.0.fc.weight", "layers.0.fc.bias",
        "layers.1.scale", "layers.1.steps", "layers.1.fc.weight", "layers.1.fc.bias",
        "head.weight", "shared.scale", "shared.steps", "shared.fc.weight", "shared.fc.bias"]
    assert net.head.bias is None and "bias" in net.head._parameters
    assert net.layers[0].note == "plain attribute"
    assert net.get_submodule("layers.1.fc") is net.layers[1].fc
    b = Block()
    b.fc = nn.Linear(3, 4)  # re-assignment keeps the registration slot
    assert [n for n, _ in b.named_parameters()] == ["scale", "fc.weight", "fc.bias"]
    del b.scale
    assert [n for n, _ in b.named_parameters()] == ["fc.weight", "fc.bias"]
    with pytest.raises(AttributeError):
        b.scale


def test_setattr_rules():
    b = Block()
    with pytest.raises(TypeError, match="parameter 'scale'"):
        b.scale = ad.ones(4)  # a plain tensor cannot replace a parameter
    b.scale = None
    assert "scale" not in dict(b.named_parameters())
    b.steps = ad.ones((), dtype=ad.int64)  # a buffer may be rebound to a tensor
    assert int(b.steps) == 1 and "steps" in dict(b.named_buffers())
    with pytest.raises(TypeError, match="buffer 'steps'"):
        b.steps = 3

    class Bad(nn.Module):
        def __init__(self):
            self.w = ad.Var.ones(2)

    with pytest.raises(AttributeError, match=r"super\(\)\.__init__\(\)"):
        Bad()
    with pytest.raises(TypeError):
        b.register_parameter("p", ad.ones(2))
    with pytest.raises(KeyError):
        b.register_buffer("a.b", ad.ones(2))
    with pytest.raises(KeyError):
        b.register_buffer("note", ad.ones(2))
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(1)


def test_train_eval():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    with pytest.raises(ValueError):
        net.train("no")


def test_state_dict_values():
    b = Block()
    sd = b.state_dict()
    w = sd["fc.weight"]
    assert not w.is_variable and not w.track_op
    np.testing.assert_array_equal(np.asarray(w), np.asarray(b.fc.weight))
    b.fc.weight.set(np.zeros((4, 3), dtype=np.float32))
    assert np.all(np.asarray(w) == 0)  # shares memory, as PyTorch's state_dict
    assert b.state_dict(keep_vars=True)["fc.weight"] is b.fc.weight
    assert list(b.state_dict(prefix="m."))[:2] == ["m.scale", "m.steps"]


def test_load_state_dict_numpy_and_tensors():
    a, b = Net(), Net()
    sd = {k: np.asarray(v).copy() for k, v in a.state_dict().items()}
    ids = [p.id for p in b.parameters()]
    versions = [p.version for p in b.parameters()]
    assert b.load_state_dict(sd) == ([], [])
    assert [p.id for p in b.parameters()] == ids  # in place
    assert all(p.version > v for p, v in zip(b.parameters(), versions))
    for k, v in b.state_dict().items():
        np.testing.assert_array_equal(np.asarray(v), sd[k])
    # arrays of the other byte order load as their values (numpy swaps them)
    swapped = {k: v.astype(v.dtype.newbyteorder()) for k, v in sd.items()}
    assert all(v.dtype.byteorder == (">" if np.little_endian else "<") for v in swapped.values()
               if v.dtype.itemsize > 1)
    b.load_state_dict(swapped)
    for k, v in b.state_dict().items():
        np.testing.assert_array_equal(np.asarray(v), sd[k])
    assert ad.from_numpy(np.arange(3.0).astype(">f8")).dtype is ad.float64
    with pytest.raises(ad.InvalidArgumentError, match="cannot be shared.*>f8"):
        ad.from_numpy(np.arange(3.0).astype(">f8"), copy=False)
    b.load_state_dict(a.state_dict())  # ad tensors
    b.load_state_dict(b.state_dict())  # its own memory
    x = ad.randn((2, 3), seed=0)
    np.testing.assert_array_equal(np.asarray(a(x)), np.asarray(b(x)))


def _snapshot(m):
    return {k: np.array(v) for k, v in m.state_dict().items()}


@pytest.mark.parametrize("case", ["missing", "unexpected", "shape", "dtype", "str"])
def test_load_state_dict_is_atomic(case):
    a, b = Net(), Net()
    before = _snapshot(b)
    sd = {k: np.asarray(v).copy() for k, v in a.state_dict().items()}
    if case == "missing":
        del sd["head.weight"]
        exc, words = ad.InvalidArgumentError, ["missing", "head.weight"]
    elif case == "unexpected":
        sd["extra.weight"] = np.zeros(3, np.float32)
        exc, words = ad.InvalidArgumentError, ["unexpected", "extra.weight"]
    elif case == "shape":
        sd["layers.1.fc.bias"] = np.zeros(5, np.float32)
        exc, words = ad.ShapeError, ["layers.1.fc.bias", "(5,)", "(4,)"]
    elif case == "dtype":
        sd["head.weight"] = sd["head.weight"].astype(np.float64)
        exc, words = ad.DTypeError, ["head.weight", "float64", "float32"]
    else:  # a value numpy turns into a str array, after one that loads
        sd["head.weight"] = np.ones_like(sd["head.weight"]) * 7
        sd["layers.1.fc.bias"] = "zeros"
        exc, words = ad.DTypeError, ["layers.1.fc.bias", "not numeric", "str"]
    with pytest.raises(exc) as ei:
        b.load_state_dict(sd)
    for w in words:
        assert w in str(ei.value)
    assert isinstance(ei.value, ad.Error)
    after = _snapshot(b)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)


def test_load_state_dict_non_strict():
    a, b = Net(), Net()
    sd = dict(a.state_dict())
    del sd["head.weight"]
    sd["junk"] = ad.zeros(1)
    res = b.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["head.weight"] and res.unexpected_keys == ["junk"]
    np.testing.assert_array_equal(np.asarray(b.layers[1].fc.weight),
                                  np.asarray(a.layers[1].fc.weight))
    sd["layers.0.scale"] = ad.zeros(7)
    with pytest.raises(ad.ShapeError):  # a shape mismatch is an error even when not strict
        b.load_state_dict(sd, strict=False)
    with pytest.raises(TypeError):
        b.load_state_dict([1, 2])


def test_to_dtype_apply_and_call():
    net = Net()
    x = ad.randn((2, 3), seed=1)
    y32 = np.asarray(net(x))
    assert net.double() is net
    assert all(p.dtype is ad.float64 for p in net.parameters())
    assert net.layers[0].steps.dtype is ad.int64  # integer buffers keep their dtype
    assert all(isinstance(p, ad.Var) for p in net.parameters())
    np.testing.assert_allclose(np.asarray(net(x.to_dtype(ad.float64))), y32, rtol=1e-5,
                               atol=1e-6)  # float32 vs float64: outputs near 0 need an atol
    net.float()
    assert all(p.dtype is ad.float32 for p in net.parameters())
    with pytest.raises(ad.DTypeError):
        net.to_dtype(ad.int32)
    assert net.to("cpu", ad.float64) is net and net.head.weight.dtype is ad.float64
    assert net.to(dtype="float32").head.weight.dtype is ad.float32
    with pytest.raises(ad.InvalidArgumentError, match="cpu"):
        net.to("cuda")
    # tied weights stay tied (each holder gets the same new Var), as in torch
    tied = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 5, bias=False))
    tied[1].weight = tied[0].weight
    tied.double()
    assert tied[1].weight is tied[0].weight and len(list(tied.parameters())) == 1
    assert tied[0].weight.dtype is ad.float64
    seen = []
    assert net.apply(lambda m: seen.append(type(m).__name__)) is net
    assert seen[-1] == "Net" and seen[0] == "Linear"
    # apply with init: every Linear weight set to ones
    net.apply(lambda m: nn.init.ones_(m.weight) if isinstance(m, nn.Linear) else None)
    assert np.all(np.asarray(net.head.weight) == 1)


def test_repr_tree():
    assert repr(Block()) == (
        "Block(\n"
        "  (fc): Linear(in_features=3, out_features=4, bias=True)\n"
        "  (act): ReLU()\n"
        ")")
    s = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Tanh()))
    assert repr(s) == ("Sequential(\n  (0): Linear(in_features=2, out_features=2, bias=True)\n"
                       "  (1): Sequential(\n    (0): Tanh()\n  )\n)")


def test_containers():
    s = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(s) == 3 and isinstance(s[0], nn.Linear) and isinstance(s[-1], nn.Linear)
    assert isinstance(s[1:], nn.Sequential) and len(s[1:]) == 2
    assert [type(m).__name__ for m in s] == ["Linear", "ReLU", "Linear"]
    with pytest.raises(IndexError):
        s[3]
    s.append(nn.Sigmoid())
    assert len(s) == 4 and s(ad.ones((5, 2))).shape == (5, 1)
    del s[1]
    assert [n for n, _ in s.named_children()] == ["0", "1", "2"]
    s.insert(1, nn.Tanh())
    assert isinstance(s[1], nn.Tanh) and len(s) == 4
    import collections

    od = nn.Sequential(collections.OrderedDict([("enc", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    assert [n for n, _ in od.named_parameters()] == ["enc.weight", "enc.bias"]
    with pytest.raises(TypeError):
        nn.Sequential(nn.ReLU(), 3)

    ml = nn.ModuleList([nn.Linear(1, 1)])
    ml.append(nn.Linear(1, 2))
    ml += [nn.Linear(2, 2)]
    assert len(ml) == 3 and [n for n, _ in ml.named_parameters()][-1] == "2.bias"
    ml[0] = nn.Identity()
    assert isinstance(ml[0], nn.Identity) and len(list(ml.parameters())) == 4
    ml.insert(0, nn.Tanh())
    assert isinstance(ml[0], nn.Tanh) and len(ml) == 4
    assert isinstance(ml.pop(0), nn.Tanh) and len(ml) == 3
    with pytest.raises(TypeError):
        ml.extend(nn.Linear(1, 1))

    md = nn.ModuleDict({"a": nn.Linear(1, 1)})
    md["b"] = nn.Linear(1, 2)
    md.update([("c", nn.ReLU())])
    assert list(md) == ["a", "b", "c"] and "b" in md and len(md) == 3
    assert [n for n, _ in md.named_parameters()] == ["a.weight", "a.bias", "b.weight",
                                                     "b.bias"]
    assert isinstance(md.pop("c"), nn.ReLU) and list(md.keys()) == ["a", "b"]


def test_parameter_and_buffers_not_parameters():
    p = nn.Parameter(ad.zeros(3))
    assert isinstance(p, ad.Var)
    assert not nn.Parameter(ad.zeros(2), requires_grad=False).is_variable
    bn = nn.BatchNorm1d(2)
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    assert [n for n, _ in bn.named_buffers()] == ["running_mean", "running_var",
                                                  "num_batches_tracked"]


def test_deepcopy_and_pickle():
    net = Net()
    net.eval()
    c = copy.deepcopy(net)
    assert c.shared is c.layers[0] and not c.training
    assert [n for n, _ in c.named_parameters()] == [n for n, _ in net.named_parameters()]
    for p, q in zip(net.parameters(), c.parameters()):
        assert p.id != q.id and isinstance(q, ad.Var)
        np.testing.assert_array_equal(np.asarray(p), np.asarray(q))
    c.head.weight.set(np.zeros((2, 4), np.float32))
    assert not np.all(np.asarray(net.head.weight) == 0)
    # the copy's Vars are known to clip_grad_norm_ as parameters
    grads = c(ad.randn((2, 3), seed=2)).sum().backward()
    nn.utils.clip_grad_norm_(grads, 1e-3)
    try:
        pickle.dumps(ad.Var([1.0]))
    except TypeError:
        pytest.skip("Tensor/Var pickling is not available in this build")
    d = pickle.loads(pickle.dumps(net))
    assert d.shared is d.layers[0]
    x = ad.randn((2, 3), seed=3)
    np.testing.assert_array_equal(np.asarray(d(x)), np.asarray(net(x)))
    assert all(isinstance(p, ad.Var) for p in d.parameters())


# ---- init ----------------------------------------------------------------------------------
def test_calculate_gain_and_fans():
    g = nn.init.calculate_gain
    assert g("linear") == 1 and g("conv2d") == 1 and g("sigmoid") == 1
    assert g("tanh") == 5.0 / 3 and g("relu") == math.sqrt(2) and g("selu") == 0.75
    assert g("leaky_relu") == math.sqrt(2 / (1 + 0.01 ** 2))
    assert g("leaky_relu", 0.2) == math.sqrt(2 / 1.04)
    with pytest.raises(ad.InvalidArgumentError):
        g("swish")
    assert nn.init._calculate_fan_in_and_fan_out(ad.Var.zeros((8, 3, 5, 5))) == (75, 200)
    with pytest.raises(ad.InvalidArgumentError, match="fewer than 2"):
        nn.init.xavier_uniform_(ad.Var.zeros(4))


@pytest.mark.parametrize("fn,kw,lo_hi,std", [
    ("uniform_", dict(a=-2.0, b=3.0), (-2.0, 3.0), 5 / math.sqrt(12)),
    ("normal_", dict(mean=1.0, std=0.5), None, 0.5),
    ("xavier_uniform_", dict(gain=2.0), (-2 * math.sqrt(6 / 700), 2 * math.sqrt(6 / 700)),
     2 * math.sqrt(2 / 700)),
    ("xavier_normal_", dict(), None, math.sqrt(2 / 700)),
    ("kaiming_uniform_", dict(a=math.sqrt(5)), (-1 / math.sqrt(300), 1 / math.sqrt(300)),
     1 / math.sqrt(900)),
    ("kaiming_normal_", dict(mode="fan_out", nonlinearity="relu"), None, math.sqrt(2 / 400)),
    ("trunc_normal_", dict(std=0.02), (-2.0, 2.0), 0.02),
])
def test_init_distributions(fn, kw, lo_hi, std):
    for dt in (ad.float32, ad.float64):
        w = ad.Var.zeros((400, 300), dtype=dt)
        wid, ver = w.id, w.version
        assert getattr(nn.init, fn)(w, **kw) is w
        assert w.id == wid and w.version > ver and w.dtype is dt
        a = np.asarray(w, dtype=np.float64)
        if lo_hi:
            assert a.min() >= lo_hi[0] and a.max() <= lo_hi[1]
            if fn != "trunc_normal_":  # the draw reaches close to its bounds
                assert a.min() < lo_hi[0] * 0.99 + lo_hi[1] * 0.01
        np.testing.assert_allclose(a.std(), std, rtol=0.02)
        assert abs(a.mean() - kw.get("mean", 0.0) -
                   (0.5 if fn == "uniform_" else 0.0)) < 5 * std / math.sqrt(a.size)


def test_trunc_normal_tails():
    """A window far in the tail: the moments of a truncated normal."""
    w = ad.Var.zeros(100000, dtype=ad.float64)
    nn.init.trunc_normal_(w, mean=0.0, std=1.0, a=2.0, b=3.0)
    x = np.asarray(w)
    assert x.min() >= 2.0 and x.max() <= 3.0
    phi = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda z: (1 + math.erf(z / math.sqrt(2))) / 2  # noqa: E731
    mean = (phi(2) - phi(3)) / (cdf(3) - cdf(2))
    assert abs(x.mean() - mean) < 0.01


def test_erfinv_accuracy():
    y = np.linspace(-0.999999, 0.999999, 2001)
    x = nn.init._erfinv(y)
    np.testing.assert_allclose([math.erf(v) for v in x], y, rtol=0, atol=1e-14)


def test_constant_zeros_ones_and_errors():
    w = ad.Var.randn((3, 2))
    nn.init.constant_(w, 0.25)
    assert np.all(np.asarray(w) == 0.25)
    nn.init.zeros_(w)
    assert np.all(np.asarray(w) == 0)
    nn.init.ones_(w)
    assert np.all(np.asarray(w) == 1)
    with pytest.raises(TypeError, match="Var"):
        nn.init.normal_(ad.zeros((2, 2)))
    with pytest.raises(ad.InvalidArgumentError, match="mode"):
        nn.init.kaiming_uniform_(w, mode="fan_avg")


# ---- clip_grad_norm_ -----------------------------------------------------------------------
def _grads():
    m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    x = ad.randn((5, 3), seed=0)
    grads = (m(x) * 10.0).sum().backward()
    return m, grads


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
def test_clip_grad_norm(norm_type):
    m, grads = _grads()
    before = {n: np.asarray(grads[p]).astype(np.float64) for n, p in m.named_parameters()}
    flat = np.concatenate([g.ravel() for g in before.values()])
    expect = (np.abs(flat).max() if norm_type == math.inf else
              (np.abs(flat) ** norm_type).sum() ** (1 / norm_type))
    total = nn.utils.clip_grad_norm_(grads, 0.5, norm_type=norm_type)
    assert total.shape == () and isinstance(total, ad.Tensor)
    np.testing.assert_allclose(float(total), expect, rtol=1e-5)
    coef = min(1.0, 0.5 / (expect + 1e-6))
    assert len(grads) == 4
    for n, p in m.named_parameters():
        np.testing.assert_allclose(np.asarray(grads[p]), before[n] * coef, rtol=1e-5)
    after = np.concatenate([np.asarray(grads[p]).ravel() for p in m.parameters()])
    got = (np.abs(after).max() if norm_type == math.inf else
           (np.abs(after) ** norm_type).sum() ** (1 / norm_type))
    assert got <= 0.5 * (1 + 1e-5)


def test_clip_grad_norm_small_and_params():
    m, grads = _grads()
    before = {n: np.asarray(grads[p]) for n, p in m.named_parameters()}
    nn.utils.clip_grad_norm_(grads, 1e9)
    for n, p in m.named_parameters():
        np.testing.assert_allclose(np.asarray(grads[p]), before[n], rtol=1e-6)
    # only the given parameters are measured and scaled
    p0 = m[0].weight
    t = nn.utils.clip_grad_norm_(grads, 0.1, parameters=[p0])
    np.testing.assert_allclose(float(t), np.linalg.norm(before["0.weight"]), rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(grads[p0])), 0.1, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(grads[m[2].weight]), before["2.weight"], rtol=1e-6)


def test_clip_grad_norm_errors():
    w = ad.Var.ones(3)  # in no Module: clipped all the same (the store keys by id)
    u = ad.Var([[12.0]])
    grads = ((w * 2.0).sum() + (u * u).sum() * 0.5).backward()
    t = nn.utils.clip_grad_norm_(grads, 1.0)
    np.testing.assert_allclose(float(t), math.sqrt(12 + 144), rtol=1e-6)
    scale = 1.0 / (math.sqrt(156) + 1e-6)
    np.testing.assert_allclose(np.asarray(grads[w]), [2 * scale] * 3, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grads[u]), [[12 * scale]], rtol=1e-6)
    grads = (w * 2.0).sum().backward()
    t = nn.utils.clip_grad_norm_(grads, 1.0, parameters=[w])
    np.testing.assert_allclose(float(t), math.sqrt(12), rtol=1e-6)
    del w, u
    nn.utils.clip_grad_value_(grads, 0.5)  # the tensor is gone, its entry stays
    assert np.asarray(grads._item(0)[1]).tolist() == [0.5] * 3
    with pytest.raises(TypeError, match="GradStore"):
        nn.utils.clip_grad_norm_([ad.Var.ones(3)], 1.0)
    m, grads = _grads()
    with pytest.raises(ad.InvalidArgumentError):
        nn.utils.clip_grad_norm_(grads, 1.0, norm_type=-1)
    v = ad.Var.ones(2)
    g = (v * float("inf")).sum().backward()
    with pytest.raises(ad.InvalidArgumentError, match="non-finite"):
        nn.utils.clip_grad_norm_(g, 1.0, error_if_nonfinite=True, parameters=[v])


def test_clip_grad_norm_mixed_dtypes():
    a, b = nn.Linear(2, 2), nn.Linear(2, 1).double()
    x = ad.randn((3, 2), seed=5)
    grads = (a(x).sum() + b(x.to_dtype(ad.float64)).sum().to_dtype(ad.float32)).backward()
    flat = np.concatenate([np.asarray(grads[p], dtype=np.float64).ravel()
                           for p in list(a.parameters()) + list(b.parameters())])
    total = nn.utils.clip_grad_norm_(grads, 0.1)
    assert total.dtype is ad.float64
    np.testing.assert_allclose(float(total), np.linalg.norm(flat), rtol=1e-6)
    assert grads[b.weight].dtype is ad.float64 and grads[a.weight].dtype is ad.float32
    after = np.concatenate([np.asarray(grads[p], dtype=np.float64).ravel()
                            for p in list(a.parameters()) + list(b.parameters())])
    np.testing.assert_allclose(np.linalg.norm(after), 0.1, rtol=1e-5)


def test_clip_grad_value():
    m, grads = _grads()
    before = {n: np.asarray(grads[p]) for n, p in m.named_parameters()}
    nn.utils.clip_grad_value_(grads, 0.3)
    for n, p in m.named_parameters():
        np.testing.assert_allclose(np.asarray(grads[p]), np.clip(before[n], -0.3, 0.3))


def test_namespace():
    import importlib

    assert importlib.import_module("pyautodiff.nn.utils") is nn.utils
    assert nn.conv2d is nn.functional.conv2d and nn.cross_entropy is nn.functional.cross_entropy
    for name in nn.__all__:
        assert hasattr(nn, name), name
    assert len(set(nn.__all__)) == len(nn.__all__)
    public = {k for k, v in vars(nn).items() if not k.startswith("_")
              and getattr(v, "__module__", "pyautodiff.nn").startswith("pyautodiff.nn")}
    assert public - set(nn.__all__) == {"module", "modules"}, public - set(nn.__all__)
