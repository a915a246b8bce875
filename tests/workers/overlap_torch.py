"""The overlap meter with the PyTorch optimizer: communication started from
gradient hooks and finished under the rest of backward counts as hidden;
communication started at step() does not."""
import time

import torch
import torch.nn as nn

import fuseopt.torch as hvd
import rank_harness as harness


class SlowBackward(torch.autograd.Function):
    """Identity whose backward takes 150 ms: compute that the allreduce of the
    later layer's gradient (ready before it) can hide under."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        time.sleep(0.15)
        return g


def run(bucket_cap_mb, steps=4):
    torch.manual_seed(0)
    first, last = nn.Linear(16, 512), nn.Linear(512, 4096)  # last: 8 MB of gradient
    opt = hvd.DistributedOptimizer(torch.optim.SGD(list(first.parameters()) +
                                                   list(last.parameters()), lr=0.01),
                                   named_parameters=[("first." + n, p) for n, p in
                                                     first.named_parameters()] +
                                   [("last." + n, p) for n, p in last.named_parameters()],
                                   bucket_cap_mb=bucket_cap_mb)
    lines = []
    for step in range(steps + 1):
        if step == 1:  # the first step negotiates in full and sets up buffers
            hvd.log_metrics(log_fn=None)  # start a fresh window
        opt.zero_grad()
        last(SlowBackward.apply(first(torch.randn(8, 16)))).square().mean().backward()
        opt.step()
    report = hvd.log_metrics(epoch=0, log_fn=lines.append)
    opt.remove_hooks()
    assert report["gradient_waits"] >= steps, report
    assert report["communication_s"] > 0 and report["bytes"] > 0, report
    assert (len(lines) == 1) == (hvd.rank() == 0), lines
    return report


def check_hidden_under_backward():
    overlapped = run(bucket_cap_mb=0)
    # Both ranks must agree on the verdict, or one would report a failure alone.
    hooked = hvd.allgather_object(overlapped["overlap_efficiency"])
    # Measured here: hooked 0.8-0.9 in quiet runs, 0.4 in a slow spell (the
    # small last gradients, reduced inside step(), took longer).
    assert min(hooked) > 0.25, hooked
    # Submitted at step(), nothing can hide: 0.0, except that a rank
    # descheduled between submitting and waiting (a CI machine's slow spell
    # gave 0.22 once) counts those milliseconds as hidden. Noise only adds,
    # so the best of three runs must show it.
    tries = []
    for _ in range(3):
        tries.append(hvd.allgather_object(run(bucket_cap_mb="inf")["overlap_efficiency"]))
        if max(tries[-1]) < 0.05:
            return
    raise AssertionError("deferred submission hid communication: %s (hooked %s)"
                         % (tries, hooked))


if __name__ == "__main__":
    harness.run([check_hidden_under_backward])
