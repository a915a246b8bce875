"""fuseoptrun on Open MPI's launcher (mpirun/mpiexec of Open MPI 4 and 5).

Hydra (MPICH, Intel MPI, MVAPICH) takes ``-hosts``, ``-genvlist`` and
``-launcher``; Open MPI's takes ``--host``, ``-x NAME`` and MCA parameters.
This builds the same job for it: the rank wrapper around every command (its
exit records give the same failure summary, with the rank from
``OMPI_COMM_WORLD_RANK``), the job's variables by name only (``-x NAME``:
values stay out of argv, which every user can read), and what Open MPI
needs to start it where Hydra needs nothing:

- ``--bind-to none``: Open MPI binds each rank to one core when there are
  few, and fuseopt's background thread would then share that core with the
  rank's compute (Horovod's documented line says ``-bind-to none`` too);
- ``--oversubscribe`` when the job has more ranks than slots (Open MPI
  refuses to start it otherwise; Hydra does not count);
- ``--allow-run-as-root`` when run by root (Open MPI refuses otherwise).

A remote-exec command (``--remote-exec``, Horovod's ``-p``/``-i``) becomes the
agent Open MPI starts its remote daemons with, as it would start ssh: Open
MPI 5's runtime (PRRTE) reads it as ``plm_ssh_agent``, Open MPI 4's (ORTE) as
``plm_rsh_agent``; ``--network-interface`` then also names the interface
those daemons talk over.
"""
import os
import shlex
import subprocess

from . import rank_wrapper

_banners = {}


def is_open_mpi(mpiexec):
    """Whether ``mpiexec`` is Open MPI's (from its --version banner)."""
    if mpiexec not in _banners:
        try:
            _banners[mpiexec] = subprocess.run([mpiexec, "--version"], capture_output=True,
                                               text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            _banners[mpiexec] = ""  # it will fail when run, with its own message
    banner = _banners[mpiexec]
    return "Open MPI" in banner or "OpenRTE" in banner


def runtime_option(mpirun, name):
    """The flag and name of a parameter of Open MPI's runtime, whose spelling
    changed when Open MPI 5 moved it to PRRTE (ORTE's rsh is PRRTE's ssh)."""
    if "OpenRTE" in _banners.get(mpirun, ""):  # Open MPI 4: mpirun (OpenRTE) 4.x
        return ["--mca", name.replace("ssh", "rsh")]
    return ["--prtemca", name]


def unsupported(args):
    """Why fuseoptrun cannot drive Open MPI's launcher for these flags, or None."""
    if args.output_filename:
        return ("--output-filename with Open MPI's mpirun: not supported yet (pass Open MPI's "
                "own --output with --mpi-args)")
    return None


def command(mpirun, args, parts, env_names, host_list, interface, remote_exec=None):
    """The mpirun argv for the (possibly MPMD) job ``parts``; ``remote_exec``
    is one program that takes ssh's argv."""
    is_open_mpi(mpirun)  # reads the banner that runtime_option consults
    cmd = [mpirun, "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    total = sum(n for n, _ in parts)
    slots = sum(n for _, n in host_list) if host_list else (os.cpu_count() or 1)
    if total > slots:
        cmd.append("--oversubscribe")
    if host_list:
        cmd += ["--host", ",".join("%s:%d" % h for h in host_list)]
    if remote_exec:
        cmd += runtime_option(mpirun, "plm_ssh_agent") + [remote_exec]
    if interface:  # the ranks' TCP traffic, and the daemons' where fuseoptrun starts them
        cmd += ["--mca", "btl_tcp_if_include", interface]
        if remote_exec:
            cmd += runtime_option(mpirun, "oob_tcp_if_include") + [interface]
    for name in sorted(env_names):
        cmd += ["-x", name]
    cmd += shlex.split(args.mpi_args)
    return cmd + rank_wrapper.launch_argv(parts, "-np")
