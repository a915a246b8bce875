"""Torch device tensors through the real device backend: ``torch_device.py
cuda`` (NCCL) or ``torch_device.py npu`` (torch_npu, HCCL). Needs one device
per rank; tests/test_devices.py skips it otherwise. Exact small-integer checks."""
import sys

import torch

import fuseopt.torch as hvd
import rank_harness as harness

KIND = sys.argv[1]
if KIND == "npu":
    import torch_npu  # noqa: F401  (registers the "npu" device)


def device():
    return torch.device(KIND, hvd.local_rank() % getattr(torch, KIND).device_count())


def check_allreduce_average_and_sum():
    n, r = hvd.size(), hvd.rank()
    x = torch.full((1000,), float(r + 1), device=device())
    y = x * 2  # a kernel on the current stream that the reduction must wait for
    out = hvd.allreduce(y, name="gpu.avg")
    assert out.device == y.device
    assert torch.equal(out.cpu(), torch.full((1000,), float(n + 1)))  # mean of 2(r+1)
    s = hvd.allreduce(torch.ones(7, dtype=torch.int32, device=device()), name="gpu.sum",
                      op=hvd.Sum)
    assert torch.equal(s.cpu(), torch.full((7,), n, dtype=torch.int32))


def check_broadcast_allgather_reducescatter():
    r, n = hvd.rank(), hvd.size()
    b = hvd.broadcast(torch.full((5,), float(r), device=device()), root_rank=0, name="gpu.b")
    assert torch.equal(b.cpu(), torch.zeros(5))
    if KIND == "cuda":
        g = hvd.allgather(torch.full((r + 1, 2), float(r), device=device()), name="gpu.g")
        assert g.shape == (n * (n + 1) // 2, 2) and g.device.type == "cuda"
    else:
        # Runtime-allocated NPU results cannot be handed to torch yet (no array
        # interface for NPU memory): a clear error, on every rank alike.
        harness.expect_error(hvd.UnsupportedError,
                             lambda: hvd.allgather(torch.ones((r + 1, 2), device=device()),
                                                   name="gpu.g"), "npu")
    rs = hvd.reducescatter(torch.ones(2 * n, device=device()), name="gpu.rs", op=hvd.Sum)
    assert torch.equal(rs.cpu(), torch.full((2,), float(n)))


def check_optimizer_step():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).to(device())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    loss = model(torch.full((3, 4), float(hvd.rank()), device=device())).sum()
    loss.backward()
    opt.step()
    # NPU allgather results cannot reach torch yet: gather the weights on the host.
    weights = model.weight.detach().reshape(1, -1)
    w = hvd.allgather(weights if KIND == "cuda" else weights.cpu(), name="gpu.w")
    assert torch.equal(w[0], w[-1]), "ranks disagree after a step"


if __name__ == "__main__":
    harness.run([check_allreduce_average_and_sum, check_broadcast_allgather_reducescatter,
                 check_optimizer_step])
