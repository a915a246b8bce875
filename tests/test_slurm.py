"""Real Slurm: a one-node cluster on localhost runs 2-rank jobs both ways.

1. ``sbatch`` a script that calls plain ``fuseoptrun CMD`` (no -np, no -H):
   the launcher takes hosts and task count from the allocation and Hydra
   starts its proxy with ``srun`` (the ranks find themselves in a Slurm step).
2. ``srun --mpi=pmi2 python CMD``: Slurm starts the ranks and the mpich
   wheel initialises through Slurm's PMI-2.
3. ``srun`` with no PMI (``--mpi=none``, Slurm's default) must not train two
   independent copies that each think they are rank 0: init() refuses.

The daemons come from Debian's packages (tests/install_system_packages.sh,
run by the README's test command). Without them this test fails rather than
skip: CI must run it.
"""
import os
import re
import sys

import pytest

from conftest import WORKERS
from slurm_cluster import SlurmCluster, missing_programs

PROBE = os.path.join(WORKERS, "launch_probe.py")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    missing = missing_programs()
    if missing:
        pytest.fail("Slurm is not installed (missing %s): run 'sh tests/install_system_packages.sh'"
                    " as root first (the README's test command does)" % ", ".join(missing))
    if os.geteuid() != 0:
        pytest.fail("the test Slurm cluster's slurmd must run as root (CI does)")
    c = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    c.env["PYTHONPATH"] = WORKERS + os.pathsep + c.env.get("PYTHONPATH", "")
    c.env.pop("FUSEOPT_MPIEXEC", None)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_sbatch_with_plain_fuseoptrun_takes_the_allocation(cluster, tmp_path):
    script = tmp_path / "job.sh"
    out = tmp_path / "out.txt"
    script.write_text("#!/bin/sh\nexec %s -m fuseopt.launcher.cli %s %s size 2 sbatch\n"
                      % (sys.executable, sys.executable, PROBE))
    p = cluster.run("sbatch", "-n", "2", "-W", "-o", str(out), str(script))
    output = out.read_text() if out.exists() else ""
    assert p.returncode == 0, (p.stdout, p.stderr, output, cluster.logs())
    # Matched, not split into lines: srun forwards each task's output in
    # chunks, so two ranks' lines can arrive interleaved in the one file.
    reports = sorted(re.findall(r"rank (\d) of 2 ok \(sbatch\) slurm step (\d+|-)", output))
    # A step id: Hydra's proxy was started by srun, not by fork or ssh.
    assert [r[0] for r in reports] == ["0", "1"], output
    assert all(r[1].isdigit() for r in reports), output


def test_srun_with_pmi2_runs_one_world(cluster):
    p = cluster.run("srun", "-n", "2", "--mpi=pmi2", sys.executable, PROBE, "size", "2", "srun")
    assert p.returncode == 0, (p.stdout, p.stderr, cluster.logs())
    assert sorted(re.findall(r"rank (\d) of 2 ok \(srun\)", p.stdout)) == ["0", "1"], p.stdout


def test_srun_without_pmi_is_refused_on_every_task(cluster):
    p = cluster.run("srun", "-n", "2", "--mpi=none", sys.executable, PROBE, "size", "2")
    assert p.returncode != 0, p
    assert p.stderr.count("srun started 2 tasks, but MPI initialised each as a world of 1") == 2, \
        p.stderr
    assert "--mpi=pmi2" in p.stderr and " ok " not in p.stdout
