"""``fuseoptrun``: start a fuseopt job through the MPI launcher (mpiexec)."""
