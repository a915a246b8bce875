"""Two emulated hosts of two ranks each (tests/emulated_hosts.py): ranks on
different hosts talk over a veth between network namespaces, not shared
memory, and fuseoptrun starts them through a remote-exec command as it would
through ssh."""
import os
import subprocess
import sys
import time

import pytest

import emulated_hosts

HERE = os.path.dirname(os.path.abspath(__file__))
ok, why = emulated_hosts.available()
pytestmark = pytest.mark.skipif(not ok, reason="cannot emulate hosts here: %s" % why)


@pytest.fixture(scope="module")
def hosts():
    with emulated_hosts.EmulatedHosts(2) as emu:
        yield emu


@pytest.fixture
def run_on_hosts(hosts, run_mpmd):
    """run_ranks for a job spread over the emulated hosts, 2 ranks each,
    fuseoptrun itself running on host 0."""
    def run(script, *args, **kwargs):
        wrap = hosts.prefix(0)
        # The emulated hosts share this machine's 2 cores, which fuseoptrun cannot
        # see: 4 busy-polling ranks would stall each other for seconds at a time
        # (the oversubscription trap), so turn MPICH's local polling off as
        # fuseoptrun does itself when one host has more ranks than cores.
        launcher = ("-H", hosts.host_list(2), "--remote-exec", hosts.shim,
                    "--network-interface", "eth0", "--nolocal", "on")
        return run_mpmd([(4, script) + args], launcher_args=launcher, command_prefix=wrap,
                        **kwargs)
    return run


def test_fuseoptrun_places_two_ranks_on_each_host_over_the_network(run_on_hosts, hosts):
    sent = hosts.link_bytes(1)[1]
    out = run_on_hosts("topology.py", 2, 2, timeout=120).output
    for r in range(4):
        assert "[rank %d] host %s local %d/2 cross %d/2" % (r, hosts.hosts[r // 2].name, r % 2,
                                                           r // 2) in out, out
    # A 16 MiB allreduce across hosts must have crossed host 1's veth.
    assert hosts.link_bytes(1)[1] - sent > 8 << 20


def test_collectives_across_hosts(run_on_hosts):
    run_on_hosts("collectives.py", timeout=300)


def test_hierarchical_allreduce_across_hosts_equals_flat(run_on_hosts):
    # The suite's data are small integers, exact in every dtype and summation
    # order: its exact expectations are the flat results. Two configurations:
    # the default threshold and 1 KiB (many small buckets).
    out = run_on_hosts("collectives.py", "default", 1024, timeout=360,
                       env={"FUSEOPT_HIERARCHICAL_ALLREDUCE": "1",
                            "FUSEOPT_LOG_LEVEL": "info"}).output
    assert out.count("hierarchical allreduce over 2 nodes of 2 ranks") == 8, out


def test_rank_killed_on_one_host_stops_the_job_on_both(run_on_hosts, hosts):
    started = time.time()
    r = run_on_hosts("lost_rank.py", "kill", 3, expect_ok=False, timeout=120)
    assert r.code != 0, r
    # Rank 2 shares rank 3's host. A rank whose TCP connection to rank 3 breaks
    # mid-exchange (rank 1, its partner across hosts) may instead be ended by
    # MPICH itself before it can report; the summary then lists it.
    assert "[rank 2] survivor ok" in r.output, r.output
    for rank in (0, 1):
        assert ("[rank %d] survivor ok" % rank in r.output or
                "rank %d: stopped by mpiexec after rank 3 failed" % rank in r.output), r.output
    assert "rank 3 (host %s" % hosts.hosts[1].name in r.output, r.output
    assert "rank 3 on %s failed first (signal SIGKILL" % hosts.hosts[1].name in r.output, r.output
    assert time.time() - started < 60


def test_torch_optimizer_equivalence_across_hosts(run_on_hosts):
    run_on_hosts("torch_training.py", "check_equivalence_sgd_momentum_and_adam",
                 "check_bucket_caps_change_timing_not_results", timeout=300)


def test_fuseoptrun_starts_open_mpi_on_both_hosts_through_the_same_remote_exec(hosts):
    """Open MPI's launcher, started by fuseoptrun with the same --remote-exec,
    starts its daemon on host 1 through it (Open MPI's plm_ssh_agent); the
    default install's core for Open MPI runs on both hosts, over eth0."""
    import other_mpis
    prefix = other_mpis.open_mpi()
    sent = hosts.link_bytes(1)[1]
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "workers"))
    env.pop("FUSEOPT_MPIEXEC", None)
    cmd = hosts.wrap([sys.executable, "-m", "fuseopt.launcher.cli",
                      "--mpiexec", os.path.join(prefix, "bin", "mpirun"), "-np", "4",
                      "-H", hosts.host_list(2), "--remote-exec", hosts.shim,
                      "--network-interface", "eth0", sys.executable,
                      os.path.join(HERE, "workers", "topology.py"), "2", "2"])
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    for r in range(4):
        assert "[rank %d] host %s local %d/2 cross %d/2" % (r, hosts.hosts[r // 2].name, r % 2,
                                                           r // 2) in out, out
    assert hosts.link_bytes(1)[1] - sent > 8 << 20


def test_the_network_benchmark_measures_the_link_and_refuses_an_unshaped_one(hosts):
    """benchmarks/network.py reads every figure against the link it measured
    (MPI's own exchange between the hosts) and stops when the rate it asked
    tbf for was not applied."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "benchmarks"))
    import network
    with pytest.raises(SystemExit, match="200mbit, measured .* the rate was not applied"):
        network.measure_link(hosts, "200mbit")  # nothing shaped yet: the veth's own speed
    try:
        hosts.shape("200mbit")
        got = network.measure_link(hosts, "200mbit")
    finally:
        hosts.unshape()
    assert 0.1 < got <= 0.21, got
