"""The scripts in examples/horovod/ are written here against Horovod's API
(the same calls, arguments and command-line flags as Horovod's own example
scripts of those names) and import fuseopt in place of horovod. They run at 2
ranks for a few steps, with the flags Horovod's users pass."""
import os
import re
import subprocess
import sys

import pytest

HOROVOD_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples", "horovod")


def run(script, *args, timeout=300, cwd=None, launcher_args=("-np", "2"), env=None):
    # Prepended, as conftest.launch does: a PYTHONPATH that picks the fuseopt under test stays.
    path = os.pathsep.join(filter(None, [HOROVOD_EXAMPLES, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    cmd = [sys.executable, "-m", "fuseopt.launcher.cli", *launcher_args, sys.executable,
           os.path.join(HOROVOD_EXAMPLES, script), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout if launcher_args == ("-np", "2") else p.stdout + p.stderr


@pytest.mark.parametrize("flags", [[], ["--fp16-allreduce"], ["--use-adasum"]],
                         ids=["average", "fp16", "adasum"])
def test_pytorch_synthetic_benchmark(flags):
    out = run("pytorch_synthetic_benchmark.py", "--model", "resnet18", "--batch-size", "4",
              "--num-warmup-batches", "1", "--num-batches-per-iter", "1", "--num-iters", "2",
              *flags)
    assert re.search(r"Total img/sec on 2 CPU\(s\): [\d.]+", out), out


def test_tensorflow2_synthetic_benchmark():
    out = run("tensorflow2_synthetic_benchmark.py", "--no-cuda", "--model", "MobileNet",
              "--batch-size", "2", "--num-warmup-batches", "1", "--num-batches-per-iter", "1",
              "--num-iters", "2")
    assert re.search(r"Total img/sec on 2 CPU\(s\): [\d.]+", out), out


def test_tensorflow2_keras_mnist(tmp_path):
    out = run("tensorflow2_keras_mnist.py", "--epochs", "2", "--steps", "16", cwd=tmp_path)
    assert "Epoch 2/2" in out, out
    assert (tmp_path / "checkpoint-2.keras").exists()


def test_pytorch_synthetic_benchmark_elastic():
    out = run("pytorch_synthetic_benchmark_elastic.py", "--model", "resnet18", "--batch-size", "4",
              "--num-warmup-batches", "1", "--num-batches-per-iter", "1", "--num-iters", "2",
              launcher_args=("-np", "2", "--min-np", "1", "--max-np", "2"))
    assert re.search(r"Total img/sec on 2 CPU\(s\): [\d.]+", out), out


def test_tensorflow2_synthetic_benchmark_elastic():
    out = run("tensorflow2_synthetic_benchmark_elastic.py", "--no-cuda", "--model",
              "MobileNet", "--batch-size", "2", "--num-warmup-batches", "1",
              "--num-batches-per-iter", "1", "--num-iters", "2",
              launcher_args=("-np", "2", "--min-np", "1", "--max-np", "2"))
    assert re.search(r"Total img/sec on 2 CPU\(s\): [\d.]+", out), out


def test_tensorflow2_keras_mnist_elastic_grows_after_the_first_epoch(tmp_path):
    # Discovery offers a second slot once rank 0's ModelCheckpoint has written
    # epoch 1: the job commits at its next batch and continues on 2 ranks.
    # Epochs of 240 steps (about 2.5 s on one rank) leave the driver, which
    # polls every 0.1 s, a margin of more than 20x to see the change before
    # training ends; at 8 steps a slow spell let the job finish first (CI).
    script = tmp_path / "discover.sh"
    script.write_text("[ -e %s ] && echo localhost:2 || echo localhost:1\n"
                      % (tmp_path / "checkpoint-1.keras"))
    out = run("tensorflow2_keras_mnist_elastic.py", "--epochs", "3", "--steps", "240", cwd=tmp_path,
              launcher_args=("-np", "1", "--min-np", "1", "--max-np", "2",
                             "--host-discovery-script", "sh %s" % script),
              env={"FUSEOPT_ELASTIC_DISCOVERY_INTERVAL_S": "0.1"})
    assert "starting 1 ranks on localhost:1" in out and "starting 2 ranks on localhost:2" in out, out
    assert "reset 1: the hosts changed" in out, out
    assert (tmp_path / "checkpoint-2.keras").exists(), out


def run_driver_script(script, *args, cwd, timeout=300):
    """A script that starts its ranks itself (Ray, Spark): plain python."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYSPARK_PYTHON=sys.executable)
    env.pop("FUSEOPT_MPIEXEC", None)
    p = subprocess.run([sys.executable, os.path.join(HOROVOD_EXAMPLES, script), *args],
                       capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout + p.stderr


def test_tensorflow2_keras_ray(tmp_path):
    # A local Ray cluster of this machine's 2 CPUs, 2 workers of 1 CPU each.
    # --address local: a cluster of its own, not one another test left registered.
    out = run_driver_script("tensorflow2_keras_ray.py", "--address", "local", "--num-workers",
                            "2", "--epochs", "1", "--steps", "32", cwd=tmp_path)
    accuracies = re.search(r"final accuracy per rank: ([\d.]+), ([\d.]+)", out)
    assert accuracies and accuracies.group(1) == accuracies.group(2), out  # one model
    assert (tmp_path / "ray-checkpoint-1.keras").exists(), out


def test_keras_spark_run(tmp_path):
    out = run_driver_script("keras_spark_run.py", "--num-proc", "2", "--epochs", "1",
                            cwd=tmp_path)
    assert re.search(r"Best validation loss: [\d.]+", out), out
    assert re.search(r"\w{3} \w{3} +\d+ [\d:]+ \d{4} \[0\]<stdout>:\d+/\d+ - .* val_loss: ", out), out
    assert (tmp_path / "checkpoint.keras").stat().st_size > 1000, out
