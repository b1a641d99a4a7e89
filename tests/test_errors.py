"""Error paths: each wrong shape, dtype, dim, index and state raises the
documented exception type, with the op name and the shapes (and dtypes) in
the message.  The autouse fixture in conftest.py checks that nothing leaked
(native live-tensor and live-byte counters) after every one of them."""
import numpy as np
import pytest

import pyautodiff as ad


def ones23():
    # (not a pytest fixture: fixture values outlive the leak check's teardown)
    return ad.ones((2, 3))


# ---- shapes ----------------------------------------------------------------------------------
def test_broadcast_mismatch_add():
    a = ones23()
    with pytest.raises(ad.ShapeError, match=r"add: shapes \(2, 3\) and \(4, 3\) cannot be "
                                            r"broadcast"):
        a + ad.ones((4, 3))
    for op in ("sub", "mul", "div", "lt", "eq"):
        with pytest.raises(ad.ShapeError, match=rf"{op}: .*\(2, 3\).*\(2,\)"):
            getattr(a, op)(ad.ones(2))
    assert issubclass(ad.ShapeError, ValueError) and issubclass(ad.ShapeError, ad.Error)


def test_broadcast_mismatch_from_var_records_nothing():
    w = ad.Var.ones((2, 3))
    with pytest.raises(ad.ShapeError, match="mul"):
        w * ad.ones((3, 2))


def test_matmul_inner_dim_mismatch():
    a = ones23()
    with pytest.raises(ad.ShapeError, match=r"matmul: inner dims differ.*\(2, 3\).*\(2, 3\)"):
        a @ ad.ones((2, 3))
    with pytest.raises(ad.ShapeError, match=r"matmul.*\(2, 2, 3\).*\(2, 4, 2\)"):
        ad.ones((2, 2, 3)) @ ad.ones((2, 4, 2))
    with pytest.raises(ad.ShapeError, match=r"matmul.*\(2, 2, 3\).*\(3, 3, 2\)"):
        ad.ones((2, 2, 3)) @ ad.ones((3, 3, 2))  # batch dims 2 vs 3
    with pytest.raises(ad.ShapeError, match=r"matmul.*\(\).*\(2, 3\)"):
        ad.tensor(1.0) @ a
    with pytest.raises(ad.ShapeError, match="matmul"):
        ad.ones(3) @ ad.ones(4)


def test_reshape_wrong_numel():
    a = ones23()
    with pytest.raises(ad.ShapeError, match=r"reshape: cannot reshape float32 \(2, 3\).*\(4, 2\)"):
        a.reshape(4, 2)
    with pytest.raises(ad.ShapeError, match=r"reshape.*\(-1, 4\)"):
        a.reshape(-1, 4)
    with pytest.raises(ad.ShapeError, match=r"reshape: only one dim can be -1"):
        a.reshape(-1, -1)
    with pytest.raises(ad.ShapeError, match="reshape"):
        a.reshape(7)


def test_broadcast_to_bad_shape():
    a = ones23()
    with pytest.raises(ad.ShapeError, match=r"broadcast_to: cannot broadcast float32 \(2, 3\) "
                                            r"to \(3, 3\)"):
        a.broadcast_to((3, 3))
    with pytest.raises(ad.ShapeError, match=r"broadcast_to.*\(3,\)"):
        a.broadcast_to((3,))


def test_t_needs_two_dims():
    with pytest.raises(ad.ShapeError, match=r"t: needs at least 2 dims, got shape \(3,\)"):
        ad.ones(3).t()


def test_negative_size():
    a = ones23()
    with pytest.raises(ad.ShapeError, match=r"negative size -1 in shape \(-1, 3\)"):
        ad.zeros((-1, 3))


def test_str_or_bytes_shape_is_refused():
    # fuzz_args: a str or bytes is a sequence, so it passed as a shape:
    # Var.rand("") was a 0-d Var, zeros(b"\x02\x03") a (2, 3) tensor,
    # pad(x, b"\x01\x01") padded by one on each side
    t = ad.ones(1)
    F = ad.nn.functional
    for f in (lambda: ad.Var.rand(""), lambda: ad.zeros(b"\x02\x03"), lambda: t.reshape(""),
              lambda: ad.full("", 1.0), lambda: t.permute(""), lambda: t.broadcast_to(b"\x01"),
              lambda: t.expand(""), lambda: t.repeat(b"\x02"), lambda: ad.nn.LayerNorm(b"\x01"),
              lambda: F.layer_norm(t, b"\x01"), lambda: F.pad(t, b"\x01\x01")):
        with pytest.raises(ad.Error, match="must be .*(sequence|tuple) of ints"):
            f()
    with pytest.raises(ad.ArgumentTypeError, match=r"repeat: sizes .* got None"):
        t.repeat(None)  # was a bare TypeError from operator.index
    with pytest.raises(ad.ArgumentTypeError, match=r"expand: sizes .* got \(2, None\)"):
        t.expand(2, None)
    assert t.expand(3).shape == (3,) and t.repeat((2,)).shape == (2,)
    # a set or a dict has no order: split({2, 4}) split by its iteration order
    u = ad.ones(6)
    for f in (lambda: u.split({2, 4}), lambda: ad.zeros({2, 3}), lambda: u.reshape({6: 1}),
              lambda: ad.Var.zeros(frozenset({1}))):
        with pytest.raises(ad.ArgumentTypeError, match="must be an int or a sequence of ints"):
            f()
    assert [p.shape for p in u.split([2, 4])] == [(2,), (4,)]


# ---- dtypes ----------------------------------------------------------------------------------
def test_matmul_int_dtype():
    i = ad.ones((2, 2), dtype=ad.int64)
    with pytest.raises(ad.DTypeError, match=r"matmul: .*float.*int64 \(2, 2\)"):
        i @ i
    assert issubclass(ad.DTypeError, TypeError)


def test_mixed_float32_float64():
    a = ones23()
    # documented rule: binary ops need equal dtypes (no promotion)
    b = ad.ones((2, 3), dtype=ad.float64)
    with pytest.raises(ad.DTypeError, match=r"add: dtype mismatch, float32 \(2, 3\) and "
                                            r"float64 \(2, 3\)"):
        a + b
    for op in ("sub", "mul", "div", "lt"):
        with pytest.raises(ad.DTypeError, match=rf"{op}: dtype mismatch.*float32.*float64"):
            getattr(a, op)(b)
    with pytest.raises(ad.DTypeError, match="matmul"):
        a @ ad.ones((3, 2), dtype=ad.float64)


def test_exp_of_int64():
    t = ad.tensor([1, 2, 3])
    for op in ("exp", "log", "sqrt", "tanh"):
        with pytest.raises(ad.DTypeError, match=rf"{op}: not supported for int64 "
                                                r"\(input int64 \(3,\)\)"):
            getattr(t, op)()


def test_div_of_ints():
    t = ad.tensor([1, 2, 3])
    with pytest.raises(ad.DTypeError, match=r"div: not supported for int64 operands "
                                            r"\(int64 \(3,\), int64 \(3,\)\)"):
        t / t
    with pytest.raises(ad.DTypeError, match=r"div_scalar: not supported for int64"):
        t / 2
    with pytest.raises(ad.DTypeError, match=r"rdiv_scalar: not supported for int64"):
        2 / t


def test_scalar_never_changes_dtype():
    t = ad.tensor([1, 2, 3])
    with pytest.raises(ad.DTypeError, match=r"mul_scalar: scalar 0.5 is not an integer and "
                                            r"the tensor is int64 \(3,\)"):
        t * 0.5
    with pytest.raises(ad.DTypeError, match="pow_scalar"):
        t ** 2


def test_bool_arithmetic_and_int_mean():
    b = ad.tensor([True, False])
    with pytest.raises(ad.DTypeError, match=r"add: not supported for bool"):
        b + b
    with pytest.raises(ad.DTypeError, match=r"neg: not supported for bool"):
        -b
    with pytest.raises(ad.DTypeError, match=r"mean: needs a float tensor, got int64 \(3,\)"):
        ad.tensor([1, 2, 3]).mean()
    with pytest.raises(ad.DTypeError, match=r"max: not supported for bool"):
        b.max(0)


def test_bad_dtype_names():
    for bad, pat in [("floaty", "not a dtype: 'floaty'"), ("complex64", "complex64 is not "
                                                                        "supported"),
                     (np.float16, "float16 is not supported"), (object, "not supported")]:
        with pytest.raises(ad.DTypeError, match=pat):
            ad.zeros(3, dtype=bad)
    with pytest.raises(ad.DTypeError, match="float16"):
        ad.ones(2).to_dtype("float16")
    with pytest.raises(ad.DTypeError):
        ad.tensor(np.zeros(2, dtype=np.complex128))


def test_integer_var():
    with pytest.raises(ad.DTypeError, match=r"Var: a variable must have a float dtype.*int64 "
                                            r"\(2,\)"):
        ad.Var([1, 2])


# ---- dims ---------------------------------------------------------------------------------------
def test_reduction_dim_out_of_range():
    a = ones23()
    for op in ("sum", "mean", "max", "min", "argmax", "argmin"):
        with pytest.raises(IndexError, match=rf"{op}: dim 2 out of range for float32 \(2, 3\)"):
            getattr(a, op)(2)
        with pytest.raises(IndexError, match=rf"{op}: dim -3 out of range"):
            getattr(a, op)(-3)
    with pytest.raises(ad.OutOfRangeError):
        a.sum((0, 5))


def test_reduction_dim_of_a_wrong_type_names_the_op():
    """A dim that is not an int (or a tuple of ints) is an ArgumentTypeError
    naming the op, as a bad shape is (it was operator.index's bare TypeError,
    "'float' object is not iterable" for sum(1.5)); var and std check their
    dims themselves, so that a bad one is their error, not mean's."""
    a = ones23()
    for op in ("sum", "mean", "prod", "max", "min", "argmax", "argmin", "logsumexp", "var",
               "std", "softmax", "log_softmax", "cumsum"):
        for bad in (1.5, "a", None, (0, 1.0)):
            if bad is None and op not in ("softmax", "log_softmax", "cumsum"):
                continue  # None: every dim
            with pytest.raises(ad.ArgumentTypeError, match=rf"^{op}: dim must be an int"):
                getattr(a, op)(bad)
    for op in ("var", "std"):
        with pytest.raises(IndexError, match=rf"^{op}: dim 2 out of range"):
            getattr(a, op)(2)
        with pytest.raises(ValueError, match=rf"^{op}: dim -2 given twice"):
            getattr(a, op)((0, -2))
    np.testing.assert_allclose(a.var((0, 1), correction=0).numpy(), 0.0)


def test_duplicate_dims():
    a = ones23()
    with pytest.raises(ValueError, match=r"sum: dim 0 given twice"):
        a.sum((0, 0))
    with pytest.raises(ValueError, match=r"mean: dim -1 given twice"):
        a.mean((1, -1))


def test_permute_bad_dims():
    a = ones23()
    with pytest.raises(ValueError, match=r"permute: dim 0 repeated in \(0, 0\)"):
        a.permute(0, 0)
    with pytest.raises(ad.ShapeError, match=r"permute: 1 dims given for float32 \(2, 3\)"):
        a.permute(0)
    with pytest.raises(IndexError, match=r"permute: dim 2 out of range for float32 \(2, 3\)"):
        a.permute(0, 2)
    with pytest.raises(IndexError, match=r"transpose: dim 2 out of range for 2 dims"):
        a.transpose(0, 2)


def test_squeeze_unsqueeze_bad_dims():
    a = ones23()
    with pytest.raises(IndexError, match="squeeze: dim 4 out of range"):
        a.squeeze(4)
    with pytest.raises(IndexError, match="unsqueeze: dim 4 out of range for 3 dims"):
        a.unsqueeze(4)
    with pytest.raises(IndexError, match="flatten"):
        a.flatten(3)


def test_reduce_empty():
    a = ones23()
    e = ad.zeros((0, 3))
    with pytest.raises(ValueError, match=r"max: reduction over a zero-size dim of float32 "
                                         r"\(0, 3\)"):
        e.max(0)
    with pytest.raises(ValueError, match=r"argmax.*\(0, 3\)"):
        e.argmax(0)


# ---- indices -----------------------------------------------------------------------------------
def test_narrow_out_of_range():
    a = ones23()
    with pytest.raises(IndexError, match=r"narrow: start 2, length 5 out of range for dim 1 "
                                         r"\(size 3\) of float32 \(2, 3\)"):
        a.narrow(1, 2, 5)
    with pytest.raises(IndexError, match=r"narrow: start 0, length -1 out of range"):
        a.narrow(1, 0, -1)
    with pytest.raises(IndexError, match=r"narrow: dim 3 out of range"):
        a.narrow(3, 0, 1)
    with pytest.raises(IndexError, match=r"narrow: start 3, length 1 out of range"):
        a.narrow(0, 3, 1)
    # torch's range for start is [-size, size]: an empty view may start at the
    # end, not past it (a start of 5 with length 0 used to give an empty view)
    for start in (4, 5, -4):
        with pytest.raises(IndexError, match=rf"narrow: start {start}, length 0 out of range"):
            a.narrow(1, start, 0)
    assert a.narrow(1, 3, 0).shape == (2, 0)
    assert a.narrow(1, -3, 3).shape == (2, 3)
    with pytest.raises(IndexError, match=r"narrow: start -1, length 2 out of range"):
        a.narrow(1, -1, 2)
    with pytest.raises(TypeError, match=r"narrow: start must be an int, got 'a' \(str\)"):
        a.narrow(1, "a", 1)
    with pytest.raises(TypeError, match=r"narrow: length must be an int, got 1.5"):
        a.narrow(1, 0, 1.5)


def test_index_out_of_range():
    a = ones23()
    with pytest.raises(IndexError, match=r"index 2 is out of range for dim 0 of size 2 "
                                         r"\(shape \(2, 3\)\)"):
        a[2]
    with pytest.raises(IndexError, match=r"index -4 is out of range for dim 1 of size 3"):
        a[0, -4]
    with pytest.raises(IndexError, match=r"too many indices: 3 for a tensor of 2 dims"):
        a[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        a[..., ...]
    with pytest.raises(ValueError, match="step"):
        a[::0]
    with pytest.raises(TypeError, match="unsupported index type"):
        a["x"]
    with pytest.raises(IndexError):
        ad.tensor(1.0)[0]


def test_slices_out_of_range_clip_like_python():
    a = ones23()
    # Python/numpy slicing clips instead of raising
    assert a[5:].shape == (0, 3) and a[:, 1:100].shape == (2, 2)


# ---- state ---------------------------------------------------------------------------------------
def test_backward_on_untracked_root():
    a = ones23()
    with pytest.raises(ad.GraphError, match=r"backward: the root \(tensor id \d+, float32 \(\)\) "
                                            r"does not depend on any Var"):
        a.sum().backward()
    assert issubclass(ad.GraphError, RuntimeError)


def test_backward_grad_wrong_shape_and_dtype():
    w = ad.Var(np.ones(3))
    y = w * 2
    with pytest.raises(ad.ShapeError, match=r"backward: grad has shape \(4,\) but the root has "
                                            r"float64 \(3,\)"):
        y.backward(grad=ad.ones(4, dtype=ad.float64))
    with pytest.raises(ad.DTypeError, match=r"backward: grad is float32 \(3,\) but the root is "
                                            r"float64 \(3,\)"):
        y.backward(grad=ad.ones(3))
    with pytest.raises(ad.ShapeError, match=r"backward: the root has shape \(3,\)"):
        y.backward()


def test_backward_int_root():
    w = ad.Var([1.0, 2.0])
    with pytest.raises(ad.GraphError):
        (w > 0).to_dtype(ad.float32).sum().backward()  # comparisons are untracked


def test_var_set_errors():
    w = ad.Var([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ad.GraphError, match="cannot set a variable to a tensor that is derived "
                                            "from its value"):
        w.set(w.t())
    with pytest.raises(ad.ShapeError, match=r"set: shape mismatch, variable float32 \(2, 2\), "
                                            r"source float32 \(\)"):
        w.set(ad.tensor(1.0))
    with pytest.raises(ad.DTypeError, match=r"set: dtype mismatch"):
        w.set(ad.ones((2, 2), dtype=ad.int64))


def test_version_error_then_recover():
    w = ad.Var([1.0, 2.0])
    loss = w.exp().sum()  # exp saves its output, sqr/mul its input: both are w-derived
    loss2 = w.sqr().sum()
    w.set(ad.tensor([0.0, 0.0]))
    with pytest.raises(ad.GraphError, match=r"sqr.*tensor id \d+.*version 0 at save, now 1"):
        loss2.backward()
    assert loss.backward()[w].numpy().tolist() == pytest.approx([np.e, np.e ** 2], rel=1e-6)


def test_item_and_bool_of_many_elements():
    a = ones23()
    with pytest.raises(ValueError, match=r"item: only a tensor with one element .*\(2, 3\)"):
        a.item()
    with pytest.raises(ValueError, match=r"ambiguous"):
        bool(a)


def test_bad_data():
    with pytest.raises(ValueError, match="tensor: cannot convert"):
        ad.tensor([[1, 2], [3]])
    with pytest.raises(ValueError, match="tensor: cannot convert"):
        ad.tensor(["a", object()])


@pytest.mark.parametrize("a", [np.array([1 + 2j]), np.array(["1.5"]), np.array([b"2"]),
                               np.array(["2020-01-01"], dtype="datetime64[D]"),
                               np.array([3], dtype="timedelta64[s]"),
                               np.zeros(1, dtype=[("a", "f4")])],
                         ids=lambda a: a.dtype.str)
def test_non_numeric_numpy_data_is_refused_not_cast(a):
    # fuzz_args: with a dtype given (or an operand converted to a tensor's
    # dtype), numpy's cast ran: "1.5" was parsed, 1+2j became 1.0 (a
    # ComplexWarning at most), a datetime became its day count
    v = ad.Var(ad.ones(1))
    for f in (lambda: ad.tensor(a, ad.float32), lambda: ad.from_numpy(a, ad.float64),
              lambda: ad.ones(1) + a[0], lambda: ad.ones(1) < [a[0]],
              lambda: ad.where(ad.ones(1) > 0, ad.ones(1), a[0]), lambda: v.set(a),
              lambda: v.__setitem__(0, a[0]), lambda: v.__setitem__(slice(None), a)):
        with pytest.raises(ad.DTypeError, match="cannot convert numpy"):
            f()
    assert v.tolist() == [1.0]


def test_numeric_object_and_float16_data_still_convert():
    v = ad.Var(ad.ones(2))
    v[0] = np.float16(2.5)
    v[1:] = np.array([3.5], dtype=object)
    assert v.tolist() == [2.5, 3.5]
    assert ad.tensor(np.array([1.5, 2], dtype=object), ad.float64).tolist() == [1.5, 2.0]
    with pytest.raises(ad.InvalidArgumentError, match="non-numeric"):
        ad.from_numpy(np.array(["x"], dtype=object), ad.float32)
    with pytest.raises(ad.DTypeError):
        v[0] = "1.5"


def test_huge_shape_no_allocation_attempt():
    # a clear error before any allocation (PyTorch: RuntimeError from the
    # allocator; numpy: ValueError "array is too big")
    for shape in [(2 ** 40, 2 ** 40), (2 ** 62,), (2 ** 31, 2 ** 31, 2 ** 31),
                  (2 ** 61, 4)]:
        with pytest.raises(ad.Error, match=r"too many elements to allocate") as ei:
            ad.zeros(shape)
        assert isinstance(ei.value, (ValueError, MemoryError))
        assert "(" + ", ".join(map(str, shape)) in str(ei.value)
    with pytest.raises(ad.Error, match="too many elements"):
        ad.ones((2 ** 40, 2 ** 40), dtype=ad.float64)


def test_allocation_failure_is_memory_error():
    # element counts that pass the size check but cannot be allocated: the
    # allocator's failure becomes ad.OutOfMemoryError (a MemoryError) naming the
    # shape.  (Under AddressSanitizer run with ASAN_OPTIONS=allocator_may_return_null=1.)
    with pytest.raises(ad.OutOfMemoryError, match=r"out of memory allocating \(1125899906842624,\) "
                                                  r"of float32"):
        ad.zeros((2 ** 50,))
    with pytest.raises(MemoryError, match=r"\(1073741824, 1048576\)"):
        ad.zeros((2 ** 20,)).broadcast_to((2 ** 30, 2 ** 20)).contiguous()


def test_errors_leave_no_garbage():
    """Many failing calls in a row: the fixture checks that none leaked."""
    w = ad.Var.ones((2, 3))
    for _ in range(50):
        for f in (lambda: w + ad.ones((4, 3)), lambda: w @ ad.ones((2, 3)),
                  lambda: w.sum(7), lambda: w.reshape(5), lambda: (w * 2).backward(),
                  lambda: w.narrow(0, 1, 9), lambda: w.exp().to_dtype("int8")):
            with pytest.raises(ad.Error):
                f()


def _bad_type_calls():
    # fuzz_args: each raised a bare AttributeError / TypeError / IndexError /
    # ValueError from inside the library ("'NoneType' object has no attribute
    # '_h'", "tuple index out of range", "'NoneType' object is not iterable")
    import pyautodiff.nn.functional as F
    t = ad.ones((2, 3))
    v = ad.Var(ad.ones(3))
    y = (v * v).sum()
    return [
        (lambda: ad.flip(np.ones(2), 0), r"flip: input is a ndarray, not a Tensor"),
        (lambda: ad.split(np.ones(3), 1), r"split: input is a ndarray"),
        (lambda: ad.chunk([1.0], 2), r"chunk: input is a list"),
        (lambda: ad.gather(None, 0, ad.tensor([0])), r"gather: input 0 is a NoneType"),
        (lambda: F.dropout([1.0]), r"dropout: input 0 is a list"),
        (lambda: ad.cat(None), r"cat: takes a sequence of tensors, got a NoneType"),
        (lambda: ad.cat([t, t], None), r"cat: dim must be an int, got None"),
        (lambda: ad.chunk(t, None), r"chunk: chunks must be an int"),
        (lambda: t.split(None), r"split: split_size_or_sections must be"),
        (lambda: t.transpose(0, "a"), r"transpose: dim must be an int, got 'a'"),
        (lambda: t.sum("x"), r"sum: dim must be an int or a tuple of ints, got 'x'"),
        (lambda: t.max((0, None)), r"max: dim must be"),
        (lambda: t.argmax(1.5), r"argmax: dim must be"),
        (lambda: ad.flip(t, [None]), r"flip: dim must be"),
        (lambda: t.softmax(None), r"softmax: dim must be an int"),
        (lambda: t.cumsum("x"), r"cumsum: dim must be an int"),
        (lambda: t.narrow(0, None, 1), r"narrow: start must be an int, got None"),
        (lambda: t.size("a"), r"size: dim must be an int"),
        (lambda: ad.tensor(1.0).size(0), r"size: dim 0 out of range for a 0-d tensor"),
        (lambda: t.var(correction=None), r"var: correction must be a number"),
        (lambda: t.clamp(1j), r"clamp: min must be a real number"),
        (lambda: t.elu(None), r"elu: float argument 0 is None"),
        (lambda: t + [[1], [2, 3]], r"add: cannot convert a list operand"),
        (lambda: t.index_select(1, [[1], [2, 0]]), r"index_select: cannot make an index"),
        (lambda: ad.grad("abc", [v]), r"grad: outputs\[0\] is a str, not a Tensor"),
        (lambda: ad.grad(y, None), r"grad: inputs must be a Tensor or a sequence"),
        (lambda: y.backward(retain=None), r"backward: retain must be an iterable"),
    ]


@pytest.mark.parametrize("i", range(len(_bad_type_calls())))
def test_wrong_argument_types_raise_ad_errors_naming_the_op(i):
    f, pat = _bad_type_calls()[i]
    with pytest.raises(ad.Error, match=pat):
        f()


def test_gradstore_keys_must_be_tensors():
    s = ad.GradStore()
    for f in (lambda: s.insert(None, 1.0), lambda: s.remove(3), lambda: s.get("a")):
        with pytest.raises(TypeError, match="GradStore keys are tensors"):
            f()


def test_full_refuses_a_string_or_complex_value():
    # fuzz_args: float() parsed full((2,), "1.5") into 1.5 and took
    # np.complex64(1j) as 0.0 (a ComplexWarning at most)
    for v in ("1.5", b"2", np.str_("3"), np.complex64(1j), 1j, np.timedelta64(3)):
        with pytest.raises(ad.ArgumentTypeError, match="full: value must be a real number"):
            ad.full((2,), v)
        with pytest.raises(ad.ArgumentTypeError, match="full: value must be a real number"):
            ad.full_like(ad.ones(2), v)
    assert ad.full((2,), np.float32(2.5)).tolist() == [2.5, 2.5]
    assert ad.full((1,), np.bool_(True)).tolist() == [True]
    for f in (ad.zeros_like, ad.ones_like):  # the model: a Tensor (or a numpy array)
        with pytest.raises(ad.ArgumentTypeError, match=f"{f.__name__}: t must be a Tensor"):
            f(None)
        assert f(np.zeros((2, 1), np.float64)).shape == (2, 1)
    with pytest.raises(ad.ArgumentTypeError, match="full_like: t must be a Tensor"):
        ad.full_like([1.0], 2.0)


def test_ragged_lists_and_bad_index_values_raise_naming_the_op():
    # fuzz_args: numpy 2 raises ValueError for ragged nested lists, which
    # escaped bare (from np.asarray inside the library); an index past int64
    # in var[idx] = value escaped as numpy's OverflowError, a 2-d value for a
    # bool mask as numpy's TypeError
    F = ad.nn.functional
    q, k, v = ad.randn(2, 3, 4, seed=1), ad.randn(2, 5, 4, seed=2), ad.randn(2, 5, 6, seed=3)
    ragged = [[0], [1, 0]]
    var = ad.Var(ad.ones((2, 3)))
    for f, cls, pat in [
            (lambda: F.scaled_dot_product_attention(q, k, v, ragged), ad.ShapeError,
             "scaled_dot_product_attention: cannot convert attn_mask"),
            (lambda: F.cross_entropy(ad.randn(2, 3, seed=1), ragged), ad.ShapeError,
             "cross_entropy: cannot convert the target"),
            (lambda: ad.from_numpy(ragged), ad.ShapeError, "from_numpy: cannot convert"),
            (lambda: ad.ones(3)[ragged], IndexError, "ragged or mixed lists are not supported"),
            (lambda: var.__setitem__(ragged, 1.0), IndexError, "ragged or mixed lists are not supported"),
            (lambda: var.__setitem__(2 ** 63, 1.0), ad.OutOfRangeError, r"Var\[...\] = value"),
            (lambda: var.__setitem__(var > 0, np.ones((2, 3))), ad.ShapeError,
             r"Var\[...\] = value")]:
        with pytest.raises(cls, match=pat):
            f()
    assert var.tolist() == [[1.0] * 3] * 2
