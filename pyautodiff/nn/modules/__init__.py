"""The layers of ad.nn (PyTorch's torch.nn layer classes)."""
from .attention import MultiheadAttention, NonDynamicallyQuantizableLinear
from .basic import (GELU, Dropout, Embedding, Flatten, Identity, Linear, LogSoftmax, ReLU,
                    Sigmoid, SiLU, Softmax, Tanh)
from .conv import AdaptiveAvgPool2d, AvgPool2d, Conv1d, Conv2d, ConvTranspose2d, MaxPool2d
from .norm import BatchNorm1d, BatchNorm2d, LayerNorm
from .rnn import LSTM
