"""The training examples on small budgets: each must reach a threshold that a
no-op optimizer misses (checked here too), and must run without tqdm,
matplotlib and (digits: with a clear exit) scikit-learn."""
import io
import math
import os
import subprocess
import sys

import pytest

import pyautodiff as ad
from pyautodiff.examples import _progress, charlm, digits, spirals

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPIRALS = ["--steps", "100", "--quiet"]
# a 1-block, 32-wide model: about 100 steps to get well under the bundled
# text's unigram entropy (3.04 nats/char), which needs the context
CHARLM = ["--steps", "100", "--dim", "32", "--layers", "1", "--block", "32", "--batch", "16",
          "--lr", "1e-2", "--dropout", "0", "--sample-chars", "40", "--quiet"]
CHARLM_MAX_LOSS = 2.8
DIGITS = ["--epochs", "2", "--quiet"]

HIDE_MATPLOTLIB = ("matplotlib", "matplotlib.figure", "matplotlib.colors", "matplotlib.backends",
                   "matplotlib.backends.backend_agg")


def hide(monkeypatch, *names):
    """import of any of names raises ImportError while the test runs."""
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def no_op_step(monkeypatch):
    """Every optimizer's step does nothing (the gradients are still computed)."""
    monkeypatch.setattr(ad.optim.Optimizer, "step", lambda self, grads=None: None)


def assert_png(path):
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


# -- spirals ---------------------------------------------------------------------------

def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def test_spirals_learns_and_writes_pngs(tmp_path, capsys):
    r = spirals.main(SPIRALS + ["--out", str(tmp_path)])
    assert r["test_accuracy"] > 0.9 and r["train_accuracy"] > 0.9
    assert r["steps"] == 100 and math.isfinite(r["final_loss"])
    if not have_matplotlib():
        assert r["files"] == {}
        return
    assert set(r["files"]) == {"decision boundary", "loss curve"}
    for path in r["files"].values():
        assert os.path.dirname(path) == str(tmp_path)
        assert_png(path)
    out = capsys.readouterr().out
    assert f"wrote decision boundary: {tmp_path / 'spirals.png'}" in out
    assert "test accuracy" in out


def test_spirals_threshold_fails_without_optimizer_steps(monkeypatch):
    no_op_step(monkeypatch)
    r = spirals.main(SPIRALS + ["--no-plot"])
    assert r["test_accuracy"] < 0.6  # chance is 1/3


def test_spirals_is_reproducible():
    a = spirals.main(["--steps", "20", "--quiet", "--no-plot", "--seed", "3"])
    b = spirals.main(["--steps", "20", "--quiet", "--no-plot", "--seed", "3"])
    assert a["final_loss"] == b["final_loss"]


def test_spirals_without_matplotlib(monkeypatch, tmp_path, capsys):
    hide(monkeypatch, *HIDE_MATPLOTLIB)
    r = spirals.main(["--steps", "20", "--quiet", "--out", str(tmp_path)])
    assert r["files"] == {}
    assert os.listdir(tmp_path) == []
    assert 'matplotlib is not installed: no PNG written (pip install "pyautodiff[examples]")' \
        in capsys.readouterr().out


def test_spirals_command_line(tmp_path):
    """python -m pyautodiff.examples.spirals as the README runs it (from the
    output directory, with the default --out)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "pyautodiff.examples.spirals", "--steps", "30"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "spirals: 30 steps" in p.stdout and "test accuracy" in p.stdout
    assert "30/30" in p.stderr  # the progress bar (tqdm or the fallback line)
    if not have_matplotlib():
        return
    assert f"wrote decision boundary: {tmp_path / 'spirals.png'}" in p.stdout
    assert_png(tmp_path / "spirals.png")


# -- charlm ----------------------------------------------------------------------------

def test_charlm_learns_samples_and_saves(tmp_path, capsys):
    r = charlm.main(CHARLM + ["--out", str(tmp_path)])
    assert r["vocab"] == 62
    assert r["initial_loss"] > math.log(r["vocab"]) - 0.5
    assert r["val_loss"] < CHARLM_MAX_LOSS
    assert r["val_bpc"] == pytest.approx(r["val_loss"] / math.log(2))
    assert len(r["sample"]) == 41 and r["sample"].startswith("\n")
    out = capsys.readouterr().out
    assert "bits/char" in out and "sample:" in out
    if hasattr(ad, "save"):
        path = r["files"]["checkpoint"]
        assert os.path.dirname(path) == str(tmp_path)
        if hasattr(ad, "load"):
            loaded = ad.load(path)
            names = set(charlm.CharTransformer(62, 32, 32, 4, 1, 0.0).state_dict())
            assert set(loaded) == names
    else:
        assert "checkpoint" not in r["files"]


def test_charlm_threshold_fails_without_optimizer_steps(monkeypatch):
    no_op_step(monkeypatch)
    r = charlm.main(CHARLM + ["--no-save"])
    assert r["val_loss"] > CHARLM_MAX_LOSS + 1


def test_charlm_rejects_a_text_too_short(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("abc " * 20)
    with pytest.raises(SystemExit, match="too short"):
        charlm.main(["--text", str(short), "--steps", "1", "--quiet", "--no-save"])


# -- digits ----------------------------------------------------------------------------

def test_digits_learns(tmp_path):
    pytest.importorskip("sklearn")
    r = digits.main(DIGITS + ["--out", str(tmp_path)])
    assert r["test_accuracy"] > 0.8
    assert r["steps"] == 2 * math.ceil(1348 / 64)
    if "loss curve" in r["files"]:
        assert_png(r["files"]["loss curve"])


def test_digits_threshold_fails_without_optimizer_steps(monkeypatch):
    pytest.importorskip("sklearn")
    no_op_step(monkeypatch)
    r = digits.main(DIGITS + ["--no-plot"])
    assert r["test_accuracy"] < 0.5  # chance is 1/10


def test_digits_without_sklearn_says_what_to_install(monkeypatch):
    hide(monkeypatch, "sklearn", "sklearn.datasets")
    with pytest.raises(SystemExit) as e:
        digits.main(["--epochs", "1", "--quiet"])
    assert 'pip install "pyautodiff[examples]"' in str(e.value.code)
    assert "scikit-learn" in str(e.value.code)


# -- the shared progress bar and loss curve --------------------------------------------

def test_progress_fallback_without_tqdm(monkeypatch):
    hide(monkeypatch, "tqdm", "tqdm.auto")
    buf = io.StringIO()
    with _progress.Progress(4, "demo", file=buf, min_interval=0.0) as bar:
        assert bar.backend == "line"
        for loss in (2.0, 1.5, 1.25, 0.125):
            bar.update(loss)
    text = buf.getvalue()
    assert text.startswith("\rdemo [")
    assert text.endswith("\n") and text.count("\n") == 1  # one line, rewritten
    last = text.rstrip("\n").split("\r")[-1]
    assert "4/4" in last and "loss 0.1250" in last and "steps/s" in last


def test_progress_fallback_throttles_redraws(monkeypatch):
    hide(monkeypatch, "tqdm", "tqdm.auto")
    buf = io.StringIO()
    with _progress.Progress(1000, "demo", file=buf, min_interval=3600.0) as bar:
        for _ in range(1000):
            bar.update(1.0)
    # the first update, the last one and close()
    assert buf.getvalue().count("\r") == 3


def test_progress_fallback_blanks_a_longer_previous_line(monkeypatch):
    hide(monkeypatch, "tqdm", "tqdm.auto")
    buf = io.StringIO()
    with _progress.Progress(2, "demo", file=buf, min_interval=0.0) as bar:
        bar.update(12345.0)
        bar.update(1.0)
    frames = buf.getvalue().rstrip("\n").split("\r")[1:]
    assert len(frames[1]) >= len(frames[0])
    assert frames[1].rstrip().endswith("steps/s")


def test_progress_uses_tqdm_when_installed():
    pytest.importorskip("tqdm")
    buf = io.StringIO()
    with _progress.Progress(3, "demo", file=buf, min_interval=0.0) as bar:
        assert bar.backend == "tqdm"
        for loss in (3.0, 2.0, 0.5):
            bar.update(loss)
    text = buf.getvalue()
    assert "3/3" in text and "loss=0.5000" in text and "step/s" in text


def test_progress_disabled_writes_nothing():
    buf = io.StringIO()
    with _progress.Progress(3, "demo", file=buf, disable=True) as bar:
        bar.update(1.0)
    assert buf.getvalue() == "" and bar.n == 1


def test_loss_curve_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = _progress.save_loss_curve([3.0, 2.0, 0.01], str(tmp_path / "c.png"), "t")
    assert path == str(tmp_path / "c.png")
    assert_png(path)


def test_loss_curve_skipped_without_matplotlib(monkeypatch, tmp_path):
    hide(monkeypatch, *HIDE_MATPLOTLIB)
    assert _progress.save_loss_curve([1.0, 0.5], str(tmp_path / "c.png"), "t") is None
    assert os.listdir(tmp_path) == []
