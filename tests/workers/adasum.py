"""Adasum (op=Adasum) against a direct numpy implementation of the pairwise
formula of Maleki et al. (MLSys 2021), written here from the paper:
    adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b
combined as a binary tree over ranks (lower ranks on the left), per tensor,
with a coefficient of 1 for a zero vector, and Horovod's stability recipes at
the edges of each dtype's range (check_extreme_magnitudes_...).

Usage: adasum.py [odd]   (odd: run on a number of ranks that is not a power of two)"""
import math
import sys

import numpy as np
import torch

import fuseopt
import fuseopt.torch as hvd
import rank_harness as harness


def pair(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    ca = 1.0 - dot / (2 * aa) if aa != 0 else 1.0
    cb = 1.0 - dot / (2 * bb) if bb != 0 else 1.0
    return ca * a + cb * b


def tree(vectors):
    while len(vectors) > 1:
        vectors = [pair(vectors[i], vectors[i + 1]) for i in range(0, len(vectors), 2)]
    return vectors[0]


SIZES = (1, 7, 1000, 33, 4096)


def rank_data(rank, dtype):
    rng = np.random.default_rng(100 + rank)
    return [rng.normal(size=n).astype(dtype) for n in SIZES]


def check_fused_buckets_match_the_formula_per_tensor():
    r, n = fuseopt.rank(), fuseopt.size()
    for dtype, tol in ((np.float32, 2e-5), (np.float64, 1e-12)):
        mine = rank_data(r, dtype)
        out = fuseopt.grouped_allreduce(mine, names=["ad.%s.%d" % (np.dtype(dtype).name, i)
                                                     for i in range(len(SIZES))], op=fuseopt.Adasum)
        for i in range(len(SIZES)):
            expected = tree([rank_data(k, dtype)[i] for k in range(n)])
            got = out[i].astype(np.float64)
            err = np.max(np.abs(got - expected)) / max(1.0, np.max(np.abs(expected)))
            assert got.dtype == np.float64 and out[i].dtype == dtype
            assert err <= tol, "%s tensor %d: relative error %g" % (np.dtype(dtype).name, i, err)
        # One tensor alone gives what it gives inside a bucket.
        alone = fuseopt.allreduce(mine[2], name="ad.alone.%s" % np.dtype(dtype).name,
                                  op=fuseopt.Adasum)
        assert np.allclose(alone, out[2], rtol=tol, atol=tol)


def check_orthogonal_gradients_add_and_parallel_ones_do_not():
    r, n = fuseopt.rank(), fuseopt.size()
    e = np.zeros(n, np.float64)
    e[r] = 3.0
    assert np.allclose(fuseopt.allreduce(e, name="ad.orth", op=fuseopt.Adasum), 3.0)
    v = np.array([1.0, -2.0, 0.5])
    assert np.allclose(fuseopt.allreduce(v, name="ad.par", op=fuseopt.Adasum), v)
    z = np.zeros(4) if r == 0 else np.ones(4)  # a zero vector takes coefficient 1
    assert np.allclose(fuseopt.allreduce(z, name="ad.zero", op=fuseopt.Adasum),
                       tree([np.zeros(4)] + [np.ones(4)] * (n - 1)))


def finfo(dtype):
    return torch.finfo(torch.bfloat16) if dtype == "bfloat16" else np.finfo(dtype)


def rounded(values, dtype):
    """values (float64) rounded to dtype, back as float64."""
    if dtype == "bfloat16":
        return torch.from_numpy(values).to(torch.bfloat16).double().numpy()
    return values.astype(dtype).astype(np.float64)


def parallel_gradients(dtype, recipe, n):
    """Horovod's test_stability recipes (test_adasum_pytorch.py), as an (N, n)
    array whose column r is rank r's gradient: every column is a multiple
    r_k * a of one vector a, rounded to dtype.
      "tiny":  a ~ N(0, tiny) and r_k ~ N(0, 1): elements around the smallest
               normal number (their squares underflow a float64 sum);
      "span":  a ~ N(0, 1) and r_k from tiny to sqrt(max) in equal ratios:
               ranks whose magnitudes differ by up to the whole range (for
               float64 the squares overflow, and the coefficients of two
               such ranks, up to 1e462, are no doubles)."""
    rng = np.random.default_rng(2)
    tiny, big = float(finfo(dtype).tiny), math.sqrt(float(finfo(dtype).max))
    if recipe == "tiny":
        a, r = rng.normal(0, tiny, 1024), rng.normal(0, 1, n)
    else:
        a = rng.normal(0, 1, 1024)
        r = np.array([big ** ((k + 1) / n) * tiny ** ((n - k - 1) / n) for k in range(n)])
        rng.shuffle(r)
    return rounded(np.outer(a, r), dtype)


def adasum_of(columns, dtype, names):
    """Each rank's column reduced with op=Adasum, all in one grouped call (one
    fused bucket per dtype); bfloat16 through torch, the rest through numpy."""
    r = fuseopt.rank()
    if dtype == "bfloat16":
        mine = [torch.from_numpy(c[:, r].copy()).to(torch.bfloat16) for c in columns]
        out = hvd.grouped_allreduce(mine, name=names[0], op=hvd.Adasum)
        return [o.double().numpy() for o in out]
    mine = [c[:, r].astype(dtype) for c in columns]
    return [o.astype(np.float64) for o in
            fuseopt.grouped_allreduce(mine, names=names, op=fuseopt.Adasum)]


def check_extreme_magnitudes_give_the_average_of_parallel_gradients():
    """adasum(a, k a) = (1 - k/2) a + (1 - 1/(2k)) k a = (a + k a) / 2 for any
    k != 0, so a tree over 2^L ranks of parallel gradients is their average,
    whatever their magnitudes: that is what Horovod's stability tests expect.
    A coefficient that takes a small norm for zero (a 1e-8 threshold) sums
    instead, 2x the average at 2 ranks. Tolerance: every level rounds its
    result to dtype once (eps/2) and the inputs are parallel only to within
    their own rounding, so a few eps per level; Horovod's test allows 100 eps."""
    n = fuseopt.size()
    levels = max(1, int(math.log2(n)))
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        columns = [parallel_gradients(dtype, recipe, n) for recipe in ("tiny", "span")]
        names = ["ad.edge.%s.%s" % (dtype, recipe) for recipe in ("tiny", "span")]
        fused = adasum_of(columns, dtype, names)
        alone = [adasum_of([c], dtype, [name + ".alone"])[0] for c, name in zip(columns, names)]
        for recipe, q, got, got_alone in zip(("tiny", "span"), columns, fused, alone):
            expected = q.mean(axis=1)
            scale = max_norm(q)
            err, err_alone = distance(got, expected, scale), distance(got_alone, got, scale)
            bound = 4 * float(finfo(dtype).eps) * levels
            assert err <= bound, "%s %s: error %g > %g" % (dtype, recipe, err, bound)
            assert err_alone <= bound, "%s %s: fused and alone %g apart" % (dtype, recipe, err)


def max_norm(columns):
    """The largest column norm, computed after scaling by a power of two: the
    float64 norm of these vectors under- or overflows."""
    shift = -np.frexp(np.max(np.abs(columns)))[1]
    return np.max(np.linalg.norm(np.ldexp(columns, shift), axis=0)), shift


def distance(x, y, scale):
    """|x - y| relative to the inputs' scale (the mean of ranks of opposite
    signs can be far smaller than any of them)."""
    norm, shift = scale
    return np.linalg.norm(np.ldexp(x, shift) - np.ldexp(y, shift)) / norm


def check_bad_dtype_is_refused():
    harness.expect_error(fuseopt.InvalidArgumentError,
                         lambda: fuseopt.allreduce(np.ones(3, np.int32), name="ad.int",
                                                   op=fuseopt.Adasum), "Adasum", "int32")


def check_distributed_optimizer_combines_updates_with_adasum():
    r, n = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    lr = 0.1
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    rng = np.random.default_rng(7 + r)
    for step in range(3):
        x = torch.tensor(rng.normal(size=(8, 4)), dtype=torch.float32)
        start = [p.detach().double().numpy().ravel().copy() for p in model.parameters()]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), torch.ones(8, 2)).backward()
        grads = hvd.allgather_object([p.grad.double().numpy().ravel() for p in model.parameters()])
        opt.step()
        for i, p in enumerate(model.parameters()):
            expected = start[i] + tree([-lr * grads[k][i] for k in range(n)])
            got = p.detach().double().numpy().ravel()
            assert np.allclose(got, expected, atol=1e-6), "step %d param %d" % (step, i)


def check_not_a_power_of_two_is_a_clear_error_on_every_rank():
    harness.expect_error(fuseopt.UnsupportedError,
                         lambda: fuseopt.allreduce(np.ones(3), name="ad.odd", op=fuseopt.Adasum),
                         "power-of-two", "ranks")
    assert np.allclose(fuseopt.allreduce(np.ones(2), name="ad.after", op=fuseopt.Sum),
                       fuseopt.size())  # the job goes on


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1:] == ["odd"]:
        harness.run([check_not_a_power_of_two_is_a_clear_error_on_every_rank])
    else:
        harness.run([check_fused_buckets_match_the_formula_per_tensor,
                     check_extreme_magnitudes_give_the_average_of_parallel_gradients,
                     check_orthogonal_gradients_add_and_parallel_ones_do_not,
                     check_bad_dtype_is_refused,
                     check_distributed_optimizer_combines_updates_with_adasum])
