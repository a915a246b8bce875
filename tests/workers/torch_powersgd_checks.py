"""PowerSGD in DistributedOptimizer (run by torch_training.py's worker):
N ranks against an independent NumPy reference of the algorithm computed in
every rank from all ranks' gradients; accumulation; resuming from the
optimizer's state_dict and from a checkpoint continues exactly as an
uninterrupted run."""
import copy
import os
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

import fuseopt.torch as hvd
from powersgd_reference import numpy_powersgd
from torch_training import (B, assert_equal_across_ranks, close, global_batch, make_model,
                            my_slice)

RANK = 1
START = 1  # one plain step, then compressed


def per_rank_gradients(reference, x, y, n):
    grads = []
    for r in range(n):
        reference.zero_grad()
        F.cross_entropy(reference(x[r * B:(r + 1) * B]), y[r * B:(r + 1) * B]).backward()
        grads.append([p.grad.detach().double().numpy().copy() for p in reference.parameters()])
    return grads


def train_against_reference(steps, passes=1):
    n = hvd.size()
    model, reference = make_model(), make_model()
    compressor = hvd.Compression.powersgd(rank=RANK, start_iter=START)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   model.named_parameters(), compression=compressor,
                                   backward_passes_per_step=passes)
    names = opt._reducer.names
    states = [dict() for _ in names]
    compressed = []
    for step in range(steps):
        x, y = global_batch(900 + step, n)
        xs, ys = my_slice(x), my_slice(y)
        k = B // passes
        for part in range(passes):
            (F.cross_entropy(model(xs[part * k:(part + 1) * k]), ys[part * k:(part + 1) * k])
             / passes).backward()
        opt.step()
        opt.zero_grad()
        grads = per_rank_gradients(reference, x, y, n)
        with torch.no_grad():
            for i, p in enumerate(reference.parameters()):
                r = compressor.factor_rank(p.shape)
                if r == 0:
                    mean = np.mean([g[i] for g in grads], axis=0)
                else:
                    q0 = compressor.initial_q(names[i], int(np.prod(p.shape[1:])), r)
                    mean = numpy_powersgd([g[i] for g in grads], states[i], q0.astype(np.float64),
                                          START)
                    compressed.append(names[i])
                p -= 0.1 * torch.from_numpy(mean).float()
    opt.remove_hooks()
    return model, reference, compressed


def check_powersgd_matches_a_numpy_reference():
    model, reference, compressed = train_against_reference(steps=5)
    assert sorted(set(compressed)) == ["grad.0.weight", "grad.2.weight"], compressed
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        close(p.detach(), q.detach(), "PowerSGD: %s" % name, 1e-6)
    assert_equal_across_ranks(model, "powersgd")  # every rank decodes the same basis
    # with accumulation: the same mean gradient, summed over two micro-batches
    model, reference, _ = train_against_reference(steps=4, passes=2)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        close(p.detach(), q.detach(), "PowerSGD, 2 passes per step: %s" % name, 1e-6)


def powersgd_steps(model, opt, first, count):
    for step in range(first, first + count):
        x, y = global_batch(950 + step, hvd.size())
        F.cross_entropy(model(my_slice(x)), my_slice(y)).backward()
        opt.step()
        opt.zero_grad()


def powersgd_optimizer(model):
    return hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                    model.named_parameters(),
                                    compression=hvd.Compression.powersgd(rank=2, start_iter=1))


def check_powersgd_state_resumes_exactly():
    model = make_model()
    opt = powersgd_optimizer(model)
    powersgd_steps(model, opt, 0, 3)
    saved_model = {k: v.clone() for k, v in model.state_dict().items()}
    saved_opt = copy.deepcopy(opt.state_dict())  # torch hands out its live buffers
    state = saved_opt["fuseopt_compression"]
    assert state["steps"] == {"grad.0.weight": 3}, state["steps"]  # 3x16 at rank 2 goes plain
    assert torch.any(state["errors"]["grad.0.weight"] != 0)
    directory = hvd.broadcast_object(tempfile.mkdtemp() if hvd.rank() == 0 else None, 0,
                                     name="powersgd.dir")
    path = os.path.join(directory, "powersgd.pt")
    hvd.save_checkpoint(path, model, opt, step=3)
    powersgd_steps(model, opt, 3, 2)
    uninterrupted = [p.detach().clone() for p in model.parameters()]
    opt.remove_hooks()
    # from the optimizer's state_dict (as elastic's TorchState keeps it)
    resumed = make_model(seed=5)
    resumed.load_state_dict(saved_model)
    again = powersgd_optimizer(resumed)
    again.load_state_dict(saved_opt)
    powersgd_steps(resumed, again, 3, 2)
    again.remove_hooks()
    for p, q in zip(resumed.parameters(), uninterrupted):
        close(p.detach(), q, "resumed from state_dict", 0)
    # from a checkpoint: each rank's own error buffers come back
    restored = make_model(seed=6)
    fresh = powersgd_optimizer(restored)
    assert hvd.load_checkpoint(path, restored, fresh).step == 3
    powersgd_steps(restored, fresh, 3, 2)
    fresh.remove_hooks()
    for p, q in zip(restored.parameters(), uninterrupted):
        close(p.detach(), q, "resumed from a checkpoint", 0)
    hvd.barrier()
    if hvd.rank() == 0:
        os.remove(path)
        os.rmdir(directory)


CHECKS = [check_powersgd_matches_a_numpy_reference, check_powersgd_state_resumes_exactly]
