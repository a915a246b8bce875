"""What every gradient-reducing wrapper shares: its settings, their saved
config, and the reduction itself (DistributedGradientTape's functions)."""
import keras

from ...training import buckets, naming, optimizer_args
from ...training.compression import state_of
from ..compression import Compression
from .gradient_tape import reduce_except_local, reduce_gradients

_COMPRESSION_NAMES = {"none": lambda: Compression.none, "fp16": lambda: Compression.fp16,
                      "bf16": lambda: Compression.bf16, "ef_sign": Compression.ef_sign,
                      "powersgd": Compression.powersgd}


def _compression_config(c):
    """A compressor as saved config: its name, or {name: its arguments} for
    one that takes some (PowerSGD); None for a user's own."""
    for name, make in _COMPRESSION_NAMES.items():
        if c is make() or type(c) is type(make()):
            return {name: c.get_config()} if hasattr(c, "get_config") else name
    return None


def _compression_from_config(config):
    if isinstance(config, str):
        return _COMPRESSION_NAMES[config]()
    if isinstance(config, dict) and len(config) == 1:
        (name, arguments), = config.items()
        return _COMPRESSION_NAMES[name](**arguments)
    return config


class Reducer:
    """What both wrappers share: settings, config, the reduction itself."""

    def _init_reducer(self, compression, backward_passes_per_step, average_aggregated_gradients,
                      op, gradient_predivide_factor, sparse_as_dense, name_map, bucket_cap_mb):
        compression = _compression_from_config(compression)
        optimizer_args.check(backward_passes_per_step, op, gradient_predivide_factor)
        self.compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.average_aggregated_gradients = average_aggregated_gradients
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.bucket_cap_mb = bucket_cap_mb
        self._bucket_cap = buckets.cap_bytes(bucket_cap_mb)
        # Saved config holds a dict map as plain data (a function cannot be saved).
        self.name_map = naming.map_from_config(name_map) if isinstance(name_map, dict) \
            else name_map
        self._local_vars = {}  # id -> variable whose gradient stays on this rank
        self.scale_local_gradients = True
        self.process_set = None  # the ranks that average (set by DistributedOptimizer)
        self.num_groups, self.groups = 0, None  # Horovod's explicit groups (likewise)

    def compression_state(self):
        """The compressor's state on this rank (PowerSGD's Q, error buffers and
        step counts; ef_sign's residuals), or None if it keeps none."""
        return state_of(self.compression)

    def load_compression_state(self, state):
        """Restores what compression_state gave (names it lacks keep their state)."""
        self.compression.load_state_dict(state)

    def register_local_var(self, var):
        """Horovod's: ``var``'s gradient is not averaged across ranks; each rank
        applies its own (divided by size() with ``scale_local_gradients``)."""
        self._local_vars[id(var)] = var

    def _reducer_config(self):
        return {"compression": _compression_config(self.compression) or "none",
                "backward_passes_per_step": self.backward_passes_per_step,
                "average_aggregated_gradients": self.average_aggregated_gradients,
                "op": int(self.op), "gradient_predivide_factor": self.gradient_predivide_factor,
                "sparse_as_dense": self.sparse_as_dense, "bucket_cap_mb": self.bucket_cap_mb,
                "name_map": naming.map_to_config(self.name_map)}

    def _built_for(self, trainable_variables):
        """Builds on first use (as Keras optimizers do); returns the variables."""
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        return list(trainable_variables) if trainable_variables is not None \
            else self.inner_optimizer._trainable_variables

    def _reduce(self, grads, variables):
        def reduce(grads, sources):
            return reduce_gradients(grads, sources, self.compression, self.op,
                                    self.gradient_predivide_factor, self.sparse_as_dense,
                                    self.name_map, self._bucket_cap, self.process_set,
                                    buckets.group_of(sources, self.num_groups, self.groups))
        return reduce_except_local(grads, variables, self._local_vars,
                                   self.scale_local_gradients, self.process_set, reduce)
