"""Allreduce bandwidth of ad.distributed.allreduce_ against mpi4py's raw
Allreduce on numpy buffers of the same size:

    mpiexec -n 2 python tools/bench_mpi.py [--reps 30] [--sizes 0.0625,1,4,25,100]

Sizes are MiB of float32.  For each size, on every rank:
  raw         comm.Allreduce(send, recv) on preallocated numpy arrays
  raw inplace comm.Allreduce(MPI.IN_PLACE, buf)
  ad 1 grad   allreduce_ of a GradStore holding one gradient of that size
              (reduced from its buffer into a fresh native tensor)
  ad fused    the same bytes as 64 KiB gradients, packed into 25 MiB buckets
              (op="sum", so the cost is the reduction, not the division)
The four are interleaved, each call starts after a barrier; medians over
--reps are printed by rank 0 as time and bus bandwidth (2(N-1)/N * bytes / time, the ring model's
bytes per link)."""
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
    return np.median(ts, axis=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--sizes", default="0.0625,1,4,25,100")
    args = ap.parse_args()
    from mpi4py import MPI

    dist.init()
    comm = MPI.COMM_WORLD
    world, rank = comm.Get_size(), comm.Get_rank()
    ad.set_num_threads(1)
    if rank == 0:
        print(f"{world} ranks, MPI: {MPI.Get_library_version().splitlines()[0]}, "
              f"medians of {args.reps}")
        print(f"{'MiB':>8} {'raw':>9} {'inplace':>9} {'ad 1':>9} {'ad fused':>9}   "
              f"{'ad1/raw':>8} {'fused/raw':>9}   bus GB/s raw / ad1")
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

        k = 16384  # 64 KiB float32 gradients, fused into 25 MiB buckets
        m = max(1, n // k)
        small = [ad.Var.zeros((min(k, n),), dtype=ad.float32) for _ in range(m)]
        gs = [ad.tensor(send[i * k:i * k + min(k, n)]) for i in range(m)]

        s_fused = ad.GradStore()
        for q, g in zip(small, gs):
            s_fused.insert(q, g)

        def fused():
            dist.allreduce_(s_fused, small, op="sum")

        t_raw, t_inp, t_ad, t_fused = medians(comm, [
            lambda: comm.Allreduce(send, recv, op=MPI.SUM),
            lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
            one, fused], args.reps)
        if rank == 0:
            bus = 2 * (world - 1) / world * n * 4 / 1e9
            print(f"{mib:8.4g} {t_raw * 1e3:7.3f}ms {t_inp * 1e3:7.3f}ms {t_ad * 1e3:7.3f}ms "
                  f"{t_fused * 1e3:7.3f}ms   {t_raw / t_ad:8.2f} {t_raw / t_fused:9.2f}   "
                  f"{bus / t_raw:6.2f} / {bus / t_ad:6.2f}", flush=True)
        del p_big, g_big, small, gs, s_one, s_fused


if __name__ == "__main__":
    main()
