"""config.KNOBS' ranges agree with the core's validate_config: for each
bounded knob, a value just outside its range is refused by fuseopt_init with
a message naming the knob, and the value at the bound passes the knob's own
check (the core then stops at a later knob made bad on purpose). fuseopt_init
validates before it starts MPI, so no rank starts here."""
import math
import re

import pytest

from fuseopt.core import config
from fuseopt.base._native import ffi, lib
from fuseopt.base.errors import InvalidArgumentError

BOUNDED = [k for k in config.KNOBS if k.low is not None or k.high is not None]
# validate_config checks init_timeout_s last: out of range, it shows that the
# knobs before it passed.
SENTINEL = config._BY_NAME["init_timeout_s"]


def _core_error(values):
    """fuseopt_init's status and message for defaults overridden by ``values``."""
    cfg = ffi.new("fuseopt_config_t*")
    lib.fuseopt_config_default(cfg)
    for knob, value in values:
        setattr(cfg, knob.field, knob.to_native(value))
    out = ffi.new("fuseopt_ctx_t**")
    status = lib.fuseopt_init(cfg, out)
    return status, ffi.string(lib.fuseopt_last_error()).decode()


def _outside(knob):
    below = [knob.low - 1] if knob.low is not None else []
    above = [knob.high + 1] if knob.high is not None else []
    return below + above


@pytest.mark.parametrize("knob", BOUNDED, ids=lambda k: k.name)
def test_the_core_refuses_what_the_table_refuses(knob):
    for value in _outside(knob):
        status, message = _core_error([(knob, value)])
        assert status == lib.FUSEOPT_INVALID_ARG, (knob.name, value)
        assert knob.name in message, (knob.name, value, message)
        with pytest.raises(InvalidArgumentError, match=knob.name):
            config.read(knob, str(value), knob.env)


@pytest.mark.parametrize("knob", [k for k in BOUNDED if k is not SENTINEL], ids=lambda k: k.name)
def test_the_core_accepts_the_bounds_themselves(knob):
    for value in (b for b in (knob.low, knob.high) if b is not None):
        config.read(knob, str(value), knob.env)  # the table accepts it...
        status, message = _core_error([(knob, value), (SENTINEL, -1)])
        assert status == lib.FUSEOPT_INVALID_ARG
        assert message.startswith("init_timeout_s"), (knob.name, value, message)  # ...the core too


def test_unbounded_numbers_and_bad_text_are_refused_by_name():
    with pytest.raises(InvalidArgumentError, match="FUSEOPT_FUSION_THRESHOLD: cannot read 'abc'"):
        config.check_environment({"FUSEOPT_FUSION_THRESHOLD": "abc"})
    with pytest.raises(InvalidArgumentError, match=re.escape(
            "cycle_time_ms (FUSEOPT_CYCLE_TIME_MS) must be >= 0, not '-1'")):
        config.check_environment({"FUSEOPT_CYCLE_TIME_MS": "-1"})
    with pytest.raises(InvalidArgumentError, match="peer_timeout_s"):
        config.read(config._BY_NAME["peer_timeout_s"], str(math.inf), "x")
    config.check_environment({"FUSEOPT_CACHE_CAPACITY": "0", "FUSEOPT_SHM_MIN_BYTES": "-1"})
