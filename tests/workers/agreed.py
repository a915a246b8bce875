"""Agreed reductions (fuseopt.AgreedReduction, Note [Agreed reductions]) and
SyncBatchNorm on them, on every rank: exact sums from one value to messages
that MPI sends by rendezvous, the checks carried in the payload (different reductions at
once, different sizes, a name negotiated with different counts), process sets,
and agreed calls between gradient traffic of the background thread."""
import numpy as np
import torch

import fuseopt
import fuseopt.torch as hvd
import rank_harness as harness
from rank_harness import expect_error

# 200,000 values (1.6 MB) go by MPI's rendezvous protocol, the rest eagerly.
SIZES = (1, 126, 300, 200000)


def check_sums_and_averages_at_every_size():
    n, r = fuseopt.size(), fuseopt.rank()
    for size in SIZES:
        total = fuseopt.AgreedReduction("sum.%d" % size, size)
        mean = fuseopt.AgreedReduction("mean.%d" % size, size, op=fuseopt.Average)
        for step in range(4):  # the first call is negotiated, the rest are not
            values = np.arange(size) * (r + 1) + step
            want = np.arange(size) * n * (n + 1) / 2 + n * step
            assert np.array_equal(total(values), want), (size, step)
            assert np.allclose(mean(values), want / n), (size, step)
            assert total.values is total(values)  # in place, no new array


def check_different_reductions_at_once_fail_on_every_rank():
    n, r = fuseopt.size(), fuseopt.rank()
    a = fuseopt.AgreedReduction("mismatch.a", 4)
    b = fuseopt.AgreedReduction("mismatch.b", 4)
    small = fuseopt.AgreedReduction("mismatch.small", 2)
    big = fuseopt.AgreedReduction("mismatch.big", 300)
    for agreed in (a, b, small, big):
        agreed()
    # Rank 0 calls another reduction than the rest: same size, then another size.
    e = expect_error(fuseopt.MismatchError, lambda: (a if r == 0 else b)(),
                     "ranks disagree about agreed reduction")
    if n == 2:
        assert "other rank called 'mismatch.%s'" % ("b" if r == 0 else "a") in str(e), str(e)
    e = expect_error(fuseopt.MismatchError, lambda: (small if r == 0 else big)(),
                     "ranks disagree about agreed reduction")
    if n == 2:  # a message of another length still names what its sender called
        assert "other rank called 'mismatch.%s'" % ("big" if r == 0 else "small") in str(e), str(e)
    # The last rank (in a doubling step, not a folded pair, at 3 and 6 ranks) differs.
    expect_error(fuseopt.MismatchError, lambda: (big if r == n - 1 else small)(),
                 "ranks disagree about agreed reduction")
    # The job goes on: the same reductions in the same order work again.
    assert np.array_equal(a(np.ones(4)), np.full(4, n))
    assert np.array_equal(big(np.ones(300)), np.full(300, n))
    assert fuseopt.allreduce(np.ones(3), name="after.mismatch", op=fuseopt.Sum)[0] == n


def check_first_call_with_other_counts_fails_in_negotiation():
    r = fuseopt.rank()
    odd = fuseopt.AgreedReduction("counts.differ", 3 if r == 0 else 5)
    expect_error(fuseopt.MismatchError, odd, "counts.differ")


def check_bad_arguments():
    expect_error(fuseopt.InvalidArgumentError, lambda: fuseopt.AgreedReduction("zero", 0),
                 "count must be")
    expect_error(fuseopt.UnsupportedError,
                 lambda: fuseopt.AgreedReduction("max", 2, op=fuseopt.Max), "only Sum and Average")


def check_process_set():
    n, r = fuseopt.size(), fuseopt.rank()
    members = [0, n - 1] if n > 2 else [n - 1]  # at 2 ranks [0, 1] is the global set
    ps = fuseopt.add_process_set(members)
    if r in members:
        agreed = fuseopt.AgreedReduction("set.sum", 3, process_set=ps)
        for step in range(3):
            want = sum(m + step for m in members)
            assert np.array_equal(agreed(np.full(3, r + step)), np.full(3, want))
    else:
        expect_error(fuseopt.InvalidArgumentError,
                     lambda: fuseopt.AgreedReduction("set.sum", 3, process_set=ps), "not a member")
    fuseopt.remove_process_set(ps)


def check_between_background_traffic():
    n, r = fuseopt.size(), fuseopt.rank()
    agreed = fuseopt.AgreedReduction("busy.stats", 65)
    for step in range(20):
        grads = [np.full(1 << 16 if i == 0 else 300, float(r + step + i), np.float32)
                 for i in range(8)]
        handles = [fuseopt.allreduce_async_(g, name="busy.g%d" % i, op=fuseopt.Sum)
                   for i, g in enumerate(grads)]
        for k in range(3):
            assert np.array_equal(agreed(np.full(65, r + k)), np.full(65, n * (n - 1) / 2 + n * k))
        for i, (h, g) in enumerate(zip(handles, grads)):
            h.wait()
            assert np.all(g == n * (n - 1) / 2 + n * (step + i)), (step, i)


def check_sync_batch_norm_layers_of_other_sizes_at_once_fail_on_every_rank():
    r = fuseopt.rank()
    narrow, wide = hvd.SyncBatchNorm(4), hvd.SyncBatchNorm(8)
    narrow(torch.randn(2, 4, 3))  # both agreed
    wide(torch.randn(2, 8, 3))
    expect_error(fuseopt.MismatchError,
                 lambda: (narrow(torch.randn(2, 4, 3)) if r == 0 else wide(torch.randn(2, 8, 3))),
                 "sync_batch_norm.stats")


def check_sync_batch_norm_with_an_empty_batch_on_rank_0():
    n, r = fuseopt.size(), fuseopt.rank()
    torch.manual_seed(1)
    full = torch.randn(3 * (n - 1), 5, 4, 2)
    ref = torch.nn.BatchNorm2d(5)
    layer = hvd.SyncBatchNorm(5)
    mine = full[0:0] if r == 0 else full[3 * (r - 1):3 * r]
    x = mine.clone().requires_grad_()
    xr = full.clone().requires_grad_()
    out, want = layer(x), ref(xr)
    out.sum().backward()
    want.sum().backward()
    assert out.shape == mine.shape
    if r:
        assert torch.allclose(out, want[3 * (r - 1):3 * r], atol=1e-5)
        assert torch.allclose(x.grad, xr.grad[3 * (r - 1):3 * r], atol=1e-5)
    assert torch.allclose(layer.running_var, ref.running_var, atol=1e-5)


if __name__ == "__main__":
    torch.set_num_threads(1)
    harness.run([check_sums_and_averages_at_every_size,
                 check_different_reductions_at_once_fail_on_every_rank,
                 check_first_call_with_other_counts_fails_in_negotiation, check_bad_arguments,
                 check_process_set, check_between_background_traffic,
                 check_sync_batch_norm_layers_of_other_sizes_at_once_fail_on_every_rank,
                 check_sync_batch_norm_with_an_empty_batch_on_rank_0])
