"""LSTM with PyTorch's parameters (weight_ih_l{k}[_reverse], weight_hh_l{k},
bias_ih_l{k}, bias_hh_l{k}, weight_hr_l{k} with proj_size), gate order
(input, forget, cell, output) and initialisation U(-1/sqrt(H), 1/sqrt(H))."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional, Tuple, Union

from ...errors import InvalidArgumentError, ShapeError
from .. import functional as F
from .. import init
from ..module import Module
from ._common import desc, factory, float_arg, float_input, int_arg, new_var

if TYPE_CHECKING:
    from ...tensor import Tensor

_Size = Union[int, Tuple[int, ...]]


class LSTM(Module):
    """forward(input, hx=None) -> (output, (h_n, c_n)).  input is (L, N, H_in),
    (N, L, H_in) with batch_first=True, or unbatched (L, H_in); hx is
    (h_0, c_0), each (D * num_layers, N, H_out) (D = 2 when bidirectional)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        name = "LSTM"
        self.input_size = int_arg(name, "input_size", input_size)
        self.hidden_size = int_arg(name, "hidden_size", hidden_size)
        self.num_layers = int_arg(name, "num_layers", num_layers)
        self.bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.dropout = float_arg(name, "dropout", dropout, 0.0, 1.0)
        self.bidirectional = bool(bidirectional)
        self.proj_size = int_arg(name, "proj_size", proj_size, minimum=0)
        if self.proj_size >= self.hidden_size:
            raise InvalidArgumentError(f"{name}: proj_size {self.proj_size} must be smaller "
                                       f"than hidden_size {self.hidden_size}")
        dt = factory(name, device, dtype)
        hs = self.hidden_size
        out = self.proj_size or hs
        d = 2 if self.bidirectional else 1
        for layer in range(self.num_layers):
            for direction in range(d):
                sfx = f"_l{layer}" + ("_reverse" if direction else "")
                in_size = self.input_size if layer == 0 else out * d
                shapes = [("weight_ih" + sfx, (4 * hs, in_size)),
                          ("weight_hh" + sfx, (4 * hs, out))]
                if self.bias:
                    shapes += [("bias_ih" + sfx, (4 * hs,)), ("bias_hh" + sfx, (4 * hs,))]
                if self.proj_size:
                    shapes.append(("weight_hr" + sfx, (self.proj_size, hs)))
                for n, s in shapes:
                    setattr(self, n, new_var(name, n, s, dt))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Redraws the parameters with the layer's default initialisation (as PyTorch's)."""
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    @property
    def _tag(self):
        return f"LSTM({self.input_size}, {self.hidden_size})"

    def _cell_params(self, layer, direction):
        sfx = f"_l{layer}" + ("_reverse" if direction else "")
        g = lambda n: getattr(self, n + sfx) if (n + sfx) in self._parameters else None  # noqa
        return g("weight_ih"), g("weight_hh"), g("bias_ih"), g("bias_hh"), g("weight_hr")

    def forward(self, input: Tensor, hx: Optional[Tuple[Tensor, Tensor]] = None
                ) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        """Runs the LSTM over the sequence.

        Returns (output, (h_n, c_n)): output (L, N, D * H_out) (batch_first: (N, L, .)),
        h_n and c_n (D * num_layers, N, H_out) (c_n's last dim is hidden_size).
        Raises ShapeError for an input or hx of the wrong shape.
        """
        from ...indexing import stack
        from ...tensor import Tensor, zeros

        tag = self._tag
        dt = self.weight_ih_l0.dtype
        x = float_input(tag, input, dt, (2, 3), what="(L, H_in) or batched")
        batched = x.ndim == 3
        if not batched:
            x = x.unsqueeze(1)
        elif self.batch_first:
            x = x.transpose(0, 1)
        seq, bsz, feat = x.shape
        if feat != self.input_size:
            raise ShapeError(f"{tag}: input {desc(input)} has {feat} features, expected "
                             f"input_size {self.input_size}")
        d = 2 if self.bidirectional else 1
        out_size = self.proj_size or self.hidden_size
        if hx is None:
            h0 = zeros((self.num_layers * d, bsz, out_size), dtype=dt)
            c0 = zeros((self.num_layers * d, bsz, self.hidden_size), dtype=dt)
        else:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise InvalidArgumentError(f"{tag}: hx must be a pair (h_0, c_0)")
            h0, c0 = hx
            for nm, t, size in (("h_0", h0, out_size), ("c_0", c0, self.hidden_size)):
                float_input(tag, t, dt, (3,) if batched else (2,), name=nm)
                want = (self.num_layers * d, bsz, size) if batched else \
                    (self.num_layers * d, size)
                if t.shape != want:
                    raise ShapeError(f"{tag}: {nm} {desc(t)} must have shape {want}")
            if not batched:
                h0, c0 = h0.unsqueeze(1), c0.unsqueeze(1)
        hs = self.hidden_size
        layer_in = x
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(d):
                w_ih, w_hh, b_ih, b_hh, w_hr = self._cell_params(layer, direction)
                # all time steps' input projections in one product
                xw = layer_in @ w_ih.t()
                if b_ih is not None:
                    xw = xw + (b_ih + b_hh)
                w_hh_t = w_hh.t()
                w_hr_t = w_hr.t() if w_hr is not None else None
                idx = layer * d + direction
                h, c = h0[idx], c0[idx]
                steps = [None] * seq
                for t in (range(seq - 1, -1, -1) if direction else range(seq)):
                    gates = xw[t] + h @ w_hh_t
                    i, f, g, o = gates.chunk(4, -1)
                    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
                    h = o.sigmoid() * c.tanh()
                    if w_hr_t is not None:
                        h = h @ w_hr_t
                    steps[t] = h
                outs.append(stack(steps, 0) if seq else zeros((0, bsz, out_size), dtype=dt))
                h_n.append(h)
                c_n.append(c)
            from ...indexing import cat

            layer_in = outs[0] if d == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout, True)
        output = layer_in
        hn, cn = stack(h_n, 0), stack(c_n, 0)
        if not batched:
            return output.squeeze(1), (hn.squeeze(1), cn.squeeze(1))
        if self.batch_first:
            output = output.transpose(0, 1)
        return output, (hn, cn)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s
