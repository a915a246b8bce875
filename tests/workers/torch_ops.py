"""fuseopt.torch collectives: values, autograd, in-place/async forms, errors."""
import torch

import fuseopt.torch as hvd
import rank_harness as harness


def close(a, b, what, tol=1e-6):
    assert a.shape == b.shape, "%s: shape %s vs %s" % (what, tuple(a.shape), tuple(b.shape))
    assert torch.allclose(a.double(), b.double(), atol=tol, rtol=tol), "%s:\n%s\n%s" % (what, a, b)


def rank_tensor(r, shape=(4, 3), dtype=torch.float32):
    g = torch.Generator().manual_seed(1000 + r)
    return torch.randn(shape, generator=g).to(dtype)


def check_allreduce_forms_and_autograd():
    r, n = hvd.rank(), hvd.size()
    xs = [rank_tensor(k) for k in range(n)]
    total = sum(xs)
    close(hvd.allreduce(xs[r], name="a", op=hvd.Sum), total, "sum")
    close(hvd.allreduce(xs[r], name="a"), total / n, "average default")
    close(hvd.allreduce(xs[r], average=False, name="a"), total, "average=False")
    y = xs[r].clone()
    hvd.allreduce_(y, name="a_", op=hvd.Sum)
    close(y, total, "in place")
    h = hvd.allreduce_async(xs[r], name="a_async", op=hvd.Max)
    close(hvd.synchronize(h), torch.stack(xs).max(0).values, "async max")
    assert hvd.poll(h)
    noncontig = torch.arange(24.0).reshape(4, 6)[:, ::2]
    close(hvd.allreduce(noncontig, name="nc", op=hvd.Sum), noncontig * n, "non-contiguous")
    outs = hvd.grouped_allreduce([xs[r], 2 * xs[r]], name="grp", op=hvd.Sum)
    close(outs[1], 2 * total, "grouped")
    for dtype in (torch.float16, torch.bfloat16, torch.int32, torch.float64, torch.uint8):
        v = torch.full((5,), r + 1).to(dtype)
        close(hvd.allreduce(v, name="dt.%s" % dtype, op=hvd.Sum),
              torch.full((5,), n * (n + 1) / 2).to(dtype), "dtype %s" % dtype)
    # Gradient of an averaged allreduce is the averaged gradient.
    w = xs[r].clone().requires_grad_()
    (hvd.allreduce(w, name="ag.fwd") * (r + 1)).sum().backward()
    # d/dw_r of sum_k L_k, L_k = (k+1) * sum(mean_j w_j): sum_k (k+1) / n
    close(w.grad, torch.full_like(w, sum(range(1, n + 1)) / n), "allreduce grad")


def check_allgather_broadcast_autograd():
    r, n = hvd.rank(), hvd.size()
    x = torch.full((r + 1, 2), float(r), requires_grad=True)
    g = hvd.allgather(x, name="gather")
    expected = torch.cat([torch.full((k + 1, 2), float(k)) for k in range(n)])
    close(g, expected, "allgather")
    (g * torch.arange(len(g)).unsqueeze(1)).sum().backward()
    offset = sum(k + 1 for k in range(r))
    rows = torch.arange(offset, offset + r + 1, dtype=torch.float32).unsqueeze(1).expand(-1, 2)
    # Horovod's definition: every rank's use of my rows, averaged over ranks.
    close(x.grad, rows, "allgather grad")
    root = n - 1
    b = torch.full((3,), float(r), requires_grad=True)
    out = hvd.broadcast(b, root, name="bcast")
    close(out, torch.full((3,), float(root)), "broadcast")
    (out * (r + 1)).sum().backward()
    expected_grad = sum(range(1, n + 1)) / n if r == root else 0.0  # averaged, as Horovod
    close(b.grad, torch.full((3,), expected_grad), "broadcast grad")
    c = torch.full((2, 2), float(r))
    hvd.broadcast_(c, 0, name="bcast_")
    close(c, torch.zeros(2, 2), "broadcast_")


def check_alltoall_reducescatter_objects():
    r, n = hvd.rank(), hvd.size()
    data = torch.arange(n * 2, dtype=torch.float32) + 100 * r
    out = hvd.alltoall(data, name="a2a")  # Horovod: no splits given, a tensor back
    assert torch.is_tensor(out), type(out)
    same, splits = hvd.alltoall(data, splits=[2] * n, name="a2a.s")
    close(same, out, "alltoall with splits")
    expected = torch.cat([torch.arange(2 * r, 2 * r + 2, dtype=torch.float32) + 100 * k
                          for k in range(n)])
    close(out, expected, "alltoall")
    assert splits.tolist() == [2] * n
    rs = hvd.reducescatter(torch.ones(2 * n, 3) * (r + 1), name="rs", op=hvd.Sum)
    close(rs, torch.full((2, 3), n * (n + 1) / 2), "reducescatter")
    # Results of one name are recycled once dropped: a kept one stays intact.
    for _ in range(3):
        again = hvd.reducescatter(torch.ones(2 * n, 3) * 2, name="rs", op=hvd.Sum)
        close(again, torch.full((2, 3), 2.0 * n), "later reducescatter result")
        del again
    close(rs, torch.full((2, 3), n * (n + 1) / 2), "kept reducescatter result")
    obj = hvd.broadcast_object({"t": torch.ones(2) * r, "r": r}, root_rank=n - 1)
    assert obj["r"] == n - 1 and torch.equal(obj["t"], torch.ones(2) * (n - 1))
    assert hvd.allgather_object(r * 10) == [k * 10 for k in range(n)]
    hvd.barrier()


def check_clear_errors():
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64), name="c"),
                         "complex64")
    harness.expect_error(hvd.UnsupportedError,
                         lambda: hvd.allreduce(torch.ones(2, device="meta"), name="m"),
                         "meta", "CPU")
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: hvd.allreduce_(torch.ones(4, 4)[:, 1], name="nc_"),
                         "contiguous")
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: hvd.allreduce(torch.ones(2), average=True, op=hvd.Sum,
                                               name="both"), "either")


def check_horovod_gradients_and_forms():
    """Gradients as Horovod defines them (horovod/torch/mpi_ops.py backward
    methods), written out as formulas here."""
    r, n = hvd.rank(), hvd.size()
    # alltoall: a row sent to rank k is weighted by k + 1 there.
    x = (torch.arange(2 * n, dtype=torch.float32) + r).requires_grad_()
    (hvd.alltoall(x, name="g.a2a") * (r + 1)).sum().backward()
    close(x.grad, torch.arange(n).repeat_interleave(2).float() + 1, "alltoall grad")
    # reducescatter: Average -> allgather of the gradient; Sum -> times size.
    for op, factor in ((hvd.Average, 1.0), (hvd.Sum, float(n))):
        y = torch.ones(2 * n, 3, requires_grad=True)
        (hvd.reducescatter(y, name="g.rs.%d" % op, op=op) * (r + 1)).sum().backward()
        close(y.grad, (torch.arange(n).repeat_interleave(2).float() + 1).unsqueeze(1)
              .expand(-1, 3) * factor, "reducescatter grad, op %d" % op)
    # grouped forms: values and gradients per tensor, as their single forms.
    a, b = torch.full((2,), r + 1.0, requires_grad=True), torch.full((3, 1), 2.0 * r,
                                                                       requires_grad=True)
    outs = hvd.grouped_allreduce([a, b], name="g.grp")
    close(outs[0], torch.full((2,), (n + 1) / 2), "grouped allreduce")
    (outs[0].sum() * (r + 1) + outs[1].sum()).backward()
    close(a.grad, torch.full((2,), (n + 1) / 2), "grouped allreduce grad")
    gathered = hvd.grouped_allgather([a.detach()[:1] + r, b.detach()], name="g.ga")
    close(gathered[0], torch.arange(n, dtype=torch.float32) * 2 + 1, "grouped allgather")
    assert gathered[1].shape == (3 * n, 1)
    rs = hvd.grouped_reducescatter([torch.ones(n, 2) * (r + 1), torch.ones(2 * n)],
                                   name="g.grs", op=hvd.Sum)
    close(rs[0], torch.full((1, 2), n * (n + 1) / 2), "grouped reducescatter")
    close(rs[1], torch.full((2,), float(n)), "grouped reducescatter 2")
    # compression= on grouped_allreduce and reducescatter, as Horovod's signatures.
    half = hvd.grouped_allreduce([torch.full((4,), r + 0.5)], None, "g.c",
                                 hvd.Compression.fp16, hvd.Sum)
    assert half[0].dtype == torch.float32
    close(half[0], torch.full((4,), n * n / 2), "grouped allreduce fp16")
    close(hvd.reducescatter(torch.ones(n, 2), "g.rsc", hvd.Compression.fp16, hvd.Sum),
          torch.full((1, 2), float(n)), "reducescatter fp16")
    # A named reducescatter is negotiated under its own name in every binding:
    # a numpy rank and a torch rank meet on it.
    if r % 2:
        got = hvd.reducescatter(torch.full((n, 2), 1.0), name="rs.meet", op=hvd.Sum)
    else:
        import fuseopt
        got = torch.from_numpy(fuseopt.reducescatter(torch.full((n, 2), 1.0).numpy(),
                                                     name="rs.meet", op=fuseopt.Sum))
    close(got, torch.full((1, 2), float(n)), "reducescatter across bindings")
    for dtype in (torch.int16, torch.uint16):  # Horovod reduces them
        v = torch.full((3,), r + 1, dtype=dtype)
        close(hvd.allreduce(v, name="dt16.%s" % dtype, op=hvd.Sum),
              torch.full((3,), n * (n + 1) // 2, dtype=dtype), "dtype %s" % dtype)


def check_sparse_groups_and_signatures():
    r, n = hvd.rank(), hvd.size()
    dense = torch.zeros(5, 3)
    dense[r % 5] = r + 1.0
    dense[4] = 1.0
    for op, divide in ((hvd.Sum, 1), (hvd.Average, n)):
        out = hvd.synchronize(hvd.sparse_allreduce_async(dense.to_sparse(), "sp.%d" % op, op))
        expected = sum(torch.zeros(5, 3).index_fill_(0, torch.tensor([k % 5]), k + 1.0)
                       for k in range(n)) / divide
        expected[4] = n / divide
        assert out.is_sparse
        close(out.to_dense(), expected, "sparse_allreduce_async op %d" % op)
    hvd.barrier(process_set=hvd.global_process_set)
    assert hvd.broadcast_object(r, 0, process_set=hvd.global_process_set) == 0
    model = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(5)])  # 10 parameters
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), groups=4)
    # Horovod's split of 10 into 4 groups: 3, 3, 2, 2 (the first n % k one longer).
    assert opt._group_of == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3], opt._group_of
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    opt.set_backward_passes_per_step(2)
    assert opt.backward_passes_per_step == 2


def check_fresh_optimizer_state_is_created_as_horovod_does():
    # Horovod's broadcast_optimizer_state steps a fresh optimizer once on zero
    # gradients: Adam's first real step is then its second.
    torch.manual_seed(3)
    model = torch.nn.Linear(3, 2)
    reference = torch.nn.Linear(3, 2)
    reference.load_state_dict(model.state_dict())
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    ref_opt = torch.optim.Adam(reference.parameters(), lr=0.1)
    for p in reference.parameters():
        p.grad = torch.zeros_like(p)
    ref_opt.step()
    x = torch.ones(4, 3)
    for m, o in ((model, opt), (reference, ref_opt)):
        o.zero_grad()
        m(x).sum().backward()
        o.step()
    for a, b in zip(model.parameters(), reference.parameters()):
        close(a.detach(), b.detach(), "Adam after broadcast_optimizer_state")
    assert int(opt.state_dict()["state"][0]["step"]) == 2


def check_broadcast_optimizer_state_model_names_sparse_parameters():
    """Horovod's third positional argument, model=: under SGD with momentum
    the sparse embedding's initialising gradient is sparse, so its momentum
    buffer is created sparse (as Horovod's), on every rank equal to the root's."""
    for with_model in (False, True):
        torch.manual_seed(hvd.rank())  # different starts: the broadcast must equalise
        model = torch.nn.Sequential(torch.nn.Embedding(6, 3, sparse=True))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if with_model:
            hvd.broadcast_optimizer_state(opt, 0, model)  # positional, as Horovod's scripts
        else:
            hvd.broadcast_optimizer_state(opt, 0)
        buf = opt.state_dict()["state"][0]["momentum_buffer"]
        want = torch.sparse_coo if with_model else torch.strided
        assert buf.layout == want, (with_model, buf.layout)
        model(torch.tensor([1, 4])).sum().backward()
        opt.step()  # and training goes on from there
        gathered = hvd.allgather_object(opt.state_dict()["state"][0]["momentum_buffer"]
                                        .to_dense())
        for other in gathered:
            close(other, gathered[0], "momentum buffers equal after one step")
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: hvd.broadcast_optimizer_state(opt, 0, model=object()),
                         "torch.nn.Module")


def check_process_set_is_never_ignored():
    r, n = hvd.rank(), hvd.size()
    close(hvd.allreduce(torch.ones(2), name="ps.g", op=hvd.Sum,
                        process_set=hvd.global_process_set), torch.full((2,), float(n)), "global")
    assert hvd.global_process_set.size() == n and hvd.global_process_set.rank() == r
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: hvd.allreduce(torch.ones(2), process_set=object()), "ProcessSet")
    harness.expect_error(hvd.InvalidArgumentError,  # never added: not silently global
                         lambda: hvd.allreduce(torch.ones(2), process_set=hvd.ProcessSet([0])),
                         "has not been added")


def check_sparse_gradients_stay_sparse():
    """As Horovod: with sparse_as_dense False (allgathered indices and values)
    or True (reduced dense), p.grad stays sparse, so SparseAdam steps; both
    give the dense computation's numbers."""
    r, n = hvd.rank(), hvd.size()
    ids = [torch.tensor([k % 5, (k + 2) % 5, k % 5]) for k in range(n)]

    def train(sparse_as_dense):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(5, 3, sparse=True)
        opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(emb.parameters(), lr=0.1),
                                       named_parameters=emb.named_parameters(),
                                       sparse_as_dense=sparse_as_dense)
        for _ in range(2):
            opt.zero_grad()
            (emb(ids[r]) * (r + 1)).sum().backward()
            opt.synchronize()
            assert emb.weight.grad.is_sparse
            with opt.skip_synchronize():
                opt.step()
        return emb.weight.detach()

    torch.manual_seed(0)
    ref = torch.nn.Embedding(5, 3, sparse=True)
    ref_opt = torch.optim.SparseAdam(ref.parameters(), lr=0.1)
    for _ in range(2):
        ref_opt.zero_grad()
        for k in range(n):
            (ref(ids[k]) * (k + 1) / n).sum().backward()
        ref.weight.grad = ref.weight.grad.coalesce()
        ref_opt.step()
    close(train(False), ref.weight.detach(), "sparse_as_dense=False")
    close(train(True), ref.weight.detach(), "sparse_as_dense=True")

    # Sparse gradients travel allgathered and uncompressed: averaged with the
    # optimizer's op even when the compressor of the dense ones sums (ef_sign).
    emb = torch.nn.Embedding(5, 3, sparse=True)
    lin = torch.nn.Linear(3, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(list(emb.parameters()) + list(lin.parameters()),
                                                   lr=0.1),
                                   named_parameters=[("emb.weight", emb.weight)]
                                   + [("lin." + k, v) for k, v in lin.named_parameters()],
                                   compression=hvd.Compression.ef_sign())
    hvd.broadcast_parameters({"emb": emb.weight, "w": lin.weight, "b": lin.bias}, 0,
                             prefix="sparse.ef.")
    opt.zero_grad()
    (lin(emb(ids[r])) * (r + 1)).sum().backward()
    opt.synchronize()
    want = torch.zeros(5, 3)
    for k in range(n):
        rows = torch.zeros(5, 3)
        rows.index_add_(0, ids[k], lin.weight.detach().expand(3, 3) * (k + 1))
        want += rows / n
    close(emb.weight.grad.to_dense(), want, "sparse gradient next to ef_sign: averaged")


class HorovodStyleFP16:
    """A custom compressor as written for Horovod: static methods, one tensor."""

    @staticmethod
    def compress(tensor):
        return tensor.half(), tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.to(ctx)


def check_horovod_style_compressor_plugs_in():
    r = hvd.rank()
    x = rank_tensor(r)
    want = hvd.allreduce(x, name="cmp.ref", compression=hvd.Compression.fp16)
    close(hvd.allreduce(x, name="cmp.hvd", compression=HorovodStyleFP16), want, "allreduce")
    close(hvd.grouped_allreduce([x], name="cmp.grp", compression=HorovodStyleFP16)[0], want,
          "grouped")
    results = []
    for compression in (hvd.Compression.fp16, HorovodStyleFP16):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                       named_parameters=model.named_parameters(),
                                       compression=compression)
        model(rank_tensor(r, (4, 3))).pow(2).sum().backward()
        opt.step()
        results.append(model.weight.detach().clone())
    close(results[1], results[0], "DistributedOptimizer")
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: hvd.allreduce(x, name="cmp.bad", compression=object()),
                         "compress and decompress")


if __name__ == "__main__":
    torch.set_num_threads(1)
    harness.run([check_allreduce_forms_and_autograd, check_allgather_broadcast_autograd,
                 check_alltoall_reducescatter_objects, check_clear_errors,
                 check_horovod_gradients_and_forms, check_sparse_groups_and_signatures,
                 check_fresh_optimizer_state_is_created_as_horovod_does,
                 check_broadcast_optimizer_state_model_names_sparse_parameters,
                 check_process_set_is_never_ignored, check_sparse_gradients_stay_sparse,
                 check_horovod_style_compressor_plugs_in])
