"""The examples run end to end on 2 ranks and learn (short settings).

Their accuracy bars are far below what the examples reach on any CPU, so
they hold whatever kernels torch and oneDNN pick. Measured on one machine
under ATEN_CPU_CAPABILITY=default / avx2 / avx512 and TF_ENABLE_ONEDNN_OPTS=0 / 1
(the settings of these tests): numpy digits 0.940 (bar 0.9); PyTorch digits
BatchNorm 0.970-0.972, SyncBatchNorm 0.970-0.972 (bar 0.8); Keras digits
0.982-0.987 (bar 0.8); elastic 0.939-0.952 (bar 0.8); mixed cluster
0.952-0.962 (bar 0.85). The digits examples run under two kernel sets here,
the others under one that is not the CPU's own."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Kernel sets other than the CPU's own (torch's and oneDNN's).
PORTABLE_TORCH = {"ATEN_CPU_CAPABILITY": "default"}
PORTABLE_TF = {"TF_ENABLE_ONEDNN_OPTS": "0"}


def run_example(script, *args, timeout=300, env=None):
    cmd = [sys.executable, "-m", "fuseopt.launcher.cli", "-np", "2", sys.executable,
           os.path.join(ROOT, "examples", script), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_numpy_digits_learns():
    out = run_example("numpy_digits.py", "--epochs", "10")
    acc = float(re.search(r"final test accuracy ([\d.]+)", out).group(1))
    assert acc > 0.9, out


@pytest.mark.parametrize("env", [{}, PORTABLE_TORCH], ids=["native", "default-kernels"])
def test_pytorch_digits_trains_both_batch_norms(env):
    out = run_example("pytorch_digits.py", "--epochs", "1", "--seeds", "2", env=env)
    accuracy = dict(re.findall(r"^(BatchNorm|SyncBatchNorm) +validation accuracy ([\d.]+) \+- "
                               r"[\d.]+ \(mean \+- std over 2 seeds\)", out, re.M))
    assert len(accuracy) == 2 and all(float(a) > 0.8 for a in accuracy.values()), out
    assert out.count("images/s on 2 ranks") == 4, out  # 2 norms x 2 seeds x 1 epoch
    assert re.search(r"SyncBatchNorm throughput: [\d.]+x BatchNorm's", out), out


def test_pytorch_synthetic_benchmark_reports_throughput():
    out = run_example("pytorch_synthetic_benchmark.py", "--num-iters", "2",
                      "--num-batches-per-iter", "2", "--num-warmup-batches", "1")
    assert re.search(r"Total img/sec on 2 rank\(s\): [\d.]+", out), out


@pytest.mark.parametrize("env", [{}, PORTABLE_TF], ids=["native", "no-onednn"])
def test_keras_digits_fit_with_callbacks_and_sync_batch_norm(env):
    out = run_example("keras_digits.py", "--epochs", "2", env=env)
    m = re.findall(r"val_accuracy ([\d.]+)", out)
    assert m and float(m[-1]) > 0.8, out
    assert "images/s on 2 ranks" in out


def test_tensorflow_synthetic_benchmark_reports_throughput():
    out = run_example("tensorflow_synthetic_benchmark.py", "--num-iters", "2",
                      "--num-batches-per-iter", "2", "--num-warmup-batches", "2")
    assert re.search(r"Total img/sec on 2 rank\(s\): [\d.]+", out), out


def test_mixed_cluster_example_trains_one_model_on_both_frameworks():
    example = os.path.join(ROOT, "examples", "mixed_cluster")
    cmd = [sys.executable, "-m", "fuseopt.launcher.cli",
           "-np", "1", sys.executable, os.path.join(example, "train_torch.py"), ":",
           "-np", "1", sys.executable, os.path.join(example, "train_keras.py")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **PORTABLE_TORCH, **PORTABLE_TF))
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    accs = {fw: float(re.findall(r"%s\]?\s+epoch 8 .*val acc ([\d.]+)" % fw, out)[-1])
            for fw in ("PyTorch", "Keras")}
    assert accs["PyTorch"] == accs["Keras"] > 0.85, out  # one model, evaluated twice
    drifts = [float(d) for d in
              re.findall(r"largest weight difference to any rank: ([0-9.e+-]+)", out)]
    assert len(drifts) == 2 and max(drifts) < 1e-5, out


def test_elastic_examples_train_under_the_elastic_driver():
    for script in ("elastic_torch.py", "elastic_keras.py"):
        cmd = [sys.executable, "-m", "fuseopt.launcher.cli", "-np", "2", "--min-np", "1",
               sys.executable, os.path.join(ROOT, "examples", script), "--epochs", "2"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **PORTABLE_TORCH,
                                    **PORTABLE_TF))
        assert p.returncode == 0, p.stdout + p.stderr
        acc = float(re.search(r"final training accuracy ([\d.]+) on 2 ranks", p.stdout).group(1))
        assert acc > 0.8, p.stdout
