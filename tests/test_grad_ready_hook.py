"""The gradient-ready hook behind DistributedDataParallel's overlap
(ad_backward_hooked, through ad.distributed._backward_with_hook): no MPI
needed.  It must fire once per store entry, only when that entry's gradient
is final, and an exception inside it must leave backward as itself without
leaking."""
import numpy as np
import pytest

import pyautodiff as ad
import pyautodiff.distributed as dist
from pyautodiff._lib import ffi, lib


def graph(dtype=ad.float64):
    """A loss in which w is used three times at different depths (so its
    gradient is a sum of contributions arriving at different moments of the
    walk), plus a Var b used once and a Var u that the loss does not use."""
    rng = np.random.default_rng(0)
    w = ad.Var(rng.standard_normal((3, 4)), dtype=dtype)
    b = ad.Var(rng.standard_normal(4), dtype=dtype)
    u = ad.Var(rng.standard_normal(2), dtype=dtype)
    x = ad.tensor(rng.standard_normal((5, 3)), dtype=dtype)
    h = (x @ w + b).tanh()                      # w deep in the graph
    h2 = h * (w.sum(0) ** 2)                    # w again, one level up
    loss = (h2 ** 2).sum() + (w * w).sum() * 0.5  # and at the root
    return loss, (w, b, u), h


def test_fires_once_per_entry_with_the_final_gradient():
    loss, (w, b, u), h = graph()
    seen = []

    def on_ready(tid, g):
        seen.append((tid, g.numpy().copy(), g))

    store = dist._backward_with_hook(loss, on_ready, retain=[h])
    ids = [tid for tid, _, _ in seen]
    assert sorted(ids) == sorted([w.id, b.id, h.id]), ids
    assert len(set(ids)) == len(ids)
    plain = loss.backward(retain=[h])
    for t in (w, b, h):
        tid, val, g = next(s for s in seen if s[0] == t.id)
        # the value handed to the hook is the final one: equal to the store's
        # entry and to a plain backward's (a partial sum would differ)
        np.testing.assert_array_equal(val, store[t].numpy())
        np.testing.assert_array_equal(val, plain[t].numpy())
        assert g.shape == t.shape and g.dtype == t.dtype
    assert u not in store
    # the walk runs from the root to the leaves: the retained intermediate's
    # gradient is final before those of the Vars it depends on
    assert ids.index(h.id) < ids.index(w.id) and ids.index(h.id) < ids.index(b.id)


def test_matches_plain_backward_float32_and_create_graph():
    loss, (w, b, u), _ = graph(ad.float32)
    got = {}
    store = dist._backward_with_hook(loss, lambda tid, g: got.setdefault(tid, g.numpy().copy()),
                                     create_graph=True)
    assert set(got) == {w.id, b.id}
    for t in (w, b):
        np.testing.assert_array_equal(got[t.id], store[t].numpy())
    # under create_graph the gradients track: differentiate again
    gw = store[w]
    again = (gw * gw).sum().backward()
    assert w in again and again[w].shape == w.shape


class Boom(Exception):
    pass


@pytest.mark.parametrize("at", [0, 1])
def test_exception_in_the_hook_propagates_and_leaks_nothing(at):
    loss, (w, b, u), _ = graph()
    calls = []

    def on_ready(tid, g):
        calls.append(tid)
        if len(calls) == at + 1:
            raise Boom(f"hook fails at call {at}")

    before = ad.live_tensors(), ad.live_bytes()
    with pytest.raises(Boom, match=f"hook fails at call {at}"):
        dist._backward_with_hook(loss, on_ready)
    assert len(calls) == at + 1  # backward stopped at the failing call
    # nothing pending is left behind: the next backward works and raises nothing
    store = loss.backward()
    assert w in store and b in store and len(store) == 2
    del store
    assert (ad.live_tensors(), ad.live_bytes()) == before


def test_errors_of_the_library_inside_the_hook_keep_their_type():
    loss, (w, b, u), _ = graph()

    def on_ready(tid, g):
        g.reshape(7)  # a ShapeError

    with pytest.raises(ad.ShapeError, match="reshape"):
        dist._backward_with_hook(loss, on_ready)


def test_a_c_callback_failure_names_the_tensor():
    """Without a Python exception pending (a C caller's callback), backward
    fails with the callback's status and a message naming the tensor."""
    loss, (w, b, u), _ = graph()

    @ffi.callback("ad_status(void *, const ad_tensor *, const ad_tensor *)")
    def failing(ctx, t, g):
        return lib.AD_ERR_VALUE

    out = ffi.new("ad_gradstore **")
    st = lib.ad_backward_hooked(loss._h, ffi.NULL, ffi.NULL, 0, 0, failing, ffi.NULL, out)
    assert st == lib.AD_ERR_VALUE and out[0] == ffi.NULL
    msg = ffi.string(lib.ad_last_error()).decode()
    assert "gradient-ready callback failed" in msg and "tensor id" in msg, msg
    assert f"tensor id {w.id} " in msg or f"tensor id {b.id} " in msg, msg


def test_null_callback_is_plain_backward_and_bad_flags_are_refused():
    loss, (w, b, u), _ = graph()
    out = ffi.new("ad_gradstore **")
    assert lib.ad_backward_hooked(loss._h, ffi.NULL, ffi.NULL, 0, 0, ffi.NULL, ffi.NULL,
                                  out) == lib.AD_OK
    store = ad.GradStore._from_handle(out[0])
    np.testing.assert_array_equal(store[w].numpy(), loss.backward()[w].numpy())
    assert lib.ad_backward_hooked(loss._h, ffi.NULL, ffi.NULL, 0, 8, ffi.NULL, ffi.NULL,
                                  out) == lib.AD_ERR_VALUE
    assert out[0] == ffi.NULL
    assert lib.ad_backward_hooked(loss._h, ffi.NULL, ffi.NULL, 0, 0, ffi.NULL, ffi.NULL,
                                  ffi.NULL) == lib.AD_ERR_VALUE


def test_bad_arguments():
    loss, _, _ = graph()
    with pytest.raises(ad.InvalidArgumentError, match="root must be an ad.Tensor"):
        dist._backward_with_hook(3.0, lambda tid, g: None)
    with pytest.raises(ad.InvalidArgumentError, match=r"retain\[0\]"):
        dist._backward_with_hook(loss, lambda tid, g: None, retain=[1])
    with pytest.raises(ad.ShapeError):
        dist._backward_with_hook(loss, lambda tid, g: None, grad=[1.0, 2.0])
