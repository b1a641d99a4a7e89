"""The op table: the native op registry (native/src/ops.def) as Python sees it
through ad_op_info(), and the Tensor methods built from it at import.

An elementwise op with no arguments (family UNARY: exp, tanh, gelu, ...)
becomes a method `t.<name>()`; one with float arguments that all have a
default in the registry's schema (family SCALAR, "fargs: alpha=1.0") becomes
`t.<name>(alpha=1.0)`.  The docstring is the registry's line.  Adding such an
op to ops.def therefore adds its Python method with no Python edit.
"""
from typing import Callable, Dict, NamedTuple, Optional, Tuple

from ._lib import ffi, lib


class OpInfo(NamedTuple):
    """One registry row (pyautodiff.h, ad_op_info_t)."""
    kind: int
    name: str
    args: str
    doc: str
    n_inputs: int
    n_iargs: int
    n_fargs: int
    family: int
    differentiable: bool
    memory_bound: bool
    dtypes: int


def _load() -> Dict[str, OpInfo]:
    ops = {}
    out = ffi.new("ad_op_info_t *")
    for kind in range(1, lib.AD_OP__COUNT):
        if lib.ad_op_info(kind, out) != lib.AD_OK:
            continue
        name = ffi.string(out.name).decode()
        ops[name] = OpInfo(kind, name, ffi.string(out.args).decode(),
                           ffi.string(out.doc).decode(), out.n_inputs, out.n_iargs, out.n_fargs,
                           out.family, bool(out.differentiable), bool(out.memory_bound),
                           out.dtypes)
    return ops


OPS = _load()


def float_params(info: OpInfo) -> Optional[Tuple[Tuple[str, float], ...]]:
    """(name, default) of each float argument from the schema, or None when
    one has no default (such an op gets a hand-written method, or none)."""
    spec = next((part.split(":", 1)[1] for part in info.args.split(";")
                 if part.strip().startswith("fargs:")), "")
    params = []
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, eq, default = item.partition("=")
        if not eq or not name.strip().isidentifier():
            return None
        params.append((name.strip(), float(default)))
    return tuple(params) if len(params) == info.n_fargs else None


# The generated methods try the quick call first (pyautodiff.h: small
# contiguous operands, the handle returned) and build the Tensor inline: at a
# few hundred elements a Python call more is a tenth of the op.  Their globals
# are tensor.py's (`env`): _sq the quick call, _new and Tensor to build the
# result, _unary_call/_scalar_call the ordinary path (which also raises).  A
# unary method calls its op's own quick call (_q: lib._ad_uq_<name>,
# bindings/build_cffi.py), a builtin of one argument, held by the closure.
_UNARY_SRC = """def _make(_q):
    def {name}(self):
        h = _q(self._h)
        if h:
            t = _new(Tensor)
            t._h = h
            return t
        return _unary_call({kind}, self)
    return {name}
"""
_SCALAR_SRC = """def {name}(self, {pname}={default!r}):
    if type({pname}) is float:
        h = _sq({kind}, self._h, {pname})
        if h:
            t = _new(Tensor)
            t._h = h
            return t
    return _scalar_call({kind}, self, {pname})
"""


def _is_unary_method(info: OpInfo) -> bool:
    return (info.family == lib.AD_FAMILY_UNARY and info.n_inputs == 1 and not info.n_iargs
            and info.name.isidentifier())


def unary_method_kinds() -> Dict[str, int]:
    """name -> op number of the generated methods without arguments (t.exp()),
    which tensor.py also gives C forms (its _FAST_METHODS)."""
    return {info.name: info.kind for info in OPS.values() if _is_unary_method(info)}


def _method(info: OpInfo, env: dict) -> Optional[Callable]:
    if _is_unary_method(info):
        src = _UNARY_SRC.format(name=info.name, kind=info.kind)
        quick = getattr(lib, "_ad_uq_" + info.name)  # every such row has one
    elif (info.family == lib.AD_FAMILY_SCALAR and info.n_fargs == 1 and not info.n_iargs
          and (params := float_params(info))):
        # a real signature (help(), inspect, keyword calls): the parameter
        # name comes from the registry, so the function is compiled for it
        (pname, default), = params
        src = _SCALAR_SRC.format(name=info.name, kind=info.kind, pname=pname, default=default)
    else:
        return None
    if not info.name.isidentifier():
        return None
    ns: dict = {}
    # compiled as this file's code: anomaly mode's site skips the package's frames
    exec(compile(src, __file__, "exec"), env, ns)
    method = ns["_make"](quick) if "_make" in ns else ns[info.name]
    method.__qualname__ = "Tensor." + info.name
    method.__doc__ = info.doc
    return method


def tensor_methods(env: dict) -> Dict[str, Callable]:
    """The generated Tensor methods by name; `env` is tensor.py's namespace
    (the names the methods use are listed above _UNARY_SRC)."""
    methods = {}
    for info in OPS.values():
        m = _method(info, env)
        if m is not None:
            methods[info.name] = m
    return methods
