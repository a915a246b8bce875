"""fuseopt.torch training: N ranks x batch b must equal one process on the
concatenated N*b batch. Every rank builds the same global data from fixed
seeds, takes its own slice, and also trains the single-process reference
locally, so no expectation is hard-coded."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import fuseopt.torch as hvd
import rank_harness as harness

B = 4  # per-rank batch


def close(a, b, what, tol=1e-6):
    assert a.shape == b.shape, what
    err = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    assert err <= tol * max(1.0, b.double().abs().max().item()), "%s: max error %g" % (what, err)


def global_batch(step, n, dim=8, classes=3):
    g = torch.Generator().manual_seed(500 + step)
    return torch.randn(n * B, dim, generator=g), torch.randint(0, classes, (n * B,), generator=g)


def my_slice(t):
    r = hvd.rank()
    return t[r * B:(r + 1) * B]


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))


def assert_same_params(model, reference, what, tol=1e-6):
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        close(p.detach(), q.detach(), "%s: %s" % (what, name), tol)


def assert_equal_across_ranks(model, what):
    for name, p in model.named_parameters():
        gathered = hvd.allgather(p.detach().reshape(1, -1), name="eq." + what + name)
        for k in range(1, hvd.size()):
            close(gathered[k], gathered[0], "%s: %s differs on rank %d" % (what, name, k), 0)


def train_pair(make_opt, steps=5, passes=1, compression=hvd.Compression.none, tag="t",
               **opt_kwargs):
    n = hvd.size()
    model, reference = make_model(), make_model()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()), model.named_parameters(),
                                   compression=compression, backward_passes_per_step=passes,
                                   **opt_kwargs)
    ref_opt = make_opt(reference.parameters())
    for step in range(steps):
        x, y = global_batch(step, n)
        for part in range(passes):  # micro-batches: this rank's slice split in `passes`
            xs, ys = my_slice(x), my_slice(y)
            k = B // passes
            loss = F.cross_entropy(model(xs[part * k:(part + 1) * k]),
                                   ys[part * k:(part + 1) * k]) / passes
            loss.backward()
        opt.step()
        opt.zero_grad()
        F.cross_entropy(reference(x), y).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    return model, reference, opt


def step_pair(forward, opt, reference, ref_opt, seed):
    """One step of distributed training on this rank's slice (through
    ``forward``) and of the single-process reference on the whole batch."""
    x, y = global_batch(seed, hvd.size())
    F.cross_entropy(forward(my_slice(x)), my_slice(y)).backward()
    opt.step()
    opt.zero_grad()
    F.cross_entropy(reference(x), y).backward()
    ref_opt.step()
    ref_opt.zero_grad()


def check_equivalence_sgd_momentum_and_adam():
    sgd = lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)  # noqa: E731
    model, ref, _ = train_pair(sgd)
    assert_same_params(model, ref, "SGD+momentum")
    adam = lambda ps: torch.optim.Adam(ps, lr=0.01)  # noqa: E731
    model, ref, _ = train_pair(adam)
    assert_same_params(model, ref, "Adam")


def check_bucket_caps_change_timing_not_results():
    sgd = lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)  # noqa: E731
    # 0: each gradient at once; 0.0002 MiB (~200 B): a few per bucket; inf: all at step().
    for cap in (0, 0.0002, float("inf")):
        model, ref, opt = train_pair(sgd, bucket_cap_mb=cap)
        assert_same_params(model, ref, "bucket_cap_mb=%s" % cap)
    # When gradients reach the core: bucket sizes per native submission, and
    # how many are in flight by the end of backward (the rest go at step()).
    # Gradients: 16x3 weight 192 B, biases 64 B and 12 B, 8x16 weight 512 B.
    for cap, in_backward in ((0, 4), (0.0002, 4), (1, 0), (float("inf"), 0)):
        model = make_model()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       model.named_parameters(), bucket_cap_mb=cap)
        batches, submit = [], opt._reducer.submit
        opt._reducer.submit = lambda params: (batches.append(len(params)), submit(params))
        x, y = global_batch(0, hvd.size())
        F.cross_entropy(model(my_slice(x)), my_slice(y)).backward()
        assert len(opt._reducer.in_flight) == in_backward, (cap, len(opt._reducer.in_flight))
        opt.step()
        assert not opt._reducer.in_flight and not opt._reducer.bucket
        expected = {0: [1, 1, 1, 1], 0.0002: None, 1: [4], float("inf"): [4]}[cap]
        if expected is None:  # ~210 B: several gradients per bucket, several buckets
            assert 1 < len(batches) < 4 and sum(batches) == 4, batches
        else:
            assert batches == expected, (cap, batches)
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1),
                                                          bucket_cap_mb=-1), "bucket_cap_mb")


def check_parameter_reshaped_between_steps():
    # The optimizer plans each bucket's requests once; a parameter whose
    # tensor is swapped for one of another shape (the output layer grown from
    # 3 to 5 classes) must be sent with its new shape, on every rank.
    model, reference = make_model(), make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   model.named_parameters())
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(4):
        if step == 2:
            g = torch.Generator().manual_seed(77)
            w, b = torch.randn(5, 16, generator=g), torch.randn(5, generator=g)
            for m in (model, reference):
                m[2].weight.data, m[2].bias.data = w.clone(), b.clone()
        step_pair(model, opt, reference, ref_opt, 700 + step)
    opt.remove_hooks()
    assert model[2].weight.shape == (5, 16)
    assert_same_params(model, reference, "after reshaping the output layer")


def check_gradient_accumulation():
    sgd = lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)  # noqa: E731
    model, ref, _ = train_pair(sgd, passes=2)
    assert_same_params(model, ref, "backward_passes_per_step=2")


def check_compression_within_tolerance():
    sgd = lambda ps: torch.optim.SGD(ps, lr=0.1)  # noqa: E731
    for comp, tol in ((hvd.Compression.fp16, 3e-4), (hvd.Compression.bf16, 2e-3)):
        model, ref, _ = train_pair(sgd, steps=3, compression=comp)
        assert_same_params(model, ref, "compression %s" % type(comp).__name__, tol)
        assert_equal_across_ranks(model, "compressed")


def check_cast_compression_runs_in_the_core():
    # float32 host gradients under Compression.fp16 / bf16 reach the core
    # uncompressed and are rounded on its copies: no torch cast runs, and
    # the result has the bits of an explicit cast, a 16-bit allreduce and a
    # cast back (hvd.allreduce with compression= still casts in torch).
    for comp in (hvd.Compression.fp16, hvd.Compression.bf16):
        with harness.counting_casts(comp) as casts:
            for predivide in (1.0, 2.0):
                # The 400x400 weight's bucket takes the shared-memory path
                # (over FUSEOPT_SHM_MIN_BYTES even at 2 bytes an element),
                # the small ones the fusion buffer's.
                model, local = (nn.Sequential(nn.Linear(8, 400), nn.Tanh(), nn.Linear(400, 400),
                                              nn.Tanh(), nn.Linear(400, 3)) for _ in range(2))
                local.load_state_dict(model.state_dict())
                opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                               model.named_parameters(), compression=comp,
                                               gradient_predivide_factor=predivide)
                x, y = global_batch(700, hvd.size())
                # Large logits: gradients that 16 bits round visibly.
                F.cross_entropy(model(my_slice(x)) * 37.0, my_slice(y)).backward()
                opt.synchronize()
                assert casts == [], "the optimizer cast %d tensors itself" % len(casts)
                F.cross_entropy(local(my_slice(x)) * 37.0, my_slice(y)).backward()
                for (name, p), q in zip(model.named_parameters(), local.parameters()):
                    ref = hvd.allreduce(q.grad, name="ref.%s.%s.%s" % (comp.wire, predivide, name),
                                        compression=comp, prescale_factor=1.0 / predivide,
                                        postscale_factor=predivide)
                    assert p.grad.dtype == torch.float32
                    # Over 2 ranks the same bits; beyond, the order of a sum
                    # depends on the bucket an element shares (and with it
                    # the rounding): within a few 16-bit steps.
                    tol = 0 if hvd.size() == 2 else 2.0 ** -6 * ref.abs().max().item()
                    assert (p.grad - ref).abs().max() <= tol, (name, (p.grad - ref).abs().max())
                    assert not torch.equal(p.grad, hvd.allreduce(q.grad, name="f32." + name))
                assert casts, "the explicit reference did not cast"
                casts.clear()
                opt.remove_hooks()


def check_parameter_names_without_named_parameters():
    """Horovod's _parameter_names: one distinct name per parameter, in the
    optimizer's order across its groups, the same on every rank."""
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    sgd = torch.optim.SGD([{"params": model[0].parameters()},
                           {"params": model[1].parameters(), "lr": 0.5}], lr=0.1)
    opt = hvd.DistributedOptimizer(sgd)
    names = opt._parameter_names
    assert list(names) == list(model.parameters()), "one entry per parameter, in order"
    assert len(set(names.values())) == 4, names
    every = hvd.allgather_object(sorted(names.values()))
    assert all(n == every[0] for n in every), every
    named = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     model.named_parameters())
    assert list(named._parameter_names.values()) == [n for n, _ in model.named_parameters()]
    opt.remove_hooks()
    named.remove_hooks()


def check_step_after_synchronize_warns_outside_skip_synchronize():
    import warnings
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   model.named_parameters())
    for skip in (True, False):
        x, y = global_batch(700, hvd.size())
        F.cross_entropy(model(my_slice(x)), my_slice(y)).backward()
        opt.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if skip:
                with opt.skip_synchronize():
                    opt.step()
            else:
                opt.step()
        # Horovod's opening words, which its users' tests look for.
        said = [w for w in caught if str(w.message).startswith(
            "optimizer.step() called without optimizer.skip_synchronize()")]
        assert len(said) == (0 if skip else 1), (skip, [str(w.message) for w in caught])
        opt.zero_grad()
    opt.remove_hooks()


def check_unused_parameters_do_not_deadlock():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 2)
            self.b = nn.Linear(4, 2)

        def forward(self, x, use_b):
            return self.a(x) + (self.b(x) if use_b else 0)

    torch.manual_seed(1)
    model = Branchy()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   model.named_parameters())
    for step in range(3):
        use_b = (hvd.rank() + step) % 2 == 0  # branch b used on some ranks only
        model(torch.ones(2, 4), use_b).sum().backward()
        opt.step()
        opt.zero_grad()
    assert_equal_across_ranks(model, "unused branch")


def check_optimizer_api_scheduler_scaler_state_dict():
    n = hvd.size()

    class MySGD(torch.optim.SGD):  # a user's subclass keeps working
        custom = "kept"

    model, reference = make_model(), make_model()
    opt = hvd.DistributedOptimizer(MySGD(model.parameters(), lr=0.2, momentum=0.5),
                                   model.named_parameters())
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.2, momentum=0.5)
    assert opt.custom == "kept" and isinstance(opt, torch.optim.Optimizer)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=2, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for step in range(5):
        x, y = global_batch(100 + step, n)
        scaler.scale(F.cross_entropy(model(my_slice(x)), my_slice(y))).backward()
        opt.synchronize()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        with opt.skip_synchronize():
            scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=(step % 2 == 0))
        sched.step()
        F.cross_entropy(reference(x), y).backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        ref_opt.step()
        ref_opt.zero_grad()
        ref_sched.step()
    assert opt.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"] == 0.05
    assert_same_params(model, reference, "scheduler + GradScaler + clipping")
    # state_dict round trip into a fresh wrapper
    fresh = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.5),
                                     model.named_parameters())
    fresh.load_state_dict(opt.state_dict())
    assert fresh.param_groups[0]["lr"] == 0.05
    p0 = next(model.parameters())
    close(fresh.state[p0]["momentum_buffer"], opt.state[p0]["momentum_buffer"], "state", 0)
    for o in (opt, fresh):
        o.remove_hooks()
    # zero_grad while allreduces are in flight is refused with a clear error.
    guard = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     model.named_parameters())
    model(torch.ones(1, 8)).sum().backward()
    harness.expect_error(hvd.InvalidArgumentError, guard.zero_grad, "before optimizer.step()")
    guard.step()
    guard.zero_grad()
    guard.remove_hooks()


def check_broadcast_parameters_and_optimizer_state():
    root = hvd.size() - 1
    model = make_model(seed=hvd.rank())  # different on every rank
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (hvd.rank() + 1))
    hvd.broadcast_optimizer_state(opt, root)  # empty state: a zero-gradient step creates it
    assert opt.param_groups[0]["lr"] == 0.01 * (root + 1)
    hvd.broadcast_parameters(model.state_dict(), root)
    assert_same_params(model, make_model(seed=root), "broadcast_parameters", 0)
    model(torch.randn(2, 8) * (hvd.rank() + 1)).sum().backward()
    opt.step()  # state now differs per rank
    hvd.broadcast_optimizer_state(opt, root_rank=root)
    p0 = next(model.parameters())
    gathered = hvd.allgather(opt.state[p0]["exp_avg"].reshape(1, -1), name="exp_avg")
    for k in range(hvd.size()):
        close(gathered[k], gathered[root], "exp_avg rank %d" % k, 0)
    assert int(opt.state[p0]["step"]) == 2  # Horovod's initialising step, then ours
    hvd.broadcast_parameters(list(model.named_parameters()), 0, prefix="bp2.")
    # Bare tensors, as Horovod's list(model.parameters()); then a non-tensor
    # entry is refused on every rank instead of silently left unsynchronised.
    mine = make_model(seed=hvd.rank())
    hvd.broadcast_parameters(list(mine.parameters()), root, prefix="bp3.")
    assert_same_params(mine, make_model(seed=root), "broadcast_parameters of bare tensors", 0)
    state = dict(mine.state_dict(), extra={"epoch": 3})
    harness.expect_error(hvd.InvalidArgumentError,
                         lambda: hvd.broadcast_parameters(state, 0, prefix="bp4."),
                         "'extra'", "broadcast_object")


def check_local_sgd_and_adaptive():
    n = hvd.size()
    model = make_model()
    opt = hvd.LocalSGD(torch.optim.SGD(model.parameters(), lr=0.1), model, period=3)
    for step in range(3):
        x, y = global_batch(200 + step, n)
        F.cross_entropy(model(my_slice(x)), my_slice(y)).backward()
        opt.step()
        opt.zero_grad()
        if step < 2 and n > 1:
            w = hvd.allgather(next(model.parameters()).detach().reshape(1, -1), name="lw%d" % step)
            assert not torch.equal(w[0], w[1]), "ranks should drift apart between syncs"
    assert opt.syncs == 1
    assert_equal_across_ranks(model, "local sgd after sync")
    # A sync replaces every rank's parameters by the mean of all ranks'.
    x, y = global_batch(250, n)
    F.cross_entropy(model(my_slice(x)), my_slice(y)).backward()
    opt.optimizer.step()
    opt.zero_grad()
    local = [p.detach().clone() for p in model.parameters()]
    means = [hvd.allreduce(p, name="mean%d" % i, op=hvd.Average) for i, p in enumerate(local)]
    opt.sync()
    for p, m in zip(model.parameters(), means):
        close(p.detach(), m, "parameters after sync are the mean", 1e-6)
    adaptive = hvd.AdaptiveLocalSGD(torch.optim.SGD(model.parameters(), lr=0.5), model,
                                    threshold=1e-4, max_period=5)
    for step in range(8):
        x, y = global_batch(300 + step, n)
        F.cross_entropy(model(my_slice(x)), my_slice(y)).backward()
        adaptive.step()
        adaptive.zero_grad()
    counts = hvd.allgather_object((adaptive.syncs, adaptive.steps))
    assert len(set(counts)) == 1, "ranks disagree on when to sync: %s" % counts
    assert adaptive.syncs >= 1


def check_torch_compile():
    model, reference = make_model(), make_model()
    compiled = torch.compile(model, backend="aot_eager")
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   model.named_parameters())
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(3):
        step_pair(compiled, opt, reference, ref_opt, 400 + step)
    opt.remove_hooks()
    assert_same_params(model, reference, "torch.compile")


def check_join_with_uneven_batches():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   model.named_parameters())
    for step in range(2 + hvd.rank()):  # rank r has 2 + r batches
        x, y = global_batch(600 + step, hvd.size())
        F.cross_entropy(model(my_slice(x)), my_slice(y)).backward()
        opt.step()
        opt.zero_grad()
    hvd.join()
    opt.remove_hooks()
    assert_equal_across_ranks(make_model(), "after join")  # still usable afterwards


CHECKS = [check_equivalence_sgd_momentum_and_adam, check_bucket_caps_change_timing_not_results,
          check_parameter_reshaped_between_steps, check_gradient_accumulation,
          check_compression_within_tolerance, check_cast_compression_runs_in_the_core,
          check_parameter_names_without_named_parameters,
          check_step_after_synchronize_warns_outside_skip_synchronize,
          check_unused_parameters_do_not_deadlock,
          check_optimizer_api_scheduler_scaler_state_dict,
          check_broadcast_parameters_and_optimizer_state, check_local_sgd_and_adaptive,
          check_torch_compile, check_join_with_uneven_batches]

if __name__ == "__main__":
    import torch_powersgd_checks
    CHECKS += torch_powersgd_checks.CHECKS
    torch.set_num_threads(1)
    # Check names on the command line run only those (e.g. on emulated hosts).
    chosen = [c for c in CHECKS if c.__name__ in sys.argv[1:]]
    assert len(chosen) == len(sys.argv[1:]), "unknown check in %s" % sys.argv[1:]
    harness.run(chosen or CHECKS)
