"""ad.optim: PyTorch's optimizers and learning-rate schedulers over Vars.

    opt = ad.optim.Adam(model.parameters(), lr=1e-3)
    sched = ad.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
    for x, y in batches:
        opt.step(loss_fn(model(x), y).backward())   # or opt.backward_step(loss)
        sched.step()

Optimizers take Vars only (a non-leaf: TypeError) and take the GradStore that
backward() returns; a Var without a gradient there is skipped.  Each
parameter's update is one fused native in-place call that bumps its version,
with PyTorch's formulas, so float64 trajectories match torch.optim's.
"""
from .optimizer import Optimizer
from .sgd import SGD
from .adam import Adam, AdamW
from .rmsprop import RMSprop
from . import lr_scheduler

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "lr_scheduler"]
