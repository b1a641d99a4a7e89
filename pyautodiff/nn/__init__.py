"""Neural networks, as PyTorch's torch.nn: ``ad.nn.Module`` and the layers,
``ad.nn.init``, ``ad.nn.utils`` and ``ad.nn.functional`` (imported as ``F``),
the home of every function; the function names below stay as aliases of it
(``ad.nn.conv2d is ad.nn.functional.conv2d``)."""
from . import functional
from .functional import (avg_pool1d, avg_pool2d, conv1d, conv2d, conv_transpose1d,
                         conv_transpose2d, cross_entropy, dropout, embedding, layer_norm,
                         linear, max_pool1d, max_pool2d, mse_loss, nll_loss, pad)
from .module import Module, ModuleDict, ModuleList, Parameter, Sequential
from .modules import (GELU, LSTM, AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d,
                      Conv1d, Conv2d, ConvTranspose2d, Dropout, Embedding, Flatten, Identity,
                      LayerNorm, Linear, LogSoftmax, MaxPool2d, MultiheadAttention, ReLU,
                      Sigmoid, SiLU, Softmax, Tanh)
from . import init, utils

__all__ = [
    # submodules
    "functional", "init", "utils",
    # function aliases of ad.nn.functional
    "avg_pool1d", "avg_pool2d", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d",
    "cross_entropy", "dropout", "embedding", "layer_norm", "linear", "max_pool1d",
    "max_pool2d", "mse_loss", "nll_loss", "pad",
    # modules
    "Module", "Sequential", "ModuleList", "ModuleDict", "Parameter",
    "Linear", "Conv1d", "Conv2d", "ConvTranspose2d", "Embedding", "LayerNorm", "BatchNorm1d",
    "BatchNorm2d", "Dropout", "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax",
    "LogSoftmax", "Flatten", "Identity", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
    "MultiheadAttention", "LSTM",
]
