"""fuseoptrun as Horovod's elastic driver: host discovery and the loop that
restarts the job on the hosts it has."""
