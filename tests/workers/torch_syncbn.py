"""SyncBatchNorm against torch.nn.BatchNorm on the concatenated global batch,
with uneven per-rank batches (rank r holds r + 1 samples; rank 0 only one)."""
import torch
import torch.nn as nn

import fuseopt.torch as hvd
import rank_harness as harness


def close(a, b, what, tol=1e-5):
    assert a.shape == b.shape, "%s: %s vs %s" % (what, tuple(a.shape), tuple(b.shape))
    err = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    assert err <= tol, "%s: max error %g" % (what, err)


def batch_sizes():
    # Rank 0 holds a single sample (alone it could not normalize at all).
    return [k + 1 for k in range(hvd.size())] if hvd.size() > 1 else [3]


def global_input(step, shape_tail):
    g = torch.Generator().manual_seed(77 + step)
    return torch.randn((sum(batch_sizes()),) + shape_tail, generator=g) * 3 + 1


def mine(t):
    r = hvd.rank()
    start = sum(batch_sizes()[:r])
    return t[start:start + batch_sizes()[r]]


def compare(bn_cls, shape_tail, dtype=torch.float32, tol=1e-5):
    c = shape_tail[0]
    torch.manual_seed(0)
    ref = bn_cls(c, momentum=0.3).to(dtype)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    sync = hvd.SyncBatchNorm.convert_sync_batchnorm(
        nn.Sequential(bn_cls(c, momentum=0.3).to(dtype)))[0]
    sync.load_state_dict(ref.state_dict())
    what = "%s%s %s" % (bn_cls.__name__, shape_tail, dtype)
    for step in range(3):
        x = global_input(step, shape_tail).to(dtype).requires_grad_()
        probe = torch.randn(x.shape, generator=torch.Generator().manual_seed(5 + step)).to(dtype)
        out_ref = ref(x)
        (out_ref * probe).sum().backward()  # sum loss: every rank's dy equals the reference's
        xm = mine(x.detach()).clone().requires_grad_()
        out = sync(xm)
        (out * mine(probe)).sum().backward()
        close(out.detach(), mine(out_ref.detach()), "%s forward step %d" % (what, step), tol)
        close(xm.grad, mine(x.grad), "%s input grad step %d" % (what, step), tol)
        for name in ("weight", "bias"):
            local = getattr(sync, name).grad
            total = hvd.allreduce(local, name="bn.%s.%s.%d" % (what, name, step), op=hvd.Sum)
            close(total, getattr(ref, name).grad, "%s %s grad step %d" % (what, name, step),
                  10 * tol)
        sync.zero_grad()
        ref.zero_grad()
        close(sync.running_mean, ref.running_mean, "%s running_mean" % what, tol)
        close(sync.running_var, ref.running_var, "%s running_var" % what, tol)
    assert int(sync.num_batches_tracked) == 3
    sync.eval()
    ref.eval()
    x = global_input(9, shape_tail).to(dtype)
    close(sync(mine(x)), mine(ref(x)), "%s eval" % what, tol)


def check_syncbn_1d_2d_3d_uneven_batches():
    compare(nn.BatchNorm1d, (5,))
    compare(nn.BatchNorm1d, (3, 4))
    compare(nn.BatchNorm2d, (3, 4, 2))
    compare(nn.BatchNorm3d, (2, 2, 2, 3))


def check_syncbn_in_float64_and_16_bit_floats():
    # float64 end to end; 16-bit inputs are normalized in float32 and come
    # back in their own dtype, within a few of its rounding steps (bfloat16
    # keeps 8 bits: 1/64 at the outputs' magnitude of about 4).
    compare(nn.BatchNorm2d, (3, 4, 2), torch.float64, 1e-13)
    compare(nn.BatchNorm2d, (3, 4, 2), torch.bfloat16, 0.07)
    compare(nn.BatchNorm2d, (3, 4, 2), torch.float16, 0.01)


def check_precise_bn():
    c = 4
    model = hvd.SyncBatchNorm(c)
    ref = nn.BatchNorm1d(c, momentum=None)
    batches = [global_input(20 + i, (c,)) for i in range(4)]
    seen = hvd.recompute_bn_stats(model, [mine(b) for b in batches], num_batches=3)
    assert seen == 3
    ref.train()
    with torch.no_grad():
        for b in batches[:3]:
            ref(b)
    close(model.running_mean, ref.running_mean, "precise bn mean")
    close(model.running_var, ref.running_var, "precise bn var")
    assert model.momentum == 0.1 and model.training


if __name__ == "__main__":
    torch.set_num_threads(1)
    harness.run([check_syncbn_1d_2d_3d_uneven_batches, check_syncbn_in_float64_and_16_bit_floats,
                 check_precise_bn])
