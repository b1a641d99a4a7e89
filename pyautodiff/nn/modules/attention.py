"""MultiheadAttention with PyTorch's parameters (in_proj_weight, in_proj_bias,
out_proj.weight, out_proj.bias; q/k/v_proj_weight when kdim/vdim differ;
bias_k/bias_v), masks and returned attention weights."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional, Tuple, Union

import numpy as np

from ...errors import DTypeError, InvalidArgumentError, ShapeError
from .. import functional as F
from .. import init
from ..module import Module
from ._common import desc, factory, float_arg, float_input, int_arg, new_var, tensor_arg
from .basic import Linear

if TYPE_CHECKING:
    from ...tensor import Tensor

_Size = Union[int, Tuple[int, ...]]


def _softmax_last(s):
    """softmax over the last dim: the native op (one SIMD pass per row forward,
    out * (g - sum(g * out)) backward), which beat the exp-map composite
    (max, sub, exp, sum, reciprocal, product and their backwards) by about a
    quarter, forward plus backward, on (32, 4, 64, 64) causal scores."""
    return s.softmax(-1)


class NonDynamicallyQuantizableLinear(Linear):
    """PyTorch's name for MultiheadAttention.out_proj's class (a Linear)."""


class MultiheadAttention(Module):
    """Attention over num_heads heads of embed_dim / num_heads features.

    forward(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False) returns
    (output, weights or None).  Inputs are (L, N, E), or (N, L, E) with
    batch_first=True, or unbatched (L, E).  Boolean masks are True where
    attention is not allowed; float masks are added to the scores."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0,
                 bias: bool = True, add_bias_kv: bool = False,
                 add_zero_attn: bool = False, kdim: Optional[int] = None,
                 vdim: Optional[int] = None, batch_first: bool = False,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        name = "MultiheadAttention"
        self.embed_dim = int_arg(name, "embed_dim", embed_dim)
        self.num_heads = int_arg(name, "num_heads", num_heads)
        self.kdim = self.embed_dim if kdim is None else int_arg(name, "kdim", kdim)
        self.vdim = self.embed_dim if vdim is None else int_arg(name, "vdim", vdim)
        self._qkv_same_embed_dim = self.kdim == self.embed_dim and self.vdim == self.embed_dim
        self.dropout = float_arg(name, "dropout", dropout, 0.0, 1.0)
        self.batch_first = bool(batch_first)
        self.head_dim = self.embed_dim // self.num_heads
        if self.head_dim * self.num_heads != self.embed_dim:
            raise InvalidArgumentError(f"{name}: embed_dim {self.embed_dim} must be divisible "
                                       f"by num_heads {self.num_heads}")
        dt = factory(name, device, dtype)
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = new_var(name, "in_proj_weight", (3 * e, e), dt)
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = new_var(name, "q_proj_weight", (e, e), dt)
            self.k_proj_weight = new_var(name, "k_proj_weight", (e, self.kdim), dt)
            self.v_proj_weight = new_var(name, "v_proj_weight", (e, self.vdim), dt)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = new_var(name, "in_proj_bias", (3 * e,), dt)
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(e, e, bias=bias, dtype=dt)
        if add_bias_kv:
            self.bias_k = new_var(name, "bias_k", (1, 1, e), dt)
            self.bias_v = new_var(name, "bias_v", (1, 1, e), dt)
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = bool(add_zero_attn)
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    @property
    def _tag(self):
        return f"MultiheadAttention(embed_dim={self.embed_dim}, num_heads={self.num_heads})"

    def _mask(self, m, name, shapes, dtype):
        """A boolean or float mask as an additive float mask of dtype."""
        from ...tensor import full, where

        tensor_arg(self._tag, m, name)
        if m.shape not in shapes:
            raise ShapeError(f"{self._tag}: {name} {desc(m)} must have shape "
                             + " or ".join(str(s) for s in shapes))
        if m.dtype.name == "bool":
            neg = full((), float("-inf"), dtype=dtype)
            return where(m, neg, full((), 0.0, dtype=dtype))
        if not m.dtype.is_floating_point:
            raise DTypeError(f"{self._tag}: {name} {desc(m)} must be bool or floating point")
        if m.dtype is not dtype:
            raise DTypeError(f"{self._tag}: {name} {desc(m)} does not match the query's "
                             f"{dtype.name}")
        return m

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                key_padding_mask: Optional[Tensor] = None, need_weights: bool = True,
                attn_mask: Optional[Tensor] = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        """Attention of `query` over `key`/`value`.

        Returns (output, weights): output like query ((L, N, E), batch_first (N, L, E)
        or unbatched (L, E)); weights (N, L, S) averaged over heads, (N, num_heads,
        L, S) with average_attn_weights=False, or None when need_weights=False.
        Raises ShapeError when the shapes or masks do not fit.
        """
        from ...indexing import cat
        from ...tensor import from_numpy, where, zeros

        tag = self._tag
        dt = self.out_proj.weight.dtype
        q = float_input(tag, query, dt, (2, 3), name="query")
        k = float_input(tag, key, dt, (2, 3), name="key")
        v = float_input(tag, value, dt, (2, 3), name="value")
        if not (q.ndim == k.ndim == v.ndim):
            raise ShapeError(f"{tag}: query {desc(q)}, key {desc(k)} and value {desc(v)} must "
                             f"all be batched (3-d) or all unbatched (2-d)")
        batched = q.ndim == 3
        if not batched:
            q, k, v = q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)
        # The inputs stay in their own layout, (N, L, E) with batch_first, else (L, N, E):
        # transposing a batch_first input to PyTorch's (L, N, E) would make every
        # projection a batch of strided products and the output a strided view.
        bf = self.batch_first and batched
        sd = 1 if bf else 0  # the sequence dim
        tgt, bsz, e = (q.shape[1], q.shape[0], q.shape[2]) if bf else q.shape
        src = k.shape[sd]
        if e != self.embed_dim:
            raise ShapeError(f"{tag}: query {desc(query)} has {e} features, expected "
                             f"{self.embed_dim}")
        if k.shape[2] != self.kdim or v.shape[2] != self.vdim:
            raise ShapeError(f"{tag}: key {desc(key)} and value {desc(value)} must have "
                             f"{self.kdim} and {self.vdim} features")
        if k.shape[:2] != v.shape[:2] or k.shape[1 - sd] != bsz:
            raise ShapeError(f"{tag}: key {desc(key)} and value {desc(value)} must match in "
                             f"sequence length and batch with query {desc(query)}")
        if is_causal and attn_mask is None:
            raise InvalidArgumentError(f"{tag}: is_causal is a hint that attn_mask is the causal "
                                       f"mask; attn_mask must be given")
        h, hd = self.num_heads, self.head_dim
        if attn_mask is not None:
            attn_mask = self._mask(attn_mask, "attn_mask", [(tgt, src), (bsz * h, tgt, src)], dt)
            if attn_mask.ndim == 2:
                attn_mask = attn_mask.unsqueeze(0)
        if key_padding_mask is not None:
            key_padding_mask = self._mask(key_padding_mask, "key_padding_mask",
                                          [(bsz, src)] if batched else [(src,)], dt)
            key_padding_mask = key_padding_mask.reshape(bsz, src)

        # projections: one linear (bias in the GEMM's epilogue) for q, k and v together
        # when they are the same tensor
        if self._qkv_same_embed_dim:
            w, b = self.in_proj_weight, self.in_proj_bias
            if query is key and key is value:
                q, k, v = F.linear(q, w, b).chunk(3, -1)
            else:
                ws = w.chunk(3, 0)
                bs = b.chunk(3, 0) if b is not None else (None,) * 3
                q, k, v = (F.linear(t, wi, bi) for t, wi, bi in zip((q, k, v), ws, bs))
        else:
            bs = self.in_proj_bias.chunk(3, 0) if self.in_proj_bias is not None else (None,) * 3
            q = F.linear(q, self.q_proj_weight, bs[0])
            k = F.linear(k, self.k_proj_weight, bs[1])
            v = F.linear(v, self.v_proj_weight, bs[2])

        if self.bias_k is not None:
            bshape = (bsz, 1, e) if bf else (1, bsz, e)
            k = cat([k, self.bias_k.reshape(1, 1, e).broadcast_to(bshape)], sd)
            v = cat([v, self.bias_v.reshape(1, 1, e).broadcast_to(bshape)], sd)
            if attn_mask is not None:
                attn_mask = cat([attn_mask, zeros(attn_mask.shape[:2] + (1,), dtype=dt)], 2)
            if key_padding_mask is not None:
                key_padding_mask = cat([key_padding_mask, zeros((bsz, 1), dtype=dt)], 1)
        # -> (N, H, L, hd), views of the projections
        if bf:
            q = q.reshape(bsz, tgt, h, hd).permute(0, 2, 1, 3)
            k = k.reshape(bsz, k.shape[1], h, hd).permute(0, 2, 1, 3)
            v = v.reshape(bsz, v.shape[1], h, hd).permute(0, 2, 1, 3)
        else:
            q = q.reshape(tgt, bsz, h, hd).permute(1, 2, 0, 3)
            k = k.reshape(k.shape[0], bsz, h, hd).permute(1, 2, 0, 3)
            v = v.reshape(v.shape[0], bsz, h, hd).permute(1, 2, 0, 3)
        if self.add_zero_attn:
            k = cat([k, zeros((bsz, h, 1, hd), dtype=dt)], 2)
            v = cat([v, zeros((bsz, h, 1, hd), dtype=dt)], 2)
            if attn_mask is not None:
                attn_mask = cat([attn_mask, zeros(attn_mask.shape[:2] + (1,), dtype=dt)], 2)
            if key_padding_mask is not None:
                key_padding_mask = cat([key_padding_mask, zeros((bsz, 1), dtype=dt)], 1)
        s = k.shape[2]
        scores = (q * (1.0 / math.sqrt(hd))) @ k.transpose(-2, -1)
        bias = None  # the masks as one additive tensor broadcasting to (N, H, L, S)
        if attn_mask is not None:
            bias = attn_mask.reshape(bsz, h, tgt, s) if attn_mask.shape[0] != 1 else \
                attn_mask.reshape(1, 1, tgt, s)
        if key_padding_mask is not None:
            kp = key_padding_mask.reshape(bsz, 1, 1, s)
            bias = kp if bias is None else bias + kp
        keep = None
        if bias is not None:
            if not need_weights:
                # PyTorch's fast path (the one need_weights=False takes) gives a query
                # that every key is masked for zero attention instead of NaN
                dead = np.isneginf(np.asarray(bias.detach())).all(-1, keepdims=True)
                if dead.any():
                    bias = where(from_numpy(dead), 0.0, bias)
                    keep = from_numpy((~dead).astype(dt.numpy))
            scores = scores + bias
        weights = _softmax_last(scores)
        if keep is not None:
            weights = weights * keep
        if self.dropout > 0.0 and self.training:
            weights = F.dropout(weights, self.dropout, True)
        out = weights @ v  # (N, H, L, hd)
        out = (out.permute(0, 2, 1, 3).reshape(bsz, tgt, e) if bf
               else out.permute(2, 0, 1, 3).reshape(tgt, bsz, e))
        out = self.out_proj(out)
        if not batched:
            out = out.squeeze(1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(1)
        if not batched:
            weights = weights.squeeze(0)
        return out, weights

    def extra_repr(self) -> str:
        return ""
