"""The native batch-norm kernel (native/src/kernels, reached through
fuseopt.api.batch_norm) against a float64 reference written with torch
operations, in one process without ranks: every layout the bindings hand it
(NCHW, channels_last, N x C, N x C x L, NHWC, strided views), float32, float64
and 16-bit floats, running statistics, and backward."""
import numpy as np
import pytest
import torch

from fuseopt.api.batch_norm import FLOAT_CODES, BatchNormKernel, channel_view
from fuseopt.base.errors import InvalidArgumentError

EPS = 1e-5
MOMENTUM = 0.3
# How far from the float64 reference each dtype may land (outputs of magnitude
# about 4): a few rounding steps of the dtype.
TOLERANCE = {torch.float64: 1e-10, torch.float32: 2e-5, torch.bfloat16: 0.07,
             torch.float16: 0.01}


def layouts():
    """(name, tensor maker(dtype), channel axis). Sizes leave vector tails."""
    g = torch.Generator().manual_seed(3)

    def rnd(*shape):
        return torch.randn(shape, generator=g, dtype=torch.float64) * 3 + 1

    return [
        ("NCHW", lambda: rnd(3, 5, 4, 6), 1),
        ("NCHW channels_last", lambda: rnd(3, 19, 4, 6).contiguous(memory_format=torch.channels_last), 1),
        ("N x C", lambda: rnd(7, 19), 1),
        ("N x C x L", lambda: rnd(3, 5, 37), 1),
        ("NHWC (Keras)", lambda: rnd(3, 4, 6, 5), 3),
        ("inner stride 2", lambda: rnd(3, 5, 4, 12)[..., ::2], 1),
        ("channel stride 2", lambda: rnd(3, 4, 6, 10)[..., ::2], 3),
    ]


def reference(x, w, b, rm, rv, dy, axis):
    """Training-mode batch norm and its gradients in float64."""
    x = x.detach().double().requires_grad_()
    w = w.double().requires_grad_()
    b = b.double().requires_grad_()
    dims = [d for d in range(x.dim()) if d != axis]
    shape = [1] * x.dim()
    shape[axis] = -1
    n = x.numel() // x.shape[axis]
    mean = x.mean(dims)
    var = x.var(dims, unbiased=False)
    y = (x - mean.reshape(shape)) / (var.reshape(shape) + EPS).sqrt() * w.reshape(shape) + \
        b.reshape(shape)
    y.backward(dy.double())
    new_rm = (1 - MOMENTUM) * rm.double() + MOMENTUM * mean.detach()
    new_rv = (1 - MOMENTUM) * rv.double() + MOMENTUM * var.detach() * n / (n - 1)
    return y.detach(), x.grad, w.grad, b.grad, new_rm, new_rv


def run_kernel(x, w, b, rm, rv, dy, axis):
    """The kernel's forward and backward on x in its own layout and dtype."""
    kernel = BatchNormKernel()
    code = FLOAT_CODES[str(x.dtype).split(".")[1]]
    pcode = FLOAT_CODES[str(w.dtype).split(".")[1]]
    view = channel_view(x.shape, x.stride(), axis)
    assert view is not None
    y = torch.empty_like(x)
    assert y.stride() == x.stride() or not x.is_contiguous()
    if y.stride() != x.stride():  # a strided x: give y the same strides
        y = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype)
    saved = kernel.forward(x.data_ptr(), y.data_ptr(), code, view, EPS, w.data_ptr(),
                           b.data_ptr(), pcode, rm.data_ptr(), rv.data_ptr(), pcode, MOMENTUM)
    dy = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype).copy_(dy)
    dx = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype)
    dw, db = torch.empty_like(w), torch.empty_like(w)
    kernel.backward(x.data_ptr(), dy.data_ptr(), dx.data_ptr(), code, view, saved,
                    w.data_ptr(), pcode, dw.data_ptr(), db.data_ptr())
    return y, dx, dw, db, saved


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16],
                         ids=str)
@pytest.mark.parametrize("layout", layouts(), ids=lambda l: l[0])
def test_kernel_matches_float64_reference(layout, dtype):
    _, make, axis = layout
    x64 = make()
    c = x64.shape[axis]
    g = torch.Generator().manual_seed(5)
    w = torch.rand(c, generator=g, dtype=torch.float64) + 0.5
    b = torch.rand(c, generator=g, dtype=torch.float64) - 0.5
    rm, rv = torch.rand(c, dtype=torch.float64), torch.rand(c, dtype=torch.float64) + 0.5
    dy = torch.randn(x64.shape, generator=g, dtype=torch.float64)
    # The kernel reads x in dtype; the reference gets the same (rounded) values.
    x = x64.to(dtype)
    if not x64.is_contiguous() and x64.dim() == 4:
        x = torch.empty_strided(x64.shape, x64.stride(), dtype=dtype).copy_(x64)
    params = torch.float64 if dtype == torch.float64 else torch.float32
    wk, bk, rmk, rvk = (t.to(params).clone() for t in (w, b, rm, rv))
    ref_y, ref_dx, ref_dw, ref_db, ref_rm, ref_rv = reference(
        x.double(), wk, bk, rmk.clone(), rvk.clone(), dy.to(dtype).double(), axis)
    y, dx, dw, db, saved = run_kernel(x, wk, bk, rmk, rvk, dy.to(dtype), axis)
    tol = TOLERANCE[dtype]
    for what, got, want, scale in (("y", y, ref_y, 1), ("dx", dx, ref_dx, 1),
                                   ("grad weight", dw, ref_dw, 10), ("grad bias", db, ref_db, 10),
                                   ("running mean", rmk, ref_rm, 1),
                                   ("running var", rvk, ref_rv, 1)):
        err = (got.double() - want).abs().max().item()
        assert err <= tol * scale * (1 if dtype in (torch.float32, torch.float64) else 4), \
            "%s: max error %g" % (what, err)
    n = x.numel() // c
    assert saved[0][2 * c] == n
    dims = [d for d in range(x.dim()) if d != axis]
    assert np.allclose(saved[0][:c], x.double().mean(dims).numpy(), rtol=1e-12, atol=1e-12)


def test_float32_sums_are_float64():
    # sum of squares of 1e4 + small: float32 accumulation loses the variance.
    x = (torch.full((4096, 3), 1e4, dtype=torch.float32) +
         torch.arange(4096, dtype=torch.float32).reshape(-1, 1) % 2)
    w, b = torch.ones(3), torch.zeros(3)
    y, *_ = run_kernel(x, w, b, torch.zeros(3), torch.ones(3), torch.ones_like(x), 1)
    assert torch.allclose(y[:2], torch.tensor([[-1.0] * 3, [1.0] * 3]), atol=1e-3), y[:2]


def test_empty_batch_is_an_error_not_nan():
    x = torch.zeros((0, 4, 3, 3))
    kernel = BatchNormKernel()
    view = channel_view(x.shape, x.stride(), 1)
    with pytest.raises(InvalidArgumentError, match="empty batch"):
        kernel.forward(x.data_ptr(), x.data_ptr(), FLOAT_CODES["float32"], view, EPS)


def test_bad_views_are_refused():
    x = torch.zeros((2, 4, 3))
    kernel = BatchNormKernel()
    view = channel_view(x.shape, x.stride(), 1)
    with pytest.raises(InvalidArgumentError, match="dtype must be"):
        kernel.forward(x.data_ptr(), x.data_ptr(), FLOAT_CODES["int32"] if "int32" in FLOAT_CODES
                       else 2, view, EPS)
    with pytest.raises(InvalidArgumentError, match="null data"):
        kernel.forward(0, x.data_ptr(), FLOAT_CODES["float32"], view, EPS)


@pytest.mark.parametrize("shape,strides,axis,expected", [
    ((3, 5, 4, 6), (120, 24, 6, 1), 1, (3, 5, 24, 120, 24, 1)),
    ((3, 5, 4, 6), (120, 1, 30, 5), 1, (3, 5, 24, 120, 1, 5)),      # channels_last
    ((3, 4, 6, 5), (120, 30, 5, 1), 3, (72, 5, 1, 5, 1, 1)),        # NHWC
    ((3, 5, 4, 6), (120, 24, 1, 4), 1, None),                        # H, W swapped
    ((1, 5, 1, 6), (999, 6, 777, 1), 1, (1, 5, 6, 1, 6, 1)),         # size-1 dims
])
def test_channel_view(shape, strides, axis, expected):
    assert channel_view(shape, strides, axis) == expected


def local_sync_batch_norm(*args, **kwargs):
    """fuseopt.torch.SyncBatchNorm on its synchronized path in one process,
    its sums this process's own (the kernel without a reduction)."""
    import fuseopt.torch as hvd

    class LocalSyncBatchNorm(hvd.SyncBatchNorm):
        _ranks = staticmethod(lambda: 2)

        def _host_kernel(self, channels):
            return BatchNormKernel()

    return LocalSyncBatchNorm(*args, **kwargs)


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=str)
def test_torch_layer_on_the_kernel_matches_batch_norm(momentum, memory_format):
    # fuseopt.torch.SyncBatchNorm's synchronized path in one process, its sums
    # this process's own: torch's BatchNorm2d over three steps, running
    # statistics (momentum=None: the cumulative average) and eval included.
    torch.manual_seed(0)
    ref = torch.nn.BatchNorm2d(6, momentum=momentum)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    layer = local_sync_batch_norm(6, momentum=momentum)
    layer.load_state_dict(ref.state_dict())
    for step in range(3):
        x = (torch.randn(4, 6, 5, 3) * 2 + 1).contiguous(memory_format=memory_format)
        dy = torch.randn(4, 6, 5, 3)
        xr, xl = x.clone().requires_grad_(), x.clone().requires_grad_()
        want = ref(xr)
        want.backward(dy)
        out = layer(xl)
        assert out.is_contiguous(memory_format=memory_format)
        out.backward(dy)
        assert torch.allclose(out, want, atol=1e-5), step
        assert torch.allclose(xl.grad, xr.grad, atol=1e-5), step
        assert torch.allclose(layer.weight.grad, ref.weight.grad, atol=1e-4), step
        assert torch.allclose(layer.bias.grad, ref.bias.grad, atol=1e-4), step
        assert torch.allclose(layer.running_mean, ref.running_mean, atol=1e-6), step
        assert torch.allclose(layer.running_var, ref.running_var, atol=1e-5), step
    assert int(layer.num_batches_tracked) == 3
    layer.eval()
    ref.eval()
    x = torch.randn(2, 6, 5, 3)
    assert torch.allclose(layer(x), ref(x), atol=1e-6)


def test_torch_layer_direct_entry_gives_function_apply_bits(monkeypatch):
    # The layer enters its autograd function through torch's C++ entry
    # (sync_batch_norm._direct_apply, skipping Function.apply's Python
    # prologue); Function.apply itself must give the same bits.
    import fuseopt.torch.sync_batch_norm as sbn
    # On the pinned torch the direct entry exists: were it lost, the layer
    # would stay correct but slower, unnoticed.
    assert sbn._host_apply is not None

    g = torch.Generator().manual_seed(5)
    x = (torch.randn(3, 6, 5, 4, generator=g) * 2 + 1).contiguous(memory_format=torch.channels_last)
    dy = torch.randn(3, 6, 5, 4, generator=g)

    def steps(layer):
        out = []
        for _ in range(3):
            xr = x.clone().requires_grad_()
            y = layer(xr)
            y.backward(dy)
            out += [y.detach(), xr.grad, layer.weight.grad.clone(), layer.bias.grad.clone(),
                    layer.running_mean.clone(), layer.running_var.clone()]
            layer.zero_grad()
        return out

    direct = steps(local_sync_batch_norm(6))
    monkeypatch.setattr(sbn, "_host_apply", None)
    applied = steps(local_sync_batch_norm(6))
    assert all(torch.equal(a, b) for a, b in zip(direct, applied))


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=str)
def test_threads_split_channels_without_changing_a_bit(memory_format):
    # Large enough to be split (2^16 elements and more); every channel's sum
    # keeps its order, so 1, 2 and 3 threads give the same bits.
    g = torch.Generator().manual_seed(11)
    x = (torch.randn(4, 21, 32, 32, generator=g) * 3 + 1).contiguous(memory_format=memory_format)
    dy = torch.randn(x.shape, generator=g).contiguous(memory_format=memory_format)
    w, b = torch.rand(21, generator=g) + 0.5, torch.rand(21, generator=g)
    view = channel_view(x.shape, x.stride(), 1)
    code = FLOAT_CODES["float32"]
    outs = []
    for threads in (1, 2, 3):
        kernel = BatchNormKernel()
        y, dx = torch.empty_like(x), torch.empty_like(x)
        dw, db = torch.empty_like(w), torch.empty_like(w)
        saved = kernel.forward(x.data_ptr(), y.data_ptr(), code, view, EPS, w.data_ptr(),
                               b.data_ptr(), code, threads=threads)
        kernel.backward(x.data_ptr(), dy.data_ptr(), dx.data_ptr(), code, view, saved,
                        w.data_ptr(), code, dw.data_ptr(), db.data_ptr(), threads=threads)
        outs.append((y, dx, dw, db, torch.from_numpy(saved[0].copy())))
    ref_y, ref_dx, ref_dw, ref_db, *_ = reference(x.double(), w, b, torch.zeros(21),
                                                  torch.ones(21), dy.double(), 1)
    assert (outs[0][0].double() - ref_y).abs().max() < 2e-5
    assert (outs[0][1].double() - ref_dx).abs().max() < 2e-5
    for other in outs[1:]:
        for a, b_ in zip(outs[0], other):
            assert torch.equal(a, b_)
