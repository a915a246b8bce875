"""Slurm's compressed node lists and task counts (fuseopt/launcher/slurm.py)."""
import pytest

from fuseopt.launcher import slurm
from fuseopt.launcher.hosts import HostError


@pytest.mark.parametrize("text, hosts", [
    ("vm", ["vm"]),
    ("a,b", ["a", "b"]),
    ("node[01-03,7]", ["node01", "node02", "node03", "node7"]),
    ("gpu[8-10],cpu1", ["gpu8", "gpu9", "gpu10", "cpu1"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("n[009-011].site", ["n009.site", "n010.site", "n011.site"]),
])
def test_node_lists_expand_in_slurms_order(text, hosts):
    assert slurm.expand_nodelist(text) == hosts


@pytest.mark.parametrize("text", ["", "a[1-", "a]", "a[3-1]", "a[x]", "a[1-b]"])
def test_bad_node_lists_are_refused(text):
    with pytest.raises(HostError, match="SLURM_JOB_NODELIST"):
        slurm.expand_nodelist(text)


def test_task_counts_expand_repeats():
    assert slurm.expand_counts("2(x3),1") == [2, 2, 2, 1]
    assert slurm.expand_counts("4") == [4]
    for bad in ("2(x3", "x", "2(xa)"):
        with pytest.raises(HostError):
            slurm.expand_counts(bad)


def test_allocation_gives_hosts_and_slots():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "2(x2),1"}
    assert slurm.in_allocation(env)
    assert slurm.hosts(env) == [("n1", 2), ("n2", 2), ("n3", 1)]
    # No task count asked for: the CPUs per node are the slots.
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_CPUS_PER_NODE": "8"}
    assert slurm.hosts(env) == [("n1", 8)]
    with pytest.raises(HostError, match="2 counts for the 3 nodes"):
        slurm.hosts({"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "1(x2)"})
    assert not slurm.in_allocation({})
