"""The neutral compressors (fuseopt/training/compression.py, ef_sign.py) through
the torch kit, without ranks: the collective sum is done here by hand over simulated ranks."""
import numpy as np
import torch

from fuseopt.training.compression import reducing_over
from fuseopt.base.metrics_math import add_rates, efficiency
from fuseopt.torch.compression import Compression


def reduce_over_ranks(compressors, grads, names):
    """What DistributedOptimizer does on each of len(grads) ranks, with the
    allreduce (Sum: the EF compressor's reduce_op) done by hand, in place."""
    n = len(grads)
    with reducing_over(n):
        sent = [c.compress_payloads(g, name) for c, g, name in zip(compressors, grads, names)]
    summed = [sum(s[0][k] for s in sent) for k in range(len(sent[0][0]))]
    for payloads, _ in sent:  # in place, as the optimizer's reducer does
        for payload, total in zip(payloads, summed):
            payload.copy_(total)
    return [c.decompress_payloads(payloads, ctx) for c, (payloads, ctx) in zip(compressors, sent)]


def numpy_ef_sign(grads_per_step, n):
    """An independent reference: n ranks quantize gradient + residual to
    integers in [-L, L], L = 127 // n, with step max|c| / L; everyone decodes
    with the mean step, and each rank keeps what that decode missed."""
    levels = 127 // n
    residuals = [np.zeros_like(g, dtype=np.float64) for g in grads_per_step[0]]
    outs = []
    for grads in grads_per_step:
        cs = [g + e for g, e in zip(grads, residuals)]
        steps = [np.abs(c).max() / levels for c in cs]
        qs = [np.round(c / a) for c, a in zip(cs, steps)]
        mean_step = np.mean(steps)
        outs.append(mean_step * np.sum(qs, axis=0) / n)
        residuals = [c - mean_step * q for c, q in zip(cs, qs)]
    return outs, residuals


def test_ef_sign_matches_a_numpy_reference():
    # Three ranks whose gradients differ in scale (so their steps differ),
    # over several steps (so residuals feed back).
    rng = np.random.default_rng(0)
    n, shape = 3, (4, 5)
    grads = [[rng.normal(size=shape) * (r + 1) for r in range(n)] for _ in range(5)]
    want, want_residuals = numpy_ef_sign(grads, n)
    comps = [Compression.ef_sign() for _ in range(n)]
    for step, g in enumerate(grads):
        out = reduce_over_ranks(comps, [torch.tensor(x, dtype=torch.float32) for x in g],
                                ["w"] * n)
        for o in out:
            assert o.dtype == torch.float32 and o.shape == shape
            np.testing.assert_allclose(o.numpy(), want[step], rtol=1e-5, atol=1e-6)
    for c, e in zip(comps, want_residuals):
        np.testing.assert_allclose(c.residuals["w"].numpy(), e, rtol=1e-4, atol=1e-5)


def test_ef_sign_payload_fits_int8_and_zeros_stay_zero():
    for n in (1, 2, 5, 127):
        g = [torch.randn(50) * 1e3 for _ in range(n)]
        with reducing_over(n):
            (q, step), _ = Compression.ef_sign().compress(g[0], "w")
        assert q.dtype == torch.int8 and step.shape == (1,)
        assert q.abs().max().item() == 127 // n  # the largest element uses every level
    out = reduce_over_ranks([Compression.ef_sign()] * 2, [torch.zeros(4)] * 2, ["z", "y"])
    assert all(o.tolist() == [0.0] * 4 for o in out)


def test_ef_sign_feeds_back_what_was_not_sent():
    # The sum of what was decoded telescopes to the mean over ranks of the
    # gradients minus the mean residual still held, whatever the gradients,
    # also when the ranks' steps differ (each books the mean step's error).
    torch.manual_seed(0)
    comps = [Compression.ef_sign(), Compression.ef_sign()]
    grads = [[torch.randn(17), torch.randn(17) * 10] for _ in range(6)]
    sent = [reduce_over_ranks(comps, g, ["p", "p"])[0] for g in grads]
    held = (comps[0].residuals["p"] + comps[1].residuals["p"]) / 2
    torch.testing.assert_close(sum(sent) + held, sum(g[0] + g[1] for g in grads) / 2)
    # Residuals are per name, carry no autograd history, and keep float32.
    c = comps[0]
    x = torch.randn(3, requires_grad=True)
    reduce_over_ranks([c], [x * 2], ["q"])
    assert set(c.residuals) == {"p", "q"} and not c.residuals["q"].requires_grad
    assert c.residuals["q"].dtype == torch.float32


def test_ef_sign_updates_its_residual_in_place():
    # The torch kit adds, subtracts and books into the residual's own memory
    # (a new 33 MB residual per step cost as much as the arithmetic), and
    # still gives the neutral algorithm's numbers (the numpy reference above).
    c = Compression.ef_sign()
    reduce_over_ranks([c], [torch.randn(64)], ["w"])
    residual = c.residuals["w"]
    ptr = residual.data_ptr()
    for _ in range(3):
        reduce_over_ranks([c], [torch.randn(64)], ["w"])
        assert c.residuals["w"] is residual and residual.data_ptr() == ptr
    # A float64 gradient adds into the float32 residual and comes back float64.
    with reducing_over(1):
        payloads, ctx = c.compress(torch.randn(64, dtype=torch.float64), "w")
    assert c.decompress(payloads, ctx).dtype == torch.float64
    assert c.residuals["w"] is residual and residual.dtype == torch.float32


def test_casts_halve_floats_and_leave_integers_alone():
    # Horovod's interface: compress(t) -> (tensor, ctx), decompress(tensor, ctx).
    for comp, wire in ((Compression.fp16, torch.float16), (Compression.bf16, torch.bfloat16)):
        sent, ctx = comp.compress(torch.tensor([1.0, 2.5], dtype=torch.float64))
        assert isinstance(sent, torch.Tensor) and sent.dtype == wire
        back = comp.decompress(sent, ctx)
        assert back.dtype == torch.float64 and back.tolist() == [1.0, 2.5]
        ints = torch.tensor([3, 4])
        sent, ctx = comp.compress(ints)
        assert sent is ints and comp.decompress(sent, ctx) is ints
        payloads, ctx = comp.compress_payloads(ints)  # what the bindings reduce
        assert payloads == [ints] and comp.decompress_payloads(payloads, ctx) is ints


def test_compressors_of_either_shape_reach_the_bindings_as_payload_lists():
    from fuseopt.training.compression import as_compressor
    from fuseopt.torch.compression import Compressor

    class Listed(Compressor):  # several payloads: a list each way
        def compress(self, tensor, name=None):
            return [tensor * 2, tensor * 3], name

        def decompress(self, payloads, ctx):
            return payloads[0] + payloads[1]

    class HorovodStyle:  # a class passed itself, static methods, no name
        @staticmethod
        def compress(tensor):
            return tensor + 1, "ctx"

        @staticmethod
        def decompress(tensor, ctx):
            assert ctx == "ctx"
            return tensor - 1

    t = torch.tensor([1.0, 2.0])
    payloads, ctx = Listed().compress_payloads(t, "w")
    assert len(payloads) == 2 and Listed().decompress_payloads(payloads, ctx).tolist() == [5, 10]
    adapted = as_compressor(HorovodStyle)
    payloads, ctx = adapted.compress_payloads(t)
    assert payloads[0].tolist() == [2.0, 3.0]
    assert adapted.decompress_payloads(payloads, ctx).tolist() == [1.0, 2.0]


def test_overlap_efficiency_and_rates():
    assert efficiency(2.0, 0.5) == (1.5, 0.75)
    assert efficiency(1.0, 3.0) == (0.0, 0.0)  # waits longer than all communication
    assert efficiency(0.0, 0.0) == (0.0, None)
    r = add_rates({"bytes": 100, "collectives": 4, "cache_hits": 3, "cache_misses": 1}, None)
    assert (r["mean_bucket_bytes"], r["cache_hit_rate"]) == (25.0, 0.75)
    r = add_rates({"bytes": 0, "collectives": 0, "cache_hits": 0, "cache_misses": 0}, None)
    assert (r["mean_bucket_bytes"], r["cache_hit_rate"]) == (0.0, None)


def test_only_unchanged_cast_compressors_run_on_the_core_wire():
    # The optimizers skip compress/decompress for these (the core casts), so
    # a subclass with its own compress must keep going through it.
    from fuseopt.core import requests
    from fuseopt.training.compression import on_wire
    from fuseopt.torch.compression import FP16Compressor

    class Scaled(FP16Compressor):
        def compress(self, tensor, name=None):
            return super().compress(tensor * 2, name)

    class Renamed(FP16Compressor):
        pass

    assert on_wire(Compression.fp16) == requests.WIRE_FLOAT16
    assert on_wire(Compression.bf16) == requests.WIRE_BFLOAT16
    assert on_wire(Renamed()) == requests.WIRE_FLOAT16
    for other in (Scaled(), Compression.none, Compression.ef_sign()):
        assert on_wire(other) == requests.WIRE_AS_IS, other
