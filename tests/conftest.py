import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import gc

import pytest

import pyautodiff as ad


@pytest.fixture(autouse=True)
def no_native_leaks(request):
    """Every test must leave the native live-tensor count and live-byte count
    where it found them.  gc.collect() runs only when the counts went up (it
    is slow; reference counting frees everything that is not in a cycle)."""
    tensors0, bytes0 = ad.live_tensors(), ad.live_bytes()
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        return  # the failure's traceback keeps tensors alive; don't report twice
    tensors1, bytes1 = ad.live_tensors(), ad.live_bytes()
    if tensors1 > tensors0 or bytes1 > bytes0:
        gc.collect()
        tensors1, bytes1 = ad.live_tensors(), ad.live_bytes()
    if tensors1 > tensors0 or bytes1 > bytes0:  # (a drop is an earlier test's garbage)
        pytest.fail(f"native leak in {request.node.nodeid}: live tensors {tensors0} -> "
                    f"{tensors1}, live bytes {bytes0} -> {bytes1} (after gc.collect())",
                    pytrace=False)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
