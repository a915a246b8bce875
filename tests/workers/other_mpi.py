"""Under an MPI other than the mpich wheel's (tests/test_other_mpis.py): the
library this process loaded is the one the test installed (what
`fuseopt check-build` reports, checked against /proc/self/maps), then the
checks that matter on any MPI: every collective of collectives.py, the torch
optimizer against one process, mismatches named on every rank."""
import os

import torch

import collectives
import negotiation
import rank_harness as harness
import torch_training
from fuseopt.tools import check_build


def check_the_library_loaded_is_the_one_expected():
    mpi = check_build.report("x")["mpi"]
    with open("/proc/self/maps") as f:
        mapped = {os.path.realpath(line.split()[-1]) for line in f if "libmpi" in line}
    assert os.path.realpath(mpi["path"]) in mapped, (mpi["path"], mapped)
    assert os.path.realpath(mpi["path"]).startswith(os.environ["EXPECTED_MPI_PREFIX"]), mpi
    assert mpi["vendor"] == os.environ["EXPECTED_MPI_VENDOR"], mpi


if __name__ == "__main__":
    torch.set_num_threads(1)
    harness.run([check_the_library_loaded_is_the_one_expected] + collectives.CHECKS
                + [torch_training.check_equivalence_sgd_momentum_and_adam,
                   torch_training.check_gradient_accumulation,
                   negotiation.check_mismatched_shape_dtype_op_root_kind])
