"""Horovod's ``horovod.common`` import path: ``fuseopt.common.exceptions``."""
