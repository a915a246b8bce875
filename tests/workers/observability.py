"""Timeline, overlap meter and autotune, at the rank level.

argv[1]: a directory shared by the ranks for timeline and autotune files."""
import csv
import json
import os
import sys
import time

import numpy as np

import fuseopt
import rank_harness as harness
from fuseopt.tools import timeline_summary

OUT = sys.argv[1]
SIZES = [1000, 2000, 3000, 4000, 5000]  # float32 elements of one fused step


def _step(step, prefix="tl"):
    grads = [np.full(n, float(step + fuseopt.rank()), np.float32) for n in SIZES]
    out = fuseopt.grouped_allreduce(grads, names=["%s.%d" % (prefix, i) for i in range(len(SIZES))],
                                    op=fuseopt.Sum)
    expected = sum(step + r for r in range(fuseopt.size()))
    for o in out:
        assert np.all(o == expected), (o[:3], expected)


def check_timeline():
    path = os.path.join(OUT, "timeline-{rank}.json")
    mine = path.replace("{rank}", str(fuseopt.rank()))
    fuseopt.start_timeline(path, mark_cycles=True)
    for step in range(3):
        _step(step)
    time.sleep(0.3)  # past a periodic flush: the file must already be valid JSON
    while_running = json.load(open(mine))
    assert any(e.get("name") == "ALLREDUCE" for e in while_running), while_running[:5]
    fuseopt.broadcast(np.arange(10, dtype=np.int64), root_rank=0, name="tl.bcast")
    fuseopt.stop_timeline()
    fuseopt.stop_timeline()  # a second stop is a no-op
    events = json.load(open(mine))
    rows = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    by_tensor = {}
    for e in events:
        if e.get("ph") in ("X", "i") and e["pid"] in rows:
            by_tensor.setdefault(rows[e["pid"]], []).append(e)
    # Through MPI a bucket is copied into the fusion buffer and back; the
    # shared-memory path reads and writes the tensors themselves.
    copies = 3 if fuseopt.settings()["shm_min_bytes"] < 0 else 0
    for i, n in enumerate(SIZES):
        evs = by_tensor["tl.%d" % i]
        names = [e["name"] for e in evs]
        for phase in ("NEGOTIATE", "QUEUE", "ALLREDUCE"):
            assert names.count(phase) == 3, (phase, names)
        for phase in ("MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"):
            assert names.count(phase) == copies, (phase, names)
        for e in evs:
            if e["name"] == "ALLREDUCE":
                assert e["args"]["bytes"] == 4 * n and e["args"]["bucket_tensors"] == 5, e
                assert e["args"]["bucket_bytes"] == 4 * sum(SIZES), e
        # Phases follow each other within a step.
        spans = sorted((e for e in evs if e["ph"] == "X"), key=lambda e: e["ts"])
        for a, b in zip(spans, spans[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1.0, (a, b)  # 1 us of rounding
        # Rank 0 (the coordinator) saw every rank's request in the first step.
        ready = sorted(e["args"]["rank"] for e in evs if e["name"] == "READY")
        assert ready == (list(range(fuseopt.size())) if fuseopt.rank() == 0 else []), ready
    assert [e["name"] for e in by_tensor["tl.bcast"] if e["ph"] == "X"] == [
        "NEGOTIATE", "QUEUE", "BROADCAST"]
    assert any(e["name"] == "CYCLE" for e in events)
    summary = timeline_summary.summarize(events)
    assert summary["tensors"]["tl.0"]["operations"] == 3
    assert sum(b["bytes"] for b in summary["buckets"].values()) == 3 * 4 * sum(SIZES) + 80
    assert 0 < summary["reducing_us"] <= summary["span_us"]


def check_timeline_errors():
    bad = os.path.join(OUT, "no-such-dir", "t-{rank}.json")
    harness.expect_error(fuseopt.InvalidArgumentError, lambda: fuseopt.start_timeline(bad),
                         "cannot write the timeline", "no-such-dir")
    path = os.path.join(OUT, "twice-{rank}.json")
    fuseopt.start_timeline(path)
    harness.expect_error(fuseopt.InvalidArgumentError, lambda: fuseopt.start_timeline(path),
                         "already")
    fuseopt.stop_timeline()


def check_autotune():
    steps = 0
    while fuseopt.metrics()["autotune"] != "done":
        _step(steps, "at")
        steps += 1
        assert steps < 2000, fuseopt.metrics()
    chosen = fuseopt.metrics()
    setting = (chosen["fusion_threshold_bytes"], chosen["cycle_time_ms"])
    for step in range(20):  # it holds
        _step(step, "at")
    after = fuseopt.metrics()
    assert (after["fusion_threshold_bytes"], after["cycle_time_ms"]) == setting
    # Every rank switched at the same rounds: same setting, same buckets.
    seen = fuseopt.allgather_object((setting, after["collectives"], after["tensors"]))
    assert len(set(seen)) == 1, seen
    if fuseopt.rank() == 0:
        rows = list(csv.DictReader(open(os.path.join(OUT, "autotune.csv"))))
        trials = [r for r in rows if r["note"] == ""]
        assert len(trials) == 8, rows  # 5 thresholds, then 3 more cycle times
        assert [r["note"] for r in rows[-1:]] == ["chosen"]
        best = max(trials, key=lambda r: float(r["bytes_per_second"]))
        assert (int(best["fusion_threshold_bytes"]), float(best["cycle_time_ms"])) == setting, (
            best, setting)
        assert all(int(r["rounds"]) == 3 and int(r["bytes"]) > 0 for r in trials), trials


if __name__ == "__main__":
    if os.environ.get("FUSEOPT_AUTOTUNE") == "1":
        harness.run([check_autotune])
    else:
        harness.run([check_timeline, check_timeline_errors])
