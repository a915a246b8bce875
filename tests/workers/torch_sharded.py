"""The sharded optimizer (DistributedOptimizer(shard=...), ZeroRedundancyOptimizer)
against a one-process reference: every rank builds the same global batches
from fixed seeds, trains on its slice, and also trains the reference on the
whole batch with the plain optimizer, so no expectation is hard-coded. At 3
ranks the shards are uneven (the model's parameters have unequal sizes)."""
import copy
import glob
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

import fuseopt.torch as hvd
import rank_harness as harness
from fuseopt.torch.sharded import merge_shards
from fuseopt.training import sharding

B = 4  # per-rank batch
STAGES = ("optimizer", "gradients")


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 16), nn.Tanh(),
                         nn.Linear(16, 3))


def global_batch(step, n):
    g = torch.Generator().manual_seed(900 + step)
    return torch.randn(n * B, 8, generator=g), torch.randint(0, 3, (n * B,), generator=g)


def close(a, b, what, tol, floor=1.0):
    """Within tol of b's largest magnitude, or of floor where that is smaller
    (floor 0: relative to b alone, for values far below 1)."""
    err = (a.detach().double() - b.detach().double()).abs().max().item()
    assert err <= tol * max(floor, b.detach().double().abs().max().item()), \
        "%s: max error %g" % (what, err)


def assert_same_params(model, reference, what, tol=1e-5):
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        close(p, q, "%s: %s" % (what, name), tol)


def train(opt, model, ref_opt, reference, steps, first=0, rank=None, size=None, passes=1,
          clip=None):
    rank = hvd.rank() if rank is None else rank
    size = hvd.size() if size is None else size
    for step in range(first, first + steps):
        x, y = global_batch(step, size)
        xs, ys = x[rank * B:(rank + 1) * B], y[rank * B:(rank + 1) * B]
        k = B // passes
        for part in range(passes):
            F.cross_entropy(model(xs[part * k:(part + 1) * k]),
                            ys[part * k:(part + 1) * k]).div(passes).backward()
        if clip is None:
            opt.step()
        else:
            opt.synchronize()
            with opt.skip_synchronize():
                opt.clip_grad_norm_(clip)
                opt.step()
        opt.zero_grad()
        F.cross_entropy(reference(x), y).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(reference.parameters(), clip)
        ref_opt.step()
        ref_opt.zero_grad()


OPTIMIZERS = {
    "SGD+momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
}


def sharded(model, make, shard, **kwargs):
    return hvd.DistributedOptimizer(make(model.parameters()), model.named_parameters(),
                                    shard=shard, **kwargs)


def check_200_steps_match_the_reference_with_state_on_owners_only():
    for label, make in OPTIMIZERS.items():
        for shard in STAGES:
            model, reference = make_model(), make_model()
            opt, ref_opt = sharded(model, make, shard), make(reference.parameters())
            # 200 steps at 2 ranks; 30 at 3, oversubscribed on 2 cores.
            train(opt, model, ref_opt, reference, 200 if hvd.size() == 2 else 30)
            assert_same_params(model, reference, "%s %s" % (label, shard), tol=5e-6)
            owned = {id(p) for p in opt.owned_parameters()}
            # State only for owned parameters and pieces, and every element owned once.
            assert {id(p) for p in opt.state} == owned, label
            elements = sum(p.numel() for p in opt.owned_parameters())
            counts = hvd.allreduce(torch.tensor([float(elements)]), op=hvd.Sum,
                                   name="sharded.owned")
            assert counts.item() == sum(p.numel() for p in model.parameters()), counts
            # The 32x16 matrix is 59% of this model: whole parameters would leave
            # the shares far apart, so it is split (and only it).
            split = [i for i, owner in enumerate(opt.owner) if owner is None]
            assert split == [2], (opt.pieces, label)
            # ZeRO-2 frees the gradients others own; ZeRO-1 keeps them.
            x, y = global_batch(0, hvd.size())
            F.cross_entropy(model(x[:B]), y[:B]).backward()
            opt.synchronize()
            for p in model.parameters():
                kept = p.grad is not None
                assert kept == (id(p) in owned or shard == "optimizer"), (label, shard)
            opt.zero_grad()


def check_state_is_balanced_by_bytes():
    model = make_model()
    opt = sharded(model, OPTIMIZERS["Adam"], "gradients")
    train(opt, model, torch.optim.Adam(make_model().parameters()), make_model(), 1)
    mine = torch.tensor([float(opt.state_bytes())])
    shares = hvd.allgather(mine, name="sharded.bytes")
    # exp_avg, exp_avg_sq per element; a step count per parameter and per piece
    entries = sum(len(pieces) for pieces in opt.pieces)
    total = sum(2 * p.numel() * 4 for p in model.parameters()) + 4 * entries
    assert abs(shares.sum().item() - total) < 1e-6, (shares, total)
    # Within the plan's bound, give or take a cut's alignment (64 B of parameter:
    # 128 B of state) and the step counts.
    bound = total / hvd.size() * (1 + sharding.BALANCE_BOUND) + 128 + 4 * entries
    assert shares.max().item() <= bound, (shares, bound)
    # Kept whole, the same parameters spread by the greedy owners, loosely.
    whole = sharded(make_model(), OPTIMIZERS["Adam"], "gradients", split_parameters=False)
    assert all(len(pieces) == 1 for pieces in whole.pieces), whole.pieces
    # So are a subclass's (it may read a whole parameter), unless it says otherwise.
    class OwnAdam(torch.optim.Adam):
        pass
    assert all(len(pieces) == 1 for pieces in sharded(make_model(), OwnAdam, "optimizer").pieces)
    assert any(len(pieces) > 1 for pieces in sharded(make_model(), OwnAdam, "optimizer",
                                                     split_parameters=True).pieces)
    harness.expect_error(hvd.InvalidArgumentError, lambda: hvd.DistributedOptimizer(
        OwnAdam(make_model().parameters()), split_parameters=True), "sharded optimizer only")


def check_accumulation_groups_and_scheduler():
    for shard in STAGES:
        model, reference = make_model(), make_model()

        def groups(m):
            layers = list(m.children())
            return [{"params": layers[0].parameters()},
                    {"params": list(layers[2].parameters()) + list(layers[4].parameters()),
                     "lr": 0.02}]
        opt = hvd.DistributedOptimizer(torch.optim.SGD(groups(model), lr=0.05, momentum=0.9),
                                       model.named_parameters(), shard=shard,
                                       backward_passes_per_step=2)
        ref_opt = torch.optim.SGD(groups(reference), lr=0.05, momentum=0.9)
        schedulers = [torch.optim.lr_scheduler.StepLR(o, 3, gamma=0.5) for o in (opt, ref_opt)]
        for step in range(8):
            train(opt, model, ref_opt, reference, 1, first=step, passes=2)
            for s in schedulers:
                s.step()
        assert_same_params(model, reference, "accumulation, groups, StepLR " + shard)
        assert opt.param_groups[1]["lr"] == ref_opt.param_groups[1]["lr"]


def check_clipping_over_the_whole_model():
    for shard in STAGES:
        model, reference = make_model(), make_model()
        opt = sharded(model, OPTIMIZERS["SGD+momentum"], shard)
        train(opt, model, OPTIMIZERS["SGD+momentum"](reference.parameters()), reference, 10,
              clip=0.05)
        assert_same_params(model, reference, "clip_grad_norm_ " + shard)


def check_bf16_on_the_wire():
    # SGD+momentum, not Adam: Adam's first steps are lr * sign(gradient), and
    # bfloat16's rounding flips the sign of averaged gradients near zero (at 3
    # ranks Adam's weights ended 9e-3 apart, SGD's 4.4e-4).
    model, reference = make_model(), make_model()
    make = OPTIMIZERS["SGD+momentum"]
    opt = sharded(model, make, "gradients", compression=hvd.Compression.bf16)
    train(opt, model, make(reference.parameters()), reference, 20)
    assert_same_params(model, reference, "bf16", tol=6e-3)
    harness.expect_error(hvd.UnsupportedError, lambda: sharded(
        model, OPTIMIZERS["Adam"], "gradients", compression=hvd.Compression.ef_sign()),
        "Compression.none, .fp16 or .bf16")


def check_whole_state_resumes_on_fewer_ranks():
    # Trained on every rank, gathered whole on rank 0, resumed on a process
    # set of one rank fewer: the reference goes on from the same state.
    n = hvd.size()
    make = OPTIMIZERS["Adam"]
    model, reference = make_model(), make_model()
    opt, ref_opt = sharded(model, make, "gradients"), make(reference.parameters())
    train(opt, model, ref_opt, reference, 5)
    harness.expect_error(hvd.InvalidArgumentError, opt.state_dict, "consolidate_state_dict")
    opt.consolidate_state_dict(to=0)
    whole = opt.state_dict() if hvd.rank() == 0 else None
    shards = hvd.allgather_object(opt.sharded_state_dict(), name="sharded.shards")
    merged = merge_shards(shards)
    whole = hvd.broadcast_object(whole, 0, name="sharded.whole")
    expected = ref_opt.state_dict()
    assert sorted(whole["state"]) == sorted(expected["state"]) == sorted(merged["state"])
    for k, state in expected["state"].items():
        for key, value in state.items():
            # Relative to the state itself: exp_avg_sq is ~1e-5 here.
            close(whole["state"][k][key], value, "state %s %s" % (k, key), 5e-6, floor=0.0)
            assert torch.equal(torch.as_tensor(merged["state"][k][key]),
                               torch.as_tensor(whole["state"][k][key]))
    fewer = hvd.add_process_set(list(range(n - 1)))
    try:
        if hvd.rank() < n - 1:
            resumed = make_model()
            resumed.load_state_dict(model.state_dict())
            opt2 = hvd.DistributedOptimizer(make(resumed.parameters()),
                                            resumed.named_parameters(), shard="optimizer",
                                            process_set=fewer)
            opt2.load_state_dict(whole)
            assert {id(p) for p in opt2.state} == {id(p) for p in opt2.owned_parameters()}
            train(opt2, resumed, ref_opt, reference, 5, first=5, rank=fewer.rank(),
                  size=n - 1)
            assert_same_params(resumed, reference, "resumed on %d ranks" % (n - 1), tol=1e-6)
    finally:
        hvd.remove_process_set(fewer)


def check_horovod_resume_pattern_broadcasts_shards():
    # Rank 0 loads a checkpoint, then broadcast_optimizer_state: every rank
    # ends with its shard of rank 0's state (the others loaded nothing).
    make = OPTIMIZERS["SGD+momentum"]
    model, reference = make_model(), make_model()
    ref_opt = make(reference.parameters())
    train(sharded(model, make, "optimizer"), model, ref_opt, reference, 3)
    fresh = make_model()
    fresh.load_state_dict(reference.state_dict())
    opt = sharded(fresh, make, "optimizer")
    if hvd.rank() == 0:  # a copy: torch loads tensors without copying them
        opt.load_state_dict(copy.deepcopy(ref_opt.state_dict()))
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert {id(p) for p in opt.state} == {id(p) for p in opt.owned_parameters()}
    train(opt, fresh, ref_opt, reference, 3, first=3)
    assert_same_params(fresh, reference, "after broadcast_optimizer_state")


def check_checkpoint_files_hold_shards_and_resume_anywhere():
    make = OPTIMIZERS["Adam"]
    model, reference = make_model(), make_model()
    opt, ref_opt = sharded(model, make, "gradients"), make(reference.parameters())
    train(opt, model, ref_opt, reference, 4)
    directory = hvd.broadcast_object(tempfile.mkdtemp() if hvd.rank() == 0 else None, 0,
                                     name="sharded.dir")
    path = os.path.join(directory, "ckpt.pt")
    for step in (4, 5):  # the second save replaces the first one's shards
        hvd.save_checkpoint(path, model, opt, step=step)
    if hvd.rank() == 0:
        files = sorted(glob.glob(path + ".optimizer-*"))
        assert len(files) == hvd.size(), files
        keys = [set(torch.load(f, weights_only=True)["state"]) for f in files]
        # Each parameter in the file of its owner, a split one in each of its pieces' owners'.
        assert set().union(*keys) == set(range(len(ref_opt.state))), keys
        for k, pieces in enumerate(opt.pieces):
            assert sum(k in held for held in keys) == len(pieces), (k, keys, opt.pieces)
    hvd.barrier()
    # Into a fresh sharded optimizer: it goes on as the reference does.
    resumed = make_model(seed=1)
    opt2 = sharded(resumed, make, "gradients")
    assert hvd.load_checkpoint(path, resumed, opt2).step == 5
    assert {id(p) for p in opt2.state} == {id(p) for p in opt2.owned_parameters()}
    train(opt2, resumed, ref_opt, reference, 3, first=4)
    assert_same_params(resumed, reference, "resumed from sharded files", tol=1e-4)
    # Into a plain optimizer: the whole state, as the shards held it.
    plain_model = make_model(seed=2)
    plain = hvd.DistributedOptimizer(make(plain_model.parameters()),
                                     plain_model.named_parameters())
    hvd.load_checkpoint(path, plain_model, plain)
    opt.consolidate_state_dict(to=0)
    whole = hvd.broadcast_object(opt.state_dict() if hvd.rank() == 0 else None, 0,
                                 name="sharded.whole2")
    for k, state in whole["state"].items():
        for key, value in state.items():
            assert torch.equal(torch.as_tensor(plain.state_dict()["state"][k][key]),
                               torch.as_tensor(value)), (k, key)
    # A shard whose pieces are named wrongly (a hostile or damaged file) fails
    # the load on every rank with CheckpointError, as a damaged one does.
    if hvd.rank() == 0:
        last = sorted(glob.glob(path + ".optimizer-*"))[-1]
        bad = torch.load(last, weights_only=True)
        bad["fuseopt_shard"]["pieces"] = {2: ["0", 1 << 40, "shape"]}
        torch.save(bad, last)
    hvd.barrier()
    harness.expect_error(hvd.CheckpointError, lambda: hvd.load_checkpoint(path, resumed, opt2),
                         "names its pieces wrongly")
    # A damaged shard fails the load on every rank and changes nothing.
    if hvd.rank() == 0:
        with open(sorted(glob.glob(path + ".optimizer-*"))[-1], "r+b") as f:
            f.truncate(40)
    before = [p.detach().clone() for p in resumed.parameters()]
    harness.expect_error(hvd.CheckpointError, lambda: hvd.load_checkpoint(path, resumed, opt2),
                         "optimizer shard %d" % (hvd.size() - 1))
    assert all(torch.equal(a, p) for a, p in zip(before, resumed.parameters()))


def check_zero_redundancy_optimizer_after_averaged_gradients():
    model, reference = make_model(), make_model()
    opt = hvd.ZeroRedundancyOptimizer(model.parameters(), torch.optim.AdamW, lr=0.01,
                                      weight_decay=0.1)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=0.01, weight_decay=0.1)
    for step in range(10):
        x, y = global_batch(step, hvd.size())
        r = hvd.rank()
        F.cross_entropy(model(x[r * B:(r + 1) * B]), y[r * B:(r + 1) * B]).backward()
        hvd.grouped_allreduce_([p.grad for p in model.parameters()], name="ddp.grads")
        opt.step()
        opt.zero_grad()
        F.cross_entropy(reference(x), y).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    assert_same_params(model, reference, "ZeroRedundancyOptimizer")


def check_ranks_with_different_models_fail_on_every_rank():
    torch.manual_seed(0)
    width = 16 if hvd.rank() == 0 else 17
    model = nn.Sequential(nn.Linear(8, width), nn.Linear(width, 3))
    harness.expect_error(hvd.MismatchError, lambda: hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(), shard="gradients"),
        "ranks disagree about the parameters of a sharded optimizer", "0.weight")
    harness.expect_error(hvd.InvalidArgumentError, lambda: hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), shard="everything"), "ZeRO-1")
    harness.expect_error(hvd.UnsupportedError, lambda: hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), shard="optimizer", op=hvd.Sum),
        "does not take op")


def check_grad_scaler_skips_together_and_scales_agree():
    """torch.amp.GradScaler over a sharded optimizer: at step 3 one rank's
    gradient of one parameter is infinite. Its owner alone sees the infinite
    average, yet every rank must skip that step (or the parameter broadcasts
    would wait for ever) and lower the scale alike; the one-process reference
    with the same infinity skips the same step."""
    n, rank = hvd.size(), hvd.rank()
    bad_rank = n - 1
    for shard in STAGES:
        model, reference = make_model(), make_model()
        opt = sharded(model, OPTIMIZERS["Adam"], shard)
        target = next(i for i, p in enumerate(model.parameters()) if opt.owner[i] != bad_rank)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
        ref_opt = OPTIMIZERS["Adam"](reference.parameters())
        ref_scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
        for step in range(6):
            x, y = global_batch(step, n)
            xs, ys = x[rank * B:(rank + 1) * B], y[rank * B:(rank + 1) * B]
            loss = F.cross_entropy(model(xs), ys)
            if step == 3 and rank == bad_rank:
                loss = loss + list(model.parameters())[target].sum() * float("inf")
            before = [p.detach().clone() for p in model.parameters()]
            scaler.scale(loss).backward()
            if step % 2:  # Horovod's recipe; on even steps scaler.step alone
                opt.synchronize()
                scaler.unscale_(opt)
                with opt.skip_synchronize():
                    scaler.step(opt)
            else:
                scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            ref_loss = F.cross_entropy(reference(x), y)
            if step == 3:
                ref_loss = ref_loss + list(reference.parameters())[target].sum() * float("inf")
            ref_scaler.scale(ref_loss).backward()
            ref_scaler.step(ref_opt)
            ref_scaler.update()
            ref_opt.zero_grad()
            unchanged = all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
            assert unchanged == (step == 3), (shard, step, unchanged)
            scales = hvd.allgather_object(scaler.get_scale())
            assert scales == [ref_scaler.get_scale()] * n, (shard, step, scales)
        assert_same_params(model, reference, "GradScaler " + shard)


def check_elastic_torch_state_commits_and_restores_the_whole_state():
    """hvd.elastic.TorchState with a sharded optimizer: a commit keeps the
    whole state on every rank (a lost rank would take its shard with it);
    restore() brings back the committed parameters and each rank's share,
    and the commit's payload resumes a plain optimizer in one process."""
    from fuseopt.torch.elastic import TorchState
    make = OPTIMIZERS["Adam"]
    for shard in STAGES:
        model, reference = make_model(), make_model()
        opt, ref_opt = sharded(model, make, shard), make(reference.parameters())
        train(opt, model, ref_opt, reference, 3)
        state = TorchState(model=model, optimizer=opt, epoch=0)
        state.commit()
        committed = copy.deepcopy(model.state_dict())
        expected = copy.deepcopy(ref_opt.state_dict())
        train(opt, model, make(make_model().parameters()), make_model(), 2, first=3)
        state.restore()
        for name, value in committed.items():
            assert torch.equal(model.state_dict()[name], value), (shard, name)
        assert {id(p) for p in opt.state} == {id(p) for p in opt.owned_parameters()}, shard
        # Training on from the restored commit follows the reference from step 3.
        train(opt, model, ref_opt, reference, 3, first=3)
        assert_same_params(model, reference, "elastic restore " + shard, tol=1e-6)
        # The payload (what the commit store holds) is the whole state.
        plain_model = make_model()
        plain = TorchState(model=plain_model, optimizer=make(plain_model.parameters()), epoch=0)
        plain._load_payload(state._payload())
        loaded = plain.optimizer.state_dict()["state"]
        assert sorted(loaded) == sorted(expected["state"]), shard
        for k, values in expected["state"].items():
            for key, value in values.items():
                close(loaded[k][key], value, "payload %s %s %s" % (shard, k, key), 5e-6, floor=0.0)


def check_reduce_lands_on_the_root_only():
    """hvd.reduce_ (the sharded optimizer's gradient path): every root, sum
    and average, float32/float64/int32, alone, fused with tensors for other
    roots, and above the shared-memory threshold (256 KiB); a broadcast_ of
    the same sizes; a bad root and roots that differ across ranks fail on
    every rank."""
    n, rank = hvd.size(), hvd.rank()
    for numel in (5, 1000, 300_000):
        for root in range(n):
            for dtype, op, want in ((torch.float32, hvd.Sum, n * (n + 1) / 2),
                                    (torch.float64, hvd.Average, (n + 1) / 2),
                                    (torch.int32, hvd.Sum, n * (n + 1) // 2)):
                t = torch.full((numel,), rank + 1, dtype=dtype)
                hvd.reduce_(t, root, name="reduce.%d.%d.%s" % (numel, root, dtype), op=op)
                if rank == root:
                    assert torch.all(t == want), (numel, root, dtype, t[:3])
                else:  # the others' values stay as they were
                    assert torch.all(t == rank + 1), (numel, root, dtype, t[:3])
            b = torch.arange(numel, dtype=torch.float32) * (rank == root) + 7
            hvd.broadcast_(b, root, name="reduce.bcast.%d.%d" % (numel, root))
            assert torch.equal(b, torch.arange(numel, dtype=torch.float32) + 7), (numel, root)
    handles = [hvd.reduce_async_(torch.full((100,), float(rank + 1)), i % n, name="reduce.f%d" % i,
                                 op=hvd.Sum) for i in range(4 * n)]
    for i, h in enumerate(handles):
        t = hvd.synchronize(h)
        if rank == i % n:
            assert torch.all(t == n * (n + 1) / 2), i
    harness.expect_error(hvd.InvalidArgumentError, lambda: hvd.reduce_(torch.ones(3), n),
                         "root %d is not a rank" % n)
    harness.expect_error(hvd.MismatchError, lambda: hvd.reduce_(
        torch.ones(3), rank, name="reduce.roots"), "reduce.roots")


CHECKS = [check_reduce_lands_on_the_root_only,
          check_200_steps_match_the_reference_with_state_on_owners_only,
          check_state_is_balanced_by_bytes, check_accumulation_groups_and_scheduler,
          check_clipping_over_the_whole_model, check_grad_scaler_skips_together_and_scales_agree,
          check_bf16_on_the_wire,
          check_whole_state_resumes_on_fewer_ranks,
          check_horovod_resume_pattern_broadcasts_shards,
          check_checkpoint_files_hold_shards_and_resume_anywhere,
          check_elastic_torch_state_commits_and_restores_the_whole_state,
          check_zero_redundancy_optimizer_after_averaged_gradients,
          check_ranks_with_different_models_fail_on_every_rank]

if __name__ == "__main__":
    torch.set_num_threads(1)
    harness.run(CHECKS)
