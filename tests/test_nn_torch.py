"""Interchange with PyTorch, layer by layer: a torch layer's state_dict,
through numpy, loads into the ad layer of the same arguments, and the two
give the same outputs and the same input and parameter gradients (float64).
Skipped when torch is not installed (test_nn_layers.py checks every layer
against finite differences without it)."""
import numpy as np
import pytest

import pyautodiff as ad
from nn_harness import _flat

torch = pytest.importorskip("torch")
nn = ad.nn
tnn = torch.nn


def transfer(tm, am):
    sd = {k: v.detach().cpu().numpy() for k, v in tm.state_dict().items()}
    assert list(sd) == list(am.state_dict()), "state_dict keys and order differ from torch"
    for k, v in am.state_dict().items():
        assert v.shape == sd[k].shape, k
    am.load_state_dict(sd)


def check(tm, am, inputs, fwd=None, atol=1e-10, train=False, int_inputs=()):
    """tm, am: torch and ad modules built with the same arguments."""
    torch.manual_seed(0)
    tm = tm.double()
    am.to_dtype(ad.float64)
    transfer(tm, am)
    tm.train(train)
    am.train(train)
    tm.zero_grad()
    fwd = fwd or (lambda m, *xs: m(*xs))
    txs, axs = [], []
    for i, a in enumerate(inputs):
        a = np.asarray(a)
        if a.dtype.kind == "f":
            txs.append(torch.tensor(a, dtype=torch.float64, requires_grad=True))
            axs.append(ad.Var(a, dtype=ad.float64))
        else:
            txs.append(torch.tensor(a))
            axs.append(ad.tensor(a))
    tout, aout = _flat(fwd(tm, *txs)), _flat(fwd(am, *axs))
    assert len(tout) == len(aout)
    rng = np.random.default_rng(3)
    tl, al = 0, None
    for t, a in zip(tout, aout):
        assert tuple(t.shape) == a.shape
        np.testing.assert_allclose(np.asarray(a), t.detach().numpy(), atol=atol, rtol=1e-9)
        if not t.dtype.is_floating_point:
            continue
        w = rng.uniform(0.5, 1.5, size=tuple(t.shape))
        tl = tl + (t * torch.tensor(w)).sum()
        term = (a * ad.tensor(w, dtype=ad.float64)).sum()
        al = term if al is None else al + term
    tl.backward()
    grads = al.backward()
    for t, a in zip(txs, axs):
        if t.requires_grad:
            expect = t.grad.numpy() if t.grad is not None else np.zeros(tuple(t.shape))
            got = np.asarray(grads[a]) if a in grads else np.zeros(a.shape)
            np.testing.assert_allclose(got, expect, atol=atol, rtol=1e-9, err_msg="input grad")
    tparams = dict(tm.named_parameters())
    aparams = dict(am.named_parameters())
    assert list(tparams) == list(aparams)
    for k, p in tparams.items():
        expect = p.grad.numpy() if p.grad is not None else np.zeros(tuple(p.shape))
        got = np.asarray(grads[aparams[k]]) if aparams[k] in grads else np.zeros(p.shape)
        np.testing.assert_allclose(got, expect, atol=atol, rtol=1e-9, err_msg=f"grad of {k}")
    # buffers (running statistics) after the forward
    tb = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    for k, v in am.state_dict().items():
        np.testing.assert_allclose(np.asarray(v), tb[k], atol=atol, rtol=1e-9, err_msg=k)
    return tm, am


rng = np.random.default_rng(0)


def r(*shape):
    return rng.standard_normal(shape)


@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
    check(tnn.Linear(5, 3, bias=bias), nn.Linear(5, 3, bias=bias), [r(4, 5)])
    check(tnn.Linear(5, 3, bias=bias), nn.Linear(5, 3, bias=bias), [r(2, 3, 5)])
    check(tnn.Linear(5, 3, bias=bias), nn.Linear(5, 3, bias=bias), [r(5)])


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=2, padding=2),
                                dict(groups=2, bias=False), dict(padding="same"),
                                dict(padding=2, padding_mode="reflect"),
                                dict(padding=1, padding_mode="replicate"),
                                dict(padding=2, padding_mode="circular")])
def test_conv1d(kw):
    check(tnn.Conv1d(4, 6, 3, **kw), nn.Conv1d(4, 6, 3, **kw), [r(2, 4, 9)])


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=2, padding=(1, 2)),
                                dict(groups=2, bias=False), dict(padding="same"),
                                dict(padding="valid"),
                                dict(padding=(1, 2), padding_mode="reflect"),
                                dict(padding=1, padding_mode="replicate"),
                                dict(padding=(2, 1), padding_mode="circular")])
def test_conv2d(kw):
    check(tnn.Conv2d(4, 6, 3, **kw), nn.Conv2d(4, 6, 3, **kw), [r(2, 4, 7, 8)])
    check(tnn.Conv2d(4, 6, (2, 3), **kw), nn.Conv2d(4, 6, (2, 3), **kw), [r(4, 6, 5)])


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1),
                                dict(groups=2, bias=False), dict(dilation=2, stride=3)])
def test_conv_transpose2d(kw):
    check(tnn.ConvTranspose2d(4, 6, 3, **kw), nn.ConvTranspose2d(4, 6, 3, **kw), [r(2, 4, 5, 4)])


def test_conv_transpose2d_output_size():
    check(tnn.ConvTranspose2d(2, 3, 3, stride=2, padding=1),
          nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1), [r(1, 2, 4, 5)],
          fwd=lambda m, x: m(x, output_size=[8, 10]))


def test_embedding():
    idx = np.array([[1, 0, 3], [3, 3, 9]])
    check(tnn.Embedding(10, 4), nn.Embedding(10, 4), [idx])
    check(tnn.Embedding(10, 4, padding_idx=3), nn.Embedding(10, 4, padding_idx=3), [idx])
    check(tnn.Embedding(10, 4, padding_idx=-1), nn.Embedding(10, 4, padding_idx=-1), [idx])


def test_embedding_max_norm():
    idx = np.array([[1, 0, 3], [3, 3, 9]])
    t, a = tnn.Embedding(10, 4, max_norm=1.0), nn.Embedding(10, 4, max_norm=1.0)
    check(t, a, [idx])


@pytest.mark.parametrize("kw", [dict(), dict(elementwise_affine=False), dict(bias=False),
                                dict(eps=1e-3)])
def test_layer_norm(kw):
    check(tnn.LayerNorm(5, **kw), nn.LayerNorm(5, **kw), [r(3, 5)])
    check(tnn.LayerNorm((4, 5), **kw), nn.LayerNorm((4, 5), **kw), [r(2, 4, 5)])


@pytest.mark.parametrize("kw", [dict(), dict(momentum=None), dict(affine=False),
                                dict(track_running_stats=False), dict(momentum=0.3, eps=1e-3)])
def test_batch_norm(kw):
    for train in (True, False):
        t, a = tnn.BatchNorm1d(3, **kw), nn.BatchNorm1d(3, **kw)
        if kw.get("track_running_stats", True):
            with torch.no_grad():  # non-trivial running statistics to start from
                t.running_mean.copy_(torch.tensor([0.5, -1.0, 2.0]))
                t.running_var.copy_(torch.tensor([2.0, 0.5, 1.5]))
        check(t, a, [r(6, 3)], train=train)
        check(tnn.BatchNorm1d(3, **kw), nn.BatchNorm1d(3, **kw), [r(4, 3, 5)], train=train)
        check(tnn.BatchNorm2d(3, **kw), nn.BatchNorm2d(3, **kw), [r(4, 3, 2, 5)], train=train)


def test_batch_norm_several_steps():
    """Running statistics over several training steps (momentum and the
    cumulative average), then eval mode, agree with torch."""
    for momentum in (0.1, None):
        t, a = tnn.BatchNorm2d(3, momentum=momentum).double(), nn.BatchNorm2d(3, momentum=momentum)
        a.to_dtype(ad.float64)
        for _ in range(3):
            x = r(4, 3, 2, 2)
            t(torch.tensor(x))
            a(ad.tensor(x, dtype=ad.float64))
        for k, v in a.state_dict().items():
            np.testing.assert_allclose(np.asarray(v), t.state_dict()[k].numpy(), rtol=1e-12)
        assert int(a.num_batches_tracked) == 3
        check(t, a, [r(2, 3, 2, 2)], train=False)


@pytest.mark.parametrize("name,args", [("ReLU", ()), ("GELU", ()), ("GELU", ("tanh",)),
                                       ("SiLU", ()), ("Tanh", ()), ("Sigmoid", ()),
                                       ("Softmax", (1,)), ("LogSoftmax", (1,)),
                                       ("Softmax", (-1,)), ("Flatten", ()), ("Identity", ()),
                                       ("Flatten", (0, 1))])
def test_activations(name, args):
    check(getattr(tnn, name)(*args), getattr(nn, name)(*args), [r(2, 3, 4)])


def test_dropout_eval_and_p0():
    check(tnn.Dropout(0.5), nn.Dropout(0.5), [r(3, 4)], train=False)
    check(tnn.Dropout(0.0), nn.Dropout(0.0), [r(3, 4)], train=True)


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=(2, 3), stride=(1, 2)),
                                dict(kernel_size=3, dilation=2)])
def test_max_pool2d(kw):
    check(tnn.MaxPool2d(**kw), nn.MaxPool2d(**kw), [r(2, 3, 8, 9)])


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1,
                                     count_include_pad=False),
                                dict(kernel_size=2, divisor_override=3)])
def test_avg_pool2d(kw):
    check(tnn.AvgPool2d(**kw), nn.AvgPool2d(**kw), [r(2, 3, 8, 9)])


@pytest.mark.parametrize("size", [1, (2, 3), (3, None), (5, 7), (4, 9), 3])
def test_adaptive_avg_pool2d(size):
    check(tnn.AdaptiveAvgPool2d(size), nn.AdaptiveAvgPool2d(size), [r(2, 3, 8, 9)])
    check(tnn.AdaptiveAvgPool2d(size), nn.AdaptiveAvgPool2d(size), [r(3, 7, 9)])


def _mha_pair(**kw):
    torch.manual_seed(1)
    return tnn.MultiheadAttention(8, 2, **kw), nn.MultiheadAttention(8, 2, **kw)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("kw", [dict(), dict(bias=False), dict(add_bias_kv=True),
                                dict(add_zero_attn=True), dict(kdim=5, vdim=6)])
def test_multihead_attention(batch_first, kw):
    t, a = _mha_pair(batch_first=batch_first, **kw)
    kd, vd = kw.get("kdim", 8), kw.get("vdim", 8)
    shape = (lambda L, E: (2, L, E)) if batch_first else (lambda L, E: (L, 2, E))
    q, k, v = r(*shape(4, 8)), r(*shape(5, kd)), r(*shape(5, vd))
    check(t, a, [q, k, v])
    check(t, a, [q, k, v], fwd=lambda m, q, k, v: m(q, k, v, need_weights=False))
    check(t, a, [q, k, v], fwd=lambda m, q, k, v: m(q, k, v, average_attn_weights=False))
    if not kw:
        check(t, a, [q], fwd=lambda m, x: m(x, x, x))  # self-attention, fused projection


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_masks(batch_first):
    t, a = _mha_pair(batch_first=batch_first)
    shape = (lambda L: (2, L, 8)) if batch_first else (lambda L: (L, 2, 8))
    q, kv = r(*shape(4)), r(*shape(5))
    causal = np.triu(np.ones((4, 5), dtype=bool), 2)
    fmask = r(4, 5)
    f3 = r(2 * 2, 4, 5)
    kpm = np.array([[False, False, True, False, True], [False] * 5])
    for kws in [dict(attn_mask=causal), dict(attn_mask=fmask), dict(attn_mask=f3),
                dict(key_padding_mask=kpm), dict(key_padding_mask=kpm, attn_mask=causal),
                dict(attn_mask=causal, is_causal=True)]:
        def tf(m, q, kv, kws=kws):
            conv = {k: (torch.tensor(v) if isinstance(v, np.ndarray) else v)
                    for k, v in kws.items()}
            return m(q, kv, kv, **conv)

        def af(m, q, kv, kws=kws):
            conv = {k: (ad.tensor(v, dtype=ad.float64 if v.dtype.kind == "f" else None)
                        if isinstance(v, np.ndarray) else v) for k, v in kws.items()}
            return m(q, kv, kv, **conv)

        torch.manual_seed(1)
        tm = tnn.MultiheadAttention(8, 2, batch_first=batch_first)
        am = nn.MultiheadAttention(8, 2, batch_first=batch_first)
        check(tm, am, [q, kv], fwd=lambda m, q, kv: (tf if isinstance(m, tnn.Module) else af)(
            m, q, kv))


def test_multihead_attention_unbatched():
    t, a = _mha_pair()
    check(t, a, [r(4, 8), r(5, 8), r(5, 8)])
    check(t, a, [r(4, 8), r(5, 8), r(5, 8)],
          fwd=lambda m, q, k, v: m(q, k, v, average_attn_weights=False))


@pytest.mark.parametrize("kw", [dict(), dict(num_layers=2), dict(batch_first=True),
                                dict(bias=False), dict(bidirectional=True),
                                dict(num_layers=2, bidirectional=True, batch_first=True),
                                dict(proj_size=2), dict(num_layers=2, proj_size=2)])
def test_lstm(kw):
    torch.manual_seed(2)
    t, a = tnn.LSTM(3, 4, **kw), nn.LSTM(3, 4, **kw)
    x = r(2, 5, 3) if kw.get("batch_first") else r(5, 2, 3)
    check(t, a, [x])
    d = 2 if kw.get("bidirectional") else 1
    layers = kw.get("num_layers", 1)
    hsz = kw.get("proj_size") or 4
    h0, c0 = r(d * layers, 2, hsz), r(d * layers, 2, 4)
    check(t, a, [x, h0, c0], fwd=lambda m, x, h, c: m(x, (h, c)))
    check(t, a, [r(5, 3)])  # unbatched


def test_sequential_cnn_and_names():
    torch.manual_seed(3)
    t = tnn.Sequential(tnn.Conv2d(1, 4, 3, padding=1), tnn.BatchNorm2d(4), tnn.ReLU(),
                       tnn.MaxPool2d(2), tnn.Conv2d(4, 8, 3, padding=1), tnn.ReLU(),
                       tnn.AdaptiveAvgPool2d(2), tnn.Flatten(), tnn.Linear(32, 10))
    a = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 10))
    assert [n for n, _ in a.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert list(a.state_dict()) == list(t.state_dict())
    assert repr(a) == repr(t)
    check(t, a, [r(3, 1, 8, 8)], train=True)
    check(t, a, [r(3, 1, 8, 8)], train=False)


def test_custom_module_names_and_repr():
    def block_class(mnn, ones):
        # one source for both libraries: the same user code must give the same module
        class Block(mnn.Module):
            def __init__(self):
                super().__init__()
                self.attn = mnn.MultiheadAttention(8, 2, batch_first=True)
                self.norm = mnn.LayerNorm(8)
                self.layers = mnn.ModuleList([mnn.Linear(8, 8), mnn.GELU()])
                self.heads = mnn.ModuleDict({"a": mnn.Linear(8, 2), "b": mnn.Linear(8, 3)})
                self.scale = mnn.Parameter(ones(8))

            def forward(self, x):
                y, _ = self.attn(x, x, x, need_weights=False)
                x = self.norm(x + y) * self.scale
                for m in self.layers:
                    x = m(x)
                return self.heads["a"](x), self.heads["b"](x)

        return Block

    t, a = block_class(tnn, torch.ones)(), block_class(nn, ad.ones)()
    assert repr(a) == repr(t)
    assert list(a.state_dict()) == list(t.state_dict())
    check(t, a, [r(2, 5, 8)])


def test_default_init_distributions():
    """Default initialisation matches torch's distributions (bounds and moments)."""
    def layers(mnn):
        return {"Linear": mnn.Linear(400, 300), "Conv2d": mnn.Conv2d(16, 32, 5),
                "ConvTranspose2d": mnn.ConvTranspose2d(16, 32, 5),
                "Conv1d": mnn.Conv1d(16, 32, 7), "Embedding": mnn.Embedding(500, 64),
                "LSTM": mnn.LSTM(30, 100), "MultiheadAttention": mnn.MultiheadAttention(128, 4)}

    ad_layers, t_layers = layers(nn), layers(tnn)
    for name, am in ad_layers.items():
        tp = dict(t_layers[name].named_parameters())
        for k, p in am.named_parameters():
            a, b = np.asarray(p), tp[k].detach().numpy()
            assert a.shape == b.shape and a.dtype == b.dtype, (name, k)
            if b.std() == 0:
                np.testing.assert_array_equal(a, b, err_msg=f"{name}.{k}")
                continue
            if a.size < 2000:  # a small sample: only the bound of the uniform draw
                assert np.abs(a).max() <= np.abs(b).max() * 1.3, (name, k)
                continue
            if name != "Embedding":  # uniform draws: the largest value is near the bound
                np.testing.assert_allclose(np.abs(a).max(), np.abs(b).max(), rtol=0.05,
                                           err_msg=f"{name}.{k} max")
            np.testing.assert_allclose(a.std(), b.std(), rtol=0.05, err_msg=f"{name}.{k} std")
            assert abs(a.mean()) < 4 * b.std() / np.sqrt(a.size) + 1e-12, (name, k)


def test_load_torch_state_dict_directly():
    """torch tensors (CPU, detached, as state_dict() gives them) load without
    an explicit numpy conversion; a float64 torch checkpoint into a float32
    model is refused with both dtypes named."""
    torch.manual_seed(4)
    t = tnn.Sequential(tnn.Linear(3, 4), tnn.LayerNorm(4), tnn.Linear(4, 2))
    a = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    a.load_state_dict(t.state_dict())
    x = r(5, 3).astype(np.float32)
    np.testing.assert_allclose(np.asarray(a(ad.tensor(x))), t(torch.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ad.DTypeError, match="0.weight: checkpoint float64"):
        a.load_state_dict(t.double().state_dict())


def test_multihead_attention_fully_masked_rows():
    """A query every key is masked for: NaN with need_weights=True and zero
    attention with need_weights=False, as torch's two paths give."""
    t, a = _mha_pair(batch_first=True)
    kpm = np.array([[True] * 3, [False, True, False]])
    check(t, a, [r(2, 3, 8)], fwd=lambda m, x: m(x, x, x, need_weights=False, key_padding_mask=(
        torch.tensor(kpm) if isinstance(m, tnn.Module) else ad.tensor(kpm))))
    with torch.no_grad():
        tx = torch.tensor(r(2, 3, 8))
        o, w = t.double()(tx, tx, tx, key_padding_mask=torch.tensor(kpm))
    a.to_dtype(ad.float64)
    ao, aw = a(*(ad.tensor(tx.numpy(), dtype=ad.float64),) * 3, key_padding_mask=ad.tensor(kpm))
    assert np.isnan(o.numpy()[0]).all() and np.isnan(np.asarray(ao)[0]).all()
    np.testing.assert_allclose(np.asarray(ao)[1], o.numpy()[1], rtol=1e-9, atol=1e-12)
