#!/usr/bin/env python3
"""pyautodiff beside numpy (and PyTorch when installed), in one run.

    python tools/bench.py            # everything (several minutes)
    python tools/bench.py --quick    # under two minutes: fewer sizes and repeats,
                                     # no memory children, no load section
    python tools/bench.py --only matmul,overhead
    python tools/bench.py --profile [--threads 2]   # one MLP step, broken down

The header names pyautodiff's ISA level (PYAUTODIFF_ISA=avx2 caps it), the
thread counts and the BLAS numpy and torch call (threadpoolctl when installed).
Elementwise rows come twice: allocating (a + b), and kernel-only, where numpy
and torch write into a preallocated out= and pyautodiff's row is the same
allocating call, whose output block the block cache hands back in a loop.
numpy's elementwise ops are single-threaded, which the 2-thread rows say.

Every row times the libraries interleaved (a, b, c, a, b, c, ...) and reports
medians; the ratio columns are other_time / pyautodiff_time, so > 1.0 means
pyautodiff is faster (for matmul that is the GFLOP/s ratio).  Thread counts are
fixed per child process (numpy's OpenBLAS, PyTorch and pyautodiff alike): each
thread setting runs in its own process started by this script.

OPENBLAS_L2_SIZE, which some environments set for old OpenBLAS builds, is
unset in the children. The variables that pick numpy's and torch's kernels
are unset too, so both run their best, except when PYAUTODIFF_ISA caps
pyautodiff's level: then they are passed through, so that an AVX2 machine can
be emulated on an AVX-512 one kernel against kernel:

    PYAUTODIFF_ISA=avx2 python3 tools/bench.py --quick

runs our AVX2 kernels against OpenBLAS's Haswell GEMM, numpy's own AVX2
(X86_V3) ufunc loops, and torch's AVX2 ATen loops, MKL and oneDNN: under
PYAUTODIFF_ISA=avx2 the bench sets each peer's variable (AVX2_PEERS below:
OPENBLAS_CORETYPE, NPY_DISABLE_CPU_FEATURES, ATEN_CPU_CAPABILITY,
MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA) that the command line does not.
Without the last two, torch's matmul and GELU ran AVX-512 (Xeon, 1 thread:
1024^3 12 ms against 20 ms capped, GELU at 1e6 360 us against 705).
The header prints the kernel numpy's OpenBLAS reports (threadpoolctl), the
SIMD targets numpy's ufuncs dispatch to and torch's ATen, MKL and oneDNN
levels, and warns when the OpenBLAS kernel is not the OPENBLAS_CORETYPE asked
for or when a peer still runs AVX-512 under an AVX2 cap.
"""
import argparse
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTIONS = ("matmul", "skinny", "elementwise", "overhead", "chain", "train", "models")


# ---------------------------------------------------------------------------- child side
# With more than one thread, a library's idle workers keep spinning for a
# while after its call returns and would steal the cores from whichever
# library runs next: OpenBLAS's for about 110 ms (2^28 TSC ticks), ours and
# OpenMP's for well under 10 ms. Each block of calls therefore starts once
# the process has gone quiet: settle() waits until a 10 ms window passes
# with under 1 ms of the process's CPU time (a fixed 50 ms sleep, as before,
# left OpenBLAS spinning through the first half of the next block).
SETTLE = False


def settle(limit=0.5):
    """Sleep until no thread of this process is spinning (at most `limit` s)."""
    c0 = time.process_time()
    for _ in range(int(limit / 0.01)):
        time.sleep(0.01)
        c = time.process_time()
        if c - c0 < 0.001:
            return
        c0 = c


BUDGET = 0.05  # seconds per sample (--quick: less)

# After settle() a library's first calls run slow: its sleeping workers wake,
# and on a VM the idle second vCPU comes back late. One call was not enough
# warm-up: at 2 threads, --quick's 20 ms samples timed our AVX2 X^T G at 602
# us against 512-530 with 50-200 ms samples (numpy's: 516-532, level), and
# AVX-512 G W^T at 978 us, no faster than at 1 thread (1010), against 544 in
# 100 ms samples. So each block starts after WARM seconds of calls (at least
# one call), the same for every library.
WARM = 0.005


def warm(f):
    t_end = time.perf_counter() + WARM
    f()
    while time.perf_counter() < t_end:
        f()


def timeit(fns, repeat, number=None, budget=None):
    """Interleaved medians of seconds per call for each fn."""
    budget = BUDGET if budget is None else budget
    for f in fns:
        f()
    if number is None:
        t0 = time.perf_counter()
        fns[0]()
        one = max(time.perf_counter() - t0, 1e-7)
        number = max(1, int(budget / one))
    samples = [[] for _ in fns]
    # each round runs the libraries in the next of all their orders: every
    # library follows every other one equally often, so a predecessor's
    # spinning workers and the cache lines it evicted cost all alike (a
    # rotation would keep the cyclic order: with three, each library would
    # always follow the same one)
    orders = list(itertools.permutations(range(len(fns))))
    for r in range(repeat):
        for i in orders[r % len(orders)]:
            f = fns[i]
            if SETTLE:
                settle()
                warm(f)
            t0 = time.perf_counter()
            for _ in range(number):
                f()
            samples[i].append((time.perf_counter() - t0) / number)
    return [statistics.median(s) for s in samples]


class Row:
    def __init__(self, out, section, name, threads):
        self.out, self.section, self.name, self.threads = out, section, name, threads

    def emit(self, times, extra=None):
        rec = {"section": self.section, "name": self.name, "threads": self.threads,
               "times": times}
        if extra:
            rec.update(extra)
        self.out.append(rec)
        print(json.dumps(rec), flush=True)


def child(args):
    import numpy as np

    sys.path.insert(0, ROOT)
    import pyautodiff as ad

    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    ad.set_num_threads(args.threads)
    global SETTLE
    SETTLE = args.threads > 1
    quick = args.quick
    rep = 3 if quick else 11
    global BUDGET
    BUDGET = 0.02 if quick else 0.05
    out = []
    only = set(args.only.split(",")) if args.only else set(SECTIONS)
    rng = np.random.default_rng(0)

    def libs_for(np_fn, ad_fn, torch_fn=None):
        fns = {"pyautodiff": ad_fn}
        if np_fn is not None:
            fns["numpy"] = np_fn
        if torch is not None and torch_fn is not None:
            fns["torch"] = torch_fn
        return fns

    def run(section, name, fns, extra=None, repeat=rep, number=None):
        names = list(fns)
        ts = timeit([fns[k] for k in names], repeat, number)
        Row(out, section, name, args.threads).emit(dict(zip(names, ts)), extra)

    if "matmul" in only:
        sizes = [64, 256, 1024] if quick else [64, 128, 256, 512, 1024, 2048]
        cases = [(n, n, n, "float32") for n in sizes]
        cases += [(n, n, n, "float64") for n in ([512] if quick else [512, 1024])]
        for m, k, n, dt in cases:
            a = rng.standard_normal((m, k)).astype(dt)
            b = rng.standard_normal((k, n)).astype(dt)
            ta, tb = ad.from_numpy(a), ad.from_numpy(b)
            fns = libs_for(lambda: a @ b, lambda: ta @ tb,
                           (lambda x=torch.from_numpy(a), y=torch.from_numpy(b): x @ y)
                           if torch else None)
            run("matmul", f"{dt} {m}x{k} @ {k}x{n}", fns, {"flops": 2 * m * n * k})
        # an MLP layer: forward X@W and its two backward products
        x = rng.standard_normal((128, 784)).astype("float32")
        w = rng.standard_normal((784, 512)).astype("float32")
        g = rng.standard_normal((128, 512)).astype("float32")
        tx, tw, tg = ad.from_numpy(x), ad.from_numpy(w), ad.from_numpy(g)
        for name, f_np, f_ad, f_t in (
                ("mlp fwd (128x784)@(784x512)", lambda: x @ w, lambda: tx @ tw,
                 lambda X=torch.from_numpy(x) if torch else None,
                 W=torch.from_numpy(w) if torch else None: X @ W),
                ("mlp bwd X^T@G (784x128)@(128x512)", lambda: x.T @ g, lambda: tx.t() @ tg,
                 lambda X=torch.from_numpy(x) if torch else None,
                 G=torch.from_numpy(g) if torch else None: X.t() @ G),
                ("mlp bwd G@W^T (128x512)@(512x784)", lambda: g @ w.T, lambda: tg @ tw.t(),
                 lambda G=torch.from_numpy(g) if torch else None,
                 W=torch.from_numpy(w) if torch else None: G @ W.t())):
            run("matmul", name, libs_for(f_np, f_ad, f_t if torch else None))
        # a Linear layer's x @ W^T, W's rows 4 KiB apart (the transposing pack)
        x2 = rng.standard_normal((128, 1024)).astype("float32")
        w2 = rng.standard_normal((1024, 1024)).astype("float32")
        tx2, tw2 = ad.from_numpy(x2), ad.from_numpy(w2)
        run("matmul", "linear x@W^T (128x1024)@(1024x1024)^T",
            libs_for(lambda: x2 @ w2.T, lambda: tx2 @ tw2.t(),
                     (lambda X=torch.from_numpy(x2), W=torch.from_numpy(w2): X @ W.t())
                     if torch else None), {"flops": 2 * 128 * 1024 * 1024})
        a = rng.standard_normal((256, 32, 64)).astype("float32")
        b = rng.standard_normal((256, 64, 32)).astype("float32")
        ta, tb = ad.from_numpy(a), ad.from_numpy(b)
        run("matmul", "batched 256 x (32x64 @ 64x32)",
            libs_for(lambda: a @ b, lambda: ta @ tb,
                     (lambda x=torch.from_numpy(a), y=torch.from_numpy(b): x @ y)
                     if torch else None))

    if "skinny" in only:
        # matrix-vector and skinny products (issue 17 part 4): numpy's 1-d
        # rules, n x 1 and 1 x n, a batch of 32 small products, tall/wide x 8,
        # 16 rows times a wide B (the skinny kernel's tall form at AVX-512)
        cases = []
        for n in ([256, 4096] if quick else [256, 1024, 4096]):
            mat = rng.standard_normal((n, n)).astype("float32")
            vec = rng.standard_normal(n).astype("float32")
            cases += [(f"gemv ({n}x{n}) @ ({n},)", mat, vec),
                      (f"({n},) @ ({n}x{n})", vec, mat),
                      (f"({n}x{n}) @ ({n}x1)", mat, vec[:, None].copy()),
                      (f"(1x{n}) @ ({n}x{n})", vec[None, :].copy(), mat)]
        for q in (1, 8, 32):
            cases.append((f"batch 32 x (64x32 @ 32x{q})",
                          rng.standard_normal((32, 64, 32)).astype("float32"),
                          rng.standard_normal((32, 32, q)).astype("float32")))
        tall = rng.standard_normal((4096, 512)).astype("float32")
        thin = rng.standard_normal((512, 8)).astype("float32")
        cases += [("(4096x512) @ (512x8)", tall, thin),
                  ("(8x512) @ (512x4096)", thin.T.copy(), tall.T.copy()),
                  ("(16x512) @ (512x4096)", tall[:16].copy(), tall.T.copy())]
        for name, a, b in cases:
            ta, tb = ad.from_numpy(a), ad.from_numpy(b)
            flops = 2 * a.size * (b.shape[-1] if b.ndim > 1 else 1)
            if a.ndim == 1:
                flops = 2 * b.size
            run("skinny", name,
                libs_for(lambda a=a, b=b: a @ b, lambda ta=ta, tb=tb: ta @ tb,
                         (lambda x=torch.from_numpy(a), y=torch.from_numpy(b): x @ y)
                         if torch else None), {"flops": flops})
        # a few columns of C: a linear head x @ w^T (w's rows are B's columns),
        # a row-major B of 4 columns, and the weight gradient X^T G of a
        # matmul head (A column-major)
        x = rng.standard_normal((128, 512)).astype("float32")
        w = rng.standard_normal((10, 512)).astype("float32")
        b4 = rng.standard_normal((512, 4)).astype("float32")
        g4 = rng.standard_normal((128, 4)).astype("float32")
        tx, tw, tb4, tg4 = (ad.from_numpy(v) for v in (x, w, b4, g4))
        T = {k: torch.from_numpy(v) for k, v in
             (("x", x), ("w", w), ("b4", b4), ("g4", g4))} if torch else {}
        for name, f_np, f_ad, f_t, flops in (
                ("linear head (128x512) @ (10x512)^T", lambda: x @ w.T, lambda: tx @ tw.t(),
                 lambda: T["x"] @ T["w"].t(), 2 * 128 * 512 * 10),
                ("(128x512) @ (512x4)", lambda: x @ b4, lambda: tx @ tb4,
                 lambda: T["x"] @ T["b4"], 2 * 128 * 512 * 4),
                ("head gradient (128x512)^T @ (128x4)", lambda: x.T @ g4, lambda: tx.t() @ tg4,
                 lambda: T["x"].t() @ T["g4"], 2 * 128 * 512 * 4)):
            run("skinny", name, libs_for(f_np, f_ad, f_t if torch else None), {"flops": flops})

    if "elementwise" in only:
        sizes = [1000, 100_000, 1_000_000, 10_000_000] if not quick else [1000, 10_000_000]
        for n in sizes:
            a = rng.standard_normal(n).astype("float32")
            b = rng.standard_normal(n).astype("float32")
            ta, tb = ad.from_numpy(a), ad.from_numpy(b)
            A, B = (torch.from_numpy(a), torch.from_numpy(b)) if torch else (None, None)
            for name, f_np, f_ad, f_t in (
                    ("add", lambda: a + b, lambda: ta + tb, lambda: A + B),
                    ("mul", lambda: a * b, lambda: ta * tb, lambda: A * B),
                    ("exp", lambda: np.exp(a), lambda: ta.exp(), lambda: A.exp()),
                    ("tanh", lambda: np.tanh(a), lambda: ta.tanh(), lambda: A.tanh()),
                    ("relu", lambda: np.maximum(a, 0), lambda: ta.relu(), lambda: A.relu())):
                run("elementwise", f"{name} float32 n={n:.0e}",
                    libs_for(f_np, f_ad, f_t if torch else None))
            # kernel-only: numpy and torch write into a preallocated out=;
            # pyautodiff has no out=, but in a loop its output block comes
            # back from the block cache, so its row is the same call as above
            o = np.empty_like(a)
            O = torch.empty_like(A) if torch else None
            # copy: the memory floor the large rows run against (a clone reads
            # and writes what a unary map does), from 1e5 elements
            copy = (("copy", lambda: np.copyto(o, a), lambda: O.copy_(A)),) if n >= 100_000 else ()
            for name, f_np, f_t in copy + (
                    ("add", lambda: np.add(a, b, out=o), lambda: torch.add(A, B, out=O)),
                    ("mul", lambda: np.multiply(a, b, out=o), lambda: torch.mul(A, B, out=O)),
                    ("exp", lambda: np.exp(a, out=o), lambda: torch.exp(A, out=O)),
                    ("tanh", lambda: np.tanh(a, out=o), lambda: torch.tanh(A, out=O)),
                    ("sigmoid", lambda: np.divide(1, np.add(1, np.exp(np.negative(a, out=o),
                                                                       out=o), out=o), out=o),
                     lambda: torch.sigmoid(A, out=O))):
                f_ad = {"copy": lambda: ta.clone(), "add": lambda: ta + tb,
                        "mul": lambda: ta * tb, "exp": lambda: ta.exp(),
                        "tanh": lambda: ta.tanh(), "sigmoid": lambda: ta.sigmoid()}[name]
                thr = "" if args.threads == 1 else ", numpy 1 thread"
                run("elementwise", f"{name} float32 n={n:.0e} kernel-only (out=; ad cached{thr})",
                    libs_for(f_np, f_ad, f_t if torch else None))
        # the activations and the softmax family of real models
        n = 1_000_000
        a = rng.standard_normal(n).astype("float32")
        ta = ad.from_numpy(a)
        A = torch.from_numpy(a) if torch else None
        fns = {"pyautodiff": lambda: ta.gelu_erf()}
        if torch:
            fns["torch"] = lambda: torch.nn.functional.gelu(A)
        run("elementwise", "gelu (erf form, nn.GELU default) float32 n=1e6", fns)
        fns = {"pyautodiff": lambda: ta.gelu()}
        if torch:
            fns["torch"] = lambda: torch.nn.functional.gelu(A, approximate="tanh")
        run("elementwise", "gelu (tanh form) float32 n=1e6", fns)
        tv = ad.Var(a[:262144])
        fns = {"pyautodiff": lambda: tv.gelu().sum().backward()}
        if torch:
            Av = torch.from_numpy(a[:262144].copy()).requires_grad_()

            def gelu_bw():
                torch.nn.functional.gelu(Av, approximate="tanh").sum().backward()
                Av.grad = None
            fns["torch"] = gelu_bw
        run("elementwise", "gelu (tanh) fwd+bwd float32 n=262144", fns)
        fns = {"pyautodiff": lambda: tv.gelu_erf().sum().backward()}
        if torch:
            def gelu_erf_bw():
                torch.nn.functional.gelu(Av).sum().backward()
                Av.grad = None
            fns["torch"] = gelu_erf_bw
        run("elementwise", "gelu (erf) fwd+bwd float32 n=262144", fns)
        # random draws and dropout (training mode), float32 n=1e6
        import pyautodiff.nn.functional as adF
        g = np.random.default_rng(1)
        for name, f_np, f_ad, f_t in (
                ("randn", lambda: g.standard_normal(n, dtype=np.float32),
                 lambda: ad.randn(n), lambda: torch.randn(n)),
                ("rand", lambda: g.random(n, dtype=np.float32), lambda: ad.rand(n),
                 lambda: torch.rand(n)),
                ("dropout p=0.5", lambda: a * (g.random(n, dtype=np.float32) >= 0.5) * 2,
                 lambda: adF.dropout(ta, 0.5, training=True),
                 lambda: torch.nn.functional.dropout(A, 0.5, training=True))):
            run("elementwise", f"{name} float32 n=1e6", libs_for(f_np, f_ad, f_t if torch else None))
        # softmax over the last dim of (B, N): many short rows (attention
        # scores, classifier logits) to a few long ones
        shapes = [(512, 1024)] if quick else [(8192, 64), (512, 1024), (16, 32768)]
        for bsz, nn_ in shapes:
            s2 = rng.standard_normal((bsz, nn_)).astype("float32")
            ts2 = ad.from_numpy(s2)
            S2 = torch.from_numpy(s2) if torch else None

            def np_softmax(s2=s2):
                e = np.exp(s2 - s2.max(1, keepdims=True))
                return e / e.sum(1, keepdims=True)
            for name, f_np, f_ad, f_t in (
                    ("softmax", np_softmax, lambda t=ts2: t.softmax(1),
                     lambda S=S2: torch.softmax(S, 1)),
                    ("log_softmax", lambda s2=s2: s2 - s2.max(1, keepdims=True) - np.log(np.exp(
                        s2 - s2.max(1, keepdims=True)).sum(1, keepdims=True)),
                     lambda t=ts2: t.log_softmax(1), lambda S=S2: torch.log_softmax(S, 1)),
                    ("logsumexp", lambda s2=s2: s2.max(1) + np.log(np.exp(
                        s2 - s2.max(1, keepdims=True)).sum(1)),
                     lambda t=ts2: t.logsumexp(1), lambda S=S2: torch.logsumexp(S, 1))):
                if name != "softmax" and (bsz, nn_) != (512, 1024):
                    continue
                run("elementwise", f"{name} float32 {bsz}x{nn_} dim 1",
                    libs_for(f_np, f_ad, f_t if torch else None))
        s2 = rng.standard_normal((512, 1024)).astype("float32")
        sv = ad.Var(s2)
        g2 = rng.standard_normal((512, 1024)).astype("float32")
        gw = ad.from_numpy(g2)
        fns = {"pyautodiff": lambda: (sv.softmax(1) * gw).sum().backward()}
        if torch:
            Sv = torch.from_numpy(s2.copy()).requires_grad_()
            GW = torch.from_numpy(g2)

            def softmax_bw():
                (torch.softmax(Sv, 1) * GW).sum().backward()
                Sv.grad = None
            fns["torch"] = softmax_bw
        run("elementwise", "softmax fwd+bwd float32 512x1024 dim 1", fns)
        m = rng.standard_normal((1024, 1024)).astype("float32")
        v = rng.standard_normal(1024).astype("float32")
        tm, tv = ad.from_numpy(m), ad.from_numpy(v)
        M, V = (torch.from_numpy(m), torch.from_numpy(v)) if torch else (None, None)
        for name, f_np, f_ad, f_t in (
                ("broadcast add 1024x1024 + 1024", lambda: m + v, lambda: tm + tv,
                 lambda: M + V),
                ("sum all 1024x1024", lambda: m.sum(), lambda: tm.sum(), lambda: M.sum()),
                ("sum last dim 1024x1024", lambda: m.sum(1), lambda: tm.sum(1),
                 lambda: M.sum(1)),
                ("sum first dim 1024x1024", lambda: m.sum(0), lambda: tm.sum(0),
                 lambda: M.sum(0))):
            run("elementwise", name, libs_for(f_np, f_ad, f_t if torch else None))
        # along a strided dim (lanes side by side), a loss, sqrt and a gather
        tall = rng.standard_normal((4096, 256)).astype("float32")
        tt, T2 = ad.from_numpy(tall), (torch.from_numpy(tall) if torch else None)
        m2 = rng.standard_normal((1024, 1024)).astype("float32")
        tm2, M2 = ad.from_numpy(m2), (torch.from_numpy(m2) if torch else None)
        pos = np.abs(m) + 0.1
        tpos, POS = ad.from_numpy(pos), (torch.from_numpy(pos) if torch else None)
        idx = rng.integers(0, 1024, (1024, 10))
        tidx, IDX = ad.from_numpy(idx), (torch.from_numpy(idx) if torch else None)

        def np_softmax0(a=tall):
            e = np.exp(a - a.max(0))
            return e / e.sum(0)
        for name, f_np, f_ad, f_t in (
                ("softmax float32 4096x256 dim 0", np_softmax0, lambda: tt.softmax(0),
                 lambda: torch.softmax(T2, 0)),
                ("cumsum float32 1024x1024 dim 0", lambda: np.cumsum(m, 0),
                 lambda: tm.cumsum(0), lambda: M.cumsum(0)),
                ("mse_loss float32 1024x1024 (mean)", lambda: np.mean((m - m2) ** 2),
                 lambda: adF.mse_loss(tm, tm2), lambda: torch.nn.functional.mse_loss(M, M2)),
                ("sqrt float32 1024x1024", lambda: np.sqrt(pos), lambda: tpos.sqrt(),
                 lambda: POS.sqrt()),
                ("gather float32 1024x1024 dim 1, 10 a row",
                 lambda: np.take_along_axis(m, idx, 1), lambda: tm.gather(1, tidx),
                 lambda: M.gather(1, IDX)),
                # a random condition (a branch would mispredict half the time)
                ("where(x > 0, x, y) float32 1024x1024", lambda: np.where(m > 0, m, m2),
                 lambda: ad.where(tm > 0, tm, tm2), lambda: torch.where(M > 0, M, M2)),
                # a transposed operand (numpy and torch give the output its layout,
                # pyautodiff's output is contiguous)
                ("exp of a transposed float32 1024x1024", lambda: np.exp(m.T),
                 lambda: tm.t().exp(), lambda: M.t().exp()),
                ("softmax of a transposed float32 1024x1024, last dim",
                 lambda: np_softmax0(m), lambda: tm.t().softmax(-1),
                 lambda: torch.softmax(M.t(), -1))):
            run("elementwise", name, libs_for(f_np, f_ad, f_t if torch else None))
        # a 4-d activation permuted (NCHW viewed as NHWC and fully reversed):
        # pyautodiff's outputs are contiguous, so these rows include a transpose
        # that numpy's and torch's layout-keeping outputs skip
        act = rng.standard_normal((32, 64, 28, 28)).astype("float32")
        tact, ACT = ad.from_numpy(act), (torch.from_numpy(act) if torch else None)
        nhwc, rev = (0, 2, 3, 1), (3, 2, 1, 0)
        for name, f_np, f_ad, f_t in (
                ("relu of a float32 (32,64,28,28).permute(3,2,1,0)",
                 lambda: np.maximum(act.transpose(rev), 0), lambda: tact.permute(rev).relu(),
                 lambda: ACT.permute(rev).relu()),
                ("softmax(1) of a float32 (32,64,28,28).permute(0,2,3,1)", None,
                 lambda: tact.permute(nhwc).softmax(1), lambda: ACT.permute(nhwc).softmax(1)),
                ("sum(-1) of a float32 (32,64,28,28) (rows of 28)", lambda: act.sum(-1),
                 lambda: tact.sum(-1), lambda: ACT.sum(-1))):
            run("elementwise", name, libs_for(f_np, f_ad, f_t if torch else None))
        # a loss's gradient in one pass (mse_loss backward), a broadcast bias's
        # gradient (a sum over the dims its expanded gradient repeats)
        vm, vb = ad.Var(m), ad.Var(m[0].copy())
        fns = {"pyautodiff": lambda: adF.mse_loss(vm, tm2).backward()}
        if torch:
            Mv = torch.from_numpy(m.copy()).requires_grad_()
            Bv = torch.from_numpy(m[0].copy()).requires_grad_()

            def mse_bw():
                torch.nn.functional.mse_loss(Mv, M2).backward()
                Mv.grad = None

            def bias_bw():
                (Mv + Bv).sum().backward()
                Mv.grad = Bv.grad = None
            fns["torch"] = mse_bw
        run("elementwise", "mse_loss fwd+bwd float32 1024x1024", fns)
        fns = {"pyautodiff": lambda: (vm + vb).sum().backward()}
        if torch:
            fns["torch"] = bias_bw
        run("elementwise", "(x + bias).sum() fwd+bwd float32 1024x1024", fns)

    if "overhead" in only:
        a = np.ones((4, 4), np.float32)
        ta, tb, tw = ad.from_numpy(a), ad.from_numpy(a), ad.Var(a)
        if torch:
            A, B = torch.ones(4, 4), torch.ones(4, 4)
            W = torch.ones(4, 4, requires_grad=True)
        for name, f_np, f_ad, f_t, f_adt, f_tt in (
                ("add", lambda: a + a, lambda: ta + tb, lambda: A + B, lambda: tw + tb,
                 lambda: W + B),
                ("mul", lambda: a * a, lambda: ta * tb, lambda: A * B, lambda: tw * tb,
                 lambda: W * B),
                ("exp", lambda: np.exp(a), lambda: ta.exp(), lambda: A.exp(),
                 lambda: tw.exp(), lambda: W.exp()),
                ("matmul", lambda: a @ a, lambda: ta @ tb, lambda: A @ B, lambda: tw @ tb,
                 lambda: W @ B),
                ("sum", lambda: a.sum(), lambda: ta.sum(), lambda: A.sum(), lambda: tw.sum(),
                 lambda: W.sum()),
                ("t()", lambda: a.T, lambda: ta.t(), lambda: A.t(), lambda: tw.t(),
                 lambda: W.t()),
                ("reshape", lambda: a.reshape(2, 8), lambda: ta.reshape(2, 8),
                 lambda: A.reshape(2, 8), lambda: tw.reshape(2, 8), lambda: W.reshape(2, 8)),
                ("[1]", lambda: a[1], lambda: ta[1], lambda: A[1], lambda: tw[1],
                 lambda: W[1])):
            run("overhead", f"(4,4) {name} untracked",
                libs_for(f_np, f_ad, f_t if torch else None), repeat=rep, number=20000)
            fns = {"pyautodiff": f_adt}
            if torch:
                fns["torch"] = f_tt
            run("overhead", f"(4,4) {name} tracked", fns, repeat=rep, number=20000)

        # reading a tensor, joins and conversions (untracked)
        one = np.ones(1, np.float32)
        t1 = ad.from_numpy(one)
        O1 = torch.ones(1) if torch else None
        for name, f_np, f_ad, f_t in (
                ("(4,4) .shape", lambda: a.shape, lambda: ta.shape, lambda: A.shape),
                ("(1,) item()", lambda: one.item(), lambda: t1.item(), lambda: O1.item()),
                ("(4,4) expand(2, 4, 4)", lambda: np.broadcast_to(a, (2, 4, 4)),
                 lambda: ta.expand(2, 4, 4), lambda: A.expand(2, 4, 4)),
                ("stack of two (4,4)", lambda: np.stack([a, a]), lambda: ad.stack([ta, tb]),
                 lambda: torch.stack([A, B])),
                ("cat of two (4,4)", lambda: np.concatenate([a, a]), lambda: ad.cat([ta, tb]),
                 lambda: torch.cat([A, B])),
                ("(4,4) to numpy (np.asarray; torch .numpy())", lambda: np.asarray(a),
                 lambda: np.asarray(ta), lambda: A.numpy()),
                ("(4,4) from numpy (ad copies, torch shares)",
                 lambda: a.copy(), lambda: ad.from_numpy(a), lambda: torch.from_numpy(a))):
            run("overhead", name, libs_for(f_np, f_ad, f_t if torch else None), repeat=rep,
                number=20000)

        def chain_ad():
            y = tw
            for _ in range(100):
                y = y + tb
            y.sum().backward()

        fns = {"pyautodiff": chain_ad}
        if torch:
            def chain_t():
                y = W
                for _ in range(100):
                    y = y + B
                y.sum().backward()
                W.grad = None

            fns["torch"] = chain_t
        run("overhead", "chain of 100 tracked adds + sum + backward (per op)", fns,
            extra={"per": 102})

    if "train" in only:
        fns = {"pyautodiff": mlp_step_ad(np, ad, rng)}
        if torch:
            fns["torch"] = mlp_step_torch(np, ad, torch, rng)
        run("train", "MLP 784-512-512-10 batch 128 SGD step", fns, repeat=rep, number=5)
        fns = {"pyautodiff": mlp_step_ad(np, ad, rng, fused=True)}
        if torch:
            fns["torch"] = mlp_step_torch(np, ad, torch, rng, fused=True)
        run("train", "MLP step, F.linear (ad: bias+relu fused; torch: addmm)", fns,
            repeat=rep, number=5)
        if args.threads == 1 and not quick:
            mem = {}
            for lib_ in fns:
                r = subprocess.run([sys.executable, __file__, "--train-mem-child", lib_],
                                   capture_output=True, text=True, env=os.environ.copy())
                if r.returncode == 0:
                    mem[lib_] = json.loads(r.stdout.strip().splitlines()[-1])["bytes"]
                else:
                    print(r.stderr, file=sys.stderr)
            Row(out, "train", "MLP step: peak RSS growth over 10 steps", 1).emit(
                {k: float(v) for k, v in mem.items()}, {"unit": "bytes"})
        for foreach in (None, True):
            run("train", "Adam step over the 784-512-512-10 MLP's parameters" +
                (" (torch foreach=True)" if foreach else ""),
                adam_step_fns(np, ad, torch, foreach), repeat=rep)
        if args.threads == 1 and not quick:
            mem = {}
            for lib_ in ["pyautodiff"] + (["torch"] if torch else []):
                r = subprocess.run([sys.executable, __file__, "--adam-mem-child", lib_],
                                   capture_output=True, text=True, env=os.environ.copy())
                if r.returncode == 0:
                    mem[lib_] = json.loads(r.stdout.strip().splitlines()[-1])["bytes"]
                else:
                    print(r.stderr, file=sys.stderr)
            Row(out, "train", "MLP Adam steps: peak RSS growth, steps 6-105", 1).emit(
                {k: float(v) for k, v in mem.items()}, {"unit": "bytes"})

    if "models" in only:
        model_rows(np, ad, torch, run, rep)

    if "chain" in only and args.threads == 1:
        n = 100_000 if quick else 1_000_000
        for lib in (["pyautodiff", "torch"] if torch else ["pyautodiff"]):
            r = subprocess.run([sys.executable, __file__, "--chain-child", lib, str(n)],
                               capture_output=True, text=True, env=os.environ.copy())
            if r.returncode:
                print(r.stderr, file=sys.stderr)
                continue
            rec = json.loads(r.stdout.strip().splitlines()[-1])
            Row(out, "chain", f"{n:,}-op chain y = y*1.0001 + 0.001 (forward, backward, free)",
                1).emit({lib: rec["seconds"] / rec["nodes"]},
                        {"bytes_per_node": {lib: rec["bytes_per_node"]}})
    return out


def mlp_step_ad(np, ad, rng, optim="SGD", fused=False):
    """One SGD step of the 784-512-512-10 MLP (batch 128, ReLU, softmax
    cross-entropy when ad.nn has it, else MSE).  fused: the layers as
    F.linear(x, W, b, activation="relu") with W (out, in), one op per layer;
    else x @ W + b and relu as separate ops, W (in, out)."""
    if fused:
        return mlp_step_ad_fused(np, ad, rng, optim)
    ws = [ad.Var.randn((784, 512), seed=1, std=0.05), ad.Var.zeros(512),
          ad.Var.randn((512, 512), seed=2, std=0.05), ad.Var.zeros(512),
          ad.Var.randn((512, 10), seed=3, std=0.05), ad.Var.zeros(10)]
    x = ad.randn((128, 784), seed=4)
    labels = rng.integers(0, 10, 128)
    target = ad.from_numpy(np.eye(10, dtype=np.float32)[labels])
    ce = getattr(getattr(ad, "nn", None), "cross_entropy", None)
    tlab = ad.from_numpy(labels.astype(np.int64))

    opt = ad.optim.SGD(ws, lr=0.01) if optim == "SGD" else ad.optim.Adam(ws, lr=1e-3)

    def step():
        h = (x @ ws[0] + ws[1]).relu()
        h = (h @ ws[2] + ws[3]).relu()
        logits = h @ ws[4] + ws[5]
        loss = ce(logits, tlab) if ce else ((logits - target) ** 2).mean()
        opt.step(loss.backward())
    return step


def mlp_step_ad_fused(np, ad, rng, optim="SGD"):
    F = ad.nn.functional
    ws = [ad.Var.randn((512, 784), seed=1, std=0.05), ad.Var.zeros(512),
          ad.Var.randn((512, 512), seed=2, std=0.05), ad.Var.zeros(512),
          ad.Var.randn((10, 512), seed=3, std=0.05), ad.Var.zeros(10)]
    x = ad.randn((128, 784), seed=4)
    tlab = ad.from_numpy(rng.integers(0, 10, 128).astype(np.int64))
    opt = ad.optim.SGD(ws, lr=0.01) if optim == "SGD" else ad.optim.Adam(ws, lr=1e-3)

    def step():
        h = F.linear(x, ws[0], ws[1], activation="relu")
        h = F.linear(h, ws[2], ws[3], activation="relu")
        loss = F.cross_entropy(F.linear(h, ws[4], ws[5]), tlab)
        opt.step(loss.backward())
    return step


def mlp_step_torch(np, ad, torch, rng, optim="SGD", fused=False):
    """torch's step; fused: F.linear (addmm, the bias in the product) + relu,
    W (out, in), as torch.nn.Linear runs it."""
    tg = torch.Generator().manual_seed(0)
    ws = []
    for fan_in, fan_out in ((784, 512), (512, 512), (512, 10)):
        shape = (fan_out, fan_in) if fused else (fan_in, fan_out)
        ws += [(torch.randn(*shape, generator=tg) * 0.05).requires_grad_(),
               torch.zeros(fan_out, requires_grad=True)]
    x = torch.randn(128, 784, generator=tg)
    labels = torch.from_numpy(rng.integers(0, 10, 128))
    opt = torch.optim.SGD(ws, lr=0.01) if optim == "SGD" else torch.optim.Adam(ws, lr=1e-3)
    if fused:
        F = torch.nn.functional

        def fstep():
            h = F.relu(F.linear(x, ws[0], ws[1]))
            h = F.relu(F.linear(h, ws[2], ws[3]))
            loss = F.cross_entropy(F.linear(h, ws[4], ws[5]), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return fstep
    target = torch.nn.functional.one_hot(labels, 10).float()
    use_ce = hasattr(getattr(ad, "nn", None), "cross_entropy")

    def step():
        h = (x @ ws[0] + ws[1]).relu()
        h = (h @ ws[2] + ws[3]).relu()
        logits = h @ ws[4] + ws[5]
        loss = (torch.nn.functional.cross_entropy(logits, labels) if use_ce
                else ((logits - target) ** 2).mean())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def model_rows(np, ad, torch, run, rep):
    """Training steps of two ad.nn models against the same torch.nn models
    (same weights, plain SGD): a small CNN and a one-block transformer."""
    rng = np.random.default_rng(0)

    def cnn(nn):
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(32 * 7 * 7, 10))

    def block(nn, vocab=96, d=128, heads=4):
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(vocab, d)
                self.ln1 = nn.LayerNorm(d)
                self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
                self.ln2 = nn.LayerNorm(d)
                self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                self.head = nn.Linear(d, vocab)

            def forward(self, idx, mask):
                x = self.emb(idx)
                h = self.ln1(x)
                x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
                x = x + self.mlp(self.ln2(x))
                return self.head(x)
        return Block()

    images = rng.standard_normal((64, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, 64)
    tokens = rng.integers(0, 96, (32, 65))
    causal = np.triu(np.ones((64, 64), dtype=bool), 1)
    cases = [("CNN conv-relu-pool x2 + linear, batch 64x1x28x28", cnn,
              (images,), labels, 10),
             ("transformer block d=128 4 heads seq 64 batch 32", block,
              (tokens[:, :-1], causal), tokens[:, 1:].reshape(-1), 96)]
    for name, make, inputs, target, ncls in cases:
        am = make(ad.nn)
        a_in = [ad.from_numpy(x) for x in inputs]
        a_t = ad.from_numpy(target.astype(np.int64))
        opt = ad.optim.SGD(list(am.parameters()), lr=0.01)

        def step_ad(am=am, a_in=a_in, a_t=a_t, opt=opt, ncls=ncls):
            loss = ad.nn.functional.cross_entropy(am(*a_in).reshape(-1, ncls), a_t)
            opt.step(loss.backward())

        fns = {"pyautodiff": step_ad}
        if torch:
            tm = make(torch.nn)
            tm.load_state_dict({k: torch.from_numpy(np.array(v))
                                for k, v in am.state_dict().items()})
            t_in = [torch.from_numpy(x) for x in inputs]
            t_t = torch.from_numpy(target)
            topt = torch.optim.SGD(tm.parameters(), lr=0.01)

            def step_t(tm=tm, t_in=t_in, t_t=t_t, topt=topt, ncls=ncls):
                loss = torch.nn.functional.cross_entropy(tm(*t_in).reshape(-1, ncls), t_t)
                topt.zero_grad()
                loss.backward()
                topt.step()

            fns["torch"] = step_t
        run("models", name + " SGD step", fns, repeat=rep, number=3)
    # a convolution whose im2col outgrows L2: the GEMM packs it from the image
    xi = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    wi = (rng.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float32)
    axi, awi = ad.from_numpy(xi), ad.from_numpy(wi)
    fns = {"pyautodiff": lambda: ad.nn.functional.conv2d(axi, awi, padding=1)}
    if torch:
        txi, twi = torch.from_numpy(xi), torch.from_numpy(wi)
        fns["torch"] = lambda: torch.nn.functional.conv2d(txi, twi, padding=1)
    run("models", "conv2d forward (8,64,56,56) * 64 3x3, padding 1", fns, repeat=rep, number=3)


def train_mem_child(lib):
    """Peak RSS growth of 10 training steps, after set-up, in a fresh process."""
    import numpy as np

    sys.path.insert(0, ROOT)
    import pyautodiff as ad

    rng = np.random.default_rng(0)
    if lib == "torch":
        import torch

        torch.set_num_threads(1)
        step = mlp_step_torch(np, ad, torch, rng)
    else:
        ad.set_num_threads(1)
        step = mlp_step_ad(np, ad, rng)
    step()  # warm-up: lazily created pools and caches are not growth
    gc.collect()
    base = rss_reset_peak()
    for _ in range(10):
        step()
    print(json.dumps({"bytes": vm_hwm() - base}))


def adam_step_fns(np, ad, torch, foreach=None):
    """Adam's update alone over the MLP's parameters (float32), from fixed
    gradients: ours against torch.optim.Adam (foreach=None is torch's
    default, which on CPU is the per-tensor loop)."""
    shapes = [(784, 512), (512,), (512, 512), (512,), (512, 10), (10,)]
    rng = np.random.default_rng(5)
    ps = [(rng.standard_normal(s) * 0.05).astype(np.float32) for s in shapes]
    gs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ws = [ad.Var(p) for p in ps]
    store = ad.GradStore()
    for w, g in zip(ws, gs):
        store.insert(w, ad.from_numpy(g))
    opt = ad.optim.Adam(ws, lr=1e-3)
    fns = {"pyautodiff": lambda: opt.step(store)}
    if torch is not None:
        tws = [torch.from_numpy(p.copy()).requires_grad_() for p in ps]
        for t, g in zip(tws, gs):
            t.grad = torch.from_numpy(g)
        fns["torch"] = torch.optim.Adam(tws, lr=1e-3, foreach=foreach).step
    return fns


def adam_mem_child(lib):
    """Peak RSS growth of 100 Adam training steps after 5 warm-up steps (the
    optimizer state is allocated at the first), in a fresh process."""
    import numpy as np

    sys.path.insert(0, ROOT)
    import pyautodiff as ad

    rng = np.random.default_rng(0)
    if lib == "torch":
        import torch

        torch.set_num_threads(1)
        step = mlp_step_torch(np, ad, torch, rng, optim="Adam")
    else:
        ad.set_num_threads(1)
        step = mlp_step_ad(np, ad, rng, optim="Adam")
    for _ in range(5):
        step()
    gc.collect()
    base = rss_reset_peak()
    for _ in range(100):
        step()
    print(json.dumps({"bytes": vm_hwm() - base}))


def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def rss_reset_peak():
    """Resets the kernel's peak-RSS mark (VmHWM) and returns the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_kb("VmRSS")


def vm_hwm():
    return _status_kb("VmHWM")


def chain_child(lib, n):
    """One chain in a fresh process: time per node and peak RSS growth per node."""
    sys.path.insert(0, ROOT)
    if lib == "torch":
        import torch

        x = torch.ones(4, requires_grad=True)
    else:
        import pyautodiff as ad

        x = ad.Var.ones(4)
    gc.collect()
    base = rss_reset_peak()
    t0 = time.perf_counter()
    y = x
    for _ in range(n // 2):
        y = y * 1.0001 + 0.001
    y.sum().backward()
    del y
    secs = time.perf_counter() - t0
    grown = vm_hwm() - base
    print(json.dumps({"nodes": n, "seconds": secs, "bytes_per_node": grown / n}))


# ---------------------------------------------------------------------------- parent side
def fmt_time(s):
    if s < 1e-6:
        return f"{s * 1e9:7.0f}ns"
    if s < 1e-3:
        return f"{s * 1e6:7.2f}us"
    return f"{s * 1e3:7.2f}ms"


def report(rows):
    print("\n" + "=" * 100)
    print("ratio = other / pyautodiff time (> 1.0: pyautodiff faster; for matmul, the GFLOP/s "
          "ratio)")
    cur = None
    for r in rows:
        if r["section"] != cur:
            cur = r["section"]
            print(f"\n[{cur}]")
            print(f"{'row':<58}{'thr':>4} {'pyautodiff':>10} {'numpy':>10} {'torch':>10} "
                  f"{'vs numpy':>9} {'vs torch':>9}")
        t = r["times"]
        ours = t.get("pyautodiff")
        per = r.get("per", 1)
        cells = []
        for k in ("pyautodiff", "numpy", "torch"):
            cells.append(fmt_time(t[k] / per) if k in t else f"{'-':>9}")
        ratios = []
        for k in ("numpy", "torch"):
            ratios.append(f"{t[k] / ours:8.2f}x" if k in t and ours else f"{'-':>9}")
        extra = ""
        if "flops" in r and ours:
            extra = f"  {r['flops'] / ours / 1e9:6.1f} GFLOP/s"
        if r.get("unit") == "bytes":
            cells = [f"{t[k] / 2**20:7.1f}MiB" if k in t else f"{'-':>9}"
                     for k in ("pyautodiff", "numpy", "torch")]
            ratios = [f"{'-':>9}", (f"{t['torch'] / ours:8.2f}x" if ours else "  no grow")
                      if "torch" in t else f"{'-':>9}"]
        if "bytes_per_node" in r:
            extra = "  " + ", ".join(f"{k}: {v:.0f} B/node" for k, v in
                                    r["bytes_per_node"].items())
        print(f"{r['name']:<58}{r['threads']:>4} {' '.join(cells)} {' '.join(ratios)}{extra}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="comma list of " + ",".join(SECTIONS))
    ap.add_argument("--threads", type=int, default=0, help="child: thread count")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--chain-child", nargs=2)
    ap.add_argument("--train-mem-child")
    ap.add_argument("--adam-mem-child")
    ap.add_argument("--checkpoint", action="store_true",
                    help="only the checkpointing row (saved bytes, step time)")
    ap.add_argument("--profile", action="store_true",
                    help="break one MLP training step down (GEMM, bias/relu, softmax-CE, "
                         "optimizer, Python overhead); --threads sets the thread count")
    args = ap.parse_args()
    if args.checkpoint:
        checkpoint_bench(args.quick)
        return
    if args.adam_mem_child:
        adam_mem_child(args.adam_mem_child)
        return
    if args.train_mem_child:
        train_mem_child(args.train_mem_child)
        return
    if args.chain_child:
        chain_child(args.chain_child[0], int(args.chain_child[1]))
        return
    if args.child:
        child(args)
        return
    env = bench_env(os.environ)
    if args.profile:
        profile(args.threads or 1)
        return
    print_environment(env)
    rows = []
    for threads in (1, 2):
        cenv = dict(env, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
                    MKL_NUM_THREADS=str(threads), PYAUTODIFF_NUM_THREADS=str(threads))
        cmd = [sys.executable, __file__, "--child", "--threads", str(threads)]
        if args.quick:
            cmd.append("--quick")
        if args.only:
            cmd += ["--only", args.only]
        print(f"-- {threads} thread(s)", flush=True)
        p = subprocess.run(cmd, env=cenv, capture_output=True, text=True)
        if p.returncode:
            sys.stderr.write(p.stderr)
            raise SystemExit(f"benchmark child failed ({threads} threads)")
        for line in p.stdout.splitlines():
            if line.startswith("{"):
                rows.append(json.loads(line))
    rows.sort(key=lambda r: (SECTIONS.index(r["section"]), r["threads"]))
    report(rows)
    if (not args.only and not args.quick) or "load" in args.only.split(","):
        load_section(args.quick)


# ---------------------------------------------------------------------------- environment
# The variables that pick numpy's and torch's kernels, read when each library
# loads: OpenBLAS's core type, numpy's ufunc SIMD targets, ATen's vectorised
# loops, and the statically linked MKL (torch's matmul) and oneDNN (torch's
# GELU, convolutions), which ignore ATEN_CPU_CAPABILITY.  Under
# PYAUTODIFF_ISA=avx2 each defaults to an AVX2 machine's choice (AVX512_SPR
# names the Sapphire Rapids loops numpy 2.4 adds on Intel parts).
AVX2_PEERS = {
    "OPENBLAS_CORETYPE": "Haswell",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}


def bench_env(environ):
    """The children's environment: OPENBLAS_L2_SIZE unset; the peers' kernel
    pickers (AVX2_PEERS) kept only under PYAUTODIFF_ISA (emulating a smaller
    machine, where numpy and torch must run the matching kernels: for avx2
    each one not set takes AVX2_PEERS' value), else unset so numpy and torch
    run their best.  They are read when the libraries load, so they have to
    be in the child's environment before numpy and torch are imported, as
    they are here."""
    cap = environ.get("PYAUTODIFF_ISA", "")
    drop = {"OPENBLAS_L2_SIZE"} | (set() if cap else set(AVX2_PEERS))
    env = {k: v for k, v in environ.items() if k not in drop}
    if cap == "avx2":
        for k, v in AVX2_PEERS.items():
            env.setdefault(k, v)
    return env


def print_environment(env):
    """The ISA level pyautodiff dispatches to, the thread counts, and the BLAS
    numpy and torch call (threadpoolctl's view when it is installed), from a
    child with the benchmark's environment."""
    code = r'''
import json, os, sys
sys.path.insert(0, sys.argv[1])
import numpy
from pyautodiff._lib import ffi, lib
info = {"isa": ffi.string(lib.ad_gemm_kernel()).decode(),
        "ew": ffi.string(lib.ad_ew_kernel()).decode(), "cpus": os.cpu_count(),
        "cap": os.environ.get("PYAUTODIFF_ISA", "")}
try:  # the SIMD targets numpy's ufunc loops dispatch to on this CPU
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    info["npy_simd"] = [k for k in __cpu_dispatch__ if __cpu_features__.get(k)]
except ImportError:
    pass
try:
    import torch
    info["torch"] = torch.__version__
    cfg = torch.__config__.show()
    import re
    info["torch_blas"] = ", ".join(re.findall(r"(?:BLAS_INFO|LAPACK_INFO|USE_MKLDNN)=\w+",
                                              cfg)) or "?"
    info["torch_isa"] = torch.backends.cpu.get_cpu_capability()
except ImportError:
    torch = None
try:
    from threadpoolctl import threadpool_info
    info["pools"] = [{k: d.get(k) for k in ("user_api", "internal_api", "version",
                                            "architecture", "filepath")}
                     for d in threadpool_info()]
except ImportError:
    c = numpy.show_config(mode="dicts")
    info["numpy_blas"] = c["Build Dependencies"]["blas"].get("openblas configuration", "")
print(json.dumps(info))
'''
    r = subprocess.run([sys.executable, "-c", code, ROOT], capture_output=True, text=True,
                       env=env)
    if r.returncode:
        sys.stderr.write(r.stderr)
        return
    info = json.loads(r.stdout.strip().splitlines()[-1])
    cap = f" (capped by PYAUTODIFF_ISA={info['cap']})" if info["cap"] else ""
    ew = (f"; elementwise tables {info['ew']} (256-bit vectors, ad_ew_kernel)"
          if info["ew"] != info["isa"] else "")
    print(f"pyautodiff ISA level: {info['isa']}{cap}{ew}")
    print(f"threads: each section runs at 1 and at 2 threads (this machine: "
          f"{info['cpus']} CPUs); numpy's elementwise ops are single-threaded at both")
    want = env.get("OPENBLAS_CORETYPE")
    for d in info.get("pools", []):
        lib_ = os.path.basename(d["filepath"] or "")
        who = "torch" if "torch" in (d["filepath"] or "") else "numpy"
        arch = d["architecture"] or ""
        print(f"  {who}: {d['user_api']} {d['internal_api']} {d['version'] or ''} "
              f"kernel={arch or '?'} ({lib_})")
        if d["internal_api"] == "openblas" and who == "numpy":
            if want:
                ok = arch.lower() == want.lower()
                print(f"  numpy's OpenBLAS: OPENBLAS_CORETYPE={want} passed through "
                      f"(PYAUTODIFF_ISA={info['cap']}); reported kernel {arch or '?'}"
                      + ("" if ok else "  WARNING: not the name asked for (OpenBLAS maps "
                                       "some, e.g. Zen runs Haswell's kernels)"))
            elif os.environ.get("OPENBLAS_CORETYPE"):
                print(f"  OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']} is unset for the "
                      f"children (it is kept only with PYAUTODIFF_ISA, to emulate a smaller "
                      f"machine)")
            elif info["cap"]:
                print(f"  note: PYAUTODIFF_ISA={info['cap']} without OPENBLAS_CORETYPE: numpy "
                      f"runs its {arch or 'default'} kernel, not one of the capped level")
    if "npy_simd" in info:
        simd = info["npy_simd"]
        off = env.get("NPY_DISABLE_CPU_FEATURES", "")
        print(f"  numpy ufuncs: SIMD dispatch {' '.join(simd) or 'baseline only'}"
              + (f" (NPY_DISABLE_CPU_FEATURES={off})" if off else ""))
        if not off and os.environ.get("NPY_DISABLE_CPU_FEATURES"):
            print("  NPY_DISABLE_CPU_FEATURES is unset for the children (it is kept only with "
                  "PYAUTODIFF_ISA, to emulate a smaller machine)")
        if info["cap"] and info["cap"] != "avx512" and any("512" in t or t == "X86_V4"
                                                          for t in simd):
            print(f"  note: numpy's ufuncs still run AVX-512 under PYAUTODIFF_ISA={info['cap']}; "
                  f'NPY_DISABLE_CPU_FEATURES="{AVX2_PEERS["NPY_DISABLE_CPU_FEATURES"]}" gives '
                  f"an AVX2 machine's loops")
    if "numpy_blas" in info:
        print("numpy BLAS:", info["numpy_blas"], "(pip install threadpoolctl for more)")
    if "torch" in info:
        print(f"  torch {info['torch']} build: {info['torch_blas']} "
              f"(MKL is linked in statically: threadpoolctl does not list it)")
        caps = [f"{k}={env[k]}" for k in ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
                if k in env]
        print(f"  torch ATen loops: {info.get('torch_isa', '?')}; MKL (matmul) and oneDNN "
              f"(GELU, conv): {', '.join(caps) or 'their best ISA'}")
        if info["cap"] and not caps:
            print(f"  note: torch's MKL and oneDNN still run their best ISA under "
                  f"PYAUTODIFF_ISA={info['cap']}")
    else:
        print("torch not installed: pip install torch==2.13.0 to add it to the comparison")


# ---------------------------------------------------------------------------- profile
def profile(threads):
    """One SGD step of the 784-512-512-10 MLP (batch 128), broken down: each
    part timed alone on the step's shapes (forward and backward products,
    bias + relu forward and backward as separate ops and as the fused linear
    op's epilogue and mask pass, softmax cross-entropy forward and backward,
    the optimizer on contiguous gradients, as a real step's), the whole step
    both ways, and the Python/graph overhead per op measured as the same step
    on 4-wide layers (batch 4), whose kernels cost next to nothing.  With
    torch installed, its step (same threads) is timed interleaved with ours."""
    import numpy as np

    sys.path.insert(0, ROOT)
    import pyautodiff as ad

    F = ad.nn.functional
    ad.set_num_threads(threads)
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    B, dims = 128, (784, 512, 512, 10)
    xs = [rng.standard_normal((B, d)).astype(np.float32) for d in dims]
    ws = [rng.standard_normal((dims[i], dims[i + 1])).astype(np.float32) * 0.05
          for i in range(3)]
    T = {k: ad.from_numpy(v) for k, v in
         [(f"x{i}", x) for i, x in enumerate(xs)] + [(f"w{i}", w) for i, w in enumerate(ws)]}
    rep = 11
    parts = []

    def part(name, fn, n_ops):
        parts.append((name, timeit([fn], rep)[0], n_ops))

    def gemms():
        for i in range(3):
            x, w = T[f"x{i}"], T[f"w{i}"]
            g = T[f"x{i + 1}"]
            x @ w          # forward
            x.t() @ g      # weight gradient
            if i:
                g @ w.t()  # input gradient (none for the data)
    part("GEMM (3 forward, 3 weight-grad, 2 input-grad)", gemms, 8)
    bs = [ad.from_numpy(np.zeros(d, np.float32)) for d in dims[1:]]

    def bias_relu():
        for i in range(2):
            h = T[f"x{i + 1}"]
            y = (h + bs[i]).relu()
            g = T[f"x{i + 1}"]
            (y > 0.0).to_dtype(ad.float32) * g  # relu's backward, as its formula
            g.sum(0)  # bias gradient
        (T["x3"] + bs[2])
        T["x3"].sum(0)
    part("unfused: bias + relu, fwd and bwd (incl. bias grads)", bias_relu, 11)

    # the fused op: forward (GEMM + epilogue) and backward (mask + bias sums,
    # two GEMMs) of each layer, minus the same GEMMs alone
    lw = [ad.Var(np.ascontiguousarray(w.T)) for w in ws]
    lb = [ad.Var(np.zeros(d, np.float32)) for d in dims[1:]]
    lx = [T["x0"]] + [ad.Var(xs[i]) for i in (1, 2)]
    gys = [ad.from_numpy(rng.standard_normal((B, d)).astype(np.float32)) for d in dims[1:]]

    def fused_layers():
        for i in range(3):
            y = F.linear(lx[i], lw[i], lb[i], activation="relu" if i < 2 else None)
            (y * gys[i]).sum().backward()

    def plain_layers():  # the same GEMMs and the (y * g).sum() seeding, unfused ops
        for i in range(3):
            y = lx[i] @ lw[i].t()
            (y * gys[i]).sum().backward()
    t_f, t_p = timeit([fused_layers, plain_layers], rep)
    parts.append(("fused linear: epilogue + mask/bias-grad pass (3 layers)",
                  max(t_f - t_p, 0.0), 3))
    labels = ad.from_numpy(rng.integers(0, 10, B).astype(np.int64))
    lv = ad.Var(xs[3])

    def softmax_ce():
        F.cross_entropy(lv, labels).backward()
    part("softmax cross-entropy, forward and backward", softmax_ce, 4)
    params = [ad.Var(w) for w in ws] + [ad.Var(np.zeros(d, np.float32)) for d in dims[1:]]
    opt = ad.optim.SGD(params, lr=0.01)
    grads = ad.GradStore()  # contiguous gradients, as backward gives them
    for p_ in params:
        grads.insert(p_, ad.from_numpy(rng.standard_normal(p_.shape).astype(np.float32)))

    def optimizer():
        opt.step(grads)
    part("SGD optimizer update (6 parameters, fused native)", optimizer, 6)
    steps = {"unfused": mlp_step_ad(np, ad, rng), "fused": mlp_step_ad(np, ad, rng, fused=True)}
    if torch:
        steps["torch"] = mlp_step_torch(np, ad, torch, rng, fused=True)
    names = list(steps)
    totals = dict(zip(names, timeit([steps[k] for k in names], rep, number=5)))
    total = totals["unfused"]
    tiny = {k: tiny_mlp_step(np, ad, rng, fused=k == "fused") for k in ("unfused", "fused")}
    over = dict(zip(tiny, timeit(list(tiny.values()), rep, number=50)))
    n_ops = {"unfused": 22, "fused": 14}  # forward + backward ops and optimizer updates
    print(f"\n[profile] MLP 784-512-512-10, batch 128, SGD, {threads} thread(s), "
          f"medians of {rep}; shares of the unfused step")
    print(f"{'part':<60}{'time':>10}{'share':>8}{'per op':>10}")
    for name, t, k in parts:
        print(f"{name:<60}{fmt_time(t):>10}{t / total:>8.0%}{fmt_time(t / k):>10}")
    for k in tiny:
        print(f"{'Python + graph overhead, ' + k + ' step (4-wide layers)':<60}"
              f"{fmt_time(over[k]):>10}{over[k] / total:>8.0%}{fmt_time(over[k] / n_ops[k]):>10}")
    unf = [t for n, t, _ in parts if not n.startswith("fused")]
    rest = total - sum(unf) - over["unfused"]
    sign = "-" if rest < 0 else ""  # < 0: parts timed alone ran slower than in the step
    print(f"{'unaccounted, unfused step (allocation, caches)':<60}"
          f"{sign + fmt_time(abs(rest)).strip():>10}{rest / total:>8.0%}")
    for k in names:
        label = {"unfused": "whole step, x @ W + b, relu (separate ops)",
                 "fused": "whole step, F.linear(..., activation='relu')",
                 "torch": "torch step, F.linear + relu (same threads)"}[k]
        print(f"{label:<60}{fmt_time(totals[k]):>10}{totals[k] / total:>8.0%}")
    if torch:
        print(f"ours / torch: unfused {totals['unfused'] / totals['torch']:.2f}, "
              f"fused {totals['fused'] / totals['torch']:.2f} (< 1: faster)")


def tiny_mlp_step(np, ad, rng, fused=False):
    """The MLP step's ops on 4-wide layers: what the step costs besides its kernels."""
    if fused:
        F = ad.nn.functional
        fw = [ad.Var.randn((4, 4), seed=1, std=0.05), ad.Var.zeros(4),
              ad.Var.randn((4, 4), seed=2, std=0.05), ad.Var.zeros(4),
              ad.Var.randn((4, 4), seed=3, std=0.05), ad.Var.zeros(4)]
        fx = ad.randn((4, 4), seed=4)
        flab = ad.from_numpy(rng.integers(0, 4, 4).astype(np.int64))
        fopt = ad.optim.SGD(fw, lr=0.01)

        def fstep():
            h = F.linear(fx, fw[0], fw[1], activation="relu")
            h = F.linear(h, fw[2], fw[3], activation="relu")
            fopt.step(F.cross_entropy(F.linear(h, fw[4], fw[5]), flab).backward())
        return fstep
    ws = [ad.Var.randn((4, 4), seed=1, std=0.05), ad.Var.zeros(4),
          ad.Var.randn((4, 4), seed=2, std=0.05), ad.Var.zeros(4),
          ad.Var.randn((4, 4), seed=3, std=0.05), ad.Var.zeros(4)]
    x = ad.randn((4, 4), seed=4)
    ce = getattr(getattr(ad, "nn", None), "cross_entropy", None)
    tlab = ad.from_numpy(rng.integers(0, 4, 4).astype(np.int64))
    target = ad.from_numpy(np.eye(4, dtype=np.float32))
    opt = ad.optim.SGD(ws, lr=0.01)

    def step():
        h = (x @ ws[0] + ws[1]).relu()
        h = (h @ ws[2] + ws[3]).relu()
        logits = h @ ws[4] + ws[5]
        loss = ce(logits, tlab) if ce else ((logits - target) ** 2).mean()
        opt.step(loss.backward())
    return step


# ---------------------------------------------------------------------------- load (issue 13)
def load_child(path, which):
    """In a fresh process: RSS growth (MiB) after loading `path`, then after
    touching every byte of the data."""
    import numpy as np

    sys.path.insert(0, ROOT)
    import pyautodiff as ad

    gc.collect()
    base = _status_kb("VmRSS")
    if which == "ad":
        state = ad.load(path)
    else:
        import safetensors.numpy as sn

        state = sn.load_file(path)
    loaded = _status_kb("VmRSS")
    total = sum(float(np.asarray(t).sum()) for t in state.values())
    touched = _status_kb("VmRSS")
    print(json.dumps({"loaded": (loaded - base) / 2**20, "touched": (touched - base) / 2**20,
                      "check": total}))


def load_section(quick):
    """ad.load of a 256 MB safetensors file vs safetensors.numpy.load_file:
    median times (both with the file in the page cache) and resident-memory
    growth until the data is touched, each measured in a fresh process."""
    import tempfile

    import numpy as np

    sys.path.insert(0, ROOT)
    import pyautodiff as ad

    try:
        import safetensors.numpy as sn
    except ImportError:
        sn = None
    print("\n[load] 256 MB safetensors file (8 float32 tensors of 32 MB)")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.safetensors")
        rng = np.random.default_rng(0)
        ad.save({f"layer{i}.weight": ad.from_numpy(rng.standard_normal((2048, 4096),
                                                                       dtype=np.float32))
                 for i in range(8)}, path)
        fns = [lambda: ad.load(path)] + ([lambda: sn.load_file(path)] if sn else [])
        ts = timeit(fns, 5 if quick else 11, number=1)
        line = f"  ad.load {fmt_time(ts[0])}"
        if sn:
            line += (f"   safetensors.numpy.load_file {fmt_time(ts[1])}"
                     f"   ratio {ts[1] / ts[0]:.0f}x (> 1: ad.load faster)")
        print(line)
        for which in ["ad"] + (["safetensors"] if sn else []):
            code = (f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
                    f"import bench; bench.load_child({path!r}, {which!r})")
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            if r.returncode:
                sys.stderr.write(r.stderr)
                continue
            m = json.loads(r.stdout.strip().splitlines()[-1])
            name = "ad.load" if which == "ad" else "safetensors.numpy.load_file"
            print(f"  RSS growth, {name:<28} after load {m['loaded']:7.1f} MiB, "
                  f"after touching all data {m['touched']:7.1f} MiB")
        a = np.ones(4 << 20, np.float32)  # 16 MB
        a.flags.writeable = False
        ts = timeit([lambda: ad.from_numpy(a), lambda: ad.from_numpy(a, copy=True)],
                    5 if quick else 11)
        print(f"  ad.from_numpy of a read-only 16 MB array: shared {fmt_time(ts[0])}, "
              f"copy=True {fmt_time(ts[1])}")


# ---------------------------------------------------------------------------- checkpointing
def checkpoint_bench(quick=False, layers=20, batch=256, width=512):
    """Issue 15's row: a 20-layer Linear+GELU MLP (float32) at batch 256, one
    training step (forward + backward) with nothing checkpointed, under
    ad.checkpointing("balanced") and with ad.checkpoint around each
    Linear+GELU block: the saved bytes the graph holds at the end of the
    forward (ad.memory_stats, counted natively: saved_bytes, beyond the Vars,
    and saved_var_bytes, the weights it reads), the peak live bytes over the
    step, and the step time (the modes interleaved round by round; median,
    and the median of the per-round ratios to "none")."""
    import numpy as np

    sys.path.insert(0, ROOT)
    import pyautodiff as ad

    rng = np.random.default_rng(0)
    ws = [ad.Var(rng.standard_normal((width, width)) / np.sqrt(width), dtype=ad.float32)
          for _ in range(layers)]
    bs = [ad.Var(np.zeros(width), dtype=ad.float32) for _ in range(layers)]
    x = ad.tensor(rng.standard_normal((batch, width)), dtype=ad.float32)

    def block(w, b):
        return lambda h: (h @ w + b).gelu()

    def step(mode):
        with ad.checkpointing("balanced" if mode == "balanced" else "none"):
            h = x
            for w, b in zip(ws, bs):
                h = ad.checkpoint(block(w, b), h) if mode == "checkpoint" else block(w, b)(h)
            loss = h.sqr().mean()
        held = ad.memory_stats()
        g = loss.backward()
        return held, g

    modes = ("none", "balanced", "checkpoint")
    res = {}
    for mode in modes:
        step(mode)  # warm-up
        gc.collect()
        ad.reset_peak_memory()
        base = ad.memory_stats()
        held, g = step(mode)
        peak = ad.memory_stats()["peak_bytes"] - base["live_bytes"]
        del g
        res[mode] = (held["saved_bytes"] - base["saved_bytes"],
                     held["saved_var_bytes"] - base["saved_var_bytes"], peak)
    # the modes interleaved, round after round, so that the machine's load
    # drifts over all of them alike: medians, and the median of each round's
    # ratio to "none"
    times = {m: [] for m in modes}
    for _ in range(3 if quick else 9):
        for mode in modes:
            t0 = time.perf_counter()
            _, g = step(mode)
            times[mode].append(time.perf_counter() - t0)
            del g
    print(f"{layers}-layer Linear+GELU MLP, batch {batch}, width {width}, float32, "
          f"{ad.get_num_threads()} thread(s)")
    print(f"{'mode':<26}{'saved MiB':>10}{'vs none':>8}{'+ Vars MiB':>11}{'total vs none':>14}"
          f"{'peak live MiB':>14}{'vs none':>8}{'step ms':>9}{'vs none':>8}")
    n_saved, n_var, n_peak = res["none"]
    for mode in modes:
        s, v, p = res[mode]
        tm = statistics.median(times[mode])
        ratio = statistics.median(a / b for a, b in zip(times[mode], times["none"]))
        name = {"checkpoint": "ad.checkpoint per block",
                "balanced": 'checkpointing("balanced")'}.get(mode, mode)
        print(f"{name:<26}{s / 2**20:>10.2f}{s / n_saved:>8.2f}{v / 2**20:>11.2f}"
              f"{(s + v) / (n_saved + n_var):>14.2f}{p / 2**20:>14.2f}{p / n_peak:>8.2f}"
              f"{tm * 1e3:>9.1f}{ratio:>8.2f}")
    print("saved: memory_stats' saved_bytes at the end of the forward, what the graph keeps "
          "beyond the Vars; + Vars: its saved_var_bytes, the weights it reads (alive anyway); "
          "peak live: over one step")


if __name__ == "__main__":
    main()
