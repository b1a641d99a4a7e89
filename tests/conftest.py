import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import gc

import pytest

import pyautodiff as ad
from pyautodiff._lib import ffi, lib


_garbage_possible = [True]  # at the first test: whatever imports and collection left


@pytest.fixture(autouse=True)
def no_native_leaks(request):
    """Every test must leave the native live-tensor count and live-byte count
    exactly where it found them: more is a leak, less is a double free (or a
    release of a tensor the test did not own).

    The garbage collector could free tensors of an earlier test during this
    one and fake a drop, so the baseline is taken after gc.collect() whenever
    garbage may be pending: at the first test and after a test that did not
    pass or was skipped while running (its traceback held tensors, and
    pytest keeps the last failure's in sys.last_traceback).  A passing test leaves none: its own
    garbage is collected below before the counts are compared.  gc.collect()
    runs only in those cases and when the counts moved (it is slow; reference
    counting frees everything that is not in a cycle)."""
    if _garbage_possible[0]:
        # pytest keeps the last failure's traceback in sys.last_* and drops it
        # when the next test's call starts: drop it before the baseline instead
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            sys.__dict__.pop(name, None)
        gc.collect()
        _garbage_possible[0] = False
    tensors0, bytes0 = ad.live_tensors(), ad.live_bytes()
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is None or not rep.passed:
        # a failure's or a skip's traceback keeps tensors alive: don't report
        # twice, and collect before the next baseline (a test skipped by a mark
        # never ran: nothing to collect)
        setup = getattr(request.node, "rep_setup", None)
        if rep is not None or setup is None or not setup.skipped:
            _garbage_possible[0] = True
        return
    tensors1, bytes1 = ad.live_tensors(), ad.live_bytes()
    if (tensors1, bytes1) != (tensors0, bytes0):
        gc.collect()
        tensors1, bytes1 = ad.live_tensors(), ad.live_bytes()
    if tensors1 > tensors0 or bytes1 > bytes0:
        pytest.fail(f"native leak in {request.node.nodeid}: live tensors {tensors0} -> "
                    f"{tensors1}, live bytes {bytes0} -> {bytes1} (after gc.collect())",
                    pytrace=False)
    if tensors1 < tensors0 or bytes1 < bytes0:
        pytest.fail(f"native live counts dropped in {request.node.nodeid}: live tensors "
                    f"{tensors0} -> {tensors1}, live bytes {bytes0} -> {bytes1}: a double "
                    f"free, or a release of a tensor the test did not create", pytrace=False)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """Runs the test at 1 and at 2 native threads, restoring the count after."""
    old = ad.get_num_threads()
    ad.set_num_threads(request.param)
    yield request.param
    ad.set_num_threads(old)


@pytest.fixture(params=["avx512", "avx2", "portable"])
def kernel(request):
    """Runs the test with each GEMM kernel level the CPU has (skipping the
    others), putting the automatic choice back after."""
    if lib.ad_gemm_set_kernel(request.param.encode()) != lib.AD_OK:
        pytest.skip(f"this CPU has no {request.param} kernel")
    assert ffi.string(lib.ad_gemm_kernel()).decode() == request.param
    yield request.param
    assert lib.ad_gemm_set_kernel(b"auto") == lib.AD_OK
