"""Builds and runs the core's native unit tests, without MPI or ranks:
native/tests/policy_test.cc, the pure policy (fusion planner, response cache,
coordinator table, wire format, reducescatter row split, autotune search, the
agreed reductions' exchange schedule),
native/tests/dtype_test.cc, the element-wise work on the host (scaling,
float16 and bfloat16 conversion and kernels, the two-rank shared-memory
reduction: vector against scalar, bit for bit), and
native/tests/store_choice_test.cc, how a rank chooses plain or streaming
stores for its shared-memory slots, and
native/tests/output_pool_test.cc, the runtime's result blocks (huge pages,
recycling)."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Each test program with the core sources it links.
PROGRAMS = {
    "policy_test": ["policy/autotune", "policy/fusion_planner", "policy/response_cache",
                    "policy/coordinator", "policy/message_codec", "policy/row_split", "base/message",
                    "base/dtype", "base/half16", "api/names"],
    "dtype_test": ["base/dtype", "base/half16", "kernels/pair_sum"],
    "store_choice_test": [],
    "output_pool_test": ["transport/output_pool"],
}


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_native_unit_tests(tmp_path, program):
    exe = str(tmp_path / program)
    # -ffp-contract=off and -Wno-psabi as the core's build (fuseopt/_build.py):
    # no FMA in the vector clones, whose vector arguments are inlined.
    cmd = ["g++", "-std=c++17", "-O1", "-Wall", "-Werror", "-ffp-contract=off", "-Wno-psabi",
           "-I" + os.path.join(ROOT, "native", "include"), "-I" + os.path.join(ROOT, "native", "src"),
           os.path.join(ROOT, "native", "tests", program + ".cc")]
    cmd += [os.path.join(ROOT, "native", "src", *s.split("/")) + ".cc" for s in PROGRAMS[program]]
    build = subprocess.run(cmd + ["-o", exe], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 failures" in run.stdout
