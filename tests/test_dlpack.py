"""DLPack both ways and ad.from_numpy sharing memory (issue 14 items 1-2,
DESIGN §7.5): zero-copy (same addresses), every dtype, 0-d, zero-size and
non-contiguous layouts, each side keeping the other's memory alive.  Lifetime
stories that a bug would turn into a crash run in subprocesses."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyautodiff as ad
from pyautodiff._lib import ffi, lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = ["float32", "float64", "int32", "int64", "uint8", "bool"]


def addr(t):
    """Address of a tensor's element 0."""
    return int(ffi.cast("uintptr_t", lib.ad_tensor_data(t._h)))


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 100, size=shape) if dtype != "bool" else rng.integers(0, 2, size=shape)
    if dtype.startswith("float"):
        a = a + rng.standard_normal(shape)
    return np.asarray(a).astype(dtype)


def layouts(dtype):
    """(name, numpy array) pairs: every layout a producer may hand over."""
    base = sample(dtype, (4, 6))
    return [
        ("contiguous", base),
        ("0-d", sample(dtype, ())),
        ("zero-size", sample(dtype, (0, 3))),
        ("transposed", base.T),
        ("sliced", base[1:, ::2]),
        ("reversed", base[::-1, ::-3]),
        ("broadcast", np.broadcast_to(base[:1], (3, 6))),
        ("3-d permuted", sample(dtype, (2, 3, 4)).transpose(2, 0, 1)),
    ]


ALL_CASES = [(d, name, a) for d in DTYPES for name, a in layouts(d)]
IDS = [f"{d}-{name}" for d, name, _ in ALL_CASES]


# ---- numpy -> pyautodiff ------------------------------------------------------------
@pytest.mark.parametrize("dtype,name,a", ALL_CASES, ids=IDS)
def test_from_dlpack_numpy_is_zero_copy(dtype, name, a):
    t = ad.from_dlpack(a)
    assert t.dtype == dtype and t.shape == a.shape
    np.testing.assert_array_equal(t.numpy(), a)
    if a.size:
        assert addr(t) == a.__array_interface__["data"][0]
    assert lib.ad_tensor_is_external(t._h)
    # ops read the shared strided memory correctly
    np.testing.assert_array_equal((t == t).numpy(), np.ones(a.shape, bool))


def ad_layouts(dtype):
    """(name, tensor) pairs: owned tensors in every layout ad's views make."""
    base = ad.from_numpy(sample(dtype, (4, 6)), copy=True)
    return [
        ("contiguous", base),
        ("0-d", ad.from_numpy(sample(dtype, ()), copy=True)),
        ("zero-size", ad.from_numpy(sample(dtype, (0, 3)), copy=True)),
        ("transposed", base.t()),
        ("sliced", base[1:, ::2]),
        ("flipped", ad.flip(base, 0)),
        ("broadcast", base[:1].broadcast_to((3, 6))),
        ("3-d permuted", ad.from_numpy(sample(dtype, (2, 3, 4)), copy=True).permute(2, 0, 1)),
    ]


@pytest.mark.parametrize("dtype", DTYPES)
def test_np_from_dlpack_of_a_tensor_is_zero_copy_and_read_only(dtype):
    # (a view with negative strides shares only with copy=False: left to us,
    # it goes as a copy, which torch can take; see below)
    for name, t in ad_layouts(dtype):
        b = np.from_dlpack(t, copy=False) if name == "flipped" else np.from_dlpack(t)
        assert b.dtype == np.dtype(dtype) and b.shape == t.shape, name
        np.testing.assert_array_equal(b, t.numpy())
        if t.numel():
            assert b.__array_interface__["data"][0] == addr(t), name
            assert all(s == st * b.itemsize for s, st, n in zip(b.strides, t.strides, t.shape)
                       if n > 1), name
        assert not b.flags.writeable  # the versioned capsule says read-only


def test_capsule_kinds_and_arguments():
    t = ad.arange(6, dtype="float32").reshape(2, 3)
    assert "dltensor_versioned" in repr(t.__dlpack__(max_version=(1, 0)))
    assert "dltensor_versioned" in repr(t.__dlpack__(max_version=(1, 3)))
    assert '"dltensor"' in repr(t.__dlpack__())
    assert '"dltensor"' in repr(t.__dlpack__(max_version=(0, 8)))
    assert t.__dlpack_device__() == (1, 0)
    with pytest.raises(ad.InvalidArgumentError, match="stream"):
        t.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="device"):
        t.__dlpack__(dl_device=(2, 0))
    c = t.__dlpack__(dl_device=(1, 0), copy=True)
    b = np.from_dlpack(_Capsule(c))
    np.testing.assert_array_equal(b, t.numpy())
    assert b.__array_interface__["data"][0] != addr(t)
    b = np.from_dlpack(t, copy=True)  # a copy is the consumer's own: writable
    assert b.flags.writeable and b.__array_interface__["data"][0] != addr(t)
    b[0, 0] = 7.0
    assert t.numpy()[0, 0] == 0.0
    with pytest.raises(ad.InvalidArgumentError, match="max_version"):
        t.__dlpack__(max_version=3)


class _Capsule:
    """A producer that hands out a ready-made capsule (any max_version)."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kw):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def test_legacy_capsule_round_trip_and_single_consumption():
    t = ad.tensor([[1.0, 2.0], [3.0, 4.0]])
    cap = t.__dlpack__()
    u = ad.from_dlpack(cap)
    assert addr(u) == addr(t)
    np.testing.assert_array_equal(u.numpy(), t.numpy())
    assert "used_dltensor" in repr(cap)
    with pytest.raises(ad.InvalidArgumentError, match="consumed only once"):
        ad.from_dlpack(cap)


def test_unconsumed_capsules_are_freed():
    t = ad.ones((3, 3))
    n0 = ad.live_tensors()
    caps = [t.__dlpack__(), t.__dlpack__(max_version=(1, 0))]
    assert ad.live_tensors() == n0 + 2  # each holds a native reference
    del caps
    assert ad.live_tensors() == n0


def test_unsupported_dtype_leaves_the_capsule_to_its_producer():
    a = np.ones(3, np.float16)
    n0 = ad.live_tensors()
    with pytest.raises(ad.DTypeError, match=r"from_dlpack: DLPack dtype \(code 2, 16 bits"):
        ad.from_dlpack(a)
    assert ad.live_tensors() == n0
    with pytest.raises(TypeError, match="__dlpack__"):
        ad.from_dlpack([1, 2])


def test_from_dlpack_copy_true_copies():
    a = np.arange(5.0)
    t = ad.from_dlpack(a, copy=True)
    assert addr(t) != a.ctypes.data
    a[0] = 9
    assert t.numpy()[0] == 0


def test_ad_round_trip_through_dlpack_keeps_values_and_storage():
    t = ad.randn((3, 4), seed=1)[:, 1:]
    u = ad.from_dlpack(t)
    assert addr(u) == addr(t) and u.strides == t.strides
    del t
    np.testing.assert_array_equal((u * 1).numpy(), u.numpy())


def test_var_exports_its_value_and_set_is_seen():
    w = ad.Var([1.0, 2.0])
    b = np.from_dlpack(w)
    w.set(ad.tensor([5.0, 6.0]))
    np.testing.assert_array_equal(b, [5.0, 6.0])
    tracked = (w * 2)
    np.testing.assert_array_equal(np.from_dlpack(tracked), [10.0, 12.0])


def test_a_var_never_aliases_shared_memory():
    a = np.arange(4.0)
    a.flags.writeable = False
    t = ad.from_numpy(a)
    assert lib.ad_tensor_is_readonly(t._h)
    for v in (ad.Var(t), ad.Var.from_tensor(t)):
        assert not lib.ad_tensor_same_storage(v._h, t._h)
        v.set(ad.zeros(4, dtype="float64"))
    np.testing.assert_array_equal(a, np.arange(4.0))


# ---- torch ---------------------------------------------------------------------------
TORCH_DTYPES = {"float32": "float32", "float64": "float64", "int32": "int32",
                "int64": "int64", "uint8": "uint8", "bool": "bool"}


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_both_ways(dtype):
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, TORCH_DTYPES[dtype])
    for name, a in layouts(dtype):
        if any(s < 0 for s in a.strides):
            continue  # torch has no negative strides
        x = torch.from_numpy(np.ascontiguousarray(a)).to(tdt)
        if name == "transposed":
            x = torch.from_numpy(np.ascontiguousarray(a.T)).to(tdt).t()
        elif name == "sliced":
            x = torch.from_numpy(a.base if a.base is not None else a).to(tdt)[1:, ::2]
        t = ad.from_dlpack(x)
        assert t.shape == tuple(x.shape) and t.dtype == dtype, name
        np.testing.assert_array_equal(t.numpy(), x.numpy())
        if x.numel():
            assert addr(t) == x.data_ptr(), name
            assert t.strides == tuple(x.stride()), name
        # and back
        y = torch.from_dlpack(t)
        assert y.dtype == tdt and tuple(y.shape) == t.shape
        assert torch.equal(y, x)
        if x.numel():
            assert y.data_ptr() == x.data_ptr()
        # torch.as_tensor / torch.tensor / np.asarray accept a tensor
        assert torch.equal(torch.as_tensor(t), x)
        assert torch.equal(torch.tensor(t), x)
        np.testing.assert_array_equal(np.asarray(t), x.numpy())


def test_torch_legacy_capsule_and_device():
    torch = pytest.importorskip("torch")
    from torch.utils.dlpack import to_dlpack
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = ad.from_dlpack(to_dlpack(x))
    assert addr(t) == x.data_ptr()
    np.testing.assert_array_equal(t.numpy(), x.numpy())
    y = torch.from_dlpack(ad.ones((2, 2)))
    assert y.device.type == "cpu"


def test_negative_strides_export_a_copy_unless_copy_false():
    # a flipped view goes as a contiguous copy when the consumer leaves the
    # choice to us (torch 2.13 aborts the process on negative strides);
    # copy=False still shares it, negative strides and all
    x = ad.arange(20).to_dtype("float64").reshape(4, 5).flip(0)
    n = np.from_dlpack(x)
    assert n.strides == (40, 8) and addr(x) != n.__array_interface__["data"][0]
    np.testing.assert_array_equal(n, x.numpy())
    v = np.from_dlpack(x, copy=False)
    assert v.strides == (-40, 8) and v.__array_interface__["data"][0] == addr(x)
    y = ad.tensor(np.arange(6.0).reshape(2, 3)).t()  # positive strides: still shared
    assert np.from_dlpack(y).__array_interface__["data"][0] == addr(y)


def test_torch_takes_a_flipped_tensor():
    pytest.importorskip("torch")
    script = textwrap.dedent("""
        import numpy as np, torch, pyautodiff as ad
        x = ad.arange(20).to_dtype("float64").reshape(4, 5).flip(0)
        for t in (torch.from_dlpack(x), torch.as_tensor(x)):
            assert np.array_equal(t.numpy(), x.numpy())
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


# ---- ad.from_numpy ----------------------------------------------------------------
def test_from_numpy_shares_read_only_and_copies_writable():
    a = np.arange(12.0).reshape(3, 4)
    t = ad.from_numpy(a)  # writable: copied
    assert addr(t) != a.ctypes.data and not lib.ad_tensor_is_external(t._h)
    a.flags.writeable = False
    s = ad.from_numpy(a)  # read-only: shared
    assert addr(s) == a.ctypes.data and lib.ad_tensor_is_readonly(s._h)
    c = ad.from_numpy(a, copy=True)
    assert addr(c) != a.ctypes.data
    w = np.arange(3.0)
    f = ad.from_numpy(w, copy=False)  # the caller promises not to write...
    assert addr(f) == w.ctypes.data and not lib.ad_tensor_is_readonly(f._h)
    w[0] = 7.0  # ...and this shows why: the tensor sees the write
    assert f.numpy()[0] == 7.0


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "uint8", "bool"])
def test_from_numpy_copies_every_writable_layout_alike(dtype):
    # a C-contiguous array of a tensor dtype takes the short path; the others
    # (0-d, empty, Fortran order, strided) the general one
    base = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    for a in (base, np.array(base[1, 2, 3]), base[:0], np.asfortranarray(base), base[:, ::2]):
        t = ad.from_numpy(a)
        assert t.dtype is ad.dtypes.as_dtype(a.dtype) and t.shape == a.shape
        np.testing.assert_array_equal(t.numpy(), a)
        if a.size:
            assert addr(t) != a.ctypes.data
            a_before = a.copy()
            a[...] = 0  # a copy: the tensor keeps the values it was given
            np.testing.assert_array_equal(t.numpy(), a_before)


def test_from_numpy_shares_strided_arrays_with_their_strides():
    base = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    base.flags.writeable = False
    for a in (base[:, ::2, 1:], base.transpose(2, 0, 1), base[::-1, :, ::-2], base[1, 2]):
        t = ad.from_numpy(a)
        assert addr(t) == a.__array_interface__["data"][0]
        assert t.strides == tuple(s // a.itemsize for s in a.strides)
        np.testing.assert_array_equal(t.numpy(), a)
        np.testing.assert_array_equal(t.contiguous().numpy(), a)
        np.testing.assert_array_equal(t.sum(0).numpy(), a.sum(0))


def test_from_numpy_copy_false_when_sharing_is_impossible():
    with pytest.raises(ad.InvalidArgumentError, match="copy=False.*dtype"):
        ad.from_numpy(np.arange(3), dtype="float32", copy=False)
    buf = np.zeros(17, np.uint8)
    odd = buf[1:].view(np.float64)  # misaligned
    with pytest.raises(ad.InvalidArgumentError, match="aligned"):
        ad.from_numpy(odd, copy=False)
    np.testing.assert_array_equal(ad.from_numpy(odd).numpy(), odd)  # copy=None copies
    packed = np.zeros(4, dtype=[("a", np.uint8), ("b", np.float32)])["b"]
    assert ad.from_numpy(packed).shape == (4,)  # unaligned/odd strides: copied


def test_from_numpy_keeps_the_array_alive_and_drops_it_once():
    a = np.arange(1000.0)
    a.flags.writeable = False
    before = sys.getrefcount(a)
    ts = [ad.from_numpy(a) for _ in range(10)]
    assert sys.getrefcount(a) == before + 10
    views = [t[5:] for t in ts]
    del ts
    assert sys.getrefcount(a) == before + 10  # the views keep the storages
    del views
    assert sys.getrefcount(a) == before


def test_from_numpy_of_16mb_is_zero_copy():
    # the speed claim, without timing: sharing allocates nothing and copies nothing
    a = np.ones(4 << 20, np.float32)  # 16 MB
    bytes0 = ad.live_bytes()
    t = ad.from_numpy(a, copy=False)
    assert ad.live_bytes() == bytes0
    assert addr(t) == a.ctypes.data
    a[-1] = 2.0
    assert t[-1].item() == 2.0


def test_tensor_still_copies_read_only_arrays():
    a = np.arange(3.0)
    a.flags.writeable = False
    assert addr(ad.tensor(a)) != a.ctypes.data


# ---- native API -------------------------------------------------------------------
def test_from_external_validates_its_arguments():
    out = ffi.new("ad_tensor **")
    buf = ffi.new("double[]", 8)
    shape = ffi.new("int64_t[]", [2, 4])
    assert lib.ad_tensor_from_external(ffi.NULL, 1, shape, ffi.NULL, 2, 1, ffi.NULL, ffi.NULL,
                                       out) == lib.AD_ERR_VALUE
    assert "NULL data" in ffi.string(lib.ad_last_error()).decode()
    assert lib.ad_tensor_from_external(buf, 1, ffi.NULL, ffi.NULL, 2, 1, ffi.NULL, ffi.NULL,
                                       out) == lib.AD_ERR_VALUE
    assert lib.ad_tensor_from_external(buf, 1, shape, ffi.NULL, 2, 1, ffi.NULL, ffi.NULL,
                                       ffi.NULL) == lib.AD_ERR_VALUE
    assert lib.ad_tensor_from_external(buf, 9, shape, ffi.NULL, 2, 1, ffi.NULL, ffi.NULL,
                                       out) == lib.AD_ERR_DTYPE
    bad = ffi.new("int64_t[]", [-1, 4])
    assert lib.ad_tensor_from_external(buf, 1, bad, ffi.NULL, 2, 1, ffi.NULL, ffi.NULL,
                                       out) == lib.AD_ERR_SHAPE
    huge = ffi.new("int64_t[]", [2**40, 2**40])
    strides = ffi.new("int64_t[]", [2**40, 1])
    assert lib.ad_tensor_from_external(buf, 1, huge, strides, 2, 1, ffi.NULL, ffi.NULL,
                                       out) != lib.AD_OK
    big = ffi.new("int64_t[]", [3, 2])
    s2 = ffi.new("int64_t[]", [2**62, 1])
    assert lib.ad_tensor_from_external(buf, 1, big, s2, 2, 1, ffi.NULL, ffi.NULL,
                                       out) == lib.AD_ERR_VALUE
    assert "overflow" in ffi.string(lib.ad_last_error()).decode()
    odd = ffi.cast("char *", buf) + 1
    assert lib.ad_tensor_from_external(odd, 1, shape, ffi.NULL, 2, 1, ffi.NULL, ffi.NULL,
                                       out) == lib.AD_ERR_VALUE
    assert "aligned" in ffi.string(lib.ad_last_error()).decode()
    # a view reaching below address 0 wraps the address space
    neg = ffi.new("int64_t[]", [-(2**60), 1])
    low = ffi.cast("void *", 64)
    assert lib.ad_tensor_from_external(low, 1, shape, neg, 2, 1, ffi.NULL, ffi.NULL,
                                       out) == lib.AD_ERR_VALUE
    assert lib.ad_tensor_from_dlpack(ffi.NULL, 1, out) == lib.AD_ERR_VALUE
    assert lib.ad_tensor_to_dlpack(ffi.NULL, 1, 0, ffi.new("void **")) == lib.AD_ERR_VALUE
    lib.ad_dlpack_delete(ffi.NULL, 0)


def test_from_external_allocation_failure_keeps_ownership():
    a = np.arange(4.0)
    a.flags.writeable = False
    before = sys.getrefcount(a)
    for n in (1, 2):
        lib.ad_testing_fail_alloc_after(n)
        try:
            ad.from_numpy(a)
        except ad.OutOfMemoryError:
            pass
        finally:
            lib.ad_testing_fail_alloc_after(0)
    import gc
    gc.collect()
    assert sys.getrefcount(a) == before


# ---- lifetimes, in subprocesses ---------------------------------------------------
def run_script(body):
    code = "import sys\nsys.path.insert(0, %r)\n" % ROOT + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (
        f"exit {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-4000:]}")


def test_lifetime_numpy_producer_deleted_first():
    run_script("""
        import gc, numpy as np, pyautodiff as ad
        n0 = ad.live_tensors()
        a = np.arange(1 << 16, dtype=np.float64)
        t = ad.from_dlpack(a)
        del a; gc.collect()
        np.testing.assert_array_equal(t.numpy(), np.arange(1 << 16))
        u = t[100:] * 2
        del t; gc.collect()
        assert u[0].item() == 200.0
        del u
        assert ad.live_tensors() == n0
        print("ok")
    """)


def test_lifetime_consumer_deleted_first_and_deleter_runs_once():
    run_script("""
        import gc, sys, numpy as np, pyautodiff as ad
        a = np.arange(10.0)
        r0 = sys.getrefcount(a)
        t = ad.from_dlpack(a)
        assert sys.getrefcount(a) > r0  # numpy's manager holds the array
        del t; gc.collect()
        assert sys.getrefcount(a) == r0, (sys.getrefcount(a), r0)
        # the other way: numpy consumes an ad tensor, ad's side dies first
        n0 = ad.live_tensors()
        t = ad.arange(1000, dtype="float64")
        b = np.from_dlpack(t)
        del t; gc.collect()
        assert ad.live_tensors() == n0 + 1  # the capsule's native reference
        np.testing.assert_array_equal(b, np.arange(1000.0))
        del b; gc.collect()
        assert ad.live_tensors() == n0
        print("ok")
    """)


def test_lifetime_many_round_trips_leak_nothing():
    run_script("""
        import gc, sys, numpy as np, pyautodiff as ad
        try:
            import torch
        except ImportError:
            torch = None
        a = np.random.default_rng(0).standard_normal((64, 32))
        ref = a.copy()
        r0 = sys.getrefcount(a)
        n0, b0 = ad.live_tensors(), ad.live_bytes()
        for i in range(300):
            t = ad.from_dlpack(a)
            b = np.from_dlpack(t)
            u = ad.from_dlpack(b)
            if torch is not None:
                x = torch.from_dlpack(u)
                u = ad.from_dlpack(x[:, ::2])
                del x
            del t, b
            assert u.shape[0] == 64
            del u
        gc.collect()
        assert ad.live_tensors() == n0, (ad.live_tensors(), n0)
        assert ad.live_bytes() == b0
        assert sys.getrefcount(a) == r0
        np.testing.assert_array_equal(a, ref)
        print("ok")
    """)


def test_lifetime_torch_producer_deleted_first():
    pytest.importorskip("torch")
    run_script("""
        import gc, numpy as np, torch, pyautodiff as ad
        n0 = ad.live_tensors()
        x = torch.arange(100000, dtype=torch.float32).reshape(1000, 100)
        t = ad.from_dlpack(x.t())
        del x; gc.collect()
        np.testing.assert_array_equal(t.numpy(), np.arange(100000, dtype=np.float32)
                                      .reshape(1000, 100).T)
        y = torch.from_dlpack(t)
        del t; gc.collect()
        assert y[5, 3].item() == 305.0
        del y; gc.collect()
        assert ad.live_tensors() == n0
        print("ok")
    """)


def test_release_from_a_thread_without_the_gil():
    run_script("""
        import gc, sys, threading, numpy as np, pyautodiff as ad
        a = np.arange(100.0)
        a.flags.writeable = False
        r0 = sys.getrefcount(a)
        ts = [ad.from_numpy(a) for _ in range(50)]
        def work(chunk):
            for t in chunk:
                (t * 2).sum()
        th = [threading.Thread(target=work, args=(ts[i::4],)) for i in range(4)]
        for x in th: x.start()
        for x in th: x.join()
        box = [ts]
        del ts
        def drop():
            box.clear()  # the last references die on this thread
        d = threading.Thread(target=drop); d.start(); d.join()
        gc.collect()
        assert sys.getrefcount(a) == r0
        print("ok")
    """)


def test_release_callback_runs_exactly_once_after_the_last_reference():
    calls = []

    @ffi.callback("void(void *)")
    def release(ctx):
        calls.append(int(ffi.cast("intptr_t", ctx)))

    buf = ffi.new("float[]", list(range(12)))
    shape = ffi.new("int64_t[]", [3, 4])
    strides = ffi.new("int64_t[]", [1, 3])  # column-major
    out = ffi.new("ad_tensor **")
    assert lib.ad_tensor_from_external(buf, lib.AD_FLOAT32, shape, strides, 2, 1, release,
                                       ffi.cast("void *", 42), out) == lib.AD_OK
    from pyautodiff.tensor import _wrap
    t = _wrap(out[0])
    np.testing.assert_array_equal(t.numpy(), np.arange(12, dtype=np.float32).reshape(4, 3).T)
    views = [t.t(), t[1:], t.contiguous()]
    caps = [t.__dlpack__(max_version=(1, 0))]
    exported = np.from_dlpack(t)
    del t
    assert calls == []
    del views, caps
    assert calls == []
    del exported
    import gc
    gc.collect()
    assert calls == [42]
    # on failure the callback is not called: the caller keeps ownership
    bad = ffi.new("int64_t[]", [-1, 4])
    assert lib.ad_tensor_from_external(buf, lib.AD_FLOAT32, bad, ffi.NULL, 2, 1, release,
                                       ffi.cast("void *", 43), out) == lib.AD_ERR_SHAPE
    lib.ad_testing_fail_alloc_after(1)
    try:
        assert lib.ad_tensor_from_external(buf, lib.AD_FLOAT32, shape, ffi.NULL, 2, 1, release,
                                           ffi.cast("void *", 44), out) == lib.AD_ERR_NOMEM
    finally:
        lib.ad_testing_fail_alloc_after(0)
    assert calls == [42]


def test_dlpack_version_and_device_of_the_wrong_shape_are_named():
    # fuzz_args: a dict raised a bare KeyError (0) from max_version[0]
    t = ad.ones(2)
    for kw in ({"max_version": {}}, {"max_version": {"a": 1}}, {"dl_device": {}}):
        with pytest.raises(ad.InvalidArgumentError, match="__dlpack__: (max_version|dl_device)"):
            t.__dlpack__(**kw)
