"""scaled_dot_product_attention with an empty embedding dim (E = 0), found by
tests/fuzz_ops.py: the default scale 1 / sqrt(E) raised ZeroDivisionError (a
plain Python error) instead of computing.  The scores are then empty sums,
zeros, so every query attends uniformly: each output row is the mean of the
value rows, as PyTorch gives."""
import numpy as np
import pytest

import pyautodiff as ad
from pyautodiff import nn
from gradcheck import check_grad


def test_empty_embedding_attends_uniformly():
    q = ad.zeros(3, 0, dtype=ad.float64)
    k = ad.zeros(4, 0, dtype=ad.float64)
    v = ad.tensor(np.arange(8.0).reshape(4, 2))
    out = nn.functional.scaled_dot_product_attention(q, k, v)
    np.testing.assert_array_equal(out.numpy(), np.tile([3.0, 4.0], (3, 1)))


def test_empty_embedding_gradient_of_value():
    q = ad.zeros(2, 3, 0, dtype=ad.float64)
    k = ad.zeros(2, 5, 0, dtype=ad.float64)
    check_grad(lambda v: nn.functional.scaled_dot_product_attention(q, k, v),
              [np.random.default_rng(0).standard_normal((2, 5, 3))])


def test_empty_embedding_matches_torch():
    torch = pytest.importorskip("torch")
    v = np.random.default_rng(1).standard_normal((2, 4, 3))
    mask = np.tril(np.ones((5, 4), bool))
    got = nn.functional.scaled_dot_product_attention(
        ad.zeros(2, 5, 0, dtype=ad.float64), ad.zeros(2, 4, 0, dtype=ad.float64),
        ad.tensor(v), attn_mask=ad.tensor(mask))
    want = torch.nn.functional.scaled_dot_product_attention(
        torch.zeros(2, 5, 0, dtype=torch.float64), torch.zeros(2, 4, 0, dtype=torch.float64),
        torch.from_numpy(v), attn_mask=torch.from_numpy(mask))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
