"""Exception classes.  Each carries the native library's message, which names
the op, the shapes and the dtypes involved."""

__all__ = [
    "Error", "ShapeError", "DTypeError", "GraphError", "OutOfRangeError", "InvalidArgumentError",
    "OutOfMemoryError", "InternalError", "OutOfBoundsError", "ArgumentTypeError",
]


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


class OutOfBoundsError(InvalidArgumentError, OverflowError):
    """A Python number out of the range of the dtype or of the native integer
    argument it must become (numpy 2 raises OverflowError in the same places:
    `uint8 tensor + 300`, `tensor([2**63])`, a shape entry >= 2**63).  It is
    an OverflowError, so code written for numpy's behaviour catches it, and an
    InvalidArgumentError (a bad argument value) like the native library's own
    range errors."""


class ArgumentTypeError(Error, TypeError):
    """An argument of the wrong Python type (a float where an int is needed, a
    list where a tensor is needed)."""
