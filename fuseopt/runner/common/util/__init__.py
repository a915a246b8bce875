"""Horovod's ``horovod.runner.common.util`` import path.

``env`` is here: scripts and test harnesses read their rank from it before
``init``. The other modules of Horovod's package are the internals of its
own launcher (ssh and shell execution, its secret handshake, host hashing,
settings); fuseopt's launcher is another program, so importing them raises
UnsupportedError naming what to use instead."""
from ....base.errors import UnsupportedError

LAUNCHER_INTERNALS = ("codec", "config_parser", "host_hash", "hosts", "network",
                      "safe_shell_exec", "secret", "settings", "timeout", "tiny_shell_exec")


def __getattr__(name):
    if name in LAUNCHER_INTERNALS:
        raise UnsupportedError(
            "fuseopt.runner.common.util.%s: part of horovodrun's own machinery, which fuseopt "
            "does not carry. Use fuseoptrun (or fuseopt.run) to start jobs instead; "
            "docs/migration.md lists the import paths fuseopt has" % name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
