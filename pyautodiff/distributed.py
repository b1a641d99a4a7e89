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

    # or, with the reduction overlapping backward:
    ddp = dist.DistributedDataParallel(params)  # once, on every rank
    ...
        grads = ddp.backward(loss)            # backward + the mean gradient

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
- Overlap with backward: DistributedDataParallel.backward runs backward
  through ad_backward_hooked, whose callback reports each Var's gradient the
  moment it is final (the walk is topological: every consumer of a Var comes
  before it).  The callback copies the gradient into its bucket and, once a
  bucket is full, starts a non-blocking Iallreduce on it; buckets are
  assigned in reverse parameter order (the last layers' gradients are ready
  first, as in PyTorch's DDP) and started strictly in bucket order, so every
  rank issues the same collectives in the same order whatever order its
  gradients arrive in.  The requests are waited for when backward returns.
  allreduce_ (after backward) stays the simple form.  Neither is
  thread-safe (one collective at a time, as MPI_THREAD_SERIALIZED asks).
- Before reducing, the ranks exchange a digest of (names, shapes, dtypes, op,
  bucket_size, which parameters have gradients): a mismatch would otherwise
  pair buffers of different sizes, which MPI does not detect (MPICH
  truncates silently).  On a mismatch every rank gets the full lists and
  raises the same error, naming the first differing parameter.  allreduce_
  does this on every call: a cached "already verified" would be a per-rank
  decision, and one rank skipping the exchange while another runs it pairs
  two different collectives.  DistributedDataParallel checks the layout once,
  at construction (itself a collective), and its buckets have a fixed size
  whatever the gradients: a per-parameter presence count summed with the
  data tells every rank alike when a gradient exists on some ranks only.
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
from ._lib import ffi, lib, pending, raise_status
from .errors import DTypeError, GraphError, InternalError, InvalidArgumentError, ShapeError
# (pyautodiff/__init__ imports these modules before this one)
from .grad import GradStore as _GradStore
from .interop import _PY_RELEASE, _api
from .tensor import Tensor as _Tensor, Var as _Var, _call, _wrap, tensor as _tensor

__all__ = [
    "init", "is_initialized", "rank", "world_size", "barrier", "allreduce_",
    "broadcast_parameters", "shard", "DistributedDataParallel",
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

    __slots__ = ("names", "shapes", "dtypes", "numels", "rows", "digest", "plans")

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
        self.plans = {}  # allreduce_'s _Plan per (op, bucket_size, presence)


_layouts = {}  # (names, Var ids) -> _Layout; ids are never reused, so a hit is exact


def _layout(params, fn):
    """(the Vars in the shared order, their _Layout).  A list or tuple of Vars
    is looked up by the Vars' ids alone (its names are only its positions), so
    a training loop's call costs one id per parameter."""
    if type(params) is list or type(params) is tuple:
        try:
            key = (None, *[_tensor_id(p._h) for p in params])
        except AttributeError:  # not a Tensor: _named names it below
            key = None
        lay = _layouts.get(key)
        if lay is not None:
            return params, lay
        named = _named(params, fn)
    else:
        named = _named(params, fn)
        key = tuple([(n, _tensor_id(p._h)) for n, p in named])
        lay = _layouts.get(key)
        if lay is not None:
            return [p for _, p in named], lay
    lay = _Layout(named, fn)
    if key is not None:
        if len(_layouts) >= 16:  # a few models at a time; forget the oldest
            del _layouts[next(iter(_layouts))]
        _layouts[key] = lay
    return [p for _, p in named], lay


_tensor_id = lib.ad_tensor_id


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
    if everyone != digest * st.size:
        _mismatch(st, fn, signature)


def _mismatch(st, fn, signature):
    """After digests that differ (every rank saw the same ones): exchanges
    the full signatures and raises the same error on every rank."""
    with _guard(st, fn + " (signature exchange)"):
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


def _result(st, dtype, n, extra=0):
    """A fresh 1-d native tensor of n elements (contents undefined), its
    memory as a numpy array of n + extra elements (the extra ones are not the
    tensor's) and the address as a char *.  The memory is numpy's, so that it gets
    transparent huge pages like the buffers mpi4py is usually given (numpy
    asks for them from 4 MiB on; over MPI's shared memory, on this kind of
    machine, that alone makes a 25 MiB Allreduce ~1.5x faster than on the
    native allocator's 4 KiB pages).  The native tensor wraps it without a
    copy (as from_numpy(copy=False)).  Blocks are recycled: a pooled block
    is reused only when no tensor references it any more (its refcount is
    the pool's own), so the result is never memory a live gradient shares."""
    cap = 1 << max(n + extra - 1, 1023).bit_length()  # a size class: fits any n within 2x
    key = (dtype.code, cap)
    pool = st.pool.get(key)
    if pool is None:
        pool = st.pool[key] = []
    for entry in pool:
        # 2: the pool's tuple and getrefcount's argument; a live tensor's view adds one
        if sys.getrefcount(entry[0]) <= 2:
            base, ptr, cptr = entry
            break
    else:
        base = np.empty(cap, dtype=dtype.numpy)
        ptr = ffi.cast("void *", base.ctypes.data)
        cptr = ffi.cast("char *", ptr)
        if len(pool) < _POOL_MAX:
            pool.append((base, ptr, cptr))
    arr = base[:n + extra]
    owner = ctypes.py_object(arr)
    _api.Py_IncRef(owner)  # dropped by _ad_pyobject_release when the storage dies
    out = ffi.new("ad_tensor **")
    s = lib.ad_tensor_from_external(ptr, dtype.code, [n], ffi.NULL, 1, 0, _PY_RELEASE,
                                    ffi.cast("void *", id(arr)), out)
    if s:
        _api.Py_DecRef(owner)
        raise_status(s)
    return _wrap(out[0]), arr, cptr


_POOL_MAX = 8  # blocks kept per size class: the buckets of two steps' stores, for most models


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
    (one pass over the result).  verify=False skips the exchange of
    signatures (one 16-byte Allgather per call) for a loop that knows its ranks agree; a mismatch then hangs
    or corrupts instead of raising.  Returns grads."""
    st = _state
    if st is None:
        _need("allreduce_")
    if not isinstance(grads, _GradStore):
        raise InvalidArgumentError(f"allreduce_: grads must be a GradStore, got "
                                   f"{type(grads).__name__}")
    if op != "mean" and op != "sum":
        raise InvalidArgumentError(f"allreduce_: op must be 'mean' or 'sum', got {op!r}")
    if type(bucket_size) is not int and not isinstance(bucket_size, numbers.Integral) \
            or bucket_size < 1:
        raise InvalidArgumentError(f"allreduce_: bucket_size must be a positive number of "
                                   f"bytes, got {bucket_size!r}")
    gh = grads._h
    out = ffi.new("ad_tensor **")
    held = []  # new references from the store, released below whatever happens
    try:
        if params is None:
            # every entry, in tensor-id order: ids differ across processes but their
            # order is the order in which the parameters were created
            entries = sorted(grads._item(k) for k in range(len(grads)))
            lay = _Layout([(f"entry {k} (in tensor-id order)", g) for k, (_, g) in
                           enumerate(entries)], "allreduce_")
            targets = [tid for tid, _ in entries]
            present = b"\1" * len(entries)
            for _, g in entries:
                lib.ad_tensor_retain(g._h)
                held.append(g._h)
            del entries
        else:
            targets, lay = _layout(params, "allreduce_")
            present = bytearray(len(targets))
            for i, p in enumerate(targets):
                s = lib.ad_gradstore_get(gh, p._h, out)
                if s:
                    raise_status(s)
                h = out[0]
                held.append(h)
                if h != ffi.NULL:
                    present[i] = 1
            present = bytes(present)
        plan = lay.plans.get((op, bucket_size, present))
        if plan is None:
            plan = lay.plans[(op, bucket_size, present)] = _Plan(st, lay, op, bucket_size,
                                                                 present)
        if st.size == 1:
            return grads  # the sum and the mean over one rank are the gradients themselves
        _reduce(st, lay, plan, gh, targets, held, params is None, op,
                verify and plan.digest)
    finally:
        for h in held:
            if h != ffi.NULL:
                lib.ad_tensor_release(h)
    return grads


class _Plan:
    """How allreduce_ reduces one (layout, op, bucket_size, which parameters
    have gradients): the buckets, each [(position, offset)] with its dtype,
    MPI type and length, and the 16-byte digest the ranks exchange."""

    __slots__ = ("buckets", "digest", "expected", "call", "rows")

    def __init__(self, st, lay, op, bucket_size, present):
        items = [(i, None) for i in range(len(present)) if present[i] and lay.numels[i]]
        self.buckets = []
        for bucket in _plan(lay, items, bucket_size):
            dt = lay.dtypes[bucket[0][0]]
            slots, off = [], 0
            for i, _ in bucket:
                n, shape = lay.numels[i], lay.shapes[i]
                # (position, byte offset, bytes, the slice of the result that is its
                # gradient (None: all of it), the shape to give it (None: 1-d already))
                slots.append((i, off * dt.itemsize, n * dt.itemsize,
                              None if len(bucket) == 1 else (0, off, 1, n),
                              None if shape == (n,) else shape))
                off += n
            self.buckets.append((dt, getattr(st.MPI, _MPI_TYPE_NAMES[dt]), off, slots))
        self.call = (op, bucket_size)
        self.rows = [r + (bool(h),) for r, h in zip(lay.rows, present)]
        self.digest = hashlib.blake2b(lay.digest + present + repr(self.call).encode(),
                                      digest_size=16).digest()
        self.expected = self.digest * st.size


def _reduce(st, lay, plan, gh, targets, held, by_id, op, verify):
    """allreduce_'s communication: the signature exchange (when verify) and
    one in-place Allreduce per bucket into a fresh tensor whose views replace
    the store's entries."""
    MPI, comm = st.MPI, st.comm
    wd = st.watchdog
    if wd is not None:
        wd.arm("allreduce_")
    try:
        if verify:
            # blocking: MPICH's non-blocking Iallgather of 16 bytes (a generic schedule)
            # costs ~20x its Allgather, more than the copy it could hide behind
            everyone = bytearray(len(plan.expected))
            comm.Allgather([plan.digest, MPI.BYTE], [everyone, MPI.BYTE])
            if everyone != plan.expected:
                _mismatch(st, "allreduce_", lambda: (plan.call, plan.rows))
        scale = 1.0 / st.size
        copy_to = lib.ad_tensor_copy_to
        for dt, mpi_type, n, slots in plan.buckets:
            buf, arr, base = _result(st, dt, n)
            for i, at, nbytes, piece, shape in slots:
                s = copy_to(held[i], base + at, nbytes)
                if s:
                    raise_status(s)
            comm.Allreduce(MPI.IN_PLACE, [arr, mpi_type], op=MPI.SUM)
            if op == "mean":
                np.multiply(arr, scale, out=arr)
            for i, at, nbytes, piece, shape in slots:
                v = buf if piece is None else _call(lib.AD_OP_SLICE, (buf,), piece)
                if shape is not None:
                    v = _call(lib.AD_OP_RESHAPE, (v,), shape)
                s = (lib.ad_gradstore_replace_id(gh, targets[i], v._h) if by_id else
                     lib.ad_gradstore_insert(gh, targets[i]._h, v._h))
                if s:
                    raise_status(s)
    finally:
        if wd is not None:
            wd.disarm()


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


# ---- backward with a gradient-ready hook ---------------------------------------------------
_HOOK_STATUS = {ShapeError: "AD_ERR_SHAPE", DTypeError: "AD_ERR_DTYPE", GraphError: "AD_ERR_GRAPH"}


@ffi.def_extern()
def _ad_grad_ready(ctxp, t, g):
    try:
        ffi.from_handle(ctxp)(lib.ad_tensor_id(t), g)
        return lib.AD_OK
    except BaseException as e:  # noqa: B036 - re-raised by the thread that called backward
        pending.exc = e
        return getattr(lib, _HOOK_STATUS.get(type(e), "AD_ERR_VALUE"))


def _backward_hooked(root, raw, grad=None, retain=(), create_graph=False):
    """root.backward(grad, retain, create_graph), calling raw(tensor_id,
    grad_handle) on this thread for each entry of the store the moment its
    gradient is final (grad_handle is borrowed for the call).  An exception
    raised by raw stops backward and propagates from here as itself; no
    store is returned then."""
    if not isinstance(root, _Tensor):
        raise InvalidArgumentError(f"backward: the root must be an ad.Tensor, got "
                                   f"{type(root).__name__}")
    if grad is not None and not isinstance(grad, _Tensor):
        grad = _tensor(grad, dtype=root.dtype)
    retain = tuple(retain)  # held until the native call returns (a generator's could die)
    keep = []
    for i, t in enumerate(retain):
        if not isinstance(t, _Tensor):
            raise InvalidArgumentError(f"backward: retain[{i}] is a {type(t).__name__}, not a "
                                       f"Tensor")
        keep.append(t._h)
    handle = ffi.new_handle(raw)
    out = ffi.new("ad_gradstore **")
    s = lib.ad_backward_hooked(root._h, grad._h if grad is not None else ffi.NULL,
                               keep or ffi.NULL, len(keep),
                               lib.AD_BACKWARD_CREATE_GRAPH if create_graph else 0,
                               lib._ad_grad_ready, handle, out)
    del handle, retain
    if s:
        raise_status(s)
    return _GradStore._from_handle(out[0])


def _backward_with_hook(root, on_ready, grad=None, retain=(), create_graph=False):
    """As _backward_hooked, calling on_ready(tensor_id, grad) with grad an
    ad.Tensor (the store's own entry)."""
    def raw(tid, gh):
        lib.ad_tensor_retain(gh)  # the wrapper owns a reference of its own
        on_ready(tid, _wrap(gh))
    return _backward_hooked(root, raw, grad, retain, create_graph)


class _Bucket:
    __slots__ = ("dtype", "mpi_type", "idx", "offs", "views", "data_n", "full")


class DistributedDataParallel:
    """Gradient averaging (op="mean") or summing (op="sum") across the ranks,
    overlapped with backward:

        ddp = dist.DistributedDataParallel(model)     # collective: every rank, same order
        grads = ddp.backward(loss)                    # the reduced gradients
        opt.step(grads)

    module_or_vars: a module, a {name: Var} dict or a sequence of Vars, in
    the same order on every rank (checked here, once: names, shapes, dtypes,
    op and bucket_size).  The parameters are split into buckets of at most
    bucket_size bytes in reverse order (the last layers' gradients are final
    first); during backward each gradient is copied into its bucket the
    moment it is final, and a full bucket is reduced by a non-blocking
    Iallreduce while backward goes on.  The store backward returns holds the
    reduced gradients (views of the buckets; the backward's own gradient
    tensors are never written).  A parameter that has no gradient on any
    rank is left out; one that has a gradient on some ranks only raises
    InvalidArgumentError on every rank, naming it (each bucket carries one
    count per parameter, summed with the data).  Store entries that are not
    parameters are left as backward made them.  After each backward,
    started_during_backward is how many of the n_buckets buckets were started
    before backward returned (the rest started after it).  Not thread-safe."""

    def __init__(self, module_or_vars, op="mean", bucket_size=DEFAULT_BUCKET_SIZE):
        fn = "DistributedDataParallel"
        st = _need(fn)
        if op not in ("mean", "sum"):
            raise InvalidArgumentError(f"{fn}: op must be 'mean' or 'sum', got {op!r}")
        if not isinstance(bucket_size, numbers.Integral) or bucket_size < 1:
            raise InvalidArgumentError(f"{fn}: bucket_size must be a positive number of bytes, "
                                       f"got {bucket_size!r}")
        bucket_size = int(bucket_size)
        pvars, lay = _layout(module_or_vars, fn)
        ids = [lib.ad_tensor_id(p._h) for p in pvars]
        seen = {}
        for name, tid in zip(lay.names, ids):
            if tid in seen:
                raise InvalidArgumentError(f"{fn}: parameters {seen[tid]!r} and {name!r} are the "
                                           f"same Var")
            seen[tid] = name
        call = (op, bucket_size)
        _check_same(st, fn, lay.digest + repr(call).encode(), lambda: (call, lay.rows))
        self._st, self._lay, self._op, self._vars = st, lay, op, pvars
        self.bucket_size = bucket_size
        order = [(i, None) for i in reversed(range(len(pvars))) if lay.numels[i]]
        self._buckets, self._where = [], {}
        for b, items in enumerate(_plan(lay, order, bucket_size)):
            spec = _Bucket()
            spec.dtype = lay.dtypes[items[0][0]]
            spec.mpi_type = getattr(st.MPI, _MPI_TYPE_NAMES[spec.dtype])
            spec.idx = [i for i, _ in items]
            spec.offs, spec.views, off = [], [], 0
            for j, i in enumerate(spec.idx):
                n, shape = lay.numels[i], lay.shapes[i]
                spec.offs.append(off)
                # (the slice of the result that is its gradient (None: all of it), the
                # shape to give it (None: 1-d already))
                spec.views.append((None if len(items) == 1 else (0, off, 1, n),
                                   None if shape == (n,) else shape))
                off += n
                self._where[ids[i]] = (b, j)
            spec.data_n = off
            # one presence count per parameter after the data: every rank has them all
            # when they read `size` each (compared as bytes: one call)
            spec.full = np.full(len(spec.idx), st.size, dtype=spec.dtype.numpy).tobytes()
            self._buckets.append(spec)
        self._step = None
        self.started_during_backward = 0

    @property
    def n_buckets(self):
        """How many buckets the parameters are split into."""
        return len(self._buckets)

    def backward(self, loss, grad=None, retain=()):
        """loss.backward(grad, retain) with the parameters' gradients reduced
        across the ranks (buckets started during backward, all waited for
        before it returns).  Returns the GradStore.  Every rank must call it,
        in the same order as its other collectives."""
        fn = "DistributedDataParallel.backward"
        st = _need(fn)
        if st.size == 1:  # the sum and the mean over one rank are the gradients themselves
            return loss.backward(grad, retain)
        MPI = st.MPI
        bufs, arrs, ptrs, left = [], [], [], []
        for spec in self._buckets:
            buf, arr, ptr = _result(st, spec.dtype, spec.data_n, len(spec.idx))
            arr[spec.data_n:] = 0
            bufs.append(buf)
            arrs.append(arr)
            ptrs.append(ptr)
            left.append(len(spec.idx))
        step = self._step = _Step(bufs, arrs, ptrs, left)
        with _guard(st, fn):
            try:
                store = _backward_hooked(loss, self._ready, grad, retain)
            except BaseException:
                # the buckets already started finish before their memory can be reused
                MPI.Request.Waitall(step.reqs)
                self._step = None
                raise
            # (how much of the reduction overlapped backward: tests and the example read it)
            self.started_during_backward = step.next
            self._start(step, flush=True)
            MPI.Request.Waitall(step.reqs)
        self._step = None
        self._finish(step, store)
        return store

    def _ready(self, tid, gh):
        """The hook: gradient gh of tensor tid is final."""
        loc = self._where.get(tid)
        step = self._step
        if loc is None or step is None:
            return
        b, j = loc
        spec = self._buckets[b]
        i = spec.idx[j]
        size = spec.dtype.itemsize
        s = lib.ad_tensor_copy_to(gh, step.ptrs[b] + spec.offs[j] * size,
                                  self._lay.numels[i] * size)
        if s:
            raise_status(s)
        step.arrs[b][spec.data_n + j] = 1
        step.left[b] -= 1
        if step.left[b] == 0 and b == step.next:
            self._start(step)
        elif step.done < len(step.reqs):
            # MPI advances a non-blocking collective only inside MPI calls: a test
            # now and then lets the started buckets move while backward runs
            if step.reqs[step.done].Test():
                step.done += 1

    def _start(self, step, flush=False):
        """Starts the full buckets from step.next on, in bucket order (every rank
        issues the same collectives in the same order); flush: all the rest,
        zeroing the slots of parameters without a gradient."""
        MPI, comm = self._st.MPI, self._st.comm
        while step.next < len(self._buckets) and (flush or step.left[step.next] == 0):
            b = step.next
            spec, arr = self._buckets[b], step.arrs[b]
            if step.left[b]:
                for j, i in enumerate(spec.idx):
                    if not arr[spec.data_n + j]:
                        arr[spec.offs[j]:spec.offs[j] + self._lay.numels[i]] = 0
            step.reqs.append(comm.Iallreduce(MPI.IN_PLACE, [arr, spec.mpi_type], op=MPI.SUM))
            step.next += 1

    def _finish(self, step, store):
        lay, size = self._lay, self._st.size
        bad = None
        for spec, arr in zip(self._buckets, step.arrs):
            counts = arr[spec.data_n:]
            if counts.tobytes() == spec.full:
                continue
            for j in np.flatnonzero((counts != 0) & (counts != size)):
                i = spec.idx[j]
                if bad is None or i < bad[0]:
                    bad = (i, int(counts[j]))
        if bad is not None:
            i, c = bad
            raise InvalidArgumentError(
                f"DistributedDataParallel.backward: parameter {lay.names[i]!r} shape "
                f"{lay.shapes[i]} {lay.dtypes[i].name} has a gradient on {c} of the {size} "
                f"ranks; every rank needs one, or none")
        gh, insert, pvars = store._h, lib.ad_gradstore_insert, self._vars
        for spec, buf, arr in zip(self._buckets, step.bufs, step.arrs):
            if self._op == "mean":
                np.multiply(arr[:spec.data_n], 1.0 / size, out=arr[:spec.data_n])
            full = arr[spec.data_n:].tobytes() == spec.full
            for j, (i, (piece, shape)) in enumerate(zip(spec.idx, spec.views)):
                if not full and not arr[spec.data_n + j]:
                    continue  # no gradient on any rank
                v = buf if piece is None else _call(lib.AD_OP_SLICE, (buf,), piece)
                if shape is not None:
                    v = _call(lib.AD_OP_RESHAPE, (v,), shape)
                s = insert(gh, pvars[i]._h, v._h)
                if s:
                    raise_status(s)


class _Step:
    """One backward's buckets: their tensors, memory and progress."""
    __slots__ = ("bufs", "arrs", "ptrs", "left", "next", "reqs", "done")

    def __init__(self, bufs, arrs, ptrs, left):
        self.bufs, self.arrs, self.ptrs, self.left = bufs, arrs, ptrs, left
        self.next, self.reqs, self.done = 0, [], 0
