"""Higher-order gradients: backward(create_graph=True) and ad.grad(...,
create_graph=True) record the backward pass, so gradients can be
differentiated again (issue 15 item 1).

The core check is gradgradcheck, run over every differentiable op of the
registry: differentiate a random projection <grad f, v> of the gradient and
compare with float64 central differences of that projection, whose gradients
come from plain backward."""
import numpy as np
import pytest

import pyautodiff as ad
from pyautodiff._lib import ffi, lib
from pyautodiff.tensor import _call

from gradcheck import check_grad

F64 = ad.float64


def _info(op):
    out = ffi.new("ad_op_info_t *")
    assert lib.ad_op_info(op, out) == lib.AD_OK
    return out


OPS = {ffi.string(lib.ad_op_name(getattr(lib, n))).decode(): getattr(lib, n)
       for n in dir(lib) if n.startswith("AD_OP_") and n not in ("AD_OP_NONE", "AD_OP__COUNT")}
DIFFERENTIABLE = sorted(n for n, op in OPS.items() if _info(op).differentiable)

# Ops with a backward that cannot be reached through the generic entry, so
# the table below cannot call them; each is covered elsewhere.
NOT_IN_TABLE = {
    # an ad.Function's node, recorded only by ad_custom_record: its backward
    # is the user's Python code (tests of ad.Function cover create_graph)
    "custom",
}


def _grads(loss, xs, create_graph):
    return ad.grad(loss, xs, create_graph=create_graph, allow_unused=True)


def _projection(f, arrays, consts, wrt, w, v, create_graph):
    """sum_i <d/dx_i sum(f * w), v_i> and the Vars, with the gradients taken
    with or without create_graph."""
    xs = [ad.Var(a, dtype=F64) for a in arrays]
    y = f(*xs, *consts)
    loss = (y * w).sum() if w is not None else y.sum()
    gs = _grads(loss, [xs[i] for i in wrt], create_graph)
    p = None
    for g, vi in zip(gs, v):
        if g is None:
            continue
        term = (g * vi).sum()
        p = term if p is None else p + term
    return p, xs, gs


def gradgradcheck(f, inputs, consts=(), wrt=None, atol=1e-6, rtol=1e-5, eps=1e-5, seed=0):
    """Second-order check of f(*inputs, *consts) (inputs float, consts fixed
    tensors such as indices): the gradient of P = sum_i <grad_i, v_i>,
    grad_i = d sum(f * w) / d input_i, is compared with central differences
    of P; the first-order gradients under create_graph must equal plain
    backward's."""
    arrays = [np.array(a, dtype=np.float64) for a in inputs]
    wrt = list(range(len(arrays))) if wrt is None else list(wrt)
    rng = np.random.default_rng(seed)
    with ad.no_grad():
        y0 = f(*[ad.tensor(a, dtype=F64) for a in arrays], *consts)
    w = ad.tensor(rng.uniform(0.5, 1.5, size=y0.shape), dtype=F64) if y0.ndim else None
    v = [ad.tensor(rng.standard_normal(arrays[i].shape), dtype=F64) for i in wrt]

    p, xs, gs = _projection(f, arrays, consts, wrt, w, v, create_graph=True)
    _, _, plain = _projection(f, arrays, consts, wrt, w, v, create_graph=False)
    for i, g, q in zip(wrt, gs, plain):
        assert (g is None) == (q is None), f"input {i}: create_graph changed which grads exist"
        if g is not None:
            np.testing.assert_allclose(np.asarray(g), np.asarray(q), rtol=1e-12, atol=1e-12,
                                       err_msg=f"first-order gradient of input {i}")
    if p is not None and p.track_op:
        hv = ad.grad(p, [xs[i] for i in wrt], allow_unused=True)
    else:  # every gradient is constant in the inputs (f linear in them)
        hv = [None] * len(wrt)
    analytic = [np.zeros_like(arrays[i]) if h is None else np.asarray(h)
                for i, h in zip(wrt, hv)]
    del p, xs, gs, plain, hv

    def proj(arrs):
        q, _, _ = _projection(f, arrs, consts, wrt, w, v, create_graph=False)
        return 0.0 if q is None else q.item()

    for k, i in enumerate(wrt):
        num = np.zeros_like(arrays[i])
        flat, nflat = arrays[i].reshape(-1), num.reshape(-1)
        for j in range(flat.size):
            old = flat[j]
            flat[j] = old + eps
            up = proj(arrays)
            flat[j] = old - eps
            down = proj(arrays)
            flat[j] = old
            nflat[j] = (up - down) / (2 * eps)
        np.testing.assert_allclose(analytic[k], num, atol=atol, rtol=rtol,
                                   err_msg=f"second-order gradient of input {i}")
    return analytic


# ---- the table: every differentiable op, called through the generic entry -------------------
_rng = np.random.default_rng(7)


def _away(shape, lo=0.3, hi=1.3, signed=True):
    """values with |x| in [lo, hi]: away from the kinks at 0"""
    a = _rng.uniform(lo, hi, size=shape)
    return a * _rng.choice([-1.0, 1.0], size=shape) if signed else a


def _distinct(shape):
    """values at least 0.05 apart: no ties within eps, so max/argmax are stable"""
    n = int(np.prod(shape))
    return (_rng.permutation(n) * 0.05 - 0.5 * 0.05 * n + 0.013).reshape(shape)


def _i64(a):
    return ad.tensor(np.asarray(a, dtype=np.int64))


def op_(name, iargs=(), fargs=()):
    op = OPS[name]
    return lambda *ts: _call(op, ts, iargs, fargs)


def _unary(name, signed=True, lo=0.3, hi=1.3, fargs=()):
    return [(op_(name, fargs=fargs), [_away((2, 3), lo, hi, signed)], (), None)]


def _scalar(name, s, signed=True):
    return _unary(name, signed=signed, fargs=(s,))


def _reduce(name):
    return [(op_(name, (0, 1)), [_distinct((3, 4))], (), None),
            (op_(name, (1, 0)), [_distinct((3, 4))], (), None),
            (op_(name, (0,)), [_distinct((2, 3))], (), None)]


IDX = [2, 0, 2]
IDX2 = [[1, 3], [0, 0], [2, 1]]
COND = [[True, False, True], [False, True, True]]
POOL = (2, 2, 2, 2, 0, 0, 1, 1)
POOL_OVERLAP = (3, 3, 1, 2, 1, 1, 1, 1)

CASES = {
    "add": [(op_("add"), [_away((2, 3)), _away((3,))], (), None)],
    "sub": [(op_("sub"), [_away((2, 3)), _away((2, 1))], (), None)],
    "mul": [(op_("mul"), [_away((2, 3)), _away((3,))], (), None)],
    "div": [(op_("div"), [_away((2, 3)), _away((2, 3))], (), None)],
    "maximum": [(op_("maximum"), [_distinct((2, 3)), _distinct((2, 3)) + 0.021], (), None)],
    "minimum": [(op_("minimum"), [_distinct((2, 3)), _distinct((2, 3)) + 0.021], (), None)],
    "pow": [(op_("pow"), [_away((2, 3), signed=False), _away((2, 3))], (), None)],
    "neg": _unary("neg"), "exp": _unary("exp"), "log": _unary("log", signed=False),
    "sqr": _unary("sqr"), "sqrt": _unary("sqrt", signed=False), "relu": _unary("relu"),
    "tanh": _unary("tanh"), "abs": _unary("abs"), "recip": _unary("recip"),
    "sin": _unary("sin"), "cos": _unary("cos"), "sigmoid": _unary("sigmoid"),
    "gelu": _unary("gelu"), "gelu_erf": _unary("gelu_erf"), "erf": _unary("erf"),
    "silu": _unary("silu"), "softplus": _unary("softplus"), "log1p": _unary("log1p"),
    "expm1": _unary("expm1"), "floor": _unary("floor"), "ceil": _unary("ceil"),
    "round": _unary("round"), "sign": _unary("sign"),
    "add_scalar": _scalar("add_scalar", 0.7), "mul_scalar": _scalar("mul_scalar", -1.3),
    "rsub_scalar": _scalar("rsub_scalar", 0.5), "rdiv_scalar": _scalar("rdiv_scalar", 1.7),
    "pow_scalar": _scalar("pow_scalar", 2.5, signed=False),
    "pow_rscalar": _scalar("pow_rscalar", 1.8), "div_scalar": _scalar("div_scalar", 2.0),
    "elu": _scalar("elu", 1.1),
    "clamp": [(op_("clamp", fargs=(-0.5, 0.6)), [_away((3, 4), 0.1, 1.0)], (), None)],
    "sum": _reduce("sum"), "mean": _reduce("mean"), "max": _reduce("max"),
    "min": _reduce("min"),
    "prod": [(op_("prod", (0, 1)), [_away((3, 4), 0.5, 1.5)], (), None),
             (op_("prod", (0,)), [_away((2, 3), 0.5, 1.5)], (), None)],
    "reshape": [(lambda x: op_("reshape", (4, 3))(x) ** 2, [_away((3, 4))], (), None)],
    "permute": [(lambda x: op_("permute", (1, 0))(x) ** 3, [_away((3, 4))], (), None)],
    "slice": [(lambda x: op_("slice", (1, 1, 2, 2))(x) ** 2, [_away((3, 4))], (), None),
              (lambda x: op_("slice", (0, 2, -1, 2))(x).exp(), [_away((3, 4))], (), None)],
    "broadcast_to": [(lambda x: op_("broadcast_to", (2, 3, 4))(x) ** 2, [_away((3, 1))], (),
                      None)],
    "contiguous": [(lambda x: op_("contiguous")(x.t()) ** 2, [_away((3, 4))], (), None)],
    "to_dtype": [(lambda x: op_("to_dtype", (lib.AD_FLOAT64,))(
        op_("to_dtype", (lib.AD_FLOAT32,))(x)) ** 2, [_away((2, 3))], (), dict(
            eps=1e-3, atol=1e-4, rtol=1e-3))],
    "copy": [(lambda x: op_("copy")(x) ** 3, [_away((2, 3))], (), None)],
    "matmul": [(op_("matmul"), [_away((2, 3)), _away((3, 4))], (), None),
               (op_("matmul"), [_away((2, 2, 3)), _away((3, 2))], (), None),
               (op_("matmul"), [_away((3,)), _away((3, 2))], (), None),
               (op_("matmul"), [_away((2, 3)), _away((3,))], (), None)],
    "logsumexp": [(op_("logsumexp", (1, 0)), [_away((2, 3))], (), None),
                  (op_("logsumexp", (0, 1)), [_away((2, 3))], (), None)],
    "softmax": [(op_("softmax", (1,)), [_away((2, 3))], (), None),
                (op_("softmax", (0,)), [_away((3, 2))], (), None)],
    "log_softmax": [(op_("log_softmax", (-1,)), [_away((2, 3))], (), None)],
    "cumsum": [(lambda x: op_("cumsum", (1, 0))(x) ** 2, [_away((2, 3))], (), None),
               (lambda x: op_("cumsum", (0, 1))(x) ** 2, [_away((2, 3))], (), None)],
    "where": [(lambda a, b, c: _call(lib.AD_OP_WHERE, (c, a * a, b * b * b)),
               [_away((2, 3)), _away((2, 3))], (ad.tensor(COND),), None)],
    "cat": [(lambda a, b: op_("cat", (0, 2, 1))(a, b) ** 2, [_away((2, 3)), _away((1, 3))],
             (), None)],
    "pad": [(lambda x: op_("pad", (1, 2), (0.5,))(x) ** 2, [_away((2, 3))], (), None),
            (lambda x: op_("pad", (-1, 1, 1, 0), (0.0,))(x) ** 3, [_away((2, 3))], (), None)],
    "index_select": [(lambda x, i: op_("index_select", (0,))(x, i) ** 2, [_away((3, 2))],
                      (_i64(IDX),), None)],
    "index_add": [(lambda x, s, i: op_("index_add", (0,))(x, i, s * s) ** 2,
                   [_away((3, 2)), _away((3, 2))], (_i64(IDX),), None)],
    "gather": [(lambda x, i: op_("gather", (1,))(x, i) ** 2, [_away((3, 4))], (_i64(IDX2),),
                None)],
    "scatter_add": [(lambda x, s, i: op_("scatter_add", (1,))(x, i, s * s) ** 2,
                     [_away((3, 4)), _away((3, 2))], (_i64(IDX2),), None)],
    "mse_loss": [(op_("mse_loss", (r,)), [_away((2, 3)), _away((2, 3))], (), None)
                 for r in (0, 1, 2)],
    "cross_entropy": [(lambda x, t: op_("cross_entropy", (r,))(x, t), [_away((4, 3))],
                       (_i64([0, 2, 1, 2]),), None) for r in (0, 1, 2)],
    "nll_loss": [(lambda x, t: op_("nll_loss", (1,))(x * x, t), [_away((4, 3))],
                  (_i64([0, 2, 1, 2]),), None)],
    "layer_norm": [(op_("layer_norm", (1,), (1e-5,)), [_away((2, 4)), _away((4,)),
                                                        _away((4,))], (), None),
                   (op_("layer_norm", (2,), (1e-5,)), [_away((2, 2, 3))], (), None)],
    "dropout": [(lambda x: op_("dropout", (42,), (0.5,))(x) ** 2, [_away((3, 4))], (), None)],
    "conv2d": [(op_("conv2d", (1, 1, 0, 0, 1, 1, 1)), [_away((1, 2, 4, 4)),
                                                       _away((3, 2, 3, 3))], (), None),
               (lambda x, w: op_("conv2d", (2, 1, 1, 0, 1, 2, 2))(x, w) ** 2,
                [_away((1, 4, 5, 5)), _away((2, 2, 2, 2))], (), None)],
    "conv_transpose2d": [
        (op_("conv_transpose2d", (1, 1, 0, 0, 1, 1, 1, 0, 0)),
         [_away((1, 2, 3, 3)), _away((2, 3, 2, 2))], (), None),
        (lambda x, w: op_("conv_transpose2d", (2, 2, 1, 1, 1, 1, 1, 1, 0))(x, w) ** 2,
         [_away((1, 2, 3, 3)), _away((2, 1, 3, 3))], (), None)],
    "conv2d_weight_grad": [
        (op_("conv2d_weight_grad", (3, 3, 1, 1, 0, 0, 1, 1, 1)),
         [_away((1, 2, 4, 4)), _away((1, 3, 2, 2))], (), None),
        # stride 2 over 6 rows: the last row is never reached (output padding 1)
        (lambda x, gy: op_("conv2d_weight_grad", (3, 3, 2, 2, 0, 0, 1, 1, 2))(x, gy) ** 2,
         [_away((1, 2, 6, 6)), _away((1, 2, 2, 2))], (), None)],
    "max_pool2d": [(lambda x: op_("max_pool2d", POOL)(x) ** 2, [_distinct((1, 2, 4, 4))], (),
                    None),
                   (lambda x: op_("max_pool2d", POOL_OVERLAP)(x) ** 3,
                    [_distinct((1, 1, 5, 5))], (), None)],
    "max_pool2d_backward": [
        (lambda x, g: op_("max_pool2d_backward", POOL)(x, g * g),
         [_distinct((1, 2, 4, 4)), _away((1, 2, 2, 2))], (), None),
        (lambda x, g: op_("max_pool2d_backward", POOL_OVERLAP)(x, g * g),
         [_distinct((1, 1, 5, 5)), _away((1, 1, 5, 3))], (), None)],
    "max_pool2d_gather": [
        (lambda x, t: op_("max_pool2d_gather", POOL)(x, t * t),
         [_distinct((1, 2, 4, 4)), _away((1, 2, 4, 4))], (), None),
        (lambda x, t: op_("max_pool2d_gather", POOL_OVERLAP)(x, t * t),
         [_distinct((1, 1, 5, 5)), _away((1, 1, 5, 5))], (), None)],
    "linear": [(lambda x, w, b: op_("linear")(x, w, b) ** 2,
                [_away((3, 4)), _away((5, 4)), _away((5,))], (), None),
               (lambda x, w: op_("linear")(x, w) ** 3, [_away((2, 3, 4)), _away((2, 4))], (),
                None)],
    # relu: the pre-activations stay away from 0 (x, w, b of one sign)
    "linear_act": [(lambda x, w, b: op_("linear_act", (1,))(x, w, b) ** 2,
                    [_away((3, 4), signed=False), _away((5, 4), signed=False),
                     _away((5,), signed=False)], (), None)] +
                  [(lambda x, w, b, a=a: op_("linear_act", (a,))(x, w, b) ** 2,
                    [_away((3, 4)), _away((5, 4)), _away((5,))], (), None) for a in (2, 3)] +
                  # no head: the incoming gradient does not track, yet tanh's and sigmoid's
                  # derivatives read the output, so it must still be recorded
                  [(op_("linear_act", (a,)), [_away((3, 4)), _away((5, 4)), _away((5,))], (),
                    None) for a in (2, 3)],
}


def test_the_table_covers_every_differentiable_op():
    missing = [n for n in DIFFERENTIABLE if n not in CASES and n not in NOT_IN_TABLE]
    assert not missing, f"differentiable ops with no gradgradcheck case: {missing}"
    stale = [n for n in CASES if n not in DIFFERENTIABLE]
    assert not stale, f"cases for ops that are not differentiable: {stale}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradgradcheck_every_op(name):
    for k, (f, inputs, consts, tol) in enumerate(CASES[name]):
        gradgradcheck(f, inputs, consts, **(tol or {}))


@pytest.mark.parametrize("name", sorted(CASES))
def test_create_graph_backward_survives_every_allocation_failure(name):
    """Every native allocation of a recorded backward, and of a second backward
    through it, fails in turn: each failure is a clean OutOfMemoryError that
    leaks nothing, and the gradients come out the same afterwards.  (The
    fuzz_abi harness found matmul's formula transposing the NULL that a failed
    reshape gave back, a segfault: test_fuzz.py keeps that case.)"""
    from faults import sweep_alloc_failures

    for f, inputs, consts, _ in CASES[name]:
        arrays = [np.array(a, dtype=np.float64) for a in inputs]

        def run():
            xs = [ad.Var(a, dtype=F64) for a in arrays]
            gs = ad.grad(f(*xs, *consts).sum(), xs, create_graph=True, allow_unused=True)
            got = [g for g in gs if g is not None]
            total = None
            for g in got:
                if g.track_op:
                    q = (g * g).sum()
                    total = q if total is None else total + q
            if total is not None:
                got += [h for h in ad.grad(total, xs, allow_unused=True) if h is not None]
            return [np.asarray(g).copy() for g in got]

        sweep_alloc_failures(run)


# ---- the classic uses -----------------------------------------------------------------------
def _mlp_loss(params, x, y):
    w1, b1, w2, b2 = params
    h = (x @ w1 + b1).tanh()
    out = h @ w2 + b2
    return ((out - y) ** 2).mean()


def _mlp_data(seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(4, 5), (5,), (5, 3), (3,)]
    params = [rng.standard_normal(s) * 0.5 for s in shapes]
    vec = [rng.standard_normal(s) for s in shapes]
    return params, vec, rng.standard_normal((6, 4)), rng.standard_normal((6, 3))


def _hvp(params, vec, x, y):
    ps = [ad.Var(p, dtype=F64) for p in params]
    xt, yt = ad.tensor(x, dtype=F64), ad.tensor(y, dtype=F64)
    gs = ad.grad(_mlp_loss(ps, xt, yt), ps, create_graph=True)
    dot = sum(((g * ad.tensor(v, dtype=F64)).sum() for g, v in zip(gs, vec)), ad.tensor(0.0,
                                                                                      dtype=F64))
    return [np.asarray(h) for h in ad.grad(dot, ps)]


def test_mlp_hessian_vector_product_matches_torch():
    torch = pytest.importorskip("torch")
    params, vec, x, y = _mlp_data()
    ours = _hvp(params, vec, x, y)
    xt, yt = torch.tensor(x), torch.tensor(y)

    def f(w1, b1, w2, b2):
        out = torch.tanh(xt @ w1 + b1) @ w2 + b2
        return ((out - yt) ** 2).mean()

    _, theirs = torch.autograd.functional.hvp(
        f, tuple(torch.tensor(p) for p in params), tuple(torch.tensor(v) for v in vec))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-10, atol=1e-12)


def test_mlp_hessian_vector_product_matches_finite_differences():
    params, vec, x, y = _mlp_data(1)
    ours = _hvp(params, vec, x, y)
    eps = 1e-6

    def grads_at(t):
        ps = [ad.Var(p + t * v, dtype=F64) for p, v in zip(params, vec)]
        gs = ad.grad(_mlp_loss(ps, ad.tensor(x, dtype=F64), ad.tensor(y, dtype=F64)), ps)
        return [np.asarray(g) for g in gs]

    up, down = grads_at(eps), grads_at(-eps)
    for a, u, d in zip(ours, up, down):
        np.testing.assert_allclose(a, (u - d) / (2 * eps), rtol=1e-6, atol=1e-8)


def test_gradient_penalty_by_finite_differences():
    # WGAN-GP style: penalty = (|d critic / d x| - 1)^2, differentiated w.r.t. the weights
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 3))
    w0 = rng.standard_normal((3, 4))
    u = rng.standard_normal((4, 1))

    def penalty(w):
        # recording on also for check_grad's numeric side (it runs f under no_grad)
        with ad.enable_grad():
            xv = ad.Var(x, dtype=F64)
            critic = ((xv @ w).tanh() @ ad.tensor(u, dtype=F64)).sum()
            (gx,) = ad.grad(critic, [xv], create_graph=True)
            return ((gx ** 2).sum().sqrt() - 1.0) ** 2

    check_grad(lambda w: penalty(w), [w0], rtol=1e-6, atol=1e-8)
    w = ad.Var(w0, dtype=F64)
    p = penalty(w)
    assert p.track_op
    g = p.backward()[w]
    assert g.shape == (3, 4) and np.abs(np.asarray(g)).max() > 1e-3


def test_backward_create_graph_store_gradients_track():
    x = ad.Var([0.3, -1.2, 2.0], dtype=F64)
    y = (x ** 3).sum()
    store = y.backward(create_graph=True)
    g = store[x]
    assert g.track_op
    np.testing.assert_allclose(np.asarray(g), 3 * np.asarray(x) ** 2)
    h = g.sum().backward()[x]
    np.testing.assert_allclose(np.asarray(h), 6 * np.asarray(x))
    # without create_graph nothing is recorded
    assert not y.backward()[x].track_op


@pytest.mark.parametrize("fn,d3", [
    (lambda x: x ** 4, lambda x: 24 * x),
    (lambda x: x.sin(), lambda x: -np.cos(x)),
    (lambda x: x.exp() * x, lambda x: np.exp(x) * (x + 3)),
])
def test_third_derivative(fn, d3):
    xs = np.array([0.4, -1.1, 1.7])
    x = ad.Var(xs, dtype=F64)
    (g1,) = ad.grad(fn(x).sum(), [x], create_graph=True)
    (g2,) = ad.grad(g1.sum(), [x], create_graph=True)
    (g3,) = ad.grad(g2.sum(), [x])
    np.testing.assert_allclose(np.asarray(g3), d3(xs), rtol=1e-12, atol=1e-12)
    assert not g3.track_op


def test_create_graph_records_whatever_the_grad_mode():
    x = ad.Var([1.0, 2.0], dtype=F64)
    y = (x ** 3).sum()
    with ad.no_grad():
        (g,) = ad.grad(y, [x], create_graph=True)
    assert g.track_op
    np.testing.assert_allclose(np.asarray(ad.grad(g.sum(), [x])[0]), [6.0, 12.0])
    assert ad.is_grad_enabled()


def test_grad_several_outputs_sum_recorded():
    x = ad.Var([0.5, 1.5], dtype=F64)
    a, b = (x ** 3).sum(), (x ** 2).sum()
    (g,) = ad.grad([a, b], [x], create_graph=True)
    assert g.track_op
    (h,) = ad.grad(g.sum(), [x])
    np.testing.assert_allclose(np.asarray(h), 6 * np.asarray(x) + 2)


def test_grad_of_an_intermediate_with_create_graph():
    x = ad.Var([0.5, -1.5], dtype=F64)
    h = x * x
    y = (h ** 3).sum()
    (gh,) = ad.grad(y, [h], create_graph=True)  # 3 h^2, a function of x
    (gx,) = ad.grad(gh.sum(), [x])
    np.testing.assert_allclose(np.asarray(gx), 12 * np.asarray(x) ** 3)


def test_grad_outputs_tracked_seed_is_differentiated():
    x = ad.Var([0.5, 2.0], dtype=F64)
    s = ad.Var([1.5, -1.0], dtype=F64)
    y = x ** 2
    (g,) = ad.grad(y, [x], grad_outputs=[s], create_graph=True)  # 2 x s
    gx, gs = ad.grad(g.sum(), [x, s])
    np.testing.assert_allclose(np.asarray(gx), 2 * np.asarray(s))
    np.testing.assert_allclose(np.asarray(gs), 2 * np.asarray(x))


# ---- double backward through the named ops, against PyTorch ------------------------------------
def test_double_backward_conv_pool_softmax_layer_norm_matmul_match_torch():
    torch = pytest.importorskip("torch")
    F = ad.nn.functional
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2, 6, 6))
    w = rng.standard_normal((3, 2, 3, 3)) * 0.5
    lw, lb = rng.standard_normal(12), rng.standard_normal(12)
    m = rng.standard_normal((12, 4)) * 0.5

    def ours():
        xv, wv, mv = (ad.Var(a, dtype=F64) for a in (x, w, m))
        lwv, lbv = ad.Var(lw, dtype=F64), ad.Var(lb, dtype=F64)
        h = F.max_pool2d(F.conv2d(xv, wv, padding=1), 2)  # (2, 3, 3, 3)
        h = F.layer_norm(h.reshape((2, 3, 9))[:, :, :4].reshape((2, 12)), (12,), lwv, lbv)
        out = (h @ mv).softmax(1)
        loss = (out * ad.tensor(np.arange(8.0).reshape(2, 4), dtype=F64)).sum()
        vs = [xv, wv, mv, lwv, lbv]
        gs = ad.grad(loss, vs, create_graph=True)
        pen = sum(((g * g).sum() for g in gs), ad.tensor(0.0, dtype=F64))
        return [np.asarray(t) for t in ad.grad(pen, vs)]

    def theirs():
        tf = torch.nn.functional
        xv, wv, mv, lwv, lbv = (torch.tensor(a, requires_grad=True) for a in (x, w, m, lw, lb))
        h = tf.max_pool2d(tf.conv2d(xv, wv, padding=1), 2)
        h = tf.layer_norm(h.reshape(2, 3, 9)[:, :, :4].reshape(2, 12), (12,), lwv, lbv)
        out = torch.softmax(h @ mv, 1)
        loss = (out * torch.arange(8.0, dtype=torch.float64).reshape(2, 4)).sum()
        vs = [xv, wv, mv, lwv, lbv]
        gs = torch.autograd.grad(loss, vs, create_graph=True)
        pen = sum((g * g).sum() for g in gs)
        return [t.detach().numpy() for t in torch.autograd.grad(pen, vs)]

    for k, (a, b) in enumerate(zip(ours(), theirs())):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10, err_msg=f"input {k}")


@pytest.mark.parametrize("name", ["conv2d", "max_pool2d", "softmax", "layer_norm", "matmul"])
def test_double_backward_named_ops_by_finite_differences(name):
    # the same ops as above with a non-linear head, so every second derivative is non-zero
    for f, inputs, consts, tol in CASES[name]:
        gradgradcheck(lambda *a: f(*a[:len(inputs)], *a[len(inputs):]).tanh(), inputs, consts,
                      **(tol or {}))


# ---- errors and plumbing -------------------------------------------------------------------------
def test_non_differentiable_backward_raises_graph_error_naming_the_op():
    class NumpySquare(ad.Function):
        """a backward computed in numpy: its gradient is not recorded"""

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return ad.tensor(np.asarray(x) ** 2, dtype=x.dtype)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return ad.tensor(2 * np.asarray(x) * np.asarray(g), dtype=x.dtype)

    x = ad.Var([1.0, 2.0], dtype=F64)
    y = (NumpySquare.apply(x) * x).sum()
    assert np.allclose(np.asarray(y.backward()[x]), 3 * np.asarray(x) ** 2)  # plain: fine
    with pytest.raises(ad.GraphError, match=r"create_graph=True\): the backward of NumpySquare "
                                            r"is not differentiable \(its gradient for input 0"):
        y.backward(create_graph=True)


def test_backward_ex_rejects_unknown_flags():
    x = ad.Var([1.0], dtype=F64)
    y = (x * 2.0).sum()
    out = ffi.new("ad_gradstore **")
    assert lib.ad_backward_ex(y._h, ffi.NULL, ffi.NULL, 0, 6, out) == lib.AD_ERR_VALUE
    assert "unknown flags" in ffi.string(lib.ad_last_error()).decode()
    assert out[0] == ffi.NULL
    assert lib.ad_backward_ex(y._h, ffi.NULL, ffi.NULL, 0, 0, out) == lib.AD_OK
    lib.ad_gradstore_release(out[0])


def test_create_graph_slice_gradient_is_recorded():
    # slice's plain backward writes g into zeros in place; under create_graph it must be a
    # recorded index_add, or the second derivative through a view would silently vanish
    x = ad.Var(np.arange(1.0, 7.0).reshape(2, 3), dtype=F64)
    y = (x[:, ::2] ** 3).sum()
    (g,) = ad.grad(y, [x], create_graph=True)
    assert g.track_op
    (h,) = ad.grad(g.sum(), [x])
    expect = np.zeros((2, 3))
    expect[:, ::2] = 6 * np.asarray(x)[:, ::2]
    np.testing.assert_allclose(np.asarray(h), expect)


def test_plain_backward_after_create_graph_leaves_nothing_tracked():
    x = ad.Var([0.5, 1.0], dtype=F64)
    y = (x.exp() * x).sum()
    g1 = y.backward(create_graph=True)[x]
    g2 = y.backward()[x]
    assert g1.track_op and not g2.track_op
    np.testing.assert_array_equal(np.asarray(g1), np.asarray(g2))
