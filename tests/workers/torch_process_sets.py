"""fuseopt.torch with process sets (tests/test_process_sets.py): collectives
and their gradients among a set's members, and two disjoint sets training two
different models at once, checked against a single-process computation."""
import torch

import fuseopt.torch as hvd
import rank_harness as harness

R = S = 0


def close(a, b, what, tol=1e-5):
    assert a.shape == b.shape, "%s: shape %s vs %s" % (what, tuple(a.shape), tuple(b.shape))
    assert torch.allclose(a.double(), b.double(), atol=tol, rtol=tol), "%s:\n%s\n%s" % (what, a, b)


def data(r, shape=(4, 3)):
    return torch.randn(shape, generator=torch.Generator().manual_seed(100 + r))


def sets():
    evens = hvd.ProcessSet([r for r in range(S) if r % 2 == 0])
    odds = hvd.ProcessSet([r for r in range(S) if r % 2 == 1])
    hvd.add_process_set(evens)
    hvd.add_process_set(odds)
    return (evens, odds) if R % 2 == 0 else (odds, evens)


def remove(mine, other):
    """Every rank removes the same set first (else MismatchError everywhere)."""
    for ps in sorted((mine, other), key=lambda ps: ps.ranks):
        assert hvd.remove_process_set(ps)


def check_collectives_and_gradients():
    mine, other = sets()
    members, n = mine.ranks, mine.size()
    total = sum(data(r) for r in members)
    close(hvd.allreduce(data(R), name="x", op=hvd.Sum, process_set=mine), total, "sum")
    close(hvd.allreduce(data(R), name="x", process_set=mine), total / n, "average")
    g = hvd.grouped_allreduce([data(R), 2 * data(R)], name="g", op=hvd.Sum, process_set=mine)
    close(g[1], 2 * total, "grouped")
    rows = torch.full((R + 1, 2), float(R))
    close(hvd.allgather(rows, name="ag", process_set=mine),
          torch.cat([torch.full((r + 1, 2), float(r)) for r in members]), "allgather")
    root = members[-1]
    close(hvd.broadcast(data(R), root, name="b", process_set=mine), data(root), "broadcast")
    sent = torch.arange(2.0 * n) + 10 * R
    got = hvd.alltoall(sent, name="a2a", process_set=mine)
    k = mine.rank()
    close(got, torch.cat([torch.arange(2.0 * k, 2.0 * k + 2) + 10 * r for r in members]),
          "alltoall")
    rs = hvd.reducescatter(torch.ones(3 * n, 2), name="rs", op=hvd.Sum, process_set=mine)
    close(rs, torch.full((3, 2), float(n)), "reducescatter")
    # Gradients stay in the set: an averaged allreduce's is the set's average.
    w = data(R).requires_grad_()
    (hvd.allreduce(w, name="grad.ar", process_set=mine) * (R + 1)).sum().backward()
    close(w.grad, torch.full_like(w, sum(r + 1 for r in members) / n), "allreduce grad")
    w = torch.ones(R + 1, 2, requires_grad=True)
    (hvd.allgather(w, name="grad.ag", process_set=mine) * 2).sum().backward()
    close(w.grad, torch.full_like(w, 2.0), "allgather grad")
    # A compressor that sums (ef_sign) averages over the set, not over size().
    plus_one = sum(r + 1 for r in members) / n
    ef = hvd.allreduce(torch.ones(3) * (R + 1), name="ef",
                       compression=hvd.Compression.ef_sign(), process_set=mine)
    close(ef, torch.full((3,), plus_one), "ef_sign allreduce in the set")
    p = torch.nn.Parameter(torch.zeros(3))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p], lr=1.0), named_parameters=[("ef.p", p)],
                                   compression=hvd.Compression.ef_sign(), process_set=mine)
    (p * (R + 1)).sum().backward()
    opt.step()
    close(p.detach(), torch.full((3,), -plus_one), "ef_sign DistributedOptimizer in the set")
    # PowerSGD's two rounds stay in the set too; at full rank it is exact.
    full_rank = dict(rank=2, start_iter=0, min_compression_rate=0.01)
    mine_m = torch.arange(128.0).reshape(64, 2) * (R + 1)
    mean_m = torch.arange(128.0).reshape(64, 2) * plus_one
    got = hvd.allreduce(mine_m, name="psgd", compression=hvd.Compression.powersgd(**full_rank),
                        process_set=mine)
    close(got, mean_m, "powersgd allreduce in the set", 1e-3)  # float32 of values to 254
    p = torch.nn.Parameter(torch.zeros(64, 2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p], lr=1.0), named_parameters=[("psgd.p", p)],
                                   compression=hvd.Compression.powersgd(**full_rank),
                                   process_set=mine)
    (p * mine_m).sum().backward()
    opt.step()
    close(p.detach(), -mean_m, "powersgd DistributedOptimizer in the set", 1e-3)
    # A compressor that sums and divides by reduction_size() sees the set's
    # size in grouped_allreduce and reducescatter too (reducescatter takes
    # the caller's op, not the compressor's reduce_op: Sum is passed).
    from fuseopt.training.compression import reduction_size
    from fuseopt.torch.compression import Compressor

    class SumThenDivide(Compressor):
        reduce_op = hvd.Sum

        def compress(self, tensor, name=None):
            return [tensor], reduction_size()

        def decompress(self, payloads, ctx):
            return payloads[0] / ctx

    g = hvd.grouped_allreduce([torch.ones(2) * (R + 1)], name="sd", compression=SumThenDivide(),
                              process_set=mine)
    close(g[0], torch.full((2,), plus_one), "summing compressor in grouped_allreduce")
    rs = hvd.reducescatter(torch.ones(2 * n, 2) * (R + 1), name="sd.rs", op=hvd.Sum,
                           compression=SumThenDivide(), process_set=mine)
    close(rs, torch.full((2, 2), plus_one), "summing compressor in reducescatter")
    objs = hvd.allgather_object({"rank": R}, process_set=mine)
    assert objs == [{"rank": r} for r in members], objs
    assert hvd.broadcast_object(R, root_rank=root, process_set=mine) == root
    hvd.barrier(process_set=mine)
    harness.expect_error(hvd.InvalidArgumentError if hasattr(hvd, "InvalidArgumentError")
                         else ValueError,
                         lambda: hvd.allreduce(data(R), process_set=object()), "ProcessSet")
    harness.expect_error(ValueError, lambda: hvd.allreduce(data(R), name="nm",
                                                           process_set=other),
                         "not a member")
    remove(mine, other)


def model_for(set_index):
    torch.manual_seed(set_index)  # the two sets train different models
    width = 3 + set_index
    return torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Tanh(),
                               torch.nn.Linear(width, 1))


def batch(r, step):
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)


def reference(set_index, members, steps, lr):
    """One process: every step, the members' gradients averaged, then SGD."""
    model = model_for(set_index)
    for step in range(steps):
        grads = []
        for r in members:
            model.zero_grad()
            x, y = batch(r, step)
            torch.nn.functional.mse_loss(model(x), y).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                p -= lr * sum(g[i] for g in grads) / len(members)
    return model


def check_two_sets_train_two_models():
    mine, other = sets()
    set_index = R % 2
    model = model_for(set_index)
    if mine.rank() != 0:  # different starts, made equal by the broadcast
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    lr, steps = 0.1, 5
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                   named_parameters=model.named_parameters(), process_set=mine)
    hvd.broadcast_parameters(model.state_dict(), root_rank=mine.ranks[0], process_set=mine)
    hvd.broadcast_optimizer_state(opt, root_rank=mine.ranks[0], process_set=mine)
    for step in range(steps):
        opt.zero_grad()
        x, y = batch(R, step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    want = reference(set_index, mine.ranks, steps, lr)
    for (name, p), q in zip(model.named_parameters(), want.parameters()):
        close(p.detach(), q.detach(), "set %d parameter %s" % (set_index, name), tol=2e-7)
    # Within a set the weights agree; across sets the models differ in shape.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    same = hvd.allgather(flat[None], name="weights", process_set=mine)
    assert all(torch.equal(same[0], row) for row in same), "weights differ within the set"
    remove(mine, other)


def check_outside_the_set_the_optimizer_is_local():
    """As Horovod: a rank outside the optimizer's set steps on its own."""
    first = hvd.add_process_set([0])
    model = torch.nn.Linear(2, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters(), process_set=first)
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.ones(3, 2) * (R + 1)).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    opt.step()
    for p, b, g in zip(model.parameters(), before, grads):
        close(p.detach(), b - 0.5 * g, "local step")
    hvd.remove_process_set(first)


if __name__ == "__main__":
    hvd.init()
    R, S = hvd.rank(), hvd.size()
    hvd.shutdown()
    harness.run([check_collectives_and_gradients, check_two_sets_train_two_models,
                 check_outside_the_set_the_optimizer_is_local])
