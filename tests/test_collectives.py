"""Every collective x dtype x op, zero-element tensors, tensors above the
fusion threshold and a tiny threshold forcing many buckets, at 1, 2, 4 ranks."""
import pytest

from conftest import checks_listed


# One launch per rank count runs every check under each configuration in turn
# (tests/workers/collectives.py): the default fusion threshold; 1 KiB, where
# most tensors of check_fused_many_and_large exceed it and the rest are split
# across many buckets; fusion off; and (2 ranks) the shared-memory path from
# 300 kB, below which collectives go through MPI (alltoall decides by an
# agreement of what the ranks send).
@pytest.mark.parametrize("nranks,configs", [(1, ["default"]),
                                            (2, ["default", 1024, 0, "shm_min=300000"]),
                                            (4, ["default", 1024])])
def test_collectives_default_tiny_and_no_fusion_threshold(run_ranks, nranks, configs):
    out = run_ranks(nranks, "collectives.py", *configs, timeout=360).output
    checks = checks_listed("collectives.py") * len(configs)
    assert out.count("%d checks, 0 failed" % checks) == nranks, out


STORES = {"default": "plain or streaming stores, whichever is faster",
          "stores=cached": "plain stores", "stores=streamed": "streaming stores"}


@pytest.mark.parametrize("nranks,configs", [(2, ["default", "stores=cached", "stores=streamed"]),
                                            (3, ["default", "stores=streamed"]),
                                            (4, ["default"])])
def test_collectives_through_shared_memory_for_every_size(run_ranks, nranks, configs):
    # Every collective (all dtypes, ops, scalings, fused buckets) takes the
    # shared-memory path, at 3 ranks (uneven shares) and 4 too, its slots
    # written with either kind of stores (Note [Streamed slots]) or the
    # faster as it goes (the default).
    # 4 ranks on 2 cores would make fuseoptrun turn MPICH's local transport off
    # (MPIR_CVAR_NOLOCAL), and with it the shared-memory path: keep it on.
    out = run_ranks(nranks, "collectives.py", *configs, launcher_args=("--nolocal", "off"),
                    env={"FUSEOPT_SHM_MIN_BYTES": "0", "FUSEOPT_LOG_LEVEL": "info"},
                    timeout=360).output
    checks = checks_listed("collectives.py") * len(configs)
    assert out.count("%d checks, 0 failed" % checks) == nranks, out
    for config in configs:
        assert out.count("use the shared-memory path (%s)" % STORES[config]) == nranks, out


def test_collectives_without_shared_memory_path(run_ranks):
    out = run_ranks(2, "collectives.py", env={"FUSEOPT_SHM_MIN_BYTES": "-1",
                                              "FUSEOPT_LOG_LEVEL": "info"}, timeout=240).output
    assert "shared-memory path" not in out, out
