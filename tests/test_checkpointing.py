"""with ad.checkpointing("balanced"): memory-bound ops keep no output and
backward recomputes it from their inputs (burn's balanced checkpointer).

Gradients must be the same bytes as without checkpointing; the saved bytes
are asserted as counts (memory_stats), never as times."""
import gc
import threading

import numpy as np
import pytest

import pyautodiff as ad
import pyautodiff.nn.functional as F
from pyautodiff._lib import ffi, lib
from test_create_graph import CASES

F32, F64 = ad.float32, ad.float64


def saved():
    gc.collect()  # graphs of earlier tests in cycles die now, not mid-count
    return ad.memory_stats()["saved_bytes"]


def saved_var():
    gc.collect()
    return ad.memory_stats()["saved_var_bytes"]


def grads_bytes(store, vs):
    return [None if store.get(v) is None else np.asarray(store[v]).tobytes() for v in vs]


def both(build, vs, **kw):
    """build() under "none" and under "balanced": the loss's gradients for
    vs, as bytes, for each."""
    out = []
    for mode in ("none", "balanced"):
        with ad.checkpointing(mode):
            loss = build()
        out.append(grads_bytes(loss.backward(**kw), vs))
    return out


def mlp(n_layers, width, dtype, seed=0):
    rng = np.random.default_rng(seed)
    ws = [ad.Var(rng.standard_normal((width, width)) / np.sqrt(width), dtype=dtype)
          for _ in range(n_layers)]
    bs = [ad.Var(rng.standard_normal(width) * 0.1, dtype=dtype) for _ in range(n_layers)]
    return ws, bs


def mlp_loss(ws, bs, x):
    h = x
    for w, b in zip(ws, bs):
        h = F.gelu(F.linear(h, w, b), approximate="tanh")
    return h.sqr().mean()


# ---- bit-identical gradients ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F32, F64])
def test_20_layer_mlp_gradients_bit_identical(dtype, threads):
    ws, bs = mlp(20, 24, dtype)
    x = ad.Var(np.random.default_rng(1).standard_normal((16, 24)), dtype=dtype)
    a, b = both(lambda: mlp_loss(ws, bs, x), ws + bs + [x])
    assert all(g is not None for g in a)
    assert a == b


def test_var_read_inside_and_outside_a_block_sums_in_another_grouping():
    """ad.checkpoint sums the block's part of a Var's gradient on its own and
    hands the total to the outer graph: for a Var also read outside the block
    the sum is grouped differently (documented), within a few ulps; a Var read
    only inside (x's chain here) stays bit-identical."""
    w = ad.Var.randn(1000, seed=1, dtype="float64")
    v = ad.Var.randn(1000, seed=3, dtype="float64")
    x = ad.randn(1000, seed=2, dtype="float64")

    def block(h):
        return (h * w).sin() * w.exp() * v.tanh() * v

    def loss(ck):
        h = (x * w).cos()
        h = ad.checkpoint(block, h) if ck else block(h)
        return (h * w).tanh().sum()

    g0, g1 = loss(False).backward(), loss(True).backward()
    np.testing.assert_allclose(g1[w].numpy(), g0[w].numpy(), rtol=1e-13, atol=1e-15)
    assert g1[v].numpy().tobytes() == g0[v].numpy().tobytes()


def _mixed_model(params, x, drop_seed):
    """Views, broadcasts, reductions, the softmax family, layer_norm, dropout,
    where, cat and a conv/pool: memory-bound and compute-bound ops mixed."""
    w, b, g, cw = params
    h = (x @ w + b).relu()
    h = F.layer_norm(h, (h.shape[-1],), weight=g)
    h = ad.cat([h.tanh(), h.sigmoid() * h.exp().sqrt()], dim=1)
    h = F.dropout(h, 0.3, training=True, seed=drop_seed)
    s = F.softmax(h, dim=-1) + h.t().t() * 0.5
    m = ad.where(s > 0.05, s, s.sqr())
    img = m.reshape(2, 2, 4, 6)
    c = F.conv2d(img, cw, padding=1)
    p = F.max_pool2d(c, 2)
    return p.sum() + m[:, 1::2].mean() + h.abs().max() + (x.sin() * 2.0).sum()


@pytest.mark.parametrize("dtype", [F32, F64])
def test_mixed_model_gradients_bit_identical(dtype, threads):
    rng = np.random.default_rng(2)
    params = [ad.Var(rng.standard_normal(s) * 0.4, dtype=dtype)
              for s in [(6, 6), (6,), (6,), (3, 2, 3, 3)]]
    x = ad.Var(rng.standard_normal((8, 6)), dtype=dtype)
    a, b = both(lambda: _mixed_model(params, x, 11), params + [x])
    assert all(g is not None for g in a)
    assert a == b


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_op_gradients_bit_identical(name):
    rng = np.random.default_rng(5)
    for f, inputs, consts, _ in CASES[name]:
        xs = [ad.Var(a, dtype=F64) for a in inputs]
        w = None
        res = []
        for mode in ("none", "balanced"):
            with ad.checkpointing(mode):
                y = f(*xs, *consts)
                if w is None:
                    w = ad.tensor(rng.standard_normal(y.shape), dtype=F64)
                # a memory-bound consumer, so that y itself is checkpointed too
                loss = (y.sqr() * w).sum()
            res.append(grads_bytes(loss.backward(), xs))
        assert res[0] == res[1], name


def test_create_graph_hessian_vector_product_bit_identical():
    rng = np.random.default_rng(4)
    ws, bs = mlp(4, 5, F64, seed=4)
    x = ad.tensor(rng.standard_normal((6, 5)), dtype=F64)
    vs = [ad.tensor(rng.standard_normal(p.shape), dtype=F64) for p in ws + bs]
    out = []
    for mode in ("none", "balanced"):
        with ad.checkpointing(mode):
            loss = mlp_loss(ws, bs, x)
            gs = ad.grad(loss, ws + bs, create_graph=True)
            dot = sum(((g * v).sum() for g, v in zip(gs, vs)), ad.tensor(0.0, dtype=F64))
        hv = ad.grad(dot, ws + bs)
        out.append(([np.asarray(g).tobytes() for g in gs], [np.asarray(h).tobytes() for h in hv]))
    assert out[0] == out[1]


def test_dropout_mask_reproduced_by_recomputation():
    x = ad.Var(np.random.default_rng(0).standard_normal((40, 40)))
    a, b = both(lambda: (F.dropout(x * 1.0, 0.5, training=True, seed=3).sqr() * 3.0).sum(), [x])
    assert a == b
    g = np.frombuffer(a[0])
    assert 0 < (g == 0).sum() < g.size  # a mask was applied


# ---- what is kept -----------------------------------------------------------------------------
def test_saved_bytes_of_the_mlp_counted():
    # f32, batch 32, width 16, 6 layers of x @ w + b then gelu
    rng = np.random.default_rng(3)
    ws = [ad.Var(rng.standard_normal((16, 16)), dtype=F32) for _ in range(6)]
    bs = [ad.Var(rng.standard_normal(16), dtype=F32) for _ in range(6)]
    x = ad.tensor(rng.standard_normal((32, 16)), dtype=F32)
    act, wb, bb = 32 * 16 * 4, 16 * 16 * 4, 16 * 4

    def forward():
        h = x
        for w, b in zip(ws, bs):
            h = (h @ w + b).gelu()
        return h.sqr().mean()

    s0, v0 = saved(), saved_var()
    loss = forward()
    plain, plain_var = saved() - s0, saved_var() - v0
    # matmul keeps its input (layer 1: x; then the previous gelu's output) and
    # w (from layer 2 on: x is untracked; w is a Var's buffer, counted apart);
    # gelu keeps its input; sqr its input
    assert (plain, plain_var) == (6 * act + 6 * act + act, 5 * wb)
    del loss
    assert (saved(), saved_var()) == (s0, v0)
    with ad.checkpointing("balanced"):
        loss = forward()
    bal, bal_var = saved() - s0, saved_var() - v0
    # balanced: the add keeps the matmul's output and b; matmul keeps x (layer
    # 1) and w; gelu, sqr and mean (memory-bound) keep nothing of their own
    # and read shells
    assert (bal, bal_var) == (act + 6 * act, 5 * wb + 6 * bb)
    assert bal <= 0.6 * plain  # issue 15's target, as a count
    del loss
    assert (saved(), saved_var()) == (s0, v0)


def test_checkpointed_activations_are_freed():
    ws, bs = mlp(8, 64, F32)
    x = ad.tensor(np.random.default_rng(0).standard_normal((128, 64)), dtype=F32)
    live = []
    for mode in ("none", "balanced"):
        base = ad.memory_stats()["live_bytes"]
        with ad.checkpointing(mode):
            loss = mlp_loss(ws, bs, x)
        live.append(ad.memory_stats()["live_bytes"] - base)
        del loss
    act = 128 * 64 * 4
    # none: per layer the linear output (one fused op: x @ w^T + b) and the
    # gelu output; balanced: the linear output only
    assert live[0] >= 8 * 2 * act
    assert live[1] <= 8 * act + 4 * act
    assert live[1] < 0.5 * live[0]


def test_compute_bound_ops_keep_their_outputs():
    x = ad.Var(np.ones((4, 4)), dtype=F32)
    with ad.checkpointing("balanced"):
        y = (x @ x).softmax(-1)  # compute-bound, reads its output
        s0 = saved()
        z = y * 2.0  # memory-bound: reads nothing, keeps y for its rerun
        assert saved() - s0 == 4 * 4 * 4
        w = (x.sin() * 1.0).sum()  # sin is libm per element: kept as without checkpointing
    g = (z.sum() + w).backward()
    assert g[x].shape == (4, 4)


def test_float64_simd_activations_are_compute_bound_float32_memory_bound():
    for dtype, drops in ((F32, True), (F64, False)):
        x = ad.Var(np.ones((8, 8)), dtype=dtype)
        with ad.checkpointing("balanced"):
            h = x * 2.0
            s0 = saved()
            y = h.gelu()  # reads its input: a shell when h was not kept
            kept = saved() - s0
        assert kept == 0  # h is the output of a memory-bound op either way
        with ad.checkpointing("balanced"):
            s0 = saved()
            z = y * 3.0  # keeps y for its rerun unless gelu's output is a shell
            kept = saved() - s0
        assert kept == (0 if drops else 8 * 8 * dtype.itemsize)
        del z, y, h


# ---- version checks ---------------------------------------------------------------------------
def test_var_written_after_forward_raises_when_a_recomputation_reads_it():
    w = ad.Var(np.eye(3), dtype=F64)
    b = ad.Var(np.ones(3), dtype=F64)
    x = ad.tensor(np.ones((2, 3)), dtype=F64)
    with ad.checkpointing("balanced"):
        loss = (x @ w + b).gelu().sum()
    b.set(ad.zeros(3, dtype=F64))
    # gelu's input was not kept: recomputing it would read the new b
    with pytest.raises(ad.GraphError, match=r"output of add .*checkpointing.*input 1.*modified "
                                            r"in place.*version 0 when recorded, now 1"):
        loss.backward()
    # without checkpointing the add keeps nothing of b and gelu kept its input
    with ad.checkpointing("none"):
        loss = (x @ w + b).gelu().sum()
    b.set(ad.ones(3, dtype=F64))
    assert loss.backward()[w].shape == (3, 3)


def test_var_read_by_a_kept_formula_still_raises():
    w = ad.Var(np.eye(3), dtype=F64)
    x = ad.Var(np.ones((2, 3)), dtype=F64)
    with ad.checkpointing("balanced"):
        loss = ((x * 2.0) @ w.t()).sum()
    w.set(ad.zeros((3, 3), dtype=F64))
    with pytest.raises(ad.GraphError, match="modified in place"):
        loss.backward()


def test_concurrent_write_during_recomputation_is_never_silent():
    # the writer keeps writing b while backward recomputes from it: each pass
    # either fails with GraphError or gives the gradient of the recorded b
    b = ad.Var(np.ones(50_000), dtype=F32)
    x = ad.tensor(np.linspace(-1, 1, 50_000), dtype=F32)
    with ad.checkpointing("none"):
        ref = np.asarray(((x + b).gelu() * 2.0).sum().backward()[b]).tobytes()
    stop = threading.Event()

    def writer():
        one = ad.ones(50_000, dtype=F32)
        while not stop.is_set():
            b.set(one)

    outcomes = set()
    t = threading.Thread(target=writer)
    for _ in range(20):
        with ad.checkpointing("balanced"):
            loss = ((x + b).gelu() * 2.0).sum()
        if not t.is_alive() and not stop.is_set():
            t.start()
        try:
            g = loss.backward()
            assert np.asarray(g[b]).tobytes() == ref
            outcomes.add("ok")
        except ad.GraphError as e:
            assert "add" in str(e) and ("modified in place" in str(e) or "written" in str(e))
            outcomes.add("error")
    stop.set()
    t.join()
    assert outcomes


# ---- strategies, nesting, threads -------------------------------------------------------------
def test_unknown_strategy_rejected():
    with pytest.raises(ad.InvalidArgumentError, match=r"unknown strategy 'fast'.*'none', "
                                                      r"'balanced'"):
        ad.checkpointing("fast")
    with pytest.raises(ad.InvalidArgumentError, match="unknown strategy 1"):
        ad.checkpointing(1)
    prev = ffi.new("int *")
    assert lib.ad_set_checkpoint_strategy(7, prev) == lib.AD_ERR_VALUE
    assert "unknown strategy 7" in ffi.string(lib.ad_last_error()).decode()
    assert ad.get_checkpointing() == "none"


def test_strategy_nests_and_is_restored_on_error():
    assert ad.get_checkpointing() == "none"
    with ad.checkpointing("balanced"):
        assert ad.get_checkpointing() == "balanced"
        with ad.checkpointing("none"):
            assert ad.get_checkpointing() == "none"
        assert ad.get_checkpointing() == "balanced"
        with pytest.raises(ZeroDivisionError):
            with ad.checkpointing("none"):
                1 / 0
        assert ad.get_checkpointing() == "balanced"
    assert ad.get_checkpointing() == "none"

    @ad.checkpointing("balanced")
    def f():
        return ad.get_checkpointing()

    assert f() == "balanced" and ad.get_checkpointing() == "none"


def test_strategy_is_thread_local():
    seen = {}
    inside, release = threading.Event(), threading.Event()

    def other():
        seen["start"] = ad.get_checkpointing()
        with ad.checkpointing("balanced"):
            inside.set()
            release.wait(10)
        seen["end"] = ad.get_checkpointing()

    t = threading.Thread(target=other)
    t.start()
    inside.wait(10)
    assert ad.get_checkpointing() == "none"  # the other thread's block is not ours
    x = ad.Var(np.ones(8), dtype=F32)
    s0 = saved()
    y = (x * 2.0).gelu()
    assert saved() - s0 == 8 * 4  # gelu kept its input: recorded under "none"
    release.set()
    t.join()
    assert seen == {"start": "none", "end": "none"}
    del y


def test_checkpointing_inside_and_around_ad_checkpoint():
    ws, bs = mlp(3, 6, F64)
    x = ad.Var(np.random.default_rng(6).standard_normal((4, 6)), dtype=F64)

    def block(w, b):
        def fn(h):
            with ad.checkpointing("balanced"):  # inside the checkpointed function
                return F.gelu(F.linear(h, w, b), approximate="tanh").sqr()
        return fn

    def run(mode, ck):
        with ad.checkpointing(mode):
            h = x
            for w, b in zip(ws, bs):
                h = ad.checkpoint(block(w, b), h) if ck else block(w, b)(h)
            return h.sum()

    ref = grads_bytes(run("none", False).backward(), ws + bs + [x])
    for mode in ("none", "balanced"):
        loss = run(mode, True)
        assert ad.get_checkpointing() == "none"
        assert grads_bytes(loss.backward(), ws + bs + [x]) == ref

    # the recomputation runs under the strategy of the call, not of backward's
    # caller; the first run (whose graph only names the Vars) under "none"
    seen = []

    def probe(h):
        seen.append(ad.get_checkpointing())
        return (h * 2.0).exp()

    with ad.checkpointing("balanced"):
        y = ad.checkpoint(probe, x).sum()
    y.backward()
    assert seen == ["none", "balanced"]


def test_backward_of_one_graph_from_several_threads():
    ws, bs = mlp(6, 32, F32)
    x = ad.tensor(np.random.default_rng(7).standard_normal((64, 32)), dtype=F32)
    with ad.checkpointing("none"):
        ref = grads_bytes(mlp_loss(ws, bs, x).backward(), ws + bs)
    with ad.checkpointing("balanced"):
        loss = mlp_loss(ws, bs, x)
    results, errors = [], []

    def run():
        try:
            for _ in range(3):
                results.append(grads_bytes(loss.backward(), ws + bs))
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=run) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert len(results) == 12 and all(r == ref for r in results)


# ---- introspection and long graphs ------------------------------------------------------------
def test_sorted_nodes_and_to_dot_hand_out_recomputed_values():
    x = ad.Var(np.arange(6.0).reshape(2, 3), dtype=F64)
    with ad.checkpointing("none"):
        ref = {n.op: np.asarray(n).copy() for n in ((x * 2.0).exp() + 1.0).sum()
               .sorted_nodes()}
    with ad.checkpointing("balanced"):
        y = ((x * 2.0).exp() + 1.0).sum()
    nodes = y.sorted_nodes()
    assert [n.op for n in nodes] == ["sum", "add_scalar", "exp", "mul_scalar", None]
    for n in nodes:
        np.testing.assert_array_equal(np.asarray(n), ref[n.op])
    dot = y.to_dot()
    assert dot.count("->") == 4 and "mul_scalar" in dot
    del nodes
    assert y.backward()[x].shape == (2, 3)


def test_long_chain_of_checkpointed_ops():
    x = ad.Var(np.ones(4), dtype=F64)
    with ad.checkpointing("balanced"):
        h = x
        for _ in range(20_000):
            h = h * 1.0001
        loss = h.sqr().sum()
    assert saved() >= 0
    g = loss.backward()[x]
    np.testing.assert_allclose(np.asarray(g), 2 * 1.0001 ** 40_000 * np.ones(4), rtol=1e-9)


def test_function_reading_a_checkpointed_value():
    class Twice(ad.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t * 2.0

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return g * 2.0 + t * 0.0

    x = ad.Var(np.linspace(-1, 1, 6), dtype=F64)
    a, b = both(lambda: Twice.apply((x * 3.0).relu()).sqr().sum(), [x])
    assert a == b


def test_sorted_nodes_of_a_graph_whose_var_was_written_raises():
    w = ad.Var(np.ones(3), dtype=F64)
    with ad.checkpointing("balanced"):
        y = ((w * 2.0) + 1.0).sum()
    w.set(ad.zeros(3, dtype=F64))
    # the dropped values cannot be recomputed from the old data: never handed
    # out from the new one
    with pytest.raises(ad.GraphError, match="mul_scalar.*checkpointing.*modified in place"):
        y.sorted_nodes()
    with pytest.raises(ad.GraphError, match="checkpointing"):
        y.to_dot()
