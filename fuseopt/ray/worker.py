"""One rank of a RayExecutor job: a Ray actor, that is a process of its own.

MPI starts in this process when the user's function calls ``init()``: the
executor has put the PMI server's address and this rank's id in its
environment beforehand (fuseopt/runner/pmi_server.py). The world then lasts
as long as the actor, so every ``run``/``execute`` of one ``start()`` shares
it (``init()`` after ``shutdown()`` joins the same world again); a new
``start()`` makes new actors and a new world."""
import os
import socket
from typing import Any, Callable, Dict, List, Optional

from ..runner.rank_env import rank_environment
from . import ray_logger


class Worker:
    """Horovod's BaseHorovodWorker: holds the ``executable_cls`` instance
    that ``execute(fn)`` passes to ``fn``."""
    executable = None

    def placement(self):
        """(Ray node id, host name, CPU count, pid) of this actor."""
        import ray
        return (ray.get_runtime_context().get_node_id(), socket.gethostname(),
                os.cpu_count() or 1, os.getpid())

    def get_gpu_ids(self) -> List[int]:
        import ray
        return [int(i) for i in ray.get_gpu_ids()]

    def join_world(self, pmi: Dict[str, str], rank: int, size: int, oversubscribed: bool,
                   interface: Optional[str], extra_env: Dict[str, Any]) -> None:
        """This process's environment for MPI_Init, which reads it then."""
        env = rank_environment(dict(os.environ), pmi, rank, size, oversubscribed, interface)
        env.update({k: str(v) for k, v in extra_env.items()})
        for name in set(os.environ) - set(env):
            del os.environ[name]
        os.environ.update(env)

    def update_env_vars(self, env_vars: Dict[str, Any]) -> None:
        os.environ.update({k: str(v) for k, v in env_vars.items()})

    def env_vars(self) -> Dict[str, str]:
        return dict(os.environ)

    def start_executable(self, executable_cls: Optional[type] = None,
                         executable_args: Optional[list] = None,
                         executable_kwargs: Optional[dict] = None) -> None:
        if executable_cls is not None:
            self.executable = executable_cls(*(executable_args or []),
                                             **(executable_kwargs or {}))

    def notify_hosts_changed(self, hosts) -> None:
        """ElasticRayExecutor: the slots changed. The notice goes where
        fuseopt's elastic state looks at each commit (its launch directory);
        the ranks agree on it in that commit's allreduce."""
        from ..training import elastic_protocol
        elastic_protocol.write_notice(os.environ["FUSEOPT_LAUNCH_DIR"], hosts)

    def set_queue(self, queue) -> None:
        ray_logger.configure(queue)

    def execute(self, fn: Callable[[Any], Any]) -> Any:
        return fn(self.executable)


# Horovod's name for it.
BaseHorovodWorker = Worker
