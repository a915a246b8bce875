"""Timeline, metrics summary, overlap meter and autotune (issue 6).

Stall warnings and shutdown are in test_reliability.py, hierarchical
allreduce in test_collectives.py, metrics counters in test_negotiation.py."""
import json
import os
import re
import subprocess
import sys

from fuseopt.tools import timeline_summary

HERE = os.path.dirname(os.path.abspath(__file__))


def fuseopt_cli(*args):
    return subprocess.run([sys.executable, "-m", "fuseopt", *args], capture_output=True,
                          text=True, timeout=120)


def test_timeline_events_summary_and_plot(run_ranks, tmp_path):
    # Through MPI, whose buckets show Horovod's fusion-buffer phases; the
    # autotune test below runs the same checks on the shared-memory path.
    run_ranks(2, "observability.py", tmp_path, env={"FUSEOPT_SHM_MIN_BYTES": "-1"})
    trace = str(tmp_path / "timeline-0.json")
    out = fuseopt_cli("timeline", "summarize", trace)
    assert out.returncode == 0, out.stderr
    assert re.search(r"^tl\.4\s+3\s+0\.060", out.stdout, re.M), out.stdout  # 3 ops x 20 KB
    assert "buckets: 4, 0.2 MB in all" in out.stdout, out.stdout  # 3 fused + 1 broadcast
    png = tmp_path / "timeline.png"
    out = fuseopt_cli("timeline", "plot", trace, "--output", str(png))
    assert out.returncode == 0, out.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summarize_trims_a_torn_flush(tmp_path):
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "w"}},
              {"name": "ALLREDUCE", "ph": "X", "pid": 1, "tid": 0, "ts": 5.0, "dur": 2.0,
               "args": {"bucket": 0, "bucket_tensors": 1, "bucket_bytes": 8, "bytes": 8}}]
    text = "[\n" + ",\n".join(json.dumps(e) for e in events) + ',\n{"name": "QUEUE", "ph'
    (tmp_path / "torn.json").write_text(text)
    loaded = timeline_summary.load(str(tmp_path / "torn.json"))
    assert loaded == events
    s = timeline_summary.summarize(loaded)
    assert s["tensors"]["w"]["operations"] == 1 and s["reducing_us"] == 2.0
    (tmp_path / "junk.json").write_text("not a trace")
    out = fuseopt_cli("timeline", "summarize", str(tmp_path / "junk.json"))
    assert out.returncode == 2 and "not a fuseopt timeline" in out.stderr


def test_timeline_is_valid_json_after_the_process_is_killed(tmp_path):
    trace = tmp_path / "killed.json"
    script = ("import os, signal, time, numpy as np, fuseopt\n"
              "fuseopt.init()\n"
              "for i in range(5): fuseopt.allreduce(np.ones(100, np.float32), name='k')\n"
              "time.sleep(0.5)\n"  # a periodic flush
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", script], timeout=120,
                          env=dict(os.environ, FUSEOPT_TIMELINE=str(trace)))
    assert proc.returncode == -9
    events = json.loads(trace.read_text())  # strict JSON, no repair
    assert sum(e["name"] == "ALLREDUCE" for e in events) == 5


def test_fuseoptrun_timeline_and_metrics_summary(run_ranks, tmp_path):
    trace = tmp_path / "job.json"
    result = run_ranks(2, "metrics.py", launcher_args=[
        "--timeline-filename", str(trace), "--metrics-summary"])
    rows = re.findall(r"^\s+(\d)\s+([\d.]+)\s+(\d+)\s+(\d+)\s", result.output, re.M)
    assert [r[0] for r in rows] == ["0", "1"], result.output
    assert rows[0][1:] == rows[1][1:] and int(rows[0][3]) >= 50, rows  # same plan, 50+ tensors
    # Only rank 0 writes a path without {rank}.
    assert sorted(os.listdir(tmp_path)) == ["job.json"]
    names = {e["args"]["name"] for e in json.loads(trace.read_text())
             if e.get("name") == "process_name"}
    assert {"m.%d" % i for i in range(5)} <= names, names


def test_autotune_converges_and_ranks_agree(run_ranks, tmp_path):
    run_ranks(2, "observability.py", tmp_path, env={
        "FUSEOPT_AUTOTUNE": "1", "FUSEOPT_AUTOTUNE_WINDOW_ROUNDS": "3",
        "FUSEOPT_AUTOTUNE_LOG": str(tmp_path / "autotune.csv")})


def test_overlap_efficiency_of_the_torch_optimizer(run_ranks):
    run_ranks(2, "overlap_torch.py")
