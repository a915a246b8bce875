"""What the PyTorch and the Keras ranks of a mixed job share: data, shared
names, initial weights and a NumPy reference (neither framework's code).

Two models, both in the shared (Keras) layout [in, out]:
  logreg  64 -> 10 softmax regression; initial weights broadcast from rank 0
          (a PyTorch rank);
  mlp     64 -> 32 ReLU -> 10; initial weights broadcast from rank 2 (a Keras
          rank).
Every rank trains on its shard of the digits data: global batch k is rows
[k*n*B, (k+1)*n*B), rank r takes its B rows of it.
"""
import numpy as np

B = 16
STEPS = 5
LR = 0.5
SIZES = {"logreg": [64, 10], "mlp": [64, 32, 10]}
ROOTS = {"logreg": 0, "mlp": 2}
TORCH_RANKS = (0, 1)


def layer_names(model):
    return ["%s.fc%d" % (model, i + 1) for i in range(len(SIZES[model]) - 1)]


def digits():
    from sklearn.datasets import load_digits
    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def shard(x, rank, size):
    idx = np.concatenate([np.arange(k * size * B + rank * B, k * size * B + (rank + 1) * B)
                          for k in range(STEPS)])
    return x[idx]


def root_weights(model):
    """The weights the root loads before broadcasting ({shared name: array})."""
    rng = np.random.default_rng(7)
    sizes, out = SIZES[model], {}
    for name, (a, b) in zip(layer_names(model), zip(sizes, sizes[1:])):
        out[name + ".kernel"] = (rng.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32)
        out[name + ".bias"] = rng.normal(scale=0.1, size=b).astype(np.float32)
    return out


def reference(model, x, y, size):
    """Single-process SGD on the global batches, float64."""
    w = {k: v.astype(np.float64) for k, v in root_weights(model).items()}
    names = layer_names(model)
    for k in range(STEPS):
        xb = x[k * size * B:(k + 1) * size * B].astype(np.float64)
        yb = y[k * size * B:(k + 1) * size * B]
        acts = [xb]
        for i, n in enumerate(names):
            h = acts[-1] @ w[n + ".kernel"] + w[n + ".bias"]
            acts.append(np.maximum(h, 0) if i < len(names) - 1 else h)
        logits = acts[-1]
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        grad = p
        grad[np.arange(len(yb)), yb] -= 1
        grad /= len(yb)
        grads = {}
        for i in reversed(range(len(names))):
            n = names[i]
            grads[n + ".kernel"] = acts[i].T @ grad
            grads[n + ".bias"] = grad.sum(0)
            if i:
                grad = (grad @ w[n + ".kernel"].T) * (acts[i] > 0)
        for n in w:
            w[n] -= LR * grads[n]
    return w


def check_close(got, want, what, tol=1e-5):
    assert sorted(got) == sorted(want), (what, sorted(got), sorted(want))
    for n in want:
        g, r = np.asarray(got[n], np.float64), np.asarray(want[n], np.float64)
        assert g.shape == r.shape, "%s %s: shape %s vs %s" % (what, n, g.shape, r.shape)
        err = float(np.max(np.abs(g - r)))
        assert err <= tol, "%s %s: max error %g" % (what, n, err)


def check_everyone_holds(fuseopt, weights, model):
    """All ranks' weights (shared layout) are equal to this rank's."""
    every = fuseopt.allgather_object({k: np.asarray(v) for k, v in weights.items()},
                                     name="mixed.compare." + model)
    for r, theirs in enumerate(every):
        check_close(theirs, weights, "%s: rank %d vs rank %d" % (model, r, fuseopt.rank()),
                    tol=1e-6)


def run(hvd, framework, scenarios):
    """Runs scenarios[sys.argv[1]](x, y) on this framework's ranks of the
    4-rank job and reports "[rank r] mixed <framework> <scenario> ok"."""
    import sys
    hvd.init()
    assert hvd.size() == 4, hvd.size()
    assert (hvd.rank() in TORCH_RANKS) == (framework == "torch"), (framework, hvd.rank())
    x, y = digits()
    scenario = sys.argv[1]
    scenarios[scenario](x, y)
    rank = hvd.rank()
    hvd.shutdown()
    print("[rank %d] mixed %s %s ok" % (rank, framework, scenario), flush=True)
