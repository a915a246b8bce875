"""Worker-side test harness: run named checks on every rank, report, exit.

Each check is a function; failures are collected (so one failure does not
hide the rest), printed with the rank, and turn into exit code 1. A check
that leaves ranks out of step would hang the others, so checks that can fail
on one rank only must still run their collectives to completion."""
import contextlib
import sys
import time
import traceback

import fuseopt


def run(checks, **init_settings):
    run_configs(checks, [init_settings])


def run_configs(checks, configs):
    """The checks under each of configs (fuseopt.init's settings) in turn, one
    init and shutdown each: one launch instead of one per configuration (a
    launch costs every rank its imports)."""
    failures = 0
    for settings in configs:
        rank, failed = _run_checks(checks, settings)
        failures += failed
    print("[rank %d] %d checks, %d failed" % (rank, len(checks) * len(configs), failures),
          flush=True)
    sys.exit(1 if failures else 0)


def _run_checks(checks, init_settings):
    fuseopt.init(**init_settings)
    rank = fuseopt.rank()
    if init_settings:
        print("[rank %d] settings %s" % (rank, init_settings), flush=True)
    failures = 0
    for check in checks:
        start = time.monotonic()
        try:
            check()
            if rank == 0:  # where a worker's time goes, for keeping the suite short
                print("[rank 0] %s: %.1f s" % (check.__name__, time.monotonic() - start),
                      flush=True)
        except Exception:
            failures += 1
            print("[rank %d] FAIL %s\n%s" % (rank, check.__name__, traceback.format_exc()),
                  flush=True)
    fuseopt.shutdown()
    return rank, failures


def expect_error(error_type, fn, *contains):
    """fn() must raise error_type with every string of contains in its message."""
    try:
        fn()
    except error_type as e:
        for text in contains:
            assert text in str(e), "%r not in error message %r" % (text, str(e))
        return e
    raise AssertionError("expected %s, nothing raised" % error_type.__name__)


@contextlib.contextmanager
def counting_casts(compressor):
    """Yields the list of dtypes ``compressor`` casts tensors to (through its
    kit) while the block runs; the compressor keeps its class's kit after."""
    casts = []

    class CountingKit(type(compressor.kit)):
        def cast(self, tensor, dtype):
            casts.append(dtype)
            return super().cast(tensor, dtype)

    compressor.kit = CountingKit()
    try:
        yield casts
    finally:
        del compressor.kit
