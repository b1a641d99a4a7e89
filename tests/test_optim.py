"""ad.optim: Vars only, one fused in-place native update per parameter that
bumps the version, and PyTorch's trajectories.

The oracle that always runs is a numpy transcription of torch.optim's
single-tensor formulas (same operations in the same order); torch.optim
itself is a second oracle when it is importable.  Gradients come from a
numpy function of each backend's own current parameters, so the three runs
stay in lockstep only if every update is right."""
import math

import numpy as np
import pytest

import pyautodiff as ad
from pyautodiff._lib import ffi, lib

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None


# ---- numpy transcription of torch.optim ------------------------------------------------
def lerp(s, e, w):
    return s + w * (e - s) if abs(w) < 0.5 else e - (e - s) * (1 - w)


def ref_sgd(p, g, grp, st):
    lr, mom, damp, wd = grp["lr"], grp["momentum"], grp["dampening"], grp["weight_decay"]
    if wd != 0:
        g = g + wd * p
    if mom != 0:
        if "momentum_buffer" not in st:
            st["momentum_buffer"] = g.copy()
        else:
            st["momentum_buffer"] = st["momentum_buffer"] * mom + (1 - damp) * g
        buf = st["momentum_buffer"]
        g = g + mom * buf if grp["nesterov"] else buf
    return p + (-lr) * g


def ref_adam(p, g, grp, st):
    lr, (b1, b2), eps, wd = grp["lr"], grp["betas"], grp["eps"], grp["weight_decay"]
    if not st:
        st.update(step=0, exp_avg=np.zeros_like(p), exp_avg_sq=np.zeros_like(p))
        if grp["amsgrad"]:
            st["max_exp_avg_sq"] = np.zeros_like(p)
    st["step"] += 1
    t = st["step"]
    if wd != 0:
        if grp["decoupled_weight_decay"]:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
    st["exp_avg"] = lerp(st["exp_avg"], g, 1 - b1)
    st["exp_avg_sq"] = st["exp_avg_sq"] * b2 + (1 - b2) * g * g
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
    step_size, bc2_sqrt = lr / bc1, bc2 ** 0.5
    v = st["exp_avg_sq"]
    if grp["amsgrad"]:
        st["max_exp_avg_sq"] = v = np.maximum(st["max_exp_avg_sq"], v)
    denom = np.sqrt(v) / bc2_sqrt + eps
    return p + (-step_size) * st["exp_avg"] / denom


def ref_rmsprop(p, g, grp, st):
    lr, alpha, eps, wd, mom = (grp[k] for k in ("lr", "alpha", "eps", "weight_decay",
                                                 "momentum"))
    if not st:
        st.update(step=0, square_avg=np.zeros_like(p))
        if mom > 0:
            st["momentum_buffer"] = np.zeros_like(p)
        if grp["centered"]:
            st["grad_avg"] = np.zeros_like(p)
    st["step"] += 1
    if wd != 0:
        g = g + wd * p
    st["square_avg"] = st["square_avg"] * alpha + (1 - alpha) * g * g
    if grp["centered"]:
        st["grad_avg"] = lerp(st["grad_avg"], g, 1 - alpha)
        avg = np.sqrt(st["square_avg"] + (-1) * st["grad_avg"] * st["grad_avg"])
    else:
        avg = np.sqrt(st["square_avg"])
    avg = avg + eps
    if mom > 0:
        st["momentum_buffer"] = st["momentum_buffer"] * mom + g / avg
        return p + (-lr) * st["momentum_buffer"]
    return p + (-lr) * g / avg


DEFAULTS = {
    "SGD": dict(lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False,
                maximize=False),
    "Adam": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False,
                 maximize=False, decoupled_weight_decay=False),
    "AdamW": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                  maximize=False, decoupled_weight_decay=True),
    "RMSprop": dict(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                    centered=False, maximize=False),
}
REF = {"SGD": ref_sgd, "Adam": ref_adam, "AdamW": ref_adam, "RMSprop": ref_rmsprop}


class RefOptimizer:
    def __init__(self, kind, params, groups_opts, opts):
        self.kind, self.params = kind, params
        base = dict(DEFAULTS[kind], **opts)
        self.groups = [dict(base, **go, names=names) for names, go in groups_opts]
        self.state = {}

    def step(self, grads):
        for grp in self.groups:
            for n in grp["names"]:
                if n in grads:  # maximize: the gradient's negation, first (torch's order)
                    g = -grads[n] if grp["maximize"] else grads[n]
                    self.params[n] = REF[self.kind](self.params[n], g, grp,
                                                    self.state.setdefault(n, {}))


# ---- the problem ------------------------------------------------------------------------
RNG = np.random.default_rng(7)
A = RNG.standard_normal((6, 3))
Y = RNG.standard_normal((6, 4))
INIT = {"w": RNG.standard_normal((3, 4)), "b": RNG.standard_normal(4)}


def grad_fn(params):
    """A smooth, non-quadratic gradient field (numpy, float64)."""
    w, b = params["w"], params["b"]
    r = A @ w + b - Y
    return {"w": A.T @ r / 6 + 0.1 * w ** 3, "b": r.mean(0) + 0.05 * np.sin(b)}


def run_trajectory(kind, opts, steps=50, groups=(("w", "b"),), group_opts=None,
                   skip=lambda step, name: False, lr_at=None, use_torch=False, dtype="float64"):
    """Runs ad (and the numpy reference, and torch when asked) in lockstep;
    returns the ad params' history and the reference's."""
    group_opts = group_opts or [{} for _ in groups]
    ad_params = {n: ad.Var(v, dtype=dtype) for n, v in INIT.items()}
    ad_opt = getattr(ad.optim, kind)(
        [dict(params=[ad_params[n] for n in names], **go) for names, go in
         zip(groups, group_opts)], **opts)
    ref = RefOptimizer(kind, {n: v.astype(dtype) for n, v in INIT.items()},
                       list(zip(groups, group_opts)), opts)
    if use_torch:
        t_params = {n: torch.tensor(v, requires_grad=True) for n, v in INIT.items()}
        t_opts = {k: v for k, v in opts.items() if k != "decoupled_weight_decay"}
        t_opt = getattr(torch.optim, kind)(
            [dict(params=[t_params[n] for n in names], **go) for names, go in
             zip(groups, group_opts)], **t_opts)
    hist_ad, hist_ref, hist_t = [], [], []
    for step in range(steps):
        if lr_at is not None and lr_at(step) is not None:
            for o in (ad_opt, ref) + ((t_opt,) if use_torch else ()):
                (o.param_groups if o is not ref else o.groups)[0]["lr"] = lr_at(step)
        live = [n for n in INIT if not skip(step, n)]
        store = ad.GradStore()
        g_ad = grad_fn({n: p.numpy() for n, p in ad_params.items()})
        for n in live:
            store.insert(ad_params[n], ad.tensor(g_ad[n], dtype=dtype))
        ad_opt.step(store)
        g_ref = grad_fn(ref.params)
        ref.step({n: g_ref[n].astype(dtype) for n in live})
        hist_ad.append({n: p.numpy().copy() for n, p in ad_params.items()})
        hist_ref.append({n: v.copy() for n, v in ref.params.items()})
        if use_torch:
            g_t = grad_fn({n: p.detach().numpy() for n, p in t_params.items()})
            for n, p in t_params.items():
                p.grad = torch.from_numpy(g_t[n]) if n in live else None
            t_opt.step()
            hist_t.append({n: p.detach().numpy().copy() for n, p in t_params.items()})
    return hist_ad, hist_ref, hist_t


def assert_same(h1, h2, rtol=None, atol=0.0):
    """rtol None: bit for bit."""
    assert len(h1) == len(h2)
    for i, (a, b) in enumerate(zip(h1, h2)):
        for n in a:
            if rtol is None:
                np.testing.assert_array_equal(a[n], b[n], err_msg=f"step {i}, parameter {n}")
            else:
                np.testing.assert_allclose(a[n], b[n], rtol=rtol, atol=atol,
                                           err_msg=f"step {i}, parameter {n}")


CONFIGS = [
    ("SGD", dict(lr=0.05)),
    ("SGD", dict(lr=0.05, weight_decay=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.02)),
    ("Adam", dict(lr=0.05)),
    ("Adam", dict(lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)),
    ("Adam", dict(lr=0.05, amsgrad=True, weight_decay=0.01)),
    ("Adam", dict(lr=0.05, betas=(0.6, 0.9))),  # lerp's other branch (weight > 0.5)
    ("AdamW", dict(lr=0.05)),
    ("AdamW", dict(lr=0.05, weight_decay=0.3, amsgrad=True)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, momentum=0.9)),
    ("RMSprop", dict(lr=0.01, centered=True)),
    ("RMSprop", dict(lr=0.005, centered=True, weight_decay=0.01, alpha=0.3)),  # lerp w > 0.5
    ("RMSprop", dict(lr=0.005, centered=True, momentum=0.5, weight_decay=0.01)),
    # maximize: climbs the gradient (read as -grad before the decay and the moments)
    ("SGD", dict(lr=0.01, momentum=0.5, weight_decay=2.0, maximize=True)),
    ("Adam", dict(lr=0.01, weight_decay=0.5, amsgrad=True, maximize=True)),
    ("AdamW", dict(lr=0.01, weight_decay=0.5, maximize=True)),
    ("RMSprop", dict(lr=0.002, centered=True, momentum=0.5, weight_decay=0.5, maximize=True)),
]
IDS = [f"{k}-{'-'.join(f'{a}={b}' for a, b in o.items())}" for k, o in CONFIGS]


@pytest.mark.parametrize("kind,opts", CONFIGS, ids=IDS)
def test_trajectory_matches_numpy_transcription(kind, opts):
    hist_ad, hist_ref, _ = run_trajectory(kind, opts)
    # the same operations in the same order, none fused: the same bits
    assert_same(hist_ad, hist_ref)
    # the parameters moved (a no-op optimizer would pass nothing above)
    assert np.abs(hist_ad[-1]["w"] - INIT["w"]).max() > 1e-2


@pytest.mark.parametrize("kind,opts", CONFIGS, ids=IDS)
def test_trajectory_matches_torch(kind, opts):
    # torch's vectorised add/lerp kernels fuse multiply-adds (FMA), so its
    # last bits differ; 1e-10 over 50 steps is far below any formula error
    pytest.importorskip("torch")
    hist_ad, _, hist_t = run_trajectory(kind, opts, use_torch=True)
    assert_same(hist_ad, hist_t, rtol=1e-10, atol=1e-12)


SCENARIOS = {
    # two groups with different hyper-parameters
    "groups": dict(groups=(("w",), ("b",)), group_opts=[{"lr": 0.02}, {"lr": 0.1}]),
    # lr changed between steps through param_groups
    "lr_change": dict(lr_at=lambda s: {10: 0.2, 30: 0.003}.get(s)),
    # b has no gradient on every third step: its state (step count) must not advance
    "skip": dict(skip=lambda s, n: n == "b" and s % 3 == 0),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("kind,opts", [("SGD", dict(lr=0.05, momentum=0.9)),
                                       ("Adam", dict(lr=0.05, amsgrad=True)),
                                       ("AdamW", dict(lr=0.05)),
                                       ("RMSprop", dict(lr=0.01, centered=True, momentum=0.3))],
                         ids=["SGD", "Adam", "AdamW", "RMSprop"])
def test_groups_lr_changes_and_skips(kind, opts, scenario):
    use_torch = torch is not None
    hist_ad, hist_ref, hist_t = run_trajectory(kind, opts, use_torch=use_torch,
                                               **SCENARIOS[scenario])
    assert_same(hist_ad, hist_ref)
    if use_torch:
        assert_same(hist_ad, hist_t, rtol=1e-10, atol=1e-12)


def test_skipped_param_keeps_its_own_step_count():
    w, b = ad.Var([1.0, 2.0], dtype=ad.float64), ad.Var([3.0], dtype=ad.float64)
    opt = ad.optim.Adam([w, b], lr=0.1)
    for i in range(5):
        store = ad.GradStore()
        store.insert(w, ad.tensor([1.0, 1.0], dtype=ad.float64))
        if i % 2:
            store.insert(b, ad.tensor([1.0], dtype=ad.float64))
        opt.step(store)
    sd = opt.state_dict()["state"]
    assert float(sd[0]["step"]) == 5.0 and float(sd[1]["step"]) == 2.0
    # a Var that never had a gradient has no state at all, as in PyTorch
    c = ad.Var([0.0])
    opt2 = ad.optim.SGD([c, w], lr=0.1, momentum=0.9)
    store = ad.GradStore()
    store.insert(w, ad.tensor([1.0, 1.0], dtype=ad.float64))
    opt2.step(store)
    assert list(opt2.state_dict()["state"]) == [1]
    assert c.version == 0 and c.numpy()[0] == 0.0


@pytest.mark.parametrize("kind,opts", [c for c in CONFIGS if c[1].get("momentum")
                                       or c[0] != "SGD"],
                         ids=[i for i, c in zip(IDS, CONFIGS) if c[1].get("momentum")
                              or c[0] != "SGD"])
def test_state_dict_round_trip_resumes_exactly(kind, opts):
    full, _, _ = run_trajectory(kind, opts, steps=30)
    params = {n: ad.Var(v) for n, v in INIT.items()}
    opt = getattr(ad.optim, kind)([params["w"], params["b"]], **opts)

    def advance(opt, params, n):
        for _ in range(n):
            g = grad_fn({k: p.numpy() for k, p in params.items()})
            store = ad.GradStore()
            for k, p in params.items():
                store.insert(p, ad.tensor(g[k], dtype=ad.float64))
            opt.step(store)

    advance(opt, params, 12)
    sd = opt.state_dict()
    snapshot = {k: {n: np.array(t) for n, t in s.items()} for k, s in sd["state"].items()}
    advance(opt, params, 1)
    # the state dict holds copies: a later step does not change it
    for k, s in sd["state"].items():
        for n, t in s.items():
            np.testing.assert_array_equal(np.array(t), snapshot[k][n])
    # a fresh optimizer over fresh Vars holding the step-12 values resumes the run
    params2 = {n: ad.Var(full[11][n]) for n in INIT}
    opt2 = getattr(ad.optim, kind)([params2["w"], params2["b"]], lr=123.0)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == opts["lr"]
    assert opt2.param_groups[0]["params"][0] is params2["w"]
    advance(opt2, params2, 18)
    for n in INIT:
        np.testing.assert_array_equal(params2[n].numpy(), full[-1][n])
    # and the dict survives its own round trip unchanged
    sd2 = opt2.state_dict()
    assert sd2["param_groups"] == opt.state_dict()["param_groups"]


@pytest.mark.parametrize("kind,opts", [("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
                                       ("Adam", dict(lr=0.05, amsgrad=True)),
                                       ("AdamW", dict(lr=0.05)),
                                       ("RMSprop", dict(lr=0.01, centered=True,
                                                        momentum=0.5))],
                         ids=["SGD", "Adam", "AdamW", "RMSprop"])
def test_loads_a_torch_state_dict(kind, opts):
    torch = pytest.importorskip("torch")
    tp = [torch.tensor(INIT["w"], requires_grad=True), torch.tensor(INIT["b"],
                                                                    requires_grad=True)]
    topt = getattr(torch.optim, kind)(tp, **opts)

    def tstep():
        g = grad_fn({"w": tp[0].detach().numpy(), "b": tp[1].detach().numpy()})
        tp[0].grad, tp[1].grad = torch.from_numpy(g["w"]), torch.from_numpy(g["b"])
        topt.step()

    for _ in range(10):
        tstep()
    tsd = topt.state_dict()
    sd = {"state": {k: {n: (v.numpy() if isinstance(v, torch.Tensor) else v)
                        for n, v in s.items()} for k, s in tsd["state"].items()},
          "param_groups": tsd["param_groups"]}
    params = [ad.Var(p.detach().numpy().copy()) for p in tp]
    opt = getattr(ad.optim, kind)(params, **opts)
    opt.load_state_dict(sd)
    for _ in range(10):
        tstep()
        g = grad_fn({"w": params[0].numpy(), "b": params[1].numpy()})
        store = ad.GradStore()
        store.insert(params[0], ad.tensor(g["w"], dtype=ad.float64))
        store.insert(params[1], ad.tensor(g["b"], dtype=ad.float64))
        opt.step(store)
    for p, q in zip(params, tp):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-10, atol=1e-12)


# ---- semantics ----------------------------------------------------------------------------
def test_sgd_takes_vars_only():
    # PyTorch: ValueError "can't optimize a non-leaf Tensor"; candle: compile error
    w = ad.Var.ones(2) * 0.5
    with pytest.raises(TypeError, match="Vars only"):
        ad.optim.SGD([w], lr=0.1)
    v = ad.Var.ones(2)
    for cls in (ad.optim.Adam, ad.optim.AdamW, ad.optim.RMSprop):
        with pytest.raises(TypeError, match="Vars only.*group 1"):
            cls([{"params": [v]}, {"params": [ad.ones(2)]}])
    with pytest.raises(TypeError, match="iterable of Vars or dicts"):
        ad.optim.SGD(v, lr=0.1)
    with pytest.raises(TypeError, match="ordered collections"):
        ad.optim.SGD({v}, lr=0.1)


def test_sgd_step_in_place_and_versions():
    w = ad.Var([1.0, 2.0])
    b = ad.Var.zeros(1)
    opt = ad.optim.SGD([w, b], lr=0.1)
    loss = ((w * ad.tensor([10.0, 20.0])).sum() + b.sum())
    v0, id0 = w.version, w.id
    opt.step(loss.backward())
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(b.numpy(), [-0.1], atol=1e-7)
    assert w.version == v0 + 1 and w.id == id0
    stale = (w * w).sum()  # saves w's current value
    opt.step(stale.backward())  # backward reads it before the update: fine
    with pytest.raises(ad.GraphError):  # the update changed what stale's graph saved
        stale.backward()


def test_sgd_weight_decay_sign():
    # zero gradient: only the decay acts, pulling w toward 0 (w -= lr * wd * w)
    w = ad.Var([2.0, -4.0], dtype=ad.float64)
    opt = ad.optim.SGD([w], lr=0.5, weight_decay=0.1)
    store = ad.GradStore()
    store.insert(w, ad.zeros(2, dtype=ad.float64))
    opt.step(store)
    np.testing.assert_allclose(w.numpy(), [2.0 * 0.95, -4.0 * 0.95], rtol=1e-15)
    # with a gradient: w - lr * (g + wd * w)
    store = ad.GradStore()
    store.insert(w, ad.tensor([1.0, 1.0], dtype=ad.float64))
    opt.step(store)
    np.testing.assert_allclose(w.numpy(), [1.9 - 0.5 * (1 + 0.19), -3.8 - 0.5 * (1 - 0.38)],
                               rtol=1e-15)


def test_adam_weight_decay_coupled_vs_decoupled():
    # one step from w=2 with g=0: Adam's L2 term goes through the moments
    # (the step is lr in size), AdamW's decay multiplies w directly
    def one(cls):
        w = ad.Var([2.0], dtype=ad.float64)
        store = ad.GradStore()
        store.insert(w, ad.zeros(1, dtype=ad.float64))
        cls([w], lr=0.1, weight_decay=0.5).step(store)
        return w.numpy()[0]

    assert one(ad.optim.Adam) == pytest.approx(2.0 - 0.1, rel=1e-7)
    assert one(ad.optim.AdamW) == pytest.approx(2.0 * (1 - 0.1 * 0.5), rel=1e-15)


def test_sgd_momentum_matches_reference():
    w = ad.Var([1.0, -1.0], dtype=ad.float64)
    opt = ad.optim.SGD([w], lr=0.1, momentum=0.9)
    ref, buf = np.array([1.0, -1.0]), None
    for _ in range(5):
        opt.backward_step((w * w).sum())
        g = 2 * ref
        buf = g if buf is None else 0.9 * buf + g
        ref = ref - 0.1 * buf
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-12)


def test_backward_step_returns_the_store():
    w = ad.Var([3.0])
    opt = ad.optim.Adam([w], lr=0.5)
    grads = opt.backward_step((w * w).sum())
    assert isinstance(grads, ad.GradStore) and grads[w].numpy()[0] == 6.0
    np.testing.assert_allclose(w.numpy(), [2.5], rtol=1e-6)
    with pytest.raises(TypeError, match="backward_step takes the loss"):
        opt.backward_step(grads)


def test_step_says_what_it_takes():
    w = ad.Var([3.0])
    loss = (w * w).sum()
    for opt in (ad.optim.SGD([w], lr=0.1), ad.optim.Adam([w]), ad.optim.AdamW([w]),
                ad.optim.RMSprop([w])):
        name = type(opt).__name__
        with pytest.raises(TypeError, match=rf"{name}\.step takes the GradStore .*got a Tensor"):
            opt.step(loss)
        with pytest.raises(TypeError, match=rf"{name}\.step takes the GradStore .*got nothing"):
            opt.step()
        with pytest.raises(TypeError, match="got a dict"):
            opt.step({w: ad.ones(1)})
    assert w.version == 0
    assert not hasattr(ad.optim.SGD([w], lr=0.1), "zero_grad")


@pytest.mark.parametrize("make,match", [
    (lambda w: ad.optim.SGD([w], lr=-0.1), "SGD: Invalid learning rate: -0.1"),
    (lambda w: ad.optim.SGD([w], lr=0.1, momentum=-1), "Invalid momentum value: -1"),
    (lambda w: ad.optim.SGD([w], lr=0.1, weight_decay=-1), "Invalid weight_decay value: -1"),
    (lambda w: ad.optim.SGD([w], lr=0.1, nesterov=True), "Nesterov momentum requires"),
    (lambda w: ad.optim.SGD([w], lr=0.1, momentum=0.9, dampening=0.1, nesterov=True),
     "Nesterov momentum requires"),
    (lambda w: ad.optim.SGD([w], lr=float("nan")), "Invalid learning rate: nan"),
    (lambda w: ad.optim.Adam([w], lr=-1e-3), "Adam: Invalid learning rate"),
    (lambda w: ad.optim.Adam([w], eps=-1.0), "Invalid epsilon value: -1.0"),
    (lambda w: ad.optim.Adam([w], betas=(1.0, 0.999)), "Invalid beta parameter at index 0"),
    (lambda w: ad.optim.Adam([w], betas=(0.9, -0.1)), "Invalid beta parameter at index 1"),
    (lambda w: ad.optim.Adam([w], betas=(0.9,)), "betas must be two numbers"),
    (lambda w: ad.optim.AdamW([w], weight_decay=-0.1), "AdamW: Invalid weight_decay"),
    (lambda w: ad.optim.RMSprop([w], alpha=-0.1), "RMSprop: Invalid alpha value"),
    (lambda w: ad.optim.RMSprop([w], momentum=-0.1), "RMSprop: Invalid momentum value"),
    (lambda w: ad.optim.RMSprop([w], eps=-0.1), "RMSprop: Invalid epsilon value"),
    (lambda w: ad.optim.Adam([{"params": [w], "lr": -2.0}]), "Invalid learning rate: -2.0"),
    (lambda w: ad.optim.Adam([]), "empty parameter list"),
    (lambda w: ad.optim.Adam([w, w]), "contains a parameter twice"),
    (lambda w: ad.optim.Adam([{"params": [w]}, {"params": [w]}]), "more than one parameter"),
])
def test_invalid_arguments(make, match):
    w = ad.Var([1.0])
    with pytest.raises(ad.InvalidArgumentError, match=match):
        make(w)


def test_defaults_and_argument_order_follow_torch():
    w = ad.Var([1.0])
    assert ad.optim.SGD([w]).defaults == DEFAULTS["SGD"]
    assert ad.optim.Adam([w]).defaults == DEFAULTS["Adam"]
    assert ad.optim.AdamW([w]).defaults == DEFAULTS["AdamW"]
    assert ad.optim.RMSprop([w]).defaults == DEFAULTS["RMSprop"]
    # positional order: SGD(params, lr, momentum, dampening, weight_decay, nesterov)
    assert ad.optim.SGD([w], 0.1, 0.9, 0.0, 0.01, True).param_groups[0]["nesterov"] is True
    g = ad.optim.RMSprop([w], 0.1, 0.9, 1e-6, 0.01, 0.5, True).param_groups[0]
    assert (g["alpha"], g["eps"], g["weight_decay"], g["momentum"], g["centered"]) == \
        (0.9, 1e-6, 0.01, 0.5, True)
    g = ad.optim.Adam([w], 0.1, (0.5, 0.6), 1e-6, 0.01, True).param_groups[0]
    assert (g["betas"], g["eps"], g["weight_decay"], g["amsgrad"]) == ((0.5, 0.6), 1e-6, 0.01,
                                                                       True)


def test_add_param_group_and_repr():
    w, b = ad.Var([1.0]), ad.Var([2.0])
    opt = ad.optim.SGD([w], lr=0.1, momentum=0.5)
    opt.add_param_group({"params": b, "lr": 0.01})
    assert opt.param_groups[1]["params"] == [b] and opt.param_groups[1]["momentum"] == 0.5
    assert "Parameter Group 1" in repr(opt) and "lr: 0.01" in repr(opt)
    with pytest.raises(ad.InvalidArgumentError, match="more than one"):
        opt.add_param_group({"params": [w]})


def test_load_state_dict_errors_change_nothing():
    w, b = ad.Var([1.0, 2.0], dtype=ad.float64), ad.Var([3.0], dtype=ad.float64)
    opt = ad.optim.Adam([w, b], lr=0.1)
    opt.backward_step((w * w).sum() + (b * b).sum())
    good = opt.state_dict()
    before = repr(opt), {k: {n: np.array(t) for n, t in s.items()}
                         for k, s in good["state"].items()}

    def bad(change):
        sd = opt.state_dict()
        change(sd)
        return sd

    cases = [
        (bad(lambda sd: sd["param_groups"].append(dict(sd["param_groups"][0]))),
         ad.InvalidArgumentError, "2 parameter groups"),
        (bad(lambda sd: sd["param_groups"][0].update(params=[0])), ad.InvalidArgumentError,
         "has 1 parameters"),
        (bad(lambda sd: sd["state"][1].update(exp_avg=ad.zeros(2))), ad.ShapeError,
         r"exp_avg has shape \(2,\)"),
        (bad(lambda sd: sd["state"][0].pop("exp_avg_sq")), ad.InvalidArgumentError,
         "lacks exp_avg_sq"),
        (bad(lambda sd: sd["state"][0].update(bogus=ad.zeros(2))), ad.InvalidArgumentError,
         "unknown state 'bogus'"),
        (bad(lambda sd: sd["state"].update({5: {}})), ad.InvalidArgumentError, "parameter 5"),
        (bad(lambda sd: sd["param_groups"][0].update(lr=-1.0)), ad.InvalidArgumentError,
         "Invalid learning rate"),
        ({"state": {}}, ad.InvalidArgumentError, "'param_groups'"),
    ]
    for sd, exc, match in cases:
        with pytest.raises(exc, match=match):
            opt.load_state_dict(sd)
    assert repr(opt) == before[0]
    after = {k: {n: np.array(t) for n, t in s.items()}
             for k, s in opt.state_dict()["state"].items()}
    for k in before[1]:
        for n in before[1][k]:
            np.testing.assert_array_equal(after[k][n], before[1][k][n])


def test_float32_trajectories_stay_float32():
    for kind, opts in CONFIGS:
        hist_ad, hist_ref, _ = run_trajectory(kind, opts, steps=20, dtype="float32")
        assert hist_ad[-1]["w"].dtype == np.float32
        assert_same(hist_ad, hist_ref, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_large_parameters_split_over_threads(threads):
    # above the native parallel threshold; the result must not depend on the split
    n = 300_001
    rng = np.random.default_rng(3)
    w0, g = rng.standard_normal(n), rng.standard_normal(n)
    prev = ad.get_num_threads()
    ad.set_num_threads(threads)
    try:
        for kind, opts in [("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
                           ("Adam", dict(lr=0.1, amsgrad=True)),
                           ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5))]:
            w = ad.Var(w0)
            opt = getattr(ad.optim, kind)([w], **opts)
            ref = RefOptimizer(kind, {"w": w0.copy()}, [(("w",), {})], opts)
            for k in range(3):
                store = ad.GradStore()
                store.insert(w, ad.tensor(g * (k + 1)))
                opt.step(store)
                ref.step({"w": g * (k + 1)})
            np.testing.assert_array_equal(w.numpy(), ref.params["w"])
    finally:
        ad.set_num_threads(prev)


def test_gradient_that_views_the_parameter():
    # a gradient viewing the Var's own storage is read before the write
    w = ad.Var([1.0, 2.0, 3.0, 4.0], dtype=ad.float64)
    store = ad.GradStore()
    store.insert(w, w.as_detached_tensor()[::-1])
    ad.optim.SGD([w], lr=1.0).step(store)
    np.testing.assert_array_equal(w.numpy(), [-3.0, -1.0, 1.0, 3.0])
    w = ad.Var([1.0, 2.0, 3.0, 4.0], dtype=ad.float64)
    store = ad.GradStore()
    store.insert(w, w.as_detached_tensor())
    ad.optim.Adam([w], lr=0.5).step(store)
    np.testing.assert_allclose(w.numpy(), [0.5, 1.5, 2.5, 3.5], rtol=1e-7)


# ---- the native ABI ---------------------------------------------------------------------
def test_axpy_errors():
    w = ad.Var.zeros((2, 3))
    assert lib.ad_var_axpy(w._h, 1.0, ad.ones(3)._h) == 0  # broadcast update
    np.testing.assert_allclose(w.numpy(), np.ones((2, 3)))
    assert lib.ad_var_axpy(w._h, 1.0, ad.ones(4)._h) == lib.AD_ERR_SHAPE
    assert lib.ad_var_axpy(w._h, 1.0, ad.ones(3, dtype=ad.float64)._h) == lib.AD_ERR_DTYPE
    assert lib.ad_var_axpy(ad.ones(3)._h, 1.0, ad.ones(3)._h) == lib.AD_ERR_GRAPH
    assert lib.ad_var_axpy(ffi.NULL, 1.0, ad.ones(3)._h) == lib.AD_ERR_VALUE
    assert lib.ad_var_axpy(w._h, 1.0, ffi.NULL) == lib.AD_ERR_VALUE


def test_axpy_update_viewing_the_var_is_copied_first():
    # issue 10.8: read while written, this gave [-3, -1, 4, 7]
    w = ad.Var([1.0, 2.0, 3.0, 4.0])
    v0 = w.version
    assert lib.ad_var_axpy(w._h, -1.0, w.as_detached_tensor()[::-1]._h) == 0
    np.testing.assert_array_equal(w.numpy(), [-3.0, -1.0, 1.0, 3.0])
    assert w.version == v0 + 1
    # a broadcast view of the Var's first row, added to every row
    w = ad.Var([[1.0, 2.0], [3.0, 4.0]])
    assert lib.ad_var_axpy(w._h, 1.0, w.as_detached_tensor()[0]._h) == 0
    np.testing.assert_array_equal(w.numpy(), [[2.0, 4.0], [4.0, 6.0]])


def _msg():
    return ffi.string(lib.ad_last_error()).decode()


def test_native_optimizer_argument_checks():
    w = ad.Var([1.0, 2.0], dtype=ad.float64)
    g = ad.ones(2, dtype=ad.float64)
    m, v = ad.zeros(2, dtype=ad.float64), ad.zeros(2, dtype=ad.float64)
    N = ffi.NULL

    def adam(var=w, grad=g, a=m, b=v, c=N, step=1, lr=0.1):
        h = lambda t: t if t is N else t._h  # noqa: E731
        return lib.ad_optim_adam(h(var), h(grad), h(a), h(b), h(c), step, lr, 0.9, 0.999,
                                 1e-8, 0.0, 0)

    assert adam() == 0
    assert adam(var=N) == lib.AD_ERR_VALUE and "var is NULL" in _msg()
    assert adam(grad=N) == lib.AD_ERR_VALUE and "grad is NULL" in _msg()
    assert adam(a=N) == lib.AD_ERR_VALUE and "exp_avg is NULL" in _msg()
    assert adam(var=ad.ones(2, dtype=ad.float64)) == lib.AD_ERR_GRAPH
    assert "not a variable" in _msg()
    assert adam(grad=ad.ones(3, dtype=ad.float64)) == lib.AD_ERR_SHAPE
    assert "optim_adam: grad float64 (3,)" in _msg() and "parameter float64 (2,)" in _msg()
    assert adam(grad=ad.ones(2)) == lib.AD_ERR_DTYPE and "grad float32 (2,)" in _msg()
    assert adam(b=ad.zeros(2)) == lib.AD_ERR_DTYPE and "exp_avg_sq float32" in _msg()
    assert adam(b=ad.zeros(3, dtype=ad.float64)) == lib.AD_ERR_SHAPE
    assert adam(b=m) == lib.AD_ERR_VALUE and "exp_avg and exp_avg_sq share" in _msg()
    assert adam(a=w.as_detached_tensor()) == lib.AD_ERR_VALUE
    assert "shares its storage with the parameter" in _msg()
    assert adam(a=ad.Var.zeros(2, dtype=ad.float64)) == lib.AD_ERR_VALUE
    assert "is a variable" in _msg()
    strided = ad.zeros(4, dtype=ad.float64)[::2]
    assert adam(a=strided) == lib.AD_ERR_VALUE and "not contiguous" in _msg()
    assert adam(step=0) == lib.AD_ERR_VALUE and "step 0" in _msg()
    assert adam(lr=float("inf")) == lib.AD_ERR_VALUE and "lr is inf" in _msg()
    wi = ad.Var([[1.0, 2.0], [3.0, 4.0]], dtype=ad.float64)
    gi = ad.ones((2, 2), dtype=ad.float64)
    assert lib.ad_optim_sgd(wi._h, gi._h, N, 0.1, 0.0, 0.0, 0.0, 0, 0) == 0
    assert lib.ad_optim_sgd(wi._h, gi._h, N, 0.1, 0.9, 0.0, 0.0, 0, 0) == lib.AD_ERR_VALUE
    assert "needs a momentum_buf" in _msg()
    assert lib.ad_optim_rmsprop(wi._h, gi._h, N, N, N, 0.1, 0.9, 1e-8, 0, 0) == lib.AD_ERR_VALUE
    assert "square_avg is NULL" in _msg()
    sq = ad.zeros((2, 2), dtype=ad.float64)
    assert lib.ad_optim_rmsprop(wi._h, gi._h, sq._h, N, N, 0.1, 0.9, 1e-8, 0, 0.5) == \
        lib.AD_ERR_VALUE and "needs a momentum_buf" in _msg()
    # a failed call writes nothing
    assert w.version == 1 and wi.version == 1
    np.testing.assert_array_equal(sq.numpy(), 0.0)


def test_native_update_bumps_every_written_version():
    w = ad.Var([1.0, 2.0], dtype=ad.float64)
    g = ad.ones(2, dtype=ad.float64)
    m, v, vmax = (ad.zeros(2, dtype=ad.float64) for _ in range(3))
    before = [t.version for t in (w, m, v, vmax, g)]
    assert lib.ad_optim_adam(w._h, g._h, m._h, v._h, vmax._h, 1, 0.1, 0.9, 0.999, 1e-8, 0.0,
                             0) == 0
    after = [t.version for t in (w, m, v, vmax, g)]
    assert [a - b for a, b in zip(after, before)] == [1, 1, 1, 1, 0]


def test_nan_gradient_propagates_like_torch():
    # torch.maximum propagates NaN into max_exp_avg_sq; so must amsgrad here
    w = ad.Var([1.0, 2.0], dtype=ad.float64)
    opt = ad.optim.Adam([w], lr=0.1, amsgrad=True)
    store = ad.GradStore()
    store.insert(w, ad.tensor([math.nan, 1.0], dtype=ad.float64))
    opt.step(store)
    vmax = np.array(opt.state_dict()["state"][0]["max_exp_avg_sq"])
    assert math.isnan(vmax[0]) and vmax[1] > 0
    assert math.isnan(w.numpy()[0]) and np.isfinite(w.numpy()[1])


def test_strided_gradient_is_read_in_logical_order():
    # a transposed (non-contiguous) gradient, e.g. from a transpose's backward
    w = ad.Var(np.arange(6.0).reshape(2, 3), dtype=ad.float64)
    g = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    gt = ad.tensor(g.T.copy(), dtype=ad.float64).t()
    assert not gt.is_contiguous
    for kind, opts in [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=0.1)),
                       ("RMSprop", dict(lr=0.1, centered=True))]:
        w = ad.Var(np.arange(6.0).reshape(2, 3), dtype=ad.float64)
        opt = getattr(ad.optim, kind)([w], **opts)
        ref = RefOptimizer(kind, {"w": np.arange(6.0).reshape(2, 3)}, [(("w",), {})], opts)
        for _ in range(3):
            store = ad.GradStore()
            store.insert(w, gt)
            opt.step(store)
            ref.step({"w": g})
        np.testing.assert_array_equal(w.numpy(), ref.params["w"])


def test_hyper_parameters_of_the_wrong_type_raise_naming_them():
    # fuzz_args: float() took "0.1" as 0.1 and np.complex64(1j) as 0.0 (a
    # ComplexWarning at most); params=None and betas=None raised bare
    # "'NoneType' object is not iterable"; an lr set to a list in
    # param_groups between steps a bare TypeError from float()
    v = ad.Var(ad.ones(3))
    for f, pat in [(lambda: ad.optim.SGD([v], "0.1"), "lr must be a number, got str"),
                   (lambda: ad.optim.Adam([v], np.complex64(1j)), "lr must be a number"),
                   (lambda: ad.optim.SGD(None), "iterable of Vars or dicts, but got NoneType"),
                   (lambda: ad.optim.SGD([{"params": None}]), "'params' must be a Var"),
                   (lambda: ad.optim.Adam([v], 0.1, None), "betas must be two numbers")]:
        with pytest.raises(ad.Error, match=pat):
            f()
    for cls in (ad.optim.SGD, ad.optim.Adam, ad.optim.RMSprop):
        opt = cls([v], lr=0.1)
        opt.param_groups[0]["lr"] = [0.1]
        with pytest.raises(ad.ArgumentTypeError, match="lr must be a number, got list"):
            opt.step((v * v).sum().backward())
    ad.optim.SGD([v], lr=np.float32(0.1))  # numpy reals and 0-d tensors still work
    ad.optim.SGD([v], lr=ad.tensor(0.1))
