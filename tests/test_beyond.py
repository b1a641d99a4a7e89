"""Issue 15, items 2-5: memory_stats, to_dot, ad.Function custom ops and
ad.checkpoint."""
import os
import shutil
import subprocess
import threading

import numpy as np
import pytest

import pyautodiff as ad
import pyautodiff.function as adfunc
from pyautodiff.nn import functional as F
from gradcheck import check_grad, layouts


def saved():
    return ad.memory_stats()["saved_bytes"]


def saved_var():
    return ad.memory_stats()["saved_var_bytes"]


def in_threads(once, times, n_threads=4):
    """once() (True when its result is right) `times` times in each of n_threads
    threads at once; fails on any exception or wrong result."""
    errors, results = [], []

    def work():
        try:
            for _ in range(times):
                results.append(once())
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and len(results) == times * n_threads and all(results)


# ---- memory_stats ------------------------------------------------------------------
def test_memory_stats_keys_and_types():
    s = ad.memory_stats()
    assert set(s) == {"live_bytes", "peak_bytes", "saved_bytes", "saved_var_bytes"}
    assert all(isinstance(v, int) and v >= 0 for v in s.values())
    assert s["peak_bytes"] >= s["live_bytes"] == ad.live_bytes()


def test_saved_bytes_exact_on_a_small_graph():
    x = ad.randn(4, 3, seed=1, dtype=ad.float64)       # 96 bytes, untracked
    w = ad.Var.randn(3, 2, seed=0, dtype=ad.float64)   # 48 bytes
    s0 = saved()
    y = x @ w          # w's gradient reads x: 96
    assert saved() - s0 == 96
    z = y.sqr()        # reads y (4, 2): 64
    assert saved() - s0 == 160
    loss = z.sum()     # reads nothing
    assert saved() - s0 == 160
    e = w.exp()        # reads its output (3, 2): 48
    assert saved() - s0 == 208
    del loss, z, y, e
    assert saved() == s0


def test_saved_bytes_one_storage_once_per_node():
    a = ad.Var.randn(5, seed=0, dtype=ad.float64)  # 40 bytes
    s0, v0 = saved(), saved_var()
    b = a * a          # both inputs are a: counted once in this node
    assert saved_var() - v0 == 40
    c = a * a          # another node keeping the same storage counts it again
    assert saved_var() - v0 == 80
    d = a * a.reshape(5)  # a view of the same storage: still one storage per node
    assert saved_var() - v0 == 120
    assert saved() == s0  # all of it is the Var's own buffer
    del b, c, d
    assert saved() == s0 and saved_var() == v0


def test_saved_bytes_leave_the_vars_buffers_to_saved_var_bytes():
    w = ad.Var.randn(3, 4, seed=0, dtype=ad.float64)   # 96 bytes
    x = ad.Var.randn(2, 3, seed=1, dtype=ad.float64)   # 48 bytes
    s0, v0 = saved(), saved_var()
    y = x @ w                 # reads both Vars: Var bytes only
    assert (saved() - s0, saved_var() - v0) == (0, 144)
    z = (x * 2.0) @ w.T.T     # a copy of x (48, counted) and a view of w (a Var's buffer)
    assert (saved() - s0, saved_var() - v0) == (48, 240)
    q = w.detach() * w        # a detached view of w is still w's buffer: once
    assert (saved() - s0, saved_var() - v0) == (48, 336)
    r = ad.Var(w) * w         # Var(w) is w itself
    assert saved_var() - v0 == 432
    u = ad.Var(w * 1.0) * w   # a new Var: its own buffer, and w's
    assert (saved() - s0, saved_var() - v0) == (48, 624)
    del y, z, q, r, u
    assert (saved(), saved_var()) == (s0, v0)


def test_peak_bytes_and_reset():
    ad.reset_peak_memory()
    s0 = ad.memory_stats()
    assert s0["peak_bytes"] == s0["live_bytes"]
    t = ad.zeros((1000,), dtype=ad.float64)
    assert ad.memory_stats()["live_bytes"] == s0["live_bytes"] + 8000
    del t
    s1 = ad.memory_stats()
    assert s1["live_bytes"] == s0["live_bytes"]
    assert s1["peak_bytes"] == s0["live_bytes"] + 8000
    ad.reset_peak_memory()
    assert ad.memory_stats()["peak_bytes"] == s1["live_bytes"]


# ---- to_dot ------------------------------------------------------------------------
def seed_graph():
    w = ad.Var.randn(3, 2, seed=0)
    x = ad.randn(4, 3, seed=1)
    return w, x, (x @ w).sqr().sum()


def test_to_dot_structure():
    w, x, loss = seed_graph()
    dot = loss.to_dot()
    assert dot.startswith("digraph pyautodiff {") and dot.rstrip().endswith("}")
    nodes = [ln for ln in dot.splitlines() if "[label=" in ln and "->" not in ln]
    edges = [ln for ln in dot.splitlines() if "->" in ln]
    assert len(nodes) == 5 and len(edges) == 4
    by_id = {ln.split()[0]: ln for ln in nodes}
    assert 'label="Var\\n(3, 2)\\nfloat32"' in by_id[f"t{w.id}"]
    assert "shape=box" in by_id[f"t{w.id}"]
    # x is read by matmul's backward (w's gradient): saved, and gets no gradient
    assert "orange" in by_id[f"t{x.id}"] and "peripheries=2" in by_id[f"t{x.id}"]
    assert f"  t{x.id} -> " in dot and any(f"t{x.id} ->" in e and "dashed" in e for e in edges)
    labels = [ln.split('label="', 1)[1].split('"', 1)[0] for ln in nodes]
    assert sorted(lb.split("\\n")[0] for lb in labels) == ["Var", "matmul", "sqr", "sum",
                                                            "tensor"]
    assert 'label="sum\\n()\\nfloat32"' in dot
    # the matmul's output is what sqr's backward reads
    mm = [ln for ln in nodes if "matmul" in ln][0]
    assert "orange" in mm
    # every edge joins two declared nodes
    for e in edges:
        src, dst = e.split()[0], e.split()[2]
        assert src in by_id and dst in by_id


def test_to_dot_of_an_untracked_tensor_is_one_node():
    dot = ad.ones(2).to_dot()
    assert sum("[label=" in ln for ln in dot.splitlines()) == 1 and "->" not in dot


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz `dot` not installed")
def test_to_dot_renders_with_graphviz():
    _, _, loss = seed_graph()
    # graphviz is not ours to audit: no sanitizer runtime preloaded into it
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run(["dot", "-Tsvg"], input=loss.to_dot(), capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert "<svg" in r.stdout and "matmul" in r.stdout


def test_tensor_parents_abi():
    from pyautodiff._lib import ffi, lib

    _, x, loss = seed_graph()
    n, tr, sv = ffi.new("int *"), ffi.new("unsigned *"), ffi.new("unsigned *")
    assert lib.ad_tensor_parents(x._h, ffi.NULL, 0, n, tr, sv) == lib.AD_OK and n[0] == 0
    assert lib.ad_tensor_parents(loss._h, ffi.NULL, -1, n, tr, sv) == lib.AD_ERR_VALUE
    assert lib.ad_tensor_parents(ffi.NULL, ffi.NULL, 0, n, tr, sv) == lib.AD_ERR_VALUE


def _dot_node(dot, t):
    return [ln for ln in dot.splitlines() if ln.startswith(f"  t{t.id} [")][0]


@pytest.mark.parametrize("keep", [7, "out", None])
def test_to_dot_marks_what_a_node_of_eight_inputs_saves(keep):
    # ad_tensor_parents' bit 7 is both input 7's flag and the output's: to_dot reads
    # ad_tensor_saved, which keeps them apart
    class Eight(ad.Function):
        @staticmethod
        def forward(ctx, *xs):
            y = xs[0] * 1.0
            ctx.save_for_backward(xs[7] if keep == 7 else y if keep == "out" else None)
            return y

        @staticmethod
        def backward(ctx, g):
            return (g,) + (None,) * 7

    ws = [ad.Var.ones(2) for _ in range(8)]
    y = Eight.apply(*ws)
    dot = y.to_dot()
    assert ("orange" in _dot_node(dot, y)) == (keep == "out")
    assert ("orange" in _dot_node(dot, ws[7])) == (keep == 7)
    assert not any("orange" in _dot_node(dot, w) for w in ws[:7])


def test_tensor_saved_abi():
    from pyautodiff._lib import ffi, lib

    w, x, loss = seed_graph()
    sv, out = ffi.new("unsigned *"), ffi.new("int *")
    mm = (x @ w)
    assert lib.ad_tensor_saved(mm._h, sv, out) == lib.AD_OK and (sv[0], out[0]) == (1, 0)
    e = w.exp()
    assert lib.ad_tensor_saved(e._h, sv, out) == lib.AD_OK and (sv[0], out[0]) == (0, 1)
    assert lib.ad_tensor_saved(x._h, sv, out) == lib.AD_OK and (sv[0], out[0]) == (0, 0)
    assert lib.ad_tensor_saved(ffi.NULL, sv, out) == lib.AD_ERR_VALUE
    assert lib.ad_tensor_saved(x._h, ffi.NULL, out) == lib.AD_ERR_VALUE
    assert lib.ad_tensor_saved(x._h, sv, ffi.NULL) == lib.AD_ERR_VALUE


# ---- ad.Function -------------------------------------------------------------------
class Exp(ad.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, gy):
        (y,) = ctx.saved_tensors
        return gy * y


class MatMul(ad.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return (g @ b.t() if ctx.needs_input_grad[0] else None,
                a.t() @ g if ctx.needs_input_grad[1] else None)


@pytest.mark.parametrize("name,base,make", layouts((3, 4)), ids=lambda v: v if isinstance(v, str) else "")
def test_custom_exp_gradcheck(name, base, make):
    check_grad(lambda t: Exp.apply(t), [base], make=lambda i, t: make(t))


def test_custom_matmul_gradcheck_and_matches_builtin():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    check_grad(lambda x, y: MatMul.apply(x, y), [a, b])
    check_grad(lambda x, y: MatMul.apply(x.t(), y), [a.T.copy(), b])
    va, vb = ad.Var(a), ad.Var(b)
    g1 = MatMul.apply(va, vb).sum().backward()
    g2 = (va @ vb).sum().backward()
    for v in (va, vb):
        np.testing.assert_array_equal(g1[v].numpy(), g2[v].numpy())


def test_function_is_one_node_named_after_the_class():
    w = ad.Var.randn(3, 2, seed=0)
    x = ad.randn(4, 3, seed=1)
    y = Exp.apply(x @ w)
    assert y.op == "Exp" and y.track_op
    assert [n.op for n in y.sum().sorted_nodes()] == ["sum", "Exp", "matmul", None]
    assert "Exp\\n(4, 2)" in y.to_dot()


def test_function_needs_input_grad_and_untracked_inputs():
    seen = []

    class Probe(ad.Function):
        @staticmethod
        def forward(ctx, a, b, k):
            seen.append((ctx.needs_input_grad, ad.is_grad_enabled()))
            return a * b * k

        @staticmethod
        def backward(ctx, g):
            return g, None, None

    w = ad.Var.ones(2)
    c = ad.ones(2)
    out = Probe.apply(w, c, 3.0)
    assert seen[-1] == ((True, False, False), False)  # forward runs under no_grad
    assert out.backward(ad.ones(2))[w].tolist() == [1.0, 1.0]
    plain = Probe.apply(c, c, 2.0)
    assert not plain.track_op and plain.op is None
    with ad.no_grad():
        assert not Probe.apply(w, c, 1.0).track_op


def test_function_exception_in_backward_comes_out_as_itself():
    class Boom(ad.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2.0

        @staticmethod
        def backward(ctx, g):
            raise KeyError("no such thing")

    w = ad.Var.ones(3)
    loss = Boom.apply(w).sum()
    with pytest.raises(KeyError, match="Boom.backward") as ei:
        loss.backward()
    assert "no such thing" in str(ei.value)
    del ei, loss
    assert not adfunc._live  # the ctx went with the graph
    # nothing is left pending: the next native failure is its own
    with pytest.raises(ad.ShapeError):
        ad.ones(2) + ad.ones(3)


def test_function_wrong_gradients_name_the_function_and_the_input():
    class Wrong(ad.Function):
        mode = None

        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            m = Wrong.mode
            if m == "count":
                return (g,)
            if m == "list":
                return [g, None]
            if m == "shape":
                return g, g.reshape(1, 3)
            return g, g.float()

    a, b = ad.Var.ones(3, dtype=ad.float64), ad.Var.ones(3, dtype=ad.float64)
    Wrong.mode = "count"
    with pytest.raises(ad.InvalidArgumentError, match=r"^Wrong.backward: returned 1 gradient; "
                                                      r"apply took 2"):
        Wrong.apply(a, b).sum().backward()
    Wrong.mode = "list"  # a list is as good as a tuple
    g = Wrong.apply(a, b).sum().backward()
    assert g[a].tolist() == [1.0, 1.0, 1.0] and b not in g
    Wrong.mode = "shape"
    with pytest.raises(ad.ShapeError, match=r"Wrong.backward: the gradient for input 1 has "
                                            r"shape \(1, 3\)"):
        Wrong.apply(a, b).sum().backward()
    Wrong.mode = "dtype"
    with pytest.raises(ad.DTypeError, match=r"Wrong.backward: the gradient for input 1 is "
                                            r"ad.float32, the input is ad.float64"):
        Wrong.apply(a, b).sum().backward()


def test_function_ctx_released_with_the_graph_and_saved_bytes_counted():
    holder = []

    class Keep(ad.Function):
        @staticmethod
        def forward(ctx, x):
            holder.append(ctx)
            y = x * 3.0
            ctx.save_for_backward(x, y)
            return y

        @staticmethod
        def backward(ctx, g):
            return g * 3.0

    w = ad.Var.ones(4, dtype=ad.float64)  # 32 bytes
    s0, v0 = saved(), saved_var()
    y = Keep.apply(w)
    assert (saved() - s0, saved_var() - v0) == (32, 32)  # x (the Var) and y
    assert len(adfunc._live) == 1
    del y
    assert saved() == s0 and saved_var() == v0 and not adfunc._live
    with pytest.raises(ad.GraphError, match="Keep"):
        holder[0].saved_tensors


def test_function_saved_input_modified_in_place_is_a_graph_error():
    w = ad.Var.ones(1, 3, dtype=ad.float64)
    v = ad.Var.ones(3, 1, dtype=ad.float64)
    y = MatMul.apply(w, v)  # saves both inputs: version-checked like a built-in op
    w.set(ad.zeros(1, 3, dtype=ad.float64))
    with pytest.raises(ad.GraphError, match="modified in place"):
        y.sum().backward()


def test_function_from_several_threads():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 8))
    b = rng.standard_normal((8, 4))
    va, vb = ad.Var(a), ad.Var(b)
    want = (va @ vb).exp().sum().backward()[va].numpy()

    def once():
        g = Exp.apply(MatMul.apply(va, vb)).sum().backward()[va].numpy()
        return np.array_equal(g, want)

    in_threads(once, 20)


def test_function_saved_output_stays_tracked_while_another_thread_runs_its_backward():
    # two threads in the backward of one node: the second one's callback ending must not
    # turn the first one's saved output back into the untracked forward value (which would
    # drop the path through it from a create_graph gradient)
    a_inside, b_done = threading.Event(), threading.Event()
    seen, hs = {}, {}

    class Exp3(Exp):
        @staticmethod
        def backward(ctx, gy):
            if threading.current_thread().name == "A":
                a_inside.set()
                assert b_done.wait(30)
            (y,) = ctx.saved_tensors
            seen[threading.current_thread().name] = y.track_op
            return gy * y

    w = ad.Var([0.5, -1.0], dtype=ad.float64)
    loss = Exp3.apply(w).sum()

    def run():
        (g,) = ad.grad(loss, [w], create_graph=True)
        hs[threading.current_thread().name] = ad.grad(g.sum(), [w])[0].numpy()

    a = threading.Thread(target=run, name="A")
    a.start()
    assert a_inside.wait(30)
    b = threading.Thread(target=run, name="B")
    b.start()
    b.join()
    b_done.set()
    a.join()
    assert seen == {"A": True, "B": True}
    for h in hs.values():
        np.testing.assert_allclose(h, np.exp([0.5, -1.0]), rtol=1e-12)


def test_function_with_detect_anomaly():
    class NanGrad(ad.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            return g * float("nan")

    w = ad.Var.ones(2)
    with ad.detect_anomaly():
        y = NanGrad.apply(w)  # the site is recorded here
        with pytest.raises(ad.GraphError, match=r"non-finite gradient.*test_beyond.py"):
            y.sum().backward()


# ---- checkpoint --------------------------------------------------------------------
def make_mlp(n_layers=4, width=8, seed=0, dtype=ad.float64):
    ws = [ad.Var.randn(width, width, seed=seed + i, dtype=dtype, std=0.4)
          for i in range(n_layers)]
    bs = [ad.Var.randn(width, seed=100 + seed + i, dtype=dtype, std=0.1)
          for i in range(n_layers)]
    return ws, bs


def block(w, b, p=0.0):
    def f(h):
        h = (h @ w + b).gelu()
        return F.dropout(h, p) if p else h
    return f


def run(ws, bs, x, ckpt, p):
    h = x
    for w, b in zip(ws, bs):
        h = ad.checkpoint(block(w, b, p), h) if ckpt else block(w, b, p)(h)
    return h.sqr().sum()


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_checkpoint_gradients_bit_identical(p):
    ws, bs = make_mlp()
    x = ad.Var(np.random.default_rng(0).standard_normal((5, 8)))
    ad.manual_seed(7)
    g0 = run(ws, bs, x, False, p).backward()
    ad.manual_seed(7)
    loss = run(ws, bs, x, True, p)
    assert sum(n.op.startswith("checkpoint(") for n in loss.sorted_nodes()
               if n.op is not None) == 4
    g1 = loss.backward()
    for v in ws + bs + [x]:
        np.testing.assert_array_equal(g0[v].numpy(), g1[v].numpy())


def test_checkpoint_keeps_only_the_inputs():
    ws, bs = make_mlp(n_layers=6, width=16)
    x = ad.Var(np.random.default_rng(1).standard_normal((32, 16)))
    s0, v0 = saved(), saved_var()
    loss = run(ws, bs, x, False, 0.0)
    plain = saved() - s0, saved_var() - v0
    del loss
    loss = run(ws, bs, x, True, 0.0)
    ck = saved() - s0, saved_var() - v0
    del loss
    assert (saved(), saved_var()) == (s0, v0)
    # per layer, plain: matmul keeps h (32x16 f64, 4096 B; layer 1's is the
    # Var x) and w (2048 B, a Var), gelu its input (4096 B); checkpointed:
    # the node keeps h, w and b (128 B, a Var); the loss's sqr its input
    assert plain == (5 * 4096 + 6 * 4096 + 4096, 4096 + 6 * 2048)
    assert ck == (5 * 4096 + 4096, 4096 + 6 * (2048 + 128))


@pytest.mark.parametrize("n_layers", [4, 6, 35])
def test_checkpoint_of_a_block_reading_more_vars_than_a_node_has_inputs(n_layers):
    # a node takes at most 8 tensors: 12 and 70 Vars reach the block's node through bundles
    ws, bs = make_mlp(n_layers=n_layers, width=6, seed=3)
    x = ad.Var(np.random.default_rng(4).standard_normal((5, 6)))

    def many(h):
        for w, b in zip(ws, bs):
            h = block(w, b)(h)
        return h

    g0 = many(x).sqr().sum().backward()
    s0, v0 = saved(), saved_var()
    loss = ad.checkpoint(many, x).sqr().sum()
    ops = [n.op for n in loss.sorted_nodes()]
    # the block's output (kept by sqr) and each bundle's 0-d output; of the
    # Vars, x (kept by the block) and every other Var once
    assert saved() - s0 == 5 * 6 * 8 + 8 * ops.count("checkpoint_vars")
    assert saved_var() - v0 == 5 * 6 * 8 + sum(8 * v.numel() for v in ws + bs)
    assert sum(op is not None and op.startswith("checkpoint(") for op in ops) == 1
    assert ("checkpoint_vars" in ops) == (2 * n_layers > 7)
    g1 = loss.backward()
    assert len(g1) == len(g0) == 2 * n_layers + 1
    for v in ws + bs + [x]:
        np.testing.assert_array_equal(g0[v].numpy(), g1[v].numpy())
    g2 = loss.backward()  # again: the bundles hand out this pass's gradients
    for v in ws + bs + [x]:
        np.testing.assert_array_equal(g0[v].numpy(), g2[v].numpy())
    del loss
    assert (saved(), saved_var()) == (s0, v0)


def test_checkpoint_of_many_vars_of_two_dtypes():
    ws = [ad.Var.randn(4, 4, seed=i, dtype=ad.float64 if i % 3 else ad.float32, std=0.5)
          for i in range(12)]

    def mixed(h):
        for w in ws:
            h = (h @ w.to_dtype(ad.float64)).tanh()
        return h

    x = ad.Var.randn(3, 4, seed=5, dtype=ad.float64)
    g0 = mixed(x).sum().backward()
    g1 = ad.checkpoint(mixed, x).sum().backward()
    for v in ws + [x]:
        assert g1[v].dtype == v.dtype
        np.testing.assert_array_equal(g0[v].numpy(), g1[v].numpy())


def test_checkpoint_of_many_vars_from_several_threads():
    ws, bs = make_mlp(n_layers=6, width=6, seed=5)
    x = ad.Var(np.random.default_rng(6).standard_normal((5, 6)))
    f = lambda h: run(ws, bs, h, False, 0.0)  # noqa: E731
    want = f(x).backward()
    loss = ad.checkpoint(f, x)

    def once():
        g = loss.backward()
        return all(np.array_equal(g[v].numpy(), want[v].numpy()) for v in ws + bs + [x])

    in_threads(once, 10)


def test_checkpoint_with_create_graph_raises_naming_it():
    # the recomputed block is differentiated on its own, so its gradients cannot be
    # differentiated again: an error, never a silently constant gradient
    w = ad.Var.randn(3, 3, seed=2, dtype=ad.float64)
    x = ad.Var.randn(2, 3, seed=3, dtype=ad.float64)

    def blk(h):
        return (h @ w).tanh()

    y = ad.checkpoint(blk, x).sum() + (x ** 3).sum()
    with pytest.raises(ad.GraphError, match=r"the backward of checkpoint\(.*blk\) is not "
                                            r"differentiable.*checkpointing\(\"balanced\"\)"):
        ad.grad(y, [x], create_graph=True)
    assert np.isfinite(ad.grad(y, [x])[0].numpy()).all()  # plain backward still works


def test_checkpoint_gradcheck():
    w = ad.Var.randn(3, 3, seed=2, dtype=ad.float64)
    check_grad(lambda h: ad.checkpoint(lambda t: (t @ w).tanh() * t, h),
               [np.random.default_rng(2).standard_normal((2, 3))])


def test_checkpoint_of_a_function_that_writes_a_var_raises():
    w = ad.Var.ones(2, dtype=ad.float64)

    def bad(h):
        w.set(h * 2.0)
        return h * w

    with pytest.raises(ad.GraphError, match="checkpoint.*bad.*modified a Var"):
        ad.checkpoint(bad, ad.Var.ones(2, dtype=ad.float64))
    w.set(ad.zeros(2, dtype=ad.float64))  # writes are allowed again outside


@pytest.mark.parametrize("opt", [ad.optim.SGD, ad.optim.Adam, ad.optim.RMSprop])
def test_checkpoint_of_a_function_that_steps_an_optimizer_raises(opt):
    # an optimizer's update is a fused native write, not Var.set: refused all the same
    w = ad.Var.ones(2, dtype=ad.float64)
    o = opt([w], lr=0.1)

    def stepping(h):
        o.step((h * w).sum().backward())
        return h * w

    with pytest.raises(ad.GraphError, match="checkpoint.*stepping.*modified a Var"):
        ad.checkpoint(stepping, ad.Var.ones(2, dtype=ad.float64))
    assert w.tolist() == [1.0, 1.0]
    o.step((w * w).sum().backward())  # allowed again outside
    assert w.tolist() != [1.0, 1.0]


def test_checkpoint_without_grad_and_bad_arguments():
    w = ad.Var.ones(2)
    with ad.no_grad():
        y = ad.checkpoint(lambda t: t * w, ad.ones(2))
    assert not y.track_op and y.tolist() == [1.0, 1.0]
    with pytest.raises(ad.ArgumentTypeError, match="argument 1"):
        ad.checkpoint(lambda t, k: t * k, w, 2.0)
    with pytest.raises(ad.ArgumentTypeError, match="returned a tuple"):
        ad.checkpoint(lambda t: (t, t), w)


def test_function_saved_output_is_the_tracked_output_in_backward():
    seen = []

    class Exp2(Exp):
        @staticmethod
        def backward(ctx, gy):
            (y,) = ctx.saved_tensors
            seen.append(y.track_op)
            return gy * y

    w = ad.Var.ones(2, dtype=ad.float64)
    y = Exp2.apply(w)
    g = y.sum().backward()[w]
    assert seen == [True] and g.tolist() == list(np.exp([1.0, 1.0]))


def test_function_second_derivative_with_create_graph():
    w = ad.Var([0.5, -1.0], dtype=ad.float64)
    (g,) = ad.grad(Exp.apply(w).sum(), [w], create_graph=True)
    assert g.track_op
    (h,) = ad.grad(g.sum(), [w])  # d/dw exp(w) = exp(w) again
    np.testing.assert_allclose(h.numpy(), np.exp([0.5, -1.0]), rtol=1e-12)
