"""Input at the boundary, without ranks: every bad knob value or request
argument is an InvalidArgumentError that names it, never a raw TypeError,
OverflowError or UnicodeEncodeError, and never a name cut short at a NUL."""
import math

import pytest

from fuseopt.base import c_boundary
from fuseopt.core import config
from fuseopt.base.errors import InvalidArgumentError

BAD_ANY = [float("nan"), float("inf"), -float("inf"), "nan", "inf", "1e400", "twelve", True]
# A float knob takes 1e20 (seconds: a very long, valid timeout); an int64 field cannot.
BAD_INT = BAD_ANY + [10 ** 20, "99999999999999999999999", 1.5]
CASES = [(k, v) for k in config.KNOBS if k.parse is config._parse_int for v in BAD_INT] + \
    [(k, v) for k in config.KNOBS if k.parse is config._parse_float for v in BAD_ANY]


@pytest.mark.parametrize("knob, value", CASES, ids=lambda x: getattr(x, "name", repr(x)))
def test_bad_numeric_knob_names_the_knob(knob, value):
    with pytest.raises(InvalidArgumentError, match=knob.name):
        config.build_config({knob.name: value}, environ={})
    if isinstance(value, str):
        with pytest.raises(InvalidArgumentError, match=knob.env):
            config.build_config({}, environ={knob.env: value})


def test_integral_floats_and_exponent_text_are_read_exactly():
    cfg = config.build_config({"fusion_threshold": 64e6}, environ={"FUSEOPT_CACHE_CAPACITY": "2e3"})
    assert cfg.fusion_threshold_bytes == 64000000 and cfg.cache_capacity == 2000
    cfg = config.build_config({}, environ={"FUSEOPT_FUSION_THRESHOLD": str(2 ** 62 + 1)})
    assert cfg.fusion_threshold_bytes == 2 ** 62 + 1  # not rounded through a double
    with pytest.raises(InvalidArgumentError, match="fusion_threshold"):
        config.build_config({"fusion_threshold": 1.5}, environ={})


def test_unknown_setting_is_refused():
    with pytest.raises(InvalidArgumentError, match="bogus"):
        config.build_config({"bogus": 1}, environ={})


@pytest.mark.parametrize("name, message", [
    ("a\0b", "NUL"), ("x\udc80", "not valid Unicode"), (5, "must be a str, not int"),
    (b"grad", "must be a str, not bytes"), (("a",), "must be a str, not tuple")])
def test_bad_tensor_names(name, message):
    with pytest.raises(InvalidArgumentError, match=message):
        c_boundary.c_name_bytes(name)
    with pytest.raises(InvalidArgumentError, match=message):
        c_boundary.derived_name(name, ".grad")


def test_good_names_pass_unchanged():
    assert c_boundary.c_name_bytes("grad.layer1.weight/ünïcode") == \
        "grad.layer1.weight/ünïcode".encode()
    assert c_boundary.derived_name(None, ".grad") is None
    assert c_boundary.derived_name("w", ".grad") == "w.grad"


@pytest.mark.parametrize("value, message", [
    (2 ** 40, "out of range"), (-2 ** 40, "out of range"), ("0", "must be an int, not str"),
    (1.0, "must be an int, not float"), (True, "must be an int, not bool"), (None, "not NoneType")])
def test_root_must_be_an_int32(value, message):
    with pytest.raises(InvalidArgumentError, match="root_rank.*" + message):
        c_boundary.checked_int(value, "root_rank of tensor 'x'", c_boundary.INT32)


def test_scale_factors_must_be_numbers():
    assert c_boundary.checked_real(2, "prescale_factor") == 2.0
    with pytest.raises(InvalidArgumentError, match="prescale_factor must be a number, not str"):
        c_boundary.checked_real("2", "prescale_factor")
    assert math.isnan(c_boundary.checked_real(float("nan"), "x"))  # the core refuses non-finite
