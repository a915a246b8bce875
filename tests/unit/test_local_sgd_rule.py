"""fuseopt.training.local_sgd's sync rule, rank-free (the collective Max of the drift
is replaced by a stub that records each measurement)."""
import pytest

from fuseopt.training import local_sgd
from fuseopt.training.local_sgd import SyncRule, relative_drift


@pytest.fixture
def drifts(monkeypatch):
    measured = []
    monkeypatch.setattr(local_sgd, "agreed_drift", lambda d: measured.append(d) or d)
    return measured


def run(rule, drift_per_step):
    return [rule.after_step(lambda d=d: d) and (rule.synced() or True) for d in drift_per_step]


def test_fixed_period_syncs_every_period_steps_and_never_measures(drifts):
    rule = SyncRule(3)
    assert run(rule, [1.0] * 7) == [False, False, True, False, False, True, False]
    assert (rule.steps, rule.syncs) == (7, 2) and drifts == []


def test_threshold_syncs_early_but_not_before_min_period(drifts):
    rule = SyncRule(10, threshold=0.5, min_period=3)
    # Large drift from the first step: measured only from the 3rd step since a sync.
    assert run(rule, [0.9] * 6) == [False, False, True, False, False, True]
    assert drifts == [0.9, 0.9]


def test_threshold_not_reached_falls_back_to_the_period(drifts):
    rule = SyncRule(4, threshold=0.5)
    assert run(rule, [0.1] * 4) == [False, False, False, True]
    assert drifts == [0.1, 0.1, 0.1] and rule.last_drift == 0.1


def test_relative_drift_and_bad_periods():
    assert relative_drift([(1.0, 4.0), (1.0, 4.0)]) == 0.25
    assert relative_drift([(2.0, 0.0)]) == 2.0  # an all-zero anchor divides by one
    with pytest.raises(ValueError):
        SyncRule(0)
    with pytest.raises(ValueError):
        SyncRule(2, threshold=0.1, min_period=0)
