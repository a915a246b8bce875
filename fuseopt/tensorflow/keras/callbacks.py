"""Keras callbacks for data-parallel training (Horovod's names)."""
import keras
import numpy as np
import tensorflow as tf

from ...api import ops as _np
from ...api import overlap
from ...core import world
from ...training.local_sgd import SyncRule, relative_drift
from ...base.log import logger, report_logger
from ..functions import broadcast_variables
from .checkpoint import save_checkpoint


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """At the end of the first batch, as in Horovod, copies root_rank's model
    weights and optimizer state to every rank (so a model built lazily, a
    ``Sequential`` without ``keras.Input``, has its variables by then).
    ``local_variables``: variables (or a list of them) that stay per rank.
    With ``name_map`` (mixed jobs) it broadcasts at the start of training,
    when the PyTorch ranks do.

    With ``name_map`` (a mixed PyTorch/TensorFlow job, see docs/mixed.md) the
    model's variables travel under their shared names, so the root may be a
    PyTorch rank; optimizer state, which the frameworks lay out differently,
    is then not broadcast (fresh optimizers start equal anyway)."""

    def __init__(self, root_rank=0, device="", local_variables=None, name_map=None):
        super().__init__()
        self.root_rank = root_rank
        self.name_map = name_map
        self.broadcast_done = False
        if local_variables is not None and not isinstance(local_variables, (list, tuple)):
            local_variables = [local_variables]
        self._local = {id(v) for v in local_variables or ()}

    def register_local_var(self, var):
        """Keeps ``var`` out of the broadcast (Horovod's name)."""
        self._local.add(id(var))

    def on_train_begin(self, logs=None):
        # A mixed job's PyTorch ranks broadcast before their first step, so
        # with a name_map the Keras ranks must too (Horovod has no name_map).
        if self.name_map is not None and not self.broadcast_done:
            broadcast_variables([v for v in self.model.variables if id(v) not in self._local],
                                self.root_rank, name_map=self.name_map)
            self.broadcast_done = True

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        model = self.model
        optimizer = model.optimizer
        if optimizer is not None and not optimizer.built:
            optimizer.build(model.trainable_variables)
        variables = [v for v in model.variables if id(v) not in self._local]
        if optimizer is not None:
            variables += list(optimizer.variables)
        broadcast_variables(variables, self.root_rank)
        self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """Averages epoch metrics across ranks before later callbacks see them.
    Put it before callbacks that read metrics (checkpointing, early stopping).
    ``device`` is Horovod's op placement; the metrics are host scalars here,
    averaged in one host allreduce whatever it says."""

    def __init__(self, device=""):
        super().__init__()
        self.device = device

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0)
        values = np.array([float(logs[k]) for k in keys], dtype=np.float64)
        averaged = _np.allreduce(values, name="metric_average.%d" % epoch)
        for k, v in zip(keys, averaged):
            logs[k] = float(v)


class MetricsCallback(keras.callbacks.Callback):
    """Logs fuseopt's figures for each epoch on rank 0 (bytes, collectives,
    communication and negotiation time, the train step's wait for gradient
    reductions, overlap efficiency, cache hit rate; see fuseopt.api.overlap) and
    adds ``fuseopt_communication_s``, ``fuseopt_exposed_wait_s`` and
    ``fuseopt_overlap_efficiency`` (this rank's) to the epoch's logs."""

    def __init__(self, log_fn=report_logger.info):
        super().__init__()
        self.log_fn = log_fn

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == 0:
            overlap.GRADIENTS.report(reset=True)  # not the compile and warm-up before fit

    def on_epoch_end(self, epoch, logs=None):
        r = overlap.log_epoch(epoch, self.log_fn)
        if logs is not None:
            logs["fuseopt_communication_s"] = r["communication_s"]
            logs["fuseopt_exposed_wait_s"] = r["exposed_wait_s"]
            eff = r["overlap_efficiency"]
            logs["fuseopt_overlap_efficiency"] = float("nan") if eff is None else eff


def _set_lr(optimizer, value):
    lr = optimizer.learning_rate
    if isinstance(lr, keras.Variable) or isinstance(lr, tf.Variable):
        lr.assign(value)
    else:
        optimizer.learning_rate = value


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Horovod's schedule: ``lr = initial_lr * multiplier(epoch)`` for
    ``start_epoch <= epoch < end_epoch``, set at the first batch of each epoch
    (``staircase``) or at every batch with a fractional epoch (``steps_per_epoch``,
    else Keras's own count of steps). A constant ``multiplier`` is exponential
    decay, ``multiplier ** (epoch - start_epoch)``. The rate is written to
    ``logs["lr"]`` at each epoch's end.

    ``momentum_correction`` cannot act in Keras 3, whose optimizers compile
    their momentum into the update; a warning says so when it would matter."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        if not callable(multiplier):
            factor = multiplier
            multiplier = lambda epoch: factor ** (epoch - start_epoch)  # noqa: E731
        self.initial_lr = initial_lr
        self.multiplier = multiplier
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = 0

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()
        optimizer = getattr(self.model.optimizer, "inner_optimizer", self.model.optimizer)
        if self.momentum_correction and float(getattr(optimizer, "momentum", 0) or 0):
            logger.warning("%s: momentum_correction has no effect on Keras 3 optimizers (their "
                           "momentum is compiled into the update)", type(self).__name__)

    def _autodetect_steps_per_epoch(self):
        params = self.params or {}
        if params.get("steps"):
            return params["steps"]
        if params.get("samples") and params.get("batch_size"):
            return params["samples"] // params["batch_size"]
        raise ValueError("Could not autodetect the number of steps per epoch; pass "
                         "steps_per_epoch to %s()" % type(self).__name__)

    def _active(self):
        return self.current_epoch >= self.start_epoch and \
            (self.end_epoch is None or self.current_epoch < self.end_epoch)

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if not self._active():
            return
        if self.staircase and batch == 0:
            _set_lr(self.model.optimizer, self.initial_lr * self.multiplier(self.current_epoch))
        elif not self.staircase:
            epoch = self.current_epoch + float(batch) / self.steps_per_epoch
            _set_lr(self.model.optimizer, self.initial_lr * self.multiplier(epoch))

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = float(np.asarray(self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Horovod's warm-up (Goyal et al., "Accurate, Large Minibatch SGD"): at
    every batch of the first ``warmup_epochs``, ``lr = initial_lr / size *
    (e * (size - 1) / warmup_epochs + 1)`` with ``e`` the fractional epoch
    plus one step, so the last batch of the warm-up runs at ``initial_lr``."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        size = world.size()

        def multiplier(epoch):
            epoch += 1.0 / self.steps_per_epoch  # round numbers at each epoch's end, as Horovod
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose
        self.warmup_epochs = warmup_epochs

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and world.rank() == 0:
            report_logger.info("Epoch %d: finished gradual learning rate warmup to %g.",
                               epoch + 1, float(np.asarray(self.model.optimizer.learning_rate)))


class LocalSGDCallback(keras.callbacks.Callback):
    """Periodic synchronization (local SGD) for ``fit`` with a plain (not
    Distributed) optimizer: averages all model weights every ``period`` batches.

    With ``adaptive_threshold``, it also syncs early, from ``min_period``
    batches after a sync on, when the relative drift
    ||w - w_last_sync||^2 / ||w_last_sync||^2 exceeds the threshold on any
    rank (fuseopt.training.local_sgd's rule, shared with torch's AdaptiveLocalSGD)."""

    def __init__(self, period=8, adaptive_threshold=None, root_rank=0, min_period=1):
        super().__init__()
        self.rule = SyncRule(period, adaptive_threshold, min_period)
        self.root_rank = root_rank
        self._anchor = None

    period = property(lambda self: self.rule.period)
    adaptive_threshold = property(lambda self: self.rule.threshold)
    batches = property(lambda self: self.rule.steps)
    syncs = property(lambda self: self.rule.syncs)

    def on_train_begin(self, logs=None):
        broadcast_variables(self.model.variables, self.root_rank)
        self._anchor = [w.numpy().copy() for w in self.model.trainable_variables]

    def _local_drift(self):
        return relative_drift((np.sum((w.numpy() - a) ** 2), np.sum(a ** 2))
                              for w, a in zip(self.model.trainable_variables, self._anchor))

    def on_train_batch_end(self, batch, logs=None):
        if self.rule.after_step(self._local_drift):
            self.sync()

    def sync(self):
        """Averages every floating-point weight of the model now."""
        weights = [w for w in self.model.variables if "float" in str(w.dtype)]
        handles = [_np.allreduce_async(w.numpy(), name="local_sgd.%d" % i)
                   for i, w in enumerate(weights)]
        for w, h in zip(weights, handles):
            w.assign(h.wait())
        self.rule.synced()
        self._anchor = [w.numpy().copy() for w in self.model.trainable_variables]


class CheckpointCallback(keras.callbacks.Callback):
    """Saves a fuseopt checkpoint (see fuseopt.tensorflow.keras.save_checkpoint)
    every ``every_epochs`` epochs, with ``step`` = the epoch just finished, so
    ``model.fit(..., initial_epoch=ckpt.step + 1)`` resumes after it."""

    def __init__(self, path, every_epochs=1, root_rank=0):
        super().__init__()
        self.path = path
        self.every_epochs = every_epochs
        self.root_rank = root_rank

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every_epochs == 0:
            save_checkpoint(self.path, self.model, step=epoch, root_rank=self.root_rank)


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """Horovod's: a ``ModelCheckpoint`` that keeps only the best model
    (``save_best_only=True``). As in Horovod, it has no file path of its own:
    set ``callback.filepath`` before ``fit`` (``.keras``, or ``.weights.h5``
    with ``save_weights_only``), and add it on one rank only."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto",
                 save_freq="epoch"):
        # Keras 3 checks the suffix at construction; the real path comes later.
        super().__init__("unset.weights.h5" if save_weights_only else "unset.keras",
                         monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)
        self.filepath = None

    def on_train_begin(self, logs=None):
        if not self.filepath:
            raise ValueError("BestModelCheckpoint: set its filepath before fit (Horovod leaves "
                             "the path to the caller)")
        super().on_train_begin(logs)
