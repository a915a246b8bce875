"""``fuseoptrun --metrics-summary``: every rank leaves its counters in the
job's directory at shutdown (metrics-N.json), and fuseoptrun prints one table
when the job ends. Ranks on other hosts write into their own host's copy of
the directory, so only ranks on the launching host are listed."""
from ..base.metrics_math import efficiency


def format_table(records):
    """The summary table for {rank: record}, as text."""
    header = ("rank", "MB", "collectives", "tensors", "mean bucket KB", "comm s",
              "negot s", "waited s", "overlap", "cache hits", "stalls")
    rows = []
    for rank in sorted(records):
        r = records[rank]
        comm = r["communication_s"]
        waited = r["exposed_wait_s"]
        eff = efficiency(comm, r["comm_in_waits_s"])[1]
        overlap = "n/a" if eff is None or not waited else "%.0f%%" % (100 * eff)
        rows.append((str(rank), "%.1f" % (r["bytes"] / 1e6), str(r["collectives"]),
                     str(r["tensors"]), "%.0f" % (r["mean_bucket_bytes"] / 1e3), "%.3f" % comm,
                     "%.3f" % r["negotiation_s"], "%.3f" % waited, overlap,
                     "%.0f%%" % (100 * r["cache_hit_rate"]), str(r["stalls"])))
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))
    out = ["fuseoptrun: fuseopt metrics per rank (waited: the training thread's wait for "
           "gradient reductions; overlap: share of communication hidden under compute)",
           line(header)]
    out += [line(row) for row in rows]
    return "\n".join(out)
