"""The native library as seen from Python: the cffi module, the ABI check and
the translation of status codes into exceptions."""
import threading

from . import errors

try:
    from ._cffi import ffi, lib
except ImportError as e:  # pragma: no cover - only without a build
    raise ImportError(
        "pyautodiff's native extension is not built: run `python tools/build.py` "
        "(or `pip install -e .`) first (" + str(e) + ")") from e

ABI_MAJOR = 1
_abi = lib.ad_abi_version()
if _abi // 1000 != ABI_MAJOR:  # pragma: no cover
    raise ImportError(f"pyautodiff: native library ABI {_abi // 1000}.{_abi % 1000} "
                      f"does not match the Python package (major {ABI_MAJOR})")

_ERRORS = {
    lib.AD_ERR_SHAPE: errors.ShapeError,
    lib.AD_ERR_DTYPE: errors.DTypeError,
    lib.AD_ERR_INDEX: errors.OutOfRangeError,
    lib.AD_ERR_VALUE: errors.InvalidArgumentError,
    lib.AD_ERR_GRAPH: errors.GraphError,
    lib.AD_ERR_NOMEM: errors.OutOfMemoryError,
    lib.AD_ERR_INTERNAL: errors.InternalError,
}


# An exception raised by an ad.Function's backward inside a native backward
# pass (pyautodiff/function.py stores it here, on the thread that ran it).
pending = threading.local()


def raise_status(status):
    """Raises the exception for a failed native call (status != AD_OK)."""
    exc = getattr(pending, "exc", None)
    if exc is not None:
        # the custom op's own exception, its message already naming the op
        pending.exc = None
        try:
            raise exc
        finally:
            del exc
    msg = ffi.string(lib.ad_last_error()).decode("utf-8", "replace")
    raise _ERRORS.get(status, errors.InternalError)(msg)
