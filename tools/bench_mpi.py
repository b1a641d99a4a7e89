"""Allreduce bandwidth of ad.distributed.allreduce_ against mpi4py's raw
Allreduce on numpy buffers of the same size:

    mpiexec -n 2 python tools/bench_mpi.py [--reps 30] [--sizes 0.0625,1,4,25,100]

Sizes are MiB of float32.  For each size, on every rank:
  raw         comm.Allreduce(send, recv) on preallocated numpy arrays
  raw inplace comm.Allreduce(MPI.IN_PLACE, buf)
  ad 1        allreduce_ of a GradStore holding one gradient of that size
              (a 16-byte Allgather of the signature digest, the gradient
              copied into a fresh native tensor, reduced there in place)
  ad 1 nv     the same with verify=False (no signature exchange)
  ad fused    the same bytes as 64 KiB gradients, packed into 25 MiB buckets
              (op="sum", so the cost is the reduction, not the division)
and, with the backward of a one-Var loss (loss = (p * c).sum(), whose
gradient is c) in both:
  bw + raw    loss.backward(), then raw Allreduce of a numpy copy of it
  ddp         DistributedDataParallel.backward(loss) (the bucket reduced
              from the backward's hook; no per-call signature exchange)
The seven are interleaved (a change of the machine's load hits all alike)
and each call starts after a barrier.  Rank 0 prints medians and minima over
--reps, as times and as bus bandwidth (2(N-1)/N * bytes / time: the ring
model's bytes per link)."""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyautodiff as ad  # noqa: E402
import pyautodiff.distributed as dist  # noqa: E402


def medians(comm, fns, reps):
    """Median time of each fn over reps rounds; the rounds interleave the fns,
    so a change of the machine's load hits them all alike.  Each call starts
    after a barrier and counts as the slowest rank's time."""
    from mpi4py import MPI

    for fn in fns:
        fn()  # warm up (first touch, MPI connection setup, the allocator's cache)
    ts = np.zeros((reps, len(fns)))
    for r in range(reps):
        for j, fn in enumerate(fns):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            ts[r, j] = time.perf_counter() - t0
    comm.Allreduce(MPI.IN_PLACE, ts, op=MPI.MAX)
    return np.median(ts, axis=0), ts.min(axis=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--sizes", default="0.0625,1,4,25,100")
    ap.add_argument("--no-hugepages", action="store_true",
                    help="numpy's buffers without transparent huge pages, like the native "
                         "allocator's (numpy madvises them for arrays of 4 MiB and more)")
    args = ap.parse_args()
    if args.no_hugepages:
        np._core.multiarray._set_madvise_hugepage(False)
    from mpi4py import MPI

    dist.init()
    comm = MPI.COMM_WORLD
    world, rank = comm.Get_size(), comm.Get_rank()
    ad.set_num_threads(1)
    if rank == 0:
        print(f"{world} ranks, MPI: {MPI.Get_library_version().splitlines()[0]}, "
              f"medians of {args.reps}")
        print(f"{'MiB':>8} {'':>6} {'raw':>8} {'inplace':>8} {'ad 1':>8} {'ad 1 nv':>8} "
              f"{'ad fused':>8} {'bw + raw':>8} {'ddp':>8}   {'raw/ad1':>6} {'raw/nv':>6} "
              f"{'raw/fu':>6} {'bwr/ddp':>7}   bus GB/s raw / ad1   (times in ms)")
    for mib in (float(s) for s in args.sizes.split(",")):
        n = int(mib * 2 ** 20) // 4
        rng = np.random.default_rng(rank)
        send = rng.standard_normal(n).astype(np.float32)
        recv = np.empty_like(send)
        buf = send.copy()

        p_big = ad.Var.zeros((n,), dtype=ad.float32)
        g_big = ad.tensor(send)

        s_one = ad.GradStore()
        s_one.insert(p_big, g_big)

        def one():  # (the store's entries are replaced by their sums, which only grow)
            dist.allreduce_(s_one, [p_big], op="sum")

        def one_nv():
            dist.allreduce_(s_one, [p_big], op="sum", verify=False)

        k = 16384  # 64 KiB float32 gradients, fused into 25 MiB buckets
        m = max(1, n // k)
        small = [ad.Var.zeros((min(k, n),), dtype=ad.float32) for _ in range(m)]
        gs = [ad.tensor(send[i * k:i * k + min(k, n)]) for i in range(m)]

        s_fused = ad.GradStore()
        for q, g in zip(small, gs):
            s_fused.insert(q, g)

        def fused():
            dist.allreduce_(s_fused, small, op="sum")

        c = ad.tensor(send)
        ddp = dist.DistributedDataParallel([p_big], op="sum")

        def bw_raw():
            g = (p_big * c).sum().backward()[p_big]
            comm.Allreduce(g.numpy(), recv, op=MPI.SUM)

        def bw_ddp():
            ddp.backward((p_big * c).sum())

        med, low = medians(comm, [
            lambda: comm.Allreduce(send, recv, op=MPI.SUM),
            lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
            one, one_nv, fused, bw_raw, bw_ddp], args.reps)
        if rank == 0:
            bus = 2 * (world - 1) / world * n * 4 / 1e9
            for label, t in (("median", med), ("min", low)):
                print(f"{mib:8.4g} {label:>6} " + " ".join(f"{x * 1e3:8.3f}" for x in t)
                      + f"   {t[0] / t[2]:6.2f} {t[0] / t[3]:6.2f} {t[0] / t[4]:6.2f}"
                      f" {t[5] / t[6]:7.2f}   {bus / t[0]:6.2f} / {bus / t[2]:6.2f}", flush=True)
        del p_big, g_big, small, gs, s_one, s_fused, c, ddp


if __name__ == "__main__":
    main()
