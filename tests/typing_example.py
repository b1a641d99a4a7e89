"""A user's training script, type-checked with `mypy --strict` by
tests/test_typing.py (and run by it): build a model with ad.nn, train it with
Adam and a scheduler, checkpoint it, evaluate under no_grad and read
gradients from the GradStore.

The call to Tensor.backward carries a `type: ignore` until it gets its
annotations (another branch owns it); mypy's warn_unused_ignores (part of
--strict) fails this script as soon as it is annotated, so the ignore cannot
outlive its reason.
"""
from __future__ import annotations

import os
import sys
import tempfile
from typing import Dict, List, Tuple

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
    grads = loss.backward()  # type: ignore[no-untyped-call]
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
    print("loss %.4f -> %.4f" % (losses[0], losses[-1]))
    return 0 if losses[-1] < losses[0] else 1


if __name__ == "__main__":
    sys.exit(main())
