"""The rank side of fuseopt.run: ``python -m fuseopt.runner.task JOB_DIR``.

Loads the function and its arguments that the caller pickled into JOB_DIR,
calls it, and leaves ``result.<rank>`` (the return value) or
``error.<rank>`` (the exception, its type, message and traceback) there for
the caller, which reads them after the job ends. Files are written whole and
then renamed, so the caller never reads half of one."""
import os
import pickle
import sys
import time
import traceback

import cloudpickle

from ..base.launch_records import env_rank, env_size

FUNCTION_FILE = "function.pkl"


def write_outcome(job_dir, kind, rank, payload):
    """``kind`` is "result" or "error"; ``payload`` a dict, pickled."""
    path = os.path.join(job_dir, "%s.%d" % (kind, rank))
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        cloudpickle.dump(payload, f)
    os.replace(tmp, path)


def _exception_bytes(error):
    """The exception pickled, or None if it cannot be (the caller then gets
    its type name, message and traceback as text)."""
    try:
        data = cloudpickle.dumps(error)
        pickle.loads(data)
        return data
    except Exception:
        return None


def main(job_dir):
    rank, size = env_rank(), env_size()
    with open(os.path.join(job_dir, FUNCTION_FILE), "rb") as f:
        func, args, kwargs = pickle.load(f)
    stamp = {"rank": rank, "size": size, "time": time.time()}
    try:
        value = func(*args, **kwargs)
    except BaseException as e:
        write_outcome(job_dir, "error", rank, dict(
            stamp, type="%s.%s" % (type(e).__module__, type(e).__qualname__), message=str(e),
            traceback="".join(traceback.format_exception(e)), exception=_exception_bytes(e)))
        raise
    try:
        write_outcome(job_dir, "result", rank, dict(stamp, value=value))
    except Exception as e:  # the value cannot travel back: say so, as the rank's error
        error = TypeError("fuseopt.run: rank %d returned a %s, which cannot be pickled: %s"
                          % (rank, type(value).__name__, e))
        write_outcome(job_dir, "error", rank, dict(
            stamp, type="builtins.TypeError", message=str(error), traceback="",
            exception=_exception_bytes(error)))
        raise error from None


if __name__ == "__main__":
    main(sys.argv[1])
