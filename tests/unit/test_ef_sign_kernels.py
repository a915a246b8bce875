"""Compression.ef_sign through the core's kernels (native/src/kernels/ef_sign.cc,
reached by the torch kit for host float32 gradients), without ranks: the
collective sum is done here by hand over simulated ranks."""
import numpy as np
import pytest
import torch

from fuseopt.api import ef_sign as native
from fuseopt.base.errors import InvalidArgumentError
from fuseopt.torch import compression as tc
from fuseopt.training.compression import reducing_over, results_in_place

F = np.float32


def float32_reference(grads_per_step, n):
    """EFSignCompressor's algorithm in float32, each operation rounded once
    (NumPy's float32 arithmetic): per step the decoded mean, every rank's
    values and residuals."""
    levels = F(127 // n)
    residuals = [np.zeros_like(g, dtype=F) for g in grads_per_step[0]]
    steps_out = []
    for grads in grads_per_step:
        cs = [e + g.astype(F) for g, e in zip(grads, residuals)]
        steps = [F(np.abs(c).max()) / levels for c in cs]
        qs = [np.clip(np.rint(c / s), -levels, levels) if s > 0 else np.zeros_like(c)
              for c, s in zip(cs, steps)]
        residuals = [c - q * s for c, q, s in zip(cs, qs, steps)]
        step_sum = F(sum(steps, F(0)))
        mean = step_sum / F(n)
        q_sum = np.sum(qs, axis=0).astype(F)
        residuals = [e - q * (mean - s) for e, q, s in zip(residuals, qs, steps)]
        steps_out.append((q_sum * (mean / F(n)), qs, [e.copy() for e in residuals]))
    return steps_out


def simulate(compressors, grads, name="w"):
    """One step on len(grads) simulated ranks; the values summed as int8."""
    n = len(grads)
    with reducing_over(n):
        sent = [c.compress_payloads(g, name) for c, g in zip(compressors, grads)]
    q_sum = sum(p[0].to(torch.int32) for p, _ in sent).to(torch.int8)
    step_sum = sum(p[1] for p, _ in sent)
    values = [p[0].clone() for p, _ in sent]
    outs = [c.decompress_payloads([q_sum.clone(), step_sum.clone()], ctx)
            for c, (_, ctx) in zip(compressors, sent)]
    return outs, values


@pytest.mark.parametrize("count", [1, 7, 8, 17, 1000, 3 * 65536 + 5])
@pytest.mark.parametrize("n", [2, 3])
def test_the_kernels_give_the_bits_of_the_algorithm_in_float32(count, n):
    rng = np.random.default_rng(count + n)
    # Ranks of different scales (their steps differ), over steps (residuals feed back).
    grads = [[(rng.normal(size=count) * (r + 1)).astype(F) for r in range(n)] for _ in range(4)]
    grads.append([np.zeros(count, F)] * n)
    want = float32_reference(grads, n)
    comps = [tc.Compression.ef_sign() for _ in range(n)]
    for g, (out_want, qs_want, residuals_want) in zip(grads, want):
        outs, values = simulate(comps, [torch.from_numpy(x.copy()) for x in g])
        for out, q, q_want, c, e_want in zip(outs, values, qs_want, comps, residuals_want):
            np.testing.assert_array_equal(q.numpy(), q_want.astype(np.int8))
            np.testing.assert_array_equal(out.numpy(), out_want)
            np.testing.assert_array_equal(c.residuals["w"].numpy(), e_want)


def test_host_float32_takes_the_kernels_and_the_rest_the_primitives():
    kit = tc.EFSignCompressor.kit
    assert kit.ef_sign_encode({}, "w", torch.randn(10), 63) is not None
    assert kit.ef_sign_encode({}, "w", torch.randn(10, dtype=torch.float64), 63) is None
    assert kit.ef_sign_encode({}, "w", torch.randn(4, 6).t(), 63) is None  # strided
    # Both paths decode the same first step (the same residuals to start from).
    class Primitives(tc._TorchKit):
        def ef_sign_encode(self, *args):
            return None

    class ByPrimitives(tc.EFSignCompressor):
        kit = Primitives()

    g = [torch.randn(300) * 5, torch.randn(300)]
    native_out, native_q = simulate([tc.Compression.ef_sign() for _ in g], g)
    plain_out, plain_q = simulate([ByPrimitives() for _ in g], g)
    for a, b in zip(native_out + native_q, plain_out + plain_q):
        assert torch.equal(a, b)


def test_optimizers_get_the_result_in_their_gradient_and_others_keep_their_input():
    c = tc.Compression.ef_sign()
    grad = torch.randn(100)
    before = grad.clone()
    (out,), _ = simulate([c], [grad])
    assert torch.equal(grad, before) and out.data_ptr() != grad.data_ptr()
    with reducing_over(1), results_in_place():
        payloads, ctx = c.compress_payloads(grad, "w")
    out = c.decompress_payloads(payloads, ctx)
    assert out.data_ptr() == grad.data_ptr()


def test_a_non_finite_gradient_decodes_to_nan_on_every_rank():
    comps = [tc.Compression.ef_sign() for _ in range(2)]
    bad = torch.randn(40)
    bad[3] = float("nan")
    outs, values = simulate(comps, [bad, torch.randn(40)])
    assert values[0].abs().sum() == 0  # nothing expressible was sent
    assert all(torch.isnan(o).all() for o in outs)
    inf = torch.randn(40)
    inf[0] = float("inf")
    outs, _ = simulate([tc.Compression.ef_sign() for _ in range(2)], [inf, torch.randn(40)])
    assert all(torch.isnan(o).all() for o in outs)


def test_bad_arguments_are_clear_errors():
    g, e = torch.randn(8), torch.zeros(8)
    q = torch.empty(8, dtype=torch.int8)
    with pytest.raises(InvalidArgumentError, match="levels"):
        native.encode(g.data_ptr(), e.data_ptr(), q.data_ptr(), q.data_ptr(), 8, 0)
    with pytest.raises(InvalidArgumentError, match="NULL"):
        native.encode(0, e.data_ptr(), q.data_ptr(), q.data_ptr(), 8, 63)
    with pytest.raises(InvalidArgumentError, match="ranks"):
        native.decode(q.data_ptr(), q.data_ptr(), e.data_ptr(), g.data_ptr(), 8, 1.0, 1.0, 0)
    c = tc.Compression.ef_sign()
    c.load_state_dict({"errors": {"w": np.zeros(5, np.float32)}})
    with reducing_over(2), pytest.raises(InvalidArgumentError, match="residual kept for 'w'"):
        c.compress(torch.randn(8), "w")
