"""One test per row of the README's semantics table and per issue-2 semantics item.  Each test
names, in a comment, the candle / PyTorch behaviour pyautodiff follows or
differs from.  Values come from the seed transcripts (seeds/000, seeds/002)."""
import gc
import weakref

import numpy as np
import pytest

import pyautodiff as ad


def vals(t):
    return t.numpy().tolist()


# ---- what records a node ------------------------------------------------------------------
def test_recording_only_with_tracked_input():
    # candle: BackpropOp::new2 records only if an input track_op(); PyTorch: only
    # with a requires_grad input.  pyautodiff = candle.
    x = ad.tensor([[1.0, 2.0], [3.0, 4.0]])
    w = ad.tensor([[0.5, -1.0], [2.0, 0.0]])
    y = x @ w
    loss = y.sqr().sum()
    for t in (w, y, loss):
        assert not t.is_variable and not t.track_op and t.op is None
        assert t.sorted_nodes() == []
    wv = ad.Var([[0.5, -1.0], [2.0, 0.0]])
    yv = x @ wv
    assert yv.track_op and yv.op == "matmul" and not yv.is_variable
    assert (yv.sqr().sum()).track_op


def test_seed000_graph_facts():
    # seeds/000: plain weight -> track_op false, sorted_nodes 0 everywhere; Var
    # weight -> w sorted_nodes 1, x sorted 0, y = x@w sorted 2; loss over
    # matmul, sqr, sum has 5 sorted nodes, root first, the Var last.
    x = ad.tensor([[1.0, 2.0], [3.0, 4.0]])
    w = ad.tensor([[0.5, -1.0], [2.0, 0.0]])
    y = x.matmul(w)
    loss = y.sqr().sum_all()
    assert [(t.is_variable, t.track_op, len(t.sorted_nodes())) for t in (w, y, loss)] == \
        [(False, False, 0)] * 3
    wv = ad.Var([[0.5, -1.0], [2.0, 0.0]])
    assert (wv.is_variable, wv.track_op, len(wv.sorted_nodes())) == (True, True, 1)
    assert (x.is_variable, x.track_op, len(x.sorted_nodes())) == (False, False, 0)
    yv = x.matmul(wv)
    assert (yv.is_variable, yv.track_op, len(yv.sorted_nodes())) == (False, True, 2)
    ids = {wv.id, x.id, yv.id}
    assert len(ids) == 3 and yv.id > wv.id  # ids from one counter, never reused


def test_sorted_nodes_order():
    # candle's sorted_nodes: root first, every node before its inputs, only
    # tracked nodes that reach a variable (x, untracked, is absent), Vars included.
    x = ad.tensor([[1.0, 2.0], [3.0, 4.0]])
    w = ad.Var([[0.5, -1.0], [2.0, 0.0]])
    k = ad.tensor([[1.0, 1.0]])
    y = x @ w
    h = y * k  # k untracked
    loss = (h.sqr() + h).sum()
    nodes = loss.sorted_nodes()
    assert nodes[0].id == loss.id
    pos = {t.id: i for i, t in enumerate(nodes)}
    assert len(pos) == len(nodes)
    assert x.id not in pos and k.id not in pos
    assert w.id in pos and y.id in pos and h.id in pos
    assert pos[loss.id] < pos[h.id] < pos[y.id] < pos[w.id]
    assert [t.is_variable for t in nodes].count(True) == 1
    assert all(t.track_op for t in nodes)
    # a tracked-looking chain not reaching a Var is not there: detach cuts it
    assert (y.detach() * 2).sorted_nodes() == []


def test_sorted_nodes_keeps_dropped_intermediate():
    # seeds/000: "dropped h, still reachable from out: true"
    big = ad.Var.zeros((64, 64))
    h = big.exp()
    out = h.sum_all()
    h_id = h.id
    del h
    gc.collect()
    assert any(n.id == h_id for n in out.sorted_nodes())
    assert [n.shape for n in out.sorted_nodes()] == [(), (64, 64), (64, 64)]


def test_no_grad_records_nothing_even_from_vars():
    # PyTorch: torch.no_grad(); candle has no such mode (it uses detach).
    w = ad.Var([1.0, 2.0])
    with ad.no_grad():
        assert not ad.is_grad_enabled()
        y = w * 3
        z = (w @ w)
    assert ad.is_grad_enabled()
    assert not y.track_op and y.op is None and y.sorted_nodes() == []
    assert not z.track_op

    @ad.no_grad()
    def f(t):
        return t.exp().sum()

    r = f(w)
    assert not r.track_op and ad.is_grad_enabled()
    with ad.no_grad():
        with ad.enable_grad():
            assert (w * 2).track_op
        assert not (w * 2).track_op
    with pytest.raises(ad.GraphError, match="does not depend on any Var"):
        r.backward()


# ---- Var ---------------------------------------------------------------------------------------
def test_var_is_tensor_subclass_and_constructors():
    # candle: Var wraps a Tensor; PyTorch: a requires_grad tensor; here a subclass.
    for v in (ad.Var.zeros((2, 3)), ad.Var.ones(4, dtype=ad.float64), ad.Var.randn((3,), seed=1),
              ad.Var([1.0, 2.0]), ad.Var(np.ones((2, 2)))):
        assert isinstance(v, ad.Var) and isinstance(v, ad.Tensor)
        assert v.is_variable and v.track_op and v.op is None
        assert len(v.sorted_nodes()) == 1
    assert vals(ad.Var.zeros((2, 3))) == [[0.0] * 3] * 2
    assert vals(ad.Var.ones(4, dtype=ad.float64)) == [1.0] * 4
    assert ad.Var.ones(4, dtype=ad.float64).dtype == ad.float64
    assert ad.Var.zeros((2, 3)).dtype == ad.float32
    np.testing.assert_array_equal(ad.Var.randn((3,), seed=1).numpy(),
                                  ad.Var.randn((3,), seed=1).numpy())


def test_var_from_tensor_copies():
    # seeds/002: candle's from_tensor copies (t unchanged after p.set, new id);
    # PyTorch's requires_grad_ is in place on the same object.
    t = ad.tensor([1.0, 2.0])
    p = ad.Var.from_tensor(t)
    assert p.id != t.id and not t.is_variable and p.is_variable
    p.set(ad.zeros(2))
    assert vals(t) == [1.0, 2.0] and vals(p) == [0.0, 0.0]


def test_var_from_tensor_on_var_returns_it():
    # seeds/002 "from_tensor(var) same id true" (candle); PyTorch: same object.
    p = ad.Var([1.0, 2.0])
    assert ad.Var.from_tensor(p) is p
    assert ad.Var.from_tensor(p.as_tensor()).id == p.id


def test_var_as_tensor_and_as_detached_tensor():
    # candle: as_tensor() is the same tensor (same id, tracked);
    # as_detached_tensor() is a new id over the same storage, untracked.
    w = ad.Var([1.0, 2.0])
    t = w.as_tensor()
    assert t.id == w.id and t.track_op and t.is_variable
    d = w.as_detached_tensor()
    assert d.id != w.id and not d.track_op and not d.is_variable
    w.set(ad.tensor([5.0, 6.0]))
    assert vals(d) == [5.0, 6.0] and vals(t) == [5.0, 6.0]  # shared storage
    g = (t * 2).sum().backward()
    assert vals(g[w]) == [2.0, 2.0]


def test_integer_var_rejected():
    # candle allows Var::new(u32) and silently has no grad (seeds/002);
    # PyTorch: "Only Tensors of floating point ... can require gradients".
    for data, dt in [([1, 2], None), ([1, 2], ad.int32), ([1, 2], ad.uint8), ([True], ad.bool)]:
        with pytest.raises(ad.DTypeError, match="float"):
            ad.Var(data, dtype=dt)
    with pytest.raises(ad.DTypeError):
        ad.Var.from_tensor(ad.tensor([1, 2]))
    with pytest.raises(ad.DTypeError):
        ad.Var.zeros(3, dtype=ad.int64)
    assert issubclass(ad.DTypeError, TypeError)


# ---- GradStore ------------------------------------------------------------------------------------
def seed002():
    k = ad.tensor([10.0, 20.0])
    w = ad.Var([1.0, 2.0])
    h = w * k
    loss = h.sum_all()
    return w, k, h, loss


def test_backward_returns_gradstore():
    # candle: backward() returns a GradStore; PyTorch accumulates into .grad.
    w, k, h, loss = seed002()
    v0 = w.version
    g = loss.backward()
    assert isinstance(g, ad.GradStore)
    assert vals(g[w]) == [10.0, 20.0]
    # nothing hidden mutated: no .grad appears (Var has __slots__, so none could be
    # set on the instance; the class has none), the Var's value and version are
    # unchanged, and a second backward does not accumulate into anything
    assert "grad" not in dir(w) and not hasattr(type(w), "grad")
    assert vals(w) == [1.0, 2.0] and w.version == v0
    assert vals(loss.backward()[w]) == [10.0, 20.0] and vals(g[w]) == [10.0, 20.0]


def test_gradstore_access():
    w, k, h, loss = seed002()
    g = loss.backward()
    assert vals(g.get(w)) == [10.0, 20.0]
    assert g.get(k) is None and g.get(h) is None
    assert w in g and k not in g and h not in g
    assert len(g) == 1
    with pytest.raises(KeyError, match="no gradient for tensor id"):
        g[k]
    sentinel = object()
    assert g.get(k, sentinel) is sentinel
    with pytest.raises(TypeError):
        g.get("w")


def test_gradstore_insert_remove():
    w, k, h, loss = seed002()
    g = loss.backward()
    g.insert(k, ad.tensor([1.0, 1.0]))
    assert k in g and len(g) == 2 and vals(g[k]) == [1.0, 1.0]
    g.insert(k, [3.0, 4.0])  # replaces
    assert vals(g[k]) == [3.0, 4.0] and len(g) == 2
    r = g.remove(k)
    assert vals(r) == [3.0, 4.0] and k not in g and len(g) == 1
    assert g.remove(k) is None
    empty = ad.GradStore()
    assert len(empty) == 0 and w not in empty


def test_gradstore_extend_sums():
    # seeds/002: candle's extend of two backwards -> [20, 40]; PyTorch gets the
    # same from two backward(retain_graph=True) accumulating into .grad.
    w, k, h, loss = seed002()
    acc = loss.backward()
    acc.extend(loss.backward())
    assert vals(acc.get(w)) == [20.0, 40.0]
    other = ad.GradStore()
    other.insert(k, ad.tensor([1.0, 2.0]))
    acc.extend(other)  # a key only in other is added
    assert vals(acc[k]) == [1.0, 2.0] and len(acc) == 2


def test_second_backward_fresh():
    # candle: second backward works with fresh grads; PyTorch: error unless
    # retain_graph ("Trying to backward through the graph a second time").
    w, k, h, loss = seed002()
    g1 = loss.backward()
    g2 = loss.backward()
    assert vals(g1[w]) == [10.0, 20.0] and vals(g2[w]) == [10.0, 20.0]


def test_untracked_input_gets_no_grad():
    # candle computes k's grad (Some([1, 2])); PyTorch gives None; pyautodiff None.
    w, k, h, loss = seed002()
    g = loss.backward()
    assert g.get(k) is None and k not in g


def test_intermediate_not_in_store_unless_retained():
    # candle: h.grad None (trick: add a zero Var); PyTorch: None unless
    # retain_grad().  pyautodiff: backward(retain=[h]) -> [20, 80], w -> [200, 1600].
    k = ad.tensor([10.0, 20.0])
    w = ad.Var([1.0, 2.0])
    h = w * k
    g = (h * h).sum().backward()
    assert g.get(h) is None and vals(g[w]) == [200.0, 1600.0]
    g = (h * h).sum().backward(retain=[h])
    assert vals(g[h]) == [20.0, 80.0] and vals(g[w]) == [200.0, 1600.0]
    assert len(g) == 2
    # candle's zero-Var trick gives the same numbers
    z = ad.Var.zeros(2)
    h2 = w * k + z
    g = (h2 * h2).sum().backward()
    assert vals(g[z]) == [20.0, 80.0] and g.get(h2) is None


def test_backward_with_grad_seed():
    # candle seeds a non-scalar root with ones; PyTorch needs gradient=; here grad=.
    w, k, h, loss = seed002()
    g = h.backward(grad=ad.tensor([1.0, 0.5]))
    assert vals(g[w]) == [10.0, 10.0]
    g = h.backward(grad=[2.0, 2.0])
    assert vals(g[w]) == [20.0, 40.0]
    g = loss.backward(grad=ad.tensor(3.0))
    assert vals(g[w]) == [30.0, 60.0]


def test_non_scalar_root_without_grad_is_an_error():
    # candle seeds with ones (w.grad [10, 20] in seeds/002); PyTorch: "grad can be
    # implicitly created only for scalar outputs".  pyautodiff names the shape.
    w, k, h, loss = seed002()
    with pytest.raises(ad.ShapeError, match=r"\(2\)|\(2,\)"):
        h.backward()
    one = (w * k).sum(0, keepdim=True)  # shape (1,): one element, implied seed
    assert vals(one.backward()[w]) == [10.0, 20.0]


# ---- detach -----------------------------------------------------------------------------------------
def test_clone():
    # PyTorch's clone: new memory, row-major, on the graph (the gradient passes
    # through unchanged); a Var clones to a plain tracked Tensor
    w = ad.Var([[1.0, 2.0], [3.0, 4.0]])
    c = w.t().clone()
    addr = lambda t: t.numpy().__array_interface__["data"][0]  # noqa: E731
    assert c.is_contiguous and not c.is_variable and c.op == "copy" and addr(c) != addr(w)
    assert vals(c) == [[1.0, 3.0], [2.0, 4.0]]
    g = (c * c).sum().backward()[w]
    np.testing.assert_array_equal(g.numpy(), 2 * w.numpy())
    c2 = w.clone()  # contiguous: a copy of the whole block, on the graph
    assert c2.op == "copy" and not c2.is_variable and addr(c2) != addr(w)
    np.testing.assert_array_equal((c2 * 3).sum().backward()[w].numpy(), np.full((2, 2), 3.0))
    w.set(ad.tensor([[0.0, 0.0], [0.0, 0.0]]))
    assert vals(c) == [[1.0, 3.0], [2.0, 4.0]] and vals(c2) == [[1.0, 2.0], [3.0, 4.0]]  # own memory
    x = ad.tensor([1, 2, 3])
    y = x.clone()
    assert y.dtype is ad.int64 and vals(y) == [1, 2, 3] and addr(y) != addr(x)
    assert not y.track_op and ad.tensor(2.5).clone().item() == 2.5


def test_detach():
    # candle: new id, shared storage, untracked; an untracked tensor returns
    # itself.  PyTorch: always a new tensor object.
    w = ad.Var([1.0, 2.0])
    y = w * 2
    d = y.detach()
    assert d.id != y.id and not d.track_op and d.op is None and d.sorted_nodes() == []
    assert d.numpy().__array_interface__["data"][0] == y.numpy().__array_interface__["data"][0]
    assert not d.exp().track_op
    x = ad.tensor([1.0, 2.0])
    assert x.detach() is x
    dw = w.detach()
    assert dw.id != w.id and not dw.is_variable and not dw.track_op
    w.set(ad.tensor([7.0, 8.0]))
    assert vals(dw) == [7.0, 8.0]


# ---- untracked outputs ---------------------------------------------------------------------------------
def test_untracked_outputs():
    # candle: y.to_dtype(U32) has track_op true (but sorted_nodes 0), argmax
    # untracked; pyautodiff: casts to integers, argmax and comparisons untracked.
    w = ad.Var([[0.5, -1.0], [2.0, 0.0]])
    y = w * 2
    for t in (y.to_dtype(ad.int64), y.to_dtype(ad.uint8), y.to_dtype(ad.bool), y.argmax(1),
              y.argmin(), y > 0, y == y, w.to_dtype("int32")):
        assert not t.track_op and t.op is None and t.sorted_nodes() == []
    f = y.to_dtype(ad.float64)
    assert f.track_op and f.op is not None


# ---- Var.set ----------------------------------------------------------------------------------------------
CANDLE_MSG = "cannot set a variable to a tensor that is derived from its value"


def test_var_set_refuses_shared_storage():
    # candle's exact message (seeds/000) for w.t() and w.as_detached_tensor().
    w = ad.Var([[1.0, 2.0], [3.0, 4.0]])
    for src in (w.t(), w.as_detached_tensor(), w.as_tensor(), w[0:1].broadcast_to((2, 2)),
                w.detach()):
        with pytest.raises(ad.GraphError, match=CANDLE_MSG):
            w.set(src)
    w.set(w * 2)  # a new tensor: allowed (seeds/000 "after set(w * 2)")
    assert vals(w) == [[2.0, 4.0], [6.0, 8.0]]


def test_var_set_shape_and_dtype_mismatch():
    # candle errors on shape/dtype mismatch too; PyTorch's copy_ would broadcast/cast.
    w = ad.Var([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ad.ShapeError, match=r"set: shape mismatch.*\(2, 2\).*\(4,\)"):
        w.set(ad.zeros(4))
    with pytest.raises(ad.ShapeError):
        w.set(ad.zeros((1, 2)))  # no broadcasting
    with pytest.raises(ad.DTypeError, match="set: dtype mismatch.*float32.*float64"):
        w.set(ad.zeros((2, 2), dtype=ad.float64))
    assert vals(w) == [[1.0, 2.0], [3.0, 4.0]]


def test_var_set_bumps_version_and_accepts_views():
    w = ad.Var.zeros((2, 3))
    v0 = w.version
    src = ad.tensor(np.arange(6.0).reshape(3, 2)).to_dtype(ad.float32)
    w.set(src.t())  # a non-contiguous source is fine
    assert w.version == v0 + 1
    np.testing.assert_array_equal(w.numpy(), np.arange(6.0).reshape(3, 2).T)


def test_set_after_backward_then_new_forward_backward():
    # candle & PyTorch optimizer step pattern: set between iterations is fine.
    x = ad.tensor([1.0, 2.0])
    w = ad.Var([1.0, 1.0])
    g = (w * x).sqr().sum().backward()
    assert vals(g[w]) == [2.0, 8.0]
    w.set(w.as_detached_tensor() - g[w] * 0.5)
    assert vals(w) == [0.0, -3.0]
    g = (w * x).sqr().sum().backward()
    assert vals(g[w]) == [0.0, -24.0]


def test_set_between_forward_and_backward_is_a_graph_error():
    # candle: silently wrong gradient; PyTorch: version-counter RuntimeError.
    # pyautodiff: ad.GraphError naming the op, the tensor id and the versions.
    x = ad.tensor([1.0, 2.0])
    w = ad.Var([1.0, 1.0])
    loss = (w.sqr() * x).sum()  # sqr saves w's value for its backward
    wid = w.id
    w.set(ad.tensor([3.0, 3.0]))
    with pytest.raises(ad.GraphError) as ei:
        loss.backward()
    msg = str(ei.value)
    assert "sqr" in msg and f"tensor id {wid}" in msg and "version 0" in msg \
        and "now 1" in msg, msg
    # mul(w, x) with x untracked saves only x (burn's rule), so w's change does
    # not invalidate (w * x).sqr(): sqr saved w * x, computed before the set
    loss1 = (w * x).sqr().sum()
    w.set(ad.tensor([1.0, 1.0]))
    assert vals(loss1.backward()[w]) == [2 * 3.0 * 1.0, 2 * 3.0 * 4.0]
    assert isinstance(ei.value, RuntimeError)
    # a graph that never saved w's value (w + x: add saves nothing) still works
    loss2 = (w + x).sum()
    w.set(ad.tensor([0.0, 0.0]))
    assert vals(loss2.backward()[w]) == [1.0, 1.0]


# ---- numpy interop, hashing -----------------------------------------------------------------------------
def test_numpy_zero_copy_read_only_keeps_storage_alive():
    t = ad.tensor([[1.0, 2.0], [3.0, 4.0]])
    a = t.numpy()
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0, 0] = 5
    assert a.__array_interface__["data"][0] == t.numpy().__array_interface__["data"][0]
    n0 = ad.live_tensors()
    del t
    gc.collect()
    assert ad.live_tensors() == n0  # the array keeps the tensor alive
    assert a.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    w = ad.Var([1.0, 2.0])
    view = w.numpy()
    w.set(ad.tensor([3.0, 4.0]))
    assert view.tolist() == [3.0, 4.0]  # a Var's view sees set()
    # views: transposed numpy of a transposed tensor, still zero-copy
    m = ad.tensor(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(m.t().numpy(), np.arange(6.0).reshape(2, 3).T)


def test_np_asarray():
    t = ad.tensor([[1, 2], [3, 4]], dtype=ad.int32)
    a = np.asarray(t)
    assert a.dtype == np.int32 and a.tolist() == [[1, 2], [3, 4]]
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert np.array(t).flags.writeable  # np.array copies
    assert ad.tensor(3.5).item() == 3.5 and ad.tensor(3.5).shape == ()


def test_hash_is_identity():
    # tensors key dicts (PyTorch: identity hash; __eq__ is elementwise)
    a, b = ad.tensor([1.0]), ad.tensor([1.0])
    d = {a: "a", b: "b"}
    assert d[a] == "a" and d[b] == "b" and len(d) == 2
    assert hash(a) == hash(a) and hash(a) != hash(b)
    r = weakref.ref(a)
    assert r() is a


def test_ids_unique_and_never_reused():
    ids = set()
    for _ in range(100):
        t = ad.zeros(1)
        assert t.id not in ids
        ids.add(t.id)
        del t


def test_backward_store_outlives_graph():
    # nothing hidden: the store owns its gradients after the graph is gone
    w, k, h, loss = seed002()
    g = loss.backward()
    del h, loss, k
    gc.collect()
    assert vals(g[w]) == [10.0, 20.0]


def test_saved_inputs_only_when_needed():
    # burn: mul saves rhs only if lhs is tracked; add saves nothing.  (candle
    # keeps both operands of every op; PyTorch saves per-op.)
    w = ad.Var.zeros(1000)
    b = ad.ones(1000)
    y = w + b
    n0 = ad.live_tensors()
    del b  # add's backward reads no input: b is not kept by y's node
    assert ad.live_tensors() == n0 - 1
    k = ad.ones(1000)
    y2 = w * k
    n1 = ad.live_tensors()
    del k  # w's gradient needs k: kept
    assert ad.live_tensors() == n1
    assert y.track_op and y2.track_op
    assert (y2.sum().backward()[w].numpy() == 1).all()


def test_grad_mode_is_thread_local():
    # PyTorch's no_grad is thread-local too; candle has no grad mode.
    import threading

    w = ad.Var([1.0])
    seen = []
    with ad.no_grad():
        t = threading.Thread(target=lambda: seen.append((w * 2).track_op))
        t.start()
        t.join()
        assert not (w * 2).track_op
    assert seen == [True]


def test_retain_of_unrelated_tensor_is_ignored():
    w = ad.Var([1.0, 2.0])
    other = ad.ones(2)
    g = (w * 2).sum().backward(retain=[other])
    assert other not in g and len(g) == 1


def test_var_constructor_on_var_shares():
    # ad.Var(v) on a Var is that Var's value (same id), like from_tensor
    w = ad.Var([1.0, 2.0])
    assert ad.Var(w).id == w.id
    v = ad.Var(ad.tensor([1.0, 2.0]), dtype=ad.float64)
    assert v.dtype == ad.float64 and v.is_variable


def test_clean_interpreter_exit():
    # handles released exactly once: module globals, cycles, stores and numpy
    # views alive at exit neither crash nor print "Exception ignored in __del__"
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = """
import pyautodiff as ad
w = ad.Var.randn((3, 3), seed=0)
y = (w @ w).relu().sum()
g = y.backward()
view = (w * 2).numpy()
class Holder: pass
h = Holder(); h.self = h; h.t = w.t(); h.g = g
d = {w: y, y: g}
"""
    p = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=root), timeout=60)
    assert p.returncode == 0 and p.stderr == "", p.stderr


# ---- review findings ---------------------------------------------------------------
def test_copy_shares_with_its_own_reference():
    import copy

    t = ad.tensor([1.0, 2.0])
    u = copy.copy(t)
    del t
    assert u.tolist() == [1.0, 2.0]
    w = ad.Var([3.0])
    w2 = copy.deepcopy(w)
    assert w2.is_variable and w2.id != w.id and w2.tolist() == [3.0]
    s = (w * 2).sum().backward()
    s2 = copy.copy(s)
    del s
    assert len(s2) == 1 and s2[w].tolist() == [2.0]


def test_integer_tensor_compared_with_a_fraction_is_a_dtype_error():
    # numpy would compare in float64; a scalar never changes a tensor's dtype here
    t = ad.tensor([1, 2])
    with pytest.raises(ad.DTypeError):
        t == 1.5
    assert (t < 2).tolist() == [True, False]


def test_list_operands_follow_the_scalar_rule():
    # a list or tuple operand takes the tensor's dtype only where it holds
    # exactly (it was cast: i + [1.5, 2.5] gave [2, 4], a bool == [2, 0] all
    # True); the error names the op
    i, b = ad.tensor([1, 2]), ad.tensor([True, False])
    u8 = ad.tensor(np.array([0, 7, 255], dtype=np.uint8))
    for f, op in ((lambda: i + [1.5, 2.5], "add"), (lambda: [0.5, 1] * i, "mul"),
                  (lambda: i == [1.5, 2], "eq"), (lambda: ad.maximum(i, (1.5, 2.5)), "maximum"),
                  (lambda: ad.where(i > 1, i, [9.9, 9.9]), "where"),
                  (lambda: u8 + [1.7, 1, 0], "add"), (lambda: i ** [0.5, 1], "pow")):
        with pytest.raises(ad.DTypeError, match=rf"{op}: value .* of a (list|tuple) operand is "
                                                 rf"not an integer"):
            f()
    with pytest.raises(ad.OutOfBoundsError, match=r"eq: value 2 of a list operand is out of "
                                                  r"bounds for bool \(range 0..1\)"):
        b == [2, 0]
    with pytest.raises(ad.OutOfBoundsError, match="add: value 256 .* uint8"):
        u8 + [256, 0, 0]
    assert (i + [1.0, 2.0]).tolist() == [2, 4] and (b == [1, 0]).tolist() == [True, True]
    assert (ad.tensor([1.0, 2.0]) + (1, 2)).tolist() == [2.0, 4.0]
    # an operand no op takes is Python's to compare: == is False, `in` works
    t = ad.tensor([1.0, 2.0])
    assert (t == None) is False and (t != "a") is True  # noqa: E711
    assert t in [None, t] and t not in [None, "x"]
    with pytest.raises(TypeError):
        t < None


def test_subtracting_a_numpy_unsigned_scalar():
    assert (ad.tensor([1.0, 2.0]) - np.uint8(3)).tolist() == [-2.0, -1.0]


def test_large_int64_full_and_arange_are_exact():
    assert ad.full((1,), 2 ** 62 + 1).tolist() == [2 ** 62 + 1]
    assert ad.arange(2 ** 53, 2 ** 53 + 4).tolist() == [2 ** 53 + i for i in range(4)]


def test_pow_exponent_version_is_checked():
    b = ad.Var([2.0, -1.0])
    p = ad.tensor([0.5, 2.0]).pow(b).sum()
    b.set(ad.tensor([-1.0, 2.0]))
    with pytest.raises(ad.GraphError, match="pow"):
        p.backward()


def _draws_in_a_forked_child(n=4):
    """ad.randn(n) drawn in a forked child, and the parent's next draw."""
    import os

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its draw through the pipe, and out without cleanup
        try:
            os.write(w, np.ascontiguousarray(ad.randn(n).numpy()).tobytes())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while len(data) < 4 * n:
        chunk = os.read(r, 4 * n - len(data))
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return np.frombuffer(data, np.float32), ad.randn(n).numpy()


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_default_generator_in_forked_children():
    # seeded from the OS once (not per draw): a forked child seeds its own,
    # so children do not repeat the parent's numbers; after manual_seed the
    # stream is the parent's, as numpy's and PyTorch's generators are
    import sys

    _t = sys.modules["pyautodiff.tensor"]  # (ad.tensor is the function)
    saved = _t._gen_state, _t._gen_from_os
    try:
        _t._gen_state = None
        ad.randn(1)
        child, parent = _draws_in_a_forked_child()
        assert child.shape == (4,) and not np.array_equal(child, parent)
        ad.manual_seed(11)
        child, parent = _draws_in_a_forked_child()
        np.testing.assert_array_equal(child, parent)
    finally:
        _t._gen_state, _t._gen_from_os = saved


def test_logsumexp_keeps_nan_and_reduces_every_dim_for_none():
    # an infinite maximum was returned as is even when a NaN (skipped by the
    # maximum) was in the lane; None / () / [] reduced nothing
    nan, inf = np.nan, np.inf
    for row, want in (([nan], nan), ([nan, nan], nan), ([-inf, nan], nan), ([inf, nan], nan),
                      ([1.0, nan], nan), ([inf, 1.0], inf), ([-inf, -inf], -inf),
                      ([-inf, 2.0], 2.0)):
        for dt in ("float32", "float64"):
            a = np.array(row, dtype=dt)
            for t in (ad.tensor(a), ad.tensor(np.stack([a, a], 1)).t()):  # a lane, strided lanes
                got = t.logsumexp(-1).numpy()
                np.testing.assert_array_equal(got, np.full(got.shape, want, dtype=dt), err_msg=row)
    t = ad.tensor(np.arange(6.0).reshape(2, 3))
    want = np.log(np.exp(np.arange(6.0)).sum())
    for dim in (None, (), []):
        np.testing.assert_allclose(t.logsumexp(dim).numpy(), want, rtol=1e-12)
    assert t.logsumexp(None, keepdim=True).shape == (1, 1)
    with pytest.raises(ad.InvalidArgumentError, match="logsumexp: dim -2 given twice"):
        t.logsumexp((0, -2))
    # var and std over () are over every dim, as mean and sum are
    np.testing.assert_allclose(t.var(()).item(), np.arange(6.0).var(ddof=1))
    np.testing.assert_allclose(t.std(()).item(), np.arange(6.0).std(ddof=1))


def test_zero_d_tensors_take_dims_0_and_minus_1():
    # torch's rule; flip, transpose and var of a 0-d tensor raised a bare IndexError
    s = ad.tensor(3.0)
    for d in (0, -1):
        assert s.sum(d).item() == 3.0 and s.mean(d).item() == 3.0 and s.max(d).item() == 3.0
        assert s.flip(d).item() == 3.0 and s.transpose(d, 0).item() == 3.0
        assert s.logsumexp(d).item() == 3.0 and np.isnan(s.var(d).item())
        for f in (lambda: s.narrow(d, 0, 1), lambda: s.split(1, d), lambda: s.chunk(1, d)):
            with pytest.raises(ad.ShapeError, match="needs a tensor of at least 1 dim"):
                f()
    with pytest.raises(ad.OutOfRangeError):
        s.sum(1)
    with pytest.raises(ad.InvalidArgumentError, match=r"flip: dims \(0, 0\) name a dim twice"):
        ad.ones(2, 3).flip((0, 0))


def test_integer_clamp_bounds_are_exact_and_in_range():
    x = ad.tensor([2 ** 62 + 1, 2 ** 53])
    assert x.clamp(max=2 ** 62 + 1).tolist() == [2 ** 62 + 1, 2 ** 53]
    assert x.clamp(min=2 ** 53 + 1).tolist() == [2 ** 62 + 1, 2 ** 53 + 1]
    assert x.clamp(2 ** 53 + 1, 2 ** 62).tolist() == [2 ** 62, 2 ** 53 + 1]
    u = ad.tensor(np.array([0, 7, 255], dtype=np.uint8))
    assert u.clamp(1, 9).tolist() == [1, 7, 9]
    # a bound past the range on its own side limits nothing; on the other side
    # no element could take it (it clamped a uint8 to 0 for max=-1)
    assert u.clamp(-5, 1000).tolist() == [0, 7, 255] and x.clamp(-2 ** 70).tolist() == x.tolist()
    for kw in ({"max": -1}, {"min": 300}):
        with pytest.raises(ad.OutOfBoundsError, match="clamp: bound .* uint8 .* no element"):
            u.clamp(**kw)
