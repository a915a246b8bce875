"""``fuseopt timeline summarize FILE``: where the time of a timeline went.

Reads a file written by ``FUSEOPT_TIMELINE`` / ``start_timeline`` (a torn last
flush, from a killed job, is trimmed) and prints per tensor and per bucket
time and bytes, and how the traced span divides between negotiating and
reducing."""
import json
from collections import defaultdict

NEGOTIATE = "NEGOTIATE"
QUEUE = "QUEUE"
COPY_IN = "MEMCPY_IN_FUSION_BUFFER"
COPY_OUT = "MEMCPY_OUT_FUSION_BUFFER"
NOT_REDUCING = {NEGOTIATE, QUEUE}


def load(path):
    """The trace's events. Tolerates a file cut inside its last flush."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError:
        # Keep whole events only: cut after the last complete one and close.
        end = text.rfind("}\n,")
        end = text.rfind("}", 0, end + 1 if end >= 0 else len(text))
        while end > 0:
            try:
                return json.loads(text[:end + 1] + "]")
            except ValueError:
                end = text.rfind("}", 0, end)
        raise ValueError("%s is not a fuseopt timeline (no complete event)" % path)


def _merge(intervals):
    out = []
    for b, e in sorted(intervals):
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return out


def _union_length(intervals):
    return sum(e - b for b, e in _merge(intervals))


def _outside_length(a, b):
    """Length of the union of a that lies outside the union of b."""
    ma, mb = _merge(a), _merge(b)
    inside = sum(max(0.0, min(x1, y1) - max(x0, y0)) for x0, x1 in ma for y0, y1 in mb)
    return sum(e - b for b, e in ma) - inside


def summarize(events):
    """{'tensors': {name: {...}}, 'buckets': {id: {...}}, 'span_us', shares...}."""
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    tensors = defaultdict(lambda: defaultdict(float))
    buckets = {}
    negotiating, reducing = [], []
    first, last = float("inf"), float("-inf")
    for e in events:
        if e.get("ph") != "X":
            continue
        name, phase = names.get(e["pid"], str(e["pid"])), e["name"]
        begin, dur = e["ts"], e.get("dur", 0.0)
        first, last = min(first, begin), max(last, begin + dur)
        t = tensors[name]
        t[phase + "_us"] += dur
        args = e.get("args", {})
        if phase == NEGOTIATE:
            negotiating.append((begin, begin + dur))
            continue
        if phase == QUEUE:
            continue
        reducing.append((begin, begin + dur))
        if phase in (COPY_IN, COPY_OUT):
            continue
        t["operations"] += 1
        t["bytes"] += args.get("bytes", 0)
        t["collective"] = phase
        b = buckets.setdefault(args.get("bucket"), {
            "collective": phase, "us": dur, "bytes": args.get("bucket_bytes", 0),
            "tensors": args.get("bucket_tensors", 1)})
        b["us"] = max(b["us"], dur)
    span = max(0.0, last - first) if tensors else 0.0
    return {"tensors": tensors, "buckets": buckets, "span_us": span,
            "reducing_us": _union_length(reducing),
            "negotiating_only_us": _outside_length(negotiating, reducing)}


def format_summary(s, top=15):
    lines = []
    span = s["span_us"] or 1.0
    lines.append("span %.1f ms: reducing (copies + collectives) %.1f ms = %.0f%%, "
                 "negotiating with nothing reducing %.1f ms = %.0f%%"
                 % (s["span_us"] / 1e3, s["reducing_us"] / 1e3, 100 * s["reducing_us"] / span,
                    s["negotiating_only_us"] / 1e3, 100 * s["negotiating_only_us"] / span))
    lines.append("")
    lines.append("tensors (top %d by negotiate + queue + reduce time):" % top)
    lines.append("%-40s %5s %10s %10s %9s %10s %10s" % (
        "name", "ops", "MB", "negot ms", "queue ms", "copies ms", "coll ms"))
    def total(t):
        return sum(v for k, v in t.items() if k.endswith("_us"))
    for name, t in sorted(s["tensors"].items(), key=lambda kv: -total(kv[1]))[:top]:
        coll = t.get(t.get("collective", "") + "_us", 0.0)
        lines.append("%-40s %5d %10.3f %10.2f %9.2f %10.2f %10.2f" % (
            name[-40:], t.get("operations", 0), t.get("bytes", 0) / 1e6,
            t.get(NEGOTIATE + "_us", 0) / 1e3, t.get(QUEUE + "_us", 0) / 1e3,
            (t.get(COPY_IN + "_us", 0) + t.get(COPY_OUT + "_us", 0)) / 1e3, coll / 1e3))
    buckets = s["buckets"]
    lines.append("")
    lines.append("buckets: %d, %.1f MB in all, mean %.0f KB and %.1f tensors per bucket"
                 % (len(buckets), sum(b["bytes"] for b in buckets.values()) / 1e6,
                    sum(b["bytes"] for b in buckets.values()) / max(1, len(buckets)) / 1e3,
                    sum(b["tensors"] for b in buckets.values()) / max(1, len(buckets))))
    lines.append("%-8s %-14s %8s %10s %10s %9s" % ("bucket", "collective", "tensors", "MB",
                                                  "ms", "GB/s"))
    for bid, b in sorted(buckets.items(), key=lambda kv: -kv[1]["us"])[:top]:
        rate = b["bytes"] / b["us"] / 1e3 if b["us"] > 0 else 0.0
        lines.append("%-8s %-14s %8d %10.3f %10.3f %9.2f" % (
            bid, b["collective"], b["tensors"], b["bytes"] / 1e6, b["us"] / 1e3, rate))
    return "\n".join(lines)
