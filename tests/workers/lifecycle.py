"""init/shutdown life cycle and configuration errors. Does not use harness.run,
because it exercises init and shutdown itself."""
import os
import sys
import traceback

import numpy as np

import fuseopt
from rank_harness import expect_error


def main():
    x = np.ones(3, np.float32)
    # Before init: clear errors, no hang, no crash.
    assert not fuseopt.is_initialized()
    expect_error(fuseopt.NotInitializedError, fuseopt.rank, "fuseopt.init()")
    expect_error(fuseopt.NotInitializedError, lambda: fuseopt.allreduce(x, name="x"), "init")
    # Invalid configuration is refused before anything starts.
    expect_error(fuseopt.InvalidArgumentError, lambda: fuseopt.init(fusion_threshold=-1),
                 "fusion_threshold", "FUSEOPT_FUSION_THRESHOLD")
    expect_error(fuseopt.InvalidArgumentError, lambda: fuseopt.init(bogus_knob=1), "bogus_knob")
    os.environ["FUSEOPT_CACHE_CAPACITY"] = "lots"
    expect_error(fuseopt.InvalidArgumentError, fuseopt.init, "FUSEOPT_CACHE_CAPACITY", "lots")
    del os.environ["FUSEOPT_CACHE_CAPACITY"]
    assert not fuseopt.is_initialized()

    fuseopt.init(cache_capacity=16, cycle_time_ms=0.5)
    fuseopt.init()  # a second init is a no-op
    assert fuseopt.is_initialized()
    r, n = fuseopt.rank(), fuseopt.size()
    assert fuseopt.settings()["cache_capacity"] == 16, fuseopt.settings()
    assert fuseopt.settings()["cycle_time_ms"] == 0.5, fuseopt.settings()
    expected_size = int(os.environ.get("EXPECT_SIZE", "1"))
    assert n == expected_size, (n, expected_size)
    assert 0 <= fuseopt.local_rank() < fuseopt.local_size() and fuseopt.cross_size() >= 1
    out = fuseopt.allreduce(np.full(3, r, np.float32), name="x", op=fuseopt.Sum)
    assert np.allclose(out, n * (n - 1) / 2), out
    bad_input_fails_the_same_on_every_rank(x, r, n)

    # An operation still waiting for other ranks when shutdown comes fails
    # with ShutDownError instead of hanging.
    orphan = fuseopt.allreduce_async(x, name="never.matched") if r == 0 else None
    fuseopt.shutdown()
    if orphan is not None:
        expect_error(fuseopt.ShutDownError, orphan.wait, "shut down")
    fuseopt.shutdown()  # twice is fine
    expect_error(fuseopt.NotInitializedError, lambda: fuseopt.allreduce(x, name="x"),
                 "shut down")

    # A process can start again.
    fuseopt.init()
    out = fuseopt.allreduce(np.full(2, 1.0, np.float64), name="again", op=fuseopt.Sum)
    assert np.allclose(out, n), out
    assert fuseopt.pending_handles() == 0
    fuseopt.shutdown()
    print("[rank %d] lifecycle ok" % r, flush=True)


def bad_input_fails_the_same_on_every_rank(x, r, n):
    """Each rank passes the same bad argument: each raises InvalidArgumentError
    naming it, nothing reaches the other ranks, and the job goes on."""
    bad = fuseopt.InvalidArgumentError
    expect_error(bad, lambda: fuseopt.allreduce(x, name="a\0b"), "NUL")
    expect_error(bad, lambda: fuseopt.allreduce(x, name=5), "tensor name must be a str")
    expect_error(bad, lambda: fuseopt.allreduce(x, name="a\udc80"), "not valid Unicode")
    expect_error(bad, lambda: fuseopt.broadcast(x, 2 ** 40, name="b"), "root_rank", "out of range")
    expect_error(bad, lambda: fuseopt.broadcast_object(1, 2 ** 40), "root_rank", "out of range")
    expect_error(bad, lambda: fuseopt.allreduce(x, name="p", prescale_factor="2"),
                 "prescale_factor")
    expect_error(bad, lambda: fuseopt.init(bogus=1), "bogus")  # while running, too
    expect_error(bad, lambda: fuseopt.init(fusion_threshold=float("inf")), "fusion_threshold")
    # Nothing was enqueued: unnamed requests still pair up across ranks.
    out = fuseopt.allreduce(np.full(2, r + 1.0), op=fuseopt.Sum)
    assert np.allclose(out, n * (n + 1) / 2), out


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
