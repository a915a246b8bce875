"""Notes a rank leaves for fuseoptrun about why it is failing.

fuseoptrun gives each job a directory ($FUSEOPT_LAUNCH_DIR). When an
operation fails because the job is going down (shut down by another rank, a
peer failed), the rank records the first such error there, so that the
launcher's summary can tell the rank that failed first from the ranks that
only stopped because of it."""
import json
import os

_written = False


def record(status, message):
    global _written
    directory = os.environ.get("FUSEOPT_LAUNCH_DIR")
    if _written or not directory or not os.path.isdir(directory):
        return
    _written = True
    rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    try:
        with open(os.path.join(directory, "note-%s.json" % rank), "w") as f:
            json.dump({"status": status, "message": message}, f)
    except OSError:
        pass
