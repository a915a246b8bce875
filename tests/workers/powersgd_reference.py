"""PowerSGD written independently in NumPy, for the torch and TensorFlow
workers' checks against fuseopt's (fuseopt/training/powersgd.py)."""
import numpy as np


def numpy_powersgd(grads_per_rank, state, initial_q, start):
    """The mean gradient as PowerSGD delivers it, from every rank's gradient
    of one parameter (float64): round 1 sums M_i Q, the basis P^ of the sum,
    round 2 averages M_i^T P^; each rank keeps M_i - P^ P^T M_i."""
    step = state.setdefault("step", 0)
    state["step"] += 1
    shape = grads_per_rank[0].shape
    ms = [g.reshape(shape[0], -1) for g in grads_per_rank]
    if step < start:
        return np.mean(grads_per_rank, axis=0)
    errors = state.setdefault("errors", [np.zeros_like(m) for m in ms])
    ms = [m + e for m, e in zip(ms, errors)]
    q = state.get("q", initial_q)
    basis, _ = np.linalg.qr(sum(m @ q for m in ms))
    state["errors"] = [m - basis @ (basis.T @ m) for m in ms]
    state["q"] = np.mean([m.T @ basis for m in ms], axis=0)
    return (basis @ state["q"].T).reshape(shape)
