"""``fuseopt.elastic``: Horovod's elastic State, ObjectState, run and
HostsUpdatedInterrupt (fuseopt/training/elastic.py), under the import path
scripts use."""
import sys

from .training import elastic as _elastic

sys.modules[__name__] = _elastic
