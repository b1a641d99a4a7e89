"""ad.distributed: each test runs mpi_worker.py (or the ddp example) under
`mpiexec -n N` in a subprocess with a bounded timeout.  Skipped only when
mpi4py cannot be imported or no mpiexec is found (next to this Python first,
as `pip install mpich` puts it there, then on PATH)."""
import os
import re
import shutil
import subprocess
import sys

import pytest

import pyautodiff as ad
import pyautodiff.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "mpi_worker.py")
TIMEOUT = 240  # generous: the CI machine may be shared; a hang still ends


def _mpiexec():
    return (shutil.which("mpiexec", path=os.path.dirname(sys.executable))
            or shutil.which("mpiexec"))


def _have_mpi4py():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


needs_mpi = pytest.mark.skipif(not _have_mpi4py() or _mpiexec() is None,
                               reason="mpi4py or mpiexec not available "
                                      "(pip install \"pyautodiff[mpi]\")")


def run(n, *args, module=None, env=None, timeout=TIMEOUT):
    """Runs the worker (or `python -m module`) on n ranks; returns (returncode, output)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    # one thread per rank: the ranks share the machine's cores
    e.setdefault("OMP_NUM_THREADS", "1")
    # should the mpiexec be Open MPI's: allow root (CI containers) and more ranks than cores
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    e.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    if "ASAN_OPTIONS" in e:
        # under the sanitizer run the ranks inherit LD_PRELOAD; LeakSanitizer would report
        # MPI's and glibc's one-time allocations at exit.  Our native leaks are checked by
        # the workers themselves (live tensors/bytes) and by the in-process tests.
        e["ASAN_OPTIONS"] += ":detect_leaks=0"
    e.update(env or {})
    target = ["-m", module] if module else [WORKER]
    cmd = [_mpiexec(), "-n", str(n), sys.executable, *target, *args]
    p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout, cwd=ROOT)
    return p.returncode, p.stdout


def results(out):
    """The RESULT records of all ranks (mpiexec may join two ranks' lines into one)."""
    return ["RESULT" + part.split("\n", 1)[0].rstrip() for part in out.split("RESULT")[1:]]


def expect_ok(n, mode, word):
    rc, out = run(n, mode)
    assert rc == 0, out
    lines = results(out)
    for r in range(n):
        assert any(f"{word} ok rank={r}" in line for line in lines), out
    return lines


# ---- no MPI needed --------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda: dist.rank(),
    lambda: dist.world_size(),
    lambda: dist.barrier(),
    lambda: dist.allreduce_(ad.GradStore(), []),
    lambda: dist.broadcast_parameters([]),
    lambda: dist.shard(10),
])
def test_before_init_raises(call):
    assert not dist.is_initialized()
    with pytest.raises(ad.GraphError, match=r"ad\.distributed\.\w+: call ad\.distributed\.init"):
        call()


def test_gradstore_replace_id():
    """The native call behind allreduce_(grads) without params: replace an
    entry known only by its tensor id."""
    from pyautodiff._lib import ffi, lib

    w = ad.Var([[1.0, 2.0]])
    store = (w * 3.0).sum().backward()
    (tid, old), = [store._item(0)]
    assert tid == w.id
    new = ad.tensor([[5.0, 6.0]])
    assert lib.ad_gradstore_replace_id(store._h, tid, new._h) == 0
    assert store[w].tolist() == [[5.0, 6.0]] and old.tolist() == [[3.0, 3.0]]
    assert lib.ad_gradstore_replace_id(store._h, tid, store[w]._h) == 0  # by itself
    assert store[w].tolist() == [[5.0, 6.0]]
    for bad, code in ((ad.tensor([1.0, 2.0]), lib.AD_ERR_SHAPE),
                      (ad.tensor([[1.0, 2.0]], dtype=ad.float64), lib.AD_ERR_DTYPE)):
        assert lib.ad_gradstore_replace_id(store._h, tid, bad._h) == code
        assert "cannot replace float32 (1, 2)" in ffi.string(lib.ad_last_error()).decode()
    assert lib.ad_gradstore_replace_id(store._h, tid + 10 ** 9, new._h) == lib.AD_ERR_INDEX
    assert store[w].tolist() == [[5.0, 6.0]] and len(store) == 1


# ---- under mpiexec --------------------------------------------------------------------------
@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_allreduce_shapes_dtypes_ops_buckets(n):
    expect_ok(n, "allreduce", "allreduce")


@needs_mpi
def test_broadcast_parameters():
    expect_ok(2, "broadcast", "broadcast")


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_shards_disjoint_covering_shared_permutation(n):
    lines = expect_ok(n, "shard", "shard")
    # 101 samples: uneven shards (51/50 on 2 ranks, 34/34/33 on 3)
    sizes = sorted(int(re.search(r"sizes=\[(\d+)\]", line).group(1)) for line in lines)
    assert sum(sizes) == 101 and max(sizes) - min(sizes) == 1, lines


@needs_mpi
def test_two_ranks_on_halves_equal_one_process_on_the_batch():
    lines = expect_ok(2, "train", "train")
    assert all(float(re.search(r"maxdiff=(\S+)", line).group(1)) <= 1e-6 for line in lines)


@needs_mpi
def test_overlapped_ddp_equals_allreduce_and_one_process():
    lines = expect_ok(2, "ddp", "ddp")
    diffs = [float(m) for m in re.findall(r"RESULT ddp bucket_size=\d+ rank=\d maxdiff=(\S+)",
                                          "\n".join(lines))]
    assert len(diffs) == 4 and max(diffs) <= 1e-6, lines
    for kind, words in (("ddp-missing", ("InvalidArgumentError", "'c' shape (5,) float64",
                                         "on 1 of the 2 ranks")),
                        ("ddp-names", ("InvalidArgumentError", "'b'", "'bb'"))):
        got = [s for s in lines if s.startswith(f"RESULT {kind} ")]
        assert len(got) == 2, lines
        for w in words:
            assert all(w in s for s in got), (kind, w, got)
        assert len({s.split(" ", 3)[3] for s in got}) == 1, got  # the same message everywhere


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_ddp_mixed_dtypes_and_shapes_equal_allreduce(n):
    expect_ok(n, "ddp_mixed", "ddp_mixed")


@needs_mpi
def test_mismatch_raises_on_every_rank_naming_the_parameter():
    rc, out = run(2, "mismatch")
    assert rc == 0, out
    lines = results(out)
    want = {
        "name": ("InvalidArgumentError", "'layer.bias'", "'layer.bias_renamed'"),
        "shape": ("ShapeError", "'fc2.bias' shape (4,)", "'fc2.bias' shape (5,)"),
        "count": ("InvalidArgumentError", "'extra.weight'", "nothing"),
        "missing": ("InvalidArgumentError", "'fc1.weight'", "(no gradient)"),
        "bcast": ("ShapeError", "'emb.weight' shape (4,)", "'emb.weight' shape (5,)"),
        "none": ("ShapeError", "'entry 1 (in tensor-id order)' shape (4,)", "shape (5,)"),
    }
    for kind, words in want.items():
        for r in range(2):
            line = [s for s in lines if s.startswith(f"RESULT {kind} rank={r} ")]
            assert len(line) == 1, out
            for w in words:
                assert w in line[0], (kind, w, line[0])
        # every rank raised the same message
        msgs = {s.split(" ", 3)[3] for s in lines if s.startswith(f"RESULT {kind} ")}
        assert len(msgs) == 1, msgs
    assert "RESULT mismatch ok rank=1" in out


@needs_mpi
@pytest.mark.parametrize("how,env", [
    ("exit", {}),                               # mpiexec ends the job
    ("raise", {}),                              # init()'s excepthook aborts
    ("hang", {"AD_TEST_MPI_TIMEOUT": "3"}),     # init(timeout=3)'s watchdog aborts
])
def test_a_dead_rank_fails_the_job_instead_of_hanging(how, env):
    rc, out = run(2, "die", how, env=env, timeout=120)
    assert rc != 0, out
    assert "RESULT survived" not in out, out
    if how == "raise":
        assert "rank 1 fails on purpose" in out
    if how == "hang":
        assert "waited more than 3 s" in out


@needs_mpi
def test_ddp_example_runs():
    rc, out = run(2, "--epochs", "20", "--n", "2048", module="pyautodiff.examples.ddp")
    assert rc == 0, out
    assert len(re.findall(r"rank \d: .*? samples/s", out)) == 2, out
    acc = float(re.search(r"final accuracy ([\d.]+)", out).group(1))
    assert acc > 0.8, out  # chance is 1/3; one process reaches ~0.9 in these 160 steps
