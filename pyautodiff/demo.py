"""python -m pyautodiff.demo: the walkthroughs this project grew from (candle's
graph recording and Var, candle vs PyTorch gradients, burn's finite-difference
check) replayed with pyautodiff, to read beside the README's semantics table.

1. graph facts per tensor (candle's recording; seed 000)
2. Var.set refusals (seed 000)
3. gradients vs PyTorch/candle semantics (seed 002)
4. a finite-difference gradient report (burn's check; seed 004)
"""
import numpy as np

import pyautodiff as ad


def facts(label, t):
    print(f"{label:<24} id={t.id:<4} is_variable={str(t.is_variable):<5} "
          f"track_op={str(t.track_op):<5} sorted_nodes={len(t.sorted_nodes())}")


def graph_facts():
    print("== 1. what records a node (seed 000) ==")
    x = ad.tensor([[1.0, 2.0], [3.0, 4.0]])
    print("-- w is a plain Tensor")
    w = ad.tensor([[0.5, -1.0], [2.0, 0.0]])
    y = x.matmul(w)
    loss = y.sqr().sum_all()
    facts("w", w)
    facts("y = x.matmul(w)", y)
    facts("loss", loss)
    print("-- w is a Var")
    w = ad.Var([[0.5, -1.0], [2.0, 0.0]])
    facts("w", w)
    facts("x", x)
    y = x.matmul(w)
    facts("y = x.matmul(w)", y)
    loss = y.sqr().sum_all()
    facts("loss", loss)
    for i, n in enumerate(loss.sorted_nodes()):
        print(f"  sorted[{i}] id={n.id} dims={list(n.shape)} is_variable={n.is_variable} "
              f"op={n.op}")
    print("  (candle lists 5 nodes: its sum_all is sum_keepdim + reshape; ours is one op)")
    print("-- detach / argmax / views")
    facts("y.detach()", y.detach())
    facts("y.detach().exp()", y.detach().exp())
    facts("y.argmax(1)", y.argmax(1))
    facts("w.t()", w.t())
    facts("y.to_dtype(int64)", y.to_dtype(ad.int64))
    print("  (candle: to_dtype(U32) has track_op=true but no sorted nodes; pyautodiff "
          "records no op for a cast to an integer dtype)")
    facts("w.as_detached_tensor()", w.as_detached_tensor())
    big = ad.Var.zeros((1024, 1024))
    h = big.exp()
    out = h.sum_all()
    h_id = h.id
    del h
    print("dropped h, still reachable from out:", any(n.id == h_id for n in out.sorted_nodes()))


def set_refusals():
    print("\n== 2. Var.set (seed 000) ==")
    w = ad.Var([[1.0, 2.0], [3.0, 4.0]])
    for label, src in (("set(w.t())", lambda: w.t()),
                       ("set(w.as_detached_tensor())", lambda: w.as_detached_tensor())):
        try:
            w.set(src())
            print(label, "-> accepted (unexpected)")
        except ad.GraphError as e:
            print(label, "-> GraphError:", e)
    w.set(w * 2)
    print("after set(w * 2):", w.tolist())
    try:
        w.set(ad.zeros((3,)))
    except ad.ShapeError as e:
        print("set(zeros(3)) -> ShapeError:", e)


def gradient_semantics():
    print("\n== 3. gradients (seed 002) ==")
    k = ad.tensor([10.0, 20.0])
    w = ad.Var([1.0, 2.0])
    h = w * k
    loss = h.sum_all()
    g = loss.backward()
    print("w.grad", g[w].tolist(), "k.grad", g.get(k), "h.grad", g.get(h),
          " (PyTorch: k None, h None; candle: k Some([1, 2]))")
    print("second backward w.grad", loss.backward()[w].tolist(), " (PyTorch: error)")
    acc = loss.backward()
    acc.extend(loss.backward())
    print("w.grad after extend", acc[w].tolist())
    h = w * k
    g = (h * h).sum().backward(retain=[h])
    print("retain=[h]: h.grad", g[h].tolist(), "w.grad", g[w].tolist())
    try:
        (w * k).backward()
    except ad.ShapeError as e:
        print("non-scalar root -> ShapeError:", e)
    try:
        ad.Var([1, 2])
    except ad.DTypeError as e:
        print("integer Var -> DTypeError:", e)
    t = ad.tensor([1.0, 2.0])
    p = ad.Var.from_tensor(t)
    p.set(ad.zeros(2))
    print("t", t.tolist(), "p", p.tolist(), "same id", t.id == p.id)
    print("from_tensor(var) same id", ad.Var.from_tensor(p).id == p.id)


def seq(n, step, start):
    return [start + i * step for i in range(n)]


def fd_report(label, f, inputs, eps=1e-3):
    """Analytic gradients (float32, as in the seed) against float64 central
    differences of the same function."""
    leaves = [ad.Var(np.array(v, dtype=np.float32).reshape(s)) for v, s in inputs]
    grads = f(leaves).backward()
    for i, (v, s) in enumerate(inputs):
        g = grads[leaves[i]].numpy().reshape(-1)
        base = [np.array(vv, dtype=np.float64).reshape(ss) for vv, ss in inputs]
        num = np.zeros(base[i].size)
        for k in range(base[i].size):
            for sign in (1, -1):
                arrs = [b.copy() for b in base]
                arrs[i].reshape(-1)[k] += sign * eps
                with ad.no_grad():
                    val = f([ad.tensor(a, dtype=ad.float64) for a in arrs]).item()
                num[k] += sign * val / (2 * eps)
        err = np.max(np.abs(g - num)) if g.size else 0.0
        print(f"{label:<22} input{i} shape={list(s)} grad shape={list(leaves[i].shape)} "
              f"max|analytic-numeric|={err:.2e}")
        print(f"{'':<22} grad=[{', '.join(str(np.float32(x)) for x in g)}]")


def finite_differences():
    print("\n== 4. finite-difference gradient check (seed 004) ==")
    w6 = [0.3, -1.2, 0.7, 2.0, -0.5, 1.1]

    def weight(vals, shape, like):
        return ad.tensor(np.array(vals).reshape(shape), dtype=like.dtype)

    fd_report("mul", lambda t: (t[0] * t[1] * weight(w6, (1, 2, 3), t[0])).sum(),
              [(seq(6, 0.5, -1.0), (1, 2, 3)), (seq(6, -0.25, 1.0), (1, 2, 3))])
    fd_report("mul broadcast [1,1,3]", lambda t: (t[0] * t[1] * weight(w6, (1, 2, 3), t[0])).sum(),
              [(seq(6, 0.5, -1.0), (1, 2, 3)), ([2.0, -1.0, 0.5], (1, 1, 3))])
    w4 = [0.3, -1.2, 0.7, 2.0]
    fd_report("matmul", lambda t: ((t[0] @ t[1]) * weight(w4, (1, 2, 2), t[0])).sum(),
              [(seq(6, 0.5, -1.0), (1, 2, 3)), (seq(6, -0.25, 1.0), (1, 3, 2))])
    w8 = w4 + [1.0, 0.5, -0.5, 1.5]
    fd_report("matmul batch-broadcast",
              lambda t: ((t[0] @ t[1]) * weight(w8, (2, 2, 2), t[0])).sum(),
              [(seq(12, 0.5, -1.0), (2, 2, 3)), (seq(6, -0.25, 1.0), (1, 3, 2))])


def main():
    graph_facts()
    set_refusals()
    gradient_semantics()
    finite_differences()
    print(f"\nlive native tensors at exit of the demo's scopes: {ad.live_tensors()}")


if __name__ == "__main__":
    main()
