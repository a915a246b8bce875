"""The neutral compressors (fuseopt/compression.py) through the torch kit,
without ranks: the collective sum is done here by hand over simulated ranks."""
import torch

from fuseopt.compression import reducing_over
from fuseopt.metrics_math import add_rates, efficiency
from fuseopt.torch.compression import Compression


def reduce_over_ranks(compressors, grads, names):
    """What DistributedOptimizer does on each of len(grads) ranks, with the
    allreduce (Sum: the EF compressor's reduce_op) done by hand."""
    n = len(grads)
    with reducing_over(n):
        sent = [c.compress(g, name) for c, g, name in zip(compressors, grads, names)]
    summed = [sum(s[0][k] for s in sent) for k in range(len(sent[0][0]))]
    return [c.decompress(summed, ctx) for c, (_, ctx) in zip(compressors, sent)]


def test_ef_sign_decodes_mean_scale_times_mean_sign():
    g = [torch.tensor([0.5, -2.0, 1.0]), torch.tensor([1.5, 1.0, -1.0])]
    out = reduce_over_ranks([Compression.ef_sign(), Compression.ef_sign()], g, ["w", "w"])
    scale = (g[0].abs().mean() + g[1].abs().mean()) / 2
    want = scale * torch.tensor([2.0, 0.0, 0.0]) / 2
    for o in out:
        assert o.dtype == torch.float32
        torch.testing.assert_close(o, want)


def test_ef_sign_feeds_back_what_was_not_sent():
    # One rank: the sum of what was sent telescopes to the sum of the
    # gradients minus the residual still held, whatever the gradients.
    torch.manual_seed(0)
    c = Compression.ef_sign()
    grads = [torch.randn(17) for _ in range(6)]
    sent = [reduce_over_ranks([c], [g], ["p"])[0] for g in grads]
    torch.testing.assert_close(sum(sent) + c.residuals["p"], sum(grads))
    # Residuals are per name, carry no autograd history, and keep float32.
    x = torch.randn(3, requires_grad=True)
    reduce_over_ranks([c], [x * 2], ["q"])
    assert set(c.residuals) == {"p", "q"} and not c.residuals["q"].requires_grad


def test_casts_halve_floats_and_leave_integers_alone():
    for comp, wire in ((Compression.fp16, torch.float16), (Compression.bf16, torch.bfloat16)):
        payloads, ctx = comp.compress(torch.tensor([1.0, 2.5], dtype=torch.float64))
        assert payloads[0].dtype == wire
        back = comp.decompress(payloads, ctx)
        assert back.dtype == torch.float64 and back.tolist() == [1.0, 2.5]
        ints = torch.tensor([3, 4])
        payloads, ctx = comp.compress(ints)
        assert payloads[0] is ints and comp.decompress(payloads, ctx) is ints


def test_overlap_efficiency_and_rates():
    assert efficiency(2.0, 0.5) == (1.5, 0.75)
    assert efficiency(1.0, 3.0) == (0.0, 0.0)  # waits longer than all communication
    assert efficiency(0.0, 0.0) == (0.0, None)
    r = add_rates({"bytes": 100, "collectives": 4, "cache_hits": 3, "cache_misses": 1}, None)
    assert (r["mean_bucket_bytes"], r["cache_hit_rate"]) == (25.0, 0.75)
    r = add_rates({"bytes": 0, "collectives": 0, "cache_hits": 0, "cache_misses": 0}, None)
    assert (r["mean_bucket_bytes"], r["cache_hit_rate"]) == (0.0, None)
