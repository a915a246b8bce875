"""Prints and checks what fuseopt sees of the host layout.

Usage: topology.py LOCAL_SIZE CROSS_SIZE"""
import socket
import sys

import numpy as np

import fuseopt

fuseopt.init()
local_size, cross_size = int(sys.argv[1]), int(sys.argv[2])
r = fuseopt.rank()
print("[rank %d] host %s local %d/%d cross %d/%d" % (
    r, socket.gethostname(), fuseopt.local_rank(), fuseopt.local_size(), fuseopt.cross_rank(),
    fuseopt.cross_size()), flush=True)
assert fuseopt.local_size() == local_size and fuseopt.cross_size() == cross_size
assert fuseopt.local_rank() == r % local_size and fuseopt.cross_rank() == r // local_size
# Ranks on one host agree about its name; ranks on different hosts differ.
names = fuseopt.allgather_object(socket.gethostname())
assert all((names[a] == names[b]) == (a // local_size == b // local_size)
           for a in range(len(names)) for b in range(len(names))), names
big = fuseopt.allreduce(np.full(1 << 22, r, np.float32), name="big", op=fuseopt.Sum)  # 16 MiB
assert np.all(big == sum(range(fuseopt.size())))
fuseopt.shutdown()
