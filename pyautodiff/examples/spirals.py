"""python -m pyautodiff.examples.spirals: a 3-class spirals classifier.

An MLP (ad.nn) trained full-batch with Adam on three interleaved noisy
spirals; prints train and held-out accuracy and, when matplotlib is
installed, writes the decision boundary and the loss curve as PNGs
(into the current directory, or --out DIR)."""
import os
import sys

import numpy as np

import pyautodiff as ad
from pyautodiff import nn

from ._progress import (add_output_args, arg_parser, figure, out_dir, report_files,
                        save_loss_curve, train, written)


def make_spirals(n_per_class, classes=3, noise=0.2, seed=0):
    """Points (N, 2) float32 and labels (N,) int64: class k is an arm whose
    angle grows with the radius, rotated by 2*pi*k/classes, with Gaussian
    angle noise."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for k in range(classes):
        r = np.linspace(0.05, 1.0, n_per_class)
        t = np.linspace(0.0, 4.0, n_per_class) + 2 * np.pi * k / classes
        t = t + rng.normal(0.0, noise, n_per_class)
        xs.append(np.stack([r * np.sin(t), r * np.cos(t)], axis=1))
        ys.append(np.full(n_per_class, k))
    x = np.concatenate(xs).astype(np.float32)
    y = np.concatenate(ys).astype(np.int64)
    order = rng.permutation(len(y))
    return x[order], y[order]


def build_model(hidden=64, classes=3):
    return nn.Sequential(
        nn.Linear(2, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, classes),
    )


def accuracy(model, x, y):
    with ad.no_grad():
        pred = model(ad.from_numpy(x)).argmax(1).numpy()
    return float((pred == y).mean())


def plot_boundary(model, x, y, path, acc):
    fig = figure()
    if fig is None:
        return None
    lim = 1.15
    g = np.linspace(-lim, lim, 200, dtype=np.float32)
    gx, gy = np.meshgrid(g, g)
    grid = np.stack([gx.ravel(), gy.ravel()], axis=1)
    with ad.no_grad():
        zz = model(ad.from_numpy(grid)).argmax(1).numpy().reshape(gx.shape)
    ax = fig.add_subplot(1, 1, 1)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
    from matplotlib.colors import ListedColormap
    k = int(y.max()) + 1
    ax.contourf(gx, gy, zz, levels=np.arange(k + 1) - 0.5, cmap=ListedColormap(colors[:k]),
                alpha=0.3)
    ax.scatter(x[:, 0], x[:, 1], c=[colors[i] for i in y], s=8, edgecolors="none")
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ax.set_title(f"pyautodiff spirals: MLP + Adam, test accuracy {acc:.3f}")
    fig.tight_layout()
    fig.savefig(path)
    return path


def parse_args(argv):
    p = arg_parser("spirals", __doc__)
    p.add_argument("--steps", type=int, default=600, help="full-batch Adam steps (600)")
    p.add_argument("--points", type=int, default=200, help="training points per class (200)")
    p.add_argument("--hidden", type=int, default=64, help="hidden width (64)")
    p.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (0.01)")
    p.add_argument("--seed", type=int, default=0, help="data and init seed (0)")
    add_output_args(p, "directory for the PNGs (current directory)")
    return p.parse_args(argv)


def main(argv=None):
    """Trains and returns {'train_accuracy', 'test_accuracy', 'final_loss',
    'steps', 'seconds', 'files'}."""
    args = parse_args(argv)
    ad.manual_seed(args.seed)
    x, y = make_spirals(args.points, seed=args.seed)
    x_test, y_test = make_spirals(args.points, seed=args.seed + 1)
    model = build_model(args.hidden)
    opt = ad.optim.Adam(model.parameters(), lr=args.lr)
    xb, yb = ad.from_numpy(x), ad.from_numpy(y)

    def step(_):
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.backward_step(loss)
        return loss

    losses, seconds = train(range(args.steps), args.steps, "spirals", step, args.quiet)

    train_acc = accuracy(model, x, y)
    test_acc = accuracy(model, x_test, y_test)
    files = {}
    if not args.no_plot:
        out = out_dir(args.out)
        files["decision boundary"] = plot_boundary(model, x_test, y_test,
                                                   os.path.join(out, "spirals.png"), test_acc)
        files["loss curve"] = save_loss_curve(losses, os.path.join(out, "spirals_loss.png"),
                                              "spirals: cross-entropy")
    print(f"spirals: {args.steps} steps in {seconds:.1f} s, final loss {losses[-1]:.4f}, "
          f"train accuracy {train_acc:.3f}, test accuracy {test_acc:.3f}")
    if files:
        report_files(files)
    return {"train_accuracy": train_acc, "test_accuracy": test_acc, "final_loss": losses[-1],
            "steps": args.steps, "seconds": seconds,
            "files": written(files)}


if __name__ == "__main__":
    main()
    sys.exit(0)
