"""The loop thread must not spin: CPU used by an idle, initialized rank."""
import sys
import time

import numpy as np

import fuseopt
import rank_harness as harness


def check_idle_loop_does_not_spin():
    fuseopt.allreduce(np.ones(4, np.float32), name="warm")  # rounds have run
    fuseopt.barrier()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(3.0)
    share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    print("[rank %d] idle CPU: %.2f%% of one core" % (fuseopt.rank(), 100 * share), flush=True)
    # A spinning loop would show ~100%; the benchmark reports the real figure
    # (well under 1%). The bound is loose because this machine is noisy.
    assert share < float(sys.argv[1]), share


if __name__ == "__main__":
    harness.run([check_idle_loop_does_not_spin])
