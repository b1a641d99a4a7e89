"""Prints a one-page Markdown index of pyautodiff's public surface: every
name in every public module's __all__ and the public methods and properties
of the exported classes, each with its signature and the first line of its
docstring.  It is generated from the docstrings themselves (standard library
only: no doc toolchain), so it is never out of date:

    python tools/apiref.py > API.md      # or just read it in the terminal

`python -m pydoc pyautodiff` (or help(ad.nn.Linear)) gives the full text."""
import importlib
import inspect
import os
import re
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# In reading order: the package, then its subpackages and modules.
MODULES = [
    "pyautodiff", "pyautodiff.nn", "pyautodiff.nn.functional", "pyautodiff.nn.init",
    "pyautodiff.nn.utils", "pyautodiff.optim", "pyautodiff.optim.lr_scheduler",
    "pyautodiff.io", "pyautodiff.interop", "pyautodiff.distributed", "pyautodiff.dtypes",
    "pyautodiff.errors",
]
# Dunders worth listing: the protocols a user calls (t[i], np.asarray(t), ...).
DUNDERS = {"__getitem__", "__setitem__", "__array__", "__dlpack__", "__dlpack_device__",
           "__len__", "__iter__", "__call__", "__matmul__", "__pow__", "__iadd__",
           "__isub__", "__imul__", "__itruediv__", "__contains__", "__enter__", "__exit__"}


def first_line(obj):
    """The docstring's first sentence (its first paragraph when that is short)."""
    doc = inspect.getdoc(obj) or ""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    if len(para) > 100:
        m = re.match(r"(.+?[.;])\s+(?=[A-Z`(])", para)
        if m:
            para = m.group(1)
    if len(para) > 160:
        para = para[:para.rfind(" ", 0, 157)] + " ..."
    return para.replace("|", "\\|")


def signature(obj, drop_self=False):
    """(a, b=1, *, c=None): names and defaults; annotations are in pydoc."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""
    parts, star = [], False
    params = list(sig.parameters.values())
    if drop_self and params and params[0].name in ("self", "cls"):
        params = params[1:]
    for p in params:
        if p.name.startswith("_"):
            continue
        if p.kind is p.VAR_POSITIONAL:
            parts.append("*" + p.name)
            star = True
            continue
        if p.kind is p.VAR_KEYWORD:
            parts.append("**" + p.name)
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        s = p.name
        if p.default is not p.empty:
            s += "=" + repr(p.default)
        parts.append(s)
    return "(" + ", ".join(parts) + ")"


def short_module(name):
    return name.replace("pyautodiff", "ad", 1)


# Hooks a subclass overrides (documented once, on the base class).
HOOKS = {"extra_repr", "get_lr", "reset_parameters"}


def class_rows(prefix, cls, listed):
    """The members `cls` adds to what its already-listed bases document."""
    rows = []
    seen = set()
    for base in cls.__mro__:
        if not base.__module__.startswith("pyautodiff") or (base is not cls and base in listed):
            continue
        for name, attr in vars(base).items():
            if name in HOOKS and any(name in vars(b) for b in cls.__mro__[1:]):
                continue
            if name in seen or (name.startswith("_") and name not in DUNDERS):
                continue
            seen.add(name)
            raw = attr
            if isinstance(raw, (staticmethod, classmethod)):
                raw = raw.__func__
            raw = inspect.unwrap(raw)  # a C form of a method (tensor.py's _FAST_METHODS)
            if isinstance(raw, property):
                rows.append((prefix + "." + name, "", "property: " + first_line(raw)))
            elif inspect.isfunction(raw):
                drop = not isinstance(attr, staticmethod)
                rows.append((prefix + "." + name, signature(raw, drop_self=drop),
                             first_line(getattr(cls, name, raw))))
    return sorted(rows, key=lambda r: r[0].lower())


def module_rows(mod, listed):
    rows = []
    for name in mod.__all__:
        obj = getattr(mod, name)
        if not isinstance(obj, (bool, int, float, str)) and id(obj) in listed:
            continue  # listed under an earlier module (ad.save is ad.io.save)
        if isinstance(obj, types.ModuleType):
            rows.append((name, "", "module: " + first_line(obj)))
            continue
        listed[id(obj)] = obj
        if isinstance(obj, types.ModuleType):
            rows.append((name, "", "module: " + first_line(obj)))
        elif inspect.isclass(obj):
            if issubclass(obj, BaseException):
                rows.append((name, "", first_line(obj)))
                continue
            rows.append((name, signature(obj), first_line(obj)))
            rows.extend(class_rows(name, obj, set(listed.values())))
        elif callable(obj):
            rows.append((name, signature(obj), first_line(obj)))
        else:
            rows.append((name, "", "%s `%r`" % (type(obj).__name__, obj)))
    return rows


def main(out=sys.stdout):
    import pyautodiff

    out.write("# pyautodiff %s API index\n\n" % pyautodiff.__version__)
    out.write("Generated by `python tools/apiref.py` from the docstrings; "
              "`python -m pydoc <name>` has the full text.\n")
    listed = {}  # id -> object, so that each object is listed once
    for modname in MODULES:
        mod = importlib.import_module(modname)
        rows = module_rows(mod, listed)
        out.write("\n## %s\n\n%s\n\n" % (short_module(modname), first_line(mod)))
        if not rows:
            out.write("(everything here is listed above)\n")
            continue
        out.write("| name | signature | summary |\n|---|---|---|\n")
        for name, sig, doc in rows:
            out.write("| `%s` | `%s` | %s |\n" % (name, sig or "", doc) if sig else
                      "| `%s` | | %s |\n" % (name, doc))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        # `apiref.py | head`: the reader closed the pipe, having read enough;
        # stdout is pointed at devnull so that the exit flush cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
