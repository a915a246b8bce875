"""fuseopt.ray.RayExecutor on a real local Ray cluster (ray.init with 2 CPUs):
Horovod's methods and arguments, a training loop that gives the same
weights, bit for bit, as a fuseoptrun job, a rank's exception and a killed
worker each ending the run with an error naming the rank and no process
left behind. One driver process (tests/workers/ray_driver.py) runs every
case; the tests check its lines."""
import pytest

from conftest import drive, trained_by_fuseoptrun



@pytest.fixture(scope="module")
def cases():
    found, out = drive("ray_driver.py", "api", "placement", "training", "failures", "nodes",
                       timeout=300)
    return found, out


def test_run_execute_and_callbacks_follow_horovods_api(cases):
    found, out = cases
    assert found["run"] == [(0, 2, 7.0, "api"), (1, 2, 7.0, "api")], out   # args, kwargs, env
    assert found["logged"] == [{"rank": 0, "total": 6.0}], out              # rank 0's only
    assert found["run again"] == [(0, 2, 3.0, "api"), (1, 2, 3.0, "api")], out  # same world
    assert found["execute"] == [[15, 15], [20, 20]], out                    # executable_cls state
    assert found["execute_single"] == 20, out
    assert found["run_remote"] == [(0, 2, 9.0, "api"), (1, 2, 9.0, "api")], out
    assert found["api leftovers"] == [], out                                # shutdown ends them


def test_placement_gpus_and_refused_shapes(cases):
    found, out = cases
    # One STRICT_SPREAD bundle holding both workers: one node, each seeing both GPUs.
    assert found["gpus"] == ["0,1", "0,1"], out
    assert found["local"] == [(2, 0), (2, 1)], out
    assert found["both shapes"] == "ValueError", out
    assert found["elastic"] is True, out
    assert found["too big"] is True, out   # 4 CPUs asked of 2: the placement timeout says so


def test_two_ray_nodes_one_worker_each(cases):
    found, out = cases
    # Emulated: two raylets on this machine (ray.cluster_utils.Cluster).
    assert found["nodes"] == ([(0, 3.0), (1, 3.0)], 2, 2), out


def test_training_matches_a_fuseoptrun_job_bit_for_bit(cases):
    found, out = cases
    assert [r for r, _, _ in found["training"]] == [0, 1], out
    assert found["training"] == trained_by_fuseoptrun(), out


def test_a_rank_error_ends_the_run_naming_the_rank(cases):
    found, out = cases
    assert found["rank error"] == ("WorkerError", "rank one gives up", "raised on rank 1 of 2"), out
    assert found["rank error after"] == (True, [], True), out  # refused until start(); none left
    assert found["not callable"] == (True, "raised on rank 0 of 2"), out


def test_a_killed_worker_ends_the_run_naming_it(cases):
    found, out = cases
    assert found["killed"] == ("RankFailedError", "RayExecutor.run: rank 1 of 2"), out
    assert found["killed after"] == (True, [], True), out
