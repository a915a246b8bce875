"""Adasum (op=Adasum) against a direct numpy implementation of the pairwise
formula of Maleki et al. (MLSys 2021), written here from the paper:
    adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b
combined as a binary tree over ranks (lower ranks on the left), per tensor.

Usage: adasum.py [odd]   (odd: run on a number of ranks that is not a power of two)"""
import sys

import numpy as np
import torch

import fuseopt
import fuseopt.torch as hvd
import rank_harness as harness


def pair(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    ca = 1.0 - dot / (2 * aa) if aa >= 1e-8 else 1.0
    cb = 1.0 - dot / (2 * bb) if bb >= 1e-8 else 1.0
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
                     check_orthogonal_gradients_add_and_parallel_ones_do_not,
                     check_bad_dtype_is_refused,
                     check_distributed_optimizer_combines_updates_with_adasum])
