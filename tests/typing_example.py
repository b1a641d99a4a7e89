"""A user's training script, type-checked with `mypy --strict` by
tests/test_typing.py (and run by it): build a model with ad.nn, train it with
Adam and a scheduler, checkpoint it, evaluate under no_grad, read gradients
from the GradStore, take a second derivative with ad.grad(create_graph=True)
and define a custom op with ad.Function.
"""
from __future__ import annotations

import os
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

import numpy as np

import pyautodiff as ad
import pyautodiff.nn.functional as F
from pyautodiff import nn


class MLP(nn.Module):
    """Two linear layers with a GELU between them."""

    def __init__(self, n_in: int, n_hidden: int, n_out: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(n_in, n_hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(n_hidden, n_out)

    def forward(self, x: ad.Tensor) -> ad.Tensor:
        # Module.__call__ returns Any (as torch's does): name the type here.
        out: ad.Tensor = self.fc2(self.act(self.fc1(x)))
        return out


class Square(ad.Function):
    """x ** 2 with a hand-written backward."""

    @staticmethod
    def forward(ctx: ad.FunctionCtx, x: ad.Tensor) -> ad.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: ad.FunctionCtx, *grads: ad.Tensor) -> ad.Tensor:
        (x,) = ctx.saved_tensors
        out: ad.Tensor = grads[0] * 2.0 * x
        return out


def second_derivative() -> float:
    """d2/dx2 of sum(x ** 3) at x = 2 is 6 * 2, through create_graph."""
    x = ad.Var.from_tensor(ad.tensor([2.0], dtype=ad.float64))
    y = (x * x * x).sum()
    (gx,) = ad.grad(y, [x], create_graph=True)
    (gxx,) = ad.grad(gx.sum(), [x])
    maybe: List[Optional[ad.Tensor]] = ad.grad(y, [x], allow_unused=True)
    assert maybe[0] is not None
    return float(gxx.item())


def custom_op() -> float:
    x = ad.Var.from_tensor(ad.tensor([3.0], dtype=ad.float64))
    y = Square.apply(x)
    grads = y.sum().backward()
    gx = grads.get(x)
    assert gx is not None and x in grads and len(grads) >= 1
    return float(gx.item())


def make_data(n: int, seed: int) -> Tuple[ad.Tensor, ad.Tensor]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    return ad.from_numpy(x), ad.tensor(y.tolist(), dtype=ad.int64)


def train(steps: int) -> List[float]:
    ad.manual_seed(0)
    model = MLP(4, 16, 2)
    opt = ad.optim.Adam(model.parameters(), lr=1e-2)
    sched = ad.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    x, y = make_data(64, seed=1)
    losses: List[float] = []
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        grads = opt.backward_step(loss)
        g_w = grads[model.fc1.weight]  # GradStore indexing: d loss / d weight
        assert g_w.shape == model.fc1.weight.shape
        sched.step()
        losses.append(float(loss.item()))
    assert sched.get_last_lr()[0] < 1e-2

    # The same model, stepped by hand from the GradStore.
    loss = F.mse_loss(model(x).softmax(-1), F.one_hot(y, 2).double().float())
    grads = loss.backward()
    opt.step(grads)

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "mlp.safetensors")
        state: Dict[str, ad.Tensor] = model.state_dict()
        ad.save(state, path, metadata={"steps": str(steps)})
        restored = MLP(4, 16, 2)
        restored.load_state_dict(ad.load(path))
        restored.eval()
        with ad.no_grad():
            out = restored(x)
            pred = out.argmax(dim=1)
        same = np.array_equal(np.asarray(pred), np.asarray(model(x).argmax(dim=1)))
        assert same, "the checkpoint did not restore the model"
    w = ad.Var.randn(4, 2, seed=3)
    w_np: np.ndarray = w.numpy()
    assert w_np.shape == (4, 2) and w.dtype is ad.float32
    return losses


def main() -> int:
    losses = train(30)
    assert second_derivative() == 12.0
    assert custom_op() == 6.0
    stats: Dict[str, int] = ad.memory_stats()
    assert stats["live_bytes"] >= 0
    print("loss %.4f -> %.4f" % (losses[0], losses[-1]))
    return 0 if losses[-1] < losses[0] else 1


if __name__ == "__main__":
    sys.exit(main())
