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
