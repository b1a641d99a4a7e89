"""The op registry (native/src/ops.def) as the ABI shows it: ad_op_info for
every op kind of the header, the generic entry point's messages, and the
overflow checks of the typed-argument decoders (native/src/opargs.c)."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import pyautodiff as ad
from pyautodiff._lib import ffi, lib
from pyautodiff.tensor import _call

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "pyautodiff")

OP_KINDS = sorted((name, getattr(lib, name)) for name in dir(lib)
                  if name.startswith("AD_OP_") and name not in ("AD_OP_NONE", "AD_OP__COUNT"))


def info(op):
    out = ffi.new("ad_op_info_t *")
    assert lib.ad_op_info(op, out) == lib.AD_OK, ffi.string(lib.ad_last_error())
    return out


def s(p):
    return ffi.string(p).decode()


@pytest.mark.parametrize("name,op", OP_KINDS)
def test_every_header_op_has_a_registry_row(name, op):
    i = info(op)
    assert s(i.name) == s(lib.ad_op_name(op))
    assert s(i.doc), f"{name} has no docstring line"
    assert i.n_inputs == -1 or 1 <= i.n_inputs <= 3
    assert i.family in range(10)
    if i.family in (lib.AD_FAMILY_UNARY, lib.AD_FAMILY_SCALAR, lib.AD_FAMILY_BINARY,
                    lib.AD_FAMILY_COMPARE):
        # the float dtypes always have a kernel; comparisons take bool too
        assert i.dtypes & 0b11 == 0b11
        assert bool(i.dtypes >> lib.AD_BOOL & 1) == (i.family == lib.AD_FAMILY_COMPARE)
    else:
        assert i.dtypes == 0


def test_op_info_facts():
    exp, mm, argmax, sl = (info(o) for o in (lib.AD_OP_EXP, lib.AD_OP_MATMUL, lib.AD_OP_ARGMAX,
                                             lib.AD_OP_SLICE))
    assert (exp.family, exp.n_inputs, exp.n_iargs, exp.n_fargs) == (lib.AD_FAMILY_UNARY, 1, 0, 0)
    assert exp.differentiable and not exp.memory_bound
    assert info(lib.AD_OP_NEG).memory_bound and info(lib.AD_OP_NEG).dtypes >> lib.AD_INT64 & 1
    assert not info(lib.AD_OP_EXP).dtypes >> lib.AD_INT64 & 1
    assert mm.differentiable and not mm.memory_bound
    assert not argmax.differentiable and argmax.family == lib.AD_FAMILY_REDUCE
    assert s(sl.args) == "iargs: dim, start, step, len"
    assert s(info(lib.AD_OP_ELU).args) == "fargs: alpha=1.0"


@pytest.mark.parametrize("op", [0, -1, 39, 159, 160, 10**6])
def test_op_info_unknown_op(op):
    out = ffi.new("ad_op_info_t *")
    assert lib.ad_op_info(op, out) == lib.AD_ERR_VALUE
    assert "unknown op kind" in s(lib.ad_last_error())
    assert lib.ad_op_info(lib.AD_OP_EXP, ffi.NULL) == lib.AD_ERR_VALUE


def test_slice_layout_is_dim_start_step_len():
    x = ad.tensor(np.arange(10.0))
    y = _call(lib.AD_OP_SLICE, (x,), (0, 1, 3, 3))
    assert y.numpy().tolist() == [1.0, 4.0, 7.0]


# ---- the generic entry point's messages (issue 10, item 11) ---------------------------
def raw_call(op, inputs, iargs, n_iargs, fargs, n_fargs, n_in=None):
    out = ffi.new("ad_tensor **")
    hs = ffi.new("ad_tensor *[]", [t._h for t in inputs]) if inputs is not None else ffi.NULL
    st = lib.ad_op_call(op, hs, len(inputs or ()) if n_in is None else n_in, iargs, n_iargs,
                        fargs, n_fargs, out)
    if st == lib.AD_OK:
        lib.ad_tensor_release(out[0])
    return st, s(lib.ad_last_error())


def test_messages_name_the_real_problem():
    x = ad.tensor([1.0, 2.0])
    st, msg = raw_call(lib.AD_OP_SUM, [x], ffi.NULL, 0, ffi.NULL, 0)
    assert st == lib.AD_ERR_VALUE and "sum: missing the keepdim argument" in msg
    assert "-1" not in msg
    st, msg = raw_call(lib.AD_OP_ADD_SCALAR, [x], ffi.NULL, 0, ffi.NULL, 1)
    assert st == lib.AD_ERR_VALUE and msg == "add_scalar: the float arguments array is NULL " \
                                             "(n_fargs 1)"
    st, msg = raw_call(lib.AD_OP_SOFTMAX, [x], ffi.NULL, 1, ffi.NULL, 0)
    assert "softmax: the integer arguments array is NULL" in msg
    st, msg = raw_call(lib.AD_OP_SOFTMAX, [x], ffi.NULL, 0, ffi.NULL, 0)
    assert msg == "softmax: takes 1 integer argument (iargs: dim), got 0"
    st, msg = raw_call(lib.AD_OP_EXP, [x, x], ffi.NULL, 0, ffi.NULL, 0)
    assert msg == "exp: takes 1 tensor input, got 2"
    st, msg = raw_call(lib.AD_OP_CAT, None, ffi.NULL, 0, ffi.NULL, 0, n_in=2)
    assert st == lib.AD_ERR_VALUE and msg == "cat: the inputs array is NULL"
    st, msg = raw_call(lib.AD_OP_CAT, [x] * 9, ffi.new("int64_t[]", 10), 10, ffi.NULL, 0)
    assert msg == "cat: takes 1 to 8 tensor inputs, got 9"


def test_null_pointers_in_the_op_entry_points():
    x = ad.tensor([1.0, 2.0])
    out = ffi.new("ad_tensor **")
    assert lib.ad_unary(lib.AD_OP_EXP, ffi.NULL, out) == lib.AD_ERR_VALUE
    assert s(lib.ad_last_error()) == "exp: input 0 is NULL"
    assert lib.ad_unary(lib.AD_OP_EXP, x._h, ffi.NULL) == lib.AD_ERR_VALUE
    assert s(lib.ad_last_error()) == "exp: the out pointer is NULL"
    assert lib.ad_binary(lib.AD_OP_ADD, x._h, ffi.NULL, out) == lib.AD_ERR_VALUE
    assert s(lib.ad_last_error()) == "add: input 1 is NULL"
    assert lib.ad_scalar_op(lib.AD_OP_MUL_SCALAR, ffi.NULL, 2.0, out) == lib.AD_ERR_VALUE


# ---- size formulas that used to wrap (issue 10, item 7) ----------------------------------
def test_pool_padding_near_int64_max_is_rejected_naming_padding():
    x = ad.randn((1, 1, 4, 4), seed=0)
    for pad in (2**63 - 1, 2**62, 2**31):
        with pytest.raises(ad.InvalidArgumentError, match=r"max_pool2d: padding"):
            _call(lib.AD_OP_MAX_POOL2D, (x,), (3, 3, 1, 1, pad, 0, 1, 1))
    with pytest.raises(ad.InvalidArgumentError, match=r"max_pool2d: padding"):
        ad.nn.functional.max_pool2d(x, 3, padding=2**63 - 1)
    with pytest.raises(ad.InvalidArgumentError, match=r"max_pool2d: dilation"):
        _call(lib.AD_OP_MAX_POOL2D, (x,), (3, 3, 1, 1, 0, 0, 2**31, 1))


def test_conv_huge_dilation_or_kernel_does_not_fit():
    x = ad.randn((1, 1, 5, 5), seed=0)
    w = ad.randn((1, 1, 3, 3), seed=1)
    with pytest.raises(ad.ShapeError, match=r"conv2d: kernel height 3 with dilation 2147483647"):
        _call(lib.AD_OP_CONV2D, (x, w), (1, 1, 0, 0, 2**31 - 1, 1, 1))
    # a kernel of 2^40 rows (the weight is empty) times the largest dilation
    # wraps int64: it must still not fit
    wz = ad.zeros((0, 1, 2**40, 1))
    with pytest.raises(ad.ShapeError, match=r"conv2d: kernel height 1099511627776"):
        _call(lib.AD_OP_CONV2D, (x, wz), (1, 1, 0, 0, 2**31 - 1, 1, 1))
    with pytest.raises(ad.InvalidArgumentError, match=r"conv2d: dilation \(2147483648, 1\)"):
        _call(lib.AD_OP_CONV2D, (x, w), (1, 1, 0, 0, 2**31, 1, 1))
    with pytest.raises(ad.InvalidArgumentError, match=r"conv2d: stride \(0, 1\)"):
        _call(lib.AD_OP_CONV2D, (x, w), (0, 1, 0, 0, 1, 1, 1))
    with pytest.raises(ad.InvalidArgumentError, match=r"conv2d: groups 0"):
        _call(lib.AD_OP_CONV2D, (x, w), (1, 1, 0, 0, 1, 1, 0))


def test_conv_transpose_huge_stride_blames_the_stride():
    x = ad.zeros((0, 1, 2**40, 1))
    w = ad.randn((1, 1, 1, 1), seed=0)
    with pytest.raises(ad.InvalidArgumentError,
                       match=r"conv_transpose2d: stride 2147483647 makes the output height"):
        _call(lib.AD_OP_CONV_TRANSPOSE2D, (x, w), (2**31 - 1, 1, 0, 0, 1, 1, 1, 0, 0))
    x = ad.randn((1, 1, 2, 2), seed=1)
    with pytest.raises(ad.ShapeError, match=r"conv_transpose2d: padding 5 leaves no output"):
        _call(lib.AD_OP_CONV_TRANSPOSE2D, (x, w), (1, 1, 5, 0, 1, 1, 1, 0, 0))
    with pytest.raises(ad.InvalidArgumentError, match=r"conv_transpose2d: output padding"):
        _call(lib.AD_OP_CONV_TRANSPOSE2D, (x, w), (2, 2, 0, 0, 1, 1, 1, 2, 0))


def test_slice_overflowing_step_is_an_index_error():
    x = ad.tensor(np.arange(10.0))
    with pytest.raises(ad.OutOfRangeError, match="slice: 3 elements from 1 by step"):
        _call(lib.AD_OP_SLICE, (x,), (0, 1, 2**62, 3))


def test_c_every_op_through_the_generic_entry(tmp_path):
    """native/tests/test_ops_abi.c: each op called as the header documents
    its arguments; an op with a registry row and no test row fails it."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed")
    exe = str(tmp_path / "test_ops_abi")
    cmd = [gcc, "-std=c11", "-Wall", "-Wextra", "-Werror",
           "-I", os.path.join(ROOT, "native", "include"),
           os.path.join(ROOT, "native", "tests", "test_ops_abi.c"), "-o", exe,
           "-L", PKG, "-lpyautodiff", "-Wl,-rpath," + os.path.abspath(PKG), "-lm"]
    cc_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    c = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=cc_env)
    assert c.returncode == 0, f"compile failed: {' '.join(cmd)}\n{c.stderr}"
    r = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"test_ops_abi failed:\n{r.stdout}\n{r.stderr}"
    assert "calls ok" in r.stdout


def test_pad_too_large_names_padding_and_dim():
    x = ad.zeros((2, 3))
    with pytest.raises(ad.InvalidArgumentError, match=r"pad: padding \(0, 2305843009213693952\) "
                                                      r"of dim 1 is too large"):
        _call(lib.AD_OP_PAD, (x,), (0, 2**61), (0.0,))


def test_python_methods_come_from_the_registry():
    from pyautodiff import _ops
    unary = [i for i in _ops.OPS.values() if i.family == lib.AD_FAMILY_UNARY]
    assert len(unary) >= 23
    x = np.array([-1.5, -0.25, 0.0, 0.5, 2.0])
    for i in unary:
        m = getattr(ad.Tensor, i.name)
        assert m.__doc__ == i.doc and m.__qualname__ == "Tensor." + i.name
        # the method runs the op of its row: the same values as the generic entry
        t = ad.tensor(x)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(m(t).numpy(), _call(i.kind, (t,)).numpy())
    assert _ops.float_params(_ops.OPS["elu"]) == (("alpha", 1.0),)
    assert _ops.float_params(_ops.OPS["clamp"]) is None  # hand-written: None means no bound
    assert not hasattr(ad.Tensor, "add_scalar")  # an operator's kernel, not a method
    import inspect
    assert str(inspect.signature(ad.Tensor.elu)) == "(self, alpha=1.0)"
    t = ad.tensor(x)
    np.testing.assert_allclose(t.elu(alpha=0.5).numpy(), np.where(x > 0, x, 0.5 * np.expm1(x)))


def test_testing_hooks_need_the_opt_in(tmp_path):
    """ad_testing_fail_alloc_after and the GEMM kernel switches are declared
    only under AD_TESTING: a plain C caller of the stable ABI cannot call them
    by accident, the test suite opts in."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed")
    src = tmp_path / "hook.c"
    cc_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    for opt_in, ok in (("", False), ("#define AD_TESTING\n", True)):
        src.write_text(opt_in + '#include "pyautodiff.h"\n'
                       "int main(void) { ad_testing_fail_alloc_after(0);\n"
                       "  return ad_gemm_set_kernel(\"auto\"); }\n")
        c = subprocess.run([gcc, "-std=c11", "-Werror=implicit-function-declaration", "-c",
                            "-I", os.path.join(ROOT, "native", "include"), str(src), "-o",
                            str(tmp_path / "hook.o")], capture_output=True, text=True,
                           timeout=60, env=cc_env)
        assert (c.returncode == 0) == ok, c.stderr
    assert lib.ad_gemm_set_kernel(b"auto") == lib.AD_OK  # the bindings opted in
