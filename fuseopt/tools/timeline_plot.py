"""``fuseopt timeline plot``: a timeline drawn as a PNG, one row per tensor,
one colour per phase (for reports and docs; a trace viewer is better for
exploring)."""
from .timeline_summary import COPY_IN, COPY_OUT, NEGOTIATE, QUEUE

_COLOURS = {NEGOTIATE: "#c7c7c7", QUEUE: "#fdd49e", COPY_IN: "#9ecae1", COPY_OUT: "#6baed6"}
_COLLECTIVE_COLOUR = "#d62728"


def plot(events, output, max_rows=12, last_ms=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        raise ValueError("the timeline holds no events to draw")
    end = max(e["ts"] + e.get("dur", 0) for e in spans)
    start = end - last_ms * 1e3 if last_ms else min(e["ts"] for e in spans)
    spans = [e for e in spans if e["ts"] + e.get("dur", 0) >= start]
    rows = []
    for e in sorted(spans, key=lambda e: e["ts"]):
        if e["pid"] not in rows:
            rows.append(e["pid"])
    rows = rows[:max_rows]
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.6))
    for y, pid in enumerate(rows):
        for e in spans:
            if e["pid"] != pid:
                continue
            colour = _COLOURS.get(e["name"], _COLLECTIVE_COLOUR)
            ax.broken_barh([((e["ts"] - start) / 1e3, max(e.get("dur", 0), 1.0) / 1e3)],
                           (y - 0.35, 0.7), facecolors=colour)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([names.get(p, str(p))[-38:] for p in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    legend = [Patch(color=c, label=n) for n, c in _COLOURS.items()]
    legend.append(Patch(color=_COLLECTIVE_COLOUR, label="collective (ALLREDUCE, ...)"))
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(rows) < 4
                                                                  else -0.12), ncol=5, fontsize=8)
    ax.set_title("fuseopt timeline: one row per tensor")
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    plt.close(fig)
