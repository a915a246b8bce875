"""Python-side messages go through ``logging`` (fuseopt/base/log.py), with the rank
in each record, and the core follows the same level. Each case runs in a
fresh one-rank process, so that logger state does not leak between tests."""
import os
import subprocess
import sys
import textwrap


def _run(code, **env):
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("FUSEOPT_", "HOROVOD_", "PMI_", "SLURM_"))}
    full_env.update(env)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=120, env=full_env)
    return p


def test_records_carry_the_rank_and_reach_the_programs_handlers():
    p = _run("""
        import logging, fuseopt, fuseopt.api.overlap
        seen = []
        class Keep(logging.Handler):
            def emit(self, record):
                seen.append((record.name, record.levelname, record.rank, record.getMessage()))
        logging.basicConfig(level=logging.INFO)   # the program configures logging
        logging.getLogger().addHandler(Keep())
        fuseopt.base.log.logger.warning("before init")
        fuseopt.init()
        fuseopt.base.log.report_logger.info("a report")
        fuseopt.api.overlap.log_epoch(epoch=3)
        fuseopt.shutdown()
        print(seen)
        """)
    assert p.returncode == 0, p.stderr
    seen = eval(p.stdout.strip().splitlines()[-1])
    assert seen[0] == ("fuseopt", "WARNING", -1, "before init")
    assert seen[1] == ("fuseopt.report", "INFO", 0, "a report")
    assert seen[2][:3] == ("fuseopt.report", "INFO", 0) and seen[2][3].startswith("fuseopt epoch 3:")
    # Configured by the program: shown once, by its handler, not also in fuseopt's format.
    assert "[fuseopt rank" not in p.stderr


def test_unconfigured_logging_prints_like_the_core():
    p = _run("""
        import fuseopt
        fuseopt.init()
        fuseopt.base.log.logger.warning("careful")
        fuseopt.base.log.logger.info("hidden at the default level")
        fuseopt.shutdown()
        """)
    assert p.returncode == 0, p.stderr
    assert "[fuseopt rank 0] WARNING: careful" in p.stderr
    assert "hidden" not in p.stderr


def test_one_level_for_python_and_the_core():
    # The variable sets both sides.
    p = _run("""
        import logging, fuseopt
        fuseopt.init()
        print(logging.getLogger("fuseopt").getEffectiveLevel(), fuseopt.settings()["log_level"])
        fuseopt.shutdown()
        """, FUSEOPT_LOG_LEVEL="debug")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(10), "debug"]
    # A level set on Python's logger (and no variable) reaches the core.
    p = _run("""
        import logging, fuseopt
        logging.getLogger("fuseopt").setLevel(logging.ERROR)
        fuseopt.init()
        print(fuseopt.settings()["log_level"])
        fuseopt.shutdown()
        """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["error"]


def test_horovod_variables_at_init():
    p = _run("""
        import fuseopt
        fuseopt.init()
        print(fuseopt.settings()["fusion_threshold"], fuseopt.settings()["log_level"])
        fuseopt.shutdown()
        """, HOROVOD_FUSION_THRESHOLD="1048576", HOROVOD_LOG_LEVEL="info")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1048576", "info"]
    assert "HOROVOD_FUSION_THRESHOLD=1048576 taken as FUSEOPT_FUSION_THRESHOLD=1048576" in p.stderr
    p = _run("import fuseopt; fuseopt.init()", HOROVOD_HIERARCHICAL_ALLGATHER="1")
    assert p.returncode != 0
    assert "InvalidArgumentError: HOROVOD_HIERARCHICAL_ALLGATHER=1 cannot be honoured" in p.stderr


def test_the_core_obeys_the_level_of_logging_basicconfig():
    """logging.basicConfig(level=DEBUG) sets the root's level, not fuseopt's:
    the core follows the level fuseopt's records obey (its effective level)."""
    code = """
        import logging, fuseopt
        logging.basicConfig(level=logging.%s)
        fuseopt.init()
        print(fuseopt.settings()["log_level"])
        fuseopt.shutdown()
        """
    p = _run(code % "DEBUG")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["debug"]
    p = _run(code % "ERROR")
    assert p.stdout.split() == ["error"], p.stderr
    # FUSEOPT_LOG_LEVEL still wins over the program's logging configuration.
    p = _run(code % "DEBUG", FUSEOPT_LOG_LEVEL="warning")
    assert p.stdout.split() == ["warning"], p.stderr


def test_the_cores_own_lines_follow_logging_basicconfig(tmp_path):
    """Two ranks on one host: the core says at INFO that its collectives take
    its shared-memory path; basicConfig(level=INFO) is enough to see it."""
    script = tmp_path / "job.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FUSEOPT_", "HOROVOD_"))}
    outputs = {}
    for level in ("INFO", "WARNING"):
        script.write_text("import logging, fuseopt\nlogging.basicConfig(level=logging.%s)\n"
                          "fuseopt.init()\nfuseopt.shutdown()\n" % level)
        p = subprocess.run([sys.executable, "-m", "fuseopt.launcher.cli", "-np", "2",
                            sys.executable, str(script)], capture_output=True, text=True,
                           timeout=120, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        outputs[level] = p.stderr
    assert "[fuseopt rank 0] INFO: collectives of every size" in outputs["INFO"], outputs["INFO"]
    assert "INFO:" not in outputs["WARNING"], outputs["WARNING"]
