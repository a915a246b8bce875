"""Horovod's ``horovod.runner.util`` import path (``threads``)."""
