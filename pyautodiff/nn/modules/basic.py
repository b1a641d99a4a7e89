"""Linear, Embedding, Dropout, Identity, Flatten and the activation layers."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple, Union
import warnings

import numpy as np

from ...errors import DTypeError, InvalidArgumentError, OutOfRangeError, ShapeError
from .. import functional as F
from .. import init
from ..module import Module
from ._common import (desc, factory, float_arg, float_input, int_arg, new_var,
                      reset_weight_and_bias, tensor_arg, weight_and_bias)

if TYPE_CHECKING:
    from ...tensor import Tensor

_Size = Union[int, Tuple[int, ...]]

_ANY_RANK = range(1, 65)
_ANY_RANK_0 = range(0, 65)


class Identity(Module):
    """Returns its input (any arguments are accepted and ignored, as PyTorch)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Tensor) -> Any:
        """Returns `input` unchanged."""
        return input


class Linear(Module):
    """Applies y = x @ weight.T + bias.

    Args:
        in_features: the size of each input sample (the last dim of x).
        out_features: the size of each output sample.
        bias: False leaves out the bias (self.bias is None).
        dtype: the parameters' dtype (default float32); device must be None or 'cpu'.

    Parameters: weight (out_features, in_features) and bias (out_features,),
    drawn from U(-1/sqrt(in_features), 1/sqrt(in_features)) as PyTorch.

    Shape: (*, in_features) -> (*, out_features).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        name = "Linear"
        self.in_features = int_arg(name, "in_features", in_features)
        self.out_features = int_arg(name, "out_features", out_features)
        weight_and_bias(self, (self.out_features, self.in_features), self.out_features, bias,
                        factory(name, device, dtype))

    def reset_parameters(self) -> None:
        """Redraws the parameters with the layer's default initialisation (as PyTorch's)."""
        reset_weight_and_bias(self)

    @property
    def _tag(self):
        return f"Linear(in_features={self.in_features})"

    def forward(self, input: Tensor) -> Tensor:
        """input @ weight.T + bias.

        Shape: (*, in_features) -> (*, out_features).  Raises ShapeError when the
        last dim is not in_features, DTypeError when the dtype is not the weight's.
        """
        params = self._parameters
        w, b = params["weight"], params["bias"]
        x = float_input(self, input, w.dtype, _ANY_RANK)
        if x.shape[-1] != self.in_features:
            raise ShapeError(f"{self._tag}: input {desc(x)} has {x.shape[-1]} features")
        return F.linear(x, w, b)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Embedding(Module):
    """A lookup table (num_embeddings, embedding_dim) drawn from N(0, 1); the
    row padding_idx starts at zero and gets no gradient.  max_norm renormalises
    the looked-up rows in place (as PyTorch)."""

    def __init__(self, num_embeddings: int, embedding_dim: int,
                 padding_idx: Optional[int] = None, max_norm: Optional[float] = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Optional[Tensor] = None,
                 _freeze: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        from ...tensor import Tensor, Var

        name = "Embedding"
        self.num_embeddings = int_arg(name, "num_embeddings", num_embeddings)
        self.embedding_dim = int_arg(name, "embedding_dim", embedding_dim)
        if padding_idx is not None:
            padding_idx = int_arg(name, "padding_idx", padding_idx, -self.num_embeddings)
            if padding_idx >= self.num_embeddings:
                raise InvalidArgumentError(f"{name}: padding_idx {padding_idx} must be within "
                                           f"num_embeddings {self.num_embeddings}")
            if padding_idx < 0:
                padding_idx += self.num_embeddings
        self.padding_idx = padding_idx
        self.max_norm = None if max_norm is None else float_arg(name, "max_norm", max_norm, 0.0)
        self.norm_type = float_arg(name, "norm_type", norm_type)
        if scale_grad_by_freq or sparse:
            raise InvalidArgumentError(f"{name}: scale_grad_by_freq and sparse gradients are not "
                                       f"supported")
        self.scale_grad_by_freq, self.sparse = False, False
        dt = factory(name, device, dtype)
        if _weight is None:
            self.weight = new_var(name, "weight", (self.num_embeddings, self.embedding_dim), dt)
            self.reset_parameters()
        else:
            if not isinstance(_weight, Tensor):
                raise DTypeError(f"{name}: _weight must be an ad.Tensor")
            if _weight.shape != (self.num_embeddings, self.embedding_dim):
                raise ShapeError(f"{name}: _weight {desc(_weight)} does not match "
                                 f"({self.num_embeddings}, {self.embedding_dim})")
            w = Var.from_tensor(_weight.detach().to_dtype(dt) if _weight.dtype is not dt
                                else _weight.detach())
            if _freeze:
                self.register_buffer("weight", w)
            else:
                self.weight = w

    def reset_parameters(self) -> None:
        """Redraws the parameters with the layer's default initialisation (as PyTorch's)."""
        init.normal_(self.weight)
        self._zero_padding_row()

    def _zero_padding_row(self):
        if self.padding_idx is not None:
            w = np.array(self.weight.numpy())
            w[self.padding_idx] = 0
            self.weight.set(w)

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True,
                        padding_idx: Optional[int] = None,
                        max_norm: Optional[float] = None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, sparse: bool = False) -> Embedding:
        """An Embedding holding a copy of embeddings (2-d); freeze=True keeps
        it out of parameters() (a buffer), as requires_grad=False does in PyTorch."""
        tensor_arg("Embedding.from_pretrained", embeddings, "embeddings")
        if embeddings.ndim != 2:
            raise ShapeError(f"Embedding.from_pretrained: embeddings {desc(embeddings)} must "
                             f"be 2-d")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze, dtype=embeddings.dtype)

    @property
    def _tag(self):
        return f"Embedding({self.num_embeddings}, {self.embedding_dim})"

    def _renorm(self, idx):
        from ...grad import no_grad

        w = np.array(self.weight.numpy())
        rows = np.unique(idx)
        norms = np.linalg.norm(w[rows], ord=self.norm_type, axis=1)
        big = norms > self.max_norm
        if big.any():
            w[rows[big]] *= (self.max_norm / (norms[big] + 1e-7))[:, None].astype(w.dtype)
            with no_grad():
                self.weight.set(w)

    def forward(self, input: Tensor) -> Tensor:
        """The rows of weight that `input` (an int tensor of indices) names.

        Shape: (*) -> (*, embedding_dim).  Raises OutOfRangeError for an index
        outside [0, num_embeddings), DTypeError for a non-integer input.
        """
        from ...tensor import where

        tensor_arg(self, input)
        if input.dtype.name not in ("int64", "int32"):  # as PyTorch: Long or Int
            raise DTypeError(f"{self._tag}: input {desc(input)} must hold integer indices "
                             f"(int64 or int32)")
        idx = np.asarray(input)
        if idx.size:
            lo, hi = int(idx.min()), int(idx.max())
            if lo < 0 or hi >= self.num_embeddings:
                bad = lo if lo < 0 else hi
                raise OutOfRangeError(f"{self._tag}: input {desc(input)} holds index {bad}, "
                                      f"out of range for {self.num_embeddings} embeddings")
        if self.max_norm is not None and idx.size:
            self._renorm(idx)
        w = self._parameters.get("weight")
        if w is None:  # frozen (from_pretrained): a buffer, which gets no gradient
            return F.embedding(input, self.weight.detach())
        out = F.embedding(input, w)
        if self.padding_idx is not None and (idx == self.padding_idx).any():
            # the padding row's value, but selected away from the gradient
            mask = (input == self.padding_idx).unsqueeze(-1)
            out = where(mask, F.embedding(input, self.weight.detach()), out)
        return out

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        return s


class Dropout(Module):
    """Zeroes elements with probability p in training mode (scaling the rest by
    1/(1-p)); the identity in eval mode."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        self.p = float_arg("Dropout", "p", p, 0.0, 1.0)
        self.inplace = bool(inplace)

    @property
    def _tag(self):
        return f"Dropout(p={self.p})"

    def forward(self, input: Tensor) -> Tensor:
        """Dropout in training mode, the identity in eval mode.  Shape: any, unchanged."""
        float_input(self, input, None, _ANY_RANK_0)
        return F.dropout(input, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Flatten(Module):
    """Flattens dims start_dim..end_dim (default: all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = int_arg("Flatten", "start_dim", start_dim, minimum=-(1 << 62))
        self.end_dim = int_arg("Flatten", "end_dim", end_dim, minimum=-(1 << 62))

    def forward(self, input: Tensor) -> Tensor:
        """input.flatten(start_dim, end_dim).  Shape: (N, *dims) -> (N, prod(dims)) by default."""
        tag = f"Flatten(start_dim={self.start_dim}, end_dim={self.end_dim})"
        tensor_arg(tag, input)
        n = max(input.ndim, 1)
        s = self.start_dim + n if self.start_dim < 0 else self.start_dim
        e = self.end_dim + n if self.end_dim < 0 else self.end_dim
        if not (0 <= s < n and 0 <= e < n) or s > e:
            raise ShapeError(f"{tag}: input {desc(input)} has no dims {self.start_dim}.."
                             f"{self.end_dim} to flatten")
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class _Activation(Module):
    @property
    def _tag(self):
        return repr(self)

    def _check(self, input):
        return float_input(self, input, None, _ANY_RANK_0)


class ReLU(_Activation):
    """max(x, 0) elementwise.  `inplace` is accepted for PyTorch code (tensors
    are never mutated)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = bool(inplace)  # accepted for PyTorch code; tensors are never mutated

    def forward(self, input: Tensor) -> Tensor:
        """max(input, 0) elementwise.  Shape: any, unchanged."""
        return self._check(input).relu()

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class GELU(_Activation):
    """approximate='none' (exact, through erf) or 'tanh'."""

    def __init__(self, approximate: str = 'none') -> None:
        super().__init__()
        if not isinstance(approximate, str) or approximate not in ("none", "tanh"):
            raise InvalidArgumentError(f"GELU: approximate must be 'none' or 'tanh', got "
                                       f"{approximate!r}")
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:
        """GELU elementwise (exact through erf, or the tanh approximation).
        Shape: any, unchanged."""
        x = self._check(input)
        return x.gelu() if self.approximate == "tanh" else x.gelu_erf()

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(_Activation):
    """x * sigmoid(x) elementwise (a.k.a. swish)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = bool(inplace)

    def forward(self, input: Tensor) -> Tensor:
        """input * sigmoid(input) elementwise.  Shape: any, unchanged."""
        return self._check(input).silu()

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Tanh(_Activation):
    """tanh(x) elementwise."""

    def forward(self, input: Tensor) -> Tensor:
        """tanh elementwise.  Shape: any, unchanged."""
        return self._check(input).tanh()


class Sigmoid(_Activation):
    """1 / (1 + exp(-x)) elementwise."""

    def forward(self, input: Tensor) -> Tensor:
        """1 / (1 + exp(-input)) elementwise.  Shape: any, unchanged."""
        return self._check(input).sigmoid()


def _softmax_dim(name, ndim):
    # PyTorch's legacy rule for dim=None, with its warning
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  f"to include dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(_Activation):
    """Softmax along `dim` (each slice sums to 1).  dim=None uses PyTorch's
    legacy rule (dim 0 for 0-, 1- and 3-d input, else 1) with its warning."""

    def __init__(self, dim: Optional[int] = None) -> None:
        super().__init__()
        self.dim = None if dim is None else int_arg(type(self).__name__, "dim", dim,
                                                       minimum=-(1 << 62))

    def _dim(self, x, name):
        d = _softmax_dim(name, x.ndim) if self.dim is None else self.dim
        n = max(x.ndim, 1)
        if not -n <= d < n:
            raise OutOfRangeError(f"{type(self).__name__}(dim={self.dim}): input {desc(x)} has "
                                  f"no dim {d}")
        return d

    def forward(self, input: Tensor) -> Tensor:
        """Softmax along self.dim (the legacy choice when None).  Shape: unchanged."""
        x = self._check(input)
        return x.softmax(self._dim(x, "softmax"))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """log(softmax(x)) along `dim`, computed stably."""

    def forward(self, input: Tensor) -> Tensor:
        """log_softmax along self.dim (the legacy choice when None).  Shape: unchanged."""
        x = self._check(input)
        return x.log_softmax(self._dim(x, "log_softmax"))
