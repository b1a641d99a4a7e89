"""Exception classes.  Each carries the native library's message, which names
the op, the shapes and the dtypes involved."""


class Error(Exception):
    """Base class of every pyautodiff error."""


class ShapeError(Error, ValueError):
    """Incompatible or invalid shapes."""


class DTypeError(Error, TypeError):
    """A dtype the op does not support, or operands of different dtypes."""


class GraphError(Error, RuntimeError):
    """Graph state: backward on nothing, a value changed after it was saved, Var.set misuse."""


class OutOfRangeError(Error, IndexError):
    """A dim or an index out of range."""


class InvalidArgumentError(Error, ValueError):
    """An argument value the op cannot take."""


class OutOfMemoryError(Error, MemoryError):
    """The native allocator failed (or an element count cannot be allocated)."""


class InternalError(Error, RuntimeError):
    """A bug in pyautodiff: please report it."""
