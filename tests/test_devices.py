"""Device backends (NCCL for CUDA, HCCL for Ascend NPU), run here against
the test shims (tests/shims): small libraries built with g++ at test time
that export the NCCL + CUDA runtime and HCCL + ACL C symbols the backends
use, over host memory and MPI, with streams whose work only runs when
waited for. So fuseopt's real dlopen, symbol resolution, unique-id / root
info bootstrap over MPI, stream waits and error paths run at 2 ranks, with
exact numeric checks. Real-hardware tests at the end skip without a GPU."""
import os
import re
import subprocess
import sys

import pytest

from shims import build as shim_build

BACKENDS = ["nccl", "hccl"]


@pytest.fixture(scope="module")
def shim_env(tmp_path_factory):
    return shim_build.build(str(tmp_path_factory.mktemp("shims")))


def fused_batch(output):
    """(tensors, collectives, groups) of the worker's fused batch on rank 0."""
    m = re.search(r"\[rank 0\] fused batch: (\d+) tensors in (\d+) collectives, (\d+) \(dtype, "
                  r"op\) groups", output)
    assert m, output
    return tuple(int(g) for g in m.groups())


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_collective_dtype_and_op_on_device(run_ranks, shim_env, backend):
    out = run_ranks(2, "devices.py", backend, "all", env=shim_env, timeout=240).output
    assert out.count("11 checks, 0 failed") == 2, out
    tensors, collectives, groups = fused_batch(out)
    assert collectives <= groups < tensors, (tensors, collectives, groups)  # one bucket per group


@pytest.mark.parametrize("backend", BACKENDS)
def test_device_collectives_with_tiny_fusion_threshold(run_ranks, shim_env, backend):
    env = dict(shim_env, FUSEOPT_FUSION_THRESHOLD="64")
    out = run_ranks(2, "devices.py", backend, "all", env=env, timeout=240).output
    assert out.count("11 checks, 0 failed") == 2, out
    tensors, collectives, groups = fused_batch(out)
    # 64-byte buckets: groups split into several collectives each.
    assert collectives > groups, (tensors, collectives, groups)


def test_device_buckets_appear_in_the_timeline(run_ranks, shim_env, tmp_path):
    env = dict(shim_env, FUSEOPT_TIMELINE=str(tmp_path / "timeline-{rank}.json"))
    run_ranks(2, "devices.py", "nccl", "all", env=env, timeout=240)
    trace = open(tmp_path / "timeline-0.json").read()
    assert '"dev.ar.float32.sum.(7,)"' in trace and '"ALLREDUCE"' in trace, trace[:2000]
    assert '"dev.a2a"' in trace and '"ALLTOALL"' in trace


@pytest.mark.parametrize("backend", BACKENDS)
def test_hierarchical_allreduce_on_two_emulated_nodes_of_two(run_ranks, shim_env, backend):
    # NCCL: reduce within each node, MPI allreduce among the two leaders, NCCL
    # broadcast back. HCCL: says it stays flat. Every collective of the suite
    # at 4 ranks, same exact expectations.
    env = dict(shim_env, FUSEOPT_HIERARCHICAL_ALLREDUCE="1", FUSEOPT_EMULATED_LOCAL_SIZE="2",
               FUSEOPT_LOG_LEVEL="info")
    out = run_ranks(4, "devices.py", backend, "all", env=env, timeout=300).output
    if backend == "nccl":
        assert out.count("NCCL hierarchical allreduce: NCCL within each node of 2 ranks, "
                         "MPI among 2 node leaders") == 4, out
    else:
        assert out.count("not implemented for HCCL") == 1, out
    assert out.count("11 checks, 0 failed") == 4, out


@pytest.mark.parametrize("backend", BACKENDS)
def test_host_and_device_tensor_of_one_name_is_a_mismatch(run_ranks, shim_env, backend):
    run_ranks(2, "devices.py", backend, "mismatch", env=shim_env, timeout=120)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_error_on_one_rank_fails_every_rank(run_ranks, shim_env, backend):
    env = dict(shim_env, FUSEOPT_FAKE_ASYNC_ERROR="1:3")
    out = run_ranks(2, "devices.py", backend, "async", env=env, timeout=120).output
    assert out.count("async error raised as expected") == 2, out
    assert "injected asynchronous error on rank 1" in out, out


def test_clean_exits_after_an_abandoned_mpi_are_not_cut_short(run_ranks, shim_env):
    # After the error fuseopt skips MPI_Finalize, so mpiexec treats the first
    # process to end as a bad termination and kills the rest of the job: rank
    # 1, still exiting, used to vanish without an exit record, and the job
    # failed although every rank exited 0 (about 1 run in 20 under load).
    env = dict(shim_env, FUSEOPT_FAKE_ASYNC_ERROR="1:3")
    out = run_ranks(2, "devices.py", "nccl", "async-slow-exit", env=env, timeout=120).output
    assert out.count("async error raised as expected") == 2, out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["named_by_variable", "default_name"])
def test_missing_library_is_a_clear_error_and_host_goes_on(run_ranks, shim_env, backend, how,
                                                          tmp_path):
    # The worker checks the message names the variable and how to install the
    # library (pip install nvidia-nccl-cu12 / Ascend CANN), on every rank.
    var = {"nccl": "FUSEOPT_NCCL_LIBRARY", "hccl": "FUSEOPT_HCCL_LIBRARY"}[backend]
    env = dict(shim_env)
    if how == "named_by_variable":
        env[var] = str(tmp_path / "libmissing.so")
    else:  # the real soname (libnccl.so.2 / libhccl.so), not installed here
        del env[var]
        assert var not in os.environ
    out = run_ranks(2, "devices.py", backend, "missing", env=env, timeout=120).output
    default = {"nccl": "libnccl.so.2", "hccl": "libhccl.so"}[backend]
    assert ("cannot load " + (default if how == "default_name" else str(tmp_path))) in out, out


@pytest.mark.parametrize("backend", BACKENDS)
def test_library_without_a_needed_symbol_names_the_symbol(run_ranks, shim_env, backend):
    # Each shim lacks the other vendor's symbols: NCCL from the ACL shim fails
    # at its first symbol, by name, when loaded (not in the middle of a step).
    var = {"nccl": "FUSEOPT_NCCL_LIBRARY", "hccl": "FUSEOPT_HCCL_LIBRARY"}[backend]
    other = {"nccl": "FUSEOPT_HCCL_LIBRARY", "hccl": "FUSEOPT_NCCL_LIBRARY"}[backend]
    run_ranks(2, "devices.py", backend, "nosymbol", env=dict(shim_env, **{var: shim_env[other]}),
              timeout=120)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_override_naming_no_backend_is_a_clear_error(run_ranks, shim_env, backend):
    var = {"nccl": "FUSEOPT_CUDA_BACKEND", "hccl": "FUSEOPT_NPU_BACKEND"}[backend]
    run_ranks(2, "devices.py", backend, "bogus", env=dict(shim_env, **{var: "bogus"}),
              timeout=120)


def test_requests_of_the_first_abi_struct_size_still_work(run_ranks, shim_env):
    run_ranks(2, "devices.py", "nccl", "abi", env=shim_env, timeout=120)


# ---- real hardware: written, and skipped here -------------------------------

def _cuda_gpus():
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.skipif(_cuda_gpus() < 2, reason="needs 2 CUDA GPUs and NCCL "
                    "(torch.cuda.is_available() is False here: no GPU on this machine)")
def test_torch_cuda_tensors_on_real_gpus_with_nccl(run_ranks):
    run_ranks(2, "torch_device.py", "cuda", timeout=300)


def _npus():
    try:
        import torch
        import torch_npu  # noqa: F401
    except ImportError:
        return 0
    return torch.npu.device_count() if torch.npu.is_available() else 0


@pytest.mark.skipif(_npus() < 2, reason="needs 2 Ascend NPUs, torch_npu and CANN "
                    "(torch_npu is not installed here: no NPU on this machine)")
def test_torch_npu_tensors_on_real_npus_with_hccl(run_ranks):
    run_ranks(2, "torch_device.py", "npu", timeout=300)


def test_nvidia_wheel_libraries_are_found_when_no_path_is_given(tmp_path):
    # A stand-in for the nvidia-nccl-cu12 / nvidia-cuda-runtime-cu12 wheels'
    # layout (namespace package nvidia, libraries under <package>/lib).
    for package, soname in (("nccl", "libnccl.so.2"), ("cuda_runtime", "libcudart.so.12")):
        lib = tmp_path / "nvidia" / package / "lib"
        lib.mkdir(parents=True)
        (lib / soname).write_bytes(b"")
    code = ("import sys; sys.path.insert(0, %r); from fuseopt.base import devices; "
            "env = {'FUSEOPT_CUDART_LIBRARY': '/given/libcudart.so'}; "
            "print(devices.locate_wheel_libraries(env)); print(sorted(env.items()))" % str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    nccl = str(tmp_path / "nvidia" / "nccl" / "lib" / "libnccl.so.2")
    assert out.stdout.splitlines()[0] == str({"FUSEOPT_NCCL_LIBRARY": nccl}), out.stdout
    assert "('FUSEOPT_CUDART_LIBRARY', '/given/libcudart.so')" in out.stdout  # a given path wins
