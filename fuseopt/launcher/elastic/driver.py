"""fuseoptrun as Horovod's elastic driver (--min-np, --max-np,
--host-discovery-script, --reset-limit).

MPI cannot shrink or grow a running world, so a reset is a new MPI job: the
driver runs the job on the hosts it has; when a rank is lost (killed, its
host gone) the survivors end with RESET_EXIT_CODE, the lost rank's host is
blacklisted for the rest of the run, and the driver starts a new job on what
is left; when discovery finds other hosts, it tells the running job (a
notice file in the launch directory), whose ranks commit at their next
``state.commit()`` and end with the same code. Each new job restores the
newest commit a surviving host kept (fuseopt/training/elastic.py). An error of the
training script (an exit code other than RESET_EXIT_CODE) ends the run.
"""
import os
import shutil
import signal
import sys
import tempfile
import time

from ...training import elastic_protocol as _proto
from ...base.launch_records import ended_badly, read_records
from . import discovery
from .. import failure_summary
from ..failure_summary import CLOSE_S, first_failures_first
from .. import hosts as _hosts
from ..usage import UsageError

DISCOVERY_INTERVAL_ENV = "FUSEOPT_ELASTIC_DISCOVERY_INTERVAL_S"
DEFAULT_DISCOVERY_INTERVAL_S = 1.0  # Horovod's


def add_flags(parser):
    group = parser.add_argument_group("elastic training (horovodrun's flags)")
    group.add_argument("--min-np", "--min-num-proc", type=int, dest="min_np",
                       help="fewest ranks to run with; fewer slots left ends the job")
    group.add_argument("--max-np", "--max-num-proc", type=int, dest="max_np",
                       help="most ranks to run with (default: every slot)")
    group.add_argument("--host-discovery-script", metavar="SCRIPT",
                       help="prints the usable hosts, one host:slots per line")
    group.add_argument("--slots-per-host", type=int,
                       help="slots of discovered hosts printed without them")
    group.add_argument("--reset-limit", type=int,
                       help="most resets (restarts) before the job fails (default: no limit)")
    group.add_argument("--elastic-timeout", type=float,
                       help="seconds to wait for --min-np slots (default %g)"
                       % DEFAULT_ELASTIC_TIMEOUT_S)


DEFAULT_ELASTIC_TIMEOUT_S = 600.0  # Horovod's


def is_elastic(args):
    """Whether to run as the elastic driver. ``--slots-per-host`` and
    ``--elastic-timeout`` alone would be accepted and ignored: refused."""
    elastic = any(v is not None for v in (args.min_np, args.max_np, args.host_discovery_script,
                                          args.reset_limit))
    stray = [flag for flag, value in (("--slots-per-host", args.slots_per_host),
                                      ("--elastic-timeout", args.elastic_timeout))
             if value is not None]
    if stray and not elastic:
        raise UsageError("%s: for elastic jobs only (add --host-discovery-script, --min-np, "
                         "--max-np or --reset-limit)" % " and ".join(stray))
    return elastic


def discovery_interval(environ=None):
    text = (os.environ if environ is None else environ).get(DISCOVERY_INTERVAL_ENV, "")
    try:
        return max(0.05, float(text)) if text else DEFAULT_DISCOVERY_INTERVAL_S
    except ValueError:
        raise _hosts.HostError("%s=%r is not a number of seconds"
                               % (DISCOVERY_INTERVAL_ENV, text)) from None


def classify(ends, starts, notes, total):
    """What ended a job, from its launch records: ("done", []), ("reset",
    lost ranks) or ("error", first failed record). Lost ranks died by a
    signal or vanished with their wrapper; ranks that ended with
    RESET_EXIT_CODE, or noted that a peer was lost, only followed."""
    def follower(rank):
        note = notes.get(rank)
        return bool(note) and (note["status"] == "RANK_FAILED" or (
            note["status"] == "SHUT_DOWN" and " by rank" in note["message"]))

    failed = first_failures_first(
        r for r in ends.values() if ended_badly(r) and not follower(r["rank"])
        and r.get("exit_code") != _proto.RESET_EXIT_CODE)
    vanished = sorted(set(starts) - set(ends))
    if not failed and not vanished:
        if len(ends) == total and all(not ended_badly(r) for r in ends.values()):
            return "done", []
        return "reset", []  # every rank ended for a reset: the hosts changed
    if failed and not failed[0].get("signal"):
        return "error", failed[0]  # the script failed first: restarting would repeat it
    lost = [r for r in failed if r.get("signal")]
    if failed and failed[0].get("signal") == signal.SIGKILL:
        # A rank that crashed within CLOSE_S of an external SIGKILL crashed
        # on the broken connection (Note [Deaths too close to order]): its
        # host is fine, and blacklisting it would shrink the job for nothing.
        lost = [r for r in lost if r["signal"] == signal.SIGKILL
                or r["end_time"] - failed[0]["end_time"] > CLOSE_S]
    return "reset", sorted([r["rank"] for r in lost] + vanished)


class ElasticDriver:
    """Runs jobs until one ends well, the script fails, or the hosts or
    resets run out. ``launch`` is cli.launch."""

    def __init__(self, args, launch):
        self.args = args
        self.launch = launch
        # MACs the commits of a store this run makes (elastic_protocol); a
        # store you name outlives the run, so its key is yours to set
        # (FUSEOPT_JOB_KEY in your environment reaches the ranks as it is).
        self.job_key = None
        self.interval = discovery_interval()
        self.blacklist = set()
        self.resets = 0
        self.placement = []
        self._notified = None
        self._next_poll = 0.0
        self._fixed = _hosts.parse_host_list(args.hosts) if args.hosts else None
        if args.hostfile:
            self._fixed = _hosts.parse_hostfile(args.hostfile)
        if self._fixed is None and not args.host_discovery_script:
            self._fixed = [("localhost", args.np or args.max_np or args.min_np or 1)]
        if args.min_np is not None and args.max_np is not None and args.min_np > args.max_np:
            raise _hosts.HostError("--min-np %d is more than --max-np %d"
                                   % (args.min_np, args.max_np))

    def say(self, text):
        print("fuseoptrun: elastic: %s" % text, file=sys.stderr, flush=True)

    def run(self):
        own_store = not os.environ.get(_proto.ELASTIC_DIR_ENV)
        store = tempfile.mkdtemp(prefix="fuseoptrun-elastic-") if own_store \
            else os.environ[_proto.ELASTIC_DIR_ENV]
        if own_store:
            self.job_key = _proto.new_job_key()
        try:
            return self._loop(store)
        finally:
            if own_store:
                shutil.rmtree(store, ignore_errors=True)

    def _loop(self, store):
        first = True
        while True:
            found = self._wait_for_slots()
            if found is None:
                return 1
            self.placement = discovery.plan(found, self.args.max_np,
                                            self.args.np if first else None)
            first = False
            env = {_proto.ELASTIC_DIR_ENV: store, _proto.RESET_COUNT_ENV: str(self.resets)}
            if self.job_key:
                env[_proto.JOB_KEY_ENV] = self.job_key
            total = sum(n for _, n in self.placement)
            self._notified = None
            self.say("starting %d ranks on %s" % (total, discovery.describe(self.placement)))
            outcome = self.launch(self.args, [(total, self.args.command)], self.placement, False,
                                  self._on_end, extra_env=env, watch=self._watch)
            if not isinstance(outcome, tuple):
                return outcome  # dry run, or stopped by a signal
            verdict, detail, code = outcome
            if verdict == "done":
                return 0
            if verdict == "error":
                self.say("rank %d failed with exit code %s (an error of the training script, "
                         "not a lost host): not restarting" % (detail["rank"],
                                                               detail.get("exit_code", code)))
                return code
            if not self._reset(detail):
                return 1

    def _on_end(self, launch_dir, code, stopping, started):
        if stopping:
            return None
        ends, starts = read_records(launch_dir, "rank-"), read_records(launch_dir, "start-")
        notes = read_records(launch_dir, "note-")
        total = sum(n for _, n in self.placement)
        verdict, detail = classify(ends, starts, notes, total)
        if verdict == "done" and code != 0:
            verdict, detail = "error", {"rank": -1}
        if verdict == "error" or detail:
            code = failure_summary.summarize(launch_dir, total, code, started) or code or 1
        return verdict, detail, code

    def _reset(self, lost_ranks):
        """Blacklists the hosts of lost ranks; False when no reset is allowed."""
        lost_hosts = sorted({discovery.host_of_rank(self.placement, r) for r in lost_ranks})
        why = ("lost rank(s) %s on %s" % (",".join(map(str, lost_ranks)), ", ".join(lost_hosts))
               if lost_ranks else "the hosts changed")
        self.blacklist.update(lost_hosts)
        self.resets += 1
        limit = self.args.reset_limit
        if limit is not None and self.resets > limit:
            self.say("%s, but --reset-limit %d resets were already done: giving up"
                     % (why, limit))
            return False
        self.say("reset %d: %s; the next job resumes from the newest commit" % (self.resets, why))
        return True

    def _found(self):
        if self._fixed is not None:
            return list(self._fixed)
        return discovery.discover(self.args.host_discovery_script, self.args.slots_per_host)

    def _wait_for_slots(self):
        """Usable hosts with at least --min-np slots, waiting up to
        --elastic-timeout for discovery to find them; None (said why) if not."""
        need = self.args.min_np or 1
        timeout = self.args.elastic_timeout
        deadline = time.time() + (DEFAULT_ELASTIC_TIMEOUT_S if timeout is None else timeout)
        while True:
            found = discovery.usable(self._found(), self.blacklist)
            slots = sum(n for _, n in found)
            if slots >= need:
                return found
            if self._fixed is not None or time.time() >= deadline:
                self.say("%d slot(s) left on %s (lost: %s), fewer than --min-np %d: giving up"
                         % (slots, discovery.describe(found),
                            ", ".join(sorted(self.blacklist)) or "none", need))
                return None
            time.sleep(self.interval)

    def _watch(self, launch_dir):
        """While a job runs: tells it when discovery offers another placement."""
        now = time.time()
        if self._fixed is not None or now < self._next_poll:
            return
        self._next_poll = now + self.interval
        try:
            found = discovery.usable(self._found(), self.blacklist)
        except discovery.DiscoveryError as e:
            self.say("discovery failed, keeping the current hosts: %s" % e)
            return
        wanted = discovery.plan(found, self.args.max_np)
        if wanted != self.placement and wanted != self._notified and \
                sum(n for _, n in wanted) >= (self.args.min_np or 1):
            self._notified = wanted
            _proto.write_notice(launch_dir, wanted)
            self.say("hosts changed to %s: the job resets at its next commit"
                     % discovery.describe(wanted))

