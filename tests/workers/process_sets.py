"""Process sets at numpy level (tests/test_process_sets.py): results against
numpy, set-relative ranks and sizes, errors on the ranks that misuse a set,
disjoint and overlapping sets at once, removal and re-adding."""
import threading

import numpy as np

import fuseopt
from rank_harness import expect_error, run

R = S = 0  # rank and size, set at start


def odd_even():
    """Two disjoint sets; each rank reduces in its own, at the same time."""
    evens = fuseopt.add_process_set([r for r in range(S) if r % 2 == 0])
    odds = fuseopt.add_process_set(fuseopt.ProcessSet([r for r in range(S) if r % 2 == 1]))
    assert evens.process_set_id != odds.process_set_id
    mine, other = (evens, odds) if R % 2 == 0 else (odds, evens)
    assert mine.included() and not other.included()
    assert mine.size() == len(mine.ranks) and mine.rank() == mine.ranks.index(R)
    for step in range(20):  # the same names in both sets: negotiated apart
        x = np.full(5, float(R + step), dtype=np.float32)
        got = fuseopt.allreduce(x, name="w", op=fuseopt.Sum, process_set=mine)
        assert np.allclose(got, sum(r + step for r in mine.ranks)), (step, got)
        avg = fuseopt.allreduce(x, name="w.avg", process_set=mine)  # divides by the set's size
        assert np.allclose(avg, np.mean([r + step for r in mine.ranks])), avg
    gathered = fuseopt.allgather(np.full((R + 1, 2), R, dtype=np.int64), process_set=mine)
    want = np.concatenate([np.full((r + 1, 2), r) for r in mine.ranks])
    assert np.array_equal(gathered, want), gathered
    root = mine.ranks[-1]  # a global rank
    b = fuseopt.broadcast(np.full(3, R, dtype=np.int32), root, process_set=mine)
    assert np.array_equal(b, np.full(3, root)), b
    n = mine.size()
    recv, splits = fuseopt.alltoall(np.arange(n * 2, dtype=np.float64) + 100 * R,
                                    process_set=mine)
    want = np.concatenate([np.arange(mine.rank() * 2, mine.rank() * 2 + 2) + 100 * r
                           for r in mine.ranks])
    assert np.array_equal(recv, want) and list(splits) == [2] * n, (recv, splits)
    rs = fuseopt.reducescatter(np.ones((n * 3, 2), dtype=np.float32), op=fuseopt.Sum,
                               process_set=mine)
    assert rs.shape == (3, 2) and np.allclose(rs, n), rs
    g = fuseopt.grouped_allreduce([np.full(2, R, dtype=np.float64), np.full(3, 1.0)],
                                  op=fuseopt.Sum, process_set=mine)
    assert np.allclose(g[0], sum(mine.ranks)) and np.allclose(g[1], n), g
    fuseopt.barrier(process_set=mine)
    # Unnamed operations count per set: the global set's names still match.
    fuseopt.allreduce(np.ones(1), process_set=mine)
    assert np.allclose(fuseopt.allreduce(np.ones(1), op=fuseopt.Sum), S)
    assert fuseopt.remove_process_set(evens) and fuseopt.remove_process_set(odds)
    assert not fuseopt.remove_process_set(evens)  # gone already: False, as in Horovod


def misuse():
    """Errors on the ranks that misuse a set; the others are unaffected."""
    first = fuseopt.add_process_set([0])
    if R != 0:
        expect_error(fuseopt.InvalidArgumentError,
                     lambda: fuseopt.allreduce(np.ones(1), name="x", process_set=first),
                     "rank %d is not a member of process set" % R, "ranks [0]")
    else:
        assert np.allclose(fuseopt.allreduce(np.ones(2), name="x", process_set=first), 1)
        expect_error(fuseopt.InvalidArgumentError,
                     lambda: fuseopt.broadcast(np.ones(1), S - 1, process_set=first),
                     "root %d is not a member" % (S - 1))
    expect_error(fuseopt.InvalidArgumentError,
                 lambda: fuseopt.allreduce(np.ones(1), process_set=object()), "hvd.ProcessSet")
    expect_error(fuseopt.InvalidArgumentError,
                 lambda: fuseopt.allreduce(np.ones(1), process_set=fuseopt.ProcessSet([0, 1])),
                 "has not been added")
    expect_error(ValueError, lambda: fuseopt.add_process_set([0]), "exists already")
    expect_error(ValueError, lambda: fuseopt.add_process_set(list(range(S))), "exists already")
    # Ranks that ask for different sets: the same error everywhere.
    expect_error(fuseopt.MismatchError, lambda: fuseopt.add_process_set([R]),
                 "a process set of ranks")
    assert fuseopt.remove_process_set(first)
    expect_error(fuseopt.InvalidArgumentError,
                 lambda: fuseopt.allreduce(np.ones(1), process_set=first), "has not been added")
    if S > 2:  # removed with an operation in flight on rank 0 (rank 1 never submits it)
        pair = fuseopt.add_process_set([0, 1])
        orphan = fuseopt.allreduce_async(np.ones(1), name="orphan", process_set=pair) \
            if R == 0 else None
        assert fuseopt.remove_process_set(pair)
        if R == 0:
            expect_error(fuseopt.InvalidArgumentError, orphan.wait, "was removed while")
    # Re-added: a new id, working again.
    again = fuseopt.add_process_set([0])
    assert again.process_set_id > 0
    if R == 0:
        assert np.allclose(fuseopt.allreduce(np.ones(1), name="y", process_set=again), 1)
    fuseopt.remove_process_set(again)


def overlapping():
    """Sets that share ranks, used from two threads at once on every rank."""
    if S < 3:
        return
    a = fuseopt.add_process_set(list(range(S - 1)))   # 0..S-2
    b = fuseopt.add_process_set(list(range(1, S)))    # 1..S-1
    mine = [ps for ps in (a, b) if ps.included()]
    errors = []

    def work(ps):
        try:
            for step in range(30):
                got = fuseopt.allreduce(np.full(4, step + R, dtype=np.float64),
                                        name="ov.%d" % step, op=fuseopt.Sum, process_set=ps)
                assert np.allclose(got, sum(step + r for r in ps.ranks)), got
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(ps,)) for ps in mine]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a set's steps still running after 120 s"
    assert not errors, errors
    fuseopt.remove_process_set(a)
    fuseopt.remove_process_set(b)


def slow_set_does_not_block():
    """A set's tensors do not wait for another set's: the evens run 10 steps
    while an odd set's tensor is half-submitted and the odd ranks wait in a
    global broadcast that the evens only join after their steps (a deadlock,
    caught by the test's timeout, if the evens' set needed the odds)."""
    evens = fuseopt.add_process_set([r for r in range(S) if r % 2 == 0])
    odds = fuseopt.add_process_set([r for r in range(S) if r % 2 == 1])
    if R % 2 == 0:
        for step in range(10):
            fuseopt.allreduce(np.ones(8), name="fast.%d" % step, process_set=evens)
        flag = fuseopt.broadcast(np.array([10]), 0, name="after.evens")
    else:
        early = R == odds.ranks[0]
        pending = fuseopt.allreduce_async(np.ones(8), name="odd.pending", process_set=odds) \
            if early else None
        flag = fuseopt.broadcast(np.array([0]), 0, name="after.evens")
        if not early:
            pending = fuseopt.allreduce_async(np.ones(8), name="odd.pending", process_set=odds)
        assert np.allclose(pending.wait(), 1)
    assert flag[0] == 10, flag
    fuseopt.remove_process_set(evens)
    fuseopt.remove_process_set(odds)


def init_with_sets():
    """init(process_sets=...) after a shutdown: ids are new, old objects stale."""
    old = fuseopt.add_process_set([0])
    fuseopt.shutdown()
    ps = fuseopt.ProcessSet([0])
    fuseopt.init(process_sets=[ps])
    assert ps.process_set_id >= 1 and fuseopt.global_process_set.ranks == list(range(S))
    expect_error(fuseopt.InvalidArgumentError,
                 lambda: fuseopt.allreduce(np.ones(1), process_set=old), "has not been added")
    # As Horovod's init: the entries that repeat the global set or an earlier
    # one raise ValueError on every rank, after the others are added; init
    # again maps sets of the same ranks to the ids they have.
    rest = fuseopt.ProcessSet(reversed(range(1, S)))
    expect_error(ValueError, lambda: fuseopt.init(process_sets=[
        fuseopt.ProcessSet([0]), rest, fuseopt.ProcessSet(range(S - 1, -1, -1))]),
        "entry number 2 is a duplicate")
    again = [fuseopt.ProcessSet([0]), fuseopt.ProcessSet(range(1, S))]
    fuseopt.init(process_sets=again)
    assert [p.process_set_id for p in again] == [ps.process_set_id, rest.process_set_id]
    assert np.allclose(fuseopt.allreduce(np.ones(1), op=fuseopt.Sum, process_set=again[1]
                                         if R else again[0]), S - 1 if R else 1)
    fuseopt.remove_process_set(ps)
    fuseopt.remove_process_set(rest)


if __name__ == "__main__":
    fuseopt.init()
    R, S = fuseopt.rank(), fuseopt.size()
    assert S >= 2, "run at 2 ranks or more: a set of rank 0 alone is the global set at 1"
    fuseopt.shutdown()
    run([odd_even, misuse, overlapping, slow_set_does_not_block, init_with_sets])
