#!/usr/bin/env python3
"""Renders the graph of seed 000 (candle's recording walkthrough) with
Tensor.to_dot(): x @ w with w a Var, then sqr, then a sum.

    python tools/seed_graph.py            # writes tools/seed_graph.png (needs graphviz's dot)
    python tools/seed_graph.py --dot      # prints the DOT text only

The README shows the PNG this writes."""
import argparse
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pyautodiff as ad  # noqa: E402


def seed_graph():
    x = ad.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [1.0, 0.0, -1.0]])
    w = ad.Var.randn(3, 2, seed=0)
    return (x @ w).sqr().sum()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dot", action="store_true", help="print the DOT text and stop")
    ap.add_argument("--out", default=os.path.join(ROOT, "tools", "seed_graph.png"))
    args = ap.parse_args(argv)
    text = seed_graph().to_dot()
    if args.dot:
        print(text)
        return
    dot = shutil.which("dot")
    if dot is None:
        raise SystemExit("graphviz's `dot` is not installed (apt-get install graphviz); "
                         "--dot prints the text")
    subprocess.run([dot, "-Tpng", "-Gdpi=110", "-o", args.out], input=text.encode(), check=True)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
