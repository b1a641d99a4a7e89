"""python -m pyautodiff.examples.digits: a small CNN on scikit-learn's digits.

Two Conv2d-ReLU-MaxPool2d stages and a Linear layer (ad.nn), trained with
Adam in minibatches on the 8x8 handwritten digits that ship with
scikit-learn (1797 images, no download); prints the held-out accuracy and
writes the loss curve as a PNG when matplotlib is installed.  Needs
scikit-learn: pip install "pyautodiff[examples]"."""
import os
import sys

import numpy as np

import pyautodiff as ad
from pyautodiff import nn
from pyautodiff.nn import functional as F

from ._progress import (add_output_args, arg_parser, out_dir, report_files, save_loss_curve, train,
                        written)

INSTALL_HINT = ('digits: this example needs scikit-learn for its bundled digits data set; '
                'install it with: pip install "pyautodiff[examples]"')


def load_digits(test_fraction, seed):
    """(x_train, y_train, x_test, y_test): images (N, 1, 8, 8) float32 in
    [0, 1] and labels int64, split at random by seed.  SystemExit with the
    install hint when scikit-learn is missing."""
    try:
        from sklearn.datasets import load_digits as sk_load_digits
    except ImportError:
        raise SystemExit(INSTALL_HINT) from None
    d = sk_load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def build_model(channels=16):
    c = channels
    return nn.Sequential(
        nn.Conv2d(1, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),        # 8x8 -> 4x4
        nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),    # 4x4 -> 2x2
        nn.Flatten(),
        nn.Linear(2 * c * 2 * 2, 10),
    )


def accuracy(model, x, y, size=512):
    model.eval()
    correct = 0
    with ad.no_grad():
        for i in range(0, len(y), size):
            pred = model(ad.from_numpy(x[i:i + size])).argmax(1).numpy()
            correct += int((pred == y[i:i + size]).sum())
    model.train()
    return correct / len(y)


def parse_args(argv):
    p = arg_parser("digits", __doc__)
    p.add_argument("--epochs", type=int, default=8, help="passes over the training set (8)")
    p.add_argument("--batch", type=int, default=64, help="minibatch size (64)")
    p.add_argument("--channels", type=int, default=16, help="channels of the first conv (16)")
    p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (0.003)")
    p.add_argument("--test-fraction", type=float, default=0.25, help="held-out share (0.25)")
    p.add_argument("--seed", type=int, default=0, help="split, init and shuffle seed (0)")
    add_output_args(p, "directory for the loss curve PNG")
    return p.parse_args(argv)


def main(argv=None):
    """Trains and returns {'test_accuracy', 'train_accuracy', 'final_loss',
    'epochs', 'steps', 'seconds', 'files'}."""
    args = parse_args(argv)
    x_train, y_train, x_test, y_test = load_digits(args.test_fraction, args.seed)
    ad.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = build_model(args.channels)
    opt = ad.optim.Adam(model.parameters(), lr=args.lr)
    per_epoch = -(-len(y_train) // args.batch)
    steps = per_epoch * args.epochs
    print(f"digits: {len(y_train)} training and {len(y_test)} test images (8x8), "
          f"{sum(p.numel() for p in model.parameters())} parameters")

    def batches():
        for _ in range(args.epochs):
            order = rng.permutation(len(y_train))
            for i in range(0, len(order), args.batch):
                yield order[i:i + args.batch]

    def step(b):
        loss = F.cross_entropy(model(ad.from_numpy(x_train[b])), ad.from_numpy(y_train[b]))
        opt.backward_step(loss)
        return loss

    losses, seconds = train(batches(), steps, "digits", step, args.quiet)
    test_acc = accuracy(model, x_test, y_test)
    train_acc = accuracy(model, x_train, y_train)
    print(f"digits: {args.epochs} epochs ({steps} steps) in {seconds:.1f} s, "
          f"train accuracy {train_acc:.3f}, test accuracy {test_acc:.3f}")
    files = {}
    if not args.no_plot:
        files["loss curve"] = save_loss_curve(
            losses, os.path.join(out_dir(args.out), "digits_loss.png"), "digits: cross-entropy")
        report_files(files)
    return {"test_accuracy": test_acc, "train_accuracy": train_acc, "final_loss": losses[-1],
            "epochs": args.epochs, "steps": steps, "seconds": seconds,
            "files": written(files)}


if __name__ == "__main__":
    main()
    sys.exit(0)
