"""tools/bench.py's child environment: the variables that pick numpy's and
torch's kernels (OPENBLAS_CORETYPE, NPY_DISABLE_CPU_FEATURES,
ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA) reach the
children only when PYAUTODIFF_ISA caps pyautodiff's level, and under the avx2
cap the ones not given take an AVX2 machine's values, so a plain run compares
against the peers' best kernels and an emulated AVX2 run compares kernel
against kernel.  No timings here."""
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


def test_plain_run_unsets_the_torch_pickers(bench):
    env = bench.bench_env({"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                           "ONEDNN_MAX_CPU_ISA": "AVX2", "HOME": "/h"})
    assert env == {"HOME": "/h"}


def test_portable_cap_passes_them_through(bench):
    env = bench.bench_env(dict(PICK, OPENBLAS_L2_SIZE="1", PYAUTODIFF_ISA="portable"))
    assert env == dict(PICK, PYAUTODIFF_ISA="portable")


def test_avx2_cap_fills_in_every_peer(bench):
    env = bench.bench_env({"PYAUTODIFF_ISA": "avx2", "HOME": "/h"})
    assert env == dict(bench.AVX2_PEERS, PYAUTODIFF_ISA="avx2", HOME="/h")
    assert env["OPENBLAS_CORETYPE"] == "Haswell" and env["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
    assert "AVX512_SPR" in env["NPY_DISABLE_CPU_FEATURES"].split()


def test_avx2_cap_keeps_what_the_command_line_sets(bench):
    env = bench.bench_env(dict(PICK, OPENBLAS_L2_SIZE="1", PYAUTODIFF_ISA="avx2",
                               OPENBLAS_CORETYPE="Zen"))
    assert env["OPENBLAS_CORETYPE"] == "Zen"
    assert env["NPY_DISABLE_CPU_FEATURES"] == PICK["NPY_DISABLE_CPU_FEATURES"]
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and "OPENBLAS_L2_SIZE" not in env
