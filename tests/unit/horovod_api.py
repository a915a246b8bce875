"""Horovod 0.28.1's public API: reference data for tests/unit/test_horovod_api.py.

Transcribed by hand from the source of Horovod 0.28.1 (the release's sdist on
PyPI, ``horovod-0.28.1.tar.gz``, sha256
92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0, whose
``horovod/__init__.py`` says ``__version__ = '0.28.1'``; the
``horovod.tensorflow`` and ``elastic`` entries were read from the git tag
``v0.28.1`` of github.com/horovod/horovod, commit
1d217b59949986d025f6db93c49943fb6b6cc78f, same paths). Nothing here is
generated from fuseopt. Paths read, inside that sdist:

* ``horovod/torch/__init__.py``: the list of names of ``horovod.torch``;
* ``horovod/torch/mpi_ops.py``: the collectives, ``poll``, ``synchronize``,
  ``join``, ``barrier``, ``init``/``shutdown`` and the ``_basics`` aliases;
* ``horovod/torch/functions.py``: ``broadcast_parameters``,
  ``broadcast_optimizer_state``, ``broadcast_object``, ``allgather_object``;
* ``horovod/torch/optimizer.py``: ``DistributedOptimizer``;
* ``horovod/torch/sync_batch_norm.py``: ``SyncBatchNorm.__init__``;
* ``horovod/torch/compression.py``, ``horovod/tensorflow/compression.py``:
  ``Compression`` (class attributes ``none`` and ``fp16``);
* ``horovod/common/basics.py``: ``HorovodBasics.init``, ``shutdown``,
  ``is_initialized``, ``start_timeline``, ``stop_timeline``, ``size`` ...
  ``rocm_built`` (bound methods: ``self`` dropped) and the op constants;
* ``horovod/common/process_sets.py``: ``ProcessSet.__init__``,
  ``global_process_set``, ``add_process_set``, ``remove_process_set``;
* ``horovod/common/exceptions.py``: ``HorovodInternalError(RuntimeError)``;
* ``horovod/tensorflow/keras/__init__.py``: the list of names of
  ``horovod.tensorflow.keras`` and its own functions;
* ``horovod/tensorflow/__init__.py``: the list of names of
  ``horovod.tensorflow`` and its own functions (``allreduce``,
  ``grouped_allreduce``, ``reducescatter``, ``grouped_reducescatter``,
  ``broadcast_global_variables``, ``BroadcastGlobalVariablesHook.__init__``,
  ``DistributedOptimizer``, ``DistributedGradientTape``,
  ``PartialDistributedGradientTape``), taken as a TF2 user sees them (the
  ``hasattr(tf, 'GradientTape')`` branch; ``broadcast_global_variables`` and
  ``BroadcastGlobalVariablesHook`` are defined when ``tf.compat.v1`` and a
  ``SessionRunHook`` exist, and are transcribed although TF1-only in use);
* ``horovod/tensorflow/mpi_ops.py``: the re-exported ``init`` ...
  ``rocm_built``, ``is_homogeneous``, the op constants, the process-set names,
  ``allgather``, ``grouped_allgather``, ``broadcast``, ``broadcast_``,
  ``alltoall``, ``join`` (no parameters) and ``size_op``, ``local_size_op``,
  ``rank_op``, ``local_rank_op``, ``process_set_included_op`` (there is no
  ``barrier`` in ``horovod.tensorflow``);
* ``horovod/tensorflow/functions.py``: ``broadcast_variables``,
  ``broadcast_object``, ``broadcast_object_fn``, ``allgather_object``;
* ``horovod/tensorflow/sync_batch_norm.py``: ``SyncBatchNormalization.__init__``;
* ``horovod/tensorflow/elastic.py`` (and ``horovod/common/elastic.py`` for
  ``ObjectState.__init__``): ``horovod.tensorflow.elastic``;
* ``horovod/ray/__init__.py``, ``horovod/ray/runner.py``: ``RayExecutor`` and
  its methods, ``BaseHorovodWorker``; ``horovod/ray/elastic.py``:
  ``ElasticRayExecutor`` and its methods, ``RayHostDiscovery``,
  ``TestDiscovery``;
* ``horovod/spark/__init__.py``, ``horovod/spark/runner.py``: ``run``,
  ``run_elastic``;
* ``horovod/torch/elastic/__init__.py``, ``horovod/torch/elastic/state.py``,
  ``horovod/torch/elastic/sampler.py``: ``horovod.torch.elastic``;
* ``horovod/tensorflow/keras/elastic.py`` (and ``horovod/_keras/elastic.py``,
  whose ``*Impl`` bases take the backend first): ``horovod.tensorflow.keras.elastic``;
* ``horovod/tensorflow/keras/callbacks.py`` (and ``horovod/_keras/callbacks.py``,
  whose ``*Impl`` bases take the backend first): the callbacks' ``__init__``.

Conventions:

* A callable is a tuple of ``(parameter name, default, kind)``. ``default`` is
  the sentinel ``REQUIRED`` or a string: either ``repr()`` of a literal
  (``'None'``, ``'1.0'``, ``"''"``) or a name as written in Horovod's source
  (``'Average'``, ``'global_process_set'``, ``'Compression.none'``), which
  the test resolves in the fuseopt module and compares by identity.
  Horovod's ``**kwargs`` (the elastic states' attributes to sync,
  ``SyncBatchNormalization``'s Keras layer arguments) is kind ``VAR_KEYWORD``:
  fuseopt's callable must take arbitrary keywords too, under any name.
* Horovod's ``init`` is ``init(*args, **kwargs)`` in ``torch/mpi_ops.py`` and
  ``tensorflow/mpi_ops.py`` and torch's ``shutdown`` is
  ``shutdown(*args, **kwargs)``; both only forward to
  ``HorovodBasics.init(self, comm=None, process_sets=None)`` and
  ``HorovodBasics.shutdown(self)``, so the signatures recorded are those.
* For a class that users construct, the tuple is its ``__init__`` without
  ``self`` and the name is in ``CLASSES``; other classes are ``"class"``.
  ``"constant"`` is a value, ``"module"`` a Horovod submodule.

Left out: private names, plain modules (``torch``, ``tf``, ``keras``, ``K``,
``inspect``, ``warnings``, ``version``, ``os``, ``ops``, and
``device_compatibility_check``, imported by ``horovod.tensorflow`` under TF
2.2 only) and helpers that Horovod's modules only import for their own use
(``check_extension`` in ``horovod.torch``; ``is_version_greater_equal_than``
in ``horovod.tensorflow.keras`` and its ``callbacks``; ``check_extension``,
``gpu_available``, ``split_list``, ``handle_average_backwards_compatibility``,
``check_num_rank_power_of_2``, ``vars_to_refs``, ``refs_to_vars`` and
``LocalGradientAggregationHelper`` in ``horovod.tensorflow``; ``run_fn``,
``init``, ``shutdown``, ``rank``, ``broadcast_object``,
``broadcast_object_fn``, ``broadcast_variables`` and ``HorovodInternalError``
in ``horovod.tensorflow.elastic``: not in its ``__all__``, which is what
Horovod's API docs list, and not named as ``hvd.elastic.X`` in its elastic
guide or examples; scripts call the functions as ``hvd.X``; ``run_fn``,
``init``, ``shutdown`` in ``horovod.torch.elastic``; ``TensorFlowKerasState``,
the base of ``KerasState``, in ``horovod.tensorflow.keras.elastic``), and
submodules that become attributes of a package only because they were imported
(``horovod.torch.mpi_ops``, ``.functions``, ``.optimizer``,
``horovod.torch.elastic.state``, ``.sampler``, ``horovod.tensorflow.mpi_ops``,
``.util`` ...). ``elastic`` is in: ``horovod.torch``, ``horovod.tensorflow``
and ``horovod.tensorflow.keras`` import it by name, and scripts call
``hvd.elastic.run``.

``horovod.tensorflow.elastic`` has ``ObjectState`` (imported from
``horovod/common/elastic.py`` as the states' base; not in its ``__all__``, but
the one state class there that a TF script can construct or subclass as
``hvd.elastic.ObjectState`` to sync plain Python values). None of the three
elastic modules has ``State``, and ``horovod.torch.elastic`` has no ``ObjectState``
either (its ``__init__.py`` imports only ``run_fn``, ``init``, ``shutdown``,
``ElasticSampler`` and ``TorchState``), although Horovod's elastic guide
speaks of ``hvd.elastic.State``: fuseopt may have them as extras.
"""
from types import MappingProxyType


class _Required:
    def __repr__(self):
        return "REQUIRED"


REQUIRED = _Required()
POSITIONAL_OR_KEYWORD = "POSITIONAL_OR_KEYWORD"
KEYWORD_ONLY = "KEYWORD_ONLY"
VAR_KEYWORD = "VAR_KEYWORD"

_P = POSITIONAL_OR_KEYWORD


def _sig(*params):
    """``'name'`` is a required parameter, ``('name', 'default')`` an optional
    one, ``'**name'`` Horovod's ``**name`` (last)."""
    out = []
    for p in params:
        if isinstance(p, str) and p.startswith("**"):
            out.append((p[2:], REQUIRED, VAR_KEYWORD))
        elif isinstance(p, str):
            out.append((p, REQUIRED, _P))
        else:
            out.append((p[0], p[1], _P))
    return tuple(out)


NO_ARGS = ()

# horovod/common/basics.py (HorovodBasics, bound methods)
_INIT = _sig(("comm", "None"), ("process_sets", "None"))
_START_TIMELINE = _sig("file_path", ("mark_cycles", "False"))
_BASICS = {name: NO_ARGS for name in (
    "shutdown", "is_initialized", "stop_timeline",
    "size", "local_size", "cross_size", "rank", "local_rank", "cross_rank",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built")}
_BASICS.update(init=_INIT, start_timeline=_START_TIMELINE)

# horovod/common/process_sets.py
_PROCESS_SETS = {
    "ProcessSet": _sig("ranks_or_comm"),
    "global_process_set": "constant",
    "add_process_set": _sig("process_set"),
    "remove_process_set": _sig("process_set"),
}

_PS = ("process_set", "global_process_set")

# horovod/torch/mpi_ops.py
_ALLREDUCE_ASYNC = _sig("tensor", ("average", "None"), ("name", "None"), ("op", "None"),
                        ("prescale_factor", "1.0"), ("postscale_factor", "1.0"), _PS)
_ALLREDUCE = _sig("tensor", ("average", "None"), ("name", "None"),
                  ("compression", "Compression.none"), ("op", "None"),
                  ("prescale_factor", "1.0"), ("postscale_factor", "1.0"), _PS)
_GROUPED_ALLREDUCE_ASYNC = _sig("tensors", ("average", "None"), ("name", "None"), ("op", "None"),
                                ("prescale_factor", "1.0"), ("postscale_factor", "1.0"), _PS)
_GROUPED_ALLREDUCE = _sig("tensors", ("average", "None"), ("name", "None"),
                          ("compression", "Compression.none"), ("op", "None"),
                          ("prescale_factor", "1.0"), ("postscale_factor", "1.0"), _PS)
_BROADCAST = _sig("tensor", "root_rank", ("name", "None"), _PS)

TORCH = MappingProxyType(dict(
    _BASICS,
    **_PROCESS_SETS,
    elastic="module",  # horovod/torch/__init__.py: from horovod.torch import elastic
    # horovod/torch/compression.py
    Compression="class",
    # horovod/torch/functions.py
    allgather_object=_sig("obj", ("name", "None")),
    broadcast_object=_sig("obj", ("root_rank", "0"), ("name", "None"), _PS),
    broadcast_optimizer_state=_sig("optimizer", "root_rank", ("model", "None")),
    broadcast_parameters=_sig("params", "root_rank"),
    # horovod/torch/mpi_ops.py
    allreduce=_ALLREDUCE,
    allreduce_async=_ALLREDUCE_ASYNC,
    allreduce_=_ALLREDUCE_ASYNC,
    allreduce_async_=_ALLREDUCE_ASYNC,
    grouped_allreduce=_GROUPED_ALLREDUCE,
    grouped_allreduce_async=_GROUPED_ALLREDUCE_ASYNC,
    grouped_allreduce_=_GROUPED_ALLREDUCE_ASYNC,
    grouped_allreduce_async_=_GROUPED_ALLREDUCE_ASYNC,
    sparse_allreduce_async=_sig("tensor", "name", "op", _PS),
    allgather=_sig("tensor", ("name", "None"), _PS),
    allgather_async=_sig("tensor", ("name", "None"), _PS),
    grouped_allgather=_sig("tensors", ("name", "None"), _PS),
    grouped_allgather_async=_sig("tensors", ("name", "None"), _PS),
    broadcast=_BROADCAST,
    broadcast_async=_BROADCAST,
    broadcast_=_BROADCAST,
    broadcast_async_=_BROADCAST,
    alltoall=_sig("tensor", ("splits", "None"), ("name", "None"), _PS),
    alltoall_async=_sig("tensor", ("splits", "None"), ("name", "None"), _PS),
    reducescatter=_sig("tensor", ("name", "None"), ("compression", "Compression.none"),
                       ("op", "Average"), _PS,
                       ("prescale_factor", "1.0"), ("postscale_factor", "1.0")),
    reducescatter_async=_sig("tensor", ("name", "None"), ("op", "Average"), _PS,
                             ("prescale_factor", "1.0"), ("postscale_factor", "1.0")),
    grouped_reducescatter=_sig("tensors", ("name", "None"),
                               ("compression", "Compression.none"), ("op", "Average"), _PS,
                               ("prescale_factor", "1.0"), ("postscale_factor", "1.0")),
    grouped_reducescatter_async=_sig("tensors", ("name", "None"), ("op", "Average"), _PS,
                                     ("prescale_factor", "1.0"), ("postscale_factor", "1.0")),
    join=_sig(("device", "-1")),
    barrier=_sig(_PS),
    poll=_sig("handle"),
    synchronize=_sig("handle"),
    Average="constant",
    Sum="constant",
    Adasum="constant",
    Min="constant",
    Max="constant",
    Product="constant",
    # horovod/common/exceptions.py, re-exported by horovod/torch/mpi_ops.py
    HorovodInternalError="class",
    # horovod/torch/optimizer.py (a function in Horovod)
    DistributedOptimizer=_sig("optimizer", ("named_parameters", "None"),
                              ("compression", "Compression.none"),
                              ("backward_passes_per_step", "1"), ("op", "Average"),
                              ("gradient_predivide_factor", "1.0"), ("num_groups", "0"),
                              ("groups", "None"), ("sparse_as_dense", "False"), _PS),
    # horovod/torch/sync_batch_norm.py
    SyncBatchNorm=_sig("num_features", ("eps", "1e-05"), ("momentum", "0.1"),
                       ("affine", "True"), ("track_running_stats", "True")),
))

# horovod/tensorflow/__init__.py
TENSORFLOW = MappingProxyType(dict(
    _BASICS,  # from horovod/tensorflow/mpi_ops.py
    **_PROCESS_SETS,  # via horovod/tensorflow/mpi_ops.py
    elastic="module",  # from horovod.tensorflow import elastic
    # horovod/tensorflow/compression.py
    Compression="class",
    # horovod/tensorflow/functions.py
    allgather_object=_sig("obj", ("session", "None"), ("name", "None"), _PS),
    broadcast_object=_sig("obj", ("root_rank", "0"), ("session", "None"), ("name", "None"), _PS),
    broadcast_object_fn=_sig(("root_rank", "0"), ("session", "None"), ("name", "None"), _PS),
    broadcast_variables=_sig("variables", "root_rank", _PS, ("inplace", "False")),
    # horovod/tensorflow/mpi_ops.py
    allgather=_sig("tensor", ("name", "None"), ("ignore_name_scope", "False"), _PS),
    grouped_allgather=_sig("tensors", ("name", "None"), ("ignore_name_scope", "False"), _PS),
    broadcast=_sig("tensor", "root_rank", ("name", "None"), ("ignore_name_scope", "False"), _PS),
    broadcast_=_sig("variables", "root_rank", ("name", "None"), _PS),
    alltoall=_sig("tensor", ("splits", "None"), ("name", "None"), ("ignore_name_scope", "False"),
                  _PS),
    join=NO_ARGS,
    is_homogeneous=NO_ARGS,  # HorovodBasics.is_homogeneous, bound
    size_op=_sig(("process_set_id", "0"), ("name", "None")),
    process_set_included_op=_sig(("process_set_id", "0"), ("name", "None")),
    local_size_op=_sig(("name", "None")),
    rank_op=_sig(("name", "None")),
    local_rank_op=_sig(("name", "None")),
    Average="constant",
    Sum="constant",
    Adasum="constant",
    Min="constant",
    Max="constant",
    Product="constant",
    # horovod/tensorflow/sync_batch_norm.py
    SyncBatchNormalization=_sig(("fused", "False"), "**kwargs"),
    # horovod/tensorflow/__init__.py
    allreduce=_sig("tensor", ("average", "None"), ("device_dense", "''"), ("device_sparse", "''"),
                   ("compression", "Compression.none"), ("op", "None"),
                   ("prescale_factor", "1.0"), ("postscale_factor", "1.0"),
                   ("name", "None"), _PS, ("ignore_name_scope", "False")),
    reducescatter=_sig("tensor", ("device_dense", "''"), ("compression", "Compression.none"),
                       ("op", "Average"), ("name", "None"), _PS,
                       ("ignore_name_scope", "False"),
                       ("prescale_factor", "1.0"), ("postscale_factor", "1.0")),
    grouped_allreduce=_sig("tensors", ("average", "None"), ("device_dense", "''"),
                           ("device_sparse", "''"), ("compression", "Compression.none"),
                           ("op", "None"), ("prescale_factor", "1.0"),
                           ("postscale_factor", "1.0"), _PS,
                           ("ignore_name_scope", "False"), ("name", "None")),
    grouped_reducescatter=_sig("tensors", ("device_dense", "''"),
                               ("compression", "Compression.none"), ("op", "Average"), _PS,
                               ("prescale_factor", "1.0"), ("postscale_factor", "1.0")),
    broadcast_global_variables=_sig("root_rank"),
    BroadcastGlobalVariablesHook=_sig("root_rank", ("device", "''")),
    # functions in Horovod
    DistributedOptimizer=_sig("optimizer", ("name", "None"), ("use_locking", "False"),
                              ("device_dense", "''"), ("device_sparse", "''"),
                              ("compression", "Compression.none"),
                              ("sparse_as_dense", "False"), ("backward_passes_per_step", "1"),
                              ("op", "Average"), ("gradient_predivide_factor", "1.0"),
                              ("average_aggregated_gradients", "False"),
                              ("num_groups", "0"), ("groups", "None"), _PS,
                              ("scale_local_gradients", "True")),
    DistributedGradientTape=_sig("gradtape", ("device_dense", "''"), ("device_sparse", "''"),
                                 ("compression", "Compression.none"),
                                 ("sparse_as_dense", "False"), ("op", "Average"),
                                 ("gradient_predivide_factor", "1.0"), ("num_groups", "0"),
                                 ("groups", "None"), _PS, ("scale_local_gradients", "True")),
    PartialDistributedGradientTape=_sig("gradtape", ("device_dense", "''"),
                                        ("device_sparse", "''"),
                                        ("compression", "Compression.none"),
                                        ("sparse_as_dense", "False"), ("op", "Average"),
                                        ("gradient_predivide_factor", "1.0"),
                                        ("num_groups", "0"), ("groups", "None"), _PS,
                                        ("local_layers", "None"),
                                        ("scale_local_gradients", "True")),
))

# elastic run(func), the decorator (horovod/tensorflow/elastic.py,
# horovod/torch/elastic/__init__.py; re-exported by horovod/tensorflow/keras/elastic.py)
_ELASTIC_RUN = _sig("func")

# horovod/tensorflow/elastic.py (each class's __init__)
TENSORFLOW_ELASTIC = MappingProxyType(dict(
    run=_ELASTIC_RUN,
    TensorFlowKerasState=_sig("model", ("optimizer", "None"), ("backend", "None"), "**kwargs"),
    TensorFlowState=_sig(("variables", "None"), ("session", "None"), "**kwargs"),
    # horovod/common/elastic.py
    ObjectState=_sig("bcast_object", "get_rank", "**kwargs"),
))

# horovod/torch/elastic/__init__.py (each class's __init__)
TORCH_ELASTIC = MappingProxyType(dict(
    run=_ELASTIC_RUN,
    # horovod/torch/elastic/state.py
    TorchState=_sig(("model", "None"), ("optimizer", "None"), "**kwargs"),
    # horovod/torch/elastic/sampler.py
    ElasticSampler=_sig("dataset", ("shuffle", "True"), ("seed", "0")),
))

# horovod/tensorflow/keras/elastic.py (each class's __init__; the callbacks
# pass tf.keras.backend first to their horovod/_keras/elastic.py bases)
TENSORFLOW_KERAS_ELASTIC = MappingProxyType(dict(
    run=_ELASTIC_RUN,  # from horovod.tensorflow.elastic
    KerasState=_sig("model", ("optimizer", "None"), "**kwargs"),
    CommitStateCallback=_sig("state", ("batches_per_commit", "1")),
    UpdateBatchStateCallback=_sig("state"),
    UpdateEpochStateCallback=_sig("state"),
))

# horovod/tensorflow/keras/__init__.py
TENSORFLOW_KERAS = MappingProxyType(dict(
    _BASICS,  # via horovod/tensorflow/__init__.py from horovod/tensorflow/mpi_ops.py
    **_PROCESS_SETS,  # via horovod/tensorflow/mpi_ops.py
    Average="constant",
    Sum="constant",
    Compression="class",  # horovod/tensorflow/compression.py
    callbacks="module",
    elastic="module",  # from horovod.tensorflow.keras import callbacks, elastic
    DistributedOptimizer=_sig("optimizer", ("name", "None"), ("device_dense", "''"),
                              ("device_sparse", "''"), ("compression", "Compression.none"),
                              ("sparse_as_dense", "False"), ("gradient_predivide_factor", "1.0"),
                              ("op", "Average"), ("backward_passes_per_step", "1"),
                              ("average_aggregated_gradients", "False"), ("num_groups", "0"),
                              ("groups", "None"), _PS, ("scale_local_gradients", "True")),
    broadcast_global_variables=_sig("root_rank"),
    allreduce=_sig("value", ("name", "None"), ("average", "None"), ("prescale_factor", "1.0"),
                   ("postscale_factor", "1.0"), ("op", "None"),
                   ("compression", "Compression.none")),
    allgather=_sig("value", ("name", "None")),
    broadcast=_sig("value", "root_rank", ("name", "None")),
    reducescatter=_sig("value", ("name", "None"), ("op", "Average")),
    load_model=_sig("filepath", ("custom_optimizers", "None"), ("custom_objects", "None"),
                    ("compression", "Compression.none"), ("legacy_opts", "False")),
))

# horovod/tensorflow/keras/callbacks.py (each class's __init__)
TENSORFLOW_KERAS_CALLBACKS = MappingProxyType(dict(
    BroadcastGlobalVariablesCallback=_sig("root_rank", ("device", "''"),
                                          ("local_variables", "None")),
    MetricAverageCallback=_sig(("device", "''")),
    LearningRateScheduleCallback=_sig("initial_lr", "multiplier", ("start_epoch", "0"),
                                      ("end_epoch", "None"), ("staircase", "True"),
                                      ("momentum_correction", "True"),
                                      ("steps_per_epoch", "None")),
    LearningRateWarmupCallback=_sig("initial_lr", ("warmup_epochs", "5"),
                                    ("momentum_correction", "True"),
                                    ("steps_per_epoch", "None"), ("verbose", "0")),
    BestModelCheckpoint=_sig(("monitor", "'val_loss'"), ("verbose", "0"),
                             ("save_weights_only", "False"), ("mode", "'auto'"),
                             ("save_freq", "'epoch'")),
))

# horovod/ray/runner.py (RayExecutor and its methods; ``self`` dropped) and
# horovod/ray/__init__.py (the names it exports)
_FN = _sig("fn")
RAY = MappingProxyType({
    "RayExecutor": _sig("settings", ("num_workers", "None"), ("num_hosts", "None"),
                        ("num_workers_per_host", "1"), ("cpus_per_worker", "1"),
                        ("use_gpu", "False"), ("gpus_per_worker", "None"),
                        ("use_current_placement_group", "True"), ("min_workers", "None"),
                        ("max_workers", "None"), ("reset_limit", "None"),
                        ("cooldown_range", "None"), ("elastic_timeout", "600"),
                        ("override_discovery", "True")),
    "RayExecutor.create_settings": _sig(("timeout_s", "30"), ("ssh_identity_file", "None"),
                                        ("ssh_str", "None"),
                                        ("placement_group_timeout_s", "100"), ("nics", "None")),
    "RayExecutor.start": _sig(("executable_cls", "None"), ("executable_args", "None"),
                              ("executable_kwargs", "None"), ("extra_env_vars", "None")),
    "RayExecutor.execute": _sig("fn", ("callbacks", "None")),
    "RayExecutor.run": _sig("fn", ("args", "None"), ("kwargs", "None"), ("callbacks", "None")),
    "RayExecutor.run_remote": _sig("fn", ("args", "None"), ("kwargs", "None")),
    "RayExecutor.execute_single": _FN,
    "RayExecutor.shutdown": NO_ARGS,
    "BaseHorovodWorker": "class",
    # horovod/ray/elastic.py
    "ElasticRayExecutor": _sig("settings", ("use_gpu", "False"), ("cpus_per_slot", "1"),
                               ("gpus_per_slot", "None"), ("env_vars", "None"),
                               ("override_discovery", "True")),
    "ElasticRayExecutor.create_settings": _sig(
        ("min_num_proc", "1"), ("max_num_proc", "None"), ("reset_limit", "None"),
        ("elastic_timeout", "600"), ("timeout_s", "30"), ("ssh_identity_file", "None"),
        ("nics", "None"), ("min_np", "None"), ("max_np", "None"), "**kwargs"),
    "ElasticRayExecutor.start": NO_ARGS,
    "ElasticRayExecutor.run": _sig("worker_fn", ("callbacks", "None")),
})

# horovod/ray/elastic.py (each class's __init__)
RAY_ELASTIC = MappingProxyType({
    "ElasticRayExecutor": RAY["ElasticRayExecutor"],
    "RayHostDiscovery": _sig(("use_gpu", "False"), ("cpus_per_slot", "1"),
                             ("gpus_per_slot", "1")),
    "TestDiscovery": _sig("min_hosts", "max_hosts", "change_frequency_s", ("use_gpu", "False"),
                          ("cpus_per_slot", "1"), ("gpus_per_slot", "1"), ("verbose", "True"),
                          ("_graceful", "True")),
})

# horovod/spark/runner.py (re-exported by horovod/spark/__init__.py)
SPARK = MappingProxyType({
    "run": _sig("fn", ("args", "()"), ("kwargs", "{}"), ("num_proc", "None"),
                ("start_timeout", "None"), ("use_mpi", "None"), ("use_gloo", "None"),
                ("extra_mpi_args", "None"), ("env", "None"), ("stdout", "None"),
                ("stderr", "None"), ("verbose", "1"), ("nics", "None"),
                ("prefix_output_with_timestamp", "False"), ("executable", "None")),
    "run_elastic": _sig("fn", ("args", "()"), ("kwargs", "{}"), ("num_proc", "None"),
                        ("min_num_proc", "None"), ("max_num_proc", "None"),
                        ("start_timeout", "None"), ("elastic_timeout", "None"),
                        ("reset_limit", "None"), ("env", "None"), ("stdout", "None"),
                        ("stderr", "None"), ("verbose", "1"), ("nics", "None"),
                        ("prefix_output_with_timestamp", "False"), ("min_np", "None"),
                        ("max_np", "None")),
})

MODULES = MappingProxyType({
    "horovod.torch": TORCH,
    "horovod.torch.elastic": TORCH_ELASTIC,
    "horovod.tensorflow": TENSORFLOW,
    "horovod.tensorflow.elastic": TENSORFLOW_ELASTIC,
    "horovod.tensorflow.keras": TENSORFLOW_KERAS,
    "horovod.tensorflow.keras.callbacks": TENSORFLOW_KERAS_CALLBACKS,
    "horovod.tensorflow.keras.elastic": TENSORFLOW_KERAS_ELASTIC,
    "horovod.ray": RAY,
    "horovod.ray.elastic": RAY_ELASTIC,
    "horovod.spark": SPARK,
})

# Callables above that are classes in Horovod (their tuple is __init__ without self).
CLASSES = MappingProxyType({
    "horovod.torch": frozenset({"ProcessSet", "SyncBatchNorm"}),
    "horovod.torch.elastic": frozenset({"TorchState", "ElasticSampler"}),
    "horovod.tensorflow": frozenset({"ProcessSet", "SyncBatchNormalization",
                                     "BroadcastGlobalVariablesHook"}),
    "horovod.tensorflow.elastic": frozenset({"TensorFlowKerasState", "TensorFlowState",
                                             "ObjectState"}),
    "horovod.tensorflow.keras": frozenset({"ProcessSet"}),
    "horovod.tensorflow.keras.callbacks": frozenset(TENSORFLOW_KERAS_CALLBACKS),
    "horovod.tensorflow.keras.elastic": frozenset({"KerasState", "CommitStateCallback",
                                                   "UpdateBatchStateCallback",
                                                   "UpdateEpochStateCallback"}),
    "horovod.ray": frozenset({"RayExecutor", "ElasticRayExecutor"}),
    "horovod.ray.elastic": frozenset(RAY_ELASTIC),
    "horovod.spark": frozenset(),
})

# Class attributes that Horovod scripts use.
CLASS_ATTRIBUTES = MappingProxyType({
    ("horovod.torch", "Compression"): ("none", "fp16"),
    ("horovod.tensorflow", "Compression"): ("none", "fp16"),
    ("horovod.tensorflow.keras", "Compression"): ("none", "fp16"),
})

# Built-in base classes of Horovod classes (``except RuntimeError`` catches them).
CLASS_BASES = MappingProxyType({
    ("horovod.torch", "HorovodInternalError"): (RuntimeError,),
})

# Constants that are instances of another public name (module, name) -> class name.
CONSTANT_TYPES = MappingProxyType({
    ("horovod.torch", "global_process_set"): "ProcessSet",
    ("horovod.tensorflow", "global_process_set"): "ProcessSet",
    ("horovod.tensorflow.keras", "global_process_set"): "ProcessSet",
})
