"""Joining and indexing ops: cat, stack, split/chunk, flip, pad, repeat,
expand, index_select, index_add, gather, scatter_add, integer-tensor and
bool-mask indexing, embedding.  Forward against numpy, gradients by the
float64 central-difference check on contiguous, transposed, sliced and
broadcast inputs (gradcheck.layouts), duplicate indices, error paths."""
import numpy as np
import pytest

import pyautodiff as ad
from gradcheck import check_grad, layouts

rng = np.random.default_rng(0)


def rand(*shape):
    return rng.standard_normal(shape)


def first_layout(mk):
    """make() applying a layout to input 0 only."""
    return lambda i, t: mk(t) if i == 0 else t


def np_of(t):
    return np.asarray(t)


# ---- cat / stack ---------------------------------------------------------------------------
@pytest.mark.parametrize("name,base,mk", layouts((2, 3)), ids=lambda v: v if isinstance(v, str) else "")
def test_cat_grad_layouts(name, base, mk):
    check_grad(lambda a, b: ad.cat([a, b, a], dim=1), [base, rand(2, 2)], make=first_layout(mk))
    check_grad(lambda a, b: ad.cat([b.t(), a], dim=0), [base, rand(3, 2)],
               make=first_layout(mk))


def test_cat_forward_and_sizes():
    a, b, c = rand(2, 3), rand(2, 0), rand(2, 1)
    y = ad.cat([ad.tensor(a), ad.tensor(b), ad.tensor(c)], dim=-1)
    np.testing.assert_array_equal(np_of(y), np.concatenate([a, b, c], axis=1))
    ints = ad.cat([ad.tensor([1, 2]), ad.tensor([3])])
    assert ints.dtype == ad.int64 and ints.tolist() == [1, 2, 3]
    many = [rand(1, 2) for _ in range(19)]
    y = ad.cat([ad.tensor(m) for m in many])
    np.testing.assert_array_equal(np_of(y), np.concatenate(many))
    check_grad(lambda *xs: ad.cat(list(xs) * 2), [rand(1, 2) for _ in range(5)])


def test_cat_and_pad_of_transposed_planes():
    # the copies into the joined tensor walk transposed planes by the tile
    # transposes (4- and 8-byte elements) or row by row (others): every
    # dtype, planes off the 8 x 8 blocks, at 1 and 2 threads
    old = ad.get_num_threads()
    try:
        for threads in (1, 2):
            ad.set_num_threads(threads)
            for dt in (np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_):
                a = (rand(3, 70, 37) * 10).astype(dt)
                b = (rand(3, 70, 5) * 10).astype(dt)
                ta = ad.tensor(np.ascontiguousarray(a.transpose(0, 2, 1))).permute(0, 2, 1)
                got = ad.cat([ta, ad.tensor(b), ta], dim=2)
                np.testing.assert_array_equal(np_of(got), np.concatenate([a, b, a], axis=2))
                got = ad.cat([ta, ta], dim=0)
                np.testing.assert_array_equal(np_of(got), np.concatenate([a, a], axis=0))
                if dt != np.bool_:
                    padded = ad.nn.functional.pad(ta, (2, 1, 0, 3))
                    np.testing.assert_array_equal(np_of(padded),
                                                  np.pad(a, ((0, 0), (0, 3), (2, 1))))
    finally:
        ad.set_num_threads(old)


def test_cat_zero_and_one_sized():
    check_grad(lambda a, b: ad.cat([a, b], 0), [rand(0, 3), rand(1, 3)])
    check_grad(lambda a: ad.cat([a]), [rand(1, 1)])


def test_stack():
    a, b = rand(2, 3), rand(2, 3)
    for d in (0, 1, 2, -1):
        y = ad.stack([ad.tensor(a), ad.tensor(b)], d)
        np.testing.assert_array_equal(np_of(y), np.stack([a, b], d))
    for name, base, mk in layouts((2, 3)):
        check_grad(lambda x, y: ad.stack([x, y, x], 1), [base, b], make=first_layout(mk))
    # before the last dim: one cat read as (count, size); at the end: a reshape each
    for d in (0, 2):
        check_grad(lambda x, y: ad.stack([x, y, x], d), [a, b])
    many = [rand(3, 2) for _ in range(11)]  # more than one native cat's 8 inputs
    for d in (0, 1, 2):
        np.testing.assert_array_equal(np_of(ad.stack([ad.tensor(m) for m in many], d)),
                                      np.stack(many, d))
    assert ad.stack([ad.tensor(1.0), ad.tensor(2.0)]).tolist() == [1.0, 2.0]
    assert ad.stack([ad.zeros((2, 0, 3))] * 3, 1).shape == (2, 3, 0, 3)


def test_cat_stack_errors():
    with pytest.raises(ad.DTypeError, match="cat"):
        ad.cat([ad.zeros(2), ad.zeros(2, dtype=ad.float64)])
    with pytest.raises(ad.ShapeError, match=r"cat.*\(2, 3\)"):
        ad.cat([ad.zeros((2, 3)), ad.zeros((3, 3))], dim=1)
    with pytest.raises(IndexError, match="cat"):
        ad.cat([ad.zeros((2, 3))], dim=2)
    with pytest.raises(ad.ShapeError, match="cat"):
        ad.cat([ad.tensor(1.0)])
    with pytest.raises(ad.ShapeError, match="stack"):
        ad.stack([ad.zeros(2), ad.zeros(3)])
    with pytest.raises(ValueError):
        ad.cat([])


def test_cat_records_the_sizes_it_takes_from_the_inputs():
    """cat's native call is given the dim alone and fills in each input's size
    along it: the node records them, so the gradient splits g right even where
    an input is untracked (its tensor is not kept); sizes given are checked."""
    a, b, c = rand(2, 3), rand(2, 1), rand(2, 2)
    va, vc = ad.Var(a), ad.Var(c)
    y = ad.cat([va, ad.tensor(b), vc, va], dim=1)
    w = rand(*y.shape)
    g = (y * ad.tensor(w)).sum().backward()
    np.testing.assert_array_equal(np_of(g[va]), w[:, 0:3] + w[:, 6:9])
    np.testing.assert_array_equal(np_of(g[vc]), w[:, 4:6])
    ts = [ad.tensor(a), ad.tensor(b)]
    given = ad.indexing._call(ad._lib.AD_OP_CAT, ts, [1, 3, 1])
    np.testing.assert_array_equal(np_of(given), np.concatenate([a, b], 1))
    with pytest.raises(ad.InvalidArgumentError, match=r"cat: size argument 2 .*input 1"):
        ad.indexing._call(ad._lib.AD_OP_CAT, ts, [1, 3, 2])


def test_stack_checks_every_shape_in_the_native_call():
    """stack hands cat each size along the dim: sizes that differ but add up to
    a whole stack, another rank at the last dim, and a dtype mismatch are all
    named (the first two as stack's)."""
    parts = [ad.zeros((2, 3)), ad.zeros((2, 4)), ad.zeros((2, 2))]  # 3 + 4 + 2 = 3 x 3
    for d in (0, 1, 2):
        with pytest.raises(ad.ShapeError, match=r"stack: .*\(2, 3\), tensor 1 has \(2, 4\)"):
            ad.stack(parts, d)
    with pytest.raises(ad.ShapeError, match=r"stack: .*tensor 1 has \(2, 3, 1\)"):
        ad.stack([ad.zeros((2, 3)), ad.zeros((2, 3, 1))], 2)
    with pytest.raises(ad.DTypeError, match="cat: inputs must share a dtype"):
        ad.stack([ad.zeros(2), ad.zeros(2, dtype=ad.float64)])


# ---- split / chunk / flip / repeat / expand --------------------------------------------------
def test_split_chunk_are_views():
    a = np.arange(14.0).reshape(7, 2)
    t = ad.tensor(a)
    parts = t.split(3)
    assert [p.shape for p in parts] == [(3, 2), (3, 2), (1, 2)]
    for p, ref in zip(parts, np.split(a, [3, 6])):
        np.testing.assert_array_equal(np_of(p), ref)
        assert ad._lib.ad_tensor_same_storage(p._h, t._h)
    parts = t.split([1, 0, 6])
    assert [p.shape[0] for p in parts] == [1, 0, 6]
    assert [p.shape for p in t.chunk(3)] == [(3, 2), (3, 2), (1, 2)]
    assert [p.shape for p in t.chunk(2, dim=1)] == [(7, 1), (7, 1)]
    check_grad(lambda x: x.split(2, dim=1)[1] * 3 + x.split([1, 2], dim=1)[0], [rand(2, 3)])
    check_grad(lambda x: ad.cat(list(x.chunk(3, 0))[::-1]), [rand(5, 2)])
    with pytest.raises(ad.ShapeError, match="split"):
        t.split([3, 3])


@pytest.mark.parametrize("name,base,mk", layouts((3, 4)), ids=lambda v: v if isinstance(v, str) else "")
def test_flip(name, base, mk):
    a = mk(ad.tensor(base))
    for dims in (0, 1, (0, 1), (-1,)):
        np.testing.assert_array_equal(np_of(a.flip(dims)), np.flip(np_of(a), dims))
    check_grad(lambda x: x.flip((0, 1)), [base], make=lambda i, t: mk(t))
    check_grad(lambda x: x.flip(1) * x, [base], make=lambda i, t: mk(t))


def test_flip_small_dims():
    check_grad(lambda x: x.flip(0), [rand(1, 2)])
    assert ad.zeros((0, 2)).flip(0).shape == (0, 2)


@pytest.mark.parametrize("name,base,mk", layouts((2, 3)), ids=lambda v: v if isinstance(v, str) else "")
def test_repeat(name, base, mk):
    a = mk(ad.tensor(base))
    for reps in ((2, 1), (1, 3), (2, 2, 2), (0, 1)):
        np.testing.assert_array_equal(np_of(a.repeat(*reps)), np.tile(np_of(a), reps))
    check_grad(lambda x: x.repeat(2, 3), [base], make=lambda i, t: mk(t))
    check_grad(lambda x: x.repeat((3, 1, 2)), [base], make=lambda i, t: mk(t))


def test_expand():
    check_grad(lambda x: x.expand(3, 2, 4), [rand(2, 1)])
    check_grad(lambda x: x.expand((2, 3)) * x, [rand(1, 3)])
    check_grad(lambda x: x.expand(2, -1, 3), [rand(4, 1)])
    assert ad.zeros((2, 1)).expand(-1, 0).shape == (2, 0)
    with pytest.raises(ad.ShapeError, match="expand"):
        ad.zeros(2).expand(-1, 2)


# ---- pad -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,base,mk", layouts((2, 3)), ids=lambda v: v if isinstance(v, str) else "")
def test_pad(name, base, mk):
    a = mk(ad.tensor(base))
    y = ad.nn.pad(a, (1, 2, 0, 1), value=-1.5)
    np.testing.assert_array_equal(np_of(y), np.pad(np_of(a), ((0, 1), (1, 2)),
                                                   constant_values=-1.5))
    check_grad(lambda x: ad.nn.pad(x, (1, 2)), [base], make=lambda i, t: mk(t))
    check_grad(lambda x: ad.nn.pad(x, (2, -1, -1, 1), value=3.0), [base],
               make=lambda i, t: mk(t))


def test_pad_crop_and_errors():
    a = np.arange(12.0).reshape(3, 4)
    y = ad.nn.pad(ad.tensor(a), (-1, -2))
    np.testing.assert_array_equal(np_of(y), a[:, 1:2])
    assert ad.nn.pad(ad.zeros((0, 2)), (1, 1)).shape == (0, 4)
    check_grad(lambda x: ad.nn.pad(x, (0, 0, 1, 1)), [rand(0, 2)])
    assert ad.nn.pad(ad.tensor([1, 2]), (1, 0), value=7).tolist() == [7, 1, 2]
    with pytest.raises(ad.ShapeError, match="pad"):
        ad.nn.pad(ad.zeros((2, 2)), (-2, -1))
    with pytest.raises(ValueError, match="pad"):
        ad.nn.pad(ad.zeros(2), (1, 1, 1, 1))


# ---- index_select / index_add ----------------------------------------------------------------
@pytest.mark.parametrize("name,base,mk", layouts((3, 4)), ids=lambda v: v if isinstance(v, str) else "")
def test_index_select(name, base, mk):
    idx = ad.tensor([2, 0, 2, 2, -1])
    a = mk(ad.tensor(base))
    np.testing.assert_array_equal(np_of(a.index_select(0, idx)),
                                  np.take(np_of(a), [2, 0, 2, 2, -1], axis=0))
    np.testing.assert_array_equal(np_of(a.index_select(1, [3, 3, 0])),
                                  np_of(a)[:, [3, 3, 0]])
    check_grad(lambda x: x.index_select(0, idx), [base], make=lambda i, t: mk(t))
    check_grad(lambda x: x.index_select(-1, [1, 1, 1, 0]), [base], make=lambda i, t: mk(t))


def test_index_select_duplicates_accumulate():
    x = ad.Var([1.0, 2.0, 3.0])
    g = x.index_select(0, ad.tensor([0, 0, 2, 0])).sum().backward()
    assert g[x].tolist() == [3.0, 0.0, 1.0]
    x32 = ad.tensor([[1, 2], [3, 4]]).index_select(0, ad.tensor([1], dtype=ad.int32))
    assert x32.tolist() == [[3, 4]]
    assert ad.zeros((3, 2)).index_select(0, ad.tensor([], dtype=ad.int64)).shape == (0, 2)


def test_index_add():
    x, src = rand(4, 3), rand(5, 3)
    idx = [0, 3, 0, 1, 0]
    ref = x.copy()
    np.add.at(ref, idx, src)
    y = ad.tensor(x).index_add(0, idx, ad.tensor(src))
    np.testing.assert_allclose(np_of(y), ref)
    check_grad(lambda a, b: a.index_add(0, idx, b) * a, [x, src])
    check_grad(lambda a, b: a.index_add(1, [2, 2], b), [x, rand(4, 2)])


def test_index_errors():
    x = ad.zeros((3, 4))
    with pytest.raises(IndexError, match=r"index_select.*5.*\(3, 4\)"):
        x.index_select(0, [0, 5])
    with pytest.raises(IndexError, match=r"index_select.*-4"):
        x.index_select(0, [-4])
    with pytest.raises(ad.DTypeError, match="index_select"):
        x.index_select(0, ad.tensor([0.0]))
    with pytest.raises(IndexError, match="index_select"):
        x.index_select(2, [0])
    with pytest.raises(ad.ShapeError, match="index_add"):
        x.index_add(0, [0], ad.zeros((2, 4)))
    with pytest.raises(IndexError, match=r"index_add.*3"):
        x.index_add(0, [3], ad.zeros((1, 4)))


# ---- gather / scatter_add ------------------------------------------------------------------------
@pytest.mark.parametrize("name,base,mk", layouts((3, 4)), ids=lambda v: v if isinstance(v, str) else "")
def test_gather(name, base, mk):
    idx0 = np.array([[0, 2, 2, 1], [2, 2, 0, 0]])
    idx1 = np.array([[3, 3], [0, 1], [2, 2]])
    a = mk(ad.tensor(base))
    np.testing.assert_array_equal(np_of(a.gather(0, idx0)),
                                  np.take_along_axis(np_of(a), idx0, 0))
    np.testing.assert_array_equal(np_of(a.gather(1, idx1)),
                                  np.take_along_axis(np_of(a), idx1, 1))
    check_grad(lambda x: x.gather(0, idx0), [base], make=lambda i, t: mk(t))
    check_grad(lambda x: x.gather(1, idx1) * 2, [base], make=lambda i, t: mk(t))


def test_gather_smaller_index_and_duplicates():
    x = ad.Var([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    y = x.gather(1, [[0, 0, 0, 2]][:1] * 1)  # (1, 4): larger than x in dim 1 is fine
    assert y.tolist() == [[1.0, 1.0, 1.0, 3.0]]
    g = y.sum().backward()
    assert g[x].tolist() == [[3.0, 0.0, 1.0], [0.0, 0.0, 0.0]]


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_gather_index_layouts_and_negative_values(dim):
    """The index read in place (contiguous int64, none negative) or copied
    (negative values counting from the end, int32, a transposed or sliced
    view); 3-d, so the walk's inner loop runs along dim or across it."""
    x = rand(4, 5, 6)
    size = x.shape[dim]
    base = np.random.default_rng(3).integers(0, size, (6, 5, 4)).transpose(2, 1, 0)  # (4, 5, 6)
    cases = {"contiguous": ad.tensor(np.ascontiguousarray(base)),
             "negative": ad.tensor(np.ascontiguousarray(base) - size),
             "int32": ad.tensor(base.astype(np.int32)),
             "transposed": ad.tensor(base.transpose(2, 1, 0)).permute(2, 1, 0),
             "sliced": ad.tensor(np.repeat(base, 2, axis=2))[:, :, ::2]}
    ref = np.take_along_axis(x, base, dim)
    for name, idx in cases.items():
        np.testing.assert_array_equal(np.asarray(ad.tensor(x).gather(dim, idx)), ref,
                                      err_msg=name)
        src = rand(4, 5, 6)
        np.testing.assert_allclose(np.asarray(ad.tensor(x).scatter_add(dim, idx, ad.tensor(src))),
                                   np_scatter_add(x, dim % 3, base, src), err_msg=name)
    sel = np.array([size - 1, -1, 0, -size])
    np.testing.assert_array_equal(np.asarray(ad.tensor(x).index_select(dim, sel)),
                                  np.take(x, sel % size, dim))
    with pytest.raises(IndexError, match=rf"gather: index {size} is out of range for dim "
                                         rf"{dim % 3} of size {size}"):
        ad.tensor(x).gather(dim, np.where(base == 1, size, base))
    with pytest.raises(IndexError, match=rf"index_select: index {-size - 1} is out of range"):
        ad.tensor(x).index_select(dim, [0, -size - 1])
    # a dim of size 0: every index is out of range, -1 too
    for bad in (-1, 0):
        with pytest.raises(IndexError, match=rf"gather: index {bad} is out of range for dim 1 "
                                             r"of size 0"):
            ad.zeros((2, 0)).gather(1, [[bad]])
    # the in-place check of a contiguous non-negative int64 index at its edges,
    # the offender anywhere in a long index (its vectorised pass and the tail)
    big = np.iinfo(np.int64).max
    for bad in (size, size + 1, big, 2**62):
        for at in (0, 37, 98):
            vals = np.zeros(99, np.int64)
            vals[at] = bad
            with pytest.raises(IndexError, match=rf"index_select: index {bad} is out of range"):
                ad.tensor(x).index_select(dim, ad.tensor(vals))
    ok = np.full(99, size - 1, np.int64)
    np.testing.assert_array_equal(ad.tensor(x).index_select(dim, ad.tensor(ok)).numpy(),
                                  np.take(x, ok, dim))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.bool_])
def test_gather_checks_a_contiguous_index_as_it_walks(dtype):
    """A contiguous int64 index is tested value by value inside the gather's
    walk: an offender at the start, the middle or the end stops it and the
    general way names it; a valid negative value found mid-walk restarts the
    gather from a rewritten copy (the same result as numpy's)."""
    x = (np.arange(4 * 7).reshape(4, 7) % 3).astype(dtype)
    base = np.random.default_rng(5).integers(0, 7, (4, 9))
    ref = np.take_along_axis(x, base, 1)
    for at in ((0, 0), (1, 4), (3, 8)):
        for bad in (7, 8, np.iinfo(np.int64).max, 2**62, -8, np.iinfo(np.int64).min):
            idx = base.copy()
            idx[at] = bad
            with pytest.raises(IndexError, match=rf"gather: index {bad} is out of range for "
                                                 r"dim 1 of size 7"):
                ad.tensor(x).gather(1, ad.tensor(idx))
        idx = base.copy()
        idx[at] -= 7  # valid: counts from the end
        np.testing.assert_array_equal(ad.tensor(x).gather(1, ad.tensor(idx)).numpy(), ref)
    np.testing.assert_array_equal(ad.tensor(x).gather(1, ad.tensor(base)).numpy(), ref)


def np_scatter_add(x, dim, idx, src):
    out = x.copy()
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[dim] = idx[pos]
        out[tuple(tgt)] += src[pos]
    return out


@pytest.mark.parametrize("name,base,mk", layouts((3, 4)), ids=lambda v: v if isinstance(v, str) else "")
def test_scatter_add(name, base, mk):
    idx = np.array([[0, 2, 2, 1], [2, 2, 0, 0]])
    src = rand(2, 4)
    a = mk(ad.tensor(base))
    y = a.scatter_add(0, idx, ad.tensor(src))
    np.testing.assert_allclose(np_of(y), np_scatter_add(np_of(a), 0, idx, src))
    check_grad(lambda x, s: x.scatter_add(0, idx, s), [base, src], make=first_layout(mk))
    # the source larger than the index: its extra entries get zero gradient
    big = rand(3, 5)
    g = check_grad(lambda x, s: x.scatter_add(1, idx[:, :2], s), [base, big],
                   make=first_layout(mk))[1]
    assert (g[2:] == 0).all() and (g[:, 2:] == 0).all()


def test_scatter_add_duplicates_and_errors():
    x = ad.zeros(3, dtype=ad.float64)
    y = x.scatter_add(0, [1, 1, 1, 0], ad.tensor([1.0, 2.0, 3.0, 4.0], dtype=ad.float64))
    assert y.tolist() == [4.0, 6.0, 0.0]
    with pytest.raises(IndexError, match=r"scatter_add.*7.*\(3,\)"):
        x.scatter_add(0, [7], ad.tensor([1.0], dtype=ad.float64))
    with pytest.raises(IndexError, match=r"gather.*-5"):
        x.gather(0, [-5])
    with pytest.raises(ad.ShapeError, match="gather"):
        ad.zeros((2, 2)).gather(0, [0, 1])
    with pytest.raises(ad.DTypeError, match="scatter_add"):
        x.scatter_add(0, [0], ad.tensor([1.0]))


# ---- integer-tensor and mask indexing -------------------------------------------------------------
KEYS = [
    lambda: ad.tensor([2, 0, 2]),
    lambda: [1, -1],
    lambda: ad.tensor([[0, 1], [2, 2]]),
    lambda: (slice(None), [3, 0, 3]),
    lambda: (Ellipsis, ad.tensor([1, 1])),
    lambda: ([0, 2], [1, 3]),
    lambda: ([[0], [2]], [1, 3, 0]),
    lambda: (1, [0, 3]),
    lambda: ([0, 2], slice(1, None)),
    lambda: (None, [0, 0]),
    lambda: (slice(None, None, -1), ad.tensor([0, 0])),
    lambda: np.array([True, False, True]),
    lambda: (slice(None), np.array([0, 3, 3])),
    # one index alone (indexing.py's _one_index): a whole-shape mask, numpy
    # or a bool tensor; 2-d and int32 indices
    lambda: np.arange(12).reshape(3, 4) % 3 == 0,
    lambda: ad.tensor(np.arange(12).reshape(3, 4) % 5 == 1),
    lambda: np.array([[0, 2], [1, -1]], np.int32),
    lambda: ad.tensor([2, -3], dtype=ad.int32),
    lambda: np.zeros((3, 4), bool),
]


@pytest.mark.parametrize("k", range(len(KEYS)))
def test_advanced_index_forward_and_grad(k):
    base = rand(3, 4)
    key = KEYS[k]()
    npkey = tuple(np.asarray(i) if isinstance(i, (ad.Tensor, list)) else i
                  for i in (key if isinstance(key, tuple) else (key,)))
    np.testing.assert_array_equal(np_of(ad.tensor(base)[key]), base[npkey])
    check_grad(lambda x: x[key], [base])


def test_advanced_index_3d_and_layouts():
    base = rand(2, 3, 4)
    for key in [(slice(None), [0, 2], [1, 1]), ([1, 0], slice(None), [3, 3]),
                ([0, 1, 1], 2), (np.ones((2, 3), bool), [0, 1, 2, 3, 0, 1])]:
        np.testing.assert_array_equal(np_of(ad.tensor(base)[key]), base[key])
        check_grad(lambda x: x[key], [base])
    mask = np.arange(12).reshape(3, 4) % 4 != 1
    for name, b, mk in layouts((3, 4)):
        check_grad(lambda x: x[[2, 2, 0]] * x[[1, 1, 1]], [b], make=lambda i, t: mk(t))
        check_grad(lambda x: x[mask] * x[mask[:, 0]].sum(), [b], make=lambda i, t: mk(t))


def test_mask_over_leading_dims_of_an_empty_tensor():
    # the mask's elements give the flattened dim (a -1 cannot be solved
    # against a zero-size trailing dim)
    for shape, mshape in (((2, 3, 0), (2, 3)), ((2, 0, 3), (2, 0)), ((0, 2, 0), (0, 2))):
        x = np.zeros(shape, np.float32)
        mask = np.ones(mshape, bool)
        for key in (mask, ad.tensor(mask)):
            assert ad.from_numpy(x)[key].shape == x[mask].shape


def test_index_repeated_accumulates_and_same_tensor_twice():
    x = ad.Var([1.0, 2.0, 3.0])
    y = x[ad.tensor([0, 0, 1, 0])] * x[[2, 2, 2, 2]]
    g = y.sum().backward()
    # d/dx0 = 3 * x2 (three uses), d/dx1 = x2, d/dx2 = x0 + x0 + x1 + x0
    assert g[x].tolist() == [9.0, 3.0, 5.0]
    mask = x > 1.5
    assert x[mask].tolist() == [2.0, 3.0]
    assert x[ad.tensor([], dtype=ad.int64)].shape == (0,)


def test_index_errors_advanced():
    x = ad.zeros((3, 4))
    with pytest.raises(IndexError, match=r"index.*5.*\(3, 4\)"):
        x[[0, 5]]
    with pytest.raises(IndexError, match="-5"):
        x[:, [-5]]
    with pytest.raises(IndexError):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError):
        x[ad.tensor([0.5])]
    with pytest.raises(IndexError):
        x[np.array([True, False])]
    # a ragged or mixed list used to escape as numpy's ValueError (reading) or
    # as its ValueError/IndexError (writing a Var)
    v = ad.Var(np.zeros((3, 4), np.float32))
    for key in ([[0, 1], [1]], [0, None]):
        with pytest.raises(IndexError, match=r"index: a list index must be a rectangular"):
            x[key]
        with pytest.raises(IndexError, match=r"index: a list index must be a rectangular"):
            v[key] = 1.0
    with pytest.raises(IndexError, match=r"index: indices must be integers or bools, got "
                                         r"float32 \(Tensor\)"):
        v[ad.tensor([0.5])] = 1.0


def test_var_setitem_empty_list_writes_nothing():
    # numpy's x[[]] = v: an empty integer index (it used to raise, the empty
    # list read as float64)
    v = ad.Var(np.arange(12.0).reshape(3, 4))
    v[[]] = 5.0
    v[:, []] = 5.0
    assert np_of(v).tolist() == np.arange(12.0).reshape(3, 4).tolist()
    assert v[[]].shape == (0, 4)
    v[[2, 0]] = ad.tensor([7.0])
    assert np_of(v)[[0, 2]].tolist() == [[7.0] * 4] * 2


def test_embedding():
    w = rand(5, 3)
    ids = np.array([[0, 4], [4, 4]])
    y = ad.nn.embedding(ad.tensor(ids), ad.tensor(w))
    np.testing.assert_array_equal(np_of(y), w[ids])
    check_grad(lambda w_: ad.nn.embedding(ids, w_), [w])
    wv = ad.Var(w)
    g = ad.nn.embedding([1, 1, 1], wv).sum().backward()[wv]
    assert np_of(g)[1].tolist() == [3.0, 3.0, 3.0] and np_of(g).sum() == 9.0
    with pytest.raises(IndexError, match="5"):
        ad.nn.embedding([5], ad.tensor(w))


def test_untracked_index_ops_record_nothing():
    x = ad.tensor(rand(3, 2))
    y = ad.cat([x, x[[0]]])
    assert not y.track_op and y.op is None
    v = ad.Var(rand(3, 2))
    assert ad.cat([x, v]).op == "cat"
    assert v[[0, 1]].op is not None


def test_index_ops_count_negative_indices_from_the_end():
    # documented numpy-style (torch raises): -1 is the last entry, forward and
    # backward alike; below -size is out of range
    w = ad.Var(np.arange(5.0))
    neg, pos = ad.tensor([-1, -5, -1]), ad.tensor([4, 0, 4])
    for f in (lambda t, i: ad.index_select(t, 0, i), lambda t, i: ad.gather(t, 0, i),
              lambda t, i: ad.index_add(t, 0, i, ad.ones(3, dtype=ad.float64)),
              lambda t, i: ad.scatter_add(t, 0, i, ad.ones(3, dtype=ad.float64))):
        np.testing.assert_array_equal(f(w, neg).numpy(), f(w, pos).numpy())
        gn = (f(w, neg) * ad.tensor([1.0, 2.0, 3.0, 4.0, 5.0][:f(w, neg).shape[0]],
                                    dtype=ad.float64)).sum().backward()[w]
        gp = (f(w, pos) * ad.tensor([1.0, 2.0, 3.0, 4.0, 5.0][:f(w, pos).shape[0]],
                                    dtype=ad.float64)).sum().backward()[w]
        np.testing.assert_array_equal(gn.numpy(), gp.numpy())
        with pytest.raises(ad.OutOfRangeError, match="index -6 is out of range"):
            f(w, ad.tensor([-6, 0, 0]))
