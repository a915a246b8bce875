"""One rank's bridge to the native engine: the knobs (config, HOROVOD_*
variables), the world (rank, size, the context), requests into the core and
the handles that come back, process sets, the out-of-place output pool and
the watch on peers that fuseoptrun reports as lost."""
