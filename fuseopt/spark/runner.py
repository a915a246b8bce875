"""``fuseopt.spark.run``: Horovod's ``horovod.spark.run`` over fuseopt.

Runs ``fn`` on ``num_proc`` ranks, one per Spark task of a barrier stage
(all tasks start together or none do), and returns the ranks' results in
rank order. The ranks are fresh processes that the tasks start (task.py);
they meet through a PMI server in this, the driver's, process
(fuseopt/runner/pmi_server.py) and form one MPI world: no mpirun, no ssh.
Their output comes back here, to ``stdout``/``stderr``, line by line.

A rank that fails fails its task; Spark then kills the stage's other
tasks, and their ranks die with them. ``run`` raises the failed rank's
exception (with a note naming the rank and holding its traceback), or a
RankFailedError naming a rank whose process died without one.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence
import itertools
import logging
import os
import pickle
import sys
import threading
import time

import cloudpickle

from ..base.errors import RankFailedError, UnsupportedError
from ..runner import consequence, raise_rank_error
from ..runner.outcome_channel import OutcomeListener, by_rank
from ..runner.pmi_server import PmiServer
from ..runner.rank_env import one_interface
from .task import RankTask, ending

log = logging.getLogger("fuseopt.spark")
START_TIMEOUT_ENV = "FUSEOPT_SPARK_START_TIMEOUT"
DEFAULT_START_TIMEOUT_S = 600.0  # Horovod's
_jobs = itertools.count(1)


def run(fn: Callable[..., Any], args: Sequence[Any] = (),
        kwargs: Dict[str, Any] = {},  # noqa: B006 (Horovod's default; copied, never changed)
        num_proc: Optional[int] = None, start_timeout: Optional[float] = None,
        use_mpi: Optional[bool] = None, use_gloo: Optional[bool] = None,
        extra_mpi_args: Optional[str] = None, env: Optional[Dict[str, str]] = None,
        stdout=None, stderr=None, verbose: int = 1, nics=None,
        prefix_output_with_timestamp: bool = False,
        executable: Optional[str] = None) -> List[Any]:
    """Runs ``fn(*args, **kwargs)`` on ``num_proc`` ranks (default: the
    context's default parallelism) in the active SparkContext; returns the
    list of their results, index = rank.

    ``start_timeout``: seconds for every rank to start MPI (default
    FUSEOPT_SPARK_START_TIMEOUT, else HOROVOD_SPARK_START_TIMEOUT, else 600).
    ``env``: variables added to the ranks' environment. ``stdout`` /
    ``stderr``: where the ranks' lines go (default sys.stdout / sys.stderr),
    each prefixed ``[rank]`` (and the time, with
    ``prefix_output_with_timestamp``). ``nics``: the one network interface
    MPI's data uses. ``executable``: the ranks' Python (default: the Spark
    worker's). ``use_gloo`` and ``extra_mpi_args`` are refused: there is no
    mpirun; give MPICH's settings as variables in ``env``."""
    if use_gloo:
        raise UnsupportedError("fuseopt.spark.run(use_gloo=True): fuseopt always runs over MPI")
    if extra_mpi_args:
        raise UnsupportedError("fuseopt.spark.run(extra_mpi_args=...): the ranks start without "
                               "mpirun; give MPICH's settings as MPIR_CVAR_* variables in env=")
    import pyspark
    context = pyspark.SparkContext._active_spark_context
    if context is None:
        raise RuntimeError("fuseopt.spark.run: no active SparkContext (start a SparkSession "
                           "first, or run this in a PySpark session)")
    size = int(num_proc or context.defaultParallelism)
    timeout = float(start_timeout or os.environ.get(START_TIMEOUT_ENV) or
                    os.environ.get("HOROVOD_SPARK_START_TIMEOUT") or DEFAULT_START_TIMEOUT_S)
    if verbose:
        log.info("fuseopt.spark.run: %d ranks", size)
    job = _SparkJob(context, size, timeout, _Printer(stdout, stderr, prefix_output_with_timestamp))
    try:
        payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
    except Exception as e:
        raise TypeError("fuseopt.spark.run: the function or its arguments cannot be pickled "
                        "(cloudpickle): %s" % e) from None
    return job.run(payload, dict(env or {}), executable, one_interface(nics))


class _Printer:
    def __init__(self, stdout, stderr, timestamps):
        self.streams = {"stdout": stdout or sys.stdout, "stderr": stderr or sys.stderr}
        self.timestamps = timestamps
        self.lock = threading.Lock()

    def line(self, rank, stream, text):
        stamp = time.strftime("%a %b %d %H:%M:%S %Y ") if self.timestamps else ""
        with self.lock:
            out = self.streams[stream]
            out.write("%s[%d]<%s>:%s\n" % (stamp, rank, stream, text))
            out.flush()


class _SparkJob:
    def __init__(self, context, size, timeout, printer):
        self.context, self.size, self.timeout, self.printer = context, size, timeout, printer
        self.group = "fuseopt.spark.run.%d.%d" % (os.getpid(), next(_jobs))
        self.messages: List[tuple] = []
        self.lock = threading.Condition()
        self.cancelled = False
        self.listener: Optional[OutcomeListener] = None

    def on_message(self, message):
        if message[0] == "out":
            return self.printer.line(message[1], message[2], message[3])
        with self.lock:
            self.messages.append(message)
            self.lock.notify_all()
        failed = message[0] == "error" or (message[0] == "exit" and message[2] != 0)
        if failed:
            self.cancel("rank %d failed" % message[1])

    def cancel(self, why):
        """The other ranks would wait for the failed one for ever: stop them,
        and the stage (no retry: its PMI world is gone)."""
        if not self.cancelled:
            self.cancelled = True
            log.info("fuseopt.spark.run: %s; stopping every rank", why)
            if self.listener is not None:
                self.listener.stop_ranks()
            self.context.cancelJobGroup(self.group)

    def run(self, payload, env, executable, interface):
        host = _driver_host(self.context)
        server = PmiServer(self.size, host=host, connect_timeout=self.timeout,
                           on_failure=lambda reason, kind: self.cancel(reason)).start()
        listener = self.listener = OutcomeListener(host, self.on_message)
        job = {"payload": payload, "pmi": [server.env(r) for r in range(self.size)],
               "outcomes": listener.address, "key": listener.key, "size": self.size,
               "env": env, "executable": executable, "interface": interface}
        failure: List[BaseException] = []
        spark = threading.Thread(target=self._stage, args=(RankTask(job), failure), daemon=True)
        try:
            spark.start()
            spark.join()
            # After a failure, the exit of a killed rank may trail the error of
            # the rank that lost it by seconds on a loaded machine; _results
            # names the rank that died on its own only if its exit is in.
            self._wait_for_exits(10.0 if failure else 30.0)
        finally:
            server.close()
            listener.close()
        return self._results(failure, server.failure)

    def _wait_for_exits(self, timeout):
        """Every task sends its rank's exit before it returns, but the
        listener's threads may still be handing it over when the job ends."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while sum(m[0] == "exit" for m in self.messages) < self.size:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.lock.wait(left)

    def _stage(self, task, failure):
        try:
            self.context.setJobGroup(self.group, "fuseopt.spark.run", interruptOnCancel=True)
            rdd = self.context.parallelize(range(self.size), self.size)
            rdd.barrier().mapPartitions(task).collect()
        except BaseException as e:
            failure.append(e)

    def _results(self, failure, pmi_failure):
        with self.lock:
            messages = list(self.messages)
        errors = {r: pickle.loads(p) for r, p in by_rank(messages, "error").items()}
        died = [m for m in messages if m[0] == "exit" and m[2] != 0]  # in order of arrival
        if errors and not (died and all(consequence(e) for e in errors.values())):
            raise_rank_error(errors, "fuseopt.spark.run")
        if died:
            # The first to die on its own failed. Neither a rank whose error is only the
            # loss of another nor one this driver stopped is to blame, though either
            # may exit before the lost rank's own exit reaches us.
            own = [m for m in died if not _stopped(m) and
                   (m[1] not in errors or not consequence(errors[m[1]]))]
            _, rank, code, host = (own or died)[0][:4]
            raise RankFailedError("fuseopt.spark.run: rank %d of %d (on %s) ended with %s "
                                  "before returning a result; the other ranks were stopped"
                                  % (rank, self.size, host, ending(code)))
        results = {r: pickle.loads(p) for r, p in by_rank(messages, "result").items()}
        if failure or len(results) < self.size:
            why = failure[0] if failure else "ranks %s returned nothing" % sorted(
                set(range(self.size)) - set(results))
            raise RuntimeError("fuseopt.spark.run: the Spark job failed%s: %s" % (
                " (%s)" % pmi_failure if pmi_failure else "", str(why).strip()[:2000]))
        return [results[r]["value"] for r in range(self.size)]


def _stopped(exit_message) -> bool:
    return len(exit_message) > 4 and bool(exit_message[4])


def _driver_host(context):
    """An address of this process that the executors reach."""
    if context.master.startswith("local"):
        return "127.0.0.1"
    return context.getConf().get("spark.driver.host") or "127.0.0.1"
