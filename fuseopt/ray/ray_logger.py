"""Horovod's ``horovod.ray.ray_logger``: ``log(info)`` inside the function a
RayExecutor runs hands ``info`` from rank 0 to every callback given to that
``run``/``execute`` on the driver (the executor drains a Ray queue between
its waits); other ranks' values are dropped, as Horovod's are. Called where
no executor set it up, it warns once and does nothing."""
import warnings

_queue = None
_configured = False
_warned = False


def configure(queue) -> None:
    """The executor's queue on rank 0; None elsewhere (values dropped)."""
    global _queue, _configured
    _queue, _configured = queue, True


def log(info_dict) -> None:
    """Sends ``info_dict`` (anything Ray can serialise) to the driver."""
    global _warned
    if _queue is not None:
        _queue.put(info_dict)
    elif not _configured and not _warned:
        warnings.warn("ray_logger.log called outside a RayExecutor run: nothing receives it")
        _warned = True
