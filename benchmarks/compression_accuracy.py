"""Trained accuracy of each compressor, as a mean over seeds under each of
torch's CPU kernel sets: the table of docs/torch.md ("Accuracy").

One training run of these settings is chaotic: the same seed moves by up to
2 points between kernel sets (ATEN_CPU_CAPABILITY) and CPUs. So every cell
is a mean over --seeds seeds (± their standard deviation, and the worst
seed), and the claim judged is about means: each compressor's mean accuracy
is within 1 point of uncompressed training's, in every setting and kernel
set. The runs are the 2-rank digits MLPs of tests/workers/digits_accuracy.py
(the test tests/test_compression_accuracy.py checks the d, lr 0.05 row of
ef_sign on every CI run), launched here through fuseoptrun once per kernel
set.

    python benchmarks/compression_accuracy.py            # 12 seeds, ~10 min here
    python benchmarks/compression_accuracy.py --quick    # 3 seeds, one setting
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import report

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(os.path.dirname(HERE), "tests", "workers", "digits_accuracy.py")
# net (s = 64-64-10, d = 64-64-64-10) : SGD learning rate : momentum
SETTINGS = ["s:0.05:0.9", "d:0.05:0.9", "s:0.1:0.9", "d:0.1:0.9", "s:0.05:0"]
COMPRESSORS = ["none", "fp16", "bf16", "ef_sign"]
LIMIT = 0.01  # a compressor's mean accuracy may lose this much to uncompressed


def kernel_sets():
    """torch's kernel sets this CPU can run, lowest first."""
    native = subprocess.run([sys.executable, "-c", "import torch; print("
                             "torch.backends.cpu.get_cpu_capability())"],
                            capture_output=True, text=True, check=True).stdout.strip().lower()
    order = ["default", "avx2", "avx512"]
    return order[:order.index(native) + 1] if native in order else ["default", native]


def run(capability, settings, seeds, timeout):
    cmd = [sys.executable, "-m", "fuseopt.launcher.cli", "-np", "2", sys.executable, WORKER,
           "--seeds", str(seeds), "--compressors", ",".join(COMPRESSORS)]
    for s in settings:
        cmd += ["--setting", s]
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    found = re.search(r"^ACCURACY (.*)$", p.stdout, re.M)
    if p.returncode != 0 or not found:
        raise SystemExit("%s failed (%d):\n%s%s" % (capability, p.returncode, p.stdout[-3000:],
                                                    p.stderr[-3000:]))
    return json.loads(found.group(1))["runs"]


def cell(accs):
    return "%.3f ± %.3f (%.3f)" % (statistics.mean(accs), statistics.stdev(accs), min(accs))


def describe(setting):
    net, lr, momentum = setting.split(":")
    return "%s, lr %s, momentum %s" % ({"s": "64-64-10", "d": "64-64-64-10"}[net], lr, momentum)


def build(runs, caps, settings):
    """The Markdown table and the verdict lines."""
    rows, verdicts = [], report.Verdicts()
    lines = []
    for setting in settings:
        for c in COMPRESSORS:
            drops = [statistics.mean(runs[k][setting]["none"]) -
                     statistics.mean(runs[k][setting][c]) for k in caps]
            rows.append([describe(setting), c] + [cell(runs[k][setting][c]) for k in caps] +
                        ["—" if c == "none" else "%+.1f" % (-100 * max(drops))])
            if c != "none":
                lines.append(verdicts.line(
                    max(drops) <= LIMIT, "%s, %s: mean accuracy within %.0f point of "
                    "uncompressed under every kernel set (worst %+.1f points)" % (
                        describe(setting), c, 100 * LIMIT, -100 * max(drops))))
    head = ["setting", "compressor"] + ["%s: mean ± sd (worst seed)" % k for k in caps] + \
        ["worst mean vs none, points"]
    return report.table(head, "ll" + "r" * (len(caps) + 1), rows), lines, verdicts


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=12)
    p.add_argument("--quick", action="store_true", help="3 seeds, the tested setting only")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--timeout", type=float, default=3600)
    args = p.parse_args()
    seeds, settings = (3, ["d:0.05:0.9"]) if args.quick else (args.seeds, SETTINGS)
    started = time.time()
    caps = kernel_sets()
    runs = {}
    for k in caps:
        print("kernel set %s: %d settings x %d compressors x %d seeds ..."
              % (k, len(settings), len(COMPRESSORS), seeds), file=sys.stderr, flush=True)
        runs[k] = run(k, settings, seeds, args.timeout)
    table, lines, verdicts = build(runs, caps, settings)
    text = "\n".join(["Validation accuracy on the 397 held-out digits after 6 epochs, 2 ranks x "
                      "batch 16, mean ± sd over %d seeds (worst seed in brackets), under each "
                      "of torch's kernel sets (ATEN_CPU_CAPABILITY)." % seeds, ""] + table +
                     [""] + lines)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compression_accuracy.json"), "w") as f:
        json.dump({"seeds": seeds, "kernel_sets": caps, "runs": runs,
                   "duration_s": round(time.time() - started, 1)}, f)
    with open(os.path.join(args.out, "compression_accuracy.md"), "w") as f:
        f.write("# Compressed training: accuracy over seeds and kernel sets\n\n`%s` (%.0f s)\n\n"
                "%s\n" % (" ".join(["python"] + sys.argv), time.time() - started, text))
    print(text)
    fails = sum(1 for ok in verdicts if not ok)
    print("%d target(s) passed, %d failed" % (len(verdicts) - fails, fails))


if __name__ == "__main__":
    main()
