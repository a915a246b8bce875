"""Horovod's ``horovod.runner.common`` import path (see ``.util``)."""
