"""A rank dies or freezes mid-training; the others must stop with a clear error.

    lost_rank.py kill [R]     rank R (default 1) SIGKILLs itself at step 30
    lost_rank.py freeze [R]   rank R SIGSTOPs itself at step 30 (run with a short
                              FUSEOPT_PEER_TIMEOUT_S: no launcher record exists)
    lost_rank.py syncbn-kill [R], syncbn-freeze [R]
                              the same inside a SyncBatchNorm training step: rank R
                              stops between the model's two SyncBatchNorm layers, so
                              the others wait in an agreed reduction

Survivors print what they caught and exit with SURVIVOR_EXIT, so the parent
test can tell a clean report from a crash or a kill."""
import os
import signal
import sys
import time

import numpy as np

import fuseopt

SURVIVOR_EXIT = 3


def train_step(step, grads):
    handles = fuseopt.grouped_allreduce_async(grads, names=["g%d" % i for i in range(len(grads))])
    big = fuseopt.allreduce_async(np.full(1 << 18, float(step), np.float32), name="big")
    return [handles, big]


def syncbn_steps(rank, victim, mode):
    """A step function of a small SyncBatchNorm CNN; rank victim stops itself
    in the forward pass of step 30, after the first SyncBatchNorm layer."""
    import torch
    import fuseopt.torch as hvd
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), hvd.SyncBatchNorm(4), torch.nn.ReLU(),
                                torch.nn.Conv2d(4, 8, 3), hvd.SyncBatchNorm(8),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 3))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    state = {"step": 0}

    def stop_here(*_):
        if rank == victim and state["step"] == 30:
            os.kill(os.getpid(), signal.SIGKILL if mode == "syncbn-kill" else signal.SIGSTOP)
    model[3].register_forward_pre_hook(stop_here)
    x, y = torch.randn(2, 1, 8, 8), torch.tensor([0, 1])

    def step(step_number, _grads):
        state["step"] = step_number
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        return []
    return step


def main(mode, victim):
    fuseopt.init()
    rank = fuseopt.rank()
    grads = [np.full(100 * (i + 1), rank, np.float32) for i in range(8)]
    last_good = time.time()
    step_fn = syncbn_steps(rank, victim, mode) if mode.startswith("syncbn") else train_step
    handles = []
    try:
        for step in range(100000):
            if rank == victim and step == 30 and mode in ("kill", "freeze"):
                os.kill(os.getpid(), signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
            handles = step_fn(step, grads)
            for h in handles:
                h.wait()
            last_good = time.time()
    except fuseopt.RankFailedError as e:
        waited = time.time() - last_good
        print("[rank %d] caught RankFailedError after %.1f s: %s" % (rank, waited, e), flush=True)
        # Every other pending and later operation fails the same way, at once.
        later = time.time()
        for h in handles:
            try:
                h.wait()
            except fuseopt.RankFailedError:
                pass
            else:
                raise AssertionError("a pending handle completed after the abort")
        try:
            fuseopt.allreduce(np.ones(3, np.float32), name="after")
        except fuseopt.RankFailedError:
            pass
        else:
            raise AssertionError("an operation after the abort succeeded")
        assert time.time() - later < 1.0, "failing the rest took %.1f s" % (time.time() - later)
        fuseopt.shutdown()  # must not hang on a loop thread stuck in MPI
        try:
            fuseopt.init()
        except fuseopt.RankFailedError as again:
            print("[rank %d] init again refused: %s" % (rank, again), flush=True)
        else:
            raise AssertionError("init after an abort succeeded")
        print("[rank %d] survivor ok" % rank, flush=True)
        sys.exit(SURVIVOR_EXIT)
    raise AssertionError("training finished although rank %d was lost" % victim)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
