"""The memory report and the graph picture.

memory_stats() reads four native counters: live_bytes (tensor data alive),
peak_bytes (the most live_bytes has been since start or reset_peak_memory()),
saved_bytes (what recorded graphs keep for backward beyond the Vars: each
live node counts the distinct storages among the values its backward reads
once; two nodes keeping one storage both count it) and saved_var_bytes (the
Vars' own buffers among those values, by the same rule: the parameters, alive
with or without a graph).  Tensor.to_dot() draws the graph behind
a tensor (to_dot here), marking what it saves."""
from __future__ import annotations

from typing import Dict

from ._lib import ffi, lib, raise_status
from .tensor import Tensor, Var, _wrap


__all__ = ["memory_stats", "reset_peak_memory", "to_dot"]


def memory_stats() -> Dict[str, int]:
    """{"live_bytes", "peak_bytes", "saved_bytes", "saved_var_bytes"},
    counted natively for the whole process (all threads): tensor data alive,
    the most it has been since start or reset_peak_memory(), what recorded
    graphs keep for backward beyond the Vars (activations and other
    intermediate values: what freeing the graphs or checkpointing gives back),
    and the Var buffers those graphs read (alive with the Vars anyway)."""
    s = ffi.new("ad_memory_stats_t *")
    lib.ad_memory_stats(s)
    return {"live_bytes": s.live_bytes, "peak_bytes": s.peak_bytes,
            "saved_bytes": s.saved_bytes, "saved_var_bytes": lib.ad_saved_var_bytes()}


def reset_peak_memory() -> None:
    """Sets peak_bytes to the current live_bytes."""
    lib.ad_reset_peak_memory()


def _parents(t):
    """(parents, tracked mask, saved mask, saves output) of t's node:
    parents[i] a Tensor or None where the node keeps no reference; bit i of
    the masks for input i."""
    arr = ffi.new("ad_tensor *[8]")
    n, tracked, legacy = ffi.new("int *"), ffi.new("unsigned *"), ffi.new("unsigned *")
    saved, out = ffi.new("unsigned *"), ffi.new("int *")
    st = lib.ad_tensor_parents(t._h, arr, 8, n, tracked, legacy) or \
        lib.ad_tensor_saved(t._h, saved, out)
    if st:
        raise_status(st)
    ps = [None if arr[i] == ffi.NULL else
          _wrap(arr[i], Var if lib.ad_tensor_is_variable(arr[i]) else Tensor)
          for i in range(n[0])]
    return ps, tracked[0], saved[0], bool(out[0])


def _q(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(root: Tensor) -> str:
    """Graphviz DOT text of the graph recorded behind root: one node per
    tensor (op or "Var", shape, dtype), an edge from each input to the op that
    consumed it (labelled with the input's position).  Vars are boxes; a
    tensor some backward formula reads (a saved value) is filled orange with
    a double border; an input that gets no gradient is dashed."""
    lines = ["digraph pyautodiff {", '  rankdir="BT";',
             '  node [fontname="Helvetica", fontsize=10, style=filled, fillcolor=white];']
    seen, order, edges, saved_ids = {}, [], [], set()
    stack = [root]
    while stack:
        t = stack.pop()
        if t.id in seen:
            continue
        seen[t.id] = t
        order.append(t)
        ps, tracked, saved, saves_out = _parents(t)
        if saves_out:
            saved_ids.add(t.id)
        for i, p in enumerate(ps):
            if p is None:
                continue
            if saved & (1 << i):
                saved_ids.add(p.id)
            edges.append((p.id, t.id, i, bool(tracked & (1 << i))))
            if p.id not in seen:
                stack.append(p)
    for t in order:
        kind = "Var" if t.is_variable else (t.op or "tensor")
        label = f"{kind}\n{t.shape}\n{t.dtype.name}"
        attrs = {"label": _q(label), "shape": "ellipse"}
        if t.is_variable:
            attrs.update(shape="box", fillcolor='"lightblue"')
        elif not t.track_op:
            attrs.update(shape="note", fillcolor='"lightgrey"')
        if t.id in saved_ids:
            attrs.update(fillcolor='"orange"', peripheries="2")
        lines.append(f"  t{t.id} [{', '.join(f'{k}={v}' for k, v in attrs.items())}];")
    for src, dst, i, tracked in edges:
        style = "" if tracked else ", style=dashed"
        lines.append(f'  t{src} -> t{dst} [label="{i}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"
