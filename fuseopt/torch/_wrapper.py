"""What every fuseopt optimizer wrapper shares: the wrapped optimizer owns
the parameters, state and hyper-parameters, and the wrapper exposes them as
its own, so schedulers, GradScaler and checkpoints see one optimizer."""
import torch


class OptimizerWrapper(torch.optim.Optimizer):
    """Base of DistributedOptimizer and AdasumOptimizer. No
    ``Optimizer.__init__``: subclasses set ``self._optimizer``."""

    @property
    def param_groups(self):
        """The wrapped optimizer's parameter groups (schedulers change them here)."""
        return self._optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value):
        self._optimizer.param_groups = value

    @property
    def state(self):
        """The wrapped optimizer's per-parameter state."""
        return self._optimizer.state

    @state.setter
    def state(self, value):
        self._optimizer.state = value

    @property
    def defaults(self):
        """The wrapped optimizer's default hyper-parameters."""
        return self._optimizer.defaults

    @defaults.setter
    def defaults(self, value):
        self._optimizer.defaults = value

    @property
    def optimizer(self):
        """The wrapped optimizer."""
        return self._optimizer

    def state_dict(self):
        """The wrapped optimizer's state_dict."""
        return self._optimizer.state_dict()

    def load_state_dict(self, state_dict):
        """Loads the wrapped optimizer's state."""
        return self._optimizer.load_state_dict(state_dict)
