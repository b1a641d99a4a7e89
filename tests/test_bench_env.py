"""tools/bench.py's child environment: the variables that pick numpy's
kernels (OpenBLAS's OPENBLAS_CORETYPE, numpy's NPY_DISABLE_CPU_FEATURES) reach
the children only when PYAUTODIFF_ISA caps pyautodiff's level, so a plain run
compares against numpy's best kernels and an emulated AVX2 run compares
kernel against kernel.  No timings here."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("_bench", os.path.join(ROOT, "tools", "bench.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


PICK = {"OPENBLAS_CORETYPE": "Haswell", "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL"}


def test_plain_run_unsets_the_kernel_pickers(bench):
    env = bench.bench_env(dict(PICK, OPENBLAS_L2_SIZE="1", HOME="/h"))
    assert env == {"HOME": "/h"}


@pytest.mark.parametrize("cap", ["avx2", "portable"])
def test_capped_run_passes_them_through(bench, cap):
    env = bench.bench_env(dict(PICK, OPENBLAS_L2_SIZE="1", PYAUTODIFF_ISA=cap))
    assert env == dict(PICK, PYAUTODIFF_ISA=cap)
