"""Issue 10, the Python half: handles kept alive across native calls, Python
ints at and beyond the dtypes' exact ranges (numpy 2's rules), idempotent
release, re-initialisation, argument errors as ad.Error subclasses, numpy 2's
__array__ copy protocol, and the leak fixture's own check."""
import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import pyautodiff as ad

adt = sys.modules["pyautodiff.tensor"]  # (ad.tensor is the function)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- 3. handles of temporaries outlive the native call ------------------------------------
class _LiveAtCall:
    """Stands in for the cffi lib inside pyautodiff.tensor and records the
    live-tensor count at the moment a native function is entered."""

    def __init__(self, real, name):
        self._real, self._name, self.seen = real, name, []

    def __getattr__(self, attr):
        f = getattr(self._real, attr)
        if attr != self._name:
            return f

        def spy(*args):
            self.seen.append(self._real.ad_live_tensors())
            return f(*args)

        return spy


def test_backward_retain_generator_keeps_temporaries_alive(monkeypatch):
    # the handles were taken from tensors that died before ad_backward ran
    # (a heap use-after-free in graph.c): they must still be alive at the call
    w = ad.Var([1.0, 2.0, 3.0])
    h = w * 2.0
    loss = (h * h).sum()
    spy = _LiveAtCall(adt.lib, "ad_backward")
    monkeypatch.setattr(adt, "lib", spy)
    before = ad.live_tensors()
    g = loss.backward(retain=(w * 3.0 for _ in range(4)))
    monkeypatch.undo()
    assert spy.seen == [before + 4]  # the four temporaries, alive during the call
    np.testing.assert_allclose(g[w].numpy(), 8.0 * np.array([1.0, 2.0, 3.0]))
    assert len(g) == 1  # the temporaries are not in loss's graph: no gradient
    # a generator of graph tensors: their gradients come back
    g2 = loss.backward(retain=(t for t in [h]))
    np.testing.assert_allclose(g2[h].numpy(), 2.0 * h.numpy())
    with pytest.raises(ad.ArgumentTypeError, match=r"backward: retain\[1\] is a list"):
        loss.backward(retain=iter([h, [1.0]]))


def test_every_handle_list_is_built_from_held_tensors():
    # the audit: no `[t._h for t in ...]` over an iterable the call does not
    # hold (a generator would let the tensors die before the native call)
    import re

    pkg = os.path.join(ROOT, "pyautodiff")
    found = []
    for dirpath, _, files in os.walk(pkg):
        for f in files:
            if f.endswith(".py"):
                src = open(os.path.join(dirpath, f)).read()
                found += [(f, m.group(1)) for m in re.finditer(r"\[\w+\._h for \w+ in (\w+)\]",
                                                                 src)]
    assert ("tensor.py", "inputs") in found and ("tensor.py", "retain") in found
    # both are held: _call's inputs is the caller's tuple or list (len() is
    # taken of it, so it cannot be a generator), retain is made a tuple first
    src = open(os.path.join(pkg, "tensor.py")).read()
    assert "retain = tuple(retain)" in src
    # function.py's saved is a list it built from ctx's tuple and holds;
    # checkpoint.py's args is checkpoint()'s own *args tuple and group a slice
    # (a list) of the Vars it found, held across the call
    assert set(found) == {("tensor.py", "inputs"), ("tensor.py", "retain"),
                          ("function.py", "saved"), ("checkpoint.py", "args"),
                          ("checkpoint.py", "group")}, found


def test_cat_and_grad_of_generators():
    a, b = ad.Var([1.0, 2.0]), ad.Var([3.0])
    y = ad.cat(t * 2.0 for t in (a, b))
    assert y.tolist() == [2.0, 4.0, 6.0]
    ga, gb = ad.grad((y * y).sum(), (t for t in (a, b)))
    np.testing.assert_allclose(ga.numpy(), [8.0, 16.0])
    np.testing.assert_allclose(gb.numpy(), [24.0])


# ---- 6. Python ints outside the exact range ---------------------------------------------
def test_int64_scalars_are_exact_beyond_2_53():
    t = ad.tensor([2 ** 53])
    assert (t == 2 ** 53 + 1).tolist() == [False]
    assert (t == 2 ** 53).tolist() == [True]
    assert (t != 2 ** 53 + 1).tolist() == [True]
    assert (t < 2 ** 53 + 1).tolist() == [True]
    big = 2 ** 53 + 1
    a = np.array([2 ** 53, -5, 7], dtype=np.int64)
    x = ad.tensor(a)
    for got, want in [(x + big, a + big), (big + x, big + a), (x - big, a - big),
                      (big - x, big - a), (x * 3, a * 3), (x - (-2 ** 63 + 8), a - (-2 ** 63 + 8)),
                      (ad.maximum(x, big), np.maximum(a, big)),
                      (ad.minimum(x, -big), np.minimum(a, -big)),
                      (ad.where(x > 0, x, big), np.where(a > 0, a, big))]:
        assert got.dtype == ad.int64
        assert got.tolist() == want.tolist()
    assert ad.tensor([2 ** 63 - 1]).tolist() == [2 ** 63 - 1]
    assert ad.tensor([-2 ** 63]).tolist() == [-2 ** 63]
    assert ad.full((2,), 2 ** 62 + 1).tolist() == [2 ** 62 + 1] * 2


@pytest.mark.parametrize("make", [
    lambda: ad.tensor([1, 2], dtype=ad.uint8) + 300,
    lambda: 300 + ad.tensor([1, 2], dtype=ad.uint8),
    lambda: ad.tensor([1, 2], dtype=ad.uint8) - 300,
    lambda: 300 - ad.tensor([1, 2], dtype=ad.uint8),
    lambda: ad.tensor([1, 2], dtype=ad.uint8) * -1,
    lambda: ad.tensor([1], dtype=ad.int32) + 2 ** 31,
    lambda: ad.tensor([1]) + 2 ** 63,
    lambda: ad.tensor([1]) - 2 ** 63,
    lambda: ad.tensor([1]) * (-2 ** 63 - 1),
    lambda: ad.tensor([1]) + 1e19,
    lambda: ad.tensor([1]) == 2 ** 63,
    lambda: ad.maximum(ad.tensor([1], dtype=ad.uint8), 256),
    lambda: ad.tensor([2 ** 63]),
    lambda: ad.tensor([[1], [2 ** 64]]),
    lambda: ad.tensor(-2 ** 63 - 1),
    lambda: ad.tensor([300], dtype=ad.uint8),
    lambda: ad.tensor([-1], dtype=ad.uint8),
    lambda: ad.tensor([2 ** 31], dtype=ad.int32),
    lambda: ad.tensor([300.0], dtype=ad.uint8),
    lambda: ad.tensor([2.0 ** 63], dtype=ad.int64),
    lambda: ad.from_numpy(np.array([300]), dtype=ad.uint8),
    lambda: ad.from_numpy(np.array([2 ** 63], dtype=np.uint64), dtype=ad.int64),
    lambda: ad.full((2,), 300, ad.uint8),
    lambda: ad.full((2,), 2 ** 63, ad.int64),
    lambda: ad.full((2,), -1, ad.uint8),
    lambda: ad.arange(250, 260, dtype=ad.uint8),
])
def test_values_out_of_the_dtype_range_raise_overflow(make):
    with pytest.raises(ad.OutOfBoundsError) as e:
        make()
    assert isinstance(e.value, OverflowError) and isinstance(e.value, ad.Error)
    assert "bounds" in str(e.value) or "represented" in str(e.value) or "range" in str(e.value)


def test_overflow_message_names_the_op_value_and_dtype():
    with pytest.raises(OverflowError, match=r"add_scalar: Python scalar 300 is out of bounds "
                                            r"for uint8 \(range 0\.\.255\)"):
        ad.tensor([1], dtype=ad.uint8) + 300
    with pytest.raises(OverflowError, match=r"tensor: .*18446744073709551616.* int64"):
        ad.tensor([2 ** 64])
    with pytest.raises(OverflowError, match=r"add_scalar: .*digits\) is out of the float64"):
        ad.tensor([1.0]) + 2 ** 1100


def test_values_at_the_dtype_edges_still_work():
    u = ad.tensor([0, 255], dtype=ad.uint8)
    assert (u + 0).tolist() == [0, 255]
    assert (u - 255).tolist() == [1, 0]  # numpy: array arithmetic wraps, only the scalar is checked
    assert (u == 255).tolist() == [False, True]
    assert ad.tensor([255, 0], dtype=ad.uint8).tolist() == [255, 0]
    assert ad.tensor([2 ** 63 - 1, -2 ** 63]).tolist() == [2 ** 63 - 1, -2 ** 63]
    assert ad.tensor([2 ** 64], dtype=ad.float64).tolist() == [2.0 ** 64]
    assert ad.tensor([2 ** 63], dtype=ad.float32).dtype == ad.float32
    assert (ad.tensor([1.0]) + 2 ** 60).tolist() == [2.0 ** 60]
    assert ad.tensor([255.9], dtype=ad.uint8).tolist() == [255]  # truncation fits
    assert ad.tensor([True, False], dtype=ad.uint8).tolist() == [1, 0]
    assert ad.tensor([2, 0], dtype=ad.bool).tolist() == [True, False]


# ---- 9. explicit __del__, __init__ twice -------------------------------------------------
def test_explicit_del_is_idempotent_and_later_use_is_an_error():
    n = ad.live_tensors()
    t = ad.tensor([1.0, 2.0])
    v = ad.Var([3.0])
    assert ad.live_tensors() == n + 2
    t.__del__()
    v.__del__()
    assert ad.live_tensors() == n
    t.__del__()  # a second call (and the collector's own) releases nothing
    assert ad.live_tensors() == n
    for use in (lambda: t + 1, lambda: t.shape, lambda: t.numpy(), lambda: v.set([1.0]),
                lambda: repr(t), lambda: ad.tensor([1.0]) + t, lambda: (t,) and t.sum()):
        with pytest.raises(ad.GraphError, match="released"):
            use()
    assert not hasattr(t, "_h")
    with pytest.raises(AttributeError, match="no_such"):
        ad.tensor([1.0]).no_such
    del t, v
    assert ad.live_tensors() == n


def test_released_tensor_keeps_its_class_and_names_what_was_used():
    # a released tensor takes a subclass of its own class (Tensor.__del__):
    # isinstance holds, every lookup names itself in the error, and Tensor has
    # no __getattr__ (which would slow every attribute read of every tensor)
    class Mine(ad.Tensor):  # a subclass with a __dict__ of its own
        pass

    assert "__getattr__" not in vars(ad.Tensor)
    n = ad.live_tensors()
    m = Mine([1.0, 2.0])
    m.note = "kept"
    v = ad.Var([3.0])
    for t, cls in ((ad.tensor([1.0]), ad.Tensor), (v, ad.Var), (m, Mine)):
        t.__del__()
        assert isinstance(t, cls) and type(t) is not cls and type(t).__name__ == cls.__name__
        with pytest.raises(ad.GraphError, match="released.*: exp cannot be used"):
            t.exp()
        with pytest.raises(ad.GraphError, match="released.*: _h cannot be used"):
            t + t
        t.__del__()
    assert ad.live_tensors() == n
    with pytest.raises(AttributeError, match="'Tensor' object has no attribute 'no_such'"):
        ad.tensor([1.0]).no_such


def test_a_tensor_resurrected_after_its_finalizer_is_released():
    # the collector finalizes a whole unreachable group before it looks for
    # resurrections: a tensor whose __del__ ran (its handle freed) can come
    # back through another member's __del__.  It must read as released, as
    # after an explicit t.__del__(): Tensor.__del__ marks every tensor it
    # frees, because inside __del__ a dying tensor and one whose __del__ is
    # called explicitly look alike (the same reference count)
    saved = []

    class Keeper:
        def __del__(self):
            saved.append(self.t)

    n = ad.live_tensors()
    k = Keeper()
    k.t, k.me = ad.tensor([1.0, 2.0]), k  # a cycle: only the collector frees it
    del k
    gc.collect()
    (t,) = saved
    assert ad.live_tensors() == n and gc.is_finalized(t)
    assert isinstance(t, ad.Tensor) and type(t) is not ad.Tensor
    with pytest.raises(ad.GraphError, match="released.*: exp cannot be used"):
        t.exp()
    saved.clear()
    del t  # dies for good: finalized once already, nothing is freed twice
    gc.collect()
    assert ad.live_tensors() == n


def test_finalizer_in_c_is_installed_and_keeps_a_pending_exception():
    # Tensor and Var die through the C form of Tensor.__del__
    # (bindings/build_cffi.py) unless PYAUTODIFF_PYTHON_FINALIZER=1; a tensor
    # dying while an exception propagates leaves the exception as it was
    from pyautodiff._lib import lib
    _t = sys.modules["pyautodiff.tensor"]  # (ad.tensor is the function)
    if os.environ.get("PYAUTODIFF_PYTHON_FINALIZER", "") in ("", "0"):
        assert lib._ad_install_finalizer() == 0  # installed at import: a no-op now
    assert all(c in _t._RELEASED for c in _t._FAST_FINALIZE)
    n = ad.live_tensors()
    w = ad.Var([1.0, 2.0])

    def fail():
        a = ad.tensor([1.0, 2.0, 3.0]) * 2.0
        b = (w * 3.0).sum()  # a graph node: released by ad_tensor_release
        assert a.shape and b.shape == ()
        raise ValueError("kept")

    with pytest.raises(ValueError, match="^kept$"):
        fail()
    zero = 0
    for _ in range(3):  # the temporaries die on the stack while ZeroDivisionError is set
        with pytest.raises(ZeroDivisionError):
            max(ad.tensor([1.0]) * 2.0, (w * 3.0).sum(), 1 / zero)
    del w
    assert ad.live_tensors() == n


def test_finalizer_threads_and_cycles_release_everything():
    n = ad.live_tensors()

    def work():
        for i in range(300):
            v = ad.Var([float(i), 1.0])
            y = (v * v + 1.0).sum()
            if i % 3 == 0:
                box = [y]
                box.append(box)  # a cycle: freed by the collector
            del v, y

    ts = [threading.Thread(target=work) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    gc.collect()
    assert ad.live_tensors() == n


FINALIZER_SUITE = ("test_reliability_python.py", "test_quick_calls.py", "test_semantics.py",
                   "test_checkpointing.py")


def test_python_finalizer_path_passes_the_release_tests():
    # the Python finalizer stays the reference: the release tests pass with it
    env = dict(os.environ, PYAUTODIFF_PYTHON_FINALIZER="1")
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-k", "not python_finalizer_path",
                        *[os.path.join(here, f) for f in FINALIZER_SUITE]],
                       env=env, capture_output=True, text=True, timeout=600, cwd=here)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_release_of_a_subclass_that_refuses_its_released_form_still_frees():
    # the released form is a subclass made with type(): a user class whose
    # __init_subclass__ raises gets no such form; its handle is freed all the
    # same, once, and the tensor then reads as having none
    class Tagged(ad.Tensor):
        __slots__ = ()

        def __init_subclass__(cls, *, tag):
            super().__init_subclass__()

    n = ad.live_tensors()
    t = Tagged([1.0, 2.0])
    assert ad.live_tensors() == n + 1
    t.__del__()
    assert ad.live_tensors() == n
    t.__del__()  # again (and the collector's own call): nothing more is freed
    assert ad.live_tensors() == n and not hasattr(t, "_h") and type(t) is Tagged
    u = Tagged([3.0])
    del u
    gc.collect()
    assert ad.live_tensors() == n


def test_init_twice_releases_the_old_handle():
    n = ad.live_tensors()
    t = ad.tensor([1.0])
    for _ in range(5):
        t.__init__([2.0, 3.0])
    assert ad.live_tensors() == n + 1 and t.tolist() == [2.0, 3.0]
    v = ad.Var([1.0])
    i0 = v.id
    v.__init__([4.0], dtype=ad.float64)
    assert ad.live_tensors() == n + 2 and v.tolist() == [4.0] and v.id != i0
    assert v.dtype == ad.float64 and v.is_variable
    w = ad.Var([5.0])
    v.__init__(w)  # a Var given to Var(): the same Var, shared
    assert v.id == w.id and ad.live_tensors() == n + 2  # v's [4.0] released
    del t, v, w
    assert ad.live_tensors() == n


# ---- 11. argument errors are ad.Error subclasses naming the function --------------------
@pytest.mark.parametrize("call, fn, cls", [
    (lambda: ad.zeros((2 ** 64,)), "zeros", ad.OutOfBoundsError),
    (lambda: ad.ones(2, 2 ** 64), "ones", ad.OutOfBoundsError),
    (lambda: ad.full((2 ** 64, 1), 1.0), "full", ad.OutOfBoundsError),
    (lambda: ad.randn(2 ** 70), "randn", ad.OutOfBoundsError),
    (lambda: ad.rand((3, -2 ** 65)), "rand", ad.OutOfBoundsError),
    (lambda: ad.Var.zeros(2 ** 64), "Var.zeros", ad.OutOfBoundsError),
    (lambda: ad.tensor([1.0]).reshape(2 ** 64), "reshape", ad.OutOfBoundsError),
    (lambda: ad.tensor([1.0]).broadcast_to((2 ** 64,)), "broadcast_to", ad.OutOfBoundsError),
    (lambda: ad.tensor([1.0]).narrow(0, 2 ** 64, 1), "narrow", ad.OutOfRangeError),
    (lambda: ad.tensor([1.0]).reshape(1.5), "reshape", ad.ArgumentTypeError),
    (lambda: ad.tensor([[1.0]]).narrow(0, 0.5, 1), "narrow", ad.ArgumentTypeError),
    (lambda: ad.zeros("ab"), "zeros", ad.ArgumentTypeError),
    (lambda: ad.arange(2 ** 62), "arange", ad.OutOfMemoryError),
    (lambda: ad.arange(2 ** 63 - 2, 2 ** 63 + 1), "arange", ad.OutOfBoundsError),
    (lambda: ad.arange(float("inf")), "arange", ad.InvalidArgumentError),
    (lambda: ad.arange("3"), "arange", ad.ArgumentTypeError),
    (lambda: ad.eye(2 ** 40), "eye", ad.OutOfMemoryError),
    (lambda: ad.eye(2 ** 70, 2), "eye", ad.OutOfMemoryError),
    (lambda: ad.eye(-1), "eye", ad.InvalidArgumentError),
    (lambda: ad.eye(2.5), "eye", ad.ArgumentTypeError),
    (lambda: ad.manual_seed(1.5), "manual_seed", ad.ArgumentTypeError),
])
def test_bad_sizes_raise_ad_errors_naming_the_function(call, fn, cls):
    with pytest.raises(cls) as e:
        call()
    assert isinstance(e.value, ad.Error)
    assert str(e.value).startswith(fn + ":"), str(e.value)


def test_small_sizes_still_work():
    assert ad.arange(2 ** 60, 2 ** 60 + 3).tolist() == [2 ** 60, 2 ** 60 + 1, 2 ** 60 + 2]
    assert ad.arange(5, dtype=ad.uint8).tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(ad.eye(3, 2, dtype=ad.int64).numpy(), np.eye(3, 2))
    assert ad.eye(0).shape == (0, 0)


# ---- __array__ and numpy 2's copy keyword ---------------------------------------------
def test_array_protocol_copy_keyword():
    t = ad.tensor([[1.0, 2.0], [3.0, 4.0]])
    view = np.asarray(t)
    assert not view.flags.writeable and np.shares_memory(view, t.numpy())
    same = np.array(t, copy=False)
    assert np.shares_memory(same, view)
    c = np.array(t, copy=True)
    assert c.flags.writeable and not np.shares_memory(c, view)
    c[0, 0] = 9.0
    assert t.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert np.array(t, dtype=np.float64).dtype == np.float64  # copy=None: as needed
    with pytest.raises(ValueError, match="copy=False"):
        np.array(t, dtype=np.float64, copy=False)
    with pytest.raises(ad.InvalidArgumentError):
        t.__array__(np.float64, copy=False)
    tt = t.t()  # a strided view exports without a copy too
    assert np.shares_memory(np.array(tt, copy=False), view)
    assert np.array(tt, copy=False).tolist() == [[1.0, 3.0], [2.0, 4.0]]


# ---- the leak fixture flags both directions ----------------------------------------------
def test_leak_fixture_flags_an_increase_and_a_decrease(tmp_path):
    conftest = open(os.path.join(ROOT, "tests", "conftest.py")).read()
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "test_inner.py").write_text(textwrap.dedent("""
        import gc
        import pyautodiff as ad

        KEEP = []
        HELD = [ad.tensor([1.0, 2.0])]

        def test_clean():
            x = ad.tensor([3.0])
            assert (x + 1).tolist() == [4.0]

        def test_cycle_garbage_is_not_a_leak():
            class Node:
                pass
            a, b = Node(), Node()
            a.other, b.other, a.t = b, a, ad.tensor([1.0])

        def test_leaks():
            KEEP.append(ad.tensor([5.0]))

        def test_drops():
            HELD.pop()  # releases a tensor this test did not create

        def test_fails_holding_tensors():
            x = [ad.tensor([1.0]) for _ in range(3)]
            assert x is None

        def test_after_a_failure_is_not_a_drop():
            gc.collect()  # (pytest frees the failure's traceback here too)
    """))
    env = dict(os.environ, PYTHONPATH=ROOT)
    # rootdir pinned: node ids must not depend on where the checkout lives
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), str(tmp_path)], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert "native leak in test_inner.py::test_leaks" in out, out
    assert "native live counts dropped in test_inner.py::test_drops" in out, out
    assert "dropped in test_inner.py::test_after_a_failure" not in out, out
    assert "1 failed, 5 passed, 2 errors" in out, out
