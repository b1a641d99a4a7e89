"""What the examples share: the command line's common part, the training loop
under a progress bar with the loss and steps/s (tqdm when installed, otherwise
one line rewritten with \\r), the loss-curve PNG
(matplotlib when installed, otherwise skipped), and the output directory.

The optional packages are imported when used, not at module import, so an
example runs without them and the tests can hide them."""
import argparse
import math
import os
import sys
import time


def _tqdm_class():
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm


class Progress:
    """bar = Progress(total, "spirals"); bar.update(loss) once a step; bar.close().
    The fallback line is redrawn at most every min_interval seconds."""

    def __init__(self, total, desc, *, disable=False, file=None, min_interval=0.2):
        self.total = int(total)
        self.desc = desc
        self.disable = disable
        self.file = sys.stderr if file is None else file
        self.min_interval = min_interval
        self.n = 0
        self.last_loss = math.nan
        self._start = time.perf_counter()
        self._last_draw = -math.inf
        self._bar = None
        self._drawn = 0
        self.backend = "none" if disable else "line"
        if not disable:
            tqdm = _tqdm_class()
            if tqdm is not None:
                self._bar = tqdm(total=self.total, desc=desc, unit="step", file=self.file,
                                 mininterval=min_interval, dynamic_ncols=True)
                self.backend = "tqdm"

    def update(self, loss=None, n=1):
        self.n += n
        if self.disable:
            return
        now = time.perf_counter()
        due = now - self._last_draw >= self.min_interval or self.n >= self.total
        if loss is not None:
            self.last_loss = float(loss)
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{self.last_loss:.4f}", refresh=False)
            self._bar.update(n)
        elif due:
            self._draw(now)
        if due:
            self._last_draw = now

    def _draw(self, now):
        elapsed = max(now - self._start, 1e-9)
        width = 24
        filled = int(width * self.n / self.total) if self.total else width
        line = (f"{self.desc} [{'#' * filled}{'.' * (width - filled)}] "
                f"{self.n}/{self.total} loss {self.last_loss:.4f} "
                f"{self.n / elapsed:.1f} steps/s")
        # blank out what a longer previous line left behind
        self.file.write("\r" + line.ljust(self._drawn))
        self._drawn = len(line)
        self.file.flush()

    def close(self):
        if self.disable:
            return
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        else:
            self._draw(time.perf_counter())
            self.file.write("\n")
            self.file.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def train(items, total, desc, step, quiet=False):
    """Calls loss = step(item) for each of the `total` items (one optimizer step
    each) under a progress bar; returns (the losses as floats, the seconds)."""
    losses = []
    start = time.perf_counter()
    with Progress(total, desc, disable=quiet) as bar:
        for item in items:
            losses.append(float(step(item)))
            bar.update(losses[-1])
    return losses, time.perf_counter() - start


def arg_parser(name, doc):
    """The parser of `python -m pyautodiff.examples.<name>`, described by the
    first paragraph of the example's docstring."""
    return argparse.ArgumentParser(prog=f"python -m pyautodiff.examples.{name}",
                                   description=doc.split("\n\n")[0])


def add_output_args(p, out_help, no_write="--no-plot", no_write_help="write no PNG"):
    """--out, the switch that writes nothing, and --quiet."""
    p.add_argument("--out", default=".", help=out_help)
    p.add_argument(no_write, action="store_true", help=no_write_help)
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def written(files):
    """The entries of files that were written (a skipped PNG is None)."""
    return {k: v for k, v in files.items() if v}


def figure():
    """A matplotlib Figure drawn by the Agg canvas (no pyplot, so no GUI
    backend and no global figure state), or None without matplotlib."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.backends.backend_agg import FigureCanvasAgg
    except ImportError:
        return None
    fig = Figure(figsize=(6, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def save_loss_curve(losses, path, title):
    """The loss per step as a PNG at path; returns path, or None when
    matplotlib is missing."""
    fig = figure()
    if fig is None:
        return None
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(range(1, len(losses) + 1), losses, lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    if losses and min(losses) > 0 and max(losses) / min(losses) > 20:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    return path


def out_dir(path):
    path = os.path.abspath(path or ".")
    os.makedirs(path, exist_ok=True)
    return path


def report_files(files, stream=None):
    """Prints where each written file went and says what was skipped."""
    stream = sys.stdout if stream is None else stream
    done = written(files)
    for what, p in done.items():
        print(f"wrote {what}: {p}", file=stream)
    if len(done) < len(files):
        print("matplotlib is not installed: no PNG written "
              "(pip install \"pyautodiff[examples]\")", file=stream)
