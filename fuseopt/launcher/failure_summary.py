"""What fuseoptrun says when a job ends badly: which rank failed first, and why.

It reads the records the rank wrappers left in the launch directory
(fuseopt/base/launch_records.py): each rank's exit (rank-N.json), its start
(start-N.json), and the note its fuseopt wrote when it stopped because of
another rank (note-N.json).
"""
import signal
import sys

from ..base.launch_records import ended_badly, read_records
from . import rank_wrapper


# Note [Deaths too close to order]: a wrapper stamps end_time when it is
# scheduled after its child died, so under load two deaths a fraction of a
# second apart can be stamped in the wrong order. When a rank is SIGKILLed
# from outside (kill -9, the OOM killer), MPICH's TCP layer in its partner can
# crash on the broken connection (SIGSEGV) at about the same moment; that
# partner's wrapper may run first. A peer's loss can crash a rank, but it
# cannot SIGKILL it (mpiexec kills the wrappers, which leaves no record), so
# among deaths within CLOSE_S of the first, an external SIGKILL is the cause.
CLOSE_S = 1.0


def first_failures_first(failed):
    """The failed ranks' records, the likely cause first (Note [Deaths too
    close to order]), then by end time."""
    failed = sorted(failed, key=lambda r: r["end_time"])
    if not failed:
        return failed
    close = [r for r in failed if r["end_time"] - failed[0]["end_time"] <= CLOSE_S]
    killed = [r for r in close if r.get("signal") == signal.SIGKILL]
    if killed and killed[0] is not failed[0]:
        failed.remove(killed[0])
        failed.insert(0, killed[0])
    return failed


def summarize(launch_dir, total_ranks, mpiexec_code, started):
    """Prints which rank failed first, and why; returns the exit code to use.

    A rank whose fuseopt was shut down by another rank, or that reported a
    lost peer, only stopped because of it, so it is not blamed even if its
    process happened to end first."""
    ends = read_records(launch_dir, "rank-")
    starts = read_records(launch_dir, "start-")
    notes = read_records(launch_dir, "note-")
    failed = first_failures_first(r for r in ends.values() if ended_badly(r))
    # Started here, never recorded an end: killed together with its wrapper.
    vanished = sorted(set(starts) - set(ends))
    if not failed:
        if vanished:
            print("fuseoptrun: rank(s) %s ended without an exit record: killed together with "
                  "their wrapper (by mpiexec after another rank's exit, or by the OOM killer); "
                  "mpiexec exited with %d" % (", ".join(map(str, vanished)), mpiexec_code),
                  file=sys.stderr)
            return mpiexec_code or 1
        if mpiexec_code != 0 and len(ends) < total_ranks:
            print("fuseoptrun: mpiexec exited with %d and only %d of %d ranks reported an "
                  "exit; see the output above" % (mpiexec_code, len(ends), total_ranks),
                  file=sys.stderr)
            return mpiexec_code
        return 0

    def victim(record):
        note = notes.get(record["rank"])
        return bool(note) and (note["status"] == "RANK_FAILED" or (
            note["status"] == "SHUT_DOWN" and " by rank" in note["message"]))

    first = next((r for r in failed if not victim(r)), failed[0])
    # Only victims ended (say a frozen rank, killed by mpiexec without a record):
    # the first of them tells what happened, but is not to blame.
    verb = "stopped first, reporting a failed or stalled peer" if victim(first) else "failed first"
    if first.get("signal"):
        how = "signal %s" % signal.Signals(first["signal"]).name
    elif first.get("unclean"):
        how = "exit code 0 without fuseopt.shutdown(): os._exit?"
    else:
        how = "exit code %d" % first["exit_code"]
    print("fuseoptrun: rank %d on %s %s (%s, %.1f s after start); %d of %d ranks failed"
          % (first["rank"], first["host"], verb, how, first["end_time"] - started,
             len(failed) + len(vanished), total_ranks), file=sys.stderr)
    for rank in range(total_ranks):
        if rank in notes:
            print("fuseoptrun:   rank %d: %s" % (rank, notes[rank]["message"]), file=sys.stderr)
        elif rank != first["rank"] and (rank not in ends or ends[rank]["signal"]):
            print("fuseoptrun:   rank %d: stopped by mpiexec %s" % (rank, (
                "(it had not exited: frozen, or cut off?)" if victim(first)
                else "after rank %d failed" % first["rank"])), file=sys.stderr)
    if first.get("unclean"):
        return rank_wrapper.UNCLEAN_EXIT_CODE
    return first["exit_code"] if first["exit_code"] is not None else 128 + first["signal"]
