"""fuseopt.ray on a real local Ray cluster (ray.init with 2 CPUs; raylets of
one CPU each for the elastic cases): Horovod's methods and arguments, a
training loop that gives the same weights, bit for bit, as a fuseoptrun job,
a rank's exception and a killed worker each ending the run with an error
naming the rank and no process left behind, and an elastic job that grows,
recovers from a killed worker and stops on its own error. One driver process
(tests/workers/ray_driver.py) runs every case; the tests check its lines."""
import pytest

from conftest import drive, trained_by_fuseoptrun



@pytest.fixture(scope="module")
def cases():
    found, out = drive("ray_driver.py", "api", "placement", "training", "failures", "elastic",
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
    assert found["elastic shapes"] == ("ValueError", "UnsupportedError"), out
    assert found["too big"] is True, out   # 4 CPUs asked of 2: the placement timeout says so


def test_two_ray_nodes_one_worker_each(cases):
    found, out = cases
    # Emulated: two raylets on this machine (ray.cluster_utils.Cluster).
    assert found["nodes"] == ([(0, 3.0), (1, 3.0)], 2, 2), out


def test_elastic_executor_grows_recovers_and_stops_on_errors(cases):
    found, out = cases
    # One worker on the first node; a second node joins after the first
    # commit: the job commits, ends, and resumes on two workers. Each epoch
    # adds an allreduce of ones (1 per epoch alone, 2 with two workers).
    grown, sizes = found["elastic grown"]
    started = grown[0][3]
    assert 1 <= started < 5 and sizes == [1, 2], out
    assert grown == [(r, 2, 5, started, 1, started + 2.0 * (5 - started)) for r in (0, 1)], out
    assert "reset 1: the slots changed" in out, out
    # Rank 1 killed at epoch 2: a new world of two resumes from the last commit.
    killed = found["elastic killed"]
    assert killed[0][3] in (2, 3), out
    assert killed == [(r, 2, 5, killed[0][3], 1, 10.0) for r in (0, 1)], out
    assert "reset 1: lost worker(s) of rank 1" in out, out
    assert found["elastic error"] == ("epoch 1 is bad", "raised on rank 0 of 2"), out
    # RayExecutor(min_workers=1, max_workers=2): the same executor, both nodes used.
    assert found["elastic executor form"] == [(r, 2, 5, 0, 0, 10.0) for r in (0, 1)], out


def test_training_matches_a_fuseoptrun_job_bit_for_bit(cases):
    found, out = cases
    assert [r for r, _, _ in found["training"]] == [0, 1], out
    assert found["training"] == trained_by_fuseoptrun(), out


def test_a_rank_error_ends_the_run_naming_the_rank(cases):
    found, out = cases
    assert found["rank error"] == ("WorkerError", "rank one gives up", "raised on rank 1 of 2"), out
    assert found["rank error after"] == (True, [], True), out  # refused until start(); none left
    # Every rank raises: the first to report is named.
    assert found["not callable"] in ((True, "raised on rank 0 of 2"),
                                     (True, "raised on rank 1 of 2")), out


def test_a_killed_worker_ends_the_run_naming_it(cases):
    found, out = cases
    assert found["killed"] == ("RankFailedError", "RayExecutor.run: rank 1 of 2"), out
    assert found["killed after"] == (True, [], True), out
