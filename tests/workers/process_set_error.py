"""Rank 1 raises while building its process sets (before init); rank 0 is in
init(process_sets=...) and must get RankFailedError naming rank 1 from the
launcher, not wait for the init timeout (tests/test_process_sets.py)."""
import os

import fuseopt

if int(os.environ["PMI_RANK"]) == 1:
    fuseopt.ProcessSet(5)  # not an iterable of ranks: InvalidArgumentError, the process exits
try:
    fuseopt.init(process_sets=[fuseopt.ProcessSet([0])])
except fuseopt.RankFailedError as e:
    print("rank 0 got: %s" % e, flush=True)
    raise SystemExit(3)
