"""python -m pyautodiff.examples.charlm: a character-level transformer.

A small GPT-style decoder (ad.nn: Embedding, LayerNorm, Linear, GELU, causal
F.scaled_dot_product_attention) trained with AdamW, a OneCycleLR schedule and
gradient clipping on the public-domain English that ships with the package
(pyautodiff/examples/data/corpus.txt, see SOURCES.txt there).  Prints the
held-out loss in nats and bits per character, then samples a few lines."""
import json
import math
import os
import sys

import numpy as np

import pyautodiff as ad
from pyautodiff import nn
from pyautodiff.nn import functional as F

from ._progress import (add_output_args, arg_parser, out_dir, report_files, save_loss_curve, train,
                        written)

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "corpus.txt")


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        # (b, t, 3, h, hd) -> (3, b, h, t, hd): one matmul for q, k and v
        qkv = self.qkv(x).reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, d)
        return self.drop(self.proj(y))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * dim, dim), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharTransformer(nn.Module):
    def __init__(self, vocab, block, dim=64, heads=4, layers=2, dropout=0.1):
        super().__init__()
        self.block = block
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*[Block(dim, heads, dropout) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        pos = ad.arange(t, dtype=ad.int64)
        x = self.drop(self.tok(idx) + self.pos(pos))
        return self.head(self.ln(self.blocks(x)))


def load_text(path=DATA):
    with open(path, encoding="utf-8") as f:
        return f.read()


def batch(data, block, size, rng):
    starts = rng.integers(0, len(data) - block - 1, size)
    rows = starts[:, None] + np.arange(block + 1)
    chunk = data[rows]
    return ad.from_numpy(chunk[:, :-1]), ad.from_numpy(chunk[:, 1:])


def lm_loss(model, x, y):
    logits = model(x)
    b, t, v = logits.shape
    return F.cross_entropy(logits.reshape(b * t, v), y.reshape(b * t))


def evaluate(model, data, block, size, batches, seed):
    """Mean loss over fixed held-out batches (same batches every call)."""
    rng = np.random.default_rng(seed)
    model.eval()
    total = 0.0
    with ad.no_grad():
        for _ in range(batches):
            total += float(lm_loss(model, *batch(data, block, size, rng)))
    model.train()
    return total / batches


def sample(model, stoi, itos, prompt, length, temperature, rng):
    model.eval()
    ids = [stoi[c] for c in prompt if c in stoi] or [stoi["\n"]]
    with ad.no_grad():
        for _ in range(length):
            ctx = np.asarray(ids[-model.block:], dtype=np.int64)[None, :]
            logits = model(ad.from_numpy(ctx)).numpy()[0, -1].astype(np.float64)
            p = np.exp((logits - logits.max()) / temperature)
            ids.append(int(rng.choice(len(p), p=p / p.sum())))
    model.train()
    return "".join(itos[i] for i in ids)


def parse_args(argv):
    p = arg_parser("charlm", __doc__)
    p.add_argument("--steps", type=int, default=600, help="training steps (600)")
    p.add_argument("--batch", type=int, default=32, help="sequences per step (32)")
    p.add_argument("--block", type=int, default=64, help="context length (64)")
    p.add_argument("--dim", type=int, default=64, help="embedding width (64)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (4)")
    p.add_argument("--layers", type=int, default=2, help="transformer blocks (2)")
    p.add_argument("--dropout", type=float, default=0.1, help="dropout (0.1)")
    p.add_argument("--lr", type=float, default=1e-2, help="peak AdamW learning rate (0.01)")
    p.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay (0.01)")
    p.add_argument("--clip", type=float, default=1.0, help="gradient-norm clip (1.0)")
    p.add_argument("--seed", type=int, default=0, help="seed (0)")
    p.add_argument("--text", default=DATA, help="training text (the bundled corpus)")
    p.add_argument("--sample-chars", type=int, default=300,
                   help="characters to sample after training (300; 0: none)")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (0.8)")
    add_output_args(p, "directory for the loss curve and the checkpoint", "--no-save",
                    "write no file")
    return p.parse_args(argv)


def main(argv=None):
    """Trains and returns {'val_loss', 'val_bpc', 'train_loss', 'initial_loss',
    'vocab', 'steps', 'seconds', 'sample', 'files'}."""
    args = parse_args(argv)
    ad.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    text = load_text(args.text)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in text], dtype=np.int64)
    split = int(0.9 * len(data))
    train_data, val = data[:split], data[split:]
    if len(val) <= args.block + 1:
        raise SystemExit(f"charlm: the text ({len(text)} characters) is too short for a "
                         f"held-out split with --block {args.block}")

    model = CharTransformer(len(chars), args.block, args.dim, args.heads, args.layers,
                            args.dropout)
    opt = ad.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    sched = ad.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps)
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    print(f"charlm: {len(text)} characters, vocabulary {len(chars)}, "
          f"{n_params} parameters, uniform loss ln({len(chars)}) = {math.log(len(chars)):.3f}")

    eval_args = (args.block, args.batch, 8, args.seed + 1)
    initial = evaluate(model, val, *eval_args)
    def step(_):
        loss = lm_loss(model, *batch(train_data, args.block, args.batch, rng))
        grads = loss.backward()
        nn.utils.clip_grad_norm_(grads, args.clip, parameters=params)
        opt.step(grads)
        sched.step()
        return loss

    losses, seconds = train(range(args.steps), args.steps, "charlm", step, args.quiet)
    val_loss = evaluate(model, val, *eval_args)
    tail = losses[-min(50, len(losses)):]
    train_loss = sum(tail) / len(tail)
    bpc = val_loss / math.log(2)
    print(f"charlm: {args.steps} steps in {seconds:.1f} s; held-out loss {initial:.3f} -> "
          f"{val_loss:.3f} nats/char ({bpc:.3f} bits/char), train loss {train_loss:.3f}")

    text_out = ""
    if args.sample_chars > 0:
        text_out = sample(model, stoi, itos=chars, prompt="\n", length=args.sample_chars,
                          temperature=args.temperature, rng=np.random.default_rng(args.seed))
        print("sample:\n" + text_out.strip("\n"))

    files = {}
    if not args.no_save:
        out = out_dir(args.out)
        files["loss curve"] = save_loss_curve(losses, os.path.join(out, "charlm_loss.png"),
                                              "charlm: training cross-entropy (nats/char)")
        if hasattr(ad, "save"):
            path = os.path.join(out, "charlm.safetensors")
            meta = {"vocab": json.dumps("".join(chars)),
                    "config": json.dumps({k: getattr(args, k) for k in
                                          ("block", "dim", "heads", "layers", "dropout")})}
            ad.save(model.state_dict(), path, metadata=meta)
            files["checkpoint"] = path
        report_files(files)
    return {"val_loss": val_loss, "val_bpc": bpc, "train_loss": train_loss,
            "initial_loss": initial, "vocab": len(chars), "steps": args.steps,
            "seconds": seconds, "sample": text_out,
            "files": written(files)}


if __name__ == "__main__":
    main()
    sys.exit(0)
