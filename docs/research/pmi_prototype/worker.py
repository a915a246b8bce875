"""One fuseopt rank, started by driver.py (or by mpiexec, for comparison).

Prints one line 'RESULT {json}' with what it saw. WORKER_DIE=1 makes it
exit(3) before fuseopt.init(), to simulate a rank lost before MPI_Init;
WORKER_DIE=after_init makes it exit(4) just after init, WORKER_DIE=abort call
MPI_Abort(7) just after init.
"""
import json
import os
import sys
import time

t_start = time.time()
import numpy as np  # noqa: E402
import fuseopt  # noqa: E402

t_imported = time.time()
if "--pmi" in sys.argv:  # as a Ray actor would: PMI address given at run time, set in-process
    i = sys.argv.index("--pmi")
    os.environ["PMI_PORT"], os.environ["PMI_ID"] = sys.argv[i + 1], sys.argv[i + 2]
if os.environ.get("WORKER_DIE") == "1":
    print("worker (PMI_ID=%s) exits before init, on purpose" % os.environ.get("PMI_ID"),
          flush=True)
    sys.exit(3)

fuseopt.init()
t_init = time.time()
if os.environ.get("WORKER_DIE") == "abort":  # MPI_Abort: MPICH sends cmd=abort over PMI
    from mpi4py import MPI  # MPI is already initialised (by fuseopt): mpi4py only attaches
    MPI.COMM_WORLD.Abort(7)
if os.environ.get("WORKER_DIE") == "after_init":
    print("rank %d dies after init, on purpose" % fuseopt.rank(), flush=True)
    os._exit(4)
rank, size = fuseopt.rank(), fuseopt.size()
print(rank, size, flush=True)
x = fuseopt.allreduce(np.ones(4) * (rank + 1), name="x", op=fuseopt.Sum)
# 1 MiB of float32: above FUSEOPT_SHM_MIN_BYTES (256 KiB), so it takes the
# shared-memory path when MPI_Comm_split_type(SHARED) holds every rank.
big = fuseopt.allreduce(np.full(1 << 18, rank + 1, dtype=np.float32), name="big",
                        op=fuseopt.Sum)
t_ops = time.time()
bench = int(os.environ.get("WORKER_BENCH", "0"))  # N more 1 MiB allreduces, timed
for i in range(bench):
    fuseopt.allreduce(np.full(1 << 18, 1.0, dtype=np.float32), name="bench", op=fuseopt.Sum)
t_bench = time.time()
result = {
    "rank": rank, "size": size, "local_rank": fuseopt.local_rank(),
    "local_size": fuseopt.local_size(), "cross_size": fuseopt.cross_size(),
    "x": np.asarray(x).tolist(), "big_ok": bool(np.all(np.asarray(big) == size * (size + 1) / 2)),
    "import_s": round(t_imported - t_start, 3), "init_s": round(t_init - t_imported, 3),
    "ops_s": round(t_ops - t_init, 3), "pid": os.getpid(),
    "bench_ms_per_allreduce": round((t_bench - t_ops) * 1e3 / bench, 2) if bench else None,
    "t_start": t_start, "t_init_begin": t_imported, "t_init_end": t_init,
}
fuseopt.shutdown()
if os.environ.get("WORKER_REINIT") == "1":  # same process, init again: same MPI world
    fuseopt.init()
    again = fuseopt.allreduce(np.ones(2) * (fuseopt.rank() + 1), name="again", op=fuseopt.Sum)
    result["reinit"] = [fuseopt.rank(), fuseopt.size(), np.asarray(again).tolist()]
    fuseopt.shutdown()
print("RESULT " + json.dumps(result), flush=True)
if os.environ.get("WORKER_RESULT_DIR"):  # mpiexec interleaves the ranks' stdout
    with open(os.path.join(os.environ["WORKER_RESULT_DIR"], "result-%d.json" % rank), "w") as f:
        json.dump(result, f)
