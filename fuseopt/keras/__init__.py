"""Horovod's ``horovod.keras`` import path: the Keras binding, which in
fuseopt is ``fuseopt.tensorflow.keras`` (Keras 3 runs on TensorFlow here);
``fuseopt.keras.callbacks`` and ``fuseopt.keras.elastic`` are its submodules."""
import sys as _sys

from ..tensorflow import keras as _binding
from ..tensorflow.keras import *  # noqa: F401,F403
from ..tensorflow.keras import callbacks, elastic  # noqa: F401

# `import fuseopt.keras.callbacks` finds the binding's own modules.
_sys.modules[__name__ + ".callbacks"] = _binding.callbacks
_sys.modules[__name__ + ".elastic"] = _binding.elastic
