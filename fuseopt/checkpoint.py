"""``fuseopt.checkpoint``: the checkpoint protocol and CheckpointError
(fuseopt/training/checkpoint.py), under the import path scripts use."""
import sys

from .training import checkpoint as _checkpoint

sys.modules[__name__] = _checkpoint
