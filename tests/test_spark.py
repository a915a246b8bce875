"""fuseopt.spark.run on a real local Spark (local[2]; Java from Debian's
openjdk-17-jre-headless, which tests/install_system_packages.sh installs):
results in rank order with the ranks' output prefixed on the driver, each
rank a fresh process, a training loop that gives the same weights, bit for
bit, as a fuseoptrun job, and a rank's exception or death failing the job
with an error naming the rank and no rank process left behind. One driver
process (tests/workers/spark_driver.py) runs every case."""
import pytest

from conftest import drive, trained_by_fuseoptrun


@pytest.fixture(scope="module")
def cases():
    return drive("spark_driver.py", "api", "training", "failures", "cluster", timeout=300)


def test_results_output_and_fresh_rank_processes(cases):
    found, out = cases
    assert found["no context"] is True, out
    assert found["run"] == [(0, 2, 7.0, "api", []), (1, 2, 7.0, "api", [])], out  # num_proc: 2
    assert found["output"] == ["[0]<stdout>:rank 0 says hello",
                               "[1]<stdout>:rank 1 says hello"], out
    assert found["run again"] == [(0, 2, 3.0, None), (1, 2, 3.0, None)], out
    assert found["fresh processes"] is True, out  # Spark reuses its workers; ranks are new
    assert found["ranks left"] == [], out


def test_ranks_in_separate_executors_of_a_standalone_cluster(cases):
    found, out = cases
    # Emulated: Spark's local-cluster[2,1,1024], a master and two worker JVMs here.
    assert found["cluster"] == [(0, 2, 3.0), (1, 2, 3.0)], out
    assert found["cluster executors"] == 2, out


def test_training_matches_a_fuseoptrun_job_bit_for_bit(cases):
    found, out = cases
    assert [r for r, _, _ in found["training"]] == [0, 1], out
    assert found["training"] == trained_by_fuseoptrun(), out


def test_a_rank_error_fails_the_job_naming_the_rank(cases):
    found, out = cases
    assert found["rank error"] == ("RankError", "rank one gives up",
                                   "raised on rank 1 of 2 in fuseopt.spark.run"), out
    assert found["rank error after"] == ([], 2, True), out


def test_a_killed_rank_fails_the_job_and_its_siblings(cases):
    found, out = cases
    assert found["killed"] == ("RankFailedError", "fuseopt.spark.run: rank 1 of 2"), out
    assert found["killed after"] == ([], 2, True), out  # rank 0, stuck in a collective, is gone


def test_bad_arguments_are_refused_and_spark_runs_on(cases):
    found, out = cases
    # fuseopt's own TypeError, not cloudpickle's, which would pass a type check
    kind, message = found["refused unpicklable"]
    assert kind == "TypeError" and message.startswith(
        "fuseopt.spark.run: the function or its arguments cannot be pickled"), out
    for case in ("gloo", "mpi args", "elastic"):
        kind, message = found["refused " + case]
        assert kind == "UnsupportedError" and message.startswith("fuseopt.spark"), (case, out)
    assert found["after failures"] == [(0, 2, 3.0), (1, 2, 3.0)], out
