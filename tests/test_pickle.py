"""pickle and copy.deepcopy of Tensor and Var (issue 13 item 4, DESIGN §7.4):
the value, dtype and shape survive every protocol; a Var comes back as a Var
with a new id; the payload is the raw bytes (no lists)."""
import copy
import pickle

import numpy as np
import pytest

import pyautodiff as ad
from pyautodiff._lib import lib

DTYPES = ["float32", "float64", "int32", "int64", "uint8", "bool"]
PROTOCOLS = list(range(2, pickle.HIGHEST_PROTOCOL + 1))


def sample(dtype, shape):
    a = np.arange(int(np.prod(shape, dtype=np.int64)) if shape else 1).reshape(shape)
    return (a % 2 == 0) if dtype == "bool" else (a * 3 - 5).astype(dtype) if dtype != "uint8" \
        else a.astype(np.uint8)


def layouts(dtype):
    base = ad.from_numpy(sample(dtype, (4, 5)), copy=True)
    return {
        "contiguous": base,
        "0-d": ad.from_numpy(sample(dtype, ()), copy=True),
        "zero-size": ad.zeros((0, 3), dtype=dtype),
        "transposed": base.t(),
        "sliced": base[1:, ::2],
        "broadcast": base[:1].broadcast_to((3, 5)),
    }


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_round_trip(dtype, protocol):
    for name, t in layouts(dtype).items():
        u = pickle.loads(pickle.dumps(t, protocol=protocol))
        assert type(u) is ad.Tensor, name
        assert u.dtype == t.dtype and u.shape == t.shape, name
        np.testing.assert_array_equal(u.numpy(), t.numpy())
        if t.numel():
            assert not lib.ad_tensor_same_storage(u._h, t._h)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_var_unpickles_as_a_new_var(protocol):
    for dtype in ("float32", "float64"):
        w = ad.Var.randn((3, 4), seed=1, dtype=dtype)
        v = pickle.loads(pickle.dumps(w, protocol=protocol))
        assert type(v) is ad.Var and v.is_variable
        assert v.id != w.id and v.dtype == dtype
        np.testing.assert_array_equal(v.numpy(), w.numpy())
        v.set(ad.zeros((3, 4), dtype=dtype))  # its own memory
        assert w.numpy().any()
        g = (v * v).sum().backward()
        assert v in g


def test_tracked_tensor_pickles_its_value_untracked():
    w = ad.Var([1.0, 2.0])
    y = w * 3
    u = pickle.loads(pickle.dumps(y))
    assert not u.track_op and not u.is_variable
    np.testing.assert_array_equal(u.numpy(), [3.0, 6.0])


def test_payload_is_raw_bytes():
    t = ad.randn((256, 256), seed=0)  # 256 KB of float32
    for protocol in PROTOCOLS[1:]:  # protocol 2 has no bytes type (latin-1 text instead)
        blob = pickle.dumps(t, protocol=protocol)
        assert len(blob) < t.numel() * 4 + 300, (protocol, len(blob))
    assert b"tolist" not in pickle.dumps(t)


def test_protocol_5_out_of_band_buffers():
    t = ad.arange(1000, dtype="float64").reshape(10, 100)
    buffers = []
    blob = pickle.dumps(t, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1 and len(blob) < 300
    raw = bytearray(buffers[0].raw())
    u = pickle.loads(blob, buffers=[raw])
    raw[:8] = b"\xff" * 8  # a writable out-of-band buffer is copied, not shared
    np.testing.assert_array_equal(u.numpy(), t.numpy())


def test_unpickled_bytes_are_shared_not_copied_again():
    t = ad.arange(100, dtype="float32")
    u = pickle.loads(pickle.dumps(t, protocol=4))
    assert lib.ad_tensor_is_external(u._h)  # a view of the immutable bytes object


def test_containers_and_loaded_tensors(tmp_path):
    p = tmp_path / "m.safetensors"
    ad.save({"a": ad.arange(6, dtype="float32").reshape(2, 3)}, p)
    state = ad.load(p)  # read-only mapped tensors pickle like any other
    w = ad.Var([1.0])
    obj = {"state": state, "params": [w, w], "step": 3}
    back = pickle.loads(pickle.dumps(obj))
    np.testing.assert_array_equal(back["state"]["a"].numpy(), state["a"].numpy())
    assert back["params"][0] is back["params"][1]  # pickle's memo keeps sharing
    assert back["params"][0].id != w.id


def test_deepcopy_and_copy():
    w = ad.Var.randn((2, 2), seed=3)
    t = ad.arange(4, dtype="int32")
    d = copy.deepcopy({"w": w, "t": t, "again": w})
    assert type(d["w"]) is ad.Var and d["w"].id != w.id and d["again"] is d["w"]
    np.testing.assert_array_equal(d["w"].numpy(), w.numpy())
    np.testing.assert_array_equal(d["t"].numpy(), t.numpy())
    d["w"].set(ad.zeros((2, 2)))
    assert w.numpy().any()
    c = copy.copy(t)
    np.testing.assert_array_equal(c.numpy(), t.numpy())


def test_corrupt_pickle_payload_is_an_error():
    from pyautodiff.io import _rebuild
    with pytest.raises(ValueError):
        _rebuild("float32", (3,), b"\0" * 5, False)
    with pytest.raises(ad.DTypeError):
        _rebuild("complex64", (1,), b"\0" * 8, False)
    t = _rebuild("uint8", (2,), b"ab", False)
    assert t.tolist() == [97, 98]
