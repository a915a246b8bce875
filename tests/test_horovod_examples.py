"""Horovod's own example scripts (examples/horovod/, adapted only where
Keras 3 or this machine require, each change marked "fuseopt:") run at 2
ranks for a few steps, with the flags Horovod's users pass."""
import os
import re
import subprocess
import sys

import pytest

HOROVOD_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples", "horovod")


def run(script, *args, timeout=300, cwd=None):
    env = dict(os.environ, PYTHONPATH=HOROVOD_EXAMPLES, TF_CPP_MIN_LOG_LEVEL="3")
    cmd = [sys.executable, "-m", "fuseopt.launcher.cli", "-np", "2", sys.executable,
           os.path.join(HOROVOD_EXAMPLES, script), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.mark.parametrize("flags", [[], ["--fp16-allreduce"], ["--use-adasum"]],
                         ids=["average", "fp16", "adasum"])
def test_pytorch_synthetic_benchmark(flags):
    out = run("pytorch_synthetic_benchmark.py", "--model", "resnet18", "--batch-size", "4",
              "--num-warmup-batches", "1", "--num-batches-per-iter", "1", "--num-iters", "2",
              *flags)
    assert re.search(r"Total img/sec on 2 CPU\(s\): [\d.]+", out), out


def test_tensorflow2_synthetic_benchmark():
    out = run("tensorflow2_synthetic_benchmark.py", "--no-cuda", "--model", "MobileNetV3Small",
              "--batch-size", "2", "--num-warmup-batches", "1", "--num-batches-per-iter", "1",
              "--num-iters", "2")
    assert re.search(r"Total img/sec on 2 CPU\(s\): [\d.]+", out), out


def test_tensorflow2_keras_mnist(tmp_path):
    out = run("tensorflow2_keras_mnist.py", "--epochs", "2", "--steps", "16", cwd=tmp_path)
    assert "Epoch 2/2" in out, out
    assert (tmp_path / "checkpoint-2.keras").exists()
