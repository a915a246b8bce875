"""Every flag of horovodrun is honoured, a documented no-op, or refused with a
reason: none is unknown to fuseoptrun's parser. The list is transcribed from
Horovod 0.28.1's horovod/runner/launch.py (parse_args), plus the two oneCCL/MLSL
affinity flags of earlier releases; each entry carries a sample value."""
import os

import pytest

from fuseopt.launcher import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# flag (all spellings) -> (sample arguments, what fuseoptrun does with it)
HONOURED, NO_OP, REFUSED = "honoured", "no-op", "refused"
# Honoured by the elastic driver; alone, the last two are refused (they mean
# nothing outside an elastic job), so each is given with --min-np.
ELASTIC = "elastic"
HOROVODRUN_FLAGS = {
    ("-np", "--num-proc"): (["2"], HONOURED),
    ("-cb", "--check-build"): ([], HONOURED),
    ("--disable-cache",): ([], NO_OP),
    ("--start-timeout",): (["40"], HONOURED),
    ("--network-interfaces",): (["eth0"], HONOURED),
    ("--network-interface",): (["eth0"], HONOURED),
    ("--output-filename",): (["/tmp/out"], HONOURED),
    ("--verbose",): ([], HONOURED),
    ("--config-file",): (["c.yaml"], REFUSED),
    ("-p", "--ssh-port"): (["2222"], HONOURED),
    ("-i", "--ssh-identity-file"): (["/k/id"], HONOURED),
    ("--fusion-threshold-mb",): (["32"], HONOURED),
    ("--cycle-time-ms",): (["2"], HONOURED),
    ("--cache-capacity",): (["64"], HONOURED),
    ("--hierarchical-allreduce",): ([], HONOURED),
    ("--no-hierarchical-allreduce",): ([], HONOURED),
    ("--hierarchical-allgather",): ([], REFUSED),
    ("--no-hierarchical-allgather",): ([], NO_OP),
    ("--autotune",): ([], HONOURED),
    ("--no-autotune",): ([], HONOURED),
    ("--autotune-log-file",): (["a.csv"], HONOURED),
    ("--autotune-warmup-samples",): (["3"], REFUSED),
    ("--autotune-steps-per-sample",): (["10"], REFUSED),
    ("--autotune-bayes-opt-max-samples",): (["20"], REFUSED),
    ("--autotune-gaussian-process-noise",): (["0.8"], REFUSED),
    ("--min-np", "--min-num-proc"): (["2"], ELASTIC),
    ("--max-np", "--max-num-proc"): (["4"], ELASTIC),
    ("--slots-per-host",): (["2", "--min-np", "1"], ELASTIC),
    ("--elastic-timeout",): (["600", "--min-np", "1"], ELASTIC),
    ("--reset-limit",): (["3"], ELASTIC),
    ("--blacklist-cooldown-range",): (["60", "300"], REFUSED),
    ("--timeline-filename",): (["/tmp/t.json"], HONOURED),
    ("--timeline-mark-cycles",): ([], HONOURED),
    ("--no-timeline-mark-cycles",): ([], NO_OP),  # off is the default
    ("--no-stall-check",): ([], HONOURED),
    ("--stall-check",): ([], NO_OP),
    ("--stall-check-warning-time-seconds",): (["30"], HONOURED),
    ("--stall-check-shutdown-time-seconds",): (["90"], HONOURED),
    ("--mpi-threads-disable",): ([], NO_OP),
    ("--no-mpi-threads-disable",): ([], NO_OP),
    ("--mpi-args",): (["-bind-to core"], HONOURED),
    ("--tcp",): ([], REFUSED),
    ("--binding-args",): (["-bind-to core"], REFUSED),
    ("--num-nccl-streams",): (["1"], NO_OP),
    ("--thread-affinity",): (["1"], REFUSED),
    ("--gloo-timeout-seconds",): (["30"], REFUSED),
    ("--log-level",): (["INFO"], HONOURED),
    ("--log-with-timestamp",): ([], REFUSED),
    ("--log-without-timestamp",): ([], NO_OP),
    ("-prefix-timestamp", "--prefix-output-with-timestamp"): ([], REFUSED),
    ("--log-hide-timestamp",): ([], NO_OP),
    ("--no-log-hide-timestamp",): ([], REFUSED),
    ("-H", "--hosts"): (["a:1,b:1"], HONOURED),
    ("-hostfile", "--hostfile"): (None, HONOURED),  # a file, made in the test
    ("--host-discovery-script",): (["./discover.sh"], ELASTIC),
    ("--gloo",): ([], REFUSED),
    ("--mpi",): ([], NO_OP),
    ("--jsrun",): ([], REFUSED),
    ("--mlsl-bgt-affinity",): (["1"], REFUSED),
    ("--ccl-bgt-affinity",): (["1"], REFUSED),
}
# Honoured flags whose effect a dry run does not show (it prints the command
# anyway, or the flag ends the run before it).
_INVISIBLE = {"--verbose", "-cb", "--check-build", "--no-hierarchical-allreduce", "--no-autotune"}
_CASES = [(spelling, sample, kind) for spellings, (sample, kind) in HOROVODRUN_FLAGS.items()
          for spelling in spellings]


def _dry_run(argv, capsys):
    code = cli.run(["--dry-run"] + argv + ["python", "t.py"])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("flag, sample, kind", _CASES, ids=[c[0] for c in _CASES])
def test_each_horovodrun_flag_is_honoured_a_no_op_or_refused(flag, sample, kind, capsys,
                                                             tmp_path):
    if sample is None:
        (tmp_path / "hosts").write_text("a slots=1\nb slots=1\n")
        sample = [str(tmp_path / "hosts")]
    if flag == "--host-discovery-script":
        script = tmp_path / "discover.sh"
        script.write_text("#!/bin/sh\necho localhost:2\n")
        script.chmod(0o755)
        sample = [str(script)]
    baseline = _dry_run([], capsys)
    if kind == REFUSED:
        with pytest.raises(cli.UsageError) as refused:
            _dry_run([flag] + sample, capsys)
        why = str(refused.value).split(": ", 1)
        assert why[0].startswith(flag) and len(why) == 2 and len(why[1]) > 15, why
        return
    if kind == ELASTIC:  # the elastic driver takes over: it says so and plans the job
        code, out, err = _dry_run([flag] + sample, capsys)
        assert code == 0 and "fuseoptrun: elastic: starting" in err, (flag, out, err)
        return
    code, out, err = _dry_run([flag] + sample, capsys)
    assert code == 0, (flag, out, err)
    if kind == NO_OP and flag != "--no-timeline-mark-cycles":
        assert "fuseoptrun: %s" % flag in err, (flag, err)  # a notice says why
        assert out == baseline[1], flag  # ... and nothing changed
    elif kind == HONOURED and flag not in _INVISIBLE:
        assert (out, err) != baseline[1:], "%s changed nothing" % flag


def test_migration_guide_names_every_horovodrun_flag():
    with open(os.path.join(ROOT, "docs", "migration.md")) as f:
        text = f.read()
    missing = [s for spellings in HOROVODRUN_FLAGS for s in spellings
               if "`%s`" % s not in text and "`%s " % s not in text and "%s`" % s not in text]
    assert missing == []
