"""horovodrun's flags on fuseoptrun (no processes started: --dry-run)."""
import pytest

from dry_run import given_environment
from fuseopt.launcher import cli


def _genv(argv, capsys, monkeypatch=None):
    assert cli.run(["--dry-run"] + argv + ["python", "t.py"]) == 0
    cmd = capsys.readouterr().out.split()
    return cmd, given_environment(cmd)


def test_on_off_flags_take_no_value(capsys):
    """--autotune used to swallow the next word ('python') as its value."""
    cmd, genv = _genv(["-np", "2", "--autotune", "--hierarchical-allreduce"], capsys)
    assert genv["FUSEOPT_AUTOTUNE"] == "1" and genv["FUSEOPT_HIERARCHICAL_ALLREDUCE"] == "1"
    assert cmd[-2:] == ["python", "t.py"]
    _, genv = _genv(["--autotune", "--no-autotune"], capsys)
    assert genv["FUSEOPT_AUTOTUNE"] == "0"


def test_horovodrun_spellings_set_the_same_knobs(capsys):
    _, genv = _genv(["--stall-check-warning-time-seconds", "20",
                     "--stall-check-shutdown-time-seconds", "90", "--start-timeout", "40",
                     "--autotune-log-file", "a.csv", "--log-level", "FATAL",
                     "--cache-capacity", "32"], capsys)
    assert genv["FUSEOPT_STALL_CHECK_S"] == "20" and genv["FUSEOPT_STALL_SHUTDOWN_S"] == "90"
    assert genv["FUSEOPT_INIT_TIMEOUT_S"] == "40" and genv["FUSEOPT_AUTOTUNE_LOG"] == "a.csv"
    assert genv["FUSEOPT_LOG_LEVEL"] == "FATAL" and genv["FUSEOPT_CACHE_CAPACITY"] == "32"
    _, genv = _genv(["--stall-check-time-seconds", "5", "--no-stall-check"], capsys)
    assert genv["FUSEOPT_STALL_CHECK_S"] == "0"


def test_ssh_output_and_interface_flags(capsys, tmp_path):
    cmd, _ = _genv(["-H", "a:1,b:1", "-np", "2", "-p", "2222", "-i", "/k/id",
                    "--network-interfaces", "eth1", "--output-filename", str(tmp_path)], capsys)
    line = " ".join(cmd)
    # Hydra runs -launcher-exec as one file: a script holds the arguments.
    assert "-launcher ssh -launcher-exec FUSEOPT_LAUNCH_DIR/remote-exec" in line
    assert "-iface eth1" in line
    assert "-outfile-pattern %s/rank.%%r/stdout" % tmp_path in line
    assert "-errfile-pattern %s/rank.%%r/stderr" % tmp_path in line


def test_remote_exec_with_arguments_becomes_a_script(tmp_path):
    program = cli._one_program("ssh -p 2222 -i '/k/my id'", str(tmp_path), dry_run=False)
    assert open(program).read() == "#!/bin/sh\nexec ssh -p 2222 -i '/k/my id' \"$@\"\n"
    assert cli._one_program("/usr/bin/rsh", str(tmp_path), dry_run=False) == "/usr/bin/rsh"


def test_horovod_variables_are_forwarded_as_fuseopt_knobs(capsys, monkeypatch):
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "1048576")
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "2")
    _, genv = _genv(["--cycle-time-ms", "7"], capsys)  # a flag beats the variable
    assert genv["FUSEOPT_FUSION_THRESHOLD"] == "1048576"
    assert genv["FUSEOPT_CYCLE_TIME_MS"] == "7"


def test_slurm_allocation_gives_hosts_np_and_srun_launcher(capsys, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "2(x2)")
    cmd, _ = _genv([], capsys)
    line = " ".join(cmd)
    assert "-hosts n1:2,n2:2 -launcher slurm" in line and " -n 4 " in line
    cmd, _ = _genv(["-np", "2", "-H", "x:2"], capsys)  # -H wins over the allocation
    assert "-hosts x:2" in " ".join(cmd) and "slurm" not in " ".join(cmd)


def test_check_build_lists_what_this_install_has(capsys):
    assert cli.run(["--check-build"]) == 0
    out = capsys.readouterr().out
    assert "[X] PyTorch" in out and "[X] MPI" in out and "[ ] Gloo" in out


@pytest.mark.parametrize("argv, message", [
    (["--torus-allreduce"], "--torus-allreduce: fuseopt has no torus allreduce"),
    (["--gloo"], "always launches with MPI"),
    (["--blacklist-cooldown-range", "1"], "no cooldown"),
    (["--thread-affinity", "1"], "does not pin"),
    (["--cycle-time-ms", "fast"], "cannot read 'fast' as a cycle_time_ms value"),
    (["--autotune", "1"], None),  # '1' is the command now, so this one runs
    (["-np", "0"], "-np must be at least 1"),
    (["--network-interfaces", "eth0,eth1"], "takes one interface"),
])
def test_refused_flags_and_bad_values_are_usage_errors(argv, message, capsys):
    if message is None:
        assert cli.run(["--dry-run"] + argv) == 0
        assert capsys.readouterr().out.split()[-1] == "1"
        return
    with pytest.raises(cli.UsageError, match=message):
        cli.run(["--dry-run"] + argv + ["python", "t.py"])


def test_elastic_flags_start_the_first_job_on_discovered_hosts(capsys):
    assert cli.run(["--dry-run", "-np", "2", "--min-np", "2", "--max-np", "4",
                    "--host-discovery-script", "printf 'a:2\\nb:2\\n'", "python", "t.py"]) == 0
    line = capsys.readouterr().out
    assert "-hosts a:2 " in line and " -n 2 " in line and "FUSEOPT_ELASTIC_DIR" in line
    with pytest.raises(cli.UsageError, match="no ':' MPMD parts"):
        cli.run(["--dry-run", "--min-np", "1", "python", "a.py", ":", "-np", "1", "python", "b.py"])
    with pytest.raises(cli._hosts.HostError, match="more than --max-np"):
        cli.run(["--dry-run", "--min-np", "3", "--max-np", "2", "python", "t.py"])


def test_notices_are_printed_once_per_job_not_per_elastic_launch(capsys, monkeypatch):
    monkeypatch.setattr(cli, "_noticed", set())
    args = cli.build_parser().parse_args(["--mpi", "-np", "2", "python", "t.py"])
    for _ in range(3):  # an elastic job launches again after every reset
        cli._checked_environment(args, 2, [("localhost", 2)])
    err = capsys.readouterr().err
    assert err.count("--mpi: fuseoptrun always launches with MPI") == 1, err
