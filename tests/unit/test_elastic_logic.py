"""Elastic training's pure rules, rank-free: which commit copy wins, what a
corrupt commit file gives, discovery output, placement, what ended a job,
and how the sampler re-shards the rest of an epoch."""
import os

import numpy as np
import pytest

from fuseopt.training import elastic_protocol as proto
from fuseopt.training.checkpoint import CheckpointError
from fuseopt.base.errors import InvalidArgumentError
from fuseopt.torch.elastic import ElasticSampler
from fuseopt.training.elastic import ObjectState, State, epoch_order, share
from fuseopt.launcher import cli
from fuseopt.launcher.elastic import discovery
from fuseopt.launcher.elastic.driver import classify


def test_newest_usable_copy_wins_lowest_rank_among_equals():
    reports = [(0, 7, None), (1, None, None), (2, 9, None), (3, 9, None), (4, None, "bad")]
    assert proto.choose_newest(reports) == ((2, 9), ["bad"])
    assert proto.choose_newest([(0, None, None), (1, None, None)]) == ((None, 0), [])
    # A corrupt newer copy does not hide an older good one.
    assert proto.choose_newest([(0, None, "corrupt"), (2, 3, None)]) == ((2, 3), ["corrupt"])


def test_commit_file_round_trip_and_corruption(tmp_path):
    path = str(tmp_path / "h" / proto.COMMIT_FILE)
    proto.write_commit(path, proto.encode_commit(5, "fmt", b"payload bytes"))
    assert proto.decode_commit(b"".join(proto.encode_commit(2, "f", b"x")))[1] == b"x"
    generation, header, payload = proto.read_commit(path)
    assert (generation, header["format"], payload) == (5, "fmt", b"payload bytes")
    assert proto.read_commit(str(tmp_path / "none")) is None
    data = open(path, "rb").read()
    for bad, why in [(data[:-3], "truncated"), (data[:-1] + b"X", "checksum"),
                     (b"PK\x03\x04" + data, "bad magic"), (data[:len(proto.MAGIC) + 3], "no header"),
                     (data[:len(proto.MAGIC) + 8] + b"{not json" + data[-20:], "corrupt header")]:
        open(path, "wb").write(bad)
        with pytest.raises(proto.CommitFileError, match=why):
            proto.read_commit(path)


def test_notice_round_trip(tmp_path):
    assert proto.notice_time(str(tmp_path)) == 0.0 and proto.notice_time(None) == 0.0
    proto.write_notice(str(tmp_path), [("a", 2)])
    assert proto.notice_time(str(tmp_path)) > 0


def test_discovery_output():
    assert discovery.parse("a:2\n\n# comment\n b:4 \n") == [("a", 2), ("b", 4)]
    assert discovery.parse("a\nb:1\n", slots_per_host=3) == [("a", 3), ("b", 1)]
    for text, why in [("a\n", "no slots"), ("a:x\n", "positive integer"), ("a:1\na:2\n", "twice"),
                      ("a b:1\n", "not a host name")]:
        with pytest.raises(discovery.DiscoveryError, match=why):
            discovery.parse(text)


def test_discovery_script_failure_is_clear(tmp_path):
    with pytest.raises(discovery.DiscoveryError, match="exited with 3: nope"):
        discovery.discover("echo nope >&2; exit 3")
    assert discovery.discover("printf 'h1:2\\nh2:2\\n'") == [("h1", 2), ("h2", 2)]
    # Bytes that are not UTF-8 are a parse error naming the line, not a traceback.
    with pytest.raises(discovery.DiscoveryError, match="line 1"):
        discovery.discover("printf 'h\\377:2\\n'")


def test_placement_and_blacklist():
    found = [("a", 2), ("b", 2), ("c", 2)]
    assert discovery.plan(found) == found
    assert discovery.plan(found, max_np=3) == [("a", 2), ("b", 1)]
    assert discovery.plan(found, max_np=5, np_=2) == [("a", 2)]
    assert discovery.usable(found, {"b"}) == [("a", 2), ("c", 2)]
    assert [discovery.host_of_rank(found, r) for r in (0, 1, 2, 5, 6)] == ["a", "a", "b", "c", None]


def _end(rank, code=0, sig=None, t=0.0):
    return {"rank": rank, "exit_code": None if sig else code, "signal": sig, "unclean": False,
            "end_time": t}


def test_what_ended_the_job():
    starts = {r: {} for r in range(4)}
    done = {r: _end(r) for r in range(4)}
    assert classify(done, starts, {}, 4) == ("done", [])
    # Host 1's ranks killed; the survivors ended for a reset.
    ends = {0: _end(0, 75, t=2), 1: _end(1, 75, t=2), 2: _end(2, sig=9, t=1), 3: _end(3, sig=9, t=1)}
    assert classify(ends, starts, {}, 4) == ("reset", [2, 3])
    # A host gone with its wrappers: no exit records at all.
    assert classify({0: _end(0, 75), 1: _end(1, 75)}, starts, {}, 4) == ("reset", [2, 3])
    # Every rank ended for a reset: the hosts changed.
    assert classify({r: _end(r, 75) for r in range(4)}, starts, {}, 4) == ("reset", [])
    # Host 1's rank SIGKILLed from outside; rank 0's MPICH crashed on the broken
    # connection right after, and its wrapper was stamped first: only host 1 is lost.
    ends = {0: _end(0, sig=11, t=1.0), 1: _end(1, 75, t=2), 2: _end(2, sig=9, t=1.2),
            3: _end(3, 75, t=2)}
    assert classify(ends, starts, {}, 4) == ("reset", [2])
    # A crash well after the kill is a loss of its own.
    ends[0] = _end(0, sig=11, t=3.0)
    assert classify(ends, starts, {}, 4) == ("reset", [0, 2])
    # The script failed first: no restart, whatever mpiexec did to the others afterwards.
    ends = {0: _end(0, 1, t=1), 1: _end(1, sig=15, t=2), 2: _end(2, 75, t=2), 3: _end(3, 75, t=2)}
    notes = {1: {"status": "RANK_FAILED", "message": "rank 0 was lost"}}
    verdict, first = classify(ends, starts, notes, 4)
    assert verdict == "error" and first["rank"] == 0


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_sampler_shares_cover_the_rest_of_the_epoch(size):
    order = epoch_order(40, True, 5, 2)
    processed_num = 13
    shares = [share(order[processed_num:], r, size) for r in range(size)]
    assert len({len(s) for s in shares}) == 1  # every rank takes as many steps
    covered = [i for s in shares for i in s]
    assert set(covered) == set(order[processed_num:])
    assert len(covered) - len(set(covered)) < size  # only the padding repeats


def test_sampler_order_depends_on_seed_and_epoch_only():
    a = epoch_order(30, True, 1, 0)
    assert sorted(a) == list(range(30)) and a != list(range(30))
    assert a == epoch_order(30, True, 1, 0)
    assert a != epoch_order(30, True, 1, 1) and a != epoch_order(30, True, 2, 0)
    assert epoch_order(6, False, 1, 3) == list(range(6))
    assert share(list(range(6)), 1, 2) == [1, 3, 5]
    assert share([], 0, 2) == []


def test_elastic_sampler_counts_as_horovod_0_28():
    """processed_num as Horovod 0.28.1's ElasticSampler counts it; the rest
    of the order re-dealt on reset; Horovod 0.27's state loads too."""
    sampler = ElasticSampler(list(range(10)), shuffle=False)
    assert (sampler.num_replicas, sampler.rank, len(sampler)) == (1, 0, 10)
    sampler.record_batch(0, 4)
    assert sampler.processed_num == 4 and sampler.processed_indices == {0, 1, 2, 3}
    assert len(sampler) == 10  # counted, not re-dealt until a reset
    sampler.reset()
    assert sampler.remaining_indices == list(range(4, 10)) == list(sampler)
    assert (sampler.num_samples, sampler.total_size) == (6, 6)
    state = sampler.state_dict()
    assert state == {"epoch": 0, "processed_num": 4}
    other = ElasticSampler(list(range(10)), shuffle=False)
    other.load_state_dict(state)
    assert list(other) == list(range(4, 10))
    other.load_state_dict({"epoch": 2, "processed_indices": [0, 1, 2]})  # Horovod 0.27
    assert other.epoch == 2 and other.processed_num == 3 and list(other) == list(range(3, 10))
    sampler.set_epoch(1)
    assert sampler.processed_num == 0 and len(sampler) == 10


def test_object_state_commits_its_values_alone():
    state = ObjectState(epoch=3, batch=7, history=[1.0, 2.5])
    payload = state._payload()
    state.epoch = 99
    state.history.append(4.0)
    fresh = ObjectState(epoch=0, batch=0, history=[])
    fresh._load_payload(payload)
    assert (fresh.epoch, fresh.batch, fresh.history) == (3, 7, [1.0, 2.5])
    with pytest.raises(CheckpointError, match="holds values"):
        ObjectState(other=1)._load_payload(payload)
    with pytest.raises(CheckpointError, match="not a"):
        fresh._load_payload(b'{"format": "fuseopt.torch.elastic/1", "values": {}}')


@pytest.mark.parametrize("value, what", [
    (np.float32(1), "numpy.float32"), ({1, 2}, "builtins.set"), (object(), "builtins.object"),
    ({"nested": [1, (2, np.int64(3))]}, "numpy.int64")])
def test_object_state_values_are_checked_when_made_assigned_and_saved(value, what):
    """A value the commit store cannot keep fails where it enters, in a
    local run, not at the first commit under the elastic driver."""
    with pytest.raises(InvalidArgumentError, match=what):
        ObjectState(best=value)
    state = ObjectState(best=0.0, history=[])
    with pytest.raises(InvalidArgumentError, match=what):
        state.best = value
    assert state.best == 0.0
    state.history.append(value)  # changed in place: caught at the next save (commit)
    with pytest.raises(InvalidArgumentError, match=what):
        state.save()
    state.untracked = value  # not a state value: not committed, not checked


def test_torch_state_keeps_tensors_and_checks_the_rest():
    torch = pytest.importorskip("torch")
    from fuseopt.torch.elastic import TorchState
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = TorchState(model, opt, best=torch.ones(2), epoch=0)
    state.best = torch.zeros(3)
    state.save()
    with pytest.raises(InvalidArgumentError, match="numpy.float32"):
        TorchState(model, opt, best=np.float32(1))
    with pytest.raises(InvalidArgumentError, match="builtins.set"):
        state.epoch = {1}


def test_a_state_missing_a_method_cannot_be_made():
    class HalfState(State):
        def save(self):
            pass

    with pytest.raises(TypeError):
        HalfState()


@pytest.mark.parametrize("flag", ["--slots-per-host", "--elastic-timeout"])
def test_elastic_only_flags_are_refused_outside_an_elastic_job(flag):
    # Accepted alone they would change nothing: an argument silently ignored.
    with pytest.raises(cli.UsageError, match="%s: for elastic jobs only" % flag):
        cli.run(["--dry-run", "-np", "2", flag, "2", "python", "t.py"])


def test_a_failing_discovery_script_is_a_usage_error(tmp_path):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho 'no hosts today' >&2\nexit 3\n")
    script.chmod(0o755)
    with pytest.raises(discovery.DiscoveryError, match="exited with 3: no hosts today"):
        cli.run(["--dry-run", "-np", "2", "--host-discovery-script", str(script),
                 "python", "t.py"])
    assert issubclass(discovery.DiscoveryError, cli._hosts.HostError)  # main: one line, exit 2


def test_commits_of_another_key_or_none_are_refused(tmp_path):
    """Issue 48, finding 4: a commit planted with a higher generation was
    protected by a CRC only; with the job's key it needs the job's MAC."""
    key, other = bytes.fromhex(proto.new_job_key()), bytes.fromhex(proto.new_job_key())
    path = str(tmp_path / "store" / "h" / proto.COMMIT_FILE)
    proto.write_commit(path, proto.encode_commit(7, "fmt", b"ours", key))
    assert proto.read_commit(path, key)[2] == b"ours"
    for planted_key in (None, other):  # no MAC, or another job's
        proto.write_commit(path, proto.encode_commit(99, "fmt", b"planted", planted_key))
        with pytest.raises(proto.CommitFileError, match="not written by this job"):
            proto.read_commit(path, key)
    genuine = b"".join(proto.encode_commit(8, "fmt", b"ours", key))
    forged = genuine.replace(b'"generation": 8', b'"generation": 9')  # a newer one, by hand
    with pytest.raises(proto.CommitFileError, match="not written by this job"):
        proto.decode_commit(forged, "forged", key)
    assert proto.job_key({proto.JOB_KEY_ENV: key.hex()}) == key and proto.job_key({}) is None


def test_job_directories_someone_else_could_write_are_refused(tmp_path, monkeypatch):
    """Issue 48, finding 4: job directories on other hosts were made with
    makedirs(exist_ok=True): whoever created the name first owned them."""
    from fuseopt.base.private_dir import UnsafeDirectoryError, ensure_private_dir
    made = ensure_private_dir(str(tmp_path / "a" / "b"))
    assert os.stat(made).st_mode & 0o777 == 0o700 and ensure_private_dir(made) == made
    open_store = tmp_path / "open"
    open_store.mkdir()
    open_store.chmod(0o777)  # pre-created, world-writable, not sticky
    with pytest.raises(UnsafeDirectoryError, match="may be written by other users"):
        proto.write_commit(proto.commit_path(str(open_store), "h"),
                           proto.encode_commit(1, "f", b"x"))
    with pytest.raises(UnsafeDirectoryError, match="written by other users \\(mode 777\\)"):
        proto.write_notice(str(open_store), [("a", 1)])
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(UnsafeDirectoryError, match="symbolic link"):
        ensure_private_dir(str(tmp_path / "link"))
    # Another user's directory: as root, one given to nobody (uid 65534);
    # as anyone else, this user's, seen by a process of another uid.
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    if os.getuid() == 0:
        os.chown(theirs, 65534, -1)
    else:
        monkeypatch.setattr(os, "getuid", lambda uid=os.getuid(): uid + 1)
    owner = os.stat(theirs).st_uid
    with pytest.raises(UnsafeDirectoryError, match="belongs to uid %d" % owner):
        ensure_private_dir(str(theirs))
    with pytest.raises(UnsafeDirectoryError, match="belongs to uid %d" % owner):
        ensure_private_dir(str(theirs / "below"))
