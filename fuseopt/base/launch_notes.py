"""What a rank tells fuseoptrun through the job's launch directory
(fuseopt/base/launch_records.py): whether fuseopt is running in it, and why it
is failing.

When an operation fails because the job is going down (shut down by another
rank, a peer failed), the rank records the first such error, so that the
launcher's summary can tell the rank that failed first from the ranks that
only stopped because of it. The state record tells the rank wrapper whether
an exit with code 0 left fuseopt running (an unclean exit that would leave
the other ranks waiting)."""
from . import launch_records

_written = False


def record(status, message):
    global _written
    directory = launch_records.directory()
    if _written or not directory:
        return
    _written = True
    launch_records.write_record(directory, "note-", launch_records.env_rank(),
                                {"status": status, "message": message})


def set_state(state):
    """launch_records.RUNNING after init(), launch_records.SHUT_DOWN after shutdown()."""
    directory = launch_records.directory()
    if directory:
        launch_records.write_record(directory, "state-", launch_records.env_rank(),
                                    {"fuseopt": state})
