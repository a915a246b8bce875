"""Faults a long job meets, injected on purpose. Usage: faults.py MODE

  exit0         rank 1 ends with os._exit(0) after some collectives (no shutdown)
  wrapper_kill  rank 1 SIGKILLs its rank wrapper (as mpiexec's own kill does)
  stuck         rank 1 sleeps forever in user code; rank 0 waits in a cached collective
  deadlock      the same, with rank 1 blocked on a lock it holds
  import_error  rank 1 fails with ImportError before init()
  bad_knob      rank 1 calls init() with a setting out of range
  late_init     rank 1 sleeps 12 s before init() (run with plain mpiexec and a short
                FUSEOPT_INIT_TIMEOUT_S: rank 0's init() must give up on its own)
  interrupt     rank 0 waits in a collective rank 1 does not join; SIGALRM must
                interrupt the wait within about a second
  extra_step    torch: rank 1 calls optimizer.step() once more than rank 0
  raise_mpi4py  mpi4py started MPI; rank 0 ends with an uncaught exception while
                rank 1 waits in an mpi4py bcast from it

Every rank prints "[rank R] <ErrorName> after <s> s: <message>" for the error it
catches and exits with CAUGHT_EXIT, so the test can tell a report from a crash.
"""
import os
import signal
import sys
import threading
import time

import numpy as np

CAUGHT_EXIT = 3
mode = sys.argv[1]
rank = int(os.environ.get("PMI_RANK", "0"))


def report(error, since):
    print("[rank %d] %s after %.1f s: %s" % (rank, type(error).__name__, time.time() - since,
                                           error), flush=True)
    sys.exit(CAUGHT_EXIT)


def on_alarm(signum, frame):
    raise KeyboardInterrupt("SIGALRM")


def warm_up(fuseopt, steps=20):
    # Cached in the response cache by now: the fast path that stalls used to miss.
    for _ in range(steps):
        fuseopt.allreduce(np.ones(4, np.float32), name="step.grad")


def main():
    if mode == "import_error" and rank == 1:
        import fuseopt_no_such_module  # noqa: F401
    if mode == "late_init" and rank == 1:
        time.sleep(12)
        return
    if mode == "raise_mpi4py":
        from mpi4py import MPI  # initialises MPI: fuseopt adopts it
    import fuseopt
    started = time.time()
    try:
        fuseopt.init(**({"fusion_threshold": -1} if mode == "bad_knob" and rank == 1 else {}))
    except fuseopt.FuseoptError as e:
        report(e, started)
    if mode == "extra_step":
        return extra_step(fuseopt)
    warm_up(fuseopt)
    started = time.time()
    if rank == 1:
        print("[rank 1] in user code", flush=True)
        if mode == "exit0":
            os._exit(0)
        if mode == "wrapper_kill":
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(60)
        if mode in ("stuck", "interrupt"):
            time.sleep(3600)
        if mode == "deadlock":
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()
    if mode == "raise_mpi4py":
        if rank == 0:
            raise ValueError("rank 0 fails in user code")
        MPI.COMM_WORLD.bcast(None, root=0)
        raise AssertionError("the bcast completed although rank 0 never sent it")
    if mode == "interrupt":
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(1)
    print("[rank 0] waiting in a collective", flush=True)
    try:
        fuseopt.allreduce(np.ones(4, np.float32), name="step.grad")
    except fuseopt.FuseoptError as e:
        report(e, started)
    except KeyboardInterrupt as e:
        report(e, started)
    raise AssertionError("the collective completed although rank 1 never submitted it")


def extra_step(fuseopt):
    import torch
    import fuseopt.torch as hvd
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    started = time.time()
    try:
        for step in range(6):
            opt.zero_grad()
            model(torch.ones(3, 4)).sum().backward()
            opt.step()
            if rank == 1 and step == 2:
                opt.step()  # no backward since the last step: stale gradients
    except fuseopt.MismatchError as e:
        report(e, started)
    raise AssertionError("six steps on rank 0 and seven on rank 1 passed unnoticed")


if __name__ == "__main__":
    main()
