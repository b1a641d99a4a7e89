"""Runs the op-sequence fuzzer (tests/fuzz_ops.py) in a subprocess, so that a
crash in the native core fails this test instead of killing pytest, plus
regression tests for what the fuzzers found.

PYAUTODIFF_FUZZ_CALLS=N raises the number of calls (default 20,000)."""
import os
import re
import subprocess
import sys

import pytest

import pyautodiff as ad

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 85  # seconds; the default run takes a few seconds


def test_fuzz_ops_subprocess(capsys):
    want = int(os.environ.get("PYAUTODIFF_FUZZ_CALLS", "20000"))
    env = dict(os.environ, PYAUTODIFF_FUZZ_CALLS=str(want), PYTHONFAULTHANDLER="1")
    timeout = max(TIMEOUT, want / 20000 * 60)
    try:
        p = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_ops.py")], env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) \
            else (e.stdout or "")
        pytest.fail(f"fuzz_ops.py timed out after {timeout:.0f} s\n{out[-4000:]}")
    out = p.stdout + p.stderr
    m = re.search(r"^fuzz: (\d+) calls, (\d+) raised, (\d+) unexpected$", p.stdout, re.M)
    summary = m.group(0) if m else "fuzz: no summary line"
    with capsys.disabled():  # visible even with -q
        print("\n" + summary)
    print(summary)  # and in the captured output of a failure
    assert p.returncode == 0, (f"fuzz_ops.py exited with {p.returncode} (negative: killed by "
                               f"signal {-p.returncode})\n{out[-6000:]}")
    assert m, f"no summary line in the fuzzer's output\n{out[-4000:]}"
    assert int(m.group(1)) >= want, summary
    assert int(m.group(3)) == 0, summary


def test_fuzz_args_subprocess(capsys):
    """tests/fuzz_args.py: every public function, method, module, optimizer
    and scheduler with one hostile argument at a time, each case in a child
    process.  PYAUTODIFF_FUZZ_ARGS_SAMPLE=N runs every N-th case (default
    10 here, about 30 s; 1 runs all ~78,000, about 4 minutes)."""
    sample = os.environ.get("PYAUTODIFF_FUZZ_ARGS_SAMPLE", "10")
    env = dict(os.environ, PYAUTODIFF_FUZZ_ARGS_SAMPLE=sample)
    timeout = max(TIMEOUT * 2, 600 / int(sample))
    try:
        p = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_args.py")], env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) \
            else (e.stdout or "")
        pytest.fail(f"fuzz_args.py timed out after {timeout:.0f} s\n{out[-4000:]}")
    out = p.stdout + p.stderr
    m = re.search(r"^fuzz_args: (\d+) cases, .*$", p.stdout, re.M)
    summary = m.group(0) if m else "fuzz_args: no summary line"
    with capsys.disabled():
        print("\n" + summary)
    assert m, f"no summary line in fuzz_args.py's output\n{out[-4000:]}"
    assert p.returncode == 0, f"fuzz_args.py found problems:\n{out[-8000:]}"


# ---- regressions found by the fuzzers ----------------------------------------------------
@pytest.mark.parametrize("value, dtype", [
    (300, ad.uint8), (-1, ad.uint8), (256.0, ad.uint8), (float("nan"), ad.int64),
    (float("inf"), ad.int32), (-float("inf"), ad.int64), (2.0 ** 31, ad.int32),
    (1e308, ad.uint8), (2.0 ** 63, ad.int64)])
def test_full_rejects_values_the_integer_dtype_cannot_hold(value, dtype):
    # fuzz_abi: ad_tensor_full(1e308, AD_UINT8) converted an out-of-range
    # double to an integer (undefined behaviour, UBSan abort); now an error
    with pytest.raises(ad.InvalidArgumentError, match="cannot be represented"):
        ad.full((2,), value, dtype)


def test_full_and_arange_integer_edges_still_work():
    assert ad.full((2,), 255, ad.uint8).tolist() == [255, 255]
    assert ad.full((1,), -0.5, ad.uint8).tolist() == [0]  # truncation toward zero fits
    assert ad.full((1,), -2.0 ** 63, ad.int64).tolist() == [-2 ** 63]
    assert ad.full((1,), float("nan"), ad.float32).numpy()[0] != 0  # floats keep NaN
    assert ad.full((1,), float("nan"), ad.bool).tolist() == [True]
    assert ad.arange(250, 256, dtype=ad.uint8).tolist() == list(range(250, 256))
    with pytest.raises(ad.InvalidArgumentError):
        ad.arange(250, 257, dtype=ad.uint8)
    with pytest.raises(ad.InvalidArgumentError):
        ad.arange(2 ** 40, 2 ** 40 + 2, dtype=ad.int32)
    assert ad.arange(0, 0, dtype=ad.uint8).shape == (0,)


def test_integer_compare_with_out_of_range_scalar_is_an_error_not_garbage():
    t = ad.tensor([1, 255], dtype=ad.uint8)
    with pytest.raises(ad.InvalidArgumentError):
        t == 300
    assert (t == 255).tolist() == [False, True]


def test_empty_shape_whose_strides_overflow_is_an_error():
    # fuzz_abi: ad_tensor_from_data with shape (5, 5, 2**61, 0): the 0 made the
    # element count 0, so the overflow check was skipped and computing the
    # contiguous strides overflowed int64 (undefined behaviour, UBSan abort)
    for shape in [(5, 5, 2 ** 61, 0), (0, 2 ** 62, 2 ** 62), (2 ** 62, 2 ** 62, 0)]:
        with pytest.raises(ad.InvalidArgumentError):
            ad.zeros(shape)
    assert ad.zeros((0, 2 ** 20, 3)).shape == (0, 2 ** 20, 3)
    assert ad.zeros((0, 2 ** 20, 3)).strides == (3 * 2 ** 20, 3, 1)


def test_broadcast_to_a_shape_whose_element_count_overflows_is_an_error():
    # fuzz_abi: broadcast_to (2401, 2**62) made a view whose element count
    # overflowed int64 (undefined behaviour in ad_tensor_view, UBSan abort)
    x = ad.ones((1,))
    for shape in [(2401, 2 ** 62), (2 ** 40, 2 ** 40), (2 ** 62, 2 ** 62, 0)]:
        with pytest.raises(ad.InvalidArgumentError):
            x.broadcast_to(shape)
    assert x.broadcast_to((0, 2 ** 40)).shape == (0, 2 ** 40)
    assert x.broadcast_to((2 ** 40,)).numel() == 2 ** 40  # a view: nothing allocated


def test_slice_of_one_element_with_a_huge_step():
    # fuzz_ops under ASan/UBSan: t[0:1:2**62] kept step 2**62 for a length-1
    # slice and multiplied it into the stride (signed overflow in fwd_slice)
    v = ad.Var(ad.arange(4.0))
    y = v[0:1:2 ** 62]
    assert y.tolist() == [0.0]
    assert v[3:2:-2 ** 62].tolist() == [3.0]
    assert v[1:1:2 ** 62].shape == (0,)
    g = (y * 3).sum().backward()
    assert g[v].tolist() == [3.0, 0.0, 0.0, 0.0]


def test_pad_value_the_integer_dtype_cannot_hold_is_an_error():
    # fuzz_abi: pad of a uint8 tensor with value -1e308 converted it to
    # uint8 (undefined behaviour in fwd_pad, UBSan abort)
    x = ad.tensor([1, 2], dtype=ad.uint8)
    for v in (-1e308, 256, -1, float("nan"), float("inf")):
        with pytest.raises(ad.InvalidArgumentError, match="cannot be represented"):
            ad.nn.pad(x, (1, 1), value=v)
    assert ad.nn.pad(x, (1, 1), value=7).tolist() == [7, 1, 2, 7]
    assert ad.nn.pad(ad.tensor([1.0]), (1, 0), value=float("nan")).numpy()[0] != 0


def test_reshape_empty_into_sizes_whose_strides_overflow_is_an_error():
    # fuzz_abi: reshape of an empty tensor into (0, 10, 2**60) passed the
    # element-count check (0 == 0) and overflowed computing the view's strides
    x = ad.zeros((0, 3))
    for shape in [(0, 10, 2 ** 60), (2 ** 62, 2 ** 62, 0), (0, 2 ** 63 - 1, 2)]:
        with pytest.raises((ad.InvalidArgumentError, ad.ShapeError)):
            x.reshape(shape)
    assert x.reshape((3, 0, 2 ** 20)).shape == (3, 0, 2 ** 20)


@pytest.mark.parametrize("a_shape, b_shape", [((2, 3), (3,)), ((3,), (3, 2)), ((3,), (3,)),
                                              ((2, 2, 3), (3,))])
def test_matmul_of_a_vector_create_graph_backward_survives_alloc_failures(a_shape, b_shape):
    # fuzz_abi: ad_backward_ex with create_graph over a @ b with a 1-d operand,
    # an allocation failing in the reshape that gives the vector its matrix
    # dim: the backward formula transposed the NULL it got back (a segfault)
    import numpy as np
    from faults import sweep_alloc_failures

    rng = np.random.default_rng(0)
    a = ad.Var(rng.standard_normal(a_shape))
    b = ad.Var(rng.standard_normal(b_shape))

    def run():
        g = (a @ b).sum().backward(create_graph=True)
        return [g[a].numpy().copy(), g[b].numpy().copy()]

    sweep_alloc_failures(run, min_failures=4)
