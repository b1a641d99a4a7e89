"""detect_anomaly(): record where each op was created; make backward fail at the
first op whose backward produced a NaN or an Inf, naming that place.

The site is asked for by the native library through a callback only while the
mode is on (thread-local), so outside the mode nothing is recorded and the op
path is unchanged."""
import os
import sys
import threading

from ._lib import ffi, lib
from .grad import _ModeSwitch

__all__ = [
    "detect_anomaly", "is_anomaly_enabled",
]


_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_site_buf = threading.local()  # this thread's last site string, alive until C copies it


@ffi.def_extern()
def _ad_site_callback():
    f = sys._getframe(1)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _PKG_DIR:
        f = f.f_back
    site = f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "<unknown>"
    _site_buf.value = buf = ffi.new("char[]", site.encode("utf-8", "replace"))
    return buf


lib.ad_set_site_callback(lib._ad_site_callback)


class detect_anomaly(_ModeSwitch):
    """Context manager and decorator: anomaly mode for this thread."""

    @staticmethod
    def _set(on):
        return lib.ad_set_anomaly_enabled(on)


def is_anomaly_enabled() -> bool:
    """True inside a detect_anomaly() block (on this thread)."""
    return bool(lib.ad_is_anomaly_enabled())


def site(t):
    """Where t's op was created in anomaly mode ("" when not recorded)."""
    return ffi.string(lib.ad_tensor_site(t._h)).decode("utf-8", "replace")
