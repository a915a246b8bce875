#!/usr/bin/env python
"""Training over a slow network: time to accuracy on an emulated Ethernet cluster.

    python benchmarks/network.py [--link 1gbit,10gbit] [--seeds 3] [--steps 200]
                                 [--options none,fp16,...] [--quick]

Two emulated hosts (tests/emulated_hosts.py, needs root: network namespaces
joined by a veth) with one rank each, their link limited to ``--link`` by a
``tbf`` qdisc, the job started by fuseoptrun as a two-host job is. Before the
training jobs of a link a raw MPI exchange (mpi4py Sendrecv, 32 MiB each way)
measures the link it got: every figure is printed beside it, and a link much
faster than asked for stops the run (the rate was not applied).

The job: a wide MLP (64-2048-2048-10, 4.3 M parameters, 17 MB of float32
gradients) trained on scikit-learn's digits with SGD (momentum 0.9), batch 32
per rank, ``--steps`` steps, validation accuracy every 8 steps (not timed). At
1 Gbit/s its gradients take ~140 ms per step to average, its compute ~15 ms:
network-bound. Each option runs once per seed, in an order shuffled per seed
(benchmarks/harness.py Note [interleaving]): fuseopt uncompressed, fp16 (the
Horovod-style reference), bf16, int8 ``ef_sign``, PowerSGD rank 1/2/4, local
SGD every 4 and 16 steps, adaptive local SGD; and torch DDP (gloo) plain and
with its ``powerSGD_hook`` at rank 2, in the same processes.

Time to accuracy: training time (steps only) until the validation accuracy
first reaches the target, the uncompressed runs' mean final accuracy minus 1
point. Writes benchmarks/results/network.{md,json,png}.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import report  # noqa: E402

WIDTH, PER_RANK, LR, EVAL_EVERY = 2048, 32, 0.05, 8
POWERSGD_START = 20  # plain steps first, DDP's advice (~10% of training)
OPTIONS = ("none", "fp16", "bf16", "ef_sign", "powersgd1", "powersgd2", "powersgd4", "local4",
           "local16", "adaptive", "ddp", "ddp_powersgd2")
REFERENCE = "fp16"  # Horovod's only compression
DDP_PORT = 29611


# ---- worker: one rank of a training job ------------------------------------------------

def digits():
    import numpy as np
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    x, y = (x[order] / 16.0).astype(np.float32), y[order]
    return (x[:1437], y[:1437]), (x[1437:], y[1437:])


def build(option, model, hvd, torch):
    """(stepper with step() and zero_grad(), the module to call)."""
    sgd = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    if option.startswith("ddp"):
        from torch.nn.parallel import DistributedDataParallel
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        if option != "ddp_powersgd2":
            return sgd, DistributedDataParallel(model)
        # One bucket: with several, the hook's second allreduce (issued from gloo's
        # callback thread) and the next bucket's (from backward) reach gloo in different
        # orders on the two ranks, and gloo aborts ("Received data size doesn't match").
        ddp = DistributedDataParallel(model, bucket_cap_mb=64)
        if option == "ddp_powersgd2":
            state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                                start_powerSGD_iter=POWERSGD_START)
            ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return sgd, ddp
    if option.startswith("local") or option == "adaptive":
        hvd.broadcast_parameters(model.state_dict(), 0)
        if option == "adaptive":
            return hvd.AdaptiveLocalSGD(sgd, model, threshold=1e-3, max_period=16), model
        return hvd.LocalSGD(sgd, model, period=int(option[len("local"):])), model
    compression = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16,
                   "bf16": hvd.Compression.bf16}.get(option)
    if option == "ef_sign":
        compression = hvd.Compression.ef_sign()
    elif option.startswith("powersgd"):
        compression = hvd.Compression.powersgd(rank=int(option[len("powersgd"):]),
                                               start_iter=POWERSGD_START)
    return hvd.DistributedOptimizer(sgd, model.named_parameters(), compression=compression), model


def train(option, seed, steps, data, hvd, torch):
    import numpy as np
    (x, y), (vx, vy) = data
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, WIDTH), torch.nn.ReLU(),
                                torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                                torch.nn.Linear(WIDTH, 10))
    stepper, forward = build(option, model, hvd, torch)
    rng = np.random.default_rng(1000 + seed)  # the same batches on every rank: each takes its part
    vx, vy = torch.from_numpy(vx), torch.from_numpy(vy)
    curve, step_s, trained = [], [], 0.0
    for step in range(1, steps + 1):
        rows = rng.choice(len(y), PER_RANK * hvd.size(), replace=False)
        mine = rows[hvd.rank() * PER_RANK:(hvd.rank() + 1) * PER_RANK]
        xb, yb = torch.from_numpy(x[mine]), torch.from_numpy(y[mine])
        started = time.perf_counter()
        torch.nn.functional.cross_entropy(forward(xb), yb).backward()
        stepper.step()
        stepper.zero_grad()
        took = time.perf_counter() - started
        step_s.append(took)
        trained += took
        if step % EVAL_EVERY == 0 or step == steps:
            with torch.no_grad():
                accuracy = float((model(vx).argmax(1) == vy).float().mean())
            curve.append((round(trained, 4), step, round(accuracy, 4)))
    if hasattr(stepper, "remove_hooks"):
        stepper.remove_hooks()
    return {"option": option, "seed": seed, "curve": curve,
            "step_ms": 1000 * statistics.median(step_s), "train_s": trained,
            "final": curve[-1][2]}


def worker(args):
    import torch
    import fuseopt.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    if any(o.startswith("ddp") for o in args.options):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")  # the emulated hosts' link
        torch.distributed.init_process_group(
            "gloo", init_method="tcp://%s:%d" % (args.master, DDP_PORT), rank=hvd.rank(),
            world_size=hvd.size())
    data = digits()
    for seed in range(args.seeds):
        order = list(args.options)
        random.Random(seed).shuffle(order)  # the same order on both ranks
        for option in order:
            result = train(option, seed, args.steps, data, hvd, torch)
            if hvd.rank() == 0:
                print("RESULT " + json.dumps(result), flush=True)
    hvd.shutdown()


SWEEP = [("no fusion", {"fusion_threshold": 0}), ("1 MiB", {"fusion_threshold": 1 << 20}),
         ("4 MiB", {"fusion_threshold": 4 << 20}), ("16 MiB", {"fusion_threshold": 16 << 20}),
         ("64 MiB (default)", {}), ("autotune", {"autotune": 1, "autotune_window_rounds": 10})]
# With two ranks per host: one copy of each gradient per host crosses the link, or two.
HIERARCHY = [("flat (default)", {}), ("hierarchical", {"hierarchical_allreduce": 1})]


def sweep(args):
    """Step time of the uncompressed job per fusion threshold, and the autotuner's pick:
    one init per setting; the autotuned one steps until the tuner holds its choice."""
    import numpy as np
    import torch
    import fuseopt.torch as hvd
    torch.set_num_threads(1)
    (x, y), _ = digits()
    rng = np.random.default_rng(5)
    for label, settings in (HIERARCHY if args.per_host > 1 else SWEEP):
        hvd.init(**settings)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, WIDTH), torch.nn.ReLU(),
                                    torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                                    torch.nn.Linear(WIDTH, 10))
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9),
                                       model.named_parameters(), bucket_cap_mb=args.bucket_mb)
        times, tuning_steps = [], 0
        while len(times) < args.sweep_steps + 5:
            rows = rng.choice(len(y), PER_RANK, replace=False)
            started = time.perf_counter()
            torch.nn.functional.cross_entropy(model(torch.from_numpy(x[rows])),
                                              torch.from_numpy(y[rows])).backward()
            opt.step()
            opt.zero_grad()
            took = time.perf_counter() - started
            tuning = hvd.metrics()["autotune"] == "tuning"
            agreed = hvd.allreduce(torch.tensor([float(tuning)]), name="sweep.tuning", op=hvd.Max)
            if agreed.item():  # until every rank holds the tuned setting
                tuning_steps += 1
                continue
            times.append(took)
        chosen = hvd.metrics()
        opt.remove_hooks()
        if hvd.rank() == 0:
            print("SWEEP " + json.dumps({
                "setting": label, "step_ms": 1000 * statistics.median(times[5:]),
                "threshold": chosen["fusion_threshold_bytes"],
                "cycle_ms": chosen["cycle_time_ms"], "tuning_steps": tuning_steps}), flush=True)
        hvd.shutdown()


def probe(_args):
    """Note: mpi4py and fuseopt never share a process (benchmarks/allreduce.py)."""
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    out, back = np.ones(32 << 18, np.float32), np.empty(32 << 18, np.float32)  # 32 MiB
    peer = 1 - comm.rank
    rates = []
    for _ in range(4):
        comm.Barrier()
        started = time.perf_counter()
        comm.Sendrecv(out, peer, recvbuf=back, source=peer)
        rates.append(out.nbytes * 8 / (time.perf_counter() - started) / 1e9)
    if comm.rank == 0:
        print("LINK %.4f" % statistics.median(rates[1:]), flush=True)


# ---- driver ---------------------------------------------------------------------------------

def on_hosts(hosts, argv, timeout, per_host=1):
    """fuseoptrun on host 0 starting per_host ranks on each host, as a user's two-host
    job; with more ranks than the 2 cores the hosts share, MPICH's local polling off (as
    tests/test_multihost.py: fuseoptrun cannot see that the hosts share cores)."""
    crowded = ["--nolocal", "on"] if per_host > 1 else []
    cmd = hosts.prefix(0) + [
        sys.executable, "-m", "fuseopt.launcher.cli", "-H", hosts.host_list(per_host),
        "--remote-exec", hosts.shim, "--network-interface", "eth0", "-np", str(2 * per_host),
        *crowded, sys.executable, os.path.abspath(__file__)] + argv
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=timeout)
    if run.returncode != 0:
        raise SystemExit("job failed (%d):\n%s" % (run.returncode, run.stdout[-6000:]))
    return run.stdout


def bits_per_second(rate):
    """tc's rate spelling ("1gbit", "100mbit") in bit/s."""
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * scale
    raise SystemExit("--link takes rates such as 1gbit or 100mbit, not %r" % rate)


def measure_link(hosts, rate):
    """The link the hosts got (Gbit/s each way, MPI's own exchange); stops if it is
    far faster than ``rate``: the shaping did not apply."""
    out = on_hosts(hosts, ["--probe"], timeout=120)
    got = float(next(l for l in out.splitlines() if l.startswith("LINK ")).split()[1])
    if rate and got > 1.5 * bits_per_second(rate) / 1e9:
        raise SystemExit("asked for %s, measured %.2f Gbit/s: the rate was not applied"
                         % (rate, got))
    return got


def shaped_hosts(rate):
    import emulated_hosts
    ok, why = emulated_hosts.available()
    if not ok:
        raise SystemExit("cannot emulate hosts here (network namespaces and tc, as root): %s"
                         % why)
    hosts = emulated_hosts.EmulatedHosts(2)
    hosts.__enter__()
    # tbf needs a bucket of about rate x 4 ms, or it cannot reach the rate at 10 Gbit/s
    burst = max(512 << 10, int(bits_per_second(rate) / 8 * 0.004))
    hosts.shape(rate, burst="%db" % burst)
    return hosts


def summarize(runs, options):
    """Per option: step time, final accuracy, time to the target (mean, sd over seeds)."""
    finals = [r["final"] for r in runs if r["option"] == "none"]
    target = statistics.mean(finals) - 0.01 if finals else None
    rows = {}
    for option in options:
        mine = [r for r in runs if r["option"] == option]
        if not mine:
            continue
        reached = [next((t for t, _, a in r["curve"] if target is not None and a >= target),
                        None) for r in mine]
        done = [t for t in reached if t is not None]
        rows[option] = {  # the mean step: periodic sync makes the steps bimodal
            "step_ms": statistics.mean(1000 * r["train_s"] / r["curve"][-1][1] for r in mine),
            "final": statistics.mean(r["final"] for r in mine),
            "final_sd": statistics.stdev(r["final"] for r in mine) if len(mine) > 1 else 0.0,
            "to_target_s": statistics.mean(done) if len(done) == len(mine) else None,
            "to_target_sd": statistics.stdev(done) if len(done) == len(mine) > 1 else 0.0,
            "reached": "%d/%d" % (len(done), len(mine))}
    return target, rows


def table(link, got, target, rows):
    base = rows.get("none", {}).get("to_target_s")
    head = ["option", "mean step ms", "final accuracy", "to %s (s)" % report.fmt(target, "%.3f"),
            "reached",
            "vs uncompressed"]
    body = [[o, "%.1f" % s["step_ms"], "%.3f ± %.3f" % (s["final"], s["final_sd"]),
             report.fmt(s["to_target_s"]), s["reached"],
             report.fmt(None if s["to_target_s"] is None or not base
                        else s["to_target_s"] / base, "%.2fx")] for o, s in rows.items()]
    return ["### %s (measured %.2f Gbit/s each way)" % (link, got), ""] + \
        report.table(head, "lrrrrr", body)


def plot(path, links):
    """Per link: time to the target accuracy and final accuracy, mean and sd over seeds."""
    plt = report.pyplot()
    fig, axes = plt.subplots(2, len(links), figsize=(6 * len(links), 7), squeeze=False)
    for column, (link, info) in enumerate(links.items()):
        names = list(info["rows"])
        rows = [info["rows"][n] for n in names]
        colors = ["#d62728" if n.startswith("ddp") else "#bbbbbb" if n == REFERENCE
                  else "#1f77b4" for n in names]
        xs = range(len(names))
        top, bottom = axes[0][column], axes[1][column]
        top.bar(xs, [r["to_target_s"] or 0 for r in rows], color=colors,
                yerr=[r.get("to_target_sd", 0) for r in rows], capsize=3)
        top.set_ylabel("training time to %.3f accuracy (s)" % info["target"])
        top.set_title("%s (measured %.2f Gbit/s)" % (link, info["link_gbps"]))
        bottom.errorbar(xs, [r["final"] for r in rows], yerr=[r["final_sd"] for r in rows],
                        fmt="o", color="#333333", capsize=3)
        bottom.set_ylabel("final validation accuracy")
        for ax in (top, bottom):
            ax.set_xticks(list(xs), names, rotation=45, ha="right")
    report.save(plt, fig, path, 110)


def sweep_lines(per_host, record):
    """The tables (and the autotuner's verdict) of a --sweep record."""
    lines = []
    for link, info in record.items():
        rows = info["rows"]
        best = min((r for r in rows if r["setting"] != "autotune"), key=lambda r: r["step_ms"])
        lines += ["### %s, %d rank(s) per host (measured %.2f Gbit/s each way)"
                  % (link, per_host, info["link_gbps"]), ""] + report.table(
            ["setting", "step ms", "vs best swept", "threshold held", "cycle ms", "steps tuning"],
            "lrrrrr", [[r["setting"], "%.1f" % r["step_ms"], "%.2fx" % (r["step_ms"] /
                                                                      best["step_ms"]),
                        "%.1f MiB" % (r["threshold"] / 2.0 ** 20), "%.2f" % r["cycle_ms"],
                        str(r["tuning_steps"])] for r in rows]) + [""]
        tuned = [r for r in rows if r["setting"] == "autotune"]
        if tuned:
            lines += [report.Verdicts().line(
                tuned[0]["step_ms"] <= 1.1 * best["step_ms"],
                "%.2fx the best swept threshold's step with the autotuner's pick, within 10%%"
                % (tuned[0]["step_ms"] / best["step_ms"])), ""]
    return lines


def sweep_driver(args):
    """--sweep: per link, the uncompressed step time per fusion threshold and what the
    autotuner holds (or, --per-host 2, flat against hierarchical allreduce); writes
    results/network_fusion.{md,json} (network_hierarchy)."""
    started, record = time.time(), {}
    command = " ".join([os.path.basename(sys.executable)] + sys.argv)
    for link in args.link.split(","):
        hosts = shaped_hosts(link)
        try:
            got = measure_link(hosts, link)
            out = on_hosts(hosts, ["--worker", "--sweep", "--sweep-steps", str(args.sweep_steps),
                                   "--bucket-mb", str(args.bucket_mb), "--per-host",
                                   str(args.per_host)], timeout=3600, per_host=args.per_host)
        finally:
            hosts.close()
        record[link] = {"link_gbps": got, "rows": [json.loads(l[len("SWEEP "):]) for l in
                                                   out.splitlines() if l.startswith("SWEEP ")]}
        print("\n".join(sweep_lines(args.per_host, {link: record[link]})), flush=True)
    write_sweep(args, {"command": command, "duration_s": time.time() - started,
                       "steps": args.sweep_steps, "bucket_mb": args.bucket_mb,
                       "per_host": args.per_host, "links": record})


def write_sweep(args, data):
    name = "network_fusion" if data["per_host"] == 1 else "network_hierarchy"
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump(data, f)
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write("# Fusion threshold, hierarchy and the autotuner on a slow link\n\n`%s` (%.0f s; "
                "bucket_cap_mb %g, median of %d steps per setting)\n\n%s\n" % (
                    data["command"], data["duration_s"], data["bucket_mb"], data["steps"],
                    "\n".join(sweep_lines(data["per_host"], data["links"]))))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--link", default="1gbit,10gbit")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--options", default=",".join(OPTIONS))
    p.add_argument("--quick", action="store_true", help="1 seed, 40 steps, 1gbit")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--worker", action="store_true")
    p.add_argument("--probe", action="store_true")
    p.add_argument("--master", default="")
    p.add_argument("--render", metavar="JSON", help="only redo the tables and plot of a run")
    p.add_argument("--sweep", action="store_true",
                   help="fusion thresholds and the autotuner (uncompressed step time) instead")
    p.add_argument("--sweep-steps", type=int, default=40)
    p.add_argument("--per-host", type=int, default=1,
                   help="ranks per host in --sweep; 2: flat against hierarchical allreduce")
    p.add_argument("--bucket-mb", type=float, default=0.0,
                   help="DistributedOptimizer's bucket_cap_mb in --sweep (0: each gradient "
                        "handed over as it is ready, so the core's fusion decides)")
    args = p.parse_args()
    args.options = args.options.split(",")
    unknown = sorted(set(args.options) - set(OPTIONS))
    if unknown:
        raise SystemExit("unknown options %s (known: %s)" % (unknown, ", ".join(OPTIONS)))
    if args.probe:
        return probe(args)
    if args.worker:
        return sweep(args) if args.sweep else worker(args)
    if args.quick:
        args.seeds, args.steps, args.link, args.sweep_steps = 1, 40, "1gbit", 10
    if args.sweep:
        return sweep_driver(args)
    if args.render:
        with open(args.render) as f:
            record = json.load(f)
        if "per_host" in record:  # a --sweep's
            return write_sweep(args, record)
        for info in record["links"].values():
            info["target"], info["rows"] = summarize(info["runs"], args.options)
        return write(args, record)
    return run_links(args)


def run_links(args):
    """Per link: shape, measure, one training job of every option and seed."""
    started, links = time.time(), {}
    for link in args.link.split(","):
        hosts = shaped_hosts(link)
        try:
            got = measure_link(hosts, link)
            print("%s: measured %.2f Gbit/s each way" % (link, got), flush=True)
            out = on_hosts(hosts, ["--worker", "--seeds", str(args.seeds), "--steps",
                                   str(args.steps), "--options", ",".join(args.options),
                                   "--master", hosts.hosts[0].address], timeout=7200)
        finally:
            hosts.close()
        runs = [json.loads(l[len("RESULT "):]) for l in out.splitlines()
                if l.startswith("RESULT ")]
        target, rows = summarize(runs, args.options)
        links[link] = {"link_gbps": got, "target": target, "rows": rows, "runs": runs}
        print("\n".join(table(link, got, target, rows)) + "\n", flush=True)
    record = {"meta": {"command": " ".join([os.path.basename(sys.executable)] + sys.argv),
                       "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
                       "duration_s": round(time.time() - started, 1), "seeds": args.seeds,
                       "steps": args.steps, "cpus": os.cpu_count()}, "links": links}
    return write(args, record)


def compressing_step_ms(info, option):
    """The median over seeds of each run's median step: past a warm-up of 10% of the
    steps, a step as it is once compressing."""
    return statistics.median(r["step_ms"] for r in info["runs"] if r["option"] == option)


def verdicts(links):
    """The issue's targets, on what this run measured (None where it did not run)."""
    out, v = [], report.Verdicts()
    slow, fast = links.get("1gbit"), links.get("10gbit")
    if slow and "none" in slow["rows"]:
        rows, none = slow["rows"], slow["rows"]["none"]
        ours = [(r["to_target_s"] / none["to_target_s"], o) for o, r in rows.items()
                if not o.startswith("ddp") and o != "none" and r["to_target_s"] is not None
                and r["final"] >= none["final"] - 0.01]
        if ours:
            ratio, best = min(ours)
            out.append(v.line(ratio <= 0.3, "%.2fx the uncompressed time to %.3f accuracy at "
                              "1gbit, the best fuseopt option (%s, final accuracy %.3f against "
                              "%.3f), at most 0.3x" % (ratio, slow["target"], best,
                                                       rows[best]["final"], none["final"])))
        if "powersgd2" in rows and "ddp_powersgd2" in rows:
            mine, ddp = (compressing_step_ms(slow, o) for o in ("powersgd2", "ddp_powersgd2"))
            gap = abs(rows["powersgd2"]["final"] - rows["ddp_powersgd2"]["final"])
            out.append(v.line(mine <= ddp and gap <= 0.005,
                              "%.1f ms per step compressing with PowerSGD rank 2 at 1gbit, at "
                              "most DDP powerSGD_hook's %.1f ms, accuracy %.3f within 0.5 point "
                              "of its %.3f" % (mine, ddp, rows["powersgd2"]["final"],
                                               rows["ddp_powersgd2"]["final"])))
    if fast and "none" in fast["rows"]:
        base = fast["rows"]["none"]["to_target_s"]
        worst = sorted(((r["to_target_s"] or float("inf")) / base, o)
                       for o, r in fast["rows"].items() if not o.startswith("ddp"))[::-1]
        slower = ["%s %.2fx" % (o, x) for x, o in worst if x > 1.05]
        out.append(v.line(not slower, "%s the uncompressed time to accuracy at 10gbit; no "
                          "option more than 5%% slower" % (", ".join(slower) or
                                                            "at most %.2fx" % worst[0][0])))
    return out


def write(args, record):
    """results/network.{json,png,md} from a run's record."""
    links = record["links"]
    text = "\n".join(line for link, info in links.items()
                     for line in table(link, info["link_gbps"], info["target"], info["rows"])
                     + [""])
    text += "\n" + "\n".join(verdicts(links)) + "\n"
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "network.json"), "w") as f:
        json.dump(record, f, separators=(",", ":"))
    plot(os.path.join(args.out, "network.png"), links)
    with open(os.path.join(args.out, "network.md"), "w") as f:
        f.write("# Training over a slow network: time to accuracy\n\n`%s` (%s, %d seeds, "
                "%d steps, %.0f s)\n\n%s\n" % (record["meta"]["command"],
                                               record["meta"]["started"],
                                               record["meta"]["seeds"], record["meta"]["steps"],
                                               record["meta"]["duration_s"], text))


if __name__ == "__main__":
    sys.exit(main())
