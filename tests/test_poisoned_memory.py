"""Every field of a new native block is written before it is read.

ad_testing_poison_allocs fills each new small block and header
(ad_malloc, ad_small_alloc) with a byte of our choosing.  A workload run with
0x00, 0xff and 0x55 must give the same results and must not wait: an
external storage's seqlock once started with whatever the reused memory held,
and when that was odd its first in-place write spun forever (the suite hung
in test_alias_memory on a Zen 5 machine).  Each run is a subprocess with a
timeout, so such a hang fails here instead of stopping the suite."""
import os
import pickle
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKLOAD = r"""
import pickle, sys
import numpy as np, pyautodiff as ad
from pyautodiff._lib import ffi, lib
lib.ad_testing_poison_allocs(int(sys.argv[1]))
out = []
rng = np.random.default_rng(3)
for n in (1, 3, 100):
    # external storages over numpy memory, written in place by the optimizer
    base = np.arange(2 * n, dtype=np.float64)
    v = ad.Var(ad.zeros(n, dtype=ad.float64))
    buf = ad.from_numpy(base[:n], copy=False)
    g = ad.from_numpy(base[n:], copy=False)
    assert lib.ad_optim_sgd(v._h, g._h, buf._h, 1.0, 0.5, 0.0, 0.0, 0, 0) == 0
    out += [base.copy(), v.numpy()]
    # a Var over numpy memory (copy=False), set in place and trained
    arr = rng.standard_normal((n, 4)).astype(np.float32)
    w = ad.Var(ad.from_numpy(arr, copy=False))
    x = ad.from_numpy(rng.standard_normal((5, n)).astype(np.float32))
    opt = ad.optim.Adam([w], lr=0.1)
    for _ in range(3):
        loss = ((x @ w).tanh() ** 2).mean()
        opt.step(loss.backward())
        w.set(w - 0.01 * w)
    out += [w.numpy().copy(), loss.item()]
    # DLPack round trip and an in-place write through it
    t = ad.from_dlpack(w)
    out.append((t * 2.0 + 1.0).numpy())
# a checkpoint written and read back
ad.manual_seed(0)
m = ad.nn.Linear(6, 3)
path = sys.argv[2]
ad.save(m.state_dict(), path)
sd = ad.load(path)  # mapped: file-backed external storages
out += [sd[k].numpy() for k in sorted(sd)]
del sd
lib.ad_testing_poison_allocs(-1)
pickle.dump([np.asarray(o).tobytes() for o in out], sys.stdout.buffer)
"""


def _run(byte, path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", WORKLOAD, str(byte), str(path)], env=env,
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return pickle.loads(r.stdout)


def test_poisoned_blocks_change_nothing(tmp_path):
    path = tmp_path / "m.pt"
    fresh = _run(-1, path)
    for byte in (0x00, 0xff, 0x55):
        try:
            got = _run(byte, path)
        except subprocess.TimeoutExpired:  # pragma: no cover - the failure this guards
            pytest.fail(f"the workload hung with new blocks filled with {byte:#04x}")
        assert len(got) == len(fresh)
        for i, (a, b) in enumerate(zip(fresh, got)):
            assert a == b, f"result {i} differs with new blocks filled with {byte:#04x}"
