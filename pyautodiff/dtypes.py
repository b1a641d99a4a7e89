"""dtypes: ad.float32, ad.float64, ad.int64, ad.int32, ad.uint8, ad.bool.

numpy dtypes and their names are accepted wherever a dtype is."""
import numpy as np

from .errors import DTypeError

__all__ = [
    "DType", "float32", "float64", "int64", "int32", "uint8",
    "bool_", "as_dtype",
]



class DType:
    """An element type: ad.float32, float64, int64, int32, uint8 or bool.

    Attributes: name ("float32"), code (the native ABI's enum value), numpy (the
    numpy dtype), itemsize (bytes), is_floating_point.  Compare with `is`.
    """
    __slots__ = ("name", "code", "numpy", "itemsize", "is_floating_point")

    def __init__(self, name, code, npdt):
        self.name = name
        self.code = code
        self.numpy = np.dtype(npdt)
        self.itemsize = self.numpy.itemsize
        self.is_floating_point = self.numpy.kind == "f"

    def __repr__(self):
        return "ad." + self.name

    def __eq__(self, other):
        if isinstance(other, DType):
            return self is other
        try:
            return as_dtype(other) is self
        except (DTypeError, TypeError):
            return False

    def __hash__(self):
        return hash(self.name)

    def __reduce__(self):
        return (as_dtype, (self.name,))


float32 = DType("float32", 0, np.float32)
float64 = DType("float64", 1, np.float64)
int64 = DType("int64", 2, np.int64)
int32 = DType("int32", 3, np.int32)
uint8 = DType("uint8", 4, np.uint8)
bool_ = DType("bool", 5, np.bool_)

ALL = (float32, float64, int64, int32, uint8, bool_)
BY_CODE = {d.code: d for d in ALL}
_BY_NUMPY = {d.numpy: d for d in ALL}
NUMPY_TYPES = frozenset(npdt.type for npdt in _BY_NUMPY)  # numpy scalar types with an ad dtype
_BY_NAME = {d.name: d for d in ALL}


def as_dtype(x):
    """An ad dtype from an ad dtype, a numpy dtype or type, or a name (a numpy
    dtype of the other byte order names its native twin: the arrays copy,
    swapped, as numpy converts them)."""
    if isinstance(x, DType):
        return x
    if x is float:
        return float32
    if x is int:
        return int64
    if x is bool:
        return bool_
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    try:
        npdt = np.dtype(x)
    except (TypeError, ValueError):  # ValueError: an object whose .dtype numpy refuses
        raise DTypeError(f"not a dtype: {x!r}") from None
    if npdt.byteorder not in "=|":  # the other byte order: same values once swapped
        npdt = npdt.newbyteorder("=")
    d = _BY_NUMPY.get(npdt)
    if d is None:
        raise DTypeError(f"dtype {npdt} is not supported (supported: "
                         + ", ".join(d.name for d in ALL) + ")")
    return d
