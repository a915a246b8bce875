"""Random programs of enqueue / poll / wait / drop on every rank, and several
threads per rank enqueueing at once.

Every rank draws the same program from a shared seed (what to submit, under
which name) and its own choices from a per-rank seed (wait order, timeouts,
handles dropped without a wait). Each result is checked against what every
rank contributed; deliberate disagreements must give MismatchError on every
rank. Nothing may hang, crash, or leave handles behind.

Usage: fuzz_sequences.py FIRST_SEED COUNT"""
import random
import sys
import threading
import time

import numpy as np

import fuseopt
import rank_harness as harness
from data import assert_close, reduce_expected, values

OPS = {"sum": fuseopt.Sum, "min": fuseopt.Min, "max": fuseopt.Max, "average": fuseopt.Average}
DTYPES = [np.int32, np.int64, np.float32, np.float64, np.uint8]


def everyone(name, shape, dtype, op="sum"):
    return [values(name, r, shape, dtype, op) for r in range(fuseopt.size())]


def submit(prog, name, kind):
    """Enqueues one operation; returns (handle, check(result), expects_mismatch)."""
    r, n = fuseopt.rank(), fuseopt.size()
    dtype = prog.choice(DTYPES)
    shape = tuple(prog.randint(0, 4) for _ in range(prog.randint(1, 3)))
    if kind == "mismatch":
        # Rank 1 disagrees about the shape.
        mine = values(name, r, shape if r != 1 else shape + (2,), dtype)
        return fuseopt.allreduce_async(mine, name=name, op=fuseopt.Sum), None, True
    if kind == "allreduce":
        op = prog.choice(list(OPS))
        expected = reduce_expected(everyone(name, shape, dtype, op), op)
        h = fuseopt.allreduce_async(values(name, r, shape, dtype, op), name=name, op=OPS[op])
        return h, lambda out: assert_close(out, expected, name), False
    if kind == "allgather":
        rows = [prog.randint(0, 3) for _ in range(n)]
        parts = [values(name, k, (rows[k],) + shape[1:], dtype) for k in range(n)]
        expected = np.concatenate(parts)
        h = fuseopt.allgather_async(parts[r], name=name)
        return h, lambda out: assert_close(out, expected, name), False
    if kind == "broadcast":
        root = prog.randrange(n)
        expected = values(name, root, shape, dtype)
        h = fuseopt.broadcast_async(values(name, r, shape, dtype), root, name=name)
        return h, lambda out: assert_close(out, expected, name), False
    if kind == "alltoall":
        splits = [[prog.randint(0, 2) for _ in range(n)] for _ in range(n)]
        sent = [values(name, k, (sum(splits[k]),) + shape[1:], dtype) for k in range(n)]
        received = [sent[k][sum(splits[k][:r]):sum(splits[k][:r + 1])] for k in range(n)]
        expected = np.concatenate(received)
        h = fuseopt.alltoall_async(sent[r], splits=splits[r], name=name)
        return h, lambda out: assert_close(out[0], expected, name), False
    raise ValueError(kind)


def run_program(seed, steps=60):
    prog = random.Random(seed)                                    # same on every rank
    mine = random.Random(seed * 1000 + fuseopt.rank())            # this rank's choices
    in_flight = []
    for step in range(steps):
        kind = prog.choice(["allreduce"] * 4 + ["allgather", "broadcast", "alltoall", "mismatch"])
        name = "s%d.%d.%s" % (seed, step, kind)
        in_flight.append((name,) + submit(prog, name, kind))
        if mine.random() < 0.3:
            in_flight[-1][1].poll()
        if prog.random() < 0.3:  # a wait point; each rank drains in its own order
            mine.shuffle(in_flight)
            for name, h, check, mismatch in in_flight:
                if mine.random() < 0.2:
                    try:
                        h.wait(timeout=0)
                    except fuseopt.TimeoutError:
                        pass
                    except fuseopt.MismatchError:
                        pass
                if mine.random() < 0.1:
                    continue  # dropped without a wait: must not leak or crash
                finish(name, h, check, mismatch)
            in_flight = []
    for name, h, check, mismatch in in_flight:
        finish(name, h, check, mismatch)


def finish(name, h, check, mismatch):
    if mismatch:
        harness.expect_error(fuseopt.MismatchError, h.wait, name, "rank 1")
        harness.expect_error(fuseopt.MismatchError, h.wait, name)  # the same error again
        return
    out = h.wait()
    check(out)
    assert h.wait() is out, "a second wait must return the same result"


def check_random_programs():
    first, count = int(sys.argv[1]), int(sys.argv[2])
    for seed in range(first, first + count):
        run_program(seed)
    fuseopt.barrier()
    fuseopt.allreduce(np.ones(1), name="reap")  # reaps handles dropped above
    assert fuseopt.pending_handles() == 0, fuseopt.pending_handles()


def check_threads_enqueue_and_wait_at_once():
    errors = []

    def worker(t):
        try:
            sizes = random.Random(t)                            # same on every rank
            pauses = random.Random(t * 7 + fuseopt.rank())      # differ per rank
            for i in range(150):
                name = "thread%d.%d" % (t, i)
                x = values(name, fuseopt.rank(), (sizes.randint(1, 50),), np.float32)
                h = fuseopt.allreduce_async(x, name=name, op=fuseopt.Sum)
                if pauses.random() < 0.5:
                    time.sleep(pauses.random() * 0.001)
                out = h.wait()
                assert_close(out, reduce_expected(everyone(name, x.shape, np.float32), "sum"), name)
        except Exception as e:  # reported by the main thread
            errors.append((t, repr(e)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a thread is stuck"
    assert not errors, errors


def check_shutdown_completes_waiting_threads_with_an_error():
    """Last check: shuts the runtime down under threads blocked in wait()."""
    outcomes = []
    started = threading.Barrier(4)

    def waiter(t):
        h = fuseopt.allreduce_async(np.ones(4, np.float32), name="never.%d.%d" % (fuseopt.rank(), t))
        started.wait()
        try:
            h.wait()
            outcomes.append("completed")
        except fuseopt.ShutDownError as e:
            outcomes.append("shut down: %s" % e)

    threads = [threading.Thread(target=waiter, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.2)
    fuseopt.shutdown()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive(), "a waiter is still blocked after shutdown"
    assert len(outcomes) == 3 and all(o.startswith("shut down") for o in outcomes), outcomes


if __name__ == "__main__":
    harness.run([check_random_programs, check_threads_enqueue_and_wait_at_once,
                 check_shutdown_completes_waiting_threads_with_an_error])
