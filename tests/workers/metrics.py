"""fuseopt.metrics(): the counters add up to what was submitted."""
import numpy as np

import fuseopt
import rank_harness as harness

SIZES = [10, 20, 30, 40, 50]  # float32 elements
STEPS = 10


def check_counters_add_up():
    before = fuseopt.metrics()
    for step in range(STEPS):
        grads = [np.full(n, step, np.float32) for n in SIZES]
        fuseopt.grouped_allreduce(grads, names=["m.%d" % i for i in range(len(SIZES))])
    after = fuseopt.metrics()
    d = {k: after[k] - before[k] for k in before if not isinstance(before[k], str)}
    assert d["tensors"] == STEPS * len(SIZES), d
    assert d["bytes"] == STEPS * sum(SIZES) * 4, d
    # Fused: each step's tensors share buckets, so fewer collectives than tensors.
    assert STEPS <= d["collectives"] < STEPS * len(SIZES), d
    assert after["mean_bucket_bytes"] > 0
    # The first step misses the cache for every name; the other steps hit it.
    assert d["cache_misses"] == len(SIZES), d
    assert d["cache_hits"] == (STEPS - 1) * len(SIZES), d
    assert d["full_negotiations"] >= 1 and d["rounds"] >= STEPS, d
    assert d["negotiation_s"] > 0 and d["communication_s"] > 0, d
    assert d["stalls"] == 0, d
    assert 0 < after["cache_hit_rate"] <= 1
    # Every rank ran the same plan: tensors, buckets and bytes agree.
    seen = fuseopt.allgather_object((d["tensors"], d["collectives"], d["bytes"]))
    assert len(set(seen)) == 1, seen


if __name__ == "__main__":
    harness.run([check_counters_add_up])
