"""What the benchmark reports share: reference figures and targets (results/references.json),
cells, tables and verdict lines, the bar chart of step times, and writing
<name>.json/.png/.md."""
import datetime
import json
import os
import platform
import statistics
import sys
import time

import harness


def references(script):
    """Reference figures and targets of one script; references.json says where each
    number came from."""
    with open(os.path.join(harness.RESULTS, "references.json")) as f:
        return json.load(f)[script]


def fmt(v, spec="%.2f", missing="—"):
    return missing if v is None else spec % v


def size_label(nbytes):
    """"256 KiB", "16 MiB": a buffer size as the tables write it."""
    return "%d MiB" % (nbytes >> 20) if nbytes >= (1 << 20) else "%d KiB" % (nbytes >> 10)


def verdict(ok):
    return "PASS" if ok else "FAIL"


def table(head, align, rows):
    """A Markdown table's lines: head and rows are lists of cells, align one "l" or "r"
    per column."""
    lines = ["| %s |" % " | ".join(cells) for cells in [head] + list(rows)]
    return lines[:1] + ["|%s|" % "|".join("---:" if a == "r" else "---" for a in align)] \
        + lines[1:]


class Verdicts(list):
    """The targets judged so far (True: met)."""

    def line(self, ok, text, end=""):
        """Counts a verdict; its line "- **PASS** target: text -> **PASS**end"."""
        self.append(ok)
        return "- **%s** target: %s -> **%s**%s" % (verdict(ok), text, verdict(ok), end)


def steps(s):
    """(single's step, unconnected's step) of a summary {contender: {"step_ms": ...}}."""
    return tuple(s.get(c, {}).get("step_ms") for c in harness.BASELINES)


def overhead(s, c):
    """c's step minus unconnected's (None for a baseline or without unconnected)."""
    unc = steps(s)[1]
    return None if unc is None or c in harness.BASELINES else s[c]["step_ms"] - unc


def efficiency(s, c):
    """Scaling efficiency: single's step / c's (None for single or without single)."""
    single = steps(s)[0]
    return None if single is None or c == "single" else single / s[c]["step_ms"]


def load_note(jobs):
    loads = [j["loadavg_1m_before"] for j in jobs] or [0.0]
    return ("1-minute load average when jobs started: median %.2f, max %.2f (%d cores)"
            % (statistics.median(loads), max(loads), os.cpu_count() or 0))


def run_meta(args, started, mpiexec, **more):
    meta = {"command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - started, 1), "mpiexec": mpiexec,
            "reps": args.reps, "quick": args.quick, "seed": args.seed,
            "python": sys.version.split()[0], "platform": platform.platform(),
            "cpus": os.cpu_count()}
    meta.update(more)
    return meta


def finish(args, name, title, record, text, plot, verdicts, suffix="", more=()):
    """Writes <out>/<name>.json (compact: the raw samples are large; record holds "meta"),
    <name>.png (plot(path)) and <name>.md (text under a title and the command); prints
    text, the lines in more, what was written and how many targets passed. Returns the
    exit status: 1 if a target failed and --strict, else 0."""
    paths = [os.path.join(args.out, name + ext) for ext in (".json", ".png", ".md")]
    with open(paths[0], "w") as f:
        json.dump(record, f, separators=(",", ":"))
        f.write("\n")
    plot(paths[1])
    meta = record["meta"]
    with open(paths[2], "w") as f:
        f.write("# %s\n\n`%s` (%s, %d reps, %.0f s)\n\n%s\n" % (
            title, meta["command"], meta["started"], meta["reps"], meta["duration_s"], text))
    print(text)
    print()
    for line in more:
        print(line)
    print("Wrote %s" % ", ".join(paths))
    fails = sum(1 for ok in verdicts if not ok)
    print("%d target(s) passed, %d failed%s" % (len(verdicts) - fails, fails, suffix))
    return 1 if (args.strict and fails) else 0


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(plt, fig, path, dpi):
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def step_bars(ax, names, vals, rival, reps, noisy=None, lines=(), labels=None, rotation=15,
              **legend):
    """Bars of median step times (baselines grey, the rival red, references light grey),
    labelled, with one dot per repetition (an x, grey, for one flagged noisy); then the
    horizontal lines (y, colour, style, label), a legend of them and the bars' labels
    (default names). Returns the top of the bars and of the dots that are not noisy."""
    xs = list(range(len(names)))
    ax.bar(xs, vals, color=["#999999" if n in harness.BASELINES else "#d62728" if n == rival
                            else "#bbbbbb" if n.startswith("horovod") else "#1f77b4"
                            for n in names])
    top = max(vals)
    for x, per_rep, flags in zip(xs, reps, noisy or [[False] * len(r) for r in reps]):
        for v, bad in zip(per_rep, flags):
            if not bad:
                top = max(top, v)
            ax.plot([x], [v], "x" if bad else ".", color="#888888" if bad else "k",
                    ms=5 if bad else 4)
    for x, v in zip(xs, vals):
        ax.text(x, v, "%.1f" % v, ha="center", va="bottom", fontsize=8)
    for y, color, style, label in lines:
        ax.axhline(y, color=color, ls=style, lw=1, label=label)
    if lines:
        ax.legend(fontsize=8, **legend)
    ax.set_xticks(xs)
    ax.set_xticklabels(labels or names, rotation=rotation, fontsize=8)
    ax.set_ylabel("median step time (ms)")
    return top
