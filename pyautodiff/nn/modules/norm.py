"""LayerNorm and BatchNorm1d/2d with PyTorch's parameters, buffers and
running-statistics rules."""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, Optional, Tuple, Union

from ...errors import InvalidArgumentError, ShapeError
from .. import functional as F
from ..module import Module
from ._common import desc, factory, float_arg, float_input, int_arg, new_var

if TYPE_CHECKING:
    from ...tensor import Tensor

_Size = Union[int, Tuple[int, ...]]


class LayerNorm(Module):
    """Normalises over the trailing dims normalized_shape; weight ones, bias zeros."""

    def __init__(self, normalized_shape: _Size, eps: float = 1e-05,
                 elementwise_affine: bool = True, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        name = "LayerNorm"
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        try:
            if isinstance(normalized_shape, (str, bytes, bytearray)):  # iterable, not of ints
                raise TypeError
            ns = tuple(normalized_shape)
        except TypeError:
            raise InvalidArgumentError(f"{name}: normalized_shape must be an int or a tuple of "
                                       f"ints, got {normalized_shape!r}") from None
        self.normalized_shape = tuple(int_arg(name, "normalized_shape", s) for s in ns)
        if not self.normalized_shape:
            raise InvalidArgumentError(f"{name}: normalized_shape must not be empty")
        self.eps = float_arg(name, "eps", eps, 0.0)
        self.elementwise_affine = bool(elementwise_affine)
        dt = factory(name, device, dtype)
        if self.elementwise_affine:
            self.weight = new_var(name, "weight", self.normalized_shape, dt, 1)
            if bias:
                self.bias = new_var(name, "bias", self.normalized_shape, dt)
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self._dtype = dt

    @property
    def _tag(self):
        return f"LayerNorm({self.normalized_shape})"

    def forward(self, input: Tensor) -> Tensor:
        """(input - mean) / sqrt(var + eps) * weight + bias over the trailing
        normalized_shape dims.  Shape: unchanged.  Raises ShapeError when the trailing
        dims are not normalized_shape.
        """
        dt = self.weight.dtype if self.weight is not None else None
        x = float_input(self, input, dt, range(len(self.normalized_shape), 65))
        ns = self.normalized_shape
        if x.shape[x.ndim - len(ns):] != ns:
            raise ShapeError(f"{self._tag}: input {desc(x)} does not end with the normalized "
                             f"shape {ns}")
        return F.layer_norm(x, ns, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class _BatchNorm(Module):
    _ndims = (2, 3)

    def __init__(self, num_features: int, eps: float = 1e-05,
                 momentum: Optional[float] = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None,
                 dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__()
        from ... import dtypes as _dt
        from ...tensor import zeros

        name = type(self).__name__
        self.num_features = int_arg(name, "num_features", num_features)
        self.eps = float_arg(name, "eps", eps, 0.0)
        self.momentum = None if momentum is None else float_arg(name, "momentum", momentum)
        self.affine = bool(affine)
        self.track_running_stats = bool(track_running_stats)
        dt = factory(name, device, dtype)
        c = self.num_features
        if self.affine:
            self.weight = new_var(name, "weight", (c,), dt, 1)
            if bias:
                self.bias = new_var(name, "bias", (c,), dt)
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if self.track_running_stats:
            # Vars, so that the running statistics are updated in place
            self.register_buffer("running_mean", new_var(name, "running_mean", (c,), dt))
            self.register_buffer("running_var", new_var(name, "running_var", (c,), dt, 1))
            self.register_buffer("num_batches_tracked", zeros((), dtype=_dt.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    @property
    def _tag(self):
        return f"{type(self).__name__}({self.num_features})"

    def reset_running_stats(self) -> None:
        """Resets running_mean to 0, running_var to 1 and num_batches_tracked to 0."""
        from ... import dtypes as _dt
        from ...tensor import zeros

        if self.track_running_stats:
            self.running_mean.set(zeros(self.running_mean.shape, dtype=self.running_mean.dtype))
            self.running_var.set(zeros(self.running_var.shape, dtype=self.running_var.dtype) + 1)
            self.num_batches_tracked = zeros((), dtype=_dt.int64)

    def forward(self, input: Tensor) -> Tensor:
        """Normalises each channel (dim 1) with the batch statistics in training mode
        (updating running_mean and running_var) or the running ones in eval mode.

        Shape: unchanged ((N, C), (N, C, L) or (N, C, H, W)).  Raises ShapeError when
        the channels are not num_features or a training batch has one value per channel.
        """
        from ...grad import no_grad

        # PyTorch's rules: batch statistics in training mode or without running
        # statistics; running statistics updated (in place) only in training mode
        ref = self.weight if self.weight is not None else self.running_mean
        x = float_input(self, input, None if ref is None else ref.dtype, self._ndims,
                        what=self._layout)
        if x.shape[1] != self.num_features:
            raise ShapeError(f"{self._tag}: input {desc(x)} has {x.shape[1]} channels (dim 1), "
                             f"expected {self.num_features}")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked = self.num_batches_tracked + 1
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / int(self.num_batches_tracked)
        use_batch = self.training or not self.track_running_stats
        n = x.numel() // max(x.shape[1], 1)
        if use_batch and n <= 1:
            raise ShapeError(f"{self._tag}: expected more than 1 value per channel when "
                             f"training, got input {desc(x)}")
        update = self.training and self.track_running_stats
        return F.batch_norm(x, self.running_mean if update or not use_batch else None,
                            self.running_var if update or not use_batch else None,
                            self.weight, self.bias, use_batch, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of (N, C) or (N, C, L) inputs."""
    _ndims = (2, 3)
    _layout = "(N, C) or (N, C, L)"


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of (N, C, H, W) inputs."""
    _ndims = (4,)
    _layout = "(N, C, H, W)"
