"""Allocation-failure sweep: makes every native allocation of a computation
fail in turn and checks each failure is a clean OutOfMemoryError that leaks
no tensor and no byte.

    sweep_alloc_failures(lambda: [(x.sin() * y).sum().backward()[x].numpy().copy()])
"""
import gc

import numpy as np

import pyautodiff as ad
from pyautodiff._lib import lib


def sweep_alloc_failures(run, min_failures=1):
    """run() returns a list of numpy arrays; after the sweep, the first run that
    no injected failure reaches must give the same arrays as an undisturbed
    run.  Returns the number of failures injected."""
    expected = run()
    gc.collect()
    base = ad.live_tensors(), ad.live_bytes()
    n = 1
    while True:
        lib.ad_testing_fail_alloc_after(n)
        try:
            got = run()
        except MemoryError as e:
            assert isinstance(e, ad.OutOfMemoryError)
            n += 1
            continue
        finally:
            lib.ad_testing_fail_alloc_after(0)
            if (ad.live_tensors(), ad.live_bytes()) != base:
                gc.collect()  # only when needed: a full collection is slow in a big test session
            assert (ad.live_tensors(), ad.live_bytes()) == base, f"leak after failing alloc {n}"
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
        break
    assert n - 1 >= min_failures, f"only {n - 1} allocations were tried"
    return n - 1
