"""ad.nn.Module and the containers (Sequential, ModuleList, ModuleDict), with
PyTorch's names, registration order, dotted parameter names and state-dict
layout, so a PyTorch checkpoint of the same architecture loads unchanged:

    class Net(ad.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = ad.nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x).relu()

A Var assigned to a Module attribute is a parameter, a Module a child; both
are registered in assignment order.  Buffers (register_buffer) are tensors
saved in the state dict but not returned by parameters(); a float buffer that
a layer updates in place (BatchNorm's running statistics) is a Var.
"""
from __future__ import annotations

import collections
import operator

import numpy as np

from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, Mapping, Optional,
                    Set, Tuple, TypeVar)

from ..errors import DTypeError, InvalidArgumentError, ShapeError

if TYPE_CHECKING:  # the tensor module imports nn lazily; at run time so does this one
    from ..tensor import Tensor, Var

_M = TypeVar("_M", bound="Module")

def _tensor_types():
    from ..tensor import Tensor, Var

    return Tensor, Var


IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _addindent(s, n):
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * n + line for line in lines[1:])


def _describe(v):
    """dtype and shape of a state-dict value, for messages."""
    dt = getattr(v, "dtype", None)
    name = getattr(dt, "name", None) or str(dt)
    return f"{name} {tuple(getattr(v, 'shape', ()))}"


class Module:
    """Base class of every layer and model (PyTorch's torch.nn.Module)."""

    training: bool

    def __init__(self) -> None:
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = {}
        d["_buffers"] = {}
        d["_non_persistent_buffers"] = set()
        d["_modules"] = {}

    # ---- attribute registration ---------------------------------------------------------
    def _dicts(self, name):
        d = self.__dict__.get("_parameters")
        if d is None:
            raise AttributeError(f"cannot assign {name!r} before Module.__init__() is called "
                                 f"(call super().__init__() first in {type(self).__name__})")
        return d, self.__dict__["_buffers"], self.__dict__["_modules"]

    def __setattr__(self, name: str, value: Any) -> None:
        """self.name = value registers a Var as a parameter and a Module as a child
        (as PyTorch); assigning to a registered buffer keeps it a buffer.  Raises
        TypeError when the value cannot replace the registered parameter, child or
        buffer of that name.
        """
        Tensor, Var = _tensor_types()
        d = self.__dict__
        params = d.get("_parameters")
        if params is None:
            if isinstance(value, (Var, Module)):
                self._dicts(name)  # raises: super().__init__() was not called
            object.__setattr__(self, name, value)
            return
        buffers, modules = d["_buffers"], d["_modules"]
        if isinstance(value, Var) and name not in buffers:
            d.pop(name, None)
            modules.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            d.pop(name, None)
            params.pop(name, None)
            buffers.pop(name, None)
            d["_non_persistent_buffers"].discard(name)
            modules[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(f"{type(self).__name__}: cannot assign {type(value).__name__} "
                                f"as parameter {name!r} (an ad.Var or None is expected)")
            params[name] = None
        elif name in modules:
            if value is not None:
                raise TypeError(f"{type(self).__name__}: cannot assign {type(value).__name__} "
                                f"as child module {name!r} (a Module or None is expected)")
            modules[name] = None
        elif name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"{type(self).__name__}: cannot assign {type(value).__name__} "
                                f"as buffer {name!r} (an ad.Tensor or None is expected)")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        """The parameter, buffer or child registered as `name`.  Raises AttributeError."""
        # only called when normal lookup fails; guarded so that copy/pickle, which
        # probe attributes on an instance without __dict__ contents, see AttributeError
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            sub = d.get(key)
            if sub is not None and name in sub:
                return sub[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        """del self.name unregisters a parameter, buffer or child (or deletes an attribute)."""
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            sub = d.get(key)
            if sub is not None and name in sub:
                del sub[name]
                d["_non_persistent_buffers"].discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        """The attributes, with the registered parameters, buffers and children."""
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) |
                      set(self._modules))

    def _check_name(self, name, what):
        if not isinstance(name, str):
            raise TypeError(f"{what} name must be a str, got {type(name).__name__}")
        if not name or "." in name:
            raise KeyError(f"{what} name must be non-empty and contain no '.', got {name!r}")
        if name in self.__dict__ and not any(
                name in self.__dict__[k] for k in ("_parameters", "_buffers", "_modules")):
            raise KeyError(f"attribute {name!r} already exists")

    def register_parameter(self, name: str, param: Optional[Var]) -> None:
        """Adds a parameter (a Var, or None for an absent one, as a bias=False layer)."""
        _, Var = _tensor_types()
        self._dicts(name)
        self._check_name(name, "parameter")
        if param is not None and not isinstance(param, Var):
            raise TypeError(f"{type(self).__name__}.register_parameter({name!r}): an ad.Var or "
                            f"None is expected, got {type(param).__name__}")
        self._buffers.pop(name, None)
        self._modules.pop(name, None)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Optional[Tensor],
                        persistent: bool = True) -> None:
        """Adds a buffer: a tensor that is state (saved in state_dict when
        persistent) but not a parameter."""
        Tensor, _ = _tensor_types()
        self._dicts(name)
        self._check_name(name, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"{type(self).__name__}.register_buffer({name!r}): an ad.Tensor or "
                            f"None is expected, got {type(tensor).__name__}")
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: Optional[Module]) -> None:
        """Registers `module` (or None) as the child `name`, as `self.name = module` does.
        Raises KeyError for an empty, dotted or already-taken name.
        """
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._dicts(name)
        if not isinstance(name, str):
            raise TypeError(f"module name must be a str, got {type(name).__name__}")
        if "." in name or not name:
            raise KeyError(f"module name must be non-empty and contain no '.', got {name!r}")
        self._parameters.pop(name, None)
        self._buffers.pop(name, None)
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        """The descendant named by a dotted path ("encoder.layers.0"); "" is self.
        Raises AttributeError naming the first missing part.
        """
        mod = self
        if target == "":
            return mod
        for item in target.split("."):
            sub = mod._modules.get(item) if isinstance(mod, Module) else None
            if sub is None:
                raise AttributeError(f"{type(mod).__name__} has no submodule {item!r} "
                                     f"(looking up {target!r})")
            mod = sub
        return mod

    # ---- traversal ---------------------------------------------------------------------
    def named_modules(self, memo: Optional[Set[Module]] = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[Tuple[str, Module]]:
        """(dotted name, module) for this module and every descendant, preorder."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, prefix + ("." if prefix else "") + name,
                                       remove_duplicate)

    def modules(self) -> Iterator[Module]:
        """This module and every descendant, preorder, each once."""
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[Tuple[str, Module]]:
        """(name, module) for each direct child, in registration order."""
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator[Module]:
        """The direct children, in registration order."""
        for _, m in self.named_children():
            yield m

    def _named_members(self, get, prefix, recurse, remove_duplicate=True):
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for k, v in get(m).items():
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                if remove_duplicate:
                    seen.add(id(v))
                yield mprefix + ("." if mprefix else "") + k, v

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[Tuple[str, Var]]:
        """(dotted name, Var) pairs as PyTorch names them ("layers.0.weight");
        a Var shared by two modules appears once."""
        return self._named_members(lambda m: m._parameters, prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Var]:
        """The parameters (Vars) of this module and, with recurse, its descendants,
        in named_parameters order; a shared Var appears once.  What an optimizer takes.
        """
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[Tuple[str, Tensor]]:
        """(dotted name, tensor) for every buffer (e.g. BatchNorm's running_mean)."""
        return self._named_members(lambda m: m._buffers, prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """The buffers of this module and, with recurse, its descendants."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # ---- modes and transforms ------------------------------------------------------------
    def train(self: _M, mode: bool = True) -> _M:
        """Sets training mode (mode=True) or evaluation mode on this module and every
        descendant (Dropout and BatchNorm behave differently); returns self.
        Raises ValueError when mode is not a bool.
        """
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            m.__dict__["training"] = mode
        return self

    def eval(self: _M) -> _M:
        """Evaluation mode: train(False).  Returns self."""
        return self.train(False)

    def apply(self: _M, fn: Callable[[Module], Any]) -> _M:
        """Calls fn on every child (recursively), then on self; returns self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to_dtype(self: _M, dtype: Any) -> _M:
        """Casts every floating-point parameter and buffer to dtype (a float
        dtype); parameters become new Vars, so build optimizers afterwards.  A
        parameter or buffer held in several places (tied weights) stays one:
        each holder gets the same new Var."""
        from .. import dtypes as _dt
        from ..grad import no_grad

        Tensor, Var = _tensor_types()
        dt = _dt.as_dtype(dtype)
        if not dt.is_floating_point:
            raise DTypeError(f"{type(self).__name__}.to_dtype: only floating-point dtypes are "
                             f"allowed, got {dt.name}")
        cast: dict = {}  # id(old) -> (old, new): the old kept alive, so no id is reused
        with no_grad():
            for m in self.modules():
                for store in (m._parameters, m._buffers):
                    for k, v in list(store.items()):
                        if v is None or not v.dtype.is_floating_point or v.dtype is dt:
                            continue
                        if id(v) not in cast:
                            nv = v.detach().to_dtype(dt)
                            cast[id(v)] = (v, Var.from_tensor(nv) if isinstance(v, Var) else nv)
                        store[k] = cast[id(v)][1]
        return self

    def to(self: _M, *args: Any, **kwargs: Any) -> _M:
        """PyTorch's module.to for this CPU-only library: a dtype (positional or
        dtype=) converts as to_dtype; a device must be 'cpu'."""
        from .. import dtypes as _dt

        dtype = kwargs.pop("dtype", None)
        device = kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        if kwargs:
            raise TypeError(f"{type(self).__name__}.to: unexpected arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, str) and a.split(":")[0] == "cpu":
                device = a
                continue
            try:
                dtype = _dt.as_dtype(a)
            except (DTypeError, TypeError):
                raise InvalidArgumentError(f"{type(self).__name__}.to: {a!r} is neither a dtype "
                                           f"nor the 'cpu' device") from None
        if device is not None and str(device).split(":")[0] != "cpu":
            raise InvalidArgumentError(f"{type(self).__name__}.to: only the 'cpu' device "
                                       f"exists, got {device!r}")
        return self if dtype is None else self.to_dtype(dtype)

    def float(self: _M) -> _M:
        """to_dtype(ad.float32): parameters become new Vars.  Returns self."""
        from .. import dtypes as _dt

        return self.to_dtype(_dt.float32)

    def double(self: _M) -> _M:
        """to_dtype(ad.float64): parameters become new Vars.  Returns self."""
        from .. import dtypes as _dt

        return self.to_dtype(_dt.float64)

    # ---- state dict ----------------------------------------------------------------------
    def state_dict(self, destination: Optional[Dict[str, Any]] = None, prefix: str = "",
                   keep_vars: bool = False) -> Dict[str, Any]:
        """name -> tensor for every parameter and persistent buffer, ordered
        as PyTorch orders them (each module's parameters, then its buffers,
        then its children).  Values are untracked tensors sharing the
        parameters' memory (keep_vars=True gives the Vars themselves)."""
        _, Var = _tensor_types()
        out = collections.OrderedDict() if destination is None else destination
        for mprefix, m in self.named_modules(prefix=prefix.rstrip(".") if prefix else "",
                                             remove_duplicate=False):
            pre = mprefix + "." if mprefix else ""
            for k, v in m._parameters.items():
                if v is not None:
                    out[pre + k] = v if keep_vars else v.detach()
            for k, v in m._buffers.items():
                if v is not None and k not in m._non_persistent_buffers:
                    out[pre + k] = v if keep_vars or not isinstance(v, Var) else v.detach()
        return out

    def _state_slots(self):
        """name -> (module, kind, attr) for every entry state_dict() would have."""
        slots = collections.OrderedDict()
        for mprefix, m in self.named_modules(remove_duplicate=False):
            pre = mprefix + "." if mprefix else ""
            for k, v in m._parameters.items():
                if v is not None:
                    slots[pre + k] = (m, "_parameters", k)
            for k, v in m._buffers.items():
                if v is not None and k not in m._non_persistent_buffers:
                    slots[pre + k] = (m, "_buffers", k)
        return slots

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> Any:
        """Copies values (ad tensors, numpy arrays or anything numpy converts)
        into the parameters and buffers.  Every key, shape and dtype is checked
        before anything is written: on any mismatch nothing changes and the
        error names every offending key.  strict=False tolerates missing and
        unexpected keys (returned) but never a shape or dtype mismatch."""
        from ..grad import no_grad
        from ..tensor import Tensor, Var, from_numpy, tensor

        if not hasattr(state_dict, "items"):
            raise TypeError(f"{type(self).__name__}.load_state_dict: expected a mapping of "
                            f"name -> tensor, got {type(state_dict).__name__}")
        name = type(self).__name__
        slots = self._state_slots()
        missing = [k for k in slots if k not in state_dict]
        unexpected = [k for k in state_dict if k not in slots]
        shape_err, dtype_err, new = [], [], []
        for k, (m, kind, attr) in slots.items():
            if k not in state_dict:
                continue
            cur = getattr(m, kind)[attr]
            v = state_dict[k]
            if isinstance(v, Tensor):
                src = v
            else:
                try:
                    arr = np.asarray(v)
                except Exception as e:  # e.g. a torch tensor that requires grad
                    raise TypeError(f"{name}.load_state_dict: value for {k!r} is a "
                                    f"{type(v).__name__} that numpy cannot convert ({e})") from None
                if arr.dtype.kind not in "biuf":  # object, str, bytes, void, complex...
                    raise DTypeError(f"{name}.load_state_dict: value for {k!r} is not numeric "
                                     f"({type(v).__name__} of numpy dtype {arr.dtype})")
                src = arr
            if tuple(src.shape) != cur.shape:
                shape_err.append(f"{k}: checkpoint {_describe(src)}, model {_describe(cur)}")
                continue
            sdt = src.dtype if isinstance(src, Tensor) else None
            if sdt is None:
                from .. import dtypes as _dt

                try:
                    sdt = _dt.as_dtype(src.dtype)
                except Exception:
                    sdt = None
            if sdt is not cur.dtype:
                dtype_err.append(f"{k}: checkpoint {_describe(src)}, model {_describe(cur)}")
                continue
            new.append((m, kind, attr, cur, src))
        problems = []
        if strict and missing:
            problems.append("missing keys: " + ", ".join(map(repr, missing)))
        if strict and unexpected:
            problems.append("unexpected keys: " + ", ".join(map(repr, unexpected)))
        if shape_err:
            problems.append("shape mismatch for " + "; ".join(shape_err))
        if dtype_err:
            problems.append("dtype mismatch for " + "; ".join(dtype_err))
        if problems:
            cls = (InvalidArgumentError if strict and (missing or unexpected) else
                   ShapeError if shape_err else DTypeError)
            raise cls(f"{name}.load_state_dict: nothing was loaded: " + "; ".join(problems))
        # copies first (a value may share memory with the Var it is written into,
        # e.g. a model's own state_dict), then the writes, which cannot fail now
        with no_grad():
            staged = [(m, kind, attr, cur,
                       tensor(src.detach()) if isinstance(src, Tensor) else from_numpy(src))
                      for m, kind, attr, cur, src in new]
            for m, kind, attr, cur, src in staged:
                if isinstance(cur, Var):
                    cur.set(src)
                else:
                    getattr(m, kind)[attr] = src
        return IncompatibleKeys(missing, unexpected)

    # ---- calling and printing ---------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation of the module; subclasses define it.  Call the module
        (module(x)) rather than forward, as in PyTorch.  Raises NotImplementedError
        on the base class.
        """
        raise NotImplementedError(f"Module [{type(self).__name__}] is missing the required "
                                  f"\"forward\" function")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """module(*args) runs forward(*args) and returns its result."""
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        """The layer's own arguments, shown in its repr ("in_features=3, ..."); '' here."""
        return ""

    def _get_name(self):
        return type(self).__name__

    def __repr__(self):
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        for key, m in self._modules.items():
            lines.append("(" + key + "): " + _addindent(repr(m), 2))
        main = self._get_name() + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"


def Parameter(data: Any, requires_grad: bool = True) -> Any:
    """PyTorch's nn.Parameter spelled for pyautodiff: a Var holding data (a
    Var is returned as it is).  requires_grad=False gives a plain tensor."""
    from ..tensor import Tensor, Var, tensor

    if not requires_grad:
        return data.detach() if isinstance(data, Tensor) else tensor(data)
    return Var.from_tensor(data)


# ---- containers -----------------------------------------------------------------------------
def _index(idx, n, what):
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise IndexError(f"{what}: index {idx} is out of range for {n} modules")
    return idx + n if idx < 0 else idx


class _ModuleSeq(Module):
    """What Sequential and ModuleList share: children keyed "0".."n-1" in order, deleted by
    position or slice and renumbered afterwards (as PyTorch does)."""

    _what = "ModuleSeq"

    def _key_at(self, idx):
        return list(self._modules)[_index(idx, len(self._modules), self._what)]

    def _renumber(self, items, checked=False):
        put = self.add_module if checked else self._modules.__setitem__
        self._modules.clear()
        for i, m in enumerate(items):
            put(str(i), m)

    def __delitem__(self, idx):
        """Removes the module(s) at `idx` (an int or a slice)."""
        if isinstance(idx, slice):
            for k in list(self._modules)[idx]:
                del self._modules[k]
        else:
            del self._modules[self._key_at(idx)]
        self._renumber(list(self._modules.values()))

    def __len__(self) -> int:
        """The number of modules."""
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        """The modules in order."""
        return iter(self._modules.values())

    def append(self, module):
        """Adds `module` at the end; returns self."""
        self.add_module(str(len(self)), module)
        return self


class Sequential(_ModuleSeq):
    """Modules applied in order: Sequential(m1, m2, ...) or
    Sequential(OrderedDict(name=module, ...))."""

    _what = "Sequential"

    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], collections.OrderedDict):
            for k, m in args[0].items():
                self.add_module(k, m)
        else:
            for i, m in enumerate(args):
                if not isinstance(m, Module):
                    raise TypeError(f"Sequential: argument {i} is a {type(m).__name__}, not a "
                                    f"Module")
                self.add_module(str(i), m)

    def __getitem__(self, idx: Any) -> Any:
        """The module at position `idx` (negative counts from the end), or a new
        Sequential of a slice.  Raises IndexError out of range.
        """
        if isinstance(idx, slice):
            return Sequential(collections.OrderedDict(list(self._modules.items())[idx]))
        return self._modules[self._key_at(idx)]

    def __setitem__(self, idx, module):
        """Replaces the module at position `idx`.  Raises IndexError out of range."""
        self.add_module(self._key_at(idx), module)

    def extend(self, modules):
        """Appends every module of the iterable `modules`; returns self."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        """Inserts `module` before position `index` (negative counts from the end)."""
        if not isinstance(module, Module):
            raise TypeError(f"Sequential.insert: {type(module).__name__} is not a Module")
        n = len(self._modules)
        index = operator.index(index)
        if not -n <= index <= n:
            raise IndexError(f"Sequential.insert: index {index} is out of range for {n} modules")
        index = index + n if index < 0 else index
        items = list(self._modules.values())
        items.insert(index, module)
        self._renumber(items)
        return self

    def forward(self, input: Any) -> Any:
        """Applies each module in order to `input` and returns the last output."""
        for m in self._modules.values():
            input = m(input)
        return input


class ModuleList(_ModuleSeq):
    """A list of modules whose parameters are registered ("0.weight", ...)."""

    _what = "ModuleList"

    def __init__(self, modules: Optional[Iterable[Module]] = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _key_at(self, idx):
        # the keys of a ModuleList are its positions, so no list of them is needed
        return str(_index(idx, len(self._modules), self._what))

    def __getitem__(self, idx: Any) -> Any:
        """The module at position `idx`, or a new ModuleList of a slice.
        Raises IndexError out of range.
        """
        if isinstance(idx, slice):
            return ModuleList(list(self._modules.values())[idx])
        return self._modules[self._key_at(idx)]

    def __setitem__(self, idx, module):
        """Replaces the module at position `idx`.  Raises IndexError out of range."""
        self.add_module(self._key_at(idx), module)

    def __iadd__(self, modules):
        """self += modules: extend; returns self."""
        return self.extend(modules)

    def __add__(self, other):
        """A new ModuleList of self's modules followed by other's."""
        return ModuleList(list(self) + list(other))

    def extend(self, modules):
        """Appends every module of the iterable `modules`; returns self."""
        try:
            if isinstance(modules, (Module, str)):
                raise TypeError
            ms = list(modules)  # a 0-d numpy array has __iter__ and raises
        except TypeError:
            raise TypeError(f"ModuleList.extend should be called with an iterable of modules, "
                            f"got {type(modules).__name__}") from None
        for m in ms:
            self.append(m)
        return self

    def insert(self, index, module):
        """Inserts `module` before position `index` (negative counts from the end)."""
        items = list(self._modules.values())
        items.insert(operator.index(index), module)
        self._renumber(items, checked=True)

    def pop(self, idx=-1):
        """Removes and returns the module at `idx` (default the last)."""
        m = self[idx]
        del self[idx]
        return m

    def __repr__(self):
        if not self._modules:
            return "ModuleList()"
        return super().__repr__()


class ModuleDict(Module):
    """A dict of modules (insertion order), registered under their keys."""

    def __init__(self, modules: Any = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        """The module registered as `key`.  Raises KeyError."""
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        """Registers `module` as `key` (as add_module)."""
        self.add_module(key, module)

    def __delitem__(self, key):
        """Removes the module `key`.  Raises KeyError."""
        del self._modules[key]

    def __len__(self) -> int:
        """The number of modules."""
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        """The keys, in insertion order."""
        return iter(self._modules)

    def __contains__(self, key: object) -> bool:
        """True when a module is registered as `key`."""
        return key in self._modules

    def keys(self):
        """The keys, in insertion order."""
        return self._modules.keys()

    def values(self):
        """The modules, in insertion order."""
        return self._modules.values()

    def items(self):
        """(key, module) pairs, in insertion order."""
        return self._modules.items()

    def pop(self, key: str) -> Module:
        """Removes the module `key` and returns it.  Raises KeyError."""
        m = self._modules[key]
        del self._modules[key]
        return m

    def clear(self) -> None:
        """Removes every module."""
        self._modules.clear()

    def update(self, modules):
        """Adds the (key, module) pairs of a mapping or an iterable of pairs."""
        items = modules.items() if hasattr(modules, "items") else modules
        try:
            if isinstance(items, (str, bytes)):
                raise TypeError
            items = list(items)  # a 0-d numpy array has __iter__ and raises
        except TypeError:
            raise TypeError(f"ModuleDict.update should be called with a mapping or an iterable "
                            f"of (key, module) pairs, got {type(modules).__name__}") from None
        for j, kv in enumerate(items):
            try:
                k, m = kv
            except (TypeError, ValueError):
                raise TypeError(f"ModuleDict.update: element {j} should be a (key, module) "
                                f"pair") from None
            self[k] = m
