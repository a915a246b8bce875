"""The environment of a rank that something other than mpiexec started (a
Ray actor, a Spark task's process): the PMI server's address, without
another launcher's variables, with the MPI settings fuseoptrun would give."""
from typing import Dict, List, Optional

# Another launcher's variables would win over PMI_PORT (PMI_FD) or make
# MPICH's PMI detection ambiguous (PMIX_*): a rank never inherits them.
FOREIGN_PREFIXES = ("PMI_", "PMIX_", "HYDRA_", "HYDI_", "MPIEXEC_", "OMPI_", "PRTE_")

# Hydra's -iface steers only its own connections (and ch3's TCP netmod, which
# the mpich wheel does not use): MPI's data goes through ch4's UCX netmod (the
# wheel's default) or its OFI netmod, which choose devices by these variables.
INTERFACE_VARIABLES = ("UCX_NET_DEVICES", "FI_TCP_IFACE")


def rank_environment(base: Dict[str, str], pmi: Dict[str, str], rank: int, size: int,
                     oversubscribed: bool, interface: Optional[str] = None) -> Dict[str, str]:
    """``base`` without another launcher's variables, plus the PMI address
    and PMI_RANK/PMI_SIZE, which MPICH ignores here and fuseopt's launch
    records read. With more ranks than cores on some host, MPIR_CVAR_NOLOCAL=1
    on every rank (MPICH's shared-memory polling needs a core per rank); the
    caller decides ``oversubscribed`` once for all ranks, which must agree.
    ``interface``: the network interface for MPI's data (the user's own
    UCX_NET_DEVICES / FI_TCP_IFACE win)."""
    env = {k: v for k, v in base.items() if not k.startswith(FOREIGN_PREFIXES)}
    env.update(pmi)
    env.update(PMI_RANK=str(rank), PMI_SIZE=str(size))
    if oversubscribed:
        env.setdefault("MPIR_CVAR_NOLOCAL", "1")
    for name in INTERFACE_VARIABLES if interface else ():
        env.setdefault(name, interface)
    return env


def oversubscribed(hosts: List[str], cpus: Dict[str, int]) -> bool:
    """Whether some host runs more ranks (``hosts``: each rank's host) than
    it has cores (``cpus``: each host's core count)."""
    return any(hosts.count(h) > cpus.get(h, 1) for h in set(hosts))


def one_interface(nics) -> Optional[str]:
    """Horovod's ``nics`` (a set or list of interface names) as the one
    interface MPI's netmods take, or None."""
    names = sorted(nics or ())
    if len(names) > 1:
        raise ValueError("nics=%s: fuseopt's MPI takes one network interface" % names)
    return names[0] if names else None
