"""The C ABI: the shared library exports only `ad_` symbols (the rules at the top of pyautodiff.h,
-fvisibility=hidden), the ABI major is 1, and the plain-C test program
native/tests/test_abi.c (no Python) compiles against the public header, links
the library, builds a graph with a Var, runs backward and exits 0."""
import os
import shutil
import subprocess

import pytest

import pyautodiff as ad
from pyautodiff._lib import ffi, lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "pyautodiff")
LIB = os.path.join(PKG, "libpyautodiff.so")


def exported_symbols():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run([nm, "-D", "--defined-only", LIB], capture_output=True, text=True,
                         check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            syms.append(parts[-1].split("@")[0])
    return syms


def test_only_ad_symbols_exported():
    syms = exported_symbols()
    bad = sorted(s for s in syms if not s.startswith("ad_"))
    assert not bad, f"non-ad_ symbols exported from {LIB}: {bad}"
    for required in ("ad_backward", "ad_op_call", "ad_last_error", "ad_abi_version",
                     "ad_tensor_release", "ad_var_from_tensor", "ad_var_set",
                     "ad_live_tensors", "ad_gradstore_get", "ad_binary_quick",
                     "ad_unary_quick", "ad_scalar_quick", "ad_reduce_quick",
                     "ad_tensor_release_quick"):
        assert required in syms, f"{required} is not exported"


def test_abi_version_major_1():
    v = lib.ad_abi_version()
    assert v // 1000 == 1, v
    import re

    header = open(os.path.join(ROOT, "native", "include", "pyautodiff.h")).read()
    major = int(re.search(r"#define AD_ABI_MAJOR (\d+)", header).group(1))
    minor = int(re.search(r"#define AD_ABI_MINOR (\d+)", header).group(1))
    assert (major, minor) == (v // 1000, v % 1000)


def test_last_error_is_set_by_a_failing_call():
    out = ffi.new("ad_tensor **")
    x, y = ad.ones((2, 3)), ad.ones((4, 3))  # keep both alive while their handles are used
    st = lib.ad_binary(lib.AD_OP_ADD, x._h, y._h, out)
    assert st == lib.AD_ERR_SHAPE
    msg = ffi.string(lib.ad_last_error()).decode()
    assert "add" in msg and "(2, 3)" in msg and "(4, 3)" in msg
    assert out[0] == ffi.NULL


def test_op_enum_values_are_stable():
    # append-only: these values are part of the ABI and must never change
    assert (lib.AD_OP_ADD, lib.AD_OP_SUB, lib.AD_OP_MUL, lib.AD_OP_DIV) == (1, 2, 3, 4)
    assert (lib.AD_OP_SUM, lib.AD_OP_MATMUL, lib.AD_OP_COPY) == (17, 35, 37)
    assert lib.AD_OK == 0


def test_c_program_links_and_runs(tmp_path):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: the plain-C ABI test program cannot be compiled")
    exe = str(tmp_path / "test_abi")
    cmd = [gcc, "-std=c11", "-Wall", "-Wextra", "-Werror",
           "-I", os.path.join(ROOT, "native", "include"),
           os.path.join(ROOT, "native", "tests", "test_abi.c"), "-o", exe,
           "-L", PKG, "-lpyautodiff", "-Wl,-rpath," + os.path.abspath(PKG), "-lm"]
    # the compiler must not run under a sanitizer pass's LD_PRELOAD; the
    # program itself keeps the environment (a sanitized library needs it)
    cc_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    c = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=cc_env)
    assert c.returncode == 0, f"compile failed: {' '.join(cmd)}\n{c.stderr}"
    r = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (f"test_abi exited with {r.returncode}\nstdout: {r.stdout}\n"
                               f"stderr: {r.stderr}")


def test_public_header_is_the_only_header():
    inc = os.path.join(ROOT, "native", "include")
    assert os.listdir(inc) == ["pyautodiff.h"]
    text = open(os.path.join(inc, "pyautodiff.h")).read()
    assert "/* cffi:begin */" in text and "/* cffi:end */" in text
    region = text.split("/* cffi:begin */")[1].split("/* cffi:end */")[0]
    assert "#if" not in region and "#define" not in region.replace("#define AD_", "")
    assert "struct ad_tensor {" not in text  # opaque handles only
