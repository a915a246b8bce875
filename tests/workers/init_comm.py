"""init(comm=...) as Horovod's: an mpi4py communicator of the whole job, or
the list of all ranks; a subset raises UnsupportedError on every rank.
mpi4py initializes MPI first here (fuseopt then uses it as it is)."""
import numpy as np
from mpi4py import MPI

import fuseopt
from fuseopt.api.capabilities import mpi_threads_supported
from rank_harness import expect_error


def main():
    world = MPI.COMM_WORLD
    r, n = world.Get_rank(), world.Get_size()
    half = world.Split(r % 2, r)  # a subset (at 2 ranks and more)
    fuseopt.init(comm=world)
    assert (fuseopt.rank(), fuseopt.size()) == (r, n)
    # mpi4py asked for THREAD_MULTIPLE: the script may call MPI beside fuseopt.
    assert MPI.Query_thread() == MPI.THREAD_MULTIPLE and mpi_threads_supported()
    out = fuseopt.allreduce(np.full(2, r + 1.0), name="comm", op=fuseopt.Sum)
    assert out.tolist() == [n * (n + 1) / 2] * 2, out
    fuseopt.shutdown()
    fuseopt.init(comm=list(range(n)))
    assert fuseopt.size() == n
    fuseopt.shutdown()
    if n > 1:
        expect_error(fuseopt.UnsupportedError, lambda: fuseopt.init(comm=half), "COMM_WORLD")
        assert not fuseopt.is_initialized()
        expect_error(fuseopt.UnsupportedError, lambda: fuseopt.init(comm=[0]), "process sets")
        assert not fuseopt.is_initialized()
    expect_error(fuseopt.InvalidArgumentError, lambda: fuseopt.init(comm="world"), "mpi4py")
    half.Free()
    print("[rank %d] init(comm=) ok" % r, flush=True)


if __name__ == "__main__":
    main()
