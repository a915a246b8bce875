"""Behaviours fuseoptrun must handle. Usage: launch_probe.py MODE [ARG]

  size N       init fuseopt, check size() == N and a sum over all ranks
  fail R CODE  rank R exits with CODE; the others wait in a collective
  sleep DIR    write this rank's pid into DIR, then sleep (to be signalled)
  env          print FUSEOPT_*, MPIR_CVAR_NOLOCAL, the interface variables and
               torchrun's variables as this rank sees them
  argv NAME..  print which of these variables' values appear in any
               process's command line on this machine (/proc/*/cmdline)
"""
import os
import sys
import time

mode = sys.argv[1]
rank = int(os.environ.get("PMI_RANK", "0"))

if mode == "env":
    for k in sorted(os.environ):
        if (k.startswith(("FUSEOPT_", "MPIR_CVAR_NOLOCAL", "UCX_NET_DEVICES", "FI_TCP_IFACE"))
                and k != "FUSEOPT_LAUNCH_DIR") or \
                k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMP_NUM_THREADS"):
            print("rank%d %s=%s" % (rank, k, os.environ[k]))
elif mode == "argv":
    values = {name: os.environ.get(name) for name in sys.argv[2:]}
    assert all(values.values()), values  # the rank got them
    seen = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmdline = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        seen.update(name for name, value in values.items() if value in cmdline)
    print("rank%d values in some argv: %s" % (rank, sorted(seen) or "none"))
elif mode == "sleep":
    # Written whole, then renamed: the test reads the pid as soon as the file exists.
    path = os.path.join(sys.argv[2], "pid.%d" % rank)
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(path + ".tmp", path)
    time.sleep(120)
else:
    import numpy as np

    import fuseopt
    fuseopt.init()
    if mode == "size":
        assert fuseopt.size() == int(sys.argv[2]), fuseopt.size()
        assert fuseopt.rank() == rank
        total = fuseopt.allreduce(np.array([fuseopt.rank()], np.int64), name="r", op=fuseopt.Sum)
        n = fuseopt.size()
        assert total[0] == n * (n - 1) // 2, total
        print("rank %d of %d ok (%s) slurm step %s" % (
            fuseopt.rank(), n, sys.argv[3] if len(sys.argv) > 3 else "",
            os.environ.get("SLURM_STEP_ID", "-")))
    elif mode == "fail":
        if fuseopt.rank() == int(sys.argv[2]):
            time.sleep(0.3)
            sys.exit(int(sys.argv[3]))
        fuseopt.allreduce(np.ones(1), name="never")  # blocks until the job is torn down
    fuseopt.shutdown()
