"""The vector kernels give the same bits on every CPU: native/tests/clones_test.cc
built once per instruction set this CPU can run (target_clones off, one -m flag
per build), each printing a digest of every kernel's output for one fixed input,
against the baseline x86-64 build; and the shipped build (target_clones on: it
compiles every clone, AVX-512's included, and runs the one CPUID picks here). A
build with FMA contraction allowed must differ: that is what -ffp-contract=off
prevents, and it shows that the digests can tell."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = [os.path.join(ROOT, "native", *p.split("/")) for p in
           ("tests/clones_test.cc", "src/kernels/channel_rows.cc", "src/kernels/pair_sum.cc")]
# The core's flags (fuseopt/_build.py); SINGLE turns target_clones off.
FLAGS = ["-std=c++17", "-O2", "-Wall", "-Werror", "-ffp-contract=off", "-Wno-psabi",
         "-I" + os.path.join(ROOT, "native", "include"), "-I" + os.path.join(ROOT, "native", "src")]
SINGLE = ["-DFUSEOPT_CLONES="]


def _cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def _digests(tmp_path, name, extra):
    exe = str(tmp_path / name)
    build = subprocess.run(["g++", *FLAGS, *extra, *SOURCES, "-o", exe], capture_output=True,
                           text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    out = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 10, out.stdout  # 5 kernels x float, double
    return lines


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    return _digests(tmp_path_factory.mktemp("clones"), "baseline", SINGLE)


def test_every_instruction_set_gives_the_same_bits(tmp_path, baseline):
    cpu = _cpu_flags()
    ran = {"shipped": _digests(tmp_path, "shipped", [])}
    for isa in ("avx2", "avx512f"):
        if isa in cpu:
            ran[isa] = _digests(tmp_path, isa, SINGLE + ["-m" + isa])
    differing = {isa: [a for a, b in zip(lines, baseline) if a != b]
                 for isa, lines in ran.items()}
    assert not any(differing.values()), differing


def test_digests_see_fma_contraction(tmp_path, baseline):
    if not {"avx2", "fma"} <= _cpu_flags():
        pytest.skip("this CPU has no FMA: a contracted build cannot run here")
    contracted = _digests(tmp_path, "fma", SINGLE + ["-mavx2", "-mfma", "-ffp-contract=fast"])
    assert contracted != baseline
