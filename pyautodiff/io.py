"""Saving and loading tensors: the safetensors format, and pickle support.

    ad.save({"w": w, "b": b}, "model.safetensors", metadata={"step": "10"})
    state = ad.load("model.safetensors")      # dict[str, Tensor], memory-mapped

Files are byte-compatible with the `safetensors` package both ways (F32 F64
I64 I32 U8 BOOL; F16 and BF16 tensors are read as float32).  `load` maps the
file instead of reading it: each tensor is a read-only view of the mapping,
which stays mapped until the last of them dies, and nothing is read from disk
until the data is touched.  A truncated or corrupt file raises ad.Error.
(The format is little-endian, as are the machines pyautodiff builds for.)
"""
import json
import os
import pickle
import threading
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from . import dtypes as _dt
from ._lib import ffi, lib, raise_status
from .errors import DTypeError, Error, InvalidArgumentError
from .tensor import Tensor, Var, _wrap, from_numpy


__all__ = ["load", "load_metadata", "parse_header", "save"]

PathLike = Union[str, "os.PathLike[str]"]

# The safetensors package refuses headers above this size; so do we.
MAX_HEADER_SIZE = 100_000_000
# The most elements of one item size a shape may span (native ad_check_shape).
_MAX_ELEMENTS = (2 ** 63 - 1) // 16

# safetensors dtype name -> (ad dtype, item size)
_ST_TO_AD = {"F32": _dt.float32, "F64": _dt.float64, "I64": _dt.int64, "I32": _dt.int32,
             "U8": _dt.uint8, "BOOL": _dt.bool_}
_AD_TO_ST = {d.name: k for k, d in _ST_TO_AD.items()}
_HALF = {"F16": 2, "BF16": 2}  # read as float32
# dtypes the format knows that pyautodiff cannot hold, with their item sizes
_OTHER = {"I8": 1, "I16": 2, "U16": 2, "U32": 4, "U64": 8, "F8_E5M2": 1, "F8_E4M3": 1,
          "F8_E8M0": 1, "C64": 8, "F4": 1, "F6_E2M3": 1, "F6_E3M2": 1}
# The package writes tensors by descending dtype (its enum order), then name.
_ORDER = {"BOOL": 0, "U8": 1, "I32": 2, "F32": 3, "F64": 4, "I64": 5}


def _itemsize(st):
    d = _ST_TO_AD.get(st)
    return d.itemsize if d is not None else _HALF.get(st) or _OTHER.get(st)


# ---- save -------------------------------------------------------------------------------
def save(tensors: Mapping[str, "Tensor"], path: PathLike,
         metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes `tensors` (a dict of str -> Tensor) to `path` in the safetensors
    format, with optional `metadata` (a dict of str -> str).

    The bytes are those the `safetensors` package writes for the same arrays
    (tensors ordered by dtype then name, header padded to 8 bytes); metadata
    keys are written sorted.  The file is written beside `path` and renamed
    into place, so a crash never leaves half a file and tensors still mapped
    from an older `path` keep their data.  A Var is saved by value; a tracked
    tensor's graph is not saved.  Raises TypeError for keys that are not str,
    values that are not Tensors or metadata that is not str -> str."""
    if not hasattr(tensors, "items"):
        raise TypeError(f"save: tensors must be a dict of str -> Tensor, "
                        f"got {type(tensors).__name__}")
    items = []
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"save: tensor names must be str, got {name!r}")
        if name == "__metadata__":
            raise InvalidArgumentError("save: '__metadata__' is reserved by the format and "
                                       "cannot name a tensor")
        if not isinstance(t, Tensor):
            raise TypeError(f"save: tensors[{name!r}] must be a Tensor, "
                            f"got {type(t).__name__}")
        items.append((name, _AD_TO_ST[t.dtype.name], t))
    if metadata is not None:
        if not hasattr(metadata, "items") or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("save: metadata must be a dict of str -> str")
    items.sort(key=lambda it: (-_ORDER[it[1]], it[0]))

    header, arrays, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = {k: metadata[k] for k in sorted(metadata)}
    for name, st, t in items:
        a = t.numpy()
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        header[name] = {"dtype": st, "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        arrays.append(a)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)

    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"  # unique per writer
    try:
        with open(tmp, "wb") as f:
            f.write(len(text).to_bytes(8, "little"))
            f.write(text)
            for a in arrays:
                if a.size:
                    f.write(memoryview(a.reshape(-1)).cast("B"))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# ---- load --------------------------------------------------------------------------------
def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key {k!r}")
        d[k] = v
    return d


def _is_uint(x):
    return type(x) is int and x >= 0


def parse_header(buf: Any, where: str = "load"
                 ) -> Tuple[int, List[Tuple[str, str, Tuple[int, ...], int, int]],
                            Optional[Dict[str, str]]]:
    """Parses and validates the header of safetensors bytes `buf` (anything
    sliceable with a len: bytes, a mapped buffer).  Returns (data_start,
    entries, metadata): entries are (name, dtype name, shape, begin, end) in
    file order, begin/end relative to data_start.  Everything the file says is
    checked against the file's size before a byte of data is used: a header
    that is truncated, not UTF-8 JSON, of the wrong structure, with unknown
    dtypes, offsets out of bounds, overlapping or leaving gaps, or sizes that
    do not match dtype x shape raises ad.InvalidArgumentError."""
    def bad(msg):
        return InvalidArgumentError(f"{where}: not a valid safetensors file: {msg}")

    size = len(buf)
    if size < 8:
        raise bad(f"it has {size} bytes, fewer than the 8 of the header length")
    n = int.from_bytes(bytes(buf[0:8]), "little")
    if n > MAX_HEADER_SIZE:
        raise bad(f"header length {n} exceeds the format's limit of {MAX_HEADER_SIZE} bytes")
    if 8 + n > size:
        raise bad(f"header length {n} runs past the end of the file ({size} bytes): "
                  f"truncated?")
    try:
        obj = json.loads(bytes(buf[8:8 + n]).decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise bad(f"the header is not UTF-8 JSON ({type(e).__name__}: {e})") from None
    if not isinstance(obj, dict):
        raise bad(f"the header is a JSON {type(obj).__name__}, not an object")
    meta = obj.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict)
                                 and all(isinstance(v, str) for v in meta.values())):
        raise bad("__metadata__ must map str to str")
    entries = []
    for name, info in obj.items():
        if not isinstance(info, dict):
            raise bad(f"tensor {name!r}: expected an object, got {info!r:.60}")
        st, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(st, str) or _itemsize(st) is None:
            raise bad(f"tensor {name!r}: unknown dtype {st!r:.40}")
        if not isinstance(shape, list) or not all(_is_uint(s) for s in shape):
            raise bad(f"tensor {name!r}: shape must be a list of non-negative ints, "
                      f"got {shape!r:.60}")
        if (not isinstance(offs, list) or len(offs) != 2 or not all(_is_uint(o) for o in offs)
                or offs[0] > offs[1]):
            raise bad(f"tensor {name!r}: data_offsets must be [begin, end] with "
                      f"0 <= begin <= end, got {offs!r:.60}")
        numel, nz = 1, 1
        for s in shape:
            numel *= s
            nz *= s or 1
        if offs[1] - offs[0] != numel * _itemsize(st):
            raise bad(f"tensor {name!r}: data_offsets {offs} hold {offs[1] - offs[0]} bytes, "
                      f"but {st} of shape {tuple(shape)} needs {numel * _itemsize(st)}")
        # the native shape rule (ad_check_shape): sizes are int64 and the
        # product of the nonzero ones, the largest contiguous stride, must fit
        # even when a 0 makes the tensor empty (a huge size in an empty tensor
        # escaped as a plain OverflowError from the conversion)
        if nz > _MAX_ELEMENTS // _itemsize(st):
            raise bad(f"tensor {name!r}: shape {tuple(shape)} of {st} has too many elements")
        entries.append((name, st, tuple(shape), offs[0], offs[1]))
    entries.sort(key=lambda e: (e[3], e[4]))
    pos = 0
    for name, _, _, b, e in entries:
        if b != pos:
            raise bad(f"tensor {name!r}: data begins at {b}, expected {pos} "
                      f"({'overlapping' if b < pos else 'a gap before'} the previous tensor)")
        pos = e
    if 8 + n + pos != size:
        raise bad(f"the tensors hold {pos} bytes but the file has {size - 8 - n} after the "
                  f"header ({'truncated' if 8 + n + pos > size else 'trailing bytes'})")
    return 8 + n, entries, meta


def _map(path):
    """(mapping handle, size, buffer over the mapped bytes)."""
    with open(path, "rb") as f:
        out = ffi.new("ad_mapping **")
        st = lib.ad_mapping_open(f.fileno(), out)
    if st:
        raise_status(st)
    m = out[0]
    size = lib.ad_mapping_size(m)
    buf = ffi.buffer(ffi.cast("char *", lib.ad_mapping_data(m)), size) if size else b""
    return m, buf


def _half_to_float32(buf, st, start, shape):
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if n == 0:
        return np.zeros(shape, np.float32)
    if st == "F16":
        return np.frombuffer(buf, "<f2", n, start).astype(np.float32).reshape(shape)
    bits = np.frombuffer(buf, "<u2", n, start).astype(np.uint32) << 16
    return bits.view(np.float32).reshape(shape)


def load(path: PathLike) -> Dict[str, "Tensor"]:
    """Returns the tensors of the safetensors file `path` as a dict of
    str -> Tensor, in file order.

    The file is memory-mapped, not read: each tensor is a read-only view of
    the mapping (kept mapped until the last of them dies), so loading costs
    the header's parse and pages come from disk as the data is touched.
    F16/BF16 tensors are converted to float32 (copied).  Raises OSError when
    the file cannot be opened, ad.InvalidArgumentError when it is truncated
    or its header is corrupt, ad.DTypeError for a dtype pyautodiff lacks."""
    where = f"load: {os.fspath(path)!r}"
    m, buf = _map(path)
    try:
        start, entries, _ = parse_header(buf, where)
        out, result = ffi.new("ad_tensor **"), {}
        for name, st, shape, b, _ in entries:
            if st in _HALF:
                result[name] = from_numpy(_half_to_float32(buf, st, start + b, shape),
                                          copy=False)
                continue
            d = _ST_TO_AD.get(st)
            if d is None:
                raise DTypeError(f"{where}: tensor {name!r} has dtype {st}, which pyautodiff "
                                 f"cannot hold (F32 F64 I64 I32 U8 BOOL are read as they are, "
                                 f"F16 and BF16 as float32)")
            s = lib.ad_tensor_from_mapping(m, start + b, d.code, list(shape) or ffi.NULL,
                                           len(shape), out)
            if s:
                try:
                    raise_status(s)
                except Error as e:
                    raise type(e)(f"{where}: tensor {name!r}: {e}") from None
            result[name] = _wrap(out[0])
        return result
    finally:
        del buf
        lib.ad_mapping_release(m)


def load_metadata(path: PathLike) -> Optional[Dict[str, str]]:
    """The `__metadata__` dict (str -> str) of a safetensors file, or None."""
    m, buf = _map(path)
    try:
        return parse_header(buf, f"load_metadata: {os.fspath(path)!r}")[2]
    finally:
        del buf
        lib.ad_mapping_release(m)


# ---- pickle ---------------------------------------------------------------------------
def reduce_tensor(t: "Tensor", protocol: int) -> Tuple[Any, Tuple[Any, ...]]:
    """Tensor.__reduce_ex__: (rebuild, (dtype name, shape, data, is_variable)).
    With protocol 5 the data is a PickleBuffer over the tensor's memory (no
    intermediate bytes, out of band with a buffer_callback)."""
    a = t.numpy()
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    data = pickle.PickleBuffer(a) if protocol >= 5 else a.tobytes()
    return (_rebuild, (t.dtype.name, a.shape, data, t.is_variable))


def _rebuild(dtype, shape, data, is_variable):
    d = _dt.as_dtype(dtype)
    a = np.frombuffer(data, dtype=d.numpy).reshape(shape)
    # bytes are immutable: share them; anything else (an out-of-band buffer
    # the caller may reuse) is copied
    t = from_numpy(a, copy=None if type(data) is bytes else True)
    return Var(t) if is_variable else t
