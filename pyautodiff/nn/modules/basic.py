"""Linear, Embedding, Dropout, Identity, Flatten and the activation layers."""
import math
import warnings

import numpy as np

from ...errors import DTypeError, InvalidArgumentError, OutOfRangeError, ShapeError
from .. import functional as F
from .. import init
from ..module import Module
from ._common import desc, factory, float_arg, float_input, int_arg, tensor_arg


class Identity(Module):
    """Returns its input (any arguments are accepted and ignored, as PyTorch)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """y = x @ weight.T + bias; weight (out_features, in_features) and bias
    drawn from U(-1/sqrt(in_features), 1/sqrt(in_features)) as PyTorch."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        from ...tensor import Var

        name = "Linear"
        self.in_features = int_arg(name, "in_features", in_features)
        self.out_features = int_arg(name, "out_features", out_features)
        dt = factory(name, device, dtype)
        self.weight = Var.zeros((self.out_features, self.in_features), dtype=dt)
        if bias:
            self.bias = Var.zeros((self.out_features,), dtype=dt)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features)
            init.uniform_(self.bias, -bound, bound)

    @property
    def _tag(self):
        return f"Linear(in_features={self.in_features})"

    def forward(self, input):
        x = float_input(self._tag, input, self.weight.dtype, range(1, 64))
        if x.shape[-1] != self.in_features:
            raise ShapeError(f"{self._tag}: input {desc(x)} has {x.shape[-1]} features")
        y = x @ self.weight.t()
        return y if self.bias is None else y + self.bias

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Embedding(Module):
    """A lookup table (num_embeddings, embedding_dim) drawn from N(0, 1); the
    row padding_idx starts at zero and gets no gradient.  max_norm renormalises
    the looked-up rows in place (as PyTorch)."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 _freeze=False, device=None, dtype=None):
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
            self.weight = Var.zeros((self.num_embeddings, self.embedding_dim), dtype=dt)
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

    def reset_parameters(self):
        init.normal_(self.weight)
        self._zero_padding_row()

    def _zero_padding_row(self):
        if self.padding_idx is not None:
            w = np.array(self.weight.numpy())
            w[self.padding_idx] = 0
            self.weight.set(w)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None,
                        norm_type=2.0, scale_grad_by_freq=False, sparse=False):
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

    def forward(self, input):
        from ...tensor import Tensor, where

        tensor_arg(self._tag, input)
        if input.dtype.is_floating_point or input.dtype.name == "bool":
            raise DTypeError(f"{self._tag}: input {desc(input)} must hold integer indices")
        idx = np.asarray(input)
        if idx.size:
            lo, hi = int(idx.min()), int(idx.max())
            if lo < 0 or hi >= self.num_embeddings:
                bad = lo if lo < 0 else hi
                raise OutOfRangeError(f"{self._tag}: input {desc(input)} holds index {bad}, "
                                      f"out of range for {self.num_embeddings} embeddings")
        if self.max_norm is not None and idx.size:
            self._renorm(idx)
        out = F.embedding(input, self.weight)
        if self.padding_idx is not None and isinstance(self.weight, Tensor) and \
                (idx == self.padding_idx).any():
            # the padding row's value, but selected away from the gradient
            mask = (input == self.padding_idx).unsqueeze(-1)
            out = where(mask, F.embedding(input, self.weight.detach()), out)
        return out

    def extra_repr(self):
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

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        self.p = float_arg("Dropout", "p", p, 0.0, 1.0)
        self.inplace = bool(inplace)

    def forward(self, input):
        tensor_arg(f"Dropout(p={self.p})", input)
        if not input.dtype.is_floating_point:
            raise DTypeError(f"Dropout(p={self.p}): input {desc(input)} must be a "
                             f"floating-point tensor")
        return F.dropout(input, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Flatten(Module):
    """Flattens dims start_dim..end_dim (default: all but the batch dim)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim = int_arg("Flatten", "start_dim", start_dim, minimum=-(1 << 62))
        self.end_dim = int_arg("Flatten", "end_dim", end_dim, minimum=-(1 << 62))

    def forward(self, input):
        tag = f"Flatten(start_dim={self.start_dim}, end_dim={self.end_dim})"
        tensor_arg(tag, input)
        n = max(input.ndim, 1)
        s = self.start_dim + n if self.start_dim < 0 else self.start_dim
        e = self.end_dim + n if self.end_dim < 0 else self.end_dim
        if not (0 <= s < n and 0 <= e < n) or s > e:
            raise ShapeError(f"{tag}: input {desc(input)} has no dims {self.start_dim}.."
                             f"{self.end_dim} to flatten")
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class _Activation(Module):
    def _check(self, input):
        tag = repr(self)
        tensor_arg(tag, input)
        if not input.dtype.is_floating_point:
            raise DTypeError(f"{tag}: input {desc(input)} must be a floating-point tensor")
        return input


class ReLU(_Activation):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = bool(inplace)  # accepted for PyTorch code; tensors are never mutated

    def forward(self, input):
        return self._check(input).relu()

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class GELU(_Activation):
    """approximate='none' (exact, through erf) or 'tanh'."""

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise InvalidArgumentError(f"GELU: approximate must be 'none' or 'tanh', got "
                                       f"{approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        x = self._check(input)
        return x.gelu() if self.approximate == "tanh" else x.gelu_erf()

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class SiLU(_Activation):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = bool(inplace)

    def forward(self, input):
        return self._check(input).silu()

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Tanh(_Activation):
    def forward(self, input):
        return self._check(input).tanh()


class Sigmoid(_Activation):
    def forward(self, input):
        return self._check(input).sigmoid()


def _softmax_dim(name, ndim):
    # PyTorch's legacy rule for dim=None, with its warning
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  f"to include dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(_Activation):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = None if dim is None else int_arg("Softmax", "dim", dim, minimum=-(1 << 62))

    def _dim(self, x, name):
        d = _softmax_dim(name, x.ndim) if self.dim is None else self.dim
        n = max(x.ndim, 1)
        if not -n <= d < n:
            raise OutOfRangeError(f"{type(self).__name__}(dim={self.dim}): input {desc(x)} has "
                                  f"no dim {d}")
        return d

    def forward(self, input):
        x = self._check(input)
        return x.softmax(self._dim(x, "softmax"))

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, input):
        x = self._check(input)
        return x.log_softmax(self._dim(x, "log_softmax"))
