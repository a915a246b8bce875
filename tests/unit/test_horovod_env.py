"""HOROVOD_* variables: mapped to their FUSEOPT_* twins, or refused (fuseopt/core/horovod_env.py)."""
import re

import pytest

from fuseopt.core import horovod_env
from fuseopt.base.errors import InvalidArgumentError


def test_mapped_variables_set_their_twins_with_a_notice():
    settings, notices = horovod_env.translate({
        "HOROVOD_FUSION_THRESHOLD": "33554432", "HOROVOD_CYCLE_TIME": "3.5",
        "HOROVOD_AUTOTUNE": "true", "HOROVOD_LOG_LEVEL": "FATAL",
        "HOROVOD_STALL_CHECK_TIME_SECONDS": "30", "HOROVOD_START_TIMEOUT": "45",
        "HOROVOD_TIMELINE": "/tmp/t.json"})
    assert settings == {
        "FUSEOPT_FUSION_THRESHOLD": "33554432", "FUSEOPT_CYCLE_TIME_MS": "3.5",
        "FUSEOPT_AUTOTUNE": "1", "FUSEOPT_LOG_LEVEL": "error", "FUSEOPT_STALL_CHECK_S": "30",
        "FUSEOPT_INIT_TIMEOUT_S": "45", "FUSEOPT_TIMELINE": "/tmp/t.json"}
    assert len(notices) == len(settings)
    assert "HOROVOD_CYCLE_TIME=3.5 taken as FUSEOPT_CYCLE_TIME_MS=3.5" in notices


def test_fuseopt_twin_wins_and_says_so():
    settings, notices = horovod_env.translate({"HOROVOD_CACHE_CAPACITY": "16",
                                               "FUSEOPT_CACHE_CAPACITY": "64"})
    assert settings == {}
    assert notices == ["HOROVOD_CACHE_CAPACITY=16 not used: FUSEOPT_CACHE_CAPACITY=64 is set "
                       "too and wins"]
    # The same value twice (fuseoptrun already copied it): nothing to say.
    assert horovod_env.translate({"HOROVOD_CACHE_CAPACITY": "16",
                                  "FUSEOPT_CACHE_CAPACITY": "16"}) == ({}, [])


def test_stall_check_disable_overrides_its_time():
    settings, _ = horovod_env.translate({"HOROVOD_STALL_CHECK_DISABLE": "1",
                                         "HOROVOD_STALL_CHECK_TIME_SECONDS": "30"})
    assert settings == {"FUSEOPT_STALL_CHECK_S": "0"}
    assert horovod_env.translate({"HOROVOD_STALL_CHECK_DISABLE": "0"}) == ({}, [])


@pytest.mark.parametrize("env, message", [
    ({"HOROVOD_TORUS_ALLREDUCE": "1"}, "no torus allreduce"),
    ({"HOROVOD_ELASTIC": "true"}, "started by fuseoptrun's --min-np"),
    ({"HOROVOD_THREAD_AFFINITY": "0,1"}, "does not pin"),
    ({"HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "3"}, "FUSEOPT_AUTOTUNE_WINDOW_ROUNDS"),
    ({"HOROVOD_CPU_OPERATIONS": "gloo"}, "reduces host memory with MPI"),
    ({"HOROVOD_NUM_NCCL_STREAMS": "2"}, "one NCCL stream"),
    ({"HOROVOD_LOG_LEVEL": "loud"}, "not a value Horovod accepts"),
    ({"HOROVOD_START_TIMEOUT": "-1"}, "not a value Horovod accepts"),
])
def test_features_fuseopt_lacks_are_refused(env, message):
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        horovod_env.translate(env)


def test_horovods_off_values_and_same_behaviour_pass():
    settings, notices = horovod_env.translate({
        "HOROVOD_TORUS_ALLREDUCE": "0", "HOROVOD_ELASTIC": "", "HOROVOD_CPU_OPERATIONS": "MPI",
        "HOROVOD_MPI_THREADS_DISABLE": "1"})
    assert settings == {}
    assert [n.split("=")[0] for n in notices] == ["HOROVOD_CPU_OPERATIONS",
                                                  "HOROVOD_MPI_THREADS_DISABLE"]


@pytest.mark.parametrize("name, says", [
    ("HOROVOD_GPU_OPERATIONS", "build-time setting, nothing to do in fuseopt"),
    ("HOROVOD_GPU_ALLREDUCE", "build-time setting"),
    ("HOROVOD_WITH_PYTORCH", "build-time setting"),
    ("HOROVOD_WITHOUT_MXNET", "build-time setting"),
    ("HOROVOD_NCCL_HOME", "build-time setting"),
    ("HOROVOD_RANK", "set by horovodrun for its own workers"),
    ("HOROVOD_LOCAL_SIZE", "set by horovodrun for its own workers"),
    ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "set by horovodrun for its own workers"),
    ("HOROVOD_HOSTNAME", "set by horovodrun for its own workers"),
    ("HOROVOD_FUSION_TRESHOLD", "unknown HOROVOD_ variable, ignored"),
])
def test_every_other_horovod_variable_gets_a_line(name, says):
    settings, notices = horovod_env.translate({name: "1"})
    assert settings == {}
    assert notices == ["%s=1: %s" % (name, notices[0].split(": ", 1)[1])]
    assert says in notices[0]


def test_dynamic_timeline_writes_no_file_until_asked():
    """Horovod's HOROVOD_TIMELINE=DYNAMIC: nothing until start_timeline()."""
    settings, notices = horovod_env.translate({"HOROVOD_TIMELINE": "DYNAMIC"})
    assert settings == {}
    assert len(notices) == 1 and "until start_timeline()" in notices[0]


def test_a_launcher_flag_wins_and_the_notice_names_it():
    settings, notices = horovod_env.translate(
        {"HOROVOD_CYCLE_TIME": "2", "HOROVOD_START_TIMEOUT": "9"},
        flags={"FUSEOPT_CYCLE_TIME_MS": "--cycle-time-ms 7"})
    assert settings == {"FUSEOPT_INIT_TIMEOUT_S": "9"}
    assert notices == ["HOROVOD_CYCLE_TIME=2 not used: --cycle-time-ms 7 wins",
                       "HOROVOD_START_TIMEOUT=9 taken as FUSEOPT_INIT_TIMEOUT_S=9"]


def test_ranks_started_by_fuseoptrun_apply_but_do_not_repeat():
    environ = {"HOROVOD_FUSION_THRESHOLD": "4096", "HOROVOD_MPI_THREADS_DISABLE": "1",
               "HOROVOD_TYPO": "1", horovod_env.NOTICED_ENV: "1"}
    assert horovod_env.translate(environ) == ({"FUSEOPT_FUSION_THRESHOLD": "4096"}, [])
    with pytest.raises(InvalidArgumentError, match="no torus allreduce"):  # still refused
        horovod_env.translate(dict(environ, HOROVOD_TORUS_ALLREDUCE="1"))


@pytest.mark.parametrize("env, message", [
    ({"HOROVOD_FUSION_THRESHOLD": "abc"}, "HOROVOD_FUSION_THRESHOLD: cannot read 'abc'"),
    ({"HOROVOD_CYCLE_TIME": "-1"},
     "HOROVOD_CYCLE_TIME: cycle_time_ms (FUSEOPT_CYCLE_TIME_MS) must be >= 0"),
    ({"HOROVOD_CACHE_CAPACITY": "-5"}, "cache_capacity (FUSEOPT_CACHE_CAPACITY) must be >= 0"),
])
def test_values_the_twin_knob_refuses_are_refused_by_the_horovod_name(env, message):
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        horovod_env.translate(env)


def test_every_runtime_variable_of_horovod_is_classified():
    """horovod/common/common.h (0.28.1) and the runner's HOROVOD_START_TIMEOUT:
    a variable added to neither list would be silently ignored."""
    horovod_runtime = {
        "ELASTIC", "MPI_THREADS_DISABLE", "TIMELINE", "TIMELINE_MARK_CYCLES", "AUTOTUNE",
        "AUTOTUNE_LOG", "AUTOTUNE_WARMUP_SAMPLES", "AUTOTUNE_STEPS_PER_SAMPLE",
        "AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "FUSION_THRESHOLD",
        "CYCLE_TIME", "STALL_CHECK_DISABLE", "STALL_CHECK_TIME_SECONDS",
        "STALL_SHUTDOWN_TIME_SECONDS", "HIERARCHICAL_ALLREDUCE", "HIERARCHICAL_ALLGATHER",
        "TORUS_ALLREDUCE", "CACHE_CAPACITY", "BATCH_D2D_MEMCOPIES", "NUM_NCCL_STREAMS",
        "CPU_OPERATIONS", "CONTROLLER", "CCL_CACHE", "GLOO_IFACE", "ADASUM_MPI_CHUNK_SIZE",
        "THREAD_AFFINITY", "DISABLE_GROUP_FUSION", "DISABLE_NVTX_RANGES",
        "ENABLE_ASYNC_COMPLETION", "DYNAMIC_PROCESS_SETS", "ENABLE_XLA_OPS", "LOG_LEVEL",
        "LOG_HIDE_TIME", "GLOO_TIMEOUT_SECONDS", "START_TIMEOUT"}
    known = set(horovod_env.MAPPED) | set(horovod_env.SAME_BEHAVIOUR) | set(horovod_env.REFUSED)
    known.add("HOROVOD_STALL_CHECK_DISABLE")
    assert {"HOROVOD_" + n for n in horovod_runtime} - known == set()
