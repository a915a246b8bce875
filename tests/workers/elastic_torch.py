"""An elastic PyTorch job for tests/test_elastic.py, deterministic to the bit.

    elastic_torch.py OUT [--kill-host H --kill-at B] [--copy-commit-at B]
                         [--grow-at B HOSTSFILE LINE] [--fail-at B] [--powersgd]

96 samples, 4 per rank and batch, 3 epochs, a commit every 2 batches and at
each epoch's end. ``B`` counts batches over the whole run (state.batch).
Only in the first job (no reset yet): --kill-host SIGKILLs the ranks of
cross rank H once batch B is done (uncommitted); --grow-at has rank 0 add
LINE to the discovery script's HOSTSFILE and wait until fuseoptrun noticed;
--fail-at raises an ordinary error on rank 1. --copy-commit-at copies host
0's commit file, as written at batch B, to OUT/commit.fuseopt. --powersgd
compresses the gradients with PowerSGD (its state goes through the commits).

Rank 0 prints a line per start and commit, and OUT/final.pt at the end.
"""
import argparse
import hashlib
import os
import shutil
import signal
import time

import torch

import fuseopt.torch as hvd
from fuseopt.training import elastic_protocol
from fuseopt.base import launch_records

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--kill-host", type=int)
p.add_argument("--kill-at", type=int, default=-1)
p.add_argument("--copy-commit-at", type=int, default=-1)
p.add_argument("--grow-at", nargs=3)
p.add_argument("--fail-at", type=int, default=-1)
p.add_argument("--powersgd", action="store_true")
args = p.parse_args()

EPOCHS, PER_RANK, COMMIT_EVERY, BASE_LR = 3, 4, 2, 0.05
FIRST_JOB = os.environ.get(elastic_protocol.RESET_COUNT_ENV, "0") == "0"

hvd.init()
INIT_T, LOCAL_RANK = time.time(), hvd.local_rank()
g = torch.Generator().manual_seed(7)
data = torch.utils.data.TensorDataset(torch.randn(96, 8, generator=g), torch.randn(96, 1, generator=g))
torch.manual_seed(100 + hvd.rank())  # ranks differ until the state is synced
model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
compression = hvd.Compression.powersgd(rank=1, start_iter=2) if args.powersgd \
    else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=BASE_LR * hvd.size(),
                                                     momentum=0.9),
                                     named_parameters=model.named_parameters(),
                                     compression=compression)
sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
loader = torch.utils.data.DataLoader(data, batch_size=PER_RANK, sampler=sampler)


def checksum(m):
    return hashlib.sha256(b"".join(t.detach().numpy().tobytes()
                                   for t in m.state_dict().values())).hexdigest()[:16]


def powersgd_steps():
    """Reductions of the compressed weight so far ('-' without PowerSGD)."""
    if not args.powersgd:
        return "-"
    return str(optimizer.compression_state()["steps"].get("grad.0.weight", 0))


def say(text):
    if hvd.rank() == 0:
        print("[elastic] %s" % text, flush=True)


def on_state_reset():
    for group in optimizer.param_groups:
        group["lr"] = BASE_LR * hvd.size()


say("init t=%.3f" % INIT_T)
say("built t=%.3f" % time.time())
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
state.register_reset_callbacks([on_state_reset])


def before_step(state):
    if not FIRST_JOB:
        return
    if state.batch == args.kill_at and hvd.cross_rank() == args.kill_host:
        if hvd.local_rank() == 0:
            print("[elastic] kill t=%.3f" % time.time(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if state.batch == args.fail_at and hvd.rank() == 1:
        raise ValueError("a bug in the training script at batch %d" % state.batch)
    if args.grow_at and state.batch == int(args.grow_at[0]) and hvd.rank() == 0:
        with open(args.grow_at[1], "a") as f:
            f.write(args.grow_at[2] + "\n")
        deadline = time.time() + 30
        while not elastic_protocol.notice_time(launch_records.directory()):
            assert time.time() < deadline, "fuseoptrun never noticed the new host"
            time.sleep(0.05)


def commit(state):
    state.commit()
    say("commit gen %d size %d epoch %d batch %d sum %s"
        % (state._generation, hvd.size(), state.epoch, state.batch, checksum(state.model)))
    if state.batch == args.copy_commit_at and hvd.cross_rank() == 0 and hvd.local_rank() == 0:
        shutil.copy(elastic_protocol.commit_path(elastic_protocol.store_dir()),
                    os.path.join(args.out, "commit.fuseopt"))


@hvd.elastic.run
def train(state):
    say("start size %d resets %s gen %d epoch %d batch %d lr %g sum %s psgd %s t=%.3f" % (
        hvd.size(), os.environ.get(elastic_protocol.RESET_COUNT_ENV), state._generation,
        state.epoch, state.batch, optimizer.param_groups[0]["lr"], checksum(state.model),
        powersgd_steps(), time.time()))
    first_step = True
    while state.epoch < EPOCHS:
        for batch_idx, (x, y) in enumerate(loader):
            before_step(state)
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(state.model(x), y).backward()
            optimizer.step()
            if first_step:
                say("step t=%.3f" % time.time())
                first_step = False
            state.sampler.record_batch(batch_idx, PER_RANK)
            state.batch += 1
            if state.batch % COMMIT_EVERY == 0:
                commit(state)
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        commit(state)


try:
    train(state)
except SystemExit:
    if LOCAL_RANK == 0:
        print("[elastic] exit-for-reset t=%.3f" % time.time(), flush=True)
    raise
if hvd.rank() == 0:
    torch.save(model.state_dict(), os.path.join(args.out, "final.pt"))
say("final size %d batch %d sum %s" % (hvd.size(), state.batch, checksum(model)))
hvd.shutdown()
