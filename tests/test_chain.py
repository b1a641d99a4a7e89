"""The 1,000,000-step chain y = y * 1.0001 + 0.001 (2,000,000 recorded nodes)
from a Var of shape (4,): built, backpropagated and freed without recursion.

Each run is a SUBPROCESS, so a stack overflow or any crash fails this test
rather than killing the whole pytest run; once with the default stack and
once under `ulimit -s 1024` (1 MiB)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 1_000_000

SCRIPT = r"""
import gc, json, sys
import pyautodiff as ad

steps = int(sys.argv[1])
gc.collect()
base = ad.live_tensors()
base_bytes = ad.live_bytes()
# float64: d y_n / d y_0 = 1.0001 ** 1e6 ~ 2.7e43 overflows float32
w = ad.Var([0.5, -1.0, 2.0, 0.0], dtype=ad.float64)
y = w
for _ in range(steps):
    y = y * 1.0001 + 0.001
n_nodes = len(y.sorted_nodes()) if steps <= 1000 else None
built = ad.live_tensors() - base
loss = y.sum()
g = loss.backward()
grad = g[w].numpy().tolist()
value = y.numpy().tolist()
del g
after_backward = ad.live_tensors() - base
del y, loss
gc.collect()
after_free = ad.live_tensors() - base
del w
gc.collect()
print(json.dumps(dict(grad=grad, value=value, built=built, n_nodes=n_nodes,
                      after_backward=after_backward, after_free=after_free,
                      end=ad.live_tensors() - base, end_bytes=ad.live_bytes() - base_bytes)))
"""


def run_chain(steps, stack_kib=None, timeout=120):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-c", SCRIPT, str(steps)]
    if stack_kib is not None:
        bash = shutil.which("bash")
        if bash is None:
            pytest.skip("bash is needed for ulimit -s")
        cmd = [bash, "-c", f'ulimit -s {stack_kib} && exec "$0" "$@"', *cmd]
    p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, (f"chain of {steps} steps (stack {stack_kib or 'default'} KiB) "
                               f"exited with {p.returncode}\nstdout: {p.stdout[-2000:]}\n"
                               f"stderr: {p.stderr[-4000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def check(r, steps):
    expected_grad = 1.0001 ** steps
    assert r["grad"] == pytest.approx([expected_grad] * 4, rel=1e-9)
    # y_n = y_0 * a^n + c * (a^n - 1) / (a - 1)
    a, c = 1.0001, 0.001
    for y0, yn in zip([0.5, -1.0, 2.0, 0.0], r["value"]):
        assert yn == pytest.approx(y0 * a ** steps + c * (a ** steps - 1) / (a - 1), rel=1e-8)
    assert r["built"] == 2 * steps + 1  # the Var plus one mul and one add per step
    assert r["after_backward"] == 2 * steps + 2  # graph still referenced by y, plus loss
    assert r["after_free"] == 1  # only the Var
    assert r["end"] == 0 and r["end_bytes"] == 0


def test_small_chain_in_process_shape():
    r = run_chain(100)
    check(r, 100)
    assert r["n_nodes"] == 201  # every mul and add, plus the Var


def test_million_chain_default_stack():
    check(run_chain(STEPS), STEPS)


def test_million_chain_1mib_stack():
    check(run_chain(STEPS, stack_kib=1024), STEPS)
