"""Starts fuseopt jobs without mpiexec: a PmiServer thread in this process,
and N plain subprocesses (standing in for Ray actors / Spark tasks) that
get only PMI_PORT and PMI_ID in their environment.

    python driver.py SCENARIO ...      (or: all, which runs all but the
                                         timing and oversubscribed ones)

basic (2 ranks, shm), four (4 ranks, MPIR_CVAR_NOLOCAL=1), four_shm (4 ranks,
shm), die / die_shm / die_shm_timeout / die_shm_record / die_nowatch (a rank
exits before init), die_late / die_late_record (after init), abort
(MPI_Abort), two_jobs, concurrent, fallback (no PMI_process_mapping),
two_nodes (mapping with 2 emulated nodes), inproc_env (PMI vars set by the
rank itself; re-init), timing (vs mpiexec), oversubscribed (4 ranks on 2
cores, shm vs NOLOCAL). Transcripts of the PMI traffic go to
transcript_<job>.txt beside this file.
"""
import json
import logging
import os
import subprocess
import sys
import threading
import time

from pmi_server import PmiServer

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/work/main/.venv/bin/python"
WORKER = os.path.join(HERE, "worker.py")
# Another launcher's variables would win over PMI_PORT (PMI_FD) or confuse
# MPICH's PMI auto-detection (PMIX_*, PMI_SIZE): never pass them on.
FOREIGN = ("PMI_", "PMIX_", "HYDRA_", "HYDI_", "MPIEXEC_", "OMPI_", "PRTE_")


def rank_env(server, rank, extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN)}
    env.update(server.env(rank))
    env.update(extra)
    return env


def run_job(n, label, extra_env=None, die_rank=None, die_when="1", nodes=None, timeout=90,
            quiet=False, watch=True, connect_timeout=60, launch_dir=None, pmi_in_argv=False,
            jobattrs=None):
    """One job: server + n subprocesses. Returns a summary dict. die_rank's
    process exits before init (die_when "1") or just after it ("after_init").
    watch=False: the driver does not tell the server of processes that end.
    launch_dir: also give ranks PMI_RANK/PMI_SIZE/FUSEOPT_LAUNCH_DIR and write
    fuseopt's exit record (rank-N.json) there when a process ends, so that
    fuseopt's peer watch raises RankFailedError in the survivors."""
    extra_env = dict(extra_env or {})
    if n > (os.cpu_count() or 1):  # as fuseoptrun: MPICH's shm polling needs a core per rank
        extra_env.setdefault("MPIR_CVAR_NOLOCAL", "1")
    procs = []

    def kill_all(reason, kind):  # what Hydra does when a rank fails: stop the job
        if kind != "abort":  # grace: let the others report the PMI error themselves
            time.sleep(float(os.environ.get("DRIVER_KILL_GRACE_S", "2")))
        for p in procs:
            if p.poll() is None:
                p.kill()

    server = PmiServer(n, nodes=nodes, on_failure=kill_all, connect_timeout=connect_timeout,
                       jobattrs=jobattrs).start()
    t0 = time.time()
    for r in range(n):
        env = rank_env(server, r, extra_env)
        if r == die_rank:
            env["WORKER_DIE"] = die_when
        if launch_dir:  # MPICH ignores PMI_RANK/PMI_SIZE when PMI_PORT+PMI_ID are set
            env.update(PMI_RANK=str(r), PMI_SIZE=str(n), FUSEOPT_LAUNCH_DIR=launch_dir)
        # start_new_session: each rank in a session of its own, as Hydra's
        # proxy does (setsid). With the kernel's sched_autogroup (on here) that
        # is also a scheduling group of its own: on this busy 2-core VM ranks
        # in the driver's session imported numpy+fuseopt ~0.3 s slower.
        argv = [PYTHON, WORKER]
        if pmi_in_argv:  # the rank sets PMI_PORT/PMI_ID itself, before fuseopt.init()
            argv += ["--pmi", env.pop("PMI_PORT"), env.pop("PMI_ID")]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True))
    # The driver watches its processes, as Ray/Spark would watch actors/tasks:
    # one that exits before PMI_Finalize fails the job at the server.
    outputs = {}

    def reap(r, p):
        outputs[r] = p.communicate()[0]
        if launch_dir:  # what fuseoptrun's rank wrapper records (fuseopt/base/launch_records.py)
            with open(os.path.join(launch_dir, "rank-%d.json" % r), "w") as f:
                json.dump({"rank": r, "exit_code": p.returncode if p.returncode >= 0 else None,
                           "signal": -p.returncode if p.returncode < 0 else None,
                           "end_time": time.time(), "host": os.uname().nodename,
                           "pid": p.pid}, f)
        if watch and p.returncode != 0 and server.failure is None:
            server.fail("rank %d's process exited with code %d" % (r, p.returncode))

    threads = [threading.Thread(target=reap, args=(r, p)) for r, p in enumerate(procs)]
    for t in threads:
        t.start()
    deadline = time.time() + timeout
    for t in threads:
        t.join(max(0.1, deadline - time.time()))
    timed_out = any(t.is_alive() for t in threads)
    for p in procs:
        if p.poll() is None:
            p.kill()
    for t in threads:
        t.join()
    wall = time.time() - t0
    server.close()
    with open(os.path.join(HERE, "transcript_%s.txt" % label), "w") as f:
        for t, rank, arrow, line in server.transcript:
            f.write("%8.3f rank %-4s %s %s\n" % (t, rank, arrow, line))
    results = []
    for r in range(n):
        for line in outputs.get(r, "").splitlines():
            if line.startswith("RESULT "):
                results.append(json.loads(line[7:]))
    summary = {"label": label, "n": n, "wall_s": round(wall, 2), "timed_out": timed_out,
               "exit_codes": [p.returncode for p in procs], "failure": server.failure,
               "results": results, "port": server.port, "kvsname": server.kvsname,
               "env": {k: v for k, v in extra_env.items()}}
    if not quiet:
        print("== %s: %d ranks, port %d, %.2f s, exit codes %s%s" % (
            label, n, server.port, wall, summary["exit_codes"],
            " TIMED OUT" if timed_out else ""))
        if server.failure:
            print("   server failure: %s" % server.failure)
        for r in range(n):
            for line in outputs.get(r, "").splitlines():
                print("   [%d] %s" % (r, line[:300]))
    return summary


def check_ok(s):
    n = s["n"]
    ok = (not s["timed_out"] and s["exit_codes"] == [0] * n and len(s["results"]) == n
          and all(r["size"] == n and r["x"] == [n * (n + 1) / 2] * 4 and r["big_ok"]
                  for r in s["results"]))
    print("   -> %s" % ("OK" if ok else "FAILED"))
    return ok


def scenario_basic():
    s = run_job(2, "basic", {"FUSEOPT_LOG_LEVEL": "info"})
    ok = check_ok(s) and all(r["local_size"] == 2 for r in s["results"])
    return ok


def scenario_four():
    return check_ok(run_job(4, "four"))  # MPIR_CVAR_NOLOCAL=1 added: 4 ranks > 2 cores


def scenario_four_shm():
    return check_ok(run_job(4, "four_shm", {"MPIR_CVAR_NOLOCAL": "0",
                                            "FUSEOPT_LOG_LEVEL": "info"}))


def scenario_die():
    s = run_job(3, "die", die_rank=1, timeout=60)
    ok = not s["timed_out"] and s["failure"] is not None and s["wall_s"] < 30
    print("   -> %s (the survivors were released by the server, not by a timeout)"
          % ("OK" if ok else "FAILED"))
    return ok


def scenario_die_shm():
    # 2 ranks, one node, shared memory on: the lost rank is missed at the
    # first PMI barrier of MPI_Init (before any address exchange)
    s = run_job(2, "die_shm", die_rank=1, timeout=60)
    ok = not s["timed_out"] and s["failure"] is not None and s["wall_s"] < 30
    print("   -> %s" % ("OK" if ok else "FAILED"))
    return ok


def scenario_die_shm_timeout():
    # as die_shm, but the driver does not kill: fuseopt's own init timeout
    # (FUSEOPT_INIT_TIMEOUT_S, 120 s by default; 5 s here) ends the wait
    os.environ["DRIVER_KILL_GRACE_S"] = "40"
    try:
        s = run_job(2, "die_shm_timeout", {"FUSEOPT_INIT_TIMEOUT_S": "5"}, die_rank=1, timeout=60)
    finally:
        del os.environ["DRIVER_KILL_GRACE_S"]
    ok = not s["timed_out"] and s["exit_codes"][0] not in (0, -9) and s["wall_s"] < 30
    print("   -> %s" % ("OK" if ok else "FAILED"))
    return ok


def scenario_die_shm_record():
    # as die_shm, but the driver writes fuseopt's exit record for the lost
    # rank: fuseopt's peer watch (0.2 s polls) cancels the survivors' init()
    import tempfile
    os.environ["DRIVER_KILL_GRACE_S"] = "40"
    try:
        with tempfile.TemporaryDirectory(prefix="pmi_launch_") as d:
            s = run_job(2, "die_shm_record", die_rank=1, timeout=60, launch_dir=d)
    finally:
        del os.environ["DRIVER_KILL_GRACE_S"]
    ok = not s["timed_out"] and s["exit_codes"][0] not in (0, -9) and s["wall_s"] < 10
    print("   -> %s" % ("OK" if ok else "FAILED"))
    return ok


def scenario_die_nowatch():
    # nobody tells the server: only its connect_timeout (5 s here) frees the others
    s = run_job(3, "die_nowatch", die_rank=1, timeout=60, watch=False, connect_timeout=5)
    ok = not s["timed_out"] and s["failure"] is not None and s["wall_s"] < 30
    print("   -> %s" % ("OK" if ok else "FAILED"))
    return ok


def scenario_die_late():
    # rank 1 dies after MPI_Init: its PMI socket closes without finalize; the
    # others sit in an MPI collective that PMI cannot reach, so the driver's
    # on_failure kills them (as Hydra would); fuseopt's own watchdog is 30 s.
    s = run_job(2, "die_late", die_rank=1, die_when="after_init", timeout=60)
    ok = not s["timed_out"] and s["failure"] is not None and s["wall_s"] < 30
    print("   -> %s" % ("OK" if ok else "FAILED"))
    return ok


def scenario_die_late_record():
    # as die_late, with fuseopt's exit record: the survivor's collective fails
    # with RankFailedError instead of waiting to be killed
    import tempfile
    os.environ["DRIVER_KILL_GRACE_S"] = "40"
    try:
        with tempfile.TemporaryDirectory(prefix="pmi_launch_") as d:
            s = run_job(2, "die_late_record", die_rank=1, die_when="after_init", timeout=60,
                        launch_dir=d)
    finally:
        del os.environ["DRIVER_KILL_GRACE_S"]
    ok = not s["timed_out"] and s["exit_codes"][0] not in (0, -9) and s["wall_s"] < 10
    print("   -> %s" % ("OK" if ok else "FAILED"))
    return ok


def scenario_abort():
    # rank 1 calls MPI_Abort after init: MPICH sends cmd=abort exitcode=7
    s = run_job(2, "abort", die_rank=1, die_when="abort", timeout=60)
    ok = not s["timed_out"] and s["failure"] is not None and "abort" in s["failure"].lower()
    print("   -> %s" % ("OK" if ok else "FAILED"))
    return ok


def scenario_two_jobs():
    a = run_job(2, "job_a")
    b = run_job(2, "job_b")
    ok = check_ok(a) & check_ok(b) and a["port"] != b["port"]
    return ok


def scenario_concurrent():
    out = {}
    ts = [threading.Thread(target=lambda k: out.__setitem__(k, run_job(2, k, quiet=True)),
                           args=(k,)) for k in ("conc_a", "conc_b")]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ok = True
    for k in sorted(out):
        s = out[k]
        print("== %s: port %d kvs %s %.2f s exit %s results %s" % (
            k, s["port"], s["kvsname"], s["wall_s"], s["exit_codes"],
            [(r["rank"], r["size"], r["x"][0]) for r in s["results"]]))
        ok = check_ok(s) and ok
    return ok


def scenario_two_nodes():
    # PMI_process_mapping puts ranks 0,1 and 2,3 on two "nodes": MPICH uses
    # shared memory inside a pair and UCX between pairs (node-roots address
    # exchange over PMI); fuseopt's shm path needs all ranks on one node
    s = run_job(4, "two_nodes", {"MPIR_CVAR_NOLOCAL": "0", "FUSEOPT_LOG_LEVEL": "info"},
                nodes=[0, 0, 1, 1])
    return check_ok(s)


def scenario_oversubscribed():
    # 4 ranks on 2 cores, 30 x 1 MiB allreduces: MPICH shared memory (with
    # fuseopt's shm path) vs MPIR_CVAR_NOLOCAL=1 (UCX loopback)
    out = {}
    for nolocal in ("0", "1"):
        s = run_job(4, "oversub_nolocal%s" % nolocal, {"MPIR_CVAR_NOLOCAL": nolocal,
                                                      "WORKER_BENCH": "30"}, quiet=True)
        ok = check_ok(s)
        ms = sorted(r["bench_ms_per_allreduce"] for r in s["results"])
        print("== 4 ranks, MPIR_CVAR_NOLOCAL=%s: %s ms per 1 MiB allreduce (per rank), job %.2f s"
              % (nolocal, ms, s["wall_s"]))
        out[nolocal] = ok
    return all(out.values())


def scenario_inproc_env():
    # PMI_PORT/PMI_ID set by the rank itself in os.environ before init (what a
    # Ray actor or Spark task would do with values from the driver); then
    # shutdown() and init() again in the same process: the same MPI world
    s = run_job(2, "inproc_env", {"WORKER_REINIT": "1"}, pmi_in_argv=True)
    ok = check_ok(s) and all(r["reinit"] == [r["rank"], 2, [3.0, 3.0]] for r in s["results"])
    print("   re-init in the same processes: %s" % [r.get("reinit") for r in s["results"]])
    return ok


def scenario_fallback():
    # no PMI_process_mapping: MPICH finds nodes by host name over put/barrier/get
    s = run_job(2, "fallback", {"FUSEOPT_LOG_LEVEL": "info"}, nodes=False)
    return check_ok(s)


def _phases(t0, results, t_end):
    """Seconds from launch: last rank's python start, last rank's init begin,
    last rank's init end (MPI_COMM_WORLD ready everywhere), all exited."""
    last = max(results, key=lambda r: r["t_init_begin"])  # its init() waits for nobody
    return [round(max(r[k] for r in results) - t0, 3)
            for k in ("t_start", "t_init_begin", "t_init_end")] + [
        round(t_end - t0, 3), round(last["t_init_end"] - last["t_init_begin"], 3)]


def scenario_timing(reps=9):
    rows = {"pmi_server": [], "mpiexec": []}
    env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN)}
    def ours(key="pmi_server", jobattrs=None):
        t0 = time.time()
        s = run_job(2, "timing", quiet=True, jobattrs=jobattrs)
        rows[key].append(_phases(t0, s["results"], t0 + s["wall_s"]))

    # hwloc XML topology as Hydra hands out (PMI_hwloc_xmlfile), if one was saved
    topo = os.path.join(HERE, "topo.xml")
    if os.path.exists(topo):
        rows["pmi+hwloc"] = []
        xml = lambda: ours("pmi+hwloc", {"PMI_hwloc_xmlfile": topo})  # noqa: E731

    def hydra():
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            t0 = time.time()
            subprocess.run(["timeout", "90", "/work/main/.venv/bin/mpiexec", "-n", "2",
                            PYTHON, WORKER], env=dict(env, WORKER_RESULT_DIR=d),
                           capture_output=True, text=True)
            t_end = time.time()
            res = []
            for name in sorted(os.listdir(d)):
                with open(os.path.join(d, name)) as f:
                    res.append(json.load(f))
        rows["mpiexec"].append(_phases(t0, res, t_end))

    for i in range(reps):  # alternate, and alternate who goes first
        fs = [ours, hydra] + ([xml] if "pmi+hwloc" in rows else [])
        for f in (fs if i % 2 == 0 else fs[::-1]):
            f()
    for k, v in rows.items():
        print("   %s runs: %s" % (k, v))
    print("== timing, 2 ranks, %d alternating runs; medians in s from launch:" % reps)
    print("   %-10s %12s %14s %18s %10s %16s" % ("launcher", "python up", "init() begins",
                                                "init() done (all)", "all exit",
                                                "last rank's init()"))
    for k, v in rows.items():
        cols = list(zip(*v))
        med = [sorted(c)[len(c) // 2] for c in cols]
        dur = med[4]
        print("   %-10s %12.3f %14.3f %18.3f %10.3f %16.3f" % (k, med[0], med[1], med[2], med[3],
                                                             dur))
    return True


SCENARIOS = {"basic": scenario_basic, "four": scenario_four, "four_shm": scenario_four_shm,
             "die": scenario_die, "die_shm": scenario_die_shm,
             "die_shm_timeout": scenario_die_shm_timeout,
             "die_shm_record": scenario_die_shm_record,
             "die_nowatch": scenario_die_nowatch, "die_late": scenario_die_late,
             "die_late_record": scenario_die_late_record, "abort": scenario_abort,
             "two_jobs": scenario_two_jobs,
             "concurrent": scenario_concurrent, "fallback": scenario_fallback, "two_nodes": scenario_two_nodes,
             "oversubscribed": scenario_oversubscribed,
             "inproc_env": scenario_inproc_env,
             "timing": scenario_timing}

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="driver: %(name)s: %(message)s")
    names = sys.argv[1:] or ["basic"]
    if names == ["all"]:
        names = ["basic", "four", "four_shm", "die", "die_shm", "die_shm_timeout",
                 "die_shm_record", "die_nowatch", "die_late", "die_late_record", "abort",
                 "two_jobs", "concurrent", "fallback", "two_nodes", "inproc_env"]
    results = {name: SCENARIOS[name]() for name in names}
    print("SUMMARY", json.dumps(results))
    sys.exit(0 if all(results.values()) else 1)
