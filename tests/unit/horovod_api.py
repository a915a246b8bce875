"""Horovod 0.28.1's public API: reference data for tests/unit/test_horovod_api.py.

Transcribed by hand from the source of Horovod 0.28.1 (the release's sdist on
PyPI, ``horovod-0.28.1.tar.gz``, sha256
92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0, whose
``horovod/__init__.py`` says ``__version__ = '0.28.1'``). Nothing here is
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
* ``horovod/tensorflow/__init__.py``, ``horovod/tensorflow/mpi_ops.py``: where
  the re-exported ``init`` ... ``rocm_built``, ``Average``, ``Sum`` and the
  process-set names come from;
* ``horovod/tensorflow/keras/callbacks.py`` (and ``horovod/_keras/callbacks.py``,
  whose ``*Impl`` bases take the backend first): the callbacks' ``__init__``.

Conventions:

* A callable is a tuple of ``(parameter name, default, kind)``. ``default`` is
  the sentinel ``REQUIRED`` or a string: either ``repr()`` of a literal
  (``'None'``, ``'1.0'``, ``"''"``) or a name as written in Horovod's source
  (``'Average'``, ``'global_process_set'``, ``'Compression.none'``), which
  the test resolves in the fuseopt module and compares by identity.
* Horovod's ``init`` is ``init(*args, **kwargs)`` in ``torch/mpi_ops.py`` and
  ``tensorflow/mpi_ops.py`` and torch's ``shutdown`` is
  ``shutdown(*args, **kwargs)``; both only forward to
  ``HorovodBasics.init(self, comm=None, process_sets=None)`` and
  ``HorovodBasics.shutdown(self)``, so the signatures recorded are those.
* For a class that users construct, the tuple is its ``__init__`` without
  ``self`` and the name is in ``CLASSES``; other classes are ``"class"``.
  ``"constant"`` is a value, ``"module"`` a Horovod submodule.

Left out: ``elastic`` (a separate issue), private names, plain modules
(``torch``, ``tf``, ``keras``, ``K``, ``inspect``, ``warnings``,
``version``) and helpers that Horovod's modules only import for their own use
(``check_extension`` in ``horovod.torch``, ``is_version_greater_equal_than``
in ``horovod.tensorflow.keras`` and its ``callbacks``), and submodules that
become attributes of a package only because they were imported
(``horovod.torch.mpi_ops``, ``.functions``, ``.optimizer`` ...).
"""
from types import MappingProxyType


class _Required:
    def __repr__(self):
        return "REQUIRED"


REQUIRED = _Required()
POSITIONAL_OR_KEYWORD = "POSITIONAL_OR_KEYWORD"
KEYWORD_ONLY = "KEYWORD_ONLY"

_P = POSITIONAL_OR_KEYWORD


def _sig(*params):
    """``'name'`` is a required parameter, ``('name', 'default')`` an optional one."""
    out = []
    for p in params:
        if isinstance(p, str):
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

# horovod/tensorflow/keras/__init__.py
TENSORFLOW_KERAS = MappingProxyType(dict(
    _BASICS,  # via horovod/tensorflow/__init__.py from horovod/tensorflow/mpi_ops.py
    **_PROCESS_SETS,  # via horovod/tensorflow/mpi_ops.py
    Average="constant",
    Sum="constant",
    Compression="class",  # horovod/tensorflow/compression.py
    callbacks="module",
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

MODULES = MappingProxyType({
    "horovod.torch": TORCH,
    "horovod.tensorflow.keras": TENSORFLOW_KERAS,
    "horovod.tensorflow.keras.callbacks": TENSORFLOW_KERAS_CALLBACKS,
})

# Callables above that are classes in Horovod (their tuple is __init__ without self).
CLASSES = MappingProxyType({
    "horovod.torch": frozenset({"ProcessSet", "SyncBatchNorm"}),
    "horovod.tensorflow.keras": frozenset({"ProcessSet"}),
    "horovod.tensorflow.keras.callbacks": frozenset(TENSORFLOW_KERAS_CALLBACKS),
})

# Class attributes that Horovod scripts use.
CLASS_ATTRIBUTES = MappingProxyType({
    ("horovod.torch", "Compression"): ("none", "fp16"),
    ("horovod.tensorflow.keras", "Compression"): ("none", "fp16"),
})

# Built-in base classes of Horovod classes (``except RuntimeError`` catches them).
CLASS_BASES = MappingProxyType({
    ("horovod.torch", "HorovodInternalError"): (RuntimeError,),
})

# Constants that are instances of another public name (module, name) -> class name.
CONSTANT_TYPES = MappingProxyType({
    ("horovod.torch", "global_process_set"): "ProcessSet",
    ("horovod.tensorflow.keras", "global_process_set"): "ProcessSet",
})
