"""Data-parallel training over MPI through mpi4py (see the README's "Distributed training").

    import pyautodiff.distributed as dist
    dist.init()                               # once, after `mpiexec -n N python ...`
    dist.broadcast_parameters(params)         # every rank starts from rank 0's values
    for epoch in range(E):
        idx = dist.shard(n, seed=0, epoch=epoch)  # this rank's samples
        ...
        grads = loss.backward()
        dist.allreduce_(grads, params)        # every rank now holds the mean gradient
        opt.step(grads)

Decisions (documented here because each has an alternative):

- Before init() every function raises ad.GraphError (a RuntimeError: calling
  in the wrong state, like PyTorch's "process group not initialized").
- The order of the entries.  A GradStore is keyed by tensor id and ids are
  per-process counters, so two ranks cannot match entries by key.  allreduce_
  and broadcast_parameters take the parameters in a shared order: a module
  (anything with named_parameters(): names appear in error messages), a dict
  {name: Var} or a sequence of Vars (named "params[i]").  A store entry
  without a parameter in that list is left alone; a parameter without a
  gradient on every rank is skipped; one with a gradient on some ranks only
  is a mismatch.  params=None (allreduce_ only) reduces every entry of the
  store in tensor-id order, i.e. in the order the tensors were created:
  right when every rank builds its model with the same code, which the
  signature check can only partly verify (shapes and dtypes, not which of
  two same-shaped parameters is which).  Passing params is the robust form
  and names the parameters in errors.
- Never writing into the store's tensors.  Gradients are immutable Tensors and
  the backward shares them (an add hands its incoming gradient to both inputs,
  a reshape returns a view), so reducing in place could reduce one buffer
  twice or change a tensor someone else holds.  Instead each bucket's
  gradients are packed (one copy pass, ad_tensor_copy_to, straight from
  native memory) into a FRESH native tensor, MPI reduces that
  tensor's memory in place (Allreduce IN_PLACE: no staging buffer, no copy
  out; an out-of-place Allreduce would make MPICH do the same copy), and
  every entry is replaced (store.insert, or ad_gradstore_replace_id when
  params=None) by a view of its slice of it.  Nothing goes through Python
  lists.  The fresh tensor wraps numpy memory (as from_numpy(copy=False)),
  because numpy asks the kernel for transparent huge pages for arrays of
  4 MiB and more and the native allocator does not: MPI's shared-memory
  copies are measurably faster on huge pages.  Those blocks are recycled
  (per size class, at most _POOL_MAX each), but a block is reused only when
  its refcount shows that no tensor views it any more, so a result is never
  memory that a gradient still alive shares.
- Buckets: consecutive gradients of one dtype are fused until bucket_size
  bytes (25 MiB by default, as DDP); a gradient of bucket_size or more is a
  bucket of its own.
- Not overlapped with backward: backward() is one native call that returns
  the whole store, with no hook when one Var's gradient is final, so the
  reduction starts after it.  allreduce_ is not thread-safe (one collective
  at a time, as MPI_THREAD_SERIALIZED asks).
- Before reducing, the ranks exchange a digest of (names, shapes, dtypes, op,
  bucket_size): a mismatch would otherwise pair buffers of different sizes
  and hang or corrupt.  On a mismatch every rank gets the full lists and
  raises the same error, naming the first differing parameter.
- A rank that dies must not leave the others blocked in a collective forever.
  A killed or os._exit()ed process makes mpiexec end the job; an uncaught
  Python exception would not (the dying rank waits in MPI_Finalize), so
  init() installs a sys.excepthook that prints the traceback and calls
  MPI_Abort.  init(timeout=s) also aborts the job when one collective of
  this module waits longer than s seconds (a rank stuck elsewhere).
- shard() gives uneven shards when world_size does not divide n (sizes differ
  by one; no padding, so the shards are disjoint and cover the epoch).  A
  training loop must then run the same number of steps on every rank, e.g.
  n // (world_size * batch) of them.
"""
import ctypes
import hashlib
import numbers
import os
import sys
import threading
import time

import numpy as np

from . import dtypes as _dt
from ._lib import ffi, lib, raise_status
from .errors import DTypeError, GraphError, InternalError, InvalidArgumentError, ShapeError
# (pyautodiff/__init__ imports these modules before this one)
from .grad import GradStore as _GradStore
from .interop import _PY_RELEASE, _api
from .tensor import Var as _Var, _call, _wrap

__all__ = [
    "init", "is_initialized", "rank", "world_size", "barrier", "allreduce_",
    "broadcast_parameters", "shard",
]


DEFAULT_BUCKET_SIZE = 25 * 2 ** 20


class _State:
    __slots__ = ("MPI", "comm", "rank", "size", "seed", "watchdog", "prev_hook", "pool")


_state = None


def _need(fn):
    if _state is None:
        raise GraphError(f"ad.distributed.{fn}: call ad.distributed.init() first (and start the "
                         f"program with `mpiexec -n N python ...`)")
    return _state


def init(comm=None, timeout=None, abort_on_exception=True):
    """Starts data-parallel mode on comm (default MPI.COMM_WORLD).  Calling it
    again with the same communicator does nothing.

    timeout: seconds one collective of this module may wait before the whole
    job is aborted (None: wait forever).  abort_on_exception: an uncaught
    exception on any rank aborts the job instead of leaving the other ranks
    blocked."""
    global _state
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError("ad.distributed needs mpi4py and an MPI: pip install "
                          "\"pyautodiff[mpi]\" (mpi4py and mpich from PyPI) (" + str(e) + ")"
                          ) from e
    comm = MPI.COMM_WORLD if comm is None else comm
    if not isinstance(comm, MPI.Intracomm):
        raise InvalidArgumentError(f"init: comm must be an mpi4py Intracomm, got "
                                   f"{type(comm).__name__}")
    if timeout is not None and not (isinstance(timeout, numbers.Real) and timeout > 0):
        raise InvalidArgumentError(f"init: timeout must be a positive number of seconds or "
                                   f"None, got {timeout!r}")
    if _state is not None:
        if _state.comm is comm or _state.comm == comm:
            return
        raise GraphError("init: already initialized on another communicator")
    st = _State()
    st.MPI, st.comm = MPI, comm
    st.rank, st.size = comm.Get_rank(), comm.Get_size()
    # the session seed of shard(seed=None): drawn once on rank 0, so it is random
    # per run but the same on every rank
    st.seed = comm.bcast(int.from_bytes(os.urandom(8), "little") >> 1 if st.rank == 0 else None,
                         root=0)
    st.watchdog = _Watchdog(comm, float(timeout)) if timeout is not None else None
    st.prev_hook = None
    st.pool = {}
    if abort_on_exception:
        st.prev_hook = sys.excepthook

        def hook(tp, value, tb, _prev=st.prev_hook, _comm=comm):
            _prev(tp, value, tb)
            sys.stderr.flush()
            time.sleep(0.5)  # lets mpiexec forward the traceback before it kills the job
            _comm.Abort(1)

        sys.excepthook = hook
    _state = st


def is_initialized() -> bool:
    """True once init() has run in this process."""
    return _state is not None


def rank() -> int:
    """This process's rank in the communicator given to init()."""
    return _need("rank").rank


def world_size() -> int:
    """The number of processes in the communicator given to init().
    Raises GraphError before init()."""
    return _need("world_size").size


def barrier() -> None:
    """Blocks until every process has reached barrier().  Raises GraphError before init()."""
    st = _need("barrier")
    with _guard(st, "barrier"):
        st.comm.Barrier()


class _Watchdog:
    """One daemon thread that aborts the job when an armed collective has not
    returned by its deadline (MPI cannot cancel a blocking collective)."""

    def __init__(self, comm, timeout):
        self.comm, self.timeout = comm, timeout
        self.cond = threading.Condition()
        self.deadline, self.what = None, ""
        threading.Thread(target=self._run, name="ad.distributed watchdog", daemon=True).start()

    def _run(self):
        with self.cond:
            while True:
                if self.deadline is None:
                    self.cond.wait()
                    continue
                left = self.deadline - time.monotonic()
                if left > 0:
                    self.cond.wait(left)
                    continue
                sys.stderr.write(f"ad.distributed: {self.what} waited more than {self.timeout:g} "
                                 f"s on rank {self.comm.Get_rank()} (a rank died or is stuck); "
                                 f"aborting the job\n")
                sys.stderr.flush()
                time.sleep(0.5)  # lets mpiexec forward the message before it kills the job
                self.comm.Abort(2)

    def arm(self, what):
        with self.cond:
            self.deadline, self.what = time.monotonic() + self.timeout, what
            self.cond.notify()

    def disarm(self):
        with self.cond:
            self.deadline = None


class _guard:
    __slots__ = ("wd", "what")

    def __init__(self, st, what):
        self.wd, self.what = st.watchdog, what

    def __enter__(self):
        if self.wd is not None:
            self.wd.arm(self.what)

    def __exit__(self, *exc):
        if self.wd is not None:
            self.wd.disarm()
        return False


# ---- parameters in a shared order ---------------------------------------------------------
def _named(params, fn):
    """[(name, Var)] from a module, a {name: Var} dict or a sequence of Vars."""
    if params is None:
        raise InvalidArgumentError(f"{fn}: params must be a module, a {{name: Var}} dict or "
                                   f"a sequence of Vars, got None")
    if hasattr(params, "named_parameters"):
        named = list(params.named_parameters())
    elif isinstance(params, dict):
        named = list(params.items())
    elif isinstance(params, _Var):
        named = [("params[0]", params)]
    else:
        try:
            named = [(f"params[{i}]", p) for i, p in enumerate(params)]
        except TypeError:
            raise InvalidArgumentError(f"{fn}: params must be a module, a dict or a sequence "
                                       f"of Vars, got {type(params).__name__}") from None
    for name, p in named:
        if not isinstance(p, _Var):
            raise InvalidArgumentError(f"{fn}: parameter {name!r} is a {type(p).__name__}, "
                                       f"not an ad.Var")
    return named


_MPI_TYPE_NAMES = {_dt.float32: "FLOAT", _dt.float64: "DOUBLE"}


class _Layout:
    """What the collectives need to know of a parameter list, worked out once
    per list (a Var's shape and dtype never change: Var.set keeps them).  It
    holds no reference to the Vars, so the cache keeps no model alive."""

    __slots__ = ("names", "shapes", "dtypes", "numels", "rows", "digest")

    def __init__(self, named, fn):
        self.names = [n for n, _ in named]
        self.shapes = [p.shape for _, p in named]
        self.dtypes = [p.dtype for _, p in named]
        for name, dt in zip(self.names, self.dtypes):
            if dt not in _MPI_TYPE_NAMES:
                raise DTypeError(f"{fn}: parameter {name!r} is {dt.name}; only float32 and "
                                 f"float64 parameters are reduced")
        self.numels = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
        self.rows = [(n, s, d.name) for n, s, d in zip(self.names, self.shapes, self.dtypes)]
        self.digest = hashlib.blake2b(repr(self.rows).encode(), digest_size=16).digest()


_layouts = {}  # (names, Var ids) -> _Layout; ids are never reused, so a hit is exact


def _layout(params, fn):
    """(the Vars in the shared order, their _Layout)."""
    named = _named(params, fn)
    key = tuple((n, lib.ad_tensor_id(p._h)) for n, p in named)
    lay = _layouts.get(key)
    if lay is None:
        lay = _Layout(named, fn)
        if len(_layouts) >= 16:  # a few models at a time; forget the oldest
            del _layouts[next(iter(_layouts))]
        _layouts[key] = lay
    return [p for _, p in named], lay


def _check_same(st, fn, digest, signature):
    """Raises on every rank, with the same message, unless digest (bytes) is
    equal on all ranks.  signature() gives the full ((call arguments), rows) that the
    digest stands for; it is exchanged only on a mismatch, to name the first
    differing row."""
    if st.size == 1:
        return
    digest = hashlib.blake2b(digest, digest_size=16).digest()
    everyone = bytearray(16 * st.size)
    with _guard(st, fn + " (signature exchange)"):
        st.comm.Allgather([digest, st.MPI.BYTE], [everyone, st.MPI.BYTE])
        if everyone == digest * st.size:
            return
        sigs = st.comm.allgather(signature())

    def desc(row):
        if row is None:
            return "nothing"
        return (f"{row[0]!r} shape {row[1]} {row[2]}"
                + ("" if len(row) < 4 or row[3] else " (no gradient)"))

    ref = sigs[0]
    for r, s in enumerate(sigs):
        if s == ref:
            continue
        if s[0] != ref[0]:
            raise InvalidArgumentError(f"{fn}: ranks were called differently: rank 0 with "
                                       f"{ref[0]}, rank {r} with {s[0]}")
        rows0, rows = ref[1], s[1]
        for i in range(max(len(rows0), len(rows))):
            a = rows0[i] if i < len(rows0) else None
            b = rows[i] if i < len(rows) else None
            if a == b:
                continue
            cls = InvalidArgumentError
            if a is not None and b is not None and a[0] == b[0]:
                cls = ShapeError if a[1] != b[1] else DTypeError if a[2] != b[2] else cls
            raise cls(f"{fn}: the parameters differ across ranks at position {i}: rank 0 has "
                      f"{desc(a)}, rank {r} has {desc(b)} (rank 0 has {len(rows0)} entries, "
                      f"rank {r} has {len(rows)})")
    raise InternalError(f"{fn}: the ranks' digests differ but their signatures are equal")


def _plan(lay, items, bucket_size):
    """Splits [(i, tensor)] (i: position in the layout, in the shared order)
    into buckets: runs of one dtype up to bucket_size bytes; a tensor of
    bucket_size bytes or more is a bucket of its own."""
    buckets, cur, cur_bytes, cur_dt = [], [], 0, None
    for it in items:
        i = it[0]
        dt = lay.dtypes[i]
        nb = lay.numels[i] * dt.itemsize
        if nb >= bucket_size:
            if cur:
                buckets.append(cur)
            buckets.append([it])
            cur, cur_bytes = [], 0
            continue
        if cur and (cur_dt is not dt or cur_bytes + nb > bucket_size):
            buckets.append(cur)
            cur, cur_bytes = [], 0
        cur.append(it)
        cur_bytes += nb
        cur_dt = dt
    if cur:
        buckets.append(cur)
    return buckets


def _new_tensor(data, nbytes, dtype, shape):
    """A fresh contiguous native tensor of shape, copying nbytes from data
    (ffi.NULL: zeros)."""
    out = ffi.new("ad_tensor **")
    st = lib.ad_tensor_from_data(data, nbytes if data != ffi.NULL else 0, dtype.code,
                                 list(shape) or ffi.NULL, len(shape), out)
    if st:
        raise_status(st)
    return _wrap(out[0])


def _native(t, nbytes):
    """t's memory as a writable buffer object (no copy; t must be contiguous
    and stay alive while the buffer is used)."""
    return ffi.buffer(lib.ad_tensor_data(t._h), nbytes)


def _pack(lay, bucket):
    """A fresh 1-d tensor holding the bucket's tensors one after the other
    (in row-major order, whatever their strides), and each one's offset."""
    dt = lay.dtypes[bucket[0][0]]
    total = sum(lay.numels[it[0]] for it in bucket)
    buf = _new_tensor(ffi.NULL, 0, dt, (total,))
    base = ffi.cast("char *", lib.ad_tensor_data(buf._h))
    offs, off = [], 0
    for it in bucket:
        n = lay.numels[it[0]]
        st = lib.ad_tensor_copy_to(it[1]._h, base + off * dt.itemsize, n * dt.itemsize)
        if st:
            raise_status(st)
        offs.append(off)
        off += n
    return buf, offs


def _result(st, dtype, n):
    """A fresh 1-d native tensor of n elements (contents undefined) and its
    memory as a numpy array.  The memory is numpy's, so that it gets
    transparent huge pages like the buffers mpi4py is usually given (numpy
    asks for them from 4 MiB on; over MPI's shared memory, on this kind of
    machine, that alone makes a 25 MiB Allreduce ~1.5x faster than on the
    native allocator's 4 KiB pages).  The native tensor wraps it without a
    copy (as from_numpy(copy=False)).  Blocks are recycled: a pooled block
    is reused only when no tensor references it any more (its refcount is
    the pool's own), so the result is never memory a live gradient shares."""
    cap = 1 << max(n - 1, 1023).bit_length()  # a size class: blocks fit any n within 2x
    key = (dtype, cap)
    pool = st.pool.get(key)
    if pool is None:
        pool = st.pool[key] = []
    for k in range(len(pool)):
        base, ptr = pool[k]
        # 3: the pool's tuple, base and getrefcount's argument; a live view adds one
        if sys.getrefcount(base) <= 3:
            break
    else:
        base = np.empty(cap, dtype=dtype.numpy)
        ptr = ffi.cast("void *", base.ctypes.data)
        if len(pool) < _POOL_MAX:
            pool.append((base, ptr))
    arr = base[:n]
    owner = ctypes.py_object(arr)
    _api.Py_IncRef(owner)  # dropped by _ad_pyobject_release when the storage dies
    out = ffi.new("ad_tensor **")
    s = lib.ad_tensor_from_external(ptr, dtype.code, [n], ffi.NULL, 1, 0, _PY_RELEASE,
                                    ffi.cast("void *", id(arr)), out)
    if s:
        _api.Py_DecRef(owner)
        raise_status(s)
    return _wrap(out[0]), arr


_POOL_MAX = 8  # blocks kept per size class: the buckets of two steps' stores, for most models


def _pack_into(lay, bucket, dst):
    """Copies the bucket's tensors (row-major, whatever their strides) one
    after the other into the numpy array dst; returns their offsets."""
    dt = lay.dtypes[bucket[0][0]]
    base = ffi.cast("char *", ffi.from_buffer(dst))
    offs, off = [], 0
    for i, g in bucket:
        n = lay.numels[i]
        s = lib.ad_tensor_copy_to(g._h, base + off * dt.itemsize, n * dt.itemsize)
        if s:
            raise_status(s)
        offs.append(off)
        off += n
    return offs


def _views(lay, buf, bucket, offs):
    """Views of the 1-d buf, one per bucket entry, shaped like its parameter
    (each keeps buf alive)."""
    out = []
    for it, off in zip(bucket, offs):
        i = it[0]
        n, shape = lay.numels[i], lay.shapes[i]
        v = buf if len(bucket) == 1 else _call(lib.AD_OP_SLICE, (buf,), (0, off, 1, n))
        if shape != (n,):
            v = _call(lib.AD_OP_RESHAPE, (v,), shape)
        out.append(v)
    return out


# ---- the collectives ----------------------------------------------------------------------
def allreduce_(grads, params=None, op="mean", bucket_size=DEFAULT_BUCKET_SIZE, verify=True):
    """Sums (op="sum") or averages (op="mean") the gradients of params across
    all ranks, replacing each entry of the GradStore grads by the result.

    params: a module, a {name: Var} dict or a sequence of Vars, in the same
    order on every rank, or None for every entry in tensor-id order (see the
    module docstring).  op="mean" multiplies the sum by 1/world_size in place
    (one pass over the result).  verify=False skips the exchange of signatures (one small collective per call) for a loop
    that knows its ranks agree; a mismatch then hangs or corrupts instead of
    raising.  Returns grads."""
    st = _need("allreduce_")
    if not isinstance(grads, _GradStore):
        raise InvalidArgumentError(f"allreduce_: grads must be a GradStore, got "
                                   f"{type(grads).__name__}")
    if op not in ("mean", "sum"):
        raise InvalidArgumentError(f"allreduce_: op must be 'mean' or 'sum', got {op!r}")
    if not isinstance(bucket_size, numbers.Integral) or bucket_size < 1:
        raise InvalidArgumentError(f"allreduce_: bucket_size must be a positive number of "
                                   f"bytes, got {bucket_size!r}")
    bucket_size = int(bucket_size)
    gh = grads._h
    items = []
    if params is None:
        # every entry, in tensor-id order: ids differ across processes but their order
        # is the order in which the parameters were created
        entries = sorted(grads._item(k) for k in range(len(grads)))
        lay = _Layout([(f"entry {k} (in tensor-id order)", g) for k, (_, g) in
                       enumerate(entries)], "allreduce_")
        present = b"\1" * len(entries)
        items = [(k, g) for k, (_, g) in enumerate(entries) if lay.numels[k]]
        ids = [i for i, _ in entries]

        def put(k, v):
            return lib.ad_gradstore_replace_id(gh, ids[k], v._h)
    else:
        pvars, lay = _layout(params, "allreduce_")
        present = bytearray(len(pvars))
        out = ffi.new("ad_tensor **")
        for i, p in enumerate(pvars):
            s = lib.ad_gradstore_get(gh, p._h, out)
            if s:
                raise_status(s)
            if out[0] != ffi.NULL:
                present[i] = 1
                g = _wrap(out[0])
                if lay.numels[i]:
                    items.append((i, g))

        def put(i, v):
            return lib.ad_gradstore_insert(gh, pvars[i]._h, v._h)
    call = (op, bucket_size)
    if verify:
        _check_same(st, "allreduce_", lay.digest + bytes(present) + repr(call).encode(),
                    lambda: (call, [r + (bool(h),) for r, h in zip(lay.rows, present)]))
    if st.size == 1:
        return grads  # the sum and the mean over one rank are the gradients themselves
    MPI, comm = st.MPI, st.comm
    scale = 1.0 / st.size
    with _guard(st, "allreduce_"):
        for bucket in _plan(lay, items, bucket_size):
            dt = lay.dtypes[bucket[0][0]]
            mpi_type = getattr(MPI, _MPI_TYPE_NAMES[dt])
            n = sum(lay.numels[i] for i, _ in bucket)
            # the result goes straight into the fresh tensor the store's entries will view
            buf, arr = _result(st, dt, n)
            # pack, then reduce in place: MPICH's out-of-place Allreduce copies the send
            # buffer into the receive buffer first anyway, so this costs the same pass
            offs = _pack_into(lay, bucket, arr)
            comm.Allreduce(MPI.IN_PLACE, [arr, mpi_type], op=MPI.SUM)
            if op == "mean":
                np.multiply(arr, scale, out=arr)
            for (i, _), v in zip(bucket, _views(lay, buf, bucket, offs)):
                s = put(i, v)
                if s:
                    raise_status(s)
    return grads


def broadcast_parameters(module_or_vars, root=0, bucket_size=DEFAULT_BUCKET_SIZE):
    """Sets every parameter (a module with named_parameters(), a {name: Var}
    dict or a sequence of Vars) to rank root's value, through Var.set (so each
    Var's version is bumped on the receiving ranks)."""
    st = _need("broadcast_parameters")
    if not isinstance(root, numbers.Integral) or not 0 <= root < st.size:
        raise InvalidArgumentError(f"broadcast_parameters: root must be a rank in "
                                   f"[0, {st.size}), got {root!r}")
    if not isinstance(bucket_size, numbers.Integral) or bucket_size < 1:
        raise InvalidArgumentError(f"broadcast_parameters: bucket_size must be a positive "
                                   f"number of bytes, got {bucket_size!r}")
    root, bucket_size = int(root), int(bucket_size)
    pvars, lay = _layout(module_or_vars, "broadcast_parameters")
    call = (root, bucket_size)
    _check_same(st, "broadcast_parameters", lay.digest + repr(call).encode(),
                lambda: (call, lay.rows))
    if st.size == 1:
        return
    MPI = st.MPI
    items = [(i, p) for i, p in enumerate(pvars) if lay.numels[i]]
    with _guard(st, "broadcast_parameters"):
        for bucket in _plan(lay, items, bucket_size):
            dt = lay.dtypes[bucket[0][0]]
            # every rank packs (the non-roots' values are overwritten): the same code
            # path everywhere, and broadcast runs once per training
            buf, offs = _pack(lay, bucket)
            st.comm.Bcast([_native(buf, buf.numel() * dt.itemsize),
                           getattr(MPI, _MPI_TYPE_NAMES[dt])], root=root)
            if st.rank != root:
                for (i, p), v in zip(bucket, _views(lay, buf, bucket, offs)):
                    p.set(v)


def shard(n, seed=None, epoch=0):
    """This rank's indices (a numpy int64 array) of an n-sample epoch.

    Every rank draws the same permutation of range(n) from (seed, epoch)
    (seed=None: a seed drawn on rank 0 at init() and shared, so it is the
    same on every rank but differs between runs) and takes every
    world_size-th index from its rank on: the shards are disjoint, cover
    range(n), and differ in length by at most one."""
    st = _need("shard")
    if not isinstance(n, numbers.Integral) or n < 0:
        raise InvalidArgumentError(f"shard: n must be a non-negative int, got {n!r}")
    if not isinstance(epoch, numbers.Integral) or epoch < 0:
        raise InvalidArgumentError(f"shard: epoch must be a non-negative int, got {epoch!r}")
    if seed is None:
        seed = st.seed
    elif not isinstance(seed, numbers.Integral) or seed < 0:
        raise InvalidArgumentError(f"shard: seed must be a non-negative int or None, "
                                   f"got {seed!r}")
    perm = np.random.default_rng([int(seed), int(epoch)]).permutation(int(n))
    return np.ascontiguousarray(perm[st.rank::st.size])
