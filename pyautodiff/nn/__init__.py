"""Neural networks: ``ad.nn.functional`` (imported as ``F``) holds every
function; the names below stay as aliases of it (``ad.nn.conv2d is
ad.nn.functional.conv2d``)."""
from . import functional
from .functional import (avg_pool1d, avg_pool2d, conv1d, conv2d, conv_transpose1d,
                         conv_transpose2d, cross_entropy, dropout, embedding, layer_norm,
                         linear, max_pool1d, max_pool2d, mse_loss, nll_loss, pad)
