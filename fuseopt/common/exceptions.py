"""Horovod's ``horovod.common.exceptions``, for scripts that catch them by
that path: ``HorovodInternalError`` is fuseopt's base error (a collective
failed: a peer was lost, the job shut down) and ``HostsUpdatedInterrupt`` the
elastic one (the job's hosts changed)."""
from ..training.elastic import HostsUpdatedInterrupt
from ..base.errors import FuseoptError as HorovodInternalError

__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt"]
