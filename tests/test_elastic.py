"""Elastic training (fuseoptrun as Horovod's elastic driver), on emulated
hosts (tests/emulated_hosts.py) and on localhost, with the deterministic
PyTorch job of tests/workers/elastic_torch.py."""
import os
import re
import shutil
import socket

import pytest
import torch

import emulated_hosts
from conftest import launch, launch_mpmd
from fuseopt.training import elastic_protocol

ok, why = emulated_hosts.available()
needs_hosts = pytest.mark.skipif(not ok, reason="cannot emulate hosts here: %s" % why)
FAST_DISCOVERY = {"FUSEOPT_ELASTIC_DISCOVERY_INTERVAL_S": "0.2"}


@pytest.fixture(scope="module")
def hosts():
    with emulated_hosts.EmulatedHosts(2) as emu:
        yield emu


def run_on_hosts(hosts, np_, worker_args, launcher_args, **kwargs):
    """fuseoptrun on host 0 starting np_ ranks of elastic_torch.py; MPICH's
    local polling off as in test_multihost.py (4 ranks share 2 cores)."""
    launcher = ("--remote-exec", hosts.shim, "--network-interface", "eth0", "--nolocal", "on",
                *launcher_args)
    return launch_mpmd([(np_, "elastic_torch.py", *worker_args)], launcher_args=launcher,
                       command_prefix=hosts.prefix(0), **kwargs)


def lines(output, kind):
    return [line for line in output.splitlines() if line.startswith("[elastic] " + kind)]


def field(line, name):
    return re.search(r"\b%s (\S+)" % name, line).group(1)


def assert_same_weights(a, b):
    wa, wb = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


@needs_hosts
def test_lost_host_continues_on_the_survivors_from_the_last_commit(hosts, tmp_path):
    out, ref = tmp_path / "elastic", tmp_path / "reference"
    out.mkdir()
    # With PowerSGD: its Q and step counts go through the commit too.
    r = run_on_hosts(hosts, 4, [out, "--kill-host", 1, "--kill-at", 9, "--copy-commit-at", 8,
                                "--powersgd"],
                     ["-H", hosts.host_list(2), "--min-np", "2"], timeout=150)
    commit = next(c for c in lines(r.output, "commit") if field(c, "batch") == "8")
    assert field(commit, "size") == "4", r.output
    # The new job: 2 ranks, exactly the commit at batch 8 (batch 9's step was lost).
    starts = lines(r.output, "start")
    assert len(starts) == 2 and field(starts[1], "size") == "2", r.output
    for name in ("gen", "batch", "epoch", "sum"):
        assert field(starts[1], name) == field(commit, name), (name, r.output)
    assert (field(starts[0], "psgd"), field(starts[1], "psgd")) == ("0", "8"), r.output
    assert field(starts[1], "lr") == "0.1", r.output  # the reset callback's 0.05 * size()
    assert "lost rank(s) 2,3 on %s" % hosts.hosts[1].name in r.output, r.output
    assert field(lines(r.output, "final")[0], "size") == "2"
    # Reference: 2 ranks from that same commit on, in a job of its own.
    store = tmp_path / "store"
    os.makedirs(store / socket.gethostname())
    shutil.copy(out / "commit.fuseopt", elastic_protocol.commit_path(str(store)))
    ref.mkdir()
    r2 = launch(2, "elastic_torch.py", ref, "--powersgd", launcher_args=("--min-np", "2"),
                timeout=120,
                env={elastic_protocol.ELASTIC_DIR_ENV: str(store)})
    assert field(lines(r2.output, "start")[0], "sum") == field(commit, "sum"), r2.output
    assert lines(r2.output, "final")[0] == lines(r.output, "final")[0]
    assert_same_weights(out / "final.pt", ref / "final.pt")


@needs_hosts
def test_host_added_by_discovery_grows_the_job_at_the_next_commit(hosts, tmp_path):
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("%s:2\n" % hosts.hosts[0].name)
    r = run_on_hosts(hosts, 2, [tmp_path, "--grow-at", 3, hostfile, "%s:2" % hosts.hosts[1].name],
                     ["-np", "2", "--min-np", "2", "--max-np", "4",
                      "--host-discovery-script", "cat %s" % hostfile],
                     env=FAST_DISCOVERY, timeout=150)
    starts = lines(r.output, "start")
    assert [field(s, "size") for s in starts] == ["2", "4"], r.output
    # The commit at batch 4 (generation 2) raised HostsUpdatedInterrupt; the
    # 4-rank job resumed from it.
    assert (field(starts[1], "gen"), field(starts[1], "batch")) == ("2", "4"), r.output
    assert field(starts[1], "lr") == "0.2", r.output
    assert not [c for c in lines(r.output, "commit") if field(c, "size") == "2"
                and int(field(c, "batch")) > 2], r.output
    assert field(lines(r.output, "final")[0], "size") == "4"


@needs_hosts
def test_more_failures_than_the_reset_limit_end_the_job(hosts, tmp_path):
    r = run_on_hosts(hosts, 4, [tmp_path, "--kill-host", 1, "--kill-at", 3],
                     ["-H", hosts.host_list(2), "--min-np", "2", "--reset-limit", "0"],
                     expect_ok=False, timeout=120)
    assert r.code != 0, r.output
    assert "--reset-limit 0 resets were already done: giving up" in r.output, r.output
    assert len(lines(r.output, "start")) == 1


def test_fewer_than_min_np_slots_left_end_the_job(tmp_path):
    r = launch(2, "elastic_torch.py", tmp_path, "--kill-host", 0, "--kill-at", 3,
               launcher_args=("--min-np", "2"), expect_ok=False, timeout=90)
    assert r.code != 0, r.output
    assert "fewer than --min-np 2: giving up" in r.output, r.output


def test_an_error_of_the_script_is_not_restarted(tmp_path):
    r = launch(2, "elastic_torch.py", tmp_path, "--fail-at", 3,
               launcher_args=("--min-np", "1"), expect_ok=False, timeout=90)
    assert r.code == 1, r.output
    assert "ValueError: a bug in the training script at batch 3" in r.output
    assert "rank 1 failed with exit code 1 (an error of the training script" in r.output
    assert len(lines(r.output, "start")) == 1


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch %s" % self.marker,))


def test_a_hostile_commit_is_a_clear_error_and_runs_no_code(tmp_path):
    import pickle
    marker, store = tmp_path / "ran", tmp_path / "store"
    os.makedirs(store / socket.gethostname())
    # Well framed (magic, header, checksum), so the payload reaches torch.load.
    pieces = elastic_protocol.encode_commit(3, "fuseopt.torch.elastic/1",
                                            pickle.dumps(_Payload(marker)))
    elastic_protocol.write_commit(elastic_protocol.commit_path(str(store)), pieces)
    where = tmp_path / "out"  # each rank's own file: in the job's shared output, lines splice
    r = launch(2, "elastic_torch.py", tmp_path,
               launcher_args=("--min-np", "1", "--output-filename", str(where)),
               env={elastic_protocol.ELASTIC_DIR_ENV: str(store)}, expect_ok=False, timeout=90)
    assert r.code != 0 and not marker.exists(), r.output
    for rank in (0, 1):
        stderr = (where / ("rank.%d" % rank) / "stderr").read_text()
        assert "CheckpointError: cannot restore committed generation 3" in stderr, (rank, stderr)
    assert "not restarting" in r.output
