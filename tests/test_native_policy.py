"""Builds and runs native/tests/policy_test.cc: the pure policy of the core
(fusion planner, response cache, coordinator table, wire format, reducescatter
row split, float16 and bfloat16 conversion and kernels (vector against scalar,
bit for bit), autotune search) tested without MPI or ranks."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICY_SOURCES = ["policy/autotune", "policy/fusion_planner", "policy/response_cache",
                  "policy/coordinator", "policy/wire", "policy/row_split", "base/message",
                  "base/dtype", "base/half16", "base/names"]


def test_native_policy(tmp_path):
    exe = str(tmp_path / "policy_test")
    cmd = ["g++", "-std=c++17", "-O1", "-Wall", "-Werror",
           "-I" + os.path.join(ROOT, "native", "include"), "-I" + os.path.join(ROOT, "native", "src"),
           os.path.join(ROOT, "native", "tests", "policy_test.cc")]
    cmd += [os.path.join(ROOT, "native", "src", *s.split("/")) + ".cc" for s in POLICY_SOURCES]
    build = subprocess.run(cmd + ["-o", exe], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 failures" in run.stdout
