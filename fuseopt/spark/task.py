"""The Spark task's side of ``fuseopt.spark.run``: one barrier task per rank,
each starting the rank as a fresh process.

Fresh, because Spark reuses its Python workers and MPI starts only once per
process: the rank is ``python -m fuseopt.runner.task`` in a private
directory, with the PMI server's address in its environment. It dies with
the task (PR_SET_PDEATHSIG), so when Spark kills a barrier stage's tasks
after one failed, their ranks go too. The task forwards the rank's output
lines and, when it ends, its result or error to the driver
(fuseopt/runner/outcome_channel.py); a rank that did not succeed fails the
task, and with it the barrier stage.

``get_available_devices()`` (Horovod's ``horovod.spark.task``) is called
in the rank: the GPU addresses Spark gave its task.
"""
from __future__ import annotations

from typing import List
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

from ..runner.outcome_channel import OutcomeSender
from ..runner.rank_env import oversubscribed, rank_environment
from ..runner.task import FUNCTION_FILE

DEVICES_ENV = "FUSEOPT_SPARK_TASK_GPUS"
_PR_SET_PDEATHSIG = 1


def get_available_devices() -> List[str]:
    """The GPU addresses Spark assigned to this rank's task (empty without
    GPU scheduling)."""
    value = os.environ.get(DEVICES_ENV, "")
    return [d for d in value.split(",") if d]


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _forward(stream, name, sender, rank):
    for line in iter(stream.readline, ""):
        sender.send("out", rank, name, line.rstrip("\n"))


class RankTask:
    """What each barrier task runs (pickled into the Spark job)."""

    def __init__(self, job: dict):
        self.job = job  # payload, pmi, outcomes, key, size, env, executable, interface

    def __call__(self, _partition):
        from pyspark import BarrierTaskContext
        context = BarrierTaskContext.get()
        rank = context.partitionId()
        # Every task learns every host and core count (a barrier too: all run).
        placed = [m.split(" ") for m in context.allGather("%s %d" % (socket.gethostname(),
                                                                     os.cpu_count() or 1))]
        crowded = oversubscribed([h for h, _ in placed], {h: int(n) for h, n in placed})
        gpus = context.resources().get("gpu")
        sender = OutcomeSender(tuple(self.job["outcomes"]), self.job["key"])
        try:
            code = self._run_rank(rank, crowded, gpus.addresses if gpus else [], sender)
        finally:
            sender.close()
        if code != 0:
            raise RuntimeError("fuseopt.spark.run: rank %d's process on %s ended with %s"
                               % (rank, socket.gethostname(), ending(code)))
        return iter([rank])

    def _run_rank(self, rank, crowded, gpus, sender):
        job = self.job
        job_dir = tempfile.mkdtemp(prefix="fuseopt-spark-")
        try:
            with open(os.path.join(job_dir, FUNCTION_FILE), "wb") as f:
                f.write(job["payload"])
            env = rank_environment({**os.environ, **job["env"]}, job["pmi"][rank], rank,
                                   job["size"], crowded, job["interface"])
            env[DEVICES_ENV] = ",".join(gpus)
            # The task's imports (the user's modules, Spark's py-files) stay importable.
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
            proc = subprocess.Popen(
                [job["executable"] or sys.executable, "-m", "fuseopt.runner.task", job_dir],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                errors="replace", preexec_fn=_die_with_parent)
            stopped = threading.Event()

            def stop():  # the job failed elsewhere, or the driver is gone
                if proc.poll() is None:  # still running: ended by us, not by itself
                    stopped.set()
                    proc.kill()
            sender.watch(stop)
            readers = [threading.Thread(target=_forward, args=(s, n, sender, rank))
                       for s, n in ((proc.stdout, "stdout"), (proc.stderr, "stderr"))]
            for reader in readers:
                reader.start()
            code = proc.wait()
            for reader in readers:
                reader.join()
            self._report(job_dir, rank, code, stopped.is_set(), sender)
            return code
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)

    @staticmethod
    def _report(job_dir, rank, code, stopped, sender):
        for kind in ("result", "error"):
            path = os.path.join(job_dir, "%s.%d" % (kind, rank))
            if os.path.exists(path):  # unpickled by the driver, which has the classes
                with open(path, "rb") as f:
                    sender.send(kind, rank, f.read())
        sender.send("exit", rank, code, socket.gethostname(), stopped)


def ending(code):
    """A process's return code in words."""
    return "signal %d" % -code if code < 0 else "exit code %d" % code
