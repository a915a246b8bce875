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


def unsupported(args, remote_exec):
    """Why fuseoptrun cannot drive Open MPI's launcher for these flags, or None."""
    if remote_exec:
        return ("--remote-exec/--ssh-port with Open MPI's mpirun: not supported yet (Open MPI "
                "starts remote daemons through its plm_ssh_agent MCA parameter; pass it with "
                "--mpi-args)")
    if args.output_filename:
        return ("--output-filename with Open MPI's mpirun: not supported yet (pass Open MPI's "
                "own --output with --mpi-args)")
    return None


def command(mpirun, args, parts, env_names, host_list, interface):
    """The mpirun argv for the (possibly MPMD) job ``parts``."""
    cmd = [mpirun, "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    total = sum(n for n, _ in parts)
    slots = sum(n for _, n in host_list) if host_list else (os.cpu_count() or 1)
    if total > slots:
        cmd.append("--oversubscribe")
    if host_list:
        cmd += ["--host", ",".join("%s:%d" % h for h in host_list)]
    if interface:  # the ranks' TCP traffic; Open MPI's daemons pick their own
        cmd += ["--mca", "btl_tcp_if_include", interface]
    for name in sorted(env_names):
        cmd += ["-x", name]
    cmd += shlex.split(args.mpi_args)
    return cmd + rank_wrapper.launch_argv(parts, "-np")
