"""Convolution and pooling layers (PyTorch's constructor arguments, weight
layouts and default initialisation)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple, Union

import numpy as np

from ...errors import Error, InvalidArgumentError, ShapeError
from .. import functional as F
from ..module import Module
from ._common import (desc, factory, float_input, int_arg, renamed, reset_weight_and_bias,
                      tuple_arg, weight_and_bias)

if TYPE_CHECKING:
    from ...tensor import Tensor

_Size = Union[int, Tuple[int, ...]]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _mode_pad(x, pads, mode, tag):
    """F.pad in reflect / replicate / circular mode, after checking the
    amounts here so that an error names the layer."""
    for j in range(len(pads) // 2):
        left, right = pads[2 * j], pads[2 * j + 1]
        n = x.shape[x.ndim - 1 - j]
        limit = n - 1 if mode == "reflect" else n
        if mode != "replicate" and (left > limit or right > limit):
            raise ShapeError(f"{tag}: padding ({left}, {right}) in {mode} mode must be at most "
                             f"{limit} for input {desc(x)}")
    return F.pad(x, pads, mode=mode)


class _ConvNd(Module):
    _nd = 2
    _transposed = False

    def __init__(self, name, in_channels, out_channels, kernel_size, stride, padding, dilation,
                 groups, bias, padding_mode, output_padding, device, dtype):
        super().__init__()
        nd = self._nd
        self.in_channels = int_arg(name, "in_channels", in_channels)
        self.out_channels = int_arg(name, "out_channels", out_channels)
        self.kernel_size = tuple_arg(name, "kernel_size", kernel_size, nd)
        self.stride = tuple_arg(name, "stride", stride, nd)
        self.dilation = tuple_arg(name, "dilation", dilation, nd)
        self.groups = int_arg(name, "groups", groups)
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise InvalidArgumentError(f"{name}: padding must be 'valid', 'same', an int or "
                                           f"a tuple, got {padding!r}")
            if self._transposed:
                raise InvalidArgumentError(f"{name}: padding {padding!r} is not supported")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise InvalidArgumentError(f"{name}: padding='same' is not supported for "
                                           f"strided convolutions (stride {self.stride})")
            self.padding = padding
        else:
            self.padding = tuple_arg(name, "padding", padding, nd, minimum=0)
        self.output_padding = tuple_arg(name, "output_padding", output_padding, nd, minimum=0)
        if self._transposed and any(op >= max(s, d) for op, s, d in
                                    zip(self.output_padding, self.stride, self.dilation)):
            raise InvalidArgumentError(f"{name}: output_padding {self.output_padding} must be "
                                       f"smaller than either stride {self.stride} or dilation "
                                       f"{self.dilation}")
        if self.in_channels % self.groups:
            raise InvalidArgumentError(f"{name}: in_channels {self.in_channels} must be "
                                       f"divisible by groups {self.groups}")
        if self.out_channels % self.groups:
            raise InvalidArgumentError(f"{name}: out_channels {self.out_channels} must be "
                                       f"divisible by groups {self.groups}")
        if not isinstance(padding_mode, str) or padding_mode not in _PADDING_MODES:
            raise InvalidArgumentError(f"{name}: padding_mode must be one of {_PADDING_MODES}, "
                                       f"got {padding_mode!r}")
        if self._transposed and padding_mode != "zeros":
            raise InvalidArgumentError(f"{name}: only 'zeros' padding mode is supported")
        self.padding_mode = padding_mode
        if self.padding == "same":
            self._pads = []
            for d, k in zip(reversed(self.dilation), reversed(self.kernel_size)):
                total = d * (k - 1)
                self._pads += [total // 2, total - total // 2]
        elif self.padding == "valid":
            self._pads = [0] * (2 * nd)
        else:
            self._pads = [p for p in reversed(self.padding) for _ in range(2)]
        dt = factory(name, device, dtype)
        if self._transposed:
            wshape = (self.in_channels, self.out_channels // self.groups) + self.kernel_size
        else:
            wshape = (self.out_channels, self.in_channels // self.groups) + self.kernel_size
        weight_and_bias(self, wshape, self.out_channels, bias, dt)

    def reset_parameters(self) -> None:
        """Redraws the parameters with the layer's default initialisation (as PyTorch's)."""
        reset_weight_and_bias(self)

    @property
    def _tag(self):
        k = self.kernel_size[0] if len(set(self.kernel_size)) == 1 else self.kernel_size
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, kernel_size={k})"

    def _check(self, input):
        """(input, its shape) after the rank, dtype and channel checks."""
        nd = self._nd
        x = float_input(self, input, self._parameters["weight"].dtype, (nd + 1, nd + 2),
                        what="(C, L) or (N, C, L)" if nd == 1 else "(C, H, W) or (N, C, H, W)")
        shape = x.shape
        c = shape[-nd - 1]
        if c != self.in_channels:
            raise ShapeError(f"{self._tag}: input {desc(x)} has {c} channels, expected "
                             f"{self.in_channels}")
        return x, shape

    def _check_size(self, x, shape):
        pads = self._pads
        for j in range(self._nd):
            n = shape[-1 - j] + pads[2 * j] + pads[2 * j + 1]
            k = self.kernel_size[-1 - j]
            d = self.dilation[-1 - j]
            if n < d * (k - 1) + 1:
                raise ShapeError(f"{self._tag}: input {desc(x)} (padded size {n}) is smaller "
                                 f"than the kernel (effective size {d * (k - 1) + 1})")

    def extra_repr(self) -> str:
        s = ("{in_channels}, {out_channels}, kernel_size={kernel_size}, stride={stride}")
        if self.padding != (0,) * len(self.kernel_size):
            s += ", padding={padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += ", dilation={dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += ", output_padding={output_padding}"
        if self.groups != 1:
            s += ", groups={groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += ", padding_mode={padding_mode}"
        return s.format(**{k: getattr(self, k) for k in (
            "in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation",
            "output_padding", "groups", "padding_mode")})

    def _conv_forward(self, input, fn):
        x, shape = self._check(input)
        self._check_size(x, shape)
        if self.padding_mode != "zeros":
            x = _mode_pad(x, self._pads, self.padding_mode, self._tag)
            pad = 0
        else:
            pad = self.padding
        try:
            return fn(x, self.weight, self.bias, self.stride, pad, self.dilation, self.groups)
        except Error as e:
            raise renamed(self, e) from None


class Conv1d(_ConvNd):
    """1-d convolution: weight (out_channels, in_channels/groups, kernel_size)."""
    _nd = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size: _Size,
                 stride: _Size = 1, padding: Union[_Size, str] = 0,
                 dilation: _Size = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = 'zeros', device: Any = None, dtype: Any = None) -> None:
        super().__init__("Conv1d", in_channels, out_channels, kernel_size, stride, padding,
                         dilation, groups, bias, padding_mode, 0, device, dtype)

    def forward(self, input: Tensor) -> Tensor:
        """Cross-correlation of `input` with weight, plus bias.

        Shape: (N, C_in, L) or (C_in, L) -> (N, C_out, L_out).  Raises ShapeError
        when the channels or a size do not fit, DTypeError on mixed dtypes.
        """
        return self._conv_forward(input, F.conv1d)


class Conv2d(_ConvNd):
    """2-d convolution: weight (out_channels, in_channels/groups, kh, kw)."""
    _nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: _Size,
                 stride: _Size = 1, padding: Union[_Size, str] = 0,
                 dilation: _Size = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = 'zeros', device: Any = None, dtype: Any = None) -> None:
        super().__init__("Conv2d", in_channels, out_channels, kernel_size, stride, padding,
                         dilation, groups, bias, padding_mode, 0, device, dtype)

    def forward(self, input: Tensor) -> Tensor:
        """Cross-correlation of `input` with weight, plus bias.

        Shape: (N, C_in, H, W) or (C_in, H, W) -> (N, C_out, H_out, W_out).  Raises
        ShapeError when the channels or a size do not fit, DTypeError on mixed dtypes.
        """
        return self._conv_forward(input, F.conv2d)


class ConvTranspose2d(_ConvNd):
    """Transposed 2-d convolution: weight (in_channels, out_channels/groups, kh, kw);
    forward(input, output_size=None) picks output_padding from output_size."""
    _nd = 2
    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: _Size,
                 stride: _Size = 1, padding: Union[_Size, str] = 0,
                 output_padding: _Size = 0, groups: int = 1, bias: bool = True,
                 dilation: _Size = 1, padding_mode: str = 'zeros', device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__("ConvTranspose2d", in_channels, out_channels, kernel_size, stride,
                         padding, dilation, groups, bias, padding_mode, output_padding, device,
                         dtype)

    def _output_padding(self, x, output_size):
        if output_size is None:
            return self.output_padding
        try:
            size = [int(s) for s in output_size]
        except TypeError:
            raise InvalidArgumentError(f"{self._tag}: output_size must be a sequence of ints, "
                                       f"got {output_size!r}") from None
        if len(size) == self._nd + 2 or (len(size) == self._nd + 1 and x.ndim == self._nd + 1):
            size = size[-self._nd:]
        if len(size) != self._nd:
            raise ShapeError(f"{self._tag}: output_size {tuple(output_size)} must have "
                             f"{self._nd} or {self._nd + 2} elements")
        out = []
        for j in range(self._nd):
            n = x.shape[x.ndim - self._nd + j]
            lo = ((n - 1) * self.stride[j] - 2 * self.padding[j] +
                  self.dilation[j] * (self.kernel_size[j] - 1) + 1)
            hi = lo + self.stride[j] - 1
            if not lo <= size[j] <= hi:
                raise ShapeError(f"{self._tag}: requested output_size {tuple(output_size)} is "
                                 f"not reachable from input {desc(x)} (dim {j}: {lo}..{hi})")
            out.append(size[j] - lo)
        return tuple(out)

    def forward(self, input: Tensor, output_size: Any = None) -> Tensor:
        """Transposed convolution (the gradient of conv2d with respect to its input).

        Shape: (N, C_in, H, W) or (C_in, H, W) -> (N, C_out, H_out, W_out);
        `output_size` (the last two or all dims) picks the output_padding that yields
        it.  Raises ShapeError for a size that cannot be reached.
        """
        x, _ = self._check(input)
        op = self._output_padding(x, output_size)
        for j in range(self._nd):
            n = x.shape[x.ndim - self._nd + j]
            size = ((n - 1) * self.stride[j] - 2 * self.padding[j] +
                    self.dilation[j] * (self.kernel_size[j] - 1) + op[j] + 1)
            if size < 1:
                raise ShapeError(f"{self._tag}: input {desc(x)} gives an empty output (padding "
                                 f"{self.padding} is too large)")
        try:
            return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, op,
                                      self.groups, self.dilation)
        except Error as e:
            raise renamed(self, e) from None


# ---- pooling ---------------------------------------------------------------------------------
class _Pool2d(Module):
    @property
    def _tag(self):
        return f"{type(self).__name__}(kernel_size={self.kernel_size})"

    def _check(self, input):
        x = float_input(self, input, None, (3, 4), what="(C, H, W) or (N, C, H, W)")
        k, p, d = self._k, self._p, self._d
        shape = x.shape
        for j in range(2):
            n = shape[-2 + j] + 2 * p[j]
            if n < d[j] * (k[j] - 1) + 1:
                raise ShapeError(f"{self._tag}: input {desc(x)} (padded size {n}) is smaller "
                                 f"than the kernel {k}")
        return x

    def _init(self, name, kernel_size, stride, padding, ceil_mode, dilation=1):
        self.kernel_size = kernel_size
        # stride=None or () (also [] or an empty array) means kernel_size, as PyTorch
        empty = stride is None or (isinstance(stride, (tuple, list)) and not stride)
        self.stride = kernel_size if empty else stride
        self.padding = padding
        self.ceil_mode = bool(ceil_mode)
        tag = f"{name}(kernel_size={kernel_size})"
        self._k = tuple_arg(tag, "kernel_size", kernel_size, 2)
        self._s = tuple_arg(tag, "stride", self.stride, 2)
        p = self._p = tuple_arg(tag, "padding", padding, 2, minimum=0)
        d = self._d = tuple_arg(tag, "dilation", dilation, 2)
        if any(pi * 2 > (di * (ki - 1) + 1) for pi, ki, di in zip(p, self._k, d)):
            raise InvalidArgumentError(f"{tag}: padding {padding} should be at most half of the "
                                       f"effective kernel size")


class MaxPool2d(_Pool2d):
    """2-d max pooling over kernel_size windows (stride defaults to kernel_size),
    with padding by -inf, dilation and ceil_mode as PyTorch.
    """

    def __init__(self, kernel_size: _Size, stride: Optional[_Size] = None,
                 padding: Union[_Size, str] = 0, dilation: _Size = 1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        if return_indices:
            raise InvalidArgumentError("MaxPool2d: return_indices=True is not supported")
        self.dilation = dilation
        self.return_indices = False
        self._init("MaxPool2d", kernel_size, stride, padding, ceil_mode, dilation)

    def forward(self, input: Tensor) -> Any:
        """Maximum over each window.

        Shape: (N, C, H, W) or (C, H, W) -> (N, C, H_out, W_out).  With
        return_indices=True returns (output, indices into each flattened H*W plane).
        """
        x = self._check(input)
        try:
            return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                                ceil_mode=self.ceil_mode)
        except Error as e:
            raise renamed(self, e) from None

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(_Pool2d):
    """2-d average pooling over kernel_size windows (stride defaults to kernel_size),
    with zero padding, ceil_mode, count_include_pad and divisor_override as PyTorch.
    """

    def __init__(self, kernel_size: _Size, stride: Optional[_Size] = None,
                 padding: Union[_Size, str] = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: Optional[int] = None) -> None:
        super().__init__()
        self._init("AvgPool2d", kernel_size, stride, padding, ceil_mode)
        self.count_include_pad = bool(count_include_pad)
        if divisor_override is not None:
            divisor_override = int_arg(f"AvgPool2d(kernel_size={kernel_size})",
                                       "divisor_override", divisor_override)
        self.divisor_override = divisor_override

    def forward(self, input: Tensor) -> Tensor:
        """Average over each window (padding counted unless count_include_pad=False).

        Shape: (N, C, H, W) or (C, H, W) -> (N, C, H_out, W_out).
        """
        x = self._check(input)
        try:
            return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding,
                                ceil_mode=self.ceil_mode,
                                count_include_pad=self.count_include_pad,
                                divisor_override=self.divisor_override)
        except Error as e:
            raise renamed(self, e) from None

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Average pooling to a fixed output size (an int, or a pair whose None
    entries keep the input size)."""

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        tag = f"AdaptiveAvgPool2d(output_size={output_size})"
        if isinstance(output_size, (tuple, list)):
            if len(output_size) != 2:
                raise InvalidArgumentError(f"{tag}: output_size must be an int or a pair")
            sizes = tuple(None if s is None else int_arg(tag, "output_size", s)
                          for s in output_size)
        else:
            sizes = (int_arg(tag, "output_size", output_size),) * 2
        self.output_size = output_size
        self._sizes = sizes

    @property
    def _tag(self):
        return f"AdaptiveAvgPool2d(output_size={self.output_size})"

    def forward(self, input: Tensor) -> Tensor:
        """Average pooling whose windows cover the input evenly to give output_size.

        Shape: (N, C, H, W) or (C, H, W) -> (N, C, *output_size).
        """
        x = float_input(self, input, None, (3, 4), what="(C, H, W) or (N, C, H, W)")
        try:
            return F.adaptive_avg_pool2d(x, self._sizes)
        except Error as e:
            raise renamed(self, e) from None

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
