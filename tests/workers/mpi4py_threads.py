"""mpi4py next to fuseopt (Horovod's ``assert hvd.mpi_threads_supported()``
pattern). With FUSEOPT_MPI_THREAD_MULTIPLE=1, fuseopt initialises MPI at
THREAD_MULTIPLE: a script thread then runs mpi4py allreduces on its own
communicator while the main thread runs fuseopt's, and both are right.
Without the knob MPI runs at SERIALIZED and mpi_threads_supported() says so."""
import os
import threading

import numpy as np

import fuseopt
from fuseopt.api.capabilities import mpi_threads_supported

ROUNDS = 200


def main():
    multiple = os.environ.get("FUSEOPT_MPI_THREAD_MULTIPLE") == "1"
    fuseopt.init()
    from mpi4py import MPI  # after init: mpi4py adopts the MPI fuseopt started
    assert mpi_threads_supported() is multiple, (mpi_threads_supported(), multiple)
    expected_level = MPI.THREAD_MULTIPLE if multiple else MPI.THREAD_SERIALIZED
    assert MPI.Query_thread() == expected_level, MPI.Query_thread()
    r, n = fuseopt.rank(), fuseopt.size()
    if multiple:
        comm = MPI.COMM_WORLD.Dup()  # collective: before the thread starts
        seen = []

        def script_thread():
            for i in range(ROUNDS):
                seen.append(comm.allreduce(r + i))

        thread = threading.Thread(target=script_thread)
        thread.start()
        for i in range(ROUNDS):
            out = fuseopt.allreduce(np.full(3, float(r + i)), name="t.%d" % (i % 7),
                                    op=fuseopt.Sum)
            assert out.tolist() == [n * i + n * (n - 1) / 2] * 3, (i, out)
        thread.join(timeout=60)
        assert not thread.is_alive(), "the mpi4py thread hangs"
        assert seen == [n * i + n * (n - 1) // 2 for i in range(ROUNDS)], seen[:5]
        comm.Free()
    fuseopt.shutdown()
    print("[rank %d] mpi4py threads ok (multiple=%s)" % (r, multiple), flush=True)


if __name__ == "__main__":
    main()
