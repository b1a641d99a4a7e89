"""Data-parallel training on MPI:

    mpiexec -n 2 python -m pyautodiff.examples.ddp [--epochs 20 --n 6000 --batch 256]

Trains an MLP (plain ad.Var parameters and ad.nn.functional ops) on the
three-armed spirals.  Every rank builds the same data set (seeded), starts
from rank 0's parameters (broadcast_parameters), takes its shard of each
epoch (shard), runs forward/backward on its part of every global batch and
averages the gradients before the optimizer step, so N ranks follow the
same trajectory as one process on the whole batch.  The averaging overlaps
backward (DistributedDataParallel: each bucket is reduced as soon as its
gradients are final); --no-overlap calls allreduce_ after backward instead.
Each rank prints its throughput; rank 0 prints the final accuracy.  Runs
without mpiexec too (one rank)."""
import argparse
import os
import time

import numpy as np

import pyautodiff as ad
import pyautodiff.distributed as dist
import pyautodiff.nn.functional as F


def spirals(n, classes=3, noise=0.15, seed=0):
    """n points on `classes` interleaved spiral arms in the plane, and their arm."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    r = rng.uniform(0.05, 1.0, n)
    theta = y * (2 * np.pi / classes) + 3 * np.pi * r + rng.normal(0.0, noise, n)
    x = np.stack([r * np.cos(theta), r * np.sin(theta)], axis=1)
    return x, y


def init_params(sizes, dtype, seed):
    rng = np.random.default_rng(seed)
    params = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        params[f"fc{i}.weight"] = ad.Var(rng.standard_normal((a, b)) * np.sqrt(2.0 / a),
                                         dtype=dtype)
        params[f"fc{i}.bias"] = ad.Var(np.zeros(b), dtype=dtype)
    return params


def forward(params, x):
    n = len(params) // 2
    for i in range(n):
        x = F.linear(x, params[f"fc{i}.weight"].T, params[f"fc{i}.bias"])
        if i < n - 1:
            x = x.relu()
    return x


def accuracy(params, x, y, dtype):
    with ad.no_grad():
        logits = forward(params, ad.tensor(x, dtype=dtype)).numpy()
    return float(np.mean(np.argmax(logits, axis=1) == y))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=6000, help="samples in the data set")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256, help="global batch (split over ranks)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--bucket-kb", type=int, default=dist.DEFAULT_BUCKET_SIZE // 1024,
                    help="gradient bucket size in KiB")
    ap.add_argument("--no-overlap", action="store_true",
                    help="allreduce_ after backward instead of buckets reduced during it")
    ap.add_argument("--threads", type=int, default=0,
                    help="native threads per rank (0: the cores shared out among local ranks)")
    args = ap.parse_args(argv)

    dist.init()
    rank, world = dist.rank(), dist.world_size()
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must be a multiple of the {world} ranks")
    local = args.batch // world
    ad.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // world))
    dtype = getattr(ad, args.dtype)

    x, y = spirals(args.n, seed=args.seed)
    # a different seed per rank on purpose: broadcast_parameters is what makes them agree
    params = init_params([2, args.hidden, args.hidden, 3], dtype, seed=args.seed + 1 + rank)
    dist.broadcast_parameters(params, root=0)
    opt = ad.optim.SGD(list(params.values()), lr=args.lr, momentum=0.9)
    bucket_size = args.bucket_kb * 1024
    ddp = None if args.no_overlap else dist.DistributedDataParallel(params,
                                                                    bucket_size=bucket_size)

    steps_per_epoch = args.n // args.batch  # the same on every rank (shards may differ by one)
    samples, busy, steps, comm_time = 0, 0.0, 0, 0.0
    for epoch in range(args.epochs):
        idx = dist.shard(args.n, seed=args.seed, epoch=epoch)
        dist.barrier()  # time steps, not the wait for the slowest rank's previous epoch
        t0 = time.perf_counter()
        for s in range(steps_per_epoch):
            b = idx[s * local:(s + 1) * local]
            xb, yb = ad.tensor(x[b], dtype=dtype), ad.tensor(y[b])
            loss = F.cross_entropy(forward(params, xb), yb)
            tc = time.perf_counter()
            if ddp is not None:
                grads = ddp.backward(loss)
            else:
                grads = loss.backward()
                dist.allreduce_(grads, params, op="mean", bucket_size=bucket_size)
            comm_time += time.perf_counter() - tc
            opt.step(grads)
            samples += len(b)
            steps += 1
        busy += time.perf_counter() - t0
        if rank == 0 and (epoch + 1) % max(1, args.epochs // 5) == 0:
            print(f"epoch {epoch + 1:3d}  loss {loss.item():.4f}", flush=True)

    print(f"rank {rank}: {samples} samples in {busy:.2f} s = {samples / busy:,.0f} samples/s, "
          f"{1e3 * busy / max(steps, 1):.2f} ms/step ({1e3 * comm_time / max(steps, 1):.2f} ms "
          f"in backward" + ("" if world == 1 else " and the reduction " + (
              "after it" if ddp is None else "overlapped with it")) + ")", flush=True)
    acc = accuracy(params, x, y, dtype)
    dist.barrier()
    if rank == 0:
        print(f"{world} rank(s), global batch {args.batch}: final accuracy {acc:.3f}", flush=True)


if __name__ == "__main__":
    main()
