"""Every ``horovod.*`` import that Horovod 0.28.1's own examples and docs
make, with ``horovod`` swapped for ``fuseopt``, imports (and has the names
imported from it), or, for what fuseopt documents it does not have (REFUSED,
from docs/migration.md's 'Other import paths' and fuseopt/base/unsupported.py),
fails with an UnsupportedError that names what is missing and why: never a
bare ModuleNotFoundError or AttributeError, and never a refusal where
fuseopt has the module.

The list is a set of facts read by hand from Horovod's source at tag v0.28.1
(``git grep -E "^\\s*(import|from) horovod" v0.28.1 -- examples docs``, plus
the import paths real wrappers use that the issue names); nothing here comes
from fuseopt. ``docs/ray.rst``'s ``from horovod.torch import hvd`` is left out:
it is a typo there (``horovod.torch`` has no ``hvd``)."""
import importlib

import pytest

from fuseopt.base.errors import UnsupportedError

# module path -> names a script imports from it (empty: ``import path``)
HOROVOD_IMPORTS = {
    "horovod": ("__version__", "run"),                 # docs/conf.py, examples/*/..._mnist.py
    "horovod.torch": (),
    "horovod.torch.mpi_ops": ("allreduce", "synchronize", "Average"),
    "horovod.torch.elastic.sampler": ("ElasticSampler",),  # examples/elastic/pytorch
    "horovod.tensorflow": (),
    "horovod.tensorflow.keras": (),
    "horovod.tensorflow.keras.callbacks": ("BestModelCheckpoint",),  # examples/keras
    "horovod.keras": (),
    "horovod.common.exceptions": ("HorovodInternalError", "HostsUpdatedInterrupt"),
    "horovod.mxnet": (),
    "horovod.tensorflow.data.compute_service": ("TfDataServiceConfig", "tf_data_service"),
    "horovod.ray": ("RayExecutor", "ElasticRayExecutor", "ray_logger"),
    "horovod.ray.elastic": ("TestDiscovery",),
    "horovod.spark": ("run",),
    "horovod.spark.keras": (),
    "horovod.spark.torch": (),
    "horovod.spark.lightning": (),
    "horovod.spark.lightning.estimator": ("MIN_PL_VERSION",),
    "horovod.spark.keras.datamodule": ("NVTabularDataModule",),
    "horovod.spark.common.store": ("Store",),
    "horovod.spark.common.backend": ("SparkBackend",),
    "horovod.spark.task": ("get_available_devices",),
    # examples/tensorflow2/tensorflow2_mnist_data_service.py, and Horovod's
    # test utilities and test files that users copy into their harnesses
    # (git grep -E "^\s*(import|from) horovod" v0.28.1 -- test/parallel test/utils)
    "horovod.runner.common.util.env": ("get_env_rank_and_size",),
    "horovod.runner.util.threads": ("in_thread", "on_event"),
    "horovod.common.util": ("env", "is_version_greater_equal_than", "gpu_available",
                            "split_list", "is_iterable", "num_rank_is_power_2"),
    "horovod.tensorflow.util": ("_executing_eagerly",),
    "horovod.tensorflow.mpi_ops": ("allreduce", "Sum", "_basics"),
}


# What fuseopt does not have, as its docs say: MXNet, tf.data's compute service
# and the Spark Estimators (their modules and everything below them).
REFUSED = {"horovod.mxnet", "horovod.tensorflow.data.compute_service", "horovod.spark.keras",
           "horovod.spark.torch", "horovod.spark.lightning", "horovod.spark.lightning.estimator",
           "horovod.spark.keras.datamodule", "horovod.spark.common.store",
           "horovod.spark.common.backend"}


@pytest.mark.parametrize("horovod_path", sorted(HOROVOD_IMPORTS))
def test_horovod_import_path_imports_or_says_why_not(horovod_path):
    path = "fuseopt" + horovod_path[len("horovod"):]
    if horovod_path in REFUSED:
        with pytest.raises(UnsupportedError) as refused:
            importlib.import_module(path)
        # Names the module that is missing (the path or the package above it
        # that refused) and says what to do instead.
        parts = path.split(".")
        refusing = [".".join(parts[:i]) for i in range(2, len(parts) + 1)]
        assert any(m + ":" in str(refused.value) for m in refusing), refused.value
        assert any(word in str(refused.value) for word in ("instead", "Use ", "Read ")), \
            refused.value
        return
    module = importlib.import_module(path)  # a refusal here fails: fuseopt has this one
    missing = [name for name in HOROVOD_IMPORTS[horovod_path] if not hasattr(module, name)]
    assert not missing, "%s lacks %s (Horovod's %s has them)" % (path, missing, horovod_path)


@pytest.mark.parametrize("name", ["secret", "safe_shell_exec", "hosts", "timeout", "network"])
def test_horovodrun_internals_say_why_not(name):
    """The rest of horovod.runner.common.util is horovodrun's own machinery."""
    with pytest.raises(UnsupportedError, match="fuseopt.runner.common.util.%s: .*fuseoptrun" % name):
        exec("from fuseopt.runner.common.util import %s" % name, {})


def test_env_rank_and_size_as_horovods(monkeypatch):
    from fuseopt.runner.common.util.env import get_env_rank_and_size
    for var in ("HOROVOD_RANK", "HOROVOD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    assert get_env_rank_and_size() == (0, 1)
    monkeypatch.setenv("PMI_RANK", "3")
    monkeypatch.setenv("PMI_SIZE", "4")
    assert get_env_rank_and_size() == (3, 4)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")  # Horovod's order: Open MPI's first
    with pytest.raises(RuntimeError, match="only one of OMPI_COMM_WORLD_RANK"):
        get_env_rank_and_size()


def test_thread_helpers_as_horovods():
    import threading
    from fuseopt.runner.util.threads import execute_function_multithreaded, in_thread, on_event
    seen = []
    in_thread(seen.append, (1,)).join()
    in_thread(lambda: 1 / 0, silent=True).join()  # swallowed
    with pytest.raises(ValueError, match="tuple"):
        in_thread(seen.append, [2])
    event, stop = threading.Event(), threading.Event()
    waiter = on_event(event, seen.append, (3,), stop=stop, check_stop_interval_s=0.01)
    event.set()
    waiter.join(5)
    stopped = on_event(threading.Event(), seen.append, (4,), stop=stop,
                       check_stop_interval_s=0.01)
    stop.set()
    stopped.join(5)
    assert seen == [1, 3] and not waiter.is_alive() and not stopped.is_alive()
    assert execute_function_multithreaded(lambda a, b: a * b, [[2, 3], [4, 5]],
                                          max_concurrent_executions=1) == {0: 6, 1: 20}


def test_fuseopt_public_paths_survive_the_layer_folders():
    """The import paths fuseopt's own docs and users name, kept when the
    modules moved into layer folders (base/, core/, api/, training/)."""
    import fuseopt
    import fuseopt.checkpoint
    import fuseopt.elastic
    import fuseopt.errors
    from fuseopt.checkpoint import CheckpointError
    from fuseopt.elastic import HostsUpdatedInterrupt, ObjectState
    from fuseopt.errors import FuseoptError, RankFailedError
    assert CheckpointError is fuseopt.CheckpointError
    assert RankFailedError is fuseopt.RankFailedError and issubclass(RankFailedError, FuseoptError)
    assert fuseopt.elastic.HostsUpdatedInterrupt is HostsUpdatedInterrupt and ObjectState
    for name in ("allreduce", "allgather", "broadcast", "init", "shutdown", "run",
                 "ProcessSet", "Shared", "start_timeline"):
        assert callable(getattr(fuseopt, name)), name
    for path in ("fuseopt.torch", "fuseopt.tensorflow", "fuseopt.tensorflow.keras",
                 "fuseopt.keras", "fuseopt.launcher.cli", "fuseopt.runner"):
        importlib.import_module(path)
