"""Bad input to every ad.nn layer: constructors and forwards raise an
ad.Error subclass whose message names the layer, the argument and the
shapes/dtypes; nothing leaks (the autouse fixture checks)."""
import numpy as np
import pytest

import pyautodiff as ad

nn = ad.nn


def f32(*shape):
    return ad.zeros(shape)


def f64(*shape):
    return ad.zeros(shape, dtype=ad.float64)


CONSTRUCTORS = [
    (lambda: nn.Linear(0, 3), "Linear", "in_features"),
    (lambda: nn.Linear(3, 2.5), "Linear", "out_features"),
    (lambda: nn.Linear(3, 2, dtype=ad.int64), "Linear", "int64"),
    (lambda: nn.Linear(3, 2, device="cuda"), "Linear", "device"),
    (lambda: nn.Conv2d(3, 4, 0), "Conv2d", "kernel_size"),
    (lambda: nn.Conv2d(3, 4, (3, 3, 3)), "Conv2d", "kernel_size"),
    (lambda: nn.Conv2d(3, 4, 3, groups=2), "Conv2d", "groups"),
    (lambda: nn.Conv2d(4, 3, 3, groups=2), "Conv2d", "groups"),
    (lambda: nn.Conv2d(3, 4, 3, padding=-1), "Conv2d", "padding"),
    (lambda: nn.Conv2d(3, 4, 3, padding="full"), "Conv2d", "padding"),
    (lambda: nn.Conv2d(3, 4, 3, stride=2, padding="same"), "Conv2d", "stride"),
    (lambda: nn.Conv2d(3, 4, 3, padding_mode="mirror"), "Conv2d", "padding_mode"),
    (lambda: nn.Conv1d(3, 4, 3, stride=0), "Conv1d", "stride"),
    (lambda: nn.ConvTranspose2d(3, 4, 3, output_padding=1), "ConvTranspose2d",
     "output_padding"),
    (lambda: nn.ConvTranspose2d(3, 4, 3, padding_mode="reflect"), "ConvTranspose2d",
     "padding mode"),
    (lambda: nn.Embedding(0, 3), "Embedding", "num_embeddings"),
    (lambda: nn.Embedding(5, 3, padding_idx=5), "Embedding", "padding_idx"),
    (lambda: nn.Embedding(5, 3, sparse=True), "Embedding", "sparse"),
    (lambda: nn.LayerNorm(()), "LayerNorm", "normalized_shape"),
    (lambda: nn.LayerNorm("a"), "LayerNorm", "normalized_shape"),
    (lambda: nn.BatchNorm1d(0), "BatchNorm1d", "num_features"),
    (lambda: nn.BatchNorm2d(3, eps=-1), "BatchNorm2d", "eps"),
    (lambda: nn.Dropout(1.5), "Dropout", "p"),
    (lambda: nn.GELU("fast"), "GELU", "approximate"),
    (lambda: nn.MaxPool2d(2, padding=2), "MaxPool2d", "padding"),
    (lambda: nn.MaxPool2d(0), "MaxPool2d", "kernel_size"),
    (lambda: nn.MaxPool2d(2, return_indices=True), "MaxPool2d", "return_indices"),
    (lambda: nn.AvgPool2d(2, stride=0), "AvgPool2d", "stride"),
    (lambda: nn.AvgPool2d(2, divisor_override=0), "AvgPool2d", "divisor_override"),
    (lambda: nn.AdaptiveAvgPool2d(0), "AdaptiveAvgPool2d", "output_size"),
    (lambda: nn.AdaptiveAvgPool2d((1, 2, 3)), "AdaptiveAvgPool2d", "output_size"),
    (lambda: nn.MultiheadAttention(10, 3), "MultiheadAttention", "num_heads"),
    (lambda: nn.MultiheadAttention(8, 2, dropout=2.0), "MultiheadAttention", "dropout"),
    (lambda: nn.LSTM(3, 0), "LSTM", "hidden_size"),
    (lambda: nn.LSTM(3, 4, num_layers=0), "LSTM", "num_layers"),
    (lambda: nn.LSTM(3, 4, proj_size=4), "LSTM", "proj_size"),
    (lambda: nn.LSTM(3, 4, dropout=-0.1), "LSTM", "dropout"),
    # sizes that cannot be allocated: the allocator's error, naming the layer and the parameter
    (lambda: nn.Linear(4, 2 ** 40), "Linear", "weight of shape (1099511627776, 4)"),
    (lambda: nn.Linear(2 ** 63, 3), "Linear", "weight"),
    (lambda: nn.Conv2d(2, 4, 2 ** 31), "Conv2d", "weight"),
    (lambda: nn.Embedding(2 ** 62, 2), "Embedding", "weight"),
    (lambda: nn.LayerNorm(2 ** 63), "LayerNorm", "weight"),
    (lambda: nn.BatchNorm2d(2 ** 63), "BatchNorm2d", "weight"),
    (lambda: nn.BatchNorm2d(2 ** 63, affine=False), "BatchNorm2d", "running_mean"),
    (lambda: nn.MultiheadAttention(2 ** 40, 1), "MultiheadAttention", "in_proj_weight"),
    (lambda: nn.MultiheadAttention(8, 1, kdim=2 ** 63), "MultiheadAttention", "k_proj_weight"),
    (lambda: nn.LSTM(3, 2 ** 40), "LSTM", "weight_ih_l0"),
    # arguments of an odd type: the layer's own error, not a numpy or operator one
    (lambda: nn.Linear(3, 2, dtype=ad.tensor(3)), "Linear", "dtype"),
    (lambda: nn.Conv2d(3, 4, 3, padding_mode=ad.tensor(3)), "Conv2d", "padding_mode"),
    (lambda: nn.GELU(ad.tensor(3)), "GELU", "approximate"),
    (lambda: nn.MaxPool2d(2, stride=np.int64(-2)), "MaxPool2d", "stride"),
    (lambda: nn.AvgPool2d(2, stride=ad.tensor(3)), "AvgPool2d", "stride"),
    (lambda: nn.LogSoftmax("a"), "LogSoftmax", "dim"),
]


@pytest.mark.parametrize("make,layer,arg", CONSTRUCTORS,
                         ids=[f"{c[1]}-{c[2]}-{i}" for i, c in enumerate(CONSTRUCTORS)])
def test_constructor_errors(make, layer, arg):
    with pytest.raises(ad.Error) as ei:
        make()
    msg = str(ei.value)
    assert layer in msg and arg in msg, msg


FORWARDS = [
    # (layer, input(s), error class, words in the message)
    (lambda: nn.Linear(64, 3), lambda: f32(5, 32), ad.ShapeError,
     ["Linear(in_features=64)", "input float32 (5, 32) has 32 features"]),
    (lambda: nn.Linear(4, 3), lambda: f64(5, 4), ad.DTypeError,
     ["Linear(in_features=4)", "float64 (5, 4)", "float32 parameters"]),
    (lambda: nn.Linear(4, 3), lambda: ad.zeros((5, 4), dtype=ad.int64), ad.DTypeError,
     ["Linear(in_features=4)", "int64 (5, 4)", "floating-point"]),
    (lambda: nn.Linear(4, 3), lambda: np.zeros((5, 4), np.float32), ad.DTypeError,
     ["Linear(in_features=4)", "ad.Tensor", "ndarray"]),
    (lambda: nn.Linear(4, 3), lambda: f32(), ad.ShapeError, ["Linear(in_features=4)", "()"]),
    (lambda: nn.Conv2d(3, 4, 3), lambda: f32(2, 5, 8, 8), ad.ShapeError,
     ["Conv2d(3, 4, kernel_size=3)", "(2, 5, 8, 8)", "5 channels", "expected 3"]),
    (lambda: nn.Conv2d(3, 4, 3), lambda: f32(3, 8), ad.ShapeError,
     ["Conv2d(3, 4, kernel_size=3)", "(3, 8)", "3-d or 4-d"]),
    (lambda: nn.Conv2d(3, 4, 5), lambda: f32(2, 3, 3, 8), ad.ShapeError,
     ["Conv2d(3, 4, kernel_size=5)", "(2, 3, 3, 8)", "smaller than the kernel"]),
    (lambda: nn.Conv2d(3, 4, 3), lambda: f64(2, 3, 8, 8), ad.DTypeError,
     ["Conv2d", "float64 (2, 3, 8, 8)"]),
    (lambda: nn.Conv2d(1, 1, 3, padding=4, padding_mode="reflect"), lambda: f32(1, 1, 4, 4),
     ad.ShapeError, ["Conv2d", "reflect", "(1, 1, 4, 4)"]),
    (lambda: nn.Conv1d(3, 4, 3), lambda: f32(2, 4, 8), ad.ShapeError,
     ["Conv1d(3, 4, kernel_size=3)", "(2, 4, 8)", "4 channels"]),
    (lambda: nn.ConvTranspose2d(3, 4, 3), lambda: f32(1, 2, 4, 4), ad.ShapeError,
     ["ConvTranspose2d(3, 4, kernel_size=3)", "(1, 2, 4, 4)"]),
    (lambda: nn.Embedding(5, 3), lambda: ad.tensor([[1, 5]]), ad.OutOfRangeError,
     ["Embedding(5, 3)", "int64 (1, 2)", "index 5"]),
    (lambda: nn.Embedding(5, 3), lambda: ad.tensor([[-1, 2]]), ad.OutOfRangeError,
     ["Embedding(5, 3)", "index -1"]),
    (lambda: nn.Embedding(5, 3), lambda: f32(2), ad.DTypeError,
     ["Embedding(5, 3)", "float32 (2,)", "integer"]),
    (lambda: nn.LayerNorm(4), lambda: f32(2, 5), ad.ShapeError,
     ["LayerNorm((4,))", "float32 (2, 5)", "(4,)"]),
    (lambda: nn.BatchNorm1d(3), lambda: f32(4, 2), ad.ShapeError,
     ["BatchNorm1d(3)", "(4, 2)", "2 channels"]),
    (lambda: nn.BatchNorm1d(3), lambda: f32(1, 3), ad.ShapeError,
     ["BatchNorm1d(3)", "(1, 3)", "more than 1 value"]),
    (lambda: nn.BatchNorm2d(3), lambda: f32(4, 3, 2), ad.ShapeError,
     ["BatchNorm2d(3)", "(4, 3, 2)", "4-d"]),
    (lambda: nn.Dropout(), lambda: ad.zeros(3, dtype=ad.int64), ad.DTypeError,
     ["Dropout(p=0.5)", "int64 (3,)"]),
    (lambda: nn.ReLU(), lambda: ad.zeros(3, dtype=ad.int32), ad.DTypeError,
     ["ReLU()", "int32 (3,)"]),
    (lambda: nn.Softmax(2), lambda: f32(2, 3), ad.OutOfRangeError,
     ["Softmax(dim=2)", "(2, 3)"]),
    (lambda: nn.Flatten(2), lambda: f32(2, 3), ad.ShapeError, ["Flatten", "(2, 3)"]),
    (lambda: nn.MaxPool2d(3), lambda: f32(1, 2, 2, 5), ad.ShapeError,
     ["MaxPool2d(kernel_size=3)", "(1, 2, 2, 5)"]),
    (lambda: nn.AvgPool2d(2), lambda: f32(2, 5), ad.ShapeError,
     ["AvgPool2d(kernel_size=2)", "(2, 5)", "(N, C, H, W)"]),
    (lambda: nn.AdaptiveAvgPool2d(2), lambda: f32(5), ad.ShapeError,
     ["AdaptiveAvgPool2d(output_size=2)", "(5,)"]),
    (lambda: nn.MultiheadAttention(8, 2), lambda: (f32(4, 2, 6), f32(4, 2, 8), f32(4, 2, 8)),
     ad.ShapeError, ["MultiheadAttention(embed_dim=8, num_heads=2)", "(4, 2, 6)", "6 features"]),
    (lambda: nn.MultiheadAttention(8, 2), lambda: (f32(4, 2, 8), f32(5, 3, 8), f32(5, 3, 8)),
     ad.ShapeError, ["MultiheadAttention", "(5, 3, 8)", "batch"]),
    (lambda: nn.MultiheadAttention(8, 2), lambda: (f32(4, 2, 8), f32(5, 8), f32(5, 8)),
     ad.ShapeError, ["MultiheadAttention", "(4, 2, 8)", "(5, 8)"]),
    (lambda: nn.LSTM(3, 4), lambda: f32(5, 2, 4), ad.ShapeError,
     ["LSTM(3, 4)", "float32 (5, 2, 4)", "4 features", "input_size 3"]),
    (lambda: nn.LSTM(3, 4), lambda: f32(5, 2, 3, 1), ad.ShapeError, ["LSTM(3, 4)", "(5, 2, 3, 1)"]),
    # errors found in the functional call carry the layer's name too
    (lambda: nn.Conv2d(2, 4, 3, stride=2 ** 63), lambda: f32(1, 2, 5, 5), ad.InvalidArgumentError,
     ["Conv2d(2, 4, kernel_size=3", "stride"]),
    (lambda: nn.Conv1d(2, 4, 3, padding=2 ** 62), lambda: f32(1, 2, 5), ad.InvalidArgumentError,
     ["Conv1d(2, 4, kernel_size=3", "padding"]),
    (lambda: nn.ConvTranspose2d(2, 4, 3, stride=2 ** 40), lambda: f32(1, 2, 5, 5),
     ad.InvalidArgumentError, ["ConvTranspose2d(2, 4, kernel_size=3", "stride"]),
    (lambda: nn.ConvTranspose2d(2, 4, 3), lambda: f32(1, 2, 0, 5), ad.ShapeError,
     ["ConvTranspose2d(2, 4, kernel_size=3", "(1, 2, 0, 5)", "empty spatial dim"]),
    (lambda: nn.MaxPool2d(2, stride=2 ** 63), lambda: f32(1, 2, 5, 5), ad.InvalidArgumentError,
     ["MaxPool2d(kernel_size=2)", "stride"]),
    (lambda: nn.AvgPool2d(2), lambda: f32(0, 5, 3), ad.ShapeError,
     ["AvgPool2d(kernel_size=2)", "(1, 0, 5, 3)", "empty channel"]),
    (lambda: nn.AdaptiveAvgPool2d(2 ** 62), lambda: f32(1, 2, 5, 5), ad.InvalidArgumentError,
     ["AdaptiveAvgPool2d(output_size=4611686018427387904)", "output_size"]),
    (lambda: nn.AdaptiveAvgPool2d(2 ** 30), lambda: f32(1, 2, 5, 5), ad.OutOfMemoryError,
     ["AdaptiveAvgPool2d(output_size=1073741824)", "(1, 2, 5, 5)"]),
    (lambda: nn.Embedding(5, 3), lambda: ad.tensor([1], dtype=ad.uint8), ad.DTypeError,
     ["Embedding(5, 3)", "uint8 (1,)", "int64 or int32"]),
]


@pytest.mark.parametrize("make,inp,exc,words", FORWARDS,
                         ids=[f"{i}" for i in range(len(FORWARDS))])
def test_forward_errors(make, inp, exc, words):
    m = make()
    x = inp()
    args = x if isinstance(x, tuple) else (x,)
    with pytest.raises(exc) as ei:
        m(*args)
    assert isinstance(ei.value, ad.Error)
    for w in words:
        assert w in str(ei.value), (w, str(ei.value))


def test_attention_mask_errors():
    m = nn.MultiheadAttention(8, 2)
    q = f32(4, 2, 8)
    with pytest.raises(ad.ShapeError, match=r"attn_mask bool \(3, 3\)"):
        m(q, q, q, attn_mask=ad.zeros((3, 3), dtype=ad.bool))
    with pytest.raises(ad.ShapeError, match=r"key_padding_mask bool \(4, 2\)"):
        m(q, q, q, key_padding_mask=ad.zeros((4, 2), dtype=ad.bool))
    with pytest.raises(ad.DTypeError, match=r"attn_mask int64 \(4, 4\)"):
        m(q, q, q, attn_mask=ad.zeros((4, 4), dtype=ad.int64))
    with pytest.raises(ad.DTypeError, match=r"attn_mask float64 \(4, 4\)"):
        m(q, q, q, attn_mask=f64(4, 4))
    with pytest.raises(ad.InvalidArgumentError, match="is_causal"):
        m(q, q, q, is_causal=True)


def test_lstm_state_errors():
    m = nn.LSTM(3, 4, num_layers=2)
    x = f32(5, 2, 3)
    with pytest.raises(ad.ShapeError, match=r"h_0 float32 \(1, 2, 4\) must have shape \(2, 2, 4\)"):
        m(x, (f32(1, 2, 4), f32(2, 2, 4)))
    with pytest.raises(ad.InvalidArgumentError, match="pair"):
        m(x, f32(2, 2, 4))
    with pytest.raises(ad.DTypeError, match="c_0 float64"):
        m(x, (f32(2, 2, 4), f64(2, 2, 4)))


def test_conv_transpose_output_size_errors():
    m = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    x = f32(1, 2, 4, 5)
    with pytest.raises(ad.ShapeError, match="output_size"):
        m(x, output_size=(20, 20))
    with pytest.raises(ad.ShapeError, match="output_size"):
        m(x, output_size=(8,))


def test_init_and_clip_arguments_of_the_wrong_type_raise_naming_them():
    # fuzz_args: float(None) / float("x") / None * gain raised bare TypeErrors
    # and ValueErrors, trunc_normal_(std=0) a ZeroDivisionError, a numpy
    # array as mode or nonlinearity numpy's "truth value is ambiguous"
    I = ad.nn.init
    w = ad.Var.zeros(3, 4)
    s = (w * w).sum().backward()
    for f, pat in [(lambda: I.uniform_(w, None), "uniform_: a must be a real number"),
                   (lambda: I.normal_(w, "1"), "normal_: mean must be a real number"),
                   (lambda: I.constant_(w, None), "constant_: val must be a real number"),
                   (lambda: I.xavier_uniform_(w, [1]), "xavier_uniform_: gain"),
                   (lambda: I.xavier_normal_(w, None), "xavier_normal_: gain"),
                   (lambda: I.kaiming_uniform_(w, 0, np.ones(2)), "mode .* not supported"),
                   (lambda: I.kaiming_normal_(w, 0, "fan_in", np.ones(2)),
                    "nonlinearity must be a str"),
                   (lambda: I.trunc_normal_(w, None), "trunc_normal_: mean"),
                   (lambda: I.trunc_normal_(w, 0.0, 0.0), "std must be positive"),
                   (lambda: ad.nn.utils.clip_grad_norm_(s, None), "max_norm must be a real"),
                   (lambda: ad.nn.utils.clip_grad_norm_(s, 1.0, "2"), "norm_type must be"),
                   (lambda: ad.nn.utils.clip_grad_value_(s, []), "clip_value must be")]:
        with pytest.raises(ad.InvalidArgumentError, match=pat):
            f()
    assert w.tolist() == [[0.0] * 4] * 3
    I.constant_(w, np.float32(2.0))
    assert w.tolist() == [[2.0] * 4] * 3


def test_container_arguments_and_gain_edges():
    # fuzz_args: ModuleDict(1.5) raised a bare "'float' object is not
    # iterable", ModuleList(np.array(2)) numpy's "iteration over a 0-d array",
    # calculate_gain("leaky_relu", 1e308) OverflowError from slope ** 2
    with pytest.raises(TypeError, match="ModuleDict.update should be called with a mapping"):
        ad.nn.ModuleDict(1.5)
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable"):
        ad.nn.ModuleList(np.array(2))
    with pytest.raises(TypeError, match="ModuleDict.update should be called with a mapping"):
        ad.nn.ModuleDict(np.array(2))
    assert len(ad.nn.ModuleList(iter([ad.nn.ReLU()]))) == 1
    assert ad.nn.init.calculate_gain("leaky_relu", 1e308) == 0.0
    assert ad.nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx((2 / 1.04) ** 0.5)
