"""Horovod's ``horovod.common.util``: the helpers its users' scripts and
its test suites import (environment, version and capability checks)."""
import contextlib
import os
from typing import Any, Iterator, List, Sequence

from ..api.capabilities import gloo_built, mpi_built, nccl_built  # noqa: F401  (Horovod's names)

FRAMEWORKS = ("tensorflow", "torch")  # what fuseopt binds; Horovod also names mxnet


@contextlib.contextmanager
def env(**kwargs: Any) -> Iterator[None]:
    """Sets environment variables (None values are skipped) for the body of
    a ``with`` and puts the old values back after it."""
    values = {k: v for k, v in kwargs.items() if v is not None}
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


def is_iterable(x: Any) -> bool:
    try:
        iter(x)
    except TypeError:
        return False
    return True


def is_version_greater_equal_than(ver: str, target: str) -> bool:
    """Whether version string ``ver`` >= ``target`` (PEP 440 ordering)."""
    if not (isinstance(ver, str) and isinstance(target, str)):
        raise ValueError("is_version_greater_equal_than takes two strings, not %r and %r"
                         % (ver, target))
    from packaging import version
    return version.parse(ver) >= version.parse(target)


def num_rank_is_power_2(num_rank: int) -> bool:
    """Whether Adasum can run on ``num_rank`` ranks."""
    return num_rank != 0 and num_rank & (num_rank - 1) == 0


def split_list(items: Sequence[Any], n: int) -> List[Sequence[Any]]:
    """``items`` in ``n`` consecutive chunks whose sizes differ by one at most."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def extension_available(ext_base_name: str, verbose: bool = False) -> bool:
    """Whether fuseopt binds this framework (``horovod.torch`` names torch)
    and the framework imports."""
    name = ext_base_name.split(".")[-1]
    if name not in FRAMEWORKS:
        return False
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def gpu_available(ext_base_name: str, verbose: bool = False) -> bool:
    """Whether tensors of this framework on a GPU can be reduced here: the
    framework sees a CUDA GPU and NCCL loads."""
    if not extension_available(ext_base_name) or not nccl_built():
        return False
    if ext_base_name.split(".")[-1] == "torch":
        import torch
        return bool(torch.cuda.is_available())
    import tensorflow as tf
    return bool(tf.config.list_physical_devices("GPU"))
