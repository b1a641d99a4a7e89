"""Run under `mpiexec -n N python mpi_worker.py MODE`: one scenario of
test_distributed.py per MODE.  A failed check raises, and init()'s
excepthook turns that into MPI_Abort, so the job exits non-zero on every
rank instead of hanging.  Lines starting with "RESULT" are read by the test."""
import os
import sys
import time

import numpy as np

import pyautodiff as ad
import pyautodiff.distributed as dist


def check(cond, msg):
    if not cond:
        raise AssertionError(f"rank {dist.rank()}: {msg}")


def values(rank, i, shape):
    """The gradient rank `rank` contributes for parameter i (every rank can
    recompute every other rank's values, so each checks the sum itself)."""
    return np.random.default_rng([rank, i]).standard_normal(shape)


SHAPES = [(3, 4), (5,), (), (2, 3, 4), (0, 3), (300, 257), (7, 1), (1,)]


def allreduce_round(op, bucket_size, r, w):
    params = [ad.Var(np.zeros(s), dtype=ad.float64 if i % 3 else ad.float32)
              for i, s in enumerate(SHAPES)]
    no_grad_param = ad.Var(np.zeros(2))  # no gradient on any rank: skipped
    outsider = ad.Var(np.zeros(3))  # in the store, not in params: left alone
    store = ad.GradStore()
    for i, p in enumerate(params):
        v = values(r, i, p.shape)
        if i == 3:  # a non-contiguous gradient (a transposed view)
            t = ad.tensor(np.ascontiguousarray(v.transpose(2, 1, 0)), dtype=p.dtype)
            t = t.permute(2, 1, 0)
            check(not t.is_contiguous, "the permuted gradient should be a view")
        else:
            t = ad.tensor(v, dtype=p.dtype)
        store.insert(p, t)
    # one tensor given to two parameters (as an add's backward does): each must be
    # reduced once
    shared = ad.tensor(values(r, 99, (5,)), dtype=ad.float64)
    pa, pb = ad.Var(np.zeros(5)), ad.Var(np.zeros(5))
    store.insert(pa, shared)
    store.insert(pb, shared)
    store.insert(outsider, ad.tensor([1.0, 2.0, 3.0], dtype=ad.float64))
    held = store[params[0]]
    held_before = held.numpy().copy()
    out = dist.allreduce_(store, params + [no_grad_param, pa, pb], op=op,
                          bucket_size=bucket_size)
    check(out is store, "allreduce_ returns its store")
    for i, p in enumerate(params):
        want = sum(values(k, i, p.shape) for k in range(w))
        if op == "mean":
            want = want / w
        got = store[p]
        check(got.shape == p.shape and got.dtype == p.dtype,
              f"param {i}: got {got.shape} {got.dtype}")
        tol = 1e-12 if p.dtype == ad.float64 else 1e-5
        np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=tol, atol=tol,
                                   err_msg=f"{op} bs={bucket_size} param {i}")
    want = sum(values(k, 99, (5,)) for k in range(w)) / (w if op == "mean" else 1)
    for p in (pa, pb):
        np.testing.assert_allclose(store[p].numpy(), want, rtol=1e-12, atol=1e-12)
    check(no_grad_param not in store, "a parameter without gradient got one")
    check(store[outsider].tolist() == [1.0, 2.0, 3.0], "an entry outside params changed")
    # the tensor the store held before is immutable: never written into
    check(np.array_equal(held.numpy(), held_before), "a held gradient was modified")

    # params=None: every entry, matched across ranks by creation order (tensor ids)
    store = ad.GradStore()
    for i, p in enumerate(params):
        v = values(r, i, p.shape).T.copy()  # C order
        store.insert(p, ad.tensor(v, dtype=p.dtype).T)  # transposed views
    store.insert(pa, shared)
    dist.allreduce_(store, op=op, bucket_size=bucket_size)
    check(len(store) == len(params) + 1, f"{len(store)} entries after params=None")
    for i, p in enumerate(params):
        want = sum(values(k, i, p.shape) for k in range(w)) / (w if op == "mean" else 1)
        tol = 1e-12 if p.dtype == ad.float64 else 1e-5
        np.testing.assert_allclose(np.asarray(store[p], dtype=np.float64), want, rtol=tol,
                                   atol=tol, err_msg=f"params=None {op} bs={bucket_size} {i}")
    want = sum(values(k, 99, (5,)) for k in range(w)) / (w if op == "mean" else 1)
    np.testing.assert_allclose(store[pa].numpy(), want, rtol=1e-12, atol=1e-12)


def recycled_results_round(r, w):
    """Results live in recycled blocks: one still referenced must never be handed
    out again (a later call would overwrite a gradient someone holds).  Sizes from
    64 bytes to 2 MiB, one of them a transposed view."""
    n = 2 ** 18 + 3
    pbig, pt, psmall = ad.Var(np.zeros(n)), ad.Var(np.zeros((600, 500))), ad.Var(np.zeros(7))
    held = []
    for step in range(4):
        big = values(r, 10 + step, (n,))
        tv = values(r, 20 + step, (500, 600))
        sv = values(r, 30 + step, (7,))
        store = ad.GradStore()
        store.insert(pbig, ad.tensor(big))
        store.insert(pt, ad.tensor(tv).T)
        store.insert(psmall, ad.tensor(sv))
        dist.allreduce_(store, [pbig, pt, psmall], op="mean")
        wants = [sum(values(k, 10 + step, (n,)) for k in range(w)) / w,
                 sum(values(k, 20 + step, (500, 600)) for k in range(w)).T / w,
                 sum(values(k, 30 + step, (7,)) for k in range(w)) / w]
        got = [store[pbig].numpy(), store[pt].numpy(), store[psmall].numpy()]
        for g, want in zip(got, wants):
            np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)
        if step < 2:  # keep the first two steps' results alive, drop the later ones
            held.append(([store[pbig], store[pt], store[psmall]], [g.copy() for g in got]))
    for tensors, snapshot in held:
        for t, before in zip(tensors, snapshot):
            check(np.array_equal(t.numpy(), before), "a held result was overwritten")


def mode_allreduce():
    r, w = dist.rank(), dist.world_size()
    base_tensors, base_bytes = ad.live_tensors(), ad.live_bytes()
    recycled_results_round(r, w)
    for op in ("sum", "mean"):
        for bucket_size in (1, 64, 4096, dist.DEFAULT_BUCKET_SIZE):
            allreduce_round(op, bucket_size, r, w)
    check((ad.live_tensors(), ad.live_bytes()) == (base_tensors, base_bytes),
          f"live tensors/bytes {base_tensors}/{base_bytes} -> "
          f"{ad.live_tensors()}/{ad.live_bytes()}")
    print(f"RESULT allreduce ok rank={r}", flush=True)


def mode_broadcast():
    r, w = dist.rank(), dist.world_size()
    root = w - 1

    class Model:
        def __init__(self, seed):
            rng = np.random.default_rng(seed)
            self.w1 = ad.Var(rng.standard_normal((4, 3)), dtype=ad.float32)
            self.b1 = ad.Var(rng.standard_normal(3), dtype=ad.float64)
            self.big = ad.Var(rng.standard_normal((200, 50)), dtype=ad.float64)

        def named_parameters(self):
            return [("w1", self.w1), ("b1", self.b1), ("big", self.big)]

    m = Model(seed=r)
    ref = Model(seed=root)
    versions = [p.version for _, p in m.named_parameters()]
    dist.broadcast_parameters(m, root=root, bucket_size=100)
    for (name, p), (_, q), v0 in zip(m.named_parameters(), ref.named_parameters(), versions):
        check(np.array_equal(p.numpy(), q.numpy()), f"{name} differs from root's")
        check((p.version > v0) == (r != root), f"{name}: version {v0} -> {p.version}")
    # a list of Vars, the default root
    vs = [ad.Var(np.full((3,), float(r))), ad.Var(np.full((2, 2), float(r) + 0.5))]
    dist.broadcast_parameters(vs)
    check(vs[0].tolist() == [0.0] * 3 and vs[1].tolist() == [[0.5, 0.5]] * 2,
          f"list broadcast gave {vs[0].tolist()} {vs[1].tolist()}")
    print(f"RESULT broadcast ok rank={r}", flush=True)


def mode_shard():
    r, w = dist.rank(), dist.world_size()
    for n in (0, 1, 2, 5, 10, 101, 1000):
        for seed, epoch in ((0, 0), (0, 1), (12345, 3), (None, 0)):
            mine = dist.shard(n, seed=seed, epoch=epoch)
            check(mine.dtype == np.int64, f"dtype {mine.dtype}")
            everyone = dist._state.comm.allgather(mine.tolist())
            flat = [i for s in everyone for i in s]
            check(sorted(flat) == list(range(n)), f"n={n}: shards do not cover/are not disjoint")
            check(max(map(len, everyone)) - min(map(len, everyone)) <= 1, "uneven by more than 1")
            # the same permutation on every rank: interleaving the shards gives it back
            perm = [everyone[k % w][k // w] for k in range(n)]
            want = (np.random.default_rng([seed, epoch]).permutation(n).tolist()
                    if seed is not None else perm)
            check(perm == want, f"n={n} seed={seed}: not the shared permutation")
        if n >= 10:
            check(not np.array_equal(dist.shard(n, 0, 0), dist.shard(n, 0, 1)),
                  "epochs give the same order")
    print(f"RESULT shard ok rank={r} sizes={[len(dist.shard(101, 0))]}", flush=True)


def mlp_step(params, x, y, lr):
    import pyautodiff.nn.functional as F

    w1, b1, w2, b2 = params
    h = (x @ w1 + b1).tanh()
    loss = F.cross_entropy(h @ w2 + b2, y)
    return loss


def mode_train():
    """10 SGD steps: each rank on its half of every batch with allreduce_ (mean),
    against one process on the whole batch; float64, to 1e-6."""
    r, w = dist.rank(), dist.world_size()
    check(w == 2, "train runs on 2 ranks")
    rng = np.random.default_rng(7)
    init = [rng.standard_normal((6, 16)) * 0.5, np.zeros(16), rng.standard_normal((16, 4)) * 0.5,
            np.zeros(4)]
    batches = [(rng.standard_normal((32, 6)), rng.integers(0, 4, size=32)) for _ in range(10)]

    def train(dp):
        params = [ad.Var(a, dtype=ad.float64) for a in init]
        if dp:  # start each rank from something else, so broadcast is what aligns them
            for p in params:
                p.set(ad.tensor(p.numpy() + r, dtype=ad.float64))
            dist.broadcast_parameters(params, root=0)
        opt = ad.optim.SGD(params, lr=0.5, momentum=0.9)
        for xb, yb in batches:
            if dp:
                half = len(xb) // w
                xb, yb = xb[r * half:(r + 1) * half], yb[r * half:(r + 1) * half]
            loss = mlp_step(params, ad.tensor(xb, dtype=ad.float64), ad.tensor(yb), 0.5)
            grads = loss.backward()
            if dp:
                dist.allreduce_(grads, params, op="mean", bucket_size=256)
            opt.step(grads)
        return [p.numpy().copy() for p in params]

    dp = train(True)
    # the ranks hold bit-identical parameters (every rank reduces the same way)
    everyone = dist._state.comm.allgather([a.tobytes() for a in dp])
    check(all(e == everyone[0] for e in everyone), "the ranks' parameters differ")
    single = train(False)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(dp, single))
    check(diff <= 1e-6, f"2-rank training differs from 1 process by {diff}")
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(single, init))
    check(moved > 1e-2, f"training did not move the parameters ({moved})")
    print(f"RESULT train ok rank={r} maxdiff={diff:.3g}", flush=True)


def mode_ddp():
    """DistributedDataParallel (buckets reduced during backward) against
    allreduce_ after backward and against one process on the whole batch:
    10 SGD steps, float64, to 1e-6; with several buckets, and with one."""
    r, w = dist.rank(), dist.world_size()
    check(w == 2, "ddp runs on 2 ranks")
    rng = np.random.default_rng(11)
    init = [rng.standard_normal((6, 16)) * 0.5, np.zeros(16), rng.standard_normal((16, 4)) * 0.5,
            np.zeros(4)]
    batches = [(rng.standard_normal((32, 6)), rng.integers(0, 4, size=32)) for _ in range(10)]

    def train(how, bucket_size=256):
        params = [ad.Var(a, dtype=ad.float64) for a in init]
        named = {f"p{i}": p for i, p in enumerate(params)}
        ddp = None
        if how != "single":
            for p in params:
                p.set(ad.tensor(p.numpy() + r, dtype=ad.float64))
            dist.broadcast_parameters(named, root=0)
        if how == "ddp":
            ddp = dist.DistributedDataParallel(named, bucket_size=bucket_size)
        opt = ad.optim.SGD(params, lr=0.5, momentum=0.9)
        early = 0
        for xb, yb in batches:
            if how != "single":
                half = len(xb) // w
                xb, yb = xb[r * half:(r + 1) * half], yb[r * half:(r + 1) * half]
            loss = mlp_step(params, ad.tensor(xb, dtype=ad.float64), ad.tensor(yb), 0.5)
            if how == "ddp":
                grads = ddp.backward(loss)
                early += ddp.started_during_backward
            else:
                grads = loss.backward()
                if how == "allreduce":
                    dist.allreduce_(grads, named, op="mean", bucket_size=bucket_size)
            check(len(grads) == 4, f"{how}: {len(grads)} gradients")
            opt.step(grads)
        return [p.numpy().copy() for p in params], ddp, early

    single, _, _ = train("single")
    after, _, _ = train("allreduce")
    for bucket_size in (256, dist.DEFAULT_BUCKET_SIZE):
        over, ddp, early = train("ddp", bucket_size)
        everyone = dist._state.comm.allgather([a.tobytes() for a in over])
        check(all(e == everyone[0] for e in everyone), "the ranks' parameters differ")
        d1 = max(float(np.max(np.abs(a - b))) for a, b in zip(over, single))
        d2 = max(float(np.max(np.abs(a - b))) for a, b in zip(over, after))
        check(d1 <= 1e-6 and d2 <= 1e-6, f"bucket_size {bucket_size}: overlapped training "
              f"differs from one process by {d1}, from allreduce_ by {d2}")
        if bucket_size == 256:
            # 4 parameters, 3 of them of 256 bytes or more: 4 buckets, every one
            # started from the hook, inside backward (none left for the flush)
            check(ddp.n_buckets == 4, f"{ddp.n_buckets} buckets")
            check(early == 10 * 4, f"{early} buckets started during backward in 10 steps")
        else:
            check(ddp.n_buckets == 1 and early == 10, f"{ddp.n_buckets} buckets, {early} early")
        print(f"RESULT ddp bucket_size={bucket_size} rank={r} maxdiff={max(d1, d2):.3g} "
              f"early={early}", flush=True)
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(single, init))
    check(moved > 1e-2, f"training did not move the parameters ({moved})")

    # a parameter with a gradient on no rank is left out; on one rank only: an
    # error on every rank naming it; the ranks stay in step afterwards
    a, b, c = (ad.Var(np.full(s, 1.0 + r)) for s in ((3, 2), (2,), (5,)))
    ddp = dist.DistributedDataParallel({"a": a, "b": b, "c": c}, op="sum", bucket_size=8)
    g = ddp.backward((a * 2.0).sum() + (b * 3.0).sum())
    check(c not in g and g[a].tolist() == [[4.0] * 2] * 3 and g[b].tolist() == [6.0] * 2,
          f"sum with c unused: {[g[t].tolist() for t in (a, b) if t in g]}")
    try:
        ddp.backward((a * 2.0).sum() + ((c * 1.0).sum() if r == 1 else 0.0))
    except ad.InvalidArgumentError as e:
        print(f"RESULT ddp-missing rank={r} {type(e).__name__}: {e}", flush=True)
    else:
        raise AssertionError(f"rank {r}: a gradient on one rank only did not raise")
    # an exception raised inside backward (both ranks, after buckets started)
    # propagates; the started buckets were completed, so the ranks stay in step

    class Fail(ad.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, gy):
            raise ValueError("fails on purpose")

    try:
        ddp.backward((Fail.apply(a) * 2.0).sum() + (b * c.sum()).sum())
    except ValueError as e:
        check("fails on purpose" in str(e), str(e))
    else:
        raise AssertionError(f"rank {r}: the failing backward did not raise")
    g = ddp.backward((a + b.sum() + c.sum()).sum())
    check(g[a].tolist() == [[2.0] * 2] * 3 and g[c].tolist() == [12.0] * 5,
          f"after the errors: {g[a].tolist()} {g[c].tolist()}")
    # construction checks the ranks agree, naming the first difference
    try:
        dist.DistributedDataParallel({"a": a, ("b" if r == 0 else "bb"): b})
    except ad.InvalidArgumentError as e:
        print(f"RESULT ddp-names rank={r} {type(e).__name__}: {e}", flush=True)
    else:
        raise AssertionError(f"rank {r}: different names did not raise")
    for fn, words in ((lambda: dist.DistributedDataParallel([a, a]), "same Var"),
                      (lambda: dist.DistributedDataParallel([a], op="max"), "'max'"),
                      (lambda: dist.DistributedDataParallel([a], bucket_size=0), "bucket_size")):
        try:
            fn()
        except ad.InvalidArgumentError as e:
            check(words in str(e), f"{words!r} not in {e}")
        else:
            raise AssertionError(f"rank {r}: no error for {words}")
    print(f"RESULT ddp ok rank={r}", flush=True)


def mode_ddp_mixed():
    """DistributedDataParallel on any number of ranks, float32 and float64
    parameters (separate buckets), shapes from scalars to 3-d, one of them
    empty, one used twice in the loss, a module's named_parameters: its
    gradients equal allreduce_'s after a plain backward."""
    r, w = dist.rank(), dist.world_size()

    class Model:
        def __init__(self):
            self.p = [ad.Var(values(0, i, s), dtype=ad.float64 if i % 2 else ad.float32)
                      for i, s in enumerate([(3, 4), (), (2, 3, 4), (0, 3), (5,), (4, 2)])]

        def named_parameters(self):
            return [(f"layer{i}.w", p) for i, p in enumerate(self.p)]

    m = Model()
    x = [ad.tensor(values(r, 100 + i, p.shape), dtype=p.dtype) for i, p in enumerate(m.p)]

    def loss():
        terms = [((p * xi) ** 2).sum() for p, xi in zip(m.p, x)]
        terms.append((m.p[0] * 3.0).sum())  # p[0] twice: its gradient is a sum
        return sum(t.astype(ad.float64) for t in terms)

    for op in ("mean", "sum"):
        for bucket_size in (1, 64, dist.DEFAULT_BUCKET_SIZE):
            ddp = dist.DistributedDataParallel(m, op=op, bucket_size=bucket_size)
            got = ddp.backward(loss())
            want = dist.allreduce_(loss().backward(), m, op=op, bucket_size=bucket_size)
            for name, p in m.named_parameters():
                check(p in got and p in want, f"{name}: missing")
                a, b = got[p].numpy(), want[p].numpy()
                check(a.shape == p.shape and got[p].dtype == p.dtype, f"{name}: {a.shape}")
                tol = 1e-5 if p.dtype == ad.float32 else 1e-12
                check(np.allclose(a, b, rtol=tol, atol=tol), f"{name} {op} {bucket_size}: "
                      f"ddp {a} != allreduce_ {b}")
    print(f"RESULT ddp_mixed ok rank={r}", flush=True)


def mode_mismatch():
    r = dist.rank()
    cases = []
    a, b = ad.Var(np.zeros((2, 3))), ad.Var(np.zeros(4))
    s0 = ad.GradStore()

    def store_of(*pairs):
        s = ad.GradStore()
        for p, g in pairs:
            s.insert(p, g)
        return s

    # names differ (rank 1 calls its second parameter otherwise)
    cases.append(("name", lambda: dist.allreduce_(
        store_of((a, ad.ones((2, 3), dtype=ad.float64)), (b, ad.ones(4, dtype=ad.float64))),
        {"layer.weight": a, ("layer.bias" if r == 0 else "layer.bias_renamed"): b})))
    # a shape differs
    c = ad.Var(np.zeros(4 if r == 0 else 5))
    cases.append(("shape", lambda: dist.allreduce_(
        store_of((a, ad.ones((2, 3), dtype=ad.float64)), (c, ad.ones(c.shape, dtype=ad.float64))),
        {"fc1.weight": a, "fc2.bias": c})))
    # one rank has fewer parameters
    cases.append(("count", lambda: dist.allreduce_(
        store_of((a, ad.ones((2, 3), dtype=ad.float64))),
        {"fc1.weight": a, "extra.weight": b} if r == 0 else {"fc1.weight": a})))
    # a gradient present on one rank only
    cases.append(("missing", lambda: dist.allreduce_(
        store_of(*([(a, ad.ones((2, 3), dtype=ad.float64))] if r == 0 else [])),
        {"fc1.weight": a})))
    # params=None: the second entry (in creation order) differs in shape
    cases.append(("none", lambda: dist.allreduce_(
        store_of((a, ad.ones((2, 3), dtype=ad.float64)), (c, ad.ones(c.shape, dtype=ad.float64))))))
    # broadcast of a differently shaped parameter
    cases.append(("bcast", lambda: dist.broadcast_parameters({"emb.weight": c})))
    for kind, fn in cases:
        try:
            fn()
        except ad.Error as e:
            print(f"RESULT {kind} rank={r} {type(e).__name__}: {e}", flush=True)
        else:
            raise AssertionError(f"rank {r}: case {kind} did not raise")
    # bad arguments raise before any communication, on the rank that passes them
    for fn, exc, words in (
            (lambda: dist.allreduce_(s0, [a], op="max"), ad.InvalidArgumentError, "'max'"),
            (lambda: dist.allreduce_(s0, [a], bucket_size=0), ad.InvalidArgumentError,
             "bucket_size"),
            (lambda: dist.allreduce_({}, [a]), ad.InvalidArgumentError, "GradStore"),
            (lambda: dist.allreduce_(s0, [a, "w"]), ad.InvalidArgumentError, "params[1]"),
            (lambda: dist.broadcast_parameters([a], root=5), ad.InvalidArgumentError, "root"),
            (lambda: dist.shard(-1), ad.InvalidArgumentError, "n must"),
            (lambda: dist.shard(10, seed=-3), ad.InvalidArgumentError, "seed"),
            (lambda: dist.shard(10, epoch=1.5), ad.InvalidArgumentError, "epoch"),
            (lambda: dist.init(timeout=-1), ad.InvalidArgumentError, "timeout")):
        try:
            fn()
        except exc as e:
            check(words in str(e), f"{words!r} not in {e}")
        else:
            raise AssertionError(f"rank {r}: no {exc.__name__} for {words}")
    dist.init()  # a second init() on the same communicator does nothing
    # and the ranks are still in step afterwards, with or without the signature check
    for verify in (True, False):
        s = store_of((a, ad.full((2, 3), float(r), ad.float64)))
        dist.allreduce_(s, [a], op="sum", verify=verify)
        check(s[a].tolist() == [[1.0] * 3] * 2, "allreduce_ after the errors")
    print(f"RESULT mismatch ok rank={r}", flush=True)


def mode_die():
    """Rank 1 dies in the way argv[2] says while rank 0 waits in allreduce_."""
    how = sys.argv[2]
    r = dist.rank()
    p = ad.Var(np.zeros(3))
    s = ad.GradStore()
    s.insert(p, ad.ones(3, dtype=ad.float64))
    if r == 1:
        if how == "exit":
            os._exit(3)
        if how == "raise":
            raise RuntimeError("rank 1 fails on purpose")
        if how == "hang":
            time.sleep(600)
    dist.allreduce_(s, [p])
    print(f"RESULT survived rank={r}", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    timeout = float(os.environ.get("AD_TEST_MPI_TIMEOUT", "0")) or None
    dist.init(timeout=timeout)
    globals()["mode_" + mode]()
