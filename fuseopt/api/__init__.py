"""What a script calls on the core without a framework: the collectives on
NumPy arrays (ops), object broadcasts, init/shutdown (runtime), Horovod's
capability queries, the timeline and the overlap meter. The framework
bindings build on this layer."""
