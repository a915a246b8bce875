"""Compressed training keeps its accuracy on any CPU: ef_sign's mean
validation accuracy over 12 seeds is within 1 point of uncompressed
training's, under two of torch's CPU kernel sets, the CPU's own and the
plain (default) one; benchmarks/compression_accuracy.py covers avx2 too.

Why a mean, and why 1 point: one run of this setting (deep MLP, SGD lr 0.05,
momentum 0.9) is chaotic; the same seed moves by up to 2 points between
kernel sets (issue 32: 0.914 / 0.927 / 0.937 for seed 4). Over 12 seeds,
measured on one machine under default / avx2 / avx512 (benchmarks/results/
compression_accuracy.md has the full table), ef_sign minus uncompressed is
+0.1 / +0.4 / +0.2 points on average with a per-seed spread (sd) of 1.7
points, so the mean's standard error is 0.5 points: 1 point leaves more than
two standard errors. The sign-only compressor that diverged here (0.36-0.61
accuracy) fails it by 35 points."""
import json
import statistics

import pytest

CAPABILITIES = [None, "default"]  # None: the CPU's own (avx512 or avx2); default: no vector ISA
SEEDS = 12
LIMIT = 0.01  # mean accuracy ef_sign may lose to uncompressed


def mean_drop(runs):
    """Mean over seeds of uncompressed minus ef_sign accuracy, and its sd."""
    drops = [p - e for p, e in zip(runs["none"], runs["ef_sign"])]
    return statistics.mean(drops), statistics.stdev(drops)


@pytest.mark.parametrize("capability", CAPABILITIES, ids=lambda c: c or "native")
def test_ef_sign_keeps_mean_accuracy(run_ranks, capability):
    env = {"ATEN_CPU_CAPABILITY": capability} if capability else {}
    out = run_ranks(2, "digits_accuracy.py", "--seeds", SEEDS, env=env, timeout=300).output
    line = next(l for l in out.splitlines() if l.startswith("ACCURACY "))
    report = json.loads(line[len("ACCURACY "):])
    if capability:
        assert report["capability"].lower() == capability.lower(), report["capability"]
    runs = report["runs"]["d:0.05:0.9"]
    assert len(runs["none"]) == len(runs["ef_sign"]) == SEEDS
    assert runs["none"] != runs["ef_sign"], "ef_sign changed nothing?"
    drop, spread = mean_drop(runs)
    print("%s: ef_sign %.4f, uncompressed %.4f, mean drop %+.4f (sd %.4f)" % (
        report["capability"], statistics.mean(runs["ef_sign"]), statistics.mean(runs["none"]),
        drop, spread))
    assert drop <= LIMIT, (report["capability"], drop, runs)
