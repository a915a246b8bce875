"""fuseopt.torch collectives: values, autograd, in-place/async forms, errors."""
import torch

import fuseopt.torch as hvd
import harness


def close(a, b, what, tol=1e-6):
    assert a.shape == b.shape, "%s: shape %s vs %s" % (what, tuple(a.shape), tuple(b.shape))
    assert torch.allclose(a.double(), b.double(), atol=tol, rtol=tol), "%s:\n%s\n%s" % (what, a, b)


def rank_tensor(r, shape=(4, 3), dtype=torch.float32):
    g = torch.Generator().manual_seed(1000 + r)
    return torch.randn(shape, generator=g).to(dtype)


def check_allreduce_forms_and_autograd():
    r, n = hvd.rank(), hvd.size()
    xs = [rank_tensor(k) for k in range(n)]
    total = sum(xs)
    close(hvd.allreduce(xs[r], name="a", op=hvd.Sum), total, "sum")
    close(hvd.allreduce(xs[r], name="a"), total / n, "average default")
    close(hvd.allreduce(xs[r], average=False, name="a"), total, "average=False")
    y = xs[r].clone()
    hvd.allreduce_(y, name="a_", op=hvd.Sum)
    close(y, total, "in place")
    h = hvd.allreduce_async(xs[r], name="a_async", op=hvd.Max)
    close(hvd.synchronize(h), torch.stack(xs).max(0).values, "async max")
    assert hvd.poll(h)
    noncontig = torch.arange(24.0).reshape(4, 6)[:, ::2]
    close(hvd.allreduce(noncontig, name="nc", op=hvd.Sum), noncontig * n, "non-contiguous")
    outs = hvd.grouped_allreduce([xs[r], 2 * xs[r]], name="grp", op=hvd.Sum)
    close(outs[1], 2 * total, "grouped")
    for dtype in (torch.float16, torch.bfloat16, torch.int32, torch.float64, torch.uint8):
        v = torch.full((5,), r + 1).to(dtype)
        close(hvd.allreduce(v, name="dt.%s" % dtype, op=hvd.Sum),
              torch.full((5,), n * (n + 1) / 2).to(dtype), "dtype %s" % dtype)
    # Gradient of an averaged allreduce is the averaged gradient.
    w = xs[r].clone().requires_grad_()
    (hvd.allreduce(w, name="ag.fwd") * (r + 1)).sum().backward()
    # d/dw_r of sum_k L_k, L_k = (k+1) * sum(mean_j w_j): sum_k (k+1) / n
    close(w.grad, torch.full_like(w, sum(range(1, n + 1)) / n), "allreduce grad")


def check_allgather_broadcast_autograd():
    r, n = hvd.rank(), hvd.size()
    x = torch.full((r + 1, 2), float(r), requires_grad=True)
    g = hvd.allgather(x, name="gather")
    expected = torch.cat([torch.full((k + 1, 2), float(k)) for k in range(n)])
    close(g, expected, "allgather")
    (g * torch.arange(len(g)).unsqueeze(1)).sum().backward()
    offset = sum(k + 1 for k in range(r))
    rows = torch.arange(offset, offset + r + 1, dtype=torch.float32).unsqueeze(1).expand(-1, 2)
    close(x.grad, rows * n, "allgather grad (every rank's use of my rows, summed)")
    root = n - 1
    b = torch.full((3,), float(r), requires_grad=True)
    out = hvd.broadcast(b, root, name="bcast")
    close(out, torch.full((3,), float(root)), "broadcast")
    (out * (r + 1)).sum().backward()
    expected_grad = float(sum(range(1, n + 1))) if r == root else 0.0
    close(b.grad, torch.full((3,), expected_grad), "broadcast grad")
    c = torch.full((2, 2), float(r))
    hvd.broadcast_(c, 0, name="bcast_")
    close(c, torch.zeros(2, 2), "broadcast_")


def check_alltoall_reducescatter_objects():
    r, n = hvd.rank(), hvd.size()
    data = torch.arange(n * 2, dtype=torch.float32) + 100 * r
    out, splits = hvd.alltoall(data, name="a2a")
    expected = torch.cat([torch.arange(2 * r, 2 * r + 2, dtype=torch.float32) + 100 * k
                          for k in range(n)])
    close(out, expected, "alltoall")
    assert splits.tolist() == [2] * n
    rs = hvd.reducescatter(torch.ones(2 * n, 3) * (r + 1), name="rs", op=hvd.Sum)
    close(rs, torch.full((2, 3), n * (n + 1) / 2), "reducescatter")
    obj = hvd.broadcast_object({"t": torch.ones(2) * r, "r": r}, root_rank=n - 1)
    assert obj["r"] == n - 1 and torch.equal(obj["t"], torch.ones(2) * (n - 1))
    assert hvd.allgather_object(r * 10) == [k * 10 for k in range(n)]
    hvd.barrier()


def check_clear_errors():
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64), name="c"),
                         "complex64")
    harness.expect_error(hvd.UnsupportedError,
                         lambda: hvd.allreduce(torch.ones(2, device="meta"), name="m"),
                         "meta", "CPU")
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: hvd.allreduce_(torch.ones(4, 4)[:, 1], name="nc_"),
                         "contiguous")
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: hvd.allreduce(torch.ones(2), average=True, op=hvd.Sum,
                                               name="both"), "either")


if __name__ == "__main__":
    torch.set_num_threads(1)
    harness.run([check_allreduce_forms_and_autograd, check_allgather_broadcast_autograd,
                 check_alltoall_reducescatter_objects, check_clear_errors])
