"""A graph that cannot be misused: grad modes, threads, anomaly mode, ad.grad,
leaks and allocation failure (issue 3)."""
import gc
import threading

import numpy as np
import pytest

import pyautodiff as ad
from faults import sweep_alloc_failures


# ---- version-checked saved values -------------------------------------------------
def test_set_between_forward_and_backward_is_a_graph_error():
    # PyTorch: "one of the variables needed for gradient computation has been
    # modified by an inplace operation"; candle: a silently wrong gradient.
    w = ad.Var([1.0, 2.0])
    k = ad.tensor([3.0, 4.0])
    loss = (w * w * k).sum()
    w.set(ad.tensor([5.0, 6.0]))
    with pytest.raises(ad.GraphError, match=r"mul.*tensor id \d+.*version 0 at save, now 1"):
        loss.backward()
    # a fresh forward after the set works
    g = (w * w * k).sum().backward()
    np.testing.assert_allclose(g[w].numpy(), 2 * np.array([5.0, 6.0]) * [3.0, 4.0])


def test_set_through_a_view_is_detected():
    w = ad.Var([[1.0, 2.0], [3.0, 4.0]])
    v = ad.Var([[1.0, 0.0], [0.0, 1.0]])
    loss = (v @ w.t()).exp().sum()  # v's gradient reads w.t(), a view of w's storage
    w.set(ad.zeros((2, 2)))
    with pytest.raises(ad.GraphError, match=r"matmul \(input 1"):
        loss.backward()


def test_set_after_backward_then_new_graph():
    w = ad.Var([1.0, 2.0])
    for step in range(3):
        loss = (w * w).sum()
        g = loss.backward()
        w.set(w.detach() - g[w] * 0.25)
    np.testing.assert_allclose(w.numpy(), [0.125, 0.25])


def test_an_op_whose_backward_reads_nothing_ignores_sets():
    # add's gradient does not read its inputs: a set in between is harmless
    w = ad.Var([1.0, 2.0])
    loss = (w + 1.0).sum()
    w.set(ad.tensor([7.0, 8.0]))
    np.testing.assert_allclose(loss.backward()[w].numpy(), [1.0, 1.0])


# ---- grad modes ----------------------------------------------------------------------
def test_no_grad_records_nothing_even_from_vars():
    w = ad.Var([1.0, 2.0])
    with ad.no_grad():
        assert not ad.is_grad_enabled()
        y = w * 2
        with ad.enable_grad():
            z = w * 3
    assert ad.is_grad_enabled()
    assert not y.track_op and z.track_op


def test_no_grad_as_decorator():
    w = ad.Var([1.0])

    @ad.no_grad()
    def f():
        return w.exp()

    assert not f().track_op
    assert ad.is_grad_enabled()


def test_grad_mode_is_per_thread():
    w = ad.Var([1.0, 2.0])
    inside, recorded = threading.Event(), []
    release = threading.Event()

    def holder():
        with ad.no_grad():
            inside.set()
            release.wait(5)

    t = threading.Thread(target=holder)
    t.start()
    inside.wait(5)
    try:
        # the other thread is inside no_grad; this one still records
        recorded.append((w * 2).track_op)
        assert ad.is_grad_enabled()
    finally:
        release.set()
        t.join()
    assert recorded == [True]


# ---- functional gradients -------------------------------------------------------------
def test_grad_of_intermediates_and_vars():
    w = ad.Var([1.0, 2.0])
    h = w * ad.tensor([10.0, 20.0])
    gh, gw = ad.grad((h * h).sum(), [h, w])
    np.testing.assert_allclose(gh.numpy(), [20.0, 80.0])
    np.testing.assert_allclose(gw.numpy(), [200.0, 1600.0])


def test_grad_unused_input():
    w = ad.Var([1.0, 2.0])
    v = ad.Var([3.0])
    out = (w * 2).sum()
    with pytest.raises(ad.GraphError, match="not used"):
        ad.grad(out, [w, v])
    gw, gv = ad.grad(out, [w, v], allow_unused=True)
    assert gv is None
    np.testing.assert_allclose(gw.numpy(), [2.0, 2.0])


def test_grad_with_grad_outputs_and_several_outputs():
    w = ad.Var([1.0, 2.0])
    a, b = w * 3, w.sqr()
    (gw,) = ad.grad([a, b], [w], grad_outputs=[ad.tensor([1.0, 1.0]), ad.tensor([0.5, 2.0])])
    np.testing.assert_allclose(gw.numpy(), [3 + 0.5 * 2 * 1, 3 + 2.0 * 2 * 2])

    # a lone number is one output's seed, as a lone tensor is
    z = w.sqr().sum()
    np.testing.assert_allclose(ad.grad(z, [w], 2.5)[0].numpy(), [5.0, 10.0])
    np.testing.assert_allclose(ad.grad(z, w, np.float32(0.5))[0].numpy(), [1.0, 2.0])


# ---- anomaly mode ------------------------------------------------------------------------
def test_anomaly_names_the_op_and_the_line():
    w = ad.Var([1.0, 0.0])
    with ad.detect_anomaly():
        y = w.log()  # the line backward must name
        line = test_anomaly_names_the_op_and_the_line.__code__.co_firstlineno + 3
        loss = (y * 2).sum()
        with pytest.raises(ad.GraphError, match=rf"log.*test_safety.py:{line}"):
            loss.backward()


def test_no_site_outside_anomaly_mode():
    w = ad.Var([1.0])
    y = w.exp()
    assert ad.anomaly.site(y) == ""
    with ad.detect_anomaly():
        z = w.exp()
    assert ad.anomaly.site(z).endswith(".py:" + str(
        test_no_site_outside_anomaly_mode.__code__.co_firstlineno + 5))
    # outside the mode a NaN gradient is returned, not raised
    g = ad.Var([0.0])
    assert np.isinf(g.log().sum().backward()[g].numpy()).all()


# ---- threads -----------------------------------------------------------------------------
def _mlp_grads(seed, shared):
    rng = np.random.default_rng(seed)
    w1 = ad.Var(rng.standard_normal((8, 16)).astype(np.float32))
    x = ad.tensor(rng.standard_normal((4, 8)).astype(np.float32))
    h = (x @ w1).relu() @ shared[0] + shared[1]
    loss = (h.tanh() ** 2).mean()
    g = loss.backward()
    return [g[w1].numpy().copy(), g[shared[0]].numpy().copy(), g[shared[1]].numpy().copy()]


def test_threads_give_bit_identical_gradients():
    rng = np.random.default_rng(99)
    shared = [ad.Var(rng.standard_normal((16, 3)).astype(np.float32)), ad.Var.zeros(3)]
    seeds = list(range(16))
    serial = {s: _mlp_grads(s, shared) for s in seeds}
    results, errors = {}, []

    def worker(my_seeds):
        try:
            for _ in range(10):
                for s in my_seeds:
                    got = _mlp_grads(s, shared)
                    results.setdefault(s, []).append(got)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(seeds[i::4],)) for i in range(4)]
    ids_before = ad.tensor([0.0]).id
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for s in seeds:
        for got in results[s]:
            for a, b in zip(got, serial[s]):
                assert np.array_equal(a, b)
    # ids stay unique and increasing across threads
    assert ad.tensor([0.0]).id > ids_before


# ---- leaks -----------------------------------------------------------------------------
def test_no_leak_after_many_iterations():
    w = ad.Var.randn((8, 8), seed=0)
    x = ad.randn((4, 8), seed=1)
    gc.collect()
    base_t, base_b = ad.live_tensors(), ad.live_bytes()
    for _ in range(1000):
        loss = ((x @ w).tanh() * 0.5).sum()
        g = loss.backward()
        w.set(w.detach() - g[w] * 1e-3)
    del loss, g
    gc.collect()
    assert (ad.live_tensors(), ad.live_bytes()) == (base_t, base_b)


def test_no_leak_after_errors_mid_op():
    w = ad.Var.randn((3, 4), seed=0)
    gc.collect()
    base = ad.live_tensors()
    for _ in range(50):
        with pytest.raises(ad.ShapeError):
            (w * 2) @ w  # matmul fails after the mul succeeded
        with pytest.raises(ad.DTypeError):
            w + ad.tensor([1, 2, 3, 4])
    gc.collect()
    assert ad.live_tensors() == base


def test_dropping_a_retained_store_frees_everything():
    gc.collect()
    base_t, base_b = ad.live_tensors(), ad.live_bytes()
    w = ad.Var.randn((64, 64), seed=0)
    h = w.exp()
    g = (h * h).sum().backward(retain=[h])
    assert h in g
    del g, h, w
    gc.collect()
    assert (ad.live_tensors(), ad.live_bytes()) == (base_t, base_b)


# ---- allocation failure ----------------------------------------------------------------
def _small_mlp():
    w1 = ad.Var(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    b1 = ad.Var.zeros(4)
    w2 = ad.Var(np.linspace(1, -1, 8, dtype=np.float32).reshape(4, 2))
    x = ad.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    h = (x @ w1 + b1).relu()
    loss = ((h @ w2).tanh() - 0.5).sqr().mean()
    g = loss.backward()
    return [g[w1].numpy().copy(), g[b1].numpy().copy(), g[w2].numpy().copy()]


def test_allocation_failure_sweep():
    # every native allocation of a small MLP's forward + backward fails in turn
    assert sweep_alloc_failures(_small_mlp, min_failures=30) >= 30


def test_huge_shapes_are_a_clear_error():
    with pytest.raises(ad.Error, match="too many elements"):
        ad.zeros((2 ** 40, 2 ** 40))
    with pytest.raises((ad.Error, MemoryError)):
        ad.zeros((2 ** 62,))
