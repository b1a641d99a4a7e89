"""The package is typed for its users: it ships py.typed, and a realistic user
script (tests/typing_example.py) passes `mypy --strict` and runs."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "tests", "typing_example.py")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["MYPYPATH"] = ROOT
    return env


def test_py_typed_is_shipped():
    assert os.path.isfile(os.path.join(ROOT, "pyautodiff", "py.typed"))
    with open(os.path.join(ROOT, "setup.py")) as f:
        assert '"py.typed"' in f.read()


def test_example_passes_mypy_strict(tmp_path):
    pytest.importorskip("mypy")
    # From a source tree mypy would also check the package's own bodies; a user
    # who installed the package gets --follow-imports=silent behaviour for it (it
    # lives in site-packages), and that is what this checks: every call the
    # script makes must still reach annotated signatures (--strict's
    # disallow-untyped-calls), and its inferred types must be right.
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "mypy_cache"), EXAMPLE],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


def test_example_runs():
    r = subprocess.run([sys.executable, EXAMPLE], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("loss ")


def test_public_signatures_are_annotated():
    # The surface a user script calls: a missing annotation there turns into a
    # "call to untyped function" error under --strict.
    import inspect

    import pyautodiff as ad

    targets = [ad.tensor, ad.zeros, ad.ones, ad.randn, ad.rand, ad.full, ad.arange, ad.eye,
               ad.from_numpy, ad.from_dlpack, ad.save, ad.load, ad.manual_seed,
               ad.Tensor.sum, ad.Tensor.mean, ad.Tensor.reshape, ad.Tensor.numpy,
               ad.Tensor.item, ad.Tensor.__getitem__, ad.Var.randn, ad.Var.set,
               ad.nn.Module.parameters, ad.nn.Module.state_dict, ad.nn.Module.load_state_dict,
               ad.nn.Module.train, ad.nn.Module.eval, ad.nn.Module.__call__,
               ad.nn.Linear.__init__, ad.nn.Linear.forward, ad.nn.Conv2d.__init__,
               ad.nn.LSTM.forward, ad.nn.functional.cross_entropy, ad.nn.init.normal_,
               ad.nn.utils.clip_grad_norm_, ad.optim.Adam.__init__, ad.optim.SGD.__init__,
               ad.optim.Optimizer.step, ad.optim.Optimizer.backward_step,
               ad.optim.lr_scheduler.StepLR.__init__, ad.optim.lr_scheduler.LRScheduler.step,
               ad.Tensor.backward, ad.Tensor.__add__, ad.Tensor.__rmul__, ad.Tensor.pow,
               ad.grad, ad.GradStore.get, ad.GradStore.__getitem__, ad.GradStore.items,
               ad.is_grad_enabled, ad.no_grad.__enter__, ad.Function.apply,
               ad.FunctionCtx.save_for_backward, ad.checkpoint, ad.memory_stats,
               ad.reset_peak_memory]
    bare = []
    for f in targets:
        sig = inspect.signature(f)
        if sig.return_annotation is inspect.Signature.empty:
            bare.append(f.__qualname__ + " -> ?")
        for p in sig.parameters.values():
            if p.name in ("self", "cls") or p.name.startswith("_"):
                continue
            if p.annotation is inspect.Parameter.empty:
                bare.append("%s(%s)" % (f.__qualname__, p.name))
    assert not bare, bare
