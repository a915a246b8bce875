"""The wrappers that reduce gradients: DistributedOptimizer (Keras 3 and TF1
optimizers) and DistributedGradientTape."""
