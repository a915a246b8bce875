"""A file that is not a fuseopt checkpoint fails on every rank, with the root's message.

Usage: checkpoint_bad.py DIR"""
import os
import sys

import torch

import fuseopt.torch as hvd
import harness


def check_foreign_file_fails_everywhere():
    path = os.path.join(sys.argv[1], "foreign.pt")
    if hvd.rank() == 0:
        torch.save({"weights": torch.ones(2)}, path)
    hvd.barrier()
    model = torch.nn.Linear(2, 1)
    harness.expect_error(ValueError, lambda: hvd.load_checkpoint(path, model),
                         "foreign.pt", "is not a fuseopt.torch checkpoint")
    harness.expect_error(FileNotFoundError,
                         lambda: hvd.load_checkpoint(path + ".missing", model), "rank 0")


if __name__ == "__main__":
    harness.run([check_foreign_file_fails_everywhere])
