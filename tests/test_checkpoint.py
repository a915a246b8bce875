"""Checkpoints: atomic writes, exact resume after a kill, resume on fewer ranks."""
import os
import shutil
import subprocess
import sys

import pytest
import torch

from fuseopt.training.checkpoint import write_atomically


def final_weights(directory, tag):
    return torch.load(os.path.join(directory, "final-%s.pt" % tag))


def assert_same_weights(a, b, atol):
    assert a.keys() == b.keys()
    for k in a:
        diff = (a[k] - b[k]).abs().max().item()
        assert diff <= atol, "%s differs by %g" % (k, diff)


def test_interrupted_save_leaves_the_previous_checkpoint(tmp_path):
    path = tmp_path / "ckpt.bin"
    write_atomically(str(path), lambda f: f.write(b"old checkpoint"))

    def half_then_fail(f):
        f.write(b"new, partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(str(path), half_then_fail)
    assert path.read_bytes() == b"old checkpoint"
    assert os.listdir(tmp_path) == ["ckpt.bin"]
    # A process killed in the middle of a save (no chance to clean up).
    code = ("import os, signal; from fuseopt.training.checkpoint import write_atomically\n"
            "def w(f):\n f.write(b'new, partial'); f.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
            "write_atomically(%r, w)" % str(path))
    proc = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert proc.returncode == -9
    assert path.read_bytes() == b"old checkpoint"


def test_killed_job_resumes_to_the_weights_of_an_uninterrupted_run(run_ranks, tmp_path):
    full, broken = tmp_path / "full", tmp_path / "broken"
    run_ranks(2, "checkpoint_torch.py", full, "full", 30, timeout=180)
    r = run_ranks(2, "checkpoint_torch.py", broken, "never", 30, "--kill-at", 25,
                  expect_ok=False, timeout=180)
    assert r.code != 0 and "SIGKILL" in r.output, r
    assert not (broken / "final-never.pt").exists()
    r = run_ranks(2, "checkpoint_torch.py", broken, "resumed", 30, timeout=180)
    assert "[rank 1] resumed at step 20 from 2 ranks on 2; lr scale 1.00" in r.output, r
    # Same global batches, same per-rank RNG streams (dropout): bit for bit.
    assert_same_weights(final_weights(full, "full"), final_weights(broken, "resumed"), 0.0)


def test_resume_on_fewer_ranks(run_ranks, tmp_path):
    full, elastic, per_rank = tmp_path / "full", tmp_path / "elastic", tmp_path / "per_rank"
    # The 4-rank run keeps a copy of its checkpoint after step 20: the state a
    # job stopped there would have left.
    run_ranks(4, "checkpoint_torch.py", full, "full", 30, "--dropout", 0, "--copy-at", 20,
              timeout=240)
    elastic.mkdir()
    per_rank.mkdir()
    shutil.copy(full / "ckpt-20.pt", elastic / "ckpt.pt")
    shutil.copy(full / "ckpt-20.pt", per_rank / "ckpt.pt")
    # Rule 1: keep the global batch (each rank's batch doubles): lr unchanged.
    r = run_ranks(2, "checkpoint_torch.py", elastic, "resumed", 30, "--dropout", 0, timeout=240)
    assert "resumed at step 20 from 4 ranks on 2; lr scale 1.00" in r.output, r
    # Equal global batches: the averaged gradients agree up to summation order.
    assert_same_weights(final_weights(full, "full"), final_weights(elastic, "resumed"), 1e-5)
    # Rule 2: keep each rank's batch (the global batch halves): lr halves.
    r = run_ranks(2, "checkpoint_torch.py", per_rank, "resumed", 30, "--dropout", 0,
                  "--keep", "per_rank_batch", timeout=240)
    assert "resumed at step 20 from 4 ranks on 2; lr scale 0.50" in r.output, r


def test_keras_fit_with_powersgd_killed_and_resumed_matches_an_uninterrupted_fit(run_ranks,
                                                                               tmp_path):
    import numpy as np
    full, broken = tmp_path / "full", tmp_path / "broken"
    full.mkdir()
    broken.mkdir()
    # With PowerSGD: its Q, step counts and each rank's errors come back too.
    r = run_ranks(2, "checkpoint_keras.py", full, "full", 4, "--powersgd", timeout=240)
    assert "[rank 1] powersgd steps [24, 24]" in r.output, r  # 2 weights x 4 epochs x 6 steps
    r = run_ranks(2, "checkpoint_keras.py", broken, "never", 4, "--kill-at-epoch", 2,
                  "--powersgd", expect_ok=False, timeout=240)
    assert r.code != 0 and "SIGKILL" in r.output, r
    r = run_ranks(2, "checkpoint_keras.py", broken, "resumed", 4, "--powersgd", timeout=240)
    assert "[rank 1] resumed after epoch 1" in r.output, r
    assert "[rank 1] powersgd steps [24, 24]" in r.output, r
    a, b = np.load(full / "final-full.npz"), np.load(broken / "final-resumed.npz")
    assert len(a.files) == len(b.files) == 4
    for k in a.files:
        assert np.array_equal(a[k], b[k]), "%s differs by %g" % (k, np.abs(a[k] - b[k]).max())


@pytest.mark.parametrize("kind", ["torch", "keras"])
def test_bad_files_fail_on_every_rank_and_run_no_code(run_ranks, tmp_path, kind):
    r = run_ranks(2, "checkpoint_bad.py", tmp_path, kind, timeout=180)
    assert r.output.count("checks, 0 failed") == 2, r
    assert not (tmp_path / "payload-ran").exists()


def test_next_save_removes_what_a_killed_writer_left(tmp_path):
    path = tmp_path / "ckpt.bin"
    write_atomically(str(path), lambda f: f.write(b"first"))
    stray = tmp_path / ".ckpt.bin.k1ll3d.tmp"
    stray.write_bytes(b"half a checkpoint")
    unrelated = tmp_path / ".other.bin.abc.tmp"
    unrelated.write_bytes(b"another file's writer")
    write_atomically(str(path), lambda f: f.write(b"second"))
    assert path.read_bytes() == b"second"
    assert sorted(os.listdir(tmp_path)) == [".other.bin.abc.tmp", "ckpt.bin"]


@pytest.fixture
def full_file_system(tmp_path):
    """A 1 MiB tmpfs: a small model's checkpoint fits, a 4 MB one does not."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root (CI runs as root)")
    mount = tmp_path / "full"
    mount.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip("this container may not mount a tmpfs: %s" % p.stderr.strip())
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.mark.parametrize("kind", ["torch", "keras"])
def test_a_failure_on_the_root_reaches_every_rank(run_ranks, tmp_path, kind):
    r = run_ranks(2, "root_failures.py", tmp_path, kind, timeout=180)
    assert r.output.count("checks, 0 failed") == 2, r


@pytest.mark.parametrize("kind", ["torch", "keras"])
def test_a_full_disk_fails_the_save_on_every_rank(run_ranks, tmp_path, full_file_system, kind):
    r = run_ranks(2, "root_failures.py", tmp_path, kind, full_file_system, timeout=180)
    assert r.output.count("1 checks, 0 failed") == 2, r
