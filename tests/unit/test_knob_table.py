"""docs/configuration.md's knob table agrees with fuseopt/core/config.py and the core:
every knob has a row with its keyword and the core's default, the rows marked
*(rank 0)* are exactly the knobs the core takes from rank 0, and every other
FUSEOPT_* row names a variable the code reads (found in the code itself), with
the default the code uses."""
import ast
import glob
import os
import re

from fuseopt.training import buckets
from fuseopt.core import config
from fuseopt.base._native import ffi, lib
from fuseopt.launcher.elastic import driver as elastic_driver
from fuseopt.launcher import rank_wrapper
from fuseopt.spark import runner as spark_runner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Defaults the code keeps in named constants, for variables read outside
# config.KNOBS; the others' defaults are read from the code (_code_reads).
CONSTANT_DEFAULTS = {
    "FUSEOPT_LOST_RANK_LINGER_S": rank_wrapper.DEFAULT_LINGER_S,
    elastic_driver.DISCOVERY_INTERVAL_ENV: elastic_driver.DEFAULT_DISCOVERY_INTERVAL_S,
    "FUSEOPT_BUCKET_CAP_MB": buckets.DEFAULT_BUCKET_CAP_MB,
    spark_runner.START_TIMEOUT_ENV: spark_runner.DEFAULT_START_TIMEOUT_S,
}


def _code_reads():
    """{FUSEOPT_* variable the code names: the literal default it reads it
    with (os.environ.get(NAME, "1")), else None}. Names come from fuseopt's
    Python (string constants, directly or through a module-level name) and
    from native/src's string literals (the core reads a few itself)."""
    found = {}
    for path in glob.glob(os.path.join(ROOT, "fuseopt", "**", "*.py"), recursive=True):
        tree = ast.parse(open(path).read())
        names = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"FUSEOPT_[A-Z0-9_]+", node.value):
                found.setdefault(node.value, None)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "get" and \
                    len(node.args) == 2 and isinstance(node.args[1], ast.Constant):
                first = node.args[0]
                env = first.value if isinstance(first, ast.Constant) else \
                    names.get(getattr(first, "id", ""))
                if isinstance(env, str) and env.startswith("FUSEOPT_"):
                    found[env] = node.args[1].value
    for path in glob.glob(os.path.join(ROOT, "native", "src", "**", "*.cc"), recursive=True):
        for env in re.findall(r'"(FUSEOPT_[A-Z0-9_]+)"', open(path).read()):
            found.setdefault(env, None)
    return found


def _rows():
    with open(os.path.join(ROOT, "docs", "configuration.md")) as f:
        text = f.read()
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| `(FUSEOPT_[A-Z0-9_]+)`[^|]* \| ([^|]*) \| ([^|]*) \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = (m.group(2).strip(), m.group(3).strip(), m.group(4))
    return rows


def _native_defaults():
    cfg = ffi.new("fuseopt_config_t*")
    lib.fuseopt_config_default(cfg)
    return config.describe(cfg)


def _same(shown, value):
    first = shown.split()[0] if shown else ""
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, (int, float)):
        try:
            return float(first) == float(value)
        except ValueError:
            return False
    return first == (value or "(none)")


def test_every_knob_has_its_row_keyword_and_default():
    rows, defaults = _rows(), _native_defaults()
    for knob in config.KNOBS:
        assert knob.env in rows, "docs/configuration.md has no row for %s" % knob.env
        keyword, shown, _ = rows[knob.env]
        assert keyword == "`%s`" % knob.name, (knob.env, keyword)
        assert _same(shown, defaults[knob.name]), (knob.env, shown, defaults[knob.name])


def test_rank_0_marks_match_the_knobs_the_core_agrees_on():
    rows = _rows()
    marked = {env for env, (_, _, meaning) in rows.items() if "*(rank 0)*" in meaning}
    assert marked == {k.env for k in config.KNOBS if k.agreed}
    # ...and config.py's flags match what loop_lifecycle.cc takes from rank 0.
    with open(os.path.join(ROOT, "native", "src", "loop", "loop_lifecycle.cc")) as f:
        taken = set(re.findall(r"take\(config_\.(\w+),", f.read()))
    assert taken == {k.field for k in config.KNOBS if k.agreed}


def test_other_rows_name_variables_the_code_reads():
    rows, reads = _rows(), _code_reads()
    knob_envs = {k.env for k in config.KNOBS}
    for env in set(rows) - knob_envs:
        assert env in reads, "docs/configuration.md documents %s, which no code reads" % env
        default = CONSTANT_DEFAULTS.get(env, reads[env])
        if default is not None:
            assert _same(rows[env][1], default), (env, rows[env][1], default)


def test_code_reads_are_found():
    # The reader above must see each way the code names a variable.
    reads = _code_reads()
    assert reads["FUSEOPT_TF_KERNELS"] == "1"            # environ.get("...", "1")
    assert reads["FUSEOPT_TIMELINE_MARK_CYCLES"] == "0"  # through a module constant
    assert "FUSEOPT_CUDA_BACKEND" in reads               # in the core's C++
    assert "FUSEOPT_NO_SUCH_VARIABLE" not in reads
