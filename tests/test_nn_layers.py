"""Every ad.nn layer against float64 central differences (inputs and
parameters), without PyTorch; plus forward oracles in numpy where they are
short to write."""
import numpy as np
import pytest

import pyautodiff as ad
from nn_harness import module_gradcheck

nn = ad.nn
rng = np.random.default_rng(7)


def r(*shape):
    return rng.standard_normal(shape)


def test_linear_forward_and_grad():
    m = nn.Linear(5, 3).to_dtype(ad.float64)
    x = r(4, 5)
    y = m(ad.tensor(x, dtype=ad.float64))
    np.testing.assert_allclose(np.asarray(y), x @ np.asarray(m.weight).T + np.asarray(m.bias),
                               rtol=1e-12)
    module_gradcheck(m, [x])
    module_gradcheck(nn.Linear(5, 3, bias=False), [r(2, 3, 5)])
    module_gradcheck(nn.Linear(5, 3), [r(5)])


@pytest.mark.parametrize("kw", [dict(stride=2, padding=1), dict(groups=2, dilation=2),
                                dict(padding="same", padding_mode="reflect"),
                                dict(padding=1, padding_mode="replicate"),
                                dict(padding=2, padding_mode="circular")])
def test_conv_layers(kw):
    module_gradcheck(nn.Conv1d(2, 4, 3, **kw), [r(2, 2, 7)])
    module_gradcheck(nn.Conv2d(2, 4, 3, **kw), [r(1, 2, 6, 5)])


def test_conv_transpose2d():
    module_gradcheck(nn.ConvTranspose2d(2, 4, 3, stride=2, padding=1, output_padding=1),
                     [r(1, 2, 3, 4)])
    module_gradcheck(nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1), [r(1, 2, 3, 3)],
                     forward=lambda m, x: m(x, output_size=(6, 6)))


def test_padding_modes_forward():
    """reflect / replicate / circular padding equal numpy.pad's modes."""
    x = r(1, 1, 4, 5)
    for mode, np_mode in (("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")):
        m = nn.Conv2d(1, 1, 3, padding=(1, 2), padding_mode=mode, bias=False)
        m.to_dtype(ad.float64)
        m.weight.set(np.zeros((1, 1, 3, 3)) + np.eye(3)[None, None] * 0)
        w = np.zeros((1, 1, 3, 3))
        w[0, 0, 1, 1] = 1.0  # identity kernel: the output is the padded input's interior
        m.weight.set(w)
        y = np.asarray(m(ad.tensor(x, dtype=ad.float64)))
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2)), mode=np_mode)
        np.testing.assert_allclose(y, padded[:, :, 1:-1, 1:-1], err_msg=mode)


def test_embedding():
    idx = np.array([[1, 0, 3], [3, 3, 9]])
    m = nn.Embedding(10, 4, padding_idx=3)
    assert np.all(np.asarray(m.weight)[3] == 0)
    module_gradcheck(nn.Embedding(10, 4), [idx])
    g = (m(ad.tensor(idx)) * 2.0).sum().backward()[m.weight]
    assert np.all(np.asarray(g)[3] == 0) and np.all(np.asarray(g)[1] == 2)
    m = nn.Embedding(10, 4, max_norm=0.5)
    m(ad.tensor(idx))
    norms = np.linalg.norm(np.asarray(m.weight), axis=1)
    assert np.all(norms[[0, 1, 3, 9]] <= 0.5 + 1e-6)
    e = nn.Embedding.from_pretrained(ad.tensor(r(4, 2)))
    assert list(e.parameters()) == [] and e(ad.tensor([1, 2])).shape == (2, 2)


def test_layer_norm():
    module_gradcheck(nn.LayerNorm((3, 4)), [r(2, 3, 4)])
    module_gradcheck(nn.LayerNorm(4, elementwise_affine=False), [r(2, 4)])


@pytest.mark.parametrize("cls,shape", [(nn.BatchNorm1d, (5, 3)), (nn.BatchNorm1d, (4, 3, 2)),
                                       (nn.BatchNorm2d, (2, 3, 2, 3))])
def test_batch_norm(cls, shape):
    m = cls(3)
    module_gradcheck(m, [r(*shape)])
    m.eval()
    module_gradcheck(m, [r(*shape)])
    module_gradcheck(cls(3, affine=False, track_running_stats=False), [r(*shape)])


def test_batch_norm_running_stats_numpy():
    for momentum in (0.1, None):
        m = nn.BatchNorm2d(2, momentum=momentum).to_dtype(ad.float64)
        rm, rv = np.zeros(2), np.ones(2)
        for step in range(1, 4):
            x = r(3, 2, 2, 2)
            y = np.asarray(m(ad.tensor(x, dtype=ad.float64)))
            mean = x.mean((0, 2, 3))
            var = x.var((0, 2, 3))
            np.testing.assert_allclose(
                y, (x - mean[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5),
                rtol=1e-10, atol=1e-12)
            f = 0.1 if momentum else 1.0 / step
            rm = (1 - f) * rm + f * mean
            rv = (1 - f) * rv + f * x.var((0, 2, 3), ddof=1)
            np.testing.assert_allclose(np.asarray(m.running_mean), rm, rtol=1e-12)
            np.testing.assert_allclose(np.asarray(m.running_var), rv, rtol=1e-12)
        assert int(m.num_batches_tracked) == 3
        m.eval()
        x = r(2, 2, 1, 1)
        np.testing.assert_allclose(np.asarray(m(ad.tensor(x, dtype=ad.float64))),
                                   (x - rm[None, :, None, None]) /
                                   np.sqrt(rv[None, :, None, None] + 1e-5), rtol=1e-10)
        assert int(m.num_batches_tracked) == 3  # eval leaves it


@pytest.mark.parametrize("m", [nn.ReLU(), nn.GELU(), nn.GELU("tanh"), nn.SiLU(), nn.Tanh(),
                               nn.Sigmoid(), nn.Softmax(1), nn.LogSoftmax(-1), nn.Flatten(),
                               nn.Identity()], ids=repr)
def test_activations(m):
    module_gradcheck(m, [r(2, 3, 4) + 0.01])  # off the kink of relu at 0


def test_softmax_implicit_dim_warns():
    with pytest.warns(UserWarning, match="Implicit dimension"):
        y = nn.Softmax()(ad.tensor(r(2, 3)))
    np.testing.assert_allclose(np.asarray(y).sum(1), 1, rtol=1e-6)


def test_dropout():
    m = nn.Dropout(0.5)
    x = ad.ones((200, 100))
    y = np.asarray(m(x))
    assert set(np.unique(y)) <= {0.0, 2.0} and 0.4 < (y == 0).mean() < 0.6
    m.eval()
    assert m(x) is x
    module_gradcheck(nn.Dropout(0.0), [r(3, 4)])


@pytest.mark.parametrize("m", [nn.MaxPool2d(2), nn.MaxPool2d(3, stride=2, padding=1),
                               nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
                               nn.AdaptiveAvgPool2d((2, 3)), nn.AdaptiveAvgPool2d(1),
                               nn.AdaptiveAvgPool2d((3, None))], ids=repr)
def test_pooling(m):
    module_gradcheck(m, [r(2, 2, 5, 6)], n_elems=20)


def test_adaptive_avg_pool_numpy():
    x = r(1, 1, 5, 7)
    y = np.asarray(nn.AdaptiveAvgPool2d((3, 4))(ad.tensor(x, dtype=ad.float64)))
    for i in range(3):
        for j in range(4):
            h0, h1 = (i * 5) // 3, -((-(i + 1) * 5) // 3)
            w0, w1 = (j * 7) // 4, -((-(j + 1) * 7) // 4)
            np.testing.assert_allclose(y[0, 0, i, j], x[0, 0, h0:h1, w0:w1].mean(), rtol=1e-12)


@pytest.mark.parametrize("kw", [dict(), dict(batch_first=True), dict(add_bias_kv=True),
                                dict(add_zero_attn=True, bias=False), dict(kdim=3, vdim=5)])
def test_multihead_attention(kw):
    m = nn.MultiheadAttention(4, 2, **kw)
    kd, vd = kw.get("kdim", 4), kw.get("vdim", 4)
    bf = kw.get("batch_first", False)
    sh = (lambda L, E: (2, L, E)) if bf else (lambda L, E: (L, 2, E))
    module_gradcheck(m, [r(*sh(3, 4)), r(*sh(2, kd)), r(*sh(2, vd))], n_elems=6)
    mask = ad.tensor(np.triu(np.ones((3, 2), dtype=bool), 1))
    module_gradcheck(m, [r(*sh(3, 4)), r(*sh(2, kd)), r(*sh(2, vd))], n_elems=6,
                     forward=lambda m, q, k, v: m(q, k, v, attn_mask=mask,
                                                  average_attn_weights=False))


def test_multihead_attention_numpy():
    """Self-attention in numpy from the same weights."""
    m = nn.MultiheadAttention(4, 2, batch_first=True).to_dtype(ad.float64)
    m.in_proj_bias.set(r(12))
    x = r(1, 3, 4)
    out, w = m(*(ad.tensor(x, dtype=ad.float64),) * 3)
    W, b = np.asarray(m.in_proj_weight), np.asarray(m.in_proj_bias)
    qkv = x[0] @ W.T + b
    q, k, v = np.split(qkv, 3, -1)
    heads, ws = [], []
    for h in range(2):
        s = q[:, 2 * h:2 * h + 2] @ k[:, 2 * h:2 * h + 2].T / np.sqrt(2)
        p = np.exp(s - s.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        ws.append(p)
        heads.append(p @ v[:, 2 * h:2 * h + 2])
    o = np.concatenate(heads, 1) @ np.asarray(m.out_proj.weight).T + np.asarray(m.out_proj.bias)
    np.testing.assert_allclose(np.asarray(out)[0], o, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(w)[0], np.mean(ws, 0), rtol=1e-10)


@pytest.mark.parametrize("kw", [dict(), dict(num_layers=2), dict(bidirectional=True),
                                dict(proj_size=2, batch_first=True)])
def test_lstm(kw):
    m = nn.LSTM(3, 4, **kw)
    x = r(2, 3, 3)
    module_gradcheck(m, [x], n_elems=6)
    d = 2 if kw.get("bidirectional") else 1
    n = kw.get("num_layers", 1) * d
    b = 2 if kw.get("batch_first") else 3
    module_gradcheck(m, [x, r(n, b, kw.get("proj_size") or 4), r(n, b, 4)], n_elems=6,
                     forward=lambda m, x, h, c: m(x, (h, c)))


def test_lstm_numpy():
    m = nn.LSTM(2, 3).to_dtype(ad.float64)
    x = r(4, 1, 2)
    out, (hn, cn) = m(ad.tensor(x, dtype=ad.float64))
    p = {k: np.asarray(v) for k, v in m.named_parameters()}
    h, c = np.zeros((1, 3)), np.zeros((1, 3))
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    outs = []
    for t in range(4):
        g = x[t] @ p["weight_ih_l0"].T + p["bias_ih_l0"] + h @ p["weight_hh_l0"].T + \
            p["bias_hh_l0"]
        i, f, gg, o = np.split(g, 4, -1)
        c = sig(f) * c + sig(i) * np.tanh(gg)
        h = sig(o) * np.tanh(c)
        outs.append(h)
    np.testing.assert_allclose(np.asarray(out), np.stack(outs), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(hn)[0], h, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(cn)[0], c, rtol=1e-10)


def test_sequential_model_gradcheck():
    m = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(8, 3), nn.LogSoftmax(1))
    module_gradcheck(m, [r(2, 1, 4, 4)], n_elems=8)


LAYOUT_CASES = [
    ("Linear", lambda: nn.Linear(4, 3), (2, 4)),
    ("Conv2d", lambda: nn.Conv2d(2, 3, 2, padding=1), (1, 2, 3, 4)),
    ("LayerNorm", lambda: nn.LayerNorm(4), (3, 4)),
    ("BatchNorm1d", lambda: nn.BatchNorm1d(3), (4, 3)),
    ("MaxPool2d", lambda: nn.MaxPool2d(2), (1, 2, 4, 4)),
    ("AdaptiveAvgPool2d", lambda: nn.AdaptiveAvgPool2d((2, 3)), (1, 2, 3, 4)),
    ("GELU", lambda: nn.GELU(), (3, 4)),
    ("Softmax", lambda: nn.Softmax(-1), (3, 4)),
    ("LSTM", lambda: nn.LSTM(4, 2), (3, 2, 4)),
    ("MultiheadAttention", lambda: nn.MultiheadAttention(4, 2, batch_first=True), (2, 3, 4)),
]


@pytest.mark.parametrize("name,make,shape", LAYOUT_CASES, ids=[c[0] for c in LAYOUT_CASES])
def test_input_layouts(name, make, shape):
    """The input gradient is right whether the input is contiguous, a
    transposed, sliced or broadcast view."""
    from gradcheck import check_grad, layouts

    m = make().to_dtype(ad.float64)

    def f(x):
        out = m(x, x, x) if name == "MultiheadAttention" else m(x)
        return out[0] if isinstance(out, tuple) else out

    for lname, base, view in layouts(shape):
        check_grad(f, [base], make=lambda i, t, view=view: view(t), atol=1e-6, rtol=1e-5)
