"""The launcher's one kind of user error."""


class UsageError(Exception):
    """A bad flag, value or host string: one line, exit code 2 (argparse's)."""
