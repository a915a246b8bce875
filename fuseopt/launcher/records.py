"""The exit records and notes a job leaves in $FUSEOPT_LAUNCH_DIR: rank-N.json
written by the rank wrapper, note-N.json by fuseopt._launch_notes. Read by
fuseoptrun's summary and by every rank's peer watcher (fuseopt._peer_watch).
Its own module, so that importing fuseopt does not import the wrapper that
``python -m fuseopt.launcher.rank_wrapper`` runs."""
import json
import os


def read_records(status_dir, prefix="rank-"):
    """{rank: record} of the ``<prefix>N.json`` files in status_dir. A missing
    directory or a file being written is skipped: callers that poll see it
    next time."""
    out = {}
    try:
        names = os.listdir(status_dir)
    except OSError:
        return out
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".json")):
            continue
        try:
            with open(os.path.join(status_dir, name)) as f:
                out[int(name[len(prefix):-len(".json")])] = json.load(f)
        except (OSError, ValueError):
            continue
    return out
