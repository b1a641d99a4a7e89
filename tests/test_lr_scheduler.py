"""ad.optim.lr_scheduler: PyTorch's learning-rate sequences.

Always checked against closed forms worked out by hand (the schedulers
themselves use PyTorch's recursive formulas, so these agree only to rounding);
against torch.optim.lr_scheduler bit for bit when torch is importable."""
import math
from bisect import bisect_right

import numpy as np
import pytest

import pyautodiff as ad
from pyautodiff.optim import lr_scheduler as S

BASE = (0.1, 0.02)  # two param groups with different rates


def make_opt(kind="SGD", **kw):
    a, b = ad.Var([1.0]), ad.Var([2.0])
    return getattr(ad.optim, kind)([{"params": [a], "lr": BASE[0]},
                                    {"params": [b], "lr": BASE[1]}], **kw)


def run(sched_cls, steps, kind="SGD", opt_kw=None, **kw):
    opt = make_opt(kind, **(opt_kw or {}))
    sched = sched_cls(opt, **kw)
    seq = []
    for _ in range(steps):
        seq.append(sched.get_last_lr())
        sched.step()
        assert [g["lr"] for g in opt.param_groups] == sched.get_last_lr()
    seq.append(sched.get_last_lr())
    return seq, opt, sched


def run_torch(name, steps, kind="SGD", opt_kw=None, **kw):
    torch = pytest.importorskip("torch")
    a, b = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
    opt = getattr(torch.optim, kind)([{"params": [a], "lr": BASE[0]},
                                      {"params": [b], "lr": BASE[1]}], **(opt_kw or {}))
    sched = getattr(torch.optim.lr_scheduler, name)(opt, **kw)
    seq = []
    for _ in range(steps):
        seq.append(sched.get_last_lr())
        opt.step()
        sched.step()
    seq.append(sched.get_last_lr())
    return seq, opt


def cos_closed(base, e, T, eta_min):
    return eta_min + (base - eta_min) * (1 + math.cos(math.pi * e / T)) / 2


def onecycle_closed(e, total, max_lr, pct=0.3, div=25.0, final_div=1e4, anneal="cos",
                    three_phase=False):
    init = max_lr / div
    lo = init / final_div
    f = ((lambda s, t, p: t + (s - t) / 2 * (math.cos(math.pi * p) + 1)) if anneal == "cos"
         else (lambda s, t, p: s + (t - s) * p))
    up = pct * total - 1
    if three_phase:
        if e <= up:
            return f(init, max_lr, e / up)
        down = 2 * pct * total - 2
        if e <= down:
            return f(max_lr, init, (e - up) / (down - up))
        return f(init, lo, (e - down) / (total - 1 - down))
    if e <= up:
        return f(init, max_lr, e / up)
    return f(max_lr, lo, (e - up) / (total - 1 - up))


CASES = {
    "StepLR": (S.StepLR, dict(step_size=7, gamma=0.5), 40,
               lambda b, e: b * 0.5 ** (e // 7)),
    "StepLR-default": (S.StepLR, dict(step_size=3), 12, lambda b, e: b * 0.1 ** (e // 3)),
    "MultiStepLR": (S.MultiStepLR, dict(milestones=[5, 12, 12, 30], gamma=0.3), 40,
                    lambda b, e: b * 0.3 ** bisect_right([5, 12, 12, 30], e)),
    "ExponentialLR": (S.ExponentialLR, dict(gamma=0.93), 40, lambda b, e: b * 0.93 ** e),
    "CosineAnnealingLR": (S.CosineAnnealingLR, dict(T_max=10), 35,
                          lambda b, e: cos_closed(b, e, 10, 0.0)),
    "CosineAnnealingLR-eta": (S.CosineAnnealingLR, dict(T_max=13, eta_min=0.005), 40,
                              lambda b, e: cos_closed(b, e, 13, 0.005)),
    "LinearLR": (S.LinearLR, dict(), 10, lambda b, e: b * (1 / 3 + (2 / 3) * min(5, e) / 5)),
    "LinearLR-down": (S.LinearLR, dict(start_factor=1.0, end_factor=0.1, total_iters=8), 15,
                      lambda b, e: b * (1.0 - 0.9 * min(8, e) / 8)),
    "LambdaLR": (S.LambdaLR, dict(lr_lambda=lambda e: 0.95 ** e / (1 + e)), 30,
                 lambda b, e: b * 0.95 ** e / (1 + e)),
    "OneCycleLR": (S.OneCycleLR, dict(max_lr=0.5, total_steps=40), 40,
                   lambda b, e: onecycle_closed(e, 40, 0.5)),
    "OneCycleLR-linear": (S.OneCycleLR, dict(max_lr=[0.5, 0.2], epochs=5, steps_per_epoch=6,
                                             anneal_strategy="linear", pct_start=0.25,
                                             div_factor=10.0, final_div_factor=100.0), 30,
                          lambda b, e: onecycle_closed(e, 30, 0.5 if b == BASE[0] else 0.2,
                                                       pct=0.25, div=10.0, final_div=100.0,
                                                       anneal="linear")),
    "OneCycleLR-3phase": (S.OneCycleLR, dict(max_lr=0.4, total_steps=50, three_phase=True),
                          50, lambda b, e: onecycle_closed(e, 50, 0.4, three_phase=True)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sequence_matches_closed_form(case):
    cls, kw, steps, closed = CASES[case]
    seq, _, sched = run(cls, steps, **kw)
    assert sched.last_epoch == steps
    for e, lrs in enumerate(seq):
        for b, lr in zip(BASE, lrs):
            assert lr == pytest.approx(closed(b, e), rel=1e-12, abs=1e-15), (case, e)
    # the schedule really changes the rate (a constant-lr bug would pass nothing above)
    assert len({round(lr[0], 15) for lr in seq}) > 2


@pytest.mark.parametrize("case", sorted(CASES))
def test_sequence_matches_torch_bit_for_bit(case):
    cls, kw, steps, _ = CASES[case]
    seq, _, _ = run(cls, steps, **kw)
    tseq, _ = run_torch(cls.__name__, steps, **kw)
    assert seq == tseq


@pytest.mark.parametrize("kind,key", [("SGD", "momentum"), ("Adam", "betas"),
                                      ("AdamW", "betas"), ("RMSprop", "momentum")])
def test_onecycle_cycles_momentum_like_torch(kind, key):
    torch = pytest.importorskip("torch")
    opt_kw = {"momentum": 0.9} if kind == "SGD" else {}
    kw = dict(max_lr=0.3, total_steps=20, base_momentum=0.8, max_momentum=0.9)
    opt = make_opt(kind, **opt_kw)
    sched = S.OneCycleLR(opt, **kw)
    topt = getattr(torch.optim, kind)([{"params": [torch.zeros(1, requires_grad=True)],
                                        "lr": b} for b in BASE], **opt_kw)
    tsched = torch.optim.lr_scheduler.OneCycleLR(topt, **kw)
    for _ in range(19):
        assert [g[key] for g in opt.param_groups] == [g[key] for g in topt.param_groups]
        topt.step()
        tsched.step()
        sched.step()
    moms = [g[key] for g in opt.param_groups]
    assert moms == [g[key] for g in topt.param_groups]


def test_scheduler_drives_the_optimizer():
    # SGD under StepLR: w -= lr_t * g with lr_t halving every 2 steps
    w = ad.Var([1.0], dtype=ad.float64)
    opt = ad.optim.SGD([w], lr=0.1)
    sched = S.StepLR(opt, step_size=2, gamma=0.5)
    ref = 1.0
    for t in range(6):
        opt.backward_step((w * w).sum())
        ref -= 0.1 * 0.5 ** (t // 2) * 2 * ref
        sched.step()
        assert w.numpy()[0] == pytest.approx(ref, rel=1e-14)


class Warmup:
    """A picklable lr_lambda whose state travels in the state dict."""

    def __init__(self, n):
        self.n = n

    def __call__(self, e):
        return min(1.0, (e + 1) / self.n)


@pytest.mark.parametrize("case", sorted(CASES) + ["LambdaLR-object"])
def test_state_dict_round_trip_resumes(case):
    if case == "LambdaLR-object":
        cls, kw, steps = S.LambdaLR, dict(lr_lambda=Warmup(8)), 20
    else:
        cls, kw, steps, _ = CASES[case]
    full, _, _ = run(cls, steps, **kw)
    opt = make_opt()
    sched = cls(opt, **kw)
    for _ in range(steps // 2):
        sched.step()
    osd, ssd = opt.state_dict(), sched.state_dict()
    assert "optimizer" not in ssd
    if case == "LambdaLR-object":
        assert ssd["lr_lambdas"] == [{"n": 8}, {"n": 8}]
        kw = dict(lr_lambda=Warmup(3))  # its n comes back from the state dict
    opt2 = make_opt()
    sched2 = cls(opt2, **kw)
    opt2.load_state_dict(osd)
    sched2.load_state_dict(ssd)
    assert sched2.get_last_lr() == full[steps // 2]
    rest = []
    for _ in range(steps - steps // 2):
        sched2.step()
        rest.append(sched2.get_last_lr())
    assert rest == full[steps // 2 + 1:]


def test_errors():
    opt = make_opt()
    with pytest.raises(TypeError, match="is not an Optimizer"):
        S.StepLR(object(), step_size=2)
    with pytest.raises(TypeError, match="is not an Optimizer"):
        S.OneCycleLR("sgd", max_lr=0.1, total_steps=5)
    with pytest.raises(ad.InvalidArgumentError, match="Starting multiplicative factor"):
        S.LinearLR(opt, start_factor=0.0)
    with pytest.raises(ad.InvalidArgumentError, match="Ending multiplicative factor"):
        S.LinearLR(opt, end_factor=1.5)
    with pytest.raises(ad.InvalidArgumentError, match="expected 2 lr_lambdas, but got 1"):
        S.LambdaLR(opt, lr_lambda=[lambda e: 1.0])
    with pytest.raises(ad.InvalidArgumentError, match="either total_steps OR"):
        S.OneCycleLR(opt, max_lr=0.1)
    with pytest.raises(ad.InvalidArgumentError, match="positive integer total_steps"):
        S.OneCycleLR(opt, max_lr=0.1, total_steps=0)
    with pytest.raises(ad.InvalidArgumentError, match="pct_start"):
        S.OneCycleLR(opt, max_lr=0.1, total_steps=5, pct_start=1.5)
    with pytest.raises(ad.InvalidArgumentError, match="anneal_strategy"):
        S.OneCycleLR(opt, max_lr=0.1, total_steps=5, anneal_strategy="exp")
    with pytest.raises(ad.InvalidArgumentError, match="max_lr must have the same length"):
        S.OneCycleLR(opt, max_lr=[0.1, 0.2, 0.3], total_steps=5)
    with pytest.raises(KeyError, match="initial_lr"):
        S.StepLR(make_opt(), step_size=2, last_epoch=3)
    sched = S.OneCycleLR(make_opt(), max_lr=0.1, total_steps=3)
    for _ in range(3):
        sched.step()
    with pytest.raises(ad.InvalidArgumentError, match="Tried to step 4 times"):
        sched.step()
    # the constructor sets initial_lr once; a second scheduler keeps it
    opt = make_opt()
    S.ExponentialLR(opt, gamma=0.5).step()
    assert [g["initial_lr"] for g in opt.param_groups] == list(BASE)
    assert S.StepLR(opt, step_size=1).base_lrs == list(BASE)


def test_get_last_lr_is_a_copy():
    sched = S.ExponentialLR(make_opt(), gamma=0.5)
    got = sched.get_last_lr()
    got[0] = 99.0
    assert sched.get_last_lr() == list(BASE)
    np.testing.assert_allclose(sched.get_last_lr(), BASE)


def test_arguments_of_the_wrong_type_raise_when_the_scheduler_is_made():
    # fuzz_args: they were only used by the formulas, at some step(): bare
    # TypeErrors (None % 2, 0.1 * "x") or ZeroDivisionError (step_size=0,
    # T_max=0, div_factor=0)
    def opt():
        return ad.optim.SGD([ad.Var(ad.ones(2))], lr=0.1, momentum=0.9)
    for f, pat in [(lambda: S.StepLR(opt(), None), "StepLR: step_size must be an int"),
                   (lambda: S.StepLR(opt(), 0), "StepLR: step_size must be at least 1"),
                   (lambda: S.StepLR(opt(), 2, "x"), "StepLR: gamma must be a real number"),
                   (lambda: S.MultiStepLR(opt(), 1.5), "milestones must be an iterable"),
                   (lambda: S.ExponentialLR(opt(), None), "ExponentialLR: gamma"),
                   (lambda: S.CosineAnnealingLR(opt(), 0), "T_max must be at least 1"),
                   (lambda: S.LinearLR(opt(), None), "LinearLR: start_factor"),
                   (lambda: S.OneCycleLR(opt(), "", 10), "OneCycleLR: max_lr"),
                   (lambda: S.OneCycleLR(opt(), 0.1, 10, div_factor=0), "div_factor must not"),
                   (lambda: S.StepLR(opt(), 2, last_epoch=None), "last_epoch must be an int")]:
        with pytest.raises(ad.InvalidArgumentError, match=pat):
            f()
    s = S.StepLR(opt(), np.int64(2), np.float32(0.5))  # numpy numbers still work
    s.step()
    s.step()
    assert s.get_last_lr()[0] == pytest.approx(0.05)
