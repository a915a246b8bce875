"""PowerSGD (fuseopt/training/powersgd.py) through the torch and TensorFlow
kits, without ranks: n simulated ranks in one process, the collective sum of
each round done here by hand, against an independent NumPy reference."""
import numpy as np
import pytest
import torch

from fuseopt.base.errors import InvalidArgumentError, UnsupportedError
from fuseopt.training.compression import one_payload_each, reducing_over
from fuseopt.torch.compression import Compression


def tf_compression():
    from fuseopt.tensorflow.compression import Compression as TFCompression
    return TFCompression


BINDINGS = ["torch", "tensorflow"]


def make(binding, **kwargs):
    compression = Compression if binding == "torch" else tf_compression()
    return compression.powersgd(**kwargs)


def tensor(binding, array):
    if binding == "torch":
        return torch.from_numpy(np.array(array, np.float32))
    import tensorflow as tf
    return tf.constant(np.array(array, np.float32))


def numpy_of(value):
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def reduce_over_ranks(compressors, grads, name="w"):
    """Every round of one reduction on len(grads) ranks, summing by hand;
    returns each rank's result and how many rounds travelled."""
    n = len(grads)
    with reducing_over(n):
        sent = [c.compress_payloads(g, name) for c, g in zip(compressors, grads)]
    rounds = 1
    while True:
        summed = [sum(numpy_of(s[0][k]) for s in sent) for k in range(len(sent[0][0]))]
        as_kit = [[tensor_like(s[0][k], total) for k, total in enumerate(summed)] for s in sent]
        following = [c.next_round_payloads(p, ctx) for c, p, (_, ctx) in
                     zip(compressors, as_kit, sent)]
        if following[0] is None:
            assert all(f is None for f in following)
            return [numpy_of(c.decompress_payloads(p, ctx))
                    for c, p, (_, ctx) in zip(compressors, as_kit, sent)], rounds
        sent = following
        rounds += 1


def tensor_like(like, array):
    if isinstance(like, torch.Tensor):
        return torch.from_numpy(np.array(array, np.float32))
    import tensorflow as tf
    return tf.constant(np.array(array, np.float32))


def projected_mean(ms, q):
    """The reference: P^ P^T mean(M), P^ an orthonormal basis of sum(M_i q)
    (float64); basis-independent, so QR's signs do not matter."""
    p = sum(m @ q for m in ms)
    basis, _ = np.linalg.qr(p)
    return basis @ basis.T @ np.mean(ms, axis=0), basis


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_matrix_is_reduced_to_its_rank_r_projection(binding):
    rng = np.random.default_rng(1)
    ms = [rng.standard_normal((40, 30)) for _ in range(3)]
    cs = [make(binding, rank=2, start_iter=0, error_feedback=False) for _ in ms]
    outs, rounds = reduce_over_ranks(cs, [tensor(binding, m) for m in ms])
    q0 = cs[0].initial_q("w", 30, 2).astype(np.float64)
    expected, _ = projected_mean(ms, q0)
    assert rounds == 2
    for out in outs:
        np.testing.assert_allclose(out, expected, rtol=2e-4, atol=2e-4)
    # and it is a real approximation: rank 2 of a 30-column mean is not the mean
    assert np.abs(outs[0] - np.mean(ms, axis=0)).max() > 0.1


@pytest.mark.parametrize("binding", BINDINGS)
def test_full_rank_is_exact(binding):
    rng = np.random.default_rng(2)
    ms = [rng.standard_normal((64, 3)) for _ in range(2)]
    cs = [make(binding, rank=3, start_iter=0, min_compression_rate=0.01) for _ in ms]
    outs, _ = reduce_over_ranks(cs, [tensor(binding, m) for m in ms])
    np.testing.assert_allclose(outs[1], np.mean(ms, axis=0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("binding", BINDINGS)
def test_error_feedback_keeps_what_each_rank_did_not_send(binding):
    rng = np.random.default_rng(3)
    steps = [[rng.standard_normal((24, 20)) for _ in range(2)] for _ in range(3)]
    cs = [make(binding, rank=1, start_iter=0, warm_start=True) for _ in range(2)]
    errors = [np.zeros((24, 20)) for _ in range(2)]
    q = cs[0].initial_q("w", 20, 1).astype(np.float64)
    for grads in steps:
        outs, _ = reduce_over_ranks(cs, [tensor(binding, g) for g in grads])
        ms = [g + e for g, e in zip(grads, errors)]
        expected, basis = projected_mean(ms, q)
        np.testing.assert_allclose(outs[0], expected, rtol=1e-3, atol=1e-3)
        errors = [m - basis @ basis.T @ m for m in ms]  # what rank i did not send
        for c, e in zip(cs, errors):
            np.testing.assert_allclose(numpy_of(c.state_dict()["errors"]["w"]), e, rtol=1e-3,
                                       atol=1e-3)
        q = np.mean([m.T @ basis for m in ms], axis=0)  # warm start: the mean Q
        np.testing.assert_allclose(numpy_of(cs[1].state_dict()["qs"]["w"]) @ basis.T,
                                   q @ basis.T, rtol=1e-3, atol=1e-3)
    # nothing is lost: what arrived plus what is kept is everything that was sent in
    assert np.abs(sum(errors)).max() > 1e-2


@pytest.mark.parametrize("binding", BINDINGS)
def test_warm_start_continues_the_power_iteration(binding):
    """The same gradient every step: with warm start the subspace converges to
    the mean's top singular vectors (power iteration); without, each step
    draws a new Q and the error does not shrink the same way."""
    rng = np.random.default_rng(4)
    u, _ = np.linalg.qr(rng.standard_normal((30, 30)))
    v, _ = np.linalg.qr(rng.standard_normal((20, 20)))
    s = np.diag([10.0, 5.0, 1.0] + [0.1] * 17)
    mean = u[:, :20] @ s @ v.T
    best = u[:, :1] @ u[:, :1].T @ mean  # the best rank-1 approximation
    for warm, close in ((True, True), (False, False)):
        cs = [make(binding, rank=1, start_iter=0, error_feedback=False, warm_start=warm)
              for _ in range(2)]
        for _ in range(12):
            outs, _ = reduce_over_ranks(cs, [tensor(binding, mean), tensor(binding, mean)])
        assert (np.abs(outs[0] - best).max() < 1e-3) == close, warm


@pytest.mark.parametrize("binding", BINDINGS)
def test_first_reductions_vectors_and_small_matrices_are_plain(binding):
    rng = np.random.default_rng(5)
    cs = [make(binding, rank=2, start_iter=2) for _ in range(2)]
    big = [rng.standard_normal((50, 40)) for _ in range(2)]
    for step in range(3):
        outs, rounds = reduce_over_ranks(cs, [tensor(binding, m) for m in big])
        if step < 2:  # warming up: the plain mean, and no error kept
            np.testing.assert_allclose(outs[0], np.mean(big, axis=0), rtol=1e-5, atol=1e-5)
            assert not np.any(numpy_of(cs[0].state_dict()["errors"]["w"]))
        else:
            assert np.abs(outs[0] - np.mean(big, axis=0)).max() > 0.1
            assert rounds == 2
    for shape in ((7,), (4, 3), (3, 2, 2)):  # (4+3)*2*2 > 12: the factors would not shrink it
        arrays = [rng.standard_normal(shape) for _ in range(2)]
        outs, rounds = reduce_over_ranks(cs, [tensor(binding, a) for a in arrays], "small")
        assert rounds == 1
        np.testing.assert_allclose(outs[0], np.mean(arrays, axis=0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_zero_gradient_stays_finite(binding):
    cs = [make(binding, rank=2, start_iter=0) for _ in range(2)]
    outs, _ = reduce_over_ranks(cs, [tensor(binding, np.zeros((30, 30)))] * 2)
    assert np.all(outs[0] == 0)


@pytest.mark.parametrize("binding", BINDINGS)
def test_state_round_trips_and_a_restored_compressor_continues_identically(binding):
    rng = np.random.default_rng(6)
    grads = [[rng.standard_normal((16, 12, 2)) for _ in range(2)] for _ in range(4)]
    run = [make(binding, rank=2, start_iter=1) for _ in range(2)]
    for g in grads[:2]:
        reduce_over_ranks(run, [tensor(binding, x) for x in g])
    saved = [c.state_dict() for c in run]
    assert saved[0]["steps"] == {"w": 2} and set(saved[0]) == {"errors", "qs", "steps"}
    resumed = [make(binding, rank=2, start_iter=1) for _ in range(2)]
    for c, state in zip(resumed, saved):
        c.load_state_dict(state)
    for g in grads[2:]:
        a, _ = reduce_over_ranks(run, [tensor(binding, x) for x in g])
        b, _ = reduce_over_ranks(resumed, [tensor(binding, x) for x in g])
        np.testing.assert_array_equal(a[0], b[0])


def test_bad_arguments_and_one_round_collectives_are_refused():
    for kwargs in ({"rank": 0}, {"rank": 1.5}, {"start_iter": -1}, {"min_compression_rate": 0}):
        with pytest.raises(InvalidArgumentError):
            Compression.powersgd(**kwargs)
    c = Compression.powersgd(start_iter=0)
    with reducing_over(2), pytest.raises(InvalidArgumentError, match="needs a name"):
        c.compress_payloads(torch.ones(40, 40))
    with pytest.raises(UnsupportedError, match="2 rounds"):
        one_payload_each(c, [torch.ones(40, 40)], ["x"], 2)


def test_optimizers_get_the_result_in_their_gradient_and_others_keep_their_input():
    # Inside results_in_place (the optimizers' reducers) the decoded matrix
    # lands in the float32 gradient itself, with the values of a fresh result.
    from fuseopt.training.compression import results_in_place
    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=(12, 10)).astype(np.float32) for _ in range(2)]
    fresh = [make("torch", rank=2, start_iter=0) for _ in range(2)]
    want, _ = reduce_over_ranks(fresh, [torch.from_numpy(a.copy()) for a in arrays])
    grads = [torch.from_numpy(a.copy()) for a in arrays]
    comps = [make("torch", rank=2, start_iter=0) for _ in range(2)]
    with results_in_place():
        got, rounds = reduce_over_ranks(comps, grads)
    assert rounds == 2
    for g, w in zip(grads, want):
        np.testing.assert_array_equal(g.numpy(), w)  # written into the gradient
    np.testing.assert_array_equal(numpy_of(got[0]), want[0])
    # Outside it, the input is left as it was.
    inputs = [torch.from_numpy(a.copy()) for a in arrays]
    reduce_over_ranks([make("torch", rank=2, start_iter=0) for _ in range(2)], inputs)
    for t, a in zip(inputs, arrays):
        np.testing.assert_array_equal(t.numpy(), a)
