"""A user's script calling fuseopt.spark.run on a local Spark (``local[2]``,
Java from Debian's openjdk-17-jre-headless), not a rank: tests/test_spark.py
runs it with plain python, once, and checks its ``CASE name: value`` lines."""
import io
import os
import signal
import sys
import time

import numpy as np

import fuseopt
from script_cases import alive, report
import fuseopt.spark




def collectives(scale, offset=0):
    from fuseopt.spark import get_available_devices
    fuseopt.init()
    rank = fuseopt.rank()
    total = fuseopt.allreduce(np.array([rank + 1.0]) * scale, name="spark.sum", op=fuseopt.Sum)
    print("rank %d says hello" % rank)
    return (rank, fuseopt.size(), float(total[0]) + offset, os.environ.get("SPARK_CASE"),
            get_available_devices(), os.getpid())


def case_api():
    out = io.StringIO()
    first = fuseopt.spark.run(collectives, args=(2.0,), kwargs={"offset": 1},
                              env={"SPARK_CASE": "api"}, stdout=out)
    report("run", [r[:5] for r in first])
    report("output", sorted(line for line in out.getvalue().splitlines() if "hello" in line))
    second = fuseopt.spark.run(collectives, args=(1.0,), num_proc=2)
    report("run again", [r[:4] for r in second])
    report("fresh processes", not {r[5] for r in first} & {r[5] for r in second})
    report("ranks left", alive([r[5] for r in first + second]))


def training():
    import run_train
    return run_train.train()


def case_training():
    report("training", fuseopt.spark.run(training, num_proc=2))


class RankError(Exception):
    """Defined in __main__: travels back by value."""


def fails_on_rank_one():
    fuseopt.init()
    print("pid %d" % os.getpid())
    if fuseopt.rank() == 1:
        raise RankError("rank one gives up")
    fuseopt.allreduce(np.ones(2), name="spark.never")  # rank 0 waits here for ever


def killed_on_rank_one():
    fuseopt.init()
    print("pid %d" % os.getpid(), flush=True)
    fuseopt.allreduce(np.ones(2), name="spark.first")
    if fuseopt.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    fuseopt.allreduce(np.ones(2), name="spark.never")


def failing(fn):
    out = io.StringIO()
    started = time.time()
    try:
        fuseopt.spark.run(fn, num_proc=2, stdout=out)
        error = None
    except BaseException as e:
        error = e
    pids = [int(line.split("pid ")[1]) for line in out.getvalue().splitlines() if "pid " in line]
    return error, time.time() - started, alive(pids), len(pids)


def case_failures():
    error, took, left, seen = failing(fails_on_rank_one)
    report("rank error", (type(error).__name__, str(error), error.__notes__[0].split(";")[0]))
    report("rank error after", (left, seen, took < 60))
    error, took, left, seen = failing(killed_on_rank_one)
    report("killed", (type(error).__name__, str(error).split(" (")[0]))
    report("killed after", (left, seen, took < 60))
    lock = __import__("threading").Lock()
    for name, call in (("unpicklable", lambda: fuseopt.spark.run(print, args=(lock,))),
                       ("gloo", lambda: fuseopt.spark.run(print, use_gloo=True)),
                       ("mpi args", lambda: fuseopt.spark.run(print, extra_mpi_args="-v")),
                       ("elastic", lambda: fuseopt.spark.run_elastic(print))):
        try:
            call()
        except Exception as e:
            report("refused " + name, (type(e).__name__, str(e)[:70]))
    report("after failures", [r[:3] for r in fuseopt.spark.run(collectives, args=(1.0,))])


def executor_of_rank(scale):
    rank, size, total = collectives(scale)[:3]
    return rank, size, total, os.environ.get("SPARK_EXECUTOR_DIRS")


def case_cluster():
    """Spark's local-cluster mode: a standalone master and two worker JVMs of
    one core each on this machine, so the ranks run in separate executors and
    find the driver at spark.driver.host (not 127.0.0.1)."""
    results = fuseopt.spark.run(executor_of_rank, args=(1.0,), num_proc=2)
    report("cluster", [r[:3] for r in results])
    report("cluster executors", len({r[3] for r in results if r[3]}))


def session(master):
    from pyspark.sql import SparkSession
    # A barrier stage submitted before the executors have registered waits
    # for this interval (15 s by default) before Spark looks for slots again.
    spark = (SparkSession.builder.master(master).config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


if __name__ == "__main__":
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers' Python: this venv's
    try:
        fuseopt.spark.run(print)
    except RuntimeError as e:
        report("no context", "SparkContext" in str(e))
    spark = session("local[2]")
    for name in sys.argv[1:]:
        if name != "cluster":
            globals()["case_" + name]()
    spark.stop()
    if "cluster" in sys.argv[1:]:
        spark = session("local-cluster[2,1,1024]")
        case_cluster()
        spark.stop()
