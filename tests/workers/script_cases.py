"""What the user-script drivers (run_driver.py, ray_driver.py,
spark_driver.py) share: reporting a case to the parent test, and waiting
for processes to be gone."""
import os
import time


def report(case, value):
    """One ``CASE name: value`` line (tests/conftest.py's drive() reads it)."""
    print("CASE %s: %r" % (case, value), flush=True)


def alive(pids, wait_s=10.0):
    """The pids still running after up to ``wait_s`` seconds."""
    deadline = time.time() + wait_s
    while True:
        left = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                left.append(pid)
            except ProcessLookupError:
                pass
        if not left or time.time() > deadline:
            return left
        time.sleep(0.2)
