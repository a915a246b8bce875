"""fuseoptrun: argument handling (no processes) and real launches."""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import WORKERS
from unit.dry_run import given_environment
from fuseopt.launcher import cli, hosts

PROBE = os.path.join(WORKERS, "launch_probe.py")


def test_host_lists_and_hostfiles(tmp_path):
    assert hosts.parse_host_list("a:2,b,c:4") == [("a", 2), ("b", 1), ("c", 4)]
    f = tmp_path / "hosts"
    f.write_text("# cluster\nnode1 slots=4\nnode2:2\nnode3\n\n")
    assert hosts.parse_hostfile(str(f)) == [("node1", 4), ("node2", 2), ("node3", 1)]
    assert hosts.ranks_per_host([("a", 2), ("b", 2)], 6) == {"a": 4, "b": 2}


@pytest.mark.parametrize("name", ["-oProxyCommand=touch${IFS}/tmp/x", "-p2222", ".hidden",
                                  "a b", "h\x00"])
def test_host_names_that_ssh_would_read_as_options_are_refused(tmp_path, name):
    """Issue 48, finding 7: a host name starting with '-' reached ssh as an option."""
    with pytest.raises(hosts.HostError, match="is not a host name"):
        hosts.parse_host_list(name + ":1")
    f = tmp_path / "hosts"
    f.write_text("node1\n%s slots=2\n" % name.split()[0])
    if " " not in name:
        with pytest.raises(hosts.HostError, match="line 2: .* is not a host name"):
            hosts.parse_hostfile(str(f))


def test_oversubscription_is_detected_only_for_this_machine():
    assert hosts.local_oversubscribed([], 3, cores=2)
    assert not hosts.local_oversubscribed([], 2, cores=2)
    assert hosts.local_oversubscribed([("localhost", 4)], 4, cores=2)
    assert not hosts.local_oversubscribed([("far-away-node", 8)], 8, cores=2)


def _dry_run(argv, capsys):
    assert cli.run(["--dry-run"] + argv) == 0
    return capsys.readouterr().out.split()


def test_dry_run_builds_mpmd_command_with_settings(capsys, monkeypatch):
    monkeypatch.setenv("FUSEOPT_LOG_LEVEL", "debug")
    cmd = _dry_run(["-np", "2", "-H", "h1:1,h2:1", "--fusion-threshold-mb", "2",
                    "--cycle-time-ms", "0.5", "python", "a.py", "--lr", "1",
                    ":", "-np", "1", "python", "b.py"], capsys)
    assert cmd[cmd.index("-hosts") + 1] == "h1:1,h2:1"
    genv = given_environment(cmd)
    assert genv["FUSEOPT_FUSION_THRESHOLD"] == str(2 << 20)
    assert genv["FUSEOPT_CYCLE_TIME_MS"] == "0.5"
    assert genv["FUSEOPT_LOG_LEVEL"] == "debug"
    assert "MPIR_CVAR_NOLOCAL" not in genv  # remote hosts: not ours to judge
    assert cmd.count(":") == 1
    first, second = " ".join(cmd).split(" : ")
    assert "-n 2" in first and "a.py --lr 1" in first
    assert "-n 1" in second and second.endswith("b.py")


def test_nolocal_set_when_ranks_exceed_cores(capsys):
    cores = os.cpu_count()
    cmd = _dry_run(["-np", str(cores + 1), "python", "x.py"], capsys)
    assert given_environment(cmd)["MPIR_CVAR_NOLOCAL"] == "1"
    cmd = _dry_run(["-np", "1", "python", "x.py"], capsys)
    assert "MPIR_CVAR_NOLOCAL" not in given_environment(cmd)
    cmd = _dry_run(["-np", "1", "--nolocal", "on", "python", "x.py"], capsys)
    assert given_environment(cmd)["MPIR_CVAR_NOLOCAL"] == "1"


def test_settings_reach_every_rank(run_ranks):
    r = run_ranks(2, "launch_probe.py", "env", launcher_args=["--stall-check-s", "7"],
                  env={"FUSEOPT_CACHE_CAPACITY": "64"})
    for rank in (0, 1):
        assert "rank%d FUSEOPT_STALL_CHECK_S=7" % rank in r.output
        assert "rank%d FUSEOPT_CACHE_CAPACITY=64" % rank in r.output


def test_no_setting_or_export_is_in_any_process_argv(run_ranks):
    """Issue 48, finding 5: -genv NAME VALUE put every FUSEOPT_* value and
    every -x export in mpiexec's argv, which every local user can read."""
    token = "t0ken-%s" % os.urandom(6).hex()
    r = run_ranks(2, "launch_probe.py", "argv", "FUSEOPT_STALL_CHECK_S", "MY_TOKEN",
                  "FUSEOPT_LAUNCH_DIR", launcher_args=["-x", "MY_TOKEN", "--verbose"],
                  env={"MY_TOKEN": token, "FUSEOPT_STALL_CHECK_S": "614321"})
    for rank in (0, 1):
        assert "rank%d values in some argv: none" % rank in r.output, r.output
    assert token not in r.output  # --verbose shows the names only


def test_every_rank_gets_torchruns_variables(run_ranks, tmp_path):
    """RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE as torchrun sets them,
    and OMP_NUM_THREADS = this host's cores / its ranks unless already set.
    Each rank's lines are read from its own file (--output-filename): in the
    job's shared output, mpiexec may splice one rank's line into another's."""
    from fuseopt.launcher import rank_env

    def lines_of(setting, where):
        run_ranks(2, "launch_probe.py", "env", env={"OMP_NUM_THREADS": setting},
                  launcher_args=["--output-filename", str(where)])
        return [(where / ("rank.%d" % rank) / "stdout").read_text().splitlines()
                for rank in (0, 1)]

    threads = max(1, rank_env.usable_cpus() // 2)
    for rank, lines in enumerate(lines_of("", tmp_path / "unset")):  # "" is unset
        for line in ("RANK=%d" % rank, "LOCAL_RANK=%d" % rank, "WORLD_SIZE=2",
                     "LOCAL_WORLD_SIZE=2", "OMP_NUM_THREADS=%d" % threads):
            assert "rank%d %s" % (rank, line) in lines, (line, lines)
    for rank, lines in enumerate(lines_of("3", tmp_path / "set")):
        assert "rank%d OMP_NUM_THREADS=3" % rank in lines, lines


def test_four_ranks_on_two_cores_get_nolocal(run_ranks):
    # Four ranks here: NOLOCAL on every rank where they outnumber the cores
    # (2 on this project's machines), on none where they do not.
    r = run_ranks(4, "launch_probe.py", "env")
    expected = 4 if (os.cpu_count() or 1) < 4 else 0
    assert r.output.count("MPIR_CVAR_NOLOCAL=1") == expected, r.output


def test_mpmd_job_is_one_world():
    cmd = [sys.executable, "-m", "fuseopt.launcher.cli", "-np", "1", sys.executable, PROBE,
           "size", "3", "first", ":", "-np", "2", sys.executable, PROBE, "size", "3", "second"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("of 3 ok (first)") == 1 and p.stdout.count("of 3 ok (second)") == 2


def test_exit_code_and_summary_of_first_failing_rank(run_ranks):
    r = run_ranks(2, "launch_probe.py", "fail", 1, 7, expect_ok=False, timeout=120)
    assert r.code == 7, r
    assert "rank 1" in r.output and "failed first" in r.output and "exit code 7" in r.output


def _sleeping_job(tmp_path, **popen):
    """fuseoptrun with 2 ranks that sleep, once both have written their pid."""
    cmd = [sys.executable, "-m", "fuseopt.launcher.cli", "-np", "2", sys.executable, PROBE,
           "sleep", str(tmp_path)]
    proc = subprocess.Popen(cmd, **popen)
    deadline = time.time() + 60
    while len(list(tmp_path.glob("pid.[0-9]"))) < 2:
        if time.time() > deadline:
            proc.kill()
            raise AssertionError("ranks did not start")
        time.sleep(0.1)
    return proc, [int(p.read_text()) for p in tmp_path.glob("pid.[0-9]")]


def test_sigterm_stops_every_rank(tmp_path):
    proc, pids = _sleeping_job(tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "stopped by SIGTERM" in out
    time.sleep(0.5)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_killed_launcher_takes_mpiexec_and_the_ranks_with_it(tmp_path):
    # kill -9 of fuseoptrun (the OOM killer, a harness's timeout) used to leave
    # mpiexec, in a session of its own, and both ranks running, holding the
    # job's output pipe open.
    proc, pids = _sleeping_job(tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.kill()
        proc.wait(10)
        deadline = time.time() + 30
        alive = pids
        while alive and time.time() < deadline:
            time.sleep(0.2)
            alive = [pid for pid in pids if _running(pid)]
        assert not alive, "ranks %s outlived the launcher" % alive
    finally:
        for pid in [int(p.read_text()) for p in tmp_path.glob("pid.[0-9]")]:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def _running(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def test_export_flag_gives_ranks_variables(capsys, monkeypatch):
    monkeypatch.setenv("FROM_HERE", "7")
    cmd = _dry_run(["-np", "2", "-x", "FROM_HERE", "-x", "GIVEN=a=b", "python", "a.py"], capsys)
    genv = given_environment(cmd)
    assert genv["FROM_HERE"] == "7" and genv["GIVEN"] == "a=b"


@pytest.mark.parametrize("argv, message", [
    (["-H", "a:b"], "-H a:b: slots must be a positive integer, not 'b'"),
    (["-H", "a:0"], "slots must be a positive integer"),
    (["-H", ","], "names no host"),
    (["--hostfile", "/nonexistent/hosts"], "--hostfile /nonexistent/hosts: No such file"),
    (["-x", "NOT_SET_ANYWHERE_42"], "-x NOT_SET_ANYWHERE_42: NOT_SET_ANYWHERE_42 is not set"),
    (["-x", "1BAD=2"], "is not a variable name"),
    (["-H", "a:2,,b"], "-H a:2,,b: empty entry between commas"),
    (["-H", "a:2,"], "empty entry between commas"),
    (["-np", "2", "--", ], "no command given"),
    # Out of range or unreadable: refused here, not by a traceback on every rank.
    (["--cycle-time-ms", "-1"],
     "cycle_time_ms (FUSEOPT_CYCLE_TIME_MS) must be >= 0, not '-1'"),
    (["--cache-capacity", "-5"],
     "cache_capacity (FUSEOPT_CACHE_CAPACITY) must be >= 0, not '-5'"),
    (["--cache-capacity", "2000000"],
     "cache_capacity (FUSEOPT_CACHE_CAPACITY) must be <= 1048576"),
    (["--fusion-threshold-mb", "-1"], "--fusion-threshold-mb: must be a number of MiB >= 0"),
    (["--stall-check-time-seconds", "-3"],
     "stall_check_s (FUSEOPT_STALL_CHECK_S) must be >= 0, not '-3'"),
    (["--log-level", "loud"], "cannot read 'loud' as a log_level value"),
    (["-x", "FUSEOPT_CYCLE_TIME_MS=-2"],
     "FUSEOPT_CYCLE_TIME_MS: cycle_time_ms (FUSEOPT_CYCLE_TIME_MS) must be >= 0"),
    ({"HOROVOD_FUSION_THRESHOLD": "abc"},
     "HOROVOD_FUSION_THRESHOLD: cannot read 'abc' as a fusion_threshold value"),
    ({"HOROVOD_CYCLE_TIME": "-1"},
     "HOROVOD_CYCLE_TIME: cycle_time_ms (FUSEOPT_CYCLE_TIME_MS) must be >= 0"),
    ({"FUSEOPT_FUSION_THRESHOLD": "abc"},
     "FUSEOPT_FUSION_THRESHOLD: cannot read 'abc' as a fusion_threshold value"),
    ({"FUSEOPT_AUTOTUNE_WINDOW_ROUNDS": "0"},
     "autotune_window_rounds (FUSEOPT_AUTOTUNE_WINDOW_ROUNDS) must be >= 1"),
    ({"HOROVOD_TORUS_ALLREDUCE": "1"}, "HOROVOD_TORUS_ALLREDUCE=1 cannot be honoured")])
def test_bad_flags_give_one_line_and_exit_code_2(argv, message):
    """As argparse does for unknown flags: one 'fuseoptrun: error:' line on
    stderr, exit code 2, no traceback. A dict is an environment to run in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSEOPT_", "HOROVOD_"))}
    if isinstance(argv, dict):
        env.update(argv)
        argv = []
    cmd = [sys.executable, "-m", "fuseopt.launcher.cli", "--dry-run"] + argv
    if "no command given" not in message:
        cmd += ["python", "x.py"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 2, p
    assert p.stderr.strip().splitlines() == ["fuseoptrun: error: " + p.stderr.split(
        "fuseoptrun: error: ", 1)[1].strip()], p.stderr
    assert message in p.stderr and "Traceback" not in p.stderr


def test_hostfile_errors_name_the_line(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("node1 slots=4\nnode2 slots=two\n")
    with pytest.raises(hosts.HostError, match="line 2: slots must be a positive integer"):
        hosts.parse_hostfile(str(f))
    f.write_text("node1 cpus=4\n")
    with pytest.raises(hosts.HostError, match="unknown field 'cpus=4'"):
        hosts.parse_hostfile(str(f))


def test_each_horovod_notice_is_printed_once(run_ranks):
    """fuseoptrun prints the notices, flags taken into account; the ranks'
    init() applies the same settings without repeating them."""
    r = run_ranks(2, "launch_probe.py", "size", 2, launcher_args=["--cycle-time-ms", "7"], env={
        "HOROVOD_CYCLE_TIME": "2", "HOROVOD_FUSION_THRESHOLD": "1048576",
        "HOROVOD_CACHE_CAPACITY": "16", "FUSEOPT_CACHE_CAPACITY": "64",
        "HOROVOD_MPI_THREADS_DISABLE": "1", "HOROVOD_GPU_OPERATIONS": "NCCL",
        "HOROVOD_HOSTNAME": "node7", "HOROVOD_FUSION_THRESHHOLD": "1", "HOROVOD_TIMELINE": "DYNAMIC"})
    for notice in ("HOROVOD_CYCLE_TIME=2 not used: --cycle-time-ms 7 wins",
                   "HOROVOD_FUSION_THRESHOLD=1048576 taken as FUSEOPT_FUSION_THRESHOLD=1048576",
                   "HOROVOD_CACHE_CAPACITY=16 not used: FUSEOPT_CACHE_CAPACITY=64 is set too",
                   "HOROVOD_MPI_THREADS_DISABLE=1: nothing to change",
                   "HOROVOD_GPU_OPERATIONS=NCCL: build-time setting",
                   "HOROVOD_HOSTNAME=node7: set by horovodrun for its own workers",
                   "HOROVOD_FUSION_THRESHHOLD=1: unknown HOROVOD_ variable",
                   "HOROVOD_TIMELINE=DYNAMIC: no timeline file until start_timeline()"):
        assert r.output.count(notice) == 1, (notice, r.output)
    assert r.output.count("of 2 ok") == 2


def test_open_mpis_launcher_gets_open_mpis_options(tmp_path):
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\necho 'mpiexec (OpenRTE) 4.1.5'\necho\n"
                    "echo 'Report bugs to http://www.open-mpi.org/community/help/'\n")
    fake.chmod(0o755)
    env = dict(os.environ, FUSEOPT_CYCLE_TIME_MS="2")
    p = subprocess.run([sys.executable, "-m", "fuseopt.launcher.cli", "--dry-run", "--mpiexec",
                        str(fake), "-np", "3", "-H", "a:1,b:1", "--network-interface", "eth1",
                        "python", "x.py", ":", "-np", "1", "python", "y.py"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    line = p.stdout.strip()
    cmd = line[line.index(str(fake)):].split()
    assert cmd[:3] == [str(fake), "--bind-to", "none"], cmd
    assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0), cmd
    assert "--oversubscribe" in cmd, cmd  # 4 ranks on 2 slots
    assert cmd[cmd.index("--host") + 1] == "a:1,b:1", cmd
    assert cmd[cmd.index("btl_tcp_if_include") + 1] == "eth1", cmd
    exported = [cmd[i + 1] for i, w in enumerate(cmd) if w == "-x"]
    assert "FUSEOPT_CYCLE_TIME_MS" in exported and "FUSEOPT_LAUNCH_DIR" in exported, cmd
    assert "FUSEOPT_CYCLE_TIME_MS=2" not in " ".join(cmd)  # values stay out of argv
    assert "-genvlist" not in cmd and "-hosts" not in cmd, cmd
    assert " ".join(cmd).endswith("-np 3 %s -m fuseopt.launcher.rank_wrapper python x.py : "
                                  "-np 1 %s -m fuseopt.launcher.rank_wrapper python y.py"
                                  % (sys.executable, sys.executable)), cmd
    p = subprocess.run([sys.executable, "-m", "fuseopt.launcher.cli", "--dry-run", "--mpiexec",
                        str(fake), "-np", "2", "--output-filename", str(tmp_path / "o"),
                        "python", "x.py"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--output-filename with Open MPI's mpirun" in p.stderr, p
    fake.write_text("#!/bin/sh\necho 'HYDRA build details:'\n")  # Hydra's: its options
    from fuseopt.launcher import open_mpi
    assert not open_mpi.is_open_mpi(str(fake)) and cli.find_mpiexec(str(fake)) == str(fake)


@pytest.mark.parametrize("banner, flag, agent, oob", [
    ("mpiexec (OpenRTE) 4.1.5", "--mca", "plm_rsh_agent", "oob_tcp_if_include"),
    ("mpirun (Open MPI) 5.0.11", "--prtemca", "plm_ssh_agent", "oob_tcp_if_include")])
def test_open_mpis_daemons_start_through_the_remote_exec(tmp_path, banner, flag, agent, oob):
    fake = tmp_path / "mpirun"
    fake.write_text("#!/bin/sh\necho '%s'\n" % banner)
    fake.chmod(0o755)
    p = subprocess.run([sys.executable, "-m", "fuseopt.launcher.cli", "--dry-run", "--mpiexec",
                        str(fake), "-np", "2", "-H", "a:1,b:1", "--remote-exec", "/opt/rsh",
                        "--network-interface", "eth1", "python", "x.py"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    cmd = p.stdout.strip().split()
    assert cmd[cmd.index(agent) - 1:cmd.index(agent) + 2] == [flag, agent, "/opt/rsh"], cmd
    assert cmd[cmd.index(oob) - 1:cmd.index(oob) + 2] == [flag, oob, "eth1"], cmd
    # Horovod's -p: an ssh command with arguments becomes one program, as for Hydra.
    p = subprocess.run([sys.executable, "-m", "fuseopt.launcher.cli", "--dry-run", "--mpiexec",
                        str(fake), "-np", "2", "-H", "a:1,b:1", "-p", "2222", "python", "x.py"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    cmd = p.stdout.strip().split()
    assert os.path.basename(cmd[cmd.index(agent) + 1]) == "remote-exec", cmd


def test_network_interface_reaches_the_data_path_of_every_rank(run_ranks):
    """Hydra's -iface only sets MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE (ch3);
    the wheel's ch4 netmods read UCX_NET_DEVICES / FI_TCP_IFACE."""
    r = run_ranks(2, "launch_probe.py", "env", launcher_args=["--network-interface", "lo"],
                  env={"UCX_NET_DEVICES": "", "FI_TCP_IFACE": ""})
    for rank in (0, 1):
        assert "rank%d UCX_NET_DEVICES=lo" % rank in r.output
        assert "rank%d FI_TCP_IFACE=lo" % rank in r.output
    r = run_ranks(2, "launch_probe.py", "size", 2,
                  launcher_args=["--network-interface", "lo", "--nolocal", "on"])
    assert r.output.count("of 2 ok") == 2  # MPI's traffic went through UCX on lo
