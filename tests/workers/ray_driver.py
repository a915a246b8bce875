"""A user's script driving fuseopt.ray.RayExecutor on a local Ray cluster
(not a rank: tests/test_ray.py runs it with plain python, once, and checks
its ``CASE name: value`` lines). Ray starts with 2 CPUs and 2 logical GPUs
(resources only: no CUDA is touched)."""
import os
import signal
import sys
import time

import numpy as np
import ray

import fuseopt
from script_cases import alive, report
from fuseopt.ray import RayExecutor, ray_logger



def settings():
    return RayExecutor.create_settings(timeout_s=60)



class Counter:
    """An executable_cls: state that lives in the worker between calls."""

    def __init__(self, start, step=1):
        self.value, self.step = start, step

    def bump(self):
        self.value += self.step
        return self.value


def collectives(scale, offset=0):
    fuseopt.init()
    rank = fuseopt.rank()
    total = fuseopt.allreduce(np.array([rank + 1.0]) * scale, name="ray.sum", op=fuseopt.Sum)
    ray_logger.log({"rank": rank, "total": float(total[0])})
    return rank, fuseopt.size(), float(total[0]) + offset, os.environ.get("RAY_CASE")


def case_api():
    executor = RayExecutor(settings(), num_workers=2, cpus_per_worker=1)
    executor.start(executable_cls=Counter, executable_args=[10], executable_kwargs={"step": 5},
                   extra_env_vars={"RAY_CASE": "api"})
    logged = []
    report("run", executor.run(collectives, args=[2.0], kwargs={"offset": 1},
                               callbacks=[logged.append]))
    report("logged", logged)
    report("run again", executor.run(collectives, kwargs={"scale": 1.0}))
    report("execute", [executor.execute(lambda c: c.bump()) for _ in range(2)])
    report("execute_single", executor.execute_single(lambda c: c.value))
    refs = executor.run_remote(collectives, args=[3.0])
    report("run_remote", sorted(ray.get(refs)))
    pids = executor.execute(lambda _: os.getpid())
    executor.shutdown()
    report("api leftovers", alive(pids))


def case_placement():
    executor = RayExecutor(settings(), num_hosts=1, num_workers_per_host=2, use_gpu=True,
                           gpus_per_worker=1, cpus_per_worker=1)
    executor.start()
    report("gpus", executor.execute(lambda _: os.environ.get("CUDA_VISIBLE_DEVICES")))
    report("local", executor.run(lambda: (fuseopt.init(), fuseopt.local_size(),
                                          fuseopt.local_rank())[1:]))
    executor.shutdown()
    try:
        RayExecutor(settings(), num_workers=2, num_hosts=1)
    except ValueError as e:
        report("both shapes", type(e).__name__)
    refused = []
    for kwargs in ({"min_workers": 1, "num_workers": 2},
                   {"min_workers": 1, "cooldown_range": [1, 2]}):
        try:
            RayExecutor(settings(), **kwargs)
        except (ValueError, fuseopt.UnsupportedError) as e:
            refused.append(type(e).__name__)
    report("elastic shapes", tuple(refused))
    tight = RayExecutor(RayExecutor.create_settings(placement_group_timeout_s=1), num_workers=4,
                        cpus_per_worker=1)
    try:
        tight.start()
    except TimeoutError as e:
        report("too big", "placement group" in str(e))


def training():
    import run_train
    return run_train.train()


def case_training():
    executor = RayExecutor(settings(), num_workers=2)
    executor.start()
    report("training", executor.run(training))
    executor.shutdown()


class WorkerError(Exception):
    """Defined in __main__: travels back by value."""


def fails_on_rank_one():
    fuseopt.init()
    if fuseopt.rank() == 1:
        raise WorkerError("rank one gives up")
    fuseopt.allreduce(np.ones(2), name="ray.never")  # rank 0 waits here for ever


def killed_on_rank_one():
    fuseopt.init()
    fuseopt.allreduce(np.ones(2), name="ray.first")
    if fuseopt.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    fuseopt.allreduce(np.ones(2), name="ray.never")


def failing(fn):
    executor = RayExecutor(settings(), num_workers=2)
    executor.start()
    pids = executor.execute(lambda _: os.getpid())
    started = time.time()
    try:
        executor.run(fn)
        outcome = None
    except BaseException as e:
        outcome = e
    took = time.time() - started
    try:
        executor.run(lambda: 1)
        after = "ran"
    except RuntimeError as e:
        after = str(e)
    executor.shutdown()
    return outcome, took, after, alive(pids)


def case_failures():
    error, took, after, left = failing(fails_on_rank_one)
    report("rank error", (type(error).__name__, str(error), error.__notes__[0].split(" (")[0]))
    report("rank error after", ("start() first" in after, left, took < 30))
    error, took, after, left = failing(killed_on_rank_one)
    report("killed", (type(error).__name__, str(error).split(" (")[0]))
    report("killed after", ("start() first" in after, left, took < 30))
    executor = RayExecutor(settings(), num_workers=2)
    executor.start()
    try:
        executor.run(42)
    except TypeError as e:
        report("not callable", ("int" in str(e), e.__notes__[0].split(" (")[0]))
    executor.shutdown()


def node_and_sum():
    fuseopt.init()
    total = fuseopt.allreduce(np.array([fuseopt.rank() + 1.0]), name="ray.nodes",
                              op=fuseopt.Sum)
    return fuseopt.rank(), float(total[0]), ray.get_runtime_context().get_node_id()


def case_nodes():
    """Two Ray nodes (two raylets) on this machine, one worker each through
    num_hosts=2: Horovod's STRICT_SPREAD placement, one bundle per node."""
    executor = RayExecutor(settings(), num_hosts=2, num_workers_per_host=1)
    executor.start()
    results = executor.run(node_and_sum)
    executor.shutdown()
    report("nodes", ([r[:2] for r in results], len({r[2] for r in results}),
                     len(ray.nodes())))


EPOCHS = 5


def train_elastic(fail_at=None, kill_at=None, pause_alone=0.3):
    """Horovod's elastic pattern at the numpy level (no framework to import
    in each new world): an ObjectState committed every epoch, in a function
    wrapped by elastic's run. Returns (rank, size, epochs done, the epoch this
    world started at, resets before this world, the sum of every epoch's
    allreduce of ones: the committed state carried across worlds). ``pause_alone``: seconds per
    epoch while the job has one rank (room for the driver to add a node)."""
    import fuseopt.elastic
    fuseopt.init()
    state = fuseopt.elastic.ObjectState(fuseopt.broadcast_object, fuseopt.rank, epoch=0,
                                        total=0.0)
    resets = int(os.environ.get("FUSEOPT_ELASTIC_RESETS", "0"))

    @fuseopt.elastic.run_fn
    def train(state):
        started = state.epoch
        while state.epoch < EPOCHS:
            state.total += float(fuseopt.allreduce(np.ones(1), name="ray.elastic",
                                                   op=fuseopt.Sum)[0])
            if resets == 0 and state.epoch == kill_at and fuseopt.rank() == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            if state.epoch == fail_at and fuseopt.rank() == 0:
                raise WorkerError("epoch %d is bad" % state.epoch)
            state.epoch += 1
            state.commit()
            ray_logger.log({"epoch": state.epoch, "size": fuseopt.size()})
            time.sleep(pause_alone if fuseopt.size() == 1 else 0.1)
        return fuseopt.rank(), fuseopt.size(), state.epoch, started, resets, state.total
    return train(state)


def case_elastic():
    """ElasticRayExecutor on raylets of one CPU each (emulated nodes): grows
    from 1 to 2 workers when a second node appears, resets after a killed
    worker, and ends on an error of the function; a static RayExecutor then
    puts one worker on each node (case_nodes)."""
    from ray.cluster_utils import Cluster
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                                                            "include_dashboard": False})
    try:
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        elastic_cases(cluster)
    finally:
        ray.shutdown()
        cluster.shutdown()


def elastic_cases(cluster):
    from fuseopt.ray import ElasticRayExecutor
    elastic = ElasticRayExecutor.create_settings(min_num_proc=1, max_num_proc=2,
                                                 elastic_timeout=60, reset_limit=3)
    executor = ElasticRayExecutor(elastic, cpus_per_slot=1)
    executor.start()
    sizes = []

    def grow(info):  # after the first commit on one node, a second node joins
        sizes.append(info["size"])
        if len(ray.nodes()) == 1:
            cluster.add_node(num_cpus=1)
    grown = executor.run(lambda: train_elastic(pause_alone=1.5), callbacks=[grow])
    report("elastic grown", (grown, sorted(set(sizes))))
    case_nodes()  # the cluster has two nodes now
    executor = ElasticRayExecutor(elastic, cpus_per_slot=1)
    executor.start()
    report("elastic killed", executor.run(lambda: train_elastic(kill_at=2)))
    try:
        executor.run(lambda: train_elastic(fail_at=1))
    except WorkerError as e:
        report("elastic error", (str(e), e.__notes__[0].split(" (")[0]))
    # Horovod 0.28's spelling: a RayExecutor with min_workers is elastic.
    executor = RayExecutor(settings(), min_workers=1, max_workers=2, cpus_per_worker=1)
    executor.start()
    report("elastic executor form", executor.run(train_elastic, kwargs={"pause_alone": 0.1}))
    executor.shutdown()


if __name__ == "__main__":
    # "local": a new cluster of our own, whatever `ray start` left on this machine.
    ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False,
             logging_level="ERROR", log_to_driver=False)
    for name in sys.argv[1:]:
        if name != "elastic":
            globals()["case_" + name]()
    ray.shutdown()
    if "elastic" in sys.argv[1:]:  # with a cluster of its own (and case_nodes)
        case_elastic()
