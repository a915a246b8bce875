"""Rank 1 never submits a tensor that rank 0 waits for, but stays alive.

Run with FUSEOPT_STALL_CHECK_S=1 and FUSEOPT_STALL_SHUTDOWN_S=3: a warning must
name the tensor and rank 1, then every rank must stop with RankFailedError."""
import sys
import time

import numpy as np

import fuseopt

SURVIVOR_EXIT = 3


def main():
    fuseopt.init()
    rank = fuseopt.rank()
    started = time.time()
    try:
        if rank == 1:
            time.sleep(6)  # busy elsewhere, alive: the stall limit (3 s) passes meanwhile
        fuseopt.allreduce(np.ones(4, np.float32), name="stalled.tensor")
    except fuseopt.RankFailedError as e:
        print("[rank %d] RankFailedError after %.1f s: %s" % (rank, time.time() - started, e),
              flush=True)
        sys.exit(SURVIVOR_EXIT)
    raise AssertionError("nothing failed")


if __name__ == "__main__":
    main()
